"""Compiled GPU modules at run time, shared by the CUDA and ROCm backends.

A GPU build returns a host module: calling it checks every argument (count, device, dtype, shape,
alignment where the kernel uses 16-byte vector accesses), evaluates the grid of each kernel from
the argument shapes (expression trees, :mod:`ember.runtime.size_expr`, compiled into closures
when the module is loaded: nothing is evaluated from source), allocates workspaces and
launches the kernels in order on the calling thread's stream (the legacy default stream unless
the thread made another current, as a model's execution context does; see
``cuda_driver.set_stream``). ``imported_modules[0]`` is the
device module: ``get_source("llvm" | "ptx" | "asm")`` and ``get_binary()``.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import ArgumentError
from ...ir.dtypes import DataType
from ...runtime import cuda_driver
from ...runtime.gpu_array import GPUArray, array, empty
from ...runtime.module import Function, Module
from ...runtime.ndarray import Device
from ...runtime.size_expr import compile_grid, compile_tree
from ...runtime.tensor_map import encode_2d

#: This thread's current GPU per device kind (``_CURRENT.cuda``...), as CUDA's current device: a
#: call with arrays sets it from the arrays, a model's context with :meth:`GPUFunction.bind_device`
#: once per run, and every function's launches from this thread go to it.
_CURRENT = threading.local()


# -- compiled modules --------------------------------------------------------------------------------
class DeviceModule(Module):
    """The device code of a GPU build: sources, the binary that is loaded, loaded images per device."""

    def __init__(self, kind: str, binary: bytes, binary_format: str, sources: dict[str, Callable[[], str]],
                 kernel_names: list[str]):
        super().__init__({}, sources)
        self.type_key = kind
        self.kind = kind
        self._binary = binary
        self.binary_format = binary_format
        self.kernel_names = kernel_names
        self._loaded: dict[int, tuple[Any, dict[str, Any]]] = {}

    def get_binary(self) -> bytes:
        """The bytes handed to the driver: a cubin or PTX text (CUDA), an HSA code object (ROCm)."""
        return self._binary

    def functions_on(self, index: int) -> dict[str, Any]:
        """Kernel handles on device ``index`` (the module is loaded on first use)."""
        hit = self._loaded.get(index)
        if hit is None:
            drv = Device(self.kind, index).driver()
            handle = drv.load_module(self._binary, index)
            funcs = {name: drv.get_function(handle, name) for name in self.kernel_names}
            hit = (handle, funcs)
            self._loaded[index] = hit
        return hit[1]

    def __repr__(self) -> str:
        return f"<ember.DeviceModule {self.kind} {self.binary_format} kernels={self.kernel_names}>"


MAX_GRID = (2**31 - 1, 65535, 65535)


class GPUFunction(Function):
    """A host function of a GPU build: checks arguments, then launches its kernels."""

    def __init__(self, sig: dict[str, Any], plan: dict[str, Any], device_module: DeviceModule, kind: str,
                 module: Module):
        self.plan = plan
        self._dm = device_module
        self._kind = kind
        nscal = len(sig["scalars"])
        self._launchers: dict[int, list[Any]] = {}
        # "free" steps do nothing here: workspaces are kept for the next call (see _invoke_gpu)
        self._steps = [st for st in plan["steps"] if st[0] != "free"]
        self._kernels = plan["kernels"]
        # launch sizes: expression trees checked by check_gpu_meta, compiled once into closures
        self._grid_fns = [compile_grid(k["grid"]) for k in self._kernels]
        self._ws_fns = [compile_tree(w["nbytes"]) for w in plan["workspaces"]]
        # workspaces that are TMA tensor maps: (argument, dtype, rows, cols, pitch, box, swizzle) per workspace
        self._maps = {w: (tm["arg"], tm["dtype"], compile_tree(tm["rows"]), compile_tree(tm["cols"]),
                          compile_tree(tm["row_bytes"]), tuple(tm["box"]), tm.get("swizzle", 128))
                      for w, ws in enumerate(plan["workspaces"]) if (tm := ws.get("tensor_map")) is not None}
        self._map_cache: OrderedDict[tuple[int, ...], GPUArray] = OrderedDict()
        # workspaces filled with zeros when allocated (their kernels leave them zero: split-K tickets)
        self._zeroed = {w for w, ws in enumerate(plan["workspaces"]) if ws.get("zeroed")}
        self._nscal = nscal
        # per thread: the default-stream workspaces (two threads may call one function at once)
        self._tls = threading.local()
        super().__init__(sig, self._invoke_gpu, kind, module)
        # vector-accessed argument buffers must be 16-byte aligned
        self._aligned = sorted({a for k in self._kernels for a in k["aligned_args"]})
        self._first_buf = next((i for i, p in enumerate(self._params) if p["kind"] == "buffer"), -1)
        self._prepare_fast_path()

    def _prepare_fast_path(self) -> None:
        """Per parameter: (dtype, dims) where a dim is an int, a size name, or None (unchecked)."""
        spec = []
        for p in self._params:
            if p["kind"] != "buffer":
                self._fast_spec = None
                return
            dims = []
            for d, want in enumerate(p["shape"]):
                dims.append(want if isinstance(want, int) else (want if p["shape_is_var"][d] else None))
            spec.append((p["dtype"], tuple(dims)))
        self._fast_spec = spec
        self._scal_names = tuple(self._scalar_names)
        ks = self._kernels
        self._single = len(self._steps) == 1 and len(ks) == 1
        if self._single:
            self._single_args = [(src == "arg", j) for src, j in ks[0]["args"]]

    def __call__(self, *args: Any) -> None:
        spec = self._fast_spec
        if spec is not None and args and len(args) == len(spec) and type(args[0]) is _torch_tensor_type():
            if self._call_torch(args, spec):
                return
        elif spec is not None and len(args) == len(spec):
            env: dict[str, int] = {}
            ptrs = []
            dev = None
            ok = True
            for a, (dt, dims) in zip(args, spec):
                if type(a) is not GPUArray or a._dtype_str != dt or len(a._shape) != len(dims):
                    ok = False
                    break
                d = a.device
                if dev is None:
                    dev = d
                elif d is not dev and d != dev:
                    ok = False
                    break
                for got, want in zip(a._shape, dims):
                    if want is None:
                        continue
                    if want.__class__ is int:
                        if got != want:
                            ok = False
                    elif env.setdefault(want, got) != got:
                        ok = False
                ptrs.append(a._ptr)
            if ok and dev is not None and dev.kind == self._kind:
                try:
                    scal = [env[n] for n in self._scal_names]
                except KeyError:
                    scal = None
                if scal is not None:
                    _CURRENT.__dict__[self._kind] = dev.index
                    if self._single:
                        self._launch_single(ptrs, scal)
                    else:
                        self._invoke_gpu(ptrs, scal)
                    return
        super().__call__(*args)  # the general path: converts DLPack inputs, names what is wrong

    def _call_torch(self, args: tuple[Any, ...], spec: list[tuple[str, tuple[Any, ...]]]) -> bool:
        """Launch with PyTorch CUDA tensors read in place (address, shape, dtype: no DLPack
        capsule per call); True when launched. Every argument must be a contiguous
        ``torch.Tensor`` of the parameter's dtype and shape on one CUDA device whose current
        PyTorch stream is the legacy default stream (the one ember launches on without a stream
        of its own); anything else returns False and the general path handles it (it converts
        through DLPack, orders the streams and names what is wrong)."""
        if self._kind != "cuda":
            return False
        tensor = _torch_tensor_type()
        names = _TORCH_DTYPE_NAMES
        env: dict[str, int] = {}
        ptrs = []
        index = None
        for a, (dt, dims) in zip(args, spec):
            if type(a) is not tensor or not a.is_cuda or not a.is_contiguous():
                return False
            name = names.get(a.dtype)
            if name is None:
                name = names.setdefault(a.dtype, str(a.dtype).removeprefix("torch."))
            if name != dt:
                return False
            shape = a.shape
            if len(shape) != len(dims):
                return False
            i = a.get_device()
            if index is None:
                index = i
            elif i != index:
                return False
            for got, want in zip(shape, dims):
                if want is None:
                    continue
                if want.__class__ is int:
                    if got != want:
                        return False
                elif env.setdefault(want, got) != got:
                    return False
            ptrs.append(a.data_ptr())
        if index is None or _torch_current_stream(index) != 0:
            return False
        if cuda_driver.current_stream() is not None:
            return False  # a stream of ember's own is set on this thread: the general path orders it
        try:
            scal = [env[n] for n in self._scal_names]
        except KeyError:
            return False
        _CURRENT.__dict__[self._kind] = index
        if self._single:
            self._launch_single(ptrs, scal)
        else:
            self._invoke_gpu(ptrs, scal)
        return True

    def _launch_single(self, pointers: list[int], scalars: list[int]) -> None:
        for i in self._aligned:
            if pointers[i] % 16:
                self._invoke_gpu(pointers, scalars)  # raises with the message
        launcher = self._launchers_on(self._dev_index)[0]
        grid = self._grid_fns[0](scalars)
        if grid[0] <= 0 or grid[1] <= 0 or grid[2] <= 0:
            return
        if grid[0] > MAX_GRID[0] or grid[1] > MAX_GRID[1] or grid[2] > MAX_GRID[2]:
            self._invoke_gpu(pointers, scalars)  # raises with the message
            return
        launcher(grid, [pointers[j] if is_ptr else scalars[j] for is_ptr, j in self._single_args])

    def _check_array(self, k: int, p: dict[str, Any], a: Any, env: dict[str, int]) -> int:
        ptr = super()._check_array(k, p, a, env)
        dev = getattr(a, "device", None)
        if isinstance(dev, Device):
            idx = dev.index
        else:
            idx = a.__dlpack_device__()[1] if hasattr(a, "__dlpack_device__") else 0
        if k == self._first_buf:
            _CURRENT.__dict__[self._kind] = idx
        elif idx != self._dev_index:
            raise ArgumentError(f"argument {k} ({p['name']}) of {self.name} is on {self._kind}({idx}) but an earlier "
                                f"argument is on {self._kind}({self._dev_index}): put all arrays on one device")
        return ptr


    def bind_device(self, index: int) -> None:
        """Make this thread's next launches of every function of this device kind go to GPU
        ``index`` (:data:`_CURRENT`). A call with arrays sets it from the arrays; a model's
        executor, which launches with raw addresses (``_invoke``), calls this once per run with
        the device the model is placed on."""
        _CURRENT.__dict__[self._kind] = index

    @property
    def _dev_index(self) -> int:
        """This thread's current device index of this function's kind (0 before any)."""
        return _CURRENT.__dict__.get(self._kind, 0)

    def _launchers_on(self, index: int) -> list[Any]:
        ls = self._launchers.get(index)
        if ls is None:
            funcs = self._dm.functions_on(index)
            drv = Device(self._kind, index).driver()
            ls = [drv.Launcher(funcs[k["name"]], k["param_types"], k.get("dynamic_shared", 0), k["block"], index)
                  for k in self._kernels]
            self._launchers[index] = ls
        return ls

    def _invoke_gpu(self, pointers: list[int], scalars: list[int]) -> int:
        for i in self._aligned:
            if pointers[i] % 16:
                raise ArgumentError(
                    f"buffer argument {self._buffer_names[i]} of {self.name} is not 16-byte aligned "
                    f"(address {pointers[i]:#x}), which its kernel's vector accesses need: pass a copy "
                    "(tensor.clone()) or a view that starts at an aligned element"
                )
        index = self._dev_index
        launchers = self._launchers_on(index)
        drv = Device(self._kind, index).driver()
        # On a stream of the caller's (a model's execution context), workspaces are kept with the
        # stream and reused by the next call: the stream orders the calls, nothing waits, and the
        # addresses stay the same, so the launches can be captured into a CUDA graph. On the
        # default stream they are kept per calling thread (the default stream orders one thread's
        # calls; two threads get two sets), so a call neither allocates nor waits for the device.
        stream = drv.current_stream() if hasattr(drv, "current_stream") else None
        ws: dict[int, Any] = {}
        for step in self._steps:
            op = step[0]
            if op == "launch":
                kid = step[1]
                grid = self._grid_fns[kid](scalars)
                if grid[0] <= 0 or grid[1] <= 0 or grid[2] <= 0:
                    continue
                if grid[0] > MAX_GRID[0] or grid[1] > MAX_GRID[1] or grid[2] > MAX_GRID[2]:
                    raise ArgumentError(f"{self.name}: the grid {grid} of kernel {self._kernels[kid]['name']} is "
                                        f"over the device limit {MAX_GRID}; split the blockIdx loops differently")
                values = []
                for src, j in self._kernels[kid]["args"]:
                    values.append(pointers[j] if src == "arg" else (ws[j].data_ptr if src == "ws" else scalars[j]))
                launchers[kid](grid, values)
            elif op == "alloc":
                wid = step[1]
                if wid in self._maps:
                    ws[wid] = self._tensor_map(wid, pointers, scalars, index, stream)
                    continue
                nbytes = max(1, self._ws_fns[wid](scalars))
                if stream is not None:
                    ws[wid] = self._stream_workspace(stream, wid, nbytes, index)
                else:
                    ws[wid] = self._thread_workspace(wid, nbytes, index)
        return 0

    def _thread_workspace(self, wid: int, nbytes: int, index: int) -> Any:
        """Workspace ``wid`` of this thread's calls on the default stream of GPU ``index``: kept
        between calls, grown when a call needs more (the old buffer is released only after the
        device has finished the calls that used it)."""
        kept = self._tls.__dict__.setdefault("workspaces", {})
        buf = kept.get((wid, index))
        if buf is None or buf.shape[0] < nbytes:
            if buf is not None:
                Device(self._kind, index).sync()  # earlier launches may still use the smaller buffer
            buf = self._new_workspace(wid, nbytes, index)
            kept[(wid, index)] = buf
        return buf

    def _new_workspace(self, wid: int, nbytes: int, index: int) -> Any:
        """A new device buffer for workspace ``wid``: uninitialised, or filled with zeros when the
        plan says ``zeroed`` (copied, then the device synchronised, so that the zeros have landed
        before a launch on any stream uses them; once per buffer, as workspaces are kept)."""
        dev = Device(self._kind, index)
        if wid in self._zeroed:
            buf = array(np.zeros(nbytes, np.uint8), DataType("uint", 8), dev)
            dev.sync()
            return buf
        return empty((nbytes,), DataType("uint", 8), dev)

    #: Tensor maps one function keeps for calls on the default stream (least recently used dropped).
    MAP_CACHE = 256

    def _tensor_map(self, wid: int, pointers: list[int], scalars: list[int], index: int, stream: Any) -> GPUArray:
        """The device copy of workspace ``wid``'s TMA tensor map for this call's argument address
        and sizes. A map holds only the address, sizes and box, so one made earlier for the same
        values is reused (kept with ``stream`` when the call is on a caller's stream, as
        workspaces are, so a captured CUDA graph's maps stay alive; else in a per-function cache):
        a model, whose addresses do not change, encodes and uploads each map once."""
        arg, dt, rows_f, cols_f, pitch_f, box, swizzle = self._maps[wid]
        ptr = pointers[arg]
        key = (id(self), wid, index, ptr, rows_f(scalars), cols_f(scalars), pitch_f(scalars))
        kept = stream.__dict__.setdefault("tensor_maps", {}) if stream is not None else self._map_cache
        hit = kept.get(key)
        if hit is not None:
            if stream is None:
                self._map_cache.move_to_end(key)
            return hit
        if ptr % 16:
            raise ArgumentError(
                f"buffer argument {self._buffer_names[arg]} of {self.name} is read or written by TMA, which needs a "
                f"16-byte aligned address (got {ptr:#x}): pass a copy (tensor.clone()) or a view that "
                "starts at an aligned element")
        m = encode_2d(ptr, dt, key[4], key[5], key[6], box[0], box[1], swizzle)
        buf = array(np.frombuffer(m, np.uint8).copy(), DataType("uint", 8), Device(self._kind, index))
        kept[key] = buf
        if stream is None and len(self._map_cache) > self.MAP_CACHE:
            self._map_cache.popitem(last=False)
        return buf

    def _stream_workspace(self, stream: Any, wid: int, nbytes: int, index: int) -> Any:
        """Workspace ``wid`` of this function on ``stream`` (allocated on first use, kept while
        the stream lives: a graph captured from it may hold its address)."""
        kept = stream.__dict__.setdefault("workspaces", {})
        key = (id(self), wid, nbytes)
        buf = kept.get(key)
        if buf is None:
            buf = self._new_workspace(wid, nbytes, index)
            kept[key] = buf
        return buf

    @property
    def _buffer_names(self) -> list[str]:
        return [p["name"] for p in self._params if p["kind"] == "buffer"]


class GPUHostModule(Module):
    """The host side of a GPU build; ``imported_modules[0]`` is the device module."""

    def __init__(self, kind: str, sigs: list[dict[str, Any]], plans: list[dict[str, Any]],
                 device_module: DeviceModule, host_ir: str, loop_ir: str):
        self.type_key = "host"
        super().__init__({}, {"ir": lambda: loop_ir, "host": lambda: host_ir}, imported=[device_module])
        self._sigs, self._plans = sigs, plans
        for sig, plan in zip(sigs, plans):
            self._functions[sig["name"]] = GPUFunction(sig, plan, device_module, kind, self)
        self.entry_name = sigs[0]["name"]
        #: The parts this module was loaded from (what saving writes); set by the loader.
        self.parts: dict[str, bytes] = {}
        self._main = self._functions[self.entry_name]
        self.kind = kind

    def __call__(self, *args: Any) -> None:
        """Call the main function."""
        return self._main(*args)

    def get_source(self, fmt: str = "ir") -> str:
        """``"ir"`` (loop IR), ``"host"`` (launch plan); device formats are forwarded to the device
        module (``"llvm"``, ``"ptx"``, ``"asm"``)."""
        if fmt in self._sources:
            return self._sources[fmt]()
        return self.imported_modules[0].get_source(fmt)

    def time_evaluator(self, name: str | None = None, number: int = 10, repeat: int = 3) -> Callable[..., list[float]]:
        """A function that runs ``name`` ``number`` times per repeat and returns seconds per call
        for each repeat, timed with device events."""
        fn = self.get_function(name or self.entry_name)

        def run(*args: Any) -> list[float]:
            drv = Device(self.kind, 0).driver()
            fn(*args)
            out = []
            for _ in range(repeat):
                out.append(drv.time_calls(lambda: fn(*args), number, fn._dev_index) / number)  # type: ignore[attr-defined]
            return out

        return run


# torch dtype -> ember dtype name, filled on first sight of each dtype.
_TORCH_DTYPE_NAMES: dict[Any, str] = {}


def _torch_tensor_type() -> type | None:
    """``torch.Tensor`` when PyTorch is already imported (ember never imports it), else None."""
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def _torch_current_stream(index: int) -> int:
    """The handle of PyTorch's current CUDA stream on device ``index`` (0: the legacy default
    stream), read through its raw getter; -1 when that getter is missing."""
    getter = getattr(sys.modules["torch"]._C, "_cuda_getCurrentRawStream", None)
    return int(getter(index)) if getter is not None else -1
