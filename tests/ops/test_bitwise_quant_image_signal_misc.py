"""The operator families of bitwise.py, quant.py, image.py, signal.py and misc.py against NumPy
(float64) or PyTorch float64 references, on fresh random inputs at sizes that do not divide the
tile sizes, with outputs poisoned before the run."""

from __future__ import annotations

import numpy as np
import pytest

from ember.ops.registry import OpError

from .oprun import run_op


# -- bitwise -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ["int8", "uint16", "int32", "uint32", "int64", "uint64"])
def test_bitwise(rng, dt) -> None:
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, size=(3, 5, 7), dtype=dt, endpoint=True)
    b = rng.integers(info.min, info.max, size=(5, 1), dtype=dt, endpoint=True)
    for op, ref in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)):
        (got,) = run_op(op, [a, b])
        np.testing.assert_array_equal(got, ref(a, b), err_msg=op)
    (got,) = run_op("BitwiseNot", [a])
    np.testing.assert_array_equal(got, np.invert(a))


def test_bitwise_rejects_floats() -> None:
    with pytest.raises(OpError, match="BitwiseAnd node 'n0'.*integer"):
        run_op("BitwiseAnd", [np.zeros(3, np.float32), np.zeros(3, np.float32)])


# -- quantization -----------------------------------------------------------------------------------
def _rint_clip(v: np.ndarray, dt: str) -> np.ndarray:
    i = np.iinfo(dt)
    return np.clip(np.rint(v), i.min, i.max).astype(dt)


@pytest.mark.parametrize("dt", ["uint8", "int8", "uint16", "int16"])
def test_quantize_per_axis_and_dequantize(rng, dt) -> None:
    x = (rng.standard_normal((3, 7, 5)) * 300).astype(np.float32)
    scale = rng.uniform(0.5, 3.0, 7).astype(np.float32)
    info = np.iinfo(dt)
    zp = rng.integers(info.min // 4, info.max // 4, 7).astype(dt)
    (got,) = run_op("QuantizeLinear", [x, scale, zp], {"axis": 1})
    # the spec divides in the input's type (float32), then rounds half to even
    want = _rint_clip((x / scale[:, None]).astype(np.float64) + zp[:, None], dt)
    np.testing.assert_array_equal(got, want)
    (deq,) = run_op("DequantizeLinear", [got, scale, zp], {"axis": 1})
    ref = (got.astype(np.float64) - zp[:, None]) * scale[:, None]
    np.testing.assert_allclose(deq, ref, rtol=1e-6)


def test_quantize_blocked(rng) -> None:
    x = rng.standard_normal((5, 11)).astype(np.float32) * 20
    scale = rng.uniform(0.1, 1.0, (5, 3)).astype(np.float32)  # blocks of 4 along axis 1: 4 + 4 + 3
    (got,) = run_op("QuantizeLinear", [x, scale], {"axis": 1, "block_size": 4, "output_dtype": 3})
    full = np.repeat(scale, 4, axis=1)[:, :11]
    np.testing.assert_array_equal(got, _rint_clip(x / full, "int8"))


def test_quantize_rejects_bad_type() -> None:
    with pytest.raises(OpError, match="QuantizeLinear node 'n0'.*not supported"):
        run_op("QuantizeLinear", [np.zeros(3, np.float32), np.ones((), np.float32)], {"output_dtype": 6})


def test_dynamic_quantize(rng) -> None:
    x = rng.standard_normal((7, 13)).astype(np.float32) * 4 + 1
    y, s, z = run_op("DynamicQuantizeLinear", [x])
    mx, mn = max(0.0, float(x.max())), min(0.0, float(x.min()))
    scale = np.float32((mx - mn) / 255)
    zp = np.rint(np.clip(np.float32(0) - np.float32(mn) / scale, 0, 255))
    np.testing.assert_allclose(s, scale, rtol=1e-6)
    assert int(z) == int(zp)
    np.testing.assert_array_equal(y, np.clip(np.rint(x / scale) + zp, 0, 255).astype(np.uint8))


@pytest.mark.parametrize("dt", ["uint8", "int8"])
def test_qlinear_matmul_and_matmul_integer(rng, dt) -> None:
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, (2, 5, 19), dtype=dt, endpoint=True)
    b = rng.integers(info.min, info.max, (19, 7), dtype=dt, endpoint=True)
    azp = np.array(rng.integers(info.min, info.max), dtype=dt)
    bzp = rng.integers(info.min, info.max, 7, dtype=dt)
    (acc,) = run_op("MatMulInteger", [a, b, azp, bzp])
    want = (a.astype(np.int64) - int(azp)) @ (b.astype(np.int64) - bzp.astype(np.int64))
    np.testing.assert_array_equal(acc, want)
    sa, sb, sy = (np.array(v, np.float32) for v in (0.02, 0.03, 0.5))
    yzp = np.array(3, dtype=dt)
    bzp0 = np.array(bzp[0], dtype=dt)
    (got,) = run_op("QLinearMatMul", [a, sa, azp, b, sb, bzp0, sy, yzp])
    acc0 = (a.astype(np.int64) - int(azp)) @ (b.astype(np.int64) - int(bzp0))
    want = _rint_clip(acc0 * np.float64(sa * sb / sy) + 3, dt)
    np.testing.assert_array_equal(got, want)


# -- image --------------------------------------------------------------------------------------------
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_vs_torch(rng, mode, pad, align) -> None:
    if mode == "bicubic" and pad != "zeros":
        pytest.skip("torch pads bicubic taps differently from ONNX outside the zeros mode")
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    g = rng.uniform(-1.3, 1.3, (2, 5, 6, 2)).astype(np.float32)
    (got,) = run_op("GridSample", [x, g], {"mode": mode, "padding_mode": pad, "align_corners": align}, opset=16)
    want = torch.nn.functional.grid_sample(
        torch.from_numpy(x.astype(np.float64)),
        torch.from_numpy(g.astype(np.float64)),
        mode=mode,
        padding_mode=pad,
        align_corners=bool(align),
    ).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_vs_torch(rng, align) -> None:
    theta = rng.standard_normal((3, 2, 3)).astype(np.float32)
    size = np.array([3, 2, 5, 7], np.int64)
    (got,) = run_op("AffineGrid", [theta, size], {"align_corners": align}, consts={1: size}, opset=20)
    want = torch.nn.functional.affine_grid(
        torch.from_numpy(theta.astype(np.float64)), list(size), align_corners=bool(align)
    ).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_col2im_vs_torch_fold(rng) -> None:
    img, blk, dil, pads, strides = [9, 11], [3, 2], [2, 1], [1, 2], [2, 3]
    nb = [(img[d] + 2 * pads[d] - dil[d] * (blk[d] - 1) - 1) // strides[d] + 1 for d in range(2)]
    x = rng.standard_normal((2, 3 * 6, nb[0] * nb[1])).astype(np.float32)
    attrs = {"dilations": dil, "pads": pads + pads, "strides": strides}
    ish, bsh = np.array(img, np.int64), np.array(blk, np.int64)
    (got,) = run_op("Col2Im", [x, ish, bsh], attrs, consts={1: ish, 2: bsh}, opset=18)
    want = torch.nn.functional.fold(
        torch.from_numpy(x.astype(np.float64)), img, blk, dilation=dil, padding=pads, stride=strides
    ).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_max_unpool_vs_torch(rng) -> None:
    x = torch.from_numpy(rng.standard_normal((2, 3, 9, 11)))
    pooled, idx = torch.nn.functional.max_pool2d(x, 3, stride=2, return_indices=True)
    # ONNX indices are flat over the whole tensor; torch's are per (n, c) plane.
    plane = 9 * 11
    base = (np.arange(2)[:, None, None, None] * 3 + np.arange(3)[None, :, None, None]) * plane
    flat = idx.numpy() + base
    (got,) = run_op("MaxUnpool", [pooled.numpy().astype(np.float32), flat], {"kernel_shape": [3, 3], "strides": [2, 2]})
    want = torch.nn.functional.max_unpool2d(pooled, idx, 3, stride=2, output_size=(9, 11)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


# -- signal -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [None, 9, 15])
def test_dft_complex_and_inverse(rng, n) -> None:
    x = rng.standard_normal((2, 11, 3, 2)).astype(np.float32)
    z = x[..., 0].astype(np.float64) + 1j * x[..., 1]
    ins = [x] if n is None else [x, np.array(n, np.int64)]
    consts = {} if n is None else {1: ins[1]}
    (fwd,) = run_op("DFT", ins, {"axis": 1}, consts=consts, opset=17)
    want = np.fft.fft(z, n=n, axis=1)
    np.testing.assert_allclose(fwd[..., 0] + 1j * fwd[..., 1], want, rtol=1e-4, atol=1e-4)
    (inv,) = run_op("DFT", ins, {"axis": 1, "inverse": 1}, consts=consts, opset=17)
    np.testing.assert_allclose(inv[..., 0] + 1j * inv[..., 1], np.fft.ifft(z, n=n, axis=1), rtol=1e-4, atol=1e-5)


def test_dft_rfft_irfft(rng) -> None:
    x = rng.standard_normal((3, 13, 1)).astype(np.float32)
    (half,) = run_op("DFT", [x, None, np.array(-2, np.int64)], {"onesided": 1}, consts={2: np.array(-2)}, opset=20)
    spec = np.fft.rfft(x[..., 0].astype(np.float64), axis=1)
    np.testing.assert_allclose(half[..., 0] + 1j * half[..., 1], spec, rtol=1e-4, atol=1e-4)
    n = np.array(13, np.int64)
    (back,) = run_op("DFT", [half, n], {"onesided": 1, "inverse": 1, "axis": 1}, consts={1: n}, opset=17)
    np.testing.assert_allclose(back[..., 0], x[..., 0], rtol=1e-4, atol=1e-5)


def test_stft_with_window(rng) -> None:
    x = rng.standard_normal((2, 37, 1)).astype(np.float32)
    win = np.hanning(10).astype(np.float32)
    step = np.array(3, np.int64)
    (got,) = run_op("STFT", [x, step, win], {"onesided": 1}, consts={1: step}, opset=17)
    frames = 1 + (37 - 10) // 3
    seg = np.stack([x[:, f * 3 : f * 3 + 10, 0] * win for f in range(frames)], axis=1).astype(np.float64)
    want = np.fft.rfft(seg, axis=-1)
    np.testing.assert_allclose(got[..., 0] + 1j * got[..., 1], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(periodic) -> None:
    size = np.array(11, np.int64)
    n = np.arange(11, dtype=np.float64)
    d = 11 if periodic else 10
    refs = {
        "HannWindow": 0.5 - 0.5 * np.cos(2 * np.pi * n / d),
        "HammingWindow": 25 / 46 - 21 / 46 * np.cos(2 * np.pi * n / d),
        "BlackmanWindow": 0.42 - 0.5 * np.cos(2 * np.pi * n / d) + 0.08 * np.cos(4 * np.pi * n / d),
    }
    for op, want in refs.items():
        (got,) = run_op(op, [size], {"periodic": periodic, "output_datatype": 11}, consts={0: size}, opset=17)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=op)


# -- misc ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_3d(rng, interleaved) -> None:
    b, s, h, d, rot = 2, 5, 3, 10, 6
    x = rng.standard_normal((b, s, h * d)).astype(np.float32)
    cos = rng.standard_normal((7, rot // 2)).astype(np.float32)
    sin = rng.standard_normal((7, rot // 2)).astype(np.float32)
    pos = rng.integers(0, 7, (b, s)).astype(np.int64)
    attrs = {"num_heads": h, "rotary_embedding_dim": rot, "interleaved": interleaved}
    (got,) = run_op("RotaryEmbedding", [x, cos, sin, pos], attrs)
    xr = x.reshape(b, s, h, d).astype(np.float64)
    c, sn = cos[pos][:, :, None, :], sin[pos][:, :, None, :]
    want = xr.copy()
    if interleaved:
        x1, x2 = xr[..., 0:rot:2], xr[..., 1:rot:2]
        want[..., 0:rot:2], want[..., 1:rot:2] = c * x1 - sn * x2, sn * x1 + c * x2
    else:
        x1, x2 = xr[..., : rot // 2], xr[..., rot // 2 : rot]
        want[..., : rot // 2], want[..., rot // 2 : rot] = c * x1 - sn * x2, sn * x1 + c * x2
    np.testing.assert_allclose(got, want.reshape(x.shape), rtol=1e-5, atol=1e-5)


def test_swiglu(rng) -> None:
    a, b = (rng.standard_normal((3, 17)).astype(np.float32) for _ in range(2))
    (got,) = run_op("SwiGLU", [a, b], {"alpha": 1.7})
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(got, a64 / (1 + np.exp(-1.7 * a64)) * b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(rng, mode) -> None:
    past = rng.standard_normal((3, 2, 11, 5)).astype(np.float32)
    upd = rng.standard_normal((3, 2, 4, 5)).astype(np.float32)
    wi = np.array([0, 7, 9] if mode == "circular" else [0, 7, 3], np.int64)
    (got,) = run_op("TensorScatter", [past, upd, wi], {"mode": mode, "axis": -2})
    want = past.copy()
    for bi in range(3):
        for k in range(4):
            want[bi, :, (wi[bi] + k) % 11] = upd[bi, :, k]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [None, 1, -1])
def test_compress(rng, axis) -> None:
    x = rng.standard_normal((4, 9, 3)).astype(np.float32)
    n = x.size if axis is None else x.shape[axis]
    cond = rng.random(n - 1) < 0.5
    cond[1] = True
    (got,) = run_op("Compress", [x, cond], {} if axis is None else {"axis": axis}, consts={1: cond})
    np.testing.assert_array_equal(got, np.compress(cond, x, axis=axis))
