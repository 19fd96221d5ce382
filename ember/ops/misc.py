"""Assorted operators: ``RotaryEmbedding``, ``SwiGLU``, ``TensorScatter`` and ``Compress``.

``Compress``'s output length is the number of true entries of its condition, so the condition
must be known when the model is compiled (a constant, or an input whose value ember binds
before compiling); the selection itself (a running count and a search) runs in compiled code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import cast, compute, const_like, dtype_of, norm_axis, shape, uname


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


@register("RotaryEmbedding")
def rotary_embedding(ctx: OpContext, x: Tensor, cos: Tensor, sin: Tensor, pos: Tensor | None = None) -> Tensor:
    """ONNX RotaryEmbedding on ``(batch, heads, seq, head_size)`` or ``(batch, seq, hidden)``
    input (``num_heads``), the first ``rotary_embedding_dim`` features rotated in halves or
    ``interleaved`` pairs; caches indexed by ``position_ids`` or given per (batch, seq)."""
    sx = shape(x)
    nh = int(ctx.attr("num_heads", 0))
    if len(sx) == 4:
        head = sx[3]
    elif len(sx) == 3:
        if nh <= 0 or sx[2] % nh:
            raise ctx.fail(f"3-D input {sx} needs num_heads dividing its hidden size, not {nh}")
        head = sx[2] // nh
    else:
        raise ctx.fail(f"input of shape {sx} must be 3-D or 4-D")
    rot = int(ctx.attr("rotary_embedding_dim", 0)) or head
    if rot % 2 or rot > head:
        raise ctx.fail(f"rotary_embedding_dim {rot} must be even and at most the head size {head}")
    half = rot // 2
    if shape(cos)[-1] != half or shape(sin)[-1] != half:
        raise ctx.fail(
            f"cos/sin caches of shapes {shape(cos)}, {shape(sin)} must end in rotary_embedding_dim/2 = {half}"
        )
    inter = int(ctx.attr("interleaved", 0))

    def body(*i: Any) -> E.PrimExpr:
        if len(sx) == 4:
            b, s, d = i[0], i[2], i[3]

            def at(dd: Any) -> E.PrimExpr:
                return x[i[0], i[1], i[2], dd]
        else:
            b, s = i[0], i[1]
            hb = E.floordiv(i[2], head) * head
            d = E.floormod(i[2], head)

            def at(dd: Any) -> E.PrimExpr:
                return x[i[0], i[1], hb + dd]

        if inter:
            j = E.floordiv(d, 2)
            x1, x2 = at(j * 2), at(j * 2 + 1)
            first = E.floormod(d, 2) == 0
        else:
            first = d < half
            j = te.if_then_else(first, d, d - half)
            x1, x2 = at(j), at(j + half)
        if pos is not None:
            p = pos[b, s]
            c, sn = cos[p, j], sin[p, j]
        else:
            c, sn = cos[b, s, j], sin[b, s, j]
        v = te.if_then_else(first, c * x1 - sn * x2, sn * x1 + c * x2)
        return te.if_then_else(d < rot, v, at(d)) if rot < head else v

    return compute(sx, body, name=uname("rotary"))


@register("SwiGLU")
def swiglu(ctx: OpContext, a: Tensor, b: Tensor) -> Tensor:
    """ONNX SwiGLU: ``a * sigmoid(alpha * a) * b`` (inputs of one shape)."""
    if shape(a) != shape(b) or dtype_of(a) != dtype_of(b):
        raise ctx.fail(
            f"inputs must have one shape and type, not {shape(a)} {dtype_of(a)} and {shape(b)} {dtype_of(b)}"
        )
    dt = dtype_of(a)
    alpha = const_like(float(ctx.attr("alpha", 1.0)), dt)
    one = const_like(1.0, dt)
    return compute(shape(a), lambda *i: a[i] * (one / (one + te.exp(-(alpha * a[i])))) * b[i], name=uname("swiglu"))


@register("TensorScatter")
def tensor_scatter(ctx: OpContext, past: Tensor, upd: Tensor, wi: Tensor | None = None) -> Tensor:
    """ONNX TensorScatter: ``past`` with ``update`` written along ``axis`` from each batch's
    ``write_indices`` (0 when omitted); ``mode`` linear or circular (positions wrap)."""
    sp, su = shape(past), shape(upd)
    ax = norm_axis(int(ctx.attr("axis", -2)), len(sp))
    mode = _s(ctx.attr("mode", "linear"))
    if mode not in ("linear", "circular"):
        raise ctx.fail(f"mode {mode!r} is not linear or circular")
    if ax == 0 or len(su) != len(sp) or any(su[d] != sp[d] for d in range(len(sp)) if d != ax) or su[ax] > sp[ax]:
        raise ctx.fail(f"update {su} does not fit the cache {sp} along axis {ax} (axis 0 is the batch)")
    seq, cap = su[ax], sp[ax]

    def body(*i: Any) -> E.PrimExpr:
        start = cast(wi[i[0]], "int64") if wi is not None else E.const(0, "int64")
        rel = cast(i[ax], "int64") - start
        if mode == "circular":
            rel = E.floormod(rel, E.const(cap, "int64"))
        hit = (rel >= 0) & (rel < seq)
        src = tuple(cast(rel, "int32") if d == ax else i[d] for d in range(len(sp)))
        return te.if_then_else(hit, upd[src], past[i])

    return compute(sp, body, name=uname("tensor_scatter"))


@register("Compress", pattern="opaque")
def compress(ctx: OpContext, x: Tensor, cond: Tensor) -> Tensor:
    """ONNX Compress: the slices of ``x`` along ``axis`` (of the flattened ``x`` without one)
    where ``condition`` is true; a condition shorter than the axis selects from its prefix."""
    c = ctx.value(1)
    assert c is not None
    sx = shape(x)
    flat = ctx.attr("axis") is None
    if flat:
        n = int(np.prod(sx))
        src_shape: tuple[int, ...] = (n,)
        ax = 0
    else:
        ax = norm_axis(int(ctx.attr("axis")), len(sx))
        src_shape = sx
    L = src_shape[ax]
    m = min(int(c.size), L)
    count = int(np.count_nonzero(c.reshape(-1)[:m]))
    cs = shape(cond)

    def cond_at(k: Any) -> E.PrimExpr:
        return cast(cond[k] if len(cs) == 1 else cond[(k,) + (0,) * (len(cs) - 1)], "bool")

    r = te.reduce_axis((0, m), name="r")
    # rank[k] = number of true entries before k
    rank = compute(
        (m,), lambda k: te.sum(cast(cond_at(r.var), "int32"), axis=r, where=r.var < k), name=uname("compress_rank")
    )
    q = te.reduce_axis((0, m), name="q")
    pick = compute(
        (max(count, 1),),
        lambda j: te.min(te.if_then_else(cond_at(q.var) & (rank[q.var] == j), q.var, E.const(m, "int32")), axis=q),
        name=uname("compress_idx"),
    )

    def body(*i: Any) -> E.PrimExpr:
        k = pick[i[ax]]
        if flat:
            idx, rem = [], k
            for d in reversed(sx):
                idx.append(E.floormod(rem, d))
                rem = E.floordiv(rem, d)
            return x[tuple(reversed(idx))]
        return x[tuple(k if d == ax else i[d] for d in range(len(sx)))]

    out = tuple(count if d == ax else src_shape[d] for d in range(len(src_shape)))
    return compute(out, body, name=uname("compress"))
