"""Regression tests for LLVM miscompilations ember works around (see ember/codegen/llvm.py)."""

import numpy as np

import ember
from ember import te


def test_tile_through_remainders_is_not_miscompiled(rng) -> None:
    # Small enough to stay serial: LLVM's interleaved-access vectorization read past the input.
    shape, reps = (3, 4, 5), (6, 4, 2)
    x = te.placeholder(shape, name="x")
    out_shape = tuple(s * r for s, r in zip(shape, reps))
    o = te.compute(out_shape, lambda *i: x[tuple(te.floormod(i[k], shape[k]) for k in range(3))], name="o")
    s = te.create_schedule(o.op)
    f = ember.build(s, [x, o], use_cache=False)
    a = rng.random(shape).astype("float32")
    b = ember.nd.array(np.full(out_shape, np.nan, "float32"))
    f(ember.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), np.tile(a, reps))


def test_masked_induction_variable_is_not_miscompiled(rng) -> None:
    # A softmax over the last axis read through a tile. LLVM 22.1's loop vectorizer took the
    # address of mx[i % 3, j % 4] (an `and j, 3` or-ed with the outer index) as uniform once
    # the innermost loop was unrolled: every lane read lane 0's row (inf/NaN out).
    x = te.placeholder((3, 4, 5), name="x")
    k = te.reduce_axis((0, 5), name="k")
    mx = te.compute((3, 4), lambda i, j: te.max(x[i, j, k], axis=k), name="mx")
    k2 = te.reduce_axis((0, 5), name="k2")
    sm = te.compute((3, 4), lambda i, j: te.sum(te.exp(x[i, j, k2] - mx[i, j]), axis=k2), name="sm")

    def tiled(i, j, q):
        a, b = te.floormod(i, 3), te.floormod(j, 4)
        return te.exp(x[a, b, q] - mx[a, b]) / sm[a, b]

    o = te.compute((6, 8, 5), tiled, name="o")
    f = ember.build(te.create_schedule(o.op), [x, o], use_cache=False)
    a = rng.uniform(-2, 2, (3, 4, 5)).astype("float32")
    b = ember.nd.array(np.full((6, 8, 5), np.nan, "float32"))
    f(ember.nd.array(a), b)
    e = np.exp(a.astype(np.float64) - a.max(-1, keepdims=True))
    np.testing.assert_allclose(b.numpy(), np.tile(e / e.sum(-1, keepdims=True), (2, 2, 1)), rtol=1e-5)
