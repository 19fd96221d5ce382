"""Loop transformations: unrolling and vectorization.

:func:`unroll_loops` replaces each ``UNROLLED`` loop of constant extent (up to
``max_unroll`` iterations) by copies of its body, one per iteration; longer or symbolic ones
become serial loops.

:func:`vectorize_loops` turns each ``VECTORIZED`` loop of constant extent into vector operations:
the loop variable becomes the vector ``ramp(min, 1, lanes)``, contiguous accesses become vector
loads and stores, scalars are broadcast. A condition that depends on the loop variable (the guard
of a split that does not divide) becomes a *scalar tail*: when the guard holds at both ends of
the vector (and so, being linear, in between) the vector body runs, otherwise the original
scalar loop does. A body that cannot be vectorized (an inner loop, a store whose address does
not depend on the lane) is left as a serial loop, so the result is always correct.
"""

from __future__ import annotations

from typing import Any

from ..arith import simplify
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator, free_vars, post_order_visit, substitute


def unroll_loops(stmt: S.Stmt, max_unroll: int = 256) -> S.Stmt:
    """``stmt`` with constant-extent unrolled loops expanded (see module doc)."""

    class _Unroll(Mutator):
        def visit_For(self, s: S.For) -> S.Stmt:
            body = self.visit(s.body)
            if s.kind is S.ForKind.UNROLLED:
                ext = simplify(s.extent)
                if isinstance(ext, E.IntImm) and ext.value <= max_unroll:
                    return (
                        S.seq(*[substitute(body, {s.loop_var: simplify(s.min + k)}) for k in range(ext.value)])
                        if ext.value
                        else S.NOP
                    )
                return S.For(s.loop_var, s.min, s.extent, S.ForKind.SERIAL, body, "", s.annotations)
            if body is s.body:
                return s
            return S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)

    return _Unroll().visit(stmt)


class _NotVectorizable(Exception):
    pass


def _depends(e: Any, var: E.Var) -> bool:
    found = []
    post_order_visit(e, lambda n: found.append(1) if n is var else None)
    return bool(found)


def _is_unit(x: E.PrimExpr) -> bool:
    return isinstance(x, E.IntImm) and x.value == 1


class _VecExpr(Mutator):
    """Rewrites an expression so that ``var`` is the ramp of ``lanes`` lanes."""

    def __init__(self, var: E.Var, lanes: int, lo: E.PrimExpr, let_map: dict[E.Var, E.Var]):
        self.var = var
        self.lanes = lanes
        self.ramp = E.Ramp(lo, E.const(1, var.dtype), lanes, var.dtype.with_lanes(lanes))
        self.let_map = let_map

    def bcast(self, x: E.PrimExpr) -> E.PrimExpr:
        if x.dtype.lanes == self.lanes:
            return x
        if isinstance(x, E.Broadcast):
            return E.Broadcast(x.value, self.lanes, x.dtype.with_lanes(self.lanes))
        return E.Broadcast(x, self.lanes, x.dtype.with_lanes(self.lanes))

    def visit_Var(self, v: E.Var) -> E.PrimExpr:
        if v is self.var:
            return self.ramp
        return self.let_map.get(v, v)

    def _binary(self, e: Any) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if a.dtype.lanes == 1 and b.dtype.lanes == 1:
            return e if (a is e.a and b is e.b) else type(e)(a, b, e.dtype)
        # A uniform operand (a broadcast) takes part as the scalar it broadcasts.
        if isinstance(a, E.Broadcast):
            a = a.value
        if isinstance(b, E.Broadcast):
            b = b.value
        if a.dtype.lanes == 1 and b.dtype.lanes == 1:
            return self.bcast(simplify(type(e)(a, b, e.dtype)))
        # Keep affine index arithmetic as ramps so loads stay contiguous.
        if isinstance(e, (E.Add, E.Sub)):
            ra, rb = isinstance(a, E.Ramp), isinstance(b, E.Ramp)
            if ra and b.dtype.lanes == 1:
                return E.Ramp(simplify(type(e)(a.base, b, a.base.dtype)), a.stride, self.lanes, a.dtype)
            if rb and a.dtype.lanes == 1 and isinstance(e, E.Add):
                return E.Ramp(simplify(E.Add(a, b.base, b.base.dtype)), b.stride, self.lanes, b.dtype)
            if ra and rb:
                return E.Ramp(
                    simplify(type(e)(a.base, b.base, a.base.dtype)),
                    simplify(type(e)(a.stride, b.stride, a.stride.dtype)),
                    self.lanes,
                    a.dtype,
                )
        if isinstance(e, (E.FloorDiv, E.FloorMod)) and isinstance(a, E.Ramp) and _is_unit(a.stride):
            # ramp(base, 1, n) // c with c a multiple of n and base a multiple of n: every lane
            # falls in the same block of c, so the quotient is uniform and the remainder a ramp.
            c = b.value if isinstance(b, E.IntImm) else None
            base_mod = simplify(E.floormod(a.base, self.lanes))
            if c and c > 0 and c % self.lanes == 0 and isinstance(base_mod, E.IntImm) and base_mod.value == 0:
                if isinstance(e, E.FloorDiv):
                    return self.bcast(simplify(E.floordiv(a.base, c)))
                return E.Ramp(simplify(E.floormod(a.base, c)), a.stride, self.lanes, a.dtype)
        if isinstance(e, E.Mul):
            if isinstance(a, E.Ramp) and b.dtype.lanes == 1:
                return E.Ramp(simplify(a.base * b), simplify(a.stride * b), self.lanes, a.dtype)
            if isinstance(b, E.Ramp) and a.dtype.lanes == 1:
                return E.Ramp(simplify(b.base * a), simplify(b.stride * a), self.lanes, b.dtype)
        return type(e)(self.bcast(a), self.bcast(b), e.dtype.with_lanes(self.lanes))

    visit_Add = visit_Sub = visit_Mul = visit_Div = visit_Mod = _binary
    visit_FloorDiv = visit_FloorMod = visit_Min = visit_Max = _binary
    visit_EQ = visit_NE = visit_LT = visit_LE = visit_And = visit_Or = _binary

    def visit_Not(self, e: E.Not) -> E.PrimExpr:
        a = self.visit(e.a)
        return E.Not(a, e.dtype.with_lanes(a.dtype.lanes))

    def visit_Cast(self, e: E.Cast) -> E.PrimExpr:
        v = self.visit(e.value)
        if v.dtype.lanes == 1:
            return e if v is e.value else E.Cast(e.dtype, v)
        if isinstance(v, E.Ramp) and e.dtype.is_int:
            return E.Ramp(
                E.cast(e.dtype, v.base), E.cast(e.dtype, v.stride), self.lanes, e.dtype.with_lanes(self.lanes)
            )
        return E.Cast(e.dtype.with_lanes(self.lanes), v)

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        c, t, f = self.visit(e.condition), self.visit(e.true_value), self.visit(e.false_value)
        if max(c.dtype.lanes, t.dtype.lanes, f.dtype.lanes) == 1:
            return e if (c is e.condition and t is e.true_value and f is e.false_value) else E.Select(c, t, f, e.dtype)
        # Loads in a branch may be out of bounds for the lanes that do not take it: those stay scalar.
        if _has_load(e.true_value) or _has_load(e.false_value):
            raise _NotVectorizable
        return E.Select(self.bcast(c), self.bcast(t), self.bcast(f), e.dtype.with_lanes(self.lanes))

    def visit_Call(self, e: E.Call) -> E.PrimExpr:
        args = [self.visit(a) for a in e.args]
        if all(a.dtype.lanes == 1 for a in args):
            return e if all(a is b for a, b in zip(args, e.args)) else E.Call(e.dtype, e.op, tuple(args))
        return E.Call(e.dtype.with_lanes(self.lanes), e.op, tuple(self.bcast(a) for a in args))

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        idx = tuple(self.visit(i) for i in e.indices)
        if all(i.dtype.lanes == 1 for i in idx):
            return e if all(a is b for a, b in zip(idx, e.indices)) else E.BufferLoad(e.buffer, idx, e.dtype)
        return E.BufferLoad(e.buffer, tuple(self.bcast(i) for i in idx), e.dtype.with_lanes(self.lanes))

    def visit_Let(self, e: E.Let) -> E.PrimExpr:
        raise _NotVectorizable

    def visit_Ramp(self, e: E.Ramp) -> E.PrimExpr:
        raise _NotVectorizable

    def visit_Broadcast(self, e: E.Broadcast) -> E.PrimExpr:
        raise _NotVectorizable


def _has_load(e: E.PrimExpr) -> bool:
    found = []
    post_order_visit(e, lambda n: found.append(1) if isinstance(n, E.BufferLoad) else None)
    return bool(found)


class _VecStmt:
    def __init__(self, var: E.Var, lanes: int, lo: E.PrimExpr):
        self.var, self.lanes, self.lo = var, lanes, lo
        self.let_map: dict[E.Var, E.Var] = {}

    def expr(self, e: E.PrimExpr) -> E.PrimExpr:
        return _VecExpr(self.var, self.lanes, self.lo, self.let_map).visit(e)

    def stmt(self, s: S.Stmt) -> S.Stmt:
        if isinstance(s, S.SeqStmt):
            return S.seq(*[self.stmt(x) for x in s.seq])
        if isinstance(s, S.BufferStore):
            idx = tuple(self.expr(i) for i in s.indices)
            val = self.expr(s.value)
            if all(i.dtype.lanes == 1 for i in idx):
                if val.dtype.lanes != 1:
                    raise _NotVectorizable  # every lane would write the same address
                return s
            vec = _VecExpr(self.var, self.lanes, self.lo, self.let_map)
            return S.BufferStore(s.buffer, vec.bcast(val), tuple(vec.bcast(i) for i in idx))
        if isinstance(s, S.LetStmt):
            val = self.expr(s.value)
            if val.dtype.lanes == 1:
                return S.LetStmt(s.var, val, self.stmt(s.body))
            nv = E.Var(s.var.name, val.dtype)
            self.let_map[s.var] = nv
            return S.LetStmt(nv, val, self.stmt(s.body))
        if isinstance(s, S.IfThenElse):
            if _depends(s.condition, self.var) or any(v in self.let_map for v in free_vars(s.condition)):
                raise _NotVectorizable
            return S.IfThenElse(s.condition, self.stmt(s.then_case), self.stmt(s.else_case) if s.else_case else None)
        if isinstance(s, S.Evaluate):
            if _depends(s.value, self.var):
                raise _NotVectorizable
            return s
        raise _NotVectorizable


def _split_guard(body: S.Stmt, var: E.Var) -> tuple[E.PrimExpr | None, S.Stmt]:
    """If ``body`` is ``if cond(var): inner`` with no else, return (cond, inner)."""
    if isinstance(body, S.IfThenElse) and body.else_case is None and _depends(body.condition, var):
        return body.condition, body.then_case
    return None, body


def _is_linear_guard(cond: E.PrimExpr, var: E.Var | None = None) -> bool:
    """Conjunctions of integer comparisons: true on a convex set of the loop variable (clauses
    that do not mention ``var`` are constant over the loop and may be anything)."""
    if var is not None and not _depends(cond, var):
        return True
    if isinstance(cond, E.And):
        return _is_linear_guard(cond.a, var) and _is_linear_guard(cond.b, var)
    if isinstance(cond, (E.LT, E.LE)) and cond.a.dtype.is_int:
        for n in _nodes(cond):
            if isinstance(n, (E.FloorDiv, E.FloorMod, E.Div, E.Mod, E.Min, E.Max, E.Select, E.BufferLoad)):
                return False
            if isinstance(n, E.Mul) and not (isinstance(n.a, E.IntImm) or isinstance(n.b, E.IntImm)):
                return False
        return True
    return False


def _nodes(e: Any) -> list[Any]:
    out: list[Any] = []
    post_order_visit(e, out.append)
    return out


def vectorize_loops(stmt: S.Stmt) -> S.Stmt:
    """``stmt`` with vectorized loops turned into vector operations (see module doc)."""

    class _Vec(Mutator):
        def visit_For(self, s: S.For) -> S.Stmt:
            body = self.visit(s.body)
            if s.kind is not S.ForKind.VECTORIZED:
                return (
                    s
                    if body is s.body
                    else S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)
                )
            serial = S.For(s.loop_var, s.min, s.extent, S.ForKind.SERIAL, body, "", s.annotations)
            ext = simplify(s.extent)
            if not isinstance(ext, E.IntImm) or ext.value <= 1:
                return serial
            lanes = ext.value
            guard, inner = _split_guard(body, s.loop_var)
            if guard is not None and not _is_linear_guard(guard, s.loop_var):
                return serial
            try:
                vec_body = _VecStmt(s.loop_var, lanes, s.min).stmt(inner)
            except _NotVectorizable:
                return serial
            if guard is None:
                return vec_body
            first = simplify(substitute(guard, {s.loop_var: s.min}))
            last = simplify(substitute(guard, {s.loop_var: simplify(s.min + lanes - 1)}))
            return S.IfThenElse(E.logical_and(first, last), vec_body, serial)

    return _Vec().visit(stmt)
