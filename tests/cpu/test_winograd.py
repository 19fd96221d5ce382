"""Winograd convolutions on blocked tensors (``ember.WinogradConvNCHWc``) and the policy that
places them.

* The transform matrices of F(2x2, 3x3) and F(4x4, 3x3) are exact (float64, NumPy only).
* The operator against the float64 NumPy convolution, built and scheduled for the host, outputs
  poisoned with NaN, at sizes no tile divides (output 9 x 11, 11 x 16; 19 or 20 input and 13 or
  21 output channels padded to the block; padding 1, 0 and asymmetric; batch 2), with and without
  bias, all tiles at once (tile count padded to the register tile) and row by row; the padding
  channels of the result must come out zero (the layout pass's invariant).
  Weights are run-time inputs here, so the weight transform runs in the kernel.
* Whole models through ``ember.compile`` (weights transformed at compile time): two 64-channel
  3x3 convolutions with bias, a residual add and ReLU — one row by row, stored in the blocked
  layout, one over all tiles at once, stored through the layout transform back to NCHW — at 13 x
  13 pixels (partial last tiles), batch 2, against float64; the policy's choices.
* ``-mcpu=haswell`` (8-lane blocks, AVX2) runs against float64 and its code holds no AVX-512;
  AArch64 code is compile-checked (NEON ``fmla``).

Tolerance: Winograd's transforms amplify float32 rounding (F(4,3)'s input transform has
coefficients up to 5 and its output transform up to 8; the products of the transformed values
are summed over the input channels). The error is measured relative to the output's largest
magnitude: F(4,3) ~3e-6 at 19 channels and 2e-6-9e-6 at 64-512 channels of unit-normal data
(``docs/models.md``, "Winograd"), F(2,3) ~2e-7, the direct convolution ~1e-7. The tests allow
``WINO_TOL = 5e-5`` of the largest magnitude (a few times the worst measured) for F(4,3) and
``1e-5`` for F(2,3).
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember import te
from ember.ops.conv_nchwc import CONV_NCHWC
from ember.ops.layout_transform import LayoutSite, SiteValue
from ember.ops.registry import OpContext, OpError, call
from ember.ops.winograd_nchwc import WINOGRAD_NCHWC, transform_matrices
from ember.strategy.cpu import CPUStrategy
from ember.strategy.cpu_layout import CPULayoutPolicy
from ember.strategy.cpu_winograd import winograd_tile_rows
from ember.target import Target

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conv_reference import conv2d_ref  # noqa: E402
from test_conv_layouts import _block_act, _block_bias, _block_weight, _unblock  # noqa: E402

WINO_TOL = {4: 5e-5, 2: 1e-5}


def _rel(got: np.ndarray, ref: np.ndarray) -> float:
    """Max absolute error relative to the reference's largest magnitude."""
    return float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("m", [2, 4])
def test_transform_matrices_are_exact(rng, m):
    """``A^T [(G g G^T) * (B^T d B)] A`` is the 3x3 correlation of an ``(m+2)^2`` tile."""
    bt, g, at = (np.array([[float(Fraction(v)) for v in row] for row in mat]) for mat in transform_matrices(m))
    a = m + 2
    d = rng.standard_normal((a, a))
    w = rng.standard_normal((3, 3))
    y = at @ ((g @ w @ g.T) * (bt @ d @ bt.T)) @ at.T
    ref = np.array([[np.sum(d[i:i + 3, j:j + 3] * w) for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="tile size"):
        transform_matrices(3)


def _run(op: str, arrays: list[np.ndarray], attrs: dict, target: str = "llvm") -> np.ndarray:
    """Build ``op`` for ``target`` with that target's CPU schedule; run it on poisoned output."""
    strategy = CPUStrategy(target)
    phs = [te.placeholder(a.shape, "float32", name=f"in{k}") for k, a in enumerate(arrays)]
    names = [f"in{k}" for k in range(len(arrays))]
    (out,) = call(OpContext(op, attrs, names, {}, 17, "n0", strategy=strategy), phs)
    s = strategy.schedule_group([out])
    used = {id(st.op) for st in s.stages}
    ins = [(p, a) for p, a in zip(phs, arrays) if id(p.op) in used]
    f = ember.build(s, [p for p, _ in ins] + [out], target=target, name="wino")
    res = np.full([int(d.value) for d in out.shape], np.nan, np.float32)
    f(*[a for _, a in ins], res)
    return res


# (N, C, H, W), M, pads (t, l, b, r), tile, bias
# (N, C, H, W), M, pads (t, l, b, r), tile, bias, tile_rows (the tile count is padded to a
# multiple: 2 * 3 * 3 = 18 tiles -> 20 rows, whose last two repeat the last tile), fused (row by
# row: each row of tiles transformed, multiplied and transformed back in turn)
CASES = [
    pytest.param((2, 19, 9, 11), 13, (1, 1, 1, 1), 4, True, 4, 0, id="f4-batch2-pad1-bias-rows4"),
    pytest.param((2, 20, 13, 18), 21, (0, 0, 0, 0), 4, False, 1, 1, id="f4-fused-batch2-pad0"),
    pytest.param((1, 19, 9, 11), 13, (0, 1, 1, 0), 2, True, 1, 0, id="f2-asym"),
]


@pytest.mark.parametrize("xs, m, pads, tile, bias, rows, fused", CASES)
def test_winograd_matches_float64(rng, xs, m, pads, tile, bias, rows, fused):
    lanes = Target("llvm").vector_lanes(32)
    c = xs[1]
    ib = c if c < lanes else lanes
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    arrays = [_block_act(x, ib), _block_weight(w, ib, lanes)] + ([_block_bias(b, lanes)] if bias else [])
    got = _run(WINOGRAD_NCHWC, arrays, {"pads": list(pads), "tile": tile, "tile_rows": rows, "fused": fused})
    ref = conv2d_ref(x, w, b, (1, 1), pads)
    assert _rel(_unblock(got, m), ref) <= WINO_TOL[tile]
    assert not np.any(_unblock(got, got.shape[1] * lanes)[:, m:])  # padding channels are zero


def test_winograd_refuses_what_it_does_not_compute():
    x = te.placeholder((1, 1, 8, 8, 16), "float32", name="x")
    strategy = CPUStrategy("llvm")

    def build(wshape, attrs):
        w = te.placeholder(wshape, "float32", name="w")
        return call(OpContext(WINOGRAD_NCHWC, attrs, ["x", "w"], {}, 17, "n0", strategy=strategy), [x, w])

    with pytest.raises(OpError, match="3x3 kernels"):
        build((1, 1, 5, 5, 16, 16), {})
    with pytest.raises(OpError, match="ember.ConvNCHWc"):
        build((1, 1, 3, 3, 16, 16), {"strides": [2, 2]})
    with pytest.raises(OpError, match="tile"):
        build((1, 1, 3, 3, 16, 16), {"tile": 3})
    with pytest.raises(OpError, match="tile_rows"):
        build((1, 1, 3, 3, 16, 16), {"tile_rows": 0})
    with pytest.raises(OpError, match="row of tiles"):
        build((1, 1, 3, 3, 16, 16), {"tile_rows": 4, "fused": 1})


# -- the policy ------------------------------------------------------------------------------------------------
def _site(c: int, m: int, hw: int = 14, k: int = 3, **attrs) -> LayoutSite:
    x = SiteValue("x", (1, c, hw, hw), "float32")
    w = SiteValue("w", (m, c, k, k), "float32", True)
    oh = (hw + 2 - k) // int(attrs.get("strides", [1, 1])[0]) + 1
    return LayoutSite("Conv", "conv", (x, w), (SiteValue("y", (1, m, oh, oh), "float32"),),
                      {"pads": [1, 1, 1, 1], **attrs})


def test_policy_places_winograd_where_it_pays():
    policy = CPUStrategy("llvm").layout_policy()
    nl = policy.layouts(_site(64, 64))  # 590 KB of transformed weights: row by row
    assert nl is not None and nl.op == WINOGRAD_NCHWC and nl.attrs["tile"] == 4 and nl.attrs["fused"] == 1
    assert str(nl.inputs[1].layout) == f"OIHW{policy.block}i{policy.block}o"  # as the direct convolution's
    small = policy.layouts(_site(512, 512, hw=7))  # 2 x 2 tiles of 4 x 4: F(2x2, 3x3), 4 x 4 of them
    assert small is not None and small.op == WINOGRAD_NCHWC and small.attrs["tile"] == 2
    big = policy.layouts(_site(256, 256))  # 9.4 MB: every tile of a point at once
    assert big is not None and big.op == WINOGRAD_NCHWC and "fused" not in big.attrs
    assert big.attrs["tile_rows"] == winograd_tile_rows(16, 2 * policy.block, policy.target)  # 4 x 4 tiles
    direct = [
        _site(8, 64),  # too few input channels
        _site(64, 12),  # too few output channels
        _site(512, 512, hw=4),  # 2 x 2 output tiles even of F(2x2, 3x3)
        _site(128, 128, hw=7),  # F(2x2, 3x3) pays from 256 channels
        _site(64, 64, strides=[2, 2]),
        _site(64, 64, dilations=[2, 2]),
        _site(64, 64, k=1),
    ]
    for site in direct:
        got = policy.layouts(site)
        assert got is not None and got.op == CONV_NCHWC
    off = CPULayoutPolicy(Target("llvm"), winograd=False).layouts(_site(64, 64))
    assert off is not None and off.op == CONV_NCHWC


# -- whole models ---------------------------------------------------------------------------------------------
def _residual_model(rng, c: int = 64):
    """Conv 3x3 + bias + X -> Relu (4 tiles per row: row by row, stored blocked) -> Conv 3x3
    + bias without padding -> Relu = Y (3 tiles per row: all tiles of a point at once, stored
    through the layout transform back to NCHW)."""
    ws = {k: (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32) for k in ("w1", "w2")}
    ws.update({k: rng.standard_normal(c).astype(np.float32) for k in ("b1", "b2")})
    nodes = [
        helper.make_node("Conv", ["X", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["a", "X"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Conv", ["r", "w2", "b2"], ["e"]),
        helper.make_node("Relu", ["e"], ["Y"]),
    ]
    shape = [2, c, 13, 13]
    g = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in ws.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), ws, shape


def test_residual_block_matches_float64(rng):
    model, ws, shape = _residual_model(rng)
    compiled = ember.compile(model)
    assert sum("winograd" in s.get("func", "") for s in compiled.plan["steps"]) == 2
    for _ in range(2):  # fresh inputs; the planned buffers are reused correctly
        x = rng.standard_normal(shape).astype(np.float32)
        r = np.maximum(conv2d_ref(x, ws["w1"], ws["b1"], (1, 1), (1, 1, 1, 1)) + x, 0)
        ref = np.maximum(conv2d_ref(r, ws["w2"], ws["b2"]), 0)
        (got,) = compiled(X=x)
        assert _rel(got, ref) <= WINO_TOL[4]


# -- other targets --------------------------------------------------------------------------------------------
def test_haswell_runs_with_avx2_only(rng):
    """8-lane blocks and 16 registers: matches float64 and the code holds no AVX-512."""
    target = "llvm -mcpu=haswell"
    have = Target("llvm").features
    x = rng.standard_normal((1, 11, 6, 7)).astype(np.float32)
    w = rng.standard_normal((10, 11, 3, 3)).astype(np.float32)
    arrays = [_block_act(x, 8), _block_weight(w, 8, 8)]
    strategy = CPUStrategy(target)
    phs = [te.placeholder(a.shape, "float32", name=f"in{k}") for k, a in enumerate(arrays)]
    (out,) = call(OpContext(WINOGRAD_NCHWC, {"pads": [1, 1, 1, 1]}, ["in0", "in1"], {}, 17, "n0", strategy=strategy),
                  phs)
    f = ember.build(strategy.schedule_group([out]), phs + [out], target=target, name="wino")
    asm = f.get_source("asm")
    assert "vfmadd" in asm and "%ymm" in asm and "%zmm" not in asm
    if not {"avx2", "fma"} <= set(have):
        pytest.skip("this CPU cannot run AVX2 code (the compile check above passed)")
    res = np.full([int(d.value) for d in out.shape], np.nan, np.float32)
    f(*arrays, res)
    assert _rel(_unblock(res, 10), conv2d_ref(x, w, None, (1, 1), (1, 1, 1, 1))) <= WINO_TOL[4]


def test_aarch64_is_compile_checked():
    from ember.backends.cpu.codegen import assembly, compile_cpu
    from ember.lowering import lower

    target = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
    strategy = CPUStrategy(target)
    x = te.placeholder((1, 3, 6, 7, 4), "float32", name="x")
    w = te.placeholder((2, 3, 3, 3, 4, 4), "float32", name="w")
    (out,) = call(OpContext(WINOGRAD_NCHWC, {"pads": [1, 1, 1, 1]}, ["x", "w"], {}, 17, "n0", strategy=strategy),
                  [x, w])
    compiled = compile_cpu([lower(strategy.schedule_group([out]), [x, w, out], "wino", target=target)], Target(target))
    assert "fmla" in assembly(compiled.llvm_ir, Target(target))
