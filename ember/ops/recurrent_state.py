"""Operators that carry a recurrent state between calls (opset 27): ``LinearAttention`` and
``CausalConvWithState``.

``LinearAttention`` is unrolled over the sequence like :mod:`ember.ops.rnn`: each token is a
few tensor expressions reading the previous token's state (kept as its own stage, so the state
is computed once per token and never re-expanded into its readers). The state and every
product are computed in float32 (float64 for float64 inputs) and cast back at the end, as ONNX's
reference does.

``CausalConvWithState`` is a depthwise 1-D convolution over the input prefixed by the carried
state (or zeros); its taps are unrolled, so it stays an injective expression.
"""

from __future__ import annotations

import math
from typing import Any

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import cast, compute, const_like, dtype_of, shape, uname

_FLOATS = ("float16", "float32", "float64")


def _str_attr(ctx: OpContext, name: str, default: str) -> str:
    v = ctx.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def _acc_type(dt: str) -> str:
    """The type the recurrences are computed in."""
    return "float64" if dt == "float64" else "float32"


# -- LinearAttention ---------------------------------------------------------------------------
_RULES = ("linear", "gated", "delta", "gated_delta")


def _la_check(
    ctx: OpContext, q: Tensor, k: Tensor, v: Tensor, past: Tensor | None, decay: Tensor | None, beta: Tensor | None
) -> tuple[str, int, int, int, int, int, int]:
    """Validate LinearAttention's attributes and shapes; returns the rule and
    ``(B, T, Hq, Hkv, dk, dv)``."""
    rule = _str_attr(ctx, "update_rule", "gated_delta")
    if rule not in _RULES:
        raise ctx.fail(f"update_rule={rule!r} is not one of {', '.join(_RULES)}")
    hq, hkv = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if hq is None or hkv is None:
        raise ctx.fail("attributes q_num_heads and kv_num_heads are required")
    hq, hkv = int(hq), int(hkv)
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise ctx.fail(f"q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})")
    for nm, t in (("query", q), ("key", k), ("value", v)):
        if len(shape(t)) != 3:
            raise ctx.fail(f"{nm} must be rank 3 (B, T, H*D), got shape {shape(t)}")
        if dtype_of(t) not in _FLOATS:
            raise ctx.fail(f"{nm} has element type {dtype_of(t)}; LinearAttention takes float16/32/64")
    (b, t, qd), (kb, kt, kd), (vb, vt, vd) = shape(q), shape(k), shape(v)
    if (kb, kt) != (b, t) or (vb, vt) != (b, t):
        raise ctx.fail(f"query {shape(q)}, key {shape(k)} and value {shape(v)} differ in batch or sequence length")
    if qd % hq or vd % hkv:
        raise ctx.fail(
            f"query's last dimension {qd} is not a multiple of q_num_heads {hq}, "
            f"or value's {vd} of kv_num_heads {hkv}"
        )
    dk, dv = qd // hq, vd // hkv
    if kd != hkv * dk:
        raise ctx.fail(f"key's last dimension is {kd}; expected kv_num_heads * d_k = {hkv * dk}")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None):
        raise ctx.fail(f"update_rule {rule!r} {'requires' if gating else 'forbids'} the decay input")
    if delta != (beta is not None):
        raise ctx.fail(f"update_rule {rule!r} {'requires' if delta else 'forbids'} the beta input")
    if decay is not None:
        ds = shape(decay)
        if len(ds) != 3 or ds[:2] != (b, t) or ds[2] not in (hkv, hkv * dk):
            raise ctx.fail(f"decay has shape {ds}; expected ({b}, {t}, {hkv}) or ({b}, {t}, {hkv * dk})")
    if beta is not None:
        bs = shape(beta)
        if len(bs) != 3 or bs[:2] != (b, t) or bs[2] not in (hkv, 1):
            raise ctx.fail(f"beta has shape {bs}; expected ({b}, {t}, {hkv}) or ({b}, {t}, 1)")
    if past is not None and shape(past) != (b, hkv, dk, dv):
        raise ctx.fail(f"past_state has shape {shape(past)}; expected ({b}, {hkv}, {dk}, {dv})")
    return rule, b, t, hq, hkv, dk, dv


@register("LinearAttention", pattern="opaque")
def linear_attention(
    ctx: OpContext,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    past: Tensor | None = None,
    decay: Tensor | None = None,
    beta: Tensor | None = None,
) -> list[Tensor]:
    """ONNX LinearAttention (update rules linear, gated, delta, gated_delta; GQA/MQA; per-head or
    per-key-dimension decay): the output ``(B, T, Hq*dv)`` and the final state ``(B, Hkv, dk, dv)``."""
    rule, B, T, Hq, Hkv, dk, dv = _la_check(ctx, q, k, v, past, decay, beta)
    out_dt = dtype_of(q)
    acc = _acc_type(out_dt)
    state_dt = dtype_of(past) if past is not None else out_dt
    grp = Hq // Hkv
    scale = float(ctx.attr("scale", 0.0) or 0.0)
    if scale == 0.0:
        scale = 1.0 / math.sqrt(dk)

    def ld(t: Tensor, *idx: Any) -> E.PrimExpr:
        return cast(t[idx], acc)

    def prev0(b: Any, h: Any, d: Any, m: Any) -> E.PrimExpr:
        return ld(past, b, h, d, m) if past is not None else const_like(0, acc)

    prev: Any = prev0
    outs: list[Tensor] = []
    state: Tensor | None = None
    for t in range(T):
        if decay is not None:
            per_dim = shape(decay)[2] != Hkv

            def decayed(b: Any, h: Any, d: Any, m: Any, t: int = t, p: Any = prev, per_dim: bool = per_dim) -> Any:
                g = ld(decay, b, t, h * dk + d) if per_dim else ld(decay, b, t, h)
                return te.exp(g) * p(b, h, d, m)

            sprev: Any = decayed
        else:
            sprev = prev
        if beta is not None:
            r = te.reduce_axis((0, dk), name="d")
            retrieved = compute(
                (B, Hkv, dv),
                lambda b, h, m, t=t, sp=sprev, r=r: te.sum(sp(b, h, r.var, m) * ld(k, b, t, h * dk + r.var), axis=r),
                name=uname("la_retrieved"),
            )
            bh = shape(beta)[2] != 1

            def upd(b: Any, h: Any, m: Any, t: int = t, rt: Tensor = retrieved, bh: bool = bh) -> Any:
                bt = ld(beta, b, t, h if bh else 0)
                return bt * (ld(v, b, t, h * dv + m) - rt[b, h, m])
        else:

            def upd(b: Any, h: Any, m: Any, t: int = t) -> Any:
                return ld(v, b, t, h * dv + m)

        state = compute(
            (B, Hkv, dk, dv),
            lambda b, h, d, m, t=t, sp=sprev, u=upd: sp(b, h, d, m) + ld(k, b, t, h * dk + d) * u(b, h, m),
            name=uname("la_state"),
            workspace=True,
        )
        r2 = te.reduce_axis((0, dk), name="d")
        outs.append(
            compute(
                (B, Hq, dv),
                lambda b, h, m, t=t, s=state, r2=r2: te.sum(
                    ld(q, b, t, h * dk + r2.var) * const_like(scale, acc) * s[b, h // grp, r2.var, m], axis=r2
                ),
                name=uname("la_out"),
            )
        )
        prev = lambda b, h, d, m, s=state: s[b, h, d, m]  # noqa: E731

    def pick(b: Any, t: Any, j: Any) -> Any:
        h, m = j // dv, j % dv
        val = outs[T - 1][b, h, m]
        for tt in range(T - 2, -1, -1):
            val = te.if_then_else(t == tt, outs[tt][b, h, m], val)
        return cast(val, out_dt)

    output = compute((B, T, Hq * dv), pick, name=uname("la_output"))
    present = compute((B, Hkv, dk, dv), lambda b, h, d, m: cast(prev(b, h, d, m), state_dt), name=uname("la_present"))
    return [output, present]


# -- CausalConvWithState ------------------------------------------------------------------------
@register("CausalConvWithState")
def causal_conv_with_state(
    ctx: OpContext, x: Tensor, w: Tensor, bias: Tensor | None = None, past: Tensor | None = None
) -> list[Tensor]:
    """ONNX CausalConvWithState: ``out[b, c, l] = act(bias[c] + sum_j w[c, 0, j] * p[b, c, l + j])``
    over ``p = concat(past_state or zeros, x)``; the new state is the last ``k - 1`` positions of ``p``."""
    act = _str_attr(ctx, "activation", "none")
    if act not in ("none", "silu", "swish"):
        raise ctx.fail(f"activation={act!r} is not supported; use 'none', 'silu' or 'swish'")
    dt = dtype_of(x)
    if dt not in _FLOATS:
        raise ctx.fail(f"input has element type {dt}; CausalConvWithState takes float16/32/64")
    xs, ws = shape(x), shape(w)
    if len(xs) != 3:
        raise ctx.fail(f"input must be rank 3 (batch, channels, length), got shape {xs}")
    B, C, L = xs
    if len(ws) != 3 or ws[0] != C or ws[1] != 1 or ws[2] < 1:
        raise ctx.fail(f"weight must have shape ({C}, 1, k) with k >= 1, got {ws}")
    K = ws[2]
    if bias is not None and shape(bias) != (C,):
        raise ctx.fail(f"bias must have shape ({C},), got {shape(bias)}")
    if past is not None and shape(past) != (B, C, K - 1):
        raise ctx.fail(f"past_state must have shape ({B}, {C}, {K - 1}), got {shape(past)}")
    acc = _acc_type(dt)

    def padded(b: Any, c: Any, p: Any, lo: int) -> E.PrimExpr:
        """``p``-th element of the padded sequence, where ``p >= lo`` is known statically."""
        xv = cast(x[b, c, E.max_expr(p - (K - 1), 0)], acc)
        if lo >= K - 1:
            return cast(x[b, c, p - (K - 1)], acc)
        pv = cast(past[b, c, E.min_expr(p, K - 2)], acc) if past is not None else const_like(0, acc)
        return te.if_then_else(p < K - 1, pv, xv)

    def body(b: Any, c: Any, li: Any) -> E.PrimExpr:
        s = cast(bias[c], acc) if bias is not None else const_like(0, acc)
        for j in range(K):
            s = s + cast(w[c, 0, j], acc) * padded(b, c, li + j, j)
        if act != "none":
            s = s * te.sigmoid(s)
        return cast(s, dt)

    out = compute((B, C, L), body, name=uname("causal_conv"))
    state = compute((B, C, K - 1), lambda b, c, i: cast(padded(b, c, i + L, L), dt), name=uname("causal_state"))
    return [out, state]
