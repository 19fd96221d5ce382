"""The compile driver: the one place that runs ember's pipeline.

``ember.compile`` (ONNX models and graphs) and ``ember.build`` (te schedules and lowered
functions) both live here::

    ONNX ──frontend──▶ Graph ──graph passes──▶ fused groups ──group lowering──▶ loop IR
         ──backend build──▶ Module ──▶ Program + memory plan ──▶ ember.Model

Every stage is a module of its own (``ember.frontend``, ``ember.graph.passes``,
``ember.model.group_lowering``, ``ember.backends``, ``ember.model.memory_plan``); this module only
chains them, picks the model's kind (static, or specialised at call time when shapes depend on
input values or the model has sequence/optional inputs) and consults the whole-model cache.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from . import cache as compile_cache
from .backends import backend_for, build_functions
from .errors import EmberError, FrontendError
from .graph.alter_layout import AlterLayout
from .graph.ir import Graph
from .graph.passes import Fuse, default_graph_pipeline, infer_and_fold
from .ir import expr as E
from .ir.stmt import PrimFunc
from .lowering import lower
from .model import cache as model_cache
from .model.group_lowering import ConfigChooser, lower_groups, share_identical_kernels
from .model.memory_plan import plan_memory
from .model.model import Model
from .model.placement import place
from .model.program import Program
from .model.progress import Progress
from .ops.registry import NeedValue
from .runtime.module import Module
from .runtime.ndarray import Device
from .strategy.base import strategy_for
from .target import Target
from .te.schedule import Schedule
from .te.tensor import Tensor
from .tune.apply import records_chooser

__all__ = ["build", "compile", "compile_graph", "compile_model", "load", "optimize"]


def build(
    inputs: Schedule | PrimFunc | Sequence[PrimFunc],
    args: Sequence[Tensor | E.Var] | None = None,
    target: str | Target = "llvm",
    target_host: str | Target | None = None,
    name: str = "main",
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    jobs: int | None = None,
) -> Module:
    """Compile a schedule with its arguments (or already lowered functions) for ``target``.

    ``target`` is ``"llvm"`` (this CPU), ``"cuda"`` or ``"rocm"`` (with options, see
    :class:`~ember.target.Target`); ``target_host`` is accepted for TVM compatibility (the host
    side of a GPU build runs in Python). Compiled code is cached on disk (see
    :mod:`ember.cache`) unless ``use_cache`` is False. ``jobs``: processes the CPU backend
    generates machine code in (None: two for large modules on a machine with two cores or more,
    :func:`ember.backends.cpu.codegen.default_jobs`; the code is the same for any value)."""
    tgt = backend_for(target).resolve(Target(target))
    if target_host is not None:
        Target(target_host)
    if isinstance(inputs, Schedule):
        if args is None:
            raise EmberError("build: give the argument list (tensors in call order) with a schedule")
        funcs = [lower(inputs, args, name, target=tgt)]
    elif isinstance(inputs, PrimFunc):
        funcs = [inputs]
    elif isinstance(inputs, (list, tuple)) and inputs and all(isinstance(f, PrimFunc) for f in inputs):
        funcs = list(inputs)
    else:
        raise EmberError(f"build: expected a schedule or lowered functions, got {type(inputs).__name__}")
    return build_functions(funcs, tgt, use_cache, cache_dir, jobs)


def optimize(graph: Graph, progress: Any = None, target: str | Target | None = None) -> Graph:
    """The graph passes (:func:`~ember.graph.passes.default_graph_pipeline`: inference with
    constant folding, simplification, dead-code elimination; for a CPU ``target``, attention
    chains as one operator), run under the current
    :class:`~ember.transform.PassContext` (opt level, disabled passes, IR dumps, timing)."""
    return default_graph_pipeline(progress, target)(graph)


def compile_graph(graph: Graph, target: str | Target = "llvm", fuse_ops: bool = True, verbose: bool = False,
                  tf32: bool = False, configs: ConfigChooser | None = None, jobs: int | None = None) -> Program:
    """Optimize, fuse, lower and build ``graph`` into one program (all kernels in one module);
    ``tf32`` runs float32 products on TF32 tensor cores where the target has them; ``configs``
    picks kernels' knob settings (tuning records; None: the default schedules); ``jobs`` as for
    :func:`build`. Python's cyclic garbage collector is paused meanwhile (:func:`_collector_paused`).

    Raises :class:`~ember.ops.registry.NeedValue` when a shape depends on an input's value."""
    with _collector_paused():
        return _compile_graph(graph, target, fuse_ops, verbose, tf32, configs, jobs)


_paused_lock = threading.Lock()
_paused = {"depth": 0, "was_enabled": False}


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the duration (as it was before afterwards; nested
    and concurrent compiles pause it once). A compile builds millions of long-lived IR objects,
    and each full collection walks them all: ~15% of ResNet-50's compile time. The compile's
    cyclic garbage (a few tens of MB) is collected by the first collection after it."""
    with _paused_lock:
        if _paused["depth"] == 0:
            _paused["was_enabled"] = gc.isenabled()
            gc.disable()
        _paused["depth"] += 1
    try:
        yield
    finally:
        with _paused_lock:
            _paused["depth"] -= 1
            if _paused["depth"] == 0 and _paused["was_enabled"]:
                gc.enable()


def _compile_graph(graph: Graph, target: str | Target, fuse_ops: bool, verbose: bool, tf32: bool,
                   configs: ConfigChooser | None, jobs: int | None) -> Program:
    """:func:`compile_graph` with the collector paused."""
    tgt = backend_for(target).resolve(Target(target))
    progress = Progress(delay=0.0 if verbose else 1.0)
    g = optimize(graph, progress, tgt)
    policy = strategy_for(tgt).layout_policy()
    if policy is not None:  # the target's layouts, then folding of the transformed constants
        g = optimize(AlterLayout(policy)(g), progress, tgt)
    groups = Fuse(enabled=fuse_ops, target=tgt)(g).groups
    ahead = _AheadStarter(tgt, jobs)
    try:
        funcs, steps = lower_groups(g, groups, progress, gpu=tgt.is_gpu, target=tgt, tf32=tf32, configs=configs,
                                    lowered=ahead)
        funcs, steps = share_identical_kernels(funcs, steps)
        module = None
        if funcs:
            progress(f"generating code for {len(funcs)} kernels")
            module = build(funcs, target=tgt, jobs=jobs)
    finally:
        ahead.cancel()
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
    return Program(plan, module, live_consts)


class _AheadStarter:
    """Told after each kernel is lowered (``lower_groups(lowered=)``): once half of the groups
    are lowered, on the CPU with ``jobs`` other than 1, it starts generating the distinct
    kernels so far in a forked child (:func:`ember.backends.cpu.codegen.start_ahead`) when their
    loop IR is large enough to gain (half of ``PARALLEL_MIN_CHARS``); the build takes that part
    over (the same kernels come first in the module). :meth:`cancel` ends an unused one."""

    #: The share of the groups lowered before the first kernels' code generation starts.
    AT = 0.5

    def __init__(self, target: Target, jobs: int | None) -> None:
        self.on = target.kind == "llvm" and jobs != 1
        self.target, self.jobs = target, jobs
        self.build: Any = None

    def __call__(self, funcs: list[PrimFunc], done: int, total: int) -> None:
        if not self.on or done < total * self.AT:
            return
        self.on = False
        from .backends.cpu import codegen

        if self.jobs is None and codegen.default_jobs([codegen.PARALLEL_MIN_CHARS, 1]) == 1:
            return  # one core
        kept, _ = share_identical_kernels(list(funcs), [])
        if len(kept) >= 2 and sum(len(str(f)) for f in kept) >= codegen.PARALLEL_MIN_CHARS // 2:
            self.build = codegen.start_ahead(kept, self.target)

    def cancel(self) -> None:
        """End the child if no build took it over."""
        if self.build is not None:
            self.build.cancel()


def compile_model(graph: Graph, target: str | Target = "llvm", fuse_ops: bool = True, verbose: bool = False,
                  tf32: bool = False, configs: ConfigChooser | None = None, jobs: int | None = None) -> Model:
    """Compile a graph into a :class:`Model`: static, or specialised per value of the inputs
    its shapes depend on (``tf32``, ``configs``, ``jobs`` as for :func:`compile_graph`)."""
    from .specialize import ValueSpecializer

    try:
        return Model(compile_graph(graph, target, fuse_ops, verbose, tf32, configs, jobs))
    except NeedValue as exc:
        needed = _value_inputs(graph, exc.name)
        if needed is None:
            raise EmberError(
                f"the model computes a shape from run-time data ({exc}); ember needs static shapes"
            ) from exc
        return Model(specializer=ValueSpecializer(
            graph, needed, str(Target(target)), lambda g: compile_model(g, target, fuse_ops, verbose, tf32, configs)))


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
    target: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    fuse: bool = True,
    verbose: bool = False,
    use_cache: bool = True,
    cuda_graphs: bool = True,
    precision: str = "float32",
    device: Device | str | None = None,
    tuning_db: str | os.PathLike[str] | bool | None = None,
    jobs: int | None = None,
) -> Model:  # noqa: A001
    """Compile an ONNX model (path, bytes or ModelProto) or an ember :class:`Graph` for
    ``target`` (``"llvm"``, ``"cuda"``, ``"rocm"``, with options); returns an :class:`ember.Model`.

    ``precision`` (``"float32"``, the default: exact; ``"float16"``, ``"bfloat16"``) runs a
    float32 ONNX model's computation in the lower type, inputs and outputs keeping their declared
    types, normalizations and softmax in float32 (:mod:`ember.frontend.precision`); on a GPU with
    tensor cores its products run there. ``"tf32"`` keeps float32 everywhere but runs matrix
    products and convolutions on TF32 tensor cores (NVIDIA sm_80+; exact float32 elsewhere). Any
    target accepts every value.

    ``device`` (``ember.cuda(1)``, ``"cuda:1"``; default: GPU 0, or the CPU) is where the model
    runs; it is checked before compiling (a missing index names the number of GPUs found), a
    CUDA target without ``-arch`` is built for that GPU's architecture, and ``target`` defaults
    to the device's kind (``"llvm"`` without a device). ``Model.to`` moves a model later.

    ``tuning_db`` (a path; None: ``EMBER_TUNING_DB``, else ``~/.cache/ember/tuning.db`` when it
    exists; False: none) is the records database of ``ember tune``: each kernel with a valid
    record for this target is scheduled with its best measured setting (``docs/tuning.md``); a
    model compiled with records skips the whole-model cache (its kernels are still cached).

    ``cuda_graphs`` (CUDA only, a run-time option: no effect on the compiled code or the cache):
    after a thread's first call the model's kernel launches are replayed as one CUDA graph
    (``Model.cuda_graphs``, see ``docs/gpu.md``); False launches every kernel on every call.

    With ``use_cache`` (and the cache not turned off by ``EMBER_CACHE_DIR=off``), a model that
    took more than ``MODEL_CACHE_MIN_SECONDS`` to compile is stored whole, and compiling the same
    bytes (external data files included) for the same target, input shapes and options with the
    same ember sources loads it instead; kernels are cached one by one as well.

    ``jobs`` (a build option: no effect on the code or the cache): how many processes generate
    the CPU machine code at once; None: two for large models where two cores are available
    (:func:`ember.backends.cpu.codegen.default_jobs`), 1: none forked."""
    from .frontend.precision import check_precision

    check_precision(precision)
    target, dev = place(target, device)
    configs = records_chooser(tuning_db, target)
    if isinstance(model, Graph):
        if precision not in ("float32", "tf32"):
            raise FrontendError(f"precision={precision!r} rewrites an ONNX model; pass the ONNX model, not a Graph")
        return _with_graphs(compile_model(model, target, fuse, verbose, precision == "tf32", configs, jobs),
                            cuda_graphs, dev)
    from .frontend.control_flow import NeedsCallInputs
    from .frontend.host_scan import NeedsHostStages
    from .frontend.onnx import SymbolicShapes, import_onnx
    from .specialize import StructureSpecializer

    Target(target)  # an unknown target fails before any work
    tf32 = precision == "tf32"
    if precision not in ("float32", "tf32"):
        model = _lowered(model, precision)
    key = model_cache.model_cache_key(model, target, input_shapes, fuse, precision) if use_cache else None
    key = None if configs else key  # a model built with tuning records is not cached whole
    root = compile_cache.cache_dir() if key else None
    if root is not None and key is not None:
        cached = model_cache.load_cached_model(root, key)
        if cached is not None:
            cached.source = _source_of(model, target, input_shapes, fuse, precision)  # entries hold no source
            return _with_graphs(cached, cuda_graphs, dev)
    try:
        graph = import_onnx(model, input_shapes)
    except NeedsCallInputs:  # sequence/optional inputs or outputs, value-dependent trip counts
        return _with_graphs(Model(specializer=StructureSpecializer(
            model, str(Target(target)), input_shapes,
            lambda g: compile_model(g, target, fuse, verbose, tf32, configs))),
            cuda_graphs, dev)
    except SymbolicShapes as exc:  # dimensions given at call time: one compiled variant per input shape
        source = _source_of(model, target, input_shapes, fuse, precision)
        per_shape = _per_shape(exc, target, _variant_compiler(  # (a float16 model is rewritten already)
            source["onnx"] if source else model, target, input_shapes, fuse, verbose, use_cache, cuda_graphs,
            "tf32" if tf32 else "float32", tuning_db),  # tuning records are for fixed shapes: per shape then
            symbolic=None if configs else (source["onnx"] if source else model, input_shapes, fuse, tf32))
        per_shape.source = source
        return _with_graphs(per_shape, cuda_graphs, dev)
    except NeedsHostStages as exc:  # text, random draws, NonMaxSuppression: host stages around a compiled part
        from .host_stages import host_model

        hosted = host_model(exc.model, str(Target(target)),
                            *_host_compilers(target, fuse, verbose, use_cache, cuda_graphs, tf32, tuning_db))
        hosted.source = _source_of(exc.model, target, input_shapes, fuse, precision)  # the validated model, saved
        return _with_graphs(hosted, cuda_graphs, dev)
    t0 = time.perf_counter()
    compiled = compile_model(graph, target, fuse, verbose, tf32, configs, jobs)
    compiled.source = _source_of(model, target, input_shapes, fuse, precision)
    slow = time.perf_counter() - t0 > model_cache.MODEL_CACHE_MIN_SECONDS
    if root is not None and key is not None and slow and compiled.is_static:
        model_cache.store_cached_model(root, key, compiled)
    return _with_graphs(compiled, cuda_graphs, dev)


def _host_compilers(target: str, fuse: bool, verbose: bool, use_cache: bool, cuda_graphs: bool, tf32: bool,
                    tuning_db: str | os.PathLike[str] | bool | None) -> tuple[Any, Any]:
    """What a model with host stages compiles its compiled stages with: (ONNX bytes, input shapes)
    -> Model through :func:`compile` (a float16 model is rewritten already: float32 or tf32 here),
    and the empty middle (a Graph) -> Model."""
    mid = "tf32" if tf32 else "float32"
    configs = records_chooser(tuning_db, target)
    return (lambda b, shapes: compile(b, target, shapes, fuse, verbose, use_cache, cuda_graphs, mid,
                                      tuning_db=tuning_db),
            lambda g: compile_model(g, target, fuse, verbose, tf32, configs))


def _lowered(model: Any, precision: str) -> bytes:
    """The ONNX bytes of ``model`` (a path, bytes or ModelProto) rewritten for ``precision``."""
    import onnx

    from .frontend.precision import lower_precision

    try:
        if isinstance(model, (str, os.PathLike)):
            proto = onnx.load(str(model))
        elif isinstance(model, (bytes, bytearray)):
            proto = onnx.load_from_string(bytes(model))
        else:
            proto = model
    except (OSError, ValueError) as err:
        raise FrontendError(f"precision={precision!r}: cannot read the ONNX model: {err}") from err
    return lower_precision(proto, precision).SerializeToString()


def _with_graphs(model: Model, cuda_graphs: bool, device: Device | str | None = None) -> Model:
    model.cuda_graphs = bool(cuda_graphs)
    return model.to(device) if device is not None else model


def load(path: str | os.PathLike[str], rebuild: bool = False, cuda_graphs: bool = True,
         device: Device | str | None = None) -> Model:
    """Load a model saved by :meth:`ember.Model.save`.

    Loading runs nothing from the file (no pickle, no ``eval``, no ``dlopen``; every member is
    checked against the file's manifest and the backend's checking loader). *Calling* the model
    runs its machine code, so a compiled model is as trusted as its source: for a file from a
    source you do not trust, ``rebuild=True`` compiles the ONNX model the file embeds again
    with the options it was saved with, and uses none of the file's code. ``cuda_graphs`` as
    for :func:`compile`; ``device`` (default: GPU 0, or the CPU) as for ``Model.to``."""
    from .model.format import load_model, read_source

    if not rebuild:
        return _with_graphs(_with_compiler(load_model(path)), cuda_graphs, device)
    onnx_bytes, opts = read_source(path)
    shapes = opts.get("input_shapes")
    return compile(onnx_bytes, target=str(opts.get("target", "llvm")), input_shapes=shapes,
                   fuse=bool(opts.get("fuse", True)), use_cache=False, cuda_graphs=cuda_graphs,
                   precision=str(opts.get("precision", "float32")), device=device)


def _source_of(model: Any, target: str, input_shapes: Mapping[str, Sequence[int]] | None,
               fuse: bool, precision: str = "float32") -> dict[str, Any] | None:
    """What a model was compiled from, kept for saving (``rebuild``): the ONNX bytes when the
    weights are inside them, and the options."""
    data: bytes | None = None
    if isinstance(model, (bytes, bytearray)):
        data = bytes(model)
    elif isinstance(model, (str, os.PathLike)):
        try:
            with open(model, "rb") as f:
                data = f.read()
        except OSError:
            data = None
    elif hasattr(model, "SerializeToString"):
        data = model.SerializeToString()
    if data is None or b"external_data" in data:
        return None  # weights in external files: not embedded
    shapes = {k: [int(d) for d in v] for k, v in (input_shapes or {}).items()}
    options = {"target": str(target), "input_shapes": shapes or None, "fuse": bool(fuse)}
    if precision == "tf32":  # float16/bfloat16 sources are stored already rewritten
        options["precision"] = precision
    return {"onnx": data, "options": options}


def _per_shape(declared: Any, target: str, compile_variant: Any, symbolic: tuple[Any, ...] | None = None) -> Model:
    """A model compiled per input shape (:class:`ember.model.dynamic.ShapeSpecializer`) for
    the inputs a :class:`~ember.frontend.onnx.SymbolicShapes` declares; ``compile_variant``
    compiles one variant (name -> shape of each shaped input); ``symbolic`` (the ONNX model,
    fixed input shapes, fuse, tf32) lets it first try one compile for every size."""
    from .model.dynamic import ShapeSpecializer
    from .model.program import TensorSpec
    from .specialize import symbolic_compiler

    specs = [TensorSpec(n, dims, dt) for n, dims, dt in declared.inputs]
    once = symbolic_compiler(symbolic[0], specs, symbolic[1], str(Target(target)), *symbolic[2:]) if symbolic else None
    return Model(specializer=ShapeSpecializer(specs, declared.input_names, declared.outputs, str(Target(target)),
                                              compile_variant, compile_symbolic=once))


def _variant_compiler(model: Any, target: str, input_shapes: Mapping[str, Sequence[int]] | None, fuse: bool,
                      verbose: bool, use_cache: bool, cuda_graphs: bool, precision: str,
                      tuning_db: str | os.PathLike[str] | bool | None = None) -> Any:
    """The compile step of a model with symbolic dimensions: ``shapes`` (name -> shape of each
    shaped input, on top of the fixed ``input_shapes``) -> the fixed-shape model, through
    :func:`compile` (so the kernel and whole-model caches answer repeats; ``tuning_db`` as there)."""
    fixed = dict(input_shapes or {})

    def compile_variant(shapes: dict[str, tuple[int, ...]]) -> Model:
        variant = compile(model, target, {**fixed, **shapes}, fuse, verbose, use_cache, cuda_graphs, precision,
                          tuning_db=tuning_db)
        variant.source = None  # the model with symbolic dimensions holds the source, once
        return variant

    return compile_variant


def _with_compiler(model: Model) -> Model:
    """A loaded model with symbolic dimensions, able to compile variants for new input shapes
    from the ONNX source it embeds (with the options it was saved with); a loaded model with host
    stages rebuilt from that source (:func:`ember.host_stages.restore_host_model`); other models
    as they are."""
    from .model.dynamic import ShapeSpecializer
    from .model.format import SavedHostStages

    spec = model._specializer
    if isinstance(spec, SavedHostStages) and model.source:  # host stages: rebuilt from the source, checked
        from .host_stages import restore_host_model

        opts = model.source.get("options", {})
        return restore_host_model(model, *_host_compilers(
            str(opts.get("target", "llvm")), bool(opts.get("fuse", True)), False, True, model.cuda_graphs,
            opts.get("precision") == "tf32", None))
    if not isinstance(spec, ShapeSpecializer) or spec.compile_shapes is not None or not model.source:
        return model
    opts = model.source.get("options", {})
    spec.compile_shapes = _variant_compiler(model.source["onnx"], str(opts.get("target", "llvm")),
                                            opts.get("input_shapes"), bool(opts.get("fuse", True)), False, True,
                                            model.cuda_graphs, str(opts.get("precision", "float32")))
    if spec.compile_symbolic is None and spec.symbolic_status == "not available":
        from .specialize import symbolic_compiler

        spec.compile_symbolic = symbolic_compiler(model.source["onnx"], spec.declared, opts.get("input_shapes"),
                                                  spec.target, bool(opts.get("fuse", True)),
                                                  opts.get("precision") == "tf32")
        spec.symbolic_status = "not tried"
    return model
