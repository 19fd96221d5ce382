"""Recurrent layers as GEMM steps: the graph pass :class:`ExpandRecurrent`.

An ONNX ``LSTM``, ``GRU`` or ``RNN`` node with constant weights becomes, per direction:

* one matrix product of the whole input sequence with the input weights, plus the biases
  (``MatMul`` + ``Add``: the packed GEMM, all time steps at once), split into its time steps;
* per time step one matrix product of the previous hidden state with the recurrent weights
  (``MatMul`` + ``Add`` of that step's input projection: the packed GEMM with its epilogue),
  then one cell operator (``ember.LSTMCell``, ``ember.GRUCell``, ``ember.RNNCell``) computing the
  new state. Every state is its own value, so the memory plan holds it in a buffer and each
  step is computed once; the kernels of all steps of a direction are identical and generated once;
* the outputs assembled with ``Concat`` (and ``Transpose`` for ``layout = 1``).

``sequence_lens`` shorter than the sequence masks the steps past each batch entry's end (the
state is kept, the output is zero, as ONNX Runtime does); the reverse direction then reads the
input through ``ReverseSequence`` and reverses its output back. A node with weights computed at
run time, or a sequence of length 0, is left as it is (the operators of :mod:`ember.ops.rnn`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ops.rnn import uses_alpha, uses_beta
from ..transform import Pass, PassContext
from .ir import Graph, Node, TensorInfo

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
_OPSET = 21
#: The most inputs of one Concat assembling the outputs of the steps.
_FANOUT = 8


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class _Builder:
    """Adds nodes, values and constants to a graph under unique names with one prefix."""

    def __init__(self, graph: Graph, prefix: str):
        self.g = graph
        self.prefix = prefix
        self.count = 0
        self.nodes: list[Node] = []

    def name(self, hint: str) -> str:
        self.count += 1
        while True:
            n = f"{self.prefix}/{hint}{self.count}"
            if n not in self.g.values and n not in self.g.consts:
                return n
            self.count += 1

    def const(self, value: np.ndarray, hint: str = "c") -> str:
        n = self.name(hint)
        arr = np.ascontiguousarray(value)
        self.g.consts[n] = arr
        self.g.values[n] = TensorInfo(tuple(arr.shape), str(arr.dtype))
        return n

    def add(
        self,
        op: str,
        inputs: list[str],
        outs: list[tuple[tuple[int, ...], str]],
        attrs: dict[str, Any] | None = None,
        names: list[str] | None = None,
    ) -> list[str]:
        out_names = names or [self.name(op.split(".")[-1].lower()) for _ in outs]
        for n, (shp, dt) in zip(out_names, outs):
            self.g.values[n] = TensorInfo(tuple(int(d) for d in shp), dt)
        label = f"{self.prefix}/{op}{self.count}"
        self.nodes.append(Node(op, list(inputs), out_names, dict(attrs or {}), label, _OPSET))
        return out_names

    def one(self, op: str, inputs: list[str], shp: tuple[int, ...], dt: str, attrs: dict[str, Any] | None = None,
            name: str | None = None) -> str:
        return self.add(op, inputs, [(shp, dt)], attrs, [name] if name else None)[0]


def _activations(node: Node, ndir: int) -> list[tuple[list[str], list[float], list[float]]]:
    """Per direction: the activation names and their alpha and beta (NaN: the default). Alpha
    and beta values are consumed in order by the activations that use them, as ONNX Runtime
    reads them."""
    n = len(_DEFAULT_ACTS[node.op])
    acts = [_s(a) for a in (node.attrs.get("activations") or [])] or _DEFAULT_ACTS[node.op] * ndir
    if len(acts) < n * ndir:
        acts = (acts[:n] * ndir)[: n * ndir]
    alphas = list(node.attrs.get("activation_alpha") or [])
    betas = list(node.attrs.get("activation_beta") or [])
    al, be = [], []
    for a in acts:
        al.append(float(alphas.pop(0)) if uses_alpha(a) and alphas else float("nan"))
        be.append(float(betas.pop(0)) if uses_beta(a) and betas else float("nan"))
    return [(acts[n * d : n * d + n], al[n * d : n * d + n], be[n * d : n * d + n]) for d in range(ndir)]


def _expandable(node: Node, g: Graph) -> bool:
    if node.op not in _GATES:
        return False
    ins = list(node.inputs) + [""] * 8
    if any(ins[k] and ins[k] not in g.consts for k in (3, 7)) or ins[1] not in g.consts or ins[2] not in g.consts:
        return False
    x = g.values.get(ins[0])
    if x is None or len(x.shape) != 3 or x.dtype not in ("float32", "float64", "float16"):
        return False
    layout = int(node.attrs.get("layout", 0))
    T = x.shape[1] if layout else x.shape[0]
    return T > 0 and all(d > 0 for d in x.shape)


def _expand(node: Node, g: Graph) -> list[Node]:
    """The nodes replacing ``node`` (see the module docstring); adds their values and constants
    to ``g``."""
    op = node.op
    G = _GATES[op]
    ins = list(node.inputs) + [""] * 8
    b = _Builder(g, node.name or node.outputs[0] or op)
    layout = int(node.attrs.get("layout", 0))
    xinfo = g.values[ins[0]]
    dt = xinfo.dtype
    npdt = np.dtype(dt)
    if layout:
        B, T, I = xinfo.shape
        x = b.one("Transpose", [ins[0]], (T, B, I), dt, {"perm": [1, 0, 2]})
    else:
        T, B, I = xinfo.shape
        x = ins[0]
    Hs = int(node.attrs["hidden_size"])
    direction = _s(node.attrs.get("direction", "forward"))
    dirs = {"forward": [0], "reverse": [1], "bidirectional": [0, 1]}[direction]
    W = np.asarray(g.consts[ins[1]]).astype(npdt)
    R = np.asarray(g.consts[ins[2]]).astype(npdt)
    bias = np.asarray(g.consts[ins[3]]).astype(npdt) if ins[3] else np.zeros((len(dirs), 2 * G * Hs), npdt)
    acts = _activations(node, len(dirs))
    cell_attrs: dict[str, Any] = {}
    if node.attrs.get("clip") is not None:
        cell_attrs["clip"] = float(node.attrs["clip"])

    # sequence_lens: a boolean mask per step (constant when the lengths are), or none when every
    # entry runs the whole sequence.
    masks: list[str] | None = None
    lens64: str | None = None
    if ins[4]:
        if ins[4] in g.consts:
            lv = np.asarray(g.consts[ins[4]]).astype(np.int64).reshape(-1)
            if not (lv >= T).all():
                m = np.arange(T)[:, None, None] < lv[None, :, None]
                masks = [b.const(m[t : t + 1], "mask") for t in range(T)]
                lens64 = b.const(np.clip(lv, 0, T), "lens")
        else:
            lens64 = b.one("Cast", [ins[4]], (B,), "int64", {"to": 7})
            lens3 = b.one("Reshape", [lens64, b.const(np.array([1, B, 1], np.int64), "shape")], (1, B, 1), "int64")
            steps = b.const(np.arange(T, dtype=np.int64).reshape(T, 1, 1), "steps")
            m = b.one("Less", [steps, lens3], (T, B, 1), "bool")
            masks = b.add("Split", [m], [((1, B, 1), "bool")] * T, {"axis": 0, "num_outputs": T}) if T > 1 else [m]

    def initial(k: int, d: int) -> str:
        if not ins[k]:
            return b.const(np.zeros((1, B, Hs), npdt), "zeros")
        if ins[k] in g.consts:
            v = np.asarray(g.consts[ins[k]])
            return b.const((v[:, d] if layout else v[d])[None].astype(npdt), "init")
        src = ins[k]
        if layout:
            src = b.one("Transpose", [src], (len(dirs), B, Hs), dt, {"perm": [1, 0, 2]})
        start, end = b.const(np.array([d], np.int64)), b.const(np.array([d + 1], np.int64))
        return b.one("Slice", [src, start, end, b.const(np.array([0], np.int64))], (1, B, Hs), dt)

    ys, hs, cs = [], [], []
    for di, d in enumerate(dirs):
        names, alphas, betas = acts[di]
        Wb, Rb = bias[di, : G * Hs], bias[di, G * Hs :]
        xbias = Wb + Rb if op != "GRU" else Wb + np.concatenate([Rb[: 2 * Hs], np.zeros(Hs, npdt)])
        reversed_input = d == 1 and masks is not None
        xd = b.one("ReverseSequence", [x, lens64], (T, B, I), dt, {"batch_axis": 1, "time_axis": 0}) \
            if reversed_input else x
        # one (T*B, I) x (I, G*H) product: the packed GEMM over every step at once
        x2 = b.one("Reshape", [xd, b.const(np.array([T * B, I], np.int64), "shape")], (T * B, I), dt)
        xw = b.one("MatMul", [x2, b.const(W[di].T, "w")], (T * B, G * Hs), dt)
        xw = b.one("Add", [xw, b.const(xbias, "bias")], (T * B, G * Hs), dt)
        xw = b.one("Reshape", [xw, b.const(np.array([T, B, G * Hs], np.int64), "shape")], (T, B, G * Hs), dt)
        parts = b.add("ember.SplitSteps", [xw], [((1, B, G * Hs), dt)] * T) if T > 1 else [xw]
        Rt = R[di].T
        attrs = dict(cell_attrs, activations=names, activation_alpha=alphas, activation_beta=betas)
        h = initial(5, di)
        c = initial(6, di) if op == "LSTM" else ""
        lbr = int(node.attrs.get("linear_before_reset", 0))
        if op == "GRU":
            rzr = b.const(Rt if lbr else Rt[:, : 2 * Hs], "r")
            rh = "" if lbr else b.const(Rt[:, 2 * Hs :], "rh")
            rbh = b.const(np.concatenate([np.zeros(2 * Hs, npdt), Rb[2 * Hs :]]) if lbr else Rb[2 * Hs :], "rbh")
        else:
            rt = b.const(Rt, "r")
        pin = b.const(np.asarray(g.consts[ins[7]])[di].astype(npdt), "p") if op == "LSTM" and ins[7] else ""
        step_out: list[str] = []
        for s in range(T):
            t = T - 1 - s if d == 1 and not reversed_input else s
            mask = masks[s] if masks is not None else ""
            hprev = h
            n_out = 2 if mask else 1
            if op == "LSTM":
                gates = b.one("MatMul", [h, rt], (1, B, 4 * Hs), dt)
                gates = b.one("Add", [gates, parts[t]], (1, B, 4 * Hs), dt)
                outs = b.add("ember.LSTMCell", [gates, c, hprev if mask else "", mask, pin],
                             [((1, B, Hs), dt)] * (1 + n_out),
                             dict(attrs, input_forget=int(node.attrs.get("input_forget", 0))))
                h, c = outs[0], outs[1]
            elif op == "RNN":
                pre = b.one("MatMul", [h, rt], (1, B, Hs), dt)
                pre = b.one("Add", [pre, parts[t]], (1, B, Hs), dt)
                outs = b.add("ember.RNNCell", [pre, hprev if mask else "", mask], [((1, B, Hs), dt)] * n_out, attrs)
                h = outs[0]
            else:
                gw = 3 * Hs if lbr else 2 * Hs
                a = b.one("MatMul", [h, rzr], (1, B, gw), dt)
                if lbr:
                    a = b.one("Add", [a, rbh], (1, B, gw), dt)
                    hh = ""
                else:
                    rhv = b.one("ember.GRUReset", [parts[t], a, h], (1, B, Hs), dt,
                                dict(cell_attrs, activations=names[:1], activation_alpha=alphas[:1],
                                     activation_beta=betas[:1]))
                    hh = b.one("MatMul", [rhv, rh], (1, B, Hs), dt)
                    hh = b.one("Add", [hh, rbh], (1, B, Hs), dt)
                outs = b.add("ember.GRUCell", [parts[t], a, hh, hprev, mask], [((1, B, Hs), dt)] * n_out,
                             dict(attrs, linear_before_reset=lbr))
                h = outs[0]
            step_out.append(outs[-1] if mask or op != "LSTM" else h)
        in_time = step_out[::-1] if d == 1 and not reversed_input else step_out
        y = _stack(b, in_time, B, Hs, dt)
        if reversed_input:
            y = b.one("ReverseSequence", [y, lens64], (T, B, Hs), dt, {"batch_axis": 1, "time_axis": 0})
        ys.append(y)
        hs.append(h)
        cs.append(c)

    D = len(dirs)
    outs = list(node.outputs) + ["", "", ""]
    if outs[0]:
        shp4 = b.const(np.array([T, 1, B, Hs], np.int64), "shape")
        four = [b.one("Reshape", [y, shp4], (T, 1, B, Hs), dt) for y in ys]
        if layout:
            y = b.one("Concat", four, (T, D, B, Hs), dt, {"axis": 1}) if D > 1 else four[0]
            b.one("Transpose", [y], (B, T, D, Hs), dt, {"perm": [2, 0, 1, 3]}, name=outs[0])
        elif D > 1:
            b.one("Concat", four, (T, D, B, Hs), dt, {"axis": 1}, name=outs[0])
        else:
            b.one("Identity", four, (T, D, B, Hs), dt, name=outs[0])
    for k, states in ((1, hs), (2, cs)):
        if not outs[k]:
            continue
        if layout:
            st = b.one("Concat", states, (D, B, Hs), dt, {"axis": 0}) if D > 1 else states[0]
            b.one("Transpose", [st], (B, D, Hs), dt, {"perm": [1, 0, 2]}, name=outs[k])
        elif D > 1:
            b.one("Concat", states, (D, B, Hs), dt, {"axis": 0}, name=outs[k])
        else:
            b.one("Identity", states, (D, B, Hs), dt, name=outs[k])
    return b.nodes


def _stack(b: _Builder, parts: list[str], B: int, Hs: int, dt: str) -> str:
    """``parts`` (each (n, B, H)) concatenated along the first axis by a tree of ``Concat`` nodes
    of at most :data:`_FANOUT` inputs (a Concat selects its input per element: a few inputs keep
    that cheap, and the equal-sized nodes of a level share one kernel)."""
    while len(parts) > 1:
        groups = [parts[k : k + _FANOUT] for k in range(0, len(parts), _FANOUT)]
        parts = [
            grp[0] if len(grp) == 1 else
            b.one("Concat", grp, (sum(b.g.values[p].shape[0] for p in grp), B, Hs), dt, {"axis": 0})
            for grp in groups
        ]
    return parts[0]


def expand_recurrent(graph: Graph) -> Graph:
    """A new graph with every expandable ``LSTM``/``GRU``/``RNN`` node replaced by GEMM steps
    (module docstring); the others, and every other node, unchanged. Needs shapes inferred."""
    g = graph.copy()
    nodes: list[Node] = []
    for node in g.nodes:
        if _expandable(node, g):
            nodes.extend(_expand(node, g))
        else:
            nodes.append(node)
    g.nodes = nodes
    return g


class ExpandRecurrent(Pass):
    """:func:`expand_recurrent` as a graph pass."""

    name = "ExpandRecurrent"
    opt_level = 1  # an optimization: without it the unrolled operators compute the same values
    contract = (
        "needs a Graph with shapes inferred; gives one where LSTM/GRU/RNN nodes with constant weights are "
        "one input GEMM plus, per time step, a recurrent GEMM and a cell operator over state held in values"
    )

    def transform(self, ir: Any, ctx: PassContext) -> Graph:
        """A new graph with the recurrent nodes expanded."""
        if not isinstance(ir, Graph):
            from ..errors import GraphError

            raise GraphError(f"graph pass {self.name} needs a Graph, got {type(ir).__name__}")
        return expand_recurrent(ir)
