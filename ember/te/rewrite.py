"""Rewriting a tensor-expression program: replace some tensors by others and rebuild every
operation that reads them (directly or through other rebuilt operations).

Schedules never change what a program computes; these rewrites do, so they run before a schedule
is made: the graph compiler uses them to read a constant stage's precomputed value from a new
placeholder, and the GPU schedules to give a scalar reduction an axis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..ir import expr as E
from ..ir.visitor import Mutator
from .tensor import ComputeOp, IterVar, Operation, Tensor


class LoadMutator(Mutator):
    """A mutator over tensor-expression bodies that rewrites loads: a reduction's sources and
    condition are visited, its axes (iteration variables, not expressions) are kept."""

    def visit_Reduce(self, e: E.Reduce) -> E.PrimExpr:
        src = tuple(self.visit(x) for x in e.source)
        cond = self.visit(e.condition)
        if all(a is b for a, b in zip(src, e.source)) and cond is e.condition:
            return e
        return E.Reduce(e.combiner, src, e.axis, cond, e.value_index, e.dtype)


class _LoadRewriter(LoadMutator):
    """Loads of mapped tensors read the replacement; a replacement of another shape with one
    element (a lifted scalar) is read at index 0."""

    def __init__(self, mapping: dict[tuple[int, int], Tensor]):
        self.mapping = mapping

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        e = self.generic_mutate(e)
        new = self.mapping.get((id(e.producer.op), e.producer.value_index))
        if new is None:
            return e
        same = len(new.shape) == len(e.producer.shape)
        idx = tuple(e.indices) if same else (E.const(0),)
        return E.ProducerLoad(new, idx, e.dtype)


def post_order(ops: Sequence[Operation]) -> list[Operation]:
    """Every operation the given operations depend on (themselves included), producers before
    consumers, each once."""
    order: list[Operation] = []
    seen: set[int] = set()

    def visit(op: Operation) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for op in ops:
        visit(op)
    return order


def rewrite(
    outs: Sequence[Tensor],
    replace: Callable[[Operation], Tensor | tuple[IterVar, ...] | None],
) -> list[Tensor]:
    """Rebuild the program computing ``outs``. For each operation (producers first),
    ``replace(op)`` may return a tensor that takes the place of the operation's (single) output,
    or a new axis tuple for a compute operation to be rebuilt with (same body); ``None`` keeps it.
    Operations reading a replaced tensor are rebuilt. Returns the outputs of the new program."""
    mapping: dict[tuple[int, int], Tensor] = {}
    for op in post_order([o.op for o in outs]):
        choice = replace(op)
        if isinstance(choice, Tensor):
            mapping[(id(op), 0)] = choice
            continue
        if not isinstance(op, ComputeOp):
            continue
        reads_mapped = any((id(t.op), t.value_index) in mapping for t in op.input_tensors)
        if choice is None and not reads_mapped:
            continue
        rw = _LoadRewriter(mapping)
        body = tuple(rw.visit(b) for b in op.body)
        axis = op.axis if choice is None else choice
        new = ComputeOp(op.name, op.tag, axis, body, op.attrs)
        for k in range(op.num_outputs):
            mapping[(id(op), k)] = new.output(k)
    return [mapping.get((id(o.op), o.value_index), o) for o in outs]
