"""Bounds of integer expressions.

:func:`const_bound` gives constant lower and upper bounds (``None`` for unbounded) from the
constant ranges of the variables. :func:`symbolic_interval` gives symbolic bounds, used by bound
inference to find which region of a tensor a loop nest touches, with the variables of inner loops
relaxed to their ranges.
"""

from __future__ import annotations

from typing import Any

from ..ir import expr as E

Bound = tuple[int | None, int | None]


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _mul_bounds(x: Bound, y: Bound) -> Bound:
    lo_x, hi_x = x
    lo_y, hi_y = y
    if None in (lo_x, hi_x, lo_y, hi_y):
        # Known signs still give a bound in the common case of non-negative operands.
        if lo_x is not None and lo_y is not None and lo_x >= 0 and lo_y >= 0:
            hi = None if hi_x is None or hi_y is None else hi_x * hi_y
            return (lo_x * lo_y, hi)
        return (None, None)
    products = [lo_x * lo_y, lo_x * hi_y, hi_x * lo_y, hi_x * hi_y]  # type: ignore[operator]
    return (min(products), max(products))


def _floordiv(a: int | None, c: int) -> int | None:
    return None if a is None else a // c


def const_bound(e: Any, ranges: dict[E.Var, Bound] | None = None) -> Bound:
    """Constant bounds ``(lo, hi)`` of integer expression ``e`` (inclusive; None when unknown)."""
    ranges = ranges or {}
    if isinstance(e, int):
        return (e, e)
    if isinstance(e, E.IntImm):
        return (e.value, e.value)
    if isinstance(e, E.Var):
        if e in ranges:
            return ranges[e]
        if e.dtype.kind == "uint" or e.dtype.is_bool:
            return (0, None)
        return (None, None)
    if isinstance(e, E.Add):
        a, b = const_bound(e.a, ranges), const_bound(e.b, ranges)
        return (_add(a[0], b[0]), _add(a[1], b[1]))
    if isinstance(e, E.Sub):
        a, b = const_bound(e.a, ranges), const_bound(e.b, ranges)
        return (_add(a[0], None if b[1] is None else -b[1]), _add(a[1], None if b[0] is None else -b[0]))
    if isinstance(e, E.Mul):
        return _mul_bounds(const_bound(e.a, ranges), const_bound(e.b, ranges))
    if isinstance(e, (E.FloorDiv, E.Div)) and isinstance(e.b, E.IntImm) and e.b.value > 0:
        lo, hi = const_bound(e.a, ranges)
        c = e.b.value
        if isinstance(e, E.Div):  # truncation: same as floor for non-negative values
            if lo is not None and lo >= 0:
                return (lo // c, _floordiv(hi, c))
            return (
                None if lo is None else -((-lo) // c),
                None if hi is None else (hi // c if hi >= 0 else -((-hi) // c)),
            )
        return (_floordiv(lo, c), _floordiv(hi, c))
    if isinstance(e, E.FloorMod) and isinstance(e.b, E.IntImm) and e.b.value > 0:
        c = e.b.value
        lo, hi = const_bound(e.a, ranges)
        if lo is not None and hi is not None and lo // c == hi // c:
            return (lo % c, hi % c)
        return (0, c - 1)
    if isinstance(e, E.Mod) and isinstance(e.b, E.IntImm) and e.b.value > 0:
        lo, hi = const_bound(e.a, ranges)
        c = e.b.value
        if lo is not None and lo >= 0:
            if hi is not None and lo // c == hi // c:
                return (lo % c, hi % c)
            return (0, c - 1)
        return (-(c - 1), c - 1)
    if isinstance(e, E.Min):
        a, b = const_bound(e.a, ranges), const_bound(e.b, ranges)
        lo = None if a[0] is None or b[0] is None else min(a[0], b[0])
        hi = a[1] if b[1] is None else (b[1] if a[1] is None else min(a[1], b[1]))
        return (lo, hi)
    if isinstance(e, E.Max):
        a, b = const_bound(e.a, ranges), const_bound(e.b, ranges)
        lo = a[0] if b[0] is None else (b[0] if a[0] is None else max(a[0], b[0]))
        hi = None if a[1] is None or b[1] is None else max(a[1], b[1])
        return (lo, hi)
    if isinstance(e, E.Select):
        a, b = const_bound(e.true_value, ranges), const_bound(e.false_value, ranges)
        lo = None if a[0] is None or b[0] is None else min(a[0], b[0])
        hi = None if a[1] is None or b[1] is None else max(a[1], b[1])
        return (lo, hi)
    if isinstance(e, E.Cast) and e.dtype.is_int and e.value.dtype.is_int:
        lo, hi = const_bound(e.value, ranges)
        tlo, thi = e.dtype.min_value(), e.dtype.max_value()
        if lo is not None and hi is not None and tlo <= lo and hi <= thi:
            return (lo, hi)
        return (int(tlo), int(thi))
    if isinstance(e, (E.CmpOp, E.And, E.Or, E.Not)):
        return (0, 1)
    if e.dtype.is_int:
        return (int(e.dtype.min_value()), int(e.dtype.max_value())) if e.dtype.bits < 64 else (None, None)
    return (None, None)


SymBound = tuple[E.PrimExpr, E.PrimExpr] | None


def symbolic_interval(e: E.PrimExpr, relax: dict[E.Var, tuple[E.PrimExpr, E.PrimExpr]]) -> SymBound:
    """Symbolic inclusive bounds ``(lo, hi)`` of ``e`` when each var in ``relax`` takes any value in
    its ``(lo, hi)``; variables not in ``relax`` stay as they are. None when no bound is known."""
    from .simplifier import simplify

    def go(x: E.PrimExpr) -> SymBound:
        if isinstance(x, E.Var):
            return relax.get(x, (x, x))
        if isinstance(x, (E.IntImm, E.FloatImm)):
            return (x, x)
        if not _mentions(x, relax):
            return (x, x)
        if isinstance(x, E.Add):
            a, b = go(x.a), go(x.b)
            if a is None or b is None:
                return None
            return (a[0] + b[0], a[1] + b[1])
        if isinstance(x, E.Sub):
            a, b = go(x.a), go(x.b)
            if a is None or b is None:
                return None
            return (a[0] - b[1], a[1] - b[0])
        if isinstance(x, E.Mul):
            for u, v in ((x.a, x.b), (x.b, x.a)):
                if isinstance(v, E.IntImm):
                    a = go(u)
                    if a is None:
                        return None
                    return (a[0] * v, a[1] * v) if v.value >= 0 else (a[1] * v, a[0] * v)
            a, b = go(x.a), go(x.b)
            if a is None or b is None:
                return None
            if _nonneg(a[0]) and _nonneg(b[0]):
                return (a[0] * b[0], a[1] * b[1])
            return None
        if isinstance(x, E.FloorDiv) and isinstance(x.b, E.IntImm) and x.b.value > 0:
            a = go(x.a)
            return None if a is None else (E.floordiv(a[0], x.b), E.floordiv(a[1], x.b))
        if isinstance(x, E.Div) and isinstance(x.b, E.IntImm) and x.b.value > 0 and not x.dtype.is_float:
            a = go(x.a)
            if a is None or not _nonneg(a[0]):
                return None
            return (E.floordiv(a[0], x.b), E.floordiv(a[1], x.b))
        if isinstance(x, E.FloorMod) and isinstance(x.b, E.IntImm) and x.b.value > 0:
            a = go(x.a)
            if a is not None:
                lo, hi = simplify(E.floordiv(a[0], x.b)), simplify(E.floordiv(a[1], x.b))
                if structural_equal_simple(lo, hi):
                    return (E.floormod(a[0], x.b), E.floormod(a[1], x.b))
            return (E.IntImm(x.dtype, 0), E.IntImm(x.dtype, x.b.value - 1))
        if isinstance(x, (E.Min, E.Max)):
            a, b = go(x.a), go(x.b)
            if a is None or b is None:
                return None
            f = E.min_expr if isinstance(x, E.Min) else E.max_expr
            return (f(a[0], b[0]), f(a[1], b[1]))
        if isinstance(x, E.Cast) and x.dtype.is_int and x.value.dtype.is_int:
            a = go(x.value)
            return None if a is None else (E.cast(x.dtype, a[0]), E.cast(x.dtype, a[1]))
        if isinstance(x, E.Select):
            a, b = go(x.true_value), go(x.false_value)
            if a is None or b is None:
                return None
            return (E.min_expr(a[0], b[0]), E.max_expr(a[1], b[1]))
        return None

    out = go(e)
    if out is None:
        return None
    return (simplify(out[0]), simplify(out[1]))


def structural_equal_simple(a: E.PrimExpr, b: E.PrimExpr) -> bool:
    """Structural equality (re-exported for bound computations)."""
    from .linear import structural_equal

    return structural_equal(a, b)


def _nonneg(x: E.PrimExpr) -> bool:
    lo, _ = const_bound(x)
    return lo is not None and lo >= 0


def _mentions(x: E.PrimExpr, relax: dict[E.Var, Any]) -> bool:
    from ..ir.visitor import post_order_visit

    found = False

    def f(n: Any) -> None:
        nonlocal found
        if isinstance(n, E.Var) and n in relax:
            found = True

    post_order_visit(x, f)
    return found
