"""Misuse of schedule primitives raises ScheduleError naming the stage, the axis and the fix."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ScheduleError


def _matmul():
    A = te.placeholder((8, 8), name="A")
    B = te.placeholder((8, 8), name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def _raises(fn, *fragments):
    with pytest.raises(ScheduleError) as info:
        fn()
    msg = str(info.value)
    for f in fragments:
        assert f in msg, f"{f!r} missing from: {msg}"
    return msg


def test_split_an_axis_twice():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda x: A[x] + 1.0, name="Bout")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    _raises(lambda: s[B].split(B.op.axis[0], factor=8), "stage Bout", "x", "already split", "x.outer", "x.inner")


def test_use_a_fused_axis():
    A = te.placeholder((4, 4), name="A")
    B = te.compute((4, 4), lambda i, j: A[i, j], name="Bf")
    s = te.create_schedule(B.op)
    s[B].fuse(*B.op.axis)
    _raises(lambda: s[B].parallel(B.op.axis[0]), "stage Bf", "i", "fused", "use the fused axis")


def test_bind_a_reduction_axis():
    _, _, C, k = _matmul()
    s = te.create_schedule(C.op)
    _raises(lambda: s[C].bind(k, te.thread_axis("threadIdx.x")), "stage C", "k", "reduction axis", "rfactor")


def test_parallel_and_vectorize_of_a_reduction_axis():
    _, _, C, k = _matmul()
    s = te.create_schedule(C.op)
    _raises(lambda: s[C].parallel(k), "stage C", "k", "reduction axis", "rfactor")
    _raises(lambda: s[C].vectorize(k), "stage C", "k", "reduction axis", "rfactor")


def test_compute_at_into_a_stage_that_does_not_consume():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    D = te.compute((8,), lambda i: A[i] - 1.0, name="D")
    s = te.create_schedule([C.op, D.op])
    _raises(lambda: s[B].compute_at(s[D], D.op.axis[0]), "compute_at of B into D", "does not read B", "C",
            "attach it to a stage that consumes it")


def test_compute_at_with_an_axis_of_another_stage():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    _raises(lambda: s[B].compute_at(s[C], B.op.axis[0]), "compute_at of B", "not a loop of this stage",
            "pass an axis of s[C]")


def test_compute_at_with_several_readers():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    D = te.compute((8,), lambda i: B[i] - 1.0, name="D")
    s = te.create_schedule([C.op, D.op])
    # Detected when the schedule is lowered (compute_at into a transitive reader is allowed).
    with pytest.raises(ember.EmberError) as info:
        s[B].compute_at(s[C], C.op.axis[0])
        ember.lower(s, [A, C, D])
    assert "B" in str(info.value) and "also read by D" in str(info.value) and "cache_read" in str(info.value)


def test_vectorize_non_constant_extent():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="Vec")
    s = te.create_schedule(B.op)
    _raises(lambda: s[B].vectorize(B.op.axis[0]), "vectorize on stage Vec", "axis i", "not a constant",
            "split it with a constant factor")
    o, i = s[B].split(B.op.axis[0], nparts=4)  # the inner extent is ceil(n/4): still symbolic
    _raises(lambda: s[B].vectorize(i), "stage Vec", "i.inner", "not a constant")
    s2 = te.create_schedule(B.op)
    o2, i2 = s2[B].split(B.op.axis[0], factor=8)
    s2[B].vectorize(i2)  # the fix the message suggests works


def test_annotate_then_split():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i], name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    _raises(lambda: s[B].split(B.op.axis[0], factor=4), "stage B", "i", "parallel", "split or fuse first")


def test_two_annotations_on_one_axis():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i], name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    _raises(lambda: s[B].unroll(B.op.axis[0]), "unroll on stage B", "i", "already parallel")


def test_bind_same_thread_tag_twice():
    A = te.placeholder((4, 4), name="A")
    B = te.compute((4, 4), lambda i, j: A[i, j], name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    _raises(lambda: s[B].bind(B.op.axis[1], te.thread_axis("threadIdx.x")), "stage B", "threadIdx.x",
            "already bound to i")
    _raises(lambda: s[B].bind(B.op.axis[1], B.op.axis[0]), "te.thread_axis")


def test_fuse_errors():
    A = te.placeholder((4, 4, 4), name="A")
    B = te.compute((4, 4, 4), lambda i, j, l: A[i, j, l], name="B")
    s = te.create_schedule(B.op)
    i, j, l = B.op.axis
    _raises(lambda: s[B].fuse(i, l), "fuse on stage B", "i and l are not adjacent", "reorder")
    _, _, C, k = _matmul()
    s2 = te.create_schedule(C.op)
    _raises(lambda: s2[C].fuse(C.op.axis[1], k), "cannot fuse reduction axis with data-parallel axis")


def test_split_arguments():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i], name="B")
    s = te.create_schedule(B.op)
    _raises(lambda: s[B].split(B.op.axis[0]), "split of i on stage B", "exactly one of factor= or nparts=")
    _raises(lambda: s[B].split(B.op.axis[0], factor=4, nparts=2), "exactly one")
    _raises(lambda: s[B].split(B.op.axis[0], factor=0), "positive")
    _raises(lambda: s[B].split(B.op.axis[0], factor=2.5), "integer")
    _raises(lambda: s[B].split("i", factor=2), "expected an axis")


def test_reorder_twice_the_same_axis():
    A = te.placeholder((4, 4), name="A")
    B = te.compute((4, 4), lambda i, j: A[i, j], name="B")
    s = te.create_schedule(B.op)
    _raises(lambda: s[B].reorder(B.op.axis[0], B.op.axis[0]), "reorder on stage B", "given twice")


def test_inline_errors():
    A, B, C, k = _matmul()
    D = te.compute((8, 8), lambda i, j: C[i, j] * 2.0, name="D")
    s = te.create_schedule(D.op)
    _raises(lambda: s[C].compute_inline(), "compute_inline: C is a reduction", "compute_at")
    _raises(lambda: s[D].compute_inline(), "D is an output")
    _raises(lambda: s[A].compute_inline(), "A is an input")
    _raises(lambda: s[D].compute_at(s[D], D.op.axis[0]), "D is an output")
    E_ = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="E")
    F = te.compute((8, 8), lambda i, j: E_[i, j] * 2.0, name="F")
    s2 = te.create_schedule(F.op)
    s2[E_].compute_inline()
    _raises(lambda: s2[E_].split(E_.op.axis[0], factor=2), "stage E was inlined")


def test_cache_and_rfactor_errors():
    A, B, C, k = _matmul()
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=2)
    _raises(lambda: s.cache_write(C, "local"), "cache_write of C", "already scheduled", "before split")
    s2 = te.create_schedule(C.op)
    _raises(lambda: s2.cache_write(C, "register"), "unknown scope")
    _raises(lambda: s2.cache_read(A, "texture", [C]), "unknown scope")
    D = te.compute((8, 8), lambda i, j: C[i, j] + 1.0, name="D")
    s3 = te.create_schedule(D.op)
    _raises(lambda: s3.cache_read(A, "local", [D]), "D does not read A")
    _raises(lambda: s3.rfactor(D, D.op.axis[0]), "rfactor of D", "not a reduction")
    _raises(lambda: s3.rfactor(C, C.op.axis[0]), "rfactor of C", "i is not a reduction axis")
    _raises(lambda: s3[A].compute_root(), "A is an input")


def test_storage_align_errors():
    A = te.placeholder((4, 4), name="A")
    B = te.compute((4, 4), lambda i, j: A[i, j], name="B")
    C = te.compute((4, 4), lambda i, j: B[i, j], name="C")
    s = te.create_schedule(C.op)
    _raises(lambda: s[B].storage_align(C.op.axis[0], 8, 1), "storage_align on stage B", "not an original axis")
    _raises(lambda: s[B].storage_align(B.op.axis[0], 8, 8), "0 <= offset < factor")


def test_schedule_construction_errors():
    A = te.placeholder((4,), name="A")
    _raises(lambda: te.create_schedule(A.op), "A is a placeholder", ".op")
    B = te.compute((4,), lambda i: A[i], name="B")
    other = te.compute((4,), lambda i: A[i], name="Other")
    s = te.create_schedule(B.op)
    _raises(lambda: s[other], "Other is not part of this schedule")
    with pytest.raises(ember.EmberError, match="thread tag"):
        te.thread_axis("warpIdx.x")


def test_errors_are_ember_errors():
    assert issubclass(ScheduleError, ember.EmberError)


def test_refused_split_or_fuse_leaves_the_schedule_intact(kernel, rng):
    """Regression: a fuse (or split) of an annotated axis raised ScheduleError only after it had
    recorded the new relation, so lowering later failed with a KeyError."""
    A = te.placeholder((6, 5), name="A")
    B = te.compute((6, 5), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    s[B].parallel(i)
    _raises(lambda: s[B].fuse(i, j), "stage B", "already marked parallel")
    _raises(lambda: s[B].split(i, factor=2), "stage B", "already marked parallel")
    assert s[B].leaf_iter_vars == [i, j] and not s[B].relations
    a = rng.standard_normal((6, 5)).astype("float32")
    (b,) = kernel(s, [A, B], [a], [((6, 5), "float32")])
    np.testing.assert_array_equal(b, a * 2)


def test_split_or_fuse_an_attach_point():
    """Regression: splitting the axis another stage was computed at left a dangling attach point
    and lowering crashed with a ValueError."""
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    s[B].compute_at(s[C], i)
    _raises(lambda: s[C].split(i, factor=2), "stage C", "axis i", "B computed at it", "compute_at")
    _raises(lambda: s[C].fuse(i, j), "stage C", "axis i", "B computed at it")

