"""The fast paths of the blocked (NCHW[x]c) convolutions, each against the float64 NumPy
convolution at sizes no block, register tile or unrolled tap loop divides.

* Depthwise convolutions read their taps straight from the input (``masked_read``: clamped
  reads whose bits are zeroed in the padding, no padded copy): 3x3 and 5x5, stride 1 and 2,
  symmetric, asymmetric and TensorFlow-"SAME" padding, dilation, batch 2, channel counts the
  block does not divide, for the host, ``-mcpu=haswell`` (AVX2, 8-lane blocks) and
  ``-mcpu=skylake-avx512`` (16 lanes); AArch64 is compile-checked.
* The padding reads zero *exactly*: infinities and NaNs on the image border stay where ONNX
  puts them and never leak into outputs through a padded tap (a read of the clamped neighbour
  multiplied by zero would turn them into NaN). Checked for the depthwise taps and for the
  padded copy the dense convolutions read.

Outputs are poisoned with NaN before each run. Tolerance: float32 accumulation over at most
~500 products of O(1) values against float64: rtol = atol = 1e-4.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import ember
from ember import te
from ember.ops.conv_nchwc import CONV_NCHWC, DEPTHWISE_NCHWC
from ember.ops.registry import OpContext, call
from ember.strategy.cpu import CPUStrategy
from ember.target import Target

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conv_reference import conv2d_ref  # noqa: E402

TOL = {"rtol": 1e-4, "atol": 1e-4}

TARGETS = [
    pytest.param("llvm", id="host"),
    pytest.param("llvm -mcpu=haswell", id="haswell"),
    pytest.param("llvm -mcpu=skylake-avx512", id="skylake-avx512"),
]


def _skip_unless_runnable(target: str) -> None:
    if target == "llvm":
        return
    need = ("avx512f",) if "avx512" in target else ("avx2", "fma")
    have = Target("llvm").features
    if not all(f in have for f in need):
        pytest.skip(f"this CPU cannot run code for {target}")


def _block(x: np.ndarray, b: int) -> np.ndarray:
    """NCHW -> NCHW{b}c, zero-padded channels."""
    n, c, h, w = x.shape
    cb = -(-c // b)
    xp = np.zeros((n, cb * b, h, w), x.dtype)
    xp[:, :c] = x
    return xp.reshape(n, cb, b, h, w).transpose(0, 1, 3, 4, 2).copy()


def _unblock(y: np.ndarray, c: int) -> np.ndarray:
    n, cb, h, w, b = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)[:, :c]


def _block_dw_weight(w: np.ndarray, b: int) -> np.ndarray:
    """(C, 1, KH, KW) -> OIHW{b}o, zero-padded."""
    c, _, kh, kw = w.shape
    cb = -(-c // b)
    wp = np.zeros((cb * b, 1, kh, kw), w.dtype)
    wp[:c] = w
    return wp.reshape(cb, b, 1, kh, kw).transpose(0, 2, 3, 4, 1).copy()


def _block_weight(w: np.ndarray, ib: int, ob: int) -> np.ndarray:
    """OIHW -> OIHW{ib}i{ob}o, zero-padded."""
    m, c, kh, kw = w.shape
    mb, cb = -(-m // ob), -(-c // ib)
    wp = np.zeros((mb * ob, cb * ib, kh, kw), w.dtype)
    wp[:m, :c] = w
    return wp.reshape(mb, ob, cb, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1).copy()


def _block_bias(b: np.ndarray, ob: int) -> np.ndarray:
    bp = np.zeros(-(-b.shape[0] // ob) * ob, b.dtype)
    bp[: b.shape[0]] = b
    return bp.reshape(-1, ob)


def _run(op: str, arrays: list[np.ndarray], attrs: dict, target: str) -> np.ndarray:
    """Build ``op`` with ``target``'s CPU schedule (its default knobs) and run it on a NaN-poisoned
    output."""
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


def _depthwise(x: np.ndarray, w: np.ndarray, b: np.ndarray, strides, pads, dil, target: str) -> np.ndarray:
    lanes = Target(target).vector_lanes(32)
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dil)}
    got = _run(DEPTHWISE_NCHWC, [_block(x, lanes), _block_dw_weight(w, lanes), _block_bias(b, lanes)], attrs, target)
    c = x.shape[1]
    assert not np.any(_unblock(got, got.shape[1] * lanes)[:, c:])  # padding channels are zero
    return _unblock(got, c)


# (N, C, H, W), K, strides, pads (t, l, b, r), dilations
DEPTHWISE = [
    pytest.param((1, 19, 13, 17), 3, (1, 1), (1, 1, 1, 1), (1, 1), id="3x3-s1"),
    pytest.param((2, 21, 15, 23), 3, (2, 2), (1, 1, 1, 1), (1, 1), id="3x3-s2-batch2"),
    pytest.param((1, 13, 16, 18), 3, (2, 2), (0, 0, 1, 1), (1, 1), id="3x3-s2-tf-same"),
    pytest.param((1, 35, 11, 19), 5, (1, 1), (2, 2, 2, 2), (1, 1), id="5x5-s1"),
    pytest.param((1, 21, 18, 22), 5, (2, 2), (1, 1, 2, 2), (1, 1), id="5x5-s2-tf-same"),
    pytest.param((1, 17, 12, 9), 3, (1, 2), (2, 0, 1, 3), (1, 1), id="asym-strides-pads"),
    pytest.param((1, 16, 14, 13), 3, (1, 1), (2, 2, 2, 2), (2, 2), id="dilated"),
    pytest.param((1, 9, 5, 4), 5, (1, 1), (3, 3, 3, 3), (1, 1), id="pad-wider-than-image"),
    pytest.param((1, 24, 10, 10), 3, (2, 2), (0, 0, 0, 0), (1, 1), id="unpadded"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xs, k, strides, pads, dil", DEPTHWISE)
def test_depthwise_taps_read_in_place_match_float64(rng, target, xs, k, strides, pads, dil):
    _skip_unless_runnable(target)
    c = xs[1]
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    got = _depthwise(x, w, b, strides, pads, dil, target)
    np.testing.assert_allclose(got, conv2d_ref(x, w, b, strides, pads, dil, group=c), **TOL)


def _border_specials(rng, shape: tuple[int, ...]) -> np.ndarray:
    """Random values with +inf, -inf and NaN on the image's border rows and columns."""
    x = rng.uniform(0.5, 1.5, shape).astype(np.float32)
    x[:, 0::3, 0, :] = np.inf
    x[:, 1::3, :, -1] = -np.inf
    x[:, 2::3, -1, :] = np.nan
    x[:, :, :, 0] = np.where(np.arange(shape[2]) % 2 == 0, np.inf, x[:, :, :, 0])
    return x


def _same_specials(got: np.ndarray, ref: np.ndarray) -> None:
    """Equal where finite (to the tolerance), and +inf, -inf and NaN at exactly the same places."""
    for pred in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(pred(got), pred(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], **TOL)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("strides, pads", [((1, 1), (1, 1, 1, 1)), ((2, 2), (1, 1, 1, 1)), ((2, 2), (0, 0, 1, 1))])
def test_depthwise_padding_is_exact_zero_next_to_infinities(rng, target, strides, pads):
    """Positive weights: the reference has infinities (never NaN from a padded tap) wherever a
    window holds an infinity; a padding tap that read the clamped border value would give NaN."""
    _skip_unless_runnable(target)
    x = _border_specials(rng, (1, 21, 9, 11))
    w = rng.uniform(0.5, 1.5, (21, 1, 3, 3)).astype(np.float32)
    b = np.zeros(21, np.float32)
    with np.errstate(invalid="ignore"):
        ref = conv2d_ref(x, w, b, strides, pads, (1, 1), group=21)
    _same_specials(_depthwise(x, w, b, strides, pads, (1, 1), target), ref)


@pytest.mark.parametrize("target", TARGETS)
def test_padded_copy_of_dense_conv_is_exact_zero_next_to_infinities(rng, target):
    """The dense blocked convolution reads a padded copy of its input (``nchwc_pad``), made with
    the same masked read: infinities and NaNs on the border reach exactly the outputs they
    should. One input channel (so no zero weight meets another channel's infinity), 5 outputs,
    positive weights, asymmetric padding."""
    _skip_unless_runnable(target)
    lanes = Target(target).vector_lanes(32)
    x = _border_specials(rng, (1, 3, 8, 13))[:, 1:2]
    w = rng.uniform(0.5, 1.5, (5, 1, 3, 3)).astype(np.float32)
    b = np.zeros(5, np.float32)
    pads = (1, 2, 1, 0)
    attrs = {"strides": [1, 1], "pads": list(pads), "dilations": [1, 1]}
    got = _run(CONV_NCHWC, [_block(x, 1), _block_weight(w, 1, lanes), _block_bias(b, lanes)], attrs, target)
    with np.errstate(invalid="ignore"):
        ref = conv2d_ref(x, w, b, (1, 1), pads)
    _same_specials(_unblock(got, 5), ref)


def test_depthwise_for_aarch64_is_compile_checked():
    target = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
    strategy = CPUStrategy(target)
    x = te.placeholder((1, 3, 9, 11, 4), "float32", name="x")
    w = te.placeholder((3, 1, 5, 5, 4), "float32", name="w")
    attrs = {"pads": [1, 1, 2, 2], "strides": [2, 2]}
    (out,) = call(OpContext(DEPTHWISE_NCHWC, attrs, ["x", "w"], {}, 17, "n0", strategy=strategy), [x, w])
    from ember.backends.cpu.codegen import assembly, compile_cpu
    from ember.lowering import lower

    compiled = compile_cpu([lower(strategy.schedule_group([out]), [x, w, out], "dw", target=target)], Target(target))
    asm = assembly(compiled.llvm_ir, Target(target))
    assert "fmla" in asm and "umin" in asm


def test_depthwise_for_haswell_holds_vector_fmas_only():
    """AVX2 code: ymm FMAs and the unsigned minimum that zeroes padded taps, nothing AVX-512."""
    target = "llvm -mcpu=haswell"
    strategy = CPUStrategy(target)
    x = te.placeholder((1, 3, 9, 11, 8), "float32", name="x")
    w = te.placeholder((3, 1, 3, 3, 8), "float32", name="w")
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 2]}
    (out,) = call(OpContext(DEPTHWISE_NCHWC, attrs, ["x", "w"], {}, 17, "n0", strategy=strategy), [x, w])
    f = ember.build(strategy.schedule_group([out]), [x, w, out], target=target, name="dw")
    asm = f.get_source("asm")
    assert "vfmadd" in asm and "vpminud" in asm and "%ymm" in asm and "%zmm" not in asm


# -- register blocks of an odd number of output-channel blocks ---------------------------------------------
def _dense(x: np.ndarray, w: np.ndarray, b: np.ndarray, strides, pads, target: str, knobs: dict | None = None):
    """The blocked convolution of ``x`` (NCHW) by ``w`` at the default point of its knob space, or
    with ``knobs`` set; returns (result in NCHW, the point used)."""
    strategy = CPUStrategy(target)
    lanes = strategy.target.vector_lanes(32)
    c, m = x.shape[1], w.shape[0]
    ib = c if c < lanes else lanes
    arrays = [_block(x, ib), _block_weight(w, ib, lanes), _block_bias(b, lanes)]
    phs = [te.placeholder(a.shape, "float32", name=f"in{k}") for k, a in enumerate(arrays)]
    attrs = {"strides": list(strides), "pads": list(pads)}
    (out,) = call(OpContext(CONV_NCHWC, attrs, ["in0", "in1", "in2"], {}, 17, "n0", strategy=strategy), phs)
    space = strategy.space([out])
    assert space is not None
    cfg = space.default
    if knobs:
        j = cfg.to_json()
        j.pop("index", None)
        for k, v in knobs.items():
            j["knobs"][k] = {"val": v}
        cfg = space.from_json(j)
    f = ember.build(strategy.schedule_group([out], config=cfg), phs + [out], target=target, name="conv")
    res = np.full([int(d.value) for d in out.shape], np.nan, np.float32)
    f(*arrays, res)
    assert not np.any(_unblock(res, res.shape[1] * lanes)[:, m:])  # padding channels are zero
    return _unblock(res, m), {k: cfg[k].val for k in ("tile_oc", "tile_oh", "tile_ow")}


@pytest.mark.parametrize(
    "xs, m, expect",
    [
        pytest.param((1, 37, 14, 14), 107, (1, 2, 14), id="7-blocks-14x14-rows"),
        pytest.param((1, 21, 28, 28), 45, (3, 1, 7), id="3-blocks-28x28"),
        pytest.param((1, 19, 7, 7), 139, (3, 1, 7), id="9-blocks-7x7"),
        pytest.param((1, 23, 28, 28), 75, (1, 1, 28), id="5-blocks-28x28-row"),
    ],
)
def test_odd_channel_block_defaults_match_float64(rng, xs, m, expect):
    """A 32-register target (the AVX-512 block of 16 channels) gives an odd number of output
    blocks three blocks or one block over rows (``odd_channel_tiles``) by default; the result
    matches float64 (channel counts padded to the block, a residual-free 1x1)."""
    target = "llvm -mcpu=skylake-avx512"
    _skip_unless_runnable(target)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((m, xs[1], 1, 1)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    got, point = _dense(x, w, b, (1, 1), (0, 0, 0, 0), target)
    assert (point["tile_oc"], point["tile_oh"], point["tile_ow"]) == expect
    np.testing.assert_allclose(got, conv2d_ref(x, w, b), **TOL)


HSW = "llvm -mcpu=haswell"


@pytest.mark.parametrize(
    "target, xs, m, ks, strides, pads, expect",
    [
        pytest.param(HSW, (1, 21, 14, 14), 32, 1, (1, 1), (0, 0, 0, 0), (4, 1, 3), id="avx2-4-blocks-14x14"),
        pytest.param(HSW, (1, 19, 7, 7), 32, 1, (1, 1), (0, 0, 0, 0), (4, 1, 3), id="avx2-4-blocks-7x7"),
        pytest.param(HSW, (1, 11, 28, 28), 32, 3, (2, 2), (1, 1, 1, 1), (4, 1, 3),
                     id="avx2-4-blocks-3x3-s2"),
        pytest.param(HSW, (1, 21, 14, 14), 16, 1, (1, 1), (0, 0, 0, 0), (1, 1, 14), id="avx2-2-blocks-14x14"),
        pytest.param(HSW, (1, 19, 7, 7), 48, 1, (1, 1), (0, 0, 0, 0), (1, 1, 7), id="avx2-6-blocks-7x7"),
        pytest.param(HSW, (1, 13, 28, 28), 32, 1, (1, 1), (0, 0, 0, 0), (2, 1, 4), id="avx2-28x28"),
        pytest.param("llvm -mcpu=skylake-avx512", (1, 21, 14, 14), 32, 1, (1, 1), (0, 0, 0, 0), (2, 1, 7),
                     id="avx512-14x14"),
    ],
)
def test_even_channel_block_defaults_match_float64(rng, target, xs, m, ks, strides, pads, expect):
    """An even number of output blocks: two blocks x a dividing run of columns where it fits the
    registers; on a 16-register target (AVX2) a pair of blocks holds a broadcast per column too,
    so at 14 and 7 columns (no pair fits a dividing run) four blocks take 3 columns (a tail
    column or two), else one block takes all the columns. The result matches float64 (input
    channels no block divides)."""
    _skip_unless_runnable(target)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((m, xs[1], ks, ks)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    got, point = _dense(x, w, b, strides, pads, target)
    assert (point["tile_oc"], point["tile_oh"], point["tile_ow"]) == expect
    np.testing.assert_allclose(got, conv2d_ref(x, w, b, strides, pads), **TOL)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "knobs",
    [
        pytest.param({"tile_oc": 1, "tile_oh": 2, "tile_ow": 14}, id="rows-2x14"),
        pytest.param({"tile_oc": 3, "tile_oh": 1, "tile_ow": 7}, id="3x7"),
        pytest.param({"tile_oc": 5, "tile_oh": 1, "tile_ow": 4}, id="5x4"),
        pytest.param({"tile_oc": 7, "tile_oh": 1, "tile_ow": 3}, id="7x3"),
        pytest.param({"tile_oc": 1, "tile_oh": 3, "tile_ow": 7}, id="rows-3x7"),
        pytest.param({"tile_oc": 3, "tile_oh": 1, "tile_ow": 3}, id="3x3-fits-avx2"),
        pytest.param({"tile_oc": 1, "tile_oh": 2, "tile_ow": 5}, id="rows-2x5-fits-avx2"),
        pytest.param({"tile_oc": 5, "tile_oh": 1, "tile_ow": 1}, id="5x1-fits-avx2"),
    ],
)
def test_register_blocks_no_extent_divides_match_float64(rng, target, knobs):
    """Register blocks of several channel blocks or rows where neither the channel blocks (5 or
    6 of them), the rows (9) nor the columns (17) divide by the block: the tails compute the
    same as float64. 3x3, stride 1, asymmetric padding. Points too large for a target's
    registers are skipped (the space refuses them; checked by the knob-space tests)."""
    from ember.errors import InvalidConfig

    _skip_unless_runnable(target)
    lanes = Target(target).vector_lanes(32)
    m = 5 * lanes - 3
    x = rng.standard_normal((1, 2 * lanes + 3, 9, 17)).astype(np.float32)
    w = rng.standard_normal((m, x.shape[1], 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    try:
        got, _ = _dense(x, w, b, (1, 1), (1, 0, 1, 2), target, knobs)
    except InvalidConfig:
        pytest.skip(f"{knobs} does not fit {target}'s vector registers")
    np.testing.assert_allclose(got, conv2d_ref(x, w, b, (1, 1), (1, 0, 1, 2)), **TOL)


# -- the blocked max pool -----------------------------------------------------------------------------------
def _maxpool_ref(x: np.ndarray, k, strides, pads, dil, ceil_mode: int = 0) -> np.ndarray:
    """ONNX MaxPool (NCHW, pads (t, l, b, r)) in float64 with -inf padding, ceil_mode windows
    clipped as ONNX Runtime clips them (a window may not start in the right padding)."""
    n, c, h, w = x.shape
    outs = []
    for d, size in enumerate((h, w)):
        span = size + pads[d] + pads[d + 2] - ((k[d] - 1) * dil[d] + 1)
        o = (-(-span // strides[d]) if ceil_mode else span // strides[d]) + 1
        if ceil_mode and (o - 1) * strides[d] >= size + pads[d]:
            o -= 1
        outs.append(o)
    big = 4 * max(k) * max(dil) + max(strides) * max(outs)
    xp = np.full((n, c, h + pads[0] + big, w + pads[1] + big), -np.inf)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x
    ref = np.full((n, c, outs[0], outs[1]), -np.inf)
    for a in range(k[0]):
        for b in range(k[1]):
            r0, c0 = a * dil[0], b * dil[1]
            win = xp[:, :, r0: r0 + (outs[0] - 1) * strides[0] + 1: strides[0],
                     c0: c0 + (outs[1] - 1) * strides[1] + 1: strides[1]]
            ref = np.fmax(ref, win) if not np.isnan(x).any() else np.where(np.isnan(win) | np.isnan(ref), np.nan,
                                                                          np.maximum(ref, win))
    return ref


def _maxpool(x: np.ndarray, attrs: dict, target: str) -> np.ndarray:
    from ember.ops.conv_nchwc import MAXPOOL_NCHWC

    lanes = Target(target).vector_lanes(32)
    got = _run(MAXPOOL_NCHWC, [_block(x, lanes)], attrs, target)
    c = x.shape[1]
    assert not np.any(_unblock(got, got.shape[1] * lanes)[:, c:])  # zero padding channels stay zero
    return _unblock(got, c)


# (N, C, H, W), kernel, strides, pads, dilations, ceil_mode
MAXPOOLS = [
    pytest.param((1, 19, 23, 21), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0, id="3x3-s2-resnet"),
    pytest.param((2, 21, 12, 11), (3, 3), (2, 2), (1, 0, 0, 1), (1, 1), 1, id="ceil-asym-batch2"),
    pytest.param((1, 13, 9, 14), (2, 3), (1, 2), (0, 1, 1, 2), (1, 1), 0, id="rect-strides"),
    pytest.param((1, 17, 11, 13), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 0, id="dilated-select-path"),
    pytest.param((1, 5, 7, 9), (5, 5), (3, 3), (4, 4, 4, 4), (1, 1), 1, id="wide-pads-ceil"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xs, k, strides, pads, dil, ceil", MAXPOOLS)
def test_blocked_maxpool_matches_float64(rng, target, xs, k, strides, pads, dil, ceil):
    _skip_unless_runnable(target)
    x = rng.standard_normal(xs).astype(np.float32)
    attrs = {"kernel_shape": list(k), "strides": list(strides), "pads": list(pads), "dilations": list(dil),
             "ceil_mode": ceil}
    np.testing.assert_array_equal(_maxpool(x, attrs, target), _maxpool_ref(x, k, strides, pads, dil, ceil))


def test_blocked_maxpool_same_upper_and_specials(rng):
    """``auto_pad=SAME_UPPER``, and infinities and NaNs on the border: a padded tap never wins
    and never hides a NaN (the clamped tap is one of the window's own)."""
    x = _border_specials(rng, (1, 20, 10, 13))
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}
    got = _maxpool(x, attrs, "llvm")
    ref = _maxpool_ref(x, (3, 3), (2, 2), (0, 1, 1, 1), (1, 1))  # SAME_UPPER: 10 -> 5 (pads 0, 1), 13 -> 7 (1, 1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    fin = ~np.isnan(ref)
    np.testing.assert_array_equal(got[fin], ref[fin])


def test_blocked_maxpool_refuses_indices_and_is_compile_checked_for_aarch64():
    from ember.errors import EmberError
    from ember.ops.conv_nchwc import MAXPOOL_NCHWC

    strategy = CPUStrategy("llvm")
    x = te.placeholder((1, 2, 9, 9, 16), "float32", name="x")
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "_outputs": ["y", "idx"]}
    with pytest.raises(EmberError, match="Indices"):
        call(OpContext(MAXPOOL_NCHWC, attrs, ["x"], {}, 17, "n0", strategy=strategy), [x])
    target = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
    strategy = CPUStrategy(target)
    x = te.placeholder((1, 2, 9, 9, 4), "float32", name="x")
    (out,) = call(OpContext(MAXPOOL_NCHWC, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                            ["x"], {}, 17, "n0", strategy=strategy), [x])
    from ember.backends.cpu.codegen import assembly, compile_cpu
    from ember.lowering import lower

    compiled = compile_cpu([lower(strategy.schedule_group([out]), [x, out], "pool", target=target)], Target(target))
    assert re.search(r"fcmgt\tv\d+\.4s", assembly(compiled.llvm_ir, Target(target)))  # 4-lane vector compares


def test_odd_channel_block_defaults_compile_for_aarch64():
    """NEON has 32 vector registers too: the odd-block defaults (three blocks; one block over
    rows) are legal points of its space and compile to 4-lane FMAs."""
    from ember.backends.cpu.codegen import assembly, compile_cpu
    from ember.lowering import lower

    target = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
    strategy = CPUStrategy(target)
    for mb, hw, expect in ((9, 7, (3, 1, 7)), (7, 14, (1, 2, 14))):
        x = te.placeholder((1, 5, hw, hw, 4), "float32", name="x")
        w = te.placeholder((mb, 5, 1, 1, 4, 4), "float32", name="w")
        (out,) = call(OpContext(CONV_NCHWC, {}, ["x", "w"], {}, 17, "n0", strategy=strategy), [x, w])
        d = strategy.space([out]).default
        assert (d["tile_oc"].val, d["tile_oh"].val, d["tile_ow"].val) == expect
        compiled = compile_cpu([lower(strategy.schedule_group([out]), [x, w, out], "conv", target=target)],
                               Target(target))
        assert re.search(r"fmla\tv\d+\.4s", assembly(compiled.llvm_ir, Target(target)))
