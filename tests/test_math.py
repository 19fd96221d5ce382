"""Math functions against NumPy float64, for every float type, scalar and vectorized loops.

The tolerance of each function is documented (and justified) in docs/numerics.md; the table
below is the same table. Errors are measured in units of the output type's epsilon relative to
the float64 reference: ``|out - ref| <= ulps * eps(dtype) * max(|ref|, tiny(dtype))``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember
from ember import te

# name -> (ember function, reference on float64 arrays, input range, float32 ulps, float64 ulps)
_erf = np.vectorize(math.erf, otypes=[np.float64])
FUNCS = {
    "exp": (te.exp, np.exp, (-10, 10), 1, 2),
    "exp2": (te.exp2, np.exp2, (-14, 15), 1, 2),
    "log": (te.log, np.log, (0.01, 100), 1, 2),
    "log2": (te.log2, np.log2, (0.01, 100), 1, 2),
    "sqrt": (te.sqrt, np.sqrt, (0, 100), 0.5, 0.5),
    "rsqrt": (te.rsqrt, lambda x: 1 / np.sqrt(x), (0.01, 100), 1, 1),
    "tanh": (te.tanh, np.tanh, (-5, 5), 2, 3),
    "sigmoid": (te.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-10, 10), 2, 3),
    "erf": (te.erf, _erf, (-3, 3), 1.5, 2),  # float32: evaluated in float32 (backends/cpu/verf.py)
    "sin": (te.sin, np.sin, (-10, 10), 1, 2),
    "cos": (te.cos, np.cos, (-10, 10), 1, 2),
    "abs": (te.abs, np.abs, (-5, 5), 0, 0),
    "floor": (te.floor, np.floor, (-10, 10), 0, 0),
    "ceil": (te.ceil, np.ceil, (-10, 10), 0, 0),
    "round": (te.round, np.round, (-10, 10), 0, 0),
}
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
TINY = {"float16": 2.0**-14, "bfloat16": 2.0**-126, "float32": 2.0**-126, "float64": 2.0**-1022}
# bfloat16/float16 are computed in float32 and rounded once: at most half an ulp of the narrow
# type plus the float32 error, which is far below it; one ulp of the narrow type is the bound.
NARROW_ULPS = 1


def _inputs(rng, dtype, lo, hi, n):
    x = rng.uniform(lo, hi, size=n)
    if dtype in ("float32", "float64") and lo < 0 < hi:
        x[:4] = [0.0, -0.0, 0.5, -2.5]  # zeros and round-half-even ties
    if dtype == "bfloat16":
        x = x.astype(np.float32)
        return (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return x.astype(dtype)


def _compare(name, out, x, dtype, ref_fn, ulps32, ulps64):
    ref = ref_fn(x.astype(np.float64))
    if dtype in ("float16", "bfloat16"):
        ulps = NARROW_ULPS if ulps32 else 0
        # The reference rounded to the narrow type must agree up to one narrow ulp.
    else:
        ulps = ulps32 if dtype == "float32" else ulps64
    out = out.astype(np.float64)
    bound = ulps * EPS[dtype] * np.maximum(np.abs(ref), TINY[dtype])
    if ulps == 0:
        np.testing.assert_array_equal(out, ref.astype(dtype if dtype != "bfloat16" else np.float32))
        return
    err = np.abs(out - ref)
    worst = int(np.argmax(err / bound))
    assert np.all(err <= bound), (
        f"{name} {dtype}: x={x[worst]!r} gives {out[worst]!r}, float64 reference {ref[worst]!r}: "
        f"{err[worst] / (EPS[dtype] * max(abs(ref[worst]), TINY[dtype])):.2f} ulp > {ulps}"
    )


@pytest.mark.parametrize("vectorized", [False, True], ids=["scalar", "vector"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("name", list(FUNCS))
def test_unary_math(kernel, rng, name, dtype, vectorized):
    fn, ref_fn, (lo, hi), ulps32, ulps64 = FUNCS[name]
    n = te.var("n")
    A = te.placeholder((n,), dtype=dtype, name="A")
    B = te.compute((n,), lambda i: fn(A[i]), name="B")
    assert str(B.dtype) == dtype
    s = te.create_schedule(B.op)
    if vectorized:
        o, i = s[B].split(B.op.axis[0], factor=8)
        s[B].vectorize(i)
    size = 203  # not a multiple of 8: the scalar tail runs too
    x = _inputs(rng, dtype, lo, hi, size)
    a = ember.nd.array(x, dtype=dtype)
    (out,) = kernel(s, [A, B], [a], [((size,), dtype)])
    _compare(name, out, x, dtype, ref_fn, ulps32, ulps64)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("vectorized", [False, True], ids=["scalar", "vector"])
def test_pow(kernel, rng, dtype, vectorized):
    A = te.placeholder((64,), dtype=dtype, name="A")
    B = te.placeholder((64,), dtype=dtype, name="B")
    C = te.compute((64,), lambda i: te.pow(A[i], B[i]), name="C")
    s = te.create_schedule(C.op)
    if vectorized:
        s[C].vectorize(s[C].split(C.op.axis[0], factor=8)[1])
    x = rng.uniform(0.1, 4, 64).astype(dtype)
    y = rng.uniform(-3, 3, 64).astype(dtype)
    (out,) = kernel(s, [A, B, C], [x, y], [((64,), dtype)])
    ref = np.power(x.astype(np.float64), y.astype(np.float64))
    ulps = {"float32": 1, "float64": 2, "float16": 1}[dtype]
    np.testing.assert_array_less(np.abs(out.astype(np.float64) - ref), ulps * EPS[dtype] * np.abs(ref) + 1e-300)


def test_math_on_integers_is_float32(kernel, rng):
    A = te.placeholder((10,), dtype="int32", name="A")
    B = te.compute((10,), lambda i: te.sqrt(A[i]), name="B")
    C = te.compute((10,), lambda i: te.abs(A[i]), name="C")
    assert str(B.dtype) == "float32" and str(C.dtype) == "int32"
    x = rng.integers(-50, 50, 10).astype("int32")
    x[0] = np.iinfo(np.int32).min + 1
    b, c = kernel(te.create_schedule([B.op, C.op]), [A, B, C], [np.abs(x)], [((10,), "float32"),
                                                                            ((10,), "int32")])
    _compare("sqrt", b, np.abs(x).astype(np.float32), "float32", np.sqrt, 0.5, 0.5)
    np.testing.assert_array_equal(c, np.abs(x))


def _apply(f, A, name):
    return te.compute(A.shape, lambda i: f(A[i]), name=name)


def test_special_values(kernel):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1.0], dtype="float32")
    A = te.placeholder((7,), name="A")
    outs = {"exp": te.exp, "log": te.log, "sqrt": te.sqrt, "tanh": te.tanh, "abs": te.abs, "floor": te.floor}
    tensors = [_apply(f, A, name) for name, f in outs.items()]
    res = kernel(te.create_schedule([t.op for t in tensors]), [A, *tensors], [x], [((7,), "float32")] * len(outs))
    with np.errstate(all="ignore"):
        for (name, _), got in zip(outs.items(), res):
            ref = getattr(np, name)(x)
            # Specials (zeros, infinities, NaN, a denormal) exactly; x = -1 only where the result is
            # exact or NaN (the other values are covered by the ulp tests above).
            keep = slice(None) if name in ("log", "sqrt", "abs", "floor") else slice(0, 6)
            np.testing.assert_array_equal(got[keep], ref[keep], err_msg=name)  # NaN == NaN here


def test_isnan_isinf(kernel):
    x = np.array([0.0, np.inf, -np.inf, np.nan, 3.0], dtype="float32")
    A = te.placeholder((5,), name="A")
    N = te.compute((5,), lambda i: te.isnan(A[i]), name="N")
    Inf = te.compute((5,), lambda i: te.isinf(A[i]), name="I")
    n_out, i_out = kernel(te.create_schedule([N.op, Inf.op]), [A, N, Inf], [x], [((5,), "bool"), ((5,), "bool")])
    np.testing.assert_array_equal(n_out, np.isnan(x))
    np.testing.assert_array_equal(i_out, np.isinf(x))


def test_math_of_bool_is_an_error():
    B = te.placeholder((4,), dtype="bool", name="B")
    with pytest.raises(ember.EmberError, match="cast it first"):
        te.exp(B[0])
