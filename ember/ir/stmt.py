"""Statements of the loop IR. Immutable; passes build new trees."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .buffer import Buffer
from .expr import PrimExpr, Var


class ForKind(Enum):
    """How a loop runs."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


#: ``For.annotations`` key of a ``PARALLEL`` loop whose chunks are statically assigned to
#: threads (value True): each thread runs the same iterations on every call (the CPU pool's
#: static mode, for products that stream a large constant operand).
STATIC_PARALLEL = "static_parallel"


class Stmt:
    """Base class of statements."""

    __slots__ = ()

    def __str__(self) -> str:
        from .printer import stmt_str

        return stmt_str(self)


def _node(cls: type) -> type:
    return dataclass(frozen=True, eq=False, slots=True, repr=False)(cls)


@_node
class For(Stmt):
    """``for loop_var in [min, min + extent): body``.

    For ``THREAD_BINDING`` loops ``thread_tag`` names the hardware index (``"threadIdx.x"``) the
    loop variable is bound to."""

    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: ForKind
    body: Stmt
    thread_tag: str = ""
    annotations: tuple[tuple[str, Any], ...] = ()


@_node
class BufferStore(Stmt):
    """``buffer[indices] = value`` (one index after flattening; vector values store lanes)."""

    buffer: Buffer
    value: PrimExpr
    indices: tuple[PrimExpr, ...]
    predicate: PrimExpr | None = None


@_node
class IfThenElse(Stmt):
    """``if condition: then_case else: else_case``."""

    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@_node
class SeqStmt(Stmt):
    """Statements in order."""

    seq: tuple[Stmt, ...]


@_node
class LetStmt(Stmt):
    """``var = value`` visible in ``body``."""

    var: Var
    value: PrimExpr
    body: Stmt


@_node
class Allocate(Stmt):
    """Storage for ``buffer`` (in its scope) that lives while ``body`` runs."""

    buffer: Buffer
    body: Stmt


@_node
class Evaluate(Stmt):
    """Evaluate an expression for its effect (a barrier, an intrinsic call)."""

    value: PrimExpr


@_node
class AttrStmt(Stmt):
    """A key/value annotation over ``body`` (``"pragma"``, ``"storage_align"``)."""

    node: Any
    key: str
    value: Any
    body: Stmt


@_node
class Assert(Stmt):
    """Check ``condition`` at run time; fail with ``message``."""

    condition: PrimExpr
    message: str
    body: Stmt


@_node
class ProducerStore(Stmt):
    """Store into a tensor's output before storage is assigned (produced by schedule lowering)."""

    producer: Any
    value: PrimExpr
    indices: tuple[PrimExpr, ...]


@_node
class ProducerRealize(Stmt):
    """The region of a tensor's output that ``body`` computes and reads (bounds per dimension)."""

    producer: Any
    bounds: tuple[tuple[PrimExpr, PrimExpr], ...]  # (min, extent) per dimension
    body: Stmt
    scope: str = "global"


def seq(*stmts: Stmt | None) -> Stmt:
    """A SeqStmt of the non-empty statements, flattened (a single statement is returned as is)."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.seq)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))


NOP = SeqStmt(())


@dataclass(eq=False)
class PrimFunc:
    """A function of the loop IR: parameters (buffers or scalar vars) and a body.

    ``params`` are the arguments in call order: a :class:`Buffer` for each tensor and a
    :class:`Var` for each symbolic size that does not appear in a buffer shape. ``attrs`` holds
    ``"target"`` and, for device kernels, the launch configuration."""

    name: str
    params: list[Buffer | Var]
    body: Stmt
    attrs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        from .printer import func_str

        return func_str(self)

    def script(self) -> str:
        """The readable text of the function."""
        return str(self)

    def with_body(self, body: Stmt) -> PrimFunc:
        """A copy with another body."""
        return PrimFunc(self.name, list(self.params), body, dict(self.attrs))
