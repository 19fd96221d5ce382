"""int8 networks on channel-blocked bytes (VNNI targets): the CPU layout policy runs QLinearConv
as ``ember.QLinearConvNCHWc`` and the integer max pool as ``ember.MaxPoolNCHWc`` on
``NCHW16c`` bytes, and the residual ``QLinearAdd`` between them blocked too, so no layout
transform sits between two convolutions. Checked bit for bit against ONNX Runtime and against
the plain (NCHW) compile, with channel counts no block divides (padding channels), strides,
padded and unpadded 1x1 convolutions, a per-channel weight zero point that is not 0 (the plain
path inside the blocked operator), uint8 and int8 images."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import ember
from ember.backends.cpu.dot4 import vnni_width
from ember.ops.conv_nchwc import MAXPOOL_NCHWC
from ember.ops.layout_transform import LayoutSite, SiteValue
from ember.ops.quant import INT_MAXPOOL, QCONV_NCHWC, qconv_layouts
from ember.strategy.cpu import CPUStrategy
from ember.target import Target
from ember.transform import PassContext

_XT = {"uint8": TP.UINT8, "int8": TP.INT8}
_VNNI = vnni_width(Target("llvm")) > 0


def _chain(rng, xdt: str, c: int = 24, m1: int = 40, m2: int = 32, wz_nonzero: bool = False):
    """QLinearConv 3x3 (c -> m1, pad 1) -> MaxPool 3x3 s2 p1 -> two 1x1 QLinearConvs (m1 -> m2,
    one of them padded by 0 explicitly) -> QLinearAdd -> QLinearConv 3x3 stride 2 (m2 -> 20) ->
    QLinearConv 1x1 stride 2 (20 -> 33) = Y; activations of type ``xdt``. ``c``, ``m1``, 20 and
    33 channels leave padding channels in their last block (``m2``, the add's, does not: a
    QLinearAdd maps zero padding to its fixed part, not to zero, so it runs blocked only on
    whole blocks)."""
    zdt = np.uint8 if xdt == "uint8" else np.int8
    lo, hi = (0, 256) if xdt == "uint8" else (-128, 128)
    consts: dict[str, np.ndarray] = {}
    nodes = []

    def qconv(name: str, x: str, cin: int, cout: int, k: int, **attrs) -> str:
        consts[f"{name}_w"] = rng.integers(-128, 128, (cout, cin, k, k)).astype(np.int8)
        consts[f"{name}_sw"] = (rng.random(cout) * 0.01 + 0.002).astype(np.float32)
        wz = np.zeros(cout, np.int8)
        if wz_nonzero and name == "c2":
            wz = rng.integers(-3, 4, cout).astype(np.int8)
        consts[f"{name}_zw"] = wz
        consts[f"{name}_b"] = rng.integers(-2000, 2000, cout).astype(np.int32)
        consts[f"{name}_sy"] = np.array(rng.random() * 0.5 + 0.5, np.float32)
        consts[f"{name}_zy"] = np.array(rng.integers(lo // 2 + 10, hi // 2), zdt)
        nodes.append(oh.make_node("QLinearConv", [x, f"{x}_s", f"{x}_z", f"{name}_w", f"{name}_sw", f"{name}_zw",
                                                  f"{name}_sy", f"{name}_zy", f"{name}_b"], [name], **attrs))
        consts[f"{name}_s"], consts[f"{name}_z"] = consts[f"{name}_sy"], consts[f"{name}_zy"]
        return name

    consts["x_s"], consts["x_z"] = np.array(0.05, np.float32), np.array(lo + 9, zdt)
    a = qconv("c1", "x", c, m1, 3, pads=[1, 1, 1, 1])
    nodes.append(oh.make_node("MaxPool", [a], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    consts["p_s"], consts["p_z"] = consts["c1_s"], consts["c1_z"]
    b = qconv("c2", "p", m1, m2, 1)
    d = qconv("c3", "p", m1, m2, 1, pads=[0, 0, 0, 0], strides=[1, 1])
    consts["s_s"], consts["s_z"] = np.array(0.7, np.float32), np.array(lo + 20, zdt)
    nodes.append(oh.make_node("QLinearAdd", [b, f"{b}_s", f"{b}_z", d, f"{d}_s", f"{d}_z", "s_s", "s_z"], ["s"],
                              domain="com.microsoft"))
    e = qconv("c4", "s", m2, 20, 3, pads=[1, 1, 1, 1], strides=[2, 2])
    nodes.append(oh.make_node("QLinearConv", [e, f"{e}_s", f"{e}_z", "c5_w", "c5_sw", "c5_zw", "c5_sy", "c5_zy"],
                              ["Y"], strides=[2, 2]))
    consts["c5_w"] = rng.integers(-128, 128, (33, 20, 1, 1)).astype(np.int8)
    consts["c5_sw"] = (rng.random(33) * 0.01 + 0.002).astype(np.float32)
    consts["c5_zw"] = np.zeros(33, np.int8)
    consts["c5_sy"], consts["c5_zy"] = np.array(0.9, np.float32), np.array(lo + 30, zdt)
    g = oh.make_graph(nodes, "chain", [oh.make_tensor_value_info("x", _XT[xdt], [1, c, 15, 13])],
                      [oh.make_tensor_value_info("Y", _XT[xdt], None)],
                      [nh.from_array(v, k) for k, v in consts.items()])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    x = rng.integers(lo, hi, (1, c, 15, 13)).astype(xdt)
    return m, x


def _funcs(model) -> list[str]:
    return [s.get("func", "") for s in model.plan["steps"] if s.get("kind") == "kernel"]


@pytest.mark.skipif(not _VNNI, reason="the host has no VNNI: nothing is placed")
@pytest.mark.parametrize("xdt", ["uint8", "int8"])
@pytest.mark.parametrize("wz_nonzero", [False, True], ids=["wz0", "wz"])
def test_blocked_chain_matches_plain_and_onnxruntime(xdt: str, wz_nonzero: bool) -> None:
    rng = np.random.default_rng(3 + wz_nonzero)
    m, x = _chain(rng, xdt, wz_nonzero=wz_nonzero)
    blocked = ember.compile(m, use_cache=False)
    with PassContext(disabled_passes=["AlterLayout"]):
        plain = ember.compile(m, use_cache=False)
    assert any("NCHW16c" in v for v in blocked.plan["values"])
    funcs = _funcs(blocked)
    # only the image and the result are converted; the add runs in the 1x1 convolution's store
    assert sum("layout" in f for f in funcs) <= 2, funcs
    assert not any(f.startswith("qlinearadd") for f in funcs), funcs
    got, want = np.asarray(blocked(x=x)[0]), np.asarray(plain(x=x)[0])
    assert got.dtype == want.dtype == np.dtype(xdt)
    np.testing.assert_array_equal(got, want)
    ort = pytest.importorskip("onnxruntime")
    try:
        ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    except Exception as exc:  # an ONNX Runtime build without this type combination
        pytest.skip(f"ONNX Runtime cannot run it: {exc}")
    np.testing.assert_array_equal(got, ref)


@pytest.mark.skipif(not _VNNI, reason="the host has no VNNI: nothing is placed")
@pytest.mark.parametrize("m", [32, 33])
def test_blocked_head_pools_the_blocked_bytes(m: int) -> None:
    """QLinearConv -> QLinearGlobalAveragePool (ember.QLinearGlobalAveragePoolNCHWc on the
    blocked bytes; 33 channels: a padded block) -> Flatten, against the plain compile and ONNX
    Runtime, exactly."""
    rng = np.random.default_rng(m)
    consts = {"sx": np.array(0.05, np.float32), "zx": np.array(3, np.uint8),
              "w": rng.integers(-128, 128, (m, 16, 3, 3)).astype(np.int8),
              "sw": (rng.random(m) * 0.01 + 0.002).astype(np.float32), "zw": np.zeros(m, np.int8),
              "sy": np.array(0.4, np.float32), "zy": np.array(11, np.uint8),
              "sg": np.array(0.1, np.float32), "zg": np.array(5, np.uint8)}
    nodes = [oh.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node("QLinearGlobalAveragePool", ["c", "sy", "zy", "sg", "zg"], ["g"], domain="com.microsoft"),
             oh.make_node("Flatten", ["g"], ["Y"])]
    g = oh.make_graph(nodes, "head", [oh.make_tensor_value_info("x", TP.UINT8, [1, 16, 9, 7])],
                      [oh.make_tensor_value_info("Y", TP.UINT8, None)],
                      [nh.from_array(v, k) for k, v in consts.items()])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    x = rng.integers(0, 256, (1, 16, 9, 7)).astype(np.uint8)
    blocked = ember.compile(model, use_cache=False)
    assert any("qlineargloba" in f for f in _funcs(blocked)), _funcs(blocked)
    with PassContext(disabled_passes=["AlterLayout"]):
        plain = ember.compile(model, use_cache=False)
    got = np.asarray(blocked(x=x)[0])
    np.testing.assert_array_equal(got, np.asarray(plain(x=x)[0]))
    ort = pytest.importorskip("onnxruntime")
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, ref)


def _site(op: str, c: int, m: int = 32, const: bool = True, wdt: str = "int8") -> LayoutSite:
    x = SiteValue("x", (1, c, 9, 9), "uint8")
    s, z = SiteValue("s", (), "float32", True), SiteValue("z", (), "uint8", True)
    if op == INT_MAXPOOL:
        return LayoutSite(op, "p", (x,), (SiteValue("y", (1, c, 5, 5), "uint8"),), {"kernel_shape": [3, 3]})
    w = SiteValue("w", (m, c, 3, 3), wdt, const)
    return LayoutSite(op, "q", (x, s, z, w, SiteValue("sw", (m,), "float32", True), SiteValue("zw", (m,), wdt, True),
                                s, z), (SiteValue("y", (1, m, 9, 9), "uint8"),), {"pads": [1, 1, 1, 1]})


def test_policy_places_int8_nodes_on_vnni_targets_only() -> None:
    policy = CPUStrategy("llvm -mcpu=znver4").layout_policy()
    nl = policy.layouts(_site("QLinearConv", 64))
    assert nl is not None and nl.op == QCONV_NCHWC and nl.attrs is not None and nl.attrs["block"] == 16
    assert str(nl.inputs[0].layout) == "NCHW16c" and all(v is None for v in nl.inputs[1:])
    assert str(nl.outputs[0].layout) == "NCHW16c"
    image = policy.layouts(_site("QLinearConv", 3))  # an image's 3 channels: read plain
    assert image is not None and image.inputs[0] is None and str(image.outputs[0].layout) == "NCHW16c"
    assert policy.layouts(_site("QLinearConv", 64, const=False)) is None
    assert policy.layouts(_site("QLinearConv", 64, wdt="uint8")) is None
    pool = policy.layouts(_site(INT_MAXPOOL, 64))
    assert pool is not None and pool.op == MAXPOOL_NCHWC
    for target in ("llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"):  # no VNNI: nothing placed
        assert CPUStrategy(target).layout_policy().layouts(_site("QLinearConv", 64)) is None
    assert qconv_layouts(_site("QLinearConv", 64), 0) is None
