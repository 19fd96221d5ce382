"""Operator compute definitions and their CPU schedules against NumPy float64, on sizes that do
not divide the tile sizes, with outputs poisoned before the run."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.ops.nn import conv_tensor, matmul_tensor
from ember.ops.reduce import softmax_tensor
from ember.strategy.cpu import schedule_group


def _run(outs, ins, arrays):
    s = schedule_group(outs, set())
    f = ember.build(s, list(ins) + list(outs), name="op")
    results = [np.full([int(d.value) for d in o.shape], np.nan, dtype=str(o.dtype)) for o in outs]
    f(*arrays, *results)
    return results


def _conv_ref(x, w, stride, pad, dil, groups):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - (kh - 1) * dil - 1) // stride + 1
    ow = (wd + 2 * pad - (kw - 1) * dil - 1) // stride + 1
    out = np.zeros((n, m, oh, ow))
    mg = m // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[
                    :,
                    g * cg : (g + 1) * cg,
                    i * dil : i * dil + stride * (oh - 1) + 1 : stride,
                    j * dil : j * dil + stride * (ow - 1) + 1 : stride,
                ]
                out[:, g * mg : (g + 1) * mg] += np.einsum("mc,nchw->nmhw", w[g * mg : (g + 1) * mg, :, i, j], patch)
    return out


@pytest.mark.parametrize(
    "shape,wshape,stride,pad,dil,groups",
    [
        ((1, 5, 13, 11), (7, 5, 3, 3), 1, 1, 1, 1),  # packed path, N and M not tile multiples
        ((2, 3, 17, 9), (10, 3, 5, 5), 2, 2, 1, 1),  # batch 2, stride 2
        ((1, 6, 9, 9), (6, 1, 3, 3), 1, 1, 2, 6),  # depthwise, dilated
        ((1, 4, 8, 7), (6, 2, 1, 1), 1, 0, 1, 2),  # grouped 1x1
    ],
)
def test_conv2d(rng, shape, wshape, stride, pad, dil, groups) -> None:
    x = te.placeholder(shape, name="x")
    w = te.placeholder(wshape, name="w")
    out = conv_tensor(x, w, None, [stride] * 2, [dil] * 2, [pad] * 2, [pad] * 2, groups)
    xa = rng.standard_normal(shape).astype(np.float32)
    wa = rng.standard_normal(wshape).astype(np.float32)
    (got,) = _run([out], [x, w], [xa, wa])
    np.testing.assert_allclose(got, _conv_ref(xa, wa, stride, pad, dil, groups), rtol=1e-4, atol=1e-4)


def test_batched_matmul_broadcast(rng) -> None:
    a = te.placeholder((3, 1, 5, 7), name="a")
    b = te.placeholder((4, 7, 9), name="b")
    out = matmul_tensor(a, b)
    aa = rng.standard_normal((3, 1, 5, 7)).astype(np.float32)
    bb = rng.standard_normal((4, 7, 9)).astype(np.float32)
    (got,) = _run([out], [a, b], [aa, bb])
    np.testing.assert_allclose(got, aa.astype(np.float64) @ bb, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("log", [False, True])
def test_softmax(rng, log: bool) -> None:
    x = te.placeholder((3, 37), name="x")
    out = softmax_tensor(x, [1], log=log)
    xa = (rng.standard_normal((3, 37)) * 10).astype(np.float32)
    (got,) = _run([out], [x], [xa])
    ref = xa.astype(np.float64) - xa.max(1, keepdims=True)
    ref = ref - np.log(np.exp(ref).sum(1, keepdims=True)) if log else np.exp(ref) / np.exp(ref).sum(1, keepdims=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ashape,bshape", [((37, 45), (45, 50)), ((2, 3, 19, 33), (33, 17))])
def test_matmul_packed_path(rng, ashape, bshape) -> None:
    a = te.placeholder(ashape, name="a")
    b = te.placeholder(bshape, name="b")
    out = matmul_tensor(a, b)
    assert any(getattr(t.op, "tag", "") == "conv_packed" for t in out.op.input_tensors)  # the packed GEMM is used
    aa = rng.standard_normal(ashape).astype(np.float32)
    bb = rng.standard_normal(bshape).astype(np.float32)
    (got,) = _run([out], [a, b], [aa, bb])
    np.testing.assert_allclose(got, aa.astype(np.float64) @ bb, rtol=1e-4, atol=1e-4)
