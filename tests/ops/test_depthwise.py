"""Depthwise convolutions (ember/ops/depthwise.py, vectorized CPU schedule in strategy/cpu_gemm.py)
against a float64 NumPy reference: strides, dilations, channel multipliers, asymmetric and no
padding, rows shorter and longer than a vector, with and without a fused epilogue."""

from __future__ import annotations

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the depthwise tests build ONNX models")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def _ref(x, w, b, strides, dil, lo, hi):
    n, c, H, W = x.shape
    m, _, kh, kw = w.shape
    mult = m // c
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (lo[0], hi[0]), (lo[1], hi[1])))
    oh = (H + lo[0] + hi[0] - ((kh - 1) * dil[0] + 1)) // strides[0] + 1
    ow = (W + lo[1] + hi[1] - ((kw - 1) * dil[1] + 1)) // strides[1] + 1
    out = np.zeros((n, m, oh, ow))
    for r in range(kh):
        for q in range(kw):
            rows = xp[:, :, r * dil[0] : r * dil[0] + strides[0] * (oh - 1) + 1 : strides[0],
                      q * dil[1] : q * dil[1] + strides[1] * (ow - 1) + 1 : strides[1]]
            out += np.repeat(rows, mult, axis=1) * w[None, :, 0, r, q, None, None]
    return out + (b[None, :, None, None] if b is not None else 0)


@pytest.mark.parametrize(
    "shape,k,strides,dil,pads,mult,epilogue",
    [
        ((1, 8, 37, 41), 3, (1, 1), (1, 1), (1, 1, 1, 1), 1, "Relu"),
        ((2, 5, 30, 19), 3, (2, 2), (1, 1), (1, 1, 1, 1), 1, None),
        ((1, 6, 14, 14), 5, (1, 1), (1, 1), (2, 2, 2, 2), 2, "Sigmoid"),
        ((1, 4, 7, 7), 3, (1, 1), (2, 2), (2, 1, 2, 1), 1, "Relu"),
        ((1, 3, 23, 70), 3, (2, 1), (1, 1), (0, 1, 1, 0), 3, None),
        ((1, 7, 9, 9), 3, (1, 1), (1, 1), (0, 0, 0, 0), 1, "Relu"),
    ],
)
def test_depthwise_matches_float64(rng, shape, k, strides, dil, pads, mult, epilogue) -> None:
    n, c, H, W = shape
    w = rng.standard_normal((c * mult, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c * mult).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["y"], pads=list(pads), strides=list(strides),
                         dilations=list(dil), group=c)]
    last = "y"
    if epilogue:
        nodes.append(h.make_node(epilogue, ["y"], ["z"]))
        last = "z"
    g = h.make_graph(nodes, "dw", [h.make_tensor_value_info("x", T.FLOAT, list(shape))],
                     [h.make_tensor_value_info(last, T.FLOAT, None)], [nh.from_array(w, "w"), nh.from_array(b, "b")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    model = ember.compile(m.SerializeToString())
    for _ in range(2):  # fresh inputs: the planned buffers are reused between calls
        x = rng.standard_normal(shape).astype(np.float32)
        want = _ref(x, w, b, strides, dil, pads[:2], pads[2:])
        if epilogue == "Relu":
            want = np.maximum(want, 0)
        elif epilogue == "Sigmoid":
            want = 1 / (1 + np.exp(-want))
        got = model(x)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
