"""The runtime: devices, arrays, modules, drivers."""

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
