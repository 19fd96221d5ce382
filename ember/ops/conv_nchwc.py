"""Convolutions on channel-blocked tensors (``NCHW[x]c``), the variants the CPU layout policy
(:mod:`ember.strategy.cpu_layout`) puts in place of ONNX ``Conv`` nodes.

A tensor in ``NCHW{b}c`` is stored ``[N, ceil(C/b), H, W, b]`` (channel ``c = outer*b +
inner``, the padding channels of the last block zero). Weights arrive blocked at compile time
(``OIHW{ib}i{ob}o``: ``[ceil(M/ob), ceil(C/ib), KH, KW, ib, ob]``; for a depthwise convolution
``OIHW{b}o``: ``[ceil(C/b), 1, KH, KW, b]``) and the bias as ``C{ob}c`` (``[ceil(M/ob), ob]``),
all zero-padded, so the padding output channels come out zero (the invariant
:mod:`ember.graph.alter_layout` relies on).

* ``ember.ConvNCHWc`` (X, W, B?) — a 2-D convolution, ``group == 1``:
  ``out[n, o, oh, ow, oi] = sum_{ic, r, q, ii} xpad[n, ic, oh*s0 + r*d0, ow*s1 + q*d1, ii] *
  w[o, ic, r, q, ii, oi] (+ b[o, oi])``.
* ``ember.GlobalPoolNCHWc`` (X; attribute ``mode`` ``"avg"`` or ``"max"``) — ONNX
  ``GlobalAveragePool`` / ``GlobalMaxPool`` over the spatial axes of a blocked tensor: ``[N, CB,
  H, W, b] -> [N, CB, 1, 1, b]`` (zero padding channels stay zero), so a network's last
  convolution stores blocked and only the pooled vector is converted back.
* ``ember.DepthwiseConvNCHWc`` (X, W, B?) — one filter per channel (``group == C == M``):
  ``out[n, c, oh, ow, ci] = sum_{r, q} xpad[n, c, oh*s0 + r*d0, ow*s1 + q*d1, ci] *
  w[c, 0, r, q, ci] (+ b[c, ci])``.
* ``ember.MaxPoolNCHWc`` (X) — ONNX ``MaxPool`` (2-D; ``kernel_shape``, ``strides``, ``pads`` or
  ``auto_pad``, ``dilations``, ``ceil_mode``; no ``Indices`` output) on a blocked tensor, so a
  network's first convolution stores blocked and its pooling reads and writes that layout (zero
  padding channels stay zero). Taps in the padding are ignored, as ONNX says.

Both take the ONNX ``Conv`` attributes (``pads`` or ``auto_pad``, ``strides``, ``dilations``)
and read the vector width from the tensors' shapes, so the same definition serves AVX-512
(``b = 16``), AVX2 (8) and NEON (4). The padded input is a stage of its own (``tag ==
"nchwc_pad"``, flagged ``workspace``) so the product reads it without bounds tests (a depthwise
convolution reads its taps with :func:`masked_read` instead: the copy would cost more than it
saves); the product is tagged ``"conv_nchwc"`` / ``"dwconv_nchwc"`` for the CPU strategy's register-blocked
schedules (:mod:`ember.strategy.cpu_conv`).
"""

from __future__ import annotations

from typing import Any

from .. import te
from ..ir import expr as E
from ..ir.dtypes import dtype
from ..te import Tensor
from .nn import check_window, conv_pads
from .reduce import reduce_tensor
from .registry import OpContext, register
from .util import compute, const_like, dtype_of, ints, shape, uname

CONV_NCHWC = "ember.ConvNCHWc"
DEPTHWISE_NCHWC = "ember.DepthwiseConvNCHWc"
GLOBAL_POOL_NCHWC = "ember.GlobalPoolNCHWc"
MAXPOOL_NCHWC = "ember.MaxPoolNCHWc"


def _geometry(ctx: OpContext, x: Tensor, ksp: tuple[int, int]) -> tuple[list[int], list[int], list[int], list[int],
                                                                           tuple[int, int]]:
    """(strides, dilations, pads_begin, pads_end, (OH, OW)) of a blocked convolution node."""
    sx = shape(x)
    strides = ints(ctx.attr("strides")) or [1, 1]
    dil = ints(ctx.attr("dilations")) or [1, 1]
    check_window(ctx, "input", 2, ksp, strides, dil)
    lo, hi = conv_pads(ctx, (sx[2], sx[3]), ksp, strides, dil)
    out = tuple((sx[2 + d] + lo[d] + hi[d] - ((ksp[d] - 1) * dil[d] + 1)) // strides[d] + 1 for d in range(2))
    if min(out) < 1:
        raise ctx.fail(f"the window does not fit the input's spatial shape {sx[2:4]}: the output would be {out}")
    return strides, dil, lo, hi, (out[0], out[1])


_UINT_OF_WIDTH = {16: "uint16", 32: "uint32", 64: "uint64"}


def masked_read(x: Tensor, n: Any, c: Any, ih: Any, iw: Any, k: Any) -> Any:
    """``x[n, c, ih, iw, k]`` of a blocked tensor ``[N, CB, H, W, b]``, or exactly zero where
    ``(ih, iw)`` lies outside the image (the zero padding of a convolution).

    The read itself is always in bounds (the spatial indices clamped to the image), and the zero
    is made on the value's bits — their unsigned minimum with all ones (inside) or with zero
    (outside), one ``vpminud`` — rather than by a select around the load: a select whose branch
    loads keeps its loop scalar (the vectorizer cannot prove the other lanes' loads safe, so
    every channel lane was read behind a branch of its own), while this expression vectorizes
    along the channel lanes. It is exact for every value (infinities and NaNs included: the bits
    are kept or zeroed, never multiplied as floats). Types of other widths use the select."""
    _, _, h, w, _ = shape(x)
    dt = dtype_of(x)
    ok = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)
    v = x[n, c, E.max_expr(E.min_expr(ih, h - 1), 0), E.max_expr(E.min_expr(iw, w - 1), 0), k]
    bits = _UINT_OF_WIDTH.get(v.dtype.bits) if v.dtype.is_float else None
    if bits is None:
        return te.if_then_else(ok, x[n, c, ih, iw, k], const_like(0, dt))
    u = E.Call(dtype(bits), "reinterpret", (v,))
    ones = E.const((1 << v.dtype.bits) - 1, bits)
    return E.Call(v.dtype, "reinterpret", (E.min_expr(u, E.cast(bits, ok) * ones),))


def _padded(x: Tensor, lo: list[int], hi: list[int]) -> Tensor:
    """``x`` (``[N, CB, H, W, b]``) with its spatial axes zero-padded, as a stage of its own."""
    if not any(lo) and not any(hi):
        return x
    n_, cb, h, w, b = shape(x)

    def body(n: Any, c: Any, i: Any, j: Any, k: Any) -> Any:
        return masked_read(x, n, c, i - lo[0], j - lo[1], k)

    return compute((n_, cb, h + lo[0] + hi[0], w + lo[1] + hi[1], b), body, name=uname("nchwc_pad"),
                   tag="nchwc_pad", constant_layout=True, workspace=True)


def _with_bias(out: Tensor, bias: Tensor | None) -> Tensor:
    if bias is None:
        return out
    return compute(shape(out), lambda n, o, i, j, k: out[n, o, i, j, k] + bias[o, k], name=uname("conv_bias"))


def _plain_as_block(x: Tensor) -> Tensor:
    """A plain ``[N, C, H, W]`` tensor seen as one channel block ``[N, 1, H, W, C]`` (an injective
    stage that the schedule inlines into its reader: the padded copy, or the product itself)."""
    n_, c, h, w = shape(x)
    return compute((n_, 1, h, w, c), lambda n, _o, i, j, k: x[n, k, i, j], name=uname("nchw_as_block"))


@register(CONV_NCHWC, pattern="heavy")
def conv_nchwc(ctx: OpContext, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """``ember.ConvNCHWc``: X ``[N, CB, H, W, ib]``, W ``[MB, CB, KH, KW, ib, ob]``, B ``[MB, ob]``
    (see the module docstring); the result is ``[N, MB, OH, OW, ob]``. X may also be plain ``[N,
    C, H, W]`` when its channels are one block (``CB == 1``, ``ib == C``: an image's 3), read in
    place: the network's input then needs no conversion of its own."""
    if len(shape(x)) == 4 and len(shape(w)) == 6 and shape(w)[1] == 1 and shape(w)[4] == shape(x)[1]:
        x = _plain_as_block(x)
    sx, sw = shape(x), shape(w)
    if len(sx) != 5 or len(sw) != 6 or sw[1] != sx[1] or sw[4] != sx[4]:
        raise ctx.fail(f"X {sx} must be [N, CB, H, W, ib] and W {sw} [MB, CB, KH, KW, ib, ob] with the same CB and ib")
    if b is not None and shape(b) != (sw[0], sw[5]):
        raise ctx.fail(f"B has shape {shape(b)}; the blocked bias is [MB, ob] = {(sw[0], sw[5])}")
    strides, dil, lo, hi, (oh_, ow_) = _geometry(ctx, x, (sw[2], sw[3]))
    xp = _padded(x, lo, hi)
    rc = te.reduce_axis((0, sx[1]), name="rc")
    rr = te.reduce_axis((0, sw[2]), name="rr")
    rq = te.reduce_axis((0, sw[3]), name="rq")
    ri = te.reduce_axis((0, sx[4]), name="ri")

    def body(n: Any, o: Any, i: Any, j: Any, k: Any) -> Any:
        v = xp[n, rc.var, i * strides[0] + rr.var * dil[0], j * strides[1] + rq.var * dil[1], ri.var]
        return te.sum(v * w[o, rc.var, rr.var, rq.var, ri.var, k], axis=[rc, rr, rq, ri])

    attrs = {"strides": strides, "dilations": dil, "pads": (lo, hi)}
    out = compute((sx[0], sw[0], oh_, ow_, sw[5]), body, name=uname("conv_nchwc"), tag="conv_nchwc", attrs=attrs)
    return _with_bias(out, b)


@register(DEPTHWISE_NCHWC, pattern="heavy")
def depthwise_conv_nchwc(ctx: OpContext, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """``ember.DepthwiseConvNCHWc``: X ``[N, CB, H, W, b]``, W ``[CB, 1, KH, KW, b]``, B
    ``[CB, b]`` (see the module docstring); the result is ``[N, CB, OH, OW, b]``."""
    sx, sw = shape(x), shape(w)
    if len(sx) != 5 or len(sw) != 5 or sw[0] != sx[1] or sw[1] != 1 or sw[4] != sx[4]:
        raise ctx.fail(f"X {sx} must be [N, CB, H, W, b] and W {sw} [CB, 1, KH, KW, b] with the same CB and b")
    if b is not None and shape(b) != (sx[1], sx[4]):
        raise ctx.fail(f"B has shape {shape(b)}; the blocked bias is [CB, b] = {(sx[1], sx[4])}")
    strides, dil, lo, hi, (oh_, ow_) = _geometry(ctx, x, (sw[2], sw[3]))
    rr = te.reduce_axis((0, sw[2]), name="rr")
    rq = te.reduce_axis((0, sw[3]), name="rq")
    padded = any(lo) or any(hi)
    # The taps read the input itself, a tap in the padding reading zero (masked_read: a
    # clamped, vectorized read), not a padded copy: the copy, a pass of its own over an input
    # up to four times the output's size, cost more than it saved (one thread, 96 channels at
    # 112x112 stride 2: 136 -> 54 us; 144 channels at 56x56 stride 1: 76 -> 57 us).

    def body(n: Any, c: Any, i: Any, j: Any, k: Any) -> Any:
        ih = i * strides[0] + rr.var * dil[0]
        iw = j * strides[1] + rq.var * dil[1]
        v = masked_read(x, n, c, ih - lo[0], iw - lo[1], k) if padded else x[n, c, ih, iw, k]
        return te.sum(v * w[c, 0, rr.var, rq.var, k], axis=[rr, rq])

    attrs = {"strides": strides, "dilations": dil, "pads": (lo, hi)}
    out = compute((sx[0], sx[1], oh_, ow_, sx[4]), body, name=uname("dwconv_nchwc"), tag="dwconv_nchwc", attrs=attrs)
    return _with_bias(out, b)


@register(GLOBAL_POOL_NCHWC, pattern="reduce")
def global_pool_nchwc(ctx: OpContext, x: Tensor) -> Tensor:
    """``ember.GlobalPoolNCHWc``: the mean (``mode="avg"``) or maximum (``"max"``) of X ``[N, CB,
    H, W, b]`` over H and W, ``[N, CB, 1, 1, b]``."""
    sx = shape(x)
    mode = ctx.attr("mode", "avg")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if len(sx) != 5 or mode not in ("avg", "max"):
        raise ctx.fail(f"X {sx} must be [N, CB, H, W, b] and mode 'avg' or 'max', got {mode!r}")
    if mode == "max":
        return reduce_tensor(x, [2, 3], True, te.max, name="gmaxpool_nchwc")
    r = reduce_tensor(x, [2, 3], True, te.sum, name="gavg_sum_nchwc")
    cnt = const_like(sx[2] * sx[3], dtype_of(x))
    return compute(shape(r), lambda *i: r[i] / cnt, name=uname("gavgpool_nchwc"))


def _pool_windows_clamp_exactly(insp: int, out: int, k: int, stride: int, dil: int, lo: int) -> bool:
    """True when reading a pooling window's taps at indices clamped into ``[0, insp)`` reads
    only values of the window: undilated windows (their taps are contiguous, so a tap clamped to
    the image's edge lands on a tap of the window) that each hold at least one tap inside."""
    if dil != 1:
        return False
    return all(o * stride - lo + k - 1 >= 0 and o * stride - lo < insp for o in range(out))


@register(MAXPOOL_NCHWC, pattern="reduce")
def maxpool_nchwc(ctx: OpContext, x: Tensor) -> Tensor:
    """``ember.MaxPoolNCHWc``: X ``[N, CB, H, W, b]`` -> ``[N, CB, OH, OW, b]``, ONNX ``MaxPool``
    over the spatial axes (see the module docstring). Where every window is undilated and holds
    a tap of the image, the taps read indices clamped to the image (exact: the clamped tap is one
    of the window's own; the reads vectorize along the channel lanes); elsewhere a tap in the
    padding reads the type's lowest value through a select."""
    sx = shape(x)
    if len(sx) != 5:
        raise ctx.fail(f"X {sx} must be a blocked image [N, CB, H, W, b]")
    if len(ctx.attrs.get("_outputs", [])) > 1:
        raise ctx.fail("the blocked max pool has no Indices output; the plain MaxPool computes it")
    k = ints(ctx.attr("kernel_shape"))
    strides = ints(ctx.attr("strides")) or [1, 1]
    dil = ints(ctx.attr("dilations")) or [1, 1]
    check_window(ctx, "input", 2, k, strides, dil)
    lo, hi = conv_pads(ctx, (sx[2], sx[3]), tuple(k), strides, dil)
    if any(p >= k[d % 2] for d, p in enumerate(lo + hi)):
        raise ctx.fail(f"pads {lo + hi} must be smaller than the kernel {k} (as ONNX Runtime requires)")
    ceil_mode = int(ctx.attr("ceil_mode", 0))
    out = []
    for d in range(2):
        span = sx[2 + d] + lo[d] + hi[d] - ((k[d] - 1) * dil[d] + 1)
        o = (-(-span // strides[d]) if ceil_mode else span // strides[d]) + 1
        if ceil_mode and (o - 1) * strides[d] >= sx[2 + d] + lo[d]:
            o -= 1
        out.append(o)
    if min(out) < 1:
        raise ctx.fail(f"the window does not fit the input's spatial shape {sx[2:4]}: the output would be {out}")
    clamp = all(_pool_windows_clamp_exactly(sx[2 + d], out[d], k[d], strides[d], dil[d], lo[d]) for d in range(2))
    rr = te.reduce_axis((0, k[0]), name="rr")
    rq = te.reduce_axis((0, k[1]), name="rq")
    h, w, dt = sx[2], sx[3], dtype_of(x)

    def body(n: Any, c: Any, i: Any, j: Any, ci: Any) -> Any:
        ih = i * strides[0] + rr.var * dil[0] - lo[0]
        iw = j * strides[1] + rq.var * dil[1] - lo[1]
        if clamp:
            v = x[n, c, E.max_expr(E.min_expr(ih, h - 1), 0), E.max_expr(E.min_expr(iw, w - 1), 0), ci]
        else:
            ok = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)
            v = te.if_then_else(ok, x[n, c, ih, iw, ci], te.min_value_of(dt))
        return te.max(v, axis=[rr, rq])

    attrs = {"strides": strides, "dilations": dil, "pads": (lo, hi)}
    return compute((sx[0], sx[1], out[0], out[1], sx[4]), body, name=uname("maxpool_nchwc"), tag="pool_nchwc",
                   attrs=attrs)
