"""Arrays in GPU memory, shared by CUDA and ROCm.

A driver module (``runtime/cuda_driver.py``, ``runtime/hip_driver.py``) provides memory, copies,
module loading and a ``Launcher`` factory; this module builds device arrays (:class:`GPUArray`,
DLPack in and out) on top of it. Compiled GPU modules are the backends' (``ember.backends.gpu``).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from ..errors import ArgumentError, DeviceError
from ..ir.dtypes import DataType
from .ndarray import DL_CUDA, DL_ROCM, Device, NDArray, float32_to_bfloat16_bits


class GPUArray(NDArray):
    """An array in GPU memory (compact row-major)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dt: DataType, dev: Device, owner: Any = None):
        self._ptr = int(ptr)
        self._shape = tuple(int(s) for s in shape)
        self._dtype = dt
        self._dtype_str = str(dt)
        self.device = dev
        self._owner = owner
        self._data = None  # type: ignore[assignment]

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def dtype(self) -> str:
        return self._dtype_str

    @property
    def size(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def data_ptr(self) -> int:
        return self._ptr

    def _storage_dtype(self) -> np.dtype:
        return np.dtype(np.uint16) if self._dtype.kind == "bfloat" else self._dtype.numpy()

    def numpy(self) -> np.ndarray:
        """A NumPy copy (waits for the device; bfloat16 comes back as float32)."""
        out = np.empty(self._shape, dtype=self._storage_dtype())
        if out.nbytes:
            self.device.driver().memcpy_dtoh(out.ctypes.data, self._ptr, out.nbytes, self.device.index)
        if self._dtype.kind == "bfloat":
            return (out.astype(np.uint32) << 16).view(np.float32)
        return out

    def copyfrom(self, source: Any) -> GPUArray:
        """Overwrite the contents with ``source`` (same shape; NumPy data or another array)."""
        if isinstance(source, GPUArray):
            if source.shape != self.shape or source.dtype != self.dtype:
                raise ArgumentError(
                    f"copyfrom: source {source.shape} {source.dtype} does not match {self.shape} {self.dtype}")
            if self.nbytes:
                self.device.driver().memcpy_dtod(self._ptr, source.data_ptr, self.nbytes, self.device.index)
            return self
        src = np.asarray(source.numpy() if isinstance(source, NDArray) else source)
        if self._dtype.kind == "bfloat":
            src = float32_to_bfloat16_bits(src.astype(np.float32))
        src = np.ascontiguousarray(src, dtype=self._storage_dtype())
        if src.shape != self.shape:
            raise ArgumentError(f"copyfrom: source shape {src.shape} does not match array shape {self.shape}")
        if src.nbytes:
            self.device.driver().memcpy_htod(self._ptr, src.ctypes.data, src.nbytes, self.device.index)
        return self

    def copyto(self, target: Any) -> Any:
        """Copy into another array, or to a device (returns the new array)."""
        if isinstance(target, Device):
            if target == self.device:
                out = empty(self._shape, self._dtype, target)
                return out.copyfrom(self)
            from .ndarray import array

            return array(self.numpy(), target, dtype=self.dtype)
        if isinstance(target, GPUArray):
            return target.copyfrom(self)
        target.copyfrom(self.numpy())
        return target

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        from .dlpack import to_dlpack_capsule

        if stream is not None and stream not in (-1, 0, 1, 2):
            self.device.sync()  # the consumer works on another stream: finish ours first
        return to_dlpack_capsule(self._ptr, self._shape, self._dtype, self.device, owner=self)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DL_CUDA if self.device.kind == "cuda" else DL_ROCM, self.device.index)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"<ember.NDArray shape={self.shape} dtype={self.dtype} device={self.device}>\n{self.numpy()!r}"


class _Allocation:
    """Device memory freed when the last array using it is collected."""

    def __init__(self, driver: Any, ptr: int, index: int):
        self.ptr = ptr
        self._finalizer = weakref.finalize(self, _free, driver, ptr, index)


def _free(driver: Any, ptr: int, index: int) -> None:
    try:
        driver.mem_free(ptr, index)
    except Exception:  # noqa: BLE001 - interpreter shutdown or a lost context
        pass


def empty(shape: tuple[int, ...], dt: DataType, dev: Device) -> GPUArray:
    """An uninitialised array on GPU ``dev``."""
    drv = dev.driver()
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = max(1, count * dt.itemsize)
    ptr = drv.mem_alloc(nbytes, dev.index)
    return GPUArray(ptr, shape, dt, dev, _Allocation(drv, ptr, dev.index))


def array(src: np.ndarray, dt: DataType, dev: Device) -> GPUArray:
    """A GPU copy of host data already converted to ``dt``'s storage (see ``ndarray.array``)."""
    out = empty(tuple(src.shape), dt, dev)
    src = np.ascontiguousarray(src)
    if src.nbytes:
        dev.driver().memcpy_htod(out.data_ptr, src.ctypes.data, src.nbytes, dev.index)
    return out


def from_dlpack(obj: Any, kind: str) -> GPUArray:
    """A GPU array sharing memory with a DLPack producer on a ``kind`` device."""
    from .dlpack import import_capsule

    code = DL_CUDA if kind == "cuda" else DL_ROCM
    if hasattr(obj, "__dlpack__"):
        try:
            # -1: ember works on the legacy default stream, which orders itself with the producer's
            capsule = obj.__dlpack__(stream=-1 if kind == "cuda" else None)
        except (TypeError, ValueError, RuntimeError):
            capsule = obj.__dlpack__()
    else:
        capsule = obj
    keeper, ptr, shape, dt, (dev_type, dev_id) = import_capsule(capsule)
    if dev_type != code:
        raise ArgumentError(f"from_dlpack: the tensor is on DLPack device type {dev_type}, not {kind}")
    return GPUArray(ptr, shape, dt, Device(kind, dev_id), keeper)


def check_device(kind: str, index: int) -> None:
    """Raise DeviceError unless GPU ``index`` of ``kind`` exists."""
    drv = Device(kind, index).driver()
    n = drv.device_count()
    if index < 0 or index >= n:
        raise DeviceError(f"{kind}({index}) does not exist: this machine has {n} {kind} device(s)")
