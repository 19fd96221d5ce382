"""Tuning tasks: the distinct tunable kernels of a model, or one te kernel.

A :class:`Task` holds everything needed to build one configuration of its kernel — the te
program and how to schedule it — plus its workload key, its knob space, how often it occurs in
the model (``weight``) and its floating-point work (``flops``). :func:`extract_tasks` finds a
model's tasks by running the model compiler's graph passes and group lowering with a chooser
that collects every kernel whose strategy declares a knob space; kernels with the same workload
key (a network's repeated layers) become one task whose weight is their count.
:func:`kernel_task` makes the task of a te kernel whose schedule takes a configuration.

:meth:`Task.build` is what a build worker runs: the schedule of a configuration (validated by
the space first), lowered and compiled into the backend's parts (bytes), without loading them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends import backend_for
from ..errors import TuningError
from ..strategy import ConfigEntity, ConfigSpace, Strategy, strategy_for
from ..target import Target
from ..te import ComputeOp, PlaceholderOp, Schedule, Tensor
from ..te.rewrite import post_order
from .keys import anchor_op, flop_count, kernel_workload, op_flops, te_workload, workload_name

#: The name of the function a candidate's module holds.
FUNC_NAME = "tuned"


def _placeholders(outs: Sequence[Tensor]) -> list[Tensor]:
    return [op.output(0) for op in post_order([o.op for o in outs]) if isinstance(op, PlaceholderOp)]


@dataclass
class ArgSpec:
    """One argument of a task's kernel: shape, dtype and whether the kernel writes it (``out``)
    and its result is compared with the default schedule's (``check``)."""

    shape: tuple[int, ...]
    dtype: str
    out: bool = False
    check: bool = False

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {"shape": list(self.shape), "dtype": self.dtype, "out": self.out, "check": self.check}


def _arg_spec(t: Tensor, out: bool, check: bool) -> ArgSpec:
    from .keys import _shape

    dims = _shape(t)
    if not all(isinstance(d, int) for d in dims):
        raise TuningError(f"tensor {t.name} has a symbolic shape {dims}; tuning needs constant shapes")
    return ArgSpec(tuple(int(d) for d in dims), str(t.dtype), out, check)


@dataclass
class Task:
    """One kernel to tune (see the module docstring). ``args`` are the kernel's arguments in call
    order (inputs, then outputs); ``schedule`` builds the schedule of a configuration;
    ``space`` is its knob space; ``target`` the resolved target string."""

    name: str
    workload: str
    target: str
    args: list[Tensor]
    specs: list[ArgSpec]
    space: ConfigSpace
    schedule: Callable[[ConfigEntity], Schedule | tuple[Schedule, Sequence[Tensor]]]
    flops: float
    weight: int = 1
    occurrences: list[str] = field(default_factory=list)

    @property
    def space_signature(self) -> str:
        """The knob names and sizes of the space (noted with each record)."""
        return ",".join(f"{n}:{len(k)}" for n, k in self.space.knobs.items())

    def build(self, config: dict[str, Any] | ConfigEntity) -> dict[str, bytes]:
        """Compile configuration ``config`` (validated against :attr:`space` first: an illegal point
        raises :class:`~ember.errors.InvalidConfig` before anything is built) into the backend's
        parts, holding one function named :data:`FUNC_NAME`."""
        from ..lowering import lower

        cfg = self.space.validate(config if isinstance(config, ConfigEntity) else ConfigEntity.from_json(config))
        tgt = Target(self.target)
        made = self.schedule(cfg)
        sched, args = made if isinstance(made, tuple) else (made, self.args)
        func = lower(sched, list(args), FUNC_NAME, target=tgt)
        return backend_for(tgt).compile([func], tgt)

    def __repr__(self) -> str:
        return f"Task({self.name!r}, weight={self.weight}, {len(self.space)} points)"


# -- model tasks -------------------------------------------------------------------------------------
class _Collector:
    """A group-lowering chooser that records every tunable kernel (and keeps default schedules)."""

    def __init__(self, target: str):
        self.target = target
        self.tasks: dict[str, Task] = {}

    def __call__(self, outs: Sequence[Tensor], workspaces: Sequence[Tensor], strategy: Strategy) -> None:
        allouts = list(outs) + list(workspaces)
        space = strategy.space(allouts)
        key = kernel_workload(allouts, strategy) if space is not None else None
        if key is None or space is None:
            return None
        if key in self.tasks:
            self.tasks[key].weight += 1
            return None
        params = _placeholders(allouts)
        try:
            specs = ([_arg_spec(t, False, False) for t in params] + [_arg_spec(t, True, True) for t in outs]
                     + [_arg_spec(t, True, False) for t in workspaces])
        except TuningError:
            return None  # a symbolic shape: not tunable
        anchor = anchor_op(allouts)
        assert anchor is not None
        self.tasks[key] = Task(workload_name(key), key, self.target, params + allouts, specs, space,
                               _model_schedule(strategy, allouts), op_flops(anchor))
        return None


def _model_schedule(strategy: Strategy, outs: list[Tensor]) -> Callable[[ConfigEntity], Schedule]:
    def schedule(cfg: ConfigEntity) -> Schedule:
        return strategy.schedule_group(outs, config=cfg)

    return schedule


def load_graph(model: Any, input_shapes: dict[str, Sequence[int]] | None = None) -> Any:
    """An ember graph from ``model``: an ONNX path, bytes or ModelProto, or a Graph."""
    from ..frontend.control_flow import NeedsCallInputs
    from ..frontend.onnx import SymbolicShapes, import_onnx
    from ..graph.ir import Graph

    if isinstance(model, Graph):
        return model
    if isinstance(model, (str, os.PathLike)) and not os.path.exists(model):
        raise TuningError(f"model {str(model)!r}: no such file")
    try:
        return import_onnx(model, input_shapes)
    except SymbolicShapes as exc:
        free = [f"{name}={list(dims)}" for name, dims, _ in exc.inputs if not all(isinstance(d, int) for d in dims)]
        raise TuningError(f"the model's inputs have dimensions known only at call time ({', '.join(free)}); tune "
                          "it at the shapes it will run with: --input-shape NAME=D0,D1,... (input_shapes=)") from exc
    except NeedsCallInputs as exc:
        raise TuningError(f"the model has sequence/optional inputs or value-dependent loops ({exc}); ember tunes "
                          "models with tensor inputs of fixed shapes") from exc


def extract_tasks(model: Any, target: str | Target, input_shapes: dict[str, Sequence[int]] | None = None,
                  fuse: bool = True) -> list[Task]:
    """The distinct tunable kernels of ``model`` (ONNX path/bytes/ModelProto or Graph) for
    ``target``, as the model compiler fuses and lowers them, heaviest first (weight x flops)."""
    from ..graph.alter_layout import AlterLayout
    from ..graph.passes import Fuse, default_graph_pipeline
    from ..model.group_lowering import lower_groups
    from ..ops.registry import NeedValue

    tgt = backend_for(target).resolve(Target(target))
    graph = load_graph(model, input_shapes)
    g = default_graph_pipeline(None, tgt)(graph)
    policy = strategy_for(tgt).layout_policy()
    if policy is not None:  # as the model compiler does: the target's layouts, then folding again
        g = default_graph_pipeline(None, tgt)(AlterLayout(policy)(g))
    groups = Fuse(enabled=fuse, target=tgt)(g).groups
    collector = _Collector(str(tgt))
    try:
        lower_groups(g, groups, None, gpu=tgt.is_gpu, target=tgt, configs=collector)
    except NeedValue as exc:
        raise TuningError(f"the model computes a shape from an input's value ({exc}); ember tunes models whose "
                          "shapes are fixed at compile time") from exc
    return sorted(collector.tasks.values(), key=lambda t: -t.weight * t.flops)


# -- te kernels --------------------------------------------------------------------------------------
def kernel_task(schedule_fn: Callable[[ConfigEntity], Any], args: Sequence[Tensor], target: str | Target,
                space: ConfigSpace, name: str | None = None) -> Task:
    """The task of a te kernel: ``schedule_fn(cfg)`` returns the schedule of configuration ``cfg``
    (a point of ``space``) computing ``args`` (inputs, then outputs, in call order), or a pair
    ``(schedule, arguments)`` when it builds its program anew for each point (as
    ``tensorcore_matmul`` does; the arguments then have the shapes and types of ``args``).
    ``name`` (default: the function's qualified name) is its template name in the records."""
    if not isinstance(space, ConfigSpace):
        raise TuningError(f"tune_kernel: space must be a ConfigSpace declaring the schedule's knobs, not "
                          f"{type(space).__name__}")
    if not callable(schedule_fn):
        raise TuningError("tune_kernel: schedule_fn must be a function taking a configuration and returning a schedule")
    tgt = backend_for(target).resolve(Target(target))
    args = list(args)
    specs = [_arg_spec(t, isinstance(t.op, ComputeOp), isinstance(t.op, ComputeOp)) for t in args]
    template = name or f"{getattr(schedule_fn, '__module__', '?')}.{getattr(schedule_fn, '__qualname__', '?')}"
    key = te_workload(template, args)
    outs = [t for t in args if isinstance(t.op, ComputeOp)]
    return Task(json.loads(key)["template"], key, str(tgt), args, specs, space, schedule_fn, flop_count(outs))
