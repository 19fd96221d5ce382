"""What CUDA and ROCm share at run time: arrays in device memory and compiled GPU modules.

A driver module (``runtime/cuda.py``, ``runtime/rocm.py``) provides memory, copies, module
loading and a :class:`Launcher` factory; this module builds device arrays
(:class:`GPUArray`, DLPack in and out) and host modules (:class:`GPUHostModule`) on top of it.

A GPU build returns a host module: calling it checks every argument (count, device, dtype, shape,
alignment where the kernel uses 16-byte vector accesses), evaluates the grid of each kernel from
the argument shapes with a Python function prepared at build time, allocates workspaces and
launches the kernels in order on the device's default stream. ``imported_modules[0]`` is the
device module: ``get_source("llvm" | "ptx" | "asm")`` and ``get_binary()``.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ArgumentError, DeviceError, EmberError
from ..ir.dtype import DataType
from .module import Function, Module
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


def expr_to_python(e: Any, names: dict[Any, str]) -> str:
    """Python source for integer expression ``e`` (variables named by ``names``)."""
    from ..ir import expr as E

    def go(x: Any) -> str:
        if isinstance(x, E.IntImm):
            return str(x.value)
        if isinstance(x, E.Var):
            if x not in names:
                raise EmberError(f"the launch size uses {x.name}, which is not a size of any argument")
            return names[x]
        if isinstance(x, E.Cast):
            return go(x.value)
        ops = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.FloorDiv: "//", E.FloorMod: "%"}
        for cls, op in ops.items():
            if isinstance(x, cls):
                return f"({go(x.a)} {op} {go(x.b)})"
        if isinstance(x, E.Div):
            return f"_tdiv({go(x.a)}, {go(x.b)})"
        if isinstance(x, E.Min):
            return f"min({go(x.a)}, {go(x.b)})"
        if isinstance(x, E.Max):
            return f"max({go(x.a)}, {go(x.b)})"
        if isinstance(x, E.Select):
            return f"({go(x.true_value)} if {go(x.condition)} else {go(x.false_value)})"
        cmp = {E.LT: "<", E.LE: "<=", E.EQ: "==", E.NE: "!="}
        for cls, op in cmp.items():
            if isinstance(x, cls):
                return f"({go(x.a)} {op} {go(x.b)})"
        raise EmberError(f"the launch size {e} cannot be evaluated on the host ({type(x).__name__})")

    return go(e)


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


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
        self._steps = plan["steps"]
        self._kernels = plan["kernels"]
        env = {"_tdiv": _tdiv}
        self._grid_fns = []
        for k in self._kernels:
            src = "lambda s: (" + ", ".join(k["grid"]) + ",)"
            self._grid_fns.append(eval(src, env))  # noqa: S307 - source built by expr_to_python above
        self._ws_fns = [eval("lambda s: " + w["nbytes"], env) for w in plan["workspaces"]]  # noqa: S307
        self._nscal = nscal
        self._dev_index = 0
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
        if spec is not None and len(args) == len(spec):
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
                    self._dev_index = dev.index
                    if self._single:
                        self._launch_single(ptrs, scal)
                    else:
                        self._invoke_gpu(ptrs, scal)
                    return
        super().__call__(*args)  # the general path: converts DLPack inputs, names what is wrong

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
            self._dev_index = idx
        elif idx != self._dev_index:
            raise ArgumentError(f"argument {k} ({p['name']}) of {self.name} is on {self._kind}({idx}) but an earlier "
                                f"argument is on {self._kind}({self._dev_index}): put all arrays on one device")
        return ptr


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
                w = self.plan["workspaces"][wid]
                nbytes = self._ws_fns[wid](scalars)
                ws[wid] = empty((max(1, nbytes),), DataType("uint", 8), Device(self._kind, index))
                del w
            elif op == "free":
                pass  # freed when the call returns (after the device is done with it, see below)
        if ws:
            Device(self._kind, index).sync()
        return 0

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

    def export_parts(self) -> dict[str, bytes]:
        """The module as two files that :func:`load_parts` reads back without compiling:
        ``gpu_module.json`` (signatures, launch plans, kernel names, binary format, host plan) and
        ``device.bin`` (the cubin/PTX or HSA code object)."""
        dm = self.imported_modules[0]
        meta = {"kind": self.kind, "sigs": self._sigs, "plans": self._plans, "format": dm.binary_format,
                "kernels": dm.kernel_names, "host": self.get_source("host")}
        return {"gpu_module.json": json.dumps(meta).encode(), "device.bin": dm.get_binary()}

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


def load_parts(parts: dict[str, bytes]) -> GPUHostModule:
    """A GPU host module from the files of :meth:`GPUHostModule.export_parts`."""
    meta = json.loads(parts["gpu_module.json"])
    binary = parts["device.bin"]
    sources: dict[str, Callable[[], str]] = {}
    if meta["format"] == "ptx":
        sources = {"ptx": binary.decode, "asm": binary.decode}
    dm = DeviceModule(meta["kind"], binary, meta["format"], sources, meta["kernels"])
    host = meta.get("host", "")
    return GPUHostModule(meta["kind"], meta["sigs"], meta["plans"], dm, host, "(loaded: no loop IR)")


def check_device(kind: str, index: int) -> None:
    """Raise DeviceError unless GPU ``index`` of ``kind`` exists."""
    drv = Device(kind, index).driver()
    n = drv.device_count()
    if index < 0 or index >= n:
        raise DeviceError(f"{kind}({index}) does not exist: this machine has {n} {kind} device(s)")
