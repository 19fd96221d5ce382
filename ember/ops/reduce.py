"""Reductions: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum, TopK."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import cast, compute, const_like, dtype_of, ints, norm_axis, shape, uname


def acc_dtype(dt: str) -> str:
    """The accumulator type of a sum of ``dt`` values: float32 for float16 (as NumPy's float16
    sums and matrix products, and ONNX Runtime, accumulate), ``dt`` itself otherwise."""
    return "float32" if dt in ("float16", "bfloat16") else dt


def reduce_tensor(
    x: Tensor,
    axes: list[int],
    keepdims: bool,
    reducer: Any,
    fmap: Callable[[Any], Any] | None = None,
    name: str = "reduce",
    widen: bool = False,
) -> Tensor:
    """Reduce ``x`` over ``axes`` with a te reducer (``te.sum``...), mapping elements by ``fmap``.

    A sum of float16 values accumulates in float32 (:func:`acc_dtype`) and is rounded to float16
    once at the end; with ``widen`` the float32 sum is returned unrounded (for a caller that
    divides it first, as NumPy's float16 mean does)."""
    s = shape(x)
    axes = sorted(set(axes))
    rax = {a: te.reduce_axis((0, s[a]), name=f"r{a}") for a in axes}
    out = tuple((1 if a in rax else d) for a, d in enumerate(s) if keepdims or a not in rax)
    narrow: list[str] = []

    def body(*i: Any) -> Any:
        idx, k = [], 0
        for a in range(len(s)):
            if a in rax:
                idx.append(rax[a].var)
                if keepdims:
                    k += 1
            else:
                idx.append(i[k])
                k += 1
        v = x[tuple(idx)]
        v = fmap(v) if fmap is not None else v
        if not rax:
            return v
        vdt = str(v.dtype)
        if reducer is te.sum and acc_dtype(vdt) != vdt:
            narrow.append(vdt)
            v = cast(v, acc_dtype(vdt))
        return reducer(v, axis=[rax[a] for a in axes])

    r = compute(out, body, name=uname(name))
    if not narrow or widen:
        return r
    return compute(out, lambda *i: cast(r[i], narrow[0]), name=uname(name + "_round"))


def _reduce_axes(ctx: OpContext, x: Tensor) -> list[int] | None:
    """The reduced axes; None means "reduce nothing" (noop_with_empty_axes)."""
    n = len(shape(x))
    if ctx.has(1) and (ctx.opset >= 18 or ctx.op == "ReduceSum" and ctx.opset >= 13):
        v = ctx.value(1)
        if v.ndim != 1:
            raise ctx.fail(f"input 1 (axes) must be a 1-D tensor, got shape {v.shape}")
        axes = ints(v)
    else:
        axes = ints(ctx.attr("axes"))
    if not axes:
        if int(ctx.attr("noop_with_empty_axes", 0)):
            return None
        return list(range(n))
    return [norm_axis(a, n) for a in axes]


def _fdt(x: Tensor) -> str:
    dt = dtype_of(x)
    return dt if "float" in dt else "float32"


def _make_reduce(kind: str) -> Any:
    def op(ctx: OpContext, x: Tensor, axes_t: Tensor | None = None) -> Tensor:
        axes = _reduce_axes(ctx, x)
        keep = int(ctx.attr("keepdims", 1)) == 1  # as ONNX's shape inference and ONNX Runtime read it
        dt = dtype_of(x)
        if axes is None:
            fm = {"ReduceL1": te.abs, "ReduceSumSquare": lambda v: v * v, "ReduceL2": te.abs}.get(kind)
            fn = (lambda v: te.log(v)) if kind == "ReduceLogSum" else (lambda v: v)
            if kind == "ReduceLogSumExp":
                fn = lambda v: v  # noqa: E731
            return compute(shape(x), lambda *i: fn(fm(x[i]) if fm else x[i]), name=uname(kind))
        s = shape(x)
        count = int(np.prod([s[a] for a in axes])) if axes else 1
        if kind == "ReduceSum":
            return reduce_tensor(x, axes, keep, te.sum, name="rsum")
        if kind == "ReduceMax":
            return reduce_tensor(x, axes, keep, te.max, name="rmax")
        if kind == "ReduceMin":
            return reduce_tensor(x, axes, keep, te.min, name="rmin")
        if kind == "ReduceProd":
            return reduce_tensor(x, axes, keep, te.prod, name="rprod")
        if kind == "ReduceMean":
            r = reduce_tensor(x, axes, keep, te.sum, name="rmean_sum", widen=True)
            rdt = dtype_of(r)
            return compute(
                shape(r),
                lambda *i: cast(
                    r[i] / const_like(count, rdt) if "float" in dt else E.truncdiv(r[i], const_like(count, rdt)), dt
                ),
                name=uname("rmean"),
            )
        if kind == "ReduceL1":
            return reduce_tensor(x, axes, keep, te.sum, te.abs, name="rl1")
        if kind == "ReduceSumSquare":
            return reduce_tensor(x, axes, keep, te.sum, lambda v: v * v, name="rss")
        if kind == "ReduceL2":
            r = reduce_tensor(x, axes, keep, te.sum, lambda v: cast(v, _fdt(x)) * cast(v, _fdt(x)), name="rl2_sum")
            return compute(shape(r), lambda *i: cast(te.sqrt(r[i]), dt), name=uname("rl2"))
        if kind == "ReduceLogSum":
            r = reduce_tensor(x, axes, keep, te.sum, name="rls_sum")
            return compute(shape(r), lambda *i: te.log(r[i]), name=uname("rlogsum"))
        if kind == "ReduceLogSumExp":
            m = reduce_tensor(x, axes, True, te.max, name="rlse_max")
            s_keep = shape(m)

            def shifted(*i: Any) -> Any:
                return te.exp(x[i] - m[tuple(0 if s_keep[a] == 1 else i[a] for a in range(len(s)))])

            e = compute(s, shifted, name=uname("rlse_exp"))
            r = reduce_tensor(e, axes, keep, te.sum, name="rlse_sum")

            def fin(*i: Any) -> Any:
                if keep:
                    mi = i
                else:
                    it = iter(i)
                    mi = tuple(0 if a in axes else next(it) for a in range(len(s)))
                mv = m[mi]
                return te.if_then_else(te.isinf(mv), mv, te.log(r[i]) + mv)

            return compute(shape(r), fin, name=uname("rlse"))
        raise ctx.fail(f"unknown reduction {kind}")

    op.__name__ = kind
    op.__doc__ = f"ONNX {kind} over ``axes`` (attribute or input), ``keepdims``."
    return op


for _k in (
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceMean",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSum",
    "ReduceLogSumExp",
):
    register(_k, pattern="reduce")(_make_reduce(_k))


def _arg(ctx: OpContext, x: Tensor, is_max: bool) -> Tensor:
    s = shape(x)
    a = norm_axis(ctx.attr("axis", 0), len(s))
    keep = int(int(ctx.attr("keepdims", 1)) == 1)  # as ONNX's shape inference and ONNX Runtime read it
    last = int(ctx.attr("select_last_index", 0))
    if s[a] == 0:
        raise ctx.fail(f"axis {a} is empty: there is no index of a maximum or minimum")

    floating = dtype_of(x).startswith(("float", "bfloat"))

    # NaN counts as the extreme and the first NaN wins (NumPy's rule, select_last_index or not),
    # so a row with NaN never keeps the identity's index (2**31 - 1, past the axis): an all-NaN
    # row gives 0, as ONNX Runtime does.
    def better(v1: Any, v2: Any) -> Any:
        b = v1 > v2 if is_max else v1 < v2
        return b | (te.isnan(v1) & ~te.isnan(v2)) if floating else b

    def combine(lhs: Any, rhs: Any) -> Any:
        (i0, v0), (i1, v1) = lhs, rhs
        tie = v0 == v1
        pick_rhs = better(v1, v0) | (tie & ((i1 > i0) if last else (i1 < i0)))
        if floating:
            pick_rhs = pick_rhs | (te.isnan(v0) & te.isnan(v1) & (i1 < i0))
        return te.if_then_else(pick_rhs, i1, i0), te.if_then_else(pick_rhs, v1, v0)

    def ident(t0: str, t1: str) -> Any:
        worst = te.min_value_of(t1) if is_max else te.max_value_of(t1)
        return E.const(-1 if last else 2**31 - 1, t0), worst

    red = te.comm_reducer(combine, ident, name="argmax" if is_max else "argmin")
    k = te.reduce_axis((0, s[a]), name="k")
    out = tuple(1 if d == a else n for d, n in enumerate(s) if keep or d != a)

    def body(*i: Any) -> Any:
        idx = list(i) if keep else list(i[:a]) + [None] + list(i[a:])
        idx[a] = k.var
        return red((k.var, x[tuple(idx)]), axis=k)

    res = compute(out, body, name=uname("argred"))
    return compute(out, lambda *i: cast(res[0][i], "int64"), name=uname("argmax" if is_max else "argmin"))


@register("ArgMax", pattern="reduce")
def argmax(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX ArgMax (first index of the maximum unless ``select_last_index``)."""
    return _arg(ctx, x, True)


@register("ArgMin", pattern="reduce")
def argmin(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX ArgMin."""
    return _arg(ctx, x, False)


def _softmax_axes(ctx: OpContext, x: Tensor) -> list[int]:
    n = len(shape(x))
    a = norm_axis(ctx.attr("axis", -1 if ctx.opset >= 13 else 1), n)
    return [a] if ctx.opset >= 13 else list(range(a, n))


def softmax_tensor(x: Tensor, axes: list[int], log: bool = False) -> Tensor:
    """Softmax (or log-softmax) of ``x`` over ``axes``, stable (max subtracted first)."""
    s = shape(x)
    m = reduce_tensor(x, axes, True, te.max, name="sm_max")

    def mi(i: Any) -> tuple[Any, ...]:
        return tuple(0 if a in axes else i[a] for a in range(len(s)))

    e = compute(s, lambda *i: te.exp(x[i] - m[mi(i)]), name=uname("sm_exp"))
    z = reduce_tensor(e, axes, True, te.sum, name="sm_sum")
    if log:
        return compute(s, lambda *i: x[i] - m[mi(i)] - te.log(z[mi(i)]), name=uname("log_softmax"))
    return compute(s, lambda *i: e[i] / z[mi(i)], name=uname("softmax"))


@register("Softmax", pattern="reduce")
def softmax(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX Softmax (one axis since opset 13; the flattened tail before)."""
    return softmax_tensor(x, _softmax_axes(ctx, x))


@register("LogSoftmax", pattern="reduce")
def log_softmax(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX LogSoftmax."""
    return softmax_tensor(x, _softmax_axes(ctx, x), log=True)


@register("Hardmax", pattern="reduce")
def hardmax(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX Hardmax: 1 at the first maximum along the axes, 0 elsewhere."""
    s = shape(x)
    axes = _softmax_axes(ctx, x)
    rax = [te.reduce_axis((0, s[a]), name=f"h{a}") for a in axes]
    strides = [int(np.prod([s[b] for b in axes[k + 1 :]])) for k in range(len(axes))]

    def lin(idx: Any) -> Any:
        out: Any = E.const(0)
        for a, st in zip(axes, strides):
            out = out + idx[a] * st
        return out

    def combine(lhs: Any, rhs: Any) -> Any:
        (i0, v0), (i1, v1) = lhs, rhs
        pick = (v1 > v0) | ((v1 == v0) & (i1 < i0))
        return te.if_then_else(pick, i1, i0), te.if_then_else(pick, v1, v0)

    red = te.comm_reducer(combine, lambda t0, t1: (E.const(2**31 - 1, t0), te.min_value_of(t1)), name="hardmax")
    keep = tuple(1 if a in axes else d for a, d in enumerate(s))

    def body(*i: Any) -> Any:
        idx = list(i)
        for a, r in zip(axes, rax):
            idx[a] = r.var
        return red((lin(idx), x[tuple(idx)]), axis=rax)

    res = compute(keep, body, name=uname("hardmax_red"))
    dt = dtype_of(x)
    return compute(
        s,
        lambda *i: te.if_then_else(
            res[0][tuple(0 if a in axes else i[a] for a in range(len(s)))] == lin(i),
            const_like(1, dt),
            const_like(0, dt),
        ),
        name=uname("hardmax"),
    )


@register("CumSum", "CumProd", pattern="reduce")
def cumsum(ctx: OpContext, x: Tensor, axis: Tensor) -> Tensor:
    """ONNX CumSum and CumProd with ``exclusive`` and ``reverse``."""
    red = te.prod if ctx.op == "CumProd" else te.sum
    s = shape(x)
    axis = ctx.value(1)
    if axis.size != 1 or axis.ndim > 1 or axis.dtype.kind not in "iu":
        raise ctx.fail(f"axis must be one integer (a scalar or a 1-element vector), got {axis.dtype}{list(axis.shape)}")
    a = norm_axis(int(axis.reshape(-1)[0]), len(s))
    excl, rev = int(ctx.attr("exclusive", 0)), int(ctx.attr("reverse", 0))
    if excl not in (0, 1) or rev not in (0, 1):
        raise ctx.fail(f"exclusive={excl} and reverse={rev} must each be 0 or 1")
    k = te.reduce_axis((0, s[a]), name="k")

    def body(*i: Any) -> Any:
        idx = list(i)
        idx[a] = k.var
        if rev:
            cond = (k.var > i[a]) if excl else (k.var >= i[a])
        else:
            cond = (k.var < i[a]) if excl else (k.var <= i[a])
        return red(x[tuple(idx)], axis=k, where=cond)

    return compute(s, body, name=uname("cumsum"))


@register("TopK", pattern="opaque")
def topk(ctx: OpContext, x: Tensor, k_t: Tensor | None = None) -> list[Tensor]:
    """ONNX TopK (largest or smallest, sorted, ties by lower index) by ranking every element."""
    s = shape(x)
    a = norm_axis(ctx.attr("axis", -1), len(s))
    k = int(ctx.value(1).reshape(-1)[0]) if ctx.opset >= 10 else int(ctx.attr("k"))
    largest = int(ctx.attr("largest", 1))
    n = s[a]
    if not 0 <= k <= n:
        raise ctx.fail(f"k={k} is outside [0, {n}] (axis {a} has {n} elements)")
    j = te.reduce_axis((0, n), name="j")

    def before(vj: Any, ij: Any, vi: Any, ii: Any) -> Any:
        better = (vj > vi) if largest else (vj < vi)
        return better | ((vj == vi) & (ij < ii))

    def rank_body(*i: Any) -> Any:
        idx = list(i)
        idx[a] = j.var
        return te.sum(te.if_then_else(before(x[tuple(idx)], j.var, x[i], i[a]), 1, 0), axis=j)

    rank = compute(s, rank_body, name=uname("topk_rank"))
    out_s = tuple(k if d == a else m for d, m in enumerate(s))
    j2 = te.reduce_axis((0, n), name="j2")
    pick = te.comm_reducer(
        lambda p, q: (E.max_expr(p[0], q[0]), te.if_then_else(q[0] > p[0], q[1], p[1])),
        lambda t0, t1: (E.const(-1, t0), const_like(0, t1)),
        name="pick",
    )

    def sel(*i: Any) -> Any:
        idx = list(i)
        idx[a] = j2.var
        return pick((j2.var, x[tuple(idx)]), axis=j2, where=rank[tuple(idx)] == i[a])

    res = compute(out_s, sel, name=uname("topk_sel"))
    vals = compute(out_s, lambda *i: res[1][i], name=uname("topk_values"))
    inds = compute(out_s, lambda *i: cast(res[0][i], "int64"), name=uname("topk_indices"))
    return [vals, inds]


@register("LpNormalization", pattern="reduce")
def lp_norm(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX LpNormalization (p = 1 or 2) along ``axis``; a slice whose norm is 0 stays 0."""
    s = shape(x)
    a = norm_axis(ctx.attr("axis", -1), len(s))
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.fail(f"p={p} is not supported (ONNX allows 1 or 2)")
    r = reduce_tensor(x, [a], True, te.sum, (lambda v: v * v) if p == 2 else te.abs, name="lp_sum")
    zero = const_like(0, dtype_of(x))

    def body(*i: Any) -> Any:
        d = r[tuple(0 if b == a else i[b] for b in range(len(s)))]
        norm = te.sqrt(d) if p == 2 else d
        return te.if_then_else(norm == zero, zero, x[i] / norm)

    return compute(s, body, name=uname("lpnorm"))
