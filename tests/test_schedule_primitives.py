"""Every schedule primitive alone and combined, on shapes that no split divides and on symbolic
sizes; each kernel is compared with NumPy on fresh inputs with poisoned outputs."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.ir import stmt as S
from ember.ir.visitor import post_order_visit

SIZES = [1, 7, 13, 64, 100]  # 7, 13 and 100 are divided by none of the factors used below


def _loops(func) -> list[S.For]:
    out: list[S.For] = []
    post_order_visit(func.body, lambda n: out.append(n) if isinstance(n, S.For) else None)
    return out


def _add2d(m, n, dtype="float32"):
    A = te.placeholder((m, n), dtype=dtype, name="A")
    B = te.placeholder((m, n), dtype=dtype, name="B")
    C = te.compute((m, n), lambda i, j: A[i, j] * 2 + B[i, j], name="C")
    return A, B, C


def _check2d(kernel, rng, s, A, B, C, shape, scalars=()):
    a = rng.standard_normal(shape).astype("float32")
    b = rng.standard_normal(shape).astype("float32")
    (c,) = kernel(s, [A, B, C], [a, b], [(shape, "float32")])
    kernel.assert_fp(c, a.astype(np.float64) * 2 + b, 2 * np.abs(a) + np.abs(b))


# -- split ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("how", [("factor", 1), ("factor", 4), ("factor", 16), ("nparts", 3), ("nparts", 8)])
def test_split_symbolic_n(kernel, rng, n, how):
    nv = te.var("n")
    A = te.placeholder((nv,), name="A")
    B = te.compute((nv,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], **{how[0]: how[1]})
    a = rng.standard_normal(n).astype("float32")
    (b,) = kernel(s, [A, B], [a], [((n,), "float32")])
    np.testing.assert_array_equal(b, a + 1)


def test_split_twice_nested_and_fixed_shape(kernel, rng):
    A, B, C = _add2d(23, 37)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=8)
    jio, jii = s[C].split(ji, factor=3)
    io, ii = s[C].split(i, nparts=5)
    _check2d(kernel, rng, s, A, B, C, (23, 37))


def test_split_with_symbolic_factor(kernel, rng):
    nv, f = te.var("n"), te.var("f")
    A = te.placeholder((nv,), name="A")
    B = te.compute((nv,), lambda i: A[i] * 3.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=f)
    fn = ember.build(s, [A, B, f], name="symsplit")
    for n, fv in [(10, 3), (17, 4), (5, 8)]:
        a = rng.standard_normal(n).astype("float32")
        (b,) = kernel.run(fn, [a], [((n,), "float32")], scalars=[fv])
        np.testing.assert_array_equal(b, a * 3)


# -- fuse / reorder / tile ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (16, 5)])
def test_fuse(kernel, rng, shape):
    A, B, C = _add2d(*shape)
    s = te.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    fo, fi = s[C].split(f, factor=6)
    _check2d(kernel, rng, s, A, B, C, shape)


def test_fuse_three_axes_symbolic(kernel, rng):
    m, n, k = te.var("m"), te.var("n"), te.var("k")
    A = te.placeholder((m, n, k), name="A")
    B = te.compute((m, n, k), lambda i, j, l: A[i, j, l] - 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].fuse(B.op.axis[0], B.op.axis[1], B.op.axis[2])
    a = rng.standard_normal((3, 5, 7)).astype("float32")
    (b,) = kernel(s, [A, B], [a], [((3, 5, 7), "float32")])
    np.testing.assert_array_equal(b, a - 1)


def test_reorder(kernel, rng):
    A, B, C = _add2d(9, 11)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    s[C].reorder(j, i)
    f = ember.lower(s, [A, B, C])
    assert [lp.loop_var.name for lp in _loops(f)][:2] == ["i", "j"]  # post order: inner first
    _check2d(kernel, rng, s, A, B, C, (9, 11))


@pytest.mark.parametrize("shape,factors", [((19, 23), (4, 8)), ((8, 8), (8, 8)), ((5, 3), (16, 16))])
def test_tile(kernel, rng, shape, factors):
    A, B, C = _add2d(*shape)
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(*C.op.axis, *factors)
    assert s[C].leaf_iter_vars == [xo, yo, xi, yi]
    _check2d(kernel, rng, s, A, B, C, shape)


def test_tile_symbolic(kernel, rng):
    m, n = te.var("m"), te.var("n")
    A, B, C = _add2d(m, n)
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(*C.op.axis, 4, 8)
    s[C].vectorize(yi)
    s[C].parallel(xo)
    f = ember.build(s, [A, B, C], name="tile_sym")
    for shape in [(1, 1), (5, 9), (17, 31), (8, 16)]:
        a = rng.standard_normal(shape).astype("float32")
        b = rng.standard_normal(shape).astype("float32")
        (c,) = kernel.run(f, [a, b], [(shape, "float32")])
        kernel.assert_fp(c, a.astype(np.float64) * 2 + b, 2 * np.abs(a) + np.abs(b))


# -- annotations ----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [3, 64, 1000])
def test_parallel(kernel, rng, n):
    nv = te.var("n")
    A = te.placeholder((nv,), name="A")
    B = te.compute((nv,), lambda i: A[i] * A[i], name="B")
    s = te.create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=16)
    s[B].parallel(o)
    a = rng.standard_normal(n).astype("float32")
    (b,) = kernel(s, [A, B], [a], [((n,), "float32")])
    np.testing.assert_array_equal(b, a * a)


def test_parallel_nested_runs_serially_inside(kernel, rng):
    A, B, C = _add2d(37, 29)
    s = te.create_schedule(C.op)
    s[C].parallel(C.op.axis[0])
    s[C].parallel(C.op.axis[1])
    _check2d(kernel, rng, s, A, B, C, (37, 29))


@pytest.mark.parametrize("lanes", [2, 4, 8, 16, 5])
@pytest.mark.parametrize("n", [1, 15, 64])
def test_vectorize_with_scalar_tail(kernel, rng, lanes, n):
    nv = te.var("n")
    A = te.placeholder((nv,), name="A")
    B = te.placeholder((nv,), name="B")
    C = te.compute((nv,), lambda i: A[i] * B[i] + 0.5, name="C")
    s = te.create_schedule(C.op)
    o, i = s[C].split(C.op.axis[0], factor=lanes)
    s[C].vectorize(i)
    f = ember.build(s, [A, B, C], name="vec")
    assert "ramp" in f.get_source("ir")
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    (c,) = kernel.run(f, [a, b], [((n,), "float32")])
    # a*b + 0.5 may be contracted into one FMA (docs/numerics.md): one rounding instead of two.
    kernel.assert_fp(c, a.astype(np.float64) * b + 0.5, np.abs(a * b) + 0.5)


def test_vectorize_constant_axis_directly(kernel, rng):
    A, B, C = _add2d(3, 8)
    s = te.create_schedule(C.op)
    s[C].vectorize(C.op.axis[1])
    _check2d(kernel, rng, s, A, B, C, (3, 8))


def test_vectorize_strided_and_broadcast_access(kernel, rng):
    A = te.placeholder((12, 10), name="A")
    v = te.placeholder((10,), name="v")
    # Transposed (strided) reads of A, a broadcast scalar row value, and a select.
    C = te.compute((10, 12), lambda i, j: te.if_then_else(A[j, i] > 0, A[j, i], v[i]) + v[i], name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].vectorize(ji)
    a = rng.standard_normal((12, 10)).astype("float32")
    vv = rng.standard_normal(10).astype("float32")
    (c,) = kernel(s, [A, v, C], [a, vv], [((10, 12), "float32")])
    np.testing.assert_array_equal(c, np.where(a.T > 0, a.T, vv[:, None]) + vv[:, None])


@pytest.mark.parametrize("n", [1, 6, 9])
def test_unroll(kernel, rng, n):
    nv = te.var("n")
    A = te.placeholder((nv,), name="A")
    B = te.compute((nv,), lambda i: A[i] + 2.0, name="B")
    s = te.create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=4)
    s[B].unroll(i)
    f = ember.build(s, [A, B], name="unr")
    assert not any(lp.loop_var.name == "i.inner" for lp in _loops(ember.lower(s, [A, B])))
    a = rng.standard_normal(n).astype("float32")
    (b,) = kernel.run(f, [a], [((n,), "float32")])
    np.testing.assert_array_equal(b, a + 2)


def test_unroll_symbolic_extent_stays_a_loop(kernel, rng):
    nv = te.var("n")
    A = te.placeholder((nv,), name="A")
    B = te.compute((nv,), lambda i: A[i] + 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].unroll(B.op.axis[0])
    a = rng.standard_normal(11).astype("float32")
    (b,) = kernel(s, [A, B], [a], [((11,), "float32")])
    np.testing.assert_array_equal(b, a + 2)


def test_bind_lowers_to_thread_loops_and_cpu_codegen_refuses():
    nv = te.var("n")
    A = te.placeholder((nv,), name="A")
    B = te.compute((nv,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    f = ember.lower(s, [A, B])
    tags = {lp.thread_tag for lp in _loops(f)}
    assert tags == {"blockIdx.x", "threadIdx.x"}
    with pytest.raises(ember.CodegenError, match="threadIdx.x|blockIdx.x"):
        ember.build(s, [A, B], target="llvm")


# -- attachment -----------------------------------------------------------------------------------
def _two_stage(m, n):
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 3.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1.0, name="C")
    return A, B, C


@pytest.mark.parametrize("where", ["outer", "inner", "split_outer"])
def test_compute_at(kernel, rng, where):
    A, B, C = _two_stage(13, 21)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=8)
    ax = {"outer": i, "inner": ji, "split_outer": jo}[where]
    s[B].compute_at(s[C], ax)
    a = rng.standard_normal((13, 21)).astype("float32")
    (c,) = kernel(s, [A, C], [a], [((13, 21), "float32")])
    kernel.assert_fp(c, a.astype(np.float64) * 3 + 1, 3 * np.abs(a) + 1)


def test_compute_at_stencil_with_halo(kernel, rng):
    """A consumer reading B[i-1], B[i], B[i+1]: the attached region needs a halo and clamping."""
    n = 30
    A = te.placeholder((n + 2,), name="A")
    B = te.compute((n + 2,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + B[i + 1] + B[i + 2], name="C")
    s = te.create_schedule(C.op)
    o, i = s[C].split(C.op.axis[0], factor=7)
    s[B].compute_at(s[C], o)
    a = rng.standard_normal(n + 2).astype("float32")
    (c,) = kernel(s, [A, C], [a], [((n,), "float32")])
    b = a * 2
    np.testing.assert_allclose(c, b[:-2] + b[1:-1] + b[2:], rtol=1e-6)


def test_compute_at_symbolic(kernel, rng):
    m, n = te.var("m"), te.var("n")
    A, B, C = _two_stage(m, n)
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    f = ember.build(s, [A, C], name="cat_sym")
    for shape in [(1, 3), (9, 5), (16, 2)]:
        a = rng.standard_normal(shape).astype("float32")
        (c,) = kernel.run(f, [a], [(shape, "float32")])
        kernel.assert_fp(c, a.astype(np.float64) * 3 + 1, 3 * np.abs(a) + 1)


def test_compute_inline(kernel, rng):
    A, B, C = _two_stage(6, 7)
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    f = ember.lower(s, [A, C])
    assert "B" not in {getattr(n, "buffer", None) and n.buffer.name for n in _all_nodes(f.body)}
    a = rng.standard_normal((6, 7)).astype("float32")
    (c,) = kernel(s, [A, C], [a], [((6, 7), "float32")])
    kernel.assert_fp(c, a.astype(np.float64) * 3 + 1, 3 * np.abs(a) + 1)


def _all_nodes(node):
    out = []
    post_order_visit(node, out.append)
    return out


def test_compute_root_undoes_compute_at(kernel, rng):
    A, B, C = _two_stage(5, 9)
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].compute_root()
    a = rng.standard_normal((5, 9)).astype("float32")
    (c,) = kernel(s, [A, C], [a], [((5, 9), "float32")])
    kernel.assert_fp(c, a.astype(np.float64) * 3 + 1, 3 * np.abs(a) + 1)


def test_chain_of_inlined_and_attached_stages(kernel, rng):
    n = 50
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((n,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((n,), lambda i: C[i] - A[i], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_inline()
    o, i = s[D].split(D.op.axis[0], factor=16)
    s[C].compute_at(s[D], o)
    s[D].vectorize(i)
    a = rng.standard_normal(n).astype("float32")
    (d,) = kernel(s, [A, D], [a], [((n,), "float32")])
    kernel.assert_fp(d, (a.astype(np.float64) + 1) * 2 - a, 3 * (np.abs(a) + 1), ulps=4)


# -- storage --------------------------------------------------------------------------------------
@pytest.mark.parametrize("scope", ["global", "local"])
def test_cache_read(kernel, rng, scope):
    A = te.placeholder((17, 9), name="A")
    B = te.compute((17, 9), lambda i, j: A[i, j] + A[i, (j + 1) % 9], name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, scope, [B])
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[AA].compute_at(s[B], io)
    f = ember.lower(s, [A, B])
    assert any(isinstance(n, S.Allocate) and n.buffer.scope == scope for n in _all_nodes(f.body))
    a = rng.standard_normal((17, 9)).astype("float32")
    (b,) = kernel(s, [A, B], [a], [((17, 9), "float32")])
    np.testing.assert_array_equal(b, a + np.roll(a, -1, axis=1))


@pytest.mark.parametrize("scope", ["global", "local"])
def test_cache_read_permuted(kernel, rng, scope):
    """``cache_read(..., axes=)``: a 3-D operand stored with its dimensions permuted, read by a
    reduction and attached inside a split loop; the copy's shape follows the permutation and the
    result matches NumPy. A repeated or missing dimension is a ScheduleError."""
    A = te.placeholder((7, 5, 3), name="A")
    k = te.reduce_axis((0, 3), name="k")
    B = te.compute((7, 5), lambda i, j: te.sum(A[i, j, k] * (k + 1).astype("float32"), axis=k), name="B")
    s = te.create_schedule(B.op)
    AT = s.cache_read(A, scope, [B], axes=(2, 0, 1))
    assert [x.value for x in AT.shape] == [3, 7, 5]
    io, ii = s[B].split(B.op.axis[0], factor=3)
    s[AT].compute_at(s[B], io)
    a = rng.standard_normal((7, 5, 3)).astype("float32")
    (b,) = kernel(s, [A, B], [a], [((7, 5), "float32")])
    want = a.astype(np.float64) @ np.array([1.0, 2.0, 3.0])
    kernel.assert_fp(b, want, np.abs(a).astype(np.float64) @ np.array([1.0, 2.0, 3.0]))
    for bad in ((0, 0, 1), (0, 1)):
        with pytest.raises(ember.ScheduleError, match="is not a permutation"):
            te.create_schedule(B.op).cache_read(A, scope, [B], axes=bad)


@pytest.mark.parametrize("attach", [False, True])
def test_cache_write(kernel, rng, attach):
    M, N, K = 11, 13, 7
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    if attach:
        io, jo, ii, ji = s[C].tile(*C.op.axis, 4, 4)
        s[CC].compute_at(s[C], jo)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    (c,) = kernel(s, [A, B, C], [a, b], [((M, N), "float32")])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_storage_align(kernel, rng):
    A = te.placeholder((10, 12), name="A")
    B = te.compute((10, 12), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((10, 12), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[B].storage_align(B.op.axis[0], 16, 3)
    f = ember.lower(s, [A, C])
    allocs = [n for n in _all_nodes(f.body) if isinstance(n, S.Allocate)]
    assert len(allocs) == 1 and allocs[0].buffer.strides  # padded strides
    assert allocs[0].buffer.strides[0].value % 16 == 3
    a = rng.standard_normal((10, 12)).astype("float32")
    (c,) = kernel(s, [A, C], [a], [((10, 12), "float32")])
    kernel.assert_fp(c, a.astype(np.float64) * 2 + 1, 2 * np.abs(a) + 1)


# -- several outputs from one compute ------------------------------------------------------------
def test_multi_output_compute(kernel, rng):
    nv = te.var("n")
    A = te.placeholder((nv,), name="A")
    B, C = te.compute((nv,), lambda i: (A[i] + 1.0, A[i] * A[i]), name="BC")
    s = te.create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=4)
    s[B].vectorize(i)
    a = rng.standard_normal(10).astype("float32")
    b, c = kernel(s, [A, B, C], [a], [((10,), "float32"), ((10,), "float32")])
    np.testing.assert_array_equal(b, a + 1)
    np.testing.assert_array_equal(c, a * a)


def test_rank_zero_and_rank_four(kernel, rng):
    A = te.placeholder((2, 3, 4, 5), name="A")
    B = te.compute((2, 3, 4, 5), lambda a, b, c, d: A[a, b, c, d] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].fuse(B.op.axis[1], B.op.axis[2])
    a = rng.standard_normal((2, 3, 4, 5)).astype("float32")
    (b,) = kernel(s, [A, B], [a], [((2, 3, 4, 5), "float32")])
    np.testing.assert_array_equal(b, a * 2)
    k = te.reduce_axis((0, 7), name="k")
    X = te.placeholder((7,), name="X")
    Y = te.compute((), lambda: te.sum(X[k], axis=k), name="Y")
    x = rng.standard_normal(7).astype("float32")
    (y,) = kernel(te.create_schedule(Y.op), [X, Y], [x], [((), "float32")])
    np.testing.assert_allclose(y, x.astype(np.float64).sum(), rtol=1e-6)


def test_everything_combined(kernel, rng):
    """split + reorder + fuse + parallel + vectorize + unroll + compute_at + inline together."""
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    P = te.compute((m, n), lambda i, j: A[i, j] * 0.5, name="P")
    Q = te.compute((m, n), lambda i, j: P[i, j] + 1.0, name="Q")
    R = te.compute((m, n), lambda i, j: Q[i, j] * Q[i, j], name="R")
    s = te.create_schedule(R.op)
    s[P].compute_inline()
    io, jo, ii, ji = s[R].tile(*R.op.axis, 3, 8)
    s[R].reorder(io, jo, ii, ji)
    f = s[R].fuse(io, jo)
    s[R].parallel(f)
    s[R].unroll(ii)
    s[R].vectorize(ji)
    s[Q].compute_at(s[R], f)
    fn = ember.build(s, [A, R], name="combo")
    for shape in [(1, 1), (7, 19), (12, 16)]:
        a = rng.standard_normal(shape).astype("float32")
        (r,) = kernel.run(fn, [a], [(shape, "float32")])
        np.testing.assert_allclose(r, (a * 0.5 + 1) ** 2, rtol=1e-6)


def test_compute_at_region_depending_on_a_loop_that_is_later_removed(kernel, rng):
    """Regression (found by the property tests): the attached stage's buffer shape depends on the
    attach loop; when loop partitioning left iterations of extent one, the loop variable was
    substituted everywhere but in the Allocate's shape, and lowering failed with "variable ... is
    bound by nothing"."""
    A = te.placeholder((1, 3), name="A")
    B = te.placeholder((3,), name="B")
    T = te.compute((1, 3), lambda i, j: A[i, j] * 2.0 - B[j], name="T")
    C = te.compute((1, 3), lambda i, j: T[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    o, _ = s[C].split(f, factor=1)
    o2, _ = s[C].split(o, factor=1)
    o3, _ = s[C].split(o2, factor=2)
    s[T].compute_at(s[C], o3)
    a = rng.standard_normal((1, 3)).astype("float32")
    b = rng.standard_normal(3).astype("float32")
    (c,) = kernel(s, [A, B, C], [a, b], [((1, 3), "float32")])
    kernel.assert_fp(c, a.astype(np.float64) * 2 - b + 1, 2 * np.abs(a) + np.abs(b) + 1)
