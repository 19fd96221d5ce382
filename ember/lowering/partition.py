"""Loop partitioning: remove guards from the iterations where they always hold.

A split that does not divide its axis leaves a guard such as ``if i.outer*6 + i.inner < 1024``
inside the loop nest. :func:`partition_loops` splits a loop ``for v in [lo, hi)`` into a main
part ``[lo, p)`` in which every such guard is known to hold (it is removed there) and a tail
``[p, hi)`` that keeps the original body. ``p`` may be symbolic (``n``). A guard qualifies when it
is a comparison that is linear in ``v`` with a positive coefficient on the "less than" side (true
for small ``v``), with the variables of inner loops relaxed to their ranges. Tails are not
partitioned again, so the code grows by at most one copy per partitioned loop level.

Guarantee: for every value of the loop variables the partitioned statement performs the same
stores as the original.
"""

from __future__ import annotations

from typing import Any

from ..arith import simplify, structural_key, symbolic_interval
from ..arith.linear import Linear
from ..arith.simplifier import _Simplifier
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator, free_vars


def _conjuncts(c: E.PrimExpr) -> list[E.PrimExpr]:
    if isinstance(c, E.And):
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _inner_loops(s: S.Stmt) -> dict[E.Var, tuple[E.PrimExpr, E.PrimExpr]]:
    out: dict[E.Var, tuple[E.PrimExpr, E.PrimExpr]] = {}

    def walk(x: Any) -> None:
        if isinstance(x, S.For):
            out[x.loop_var] = (x.min, simplify(x.min + x.extent - 1))
            walk(x.body)
        elif isinstance(x, S.SeqStmt):
            for y in x.seq:
                walk(y)
        elif isinstance(x, (S.LetStmt, S.Allocate, S.AttrStmt, S.Assert)):
            walk(x.body)
        elif isinstance(x, S.IfThenElse):
            walk(x.then_case)
            walk(x.else_case)

    walk(s)
    return out


def _guards(s: S.Stmt) -> list[E.PrimExpr]:
    found: list[E.PrimExpr] = []

    def walk(x: Any) -> None:
        if isinstance(x, S.IfThenElse):
            found.extend(_conjuncts(x.condition))
            walk(x.then_case)
            walk(x.else_case)
        elif isinstance(x, S.For):
            walk(x.body)
        elif isinstance(x, S.SeqStmt):
            for y in x.seq:
                walk(y)
        elif isinstance(x, (S.LetStmt, S.Allocate, S.AttrStmt, S.Assert)):
            walk(x.body)

    walk(s)
    return found


def _split_point(cond: E.PrimExpr, v: E.Var, relax: dict[E.Var, tuple[E.PrimExpr, E.PrimExpr]]) -> E.PrimExpr | None:
    """The first value of ``v`` from which ``cond`` may fail (it holds for all smaller ``v``)."""
    if not isinstance(cond, (E.LT, E.LE)) or not cond.a.dtype.is_int or cond.a.dtype.lanes != 1:
        return None
    simp = _Simplifier({})
    diff = simp.linear(simplify(E.Sub(cond.a, cond.b, cond.a.dtype)))
    key = structural_key(v)
    entry = diff.terms.get(key)
    if entry is None or entry[1] <= 0:
        return None
    coef = entry[1]
    rest = Linear(diff.dtype, {k: t for k, t in diff.terms.items() if k != key}, diff.const)
    rest_expr = rest.to_expr()
    if any(x is v for x in free_vars(rest_expr)):
        return None
    itv = symbolic_interval(rest_expr, relax)
    if itv is None:
        return None
    hi = itv[1]
    if any(x in relax for x in free_vars(hi)):
        return None
    # cond: coef*v + rest < 0 (or <= 0). Holds for all rest when coef*v <= -hi - 1 (or -hi).
    bound = simplify(-hi - 1) if isinstance(cond, E.LT) else simplify(-hi)
    return simplify(E.floordiv(bound, coef) + 1)


class _DropGuards(Mutator):
    def __init__(self, keys: set[Any]):
        self.keys = keys

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        kept = [c for c in _conjuncts(s.condition) if structural_key(c) not in self.keys]
        then_case = self.visit(s.then_case)
        else_case = self.visit(s.else_case)
        if not kept:
            return then_case
        cond = kept[0]
        for c in kept[1:]:
            cond = E.logical_and(cond, c)
        return S.IfThenElse(cond, then_case, else_case)


class _Partition(Mutator):
    def visit_For(self, s: S.For) -> S.Stmt:
        if s.kind in (S.ForKind.THREAD_BINDING, S.ForKind.VECTORIZED):
            return s
        relax = _inner_loops(s.body)
        points: list[E.PrimExpr] = []
        keys: set[Any] = set()
        for g in _guards(s.body):
            if not any(x is s.loop_var for x in free_vars(g)):
                continue
            p = _split_point(g, s.loop_var, relax)
            if p is not None:
                points.append(p)
                keys.add(structural_key(g))
        if not points:
            body = self.visit(s.body)
            return (
                s if body is s.body else S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)
            )
        end = simplify(s.min + s.extent)
        split = points[0]
        for p in points[1:]:
            split = E.min_expr(split, p)
        split = simplify(E.max_expr(s.min, E.min_expr(split, end)))
        if isinstance(split, E.IntImm) and isinstance(s.min, E.IntImm) and split.value <= s.min.value:
            return s  # the guard may fail from the first iteration: nothing to gain
        main_body = self.visit(_DropGuards(keys).visit(s.body))
        main = S.For(s.loop_var, s.min, simplify(split - s.min), s.kind, main_body, s.thread_tag, s.annotations)
        tail_ext = simplify(end - split)
        if isinstance(tail_ext, E.IntImm) and tail_ext.value <= 0:
            return main
        tail = S.For(s.loop_var, split, tail_ext, s.kind, s.body, s.thread_tag, s.annotations)
        return S.seq(main, tail)


def partition_loops(stmt: S.Stmt) -> S.Stmt:
    """``stmt`` with guarded loops split into a guard-free main part and a tail (see module doc)."""
    return _Partition().visit(stmt)
