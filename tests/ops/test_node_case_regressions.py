"""Regression tests for operator bugs found by the ONNX node cases, each against a float64 NumPy
reference on fresh random inputs at sizes that divide no tile size, outputs poisoned before the
run:

* float16 sums, matrix products, convolutions and Attention accumulate in float32 and round once
  (they accumulated in float16, rounding every product and partial sum);
* ConvTranspose with ``output_shape`` splits the padding as the spec says (NOTSET like SAME_LOWER);
* SpaceToDepth ``mode="CRD"``; LpNormalization of an all-zero slice is 0 (was NaN);
* Resize ``align_corners`` with a downsampling scale uses the fractional resized length;
* the node-case runner decodes protobuf data sets and binds symbolic input shapes.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ember
from ember.ops.registry import OpError

from .oprun import run_op


def _ulps16(got: np.ndarray, ref64: np.ndarray) -> float:
    """The largest error of a float16 result in units of the float16 spacing at the reference."""
    spacing = np.spacing(np.abs(ref64).astype(np.float16)).astype(np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - ref64) / spacing))


# -- float16 accumulation ---------------------------------------------------------------------------
def test_matmul_float16_accumulates_in_float32(rng) -> None:
    a = rng.random((5, 37, 301)).astype(np.float16)
    b = rng.random((301, 19)).astype(np.float16)
    (got,) = run_op("MatMul", [a, b])
    assert got.dtype == np.float16
    ref = a.astype(np.float64) @ b.astype(np.float64)
    # float32 accumulation rounded once: within one float16 ulp (half-precision accumulation of
    # 301 products drifts by tens of ulps)
    assert _ulps16(got, ref) <= 1.0


def test_gemm_float16_accumulates_in_float32(rng) -> None:
    a = rng.random((203, 13)).astype(np.float16)
    b = rng.random((29, 203)).astype(np.float16)
    c = rng.random((29,)).astype(np.float16)
    (got,) = run_op("Gemm", [a, b, c], {"transA": 1, "transB": 1})
    mm = (a.astype(np.float64).T @ b.astype(np.float64).T).astype(np.float16)  # rounded once, then + C
    ref = mm.astype(np.float64) + c.astype(np.float64)
    assert _ulps16(got, ref) <= 1.0


@pytest.mark.parametrize("axes", [[1], [0, 2]])
def test_reduce_sum_mean_float16(rng, axes) -> None:
    x = rng.random((37, 263, 3)).astype(np.float16)
    (s,) = run_op("ReduceSum", [x, np.array(axes, np.int64)], {"keepdims": 0}, consts={1: np.array(axes, np.int64)})
    (m,) = run_op("ReduceMean", [x, np.array(axes, np.int64)], {"keepdims": 0}, consts={1: np.array(axes, np.int64)})
    x64 = x.astype(np.float64)
    assert _ulps16(s, x64.sum(axis=tuple(axes))) <= 1.0
    assert _ulps16(m, x64.mean(axis=tuple(axes))) <= 1.0


def test_softmax_float16(rng) -> None:
    x = (rng.standard_normal((7, 2053)) * 0.5).astype(np.float16)
    (got,) = run_op("Softmax", [x], {"axis": -1})
    # the float16 difference x - max is the operator's own first step; from there on float64
    d = (x - x.max(-1, keepdims=True)).astype(np.float64)
    e = np.exp(d)
    ref = e / e.sum(-1, keepdims=True)
    # exp, the float32-accumulated sum and the quotient each rounded once to float16: under two
    # ulps (a float16 running sum of 2053 terms near 1000 is off by hundreds of ulps)
    assert _ulps16(got, ref) <= 2.0


def test_conv1d_grouped_float16(rng) -> None:
    x = rng.random((2, 6, 131)).astype(np.float16)
    w = rng.random((6, 3, 41)).astype(np.float16)
    (got,) = run_op("Conv", [x, w], {"group": 2, "pads": [3, 5]})
    x64 = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (3, 5)))
    L = x64.shape[2] - 41 + 1
    ref = np.zeros((2, 6, L))
    for m in range(6):
        g = m // 3
        for c in range(3):
            for k in range(41):
                ref[:, m] += x64[:, g * 3 + c, k : k + L] * w[m, c, k]
    assert _ulps16(got, ref) <= 1.0


def _attention_ref(q, k, v, causal):
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_float16(rng, causal) -> None:
    q = rng.random((2, 3, 13, 24)).astype(np.float16)
    k = rng.random((2, 3, 29, 24)).astype(np.float16)
    v = rng.random((2, 3, 29, 17)).astype(np.float16)
    got = run_op("Attention", [q, k, v], {"is_causal": causal})[0]
    ref = _attention_ref(q, k, v, causal)
    # half-precision inputs of the products (scaled Q and K), scores, probabilities: the spec's
    # float16 intermediates; accumulation in float32 keeps the output within a few ulps
    assert _ulps16(got, ref) <= 4.0


def test_attention_float16_matches_onnx_reference(rng) -> None:
    ref_mod = pytest.importorskip("onnx.reference.ops.op_attention")
    q = rng.random((2, 4, 5, 8)).astype(np.float16)
    k = rng.random((2, 2, 11, 8)).astype(np.float16)
    v = rng.random((2, 2, 11, 8)).astype(np.float16)
    got = run_op("Attention", [q, k, v], {"is_causal": 1})[0]
    want = ref_mod._compute_attention(q, k, v, is_causal=1)[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7)


# -- ConvTranspose output_shape -----------------------------------------------------------------------
def _convt_full(x, w, strides):
    n, c, *sp = x.shape
    _, m, *ks = w.shape
    full = [s * (i - 1) + k for s, i, k in zip(strides, sp, ks)]
    out = np.zeros((n, m, *full))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    for i in range(sp[0]):
        for j in range(sp[1]):
            out[:, :, i * strides[0] : i * strides[0] + ks[0], j * strides[1] : j * strides[1] + ks[1]] += np.einsum(
                "nc,cmab->nmab", x64[:, :, i, j], w64
            )
    return out


@pytest.mark.parametrize("target", [(13, 10), (9, 6), (12, 7)])
def test_conv_transpose_output_shape(rng, target) -> None:
    x = rng.standard_normal((2, 3, 4, 3)).astype(np.float32)
    w = rng.standard_normal((3, 5, 3, 2)).astype(np.float32)
    strides = [3, 2]
    (got,) = run_op("ConvTranspose", [x, w], {"output_shape": list(target), "strides": strides})
    full = _convt_full(x, w, strides)
    ref = np.zeros((2, 5, *target))
    sl_out, sl_full = [slice(None)] * 2, [slice(None)] * 2
    for d in range(2):
        total = full.shape[2 + d] - target[d]
        lo = total - total // 2  # NOTSET: the odd padding at the start; floor division
        src0, dst0 = max(lo, 0), max(-lo, 0)
        ln = min(full.shape[2 + d] - src0, target[d] - dst0)
        sl_full.append(slice(src0, src0 + ln))
        sl_out.append(slice(dst0, dst0 + ln))
    ref[tuple(sl_out)] = full[tuple(sl_full)]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


# -- SpaceToDepth, LpNormalization, Resize -------------------------------------------------------------
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_modes(rng, mode) -> None:
    x = rng.standard_normal((2, 3, 9, 6)).astype(np.float32)
    (got,) = run_op("SpaceToDepth", [x], {"blocksize": 3, "mode": mode})
    r = x.reshape(2, 3, 3, 3, 2, 3)
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    np.testing.assert_array_equal(got, r.transpose(perm).reshape(2, 27, 3, 2))
    # and DepthToSpace CRD inverts SpaceToDepth CRD
    if mode == "CRD":
        (back,) = run_op("DepthToSpace", [got], {"blocksize": 3, "mode": "CRD"})
        np.testing.assert_array_equal(back, x)


def test_space_to_depth_bad_mode() -> None:
    with pytest.raises(OpError, match="SpaceToDepth node 'n0'.*mode"):
        run_op("SpaceToDepth", [np.zeros((1, 1, 4, 4), np.float32)], {"blocksize": 2, "mode": "XYZ"})


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_zero_slice(rng, p) -> None:
    x = rng.standard_normal((5, 7, 3)).astype(np.float32)
    x[:, 2, 1] = 0.0  # an all-zero slice along axis 0
    (got,) = run_op("LpNormalization", [x], {"axis": 0, "p": p})
    x64 = x.astype(np.float64)
    norm = np.abs(x64).sum(0, keepdims=True) if p == 1 else np.sqrt((x64 * x64).sum(0, keepdims=True))
    ref = np.divide(x64, norm, out=np.zeros_like(x64), where=norm != 0)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)
    assert not np.isnan(got).any()


def test_lp_normalization_bad_p() -> None:
    with pytest.raises(OpError, match="LpNormalization node 'n0'.*p=3"):
        run_op("LpNormalization", [np.ones((2, 3), np.float32)], {"p": 3})


def test_resize_align_corners_downsample_by_scale(rng) -> None:
    x = rng.standard_normal((1, 2, 7, 9)).astype(np.float32)
    scales = np.array([1, 1, 0.6, 0.45], np.float32)
    (got,) = run_op(
        "Resize", [x, None, scales], {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
        consts={2: scales}, opset=19,
    )
    out = [int(math.floor(n * float(s))) for n, s in zip(x.shape, scales)]
    assert list(got.shape) == out
    ref = x.astype(np.float64)
    for ax in (2, 3):
        n, lr = x.shape[ax], x.shape[ax] * float(scales[ax])  # the fractional resized length
        c = np.arange(out[ax]) * (n - 1) / (lr - 1)
        lo = np.clip(np.floor(c).astype(int), 0, n - 1)
        hi = np.clip(lo + 1, 0, n - 1)
        t = c - np.floor(c)
        a, b = np.take(ref, lo, axis=ax), np.take(ref, hi, axis=ax)
        shp = [1] * 4
        shp[ax] = -1
        ref = a * (1 - t.reshape(shp)) + b * t.reshape(shp)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


# -- the node-case runner -----------------------------------------------------------------------------
def _node_cases() -> Any:
    sys.path.insert(0, str(Path(__file__).parents[1] / "frontend"))
    try:
        import node_cases
    finally:
        sys.path.pop(0)
    return node_cases


def test_runner_decodes_protobuf_data() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    nc = _node_cases()
    a = np.array([[1.5, -2.25], [np.inf, np.nan]], np.float16)
    got = nc._to_value(numpy_helper.from_array(a))
    assert got.dtype == np.float16 and got.shape == (2, 2)
    np.testing.assert_array_equal(got, a)
    seq = onnx.helper.make_sequence("s", onnx.SequenceProto.TENSOR, [numpy_helper.from_array(a)])
    (elem,) = nc._to_value(seq)
    np.testing.assert_array_equal(elem, a)


def test_runner_binds_symbolic_shapes() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper as h

    nc = _node_cases()
    g = h.make_graph(
        [h.make_node("Relu", ["x"], ["y"])], "g",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 3]), h.make_tensor_value_info("z", T.FLOAT, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 3])],
    )

    class Case:
        model = h.make_model(g)

    xs = [np.zeros((5, 3), np.float32), np.zeros(2, np.float32)]
    assert nc._bound_shapes(Case, ["x", "z"], xs) == {"x": (5, 3)}
    assert onnx is not None


# -- NonZero and Unique (output shapes from the input's value, known at compile time) -------------------
@pytest.mark.parametrize("shp", [(37,), (5, 7, 3)])
def test_nonzero(rng, shp) -> None:
    x = rng.integers(-2, 3, size=shp).astype(np.float32) * (rng.random(shp) < 0.4)
    (got,) = run_op("NonZero", [x], consts={0: x})
    np.testing.assert_array_equal(got, np.array(np.nonzero(x), np.int64))


def _np_unique(x, axis, srt):
    y, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    inv = inv.reshape(-1)
    if not srt:  # order of first occurrence
        order = np.argsort(idx, kind="stable")
        y = np.take(y, order, axis=0 if axis is None else axis)
        idx, cnt = idx[order], cnt[order]
        inv = np.argsort(order)[inv]
    return y, idx, inv, cnt


@pytest.mark.parametrize("axis,srt,dt", [(None, 1, "int32"), (None, 0, "float32"), (1, 1, "float32"),
                                         (-1, 0, "int64"), (0, 1, "int8")])
def test_unique(rng, axis, srt, dt) -> None:
    x = rng.integers(-2, 2, size=(4, 9, 2)).astype(dt)
    if axis is not None:
        # duplicate slices along the axis: repeated (axis 0, -1) or appended copies (axis 1)
        x = np.repeat(x, 2, axis=axis) if axis != 1 else np.concatenate([x, x[:, ::3]], axis=1)
    attrs = {"sorted": srt} if axis is None else {"sorted": srt, "axis": axis}
    got = run_op("Unique", [x], attrs, consts={0: x})
    want = _np_unique(x, axis, srt)
    for g, w, name in zip(got, want, ("Y", "indices", "inverse_indices", "counts")):
        assert g.shape == w.shape, name
        np.testing.assert_array_equal(g, w, err_msg=name)


def test_nonzero_of_graph_input_compiles_per_value(rng) -> None:
    """NonZero on a graph input: the model compiles once per distinct input value (LazyModel)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper as h

    g = h.make_graph([h.make_node("NonZero", ["x"], ["y"])], "nz",
                     [h.make_tensor_value_info("x", T.INT32, [3, 5])], [h.make_tensor_value_info("y", T.INT64, None)])
    model = ember.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]))
    for _ in range(2):
        x = rng.integers(0, 2, size=(3, 5)).astype(np.int32)
        (got,) = model(x)
        np.testing.assert_array_equal(got, np.array(np.nonzero(x), np.int64))


def test_nonzero_scalar_rejected() -> None:
    with pytest.raises(OpError, match="NonZero node 'n0'.*scalar"):
        run_op("NonZero", [np.array(1.0, np.float32)], consts={0: np.array(1.0, np.float32)})


def test_runner_compares_low_precision_floats_like_onnx() -> None:
    """float8 outputs: NaN equals NaN (assert_allclose, as onnx's runner), a wrong value fails."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    nc = _node_cases()

    class Case:
        rtol, atol = 1e-3, 1e-7

    want = np.array([0.5, np.nan, 448], dtype=ml_dtypes.float8_e4m3fn)
    nc._check(want.copy(), want, Case, "output 0")
    with pytest.raises(AssertionError):
        nc._check(np.array([0.5, np.nan, 416], dtype=ml_dtypes.float8_e4m3fn), want, Case, "output 0")


def _shift_ref(x: np.ndarray, y: np.ndarray, left: bool) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    out = np.zeros(np.broadcast(x, y).shape, dtype=x.dtype)
    xb, yb = np.broadcast_arrays(x, y)
    for idx in np.ndindex(out.shape):
        v, s = int(xb[idx]), int(yb[idx])
        if s < 0 or s >= bits:
            out[idx] = -1 if (not left and v < 0) else 0
        elif left:
            out[idx] = np.array((v << s) & ((1 << bits) - 1), dtype=np.uint64).astype(x.dtype)
        else:
            out[idx] = v >> s  # Python's >> on ints is arithmetic (floor)
    return out


@pytest.mark.parametrize("dt", ["int8", "int32", "int64", "uint8", "uint64"])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_signed_and_out_of_range_counts(rng, dt, direction) -> None:
    info = np.iinfo(dt)
    bits = np.dtype(dt).itemsize * 8
    x = rng.integers(info.min, info.max, (7, 9), dtype=dt, endpoint=True)
    x[0, :3] = [info.min, info.max, 0]
    ydt = dt
    lo = -3 if np.dtype(dt).kind == "i" else 0
    y = rng.integers(lo, bits + 3, (1, 9)).astype(ydt)
    y[0, :4] = [0, bits - 1, bits, min(bits + 2, info.max)]
    (got,) = run_op("BitShift", [x, y], {"direction": direction}, opset=28)
    np.testing.assert_array_equal(got, _shift_ref(x, y, direction == "LEFT"))
