"""Assorted operators: ``RotaryEmbedding``, ``SwiGLU``, ``TensorScatter``, ``Compress``,
``NonZero`` and ``Unique``.

``Compress``'s output length is the number of true entries of its condition, ``NonZero``'s the
number of non-zero elements, ``Unique``'s the number of distinct entries: so those inputs must be
known when the model is compiled (a constant, or a graph input whose value ember binds before
compiling: :class:`ember.specialize.ValueSpecializer` compiles once per distinct value); the
selection itself (a running count and a search) runs in compiled code.
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
    if wi is not None and shape(wi) != (sp[0],):
        raise ctx.fail(f"write_indices has shape {shape(wi)}; it needs one index per batch entry ({sp[0]},)")
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


def _unravel(k: Any, dims: tuple[int, ...]) -> list[Any]:
    """The C-order multi-index of flat index ``k`` in a tensor of shape ``dims``."""
    idx, rem = [], k
    for d in reversed(dims):
        idx.append(E.floormod(rem, d))
        rem = E.floordiv(rem, d)
    return list(reversed(idx))


@register("NonZero", pattern="opaque")
def nonzero(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX NonZero: the indices ``(rank, count)`` of the non-zero elements in C order.

    The count decides the output shape, so the input's value must be known when the model is
    compiled (as for ``Compress``); the indices are computed by compiled code (a running count
    and a search) from the tensor read at run time."""
    v = ctx.value(0)
    assert v is not None
    sx = shape(x)
    if not sx:
        raise ctx.fail("a scalar input is not supported; give it at least one dimension")
    n = int(np.prod(sx))
    count = int(np.count_nonzero(v))
    zero = const_like(0, dtype_of(x))

    def nz(k: Any) -> E.PrimExpr:
        return x[tuple(_unravel(k, sx))] != zero

    r = te.reduce_axis((0, n), name="r")
    rank = compute((n,), lambda k: te.sum(cast(nz(r.var), "int32"), axis=r, where=r.var < k), name=uname("nz_rank"))
    q = te.reduce_axis((0, n), name="q")
    pick = compute(
        (max(count, 1),),
        lambda j: te.min(te.if_then_else(nz(q.var) & (rank[q.var] == j), q.var, E.const(n, "int32")), axis=q),
        name=uname("nz_pick"),
    )

    def body(d: Any, j: Any) -> E.PrimExpr:
        coords = _unravel(pick[j], sx)
        out: E.PrimExpr = cast(coords[0], "int64")
        for a in range(1, len(sx)):
            out = te.if_then_else(d == a, cast(coords[a], "int64"), out)
        return out

    return compute((len(sx), count), body, name=uname("nonzero"))


@register("Unique", pattern="opaque")
def unique(ctx: OpContext, x: Tensor) -> list[Tensor]:
    """ONNX Unique: the distinct elements (or slices along ``axis``), sorted (``sorted=1``,
    lexicographically for slices) or in order of first occurrence, with the index of each one's
    first occurrence, the inverse indices and the counts.

    The number of distinct entries decides the output shapes, so the input's value must be known
    when the model is compiled (as for ``Compress``); the outputs are computed by compiled code
    from the tensor read at run time (pairwise comparisons, O(n^2) in the number of entries)."""
    v = ctx.value(0)
    assert v is not None
    sx = shape(x)
    srt = int(ctx.attr("sorted", 1))
    ax_attr = ctx.attr("axis")
    if not sx:
        raise ctx.fail("a scalar input is not supported; give it at least one dimension")
    if ax_attr is None:
        ax, n, rest = None, int(np.prod(sx)), ()
        count = int(np.unique(v.reshape(-1)).size)
    else:
        ax = norm_axis(int(ax_attr), len(sx))
        n, rest = sx[ax], sx[:ax] + sx[ax + 1 :]
        count = int(np.unique(np.moveaxis(v, ax, 0).reshape(n, -1), axis=0).shape[0])
    L = int(np.prod(rest)) if rest else 1

    def elem(i: Any, p: Any) -> E.PrimExpr:
        """Element ``p`` (C order) of entry ``i``: an element, or a slice along ``axis``."""
        if ax is None:
            return x[tuple(_unravel(i, sx))]
        pr = _unravel(p, rest) if rest else []
        return x[tuple(pr[:ax]) + (i,) + tuple(pr[ax:])]

    # fd[i, j]: the first position where entries i and j differ (L when they are equal)
    pa = te.reduce_axis((0, L), name="p")
    fd = compute(
        (n, n),
        lambda i, j: te.min(
            te.if_then_else(elem(i, pa.var) != elem(j, pa.var), pa.var, E.const(L, "int32")), axis=pa
        ),
        name=uname("uq_diff"),
    )

    def eq(i: Any, j: Any) -> E.PrimExpr:
        return fd[i, j] == L

    def less(i: Any, j: Any) -> E.PrimExpr:
        p = E.min_expr(fd[i, j], L - 1)
        return (fd[i, j] < L) & (elem(i, p) < elem(j, p))

    j1 = te.reduce_axis((0, n), name="j1")
    first_occ = compute(
        (n,), lambda k: te.min(te.if_then_else(eq(j1.var, k), j1.var, E.const(n, "int32")), axis=j1),
        name=uname("uq_first"),
    )

    def is_first(k: Any) -> E.PrimExpr:
        return first_occ[k] == k

    j2 = te.reduce_axis((0, n), name="j2")
    # the position of entry k's value among the distinct values
    if srt:
        order = compute(
            (n,), lambda k: te.sum(cast(is_first(j2.var) & less(j2.var, k), "int32"), axis=j2),
            name=uname("uq_rank"),
        )
    else:
        order = compute(
            (n,), lambda k: te.sum(cast(is_first(j2.var) & (j2.var < first_occ[k]), "int32"), axis=j2),
            name=uname("uq_rank"),
        )
    q = te.reduce_axis((0, n), name="q")
    pick = compute(
        (max(count, 1),),
        lambda u: te.min(te.if_then_else(is_first(q.var) & (order[q.var] == u), q.var, E.const(n, "int32")), axis=q),
        name=uname("uq_pick"),
    )
    if ax is None:
        y = compute((count,), lambda u: elem(pick[u], 0), name=uname("unique"))
    else:
        y = compute(
            sx[:ax] + (count,) + sx[ax + 1 :],
            lambda *i: x[tuple(i[:ax]) + (pick[i[ax]],) + tuple(i[ax + 1 :])],
            name=uname("unique"),
        )
    idx = compute((count,), lambda u: cast(pick[u], "int64"), name=uname("unique_idx"))
    inv = compute((n,), lambda k: cast(order[k], "int64"), name=uname("unique_inv"))
    j3 = te.reduce_axis((0, n), name="j3")
    cnt = compute(
        (count,), lambda u: te.sum(cast(eq(pick[u], j3.var), "int64"), axis=j3),
        name=uname("unique_count"),
    )
    return [y, idx, inv, cnt]
