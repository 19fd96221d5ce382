"""From a graph to a runnable model: kernels per fused group, a memory plan, the executor, and
the saved format.

A compiled model is a *plan* (plain JSON: inputs, outputs, steps, storages) plus one compiled
module holding every kernel plus the constants. Steps are ``kernel`` (call a function on named
values) or ``view`` (a reshape that copies nothing). Intermediate values live in storages that
the memory plan reuses once their last reader has run.

Saved format (``CompiledModel.save``): a zip archive with ``plan.json`` (format
``ember-model/1``), ``kernels.so`` (the module as a shared library) and ``weights.npz`` (the
constants, NumPy's format, read with ``allow_pickle=False``). No pickle anywhere.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import te
from ..errors import ArgumentError, EmberError
from ..ops.registry import NeedValue
from ..ops.schedule import schedule_group
from ..ops.schedule_gpu import lift_scalar_reductions, schedule_group_gpu
from ..ops.util import reset_names, uname
from ..ops.util import shape as te_shape
from ..te import ComputeOp
from ..te.rewrite import rewrite
from .ir import Graph, TensorInfo
from .memory import DeviceMemory, HostMemory
from .passes import Group, build_node, dead_code_elimination, fuse, infer_and_fold, simplify

FORMAT = "ember-model/1"
_VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")


class Progress:
    """Prints compile progress to stderr once a compile has taken more than ``delay`` seconds."""

    def __init__(self, delay: float = 1.0, stream: Any = None):
        self.start = time.perf_counter()
        self.delay = delay
        self.stream = stream or sys.stderr
        self.shown = False

    def __call__(self, msg: str) -> None:
        if time.perf_counter() - self.start < self.delay:
            return
        tty = getattr(self.stream, "isatty", lambda: False)()
        end = "\r" if tty else "\n"
        self.stream.write(f"ember: {msg}".ljust(78 if tty else 0) + end)
        self.stream.flush()
        self.shown = True

    def done(self, msg: str) -> None:
        """Final line (only when progress was shown)."""
        if self.shown:
            self.stream.write(f"ember: {msg}".ljust(78) + "\n")
            self.stream.flush()


def optimize(graph: Graph, progress: Callable[[str], None] | None = None) -> Graph:
    """The graph passes: inference with constant folding, simplification, dead-code elimination."""
    g = infer_and_fold(graph, progress=progress)
    g = simplify(g)
    return dead_code_elimination(g)


def _group_is_view(gr: Group, graph: Graph) -> bool:
    return (
        len(gr.nodes) == 1
        and gr.nodes[0].op in _VIEW_OPS
        and len(gr.outputs) == 1
        and len([i for i in gr.inputs if i not in graph.consts]) >= 1
    )


def lower_groups(
    graph: Graph, groups: list[Group], progress: Callable[[str], None] | None = None, gpu: bool = False
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Build and lower one function per non-view group; returns (functions, steps).

    With ``gpu``, kernels get the GPU schedules of :mod:`ember.ops.schedule_gpu`, every
    intermediate stage kept in memory becomes a workspace from the memory plan, and a scalar
    (0-d) output is computed as a one-element vector (the same bytes)."""
    from ..lower import lower

    funcs, steps = [], []
    for k, gr in enumerate(groups):
        if _group_is_view(gr, graph):
            steps.append({"kind": "view", "src": gr.nodes[0].inputs[0], "dst": gr.outputs[0]})
            continue
        if progress:
            progress(f"kernel {k + 1}/{len(groups)}: {gr.name}")
        reset_names()
        tensors: dict[str, te.Tensor] = {}
        params = []
        for i in gr.inputs:
            info = graph.values[i]
            t = te.placeholder(info.shape, info.dtype, name=uname("p"))
            tensors[i] = t
            params.append(t)
        for node in gr.nodes:
            outs = build_node(node, tensors, graph.consts)
            for o, t in zip(node.outputs, outs):
                if o:
                    tensors[o] = t
        outs = [tensors[o] for o in gr.outputs]
        # An output that is an input (or appears twice) needs its own copy stage.
        seen: set[int] = set()
        fixed = []
        for o in outs:
            if id(o.op) in seen or o in params:
                o = te.compute(o.shape, lambda *i, o=o: o[i], name=uname("copy"))
            if gpu and not o.shape:
                o = _as_vector(o)
            seen.add(id(o.op))
            fixed.append(o)
        fname = f"k{k}_{''.join(c if c.isalnum() else '_' for c in gr.name)}"
        # Packed copies of constants (weights in the layout the GEMM kernels read) are computed
        # once, now, and read from new constants.
        consts = {id(t.op): name for name, t in zip(gr.inputs, params) if name in graph.consts}
        fixed, folded = _fold_constant_stages(fixed, consts, graph, fname)
        params = params + [t for _, t in folded]
        gr_inputs = list(gr.inputs) + [n for n, _ in folded]
        # Large intermediate buffers (packed operands, GEMM results) become workspace arguments,
        # so the memory plan provides them instead of a malloc on every call.
        if gpu:
            fixed = lift_scalar_reductions(fixed)
        work = _workspaces(fixed, gpu)
        work_names = [f"{fname}__ws{j}" for j in range(len(work))]
        for wn, wt in zip(work_names, work):
            graph.values[wn] = TensorInfo(te_shape(wt), str(wt.dtype))
        s = schedule_group_gpu(fixed + work, set()) if gpu else schedule_group(fixed + work, set())
        used = {id(st.op) for st in s.stages}
        ins = [(name, t) for name, t in zip(gr_inputs, params) if id(t.op) in used]
        funcs.append(lower(s, [t for _, t in ins] + fixed + work, fname))
        outs_all = list(gr.outputs) + work_names
        steps.append({"kind": "kernel", "func": fname, "args": [n for n, _ in ins] + outs_all, "nout": len(outs_all)})
    return funcs, steps


def _fold_constant_stages(
    outs: list[te.Tensor], consts: dict[int, str], graph: Graph, fname: str
) -> tuple[list[te.Tensor], list[tuple[str, te.Tensor]]]:
    """Layout transforms of constants, computed at compile time. Every stage kept in memory
    (``tag == "keep"``: a matrix product's right operand packed into column panels) that depends
    only on constants (directly or through other computed stages) is run once on the CPU; its
    value becomes a new graph constant, which the kernel reads through a new placeholder instead
    of repacking on every call. Returns the rewritten outputs and the (constant name,
    placeholder) pairs to pass."""
    from .. import build
    from ..lower import lower

    folded: list[tuple[str, te.Tensor]] = []
    constant: dict[int, list[te.Tensor]] = {}  # op id -> the constant placeholders it reads

    def fold(op: te.Operation) -> te.Tensor | None:
        if id(op) in consts:
            constant[id(op)] = [op.output(0)]
            return None
        if not isinstance(op, ComputeOp) or not op.input_tensors:
            return None
        if any(id(t.op) not in constant for t in op.input_tensors):
            return None
        srcs = list(dict.fromkeys(p for t in op.input_tensors for p in constant[id(t.op)]))
        constant[id(op)] = srcs
        if op.tag != "keep" or op.num_outputs != 1:
            return None
        t = op.output(0)
        s = schedule_group([t], set())
        mod = build(lower(s, srcs + [t], "fold"), target="llvm")
        value = np.empty(te_shape(t), dtype=str(t.dtype))
        mod(*[graph.consts[consts[id(x.op)]] for x in srcs], value)
        name = f"{fname}__const{len(folded)}"
        graph.consts[name] = value
        graph.values[name] = TensorInfo(value.shape, str(value.dtype))
        ph = te.placeholder(te_shape(t), str(t.dtype), name=uname("pk"))
        folded.append((name, ph))
        return ph

    return rewrite(outs, fold), folded


def _as_vector(t: te.Tensor) -> te.Tensor:
    """A 0-d tensor computed as a one-element vector (GPU stages need an axis to bind)."""
    return te.compute((1,), lambda i: t[()], name=uname("scalar"))


def _workspaces(outs: list[te.Tensor], gpu: bool = False) -> list[te.Tensor]:
    """Root intermediate stages of a kernel that its schedule keeps in memory: packed operands
    (and on a GPU every intermediate reduction, which runs as a kernel of its own)."""
    found: list[te.Tensor] = []
    seen: set[int] = {id(o.op) for o in outs}
    stack = [o.op for o in outs]
    while stack:
        op = stack.pop()
        for t in op.input_tensors:
            if id(t.op) in seen:
                continue
            seen.add(id(t.op))
            stack.append(t.op)
            kept = getattr(t.op, "tag", "") in ("keep", "conv_packed")
            if gpu and isinstance(t.op, ComputeOp) and t.op.is_reduction:
                kept = True
            if kept and t.op.num_outputs == 1:
                found.append(t.op.output(0))
    return found


def plan_memory(graph: Graph, steps: list[dict[str, Any]]) -> tuple[dict[str, int], list[int]]:
    """Assign every intermediate value a storage, reusing storages whose values are dead.
    Returns (value -> storage id, storage sizes in bytes). Graph inputs, outputs and constants
    get none; a view shares its source's storage."""
    root: dict[str, str] = {}
    for st in steps:
        if st["kind"] == "view":
            root[st["dst"]] = root.get(st["src"], st["src"])
    last_use: dict[str, int] = {}
    for k, st in enumerate(steps):
        reads = st["args"] if st["kind"] == "kernel" else [st["src"]]
        for v in reads:
            r = root.get(v, v)
            last_use[r] = k
    for o in graph.outputs:
        last_use[root.get(o, o)] = len(steps)
    special = set(graph.inputs) | set(graph.consts) | {root.get(o, o) for o in graph.outputs}
    assign: dict[str, int] = {}
    sizes: list[int] = []
    free: list[int] = []
    release: dict[int, list[int]] = {}
    for k, st in enumerate(steps):
        if st["kind"] == "kernel":
            for v in st["args"][len(st["args"]) - st["nout"] :]:
                if v in assign or v in special or root.get(v, v) != v:
                    continue
                need = graph.values[v].nbytes
                best = None
                for sid in free:
                    if sizes[sid] >= need and (best is None or sizes[sid] < sizes[best]):
                        best = sid
                if best is None:
                    sizes.append(need)
                    best = len(sizes) - 1
                else:
                    free.remove(best)
                assign[v] = best
                release.setdefault(last_use.get(v, k), []).append(best)
        for sid in release.pop(k, []):
            free.append(sid)
    for v, r in root.items():
        if r in assign:
            assign[v] = assign[r]
    return assign, sizes


class CompiledModel:
    """A model compiled for a target: call it with arrays, save it, load it back.

    ``plan["target"]`` says where it runs: ``"llvm"`` (this CPU, host memory) or a GPU target
    (``"cuda ..."``, ``"rocm ..."``: constants and intermediates stay in the memory of GPU 0;
    inputs given as host arrays are copied in, device arrays and DLPack tensors on that GPU are
    read in place)."""

    def __init__(self, plan: dict[str, Any], module: Any, consts: dict[str, np.ndarray]):
        from ..runtime.ndarray import device
        from ..target import Target

        self.plan = plan
        self.module = module
        self.target = str(plan.get("target", "llvm"))
        kind = Target(self.target).kind
        self._mem: HostMemory | DeviceMemory = HostMemory() if kind == "llvm" else DeviceMemory(device(kind, 0))
        self.consts = {k: np.require(v, requirements="C") for k, v in consts.items()}
        self.input_names = [i["name"] for i in plan["inputs"]]
        self.output_names = [o["name"] for o in plan["outputs"]]
        self._views: dict[str, Any] = {}
        self._const_arrays: dict[str, Any] = {}
        self._ptrs: dict[str, int] = {}
        self._ready = False
        if isinstance(self._mem, HostMemory):
            self._allocate()
        # A GPU model allocates device memory on its first call, so that it can be compiled and
        # saved on a machine without that GPU.
        self._funcs = {}
        if module is not None:
            for st in plan["steps"]:
                if st["kind"] == "kernel":
                    self._funcs[st["func"]] = module.get_function(st["func"])

    def _allocate(self) -> None:
        """Planned storages, their typed views and the constants where the kernels read them."""
        mem, plan = self._mem, self.plan
        self._storages = [mem.storage(n) for n in plan["storages"]]
        for name, sid in plan["assign"].items():
            info = plan["values"][name]
            self._views[name] = mem.view(self._storages[sid], tuple(info["shape"]), info["dtype"])
        self._const_arrays = {n: mem.upload(v) for n, v in self.consts.items()}
        # Addresses of the buffers that are the same on every call (planned storages, constants).
        self._ptrs = {n: mem.ptr(a) for n, a in self._views.items()}
        self._ptrs.update({n: mem.ptr(a) for n, a in self._const_arrays.items()})
        self._ready = True

    @property
    def num_kernels(self) -> int:
        """Number of compiled kernels."""
        return sum(1 for s in self.plan["steps"] if s["kind"] == "kernel")

    @property
    def device(self) -> Any:
        """The device the model runs on (``ember.cpu(0)`` or a GPU)."""
        from ..runtime.ndarray import cpu

        return getattr(self._mem, "device", None) or cpu(0)

    def _prepare(self, name: str, value: Any, spec: dict[str, Any]) -> Any:
        from ..ops.lowp import host_input

        value = self._mem.accept(name, host_input(value, spec["dtype"]))
        want_dt, want_shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
        if np.dtype(value.dtype) != want_dt:
            raise ArgumentError(
                f"input {name!r} has dtype {value.dtype}, but the model was compiled for {want_dt}: "
                f"convert it with x.astype({str(want_dt)!r})"
            )
        if tuple(value.shape) != want_shape:
            raise ArgumentError(
                f"input {name!r} has shape {tuple(value.shape)}, but the model was compiled for "
                f"{want_shape}: pass an array of that shape, or compile again with "
                f"input_shapes={{{name!r}: {tuple(value.shape)}}}"
            )
        return self._mem.place(name, value)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The inputs given in order or by name, checked and placed where the kernels read them."""
        if len(args) > len(self.input_names):
            raise ArgumentError(
                f"the model takes {len(self.input_names)} input(s) ({', '.join(self.input_names)}), got {len(args)}"
            )
        given = dict(zip(self.input_names, args))
        for k, v in kwargs.items():
            if k not in self.input_names:
                raise ArgumentError(f"the model has no input {k!r} (inputs: {', '.join(self.input_names)})")
            if k in given:
                raise ArgumentError(f"input {k!r} is given twice")
            given[k] = v
        missing = [n for n in self.input_names if n not in given]
        if missing:
            raise ArgumentError(f"missing input(s): {', '.join(missing)}")
        if not self._ready:
            self._allocate()
        env: dict[str, Any] = dict(self._const_arrays)
        for spec in self.plan["inputs"]:
            env[spec["name"]] = self._prepare(spec["name"], given[spec["name"]], spec)
        return env

    def __call__(self, *args: Any, **kwargs: Any) -> list[np.ndarray]:
        """Run the model on inputs given in order or by name; returns the outputs as NumPy arrays."""
        outs = self._run(self._bind(args, kwargs))
        return [self._mem.to_host(o) for o in outs]

    def run_on_device(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Run the model; the outputs stay on the model's device as ember arrays (DLPack
        producers: ``torch.from_dlpack(out)``). Inputs as for ``__call__``."""
        from ..ir.dtype import dtype as as_dtype
        from ..runtime.ndarray import NDArray, cpu

        outs = self._run(self._bind(args, kwargs))
        if isinstance(self._mem, HostMemory):
            return [NDArray(np.require(o, requirements="C"), as_dtype(str(o.dtype)), cpu(0)) for o in outs]
        return outs

    def profile(self, *args: Any, repeat: int = 3) -> list[tuple[str, float]]:
        """Seconds each kernel takes (best of ``repeat`` runs), in execution order."""
        env = self._bind(args, {})
        times: dict[str, float] = {}
        for _ in range(repeat):
            self._run(dict(env), times)
        return list(times.items())

    def _run(self, env: dict[str, Any], times: dict[str, float] | None = None) -> list[Any]:
        mem = self._mem
        env.update(self._views)
        values = self.plan["values"]
        for st in self.plan["steps"]:
            if st["kind"] == "view":
                env[st["dst"]] = mem.reshape(env[st["src"]], tuple(values[st["dst"]]["shape"]))
                continue
            ptrs = []
            fixed = self._ptrs
            for a in st["args"]:
                p = fixed.get(a)
                if p is None:
                    arr = env.get(a)
                    if arr is None:
                        info = values[a]
                        arr = mem.empty(tuple(info["shape"]), info["dtype"])
                        env[a] = arr
                    p = mem.ptr(arr)
                ptrs.append(p)
            fn = self._funcs[st["func"]]
            t0 = time.perf_counter() if times is not None else 0.0
            rc = fn._invoke(ptrs, [])
            if times is not None:
                mem.sync()
                dt = time.perf_counter() - t0
                times[st["func"]] = min(times.get(st["func"], dt), dt)
            if rc != 0:
                raise EmberError(f"kernel {st['func']} failed at run time (code {rc})")
        outs = []
        for name in self.output_names:
            arr = env[name]
            shared = name in self._views or name in self._const_arrays or name in self.input_names
            outs.append(mem.copy(arr) if shared else arr)
        return outs

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the compiled model to ``path``: a zip of plan.json, weights.npz and the kernels
        (kernels.so for the CPU; gpu_module.json and device.bin for a GPU)."""
        path = os.fspath(path)
        gpu_parts: dict[str, bytes] = {}
        with tempfile.TemporaryDirectory() as tmp:
            so = os.path.join(tmp, "kernels.so")
            if self.module is not None and isinstance(self._mem, DeviceMemory):
                gpu_parts = self.module.export_parts()
            elif self.module is not None:
                self.module.export_library(so)
            buf = io.BytesIO()
            np.savez(buf, **{f"c{k}": v for k, v in enumerate(self.consts.values())})
            names = {f"c{k}": n for k, n in enumerate(self.consts)}
            plan = dict(self.plan, format=FORMAT, const_names=names)
            tmp_zip = path + ".tmp"
            with zipfile.ZipFile(tmp_zip, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("plan.json", json.dumps(plan))
                z.writestr("weights.npz", buf.getvalue(), compress_type=zipfile.ZIP_STORED)  # floats: incompressible
                for fname, data in gpu_parts.items():
                    z.writestr(fname, data)
                if self.module is not None and not gpu_parts:
                    z.write(so, "kernels.so")
            os.replace(tmp_zip, path)

    def __repr__(self) -> str:
        return f"<ember.CompiledModel {len(self.input_names)} input(s), {self.num_kernels} kernel(s)>"


def load_compiled(path: str | os.PathLike[str]) -> CompiledModel:
    """Load a model written by :meth:`CompiledModel.save`; no compiler runs."""
    from ..runtime import load_module

    path = os.fspath(path)
    try:
        z = zipfile.ZipFile(path)
        plan = json.loads(z.read("plan.json"))
        weights = np.load(io.BytesIO(z.read("weights.npz")), allow_pickle=False)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise EmberError(f"{path} is not a model saved by ember (CompiledModel.save): {exc}") from exc
    if plan.get("format") != FORMAT:
        raise EmberError(f"{path} has format {plan.get('format')!r}; this ember reads {FORMAT}")
    consts = {plan["const_names"][k]: weights[k] for k in weights.files}
    module = None
    if "kernels.so" in z.namelist():
        # The library file must outlive the process's use of it: glibc's dlopen recognises a
        # library by its inode, and a deleted file's inode, reused by the next model's library,
        # would hand back the old one. The directory goes when the process exits.
        tmp = tempfile.mkdtemp(prefix="ember-model-")
        atexit.register(shutil.rmtree, tmp, True)
        so = os.path.join(tmp, "kernels.so")
        with open(so, "wb") as f:
            f.write(z.read("kernels.so"))
        module = load_module(so)
    elif "gpu_module.json" in z.namelist():
        from ..runtime.gpu import load_parts

        module = load_parts({n: z.read(n) for n in ("gpu_module.json", "device.bin")})
    return CompiledModel(plan, module, consts)


def compile_graph(graph: Graph, target: str = "llvm", fuse_ops: bool = True, verbose: bool = False) -> CompiledModel:
    """Optimize, fuse, lower and build ``graph``; all kernels go into one module."""
    from .. import build
    from ..target import Target

    tgt = Target(target)
    gpu = tgt.kind in ("cuda", "rocm")
    progress = Progress(delay=0.0 if verbose else 1.0)
    g = optimize(graph, progress)
    groups = fuse(g, enabled=fuse_ops)
    funcs, steps = lower_groups(g, groups, progress, gpu=gpu)
    module = None
    if funcs:
        progress(f"generating code for {len(funcs)} kernels")
        module = build(funcs, target=tgt)
    assign, sizes = plan_memory(g, steps)
    # Constants no kernel reads any more (weights that were repacked at compile time) are dropped.
    read = {a for st in steps for a in (st["args"] if st["kind"] == "kernel" else [st["src"]])} | set(g.outputs)
    live_consts = {k: v for k, v in g.consts.items() if k in read}
    plan = {
        "inputs": [{"name": i, "shape": list(g.values[i].shape), "dtype": g.values[i].dtype} for i in g.inputs],
        "outputs": [{"name": o, "shape": list(g.values[o].shape), "dtype": g.values[o].dtype} for o in g.outputs],
        "values": {k: {"shape": list(v.shape), "dtype": v.dtype} for k, v in g.values.items()},
        "steps": steps,
        "assign": assign,
        "storages": sizes,
        "target": str(tgt),
    }
    progress.done(f"compiled {len(funcs)} kernels")
    return CompiledModel(plan, module, live_consts)


class LazyModel:
    """A model whose shapes depend on the values of some inputs (a shape given as an input):
    compiled on the first call for each distinct value of those inputs."""

    def __init__(self, graph: Graph, value_inputs: list[str], target: str, fuse_ops: bool):
        self.graph = graph
        self.value_inputs = value_inputs
        self.target = target
        self.fuse_ops = fuse_ops
        self.input_names = list(graph.inputs)
        self._cache: dict[tuple[Any, ...], CompiledModel] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> list[np.ndarray]:
        """Compile for the given shape-determining input values (once), then run."""
        given = dict(zip(self.input_names, args))
        given.update(kwargs)
        key_parts = []
        bound: dict[str, np.ndarray] = {}
        for n in self.value_inputs:
            if n not in given:
                raise ArgumentError(f"missing input {n!r}")
            arr = np.asarray(given[n])
            bound[n] = arr
            key_parts.append((n, arr.dtype.str, arr.shape, arr.tobytes()))
        key = tuple(key_parts)
        model = self._cache.get(key)
        if model is None:
            g = self.graph.copy()
            for n, arr in bound.items():
                info = g.values[n]
                if tuple(arr.shape) != info.shape or str(arr.dtype) != info.dtype:
                    raise ArgumentError(
                        f"input {n!r} has shape {arr.shape} and dtype {arr.dtype}; the model expects {info}"
                    )
                g.consts[n] = np.require(arr, requirements="C")
                g.inputs.remove(n)
            model = compile_graph(g, self.target, self.fuse_ops)
            self._cache[key] = model
        rest = {n: v for n, v in given.items() if n not in bound}
        return model(**rest)


def compile_model(graph: Graph, target: str = "llvm", fuse_ops: bool = True, verbose: bool = False) -> Any:
    """Compile a graph; a graph whose shapes depend on input values becomes a :class:`LazyModel`."""
    try:
        return compile_graph(graph, target, fuse_ops, verbose)
    except NeedValue as exc:
        needed = _value_inputs(graph, exc.name)
        if needed is None:
            raise EmberError(
                f"the model computes a shape from run-time data ({exc}); ember needs static shapes"
            ) from exc
        return LazyModel(graph, needed, target, fuse_ops)


def _value_inputs(graph: Graph, first: str) -> list[str] | None:
    """Graph inputs whose values decide shapes (found by binding them one at a time)."""
    if first not in graph.inputs:
        # A value computed from inputs: bind the integer inputs it depends on.
        prod = graph.producers()
        seen, stack, found = set(), [first], []
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in graph.inputs:
                if "int" in graph.values[v].dtype:
                    found.append(v)
            elif v in prod:
                stack.extend(i for i in prod[v].inputs if i)
        if not found:
            return None
        first = found[0]
    needed = [first]
    while True:
        g = graph.copy()
        for n in needed:
            info = g.values[n]
            g.consts[n] = np.zeros(info.shape, info.dtype)
            g.inputs.remove(n)
        try:
            infer_and_fold(g)  # folding: the bound values flow into computed shapes
            return needed
        except NeedValue as exc:
            more = _value_inputs(g, exc.name)
            if not more or any(m in needed for m in more):
                return None
            needed.extend(more)
        except EmberError:
            return needed


def compile(
    model: Any,
    target: str = "llvm",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    fuse: bool = True,
    verbose: bool = False,
    use_cache: bool = True,
) -> Any:  # noqa: A001
    """Compile an ONNX model (path, bytes or ModelProto) or an ember :class:`Graph`.

    With ``use_cache`` (and the cache not turned off by ``EMBER_CACHE_DIR=off``), a model that
    took more than ``MODEL_CACHE_MIN_SECONDS`` to compile is stored whole, and compiling the same
    bytes (external data files included) for the same target, input shapes and options with the
    same ember sources loads it instead; kernels are cached one by one as well."""
    from .. import cache

    if isinstance(model, Graph):
        graph = model
    else:
        from ..frontend.control_flow import DeferredModel, NeedsCallInputs
        from ..frontend.onnx import import_onnx

        key = _model_cache_key(model, target, input_shapes, fuse) if use_cache else None
        root = cache.cache_dir() if key else None
        if root is not None and key is not None:
            cached = _load_cached_model(root, key)
            if cached is not None:
                return cached
        try:
            graph = import_onnx(model, input_shapes)
        except NeedsCallInputs:  # sequence/optional inputs or outputs, value-dependent trip counts
            return DeferredModel(model, target, input_shapes, fuse, verbose)
        t0 = time.perf_counter()
        compiled = compile_model(graph, target, fuse, verbose)
        slow = time.perf_counter() - t0 > MODEL_CACHE_MIN_SECONDS
        if root is not None and key is not None and slow and isinstance(compiled, CompiledModel):
            _store_cached_model(root, key, compiled)
        return compiled
    return compile_model(graph, target, fuse, verbose)


def _source_digest() -> str:
    """A digest of ember's own sources: a compiled model cached by one version of the compiler
    is never reused by another."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        import hashlib
        from pathlib import Path

        h = hashlib.sha256()
        pkg = Path(__file__).resolve().parents[1]
        for f in sorted(pkg.rglob("*.py")):
            h.update(str(f.relative_to(pkg)).encode())
            h.update(f.read_bytes())
        _SOURCE_DIGEST = h.hexdigest()
    return _SOURCE_DIGEST


_SOURCE_DIGEST: str | None = None
#: Whole compiled models are cached only when compiling them took longer than this (a small
#: model compiles faster than it saves: its kernels are cached one by one anyway).
MODEL_CACHE_MIN_SECONDS = 1.0


def _model_cache_key(model: Any, target: str, input_shapes: Any, fuse: bool) -> str | None:
    """The cache key of a compiled model, or None when the model cannot be keyed (a ModelProto or
    bytes whose weights live in external files, an unreadable path)."""
    import hashlib
    from pathlib import Path

    from .. import cache
    from ..target import Target

    try:
        import onnx
    except ImportError:
        return None
    base: Path | None = None
    try:
        if isinstance(model, (str, os.PathLike)):
            data = Path(model).read_bytes()
            base = Path(model).resolve().parent
        elif isinstance(model, (bytes, bytearray)):
            data = bytes(model)
        elif hasattr(model, "SerializeToString"):
            data = model.SerializeToString()
        else:
            return None
        proto = onnx.ModelProto.FromString(data) if base is not None else None
    except (OSError, ValueError, TypeError, AttributeError, RuntimeError):
        return None
    except Exception:  # noqa: BLE001 - onnx raises DecodeError for garbage; the import reports it
        return None
    parts = [hashlib.sha256(data).hexdigest()]
    locations: set[str] = set()
    if proto is not None:
        for t in proto.graph.initializer:
            for entry in t.external_data:
                if entry.key == "location":
                    locations.add(entry.value)
    elif b"external_data" in data or b"location" in data:
        return None  # weights may live in files we cannot find without a path
    for loc in sorted(locations):
        try:
            parts.append(loc + ":" + hashlib.sha256((base / loc).read_bytes()).hexdigest())  # type: ignore[operator]
        except OSError:
            return None
    shapes = json.dumps({k: list(v) for k, v in (input_shapes or {}).items()}, sort_keys=True)
    return cache.cache_key("model", *parts, str(Target(target)), shapes, str(bool(fuse)), _source_digest())


def _load_cached_model(root: Any, key: str) -> CompiledModel | None:
    """The compiled model stored under ``key``, or None (absent, corrupt, or unloadable)."""
    from .. import cache

    hit = cache.load(root, key)
    if hit is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.ember")
        with open(path, "wb") as f:
            f.write(hit["model.ember"])
        try:
            return load_compiled(path)
        except EmberError:
            return None


def _store_cached_model(root: Any, key: str, model: CompiledModel) -> None:
    """Store ``model`` under ``key`` (best effort: a model that cannot be saved, for instance
    without a C compiler to link its kernels, is simply not cached)."""
    from .. import cache

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.ember")
        try:
            model.save(path)
            with open(path, "rb") as f:
                data = f.read()
        except (EmberError, OSError):
            return
    cache.store(root, key, {"model.ember": data}, {"kind": "model", "target": model.target})
