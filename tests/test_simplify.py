"""The integer simplifier: every rewrite is checked by evaluating the expression before and after
at points inside the variables' ranges (hypothesis draws both the expression and the points)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember import te
from ember.arith import Analyzer, ceildiv, const_bound, simplify, structural_equal
from ember.ir import expr as E
from ember.ir.visitor import post_order_visit


def _truncdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def evaluate(e: E.PrimExpr, env: dict[E.Var, int]) -> int:
    """Python semantics of the integer IR (C truncation for Div/Mod, floor for FloorDiv/FloorMod);
    unsigned results wrap around modulo 2**bits as they do in the generated code."""
    v = _evaluate(e, env)
    if e.dtype.kind == "uint":
        v %= 2**e.dtype.bits
    return v


def _evaluate(e: E.PrimExpr, env: dict[E.Var, int]) -> int:
    if isinstance(e, E.IntImm):
        return e.value
    if isinstance(e, E.Var):
        return env[e]
    if isinstance(e, E.Cast):
        return evaluate(e.value, env)
    if isinstance(e, E.Select):
        return evaluate(e.true_value, env) if evaluate(e.condition, env) else evaluate(e.false_value, env)
    if isinstance(e, E.Not):
        return int(not evaluate(e.a, env))
    a, b = evaluate(e.a, env), evaluate(e.b, env)
    if isinstance(e, E.Add):
        return a + b
    if isinstance(e, E.Sub):
        return a - b
    if isinstance(e, E.Mul):
        return a * b
    if isinstance(e, E.FloorDiv):
        return a // b
    if isinstance(e, E.FloorMod):
        return a % b
    if isinstance(e, E.Div):
        return _truncdiv(a, b)
    if isinstance(e, E.Mod):
        return a - b * _truncdiv(a, b)
    if isinstance(e, E.Min):
        return min(a, b)
    if isinstance(e, E.Max):
        return max(a, b)
    if isinstance(e, E.LT):
        return int(a < b)
    if isinstance(e, E.LE):
        return int(a <= b)
    if isinstance(e, E.EQ):
        return int(a == b)
    if isinstance(e, E.NE):
        return int(a != b)
    if isinstance(e, E.And):
        return int(bool(a) and bool(b))
    if isinstance(e, E.Or):
        return int(bool(a) or bool(b))
    raise NotImplementedError(type(e).__name__)


X, Y, Z = te.var("x"), te.var("y"), te.var("z")
VARS = (X, Y, Z)


def int_exprs(depth: int = 4):
    leaves = st.one_of(st.sampled_from(VARS), st.integers(-20, 20).map(lambda v: te.const(v)))

    def extend(children):
        pos = st.integers(1, 9)
        return st.one_of(
            st.tuples(children, children).map(lambda t: t[0] + t[1]),
            st.tuples(children, children).map(lambda t: t[0] - t[1]),
            st.tuples(children, st.integers(-6, 6)).map(lambda t: t[0] * t[1]),
            st.tuples(children, children).map(lambda t: t[0] * t[1]),
            st.tuples(children, pos).map(lambda t: t[0] // t[1]),
            st.tuples(children, pos).map(lambda t: t[0] % t[1]),
            st.tuples(children, pos).map(lambda t: E.truncdiv(t[0], t[1])),
            st.tuples(children, pos).map(lambda t: E.truncmod(t[0], t[1])),
            st.tuples(children, children).map(lambda t: E.min_expr(t[0], t[1])),
            st.tuples(children, children).map(lambda t: E.max_expr(t[0], t[1])),
            st.tuples(children, children, children, children).map(
                lambda t: E.select(t[0] < t[1], t[2], t[3])),
        )

    return st.recursive(leaves, extend, max_leaves=depth * 3)


def ranges_and_points():
    """Constant ranges for x, y, z (some one-sided) and points inside them."""

    @st.composite
    def make(draw):
        ranges = {}
        for v in VARS:
            lo = draw(st.integers(-10, 10))
            hi = lo + draw(st.integers(0, 30))
            ranges[v] = (lo, hi)
        points = [{v: draw(st.integers(*ranges[v])) for v in VARS} for _ in range(8)]
        return ranges, points

    return make()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(int_exprs(), ranges_and_points())
def test_simplify_preserves_value_under_ranges(e, rp):
    ranges, points = rp
    s = simplify(e, ranges)
    for env in points:
        assert evaluate(s, env) == evaluate(e, env), f"{e}  ->  {s} at {env}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(int_exprs(), st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50), st.integers(-50, 50)),
                             min_size=4, max_size=8))
def test_simplify_preserves_value_without_ranges(e, pts):
    s = simplify(e)
    for x, y, z in pts:
        env = {X: x, Y: y, Z: z}
        assert evaluate(s, env) == evaluate(e, env), f"{e}  ->  {s} at {env}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(int_exprs(3), int_exprs(3), st.sampled_from(["<", "<=", "==", "!="]), ranges_and_points())
def test_comparisons_simplify_to_equal_truth(a, b, op, rp):
    ranges, points = rp
    cmp = {"<": a < b, "<=": a <= b, "==": E._compare(E.EQ, a, b), "!=": E._compare(E.NE, a, b)}[op]
    s = simplify(cmp, ranges)
    for env in points:
        assert bool(evaluate(s, env)) == bool(evaluate(cmp, env)), f"{cmp} -> {s} at {env}"
    if isinstance(s, E.IntImm):  # a decided comparison must hold at every point of the ranges
        assert all(bool(evaluate(cmp, env)) == bool(s.value) for env in points)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(int_exprs(), ranges_and_points())
def test_const_bound_contains_every_value(e, rp):
    ranges, points = rp
    lo, hi = const_bound(e, ranges)
    for env in points:
        v = evaluate(e, env)
        assert lo is None or lo <= v, f"{e}: {v} < lower bound {lo}"
        assert hi is None or v <= hi, f"{e}: {v} > upper bound {hi}"


# -- specific rewrites ---------------------------------------------------------------------------
def test_linear_terms_cancel():
    i, j = te.var("i"), te.var("j")
    assert structural_equal(simplify((i * 4 + j) - i * 4), j)
    assert isinstance(simplify(i - i), E.IntImm) and simplify(i - i).value == 0
    assert structural_equal(simplify(i + 3 - 3), i)


def test_division_by_constants_under_ranges():
    i, j = te.var("i"), te.var("j")
    r = {j: (0, 3)}
    assert structural_equal(simplify((i * 4 + j) // 4, r), i)
    assert structural_equal(simplify((i * 4 + j) % 4, r), j)
    assert structural_equal(simplify((i // 2) // 3), i // 6)
    assert simplify(te.const(-7) // 2).value == -4
    assert simplify(te.const(-7) % 2).value == 1


def test_common_factor_of_divisor_and_terms_is_dropped():
    """(g*R + r) // (g*c) == (R + r // g) // c without any range: the quotients of a thread's
    consecutive values (4x .. 4x + 3 over 32-wide panels) are one expression, so their
    difference is 0 and a staged extent is constant."""
    x, y = te.var("x"), te.var("y")
    assert simplify((x * 4 + 3) // 32 - (x * 4) // 32).value == 0
    assert structural_equal(simplify((x * 4 + 3) % 32), (x % 8) * 4 + 3)
    assert structural_equal(simplify((x * 6 + y * 4 + 5) // 8), (x * 3 + y * 2 + 2) // 4)
    for e in ((x * 6 - y * 4 + 5) // 8, (x * 6 - y * 4 + 5) % 8, (x * -4 + 3) // 32, (x * -4 + 3) % 32):
        got = simplify(e)
        for xv in range(-40, 41, 3):
            for yv in (-9, 0, 7):
                env = {x: xv, y: yv}
                assert evaluate(got, env) == evaluate(e, env), (e, got, env)


def test_min_max_decided_by_ranges():
    i = te.var("i")
    r = {i: (0, 9)}
    assert structural_equal(simplify(E.min_expr(i, 10), r), i)
    assert simplify(E.max_expr(i, 10), r).value == 10
    assert structural_equal(simplify(E.min_expr(i + 1, i)), i)


def test_float_identities_only_exact():
    x = te.placeholder((2,), name="F")[0]
    assert simplify(x + 0.0) is x
    assert simplify(x * 1.0) is x
    kept = simplify(x * 0.0)  # not 0: x may be NaN or inf
    assert isinstance(kept, E.Mul)


def _int_consts(e: E.PrimExpr) -> list[E.IntImm]:
    out: list[E.IntImm] = []
    post_order_visit(e, lambda n: out.append(n) if isinstance(n, E.IntImm) else None)
    return out


def test_folding_never_changes_overflow():
    # Regression: int32 2**31-1 + 1 was folded to an int32 constant 2**31 (out of range).
    big = te.const(2**31 - 1)
    for e in (big + 1, (te.var("i") + big) + 1, te.const(-(2**31)) - 1):
        s = simplify(e)
        consts = _int_consts(s)
        assert all(c.dtype.min_value() <= c.value <= c.dtype.max_value() for c in consts), f"{e} -> {s}"


def test_analyzer_can_prove():
    an = Analyzer()
    i, n = te.var("i"), te.var("n")
    an.bind(i, 0, 16)
    assert an.can_prove(i < 16)
    assert an.can_prove(i >= 0)
    assert an.can_prove(i * 2 + 1 < 33)
    assert not an.can_prove(i < 15)
    assert not an.can_prove(i < n)  # unknown n: cannot be proven
    assert an.const_bound(i * 3 - 2) == (-2, 43)


def test_analyzer_can_prove_is_sound_by_enumeration():
    an = Analyzer()
    i, j = te.var("i"), te.var("j")
    an.bind(i, 0, 7)
    an.bind(j, 2, 5)
    conds = [i + j < 13, i + j < 12, i * j <= 36, (i + j) // 3 < 4, (i * 3 + j) % 3 < 3, i - j > -7,
             E.min_expr(i, j) <= 6, E.max_expr(i, j) >= 2, (i + j) // 3 < 3]
    for c in conds:
        truth = all(evaluate(c, {i: a, j: b}) for a in range(0, 7) for b in range(2, 7))
        if an.can_prove(c):
            assert truth, f"can_prove({c}) but it fails somewhere"


@pytest.mark.parametrize("a,b", [(0, 4), (1, 4), (4, 4), (5, 4), (17, 8)])
def test_ceildiv(a, b):
    assert ceildiv(a, b) == -(-a // b)
    n = te.var("n")
    e = ceildiv(n, b)
    assert evaluate(e, {n: a}) == -(-a // b)


U, V = te.var("u", "uint32"), te.var("v", "uint32")


def uint_exprs():
    leaves = st.one_of(st.sampled_from((U, V)), st.integers(0, 20).map(lambda c: te.const(c, "uint32")))

    def extend(children):
        return st.one_of(
            st.tuples(children, children).map(lambda t: t[0] + t[1]),
            st.tuples(children, children).map(lambda t: t[0] - t[1]),
            st.tuples(children, st.integers(0, 5)).map(lambda t: t[0] * t[1]),
            st.tuples(children, st.integers(1, 9)).map(lambda t: t[0] // t[1]),
            st.tuples(children, st.integers(1, 9)).map(lambda t: t[0] % t[1]),
            st.tuples(children, children).map(lambda t: E.min_expr(t[0], t[1])),
            st.tuples(children, children).map(lambda t: E.max_expr(t[0], t[1])),
            st.tuples(children, children, children, children).map(
                lambda t: E.select(t[0] < t[1], t[2], t[3])),
        )

    return st.recursive(leaves, extend, max_leaves=10)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(uint_exprs(), st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=4, max_size=8))
def test_simplify_unsigned_wraparound(e, pts):
    """Regression: ``u - 1 < 5`` on uint32 was rewritten to ``u < 6``, wrong at u = 0 where
    u - 1 wraps to 2**32 - 1."""
    s = simplify(e, {U: (0, 12), V: (0, 12)})
    for u, v in pts:
        env = {U: u, V: v}
        assert evaluate(s, env) == evaluate(e, env), f"{e}  ->  {s} at {env}"
    c = U - 1 < 5
    assert evaluate(simplify(c), {U: 0}) == 0
