"""The runtime: devices, arrays, modules and the GPU drivers (``cuda_driver``, ``hip_driver``).

Compiled modules of each target are made and loaded by its backend (:mod:`ember.backends`)."""

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
    "rocm",
]
