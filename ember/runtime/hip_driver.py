"""The ROCm runtime: AMD GPUs through HIP (``libamdhip64.so``) with ctypes.

Memory through ``hipMalloc``/``hipMemcpy``, code objects through ``hipModuleLoadData`` and launches
through ``hipModuleLaunchKernel`` with the explicit kernel arguments packed into one buffer laid
out as the AMDGPU kernarg segment (each argument at its natural alignment, the layout the code
object's metadata lists). Failures raise :class:`~ember.errors.DeviceError` with HIP's error
name; a machine without HIP gets one sentence saying so.

Not yet executed on AMD hardware: the enum values come from HIP's headers (5.x and 6.x agree on
them) and the launch path follows HIP's documented ``extra`` convention.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from typing import Any

from ..errors import DeviceError
from ..ir.dtypes import DataType

_lock = threading.Lock()
_lib: Any = None
# The device whose context is current, per thread: CUDA contexts and HIP's current device are
# thread state, so a model compiled on one thread must set its device again on another.
_tls = threading.local()

c_void_p, c_int, c_uint, c_size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t

# hipDeviceAttribute_t values (hip_runtime_api.h)
ATTRIBUTES = {
    "clock_rate_khz": 5,
    "l2_cache_size": 19,
    "compute_capability_major": 23,
    "max_threads_per_block": 56,
    "global_memory_bus_width": 59,
    "memory_clock_rate_khz": 60,
    "compute_capability_minor": 61,
    "multi_processor_count": 63,
    "max_shared_memory_per_block": 74,
    "warp_size": 87,
}
HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END = 1, 2, 3
hipMemcpyHostToDevice, hipMemcpyDeviceToHost, hipMemcpyDeviceToDevice = 1, 2, 3


def _load() -> Any:
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        lib = None
        for name in ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", "/opt/rocm/lib/libamdhip64.so"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise DeviceError(
                "the HIP runtime (libamdhip64.so) is not installed on this machine, so ember.rocm() has no "
                "device: run on a machine with an AMD GPU and ROCm"
            )
        _declare(lib)
        rc = lib.hipInit(0)
        if rc != 0:
            raise DeviceError(f"HIP is installed but hipInit failed ({_error_name(lib, rc)}): check that an AMD GPU "
                              "is visible (rocm-smi) and /dev/kfd is accessible")
        _lib = lib
        return lib


def _declare(lib: Any) -> None:
    P = ctypes.POINTER
    sigs = {
        "hipInit": [c_uint],
        "hipGetDeviceCount": [P(c_int)],
        "hipSetDevice": [c_int],
        "hipDeviceGetAttribute": [P(c_int), c_int, c_int],
        "hipDeviceGetName": [ctypes.c_char_p, c_int, c_int],
        "hipDeviceTotalMem": [P(c_size_t), c_int],
        "hipDeviceSynchronize": [],
        "hipMalloc": [P(c_void_p), c_size_t],
        "hipFree": [c_void_p],
        "hipMemcpy": [c_void_p, c_void_p, c_size_t, c_int],
        "hipMemset": [c_void_p, c_int, c_size_t],
        "hipModuleLoadData": [P(c_void_p), c_void_p],
        "hipModuleGetFunction": [P(c_void_p), c_void_p, ctypes.c_char_p],
        "hipModuleLaunchKernel": [c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p,
                                  c_void_p, c_void_p],
        "hipEventCreate": [P(c_void_p)],
        "hipEventRecord": [c_void_p, c_void_p],
        "hipEventSynchronize": [c_void_p],
        "hipEventElapsedTime": [P(ctypes.c_float), c_void_p, c_void_p],
        "hipEventDestroy": [c_void_p],
        "hipGetErrorName": [c_int],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        fn.argtypes = args
        fn.restype = c_int
    lib.hipGetErrorName.restype = ctypes.c_char_p


def _error_name(lib: Any, rc: int) -> str:
    try:
        name = lib.hipGetErrorName(rc)
        return name.decode() if name else f"HIP error {rc}"
    except (AttributeError, OSError, UnicodeDecodeError):  # an old runtime without the call
        return f"HIP error {rc}"


def check(rc: int, what: str) -> None:
    """Raise DeviceError when a HIP call returned an error."""
    if rc != 0:
        raise DeviceError(f"{what} failed: {_error_name(_lib, rc)}")


def device_count() -> int:
    """Number of AMD GPUs HIP sees."""
    lib = _load()
    n = c_int()
    rc = lib.hipGetDeviceCount(ctypes.byref(n))
    if rc == 100:  # hipErrorNoDevice
        return 0
    check(rc, "hipGetDeviceCount")
    return n.value


def activate(index: int) -> Any:
    """Make device ``index`` current in this thread; returns the library."""
    lib = _lib if _lib is not None else _load()
    if getattr(_tls, "current", -1) != index:
        n = device_count()
        if not 0 <= index < n:
            raise DeviceError(f"rocm({index}) does not exist: this machine has {n} AMD GPU(s)")
        check(lib.hipSetDevice(index), "hipSetDevice")
        _tls.current = index
    return lib


def device_attribute(index: int, name: str) -> int:
    """A device attribute by name (see :data:`ATTRIBUTES`)."""
    lib = activate(index)
    v = c_int()
    check(lib.hipDeviceGetAttribute(ctypes.byref(v), ATTRIBUTES[name], index), f"hipDeviceGetAttribute({name})")
    return v.value


def device_attributes(index: int) -> dict[str, Any]:
    """Every attribute of :data:`ATTRIBUTES`, the name and total memory."""
    out: dict[str, Any] = {k: device_attribute(index, k) for k in ATTRIBUTES}
    lib = activate(index)
    buf = ctypes.create_string_buffer(256)
    check(lib.hipDeviceGetName(buf, 256, index), "hipDeviceGetName")
    out["device_name"] = buf.value.decode()
    mem = c_size_t()
    check(lib.hipDeviceTotalMem(ctypes.byref(mem), index), "hipDeviceTotalMem")
    out["total_memory"] = mem.value
    out["compute_version"] = f"{out['compute_capability_major']}.{out['compute_capability_minor']}"
    return out


@functools.lru_cache(maxsize=1)
def detected_arch() -> str | None:
    """Never None-raising probe: ``gfx...`` is not exposed as an integer attribute; returns None."""
    return None


def mem_alloc(nbytes: int, index: int) -> int:
    """Allocate device memory."""
    lib = activate(index)
    p = c_void_p()
    rc = lib.hipMalloc(ctypes.byref(p), nbytes)
    if rc != 0:
        raise DeviceError(f"allocating {nbytes} bytes on rocm({index}) failed: {_error_name(lib, rc)}")
    return int(p.value or 0)


def mem_free(ptr: int, index: int) -> None:
    """Free device memory."""
    check(activate(index).hipFree(ptr), "hipFree")


def memcpy_htod(dst: int, src: int, nbytes: int, index: int) -> None:
    """Host to device copy."""
    check(activate(index).hipMemcpy(dst, src, nbytes, hipMemcpyHostToDevice), "hipMemcpy(HtoD)")


def memcpy_dtoh(dst: int, src: int, nbytes: int, index: int) -> None:
    """Device to host copy (waits for queued work)."""
    check(activate(index).hipMemcpy(dst, src, nbytes, hipMemcpyDeviceToHost), "hipMemcpy(DtoH)")


def memcpy_dtod(dst: int, src: int, nbytes: int, index: int) -> None:
    """Device to device copy."""
    check(activate(index).hipMemcpy(dst, src, nbytes, hipMemcpyDeviceToDevice), "hipMemcpy(DtoD)")


def synchronize(index: int = 0) -> None:
    """Wait for all work queued on device ``index``."""
    check(activate(index).hipDeviceSynchronize(), "hipDeviceSynchronize (a kernel failed, or the device was lost)")


def empty(shape: tuple[int, ...], dt: DataType, dev: Any) -> Any:
    """An uninitialised array on ``dev``."""
    from . import gpu_array as gpu

    return gpu.empty(shape, dt, dev)


def array(src: Any, dt: DataType, dev: Any) -> Any:
    """A device copy of host data."""
    from . import gpu_array as gpu

    return gpu.array(src, dt, dev)


def from_dlpack(obj: Any) -> Any:
    """An array sharing memory with a ROCm DLPack producer (a torch tensor on ROCm, a CuPy array)."""
    from . import gpu_array as gpu

    return gpu.from_dlpack(obj, "rocm")


def time_calls(fn: Any, number: int, index: int = 0) -> float:
    """Seconds that ``number`` calls of ``fn`` take on the device (events around them)."""
    lib = activate(index)
    start, end = c_void_p(), c_void_p()
    check(lib.hipEventCreate(ctypes.byref(start)), "hipEventCreate")
    check(lib.hipEventCreate(ctypes.byref(end)), "hipEventCreate")
    try:
        check(lib.hipEventRecord(start, None), "hipEventRecord")
        for _ in range(number):
            fn()
        check(lib.hipEventRecord(end, None), "hipEventRecord")
        check(lib.hipEventSynchronize(end), "hipEventSynchronize")
        ms = ctypes.c_float()
        check(lib.hipEventElapsedTime(ctypes.byref(ms), start, end), "hipEventElapsedTime")
        return ms.value / 1000.0
    finally:
        lib.hipEventDestroy(start)
        lib.hipEventDestroy(end)


def load_module(image: bytes, index: int) -> Any:
    """Load an HSA code object on device ``index``; returns the module handle."""
    lib = activate(index)
    buf = ctypes.create_string_buffer(image, len(image))
    mod = c_void_p()
    rc = lib.hipModuleLoadData(ctypes.byref(mod), buf)
    if rc != 0:
        raise DeviceError(f"loading the code object on rocm({index}) failed: {_error_name(lib, rc)} "
                          "(was it built for this GPU's gfx target? see rocminfo)")
    return mod


def get_function(module: Any, name: str) -> Any:
    """The kernel ``name`` of a loaded module."""
    f = c_void_p()
    check(_lib.hipModuleGetFunction(ctypes.byref(f), module, name.encode()), f"hipModuleGetFunction({name})")
    return f


_FORMATS = {"ptr": ("Q", 8), "i64": ("q", 8), "u64": ("Q", 8), "i32": ("i", 4), "u32": ("I", 4),
            "f32": ("f", 4), "f64": ("d", 8), "i16": ("h", 2), "u16": ("H", 2), "i8": ("b", 1), "u8": ("B", 1)}


def kernarg_layout(param_types: list[str]) -> tuple[list[int], int]:
    """Offsets of the explicit kernel arguments in the kernarg segment and its size: each argument
    at its natural alignment, as LLVM's AMDGPU backend lays them out."""
    offsets = []
    off = 0
    for t in param_types:
        size = _FORMATS[t][1]
        off = (off + size - 1) // size * size
        offsets.append(off)
        off += size
    return offsets, (off + 7) // 8 * 8


class Launcher:
    """Launches one kernel: the kernarg buffer and the ``extra`` array prepared once."""

    def __init__(self, func: Any, param_types: list[str], dynamic_shared: int, block: list[int], index: int):
        self.func = func
        self.index = index
        self.block = tuple(block)
        self.shared = int(dynamic_shared)
        self.offsets, size = kernarg_layout(param_types)
        self.formats = [_FORMATS[t][0] for t in param_types]
        self.size = c_size_t(size)
        self.buf = ctypes.create_string_buffer(max(8, size))
        self.extra = (c_void_p * 5)(HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(self.buf),
                                    HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(self.size), HIP_LAUNCH_PARAM_END)
        self._lib = activate(index)
        # The kernarg buffer is shared by every thread that launches this kernel: filling it and
        # launching (which copies it) is one critical section.
        self._fill_lock = threading.Lock()

    def __call__(self, grid: tuple[int, int, int], values: list[int]) -> None:
        if getattr(_tls, "current", -1) != self.index:
            activate(self.index)
        b = self.block
        with self._fill_lock:
            for fmt, off, v in zip(self.formats, self.offsets, values):
                struct.pack_into(fmt, self.buf, off, v)
            rc = self._lib.hipModuleLaunchKernel(self.func, grid[0], grid[1], grid[2], b[0], b[1], b[2], self.shared,
                                                 None, None, self.extra)
        if rc != 0:
            raise DeviceError(f"launching a kernel with grid {grid} and block {b} failed: {_error_name(self._lib, rc)}")
