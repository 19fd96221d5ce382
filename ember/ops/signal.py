"""Signal-processing operators: ``DFT``, ``STFT`` and the ``HannWindow``, ``HammingWindow`` and
``BlackmanWindow`` window functions.

Transforms are computed directly (``O(n^2)``, each output a reduction over the signal) in
float64, with twiddle angles ``2 pi ((j k) mod n) / n`` so large products lose no precision.
Lengths given as inputs (the window ``size``, ``dft_length``, ``axis``, STFT's ``frame_step``
and ``frame_length``) must be known when the model is compiled: constants, or inputs whose
values ember binds before compiling.
"""

from __future__ import annotations

import math
from typing import Any

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .elemwise import onnx_dtype
from .registry import OpContext, register
from .util import cast, compute, dtype_of, norm_axis, shape, uname


def _f64(v: float) -> E.PrimExpr:
    return E.const(float(v), "float64")


def _angle(j: Any, k: Any, n: int) -> E.PrimExpr:
    """``2 pi ((j k) mod n) / n`` in float64."""
    jk = E.floormod(cast(j, "int64") * cast(k, "int64"), E.const(n, "int64"))
    return cast(jk, "float64") * _f64(2.0 * math.pi / n)


def _scalar_value(ctx: OpContext, i: int, what: str) -> int | None:
    v = ctx.value(i)
    if v is None:
        return None
    if v.size != 1:
        raise ctx.fail(f"{what} must be a scalar, not of shape {v.shape}")
    return int(v.reshape(-1)[0])


@register("DFT", pattern="reduce")
def dft(ctx: OpContext, x: Tensor, length: Tensor | None = None, axis_t: Tensor | None = None) -> Tensor:
    """ONNX DFT: the discrete Fourier transform (``inverse``, ``onesided``) of a real
    (``[..., 1]``) or complex (``[..., 2]``) signal along ``axis``, zero-padded or cut to
    ``dft_length``. ``inverse`` with ``onesided`` is the inverse of a real signal's transform."""
    sx = shape(x)
    r = len(sx)
    if r < 2 or sx[-1] not in (1, 2):
        raise ctx.fail(f"input of shape {sx} must end in 1 (real) or 2 (complex)")
    if ctx.opset >= 20:
        a = _scalar_value(ctx, 2, "axis")
        axis = -2 if a is None else a
    else:
        axis = int(ctx.attr("axis", 1))
    ax = norm_axis(axis, r)
    if ax == r - 1:
        raise ctx.fail(f"axis {axis} is the real/imaginary axis; give a signal axis")
    inverse, onesided = int(ctx.attr("inverse", 0)), int(ctx.attr("onesided", 0))
    m = sx[ax]
    given = _scalar_value(ctx, 1, "dft_length")
    n = given if given is not None else (2 * (m - 1) if inverse and onesided else m)
    if n < 1:
        raise ctx.fail(f"dft_length {n} must be positive")
    cplx = sx[-1] == 2
    dt = dtype_of(x)
    zero = _f64(0.0)

    def load(i: tuple[Any, ...], j: Any, part: int) -> E.PrimExpr:
        if part == 1 and not cplx:
            return zero
        idx = list(i)
        idx[ax] = j
        idx[-1] = part
        return cast(x[tuple(idx)], "float64")

    if inverse and onesided:
        # irfft: bins 0..n//2 of a Hermitian spectrum; the others are their conjugates.
        nb = min(m, n // 2 + 1)
        j = te.reduce_axis((0, nb), name="j")

        def body_r(*i: Any) -> E.PrimExpr:
            t = _angle(j.var, i[ax], n)
            w = te.if_then_else((j.var == 0) | ((j.var * 2) == n), _f64(1.0 / n), _f64(2.0 / n))
            v = load(i, j.var, 0) * te.cos(t) - load(i, j.var, 1) * te.sin(t)
            return te.sum(w * v, axis=j)

        out = tuple(n if d == ax else (1 if d == r - 1 else sx[d]) for d in range(r))
        res = compute(out, body_r, name=uname("irfft"))
        return compute(out, lambda *i: cast(res[i], dt), name=uname("dft"))

    nout = n // 2 + 1 if onesided else n
    j = te.reduce_axis((0, min(m, n)), name="j")
    sign = 1.0 if inverse else -1.0
    scale = 1.0 / n if inverse else 1.0

    def body(*i: Any) -> E.PrimExpr:
        t = _angle(j.var, i[ax], n)
        c, s = te.cos(t), _f64(sign) * te.sin(t)
        a, b = load(i, j.var, 0), load(i, j.var, 1)
        # (a + ib)(c + is): real a c - b s, imaginary b c + a s
        v = te.if_then_else(i[-1] == 0, a * c - b * s, b * c + a * s)
        return te.sum(v, axis=j)

    out = tuple(nout if d == ax else (2 if d == r - 1 else sx[d]) for d in range(r))
    res = compute(out, body, name=uname("dft_acc"))
    return compute(out, lambda *i: cast(res[i] * _f64(scale), dt), name=uname("dft"))


@register("STFT", pattern="reduce")
def stft(
    ctx: OpContext,
    x: Tensor,
    step: Tensor,
    window: Tensor | None = None,
    length: Tensor | None = None,
) -> Tensor:
    """ONNX STFT: the DFT of each frame (``frame_step`` apart, ``frame_length`` long, times the
    ``window``) of ``[batch, length, 1 or 2]`` signals; ``onesided`` keeps ``n // 2 + 1`` bins."""
    sx = shape(x)
    if len(sx) != 3 or sx[-1] not in (1, 2):
        raise ctx.fail(f"signal of shape {sx} must be [batch, length, 1 or 2]")
    hop = _scalar_value(ctx, 1, "frame_step")
    assert hop is not None
    flen = _scalar_value(ctx, 3, "frame_length")
    if window is not None:
        wl = shape(window)[0]
        if flen is not None and flen != wl:
            raise ctx.fail(f"frame_length {flen} differs from the window's length {wl}")
        flen = wl
    if flen is None:
        flen = sx[1]
    if hop < 1 or flen < 1 or flen > sx[1]:
        raise ctx.fail(f"frame_step {hop} and frame_length {flen} do not fit a signal of length {sx[1]}")
    frames = 1 + (sx[1] - flen) // hop
    nout = flen // 2 + 1 if int(ctx.attr("onesided", 1)) else flen
    cplx = sx[-1] == 2
    dt = dtype_of(x)
    j = te.reduce_axis((0, flen), name="j")

    def body(b: Any, f: Any, k: Any, p: Any) -> E.PrimExpr:
        pos = f * hop + j.var
        w = cast(window[j.var], "float64") if window is not None else _f64(1.0)
        a = cast(x[b, pos, 0], "float64") * w
        im = cast(x[b, pos, 1], "float64") * w if cplx else _f64(0.0)
        t = _angle(j.var, k, flen)
        c, s = te.cos(t), -te.sin(t)
        return te.sum(te.if_then_else(p == 0, a * c - im * s, im * c + a * s), axis=j)

    out = (sx[0], frames, nout, 2)
    res = compute(out, body, name=uname("stft_acc"))
    return compute(out, lambda *i: cast(res[i], dt), name=uname("stft"))


def _window(name: str, terms: list[float]):  # noqa: ANN202 - returns the operator function
    """A cosine-sum window ``sum_q (-1)^q a_q cos(2 pi q n / N)``."""

    def op(ctx: OpContext, size: Tensor) -> Tensor:
        n = _scalar_value(ctx, 0, "size")
        assert n is not None
        if n < 0:
            raise ctx.fail(f"size {n} must not be negative")
        dt = onnx_dtype(ctx.attr("output_datatype", 1), ctx)
        denom = n if int(ctx.attr("periodic", 1)) else n - 1

        def body(i: Any) -> E.PrimExpr:
            acc = _f64(terms[0])
            for q, a in enumerate(terms[1:], start=1):
                t = cast(i, "float64") * _f64(2.0 * math.pi * q / denom) if denom else _f64(0.0)
                acc = acc + _f64(a * (-1) ** q) * te.cos(t)
            return cast(acc, dt)

        return compute((n,), body, name=uname(name))

    op.__name__ = name
    op.__doc__ = f"ONNX {name} of ``size`` points (``periodic``, ``output_datatype``)."
    return op


register("HannWindow")(_window("HannWindow", [0.5, 0.5]))
register("HammingWindow")(_window("HammingWindow", [25.0 / 46.0, 1.0 - 25.0 / 46.0]))
register("BlackmanWindow")(_window("BlackmanWindow", [0.42, 0.5, 0.08]))


@register("MelWeightMatrix")
def mel_weight_matrix(
    ctx: OpContext, num_mel_bins: Tensor, dft_length: Tensor, sample_rate: Tensor, lower: Tensor, upper: Tensor
) -> Tensor:
    """ONNX MelWeightMatrix: ``(dft_length // 2 + 1, num_mel_bins)`` triangular filters with peaks
    of 1, their edges at ``num_mel_bins + 2`` points evenly spaced on the mel scale
    ``2595 log10(1 + f / 700)`` between the edge frequencies, mapped to spectrogram bins
    ``floor((dft_length + 1) f / sample_rate)``. The two sizes must be known when compiling;
    the rate and edge frequencies are read at run time."""
    nmel = _scalar_value(ctx, 0, "num_mel_bins")
    dftl = _scalar_value(ctx, 1, "dft_length")
    if nmel is None or dftl is None or nmel < 1 or dftl < 1:
        raise ctx.fail(f"num_mel_bins ({nmel}) and dft_length ({dftl}) must be positive")
    dt = onnx_dtype(ctx.attr("output_datatype", 1), ctx)
    if not dt.startswith("float"):
        raise ctx.fail(f"output_datatype {dt} is not a floating-point type")
    nspec = dftl // 2 + 1
    ln10 = math.log(10.0)

    def scalar(t: Tensor) -> E.PrimExpr:
        return cast(t[(0,) * len(shape(t))], "float64")

    def mel(f: E.PrimExpr) -> E.PrimExpr:
        return _f64(2595.0 / ln10) * E.Call(f.dtype, "log1p", (f / _f64(700.0),))

    def edge(k: Any) -> E.PrimExpr:
        lo, hi = mel(scalar(lower)), mel(scalar(upper))
        m = cast(k, "float64") * ((hi - lo) / _f64(nmel + 2)) + lo
        hz = _f64(700.0) * E.Call(m.dtype, "expm1", (m / _f64(2595.0) * _f64(ln10),))
        return cast(te.floor(_f64(dftl + 1) * hz / scalar(sample_rate)), "int64")

    def body(j: Any, i: Any) -> E.PrimExpr:
        lo, c, hi = edge(i), edge(i + 1), edge(i + 2)
        jj = cast(j, "int64")
        jf, lf, cf, hf = (cast(v, "float64") for v in (jj, lo, c, hi))
        zero = _f64(0.0)
        rise = te.if_then_else(
            c > lo,
            te.if_then_else((jj >= lo) & (jj <= c), (jf - lf) / (cf - lf), zero),
            te.if_then_else(jj == c, _f64(1.0), zero),
        )
        falling = (hi > c) & (jj >= c) & (jj < hi)
        return cast(te.if_then_else(falling, (hf - jf) / (hf - cf), rise), dt)

    return compute((nspec, nmel), body, name=uname("mel_weight_matrix"))
