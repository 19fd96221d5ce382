"""float16/bfloat16 matrix products and 2-D convolutions on the packed GEMM (converted while packing, accumulated in
float32, rounded once): against a float64 reference. Tolerance: the result is rounded once to
the 16-bit type (half an ulp: 2**-11 relative for float16, 2**-8 for bfloat16) after a float32
sum of K products (K * 2**-24 relative to the sum of magnitudes, far below that)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import ember

ml_dtypes = pytest.importorskip("ml_dtypes")

_ULP = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


def _np(dt: str):
    return np.float16 if dt == "float16" else ml_dtypes.bfloat16


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("b_const", [True, False])
def test_lowp_matmul_matches_float64(dt: str, b_const: bool) -> None:
    rng = np.random.default_rng(7)
    M, K, N = 2 * 19, 45, 37  # a 3-D left operand (2, 19, 45)
    a = rng.standard_normal((2, M // 2, K)).astype(_np(dt))
    b = rng.standard_normal((K, N)).astype(_np(dt))
    et = TP.FLOAT16 if dt == "float16" else TP.BFLOAT16
    ins = [oh.make_tensor_value_info("a", et, list(a.shape))]
    inits = []
    if b_const:
        inits.append(nh.from_array(b, "b"))
    else:
        ins.append(oh.make_tensor_value_info("b", et, list(b.shape)))
    g = oh.make_graph([oh.make_node("MatMul", ["a", "b"], ["y"])], "m", ins,
                      [oh.make_tensor_value_info("y", et, None)], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)])
    m.ir_version = 10
    feeds = {"a": a} if b_const else {"a": a, "b": b}
    out = ember.compile(m, use_cache=False)(**feeds)
    got = np.asarray(out[0] if isinstance(out, (list, tuple)) else out).astype(np.float64)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert np.isfinite(got).all()
    assert (np.abs(got - ref) <= _ULP[dt] * np.abs(ref) + K * 2.0**-23 * mag + 1e-30).all()


@pytest.mark.parametrize("dt", ["float16"])
def test_lowp_conv_matches_float64(dt: str) -> None:
    """A float16 2-D convolution with bias, strides and pads on the float32 packed convolution;
    odd sizes: 5 -> 19 channels, 11 x 9 image. (ONNX's Conv has no bfloat16, and
    ``precision="bfloat16"`` of a model with a Conv is refused by ONNX's shape inference today.)"""
    rng = np.random.default_rng(8)
    st = np.float16 if dt == "float16" else np.float32
    et = TP.FLOAT16 if dt == "float16" else TP.FLOAT
    x = rng.standard_normal((2, 5, 11, 9)).astype(st)
    w = (rng.standard_normal((19, 5, 3, 3)) * 0.3).astype(st)
    b = rng.standard_normal(19).astype(st)
    g = oh.make_graph([oh.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 1, 2], strides=[2, 1])], "c",
                      [oh.make_tensor_value_info("x", et, list(x.shape))], [oh.make_tensor_value_info("y", et, None)],
                      [nh.from_array(w, "w"), nh.from_array(b, "b")])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)])
    m.ir_version = 10
    out = ember.compile(m, use_cache=False)(x=x)
    got = np.asarray(out[0] if isinstance(out, (list, tuple)) else out).astype(np.float64)
    # the reference computes on the values the kernel sees (rounded to the 16-bit type)
    x64, w64, b64 = (v.astype(_np(dt)).astype(np.float64) for v in (x, w, b))
    xp = np.pad(x64, ((0, 0), (0, 0), (1, 1), (0, 2)))
    OH, OW = (xp.shape[2] - 3) // 2 + 1, xp.shape[3] - 2
    ref = np.zeros((2, 19, OH, OW)) + b64[None, :, None, None]
    mag = np.zeros_like(ref) + np.abs(b64)[None, :, None, None]
    for r in range(3):
        for q in range(3):
            patch = xp[:, :, r : r + 2 * OH : 2, q : q + OW]
            ref += np.einsum("nchw,mc->nmhw", patch, w64[:, :, r, q])
            mag += np.einsum("nchw,mc->nmhw", np.abs(patch), np.abs(w64[:, :, r, q]))
    assert got.shape == ref.shape and np.isfinite(got).all()
    assert (np.abs(got - ref) <= _ULP[dt] * np.abs(ref) + 46 * 2.0**-23 * mag + 1e-30).all()
