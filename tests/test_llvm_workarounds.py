"""Regression tests for LLVM miscompilations ember works around (see ember/codegen/cpu.py)."""

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
