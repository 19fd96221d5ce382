"""The runtime: devices, arrays, modules, drivers."""

from . import cuda as _cuda_driver  # noqa: F401  (loaded first so that the names below stay the device
from . import rocm as _rocm_driver  # noqa: F401   functions; the drivers are ember.runtime.cuda/rocm modules)
from .cpu import load_module
from .module import Function, Module
from .ndarray import Device, NDArray, array, cpu, cuda, device, empty, from_dlpack, rocm

__all__ = [
    "Device",
    "Function",
    "Module",
    "NDArray",
    "array",
    "cpu",
    "cuda",
    "device",
    "empty",
    "from_dlpack",
    "load_module",
    "rocm",
]
