"""Where a compiled model's tensors live: host memory (CPU models) or one GPU's memory.

The executor (:mod:`ember.model.executor`) is written once against the small interface of
:class:`HostMemory` and :class:`DeviceMemory`: make arrays, view a storage as a typed array,
take an array's address, move inputs in and outputs out. Kernels only ever see addresses.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from typing import Any

import numpy as np

from ..errors import ArgumentError, EmberError
from ..ir.dtypes import dtype as as_dtype
from ..runtime.ndarray import ALIGN, DL_CPU, DL_CUDA_HOST, Device, NDArray, aligned_empty

#: Byte alignment of the storages of a model's intermediate values on the host (activations at
#: offsets 16, 32 or 48 of their lines cost MobileNetV2 and EfficientNet-Lite0 1-3 % of their
#: one-thread time).
HOST_ALIGN = ALIGN


class HostMemory:
    """Tensors in host memory as NumPy arrays (the CPU target)."""

    kind = "cpu"

    def empty(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """An uninitialised array."""
        return np.empty(shape, dtype=dtype)

    def storage(self, nbytes: int) -> np.ndarray:
        """A byte buffer that the memory plan carves into values, starting at a multiple of
        :data:`HOST_ALIGN` (EmberError when the machine cannot give it)."""
        try:
            return aligned_empty((max(nbytes, 1),), np.dtype(np.uint8))
        except MemoryError as exc:
            raise EmberError(
                f"cannot allocate a storage of {nbytes / 2**30:.2f} GiB for the model's intermediate values: "
                "the machine has not that much memory free"
            ) from exc

    def view(self, storage: np.ndarray, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """``storage`` seen as an array of ``shape`` and ``dtype`` (no copy)."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return storage[:nbytes].view(dtype).reshape(shape)

    def reshape(self, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """The same data under another shape (no copy)."""
        return arr.reshape(shape)

    def ptr(self, arr: np.ndarray) -> int:
        """The address kernels receive."""
        return arr.__array_interface__["data"][0]

    def upload(self, arr: np.ndarray) -> np.ndarray:
        """A constant as kernels read it."""
        return np.require(arr, requirements="C")

    def accept(self, name: str, value: Any) -> Any:
        """``value`` as a host array (NumPy, ember CPU arrays, CPU DLPack tensors); checks of dtype
        and shape are the caller's."""
        if isinstance(value, NDArray):
            return value.numpy()  # a GPU array is copied to the host
        if not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__"):
            try:
                return np.from_dlpack(value)
            except (BufferError, TypeError, RuntimeError) as exc:
                raise ArgumentError(f"input {name!r}: cannot read the DLPack tensor on the host ({exc})") from exc
        return value if isinstance(value, np.ndarray) else np.asarray(value)

    def place(self, name: str, arr: np.ndarray, fixed: bool = False) -> np.ndarray:
        """An accepted (and checked) input where kernels read it: C-contiguous host memory
        (``fixed`` is for device memory)."""
        return np.require(arr, requirements="C")

    def to_host(self, arr: np.ndarray) -> np.ndarray:
        """A NumPy array the caller owns."""
        return arr

    def copy(self, arr: np.ndarray) -> np.ndarray:
        """A fresh copy."""
        return arr.copy()

    def all_to_host(self, arrs: list[np.ndarray]) -> list[np.ndarray]:
        """The arrays as NumPy arrays the caller owns."""
        return arrs

    def sync(self) -> None:
        """Nothing to wait for: CPU kernels return when done."""


#: Constants on a device by (device, dtype, shape, content digest), kept while a program holds
#: them: :meth:`DeviceMemory.upload` gives every program the same copy of equal bytes.
_ON_DEVICE: weakref.WeakValueDictionary[tuple[Any, ...], Any] = weakref.WeakValueDictionary()
_ON_DEVICE_LOCK = threading.Lock()


class DeviceMemory:
    """Tensors in the memory of one GPU as :class:`~ember.runtime.gpu_array.GPUArray` s.

    On a driver with streams (CUDA) the memory owns one non-blocking stream: every copy it makes
    and every kernel the executor launches for it goes there, so two execution contexts (two
    threads) never wait for each other, and :meth:`sync` waits for this stream alone. Work the
    caller queued on the legacy default stream (an input computed by PyTorch, constants being
    uploaded) is waited for with an event before it is read (:meth:`after_default_stream`)."""

    def __init__(self, device: Device):
        from ..runtime import gpu_array as gpu

        self.device = device
        self.kind = device.kind
        self._gpu = gpu
        self._staging: dict[str, Any] = {}
        self._drv = device.driver()
        #: The stream of this memory's work, or None (ROCm: the legacy default stream).
        self.stream: Any = None
        self._event: Any = None
        if hasattr(self._drv, "set_stream"):
            self.stream = self._drv.Stream(device.index, non_blocking=True)
            self._event = self._drv.Event(device.index, timing=False)

    @property
    def graphs(self) -> bool:
        """True when launches on this memory's stream can be captured into a graph."""
        return self.stream is not None and hasattr(self._drv, "begin_capture")

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        """An uninitialised device array."""
        return self._gpu.empty(tuple(shape), as_dtype(dtype), self.device)

    def storage(self, nbytes: int) -> Any:
        """A device byte buffer that the memory plan carves into values."""
        return self._gpu.empty((max(nbytes, 1),), as_dtype("uint8"), self.device)

    def view(self, storage: Any, shape: tuple[int, ...], dtype: str) -> Any:
        """``storage`` seen as an array of ``shape`` and ``dtype`` (no copy)."""
        return self._gpu.GPUArray(storage.data_ptr, tuple(shape), as_dtype(dtype), self.device, owner=storage)

    def reshape(self, arr: Any, shape: tuple[int, ...]) -> Any:
        """The same data under another shape (no copy)."""
        return self._gpu.GPUArray(arr.data_ptr, tuple(shape), arr._dtype, self.device, owner=arr)

    def ptr(self, arr: Any) -> int:
        """The device address kernels receive."""
        return arr.data_ptr

    def upload(self, arr: np.ndarray) -> Any:
        """A constant copied to the device once, and shared by content: every program on this
        device whose constant holds the same bytes (the variants of a model with symbolic
        dimensions, models with the same weights) reads one copy while any of them holds it
        (:data:`_ON_DEVICE`; kernels never write their constants)."""
        a = np.ascontiguousarray(arr)
        digest = hashlib.blake2b(a.reshape(-1).view(np.uint8), digest_size=20).hexdigest()
        key = (self.device.kind, self.device.index, str(a.dtype), a.shape, digest)
        with _ON_DEVICE_LOCK:
            hit = _ON_DEVICE.get(key)
            if hit is None:
                hit = self._gpu.array(a, as_dtype(str(a.dtype)), self.device)
                _ON_DEVICE[key] = hit
        return hit

    def accept(self, name: str, value: Any) -> Any:
        """``value`` on this GPU: an ember GPU array or a DLPack tensor on this device is used in
        place (no copy); host data is copied into a staging buffer kept for the next call."""
        gpu = self._gpu
        if isinstance(value, gpu.GPUArray):
            if value.device != self.device:
                raise ArgumentError(
                    f"input {name!r} is on {value.device}, but the model runs on {self.device}: "
                    f"move it with x.copyto(ember.device({self.device.kind!r}, {self.device.index}))"
                )
            return value
        dl_dev = None
        if hasattr(value, "__dlpack_device__") and not isinstance(value, np.ndarray):
            try:
                dl_dev = value.__dlpack_device__()
            except (TypeError, RuntimeError, BufferError):
                dl_dev = None
        if dl_dev is not None and int(dl_dev[0]) not in (DL_CPU, DL_CUDA_HOST):
            if int(dl_dev[0]) != self.device.dlpack_code or int(dl_dev[1]) != self.device.index:
                raise ArgumentError(
                    f"input {name!r} is on DLPack device {tuple(dl_dev)}, but the model runs on {self.device}"
                )
            arr = gpu.from_dlpack(value, self.kind)
            return arr
        return HostMemory().accept(name, value)

    def place(self, name: str, arr: Any, fixed: bool = False) -> Any:
        """An accepted (and checked) input where kernels read it: host data is copied into the
        input's staging buffer on the device (allocated once, reused by later calls). A device
        array is used in place, or with ``fixed`` copied into the staging buffer too, so that
        the input's address is the same on every call (what a captured graph needs)."""
        gpu = self._gpu
        if isinstance(arr, gpu.GPUArray):
            if not fixed:
                return arr
            buf = self._staging_for(name, arr.shape, arr.dtype)
            if arr.nbytes:
                if self.stream is not None:
                    self._drv.memcpy_dtod_async(buf.data_ptr, arr.data_ptr, arr.nbytes, self.stream, self.device.index)
                else:
                    buf.copyfrom(arr)
            return buf
        host = np.ascontiguousarray(arr)
        buf = self._staging_for(name, host.shape, str(as_dtype(str(host.dtype))))
        if self.stream is None or buf._dtype.kind == "bfloat":
            buf.copyfrom(host)  # a synchronous copy on the default stream (bfloat16: converted)
            self.after_default_stream()
            return buf
        if host.nbytes:
            self._drv.memcpy_htod_async(buf.data_ptr, host.ctypes.data, host.nbytes, self.stream, self.device.index)
        return buf

    def _staging_for(self, name: str, shape: tuple[int, ...], dtype: str) -> Any:
        buf = self._staging.get(name)
        if buf is None or buf.shape != tuple(shape) or buf.dtype != dtype:
            buf = self.empty(tuple(shape), dtype)
            self._staging[name] = buf
        return buf

    def after_default_stream(self) -> None:
        """Make this memory's stream wait for the work queued so far on the legacy default stream
        (the caller's device inputs, constants just uploaded); the host does not wait."""
        if self.stream is not None:
            self._event.record(None)
            self.stream.wait(self._event)

    def to_host(self, arr: Any) -> np.ndarray:
        """Copied to a NumPy array (waits for the device)."""
        return self.all_to_host([arr])[0]

    def all_to_host(self, arrs: list[Any]) -> list[np.ndarray]:
        """Each array copied to a NumPy array; one wait for all the copies."""
        if self.stream is None:
            return [a.numpy() for a in arrs]
        outs = []
        for a in arrs:
            out = np.empty(a.shape, dtype=a._storage_dtype())
            if out.nbytes:
                self._drv.memcpy_dtoh_async(out.ctypes.data, a.data_ptr, out.nbytes, self.stream, self.device.index)
            outs.append(out)
        self.stream.synchronize()
        return [(o.astype(np.uint32) << 16).view(np.float32) if a._dtype.kind == "bfloat" else o
                for a, o in zip(arrs, outs)]

    def copy(self, arr: Any) -> Any:
        """A fresh device copy (queued on this memory's stream)."""
        out = self.empty(arr.shape, arr.dtype)
        if self.stream is None:
            return out.copyfrom(arr)
        if out.nbytes:
            self._drv.memcpy_dtod_async(out.data_ptr, arr.data_ptr, out.nbytes, self.stream, self.device.index)
        return out

    def sync(self) -> None:
        """Wait until the kernels and copies queued for this memory have finished (this
        memory's stream; the whole device without one)."""
        if self.stream is not None:
            self.stream.synchronize()
        else:
            self.device.sync()

