"""Operators of training.py, recurrent_state.py, detection.py, linalg.py, ml.py, BitCast, Resize
antialias, MelWeightMatrix and the training modes of Dropout and BatchNormalization, against
NumPy float64 references written here (from the ONNX specifications), on random inputs at sizes
that do not divide tile sizes, with outputs poisoned before the run; bad attributes raise
OpError naming the node."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember
from ember.ops.registry import OpError

from .oprun import run_op

TRAIN = "ai.onnx.preview.training"
ML = "ai.onnx.ml"


def _close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol)


# -- training ---------------------------------------------------------------------------------------------
def _scalars(r: float, t: int) -> tuple[np.ndarray, np.ndarray]:
    return np.array(r, np.float32), np.array(t, np.int64)


@pytest.mark.parametrize("t", [0, 3])
def test_adagrad_two_tensors(rng, t) -> None:
    xs = [rng.standard_normal(s).astype(np.float32) for s in ((3, 7), (11,))]
    gs = [rng.standard_normal(x.shape).astype(np.float32) for x in xs]
    hs = [rng.uniform(0, 2, x.shape).astype(np.float32) for x in xs]
    r, tt = _scalars(0.1, t)
    attrs = {"decay_factor": 0.3, "epsilon": 1e-5, "norm_coefficient": 0.01}
    got = run_op(f"{TRAIN}.Adagrad", [r, tt, *xs, *gs, *hs], attrs)
    for k in range(2):
        x, g, h = (a[k].astype(np.float64) for a in (xs, gs, hs))
        rr = 0.1 / (1 + t * 0.3)
        gr = 0.01 * x + g
        hn = h + gr * gr
        _close(got[k], x - rr * gr / (np.sqrt(hn) + 1e-5))
        _close(got[2 + k], hn)


@pytest.mark.parametrize("t", [0, 5])
def test_adam(rng, t) -> None:
    x, g, v = (rng.standard_normal((5, 9)) for _ in range(3))
    h = rng.uniform(0, 1, (5, 9))
    r, tt = np.array(0.05), np.array(t, np.int64)
    a, b, nc, ncp, eps = 0.85, 0.95, 0.02, 0.1, 1e-4
    attrs = {"alpha": a, "beta": b, "norm_coefficient": nc, "norm_coefficient_post": ncp, "epsilon": eps}
    xn, vn, hn = run_op(f"{TRAIN}.Adam", [r, tt, x, g, v, h], attrs)
    gr = nc * x + g
    v2 = a * v + (1 - a) * gr
    h2 = b * h + (1 - b) * gr * gr
    radj = 0.05 * math.sqrt(1 - b**t) / (1 - a**t) if t > 0 else 0.05
    _close(xn, (1 - ncp) * (x - radj * v2 / (np.sqrt(h2) + eps)), 1e-12, 1e-12)
    _close(vn, v2, 1e-12, 1e-12)
    _close(hn, h2, 1e-12, 1e-12)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("t", [0, 2])
def test_momentum(rng, mode, t) -> None:
    x, g, v = (rng.standard_normal((13,)).astype(np.float32) for _ in range(3))
    r, tt = _scalars(0.2, t)
    attrs = {"alpha": 0.9, "beta": 0.4, "norm_coefficient": 0.05, "mode": mode.encode()}
    xn, vn = run_op(f"{TRAIN}.Momentum", [r, tt, x, g, v], attrs)
    x64, g64, v64 = (a.astype(np.float64) for a in (x, g, v))
    gr = 0.05 * x64 + g64
    v2 = 0.9 * v64 + (0.4 if t > 0 else 1.0) * gr
    want = x64 - 0.2 * v2 if mode == "standard" else x64 - 0.2 * (gr + 0.9 * v2)
    _close(xn, want)
    _close(vn, v2)


def test_training_ops_reject_bad_attributes() -> None:
    r, t = _scalars(0.1, 1)
    x = np.zeros(3, np.float32)
    with pytest.raises(OpError, match="Momentum node 'n0'.*mode"):
        run_op(f"{TRAIN}.Momentum", [r, t, x, x, x], {"alpha": 0.9, "beta": 1.0, "norm_coefficient": 0.0, "mode": b"x"})
    with pytest.raises(OpError, match="Adagrad node 'n0'.*inputs"):
        run_op(f"{TRAIN}.Adagrad", [r, t, x, x], {})
    with pytest.raises(OpError, match="float"):
        run_op(f"{TRAIN}.Adagrad", [r, t, *(np.zeros(3, np.int32),) * 3], {})


# -- LinearAttention / CausalConvWithState ------------------------------------------------------------
def _linear_attention_ref(q, k, v, past, decay, beta, hq, hkv, rule, scale):
    b, t, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    q4 = q.reshape(b, t, hq, dk)
    k4 = k.reshape(b, t, hkv, dk)
    v4 = v.reshape(b, t, hkv, dv)
    s = past.copy() if past is not None else np.zeros((b, hkv, dk, dv))
    out = np.zeros((b, t, hq, dv))
    for i in range(t):
        if rule in ("gated", "gated_delta"):
            g = decay[:, i]
            g = g.reshape(b, hkv, 1) if g.shape[-1] == hkv else g.reshape(b, hkv, dk)
            s = s * np.exp(g)[..., None]
        vt = v4[:, i]
        if rule in ("delta", "gated_delta"):
            bt = beta[:, i].reshape(b, -1, 1)
            vt = bt * (vt - np.einsum("bhdm,bhd->bhm", s, k4[:, i]))
        s = s + k4[:, i][..., None] * vt[..., None, :]
        for h in range(hq):
            out[:, i, h] = scale * np.einsum("bd,bdm->bm", q4[:, i, h], s[:, h // (hq // hkv)])
    return out.reshape(b, t, hq * dv), s


@pytest.mark.parametrize(
    "rule,hq,hkv,per_dim,beta_one",
    [
        ("linear", 3, 3, False, False),
        ("gated", 4, 2, True, False),
        ("delta", 2, 2, False, True),
        ("gated_delta", 6, 3, False, False),
    ],
)
def test_linear_attention(rng, rule, hq, hkv, per_dim, beta_one) -> None:
    B, T, dk, dv = 2, 5, 3, 7
    q = rng.standard_normal((B, T, hq * dk))
    k = rng.standard_normal((B, T, hkv * dk)) * 0.5
    v = rng.standard_normal((B, T, hkv * dv))
    past = rng.standard_normal((B, hkv, dk, dv))
    decay = -rng.uniform(0, 1, (B, T, hkv * dk if per_dim else hkv)) if "gated" in rule else None
    beta = rng.uniform(0, 1, (B, T, 1 if beta_one else hkv)) if "delta" in rule else None
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule.encode()}
    out, state = run_op("LinearAttention", [q, k, v, past, decay, beta], attrs)
    want_o, want_s = _linear_attention_ref(q, k, v, past, decay, beta, hq, hkv, rule, 1 / math.sqrt(dk))
    _close(out, want_o, 1e-10, 1e-10)
    _close(state, want_s, 1e-10, 1e-10)


def test_linear_attention_rejects_bad_attributes(rng) -> None:
    q = np.zeros((1, 2, 6), np.float32)
    with pytest.raises(OpError, match="LinearAttention node 'n0'.*multiple"):
        run_op("LinearAttention", [q, q, q], {"q_num_heads": 3, "kv_num_heads": 2, "update_rule": b"linear"})
    with pytest.raises(OpError, match="requires the decay"):
        run_op("LinearAttention", [q, q, q], {"q_num_heads": 2, "kv_num_heads": 2, "update_rule": b"gated"})
    with pytest.raises(OpError, match="update_rule"):
        run_op("LinearAttention", [q, q, q], {"q_num_heads": 2, "kv_num_heads": 2, "update_rule": b"fast"})


@pytest.mark.parametrize(
    "K,with_past,bias,act", [(4, True, True, "silu"), (3, False, False, "none"), (1, False, True, "swish")]
)
def test_causal_conv_with_state(rng, K, with_past, bias, act) -> None:
    B, C, L = 2, 5, 3
    x = rng.standard_normal((B, C, L)).astype(np.float32)
    w = rng.standard_normal((C, 1, K)).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32) if bias else None
    past = rng.standard_normal((B, C, K - 1)).astype(np.float32) if with_past else None
    out, state = run_op("CausalConvWithState", [x, w, b, past], {"activation": act.encode()})
    pad = past.astype(np.float64) if past is not None else np.zeros((B, C, K - 1))
    p = np.concatenate([pad, x.astype(np.float64)], axis=2)
    want = np.zeros((B, C, L))
    for j in range(K):
        want += w[None, :, 0, j, None] * p[:, :, j : j + L]
    if b is not None:
        want += b[None, :, None]
    if act != "none":
        want = want / (1 + np.exp(-want))
    _close(out, want)
    _close(state, p[:, :, L:])


def test_causal_conv_rejects_bad_attributes() -> None:
    x = np.zeros((1, 2, 3), np.float32)
    with pytest.raises(OpError, match="CausalConvWithState node 'n0'.*activation"):
        run_op("CausalConvWithState", [x, np.zeros((2, 1, 2), np.float32)], {"activation": b"relu"})
    with pytest.raises(OpError, match="weight"):
        run_op("CausalConvWithState", [x, np.zeros((3, 1, 2), np.float32)], {})


# -- BitCast --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "src,dst,code",
    [
        ("float32", "int32", 6),
        ("int32", "float32", 1),
        ("float64", "uint64", 13),
        ("uint16", "int16", 5),
        ("float16", "uint16", 4),
        ("int8", "uint8", 2),
        ("bool", "uint8", 2),
    ],
)
def test_bitcast(rng, src, dst, code) -> None:
    if src == "bool":
        x = rng.integers(0, 2, (3, 7)).astype(bool)
    elif np.dtype(src).kind == "f":
        x = rng.standard_normal((3, 7)).astype(src)
        x.flat[:3] = [np.inf, -0.0, np.nan]
    else:
        info = np.iinfo(src)
        x = rng.integers(info.min, info.max, (3, 7), dtype=src, endpoint=True)
    (got,) = run_op("BitCast", [x], {"to": code})
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8))


def test_bitcast_rejects_other_width() -> None:
    with pytest.raises(OpError, match="BitCast node 'n0'.*width"):
        run_op("BitCast", [np.zeros(3, np.float32)], {"to": 11})


# -- Resize antialias ------------------------------------------------------------------------------------
def _aa_weights(n_in: int, n_out: int, mode: str, a: float = -0.75) -> np.ndarray:
    """The (n_out, n_in) antialiased interpolation matrix of one axis (half_pixel)."""
    scale = n_out / n_in
    s = min(scale, 1.0)
    support = 1.0 if mode == "linear" else 2.0
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        c = (o + 0.5) / scale - 0.5
        lo = math.floor(c)
        start = math.floor(-support / s) + 1
        taps = range(lo + start, lo + 2 - start)
        ws = []
        for j in taps:
            d = abs((j - c) * s)
            if mode == "linear":
                ws.append(max(0.0, 1 - d))
            else:
                ws.append(
                    (a + 2) * d**3 - (a + 3) * d**2 + 1
                    if d <= 1
                    else (a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a if d < 2 else 0.0)
                )
        ws = np.array(ws) / sum(ws)
        for j, wv in zip(taps, ws):
            m[o, min(max(j, 0), n_in - 1)] += wv
    return m


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias(rng, mode) -> None:
    x = rng.standard_normal((1, 2, 13, 11)).astype(np.float32)
    sizes = np.array([1, 2, 5, 7], np.int64)
    (got,) = run_op(
        "Resize", [x, None, None, sizes], {"mode": mode.encode(), "antialias": 1}, consts={3: sizes}, opset=19
    )
    mh, mw = _aa_weights(13, 5, mode), _aa_weights(11, 7, mode)
    want = np.einsum("oh,nchw,pw->ncop", mh, x.astype(np.float64), mw)
    _close(got, want, 1e-5, 1e-5)


def test_resize_antialias_rejects_nearest() -> None:
    x = np.zeros((1, 1, 4, 4), np.float32)
    sc = np.array([1, 1, 0.5, 0.5], np.float32)
    with pytest.raises(OpError, match="Resize node 'n0'.*antialias"):
        run_op("Resize", [x, None, sc], {"mode": b"nearest", "antialias": 1}, consts={2: sc}, opset=19)


# -- RoiAlign / DeformConv --------------------------------------------------------------------------------
def _bilinear_roi(img, y, x):
    H, W = img.shape
    if y < -1.0 or y > H or x < -1.0 or x > W:
        return np.zeros(4), [(0, 0)] * 4
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    if yl >= H - 1:
        yh = yl = H - 1
        y = float(yl)
    else:
        yh = yl + 1
    if xl >= W - 1:
        xh = xl = W - 1
        x = float(xl)
    else:
        xh = xl + 1
    ly, lx = y - yl, x - xl
    w = np.array([(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx])
    return w, [(yl, xl), (yl, xh), (yh, xl), (yh, xh)]


def _roi_align_ref(X, rois, bidx, oh, ow, sr, scale, half, mode):
    R, C = len(rois), X.shape[1]
    out = np.zeros((R, C, oh, ow))
    off = 0.5 if half else 0.0
    for r in range(R):
        x0, y0, x1, y1 = rois[r] * scale - off
        rw, rh = x1 - x0, y1 - y0
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / oh, rw / ow
        gh = sr if sr > 0 else int(math.ceil(rh / oh))
        gw = sr if sr > 0 else int(math.ceil(rw / ow))
        for c in range(C):
            img = X[bidx[r], c]
            for ph in range(oh):
                for pw in range(ow):
                    vals = []
                    for iy in range(gh):
                        for ix in range(gw):
                            y = y0 + ph * bh + (iy + 0.5) * bh / gh
                            x = x0 + pw * bw + (ix + 0.5) * bw / gw
                            w, pos = _bilinear_roi(img, y, x)
                            terms = [wk * img[p] for wk, p in zip(w, pos)]
                            vals.append(sum(terms) if mode == "avg" else max(terms))
                    out[r, c, ph, pw] = sum(vals) / max(gh * gw, 1) if mode == "avg" else max(vals)
    return out


@pytest.mark.parametrize("mode,half,sr", [("avg", True, 2), ("max", False, 3), ("avg", False, 0)])
def test_roi_align(rng, mode, half, sr) -> None:
    X = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    rois = np.array([[0.5, 1.0, 7.2, 8.1], [2.0, 0.3, 10.5, 5.9], [-2.0, -1.5, 3.0, 12.0]], np.float32)
    bidx = np.array([1, 0, 1], np.int64)
    attrs = {
        "mode": mode.encode(),
        "output_height": 3,
        "output_width": 4,
        "sampling_ratio": sr,
        "spatial_scale": 0.9,
        "coordinate_transformation_mode": b"half_pixel" if half else b"output_half_pixel",
    }
    consts = {1: rois} if sr == 0 else None
    (got,) = run_op("RoiAlign", [X, rois, bidx], attrs, consts=consts)
    want = _roi_align_ref(X.astype(np.float64), rois.astype(np.float64), bidx, 3, 4, sr, 0.9, half, mode)
    _close(got, want, 1e-5, 1e-5)


def test_roi_align_rejects_bad_mode() -> None:
    X = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(OpError, match="RoiAlign node 'n0'.*mode"):
        run_op(
            "RoiAlign", [X, np.zeros((1, 4), np.float32), np.zeros(1, np.int64)], {"mode": b"sum", "sampling_ratio": 1}
        )


def _deform_ref(X, W, off, B, mask, stride, pad, dil, group, og):
    N, C, H, Wd = X.shape
    OC, CG, KH, KW = W.shape
    OH, OW = off.shape[2:]
    off = off.reshape(N, og, KH, KW, 2, OH, OW)
    mask = np.ones((N, og, KH, KW, OH, OW)) if mask is None else mask.reshape(N, og, KH, KW, OH, OW)
    out = np.zeros((N, OC, OH, OW))

    def sample(img, y, x):
        y0, x0 = math.floor(y), math.floor(x)
        v = 0.0
        for dy in (0, 1):
            for dx in (0, 1):
                yy, xx = y0 + dy, x0 + dx
                if 0 <= yy < H and 0 <= xx < Wd:
                    v += (y - y0 if dy else 1 - (y - y0)) * (x - x0 if dx else 1 - (x - x0)) * img[yy, xx]
        return v

    for n in range(N):
        for oc in range(OC):
            g = oc // (OC // group)
            for ci in range(CG):
                c = g * CG + ci
                gg = c // (C // og)
                for i in range(KH):
                    for j in range(KW):
                        for oy in range(OH):
                            for ox in range(OW):
                                y = oy * stride[0] - pad[0] + i * dil[0] + off[n, gg, i, j, 0, oy, ox]
                                x = ox * stride[1] - pad[1] + j * dil[1] + off[n, gg, i, j, 1, oy, ox]
                                out[n, oc, oy, ox] += (
                                    W[oc, ci, i, j] * mask[n, gg, i, j, oy, ox] * sample(X[n, c], y, x)
                                )
    if B is not None:
        out += B[None, :, None, None]
    return out


@pytest.mark.parametrize("group,og,with_mask", [(1, 1, False), (2, 2, True), (1, 3, True)])
def test_deform_conv(rng, group, og, with_mask) -> None:
    N, C, H, W, OC, K = 2, 6, 7, 5, 4, (3, 2)
    stride, pad, dil = (2, 1), (1, 0, 1, 1), (1, 2)
    OH = (H + pad[0] + pad[2] - ((K[0] - 1) * dil[0] + 1)) // stride[0] + 1
    OW = (W + pad[1] + pad[3] - ((K[1] - 1) * dil[1] + 1)) // stride[1] + 1
    X = rng.standard_normal((N, C, H, W))
    Wt = rng.standard_normal((OC, C // group, *K))
    off = rng.uniform(-1.5, 1.5, (N, og * K[0] * K[1] * 2, OH, OW))
    B = rng.standard_normal(OC)
    mask = rng.uniform(0, 1, (N, og * K[0] * K[1], OH, OW)) if with_mask else None
    attrs = {"strides": list(stride), "pads": list(pad), "dilations": list(dil), "group": group, "offset_group": og}
    (got,) = run_op("DeformConv", [X, Wt, off, B, mask], attrs)
    want = _deform_ref(X, Wt, off, B, mask, stride, pad, dil, group, og)
    _close(got, want, 1e-10, 1e-10)


def test_deform_conv_rejects_bad_groups() -> None:
    X = np.zeros((1, 3, 4, 4), np.float32)
    with pytest.raises(OpError, match="DeformConv node 'n0'.*divide"):
        run_op(
            "DeformConv",
            [X, np.zeros((2, 3, 2, 2), np.float32), np.zeros((1, 16, 3, 3), np.float32)],
            {"offset_group": 2},
        )


# -- Det, MelWeightMatrix ----------------------------------------------------------------------------
@pytest.mark.parametrize("shp", [(5, 5), (2, 3, 7, 7), (1, 1), (4, 3, 3)])
def test_det(rng, shp) -> None:
    x = rng.standard_normal(shp)
    if len(shp) == 3:
        x[1, :, 0] = 0.0  # a zero column: det 0
        x[2, 0] = x[2, 2]  # two equal rows
    (got,) = run_op("Det", [x])
    _close(got, np.linalg.det(x), 1e-9, 1e-9)


def test_det_rejects_non_square() -> None:
    with pytest.raises(OpError, match="Det node 'n0'.*M, M"):
        run_op("Det", [np.zeros((3, 4), np.float32)])


def _mel_ref(nmel, dftl, sr, lo, hi):
    fb = np.arange(nmel + 2) * ((2595 * np.log10(1 + hi / 700) - 2595 * np.log10(1 + lo / 700)) / (nmel + 2))
    fb = fb + 2595 * np.log10(1 + lo / 700)
    fb = (((dftl + 1) * 700 * (10 ** (fb / 2595) - 1)) // sr).astype(int)
    out = np.zeros((dftl // 2 + 1, nmel))
    for i in range(nmel):
        lo_, c, h = fb[i], fb[i + 1], fb[i + 2]
        if c == lo_:
            out[c, i] = 1
        else:
            for j in range(lo_, c + 1):
                out[j, i] = (j - lo_) / (c - lo_)
        for j in range(c, h):
            out[j, i] = (h - j) / (h - c)
    return out


def test_mel_weight_matrix() -> None:
    nmel, dftl = np.array(9, np.int64), np.array(61, np.int64)
    sr, lo, hi = np.array(8000, np.int64), np.array(30.0, np.float32), np.array(3700.0, np.float32)
    (got,) = run_op("MelWeightMatrix", [nmel, dftl, sr, lo, hi], {}, consts={0: nmel, 1: dftl})
    _close(got, _mel_ref(9, 61, 8000, 30.0, 3700.0), 1e-6, 1e-6)


# -- ai.onnx.ml --------------------------------------------------------------------------------------------
def test_binarizer_scaler_normalizer(rng) -> None:
    x = rng.standard_normal((5, 7)).astype(np.float32)
    (got,) = run_op(f"{ML}.Binarizer", [x], {"threshold": 0.3})
    np.testing.assert_array_equal(got, (x > np.float32(0.3)).astype(np.float32))
    off, sc = list(rng.standard_normal(7)), list(rng.standard_normal(7))
    (got,) = run_op(f"{ML}.Scaler", [x], {"offset": off, "scale": sc})
    _close(got, (x.astype(np.float64) - off) * sc)
    xi = rng.integers(-5, 5, (5, 7)).astype(np.int64)
    for norm in ("MAX", "L1", "L2"):
        (got,) = run_op(f"{ML}.Normalizer", [xi], {"norm": norm.encode()})
        xf = xi.astype(np.float64)
        d = {"MAX": np.abs(xf).max(1), "L1": np.abs(xf).sum(1), "L2": np.sqrt((xf * xf).sum(1))}[norm]
        _close(got, xf / np.maximum(d, 1e-30)[:, None])
    with pytest.raises(OpError, match="Normalizer node 'n0'.*norm"):
        run_op(f"{ML}.Normalizer", [x], {"norm": b"L3"})


def test_array_feature_extractor(rng) -> None:
    x = rng.standard_normal((2, 3, 6))
    idx = np.array([[5, 0, -1, 2]], np.int64)
    (got,) = run_op(f"{ML}.ArrayFeatureExtractor", [x, idx])
    np.testing.assert_array_equal(got, x[..., [5, 0, 5, 2]])
    (got,) = run_op(f"{ML}.ArrayFeatureExtractor", [x[0, 0], np.array([3, 1], np.int64)])
    np.testing.assert_array_equal(got, x[0, 0][[3, 1]].reshape(1, 2))


def test_one_hot_encoder_imputer_label_encoder(rng) -> None:
    x = rng.integers(0, 6, (4, 3)).astype(np.int64)
    cats = [4, 1, 5]
    (got,) = run_op(f"{ML}.OneHotEncoder", [x], {"cats_int64s": cats})
    np.testing.assert_array_equal(got, (x[..., None] == np.array(cats)).astype(np.float32))
    xf = rng.standard_normal((5, 3)).astype(np.float32)
    xf[1, 2] = xf[3, 0] = np.nan
    (got,) = run_op(f"{ML}.Imputer", [xf], {"imputed_value_floats": [1.0, 2.0, 3.0], "replaced_value_float": math.nan})
    want = np.where(np.isnan(xf), np.array([1.0, 2.0, 3.0], np.float32), xf)
    np.testing.assert_array_equal(got, want)
    (got,) = run_op(
        f"{ML}.LabelEncoder", [x], {"keys_int64s": [1, 3, 1], "values_floats": [0.5, 7.0, 2.5], "default_float": 9.0}
    )
    table = {1: 2.5, 3: 7.0}
    np.testing.assert_array_equal(got, np.vectorize(lambda v: table.get(v, 9.0))(x).astype(np.float32))
    with pytest.raises(OpError, match="LabelEncoder node 'n0'.*string"):
        run_op(f"{ML}.LabelEncoder", [x], {"keys_strings": [b"a"], "values_int64s": [1]})
    with pytest.raises(OpError, match="OneHotEncoder node 'n0'.*string"):
        run_op(f"{ML}.OneHotEncoder", [x], {"cats_strings": [b"a"]})


@pytest.mark.parametrize("agg,post", [(1, 0), (0, 2), (2, 0), (3, 1)])
def test_tree_ensemble(rng, agg, post) -> None:
    # tree 0: node0 (x0 <= 0.1) ? node1 : leaf2; node1 (x1 > -0.3) ? leaf0 : leaf1
    # tree 1: node2 (x2 in {1, 3}) ? leaf3 : node3; node3 (x0 == NaN tracks true, x0 < 0.5) ? leaf4 : leaf5
    attrs = {
        "nodes_featureids": [0, 1, 2, 0],
        "nodes_modes": np.array([0, 3, 6, 1], np.uint8),
        "nodes_splits": np.array([0.1, -0.3, 0.0, 0.5], np.float32),
        "nodes_truenodeids": [1, 0, 3, 4],
        "nodes_trueleafs": [0, 1, 1, 1],
        "nodes_falsenodeids": [2, 1, 3, 5],
        "nodes_falseleafs": [1, 1, 0, 1],
        "nodes_missing_value_tracks_true": [0, 0, 0, 1],
        "membership_values": np.array([1.0, 3.0, np.nan], np.float32),
        "leaf_weights": np.array([1.5, -2.0, 0.25, 4.0, -1.0, 3.0], np.float32),
        "leaf_targetids": [0, 1, 0, 1, 2, 0],
        "tree_roots": [0, 2],
        "n_targets": 3,
        "aggregate_function": agg,
        "post_transform": post,
    }
    x = rng.standard_normal((9, 3)).astype(np.float32)
    x[:, 2] = rng.integers(0, 4, 9)
    x[4, 0] = np.nan

    def leaves(row):
        a = (0 if row[1] > -0.3 else 1) if row[0] <= 0.1 else 2
        b = 3 if row[2] in (1.0, 3.0) else (4 if (np.isnan(row[0]) or row[0] < 0.5) else 5)
        return a, b

    lw, lt = attrs["leaf_weights"].astype(np.float64), attrs["leaf_targetids"]
    want = np.zeros((9, 3))
    for n in range(9):
        per = [[] for _ in range(3)]
        for leaf in leaves(x[n]):
            per[lt[leaf]].append(lw[leaf])
        for t in range(3):
            if agg in (0, 1):
                want[n, t] = sum(per[t]) / (2 if agg == 0 else 1)
            elif per[t]:
                want[n, t] = min(per[t]) if agg == 2 else max(per[t])
            else:
                big = float(np.finfo(np.float32).max)
                want[n, t] = big if agg == 2 else -big
    if post == 2:
        want = 1 / (1 + np.exp(-want))
    elif post == 1:
        e = np.exp(want - want.max(1, keepdims=True))
        want = e / e.sum(1, keepdims=True)
    (got,) = run_op(f"{ML}.TreeEnsemble", [x], attrs)
    _close(got, want.astype(np.float32).astype(np.float64) if agg in (2, 3) and post == 0 else want)


def test_tree_ensemble_rejects_bad_attributes() -> None:
    attrs = {
        "nodes_featureids": [5],
        "nodes_modes": np.array([0], np.uint8),
        "nodes_splits": np.array([0.0]),
        "nodes_truenodeids": [0],
        "nodes_trueleafs": [1],
        "nodes_falsenodeids": [0],
        "nodes_falseleafs": [1],
        "leaf_weights": np.array([1.0]),
        "leaf_targetids": [0],
        "tree_roots": [0],
    }
    with pytest.raises(OpError, match="TreeEnsemble node 'n0'.*featureids"):
        run_op(f"{ML}.TreeEnsemble", [np.zeros((2, 3), np.float32)], attrs)


# -- Dropout / BatchNormalization training mode, through whole ONNX models ------------------------------------------
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opsets=(("", 18),)):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def test_conv_then_batchnorm_training(rng) -> None:
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    s, b, m, v = (rng.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4))
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (s, "s"), (b, "b"), (m, "m"), (v, "v"))]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization",
            ["c", "s", "b", "m", "v"],
            ["y", "rm", "rv"],
            training_mode=1,
            momentum=0.8,
            epsilon=1e-3,
        ),
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "rm", "rv")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)], outs, inits)
    y, rm, rv = ember.compile(model)(x)
    import torch

    c = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), padding=1).numpy()
    mean, var = c.mean((0, 2, 3)), c.var((0, 2, 3))
    want = (c - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-3) * s[:, None, None] + b[:, None, None]
    _close(y, want, 1e-4, 1e-4)
    _close(rm, m * 0.8 + mean * 0.2, 1e-5, 1e-5)
    _close(rv, v * 0.8 + var * 0.2, 1e-5, 1e-5)


def test_dropout_training_ratio_zero_and_nonzero(rng) -> None:
    x = rng.standard_normal((3, 5)).astype(np.float32)
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "z"])
    ins = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
        helper.make_tensor_value_info("r", TensorProto.FLOAT, ()),
        helper.make_tensor_value_info("t", TensorProto.BOOL, ()),
    ]
    outs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("z", TensorProto.BOOL, None),
    ]
    model = ember.compile(_model([node], ins, outs))
    y, z = model(x, np.array(0.0, np.float32), np.array(True))
    np.testing.assert_array_equal(y, x)
    assert z.all()
    # A non-zero ratio in training mode draws a mask on the host (ember/ops/random.py): every kept
    # element is scaled by 1 / (1 - ratio), every dropped one is zero, and the mask says which.
    y, z = model(x, np.array(0.5, np.float32), np.array(True))
    assert z.dtype == np.bool_ and z.shape == x.shape
    np.testing.assert_allclose(y, np.where(z, x * 2.0, 0.0), rtol=1e-6)


def test_non_default_domains_through_the_frontend(rng) -> None:
    x = rng.standard_normal((4, 3)).astype(np.float32)
    node = helper.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=0.2)
    model = _model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        opsets=(("", 18), (ML, 3)),
    )
    (y,) = ember.compile(model)(x)
    np.testing.assert_array_equal(y, (x > np.float32(0.2)).astype(np.float32))


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_ensemble_regressor_vs_onnx_reference(rng, agg) -> None:
    from onnx.reference import ReferenceEvaluator

    # tree 0: node 0 (x1 <= 0.2) -> node 1 / leaf 2; node 1 (x0 > -0.4) -> leaf 3 / leaf 4
    # tree 1: node 0 (x2 == 1.0, NaN -> true) -> leaf 1 / leaf 2
    attrs = dict(
        nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1],
        nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2],
        nodes_featureids=[1, 0, 0, 0, 0, 2, 0, 0],
        nodes_modes=["BRANCH_LEQ", "BRANCH_GT", "LEAF", "LEAF", "LEAF", "BRANCH_EQ", "LEAF", "LEAF"],
        nodes_values=[0.2, -0.4, 0, 0, 0, 1.0, 0, 0],
        nodes_truenodeids=[1, 3, 0, 0, 0, 1, 0, 0],
        nodes_falsenodeids=[2, 4, 0, 0, 0, 2, 0, 0],
        nodes_missing_value_tracks_true=[0, 0, 0, 0, 0, 1, 0, 0],
        target_treeids=[0, 0, 0, 0, 1, 1, 1],
        target_nodeids=[2, 3, 3, 4, 1, 2, 2],
        target_ids=[0, 0, 1, 1, 0, 1, 1],
        target_weights=[0.5, -1.25, 2.0, 0.75, 3.0, -0.5, 1.5],
        n_targets=2,
        aggregate_function=agg,
        base_values=[0.1, -0.2],
    )
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain=ML, **attrs)
    x = rng.standard_normal((11, 3)).astype(np.float32)
    x[:, 2] = rng.integers(0, 3, 11)
    x[3, 2] = np.nan
    model = _model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        opsets=(("", 18), (ML, 3)),
    )
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = ember.compile(model)(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
