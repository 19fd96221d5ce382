"""Every data type end to end: arithmetic, comparisons, casts between every pair of types, in
scalar and vectorized loops, compared with NumPy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ember
from ember import te

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
ALL = INTS + FLOATS + ["bool"]


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest even), as float32."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32)
    return r.view(np.float32)


def _np(dt: str):
    return np.float32 if dt == "bfloat16" else np.dtype(dt)


def _data(rng, dt, n, small=False):
    if dt == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dt in INTS:
        info = np.iinfo(dt)
        lo, hi = (max(info.min, -100), min(info.max, 100)) if small else (info.min, info.max)
        return rng.integers(lo, hi, n, endpoint=True, dtype=dt)
    x = rng.uniform(-8, 8, n).astype(np.float32 if dt == "bfloat16" else dt)
    return _bf16(x) if dt == "bfloat16" else x


def _arr(x, dt):
    return ember.nd.array(x, dtype=dt)


@pytest.mark.parametrize("vectorized", [False, True], ids=["scalar", "vector"])
@pytest.mark.parametrize("dt", INTS + FLOATS)
def test_arithmetic(kernel, rng, dt, vectorized):
    n = te.var("n")
    A = te.placeholder((n,), dtype=dt, name="A")
    B = te.placeholder((n,), dtype=dt, name="B")
    S = te.compute((n,), lambda i: A[i] + B[i], name="S")
    D = te.compute((n,), lambda i: A[i] - B[i], name="D")
    M = te.compute((n,), lambda i: A[i] * B[i], name="M")
    X = te.compute((n,), lambda i: te.max_value_expr(A[i], B[i]), name="X")
    L = te.compute((n,), lambda i: A[i] < B[i], name="L")
    outs = [S, D, M, X, L]
    s = te.create_schedule([t.op for t in outs])
    if vectorized:
        for t in outs:
            s[t].vectorize(s[t].split(t.op.axis[0], factor=8)[1])
    size = 37
    a, b = _data(rng, dt, size), _data(rng, dt, size)
    res = kernel(s, [A, B, *outs], [_arr(a, dt), _arr(b, dt)], [((size,), dt)] * 4 + [((size,), "bool")])
    with np.errstate(over="ignore"):
        if dt in INTS:  # wrap-around arithmetic, like NumPy's
            refs = [a + b, a - b, a * b, np.maximum(a, b)]
            for got, ref in zip(res, refs):
                np.testing.assert_array_equal(got, ref)
        else:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            for got, ref in zip(res, [a64 + b64, a64 - b64, a64 * b64]):
                # One rounding of the exact result to the element type.
                expect = _bf16(ref.astype(np.float32)) if dt == "bfloat16" else ref.astype(dt)
                np.testing.assert_array_equal(got, expect)
            np.testing.assert_array_equal(res[3], np.maximum(a, b))
    np.testing.assert_array_equal(res[4], a < b)


@pytest.mark.parametrize("dt", INTS)
def test_integer_division_floor_semantics(kernel, rng, dt):
    A = te.placeholder((64,), dtype=dt, name="A")
    B = te.placeholder((64,), dtype=dt, name="B")
    Q = te.compute((64,), lambda i: A[i] // B[i], name="Q")
    R = te.compute((64,), lambda i: A[i] % B[i], name="R")
    TQ = te.compute((64,), lambda i: te.truncdiv(A[i], B[i]), name="TQ")
    TR = te.compute((64,), lambda i: te.truncmod(A[i], B[i]), name="TR")
    a = _data(rng, dt, 64, small=True)
    b = _data(rng, dt, 64, small=True)
    b[b == 0] = 3
    if dt.startswith("int"):
        b[:4] = [-3, 3, -7, 7]
        a[:4] = [7, -7, 7, -7]
    q, r, tq, tr = kernel(te.create_schedule([Q.op, R.op, TQ.op, TR.op]), [A, B, Q, R, TQ, TR],
                          [a, b], [((64,), dt)] * 4)
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)
    np.testing.assert_array_equal(tq, np.fix(a.astype(np.float64) / b).astype(dt))
    np.testing.assert_array_equal(tr, np.fmod(a, b))


@pytest.mark.parametrize("dt", ["float32", "float64", "float16"])
def test_float_floordiv_and_mod(kernel, rng, dt):
    A = te.placeholder((50,), dtype=dt, name="A")
    B = te.placeholder((50,), dtype=dt, name="B")
    Q = te.compute((50,), lambda i: A[i] // B[i], name="Q")
    R = te.compute((50,), lambda i: A[i] % B[i], name="R")
    a = rng.uniform(-10, 10, 50).astype(dt)
    b = rng.choice([-3.0, -1.5, 2.0, 4.0], 50).astype(dt)  # exact divisors: no rounding subtleties
    q, r = kernel(te.create_schedule([Q.op, R.op]), [A, B, Q, R], [a, b], [((50,), dt)] * 2)
    np.testing.assert_array_equal(q, np.floor_divide(a, b))
    np.testing.assert_array_equal(r, np.mod(a, b))


# Casts between every pair of types, on values representable in both where C leaves it undefined.
PAIRS = [(s, d) for s, d in itertools.product(ALL, ALL) if s != d]


def _cast_inputs(rng, src, dst):
    if src == "bool":
        return rng.integers(0, 2, 32).astype(bool)
    if dst == "bool":
        x = _data(rng, src, 32, small=True)
        x[:3] = 0
        return x
    # Values in the range of both types (float -> int conversion out of range is undefined).
    lo, hi = -100, 100
    if "uint" in src or "uint" in dst:
        lo = 0
    if src in FLOATS:
        x = rng.uniform(lo, hi, 32).astype(np.float32 if src == "bfloat16" else src)
        x[:4] = [0.5, 1.5, 2.75, 99.25]  # truncation toward zero
        x[4] = -2.75 if lo < 0 else 3.5
        return _bf16(x) if src == "bfloat16" else x
    return rng.integers(lo, hi, 32).astype(src)


def _cast_ref(x, src, dst):
    if dst == "bool":
        return x != 0
    if dst == "bfloat16":
        return _bf16(x.astype(np.float32)) if src != "float64" else _bf16_from64(x)
    if src in FLOATS and dst in INTS:
        return np.trunc(x.astype(np.float64)).astype(dst)
    return x.astype(dst)


def _bf16_from64(x):
    # Ember converts float64 -> float32 -> bfloat16; the values here are exact in float32.
    return _bf16(x.astype(np.float32))


@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{s}->{d}" for s, d in PAIRS])
def test_cast(kernel, rng, src, dst):
    n = te.var("n")
    A = te.placeholder((n,), dtype=src, name="A")
    B = te.compute((n,), lambda i: A[i].astype(dst), name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(s[B].split(B.op.axis[0], factor=4)[1])
    x = _cast_inputs(rng, src, dst)
    (got,) = kernel(s, [A, B], [_arr(x, src)], [((x.size,), dst)])
    np.testing.assert_array_equal(got, _cast_ref(x, src, dst))


def test_float_to_bfloat16_rounds_to_nearest_even(kernel):
    # 1 + 2^-8 is halfway between two bfloat16 values: ties go to the even one (1.0);
    # 1 + 3*2^-8 ties to 1 + 2^-6 (even mantissa); 1 + 2^-8 + 2^-20 rounds up.
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -(1 + 2**-8), np.nan, np.inf], dtype=np.float32)
    A = te.placeholder((6,), name="A")
    B = te.compute((6,), lambda i: A[i].astype("bfloat16"), name="B")
    (got,) = kernel(te.create_schedule(B.op), [A, B], [x], [((6,), "bfloat16")])
    np.testing.assert_array_equal(got, [1.0, 1 + 2**-6, 1 + 2**-7, -1.0, np.nan, np.inf])


def test_bfloat16_arithmetic_rounds_each_operation(kernel):
    # (1 + 2^-7) * (1 + 2^-7) = 1 + 2^-6 + 2^-14: rounds to 1 + 2^-6 in bfloat16.
    x = np.array([1 + 2**-7], dtype=np.float32)
    A = te.placeholder((1,), dtype="bfloat16", name="A")
    B = te.compute((1,), lambda i: A[i] * A[i] - 1, name="B")
    assert str(B.dtype) == "bfloat16"
    (got,) = kernel(te.create_schedule(B.op), [A, B], [_arr(x, "bfloat16")], [((1,), "bfloat16")])
    np.testing.assert_array_equal(got, [2**-6])


def test_bool_logic(kernel, rng):
    A = te.placeholder((20,), dtype="bool", name="A")
    B = te.placeholder((20,), dtype="bool", name="B")
    C = te.compute((20,), lambda i: (A[i] & ~B[i]) | (B[i] & ~A[i]), name="C")
    S = te.compute((20,), lambda i: A[i] + B[i], name="S")
    a, b = rng.integers(0, 2, 20).astype(bool), rng.integers(0, 2, 20).astype(bool)
    c, sm = kernel(te.create_schedule([C.op, S.op]), [A, B, C, S], [a, b], [((20,), "bool"), ((20,), "int32")])
    np.testing.assert_array_equal(c, a ^ b)
    np.testing.assert_array_equal(sm, a.astype(np.int32) + b)


def test_mixed_type_expression_promotes(kernel, rng):
    A = te.placeholder((16,), dtype="int8", name="A")
    B = te.placeholder((16,), dtype="float16", name="B")
    C = te.placeholder((16,), dtype="uint8", name="C")
    D = te.compute((16,), lambda i: A[i] * B[i] + C[i], name="D")
    assert str(D.dtype) == "float16"
    E_ = te.compute((16,), lambda i: A[i] + C[i], name="E")
    assert str(E_.dtype) == "int16"
    a = rng.integers(-10, 10, 16).astype("int8")
    b = rng.uniform(-2, 2, 16).astype("float16")
    c = rng.integers(0, 250, 16).astype("uint8")
    d, e = kernel(te.create_schedule([D.op, E_.op]), [A, B, C, D, E_], [a, b, c], [((16,), "float16"),
                                                                                  ((16,), "int16")])
    np.testing.assert_array_equal(e, a.astype(np.int16) + c)
    kernel.assert_fp(d, a * b.astype(np.float64) + c, np.abs(a * b.astype(np.float64)) + c, "float16", ulps=2)


def test_select_with_out_of_bounds_guard(kernel, rng):
    """if_then_else only loads the chosen branch: a padded read never touches memory outside A."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    P = te.compute((n + 4,), lambda i: te.if_then_else((i >= 2) & (i < n + 2), A[i - 2], -1.0), name="P")
    s = te.create_schedule(P.op)
    s[P].vectorize(s[P].split(P.op.axis[0], factor=4)[1])
    a = rng.standard_normal(9).astype("float32")
    (p,) = kernel(s, [A, P], [a], [((13,), "float32")])
    np.testing.assert_array_equal(p, np.pad(a, 2, constant_values=-1))
