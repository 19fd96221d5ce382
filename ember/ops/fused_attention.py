"""``ember.FusedAttention``: an exported transformer's attention as one operator.

The graph pass :class:`ember.graph.attention_fusion.FuseAttention` (CPU targets) rewrites the
nodes an exporter writes for scaled dot-product attention —

    MatMul(Q, Kᵀ) → [Mul | Div by a scalar] → [Add mask] → Softmax(last axis)
    → [Where(IsNaN(p), 0, p)] → MatMul(p, V) → [Transpose(0, 2, 1, 3)]

— into one node of this operator, computed by one kernel whose schedule
(:mod:`ember.strategy.cpu_attention`) takes a block of query rows of one head at a time: its
scores, the softmax and the product with ``V`` stay in small buffers of that block, and the
probabilities are never written to memory as a whole tensor.

Inputs: ``Q`` ``[*batch, S, D]``, ``K`` transposed ``[*batch, D, L]`` (the second operand of the
first MatMul as it is), ``V`` ``[*batch, L, Dv]``, optional ``mask`` broadcasting to the scores
``[*batch, S, L]``. Attributes: ``scale`` (float) with ``scale_op`` ``"mul"`` or ``"div"`` (absent:
no scaling), ``nan_to_zero`` (1: the ``Where(IsNaN(p), 0, p)`` after the Softmax),
``out_perm`` (``[0, 2, 1, 3]``: the output transposed, ``[B, S, H, Dv]``; absent: ``[*batch, S, Dv]``).

The values are the unfused graph's up to rounding: the scores are ``Q Kᵀ`` scaled exactly as
the graph's Mul or Div, plus the mask; the softmax subtracts the row maximum first
(``exp(x - max)``, as :func:`ember.ops.reduce.softmax_tensor`); the output is
``(sum_j exp(x_j - max) V_j) / sum_j exp(x_j - max)`` — the division by the row sum after the
product instead of before (the last bits differ). A row whose sum is NaN (every score ``-inf``:
a fully masked row; or a NaN or ``+inf`` score) has NaN probabilities everywhere, so its output
is NaN, or 0 with ``nan_to_zero`` — what the Where gives (with ``nan_to_zero`` a row with some
NaN probability has NaN in all of them: the sum is NaN exactly when one exponential is).
"""

from __future__ import annotations

from typing import Any

from .. import te
from ..te import Tensor
from .registry import OpContext, register
from .util import bcast_load, compute, const_like, dtype_of, shape, uname

#: The op type the graph pass writes.
FUSED_ATTENTION = "ember.FusedAttention"
#: Tags of the operator's stages, for the CPU schedule (:mod:`ember.strategy.cpu_attention`).
TAG_OUT = "fattn_out"
TAG_QK = "fattn_qk"
TAG_SCORES = "fattn_scores"
TAG_MAX = "fattn_max"
TAG_EXP = "fattn_exp"
TAG_SUM = "fattn_sum"
TAG_PV = "fattn_pv"


@register(FUSED_ATTENTION, pattern="opaque")
def fused_attention(ctx: OpContext, q: Tensor, kt: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """The attention block of an exported transformer (module docstring); float32."""
    qs, ks, vs = shape(q), shape(kt), shape(v)
    if len(qs) < 3 or len(ks) != len(qs) or len(vs) != len(qs):
        raise ctx.fail(f"Q, Kᵀ and V need one rank of at least 3, got {qs}, {ks}, {vs}")
    batch = qs[:-2]
    S, D = qs[-2:]
    L = ks[-1]
    Dv = vs[-1]
    if ks[:-2] != batch or vs[:-2] != batch or ks[-2] != D or vs[-2] != L:
        raise ctx.fail(f"Q {qs}, Kᵀ {ks} and V {vs} do not form an attention (batch, S x D, D x L, L x Dv)")
    dt = dtype_of(q)
    if dt != "float32" or dtype_of(kt) != dt or dtype_of(v) != dt or (mask is not None and dtype_of(mask) != dt):
        raise ctx.fail("the fused attention computes float32 only")
    scale_op = ctx.attr("scale_op")
    if scale_op not in (None, "mul", "div"):
        raise ctx.fail(f"scale_op must be 'mul' or 'div', got {scale_op!r}")
    scale = const_like(float(ctx.attr("scale", 1.0)), dt)
    nan_to_zero = bool(int(ctx.attr("nan_to_zero", 0)))
    perm = ctx.attr("out_perm")
    if perm is not None and (len(qs) != 4 or list(perm) != [0, 2, 1, 3]):
        raise ctx.fail(f"out_perm must be [0, 2, 1, 3] of a rank-4 attention, got {perm}")
    nb = len(batch)
    full = batch + (S, L)

    d = te.reduce_axis((0, D), name="fa_d")
    qk = compute(full, lambda *i: te.sum(q[i[:nb] + (i[nb], d.var)] * kt[i[:nb] + (d.var, i[nb + 1])], axis=d),
                 name=uname("fattn_qk"), tag=TAG_QK)

    def score(*i: Any) -> Any:
        x = qk[i]
        if scale_op == "mul":
            x = x * scale
        elif scale_op == "div":
            x = x / scale
        if mask is not None:
            x = x + bcast_load(mask, full, i)
        return x

    # the scores of a block are stored once (the product's register tiles write them)
    sc = compute(full, score, name=uname("fattn_scores"), tag=TAG_SCORES, materialize=True)
    jm = te.reduce_axis((0, L), name="fa_jm")
    mx = compute(batch + (S,), lambda *i: te.max(sc[i + (jm.var,)], axis=jm), name=uname("fattn_max"), tag=TAG_MAX)
    ex = compute(full, lambda *i: te.exp(sc[i] - mx[i[:-1]]), name=uname("fattn_exp"), tag=TAG_EXP,
                 materialize=True)
    js = te.reduce_axis((0, L), name="fa_js")
    sm = compute(batch + (S,), lambda *i: te.sum(ex[i + (js.var,)], axis=js), name=uname("fattn_sum"), tag=TAG_SUM)
    jv = te.reduce_axis((0, L), name="fa_jv")
    pv = compute(batch + (S, Dv), lambda *i: te.sum(ex[i[:-1] + (jv.var,)] * v[i[:-2] + (jv.var, i[-1])], axis=jv),
                 name=uname("fattn_pv"), tag=TAG_PV)
    zero = const_like(0, dt)

    def result(*i: Any) -> Any:
        y = pv[i] / sm[i[:-1]]
        return te.if_then_else(te.isnan(sm[i[:-1]]), zero, y) if nan_to_zero else y

    if perm is None:
        return compute(batch + (S, Dv), result, name=uname("fattn_out"), tag=TAG_OUT)
    B, H = batch
    return compute((B, S, H, Dv), lambda b, s, h, e: result(b, h, s, e), name=uname("fattn_out"), tag=TAG_OUT,
                   attrs={"out_perm": 1})


def is_fused_attention(op: Any) -> bool:
    """True for the output stage of :func:`fused_attention`."""
    return getattr(op, "tag", "") == TAG_OUT


__all__ = ["FUSED_ATTENTION", "fused_attention", "is_fused_attention"]
