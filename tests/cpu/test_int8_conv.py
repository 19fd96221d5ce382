"""ConvInteger and QLinearConv against an exact int64 NumPy convolution, at sizes no panel or
register tile divides, with strides, dilations, asymmetric pads and per-channel weight zero points:
the packed integer GEMM (an int32 im2col matrix times int32 weight panels, or byte words on VNNI),
and for int8 weights with zero zero-points the VNNI direct blocked convolution and the 1x1 packed
GEMM stored channel-major (uint8 and int8 images); QLinearConv's requantization against ONNX
Runtime's (float32 multiplier and product, half to even) and ONNX Runtime itself, exactly, on VNNI
and on AVX2 / AVX-512BW targets without it."""

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


# -- the VNNI paths for int8 weights with zero zero-points: the direct blocked convolution (kernels
# larger than 1x1 or padded) and the 1x1 packed GEMM stored channel-major -----------------------
DIRECT = [  # x shape, (M, KH, KW), strides, dilations, pads (t, l, b, r)
    ((2, 5, 11, 9), (19, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ((1, 7, 13, 10), (19, 3, 2), (2, 1), (1, 2), (0, 2, 1, 0)),
    ((1, 3, 23, 21), (20, 7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),  # a first layer: 3 channels, 7x7 stride 2
    ((1, 37, 9, 7), (33, 1, 1), (1, 1), (1, 1), (1, 0, 0, 1)),  # 1x1 but padded: the direct path
]
ONE_BY_ONE = [
    ((2, 6, 8, 8), (33, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    ((1, 37, 9, 7), (17, 1, 1), (2, 2), (1, 1), (0, 0, 0, 0)),  # stride 2, odd sizes
]
_XT = {"uint8": TP.UINT8, "int8": TP.INT8}


def _conv_model(op: str, xdt: str, xs, consts: dict, names: list[str], stride, dil, pads, target: str = "llvm"):
    g = oh.make_graph([oh.make_node(op, names, ["y"], strides=list(stride), dilations=list(dil), pads=list(pads))],
                      "c", [oh.make_tensor_value_info("x", _XT[xdt], list(xs))],
                      [oh.make_tensor_value_info("y", TP.INT32 if op == "ConvInteger" else TP.UINT8, None)],
                      [nh.from_array(v, k) for k, v in consts.items()])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)])
    m.ir_version = 10
    return ember.compile(m, target=target, use_cache=False), m


def _host_vnni() -> bool:
    from ember.backends.cpu.dot4 import vnni_width
    from ember.target import Target

    return vnni_width(Target("llvm")) > 0


@pytest.mark.parametrize("xdt", ["uint8", "int8"])
@pytest.mark.parametrize("geom,kind", [(g, "direct") for g in DIRECT] + [(g, "1x1") for g in ONE_BY_ONE],
                         ids=lambda v: str(v[0]) if isinstance(v, tuple) else v)
def test_vnni_paths_exact(geom, kind: str, xdt: str) -> None:
    """ConvInteger with an int8 weight zero point of 0 (the VNNI paths) against the int64
    reference: the image as unsigned bytes (int8 plus 128) padded with its shifted zero point,
    that zero point times the weights' sums taken out in the store; channels not a multiple of 4
    (the byte words) or 16 (the channel blocks), widths no register tile divides."""
    xs, (M, KH, KW), stride, dil, pads = geom
    rng = np.random.default_rng(M + KH + len(xdt))
    lo, hi = (0, 256) if xdt == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, xs).astype(xdt)
    w = rng.integers(-128, 128, (M, xs[1], KH, KW)).astype(np.int8)
    xz = np.array(rng.integers(lo, hi), xdt)
    model, _ = _conv_model("ConvInteger", xdt, xs, {"w": w, "xz": xz, "wz": np.zeros(M, np.int8)},
                           ["x", "w", "xz", "wz"], stride, dil, pads)
    got = np.asarray(model(x=x)).reshape(-1)
    ref = _ref_conv(x.astype(np.int64) - int(xz), w.astype(np.int64), stride, dil, pads)
    np.testing.assert_array_equal(got.reshape(ref.shape), ref)
    if _host_vnni():
        ir = model.get_source("ir")
        assert ("qconv_acc" in ir) == (kind == "direct") and ("qconv1x1_gemm" in ir) == (kind == "1x1")


def _qlinear_consts(rng, C: int, M: int, KH: int, KW: int, xdt: str) -> dict:
    return {"sx": np.array(0.05, np.float32), "zx": np.array(7 if xdt == "uint8" else -3, xdt),
            "w": rng.integers(-128, 128, (M, C, KH, KW)).astype(np.int8),
            "sw": (rng.random(M) * 0.02 + 0.005).astype(np.float32), "zw": np.zeros(M, np.int8),
            "sy": np.array(1.7, np.float32), "zy": np.array(100, np.uint8),
            "b": rng.integers(-3000, 3000, (M,)).astype(np.int32)}


@pytest.mark.parametrize("geom", DIRECT[:2] + ONE_BY_ONE, ids=lambda g: str(g[0]))
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"])
def test_qlinear_conv_as_onnxruntime(geom, target: str) -> None:
    """QLinearConv requantized as ONNX Runtime does (``x_scale * w_scale / y_scale`` in float32,
    the int32 sum plus bias converted to float32 and multiplied in float32, rounded half to even,
    plus the zero point, saturated) against that NumPy reference and ONNX Runtime, exactly, on
    the VNNI paths and on targets without VNNI (AVX2, AVX-512BW: the int32 path)."""
    ort = pytest.importorskip("onnxruntime")
    from ember.backends.cpu.dot4 import vnni_width
    from ember.target import Target

    feats = set(__import__("llvmlite.binding", fromlist=["x"]).get_host_cpu_features().flatten()
                .replace("+", "").split(","))
    if "skylake" in target and "avx512bw" not in feats:
        pytest.skip("this CPU cannot run AVX-512BW code")
    xs, (M, KH, KW), stride, dil, pads = geom
    rng = np.random.default_rng(M * KH)
    consts = _qlinear_consts(rng, xs[1], M, KH, KW, "uint8")
    x = rng.integers(0, 256, xs).astype(np.uint8)
    model, m = _conv_model("QLinearConv", "uint8", xs, consts, ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"],
                           stride, dil, pads, target)
    got = np.asarray(model(x=x)).reshape(-1)
    acc = _ref_conv(x.astype(np.int64) - 7, consts["w"].astype(np.int64), stride, dil, pads) \
        + consts["b"][None, :, None, None]
    mult = np.float32(0.05) * consts["sw"] / np.float32(1.7)
    ref = np.clip(np.rint(acc.astype(np.float32) * mult[None, :, None, None]) + 100, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got.reshape(ref.shape), ref)
    orun = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got.reshape(ref.shape), orun)
    asm = model.get_source("asm")
    assert ("vpdpbusd" in asm) == (vnni_width(Target(target)) > 0)
