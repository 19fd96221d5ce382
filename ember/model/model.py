"""``ember.Model``: the one type ``ember.compile`` and ``ember.load`` return, for every target.

A model is either *static* (one :class:`~ember.model.program.Program`, compiled ahead of time)
or *specialised at call time* (a :class:`Specializer` compiles a program the first time it sees
a new value of the inputs shapes depend on, or a new structure of sequence/optional inputs).
Both answer the same methods: call/``run``, ``run_on_device``, ``inputs``/``outputs``,
``save``, ``profile``, ``get_source``, ``device``.

Thread safety: all run state lives in an :class:`~ember.model.executor.ExecutionContext` per
calling thread (and program), so one model may be called from many threads at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import ArgumentError, EmberError
from ..profiler import ProfileResult, StepRecorder
from ..runtime.ndarray import Device
from .executor import ExecutionContext, GraphState
from .placement import check_placement
from .program import Program, TensorSpec, device_of_target


class Specializer(Protocol):
    """Compiles programs on demand for a model whose shapes or structure depend on its inputs."""

    input_names: list[str]
    target: str

    def program_for(self, given: dict[str, Any]) -> tuple[Program, dict[str, Any], Callable[[list[Any]], list[Any]]]:
        """The program for the inputs ``given`` (name -> value; all inputs present), the inputs
        that program takes (name -> value) and a function that turns its outputs into the
        model's outputs. Thread-safe."""
        ...


def collect_inputs(names: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The inputs given in order and by name (or as one mapping, name -> value, the only
    argument) as one dict; every name of ``names`` present.

    Raises :class:`~ember.errors.ArgumentError` naming the extra, duplicate or missing input."""
    if len(args) == 1 and isinstance(args[0], Mapping) and not kwargs:
        args, kwargs = (), dict(args[0])
    if len(args) > len(names):
        raise ArgumentError(f"the model takes {len(names)} input(s) ({', '.join(names)}), got {len(args)}")
    given = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise ArgumentError(f"the model has no input {k!r} (inputs: {', '.join(names)})")
        if k in given:
            raise ArgumentError(f"input {k!r} is given twice")
        given[k] = v
    missing = [n for n in names if n not in given]
    if missing:
        raise ArgumentError(f"missing input(s): {', '.join(missing)}")
    return given


class Model:
    """A compiled model: call it with arrays, save it, load it back, profile it."""

    def __init__(self, program: Program | None = None, specializer: Specializer | None = None,
                 source: dict[str, Any] | None = None, cuda_graphs: bool = True, device: Device | None = None):
        if (program is None) == (specializer is None):
            raise EmberError("Model: give exactly one of a program and a specializer")
        self._program = program
        self._specializer = specializer
        #: What the model was compiled from (ONNX bytes, target, options), kept for
        #: ``ember.load(..., rebuild=True)``; None when unknown.
        self.source = source
        #: On CUDA, replay each thread's kernel launches as one CUDA graph after the first call
        #: (see :mod:`ember.model.executor`); False: one launch per kernel on every call. Other
        #: targets ignore it. May be changed between calls.
        self.cuda_graphs = bool(cuda_graphs)
        self._graph_state = GraphState()
        self._local = threading.local()
        # The device chosen with ``to`` (or ``device=`` of compile/load); None: the target's default.
        self._device: Device | None = device

    # -- metadata --------------------------------------------------------------------------------
    @property
    def is_static(self) -> bool:
        """True when every shape was fixed at compile time (the model can be saved)."""
        return self._program is not None

    @property
    def target(self) -> str:
        """The target string the model was compiled for."""
        return self._program.target if self._program is not None else str(self._specializer.target)  # type: ignore[union-attr]

    @property
    def device(self) -> Device:
        """The device the model runs on: ``ember.cpu(0)``, or the GPU chosen with :meth:`to` (or
        ``device=`` when compiling or loading), GPU 0 by default."""
        return self._device if self._device is not None else device_of_target(self.target)

    def to(self, device: Device | str) -> Model:
        """Run this model on ``device`` from the next call on (``ember.cuda(1)``, ``"cuda:1"``);
        returns the model itself, as ``torch.nn.Module.to`` does. The compiled code is shared: a
        GPU loads the kernels on its first call, constants are copied there once.

        Raises :class:`~ember.errors.DeviceError` when the device is of another kind than the
        target (a CPU model cannot move to a GPU: compile it for one), does not exist (the message
        gives the number of GPUs found) or cannot run the code (another CUDA architecture)."""
        self._device = check_placement(self.target, device)
        place_parts = getattr(self._specializer, "to", None)  # models it runs itself (host stages)
        if place_parts is not None:
            place_parts(self._device)
        return self

    @property
    def input_names(self) -> list[str]:
        """Names of the inputs in call order."""
        if self._program is not None:
            return list(self._program.input_names)
        return list(self._specializer.input_names)  # type: ignore[union-attr]

    @property
    def output_names(self) -> list[str]:
        """Names of the outputs (static models, and models compiled per input shape)."""
        names = getattr(self._specializer, "output_names", None)
        if names is not None:
            return list(names)
        return list(self._static("output_names").output_names)

    @property
    def inputs(self) -> list[TensorSpec]:
        """The inputs: name, shape, dtype. A model with symbolic dimensions gives their names in
        the shape (``("batch", 3, 224, 224)``); one specialised per input value or structure gives
        names only, with empty shapes and dtype ``"?"``."""
        if self._program is not None:
            return self._program.inputs
        declared = {s.name: s for s in getattr(self._specializer, "declared", ())}
        return [declared.get(n, TensorSpec(n, (), "?")) for n in self.input_names]

    @property
    def max_variants(self) -> int | None:
        """How many shape variants a model with symbolic dimensions keeps (8 unless set; the
        least recently used is dropped, with an ``EvictionWarning``); None for other models."""
        return getattr(self._specializer, "max_variants", None)

    @max_variants.setter
    def max_variants(self, n: int) -> None:
        if not hasattr(self._specializer, "max_variants"):
            raise EmberError("max_variants applies to models with symbolic input dimensions only")
        self._specializer.max_variants = n  # type: ignore[union-attr]

    @property
    def variants(self) -> list[dict[str, tuple[int, ...]]]:
        """The input shapes (name -> shape) of each compiled variant of a model with symbolic
        dimensions, least recently used first (see :mod:`ember.model.dynamic`); a static model
        has one, its own."""
        if self._program is not None:
            return [{s.name: tuple(int(d) for d in s.shape) for s in self._program.inputs}]
        return list(getattr(self._specializer, "variants", []))

    @property
    def outputs(self) -> list[TensorSpec]:
        """The outputs: name, shape, dtype (static models)."""
        return self._static("outputs").outputs

    @property
    def program(self) -> Program:
        """The compiled program of a static model."""
        return self._static("program")

    @property
    def plan(self) -> dict[str, Any]:
        """The execution plan (JSON data) of a static model."""
        return self._static("plan").plan

    @property
    def module(self) -> Any:
        """The compiled kernels of a static model (an ember Module, or None)."""
        return self._static("module").module

    @property
    def consts(self) -> dict[str, np.ndarray]:
        """The constants the kernels read (static models)."""
        return self._static("consts").consts

    @property
    def num_kernels(self) -> int:
        """Number of compiled kernels (static models)."""
        return self._static("num_kernels").num_kernels

    def _static(self, what: str) -> Program:
        if self._program is None:
            raise EmberError(
                f"Model.{what}: this model is compiled at call time for each value (or structure) of the "
                "inputs its shapes depend on, so it has no single program; fix those inputs when compiling"
            )
        return self._program

    # -- running ---------------------------------------------------------------------------------
    def context(self, program: Program | None = None) -> ExecutionContext:
        """This thread's execution context for ``program`` (the static program by default)."""
        program = program or self._static("context")
        cache: dict[tuple[int, Device], ExecutionContext] | None = getattr(self._local, "contexts", None)
        if cache is None:
            cache = {}
            self._local.contexts = cache
        dev = self.device
        ctx = cache.get((id(program), dev))
        if ctx is None or ctx.program is not program:
            ctx = ExecutionContext(program, dev, self._graph_state)
            cache[(id(program), dev)] = ctx
        return ctx

    def _run(self, args: tuple[Any, ...], kwargs: dict[str, Any], on_device: bool,
             times: StepRecorder | None = None, repeat: int = 1, outputs: Any = None) -> list[Any]:
        given = collect_inputs(self.input_names, args, kwargs)
        variant_for = getattr(self._specializer, "variant_for", None)
        if variant_for is not None:  # one whole model per input shape (ember.model.dynamic)
            variant = variant_for(given)
            variant.cuda_graphs = self.cuda_graphs
            variant._device = getattr(self, "_device", None)
            return variant._run((), given, on_device, times, repeat, outputs)
        if self._program is not None:
            program, sub, regroup = self._program, given, None
        else:
            program, sub, regroup = self._specializer.program_for(given)  # type: ignore[union-attr]
        ctx = self.context(program)
        out = None
        if outputs is not None:
            if regroup is not None:
                raise ArgumentError("outputs=: this model's outputs are sequences or optional values, which cannot "
                                    "be written into preallocated arrays")
            out = _bind_outputs(program, outputs, ctx.device, [sub[n] for n in program.input_names])
        graph = self.cuda_graphs and times is None and ctx.graphs_available()
        env = ctx.bind({n: sub[n] for n in program.input_names}, fixed=graph)
        outs: list[Any] = []
        for _ in range(repeat):
            outs = ctx.run(dict(env), times, graph=graph, out=out)
        if out is not None:
            ctx.finish()
            return [o if n in out else ctx.to_host(o) for n, o in zip(program.output_names, outs)]
        if on_device:
            ctx.finish()  # the outputs are complete when the call returns
            outs = [_as_ndarray(o) if ctx.on_host else o for o in outs]
        else:
            outs = ctx.outputs_to_host(outs)
        return regroup(outs) if regroup is not None else outs

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Run the model on inputs given in order or by name; returns the outputs as NumPy
        arrays (lists and None for sequence and optional outputs)."""
        return self._run(args, kwargs, on_device=False)

    def run(self, *args: Any, outputs: Sequence[Any] | Mapping[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        """The same as calling the model (inputs in order, by name, or as one dict), and with
        ``outputs`` (I/O binding) the outputs are written into arrays the caller allocated: a
        list in output order (None: not bound) or a dict by output name. Each is a NumPy array
        (C-contiguous, writeable) or, for a GPU model, an ember array on the model's device, of
        the output's shape and dtype (:class:`~ember.errors.ArgumentError` naming the output,
        what it expects and what it got, otherwise). Kernels write straight into arrays on the
        model's device; others are filled by a copy. Returns the outputs: the bound arrays
        themselves, NumPy arrays for the others. (``outputs`` is a keyword of this method: pass
        an input called ``outputs`` in order or in the dict.)"""
        return self._run(args, kwargs, on_device=False, outputs=outputs)

    def run_on_device(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Run the model; the outputs stay on the model's device as ember arrays (DLPack
        producers: ``torch.from_dlpack(out)``). Inputs as for ``__call__``."""
        return self._run(args, kwargs, on_device=True)

    def profile(self, *args: Any, repeat: int = 10, warmup: int = 1, peaks: bool = True,
                **kwargs: Any) -> ProfileResult:
        """Run the model ``warmup`` + ``repeat`` times on the inputs (as for ``__call__``),
        timing every kernel step of the last ``repeat`` runs (kernels are launched one by one,
        never from a CUDA graph: CUDA events on GPUs, the host clock around CPU kernels), and
        return a :class:`~ember.profiler.ProfileResult`: per kernel, per step and per ONNX node
        calls and times, FLOPs and bytes (counted from the loop IR), achieved rates and, with
        ``peaks``, the share of the device's roofline (peaks measured once per device and cached;
        see :mod:`ember.profiler.peaks`). Iterating the result gives ``(step, seconds)`` pairs.
        ``docs/profiling.md`` describes it."""
        from ..profiler import device_peaks

        if repeat < 1 or warmup < 0:
            raise ArgumentError(f"profile: repeat must be >= 1 and warmup >= 0 (got {repeat} and {warmup})")
        rec = StepRecorder(warmup)
        self._run(args, kwargs, on_device=True, times=rec, repeat=warmup + repeat)
        if rec.program is None:  # nothing ran through an execution context
            raise EmberError("profile: this model ran no program (every output is a constant or an input)")
        dev = rec.device
        return ProfileResult(rec.finish(), rec.program.plan, rec.labels, repeat, str(dev), rec.program.target,
                             rec.clock, rec.track, (lambda: device_peaks(dev)) if peaks else None)

    # -- inspecting and saving -------------------------------------------------------------------
    def get_source(self, fmt: str = "ir") -> str:
        """The compiled kernels as text: ``"ir"`` (loop IR), ``"llvm"``, ``"asm"``; ``"ptx"``
        and ``"host"`` (launch plans) on GPUs. Static models only."""
        module = self.module
        if module is None:
            raise EmberError("this model computes nothing at run time (every output is a constant or an input)")
        return module.get_source(fmt)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model to ``path`` (see :mod:`ember.model.format`): a static model, a model
        with symbolic dimensions (its ONNX source, declared shapes and compiled variants) or one
        with host stages (its validated ONNX model, stage split and compiled variants)."""
        from .format import save_model

        save_model(self, path)

    def __repr__(self) -> str:
        if self._program is None:
            kept = getattr(self._specializer, "variants", None)
            per = "compiled per call shape" if kept is None else f"compiled per input shape ({len(kept)} variant(s))"
            return f"<ember.Model {len(self.input_names)} input(s), {per}, target {self.target!r}>"
        return (f"<ember.Model {len(self.input_names)} input(s), {self.num_kernels} kernel(s), "
                f"target {self.target!r}>")


def _as_ndarray(o: np.ndarray) -> Any:
    from ..ir.dtypes import dtype as as_dtype
    from ..runtime.ndarray import NDArray, cpu

    return NDArray(np.require(o, requirements="C"), as_dtype(str(o.dtype)), cpu(0))


def _bind_outputs(program: Program, outputs: Any, device: Device, inputs: Sequence[Any] = ()) -> dict[str, Any]:
    """``outputs`` of :meth:`Model.run` as name -> array, each checked against ``program``'s
    output (shape, dtype, device, memory layout) and against overlapping another bound output
    or an input; ArgumentError naming what is wrong."""
    specs = program.outputs
    names = [s.name for s in specs]
    if isinstance(outputs, Mapping):
        for k in outputs:
            if k not in names:
                raise ArgumentError(f"outputs=: the model has no output {k!r} (outputs: {', '.join(names)})")
        given = {k: v for k, v in outputs.items() if v is not None}
    elif isinstance(outputs, (list, tuple)):
        if len(outputs) != len(specs):
            raise ArgumentError(f"outputs=: the model has {len(specs)} output(s) ({', '.join(names)}), "
                                f"got {len(outputs)} array(s)")
        given = {n: v for n, v in zip(names, outputs) if v is not None}
    else:
        raise ArgumentError(f"outputs= takes a list (in output order) or a dict by output name, "
                            f"not {type(outputs).__name__}")
    for spec in specs:
        arr = given.get(spec.name)
        if arr is None:
            continue
        try:
            want_dt = np.dtype(spec.dtype)
        except TypeError as exc:
            raise ArgumentError(f"output {spec.name!r} has dtype {spec.dtype}, which NumPy lacks: leave it unbound "
                                "(the call returns it)") from exc
        want = f"shape {tuple(spec.shape)} and dtype {want_dt}"
        shape, dt = tuple(getattr(arr, "shape", ())), str(getattr(arr, "dtype", type(arr).__name__))
        if isinstance(arr, np.ndarray):
            if not arr.flags.c_contiguous or not arr.flags.writeable:
                raise ArgumentError(f"output {spec.name!r}: the array must be C-contiguous and writeable "
                                    "(np.empty(shape, dtype) is)")
        elif device.kind == "cpu" or not hasattr(arr, "data_ptr"):
            raise ArgumentError(f"output {spec.name!r}: expected a NumPy array{'' if device.kind == 'cpu' else ' or '}"
                                f"{'' if device.kind == 'cpu' else f'an ember array on {device}'} with {want}, got a "
                                f"{type(arr).__name__}")
        elif arr.device != device:
            raise ArgumentError(f"output {spec.name!r}: the array is on {arr.device}, the model runs on {device}")
        if shape != tuple(spec.shape) or dt != str(want_dt):
            raise ArgumentError(f"output {spec.name!r}: expected {want}, got shape {shape} and dtype {dt}")
    bound = list(given.items())
    for k, (name, arr) in enumerate(bound):
        for other, arr2 in bound[k + 1:]:
            if _overlap(arr, arr2):
                raise ArgumentError(f"outputs {name!r} and {other!r} are given the same (or overlapping) memory")
        for x in inputs:
            if _overlap(arr, x):
                raise ArgumentError(f"output {name!r} is given memory of an input: the kernels would overwrite "
                                    "what they read (pass a separate array)")
    return given


def _overlap(a: Any, b: Any) -> bool:
    """True when two arrays (NumPy, or ember device arrays) may share memory."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return bool(np.may_share_memory(a, b))
    pa, pb = getattr(a, "data_ptr", None), getattr(b, "data_ptr", None)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) or pa is None or pb is None:
        return False
    if getattr(a, "device", None) != getattr(b, "device", None):
        return False
    return pa < pb + b.nbytes and pb < pa + a.nbytes
