"""Where a compiled model's tensors live: host memory (CPU models) or one GPU's memory.

The executor (:mod:`ember.model.executor`) is written once against the small interface of
:class:`HostMemory` and :class:`DeviceMemory`: make arrays, view a storage as a typed array,
take an array's address, move inputs in and outputs out. Kernels only ever see addresses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..ir.dtypes import dtype as as_dtype
from ..runtime.ndarray import DL_CPU, DL_CUDA_HOST, Device, NDArray


class HostMemory:
    """Tensors in host memory as NumPy arrays (the CPU target)."""

    kind = "cpu"

    def empty(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """An uninitialised array."""
        return np.empty(shape, dtype=dtype)

    def storage(self, nbytes: int) -> np.ndarray:
        """A byte buffer that the memory plan carves into values."""
        return np.empty(max(nbytes, 1), dtype=np.uint8)

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

    def place(self, name: str, arr: np.ndarray) -> np.ndarray:
        """An accepted (and checked) input where kernels read it: C-contiguous host memory."""
        return np.require(arr, requirements="C")

    def to_host(self, arr: np.ndarray) -> np.ndarray:
        """A NumPy array the caller owns."""
        return arr

    def copy(self, arr: np.ndarray) -> np.ndarray:
        """A fresh copy."""
        return arr.copy()

    def sync(self) -> None:
        """Nothing to wait for: CPU kernels return when done."""


class DeviceMemory:
    """Tensors in the memory of one GPU as :class:`~ember.runtime.gpu_array.GPUArray` s."""

    def __init__(self, device: Device):
        from ..runtime import gpu_array as gpu

        self.device = device
        self.kind = device.kind
        self._gpu = gpu
        self._staging: dict[str, Any] = {}

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
        """A constant copied to the device once."""
        return self._gpu.array(np.ascontiguousarray(arr), as_dtype(str(arr.dtype)), self.device)

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

    def place(self, name: str, arr: Any) -> Any:
        """An accepted (and checked) input where kernels read it: host data is copied into the
        input's staging buffer on the device (allocated once, reused by later calls)."""
        if isinstance(arr, self._gpu.GPUArray):
            return arr
        host = np.ascontiguousarray(arr)
        buf = self._staging.get(name)
        if buf is None or buf.shape != host.shape or buf.dtype != str(as_dtype(str(host.dtype))):
            buf = self.empty(host.shape, str(host.dtype))
            self._staging[name] = buf
        return buf.copyfrom(host)

    def to_host(self, arr: Any) -> np.ndarray:
        """Copied to a NumPy array (waits for the device)."""
        return arr.numpy()

    def copy(self, arr: Any) -> Any:
        """A fresh device copy."""
        out = self.empty(arr.shape, arr.dtype)
        return out.copyfrom(arr)

    def sync(self) -> None:
        """Wait until the device has finished the queued kernels."""
        self.device.sync()

