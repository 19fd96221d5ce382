"""Devices and n-dimensional arrays.

``ember.cpu(0)`` is the host; :func:`array` copies a NumPy array (or anything NumPy can read) to a
device; ``NDArray.numpy()`` copies back. On the CPU an NDArray wraps an aligned, C-contiguous
NumPy array, so ``array(x, copy=False)``, :func:`from_dlpack` and ``np.from_dlpack(nd)`` share
memory without copying. GPU drivers register their array classes here (see ``runtime/cuda.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError, DeviceError
from ..ir.dtypes import DataType
from ..ir.dtypes import dtype as _as_dtype  # `dtype` is a parameter name below

# DLPack device type codes.
DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_ROCM = 1, 2, 3, 10
_KIND_OF_CODE = {DL_CPU: "cpu", DL_CUDA: "cuda", DL_ROCM: "rocm"}
_CODE_OF_KIND = {v: k for k, v in _KIND_OF_CODE.items()}


@dataclass(frozen=True)
class Device:
    """A device: ``kind`` (``"cpu"``, ``"cuda"``, ``"rocm"``) and its index."""

    kind: str
    index: int = 0

    def __str__(self) -> str:
        return f"{self.kind}({self.index})"

    @property
    def dlpack_code(self) -> int:
        """The DLPack device type."""
        return _CODE_OF_KIND[self.kind]

    @property
    def exist(self) -> bool:
        """True when the device is present and its driver works."""
        if self.kind == "cpu":
            return self.index == 0
        try:
            return self.driver().device_count() > self.index
        except (DeviceError, OSError):  # no driver or no such device: "not present"
            return False

    def driver(self) -> Any:
        """The driver module of this GPU kind (:mod:`ember.runtime.cuda_driver` or
        :mod:`ember.runtime.hip_driver`); the CPU has none (DeviceError)."""
        if self.kind == "cuda":
            from . import cuda_driver

            return cuda_driver
        if self.kind == "rocm":
            from . import hip_driver

            return hip_driver
        raise DeviceError(f"{self} has no GPU driver")

    @property
    def attributes(self) -> dict[str, Any]:
        """A GPU's attributes from its driver (``multi_processor_count``,
        ``max_shared_memory_per_block``, ``clock_rate_khz``, ``device_name``...); empty for the CPU."""
        if self.kind == "cpu":
            return {}
        return self.driver().device_attributes(self.index)

    def sync(self) -> None:
        """Wait for all work queued on the device."""
        if self.kind != "cpu":
            self.driver().synchronize(self.index)


def cpu(index: int = 0) -> Device:
    """The host CPU."""
    if index != 0:
        raise DeviceError(f"cpu({index}): there is one CPU device, cpu(0)")
    return Device("cpu", 0)


def cuda(index: int = 0) -> Device:
    """NVIDIA GPU number ``index``."""
    return Device("cuda", index)


def rocm(index: int = 0) -> Device:
    """AMD GPU number ``index``."""
    return Device("rocm", index)


def device(kind: str, index: int = 0) -> Device:
    """A device by name: ``"cpu"``, ``"cuda"``/``"gpu"``, ``"rocm"``."""
    kind = {"llvm": "cpu", "gpu": "cuda", "nvptx": "cuda", "amdgpu": "rocm"}.get(kind, kind)
    if kind not in ("cpu", "cuda", "rocm"):
        raise DeviceError(f"unknown device kind {kind!r}: use cpu, cuda or rocm")
    return Device(kind, index)


#: Byte alignment of host arrays ember allocates: a cache line, so that no AVX-512 access of a
#: vector-aligned element crosses two lines.
ALIGN = 64


def aligned_empty(shape: tuple[int, ...], np_dtype: np.dtype) -> np.ndarray:
    """An uninitialised NumPy array of ``shape`` whose data starts at a multiple of :data:`ALIGN`
    (NumPy's own large arrays start 16 bytes into a page). MemoryError when it cannot be had."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGN
    return raw[offset : offset + nbytes].view(np_dtype).reshape(shape)


class NDArray:
    """An n-dimensional array on a device (this class: the CPU)."""

    def __init__(self, data: np.ndarray, dt: DataType, dev: Device):
        self._data = data
        self._dtype = dt
        self.device = dev

    # -- properties ---------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """Dimensions."""
        return tuple(self._data.shape)

    @property
    def dtype(self) -> str:
        """Element type name (``"float32"``, ``"bfloat16"``...)."""
        return str(self._dtype)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return self._data.ndim

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(self._data.size)

    @property
    def nbytes(self) -> int:
        """Bytes of data."""
        return int(self._data.nbytes)

    @property
    def data_ptr(self) -> int:
        """Address of the first element."""
        return int(self._data.ctypes.data)

    def numpy(self) -> np.ndarray:
        """A NumPy copy of the contents (bfloat16 is returned as float32)."""
        if self._dtype.kind == "bfloat":
            return (self._data.astype(np.uint32) << 16).view(np.float32)
        return self._data.copy()

    def asnumpy(self) -> np.ndarray:
        """Same as :meth:`numpy`."""
        return self.numpy()

    def copyfrom(self, source: Any) -> NDArray:
        """Overwrite the contents with ``source`` (same shape)."""
        src = _to_numpy(source, self._dtype)
        if src.shape != self.shape:
            raise ArgumentError(f"copyfrom: source shape {src.shape} does not match array shape {self.shape}")
        np.copyto(self._data, src)
        return self

    def copyto(self, target: Any) -> Any:
        """Copy into another NDArray, or to a device (returns the new array)."""
        if isinstance(target, Device):
            return array(self.numpy(), target, dtype=self.dtype)
        target.copyfrom(self.numpy() if self._dtype.kind != "bfloat" else self)
        return target

    # -- DLPack -------------------------------------------------------------------------------------
    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._dtype.kind == "bfloat":
            from .dlpack import to_dlpack_capsule

            return to_dlpack_capsule(self.data_ptr, self.shape, self._dtype, self.device, owner=self)
        return self._data.__dlpack__(**({"stream": stream} if stream is not None else {}))

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DL_CPU, 0)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"<ember.NDArray shape={self.shape} dtype={self.dtype} device={self.device}>\n{self.numpy()!r}"


def _to_numpy(source: Any, dt: DataType | None) -> np.ndarray:
    if isinstance(source, NDArray):
        if source._dtype.kind == "bfloat" and dt is not None and dt.kind == "bfloat":
            return source._data
        return source.numpy()
    arr = np.asarray(source)
    if dt is None:
        return arr
    if dt.kind == "bfloat":
        return float32_to_bfloat16_bits(arr.astype(np.float32))
    return arr.astype(dt.numpy(), copy=False)


def float32_to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of float32 values, rounded to nearest even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = 0x7FC0
    return rounded


def empty(shape: Any, dtype: str = "float32", dev: Device | None = None) -> Any:
    """An uninitialised array."""
    dev = dev or cpu(0)
    dt = _as_dtype(dtype) if isinstance(dtype, str) else dtype
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if any(s < 0 for s in shape):
        raise ArgumentError(f"empty: negative dimension in shape {shape}")
    if dev.kind != "cpu":
        return dev.driver().empty(shape, dt, dev)
    return NDArray(aligned_empty(shape, dt.numpy()), dt, dev)


def array(source: Any, dev: Device | None = None, dtype: str | None = None, copy: bool = True) -> Any:
    """An array on ``dev`` (default CPU) with the contents of ``source``.

    With ``copy=False`` on the CPU, a C-contiguous NumPy array of the right type is wrapped
    without copying (writes through the NDArray show in the NumPy array)."""
    dev = dev or cpu(0)
    if isinstance(source, NDArray) and dtype is None:
        dt = source._dtype
    elif dtype is not None:
        dt = _as_dtype(dtype)
    else:
        arr0 = np.asarray(source)
        if arr0.dtype == np.float64 and not isinstance(source, np.ndarray):
            arr0 = arr0.astype(np.float32)
        dt = _as_dtype(arr0.dtype)
    src = _to_numpy(source, dt)
    if dev.kind != "cpu":
        return dev.driver().array(src, dt, dev)
    if not copy and src.flags.c_contiguous and src.dtype == dt.numpy() and src.flags.writeable:
        return NDArray(src, dt, dev)
    out = aligned_empty(src.shape, dt.numpy())
    np.copyto(out, src)
    return NDArray(out, dt, dev)


def from_dlpack(obj: Any) -> Any:
    """An NDArray sharing memory with a DLPack producer (a torch tensor, a CuPy or NumPy array)."""
    dev_type = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else DL_CPU
    if dev_type in (DL_CUDA, DL_ROCM):
        return device(_KIND_OF_CODE[int(dev_type)]).driver().from_dlpack(obj)
    if int(dev_type) not in (DL_CPU, DL_CUDA_HOST):
        raise DeviceError(f"from_dlpack: DLPack device type {dev_type} is not supported (cpu, cuda, rocm are)")
    from .dlpack import from_dlpack_cpu

    return from_dlpack_cpu(obj)
