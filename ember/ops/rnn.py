"""Recurrent operators (LSTM, GRU, RNN), unrolled over the sequence: each time step is a few
tensor expressions reading the previous step's state."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import cast, compute, const_like, dtype_of, shape, uname


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


def _stack_outputs(
    steps: list[list[Tensor]], times: list[Any], T: int, B: int, Hs: int, layout: int, dt: str
) -> Tensor:
    """Y from per-direction outputs in step order (zero where a step did not run) and
    ``times[d](s, b)``, the time index step ``s`` of direction ``d`` wrote for batch entry ``b``:
    (T, D, B, H), or (B, T, D, H) for layout 1; zero where no step wrote."""
    D = len(steps)

    def pick(t: Any, d: Any, b: Any, h: Any) -> Any:
        v = const_like(0, dt)
        for dd in range(D - 1, -1, -1):
            for s in range(T - 1, -1, -1):
                v = te.if_then_else((times[dd](s, b) == t) & (d == dd), steps[dd][s][b, h], v)
        return v

    if layout:
        return compute((B, T, D, Hs), lambda b, t, d, h: pick(t, d, b, h), name=uname("rnn_y"))
    return compute((T, D, B, Hs), pick, name=uname("rnn_y"))


class _Order:
    """The time step each recurrence step of one direction reads, and whether it runs, per
    batch entry: forward ``s``; reverse ``T-1-s``, or with ``sequence_lens`` ``len[b]-1-s``
    (the step runs while ``s < len[b]``)."""

    def __init__(self, T: int, lens: Tensor | None, reverse: bool):
        self.T, self.lens, self.reverse = T, lens, reverse

    def length(self, b: Any) -> Any:
        assert self.lens is not None
        n = cast(self.lens[b], "int32")
        return E.max_expr(E.min_expr(n, E.const(self.T, "int32")), E.const(0, "int32"))

    def time(self, s: int, b: Any) -> Any:
        if not self.reverse:
            return E.const(s, "int32")
        if self.lens is None:
            return E.const(self.T - 1 - s, "int32")
        return self.length(b) - 1 - s

    def read(self, s: int, b: Any) -> Any:
        """The input time index of step ``s`` (clamped into the sequence)."""
        return E.max_expr(self.time(s, b), E.const(0, "int32"))

    def live(self, s: int, b: Any) -> Any:
        """Whether step ``s`` runs for batch entry ``b`` (None: always)."""
        return None if self.lens is None else E.const(s, "int32") < self.length(b)


def _step_state(new: Tensor, prev: Any, order: _Order, s: int, dt: str) -> tuple[Tensor, Tensor]:
    """(the state after step ``s``, its output): ``new`` where the step runs, else the previous
    state and zero."""
    if order.lens is None:
        return new, new
    B, Hs = shape(new)
    state = compute((B, Hs), lambda b, j: te.if_then_else(order.live(s, b), new[b, j], prev(b, j)),
                    name=uname("rnn_keep"), materialize=True)
    y = compute((B, Hs), lambda b, j: te.if_then_else(order.live(s, b), new[b, j], const_like(0, dt)),
                name=uname("rnn_out"))
    return state, y


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


def _common(
    ctx: OpContext, x: Tensor, W: Tensor, seq: Tensor | None
) -> tuple[int, int, int, int, Any, int, list[int], Tensor | None]:
    layout = int(ctx.attr("layout", 0))
    T, B, I, xload = _seq_input(x, layout)
    Hs = int(ctx.attr("hidden_size"))
    direction = ctx.attr("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = {"forward": [0], "reverse": [1], "bidirectional": [0, 1]}[direction]
    lens = seq
    if seq is not None and ctx.inputs[4] in ctx.consts and int(np.min(ctx.consts[ctx.inputs[4]])) >= T:
        lens = None  # every entry runs the whole sequence
    if lens is not None and shape(lens) != (B,):
        raise ctx.fail(f"sequence_lens has shape {shape(lens)}; expected ({B},)")
    return T, B, I, Hs, xload, layout, dirs, lens


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
    seq: Tensor | None = None,
    h0: Tensor | None = None,
    c0: Tensor | None = None,
    P: Tensor | None = None,
) -> list[Tensor]:
    """ONNX LSTM (forward, reverse, bidirectional; peepholes; layout 0 and 1; sequence_lens),
    unrolled in one kernel: the reference form, used when :class:`ember.graph.recurrent.ExpandRecurrent`
    does not expand the node (weights computed at run time, or the pass disabled)."""
    T, B, I, Hs, xload, layout, dirs, lens = _common(ctx, x, W, seq)
    dt = dtype_of(x)
    acts = ctx.attr("activations") or [b"Sigmoid", b"Tanh", b"Tanh"]
    ys, hs, cs, times = [], [], [], []
    for di, d in enumerate(dirs):
        widx = di
        f, g, h = (
            (_act(a, dt) for a in acts[3 * di : 3 * di + 3])
            if len(acts) >= 3 * (di + 1)
            else (_act(a, dt) for a in acts[:3])
        )
        H = _init_state(h0, widx, B, Hs, layout, dt)
        C = _init_state(c0, widx, B, Hs, layout, dt)
        order = _Order(T, lens, d == 1)
        steps: list[Tensor] = []
        for s in range(T):
            xl = lambda _t, b, k, s=s, order=order: xload(order.read(s, b), b, k)  # noqa: E731
            gates = _gates("lstm_gates", xl, 0, W, R, widx, H, I, Hs, B, 0, 4, Bias)

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
                materialize=True,
            )
            po = peep(1, lambda b, j: c_new[b, j])
            h_new = compute((B, Hs), lambda b, j: f(gates[b, Hs + j] + po(b, j)) * h(c_new[b, j]), name=uname("lstm_h"),
                            materialize=True)
            h_state, y = _step_state(h_new, H, order, s, dt)
            c_state, _ = _step_state(c_new, Cprev, order, s, dt)
            steps.append(y)
            H = lambda b, j, hn=h_state: hn[b, j]  # noqa: E731
            C = lambda b, j, cn=c_state: cn[b, j]  # noqa: E731
            last_h, last_c = h_state, c_state
        ys.append(steps)
        times.append(order.time)
        hs.append(last_h)
        cs.append(last_c)
    y_out = _stack_outputs(ys, times, T, B, Hs, layout, dt)
    return [y_out, _final(hs, B, Hs, layout, dt), _final(cs, B, Hs, layout, dt)]


@register("GRU", pattern="opaque")
def gru(
    ctx: OpContext,
    x: Tensor,
    W: Tensor,
    R: Tensor,
    Bias: Tensor | None = None,
    seq: Tensor | None = None,
    h0: Tensor | None = None,
) -> list[Tensor]:
    """ONNX GRU (linear_before_reset 0 and 1; sequence_lens), the reference form (see :func:`lstm`)."""
    T, B, I, Hs, xload, layout, dirs, lens = _common(ctx, x, W, seq)
    dt = dtype_of(x)
    lbr = int(ctx.attr("linear_before_reset", 0))
    acts = ctx.attr("activations") or [b"Sigmoid", b"Tanh"]
    ys, hs, times = [], [], []
    nb = 3 * Hs
    for di, d in enumerate(dirs):
        f, g = (
            (_act(a, dt) for a in acts[2 * di : 2 * di + 2])
            if len(acts) >= 2 * (di + 1)
            else (_act(a, dt) for a in acts[:2])
        )
        H = _init_state(h0, di, B, Hs, layout, dt)
        order = _Order(T, lens, d == 1)
        steps: list[Tensor] = []
        for s in range(T):
            xl = lambda _t, b, k, s=s, order=order: xload(order.read(s, b), b, k)  # noqa: E731
            zr = _gates("gru_zr", xl, 0, W, R, di, H, I, Hs, B, 0, 2, Bias)
            z = lambda b, j, zr=zr: f(zr[b, j])  # noqa: E731
            r = lambda b, j, zr=zr: f(zr[b, Hs + j])  # noqa: E731
            xh = _gates("gru_xh", xl, 0, W, R, di, H, I, Hs, B, 2, 1, None, with_r=False)
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
                materialize=True,
            )
            h_state, y = _step_state(h_new, Hc, order, s, dt)
            steps.append(y)
            H = lambda b, j, hn=h_state: hn[b, j]  # noqa: E731
            last = h_state
        ys.append(steps)
        times.append(order.time)
        hs.append(last)
    return [_stack_outputs(ys, times, T, B, Hs, layout, dt), _final(hs, B, Hs, layout, dt)]


@register("RNN", pattern="opaque")
def rnn(
    ctx: OpContext,
    x: Tensor,
    W: Tensor,
    R: Tensor,
    Bias: Tensor | None = None,
    seq: Tensor | None = None,
    h0: Tensor | None = None,
) -> list[Tensor]:
    """ONNX RNN (simple recurrent network; sequence_lens), the reference form (see :func:`lstm`)."""
    T, B, I, Hs, xload, layout, dirs, lens = _common(ctx, x, W, seq)
    dt = dtype_of(x)
    acts = ctx.attr("activations") or [b"Tanh"]
    ys, hs, times = [], [], []
    for di, d in enumerate(dirs):
        f = _act(acts[di] if len(acts) > di else acts[0], dt)
        H = _init_state(h0, di, B, Hs, layout, dt)
        order = _Order(T, lens, d == 1)
        steps: list[Tensor] = []
        for s in range(T):
            xl = lambda _t, b, k, s=s, order=order: xload(order.read(s, b), b, k)  # noqa: E731
            gates = _gates("rnn_gates", xl, 0, W, R, di, H, I, Hs, B, 0, 1, Bias)
            h_new = compute((B, Hs), lambda b, j, gates=gates: f(gates[b, j]), name=uname("rnn_h"),
                            materialize=True)
            h_state, y = _step_state(h_new, H, order, s, dt)
            steps.append(y)
            H = lambda b, j, hn=h_state: hn[b, j]  # noqa: E731
            last = h_state
        ys.append(steps)
        times.append(order.time)
        hs.append(last)
    return [_stack_outputs(ys, times, T, B, Hs, layout, dt), _final(hs, B, Hs, layout, dt)]


# ruff: noqa: B023  -- the lambdas are traced by te.compute at once, inside the iteration that defines them


# -- step cells of the expanded recurrences (ember.graph.recurrent) ------------------------------
# ExpandRecurrent rewrites an LSTM/GRU/RNN node into one input-projection GEMM for the whole
# sequence and, per time step, a GEMM of the previous hidden state with the recurrent weights
# followed by one of these cells: the state lives in planned buffers, each step computed once.
_ALPHA_DEFAULTS: dict[str, float] = {
    "hardsigmoid": 0.2, "leakyrelu": 0.01, "thresholdedrelu": 1.0, "scaledtanh": 1.0, "affine": 1.0, "elu": 1.0,
}
_BETA_DEFAULTS: dict[str, float] = {"hardsigmoid": 0.5, "scaledtanh": 1.0, "affine": 0.0}


def activation(name: Any, dt: str, alpha: float | None = None, beta: float | None = None) -> Any:
    """The ONNX recurrent activation ``name`` (Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu,
    ThresholdedRelu, ScaledTanh, Affine, Elu, Softsign, Softplus) as a function of a te
    expression of type ``dt``; ``alpha``/``beta`` default as ONNX says. ValueError for another."""
    n = (name.decode() if isinstance(name, bytes) else str(name)).lower()
    a = alpha if alpha is not None else _ALPHA_DEFAULTS.get(n, 0.0)
    b = beta if beta is not None else _BETA_DEFAULTS.get(n, 0.0)
    zero, one = const_like(0, dt), const_like(1, dt)
    ca, cb = const_like(a, dt), const_like(b, dt)
    table: dict[str, Any] = {
        "sigmoid": te.sigmoid,
        "tanh": te.tanh,
        "relu": lambda v: E.max_expr(v, zero),
        "hardsigmoid": lambda v: E.max_expr(zero, E.min_expr(one, ca * v + cb)),
        "leakyrelu": lambda v: te.if_then_else(v < zero, ca * v, v),
        "thresholdedrelu": lambda v: te.if_then_else(v > ca, v, zero),
        "scaledtanh": lambda v: ca * te.tanh(cb * v),
        "affine": lambda v: ca * v + cb,
        "elu": lambda v: te.if_then_else(v < zero, ca * (te.exp(v) - one), v),
        "softsign": lambda v: v / (one + te.abs(v)),
        "softplus": lambda v: te.log(one + te.exp(v)),
    }
    if n not in table:
        raise ValueError(f"activation {n} is not supported")
    return table[n]


def uses_alpha(name: Any) -> bool:
    """True when the ONNX recurrent activation ``name`` reads an alpha value."""
    return (name.decode() if isinstance(name, bytes) else str(name)).lower() in _ALPHA_DEFAULTS


def uses_beta(name: Any) -> bool:
    """True when the ONNX recurrent activation ``name`` reads a beta value."""
    return (name.decode() if isinstance(name, bytes) else str(name)).lower() in _BETA_DEFAULTS


def _cell_acts(ctx: OpContext, dt: str, n: int) -> list[Any]:
    """The ``n`` activations of a cell from its ``activations``, ``activation_alpha`` and
    ``activation_beta`` attributes (one entry per activation, NaN for "the default")."""
    names = list(ctx.attr("activations"))
    alphas = list(ctx.attr("activation_alpha") or [float("nan")] * len(names))
    betas = list(ctx.attr("activation_beta") or [float("nan")] * len(names))
    if len(names) != n or len(alphas) != n or len(betas) != n:
        raise ctx.fail(f"expected {n} activations with their alpha and beta, got {names}")
    try:
        return [
            activation(a, dt, None if np.isnan(al) else float(al), None if np.isnan(be) else float(be))
            for a, al, be in zip(names, alphas, betas)
        ]
    except ValueError as exc:
        raise ctx.fail(str(exc)) from exc


def _clipper(ctx: OpContext, dt: str) -> Any:
    clip = ctx.attr("clip")
    if clip is None:
        return lambda v: v
    c = const_like(float(clip), dt)
    return lambda v: E.max_expr(E.min_expr(v, c), -c)


def _masked(new: Tensor, prev: Tensor | None, mask: Tensor | None, dt: str) -> list[Tensor]:
    """``[state, y]`` of a masked step (state kept and output zero where the sequence ended),
    or ``[new]`` without a mask."""
    if mask is None:
        return [new]
    assert prev is not None
    Bn, Hs = shape(new)[1], shape(new)[2]
    state = compute((1, Bn, Hs), lambda o, b, j: te.if_then_else(mask[0, b, 0], new[0, b, j], prev[0, b, j]),
                    name=uname("rnn_state"))
    y = compute((1, Bn, Hs), lambda o, b, j: te.if_then_else(mask[0, b, 0], new[0, b, j], const_like(0, dt)),
                name=uname("rnn_y"))
    return [state, y]


@register("ember.LSTMCell", pattern="opaque")
def lstm_cell(
    ctx: OpContext,
    gates: Tensor,
    c_prev: Tensor,
    h_prev: Tensor | None = None,
    mask: Tensor | None = None,
    P: Tensor | None = None,
) -> list[Tensor]:
    """One LSTM step after its products: ``gates`` (1, B, 4H) = ``X_t W^T + H_{t-1} R^T`` plus
    both biases (ONNX gate order i, o, f, c), ``c_prev`` (1, B, H); optional ``h_prev`` and a
    boolean ``mask`` (1, B, 1) (where False the state is kept and the output is zero) and
    peepholes ``P`` (3H: i, o, f). Attributes: ``activations`` (f, g, h), ``activation_alpha``,
    ``activation_beta``, ``clip``, ``input_forget``. Outputs ``h``, ``c`` (and ``y`` with a mask)."""
    dt = dtype_of(gates)
    _, Bn, G = shape(gates)
    Hs = G // 4
    f, g, h = _cell_acts(ctx, dt, 3)
    clip = _clipper(ctx, dt)
    coupled = int(ctx.attr("input_forget", 0))

    def peep(k: int, b: Any, j: Any, c: Any) -> Any:
        return gates[0, b, k * Hs + j] + (P[k * Hs + j] * c if P is not None else const_like(0, dt))

    def gate_i(b: Any, j: Any) -> Any:
        return f(clip(peep(0, b, j, c_prev[0, b, j])))

    def c_body(o: Any, b: Any, j: Any) -> Any:
        i = gate_i(b, j)
        fg = const_like(1, dt) - i if coupled else f(clip(peep(2, b, j, c_prev[0, b, j])))
        return fg * c_prev[0, b, j] + i * g(clip(gates[0, b, 3 * Hs + j]))

    c_new = compute((1, Bn, Hs), c_body, name=uname("lstm_c"))
    h_new = compute(
        (1, Bn, Hs), lambda o, b, j: f(clip(peep(1, b, j, c_new[0, b, j]))) * h(c_new[0, b, j]), name=uname("lstm_h")
    )
    if mask is None:
        return [h_new, c_new]
    h_out, y = _masked(h_new, h_prev, mask, dt)
    c_out = _masked(c_new, c_prev, mask, dt)[0]
    return [h_out, c_out, y]


@register("ember.RNNCell", pattern="opaque")
def rnn_cell(ctx: OpContext, pre: Tensor, h_prev: Tensor | None = None, mask: Tensor | None = None) -> list[Tensor]:
    """One simple-RNN step after its products: ``h = f(pre)`` for ``pre`` (1, B, H) =
    ``X_t W^T + H_{t-1} R^T`` plus biases; with ``h_prev`` and ``mask`` as :func:`lstm_cell`.
    Outputs ``h`` (and ``y`` with a mask)."""
    dt = dtype_of(pre)
    (f,) = _cell_acts(ctx, dt, 1)
    clip = _clipper(ctx, dt)
    new = compute(shape(pre), lambda o, b, j: f(clip(pre[0, b, j])), name=uname("rnn_h"))
    return _masked(new, h_prev, mask, dt)


@register("ember.GRUReset", pattern="opaque")
def gru_reset(ctx: OpContext, xw: Tensor, a: Tensor, h_prev: Tensor) -> Tensor:
    """``r * H_{t-1}`` of a GRU step with ``linear_before_reset = 0``: ``r = f(xw[H:2H] + a[H:2H])``
    with ``xw`` (1, B, 3H) the input projection plus biases and ``a`` (1, B, >= 2H) the
    recurrent product of the z and r gates. Attributes: ``activations`` (f), alpha, beta, ``clip``."""
    dt = dtype_of(xw)
    _, Bn, Hs = shape(h_prev)
    (f,) = _cell_acts(ctx, dt, 1)
    clip = _clipper(ctx, dt)
    return compute(
        (1, Bn, Hs),
        lambda o, b, j: f(clip(xw[0, b, Hs + j] + a[0, b, Hs + j])) * h_prev[0, b, j],
        name=uname("gru_rh"),
    )


@register("ember.GRUCell", pattern="opaque")
def gru_cell(
    ctx: OpContext,
    xw: Tensor,
    a: Tensor,
    hh: Tensor | None = None,
    h_prev: Tensor | None = None,
    mask: Tensor | None = None,
) -> list[Tensor]:
    """One GRU step after its products: ``xw`` (1, B, 3H) is ``X_t W^T`` plus the input biases
    (and the recurrent biases of z and r); ``a`` (1, B, 2H or 3H) the recurrent product of z, r
    (and, with ``linear_before_reset``, of h plus its recurrent bias); ``hh`` (1, B, H), without
    ``linear_before_reset``, ``(r * H_{t-1}) R_h^T`` plus its bias. Attributes: ``activations``
    (f, g), alpha, beta, ``clip``, ``linear_before_reset``. Outputs ``h`` (and ``y`` with a mask)."""
    dt = dtype_of(xw)
    _, Bn, G3 = shape(xw)
    Hs = G3 // 3
    f, g = _cell_acts(ctx, dt, 2)
    clip = _clipper(ctx, dt)
    lbr = int(ctx.attr("linear_before_reset", 0))
    if (hh is None) != bool(lbr) or h_prev is None:
        raise ctx.fail("h_prev is required, and hh is given exactly when linear_before_reset is 0")

    def body(o: Any, b: Any, j: Any) -> Any:
        z = f(clip(xw[0, b, j] + a[0, b, j]))
        if lbr:
            r = f(clip(xw[0, b, Hs + j] + a[0, b, Hs + j]))
            cand = g(clip(xw[0, b, 2 * Hs + j] + r * a[0, b, 2 * Hs + j]))
        else:
            assert hh is not None
            cand = g(clip(xw[0, b, 2 * Hs + j] + hh[0, b, j]))
        return (const_like(1, dt) - z) * cand + z * h_prev[0, b, j]

    new = compute((1, Bn, Hs), body, name=uname("gru_h"))
    return _masked(new, h_prev, mask, dt)


@register("ember.SplitSteps", pattern="opaque")
def split_steps(ctx: OpContext, x: Tensor) -> list[Tensor]:
    """``x`` (T, ...) split into its T steps (1, ...), as a kernel of its own: fused into the
    matrix product producing ``x`` (as a ``Split`` would be), its T outputs would take the
    product off its packed schedule."""
    T = shape(x)[0]
    rest = shape(x)[1:]
    return [
        compute((1, *rest), lambda o, *i, t=t: x[(o + t, *i)], name=uname("step")) for t in range(T)
    ]
