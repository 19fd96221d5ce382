"""Loss operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (reduction none, sum,
mean; class weights; ignore_index)."""

from __future__ import annotations

from typing import Any

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .reduce import softmax_tensor
from .registry import OpContext, register
from .util import cast, compute, const_like, dtype_of, shape, uname


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def nll(x: Tensor, target: Tensor, weight: Tensor | None, reduction: str, ignore: int | None) -> Tensor:
    """Negative log-likelihood of log-probabilities ``x`` (N, C, d...) at class ``target``."""
    sx = shape(x)
    st = shape(target)
    dt = dtype_of(x)
    C = sx[1]

    def cls(i: tuple[Any, ...]) -> Any:
        t = cast(target[i], "int32")
        return E.max_expr(E.min_expr(t, C - 1), 0)

    def valid(i: tuple[Any, ...]) -> Any:
        return E.const(True, "bool") if ignore is None else cast(target[i], "int64") != E.const(ignore, "int64")

    def wt(i: tuple[Any, ...]) -> Any:
        w = weight[cls(i)] if weight is not None else const_like(1, dt)
        return te.if_then_else(valid(i), w, const_like(0, dt))

    def loss_at(*i: Any) -> Any:
        v = -x[(i[0], cls(i)) + tuple(i[1:])] * wt(i)
        return te.if_then_else(valid(i), v, const_like(0, dt))

    loss = compute(st, loss_at, name=uname("nll"))
    if reduction == "none":
        return loss
    axes = [te.reduce_axis((0, d), name=f"n{k}") for k, d in enumerate(st)]
    total = compute((), lambda: te.sum(loss[tuple(a.var for a in axes)], axis=axes), name=uname("nll_sum"))
    if reduction == "sum":
        return total
    axes2 = [te.reduce_axis((0, d), name=f"w{k}") for k, d in enumerate(st)]
    wsum = compute((), lambda: te.sum(wt(tuple(a.var for a in axes2)), axis=axes2), name=uname("nll_wsum"))
    return compute((), lambda: total[()] / wsum[()], name=uname("nll_mean"))


@register("NegativeLogLikelihoodLoss", pattern="opaque")
def nll_loss(ctx: OpContext, x: Tensor, target: Tensor, weight: Tensor | None = None) -> Tensor:
    """ONNX NegativeLogLikelihoodLoss."""
    ig = ctx.attr("ignore_index")
    return nll(x, target, weight, _s(ctx.attr("reduction", "mean")), None if ig is None else int(ig))


@register("SoftmaxCrossEntropyLoss", pattern="opaque")
def softmax_ce(ctx: OpContext, scores: Tensor, labels: Tensor, weight: Tensor | None = None) -> list[Tensor]:
    """ONNX SoftmaxCrossEntropyLoss; the second output is the log-probabilities."""
    ig = ctx.attr("ignore_index")
    logp = softmax_tensor(scores, [1], log=True)
    loss = nll(logp, labels, weight, _s(ctx.attr("reduction", "mean")), None if ig is None else int(ig))
    return [loss, logp]
