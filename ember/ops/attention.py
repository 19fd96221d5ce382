"""ONNX Attention (opsets 23+): scaled dot-product attention with grouped KV heads, a KV cache,
boolean or additive masks, causal and sliding-window masking, softcap, and the optional
``qk_matmul_output``, as the ONNX reference defines them."""

from __future__ import annotations

import math
from typing import Any

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .elemwise import onnx_dtype
from .reduce import acc_dtype
from .registry import OpContext, register
from .util import bcast_load, cast, compute, const_like, dtype_of, shape, uname


def _to4d(t: Tensor, heads: int) -> Tensor:
    b, s, hid = shape(t)
    d = hid // heads
    return compute((b, heads, s, d), lambda bb, h, ss, dd: t[bb, ss, h * d + dd], name=uname("attn_4d"))


def _cat_seq(past: Tensor | None, cur: Tensor) -> Tensor:
    if past is None:
        return cur
    sp, sc = shape(past), shape(cur)
    p = sp[2]

    def body(b: Any, h: Any, s: Any, d: Any) -> Any:
        return te.if_then_else(s < p, past[b, h, E.min_expr(s, p - 1), d], cur[b, h, E.max_expr(s - p, 0), d])

    return compute((sc[0], sc[1], p + sc[2], sc[3]), body, name=uname("attn_cache"))


@register("Attention", pattern="opaque")
def attention(
    ctx: OpContext,
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    mask: Tensor | None = None,
    past_k: Tensor | None = None,
    past_v: Tensor | None = None,
    nonpad: Tensor | None = None,
) -> list[Tensor]:
    """ONNX Attention; outputs Y, present_key, present_value, qk_matmul_output."""
    dt = dtype_of(Q)
    three_d = len(shape(Q)) == 3
    if three_d:
        Q = _to4d(Q, int(ctx.attr("q_num_heads")))
        K = _to4d(K, int(ctx.attr("kv_num_heads")))
        V = _to4d(V, int(ctx.attr("kv_num_heads")))
    pk = _cat_seq(past_k, K)
    pv = _cat_seq(past_v, V)
    B, QH, S, D = shape(Q)
    KH, L = shape(pk)[1], shape(pk)[2]
    DV = shape(pv)[3]
    rep = QH // KH if QH != KH and QH % KH == 0 else 1
    scale = ctx.attr("scale")
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    sq = math.sqrt(scale)
    softcap = float(ctx.attr("softcap", 0.0) or 0.0)
    causal = int(ctx.attr("is_causal", 0))
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
    sp = ctx.attr("softmax_precision")
    sdt = onnx_dtype(sp, ctx) if sp is not None else dt
    past_len = shape(past_k)[2] if past_k is not None else 0
    neg_inf = const_like(-math.inf, dt)
    zero = const_like(0, dt)

    k = te.reduce_axis((0, D), name="kd")
    acc = acc_dtype(dt)  # half inputs accumulate in float32
    kv = (lambda h: E.floordiv(h, rep)) if rep > 1 else (lambda h: h)
    # float32 with a float32 softmax: the products run as register-tiled matrix products (tag
    # "matmul": the CPU strategy tiles rows by vectors of contiguous columns), K is transposed
    # once so the scores' columns are contiguous, exp is taken once per score, and the
    # normalisation divides the product by the row sum after it (no exp inside its reduction).
    fast = dt == "float32" and sdt == dt
    if fast:
        kt = compute((B, KH, D, L), lambda b, h, d, j: pk[b, h, j, d] * const_like(sq, dt), name=uname("attn_kt"),
                     materialize=True)
        qk_acc = compute(
            (B, QH, S, L),
            lambda b, h, i, j: te.sum(Q[b, h, i, k.var] * const_like(sq, dt) * kt[b, kv(h), k.var, j], axis=k),
            name=uname("attn_qk_acc"), tag="matmul",
        )
    else:
        qk_acc = compute(
            (B, QH, S, L),
            lambda b, h, i, j: te.sum(
                cast(Q[b, h, i, k.var] * const_like(sq, dt), acc)
                * cast(pk[b, kv(h), j, k.var] * const_like(sq, dt), acc),
                axis=k,
            ),
            name=uname("attn_qk_acc"),
        )
    qk = compute((B, QH, S, L), lambda *i: cast(qk_acc[i], dt), name=uname("attn_qk"))

    def offset(b: Any) -> Any:
        if past_k is None and nonpad is not None:
            return cast(nonpad[b], "int32") - S
        return E.const(past_len)

    def bias(b: Any, h: Any, i: Any, j: Any) -> Any:
        v: Any = zero
        if mask is not None:
            ms = shape(mask)
            ml = ms[-1]
            out4 = (B, QH, S, L)
            idx = (b, h, i, E.min_expr(j, ml - 1))
            mv = bcast_load(mask, out4[:-1] + (ml,), idx)
            if dtype_of(mask) == "bool":
                mv = te.if_then_else(mv, zero, neg_inf)
            else:
                mv = cast(mv, dt)
            v = te.if_then_else(j < ml, mv, neg_inf) if ml < L else mv
        if causal:
            v = te.if_then_else(j <= i + offset(b), v, neg_inf)
        if left >= 0 or right >= 0:
            diff = i + offset(b) - j
            ok = E.const(True, "bool")
            if left >= 0:
                ok = ok & (diff <= left)
            if right >= 0:
                ok = ok & (0 - diff <= right)
            v = te.if_then_else(ok, v, neg_inf)
        if nonpad is not None:
            v = te.if_then_else(j < cast(nonpad[b], "int32"), v, neg_inf)
        return v

    def capped(b: Any, h: Any, i: Any, j: Any) -> Any:
        x = qk[b, h, i, j]
        if softcap > 0:
            x = te.tanh(x / const_like(softcap, dt)) * const_like(softcap, dt)
        return x

    biasv = compute((B, QH, S, L), bias, name=uname("attn_bias"))
    scores = compute(
        (B, QH, S, L), lambda b, h, i, j: cast(capped(b, h, i, j) + biasv[b, h, i, j], sdt), name=uname("attn_scores")
    )
    jr = te.reduce_axis((0, L), name="jr")
    mx = compute((B, QH, S), lambda b, h, i: te.max(scores[b, h, i, jr.var], axis=jr), name=uname("attn_max"))
    jb = te.reduce_axis((0, L), name="jb")
    bmx = compute((B, QH, S), lambda b, h, i: te.max(biasv[b, h, i, jb.var], axis=jb), name=uname("attn_bmax"))
    ninf_s = const_like(-math.inf, sdt)
    zero_s = const_like(0, sdt)

    def safe_max(b: Any, h: Any, i: Any) -> Any:
        return te.if_then_else(mx[b, h, i] == ninf_s, zero_s, mx[b, h, i])

    ex = compute(
        (B, QH, S, L), lambda b, h, i, j: te.exp(scores[b, h, i, j] - safe_max(b, h, i)), name=uname("attn_exp"),
        materialize=fast,
    )
    js = te.reduce_axis((0, L), name="js")
    # a float16 sum accumulates in float32 and is rounded once, as the reference's NumPy sum
    ssum = compute(
        (B, QH, S), lambda b, h, i: te.sum(cast(ex[b, h, i, js.var], acc_dtype(sdt)), axis=js), name=uname("attn_sum")
    )

    def denominator(b: Any, h: Any, i: Any) -> Any:
        s = cast(ssum[b, h, i], sdt)
        return te.if_then_else(s == zero_s, const_like(1, sdt), s)

    def prob(b: Any, h: Any, i: Any, j: Any) -> Any:
        p = ex[b, h, i, j] / denominator(b, h, i)
        return cast(te.if_then_else(bmx[b, h, i] == neg_inf, zero_s, p), dt)

    probs = compute((B, QH, S, L), prob, name=uname("attn_probs"))
    jv = te.reduce_axis((0, L), name="jv")
    if fast:
        y_acc = compute(
            (B, QH, S, DV),
            lambda b, h, i, d: te.sum(ex[b, h, i, jv.var] * pv[b, kv(h), jv.var, d], axis=jv),
            name=uname("attn_y_acc"), tag="matmul",
        )

        def y_body(b: Any, h: Any, i: Any, d: Any) -> Any:
            return te.if_then_else(bmx[b, h, i] == neg_inf, zero, y_acc[b, h, i, d] / denominator(b, h, i))

        y = compute((B, QH, S, DV), y_body, name=uname("attn_y"))
    else:
        y_acc = compute(
            (B, QH, S, DV),
            lambda b, h, i, d: te.sum(cast(probs[b, h, i, jv.var], acc) * cast(pv[b, kv(h), jv.var, d], acc), axis=jv),
            name=uname("attn_y_acc"),
        )
        y = compute((B, QH, S, DV), lambda *i: cast(y_acc[i], dt), name=uname("attn_y"))
    if three_d:
        y = compute(
            (B, S, QH * DV), lambda b, s, hd: y[b, E.floordiv(hd, DV), s, E.floormod(hd, DV)], name=uname("attn_y3")
        )
    if mode == 3:
        qko = probs
    elif mode == 2:
        qko = compute((B, QH, S, L), lambda b, h, i, j: capped(b, h, i, j) + biasv[b, h, i, j], name=uname("attn_qko"))
    else:
        qko = compute((B, QH, S, L), capped, name=uname("attn_qko"))
    present_k = pk if past_k is not None else compute(shape(pk), lambda *i: pk[i], name=uname("attn_pk"))
    present_v = pv if past_v is not None else compute(shape(pv), lambda *i: pv[i], name=uname("attn_pv"))
    return [y, present_k, present_v, qko]
