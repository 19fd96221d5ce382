"""Linear quantization operators: ``QuantizeLinear``, ``DequantizeLinear``,
``DynamicQuantizeLinear``, ``MatMulInteger``, ``ConvInteger``, ``QLinearMatMul`` and
``QLinearConv``.

Scales and zero points are per tensor (a scalar or a one-element vector), per axis (a vector
along ``axis``) or blocked (the input's shape with ``axis`` divided into blocks of
``block_size``). Rounding is to nearest, ties to even, as ONNX's reference (``np.rint``).
Quantized types: uint8, int8, uint16, int16, int4, uint4, int2, uint2 (rounded, plus the zero
point, saturated to the type's range) and the float formats float8_e4m3fn, float8_e4m3fnuz,
float8_e5m2, float8_e5m2fnuz (``x / scale`` converted as ONNX ``Cast`` converts, with the
``saturate`` attribute; their zero point must be 0) and float4_e2m1fn (``x / scale + zero_point``,
converted with saturation), as ONNX's reference computes them. The float conversions are the
bit-level code of :mod:`ember.ops.lowp`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import te
from ..ir import expr as E
from ..te import Tensor
from . import lowp
from .elemwise import onnx_dtype
from .nn import conv_pads, conv_tensor
from .packed_lowp import packed_product, wide_copy
from .registry import NeedValue, OpContext, register
from .util import bcast_load, broadcast_shapes, cast, compute, dtype_of, ints, norm_axis, shape, uname
from .vnni import (
    channel_block,
    conv1x1_vnni,
    conv2d_vnni_blocked,
    conv2d_vnni_nchwc,
    conv_lanes,
    has_vnni,
    vnni_product,
)

_RANGES = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
    "uint4": (0, 15),
    "int4": (-8, 7),
    "uint2": (0, 3),
    "int2": (-2, 1),
}
_FLOAT_Q = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")
_FLOATS = ("float16", "float32", "float64")
Loader = Callable[[Sequence[Any]], E.PrimExpr]


def _qtype(dt: str, ctx: OpContext) -> tuple[int, int]:
    """The (min, max) of quantized type ``dt``; fails for types ember cannot quantize to."""
    r = _RANGES.get(dt)
    if r is None:
        raise ctx.fail(f"quantized type {dt} is not supported (ember supports {', '.join((*_RANGES, *_FLOAT_Q))})")
    return r


def _check_float_zp(ctx: OpContext, i: int, dt: str) -> None:
    """A float8 zero point must be 0 (ONNX): fail when it is a constant that is not."""
    if not ctx.has(i):
        return
    try:
        v = ctx.value(i)
    except NeedValue:
        return
    if v is not None and (v.view(np.uint8) & 0x7F).any():
        raise ctx.fail(f"the zero point of a {dt} quantization must be 0 (ONNX); give zeros or no zero point")


_SCALE_TYPES = ("float16", "bfloat16", "float32", "float64")


def check_qparams(ctx: OpContext, what: str, q: Tensor | str, scale: Tensor | None, zp: Tensor | None) -> None:
    """Fail (an error naming the node) when the scale of quantized value ``what`` is missing or not
    a float, or its zero point is not of the quantized type ``q`` (a tensor or a type name)."""
    qdt = q if isinstance(q, str) else dtype_of(q)
    if scale is None:
        raise ctx.fail(f"the scale of {what} is missing; every quantized value needs one")
    if dtype_of(scale) not in _SCALE_TYPES:
        raise ctx.fail(f"the scale of {what} has type {dtype_of(scale)}; scales are floats ({', '.join(_SCALE_TYPES)})")
    if zp is not None and dtype_of(zp) != qdt:
        raise ctx.fail(f"the zero point of {what} has type {dtype_of(zp)}, but {what} is {qdt}: "
                       f"give a {qdt} zero point")


def param_loader(ctx: OpContext, p: Tensor, xs: tuple[int, ...], axis: int, block: int) -> Loader:
    """A function from an index of ``x`` (shape ``xs``) to the scale or zero point ``p`` that
    applies there: per tensor, per ``axis`` or in blocks of ``block`` along ``axis``."""
    ps = shape(p)
    n = 1
    for d in ps:
        n *= d
    if len(ps) == 0:
        return lambda i: p[()]
    if n == 1 and len(ps) == 1:
        return lambda i: p[0]
    ax = norm_axis(axis, len(xs))
    if not block:
        if len(ps) != 1 or ps[0] != xs[ax]:
            raise ctx.fail(
                f"a per-axis scale or zero point must be a vector of {xs[ax]} elements (axis {axis}), not {ps}; "
                "for blocked quantization set block_size"
            )
        return lambda i: p[i[ax]]
    want = tuple(-(-xs[d] // block) if d == ax else xs[d] for d in range(len(xs)))
    if ps != want:
        raise ctx.fail(
            f"a blocked scale or zero point for input {xs}, axis {axis}, block_size {block} has shape {want}, not {ps}"
        )
    return lambda i: p[tuple(E.floordiv(i[d], block) if d == ax else i[d] for d in range(len(xs)))]


def _wider_float(*dts: str) -> str:
    return max(dts, key=lambda d: _FLOATS.index(d) if d in _FLOATS else 0)


def _saturate(v: E.PrimExpr, lo: int, hi: int, const_first: bool = False) -> E.PrimExpr:
    """``clip(v, lo, hi)`` for a float value (NaN stays NaN). ``const_first`` (CPU targets,
    :func:`_const_first`) puts the constant bounds first: ember's float ``Max``/``Min``
    propagate a NaN of their first operand with a test of its own, which on a constant folds
    away, leaving one ``vmaxps``/``vminps`` instead of a compare, an unordered compare and a
    masked move (a NaN second operand comes out of the comparison's select unchanged, so the
    value is the same for every input but the sign of a zero, which the integer conversion after
    it drops)."""
    flo, fhi = E.const(float(lo), v.dtype), E.const(float(hi), v.dtype)
    if const_first:
        return E.min_expr(fhi, E.max_expr(flo, v))
    return E.min_expr(E.max_expr(v, flo), fhi)


def _const_first(ctx: OpContext) -> bool:
    """Whether ``ctx`` compiles for a CPU target (:func:`_saturate`'s ``const_first``)."""
    target = getattr(ctx.strategy, "target", None)
    return target is not None and not target.is_gpu


@register("QuantizeLinear")
def quantize_linear(ctx: OpContext, x: Tensor, scale: Tensor, zp: Tensor | None = None) -> Tensor:
    """ONNX QuantizeLinear: ``saturate(rint(x / scale) + zero_point)`` (per tensor, per axis or
    blocked), of the zero point's type, else ``output_dtype``, else uint8."""
    xs = shape(x)
    odt = dtype_of(zp) if zp is not None else onnx_dtype(ctx.attr("output_dtype", 2) or 2, ctx)
    if zp is not None and ctx.attr("output_dtype") and onnx_dtype(ctx.attr("output_dtype"), ctx) != odt:
        raise ctx.fail(f"output_dtype does not match the zero point's type {odt}")
    if odt in _FLOAT_Q:
        return _quantize_float(ctx, x, scale, zp, odt)
    lo, hi = _qtype(odt, ctx)
    check_qparams(ctx, "the output", odt, scale, zp)
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    if block < 0:
        raise ctx.fail(f"block_size must be positive, not {block}")
    sl = param_loader(ctx, scale, xs, axis, block)
    zl = param_loader(ctx, zp, xs, axis, block) if zp is not None else None
    prec = ctx.attr("precision")
    wdt = onnx_dtype(prec, ctx) if prec else _wider_float(dtype_of(x), dtype_of(scale))

    def body(*i: Any) -> E.PrimExpr:
        q = te.round(cast(x[i], wdt) / cast(sl(i), wdt))
        if zl is not None:
            q = q + cast(zl(i), wdt)
        return cast(_saturate(q, lo, hi, _const_first(ctx)), odt)

    return compute(xs, body, name=uname("quantize"))


def _quantize_float(ctx: OpContext, x: Tensor, scale: Tensor, zp: Tensor | None, odt: str) -> Tensor:
    """QuantizeLinear to a float format: ``x / scale`` (plus the zero point for float4_e2m1fn)
    converted with ``saturate`` (float8) or always saturated (float4_e2m1fn)."""
    xs = shape(x)
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    if block < 0:
        raise ctx.fail(f"block_size must be positive, not {block}")
    if odt != "float4_e2m1fn":
        _check_float_zp(ctx, 2, odt)
    sl = param_loader(ctx, scale, xs, axis, block)
    zl = param_loader(ctx, zp, xs, axis, block) if zp is not None and odt == "float4_e2m1fn" else None
    prec = ctx.attr("precision")
    wdt = onnx_dtype(prec, ctx) if prec else _wider_float(dtype_of(x), dtype_of(scale))
    if wdt not in _FLOATS:
        raise ctx.fail(f"precision {wdt} is not supported (use float16, float32 or float64)")
    sat = bool(int(ctx.attr("saturate", 1)))

    def body(*i: Any) -> E.PrimExpr:
        q = cast(x[i], wdt) / cast(sl(i), wdt)
        if zl is not None:
            q = q + cast(lowp.decode(zl(i)), wdt)
        return lowp.to_lowp(q, odt, saturate=sat)

    return compute(xs, body, name=uname("quantize"))


def _dequantize_float(ctx: OpContext, x: Tensor, scale: Tensor) -> Tensor:
    """DequantizeLinear from a float format: ``float32(x) * scale`` (the zero point must be 0)."""
    xs = shape(x)
    if dtype_of(x) != "float4_e2m1fn":
        _check_float_zp(ctx, 2, dtype_of(x))
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    sl = param_loader(ctx, scale, xs, axis, block)
    odt = onnx_dtype(ctx.attr("output_dtype"), ctx) if ctx.attr("output_dtype") else dtype_of(scale)
    wdt = _wider_float("float32", dtype_of(scale))

    def body(*i: Any) -> E.PrimExpr:
        return cast(cast(lowp.decode(x[i]), wdt) * cast(sl(i), wdt), odt)

    return compute(xs, body, name=uname("dequantize"))


@register("DequantizeLinear")
def dequantize_linear(ctx: OpContext, x: Tensor, scale: Tensor, zp: Tensor | None = None) -> Tensor:
    """ONNX DequantizeLinear: ``(float32(x) - zero_point) * scale``, of the scale's type (or
    ``output_dtype``)."""
    xs = shape(x)
    if dtype_of(x) in _FLOAT_Q:
        return _dequantize_float(ctx, x, scale)
    if dtype_of(x) not in _RANGES and dtype_of(x) != "int32":
        raise ctx.fail(
            f"input type {dtype_of(x)} is not supported (ember dequantizes {', '.join((*_RANGES, *_FLOAT_Q))}, int32)"
        )
    check_qparams(ctx, "the input", x, scale, zp)
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    sl = param_loader(ctx, scale, xs, axis, block)
    zl = param_loader(ctx, zp, xs, axis, block) if zp is not None else None
    odt = onnx_dtype(ctx.attr("output_dtype"), ctx) if ctx.attr("output_dtype") else dtype_of(scale)
    wdt = _wider_float("float32", dtype_of(scale))

    def body(*i: Any) -> E.PrimExpr:
        d = cast(x[i], "float32")
        if zl is not None:
            d = d - cast(zl(i), "float32")
        return cast(cast(d, wdt) * cast(sl(i), wdt), odt)

    return compute(xs, body, name=uname("dequantize"))


@register("DynamicQuantizeLinear", pattern="reduce")
def dynamic_quantize_linear(ctx: OpContext, x: Tensor) -> list[Tensor]:
    """ONNX DynamicQuantizeLinear: uint8 quantization with the scale and zero point that map
    ``[min(0, min x), max(0, max x)]`` onto ``[0, 255]``."""
    xs = shape(x)
    if dtype_of(x) != "float32":
        raise ctx.fail(f"input type {dtype_of(x)} is not supported; DynamicQuantizeLinear takes float32")
    f = "float32"
    rs = [te.reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(xs)]
    idx = tuple(r.var for r in rs)
    hi = compute((), lambda: te.max(x[idx], axis=rs) if rs else x[()], name=uname("dq_max"))
    rs2 = [te.reduce_axis((0, d), name=f"s{k}") for k, d in enumerate(xs)]
    idx2 = tuple(r.var for r in rs2)
    lo = compute((), lambda: te.min(x[idx2], axis=rs2) if rs2 else x[()], name=uname("dq_min"))
    zero, one = E.const(0.0, f), E.const(1.0, f)

    def scale_of() -> E.PrimExpr:
        mx, mn = E.max_expr(zero, hi[()]), E.min_expr(zero, lo[()])
        return te.if_then_else(mx == mn, one, mx - mn) / E.const(255.0, f)

    sc = compute((), scale_of, name=uname("dq_scale"))

    def zp_of() -> E.PrimExpr:
        mn = E.min_expr(zero, lo[()])
        return te.round(_saturate(zero - mn / sc[()], 0, 255))

    zpf = compute((), zp_of, name=uname("dq_zpf"))
    y = compute(xs, lambda *i: cast(_saturate(te.round(x[i] / sc[()]) + zpf[()], 0, 255), "uint8"), name=uname("dq_y"))
    scale_out = compute((), lambda: sc[()], name=uname("dq_scale_out"))
    zp_out = compute((), lambda: cast(zpf[()], "uint8"), name=uname("dq_zp"))
    return [y, scale_out, zp_out]


def _minus_zp(t: Tensor, zp: Loader | None, name: str) -> Tensor:
    """``int32(t) - int32(zero point)``."""
    return compute(
        shape(t),
        lambda *i: cast(t[i], "int32") - (cast(zp(i), "int32") if zp is not None else E.const(0, "int32")),
        name=uname(name),
    )


def _check_int8(ctx: OpContext, *ts: Tensor | None) -> None:
    for t in ts:
        if t is not None and dtype_of(t) not in ("uint8", "int8"):
            raise ctx.fail(f"quantized inputs must be uint8 or int8, not {dtype_of(t)}")


def _int_matmul(a: Tensor, b: Tensor) -> Tensor:
    """int32 ``matmul`` of two int32 tensors (NumPy batch broadcasting; operands of rank >= 2)."""
    sa, sb = shape(a), shape(b)
    if len(sa) < 2 or len(sb) < 2:
        raise ValueError(f"integer matmul of {sa} and {sb}: operands of rank 1 are not supported")
    M, K, K2, N = sa[-2], sa[-1], sb[-2], sb[-1]
    if K != K2:
        raise ValueError(f"matmul of {sa} and {sb}: inner dimensions {K} and {K2} differ")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    out = batch + (M, N)
    k = te.reduce_axis((0, K), name="k")

    def body(*i: Any) -> E.PrimExpr:
        av = bcast_load(a, out[:-1] + (K,), i[:-1] + (k.var,))
        bv = bcast_load(b, out[:-2] + (K, N), i[:-2] + (k.var, i[-1]))
        return te.sum(av * bv, axis=k)

    return compute(out, body, name=uname("imatmul"))


def _matmul_zp(ctx: OpContext, t: Tensor, zp: Tensor | None, row: bool) -> Loader | None:
    """Zero point of a matmul operand: scalar, or per row of A / per column of B."""
    if zp is None:
        return None
    ts = shape(t)
    zs = shape(zp)
    n = 1
    for d in zs:
        n *= d
    if n == 1:
        return lambda i: zp[(0,) * len(zs)]
    ax = len(ts) - 2 if row else len(ts) - 1
    if len(zs) != 1 or zs[0] != ts[ax]:
        raise ctx.fail(f"zero point of shape {zs} does not match operand {ts}: give a scalar or one per row/column")
    return lambda i: zp[i[ax]]


def _byte_offsets(a: Tensor, b: Tensor) -> tuple[int, int]:
    """What turns the operands into ``vpdpbusd``'s bytes: ``a + offa`` is unsigned (128 for
    int8), ``b - offb`` signed (128 for uint8)."""
    return (128 if dtype_of(a) == "int8" else 0), (128 if dtype_of(b) == "uint8" else 0)


def _matmul_vnni(ctx: OpContext, a: Tensor, b: Tensor, az: Loader | None, bz: Loader | None) -> Tensor:
    """MatMulInteger of a 2-D ``b`` on VNNI (:func:`ember.ops.vnni.vnni_product`): ``a - az`` is
    ``(a + offa) - (az + offa)``, ``b - bz`` is ``(b - offb) - (bz - offb)``."""
    sa, sb = shape(a), shape(b)
    offa, offb = _byte_offsets(a, b)
    i32 = "int32"

    def au(li: tuple[Any, ...], m: Any, k: Any) -> E.PrimExpr:
        return cast(a[tuple(li) + (m, k)], i32) + offa

    def bs(k: Any, n: Any) -> E.PrimExpr:
        return cast(b[k, n], i32) - offb

    def ca(li: tuple[Any, ...], m: Any) -> E.PrimExpr:
        z = cast(az(tuple(li) + (m, 0)), i32) if az is not None else E.const(0, i32)
        return z + offa

    def cb(n: Any) -> E.PrimExpr:
        z = cast(bz((0, n)), i32) if bz is not None else E.const(0, i32)
        return z - offb

    return vnni_product(au, bs, ca if az is not None or offa else None, cb if bz is not None or offb else None,
                        sa[:-2], sa[-2], sa[-1], sb[1], ctx.strategy, "mmi_vnni")


@register("MatMulInteger", pattern="reduce")
def matmul_integer(
    ctx: OpContext, a: Tensor, b: Tensor, azp: Tensor | None = None, bzp: Tensor | None = None
) -> Tensor:
    """ONNX MatMulInteger: int32 ``(A - a_zero_point) @ (B - b_zero_point)``."""
    _check_int8(ctx, a, b, azp, bzp)
    for zp, t, what in ((azp, a, "a_zero_point"), (bzp, b, "b_zero_point")):
        if zp is not None and dtype_of(zp) != dtype_of(t):
            raise ctx.fail(f"{what} has type {dtype_of(zp)} but its operand is {dtype_of(t)}: they must be the same")
    az, bz = _matmul_zp(ctx, a, azp, True), _matmul_zp(ctx, b, bzp, False)
    sa, sb = shape(a), shape(b)
    if len(sa) >= 2 and len(sb) == 2 and sa[-1] == sb[0] and sa[-1] >= 4 and sb[1] >= 16 and has_vnni(ctx.strategy):
        return _matmul_vnni(ctx, a, b, az, bz)
    if len(sa) >= 2 and len(sb) == 2 and sa[-1] == sb[0] and sa[-1] >= 4 and sb[1] >= 16:
        # the packed GEMM: B - b_zero_point packed as int32 panels, A - a_zero_point read as int32
        lead = sa[:-2]

        def a_int(*idx: Any) -> E.PrimExpr:
            v = cast(a[idx], "int32")
            return v - cast(az(idx), "int32") if az is not None else v

        a32 = wide_copy(a, a_int, "mmi_a")

        def a_at(li: tuple[Any, ...], m: Any, kk: Any) -> E.PrimExpr:
            return a32[tuple(li) + (m, kk)]

        def b_at(kk: Any, n: Any) -> E.PrimExpr:
            v = cast(b[kk, n], "int32")
            return v - cast(bz((kk, n)), "int32") if bz is not None else v

        return packed_product(a_at, b_at, lead, sa[-2], sa[-1], sb[1], "int32", ctx.strategy, "mmi")
    ai = _minus_zp(a, az, "mmi_a")
    bi = _minus_zp(b, bz, "mmi_b")
    return _int_matmul(ai, bi)


def _requantize(
    ctx: OpContext, acc: Tensor, mult: Callable[[Sequence[Any]], E.PrimExpr], yzp: Tensor | None, odt: str
) -> Tensor:
    """``saturate(rint(acc * mult) + y_zero_point)`` in float64, as the reference computes it."""
    lo, hi = _qtype(odt, ctx)

    def body(*i: Any) -> E.PrimExpr:
        d = cast(acc[i], "float64") * mult(i)
        if yzp is not None:
            d = d + cast(yzp[(0,) * len(yzp.shape)], "float64")
        return cast(_saturate(te.round(d), lo, hi, _const_first(ctx)), odt)

    return compute(shape(acc), body, name=uname("requant"))


def _numel(t: Tensor) -> int:
    n = 1
    for d in shape(t):
        n *= d
    return n


def _scalar(t: Tensor) -> E.PrimExpr:
    return t[(0,) * len(t.shape)]


@register("QLinearMatMul", pattern="reduce")
def qlinear_matmul(
    ctx: OpContext,
    a: Tensor,
    a_scale: Tensor,
    azp: Tensor,
    b: Tensor,
    b_scale: Tensor,
    bzp: Tensor,
    y_scale: Tensor,
    yzp: Tensor | None = None,
) -> Tensor:
    """ONNX QLinearMatMul: the int32 product of the zero-point-shifted operands, requantized
    with ``a_scale * b_scale / y_scale`` (computed in the scales' type, per tensor)."""
    check_qlinear(ctx, [("a", a, a_scale, azp), ("b", b, b_scale, bzp)], ("y", a, y_scale, yzp))
    for s, what in ((a_scale, "a_scale"), (y_scale, "y_scale")):
        if _numel(s) != 1:
            raise ctx.fail(f"{what} of shape {shape(s)} must be a scalar (per tensor)")
    N = shape(b)[-1]
    per_col = _numel(b_scale) != 1
    if per_col and shape(b_scale) != (N,):
        raise ctx.fail(f"b_scale of shape {shape(b_scale)} must be a scalar or one per column of b ({N})")
    acc = matmul_integer(ctx, a, b, azp, bzp)
    sdt = dtype_of(a_scale)
    m = compute(
        (N,),
        lambda n: _scalar(a_scale) * cast(b_scale[n] if per_col else _scalar(b_scale), sdt)
        / cast(_scalar(y_scale), sdt),
        name=uname("qmm_mult"),
    )
    return _requantize(
        ctx, acc, lambda i: cast(m[i[-1]], "float64"), yzp, dtype_of(yzp) if yzp is not None else dtype_of(a)
    )


#: What the direct VNNI convolution stores: ``(multiplier of channel m (float32), y zero point,
#: output type)`` for a requantized result, None for the int32 sum.
Requant = tuple[Callable[[Any], E.PrimExpr], "Tensor | None", str]


def _conv_int(
    ctx: OpContext, x: Tensor, w: Tensor, xzp: Tensor | None, wzp: Tensor | None, bias: Tensor | None,
    requant: Requant | None = None,
) -> Tensor:
    """int32 convolution of ``x - x_zero_point`` with ``w - w_zero_point`` (per output channel
    allowed), plus an int32 bias; with ``requant``, that sum requantized (:func:`_requant_f32`).
    Where the target has VNNI and the weights are int8 with zero points known to be 0, the
    direct blocked convolution (:func:`_conv2d_vnni_direct`) computes it with the requantization
    in its store."""
    sx, sw = shape(x), shape(w)
    if len(sx) < 3:
        raise ctx.fail(f"input of shape {sx} must have at least 3 dimensions (N, C, spatial...)")
    if xzp is not None and _numel(xzp) != 1:
        raise ctx.fail("x_zero_point must be a scalar")
    direct = _conv2d_vnni_direct(ctx, x, w, xzp, wzp, bias, requant)
    if direct is not None:
        return direct
    xi = _minus_zp(x, (lambda i: _scalar(xzp)) if xzp is not None else None, "convi_x")
    wl: Loader | None = None
    if wzp is not None:
        n = _numel(wzp)
        if n == 1:
            wl = lambda i: _scalar(wzp)  # noqa: E731
        elif shape(wzp) == (sw[0],):
            wl = lambda i: wzp[i[0]]  # noqa: E731
        else:
            raise ctx.fail(f"w_zero_point of shape {shape(wzp)} must be a scalar or one per output channel ({sw[0]})")
    wi = _minus_zp(w, wl, "convi_w")
    nsp = len(sx) - 2
    ks = ints(ctx.attr("kernel_shape"))
    if ks and tuple(ks) != sw[2:]:
        raise ctx.fail(f"kernel_shape {ks} does not match the weights' shape {sw}")
    strides = ints(ctx.attr("strides")) or [1] * nsp
    dil = ints(ctx.attr("dilations")) or [1] * nsp
    lo, hi = conv_pads(ctx, sx[2:], sw[2:], strides, dil)
    b32 = None if bias is None else compute(shape(bias), lambda m: cast(bias[m], "int32"), name=uname("convi_b"))
    if nsp == 2 and int(ctx.attr("group", 1)) == 1 and sw[0] >= 16:
        acc = _conv2d_int_packed(ctx, x, w, xzp, wl, b32, strides, dil, lo, hi)
    else:
        acc = conv_tensor(xi, wi, b32, strides, dil, lo, hi, int(ctx.attr("group", 1)), ctx.strategy)
    if requant is None:
        return acc
    mult, yzp, odt = requant
    return compute(shape(acc), lambda *i: _requant_f32(ctx, acc[i], mult(i[1]), yzp, odt), name=uname("requant"))


def _requant_f32(ctx: OpContext, acc: E.PrimExpr, mult: E.PrimExpr, yzp: Tensor | None, odt: str) -> E.PrimExpr:
    """``saturate(rint(float32(acc) * mult) + y_zero_point)`` with ``mult`` float32, rounding half
    to even: ONNX Runtime's requantization (MLAS computes the product in float32)."""
    lo, hi = _qtype(odt, ctx)
    q = te.round(cast(acc, "float32") * mult)
    if yzp is not None:
        q = q + cast(_scalar(yzp), "float32")
    return cast(_saturate(q, lo, hi, _const_first(ctx)), odt)


def _known_zero(ctx: OpContext, index: int) -> bool:
    """Whether optional input ``index`` is absent or a constant of zeros."""
    if not ctx.has(index):
        return True
    try:
        v = ctx.value(index)
    except NeedValue:
        return False
    return v is not None and not np.asarray(v).any()


def _conv2d_vnni_direct(
    ctx: OpContext, x: Tensor, w: Tensor, xzp: Tensor | None, wzp: Tensor | None, bias: Tensor | None,
    requant: Requant | None, in_block: int = 0, blocked_out: bool = False,
) -> Tensor | None:
    """The 2-D convolution (group 1) as the direct blocked convolution on ``vpdpbusd``
    (:func:`ember.ops.vnni.conv2d_vnni_nchwc`), or None where it does not apply: a target without
    VNNI, other ranks or groups, weights that are not int8 or whose zero points are not known to
    be 0 (their term would need the patch sums of the image). The image is read as unsigned
    bytes (int8 plus 128) and padded with its shifted zero point ``cx``; ``cx`` times each output
    channel's weight sum (folded with the bias at compile time) is taken out in the store.

    ``in_block``: the image is channel-blocked ``[N, ceil(C / in_block), H, W, in_block]`` (0:
    plain NCHW); ``blocked_out``: the result is left blocked ``[N, ceil(M / lanes), OH, OW,
    lanes]`` with zero padding channels (:func:`ember.ops.vnni.conv2d_vnni_blocked`), else NCHW."""
    lanes = conv_lanes(ctx.strategy)
    sx, sw = shape(x), shape(w)
    wzp_index = 3 if ctx.op == "ConvInteger" else 5
    if (lanes == 0 or not has_vnni(ctx.strategy) or len(sx) != (5 if in_block else 4)
            or int(ctx.attr("group", 1)) != 1 or dtype_of(w) != "int8" or len(sw) != 4
            or (wzp is not None and not _known_zero(ctx, wzp_index)) or (in_block and in_block % 4)):
        return None
    M, C, KH, KW = sw
    xshape = (sx[0], C, sx[2], sx[3])
    ks = ints(ctx.attr("kernel_shape"))
    if ks and tuple(ks) != sw[2:]:
        raise ctx.fail(f"kernel_shape {ks} does not match the weights' shape {sw}")
    strides = ints(ctx.attr("strides")) or [1, 1]
    dil = ints(ctx.attr("dilations")) or [1, 1]
    lo, hi = conv_pads(ctx, xshape[2:], sw[2:], strides, dil)
    i32 = "int32"
    offx = 128 if dtype_of(x) == "int8" else 0
    cx = (cast(_scalar(xzp), i32) if xzp is not None else E.const(0, i32)) + offx
    shifted = xzp is not None or offx != 0
    terms: list[Callable[[Any], E.PrimExpr]] = []
    if bias is not None:
        terms.append(lambda m: cast(bias[m], i32))
    if shifted:
        rc, rr, rq = (te.reduce_axis((0, d), name=n) for d, n in ((C, "c"), (KH, "r"), (KW, "q")))
        wsum = compute((M,), lambda m: te.sum(cast(w[m, rc.var, rr.var, rq.var], i32), axis=[rc, rr, rq]),
                       name=uname("qconv_wsum"))
        terms.append(lambda m: E.const(0, i32) - cx * wsum[m])
    if KH == KW == 1 and not any(lo) and not any(hi) and not in_block and not blocked_out:
        # 1x1: the packed GEMM of weights x pixel panels, stored channel-major (no transposition)
        corr1 = compute((M,), lambda m: _sum_terms(terms, m), name=uname("qconv_corr"),
                        constant_layout=True) if terms else None
        mult1 = compute((M,), lambda m: cast(requant[0](m), "float32"), name=uname("qconv_mult"),
                        constant_layout=True) if requant is not None else None

        def row_epilogue(acc: E.PrimExpr, m: Any) -> E.PrimExpr:
            v = acc + corr1[m] if corr1 is not None else acc
            if requant is None or mult1 is None:
                return v
            return _requant_f32(ctx, v, mult1[m], requant[1], requant[2])

        return conv1x1_vnni(lambda n, c, i, j: cast(x[n, c, i, j], i32) + offx, xshape,
                            lambda m, c: cast(w[m, c, 0, 0], i32), M, strides, ctx.strategy, row_epilogue)
    corr = channel_block(lambda m: _sum_terms(terms, m), M, lanes, i32, "qconv_corr") if terms else None
    mult_b = channel_block(requant[0], M, lanes, "float32", "qconv_mult") if requant is not None else None

    def epilogue(acc: E.PrimExpr, mb: Any, k: Any) -> E.PrimExpr:
        v = acc + corr[mb, k] if corr is not None else acc
        if requant is None or mult_b is None:
            return v
        return _requant_f32(ctx, v, mult_b[mb, k], requant[1], requant[2])

    def x_byte(n: Any, c: Any, i: Any, j: Any) -> E.PrimExpr:
        return cast(x[n, c, i, j], i32) + offx

    def w_byte(m: Any, c: Any, r: Any, q: Any) -> E.PrimExpr:
        return cast(w[m, c, r, q], i32)

    if not in_block and not blocked_out:
        return conv2d_vnni_nchwc(x_byte, cx, xshape, w_byte, (M, C, KH, KW), strides, dil, lo, hi, lanes, epilogue,
                                 "qconv")
    xb = None
    if in_block:
        def xbb(n: Any, cb: Any, i: Any, j: Any, k: Any) -> E.PrimExpr:
            return cast(x[n, cb, i, j, k], i32) + offx

        xb = (xbb, in_block)
    return conv2d_vnni_blocked(None if in_block else x_byte, xb, cx, xshape, w_byte, (M, C, KH, KW), strides, dil,
                               lo, hi, lanes, epilogue, "qconv", zero_pad_channels=True)


def _sum_terms(terms: list[Callable[[Any], E.PrimExpr]], m: Any) -> E.PrimExpr:
    v = terms[0](m)
    for t in terms[1:]:
        v = v + t(m)
    return v


def _conv2d_int_packed(
    ctx: OpContext,
    x: Tensor,
    w: Tensor,
    xzp: Tensor | None,
    wl: Loader | None,
    b32: Tensor | None,
    strides: list[int],
    dil: list[int],
    lo: list[int],
    hi: list[int],
) -> Tensor:
    """The int32 2-D convolution (group 1) on the packed GEMM, plus the int32 bias: an im2col
    matrix ``[N, OH*OW, C*KH*KW]`` (a workspace) times the weights packed in panels (at compile
    time), as 4-byte words on ``vpdpbusd`` where the target has VNNI
    (:func:`_conv_gemm_vnni`), as int32 values otherwise (:func:`_conv_gemm_int32`)."""
    N, C, H, W = shape(x)
    M, _, KH, KW = shape(w)
    OH = (H + lo[0] + hi[0] - ((KH - 1) * dil[0] + 1)) // strides[0] + 1
    OW = (W + lo[1] + hi[1] - ((KW - 1) * dil[1] + 1)) // strides[1] + 1
    K = C * KH * KW

    def tap(p: Any, k: Any) -> tuple[Any, Any, Any]:
        """(channel, row, column) in the padded image of tap ``k`` of output pixel ``p``."""
        c, r, q = E.floordiv(k, KH * KW), E.floormod(E.floordiv(k, KW), KH), E.floormod(k, KW)
        return c, E.floordiv(p, OW) * strides[0] + r * dil[0], E.floormod(p, OW) * strides[1] + q * dil[1]

    def pixel(n: Any, c: Any, ih: Any, iw: Any) -> tuple[E.PrimExpr, E.PrimExpr]:
        """(whether ``ih, iw`` is inside the image, its value there as int32)."""
        inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        return inside, cast(x[n, c, E.max_expr(E.min_expr(ih, H - 1), 0), E.max_expr(E.min_expr(iw, W - 1), 0)],
                            "int32")

    def x_at(n: Any, p: Any, k: Any) -> tuple[E.PrimExpr, E.PrimExpr]:
        """(whether tap ``k`` of output pixel ``p`` is inside the image, its value as int32)."""
        c, ihp, iwp = tap(p, k)
        return pixel(n, c, ihp - lo[0], iwp - lo[1])

    def w_idx(k: Any, m: Any) -> tuple[Any, ...]:
        return (m, E.floordiv(k, KH * KW), E.floormod(E.floordiv(k, KW), KH), E.floormod(k, KW))

    if has_vnni(ctx.strategy):
        # the image as signed bytes, padded with its shifted zero point once: the patches then
        # read it with no bounds checks
        offx = _byte_offsets(w, x)[1]
        pad = (cast(_scalar(xzp), "int32") if xzp is not None else E.const(0, "int32")) - offx

        def padded(n: Any, c: Any, i: Any, j: Any) -> E.PrimExpr:
            inside, v = pixel(n, c, i - lo[0], j - lo[1])
            return cast(te.if_then_else(inside, v - offx, pad), "int8")

        xp = compute((N, C, H + lo[0] + hi[0], W + lo[1] + hi[1]), padded, name=uname("qconv_xpad"),
                     materialize=True, workspace=True)

        def xs_at(n: Any, p: Any, k: Any) -> E.PrimExpr:
            return cast(xp[(n, *tap(p, k))], "int32")

        acc = _conv_gemm_vnni(ctx, w, wl, xs_at, pad, xzp is not None or offx != 0, w_idx, N, OH * OW, K, M)
    else:
        acc = _conv_gemm_int32(ctx, x_at, w, xzp, wl, w_idx, N, OH * OW, K, M)

    def out(n: Any, m: Any, oh: Any, ow: Any) -> E.PrimExpr:
        v = acc[n, oh * OW + ow, m]
        return v + b32[m] if b32 is not None else v

    return compute((N, M, OH, OW), out, name=uname("qconv"))


PatchAt = Callable[[Any, Any, Any], tuple[E.PrimExpr, E.PrimExpr]]
WeightIndex = Callable[[Any, Any], tuple[Any, ...]]


def _conv_gemm_int32(
    ctx: OpContext, x_at: PatchAt, w: Tensor, xzp: Tensor | None, wl: Loader | None, w_idx: WeightIndex,
    N: int, P: int, K: int, M: int,
) -> Tensor:
    """``[N, P, M]``: the image minus its zero point as an int32 im2col workspace (padding reads
    0, the zero point shifted away) times the weights minus theirs as int32 panels."""
    zero = E.const(0, "int32")

    def patch(n: Any, p: Any, k: Any) -> E.PrimExpr:
        inside, v = x_at(n, p, k)
        if xzp is not None:
            v = v - cast(_scalar(xzp), "int32")
        return te.if_then_else(inside, v, zero)

    cols = compute((N, P, K), patch, name=uname("qconv_im2col"), materialize=True, workspace=True)

    def b_at(k: Any, m: Any) -> E.PrimExpr:
        v = cast(w[w_idx(k, m)], "int32")
        return v - cast(wl(w_idx(k, m)), "int32") if wl is not None else v

    return packed_product(lambda li, p, k: cols[li[0], p, k], b_at, (N,), P, K, M, "int32", ctx.strategy, "qconv")


def _conv_gemm_vnni(
    ctx: OpContext, w: Tensor, wl: Loader | None, xs_at: Callable[[Any, Any, Any], E.PrimExpr], pad: E.PrimExpr,
    shifted: bool, w_idx: WeightIndex, N: int, P: int, K: int, M: int,
) -> Tensor:
    """``[N, P, M]`` on VNNI (:func:`ember.ops.vnni.vnni_product`) as the product ``[M, N * P]``
    of the weights (unsigned bytes, broadcast) with the image's patches packed in panels of
    pixels (``xs_at(n, p, k)``: signed bytes of the image padded with ``pad``, its shifted zero
    point, which ``shifted`` says is not 0): the panels' pixels are contiguous in the image and
    the product's rows are the output's channels, so neither the packing nor the output is a
    transposition."""
    offw = 128 if dtype_of(w) == "int8" else 0
    i32 = "int32"

    def au(li: tuple[Any, ...], m: Any, k: Any) -> E.PrimExpr:
        return cast(w[w_idx(k, m)], i32) + offw

    def bs(k: Any, col: Any) -> E.PrimExpr:
        return xs_at(E.floordiv(col, P), E.floormod(col, P), k)

    def ca(li: tuple[Any, ...], m: Any) -> E.PrimExpr:
        z = cast(wl((m, 0, 0, 0)), i32) if wl is not None else E.const(0, i32)
        return z + offw

    d = vnni_product(au, bs, ca if wl is not None or offw else None, (lambda col: pad) if shifted else None,
                     (), M, K, N * P, ctx.strategy, "qconv_vnni")
    return compute((N, P, M), lambda n, p, m: d[m, n * P + p], name=uname("qconv_vnni_t"))


@register("ConvInteger", pattern="reduce")
def conv_integer(ctx: OpContext, x: Tensor, w: Tensor, xzp: Tensor | None = None, wzp: Tensor | None = None) -> Tensor:
    """ONNX ConvInteger: int32 convolution of the zero-point-shifted operands."""
    _check_int8(ctx, x, w, xzp, wzp)
    for zp, t, what in ((xzp, x, "x_zero_point"), (wzp, w, "w_zero_point")):
        if zp is not None and dtype_of(zp) != dtype_of(t):
            raise ctx.fail(f"{what} has type {dtype_of(zp)} but its operand is {dtype_of(t)}: they must be the same")
    return _conv_int(ctx, x, w, xzp, wzp, None)


def _qconv_requant(
    ctx: OpContext, x: Tensor, x_scale: Tensor, xzp: Tensor, w: Tensor, w_scale: Tensor, wzp: Tensor,
    y_scale: Tensor, yzp: Tensor | None, bias: Tensor | None,
) -> Requant:
    """QLinearConv's parameter checks (an error naming the node) and its requantization:
    ``x_scale * w_scale / y_scale`` in float32 per output channel, the y zero point, the output
    type."""
    check_qlinear(ctx, [("x", x, x_scale, xzp), ("w", w, w_scale, wzp)], ("y", x, y_scale, yzp))
    for sc, what in ((x_scale, "x_scale"), (y_scale, "y_scale")):
        if _numel(sc) != 1:
            raise ctx.fail(f"{what} of shape {shape(sc)} must be a scalar (per tensor)")
    if bias is not None and dtype_of(bias) != "int32":
        raise ctx.fail(f"the bias has type {dtype_of(bias)}; QLinearConv's bias is int32")
    M = shape(w)[0]
    ws = shape(w_scale)
    per_ch = _numel(w_scale) != 1
    if per_ch and ws != (M,):
        raise ctx.fail(f"w_scale of shape {ws} must be a scalar or one per output channel ({M})")
    f32 = "float32"

    def mult(m: Any) -> E.PrimExpr:
        # ONNX Runtime: x_scale * w_scale / y_scale in float32
        wsv = w_scale[m] if per_ch else _scalar(w_scale)
        return cast(_scalar(x_scale), f32) * cast(wsv, f32) / cast(_scalar(y_scale), f32)

    return mult, yzp, dtype_of(yzp) if yzp is not None else dtype_of(x)


@register("QLinearConv", pattern="reduce")
def qlinear_conv(
    ctx: OpContext,
    x: Tensor,
    x_scale: Tensor,
    xzp: Tensor,
    w: Tensor,
    w_scale: Tensor,
    wzp: Tensor,
    y_scale: Tensor,
    yzp: Tensor | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """ONNX QLinearConv: the int32 convolution (plus int32 bias) requantized with
    ``x_scale * w_scale / y_scale`` (``w_scale`` per tensor or per output channel)."""
    requant = _qconv_requant(ctx, x, x_scale, xzp, w, w_scale, wzp, y_scale, yzp, bias)
    return _conv_int(ctx, x, w, xzp, wzp, bias, requant)


#: QLinearConv on channel-blocked uint8/int8 tensors (:func:`qlinear_conv_nchwc`), what the CPU
#: layout policy puts in place of a QLinearConv on a VNNI target (:func:`qconv_layouts`).
QCONV_NCHWC = "ember.QLinearConvNCHWc"


@register(QCONV_NCHWC, pattern="heavy")
def qlinear_conv_nchwc(
    ctx: OpContext,
    x: Tensor,
    x_scale: Tensor,
    xzp: Tensor,
    w: Tensor,
    w_scale: Tensor,
    wzp: Tensor,
    y_scale: Tensor,
    yzp: Tensor | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """``ember.QLinearConvNCHWc``: ONNX QLinearConv (2-D, group 1; the same inputs and attributes)
    reading X blocked ``[N, ceil(C / b), H, W, b]`` (``b`` a multiple of 4) or plain ``[N, C, H,
    W]``, and writing Y blocked ``[N, ceil(M / block), OH, OW, block]`` (attribute ``block``),
    its padding channels zero. On VNNI with int8 weights whose zero points are 0 it is the direct
    convolution of :func:`ember.ops.vnni.conv2d_vnni_blocked`, reading the blocked bytes where
    they lie and storing the requantized block as it is (no transposition on either side); any
    other case computes QLinearConv on the plain tensors and blocks the result. A product
    ("heavy"): it takes epilogues only, never its producer inlined (a layout transform inlined
    into the blocked reads of the image would gather every word byte by byte: 7x slower)."""
    requant = _qconv_requant(ctx, x, x_scale, xzp, w, w_scale, wzp, y_scale, yzp, bias)
    sx, sw = shape(x), shape(w)
    block = int(ctx.attr("block", 0))
    if len(sw) != 4 or len(sx) not in (4, 5) or block < 1:
        raise ctx.fail(f"X {sx} must be [N, C, H, W] or blocked [N, CB, H, W, b], W {sw} [M, C, KH, KW], "
                       f"and the attribute block >= 1 (got {block})")
    M, C = sw[0], sw[1]
    in_block = sx[4] if len(sx) == 5 else 0
    if in_block and sx[1] != -(-C // in_block):
        raise ctx.fail(f"X {sx} holds {sx[1]} blocks of {in_block} channels; the weights {sw} read {C} channels")
    if not in_block and sx[1] != C:
        raise ctx.fail(f"X {sx} has {sx[1]} channels; the weights {sw} read {C}")
    if block == conv_lanes(ctx.strategy):
        direct = _conv2d_vnni_direct(ctx, x, w, xzp, wzp, bias, requant, in_block, blocked_out=True)
        if direct is not None:
            return direct
    xp = x
    if in_block:
        xp = compute((sx[0], C, sx[2], sx[3]), lambda n, c, i, j: x[n, E.floordiv(c, in_block), i, j,
                                                                   E.floormod(c, in_block)], name=uname("qconv_x"))
    y = _conv_int(ctx, xp, w, xzp, wzp, bias, requant)
    sy = shape(y)
    zero = E.const(0, dtype_of(y))

    def blocked(n: Any, o: Any, i: Any, j: Any, k: Any) -> E.PrimExpr:
        m = o * block + k
        return te.if_then_else(m < M, y[n, E.min_expr(m, M - 1), i, j], zero)

    return compute((sy[0], -(-M // block), sy[2], sy[3], block), blocked, name=uname("qconv_blocked"))


def qconv_layouts(site: Any, block: int) -> Any:
    """Where the CPU layout policy (:class:`ember.strategy.cpu_layout.CPULayoutPolicy`) runs an
    int8 node on a target whose ``vpdpbusd`` has ``block`` int32 lanes (0: none, nothing is
    placed): a 2-D ``QLinearConv`` (group 1, constant int8 weights, uint8/int8 activations) as
    ``ember.QLinearConvNCHWc`` writing ``NCHW{block}c`` and reading it (plain NCHW where the
    input has fewer than ``block`` channels and not a multiple of 4 of them: an image's 3), and an
    ``ember.IntMaxPool`` as ``ember.MaxPoolNCHWc`` and a ``QLinearGlobalAveragePool`` (NCHW) as
    ``ember.QLinearGlobalAveragePoolNCHWc`` on ``NCHW{block}c``, so the activations of an int8
    network stay blocked from convolution to convolution and into its pooled head (a residual
    ``QLinearAdd`` between them runs blocked too, as a layout-agnostic node). A ``NodeLayouts``,
    or None."""
    from .conv_nchwc import MAXPOOL_NCHWC
    from .layout_transform import NodeLayouts, ValueLayout

    if block < 4:
        return None
    vl = ValueLayout.of("NCHW", f"NCHW{block}c")
    if site.op == "com.microsoft.QLinearGlobalAveragePool":
        x = site.inputs[0] if site.inputs else None
        if (x is None or len(x.shape) != 4 or x.dtype not in ("uint8", "int8") or len(site.outputs) != 1
                or int(site.attrs.get("channels_last", 0))):
            return None
        return NodeLayouts([vl] + [None] * (len(site.inputs) - 1), [vl], op=QGAP_NCHWC,
                           attrs={"channels": x.shape[1]})
    if site.op == INT_MAXPOOL:
        x = site.inputs[0] if site.inputs else None
        if x is None or len(x.shape) != 4 or x.dtype not in ("uint8", "int8") or len(site.outputs) != 1:
            return None
        return NodeLayouts([vl], [vl], op=MAXPOOL_NCHWC, attrs=dict(site.attrs))
    if site.op != "QLinearConv" or len(site.inputs) < 8 or len(site.outputs) != 1:
        return None
    x, w = site.inputs[0], site.inputs[3]
    y = site.outputs[0]
    if (x is None or w is None or not w.constant or w.dtype != "int8" or len(x.shape) != 4 or len(w.shape) != 4
            or x.dtype not in ("uint8", "int8") or y.dtype not in ("uint8", "int8") or len(y.shape) != 4
            or int(site.attrs.get("group", 1)) != 1):
        return None
    c = x.shape[1]
    xin = vl if c % block == 0 or (c > block and c % 4 == 0) else None
    ins = [xin] + [None] * (len(site.inputs) - 1)
    return NodeLayouts(ins, [vl], op=QCONV_NCHWC, attrs=dict(site.attrs, block=block))


# -- com.microsoft quantized operators (what onnxruntime.quantization writes in QOperator format) --
def _quantize_f32(ctx: OpContext, v: E.PrimExpr, y_scale: Tensor, yzp: Tensor | None, odt: str) -> E.PrimExpr:
    """``saturate(rint(v / y_scale) + y_zero_point)`` in float32, as ONNX Runtime's kernels do."""
    lo, hi = _qtype(odt, ctx)
    q = te.round(v / cast(_scalar(y_scale), "float32"))
    if yzp is not None:
        q = q + cast(_scalar(yzp), "float32")
    return cast(_saturate(q, lo, hi, _const_first(ctx)), odt)


def _per_tensor(ctx: OpContext, **params: Tensor | None) -> None:
    for what, t in params.items():
        if t is not None and _numel(t) != 1:
            raise ctx.fail(f"{what} of shape {shape(t)} must be a scalar (per tensor)")


#: One quantized value of a QLinear operator: (its name, the tensor, its scale, its zero point).
#: For an output, the tensor is the value whose type the output has when it has no zero point.
QValue = tuple[str, Tensor, "Tensor | None", "Tensor | None"]


def check_qlinear(
    ctx: OpContext, inputs: Sequence[QValue], y: QValue | None = None, per_tensor: Sequence[str] = (),
    y_optional: bool = False,
) -> None:
    """The parameter checks every QLinear operator makes (an error naming the node otherwise):
    inputs and zero points int8/uint8; each input's scale present and a float, its zero point of
    the input's type (:func:`check_qparams`); the output ``y``'s scale likewise (unless
    ``y_optional`` and absent: a float output); the values named in ``per_tensor`` with a scalar
    scale and zero point."""
    _check_int8(ctx, *(t for _, v, _, z in inputs for t in (v, z)), *((y[3],) if y is not None else ()))
    for what, v, sc, zp in inputs:
        check_qparams(ctx, what, v, sc, zp)
    if y is not None and (y[2] is not None or not y_optional):
        check_qparams(ctx, y[0], y[3] if y[3] is not None else y[1], y[2], None)
    for what, _, sc, zp in (*inputs, *((y,) if y is not None else ())):
        if what in per_tensor:
            _per_tensor(ctx, **{f"{what}_scale": sc, f"{what}_zero_point": zp})


@register("com.microsoft.QLinearAdd")
def qlinear_add(
    ctx: OpContext,
    a: Tensor,
    a_scale: Tensor,
    azp: Tensor | None,
    b: Tensor,
    b_scale: Tensor,
    bzp: Tensor | None,
    c_scale: Tensor,
    czp: Tensor | None = None,
) -> Tensor:
    """com.microsoft QLinearAdd: ``quantize(dequantize(a) + dequantize(b))`` with broadcasting,
    per-tensor scales, in float32 as ONNX Runtime's vectorized kernel (MLAS, AVX2) computes it:
    the scale ratios ``ra = a_scale / c_scale`` and ``rb = b_scale / c_scale`` and the fixed part
    ``f = c_zp - (ra * a_zp + rb * b_zp)`` once, then per element ``fma(a, ra, fma(b, rb, f))``
    rounded half to even and saturated (two fused multiply-adds instead of a division)."""
    check_qlinear(ctx, [("a", a, a_scale, azp), ("b", b, b_scale, bzp)], ("c", a, c_scale, czp),
                  per_tensor=("a", "b", "c"))
    out = broadcast_shapes(shape(a), shape(b))
    odt = dtype_of(czp) if czp is not None else dtype_of(a)

    f32 = "float32"
    lo, hi = _qtype(odt, ctx)

    def zero_point(z: Tensor | None) -> E.PrimExpr:
        return cast(_scalar(z), f32) if z is not None else E.const(0.0, f32)

    def body(*i: Any) -> E.PrimExpr:
        sc = cast(_scalar(c_scale), f32)
        ra, rb = cast(_scalar(a_scale), f32) / sc, cast(_scalar(b_scale), f32) / sc
        fixed = zero_point(czp) - (ra * zero_point(azp) + rb * zero_point(bzp))
        # float adds and products carry LLVM's "contract": these are the two FMAs of MLAS
        v = cast(bcast_load(a, out, i), f32) * ra + (cast(bcast_load(b, out, i), f32) * rb + fixed)
        return cast(_saturate(te.round(v), lo, hi, _const_first(ctx)), odt)

    return compute(out, body, name=uname("qadd"))


@register("com.microsoft.QLinearGlobalAveragePool", pattern="reduce")
def qlinear_global_average_pool(
    ctx: OpContext, x: Tensor, x_scale: Tensor, xzp: Tensor | None, y_scale: Tensor, yzp: Tensor | None = None
) -> Tensor:
    """com.microsoft QLinearGlobalAveragePool (NCHW, or NHWC with ``channels_last``): the mean of
    ``x - x_zero_point`` over the spatial axes, scaled by ``x_scale / y_scale``, plus
    ``y_zero_point``."""
    check_qlinear(ctx, [("x", x, x_scale, xzp)], ("y", x, y_scale, yzp), per_tensor=("x", "y"))
    xs = shape(x)
    if len(xs) < 3:
        raise ctx.fail(f"input of shape {xs} must have at least 3 dimensions")
    last = int(ctx.attr("channels_last", 0))
    sp = list(range(1, len(xs) - 1)) if last else list(range(2, len(xs)))
    n = int(np.prod([xs[d] for d in sp]))
    axes = [te.reduce_axis((0, xs[d]), name=f"r{d}") for d in sp]
    out = tuple(1 if d in sp else xs[d] for d in range(len(xs)))

    def total(*i: Any) -> E.PrimExpr:
        idx = list(i)
        for d, r in zip(sp, axes):
            idx[d] = r.var
        v = cast(x[tuple(idx)], "int32")
        if xzp is not None:
            v = v - cast(_scalar(xzp), "int32")
        return te.sum(v, axis=axes)

    acc = compute(out, total, name=uname("qgap_sum"))
    odt = dtype_of(yzp) if yzp is not None else dtype_of(x)
    mult = cast(_scalar(x_scale), "float32") / cast(n, "float32")
    return compute(out, lambda *i: _quantize_f32(ctx, cast(acc[i], "float32") * mult, y_scale, yzp, odt),
                   name=uname("qgap"))


#: QLinearGlobalAveragePool of a channel-blocked image (:func:`qlinear_global_average_pool_nchwc`).
QGAP_NCHWC = "ember.QLinearGlobalAveragePoolNCHWc"


@register(QGAP_NCHWC, pattern="reduce")
def qlinear_global_average_pool_nchwc(
    ctx: OpContext, x: Tensor, x_scale: Tensor, xzp: Tensor | None, y_scale: Tensor, yzp: Tensor | None = None
) -> Tensor:
    """``ember.QLinearGlobalAveragePoolNCHWc``: com.microsoft QLinearGlobalAveragePool (NCHW) of X
    blocked ``[N, CB, H, W, b]``, Y blocked ``[N, CB, 1, 1, b]``: the same sums and quantization
    as :func:`qlinear_global_average_pool`, the channels past attribute ``channels`` zero (the
    invariant of a blocked tensor), so a network's last convolution stores blocked and only the
    pooled vector is converted back."""
    check_qlinear(ctx, [("x", x, x_scale, xzp)], ("y", x, y_scale, yzp), per_tensor=("x", "y"))
    xs = shape(x)
    channels = int(ctx.attr("channels", 0))
    if len(xs) != 5 or not (xs[1] - 1) * xs[4] < channels <= xs[1] * xs[4]:
        raise ctx.fail(f"X {xs} must be a blocked image [N, CB, H, W, b] holding the {channels} channels of "
                       "attribute channels")
    rh, rw = te.reduce_axis((0, xs[2]), name="rh"), te.reduce_axis((0, xs[3]), name="rw")

    def total(n: Any, cb: Any, i: Any, j: Any, k: Any) -> E.PrimExpr:
        v = cast(x[n, cb, rh.var, rw.var, k], "int32")
        if xzp is not None:
            v = v - cast(_scalar(xzp), "int32")
        return te.sum(v, axis=[rh, rw])

    acc = compute((xs[0], xs[1], 1, 1, xs[4]), total, name=uname("qgap_sum_nchwc"))
    odt = dtype_of(yzp) if yzp is not None else dtype_of(x)
    mult = cast(_scalar(x_scale), "float32") / cast(xs[2] * xs[3], "float32")

    def body(n: Any, cb: Any, i: Any, j: Any, k: Any) -> E.PrimExpr:
        q = _quantize_f32(ctx, cast(acc[n, cb, i, j, k], "float32") * mult, y_scale, yzp, odt)
        if channels % xs[4]:
            q = te.if_then_else(cb * xs[4] + k < channels, q, E.const(0, odt))
        return q

    return compute(shape(acc), body, name=uname("qgap_nchwc"))


@register("com.microsoft.QGemm", pattern="heavy")
def qgemm(
    ctx: OpContext,
    a: Tensor,
    a_scale: Tensor,
    azp: Tensor | None,
    b: Tensor,
    b_scale: Tensor,
    bzp: Tensor | None,
    c: Tensor | None = None,
    y_scale: Tensor | None = None,
    yzp: Tensor | None = None,
) -> Tensor:
    """com.microsoft QGemm: ``alpha * (A - a_zp) (B - b_zp) * a_scale * b_scale`` (``b_scale``,
    ``b_zero_point`` per tensor or per output column) plus the int32 bias ``C`` at scale
    ``a_scale * b_scale``; float32, or quantized with ``y_scale``/``y_zero_point``. On the packed
    integer GEMM."""
    check_qlinear(ctx, [("a", a, a_scale, azp), ("b", b, b_scale, bzp)], ("y", a, y_scale, yzp),
                  per_tensor=("a", "y"), y_optional=True)
    ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    alpha = float(ctx.attr("alpha", 1.0))
    sa, sb = shape(a), shape(b)
    if len(sa) != 2 or len(sb) != 2:
        raise ctx.fail(f"A {sa} and B {sb} must be matrices")
    M, K = (sa[1], sa[0]) if ta else sa
    K2, N = (sb[1], sb[0]) if tb else sb
    if K != K2:
        raise ctx.fail(f"A {sa} and B {sb} (transA={ta}, transB={tb}) differ in the inner dimension")
    for what, t in (("b_scale", b_scale), ("b_zero_point", bzp)):
        if t is not None and _numel(t) != 1 and shape(t) != (N,):
            raise ctx.fail(f"{what} of shape {shape(t)} must be a scalar or one per output column ({N})")
    if c is not None and dtype_of(c) != "int32":
        raise ctx.fail(f"C has type {dtype_of(c)}; QGemm's bias is int32")

    def col(t: Tensor, n: Any) -> E.PrimExpr:
        return t[n] if _numel(t) != 1 else _scalar(t)

    def a_el(m: Any, kk: Any) -> E.PrimExpr:
        return cast(a[kk, m] if ta else a[m, kk], "int32")

    def b_el(kk: Any, n: Any) -> E.PrimExpr:
        return cast(b[n, kk] if tb else b[kk, n], "int32")

    if has_vnni(ctx.strategy):
        offa, offb = _byte_offsets(a, b)
        i32 = "int32"
        ca_val = (cast(_scalar(azp), i32) if azp is not None else E.const(0, i32)) + offa
        acc = vnni_product(
            lambda li, m, kk: a_el(m, kk) + offa, lambda kk, n: b_el(kk, n) - offb,
            (lambda li, m: ca_val) if azp is not None or offa else None,
            (lambda n: (cast(col(bzp, n), i32) if bzp is not None else E.const(0, i32)) - offb)
            if bzp is not None or offb else None,
            (), M, K, N, ctx.strategy, "qgemm_vnni")
    else:
        a32 = wide_copy(a, lambda *i: cast(a[i], "int32") - (cast(_scalar(azp), "int32") if azp is not None else 0),
                        "qgemm_a")

        def b_at(kk: Any, n: Any) -> E.PrimExpr:
            v = b_el(kk, n)
            return v - cast(col(bzp, n), "int32") if bzp is not None else v

        acc = packed_product(lambda li, m, kk: a32[kk, m] if ta else a32[m, kk], b_at, (), M, K, N, "int32",
                             ctx.strategy, "qgemm")
    out = (M, N)

    def body(m: Any, n: Any) -> E.PrimExpr:
        v = acc[m, n]
        if c is not None:
            v = v + bcast_load(c, out, (m, n))
        f = cast(v, "float32") * (cast(_scalar(a_scale), "float32") * cast(col(b_scale, n), "float32")
                                  * E.const(alpha, "float32"))
        if y_scale is None:
            return f
        return _quantize_f32(ctx, f, y_scale, yzp, dtype_of(yzp) if yzp is not None else dtype_of(a))

    return compute(out, body, name=uname("qgemm"))


#: The integer 2-D max pool that :class:`ember.graph.qdq_fusion.FuseQDQ` puts in place of a
#: ``MaxPool`` of quantized values.
INT_MAXPOOL = "ember.IntMaxPool"


@register(INT_MAXPOOL, pattern="opaque")
def int_maxpool(ctx: OpContext, x: Tensor) -> Tensor:
    """``ember.IntMaxPool``: ONNX ``MaxPool`` (2-D, ``ceil_mode`` 0, no indices; ``pads`` or
    ``auto_pad``, strides, dilations) of an int8/uint8 NCHW tensor, computed as the maximum of
    the taps written out (no reduction loop) over a copy of the image padded with the type's
    minimum: the output rows are plain loops the compiler vectorizes (ember's ``MaxPool`` runs a
    guarded scalar reduction per output element)."""
    _check_int8(ctx, x)
    sx = shape(x)
    ks = ints(ctx.attr("kernel_shape"))
    if len(sx) != 4 or len(ks) != 2 or int(ctx.attr("ceil_mode", 0)):
        raise ctx.fail(f"input {sx}, kernel_shape {ks}, ceil_mode {ctx.attr('ceil_mode', 0)}: "
                       "ember.IntMaxPool takes 2-D pools without ceil_mode")
    strides = ints(ctx.attr("strides")) or [1, 1]
    dil = ints(ctx.attr("dilations")) or [1, 1]
    lo, hi = conv_pads(ctx, sx[2:], (ks[0], ks[1]), strides, dil)
    N, C, H, W = sx
    OH = (H + lo[0] + hi[0] - ((ks[0] - 1) * dil[0] + 1)) // strides[0] + 1
    OW = (W + lo[1] + hi[1] - ((ks[1] - 1) * dil[1] + 1)) // strides[1] + 1
    dt = dtype_of(x)
    bottom = E.const(_RANGES[dt][0], dt)

    def padded(n: Any, c: Any, i: Any, j: Any) -> E.PrimExpr:
        ih, iw = i - lo[0], j - lo[1]
        inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        return te.if_then_else(inside, x[n, c, E.max_expr(E.min_expr(ih, H - 1), 0),
                                         E.max_expr(E.min_expr(iw, W - 1), 0)], bottom)

    xp = x
    if any(lo) or any(hi):
        xp = compute((N, C, H + lo[0] + hi[0], W + lo[1] + hi[1]), padded, name=uname("imaxpool_pad"),
                     materialize=True, workspace=True)

    def body(n: Any, c: Any, i: Any, j: Any) -> E.PrimExpr:
        v: E.PrimExpr | None = None
        for r in range(ks[0]):
            for q in range(ks[1]):
                t = xp[n, c, i * strides[0] + r * dil[0], j * strides[1] + q * dil[1]]
                v = t if v is None else E.max_expr(v, t)
        assert v is not None
        return v

    return compute((N, C, OH, OW), body, name=uname("imaxpool"))
