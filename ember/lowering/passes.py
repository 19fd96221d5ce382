"""The loop passes of :func:`ember.lower` as :class:`~ember.transform.Pass` objects.

``lower`` runs :class:`ScheduleToStmt` (the entry: a schedule in, a statement out, the lowering
state kept on the pass object for :class:`FlattenStorage`), then the :class:`Sequential` that
:func:`default_loop_pipeline` builds, every ``Stmt -> Stmt``::

    FlattenStorage  Simplify  PartitionLoops  Simplify  UnrollLoops  VectorizeLoops  Simplify

=================  =========  ========  ====================================================
pass               opt_level  required  what it gives
=================  =========  ========  ====================================================
ScheduleToStmt     0          yes       loop nests with tensor-level loads and stores
FlattenStorage     0          yes       ``Buffer`` accesses with one flat index each
Simplify           1          no        simplified expressions; provable guards removed
PartitionLoops     2          no        guard-free main loops and guarded tails
UnrollLoops        1          no        ``unroll`` loops expanded (else left as serial loops)
VectorizeLoops     1          no        ``vectorize`` loops as ``Ramp``/``Broadcast`` vector code
=================  =========  ========  ====================================================

Every non-required pass keeps the meaning of the code, so any of them may be disabled (or skipped
by a lower ``opt_level``) and the function still computes the same values: an ``unroll`` or
``vectorize`` loop that is not transformed is compiled as a serial loop.
"""

from __future__ import annotations

from typing import Any

from ..errors import LoweringError
from ..ir import stmt as S
from ..ir.buffer import Buffer
from ..target import Target
from ..te.schedule import Schedule
from ..transform import Pass, PassContext, Sequential
from .flatten import flatten_storage
from .loops import unroll_loops, vectorize_loops
from .partition import partition_loops
from .schedule_ops import StageKey, _Lowering, schedule_to_stmt
from .stmt_simplify import simplify_stmt

__all__ = [
    "FlattenStorage",
    "PartitionLoops",
    "ScheduleToStmt",
    "Simplify",
    "UnrollLoops",
    "VectorizeLoops",
    "default_loop_pipeline",
]


class ScheduleToStmt(Pass):
    """The pipeline's entry: ``Schedule -> Stmt`` (see :func:`~ember.lowering.schedule_ops.schedule_to_stmt`).

    After it ran, ``lowering`` holds the lowering state (stage keys, realize regions) that
    :class:`FlattenStorage` needs; use one instance per lowering."""

    name = "ScheduleToStmt"
    required = True
    contract = (
        "needs a Schedule; gives the loop nest of every stage (inlined stages substituted, bounds "
        "inferred, guards for non-dividing splits) with tensor-level ProducerLoad/ProducerStore"
    )

    def __init__(self, target: Any = None) -> None:
        self.lowering: _Lowering | None = None
        self.target = target

    def transform(self, ir: Any, ctx: PassContext) -> S.Stmt:
        """The loop nests of schedule ``ir``; sets ``self.lowering``."""
        if not isinstance(ir, Schedule):
            raise LoweringError(f"ScheduleToStmt needs a schedule from te.create_schedule, got {type(ir).__name__}")
        stmt, self.lowering = schedule_to_stmt(ir, self.target)
        return stmt


class FlattenStorage(Pass):
    """Tensors to :class:`~ember.ir.buffer.Buffer` accesses with one flat index
    (see :func:`~ember.lowering.flatten.flatten_storage`).

    ``lowering`` is :attr:`ScheduleToStmt.lowering` of the schedule the statement came from and
    ``arg_buffers`` the buffers of the function's tensor arguments, by stage key."""

    name = "FlattenStorage"
    required = True
    contract = (
        "needs ScheduleToStmt's output and its lowering state; gives a Stmt with no ProducerRealize/"
        "ProducerLoad/ProducerStore: every access is a BufferLoad/BufferStore with one flat index"
    )

    def __init__(self, lowering: _Lowering, arg_buffers: dict[StageKey, Buffer]) -> None:
        self.lowering = lowering
        self.arg_buffers = arg_buffers

    def transform(self, ir: Any, ctx: PassContext) -> S.Stmt:
        """``ir`` with tensors replaced by flat buffers."""
        return flatten_storage(ir, self.lowering, self.arg_buffers)


class Simplify(Pass):
    """Simplification under loop ranges (see :func:`~ember.lowering.stmt_simplify.simplify_stmt`)."""

    name = "Simplify"
    opt_level = 1
    contract = (
        "needs any Stmt; gives the same stores with expressions simplified under loop ranges, "
        "guards provably true removed, provably false branches and extent-1 loops gone"
    )

    def transform(self, ir: Any, ctx: PassContext) -> S.Stmt:
        """``ir`` simplified."""
        return simplify_stmt(ir)


class PartitionLoops(Pass):
    """Loop partitioning (see :mod:`ember.lowering.partition`)."""

    name = "PartitionLoops"
    opt_level = 2
    contract = (
        "needs a flattened Stmt; gives the same stores with each loop whose body has a guard linear "
        "in its variable split into a guard-free main loop and a guarded tail"
    )

    def transform(self, ir: Any, ctx: PassContext) -> S.Stmt:
        """``ir`` with guarded loops partitioned."""
        return partition_loops(ir)


class UnrollLoops(Pass):
    """Unrolling of ``unroll``-annotated loops (see :func:`~ember.lowering.loops.unroll_loops`).

    ``max_unroll``: the longest loop expanded (longer ones become serial loops). ``target`` is
    kept for target-dependent limits; nothing uses it yet."""

    name = "UnrollLoops"
    opt_level = 1
    contract = (
        "needs a flattened Stmt; gives the same stores with every UNROLLED loop of constant extent "
        "<= max_unroll replaced by copies of its body and the other UNROLLED loops made serial"
    )

    def __init__(self, max_unroll: int = 256, target: Target | None = None) -> None:
        self.max_unroll = max_unroll
        self.target = target

    def transform(self, ir: Any, ctx: PassContext) -> S.Stmt:
        """``ir`` with unrolled loops expanded."""
        return unroll_loops(ir, self.max_unroll)


class VectorizeLoops(Pass):
    """Vectorization of ``vectorize``-annotated loops (see :func:`~ember.lowering.loops.vectorize_loops`).

    ``target`` is kept for a target-dependent vector width; nothing uses it yet."""

    name = "VectorizeLoops"
    opt_level = 1
    contract = (
        "needs a flattened Stmt; gives the same stores with each vectorizable VECTORIZED loop of "
        "constant extent turned into Ramp/Broadcast vector operations (a scalar tail where a guard "
        "is not provable for the whole vector); the others made serial"
    )

    def __init__(self, target: Target | None = None) -> None:
        self.target = target

    def transform(self, ir: Any, ctx: PassContext) -> S.Stmt:
        """``ir`` with vectorized loops turned into vector operations."""
        return vectorize_loops(ir)


class PipelineSharedCopies(Pass):
    """Software pipelining of loops marked by ``Stage.pipeline`` (see
    :func:`~ember.lowering.pipeline.pipeline_shared_copies`); copies become ``cp.async`` on
    ``cuda`` targets of sm_80 and newer."""

    name = "PipelineSharedCopies"
    required = True
    contract = (
        "needs a flattened, vectorized Stmt; gives each pipeline-marked loop with its shared staging "
        "buffers in slots filled stages - 1 iterations ahead, waits and barriers before each use"
    )

    def __init__(self, target: Target | None = None) -> None:
        self.target = target

    def transform(self, ir: Any, ctx: PassContext) -> S.Stmt:
        """``ir`` with marked loops pipelined."""
        from .pipeline import pipeline_shared_copies

        t = self.target
        sm = int("".join(ch for ch in t.mcpu if ch.isdigit()) or 0) if t is not None and t.kind == "cuda" else 0
        return pipeline_shared_copies(ir, async_copies=sm >= 80)


def default_loop_pipeline(
    lowering: _Lowering, arg_buffers: dict[StageKey, Buffer], target: Target | None = None
) -> Sequential:
    """The ``Stmt -> Stmt`` passes :func:`ember.lower` runs after :class:`ScheduleToStmt`, as one
    :class:`~ember.transform.Sequential` named ``LowerLoops``; ``lowering`` and ``arg_buffers``
    are what :class:`FlattenStorage` needs, ``target`` goes to the passes that may use it."""
    return Sequential(
        [
            FlattenStorage(lowering, arg_buffers),
            Simplify(),
            PartitionLoops(),
            Simplify(),
            UnrollLoops(target=target),
            VectorizeLoops(target=target),
            PipelineSharedCopies(target=target),
            Simplify(),
        ],
        name="LowerLoops",
    )
