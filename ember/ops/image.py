"""Image and spatial operators: ``GridSample``, ``AffineGrid``, ``Col2Im``, ``MaxUnpool`` and
``RoiAlign``.

Sizes given as inputs (AffineGrid's ``size``, Col2Im's ``image_shape`` and ``block_shape``,
MaxUnpool's ``output_shape``) must be known when the model is compiled: constants, or inputs
whose values ember binds before compiling (it then compiles the model for those values).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import product
from typing import Any

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import cast, compute, const_like, dtype_of, ints, shape, uname


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _f64(v: float) -> E.PrimExpr:
    return E.const(float(v), "float64")


# -- GridSample ---------------------------------------------------------------------------------------
def _reflect(x: E.PrimExpr, lo: float, hi: float) -> E.PrimExpr:
    """Reflect ``x`` (float64) at the borders ``lo`` and ``hi`` until it lies between them."""
    rng = _f64(hi - lo)
    if hi - lo <= 0:
        return te.if_then_else(x < _f64(lo), _f64(lo), te.if_then_else(x > _f64(hi), _f64(hi), x))

    def fold(dx: E.PrimExpr, near: float, far: float, sign: float) -> E.PrimExpr:
        n = te.trunc(dx / rng)
        r = dx - n * rng
        even = te.fmod(n, _f64(2.0)) == _f64(0.0)
        return te.if_then_else(even, _f64(near) + _f64(sign) * r, _f64(far) - _f64(sign) * r)

    below = fold(_f64(lo) - x, lo, hi, 1.0)
    above = fold(x - _f64(hi), hi, lo, -1.0)
    return te.if_then_else(x < _f64(lo), below, te.if_then_else(x > _f64(hi), above, x))


def _cubic_coeffs(t: E.PrimExpr) -> list[E.PrimExpr]:
    """Keys' cubic convolution weights (alpha = -0.75) of the four taps around ``t`` in [0, 1)."""
    a = _f64(-0.75)
    one, two = _f64(1.0), _f64(2.0)

    def far(x: E.PrimExpr) -> E.PrimExpr:
        return ((a * x - _f64(5.0) * a) * x + _f64(8.0) * a) * x - _f64(4.0) * a

    def near(x: E.PrimExpr) -> E.PrimExpr:
        return ((a + two) * x - (a + _f64(3.0))) * x * x + one

    return [far(t + one), near(t), near(one - t), far(two - t)]


@register("GridSample")
def grid_sample(ctx: OpContext, x: Tensor, grid: Tensor) -> Tensor:
    """ONNX GridSample (2-D and 3-D): ``mode`` nearest/linear/cubic (bilinear/bicubic in opset
    16), ``padding_mode`` zeros/border/reflection, ``align_corners``."""
    sx, sg = shape(x), shape(grid)
    nsp = len(sx) - 2
    if nsp < 1 or len(sg) != nsp + 2 or sg[-1] != nsp or sg[0] != sx[0]:
        raise ctx.fail(f"grid of shape {sg} does not fit input {sx}: it must be (N, out..., {nsp})")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(
        _s(ctx.attr("mode", "linear")), _s(ctx.attr("mode", "linear"))
    )
    pad = _s(ctx.attr("padding_mode", "zeros"))
    align = int(ctx.attr("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.fail(f"mode {mode!r} is not one of nearest, linear, cubic")
    if pad not in ("zeros", "border", "reflection"):
        raise ctx.fail(f"padding_mode {pad!r} is not one of zeros, border, reflection")
    dims = sx[2:]
    gdt = dtype_of(grid)
    dt = dtype_of(x)
    borders = [(0.0, d - 1.0) if align else (-0.5, d - 0.5) for d in dims]

    def coord(n: Any, o: Sequence[Any], i: int) -> E.PrimExpr:
        """Input coordinate along spatial dim ``i`` (float64), after border handling."""
        g = grid[(n, *o, nsp - 1 - i)]
        L = dims[i]
        one = E.const(1.0, gdt)
        if align:
            v = (g + one) / E.const(2.0, gdt) * E.const(float(L - 1), gdt)
        else:
            v = ((g + one) * E.const(float(L), gdt) - one) / E.const(2.0, gdt)
        v = cast(v, "float64")
        if mode == "nearest":
            v = te.round(v)
        lo, hi = borders[i]
        out = (v < _f64(lo)) | (v > _f64(hi))
        if pad == "border":
            v = te.if_then_else(out, E.min_expr(E.max_expr(v, _f64(0.0)), _f64(L - 1.0)), v)
        elif pad == "reflection":
            v = te.if_then_else(out, _reflect(v, lo, hi), v)
        return v

    def index(i: int, k: E.PrimExpr) -> tuple[E.PrimExpr, E.PrimExpr | None]:
        """(index to read, validity) of integer position ``k`` along dim ``i``."""
        L = dims[i]
        if pad == "zeros":
            return k, (k >= 0) & (k < L)
        if pad == "border":
            return E.min_expr(E.max_expr(k, E.const(0, "int32")), E.const(L - 1, "int32")), None
        lo, hi = borders[i]
        r = cast(_reflect(cast(k, "float64"), lo, hi), "int32")
        # Reflection of an index can still land on -0.5 < r < 0 (truncated to 0) or L - 0.5.
        return E.min_expr(E.max_expr(r, E.const(0, "int32")), E.const(L - 1, "int32")), None

    def pixel(n: Any, c: Any, ks: Sequence[E.PrimExpr]) -> E.PrimExpr:
        idx, ok = [], None
        for i, k in enumerate(ks):
            j, v = index(i, k)
            idx.append(j)
            if v is not None:
                ok = v if ok is None else ok & v
        val = cast(x[(n, c, *idx)], "float64")
        return val if ok is None else te.if_then_else(ok, val, _f64(0.0))

    def body(n: Any, c: Any, *o: Any) -> E.PrimExpr:
        cs = [coord(n, o, i) for i in range(nsp)]
        if mode == "nearest":
            return cast(pixel(n, c, [cast(v, "int32") for v in cs]), dt)
        base = [cast(te.floor(v), "int32") for v in cs]
        frac = [v - te.floor(v) for v in cs]
        if mode == "linear":
            taps = [[(0, _f64(1.0) - t), (1, t)] for t in frac]
        else:
            taps = [list(zip((-1, 0, 1, 2), _cubic_coeffs(t))) for t in frac]
        acc: E.PrimExpr | None = None
        for combo in product(*taps):
            w = combo[0][1]
            for _, wk in combo[1:]:
                w = w * wk
            term = w * pixel(n, c, [b + E.const(off, "int32") for b, (off, _) in zip(base, combo)])
            acc = term if acc is None else acc + term
        assert acc is not None
        return cast(acc, dt)

    return compute((sx[0], sx[1], *sg[1:-1]), body, name=uname("grid_sample"))


# -- AffineGrid ---------------------------------------------------------------------------------------
@register("AffineGrid")
def affine_grid(ctx: OpContext, theta: Tensor, size: Tensor) -> Tensor:
    """ONNX AffineGrid: the sampling grid ``theta @ [x, y, (z,) 1]`` over a normalized base grid
    of ``size`` (N, C, H, W) or (N, C, D, H, W)."""
    sz = ints(ctx.value(1))
    st = shape(theta)
    nsp = len(sz) - 2
    if nsp not in (2, 3) or st != (sz[0], nsp, nsp + 1):
        raise ctx.fail(
            f"theta of shape {st} and size {sz} do not match: want (N, 2, 3) and 4 sizes, or (N, 3, 4) and 5"
        )
    align = int(ctx.attr("align_corners", 0))
    dims = sz[2:]
    dt = dtype_of(theta)

    def base(i: int, k: Any) -> E.PrimExpr:
        """Normalized coordinate of position ``k`` along spatial dim ``i`` (float64)."""
        L = dims[i]
        kf = cast(k, "float64")
        if align:
            return _f64(-1.0) + kf * _f64(2.0 / (L - 1)) if L > 1 else _f64(-1.0)
        return _f64(-1.0 + 1.0 / L) + kf * _f64(2.0 / L)

    def body(n: Any, *rest: Any) -> E.PrimExpr:
        o, j = rest[:-1], rest[-1]
        # the base vector is (x, y[, z], 1): x runs along the last spatial dim
        acc = cast(theta[n, j, nsp], "float64")
        for q in range(nsp):
            acc = acc + cast(theta[n, j, q], "float64") * base(nsp - 1 - q, o[nsp - 1 - q])
        return cast(acc, dt)

    return compute((sz[0], *dims, nsp), body, name=uname("affine_grid"))


# -- Col2Im ---------------------------------------------------------------------------------------------
@register("Col2Im", pattern="reduce")
def col2im(ctx: OpContext, x: Tensor, image_shape: Tensor, block_shape: Tensor) -> Tensor:
    """ONNX Col2Im: sum the sliding blocks (columns) of ``x`` back into an image of
    ``image_shape`` (``dilations``, ``pads``, ``strides``)."""
    img, blk = ints(ctx.value(1)), ints(ctx.value(2))
    nsp = len(img)
    sx = shape(x)
    if len(blk) != nsp or len(sx) != 3:
        raise ctx.fail(f"input {sx}, image_shape {img} and block_shape {blk} do not match")
    dil = ints(ctx.attr("dilations")) or [1] * nsp
    strides = ints(ctx.attr("strides")) or [1] * nsp
    pads = ints(ctx.attr("pads")) or [0] * (2 * nsp)
    nblk = [(img[d] + pads[d] + pads[nsp + d] - dil[d] * (blk[d] - 1) - 1) // strides[d] + 1 for d in range(nsp)]
    kprod = math.prod(blk)
    if sx[1] % kprod or sx[2] != math.prod(nblk):
        raise ctx.fail(
            f"input {sx} does not hold C x {kprod} rows of {math.prod(nblk)} blocks for image {img}, block {blk}"
        )
    C = sx[1] // kprod
    rk = [te.reduce_axis((0, blk[d]), name=f"k{d}") for d in range(nsp)]

    def body(n: Any, c: Any, *y: Any) -> E.PrimExpr:
        ok: E.PrimExpr | None = None
        klin: E.PrimExpr = c
        llin: E.PrimExpr = E.const(0)
        for d in range(nsp):
            p = y[d] + pads[d] - rk[d].var * dil[d]
            q = E.floordiv(p, strides[d])
            cond = (p >= 0) & (E.floormod(p, strides[d]) == 0) & (q < nblk[d])
            ok = cond if ok is None else ok & cond
            klin = klin * blk[d] + rk[d].var
            llin = llin * nblk[d] + q
        assert ok is not None
        return te.sum(te.if_then_else(ok, x[n, klin, llin], const_like(0, dtype_of(x))), axis=rk)

    return compute((sx[0], C, *img), body, name=uname("col2im"))


# -- MaxUnpool ------------------------------------------------------------------------------------------
_last = te.comm_reducer(
    lambda a, b: (te.if_then_else(b[0] > a[0], b[0], a[0]), te.if_then_else(b[0] > a[0], b[1], a[1])),
    lambda t0, t1: (E.const(-1, t0), const_like(0, t1)),
    name="last_match",
)


@register("MaxUnpool", pattern="reduce")
def max_unpool(ctx: OpContext, x: Tensor, ind: Tensor, out_shape: Tensor | None = None) -> Tensor:
    """ONNX MaxUnpool: zeros, with each value of ``x`` written at its flat index from ``I`` into
    the shape given by ``kernel_shape``/``strides``/``pads`` (the last writer wins); a larger
    ``output_shape`` input pads that result with zeros at the end of each spatial axis."""
    sx = shape(x)
    if shape(ind) != sx:
        raise ctx.fail(f"indices of shape {shape(ind)} must have the input's shape {sx}")
    nsp = len(sx) - 2
    ks = ints(ctx.attr("kernel_shape"))
    if len(ks) != nsp:
        raise ctx.fail(f"kernel_shape {ks} must give {nsp} sizes")
    strides = ints(ctx.attr("strides")) or [1] * nsp
    pads = ints(ctx.attr("pads")) or [0] * (2 * nsp)
    inferred = [(sx[2 + d] - 1) * strides[d] + ks[d] - pads[d] - pads[nsp + d] for d in range(nsp)]
    dims = list(inferred)
    if ctx.has(2):
        given = ints(ctx.value(2))
        if len(given) != nsp + 2 or given[:2] != list(sx[:2]):
            raise ctx.fail(f"output_shape {given} must be (N, C, spatial...) with N, C = {sx[:2]}")
        dims = given[2:]
        if any(g < i for g, i in zip(dims, inferred)):
            raise ctx.fail(f"output_shape {given} is smaller than the unpooled shape {inferred}")
    rs = [te.reduce_axis((0, sx[2 + d]), name=f"r{d}") for d in range(nsp)]
    idt = dtype_of(ind)

    def body(n: Any, c: Any, *o: Any) -> Any:
        flat: E.PrimExpr = cast(n, idt) * sx[1] + cast(c, idt)
        for d in range(nsp):
            flat = flat * inferred[d] + cast(o[d], idt)
        rlin: E.PrimExpr = E.const(0, "int64")
        for d in range(nsp):
            rlin = rlin * sx[2 + d] + cast(rs[d].var, "int64")
        src = (n, c, *[r.var for r in rs])
        hit = ind[src] == flat
        for d in range(nsp):
            if dims[d] > inferred[d]:
                hit = hit & (o[d] < inferred[d])
        key = te.if_then_else(hit, rlin, E.const(-1, "int64"))
        return _last((key, x[src]), axis=rs)

    out = (sx[0], sx[1], *dims)
    res = compute(out, body, name=uname("unpool_red"))
    return compute(out, lambda *i: res[1][i], name=uname("max_unpool"))


# -- Resize antialias ---------------------------------------------------------------------------
def _keys_cubic(x: E.PrimExpr, a: float, dt: str) -> E.PrimExpr:
    """Keys' cubic kernel at ``x >= 0`` (zero from 2 on)."""
    A = const_like(a, dt)
    x2, x3 = x * x, x * x * x
    near = (A + const_like(2.0, dt)) * x3 - (A + const_like(3.0, dt)) * x2 + const_like(1.0, dt)
    far = A * x3 - const_like(5.0, dt) * A * x2 + const_like(8.0, dt) * A * x - const_like(4.0, dt) * A
    zero = const_like(0.0, dt)
    return te.if_then_else(x <= const_like(1.0, dt), near, te.if_then_else(x < const_like(2.0, dt), far, zero))


def antialias_taps(mode: str, t: E.PrimExpr, scale: float, cubic_a: float, dt: str) -> tuple[list[int], list[Any]]:
    """Resize's antialiased taps along one axis: offsets from ``floor(x)`` and their normalized
    weights, for the source coordinate ``x`` whose fraction is ``t``.

    When downsampling (``scale < 1``) the linear (triangle) or cubic kernel is stretched by
    ``1 / scale``, so every source pixel under the output pixel contributes (as ONNX's reference
    and PIL do); the weights are divided by their sum. For ``scale >= 1`` they are the usual
    2 or 4 taps."""
    s = min(scale, 1.0)
    support = 1.0 if mode == "linear" else 2.0
    start = int(math.floor(-support / s)) + 1
    offs = list(range(start, 1 - start + 1))
    raw = []
    for off in offs:
        d = te.abs((const_like(float(off), dt) - t) * const_like(s, dt))
        if mode == "linear":
            raw.append(E.max_expr(const_like(1.0, dt) - d, const_like(0.0, dt)))
        else:
            raw.append(_keys_cubic(d, cubic_a, dt))
    total = raw[0]
    for w in raw[1:]:
        total = total + w
    return offs, [w / total for w in raw]
