"""The CUDA runtime: NVIDIA GPUs through the driver API (``libcuda.so.1``) with ctypes.

Each device is used through its primary context (the one the CUDA runtime, PyTorch and CuPy use
too), so arrays pass between them without copies. Calls that fail raise
:class:`~ember.errors.DeviceError` with the driver's error name; a machine without the driver
gets one sentence saying so.

Work is queued on the legacy default stream unless the calling thread has made a stream current
(:func:`set_stream`; a model's execution context does so around each call, see
``ember/model/executor.py``): kernel launches then go on that stream. :func:`synchronize` waits
for the whole device. The context of the device last used is kept current in the calling thread.

Graphs: :func:`begin_capture` / :func:`end_capture` record the launches queued on a stream into a
:class:`Graph` (``cuStreamBeginCapture_v2`` in thread-local mode, ``cuStreamEndCapture``,
``cuGraphInstantiateWithFlags``), which :meth:`Graph.launch` replays with one driver call.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any

from ..errors import DeviceError
from ..ir.dtypes import DataType

_lock = threading.Lock()
_lib: Any = None
_contexts: dict[int, ctypes.c_void_p] = {}
# The device whose context is current, per thread: CUDA contexts and HIP's current device are
# thread state, so a model compiled on one thread must set its device again on another.
_tls = threading.local()

c_void_p, c_int, c_uint = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
c_size_t, c_uint64 = ctypes.c_size_t, ctypes.c_uint64

# CUdevice_attribute values (cuda.h)
ATTRIBUTES = {
    "max_threads_per_block": 1,
    "max_shared_memory_per_block": 8,
    "total_constant_memory": 9,
    "warp_size": 10,
    "max_registers_per_block": 12,
    "clock_rate_khz": 13,
    "multi_processor_count": 16,
    "memory_clock_rate_khz": 36,
    "global_memory_bus_width": 37,
    "l2_cache_size": 38,
    "max_threads_per_multiprocessor": 39,
    "compute_capability_major": 75,
    "compute_capability_minor": 76,
    "max_shared_memory_per_multiprocessor": 81,
    "max_shared_memory_per_block_optin": 97,
}
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


def _load() -> Any:
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        lib = None
        for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise DeviceError(
                "the NVIDIA driver (libcuda.so.1) is not installed on this machine, so ember.cuda() has no "
                "device: run on a machine with an NVIDIA GPU and its driver"
            )
        _declare(lib)
        rc = lib.cuInit(0)
        if rc != 0:
            raise DeviceError(f"the NVIDIA driver is installed but cuInit failed ({_error_name(lib, rc)}): "
                              "check that a GPU is visible (nvidia-smi) and the driver matches the kernel module")
        _lib = lib
        return lib


def _declare(lib: Any) -> None:
    P = ctypes.POINTER
    sigs = {
        "cuInit": [c_uint],
        "cuDeviceGetCount": [P(c_int)],
        "cuDeviceGet": [P(c_int), c_int],
        "cuDeviceGetName": [ctypes.c_char_p, c_int, c_int],
        "cuDeviceGetAttribute": [P(c_int), c_int, c_int],
        "cuDeviceTotalMem_v2": [P(c_size_t), c_int],
        "cuDevicePrimaryCtxRetain": [P(c_void_p), c_int],
        "cuCtxSetCurrent": [c_void_p],
        "cuCtxGetCurrent": [ctypes.POINTER(c_void_p)],
        "cuCtxSynchronize": [],
        "cuMemAlloc_v2": [P(c_uint64), c_size_t],
        "cuMemFree_v2": [c_uint64],
        "cuMemcpyHtoD_v2": [c_uint64, c_void_p, c_size_t],
        "cuMemcpyDtoH_v2": [c_void_p, c_uint64, c_size_t],
        "cuMemcpyDtoD_v2": [c_uint64, c_uint64, c_size_t],
        "cuMemsetD8_v2": [c_uint64, ctypes.c_ubyte, c_size_t],
        "cuModuleLoadData": [P(c_void_p), c_void_p],
        "cuModuleGetFunction": [P(c_void_p), c_void_p, ctypes.c_char_p],
        "cuModuleUnload": [c_void_p],
        "cuFuncSetAttribute": [c_void_p, c_int, c_int],
        "cuLaunchKernel": [c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p, c_void_p,
                           c_void_p],
        "cuStreamCreate": [P(c_void_p), c_uint],
        "cuStreamSynchronize": [c_void_p],
        "cuStreamDestroy_v2": [c_void_p],
        "cuEventCreate": [P(c_void_p), c_uint],
        "cuEventRecord": [c_void_p, c_void_p],
        "cuEventSynchronize": [c_void_p],
        "cuEventElapsedTime": [P(ctypes.c_float), c_void_p, c_void_p],
        "cuEventDestroy_v2": [c_void_p],
        "cuGetErrorName": [c_int, P(ctypes.c_char_p)],
        "cuGetErrorString": [c_int, P(ctypes.c_char_p)],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = c_int
    # Streams' asynchronous copies and graphs (CUDA 11.4+): a driver without one of them runs
    # models with plain launches (graph capture fails with a DeviceError naming the call).
    optional = {
        "cuMemcpyHtoDAsync_v2": [c_uint64, c_void_p, c_size_t, c_void_p],
        "cuMemcpyDtoHAsync_v2": [c_void_p, c_uint64, c_size_t, c_void_p],
        "cuMemcpyDtoDAsync_v2": [c_uint64, c_uint64, c_size_t, c_void_p],
        "cuMemsetD8Async": [c_uint64, ctypes.c_ubyte, c_size_t, c_void_p],
        "cuStreamWaitEvent": [c_void_p, c_void_p, c_uint],
        "cuStreamBeginCapture_v2": [c_void_p, c_int],
        "cuStreamEndCapture": [c_void_p, P(c_void_p)],
        "cuStreamIsCapturing": [c_void_p, P(c_int)],
        "cuGraphInstantiateWithFlags": [P(c_void_p), c_void_p, ctypes.c_ulonglong],
        "cuGraphGetNodes": [c_void_p, c_void_p, P(c_size_t)],
        "cuGraphLaunch": [c_void_p, c_void_p],
        "cuGraphExecDestroy": [c_void_p],
        "cuGraphDestroy": [c_void_p],
    }
    for name, args in optional.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = args
            fn.restype = c_int


def _error_name(lib: Any, rc: int) -> str:
    name = ctypes.c_char_p()
    desc = ctypes.c_char_p()
    try:
        lib.cuGetErrorName(rc, ctypes.byref(name))
        lib.cuGetErrorString(rc, ctypes.byref(desc))
    except (AttributeError, OSError):  # an old driver without the call
        return f"CUDA error {rc}"
    n = name.value.decode() if name.value else f"CUDA error {rc}"
    d = desc.value.decode() if desc.value else ""
    return f"{n}: {d}" if d else n


def check(rc: int, what: str) -> None:
    """Raise DeviceError when a driver call returned an error."""
    if rc != 0:
        raise DeviceError(f"{what} failed: {_error_name(_lib, rc)}")


def device_count() -> int:
    """Number of NVIDIA GPUs the driver sees."""
    lib = _load()
    n = c_int()
    check(lib.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
    return n.value


def activate(index: int) -> Any:
    """Make device ``index``'s primary context current in this thread; returns the library."""
    lib = _lib if _lib is not None else _load()
    if getattr(_tls, "current", -1) == index:
        return lib
    ctx = _contexts.get(index)
    if ctx is None:
        n = device_count()
        if not 0 <= index < n:
            raise DeviceError(f"cuda({index}) does not exist: this machine has {n} NVIDIA GPU(s)")
        dev = c_int()
        check(lib.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
        ctx = c_void_p()
        check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev.value), "cuDevicePrimaryCtxRetain")
        _contexts[index] = ctx
    check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    _tls.current = index
    return lib


def device_attribute(index: int, name: str) -> int:
    """A device attribute by name (see :data:`ATTRIBUTES`)."""
    lib = activate(index)
    v = c_int()
    check(lib.cuDeviceGetAttribute(ctypes.byref(v), ATTRIBUTES[name], index), f"cuDeviceGetAttribute({name})")
    return v.value


def device_attributes(index: int) -> dict[str, Any]:
    """Every attribute of :data:`ATTRIBUTES`, the name, total memory and compute capability."""
    out: dict[str, Any] = {k: device_attribute(index, k) for k in ATTRIBUTES}
    lib = activate(index)
    buf = ctypes.create_string_buffer(256)
    check(lib.cuDeviceGetName(buf, 256, index), "cuDeviceGetName")
    out["device_name"] = buf.value.decode()
    mem = c_size_t()
    check(lib.cuDeviceTotalMem_v2(ctypes.byref(mem), index), "cuDeviceTotalMem")
    out["total_memory"] = mem.value
    out["compute_version"] = f"{out['compute_capability_major']}.{out['compute_capability_minor']}"
    out["arch"] = f"sm_{out['compute_capability_major']}{out['compute_capability_minor']}"
    return out


@functools.lru_cache(maxsize=1)
def detected_arch() -> str | None:
    """``sm_XY`` of GPU 0, or None without a driver or a GPU (never raises)."""
    try:
        if device_count() == 0:
            return None
        return f"sm_{device_attribute(0, 'compute_capability_major')}{device_attribute(0, 'compute_capability_minor')}"
    except (DeviceError, OSError):  # no driver, no device
        return None


def detected_sm_count(arch: str) -> int | None:
    """Multiprocessors of GPU 0 when it is an ``arch`` GPU, else None (never raises)."""
    try:
        if detected_arch() != arch:
            return None
        return int(device_attribute(0, "multi_processor_count"))
    except (DeviceError, OSError):
        return None


# -- memory -----------------------------------------------------------------------------------------
def mem_alloc(nbytes: int, index: int) -> int:
    """Allocate device memory."""
    lib = activate(index)
    p = c_uint64()
    rc = lib.cuMemAlloc_v2(ctypes.byref(p), nbytes)
    if rc != 0:
        raise DeviceError(f"allocating {nbytes} bytes on cuda({index}) failed: {_error_name(lib, rc)}")
    return p.value


def mem_free(ptr: int, index: int) -> None:
    """Free device memory."""
    lib = activate(index)
    check(lib.cuMemFree_v2(ptr), "cuMemFree")


def memcpy_htod(dst: int, src: int, nbytes: int, index: int) -> None:
    """Host to device copy (synchronous)."""
    check(activate(index).cuMemcpyHtoD_v2(dst, src, nbytes), "cuMemcpyHtoD")


def memcpy_dtoh(dst: int, src: int, nbytes: int, index: int) -> None:
    """Device to host copy (waits for queued work)."""
    check(activate(index).cuMemcpyDtoH_v2(dst, src, nbytes), "cuMemcpyDtoH")


def memcpy_dtod(dst: int, src: int, nbytes: int, index: int) -> None:
    """Device to device copy."""
    check(activate(index).cuMemcpyDtoD_v2(dst, src, nbytes), "cuMemcpyDtoD")


def memset(ptr: int, byte: int, nbytes: int, index: int) -> None:
    """Fill device memory with a byte value."""
    check(activate(index).cuMemsetD8_v2(ptr, byte, nbytes), "cuMemsetD8")


def _optional(lib: Any, name: str) -> Any:
    fn = getattr(lib, name, None)
    if fn is None:
        raise DeviceError(f"this NVIDIA driver has no {name} (it is older than CUDA 11.4): update the driver")
    return fn


def memcpy_htod_async(dst: int, src: int, nbytes: int, stream: Stream, index: int) -> None:
    """Host to device copy queued on ``stream`` (from pageable memory it returns once the source
    has been read, so the host buffer may be reused at once)."""
    lib = activate(index)
    check(_optional(lib, "cuMemcpyHtoDAsync_v2")(dst, src, nbytes, stream.handle), "cuMemcpyHtoDAsync")


def memcpy_dtoh_async(dst: int, src: int, nbytes: int, stream: Stream, index: int) -> None:
    """Device to host copy queued on ``stream`` (complete after ``stream.synchronize()``)."""
    lib = activate(index)
    check(_optional(lib, "cuMemcpyDtoHAsync_v2")(dst, src, nbytes, stream.handle), "cuMemcpyDtoHAsync")


def memcpy_dtod_async(dst: int, src: int, nbytes: int, stream: Stream, index: int) -> None:
    """Device to device copy queued on ``stream``."""
    lib = activate(index)
    check(_optional(lib, "cuMemcpyDtoDAsync_v2")(dst, src, nbytes, stream.handle), "cuMemcpyDtoDAsync")


def memset_async(ptr: int, byte: int, nbytes: int, stream: Stream, index: int) -> None:
    """Fill device memory with a byte value, queued on ``stream``."""
    lib = activate(index)
    check(_optional(lib, "cuMemsetD8Async")(ptr, byte, nbytes, stream.handle), "cuMemsetD8Async")


def synchronize(index: int = 0) -> None:
    """Wait for all work queued on device ``index``."""
    check(activate(index).cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed, or the device was lost)")


# -- arrays -----------------------------------------------------------------------------------------
def empty(shape: tuple[int, ...], dt: DataType, dev: Any) -> Any:
    """An uninitialised array on ``dev``."""
    from . import gpu_array as gpu

    return gpu.empty(shape, dt, dev)


def array(src: Any, dt: DataType, dev: Any) -> Any:
    """A device copy of host data."""
    from . import gpu_array as gpu

    return gpu.array(src, dt, dev)


def from_dlpack(obj: Any) -> Any:
    """An array sharing memory with a CUDA DLPack producer (a torch.cuda tensor, a CuPy array)."""
    from . import gpu_array as gpu

    return gpu.from_dlpack(obj, "cuda")


# -- streams and events -----------------------------------------------------------------------------
CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DISABLE_TIMING = 2
# CUstreamCaptureMode: thread-local mode forbids unsafe calls (a synchronisation, cuMemFree) in the
# capturing thread only, so other threads (other execution contexts, PyTorch) work on meanwhile.
CAPTURE_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}


class Stream:
    """A CUDA stream. ``non_blocking``: it does not synchronise with the legacy default stream
    (``CU_STREAM_NON_BLOCKING``), so work on it neither waits for nor blocks other threads'
    default-stream work."""

    def __init__(self, index: int = 0, non_blocking: bool = False):
        self.index = index
        self.handle = c_void_p()
        self._owned = True
        flags = CU_STREAM_NON_BLOCKING if non_blocking else 0
        check(activate(index).cuStreamCreate(ctypes.byref(self.handle), flags), "cuStreamCreate")

    def synchronize(self) -> None:
        """Wait for the work queued on this stream."""
        check(activate(self.index).cuStreamSynchronize(self.handle),
              "cuStreamSynchronize (a kernel failed, or the device was lost)")

    def wait(self, event: Event) -> None:
        """Make later work on this stream wait until ``event`` has happened (no host wait)."""
        lib = activate(self.index)
        check(_optional(lib, "cuStreamWaitEvent")(self.handle, event.handle, 0), "cuStreamWaitEvent")

    def is_capturing(self) -> bool:
        """True while a graph capture is under way on this stream."""
        lib = activate(self.index)
        status = c_int()
        check(_optional(lib, "cuStreamIsCapturing")(self.handle, ctypes.byref(status)), "cuStreamIsCapturing")
        return status.value != 0

    def __del__(self) -> None:
        try:
            if self.handle and getattr(self, "_owned", True):
                activate(self.index).cuStreamDestroy_v2(self.handle)
        except (DeviceError, OSError, AttributeError, TypeError):  # a lost context, or interpreter shutdown
            pass


_external: dict[tuple[int, int], Stream] = {}


def external_stream(handle: int, index: int = 0) -> Stream:
    """A :class:`Stream` for a stream another library owns on device ``index`` (PyTorch's
    ``torch.cuda.current_stream().cuda_stream``; 0: the legacy default stream). ember never
    destroys it. The same handle gives the same object, so the workspaces ember keeps with a
    stream are reused from call to call."""
    key = (int(index), int(handle))
    s = _external.get(key)
    if s is None:
        activate(index)
        s = Stream.__new__(Stream)
        s.index = int(index)
        s.handle = c_void_p(int(handle) or None)
        s._owned = False
        with _lock:
            s = _external.setdefault(key, s)
    return s


def current_context() -> int:
    """The address of the CUDA context current in this thread (0 when none): after
    :func:`activate`, device ``index``'s primary context, the one PyTorch and the CUDA runtime use."""
    lib = _load()
    ctx = c_void_p()
    check(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    return int(ctx.value or 0)


def primary_context(index: int) -> int:
    """The address of device ``index``'s primary context as ember holds it."""
    activate(index)
    return int(_contexts[index].value or 0)


class Event:
    """A CUDA event (for timing; ``timing=False`` for ordering streams only, which is cheaper)."""

    def __init__(self, index: int = 0, timing: bool = True):
        self.index = index
        self.handle = c_void_p()
        flags = 0 if timing else CU_EVENT_DISABLE_TIMING
        check(activate(index).cuEventCreate(ctypes.byref(self.handle), flags), "cuEventCreate")

    def record(self, stream: Stream | None = None) -> None:
        """Record the event on ``stream`` (the default stream when None)."""
        check(activate(self.index).cuEventRecord(self.handle, stream.handle if stream else None), "cuEventRecord")

    def synchronize(self) -> None:
        """Wait until the event has happened."""
        check(activate(self.index).cuEventSynchronize(self.handle), "cuEventSynchronize")

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end``."""
        ms = ctypes.c_float()
        check(activate(self.index).cuEventElapsedTime(ctypes.byref(ms), self.handle, end.handle), "cuEventElapsedTime")
        return ms.value

    def __del__(self) -> None:
        try:
            if self.handle:
                activate(self.index).cuEventDestroy_v2(self.handle)
        except (DeviceError, OSError, AttributeError, TypeError):  # a lost context, or interpreter shutdown
            pass


def set_stream(stream: Stream | None) -> Stream | None:
    """Make ``stream`` the calling thread's stream for kernel launches (None: the legacy default
    stream); returns the one it replaces."""
    prev = getattr(_tls, "stream", None)
    _tls.stream = stream
    _tls.stream_handle = stream.handle if stream is not None else None
    return prev


def current_stream() -> Stream | None:
    """The calling thread's stream for kernel launches (None: the legacy default stream)."""
    return getattr(_tls, "stream", None)


# -- graphs -----------------------------------------------------------------------------------------
class Graph:
    """An executable CUDA graph: the work captured from a stream, replayed by :meth:`launch`."""

    def __init__(self, graph: c_void_p, exec_handle: c_void_p, index: int, nodes: int):
        self.index = index
        self.graph = graph
        self.exec = exec_handle
        #: Number of nodes (kernel launches, copies) in the graph.
        self.nodes = nodes
        self._launch = _lib.cuGraphLaunch

    def launch(self, stream: Stream) -> None:
        """Queue the whole graph on ``stream``."""
        rc = self._launch(self.exec, stream.handle)
        if rc != 0:
            raise DeviceError(f"cuGraphLaunch failed: {_error_name(_lib, rc)}")

    def __del__(self) -> None:
        try:
            lib = activate(self.index)
            if self.exec:
                lib.cuGraphExecDestroy(self.exec)
            if self.graph:
                lib.cuGraphDestroy(self.graph)
        except (DeviceError, OSError, AttributeError, TypeError):  # a lost context, or interpreter shutdown
            pass


def begin_capture(stream: Stream, mode: str = "thread_local") -> None:
    """Start recording the work queued on ``stream`` into a graph (nothing runs until the graph
    is launched). ``mode``: ``"thread_local"`` (unsafe calls such as synchronisations are
    refused in this thread only), ``"global"`` or ``"relaxed"``."""
    lib = activate(stream.index)
    check(_optional(lib, "cuStreamBeginCapture_v2")(stream.handle, CAPTURE_MODES[mode]), "cuStreamBeginCapture")


def end_capture(stream: Stream) -> Graph:
    """End the capture begun by :func:`begin_capture` and instantiate its graph. Raises
    :class:`DeviceError` when the capture was invalidated (a synchronising call in between) or
    the graph cannot be instantiated; the stream has left capture mode either way."""
    lib = activate(stream.index)
    graph = c_void_p()
    rc = _optional(lib, "cuStreamEndCapture")(stream.handle, ctypes.byref(graph))
    if rc != 0 or not graph:
        if graph:
            lib.cuGraphDestroy(graph)
        raise DeviceError(f"cuStreamEndCapture failed: {_error_name(lib, rc)}")
    nodes = c_size_t()
    get_nodes = getattr(lib, "cuGraphGetNodes", None)
    if get_nodes is not None and get_nodes(graph, None, ctypes.byref(nodes)) != 0:
        nodes.value = 0
    exec_handle = c_void_p()
    instantiate = getattr(lib, "cuGraphInstantiateWithFlags", None)
    rc = -1 if instantiate is None else instantiate(ctypes.byref(exec_handle), graph, 0)
    if rc != 0 or getattr(lib, "cuGraphLaunch", None) is None:
        lib.cuGraphDestroy(graph)
        why = "the driver has no cuGraphInstantiateWithFlags" if rc == -1 else _error_name(lib, rc)
        raise DeviceError(f"cuGraphInstantiateWithFlags failed: {why}")
    return Graph(graph, exec_handle, stream.index, nodes.value)


def time_calls(fn: Any, number: int, index: int = 0) -> float:
    """Seconds that ``number`` calls of ``fn`` take on the device (events around them)."""
    start, end = Event(index), Event(index)
    start.record()
    for _ in range(number):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_ms(end) / 1000.0


# -- modules and launches ---------------------------------------------------------------------------
def load_module(image: bytes, index: int) -> Any:
    """Load a cubin or PTX image on device ``index``; returns the module handle."""
    lib = activate(index)
    data = image if image.startswith(b"\x7fELF") or image.endswith(b"\0") else image + b"\0"
    buf = ctypes.create_string_buffer(data, len(data))
    mod = c_void_p()
    rc = lib.cuModuleLoadData(ctypes.byref(mod), buf)
    if rc != 0:
        raise DeviceError(f"loading the kernel image on cuda({index}) failed: {_error_name(lib, rc)} "
                          "(the GPU may be older than the -arch the code was built for)")
    return mod


def get_function(module: Any, name: str) -> Any:
    """The kernel ``name`` of a loaded module."""
    f = c_void_p()
    check(_lib.cuModuleGetFunction(ctypes.byref(f), module, name.encode()), f"cuModuleGetFunction({name})")
    return f


class Launcher:
    """Launches one kernel: argument storage prepared once, filled per call.

    ``dynamic_shared`` is the bytes of dynamic shared memory the kernel uses (kernels over 48 KiB
    of shared memory keep all of it there; the limit is raised once here)."""

    def __init__(self, func: Any, param_types: list[str], dynamic_shared: int, block: list[int], index: int):
        self.func = func
        self.index = index
        self.block = tuple(block)
        self.shared = int(dynamic_shared)
        ctypes_of = {"ptr": c_uint64, "i32": ctypes.c_int32, "i64": ctypes.c_int64, "u32": ctypes.c_uint32,
                     "u64": ctypes.c_uint64, "f32": ctypes.c_float, "f64": ctypes.c_double,
                     "i16": ctypes.c_int16, "u16": ctypes.c_uint16, "i8": ctypes.c_int8, "u8": ctypes.c_uint8}
        self.slots = [ctypes_of[t]() for t in param_types]
        self.params = (c_void_p * max(1, len(self.slots)))(*[ctypes.addressof(s) for s in self.slots])
        self._lib = activate(index)
        self._launch = self._lib.cuLaunchKernel
        # The slots are shared by every thread that launches this kernel: filling them and
        # launching (which copies them) is one critical section.
        self._fill_lock = threading.Lock()
        if self.shared > 48 * 1024:
            check(self._lib.cuFuncSetAttribute(func, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.shared),
                  "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")

    def __call__(self, grid: tuple[int, int, int], values: list[int]) -> None:
        if getattr(_tls, "current", -1) != self.index:
            activate(self.index)
        b = self.block
        stream = getattr(_tls, "stream_handle", None)
        with self._fill_lock:
            for slot, v in zip(self.slots, values):
                slot.value = v
            rc = self._launch(self.func, grid[0], grid[1], grid[2], b[0], b[1], b[2], self.shared, stream,
                              self.params, None)
        if rc != 0:
            raise DeviceError(f"launching a kernel with grid {grid} and block {b} failed: {_error_name(self._lib, rc)}")
