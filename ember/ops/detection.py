"""Detection operators that sample feature maps at computed positions: ``RoiAlign`` and
``DeformConv``.

Both read their sampling positions from run-time tensors (the boxes, the offsets) and
interpolate bilinearly; coordinates are computed in float64 and sums accumulate in float64 (float32
inputs are cast back at the end), so the result does not depend on the order of summation.
"""

from __future__ import annotations

import math
from itertools import product
from typing import Any

import numpy as np

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import cast, compute, dtype_of, ints, shape, uname

_FLOATS = ("float16", "float32", "float64")


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _f64(v: float) -> E.PrimExpr:
    return E.const(float(v), "float64")


def _i32(v: E.PrimExpr) -> E.PrimExpr:
    return cast(v, "int32")


# -- RoiAlign ------------------------------------------------------------------------------------
def _roi_grid(ctx: OpContext, rois: Tensor, sr: int, out_hw: tuple[int, int], scale: float, off: float,
              half_pixel: bool) -> tuple[int, int]:
    """The static extents of the sampling grid: ``sampling_ratio`` when positive, else the
    largest adaptive grid over the (constant) boxes."""
    if sr > 0:
        return sr, sr
    boxes = ctx.value(1)
    if boxes is None or boxes.size == 0:
        return 1, 1
    b = boxes.astype(np.float64).reshape(-1, 4) * scale - off
    h, w = b[:, 3] - b[:, 1], b[:, 2] - b[:, 0]
    if not half_pixel:
        h, w = np.maximum(h, 1.0), np.maximum(w, 1.0)
    gh = int(max(1, np.ceil(h / out_hw[0]).max()))
    gw = int(max(1, np.ceil(w / out_hw[1]).max()))
    return gh, gw


@register("RoiAlign", pattern="reduce")
def roi_align(ctx: OpContext, x: Tensor, rois: Tensor, batch_indices: Tensor) -> Tensor:
    """ONNX RoiAlign (modes avg and max; ``half_pixel`` and ``output_half_pixel``): for each box
    and output bin, the average (or maximum) of bilinear samples on a regular grid in the bin.
    ``sampling_ratio=0`` (an adaptive grid) needs the boxes to be constants."""
    dt = dtype_of(x)
    if dt not in _FLOATS:
        raise ctx.fail(f"X has element type {dt}; RoiAlign takes float16/32/64")
    xs = shape(x)
    if len(xs) != 4:
        raise ctx.fail(f"X must be 4-D (N, C, H, W), got shape {xs}")
    N, C, H, W = xs
    rs = shape(rois)
    if len(rs) != 2 or rs[1] != 4:
        raise ctx.fail(f"rois must have shape (num_rois, 4), got {rs}")
    R = rs[0]
    if shape(batch_indices) != (R,):
        raise ctx.fail(f"batch_indices must have shape ({R},), got {shape(batch_indices)}")
    mode = _s(ctx.attr("mode", "avg")).lower()
    if mode not in ("avg", "max"):
        raise ctx.fail(f"mode={mode!r} is not supported; use 'avg' or 'max'")
    ctm = _s(ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel"))
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise ctx.fail(f"coordinate_transformation_mode={ctm!r} is not 'half_pixel' or 'output_half_pixel'")
    half_pixel = ctm == "half_pixel"
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    sr = int(ctx.attr("sampling_ratio", 0))
    if oh < 1 or ow < 1 or sr < 0:
        raise ctx.fail(f"output_height={oh}, output_width={ow} must be >= 1 and sampling_ratio={sr} >= 0")
    scale = float(ctx.attr("spatial_scale", 1.0))
    off = 0.5 if half_pixel else 0.0
    gh, gw = _roi_grid(ctx, rois, sr, (oh, ow), scale, off, half_pixel)
    iy, ix = te.reduce_axis((0, gh), name="iy"), te.reduce_axis((0, gw), name="ix")

    def sample(r: Any, c: Any, ph: Any, pw: Any) -> Any:
        def box(k: int) -> E.PrimExpr:
            return cast(rois[r, k], "float64") * _f64(scale) - _f64(off)

        x0, y0 = box(0), box(1)
        rw, rh = box(2) - x0, box(3) - y0
        if not half_pixel:
            rw, rh = E.max_expr(rw, _f64(1.0)), E.max_expr(rh, _f64(1.0))
        bh, bw = rh / _f64(oh), rw / _f64(ow)
        if sr > 0:
            nh, nw = E.const(sr, "int32"), E.const(sr, "int32")
        else:
            nh, nw = _i32(te.ceil(rh / _f64(oh))), _i32(te.ceil(rw / _f64(ow)))
        y = y0 + cast(ph, "float64") * bh + (cast(iy.var, "float64") + _f64(0.5)) * bh / cast(nh, "float64")
        xx = x0 + cast(pw, "float64") * bw + (cast(ix.var, "float64") + _f64(0.5)) * bw / cast(nw, "float64")
        inside = (y >= _f64(-1.0)) & (y <= _f64(H)) & (xx >= _f64(-1.0)) & (xx <= _f64(W))
        n = E.max_expr(E.min_expr(_i32(batch_indices[r]), N - 1), 0)

        def axis(v: E.PrimExpr, size: int) -> tuple[E.PrimExpr, E.PrimExpr, E.PrimExpr]:
            v = E.max_expr(v, _f64(0.0))
            last = te.floor(v) >= _f64(size - 1)
            lo = E.min_expr(_i32(te.floor(v)), size - 1)
            hi = te.if_then_else(last, E.const(size - 1, "int32"), lo + 1)
            frac = te.if_then_else(last, _f64(0.0), v - cast(lo, "float64"))
            return lo, hi, frac

        yl, yh, ly = axis(y, H)
        xl, xh, lx = axis(xx, W)
        one = _f64(1.0)
        terms = [
            ((one - ly) * (one - lx), yl, xl),
            ((one - ly) * lx, yl, xh),
            (ly * (one - lx), yh, xl),
            (ly * lx, yh, xh),
        ]
        vals = [wgt * cast(x[n, c, yy, xq], "float64") for wgt, yy, xq in terms]
        if mode == "avg":
            v = vals[0] + vals[1] + vals[2] + vals[3]
        else:
            v = E.max_expr(E.max_expr(vals[0], vals[1]), E.max_expr(vals[2], vals[3]))
        v = te.if_then_else(inside, v, _f64(0.0))
        valid = (iy.var < nh) & (ix.var < nw)
        if mode == "avg":
            cnt = cast(E.max_expr(nh * nw, E.const(1, "int32")), "float64")
            return te.sum(te.if_then_else(valid, v / cnt, _f64(0.0)), axis=[iy, ix])
        return te.max(te.if_then_else(valid, v, _f64(-math.inf)), axis=[iy, ix])

    acc = compute((R, C, oh, ow), sample, name=uname("roialign_acc"))
    return compute((R, C, oh, ow), lambda *i: cast(acc[i], dt), name=uname("roialign"))


# -- DeformConv ---------------------------------------------------------------------------------
@register("DeformConv", pattern="opaque")
def deform_conv(
    ctx: OpContext,
    x: Tensor,
    w: Tensor,
    offset: Tensor,
    bias: Tensor | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """ONNX DeformConv (any number of spatial dimensions; groups, offset groups, strides, pads,
    dilations, optional bias and mask): a convolution whose taps are read at their regular
    position plus a learned offset, interpolated (multi)linearly, zero outside the input."""
    dt = dtype_of(x)
    if dt not in _FLOATS:
        raise ctx.fail(f"X has element type {dt}; DeformConv takes float16/32/64")
    xs, ws, os_ = shape(x), shape(w), shape(offset)
    nd = len(xs) - 2
    if nd < 1 or len(ws) != nd + 2 or len(os_) != nd + 2:
        raise ctx.fail(f"X {xs}, W {ws} and offset {os_} must all have rank 2 + spatial dimensions (>= 1)")
    N, C = xs[:2]
    OC, CG = ws[:2]
    ks = tuple(ints(ctx.attr("kernel_shape"))) or ws[2:]
    if ks != ws[2:]:
        raise ctx.fail(f"kernel_shape {list(ks)} does not match W's spatial shape {list(ws[2:])}")
    group, og = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    strides = ints(ctx.attr("strides")) or [1] * nd
    dil = ints(ctx.attr("dilations")) or [1] * nd
    pads = ints(ctx.attr("pads")) or [0] * (2 * nd)
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd:
        raise ctx.fail(f"strides {strides}, dilations {dil}, pads {pads} do not match {nd} spatial dimension(s)")
    if group < 1 or og < 1 or C != CG * group or OC % group or C % og:
        raise ctx.fail(
            f"channels do not divide: C={C}, W's C/group={CG}, group={group}, oC={OC}, offset_group={og}"
        )
    outs = tuple(
        (xs[2 + d] + pads[d] + pads[nd + d] - ((ks[d] - 1) * dil[d] + 1)) // strides[d] + 1 for d in range(nd)
    )
    K = int(np.prod(ks))
    if os_ != (N, og * K * nd) + outs:
        raise ctx.fail(f"offset has shape {os_}; expected {(N, og * K * nd) + outs}")
    if mask is not None and shape(mask) != (N, og * K) + outs:
        raise ctx.fail(f"mask has shape {shape(mask)}; expected {(N, og * K) + outs}")
    if bias is not None and shape(bias) != (OC,):
        raise ctx.fail(f"B has shape {shape(bias)}; expected ({OC},)")
    cpo = C // og
    sp = xs[2:]

    def sampled(n: Any, c: Any, *rest: Any) -> Any:
        kidx, oidx = rest[:nd], rest[nd:]
        kflat: Any = E.const(0, "int32")
        for d in range(nd):
            kflat = kflat * ks[d] + kidx[d]
        g = c // cpo
        pos, lo, frac = [], [], []
        for d in range(nd):
            ch = (g * K + kflat) * nd + d
            p = cast(oidx[d] * strides[d] - pads[d] + kidx[d] * dil[d], "float64") + cast(
                offset[(n, ch) + tuple(oidx)], "float64"
            )
            f = te.floor(p)
            pos.append(p)
            lo.append(_i32(f))
            frac.append(p - f)
        total: Any = _f64(0.0)
        for corner in product((0, 1), repeat=nd):
            wgt: Any = _f64(1.0)
            ok: Any = None
            idx = []
            for d, hi in enumerate(corner):
                j = lo[d] + hi
                wgt = wgt * (frac[d] if hi else _f64(1.0) - frac[d])
                inb = (j >= 0) & (j < sp[d])
                ok = inb if ok is None else ok & inb
                idx.append(E.max_expr(E.min_expr(j, sp[d] - 1), 0))
            total = total + te.if_then_else(ok, wgt * cast(x[(n, c) + tuple(idx)], "float64"), _f64(0.0))
        if mask is not None:
            total = total * cast(mask[(n, g * K + kflat) + tuple(oidx)], "float64")
        return total

    cols = compute((N, C) + tuple(ks) + outs, sampled, name=uname("deform_cols"), workspace=True)
    rc = te.reduce_axis((0, CG), name="rc")
    rk = [te.reduce_axis((0, ks[d]), name=f"rk{d}") for d in range(nd)]

    def conv(n: Any, oc: Any, *o: Any) -> Any:
        g = oc // (OC // group)
        kv = tuple(r.var for r in rk)
        return te.sum(
            cast(w[(oc, rc.var) + kv], "float64") * cols[(n, g * CG + rc.var) + kv + tuple(o)], axis=[rc, *rk]
        )

    acc = compute((N, OC) + outs, conv, name=uname("deform_acc"))

    def finish(n: Any, oc: Any, *o: Any) -> Any:
        v = acc[(n, oc) + tuple(o)]
        if bias is not None:
            v = v + cast(bias[oc], "float64")
        return cast(v, dt)

    return compute((N, OC) + outs, finish, name=uname("deform_conv"))
