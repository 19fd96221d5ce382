"""The strategy of a target: how the operator library's programs are scheduled for it.

Operators (:mod:`ember.ops`) say *what* is computed; a :class:`Strategy` says how for one
target:

* :meth:`Strategy.schedule_group` — the default schedule of one fused kernel;
* layout parameters that compute definitions need (:meth:`Strategy.gemm_panel_width`: the
  column-panel width of packed GEMM operands), read from *this* target, never from the host;
* the per-target program rewrites the model compiler applies before scheduling
  (:meth:`Strategy.lift_outputs`, :meth:`Strategy.lift`) and which intermediate stages the
  kernel keeps in memory (:meth:`Strategy.keeps_in_memory`);
* the knob space of a kernel's tunable stage (:meth:`Strategy.space`), whose default point is
  the schedule :meth:`Strategy.schedule_group` builds without a configuration.

:func:`strategy_for` picks the strategy of a target: :class:`~ember.strategy.cpu.CPUStrategy`
for ``llvm``, :class:`~ember.strategy.gpu.GPUStrategy` for ``cuda`` and ``rocm``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from .. import te
from ..arith import simplify
from ..ir import expr as E
from ..ir.visitor import free_vars, post_order_visit
from ..target import Target
from ..te import ComputeOp, IterVar, Tensor
from ..te.tensor_intrin import MatrixIntrinsic

if TYPE_CHECKING:
    from ..ops.layout_transform import LayoutPolicy
    from .space import ConfigEntity, ConfigSpace


#: Sizes the heuristics assume for symbolic extents (:func:`size_hints`); the loops stay symbolic.
_SIZE_HINTS: contextvars.ContextVar[Mapping[E.Var, int] | None] = contextvars.ContextVar("size_hints", default=None)


@contextlib.contextmanager
def size_hints(hints: Mapping[E.Var, int]) -> Iterator[None]:
    """In this block, :func:`extent` reads a symbolic extent as its value at ``hints`` (symbolic
    size -> typical value): schedules of kernels compiled for every size (:mod:`ember.model.symbolic`)
    choose their tiles for a typical size instead of treating the size as 1. The loops keep their
    symbolic extents (non-dividing splits get guards as usual)."""
    token = _SIZE_HINTS.set(dict(hints))
    try:
        yield
    finally:
        _SIZE_HINTS.reset(token)


def extent(iv: IterVar, literal: bool = False) -> int:
    """The constant extent of ``iv``'s domain (after simplification); 1 when it is not a
    constant (a symbolic size), so heuristics treat unknown extents as small — or, inside
    :func:`size_hints`, its value at the hinted sizes.

    With ``literal``, only an extent written as an integer literal counts (no simplification):
    a reduction axis made as ``te.reduce_axis((0, K))`` has extent ``K - 0`` and counts as 1.
    The CPU heuristics were tuned reading extents that way, and keep doing so at their default
    points (so their loop IR does not change); knob spaces use the true extents."""
    if iv.dom is None:
        return 1
    v = E.const_int_value(iv.dom.extent if literal else simplify(iv.dom.extent))
    hints = _SIZE_HINTS.get()
    if v is None and hints and not literal:
        from ..ir.visitor import substitute

        v = E.const_int_value(simplify(substitute(iv.dom.extent, {k: E.const(n, k.dtype) for k, n in hints.items()})))
    return int(v) if v is not None else 1


class Strategy(ABC):
    """How kernels are scheduled for ``target`` (see the module docstring). Subclasses implement
    :meth:`gemm_panel_width` and :meth:`schedule_group` and may override :meth:`space`; the
    program rewrites default to none."""

    def __init__(self, target: Target | str):
        self.target = Target(target)

    @property
    def is_gpu(self) -> bool:
        """True when the strategy schedules for a GPU."""
        return self.target.is_gpu

    @abstractmethod
    def gemm_panel_width(self, dtype: str = "float32") -> int:
        """The width ``nr`` of the column panels a packed GEMM's right operand is stored in
        (``[N / nr, K, nr]``), for elements of ``dtype``. Always >= 1."""

    @abstractmethod
    def schedule_group(
        self, outs: Sequence[Tensor], keep: set[str] | frozenset[str] = frozenset(), config: ConfigEntity | None = None
    ) -> te.Schedule:
        """The schedule of one fused kernel computing ``outs``. Stages named in ``keep`` are not
        inlined. ``config`` (a point of :meth:`space` of the same outputs) sets the tunable
        stage's knobs; without it the space's default point is used."""

    def tc_split_k(self, batch: int, mp: int, np_: int, kp: int) -> int:
        """Parts a tensor-core product's reduction is split into (:class:`ember.ops.layout.Layout`);
        1 unless a subclass says otherwise."""
        return 1

    def packs_batched_gemm(self) -> bool:
        """Whether a batch of float32 products of two computed operands runs on the packed GEMM
        (:class:`ember.ops.layout.Layout`); False unless a subclass says otherwise."""
        return False

    def gemm_split_k(self, batch: int, m: int, n: int, k0: int, taps: int) -> int:
        """Parts a packed GEMM's first reduction axis is split into (:class:`ember.ops.layout.Layout`);
        1 (no split) unless a subclass says otherwise."""
        return 1

    def matrix_intrinsic(self, dtype: str) -> MatrixIntrinsic | None:
        """The matrix instruction products of two ``dtype`` operands run on, or None (the
        default: no matrix unit)."""
        return None

    def space(self, outs: Sequence[Tensor]) -> ConfigSpace | None:
        """The knob space of the tunable stage of the kernel computing ``outs`` (its packed GEMM),
        or None when the kernel has no knobs."""
        return None

    def lift_outputs(self, outs: Sequence[Tensor]) -> list[Tensor]:
        """The kernel's outputs as the target computes them (a GPU computes a 0-d output as a
        one-element vector: the same bytes). The default keeps them."""
        return list(outs)

    def lift(self, outs: Sequence[Tensor]) -> list[Tensor]:
        """The program computing ``outs`` rewritten for the target before it is scheduled
        (computing the same values). The default keeps it."""
        return list(outs)

    def keeps_in_memory(self, op: ComputeOp) -> bool:
        """True when intermediate stage ``op`` is kept in a buffer the memory plan provides (a
        workspace argument of the kernel): stages flagged ``workspace``."""
        return op.workspace

    def layout_policy(self) -> LayoutPolicy | None:
        """The layouts this target wants graph nodes to run in (a
        :class:`~ember.ops.layout_transform.LayoutPolicy`, applied by the graph pass
        :class:`ember.graph.alter_layout.AlterLayout`), or None for no preference: the graph
        keeps its layouts. The default is None."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.target})"


def strategy_for(target: Target | str, tf32: bool = False) -> Strategy:
    """The strategy of ``target``: GPU strategy for ``cuda`` and ``rocm``, CPU strategy for
    ``llvm`` (which reads that target's vector width, whatever the host is). ``tf32`` lets a GPU
    run float32 products on TF32 tensor cores (``precision="tf32"``); the CPU ignores it."""
    tgt = Target(target)
    if tgt.is_gpu:
        from .gpu import GPUStrategy

        return GPUStrategy(tgt, tf32=tf32)
    from .cpu import CPUStrategy

    return CPUStrategy(tgt)


@functools.cache
def host_strategy() -> Strategy:
    """The CPU strategy of the host (``Target("llvm")``): what code that builds operators without
    naming a target gets."""
    return strategy_for("llvm")


def first_tagged(outs: Sequence[Tensor], tag: str) -> ComputeOp | None:
    """The first compute operation (producers first) with ``tag`` that ``outs`` depend on."""
    from ..te.rewrite import post_order

    for op in post_order([o.op for o in outs]):
        if isinstance(op, ComputeOp) and op.tag == tag:
            return op
    return None


def reads_reduced_innermost(op: ComputeOp) -> bool:
    """True when ``op`` reads some tensor with a reduction variable in its last index: the
    values one output combines lie next to each other in memory (a row sum), so a split of the
    reduction (GPU threads, CPU vector lanes) reads consecutive addresses; False for a column
    sum, whose consecutive outputs read consecutive addresses instead."""
    rvars = {iv.var for iv in op.reduce_axis}
    found: list[bool] = []

    def visit(n: object) -> None:
        if isinstance(n, E.ProducerLoad) and n.indices and rvars & set(free_vars(n.indices[-1])):
            found.append(True)

    for b in op.body:
        post_order_visit(b, visit)
    return bool(found)
