"""Vectorized loads with a constant stride (every 2nd, 3rd... element: a stride-2 convolution's
input row) are one contiguous load of the span and a shuffle for strides up to
``MAX_SHUFFLED_STRIDE``, lane by lane beyond it; both give NumPy's values, tails included."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.codegen.llvm import MAX_SHUFFLED_STRIDE


@pytest.mark.parametrize("stride", [2, 3, MAX_SHUFFLED_STRIDE, MAX_SHUFFLED_STRIDE + 1])
@pytest.mark.parametrize("dtype", ["float32", "int16", "float64"])
def test_strided_vector_load(rng, stride, dtype) -> None:
    n = 45  # not a multiple of the vector width: a scalar tail
    A = te.placeholder((n * stride,), dtype, name="A")
    B = te.compute((n,), lambda i: A[i * stride] + A[i * stride + stride - 1], name="B")
    s = te.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(inner)
    f = ember.build(s, [A, B], use_cache=False)
    if stride <= MAX_SHUFFLED_STRIDE:
        assert "shufflevector" in f.get_source("llvm") or stride == 1
    a = (rng.standard_normal(n * stride) * 100).astype(dtype)
    b = ember.nd.array(np.zeros(n, dtype) - 1)
    f(ember.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a[::stride] + a[stride - 1 :: stride])
