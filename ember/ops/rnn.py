"""Recurrent operators (LSTM, GRU, RNN), unrolled over the sequence: each time step is a few
tensor expressions reading the previous step's state."""

from __future__ import annotations

from typing import Any

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import compute, const_like, dtype_of, shape, uname


def _act(name: Any, dt: str, alpha: float | None = None, beta: float | None = None) -> Any:
    n = (name.decode() if isinstance(name, bytes) else str(name)).lower()
    if n == "sigmoid":
        return te.sigmoid
    if n == "tanh":
        return te.tanh
    if n == "relu":
        return lambda v: E.max_expr(v, const_like(0, dt))
    if n == "hardsigmoid":
        a, b = alpha if alpha is not None else 0.2, beta if beta is not None else 0.5
        return lambda v: E.max_expr(
            const_like(0, dt), E.min_expr(const_like(1, dt), const_like(a, dt) * v + const_like(b, dt))
        )
    raise ValueError(f"activation {n} is not supported")


def _seq_input(x: Tensor, layout: int) -> tuple[int, int, int, Any]:
    s = shape(x)
    if layout:
        B, T, I = s
        return T, B, I, lambda t, b, k: x[b, t, k]
    T, B, I = s
    return T, B, I, lambda t, b, k: x[t, b, k]


def _gates(
    name: str,
    xload: Any,
    t: int,
    W: Tensor,
    R: Tensor,
    d: int,
    H: Any,
    I: int,
    Hs: int,
    B: int,
    first_gate: int,
    ngates: int,
    bias: Tensor | None,
    hmul: Any = None,
    with_r: bool = True,
) -> Tensor:
    """``X_t W^T + H R^T + biases`` for gates ``first_gate ... first_gate + ngates - 1``, shape
    (B, ngates*Hs)."""
    K = I + (Hs if with_r else 0)
    k = te.reduce_axis((0, K), name="k")

    def body(b: Any, g: Any) -> Any:
        gg = g + first_gate * Hs
        if with_r:
            hv = H(b, k.var - I) if hmul is None else H(b, k.var - I) * hmul(b, k.var - I)
            src = te.if_then_else(
                k.var < I,
                xload(t, b, E.min_expr(k.var, I - 1)) * W[d, gg, E.min_expr(k.var, I - 1)],
                hv * R[d, gg, E.max_expr(k.var - I, 0)],
            )
        else:
            src = xload(t, b, k.var) * W[d, gg, k.var]
        return te.sum(src, axis=k)

    acc = compute((B, ngates * Hs), body, name=uname(name))
    if bias is None:
        return acc
    nb = shape(bias)[1] // 2

    def add_bias(b: Any, g: Any) -> Any:
        gg = g + first_gate * Hs
        v = acc[b, g] + bias[d, gg]
        return v + bias[d, nb + gg] if with_r else v

    return compute((B, ngates * Hs), add_bias, name=uname(name + "_b"))


def _stack_outputs(steps: list[list[Tensor]], T: int, B: int, Hs: int, layout: int, dt: str) -> Tensor:
    """Y from per-direction, per-step hidden states: (T, D, B, H), or (B, T, D, H) for layout 1."""
    D = len(steps)

    def pick(t: Any, d: Any, b: Any, h: Any) -> Any:
        v = const_like(0, dt)
        for dd in range(D - 1, -1, -1):
            for tt in range(T - 1, -1, -1):
                v = te.if_then_else((t == tt) & (d == dd), steps[dd][tt][b, h], v)
        return v

    if layout:
        return compute((B, T, D, Hs), lambda b, t, d, h: pick(t, d, b, h), name=uname("rnn_y"))
    return compute((T, D, B, Hs), pick, name=uname("rnn_y"))


def _final(states: list[Tensor], B: int, Hs: int, layout: int, dt: str) -> Tensor:
    D = len(states)

    def pick(d: Any, b: Any, h: Any) -> Any:
        v = const_like(0, dt)
        for dd in range(D - 1, -1, -1):
            v = te.if_then_else(d == dd, states[dd][b, h], v)
        return v

    if layout:
        return compute((B, D, Hs), lambda b, d, h: pick(d, b, h), name=uname("rnn_h"))
    return compute((D, B, Hs), pick, name=uname("rnn_h"))


def _common(ctx: OpContext, x: Tensor, W: Tensor) -> tuple[int, int, int, int, Any, int, list[int], str]:
    layout = int(ctx.attr("layout", 0))
    T, B, I, xload = _seq_input(x, layout)
    Hs = int(ctx.attr("hidden_size"))
    direction = ctx.attr("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = {"forward": [0], "reverse": [1], "bidirectional": [0, 1]}[direction]
    if ctx.has(4):
        lens = ctx.value(4)
        if lens is not None and int(lens.min()) != T:
            raise ctx.fail("sequence_lens shorter than the sequence are not supported")
    return T, B, I, Hs, xload, layout, dirs, direction


def _init_state(t: Tensor | None, d: int, B: int, Hs: int, layout: int, dt: str) -> Any:
    if t is None:
        return lambda b, h: const_like(0, dt)
    if layout:
        return lambda b, h: t[b, d, h]
    return lambda b, h: t[d, b, h]


@register("LSTM", pattern="opaque")
def lstm(
    ctx: OpContext,
    x: Tensor,
    W: Tensor,
    R: Tensor,
    Bias: Tensor | None = None,
    seq: Any = None,
    h0: Tensor | None = None,
    c0: Tensor | None = None,
    P: Tensor | None = None,
) -> list[Tensor]:
    """ONNX LSTM (forward, reverse, bidirectional; peepholes; layout 0 and 1)."""
    T, B, I, Hs, xload, layout, dirs, direction = _common(ctx, x, W)
    dt = dtype_of(x)
    acts = ctx.attr("activations") or [b"Sigmoid", b"Tanh", b"Tanh"]
    ys, hs, cs = [], [], []
    for di, d in enumerate(dirs):
        widx = di
        f, g, h = (
            (_act(a, dt) for a in acts[3 * di : 3 * di + 3])
            if len(acts) >= 3 * (di + 1)
            else (_act(a, dt) for a in acts[:3])
        )
        H = _init_state(h0, widx, B, Hs, layout, dt)
        C = _init_state(c0, widx, B, Hs, layout, dt)
        steps: list[Tensor] = [None] * T  # type: ignore[list-item]
        order = range(T) if d == 0 else range(T - 1, -1, -1)
        for t in order:
            gates = _gates("lstm_gates", xload, t, W, R, widx, H, I, Hs, B, 0, 4, Bias)

            def peep(k: int, cfun: Any) -> Any:
                if P is None:
                    return lambda b, j: const_like(0, dt)
                return lambda b, j: P[widx, k * Hs + j] * cfun(b, j)

            Cprev = C
            pi, pf = peep(0, Cprev), peep(2, Cprev)
            c_new = compute(
                (B, Hs),
                lambda b, j: (
                    f(gates[b, 2 * Hs + j] + pf(b, j)) * Cprev(b, j)
                    + f(gates[b, j] + pi(b, j)) * g(gates[b, 3 * Hs + j])
                ),
                name=uname("lstm_c"),
            )
            po = peep(1, lambda b, j: c_new[b, j])
            h_new = compute((B, Hs), lambda b, j: f(gates[b, Hs + j] + po(b, j)) * h(c_new[b, j]), name=uname("lstm_h"))
            steps[t] = h_new
            H = lambda b, j, hn=h_new: hn[b, j]  # noqa: E731
            C = lambda b, j, cn=c_new: cn[b, j]  # noqa: E731
            last_h, last_c = h_new, c_new
        ys.append(steps)
        hs.append(last_h)
        cs.append(last_c)
    return [_stack_outputs(ys, T, B, Hs, layout, dt), _final(hs, B, Hs, layout, dt), _final(cs, B, Hs, layout, dt)]


@register("GRU", pattern="opaque")
def gru(
    ctx: OpContext,
    x: Tensor,
    W: Tensor,
    R: Tensor,
    Bias: Tensor | None = None,
    seq: Any = None,
    h0: Tensor | None = None,
) -> list[Tensor]:
    """ONNX GRU (linear_before_reset 0 and 1)."""
    T, B, I, Hs, xload, layout, dirs, direction = _common(ctx, x, W)
    dt = dtype_of(x)
    lbr = int(ctx.attr("linear_before_reset", 0))
    acts = ctx.attr("activations") or [b"Sigmoid", b"Tanh"]
    ys, hs = [], []
    nb = 3 * Hs
    for di, d in enumerate(dirs):
        f, g = (
            (_act(a, dt) for a in acts[2 * di : 2 * di + 2])
            if len(acts) >= 2 * (di + 1)
            else (_act(a, dt) for a in acts[:2])
        )
        H = _init_state(h0, di, B, Hs, layout, dt)
        steps: list[Tensor] = [None] * T  # type: ignore[list-item]
        order = range(T) if d == 0 else range(T - 1, -1, -1)
        for t in order:
            zr = _gates("gru_zr", xload, t, W, R, di, H, I, Hs, B, 0, 2, Bias)
            z = lambda b, j, zr=zr: f(zr[b, j])  # noqa: E731
            r = lambda b, j, zr=zr: f(zr[b, Hs + j])  # noqa: E731
            xh = _gates("gru_xh", xload, t, W, R, di, H, I, Hs, B, 2, 1, None, with_r=False)
            k = te.reduce_axis((0, Hs), name="kh")
            Hc = H
            if lbr:
                hr = compute(
                    (B, Hs),
                    lambda b, j, Hc=Hc: te.sum(Hc(b, k.var) * R[di, 2 * Hs + j, k.var], axis=k),
                    name=uname("gru_hr"),
                )

                def cand(b: Any, j: Any, hr: Any = hr, xh: Any = xh, r: Any = r) -> Any:
                    rb = Bias[di, nb + 2 * Hs + j] if Bias is not None else const_like(0, dt)
                    wb = Bias[di, 2 * Hs + j] if Bias is not None else const_like(0, dt)
                    return g(xh[b, j] + wb + r(b, j) * (hr[b, j] + rb))
            else:
                hr = compute(
                    (B, Hs),
                    lambda b, j, Hc=Hc, r=r: te.sum(r(b, k.var) * Hc(b, k.var) * R[di, 2 * Hs + j, k.var], axis=k),
                    name=uname("gru_rh"),
                )

                def cand(b: Any, j: Any, hr: Any = hr, xh: Any = xh, r: Any = r) -> Any:
                    rb = Bias[di, nb + 2 * Hs + j] if Bias is not None else const_like(0, dt)
                    wb = Bias[di, 2 * Hs + j] if Bias is not None else const_like(0, dt)
                    return g(xh[b, j] + wb + hr[b, j] + rb)

            h_new = compute(
                (B, Hs),
                lambda b, j, z=z, cand=cand, Hc=Hc: (const_like(1, dt) - z(b, j)) * cand(b, j) + z(b, j) * Hc(b, j),
                name=uname("gru_h"),
            )
            steps[t] = h_new
            H = lambda b, j, hn=h_new: hn[b, j]  # noqa: E731
            last = h_new
        ys.append(steps)
        hs.append(last)
    return [_stack_outputs(ys, T, B, Hs, layout, dt), _final(hs, B, Hs, layout, dt)]


@register("RNN", pattern="opaque")
def rnn(
    ctx: OpContext,
    x: Tensor,
    W: Tensor,
    R: Tensor,
    Bias: Tensor | None = None,
    seq: Any = None,
    h0: Tensor | None = None,
) -> list[Tensor]:
    """ONNX RNN (simple recurrent network)."""
    T, B, I, Hs, xload, layout, dirs, direction = _common(ctx, x, W)
    dt = dtype_of(x)
    acts = ctx.attr("activations") or [b"Tanh"]
    ys, hs = [], []
    for di, d in enumerate(dirs):
        f = _act(acts[di] if len(acts) > di else acts[0], dt)
        H = _init_state(h0, di, B, Hs, layout, dt)
        steps: list[Tensor] = [None] * T  # type: ignore[list-item]
        order = range(T) if d == 0 else range(T - 1, -1, -1)
        for t in order:
            gates = _gates("rnn_gates", xload, t, W, R, di, H, I, Hs, B, 0, 1, Bias)
            h_new = compute((B, Hs), lambda b, j, gates=gates: f(gates[b, j]), name=uname("rnn_h"))
            steps[t] = h_new
            H = lambda b, j, hn=h_new: hn[b, j]  # noqa: E731
            last = h_new
        ys.append(steps)
        hs.append(last)
    return [_stack_outputs(ys, T, B, Hs, layout, dt), _final(hs, B, Hs, layout, dt)]


# ruff: noqa: B023  -- the lambdas are traced by te.compute at once, inside the iteration that defines them
