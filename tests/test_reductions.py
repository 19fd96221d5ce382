"""Reductions: sum, max, min, prod, user-defined reducers (comm_reducer, several values),
``where=`` conditions, rfactor, over fixed and symbolic sizes, compared with NumPy float64."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te


def _row_reduce(reducer, n_rows, n_cols, dtype="float32", where=None):
    A = te.placeholder((n_rows, n_cols), dtype=dtype, name="A")
    k = te.reduce_axis((0, n_cols), name="k")
    if where is None:
        B = te.compute((n_rows,), lambda i: reducer(A[i, k], axis=k), name="B")
    else:
        B = te.compute((n_rows,), lambda i: reducer(A[i, k], axis=k, where=where(i, k)), name="B")
    return A, B, k


REFS = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


@pytest.mark.parametrize("name", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "int8", "uint8"])
def test_builtin_reducers(kernel, rng, name, dtype):
    reducer = getattr(te, name)
    A, B, _ = _row_reduce(reducer, 5, 13, dtype)
    s = te.create_schedule(B.op)
    low, high = (0.5, 1.5) if name == "prod" else (-4, 4)
    if dtype.startswith(("int", "uint")) and name == "prod":
        a = rng.integers(0 if dtype == "uint8" else -1, 2, size=(5, 13)).astype(dtype)
    elif dtype == "uint8":
        a = rng.integers(0, 20, size=(5, 13)).astype(dtype)
    elif dtype.startswith("int"):
        a = rng.integers(-20, 20, size=(5, 13)).astype(dtype)
    else:
        a = rng.uniform(low, high, size=(5, 13)).astype(dtype)
    (b,) = kernel(s, [A, B], [a], [((5,), dtype)])
    if dtype.startswith(("int", "uint")):
        # Integer sums wrap around in the element type, as NumPy's do with dtype=.
        np.testing.assert_array_equal(b, REFS[name](a, axis=1, dtype=dtype) if name in ("sum", "prod")
                                      else REFS[name](a, axis=1))
    elif name in ("max", "min"):
        np.testing.assert_array_equal(b, REFS[name](a, axis=1))  # exact
    else:
        ref = REFS[name](a.astype(np.float64), axis=1)
        # Sequential accumulation in the element type: error grows with the length (13 terms).
        scale = np.abs(a).astype(np.float64).sum(axis=1) if name == "sum" else np.abs(ref)
        kernel.assert_fp(b, ref, scale, dtype, ulps=13)


def test_empty_reduction_gives_identity(kernel):
    n = te.var("n")
    A = te.placeholder((4, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")
    M = te.compute((4,), lambda i: te.max(A[i, k], axis=k), name="M")
    s = te.create_schedule([S.op, M.op])
    f = ember.build(s, [A, S, M], name="empty_red")
    a = np.zeros((4, 0), dtype="float32")
    s_out, m_out = kernel.run(f, [a], [((4,), "float32"), ((4,), "float32")])
    np.testing.assert_array_equal(s_out, np.zeros(4))
    np.testing.assert_array_equal(m_out, np.full(4, -np.inf))


def test_max_propagates_nan(kernel):
    A, B, _ = _row_reduce(te.max, 2, 4)
    a = np.array([[1, np.nan, 3, 2], [1, 2, 3, 4]], dtype="float32")
    (b,) = kernel(te.create_schedule(B.op), [A, B], [a], [((2,), "float32")])
    np.testing.assert_array_equal(b, np.max(a, axis=1))


@pytest.mark.parametrize("n", [1, 17, 64])
def test_sum_symbolic_with_split_reduction(kernel, rng, n):
    nv = te.var("n")
    A = te.placeholder((3, nv), name="A")
    k = te.reduce_axis((0, nv), name="k")
    B = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    s[B].reorder(ko, B.op.axis[0], ki)
    a = rng.standard_normal((3, n)).astype("float32")
    (b,) = kernel(s, [A, B], [a], [((3,), "float32")])
    kernel.assert_fp(b, a.astype(np.float64).sum(axis=1), np.abs(a).sum(axis=1), ulps=n)


def test_where_condition(kernel, rng):
    A, B, _ = _row_reduce(te.sum, 6, 10, where=lambda i, k: k <= i)  # lower-triangular row sums
    a = rng.standard_normal((6, 10)).astype("float32")
    (b,) = kernel(te.create_schedule(B.op), [A, B], [a], [((6,), "float32")])
    ref = np.tril(a.astype(np.float64)).sum(axis=1)
    kernel.assert_fp(b, ref, np.abs(np.tril(a)).sum(axis=1), ulps=10)


def test_reduce_axis_with_range_and_two_axes(kernel, rng):
    A = te.placeholder((7, 9, 5), name="A")
    r = te.reduce_axis((2, 9), name="r")
    q = te.reduce_axis((0, 5), name="q")
    B = te.compute((7,), lambda i: te.sum(A[i, r, q] * 2.0, axis=[r, q]), name="B")
    a = rng.standard_normal((7, 9, 5)).astype("float32")
    (b,) = kernel(te.create_schedule(B.op), [A, B], [a], [((7,), "float32")])
    ref = 2 * a[:, 2:, :].astype(np.float64).sum(axis=(1, 2))
    kernel.assert_fp(b, ref, 2 * np.abs(a[:, 2:, :]).sum(axis=(1, 2)), ulps=35)


def test_sum_with_accumulator_cast(kernel, rng):
    """float16 inputs summed in float32 (a cast inside the reduction)."""
    A = te.placeholder((4, 100), dtype="float16", name="A")
    k = te.reduce_axis((0, 100), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k].astype("float32"), axis=k), name="B")
    a = rng.standard_normal((4, 100)).astype("float16")
    (b,) = kernel(te.create_schedule(B.op), [A, B], [a], [((4,), "float32")])
    kernel.assert_fp(b, a.astype(np.float64).sum(axis=1), np.abs(a.astype(np.float64)).sum(axis=1), ulps=100)


def test_user_defined_reducer(kernel, rng):
    """A user-defined commutative reducer: the largest absolute value."""
    maxabs = te.comm_reducer(lambda x, y: te.max_value_expr(te.abs(x), te.abs(y)),
                             lambda t: te.const(0, t), name="maxabs")
    A, B, _ = _row_reduce(maxabs, 4, 11)
    a = rng.standard_normal((4, 11)).astype("float32")
    (b,) = kernel(te.create_schedule(B.op), [A, B], [a], [((4,), "float32")])
    np.testing.assert_array_equal(b, np.abs(a).max(axis=1))


def test_argmax_two_value_reducer(kernel, rng):
    def fcombine(x, y):
        take = y[1] > x[1]
        return te.select(take, y[0], x[0]), te.select(take, y[1], x[1])

    def fidentity(t0, t1):
        return te.const(-1, t0), te.min_value_of(t1)

    argmax = te.comm_reducer(fcombine, fidentity, name="argmax")
    n = te.var("n")
    A = te.placeholder((n, 9), name="A")
    k = te.reduce_axis((0, 9), name="k")
    idx, val = te.compute((n,), lambda i: argmax((k.var, A[i, k]), axis=k), name="T")
    s = te.create_schedule(idx.op)
    io, ii = s[idx].split(idx.op.axis[0], factor=4)
    a = rng.standard_normal((10, 9)).astype("float32")
    i_out, v_out = kernel(s, [A, idx, val], [a], [((10,), "int32"), ((10,), "float32")])
    np.testing.assert_array_equal(i_out, a.argmax(axis=1))
    np.testing.assert_array_equal(v_out, a.max(axis=1))


@pytest.mark.parametrize("factor_axis", [0, 1])
@pytest.mark.parametrize("n", [13, 64])
def test_rfactor(kernel, rng, factor_axis, n):
    A = te.placeholder((5, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((5,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    BF = s.rfactor(B, ki, factor_axis=factor_axis)
    assert tuple(int(x.value) for x in BF.shape) == ((4, 5) if factor_axis == 0 else (5, 4))
    s[BF].compute_at(s[B], B.op.axis[0])
    s[B].parallel(B.op.axis[0])
    a = rng.standard_normal((5, n)).astype("float32")
    (b,) = kernel(s, [A, B], [a], [((5,), "float32")])
    kernel.assert_fp(b, a.astype(np.float64).sum(axis=1), np.abs(a).sum(axis=1), ulps=n)


def test_rfactor_vectorized_partials(kernel, rng):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((), lambda: te.max(A[k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    BF = s.rfactor(B, ki)
    s[BF].vectorize(s[BF].op.axis[0])
    a = rng.standard_normal(29).astype("float32")
    (b,) = kernel(s, [A, B], [a], [((), "float32")])
    np.testing.assert_array_equal(b, a.max())


def test_gemm_reference(kernel, rng):
    M, N, K = 17, 23, 31
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(*C.op.axis, 4, 8)
    ko, ki = s[C].split(k, factor=5)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    (c,) = kernel(s, [A, B, C], [a, b], [((M, N), "float32")])
    kernel.assert_fp(c, a.astype(np.float64) @ b, np.abs(a) @ np.abs(b), ulps=K)


def test_reduction_errors():
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(ember.EmberError, match="not a te.reduce_axis"):
        te.sum(A[0, 0], axis=A.op.shape[0])
    with pytest.raises(ember.EmberError, match="whole body"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k) + 1.0, name="bad")
    with pytest.raises(ember.EmberError, match="begin, end"):
        te.reduce_axis((0, 1, 2))
