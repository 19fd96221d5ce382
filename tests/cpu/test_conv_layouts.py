"""Blocked (NCHW[x]c) convolutions and the CPU layout policy.

* The blocked operators (``ember.ConvNCHWc``, ``ember.DepthwiseConvNCHWc``) against the float64
  NumPy convolution, built and scheduled for explicit targets (the host, ``-mcpu=haswell``:
  AVX2 with 8-lane blocks and 16 registers, ``-mcpu=skylake-avx512``: 16-lane blocks), outputs
  poisoned with NaN, at sizes no block or register tile divides (13 or 19 channels padded to the
  block, odd widths, stride 2, dilation, asymmetric padding, batch 2); the padding channels of
  the result must come out zero (the layout pass's invariant).
* The policy: which nodes it places, in which layouts, for which target's vector width.
* Whole models with mixed layouts: a chain through blocked convolutions, a plain pooling, a
  grouped convolution the policy leaves in NCHW and a depthwise one, against float64; a model
  whose blocked path is exact (identity 1x1 convolutions around a max-pool) must reproduce its
  input's pooling bit for bit; AlterLayout off and on agree.
* AArch64 code is compile-checked (its assembly holds NEON ``fmla``).

Tolerance: float32 accumulation over at most ~500 products of O(1) values against float64:
rtol = atol = 1e-4.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember import te
from ember.ops.conv_nchwc import CONV_NCHWC, DEPTHWISE_NCHWC
from ember.ops.layout_transform import LayoutSite, SiteValue
from ember.ops.registry import OpContext, call
from ember.strategy.cpu import CPUStrategy
from ember.target import Target
from ember.transform import PassContext

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conv_reference import conv2d_ref  # noqa: E402

TOL = {"rtol": 1e-4, "atol": 1e-4}


def _host_has(*feats: str) -> bool:
    have = Target("llvm").features
    return all(f in have for f in feats)


TARGETS = [
    pytest.param("llvm", id="host"),
    pytest.param("llvm -mcpu=haswell", id="haswell"),
    pytest.param("llvm -mcpu=skylake-avx512", id="skylake-avx512"),
]


def _block_act(x: np.ndarray, b: int) -> np.ndarray:
    """NCHW -> NCHW{b}c, zero-padded channels."""
    n, c, h, w = x.shape
    cb = -(-c // b)
    xp = np.zeros((n, cb * b, h, w), x.dtype)
    xp[:, :c] = x
    return xp.reshape(n, cb, b, h, w).transpose(0, 1, 3, 4, 2).copy()


def _unblock(y: np.ndarray, c: int) -> np.ndarray:
    n, cb, h, w, b = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)[:, :c]


def _block_weight(w: np.ndarray, ib: int, ob: int) -> np.ndarray:
    """OIHW -> OIHW{ib}i{ob}o, zero-padded."""
    m, c, kh, kw = w.shape
    mb, cb = -(-m // ob), -(-c // ib)
    wp = np.zeros((mb * ob, cb * ib, kh, kw), w.dtype)
    wp[:m, :c] = w
    return wp.reshape(mb, ob, cb, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1).copy()


def _block_bias(b: np.ndarray, ob: int) -> np.ndarray:
    m = b.shape[0]
    bp = np.zeros(-(-m // ob) * ob, b.dtype)
    bp[:m] = b
    return bp.reshape(-1, ob)


def _run_blocked(op: str, arrays: list[np.ndarray], attrs: dict, target: str) -> np.ndarray:
    """Build ``op`` for ``target`` with that target's CPU schedule; run it on poisoned output."""
    strategy = CPUStrategy(target)
    phs = [te.placeholder(a.shape, "float32", name=f"in{k}") for k, a in enumerate(arrays)]
    names = [f"in{k}" for k in range(len(arrays))]
    (out,) = call(OpContext(op, attrs, names, {}, 17, "n0", strategy=strategy), phs)
    s = strategy.schedule_group([out])
    used = {id(st.op) for st in s.stages}
    ins = [(p, a) for p, a in zip(phs, arrays) if id(p.op) in used]
    f = ember.build(s, [p for p, _ in ins] + [out], target=target, name="conv")
    res = np.full([int(d.value) for d in out.shape], np.nan, np.float32)
    f(*[a for _, a in ins], res)
    return res


# (N, C, H, W), (M, KH, KW), strides, pads (t, l, b, r), dilations
DIRECT = [
    pytest.param((1, 19, 9, 11), (13, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), id="3x3-odd"),
    pytest.param((2, 13, 10, 9), (21, 3, 3), (2, 2), (1, 0, 2, 1), (1, 1), id="3x3-s2-asym-batch2"),
    pytest.param((1, 3, 23, 21), (10, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), id="7x7-s2-image"),
    pytest.param((1, 17, 12, 13), (9, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), id="dilated"),
    pytest.param((1, 37, 7, 15), (70, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), id="1x1"),
    pytest.param((1, 24, 14, 14), (40, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), id="1x1-s2"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xs, wk, strides, pads, dil", DIRECT)
def test_blocked_conv_matches_float64(rng, target, xs, wk, strides, pads, dil):
    tgt = Target(target)
    lanes = tgt.vector_lanes(32)
    c, (m, kh, kw) = xs[1], wk
    ib = c if c < lanes else lanes
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((m, c, kh, kw)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dil)}
    arrays = [_block_act(x, ib), _block_weight(w, ib, lanes), _block_bias(b, lanes)]
    if target != "llvm" and not _host_has(*(("avx512f",) if "avx512" in target else ("avx2", "fma"))):
        pytest.skip(f"this CPU cannot run code for {target}")
    got = _run_blocked(CONV_NCHWC, arrays, attrs, target)
    ref = conv2d_ref(x, w, b, strides, pads, dil)
    np.testing.assert_allclose(_unblock(got, m), ref, **TOL)
    assert not np.any(_unblock(got, got.shape[1] * lanes)[:, m:])  # padding channels are zero


# plain NCHW inputs of fewer channels than a block: (N, C, H, W), (M, KH, KW), strides, pads
PLAIN = [
    pytest.param((1, 3, 23, 21), (10, 7, 7), (2, 2), (3, 3, 3, 3), id="7x7-s2-image"),
    pytest.param((2, 3, 17, 19), (35, 3, 3), (2, 2), (0, 0, 1, 1), id="3x3-s2-tf-same-batch2"),
    pytest.param((1, 1, 13, 11), (9, 5, 5), (1, 1), (2, 1, 2, 3), id="5x5-one-channel-asym"),
    pytest.param((1, 3, 9, 13), (17, 3, 3), (1, 1), (0, 0, 0, 0), id="unpadded"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xs, wk, strides, pads", PLAIN)
def test_blocked_conv_reads_a_plain_image_in_place(rng, target, xs, wk, strides, pads):
    """``ember.ConvNCHWc`` given X as plain NCHW (channels fewer than a block: one block read in
    place, what the policy does for a network's input) against float64, and equal bit for bit
    to the same convolution given the image converted to ``NCHW{C}c``."""
    tgt = Target(target)
    lanes = tgt.vector_lanes(32)
    c, (m, kh, kw) = xs[1], wk
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((m, c, kh, kw)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": [1, 1]}
    if target != "llvm" and not _host_has(*(("avx512f",) if "avx512" in target else ("avx2", "fma"))):
        pytest.skip(f"this CPU cannot run code for {target}")
    got = _run_blocked(CONV_NCHWC, [x, _block_weight(w, c, lanes), _block_bias(b, lanes)], attrs, target)
    np.testing.assert_allclose(_unblock(got, m), conv2d_ref(x, w, b, strides, pads), **TOL)
    assert not np.any(_unblock(got, got.shape[1] * lanes)[:, m:])  # padding channels are zero
    blocked = _run_blocked(CONV_NCHWC, [_block_act(x, c), _block_weight(w, c, lanes), _block_bias(b, lanes)], attrs,
                           target)
    np.testing.assert_array_equal(got, blocked)


def test_a_network_input_needs_no_conversion_kernel(rng):
    """An image (3 channels) into a blocked convolution: the compiled model has no layout
    conversion before it (the convolution reads the input in place) and matches float64."""
    x = rng.standard_normal((1, 3, 19, 17)).astype(np.float32)
    w = rng.standard_normal((24, 3, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((5, 24, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Conv", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 5, 10, 9))],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    model = ember.compile(proto.SerializeToString())
    steps = [st for st in model._program.plan["steps"] if st["kind"] == "kernel"]
    assert "layout" not in steps[0]["func"].lower(), [st["func"] for st in steps]
    (got,) = model(x)
    ref = conv2d_ref(np.maximum(conv2d_ref(x, w, np.zeros(24, np.float32), (2, 2), (1, 1, 1, 1)), 0), w2,
                     np.zeros(5, np.float32))
    np.testing.assert_allclose(got, ref, **TOL)


DEPTHWISE = [
    pytest.param((1, 19, 9, 11), 3, (1, 1), (1, 1, 1, 1), (1, 1), id="s1"),
    pytest.param((2, 21, 13, 10), 3, (2, 2), (0, 0, 1, 1), (1, 1), id="s2-asym-batch2"),
    pytest.param((1, 13, 12, 11), 5, (2, 2), (2, 2, 2, 2), (1, 1), id="5x5-s2"),
    pytest.param((1, 16, 9, 9), 3, (1, 1), (2, 2, 2, 2), (2, 2), id="dilated"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xs, k, strides, pads, dil", DEPTHWISE)
def test_blocked_depthwise_matches_float64(rng, target, xs, k, strides, pads, dil):
    lanes = Target(target).vector_lanes(32)
    c = xs[1]
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    cb = -(-c // lanes)
    wp = np.zeros((cb * lanes, 1, k, k), np.float32)
    wp[:c] = w
    wb = wp.reshape(cb, lanes, 1, k, k).transpose(0, 2, 3, 4, 1).copy()  # OIHW -> OIHW{lanes}o
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dil)}
    if target != "llvm" and not _host_has(*(("avx512f",) if "avx512" in target else ("avx2", "fma"))):
        pytest.skip(f"this CPU cannot run code for {target}")
    got = _run_blocked(DEPTHWISE_NCHWC, [_block_act(x, lanes), wb, _block_bias(b, lanes)], attrs, target)
    ref = conv2d_ref(x, w, b, strides, pads, dil, group=c)
    np.testing.assert_allclose(_unblock(got, c), ref, **TOL)
    assert not np.any(_unblock(got, got.shape[1] * lanes)[:, c:])


def test_blocked_conv_for_haswell_uses_no_avx512():
    """Code for an AVX2 machine holds ymm FMAs and nothing an AVX2-only CPU would trap on."""
    target = "llvm -mcpu=haswell"
    strategy = CPUStrategy(target)
    x = te.placeholder((1, 3, 9, 9, 8), "float32", name="x")
    w = te.placeholder((2, 3, 3, 3, 8, 8), "float32", name="w")
    (out,) = call(OpContext(CONV_NCHWC, {"pads": [1, 1, 1, 1]}, ["x", "w"], {}, 17, "n0", strategy=strategy), [x, w])
    f = ember.build(strategy.schedule_group([out]), [x, w, out], target=target, name="conv")
    asm = f.get_source("asm")
    assert "vfmadd" in asm and "%ymm" in asm and "%zmm" not in asm


def test_blocked_conv_for_aarch64_is_compile_checked():
    target = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
    strategy = CPUStrategy(target)
    assert strategy.layout_policy().block == 4
    x = te.placeholder((1, 3, 9, 9, 4), "float32", name="x")
    w = te.placeholder((2, 3, 3, 3, 4, 4), "float32", name="w")
    (out,) = call(OpContext(CONV_NCHWC, {"pads": [1, 1, 1, 1]}, ["x", "w"], {}, 17, "n0", strategy=strategy), [x, w])
    from ember.backends.cpu.codegen import assembly, compile_cpu
    from ember.lowering import lower

    compiled = compile_cpu([lower(strategy.schedule_group([out]), [x, w, out], "conv", target=target)], Target(target))
    assert "fmla" in assembly(compiled.llvm_ir, Target(target))


# -- the policy ----------------------------------------------------------------------------------------
def _site(c: int, m: int, group: int = 1, const: bool = True, dtype: str = "float32") -> LayoutSite:
    x = SiteValue("x", (1, c, 8, 8), dtype)
    w = SiteValue("w", (m, c // group, 3, 3), dtype, const)
    return LayoutSite("Conv", "conv", (x, w), (SiteValue("y", (1, m, 8, 8), dtype),), {"group": group})


@pytest.mark.parametrize("target, block", [("llvm -mcpu=haswell", 8), ("llvm -mcpu=skylake-avx512", 16),
                                           ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", 4)])
def test_policy_blocks_by_the_targets_vector_width(target, block):
    policy = CPUStrategy(target).layout_policy()
    nl = policy.layouts(_site(32, 24))
    assert nl is not None and nl.op == CONV_NCHWC
    assert [str(v.layout) for v in nl.inputs] == [f"NCHW{block}c", f"OIHW{block}i{block}o"]
    assert [str(v.layout) for v in nl.outputs] == [f"NCHW{block}c"]
    image = policy.layouts(_site(3, 24))  # fewer channels than a block: read in place, one block
    assert image is not None and image.inputs[0].is_identity and str(image.inputs[0].layout) == "NCHW"
    assert str(image.inputs[1].layout) == f"OIHW3i{block}o"
    dw = policy.layouts(_site(24, 24, group=24))
    assert dw is not None and dw.op == DEPTHWISE_NCHWC and str(dw.inputs[1].layout) == f"OIHW{block}o"


def test_policy_leaves_what_it_cannot_block():
    policy = CPUStrategy("llvm").layout_policy()
    assert policy.layouts(_site(32, 24, group=4)) is None  # grouped, not depthwise
    assert policy.layouts(_site(32, 24, const=False)) is None  # run-time weights
    assert policy.layouts(_site(32, 24, dtype="float16")) is None
    v = SiteValue("x", (1, 4, 8, 8), "float32")
    relu = LayoutSite("Relu", "r", (v,), (v,))
    assert policy.layouts(relu) is None


# -- whole models with mixed layouts ----------------------------------------------------------------------
def _mixed_model(rng, c=19):
    """Conv 3x3 (blocked) -> Relu -> MaxPool (plain) -> [depthwise Conv (blocked) -> Clip ->
    Conv 1x1 (blocked) + the pooled tensor -> GlobalAveragePool = Y] and [Conv with two
    filters per channel (grouped: left in NCHW) -> ReduceSum = Z]."""
    ws = {
        "w0": rng.standard_normal((c, 5, 3, 3)).astype(np.float32), "b0": rng.standard_normal(c).astype(np.float32),
        "wg": rng.standard_normal((2 * c, 1, 3, 3)).astype(np.float32),
        "wd": rng.standard_normal((c, 1, 3, 3)).astype(np.float32), "bd": rng.standard_normal(c).astype(np.float32),
        "w1": rng.standard_normal((c, c, 1, 1)).astype(np.float32),
        "lo": np.array(0, np.float32), "hi": np.array(3, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["X", "w0", "b0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "wg"], ["g"], pads=[1, 1, 1, 1], group=c),
        helper.make_node("ReduceSum", ["g"], ["Z"], keepdims=0),
        helper.make_node("Conv", ["p", "wd", "bd"], ["d"], pads=[1, 1, 1, 1], group=c),
        helper.make_node("Clip", ["d", "lo", "hi"], ["dc"]),
        helper.make_node("Conv", ["dc", "w1"], ["e"]),
        helper.make_node("Add", ["e", "p"], ["s"]),
        helper.make_node("GlobalAveragePool", ["s"], ["Y"]),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in ws.items()]
    g = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 5, 12, 10])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), ws


def _mixed_ref(x, ws, c=19):
    a = np.maximum(conv2d_ref(x, ws["w0"], ws["b0"], (1, 1), (1, 1, 1, 1)), 0)
    n, _, h, w = a.shape
    p = a.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
    z = conv2d_ref(p, ws["wg"], None, (1, 1), (1, 1, 1, 1), group=c).sum()
    d = np.clip(conv2d_ref(p, ws["wd"], ws["bd"], (1, 1), (1, 1, 1, 1), group=c), 0, 3)
    y = (conv2d_ref(d, ws["w1"], None) + p).mean(axis=(2, 3), keepdims=True)
    return y, z


def test_mixed_layout_model_matches_float64_and_the_plain_compile(rng):
    c = 19
    model, ws = _mixed_model(rng, c)
    compiled = ember.compile(model)
    with PassContext(disabled_passes=["AlterLayout"]):
        plain = ember.compile(model)
    values = compiled.plan["values"]
    assert any("NCHW16c" in v or "NCHW8c" in v or "NCHW4c" in v for v in values)  # something ran blocked
    for _ in range(2):
        x = rng.standard_normal((1, 5, 12, 10)).astype(np.float32)
        y, z = compiled(X=x)
        y0, z0 = plain(X=x)
        ref, zref = _mixed_ref(x, ws, c)
        np.testing.assert_allclose(y, ref, **TOL)
        np.testing.assert_allclose(z, zref, rtol=1e-4, atol=1e-3)  # a sum of ~4000 terms
        np.testing.assert_allclose(y, y0, **TOL)
        np.testing.assert_allclose(z, z0, **TOL)


def test_blocked_round_trip_is_exact(rng):
    """Identity 1x1 convolutions (exact in float32) around a plain max-pool, with 19 channels
    (padded to the block): the model's output equals NumPy's pooling of its input bit for bit."""
    c = 19
    eye = np.eye(c, dtype=np.float32).reshape(c, c, 1, 1)
    nodes = [
        helper.make_node("Conv", ["X", "eye"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("Conv", ["p", "eye"], ["Y"]),
    ]
    g = helper.make_graph(nodes, "rt", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, c, 11, 9])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(eye, "eye")])
    m = ember.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    x = rng.standard_normal((2, c, 11, 9)).astype(np.float32)
    r = np.maximum(x, 0)
    want = np.max(np.stack([r[:, :, i:i + 9:2, j:j + 7:2] for i in range(3) for j in range(3)]), axis=0)
    (got,) = m(X=x)
    np.testing.assert_array_equal(got, want)


def _pad_conv_model(w, value, pads, second_reader=False):
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(pads, np.int64), "pads"),
             numpy_helper.from_array(np.array(value, np.float32), "v")]
    nodes = [helper.make_node("Pad", ["X", "pads", "v"], ["p"], mode="constant"),
             helper.make_node("Conv", ["p", "W"], ["Y"], strides=[2, 2], pads=[1, 0, 0, 1])]
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    if second_reader:
        nodes.append(helper.make_node("Relu", ["p"], ["Z"]))
        outs.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "padconv", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 6, 11, 10])],
                          outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("value, second_reader, folded", [(0.0, False, True), (0.5, False, False), (0.0, True, False)],
                         ids=["zero-folded", "nonzero-kept", "other-reader-kept"])
def test_zero_pad_before_conv_folds_into_it(rng, value, second_reader, folded):
    """A zero ``Pad`` of the spatial axes read only by convolutions becomes their padding (no
    Pad kernel, no layout conversions around it); any other Pad stays. Both compute the model."""
    w = rng.standard_normal((9, 6, 3, 3)).astype(np.float32)
    pads = [0, 0, 1, 2, 0, 0, 2, 1]
    m = ember.compile(_pad_conv_model(w, value, pads, second_reader))
    assert any(s.get("func", "").find("pad") >= 0 for s in m.plan["steps"]) != folded
    x = rng.standard_normal((1, 6, 11, 10)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 2), (2, 1)), constant_values=value)
    ref = conv2d_ref(xp, w, None, (2, 2), (1, 0, 0, 1))
    np.testing.assert_allclose(m(X=x)[0], ref, **TOL)


def test_blocked_conv_knobs_are_checked_and_every_legal_point_computes_the_same(rng):
    """The tuner's view (``Strategy.space``): the default point is legal, a register block too
    large for the target is refused before anything is built, and other legal points (row
    blocks, one channel vector, no unrolling) give the same result."""
    from ember.errors import InvalidConfig

    strategy = CPUStrategy("llvm")
    lanes = strategy.target.vector_lanes(32)
    x = rng.standard_normal((1, 2, 9, 11, lanes)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3, lanes, lanes)).astype(np.float32)
    xt = te.placeholder(x.shape, "float32", name="x")
    wt = te.placeholder(w.shape, "float32", name="w")
    (out,) = call(OpContext(CONV_NCHWC, {"pads": [1, 1, 1, 1]}, ["x", "w"], {}, 17, "n0", strategy=strategy), [xt, wt])
    space = strategy.space([out])
    assert space is not None and {"tile_oc", "tile_oh", "tile_ow", "unroll"} <= set(space.default.to_json()["knobs"])
    from ember.strategy.space import ConfigEntity

    big = ConfigEntity.from_json({"knobs": {"tile_oc": {"val": 4}, "tile_oh": {"val": 4}, "tile_ow": {"val": 28},
                                            "unroll": {"val": True}}})
    with pytest.raises(InvalidConfig, match="vector registers"):
        strategy.schedule_group([out], config=big)
    results = []
    for knobs in ({}, {"tile_oc": 1, "tile_oh": 2, "tile_ow": 3, "unroll": False}, {"tile_oh": 3, "tile_ow": 2}):
        j = space.default.to_json()
        j.pop("index", None)
        for k, v in knobs.items():
            j["knobs"][k] = {"val": v}
        s = strategy.schedule_group([out], config=space.from_json(j))
        f = ember.build(s, [xt, wt, out], name="conv")
        res = np.full([int(d.value) for d in out.shape], np.nan, np.float32)
        f(x, w, res)
        results.append(res)
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pool", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool_reads_the_blocked_tensor(rng, pool):
    """A network's head: the last convolution stays blocked and the pooling reads it
    (``ember.GlobalPoolNCHWc``); only the pooled vector is converted back. 19 channels (padded)."""
    w = rng.standard_normal((19, 6, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"], pads=[1, 1, 1, 1]), helper.make_node(pool, ["c"], ["Y"])]
    g = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 6, 7, 9])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "W")])
    m = ember.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert any("globalpoolnchwc" in s.get("func", "") for s in m.plan["steps"])
    x = rng.standard_normal((2, 6, 7, 9)).astype(np.float32)
    c = conv2d_ref(x, w, None, (1, 1), (1, 1, 1, 1))
    ref = c.mean(axis=(2, 3), keepdims=True) if pool == "GlobalAveragePool" else c.max(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(m(X=x)[0], ref, **TOL)
