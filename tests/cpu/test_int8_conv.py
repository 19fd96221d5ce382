"""ConvInteger and QLinearConv on the packed integer GEMM (an int32 im2col matrix times int32
weight panels) against an exact int64 NumPy convolution, at sizes no panel or register tile
divides, with strides, dilations, asymmetric pads and per-channel weight zero points."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import ember


def _ref_conv(x: np.ndarray, w: np.ndarray, stride, dil, pads) -> np.ndarray:
    """int64 convolution of NCHW ``x`` with MCKK ``w`` (zero padding), by loops over the taps."""
    N, C, H, W = x.shape
    M, _, KH, KW = w.shape
    xp = np.zeros((N, C, H + pads[0] + pads[2], W + pads[1] + pads[3]), np.int64)
    xp[:, :, pads[0]:pads[0] + H, pads[1]:pads[1] + W] = x
    OH = (xp.shape[2] - ((KH - 1) * dil[0] + 1)) // stride[0] + 1
    OW = (xp.shape[3] - ((KW - 1) * dil[1] + 1)) // stride[1] + 1
    out = np.zeros((N, M, OH, OW), np.int64)
    for r in range(KH):
        for q in range(KW):
            patch = xp[:, :, r * dil[0]: r * dil[0] + stride[0] * OH: stride[0],
                       q * dil[1]: q * dil[1] + stride[1] * OW: stride[1]]
            out += np.einsum("nchw,mc->nmhw", patch, w[:, :, r, q].astype(np.int64))
    return out


def _compile(node, x, consts):
    g = oh.make_graph([node], "c", [oh.make_tensor_value_info("x", TP.UINT8, list(x.shape))],
                      [oh.make_tensor_value_info("y", TP.UNDEFINED, None)],
                      [nh.from_array(v, k) for k, v in consts.items()])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)])
    m.ir_version = 10
    out = ember.compile(m, use_cache=False)(x=x)
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)


GEOMS = [((2, 5, 11, 9), (17, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
         ((1, 7, 13, 10), (19, 3, 2), (2, 1), (1, 2), (0, 2, 1, 0)),
         ((1, 6, 8, 8), (33, 1, 1), (2, 2), (1, 1), (0, 0, 0, 0))]


@pytest.mark.parametrize("geom", GEOMS, ids=lambda g: f"x{g[0]}-w{g[1]}-s{g[2]}-d{g[3]}")
def test_conv_integer_exact(geom) -> None:
    xs, (M, KH, KW), stride, dil, pads = geom
    rng = np.random.default_rng(M)
    x = rng.integers(0, 256, xs, dtype=np.uint8)
    w = rng.integers(-128, 128, (M, xs[1], KH, KW), dtype=np.int8)
    xz, wz = np.array(131, np.uint8), rng.integers(-5, 6, (M,), dtype=np.int8)
    node = oh.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], strides=list(stride), dilations=list(dil),
                        pads=list(pads))
    got = _compile(node, x, {"w": w, "xz": xz, "wz": wz})
    # ONNX pads with the zero point: the shifted image is padded with zeros
    wshift = w.astype(np.int64) - wz.astype(np.int64)[:, None, None, None]
    ref = _ref_conv(x.astype(np.int64) - 131, wshift, stride, dil, pads)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ref)


def test_qlinear_conv_requantized() -> None:
    xs, (M, KH, KW), stride, dil, pads = GEOMS[0]
    rng = np.random.default_rng(11)
    x = rng.integers(0, 256, xs, dtype=np.uint8)
    w = rng.integers(-128, 128, (M, xs[1], KH, KW), dtype=np.int8)
    bias = rng.integers(-3000, 3000, (M,), dtype=np.int32)
    sx, sy = np.float32(0.05), np.float32(2.5)
    sw = (rng.random(M) * 0.02 + 0.005).astype(np.float32)
    consts = {"sx": np.array(sx), "zx": np.array(120, np.uint8), "w": w, "sw": sw, "zw": np.zeros(M, np.int8),
              "sy": np.array(sy), "zy": np.array(100, np.uint8), "b": bias}
    node = oh.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["y"],
                        strides=list(stride), dilations=list(dil), pads=list(pads))
    got = _compile(node, x, consts)
    acc = _ref_conv(x.astype(np.int64) - 120, w.astype(np.int64), stride, dil, pads) + bias[None, :, None, None]
    mult = (np.float32(sx) * sw / np.float32(sy)).astype(np.float32).astype(np.float64)
    ref = np.clip(np.rint(acc * mult[None, :, None, None]) + 100, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, ref)
