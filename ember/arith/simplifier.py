"""The integer simplifier.

:func:`simplify` rewrites an expression bottom-up: constants are folded, integer sums are put in
linear form (so ``(i*4 + j) - i*4`` becomes ``j``), divisions and remainders by constants drop the
terms that divide evenly and vanish when the bounds of the rest prove them constant, and
comparisons, ``min``/``max`` and selects that the variables' ranges decide are replaced by their
value. :class:`Analyzer` carries those ranges (loop variables bound to their loops) and answers
:meth:`Analyzer.can_prove`.

Every rewrite preserves the value of the expression for all values of its variables within the
given ranges; the tests check this by evaluation.
"""

from __future__ import annotations

import math
from typing import Any

from ..ir import expr as E
from ..ir.visitor import Mutator
from .bound import Bound, const_bound
from .linear import Linear, structural_equal, structural_key

_FOLD_INT = {
    E.Add: lambda a, b: a + b,
    E.Sub: lambda a, b: a - b,
    E.Mul: lambda a, b: a * b,
    E.FloorDiv: lambda a, b: a // b,
    E.FloorMod: lambda a, b: a % b,
    E.Min: min,
    E.Max: max,
}
_FOLD_CMP = {
    E.EQ: lambda a, b: a == b,
    E.NE: lambda a, b: a != b,
    E.LT: lambda a, b: a < b,
    E.LE: lambda a, b: a <= b,
}


def _wrap(value: int, dt: Any) -> int | None:
    """``value`` if it fits ``dt`` (so folding never changes overflow behaviour), else None."""
    if dt.min_value() <= value <= dt.max_value():
        return value
    return None


class _Simplifier(Mutator):
    def __init__(self, ranges: dict[E.Var, Bound]):
        self.ranges = ranges
        # Linear forms already known, ``id(node) -> (node, form)`` (the node held so its id stays
        # its own): each sum is decomposed once, and a sum this simplifier rebuilt from a form
        # gets that form without a walk, so a long chain of additions is no longer quadratic.
        # Stored forms are never changed: :meth:`linear` hands out copies.
        self._lin: dict[int, tuple[E.PrimExpr, Linear]] = {}

    # -- helpers ----------------------------------------------------------------------------
    def bound(self, e: E.PrimExpr) -> Bound:
        return const_bound(e, self.ranges)

    def linear(self, e: E.PrimExpr) -> Linear:
        """Linear form of an already simplified integer scalar expression (a fresh object the
        caller may change)."""
        hit = self._lin.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1].copy()
        lin = self._linear(e)
        self._lin[id(e)] = (e, lin.copy())
        return lin

    def _linear(self, e: E.PrimExpr) -> Linear:
        if isinstance(e, E.IntImm):
            return Linear(e.dtype, {}, e.value)
        if isinstance(e, E.Add):
            return self.linear(e.a).add(self.linear(e.b))
        if isinstance(e, E.Sub):
            return self.linear(e.a).add(self.linear(e.b), -1)
        if isinstance(e, E.Mul):
            if isinstance(e.b, E.IntImm):
                return self.linear(e.a).scale(e.b.value)
            if isinstance(e.a, E.IntImm):
                return self.linear(e.b).scale(e.a.value)
        return Linear.atom(e)

    def _merge_divmod(self, lin: Linear) -> Linear:
        """``(x // c) * c * k + (y % c) * k`` becomes ``x * k`` (floor division, c > 0) when
        ``x`` and ``y`` are congruent modulo ``c`` (the same, or differing by multiples of ``c``:
        a remainder's argument is often already reduced, ``(128 a + i) % 56`` to ``(16 a + i) % 56``)."""
        for key, (atom, coef) in list(lin.terms.items()):
            if key not in lin.terms or not (isinstance(atom, E.FloorMod) and isinstance(atom.b, E.IntImm)):
                continue
            c = atom.b.value
            if c <= 0:
                continue
            dkey = structural_key(E.FloorDiv(atom.a, atom.b, atom.dtype))
            d = lin.terms.get(dkey)
            if d is None:
                d, dkey = self._congruent_div(lin, atom, coef * c)
            if d is not None and d[1] == coef * c:
                rest = Linear(lin.dtype, {k: v for k, v in lin.terms.items() if k not in (key, dkey)}, lin.const)
                x = d[0].a if isinstance(d[0], E.FloorDiv) else atom.a
                lin = rest.add(self.linear(x).scale(coef))
        return lin

    def _congruent_div(self, lin: Linear, mod: E.FloorMod, want: int) -> tuple[Any, Any]:
        """A term ``(x // c)`` with coefficient ``want`` of ``lin`` whose ``x`` is congruent to
        ``mod.a`` modulo ``c``; ``(None, None)`` when there is none."""
        c = mod.b.value  # type: ignore[attr-defined]
        ly = self.linear(mod.a)
        for k, (atom, coef) in lin.terms.items():
            divides = isinstance(atom, E.FloorDiv) and isinstance(atom.b, E.IntImm) and atom.b.value == c
            if coef != want or not divides:
                continue
            diff = self.linear(atom.a).add(ly, -1)
            if diff.const % c == 0 and all(t % c == 0 for _, t in diff.terms.values()):
                return (atom, coef), k
        return None, None

    @staticmethod
    def _common_factor(rest: Linear, c: int) -> int:
        """The greatest common divisor of divisor ``c`` and every coefficient of ``rest``'s terms
        (1 when ``rest`` has no terms): the factor a division of ``rest`` by ``c`` can drop."""
        if not rest.terms:
            return 1
        g = c
        for _, coef in rest.terms.values():
            g = math.gcd(g, coef)
            if g == 1:
                break
        return g

    def rebuild(self, lin: Linear) -> E.PrimExpr:
        """``lin`` as an expression; remembers the expression's linear form (see ``_lin``)."""
        out = lin.to_expr()
        if id(out) not in self._lin:
            form = lin.reparsed()
            if form is not None:
                self._lin[id(out)] = (out, form)
        return out

    # -- integer arithmetic --------------------------------------------------------------------
    def _int_scalar(self, e: E.PrimExpr) -> bool:
        return e.dtype.is_int and e.dtype.lanes == 1

    def _signed_scalar(self, e: E.PrimExpr) -> bool:
        # Rewrites that reason about order (comparisons, min/max, division) assume arithmetic does
        # not wrap; unsigned values wrap at 0 (u - 1), so they are left to constant folding.
        return e.dtype.kind == "int" and e.dtype.lanes == 1

    def visit_Add(self, e: E.Add) -> E.PrimExpr:
        return self._arith(e)

    def visit_Sub(self, e: E.Sub) -> E.PrimExpr:
        return self._arith(e)

    def visit_Mul(self, e: E.Mul) -> E.PrimExpr:
        return self._arith(e)

    def _arith(self, e: E.BinaryOp) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if isinstance(a, E.IntImm) and isinstance(b, E.IntImm) and self._int_scalar(e):
            v = _wrap(_FOLD_INT[type(e)](a.value, b.value), e.dtype)
            if v is not None:
                return E.IntImm(e.dtype, v)
            return e if (a is e.a and b is e.b) else type(e)(a, b, e.dtype)  # overflows: keep it
        if isinstance(a, E.FloatImm) and isinstance(b, E.FloatImm):
            return E.FloatImm(e.dtype, _FOLD_INT[type(e)](a.value, b.value))
        if self._int_scalar(e):
            if isinstance(e, E.Mul) and not (isinstance(a, E.IntImm) or isinstance(b, E.IntImm)):
                if isinstance(a, E.IntImm) and a.value == 0 or isinstance(b, E.IntImm) and b.value == 0:
                    return E.IntImm(e.dtype, 0)
                return type(e)(a, b, e.dtype) if (a is not e.a or b is not e.b) else e
            node = type(e)(a, b, e.dtype)
            lin = self._merge_divmod(self.linear(node))
            lo, hi = e.dtype.min_value(), e.dtype.max_value()
            if not lo <= lin.const <= hi or any(not lo <= c <= hi for _, c in lin.terms.values()):
                return node  # a coefficient out of the type's range: folding would change overflow
            return self.rebuild(lin)
        if e.dtype.is_float:
            # Only exact identities for floats: x + 0, x * 1, x - 0.
            if isinstance(e, E.Add) and _is_zero(b):
                return a
            if isinstance(e, E.Add) and _is_zero(a):
                return b
            if isinstance(e, E.Sub) and _is_zero(b):
                return a
            if isinstance(e, E.Mul) and _is_one(b):
                return a
            if isinstance(e, E.Mul) and _is_one(a):
                return b
        if a is e.a and b is e.b:
            return e
        return type(e)(a, b, e.dtype)

    def visit_FloorDiv(self, e: E.FloorDiv) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if isinstance(a, E.IntImm) and isinstance(b, E.IntImm) and b.value != 0:
            return E.IntImm(e.dtype, a.value // b.value)
        if self._signed_scalar(e) and isinstance(b, E.IntImm) and b.value > 0:
            c = b.value
            if c == 1:
                return a
            lin = self.linear(a)
            quotient = Linear(e.dtype)
            rest = Linear(e.dtype)
            for k, (atom, coef) in lin.terms.items():
                target = quotient if coef % c == 0 else rest
                target.terms[k] = (atom, coef // c if coef % c == 0 else coef)
            quotient.const, rest.const = divmod(lin.const, c)
            rest_expr = self.rebuild(rest)
            lo, hi = self.bound(rest_expr)
            if lo is not None and hi is not None and lo // c == hi // c:
                quotient.const += lo // c
                return self.rebuild(quotient)
            g = self._common_factor(rest, c)
            if g > 1:
                # (g*R + r) // (g*c') == (R + r // g) // c' for 0 <= r < g*c': the remainder's
                # multiples of g decide the quotient alone, so (4x + 3) // 32 and 4x // 32 both
                # become x // 8 (and their difference 0).
                reduced = Linear(e.dtype, {k: (atom, coef // g) for k, (atom, coef) in rest.terms.items()},
                                 rest.const // g)
                inner = E.FloorDiv(self.rebuild(reduced), E.IntImm(e.dtype, c // g), e.dtype)
                return self.rebuild(quotient.add(Linear.atom(inner)))
            if not quotient.terms and quotient.const == 0:
                # Nested division by constants: (x // c1) // c2 == x // (c1 * c2).
                if isinstance(rest_expr, E.FloorDiv) and isinstance(rest_expr.b, E.IntImm) and rest_expr.b.value > 0:
                    return E.FloorDiv(rest_expr.a, E.IntImm(e.dtype, rest_expr.b.value * c), e.dtype)
                return E.FloorDiv(rest_expr, b, e.dtype)
            if rest.terms:
                # Keep the constant with the remainder only when it makes the remainder non-negative.
                inner = E.FloorDiv(rest_expr, b, e.dtype)
                return self.rebuild(quotient.add(Linear.atom(inner)))
            return self.rebuild(quotient)
        if a is e.a and b is e.b:
            return e
        return E.FloorDiv(a, b, e.dtype)

    def visit_FloorMod(self, e: E.FloorMod) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if isinstance(a, E.IntImm) and isinstance(b, E.IntImm) and b.value != 0:
            return E.IntImm(e.dtype, a.value % b.value)
        if self._signed_scalar(e) and isinstance(b, E.IntImm) and b.value > 0:
            c = b.value
            if c == 1:
                return E.IntImm(e.dtype, 0)
            lin = self.linear(a)
            rest = Linear(e.dtype)
            for k, (atom, coef) in lin.terms.items():
                if coef % c != 0:
                    rest.terms[k] = (atom, coef % c if coef > 0 else coef)
            rest.const = lin.const % c
            rest_expr = self.rebuild(rest)
            lo, hi = self.bound(rest_expr)
            if lo is not None and hi is not None and lo // c == hi // c:
                shift = (lo // c) * c
                return self.rebuild(rest.add(Linear(e.dtype, {}, shift), -1))
            if isinstance(rest_expr, E.FloorMod) and isinstance(rest_expr.b, E.IntImm) and rest_expr.b.value % c == 0:
                return E.FloorMod(rest_expr.a, b, e.dtype)
            g = self._common_factor(rest, c)
            if g > 1:
                # (g*R + r) % (g*c') == g * ((R + r // g) % c') + r % g, the counterpart of the
                # quotient rule in visit_FloorDiv.
                reduced = Linear(e.dtype, {k: (atom, coef // g) for k, (atom, coef) in rest.terms.items()},
                                 rest.const // g)
                inner = E.FloorMod(self.rebuild(reduced), E.IntImm(e.dtype, c // g), e.dtype)
                return self.rebuild(Linear(e.dtype, {structural_key(inner): (inner, g)}, rest.const % g))
            return E.FloorMod(rest_expr, b, e.dtype)
        if a is e.a and b is e.b:
            return e
        return E.FloorMod(a, b, e.dtype)

    def visit_Div(self, e: E.Div) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if e.dtype.is_int and isinstance(b, E.IntImm) and b.value > 0:
            lo, _ = self.bound(a)
            if lo is not None and lo >= 0:  # truncation equals floor for non-negative values
                return self.visit_FloorDiv(E.FloorDiv(a, b, e.dtype))
            if isinstance(a, E.IntImm):
                return E.IntImm(e.dtype, int(a.value / b.value))
        if e.dtype.is_float and _is_one(b):
            return a
        if isinstance(a, E.FloatImm) and isinstance(b, E.FloatImm) and b.value != 0:
            return E.FloatImm(e.dtype, a.value / b.value)
        if a is e.a and b is e.b:
            return e
        return E.Div(a, b, e.dtype)

    def visit_Mod(self, e: E.Mod) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if e.dtype.is_int and isinstance(b, E.IntImm) and b.value > 0:
            lo, _ = self.bound(a)
            if lo is not None and lo >= 0:
                return self.visit_FloorMod(E.FloorMod(a, b, e.dtype))
        if a is e.a and b is e.b:
            return e
        return E.Mod(a, b, e.dtype)

    def visit_Min(self, e: E.Min) -> E.PrimExpr:
        return self._minmax(e, is_min=True)

    def visit_Max(self, e: E.Max) -> E.PrimExpr:
        return self._minmax(e, is_min=False)

    def _minmax(self, e: E.BinaryOp, is_min: bool) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if isinstance(a, (E.IntImm, E.FloatImm)) and isinstance(b, (E.IntImm, E.FloatImm)):
            v = (min if is_min else max)(a.value, b.value)
            return type(a)(e.dtype, v)
        if structural_equal(a, b):
            return a
        if self._signed_scalar(e):
            diff = self.rebuild(self.linear(E.Sub(a, b, e.dtype)))
            lo, hi = self.bound(diff)
            if hi is not None and hi <= 0:
                return a if is_min else b
            if lo is not None and lo >= 0:
                return b if is_min else a
        if a is e.a and b is e.b:
            return e
        return type(e)(a, b, e.dtype)

    # -- logic -----------------------------------------------------------------------------------
    def _cmp(self, e: E.CmpOp) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if isinstance(a, (E.IntImm, E.FloatImm)) and isinstance(b, (E.IntImm, E.FloatImm)):
            return E.IntImm(e.dtype, int(_FOLD_CMP[type(e)](a.value, b.value)))
        if self._signed_scalar(a):
            diff = self.rebuild(self.linear(E.Sub(a, b, a.dtype)))
            lo, hi = self.bound(diff)
            verdict: bool | None = None
            if isinstance(e, E.LT):
                verdict = True if hi is not None and hi < 0 else (False if lo is not None and lo >= 0 else None)
            elif isinstance(e, E.LE):
                verdict = True if hi is not None and hi <= 0 else (False if lo is not None and lo > 0 else None)
            elif isinstance(e, E.EQ):
                if lo == hi == 0 and lo is not None:
                    verdict = True
                elif (lo is not None and lo > 0) or (hi is not None and hi < 0):
                    verdict = False
            elif isinstance(e, E.NE):
                if lo == hi == 0 and lo is not None:
                    verdict = False
                elif (lo is not None and lo > 0) or (hi is not None and hi < 0):
                    verdict = True
            if verdict is not None:
                return E.IntImm(e.dtype, int(verdict))
            # Move constants to the right: (x + 3 < n + 5) -> (x < n + 2).
            la, lb = self.linear(a), self.linear(b)
            k = la.const - lb.const
            la.const, lb.const = 0, -k
            if not la.terms:
                la, lb = Linear(a.dtype, {}, 0), lb.add(la, -1)
            na, nb = self.rebuild(la), self.rebuild(lb)
            return type(e)(na, nb, e.dtype)
        if a is e.a and b is e.b:
            return e
        return type(e)(a, b, e.dtype)

    visit_LT = _cmp
    visit_LE = _cmp
    visit_EQ = _cmp
    visit_NE = _cmp

    def visit_And(self, e: E.And) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        for x, y in ((a, b), (b, a)):
            if isinstance(x, E.IntImm):
                return y if x.value else x
        if a is e.a and b is e.b:
            return e
        return E.And(a, b, e.dtype)

    def visit_Or(self, e: E.Or) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        for x, y in ((a, b), (b, a)):
            if isinstance(x, E.IntImm):
                return x if x.value else y
        if a is e.a and b is e.b:
            return e
        return E.Or(a, b, e.dtype)

    def visit_Not(self, e: E.Not) -> E.PrimExpr:
        a = self.visit(e.a)
        if isinstance(a, E.IntImm):
            return E.IntImm(e.dtype, int(not a.value))
        return e if a is e.a else E.Not(a, e.dtype)

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        c = self.visit(e.condition)
        t, f = self.visit(e.true_value), self.visit(e.false_value)
        if isinstance(c, E.IntImm):
            return t if c.value else f
        if c is e.condition and t is e.true_value and f is e.false_value:
            return e
        return E.Select(c, t, f, e.dtype)

    def visit_Cast(self, e: E.Cast) -> E.PrimExpr:
        v = self.visit(e.value)
        if v.dtype == e.dtype:
            return v
        if isinstance(v, E.IntImm) and e.dtype.is_int and e.dtype.lanes == 1:
            if e.dtype.min_value() <= v.value <= e.dtype.max_value():
                return E.IntImm(e.dtype, v.value)
        if isinstance(v, E.IntImm) and e.dtype.is_float and e.dtype.lanes == 1:
            return E.FloatImm(e.dtype, float(v.value))
        # int64(int32(x)) where x is already int64 and fits: keep the inner value.
        if isinstance(v, E.Cast) and e.dtype.is_int and v.dtype.is_int and v.value.dtype == e.dtype:
            lo, hi = self.bound(v.value)
            if lo is not None and hi is not None and v.dtype.min_value() <= lo and hi <= v.dtype.max_value():
                return v.value
        return e if v is e.value else E.Cast(e.dtype, v)


def _is_zero(e: E.PrimExpr) -> bool:
    return isinstance(e, (E.IntImm, E.FloatImm)) and e.value == 0


def _is_one(e: E.PrimExpr) -> bool:
    return isinstance(e, (E.IntImm, E.FloatImm)) and e.value == 1


def simplify(e: Any, ranges: dict[E.Var, Bound] | None = None) -> Any:
    """``e`` (an expression or a statement) simplified, given constant ranges of variables."""
    return _Simplifier(ranges or {}).visit(e)


class Analyzer:
    """Simplification and proofs under the ranges of bound loop variables."""

    def __init__(self) -> None:
        self.ranges: dict[E.Var, Bound] = {}

    def bind(self, var: E.Var, min_value: Any, extent: Any) -> None:
        """Record that ``var`` lies in ``[min_value, min_value + extent)``."""
        lo, _ = const_bound(simplify(E.convert(min_value)), self.ranges)
        _, hi = const_bound(simplify(E.convert(min_value) + E.convert(extent) - 1), self.ranges)
        self.ranges[var] = (lo, hi)

    def bind_bound(self, var: E.Var, lo: int | None, hi: int | None) -> None:
        """Record constant inclusive bounds of ``var``."""
        self.ranges[var] = (lo, hi)

    def simplify(self, e: Any) -> Any:
        """``e`` simplified under the recorded ranges."""
        return simplify(e, self.ranges)

    def can_prove(self, cond: E.PrimExpr) -> bool:
        """True when ``cond`` holds for every value of its variables in the recorded ranges."""
        s = self.simplify(cond)
        return isinstance(s, E.IntImm) and s.value != 0

    def const_bound(self, e: E.PrimExpr) -> Bound:
        """Constant bounds of ``e`` under the recorded ranges."""
        return const_bound(self.simplify(e), self.ranges)


def ceildiv(a: Any, b: Any) -> Any:
    """``ceil(a / b)`` for non-negative integers, as an int when both are ints."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return simplify(E.floordiv(E.convert(a) + E.convert(b) - 1, b))


def gcd(a: int, b: int) -> int:
    """Greatest common divisor."""
    return math.gcd(a, b)
