"""Optimizer steps of the ``ai.onnx.preview.training`` domain: ``Adagrad``, ``Adam``, ``Momentum``.

Each takes a scalar learning rate ``R``, a scalar update count ``T`` (int64) and, for ``n``
optimized tensors, the inputs grouped by kind (``X_1..X_n, G_1..G_n, H_1..H_n``); its outputs are
grouped the same way (all new ``X``, then all new states). Every output is elementwise in the
inputs, so each is one injective tensor expression. ``R`` and ``T`` are read inside the kernel:
they may be computed at run time. Arithmetic is in ``X``'s floating-point type; powers of the
update count (Adam's bias correction) in float64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import cast, const_like, dtype_of, elementwise

_DOMAIN = "ai.onnx.preview.training"
_FLOATS = ("float16", "float32", "float64")


def _groups(ctx: OpContext, args: Sequence[Tensor | None], kinds: str) -> tuple[Tensor, Tensor, list[list[Tensor]]]:
    """``R``, ``T`` and one group of ``n`` tensors per letter of ``kinds``; fails on a bad input list."""
    names = ", ".join(["R", "T"] + [f"{k}_1..{k}_n" for k in kinds])
    if len(args) < 2 + len(kinds) or (len(args) - 2) % len(kinds) or any(a is None for a in args):
        raise ctx.fail(f"takes inputs {names}, got {len(args)} inputs (some omitted or not a multiple)")
    n = (len(args) - 2) // len(kinds)
    r, t = args[0], args[1]
    assert r is not None and t is not None
    groups = [[a for a in args[2 + k * n : 2 + (k + 1) * n] if a is not None] for k in range(len(kinds))]
    dt = dtype_of(groups[0][0])
    if dt not in _FLOATS:
        raise ctx.fail(f"optimized tensors have element type {dt}; the optimizer takes float16, float32 or float64")
    for grp in groups:
        for a in grp:
            if dtype_of(a) != dt:
                raise ctx.fail(f"all optimized tensors and states must have the same type ({dt}), got {dtype_of(a)}")
    if not dtype_of(r).startswith("float"):
        raise ctx.fail(f"learning rate R has element type {dtype_of(r)}; it must be a float")
    return r, t, groups


def _attr_float(ctx: OpContext, name: str, default: float | None) -> float:
    v = ctx.attr(name, default)
    if v is None:
        raise ctx.fail(f"attribute {name!r} is required")
    return float(v)


def _step(
    name: str, r: Tensor, t: Tensor, tensors: Sequence[Tensor], dt: str, f: Callable[..., Any]
) -> Tensor:
    """An elementwise output ``f(r, t, *loads)`` with ``r`` cast to ``dt`` and ``t`` to float64."""

    def body(rv: E.PrimExpr, tv: E.PrimExpr, *vals: E.PrimExpr) -> E.PrimExpr:
        return f(cast(rv, dt), cast(tv, "float64"), *vals)

    return elementwise(name, [r, t, *tensors], body, dt)


@register(f"{_DOMAIN}.Adagrad")
def adagrad(ctx: OpContext, *args: Tensor | None) -> list[Tensor]:
    """One ADAGRAD step: ``X_new = X - r G' / (sqrt(H_new) + eps)`` with ``r = R / (1 + T decay)``,
    ``G' = norm_coefficient X + G``, ``H_new = H + G'^2``."""
    r, t, (xs, gs, hs) = _groups(ctx, args, "XGH")
    dt = dtype_of(xs[0])
    nc = _attr_float(ctx, "norm_coefficient", 0.0)
    decay = _attr_float(ctx, "decay_factor", 0.0)
    eps = _attr_float(ctx, "epsilon", 1e-6)

    def c(v: float) -> E.PrimExpr:
        return const_like(v, dt)

    def greg(x: E.PrimExpr, g: E.PrimExpr) -> E.PrimExpr:
        return c(nc) * x + g

    def x_new(rv: E.PrimExpr, tv: E.PrimExpr, x: E.PrimExpr, g: E.PrimExpr, h: E.PrimExpr) -> E.PrimExpr:
        rr = rv / (c(1.0) + cast(tv, dt) * c(decay))
        gr = greg(x, g)
        return x - rr * gr / (te.sqrt(h + gr * gr) + c(eps))

    def h_new(rv: E.PrimExpr, tv: E.PrimExpr, x: E.PrimExpr, g: E.PrimExpr, h: E.PrimExpr) -> E.PrimExpr:
        gr = greg(x, g)
        return h + gr * gr

    outs = [_step("adagrad_x", r, t, (x, g, h), dt, x_new) for x, g, h in zip(xs, gs, hs)]
    outs += [_step("adagrad_h", r, t, (x, g, h), dt, h_new) for x, g, h in zip(xs, gs, hs)]
    return outs


@register(f"{_DOMAIN}.Adam")
def adam(ctx: OpContext, *args: Tensor | None) -> list[Tensor]:
    """One Adam step: ``V_new = alpha V + (1-alpha) G'``, ``H_new = beta H + (1-beta) G'^2``,
    ``X_new = (1 - norm_coefficient_post) (X - R' V_new / (sqrt(H_new) + eps))`` with the
    bias-corrected rate ``R' = R sqrt(1 - beta^T) / (1 - alpha^T)`` when ``T > 0``."""
    r, t, (xs, gs, vs, hs) = _groups(ctx, args, "XGVH")
    dt = dtype_of(xs[0])
    nc = _attr_float(ctx, "norm_coefficient", 0.0)
    ncp = _attr_float(ctx, "norm_coefficient_post", 0.0)
    alpha = _attr_float(ctx, "alpha", 0.9)
    beta = _attr_float(ctx, "beta", 0.999)
    eps = _attr_float(ctx, "epsilon", 1e-6)

    def c(v: float) -> E.PrimExpr:
        return const_like(v, dt)

    def moments(x: E.PrimExpr, g: E.PrimExpr, v: E.PrimExpr, h: E.PrimExpr) -> tuple[E.PrimExpr, E.PrimExpr]:
        gr = c(nc) * x + g
        return c(alpha) * v + c(1.0 - alpha) * gr, c(beta) * h + c(1.0 - beta) * (gr * gr)

    def x_new(rv: E.PrimExpr, tv: E.PrimExpr, x: E.PrimExpr, g: E.PrimExpr, v: E.PrimExpr, h: E.PrimExpr) -> Any:
        vn, hn = moments(x, g, v, h)
        one = E.const(1.0, "float64")
        corr = te.sqrt(one - te.pow(E.const(beta, "float64"), tv)) / (one - te.pow(E.const(alpha, "float64"), tv))
        radj = te.if_then_else(tv > E.const(0.0, "float64"), rv * cast(corr, dt), rv)
        return c(1.0 - ncp) * (x - radj * (vn / (te.sqrt(hn) + c(eps))))

    def v_new(rv: E.PrimExpr, tv: E.PrimExpr, x: E.PrimExpr, g: E.PrimExpr, v: E.PrimExpr, h: E.PrimExpr) -> Any:
        return moments(x, g, v, h)[0]

    def h_new(rv: E.PrimExpr, tv: E.PrimExpr, x: E.PrimExpr, g: E.PrimExpr, v: E.PrimExpr, h: E.PrimExpr) -> Any:
        return moments(x, g, v, h)[1]

    quads = list(zip(xs, gs, vs, hs))
    outs = [_step("adam_x", r, t, q, dt, x_new) for q in quads]
    outs += [_step("adam_v", r, t, q, dt, v_new) for q in quads]
    outs += [_step("adam_h", r, t, q, dt, h_new) for q in quads]
    return outs


@register(f"{_DOMAIN}.Momentum")
def momentum(ctx: OpContext, *args: Tensor | None) -> list[Tensor]:
    """One step of SGD with momentum: ``V_new = alpha V + beta' G'`` (``beta' = 1`` when ``T = 0``),
    ``X_new = X - R V_new`` (``mode="standard"``) or ``X - R (G' + alpha V_new)`` (``"nesterov"``)."""
    r, t, (xs, gs, vs) = _groups(ctx, args, "XGV")
    dt = dtype_of(xs[0])
    for a in ("alpha", "beta", "norm_coefficient", "mode"):
        if ctx.attr(a) is None:
            raise ctx.fail(f"attribute {a!r} is required")
    mode = ctx.attr("mode")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("standard", "nesterov"):
        raise ctx.fail(f"mode={mode!r} is not a momentum mode; use 'standard' or 'nesterov'")
    nc = _attr_float(ctx, "norm_coefficient", None)
    alpha = _attr_float(ctx, "alpha", None)
    beta = _attr_float(ctx, "beta", None)

    def c(v: float) -> E.PrimExpr:
        return const_like(v, dt)

    def vel(tv: E.PrimExpr, x: E.PrimExpr, g: E.PrimExpr, v: E.PrimExpr) -> tuple[E.PrimExpr, E.PrimExpr]:
        gr = c(nc) * x + g
        b = te.if_then_else(tv > E.const(0.0, "float64"), c(beta), c(1.0))
        return c(alpha) * v + b * gr, gr

    def x_new(rv: E.PrimExpr, tv: E.PrimExpr, x: E.PrimExpr, g: E.PrimExpr, v: E.PrimExpr) -> E.PrimExpr:
        vn, gr = vel(tv, x, g, v)
        return x - rv * vn if mode == "standard" else x - rv * (gr + c(alpha) * vn)

    def v_new(rv: E.PrimExpr, tv: E.PrimExpr, x: E.PrimExpr, g: E.PrimExpr, v: E.PrimExpr) -> E.PrimExpr:
        return vel(tv, x, g, v)[0]

    triples = list(zip(xs, gs, vs))
    return [_step("momentum_x", r, t, q, dt, x_new) for q in triples] + [
        _step("momentum_v", r, t, q, dt, v_new) for q in triples
    ]
