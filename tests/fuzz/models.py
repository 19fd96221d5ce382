"""Small random ONNX models for the fuzzer: chains of operators with random attributes and shapes,
some deliberately invalid.

Every choice goes through a :class:`Chooser`, so the same generator serves Hypothesis (choices
drawn from ``st.data()``, which shrinks a failing model to a small one) and the long run of
``make fuzz`` (choices from a seeded ``random.Random``). :func:`structured_model` returns a
:class:`Case`: the serialized model, the inputs to run it with, and what the generator meant
(whether it broke a rule on purpose, whether run-time indices fall outside their axis).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT


class Chooser:
    """The source of every random choice (``random.Random`` by default)."""

    def __init__(self, rng: random.Random | None = None):
        self.rng = rng or random.Random(0)

    def int(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]."""
        return self.rng.randint(lo, hi)

    def choice(self, seq: Sequence[Any]) -> Any:
        return seq[self.int(0, len(seq) - 1)]

    def bool(self, p: float = 0.5) -> bool:
        """True with probability ``p`` (the smallest draw gives False, so Hypothesis shrinks
        towards fewer broken rules)."""
        return self.int(0, 999) >= 1000 - int(p * 1000)


class HypothesisChooser(Chooser):
    """Choices drawn from a Hypothesis ``st.data()`` object (shrinkable)."""

    def __init__(self, data: Any):
        from hypothesis import strategies as st

        super().__init__()
        self.data, self.st = data, st

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))


@dataclass
class Case:
    """A model to try, with its inputs."""

    model: bytes
    feeds: dict[str, np.ndarray]
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    invalid: bool = False  # the generator broke a rule on purpose
    runtime_oob: bool = False  # run-time indices outside their axis (ember clamps, ONNX Runtime fails)
    note: str = ""  # the operators, for reports

    def describe(self) -> str:
        return self.note


@dataclass
class Value:
    name: str
    shape: tuple[int, ...]
    elem: int = F32


class Builder:
    """The model under construction."""

    def __init__(self, ch: Chooser, opset: int, p_bad: float):
        self.ch, self.opset, self.p_bad = ch, opset, p_bad
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.inputs: list[Any] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.invalid = False
        self.runtime_oob = False
        self.ops: list[str] = []
        self._n = 0
        self.np = np.random.default_rng(ch.int(0, 2**31))

    def fresh(self, base: str = "v") -> str:
        self._n += 1
        return f"{base}{self._n}"

    def bad(self) -> bool:
        """Whether to break a rule in the node being built (at most once per model)."""
        if self.invalid or not self.ch.bool(self.p_bad):
            return False
        self.invalid = True
        return True

    def input(self, shape: tuple[int, ...], elem: int = F32, values: np.ndarray | None = None) -> Value:
        name = self.fresh("in")
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        if values is None:
            values = self.np.uniform(-2, 2, shape).astype(np.float32)
        self.feeds[name] = values
        return Value(name, shape, elem)

    def const(self, arr: np.ndarray, base: str = "c") -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(self, op: str, inputs: list[str], nout: int = 1, **attrs: Any) -> list[str]:
        outs = [self.fresh() for _ in range(nout)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=f"n{len(self.nodes)}_{op}", **attrs))
        self.ops.append(op)
        return outs

    def shape_of(self, rank: int, lo: int = 1, hi: int = 5) -> tuple[int, ...]:
        return tuple(self.ch.int(lo, hi) for _ in range(rank))

    def axis(self, rank: int, lo_bad: bool = False) -> int:
        """A valid axis (negative or not), or with ``lo_bad`` one out of range."""
        if lo_bad:
            return self.ch.choice([rank, rank + 3, -rank - 1, 99])
        a = self.ch.int(0, max(rank - 1, 0))
        return a - rank if self.ch.bool() else a


Gen = Callable[[Builder, Value], "Value | None"]


# -- operators: each returns the output value, or None when it broke a rule (the chain ends there) ------
def g_unary(b: Builder, x: Value) -> Value | None:
    op = b.ch.choice(["Relu", "Neg", "Abs", "Sigmoid", "Tanh", "Floor", "Ceil", "Softsign", "Exp", "Sqrt", "Erf"])
    src = x.name
    if op == "Exp":
        (src,) = b.node("Clip", [x.name, b.const(np.float32(-5)), b.const(np.float32(5))])
    if op == "Sqrt":
        (src,) = b.node("Abs", [x.name])
    (y,) = b.node(op, [src])
    return Value(y, x.shape)


def _bcast_shape(b: Builder, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with ``shape`` (a suffix, some dimensions 1)."""
    k = b.ch.int(0, len(shape))
    return tuple(1 if b.ch.bool(0.3) else d for d in shape[len(shape) - k :])


def g_binary(b: Builder, x: Value) -> Value | None:
    op = b.ch.choice(["Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu"])
    other = _bcast_shape(b, x.shape)
    bad = b.bad()
    if bad:
        other = tuple(d + b.ch.int(1, 3) for d in x.shape[-2:]) or (2,)
    lo = 0.5 if op == "Div" else -2.0
    val = b.np.uniform(lo, 2, other).astype(np.float32)
    c = b.const(val)
    ins = [c, x.name] if b.ch.bool(0.3) and op != "PRelu" else [x.name, c]
    (y,) = b.node(op, ins)
    if bad:
        return None
    return Value(y, tuple(int(d) for d in np.broadcast_shapes(x.shape, other)))


def g_transpose(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    perm = list(range(r))
    b.np.shuffle(perm)
    perm = [int(p) for p in perm]
    if b.bad():
        kind = b.ch.int(0, 3)
        if kind == 0:
            perm = [p - r for p in perm]  # negative entries (the perm=[-1,-2,-3])
        elif kind == 1 and r > 1:
            perm[0] = perm[1]
        elif kind == 2:
            perm = perm + [r]
        else:
            perm = perm[:-1] if r > 1 else [1]
        b.node("Transpose", [x.name], perm=perm)
        return None
    attrs = {"perm": perm} if b.ch.bool(0.8) else {}
    if not attrs:
        perm = list(range(r))[::-1]
    (y,) = b.node("Transpose", [x.name], **attrs)
    return Value(y, tuple(x.shape[p] for p in perm))


def g_reshape(b: Builder, x: Value) -> Value | None:
    total = int(np.prod(x.shape))
    divs = [d for d in range(1, total + 1) if total % d == 0]
    a = b.ch.choice(divs)
    target = [a, total // a]
    if b.ch.bool(0.3):
        target = [total]
    shape = tuple(target)
    if b.ch.bool(0.4):
        target[b.ch.int(0, len(target) - 1)] = -1
    if len(target) <= len(x.shape) and b.ch.bool(0.2) and target[0] == x.shape[0]:
        target[0] = 0
    if b.bad():
        kind = b.ch.int(0, 2)
        target = [total + 1] if kind == 0 else ([-1, -1] if kind == 1 else [-2, -total])
        b.node("Reshape", [x.name, b.const(np.array(target, np.int64))])
        return None
    (y,) = b.node("Reshape", [x.name, b.const(np.array(target, np.int64))])
    return Value(y, shape)


def g_flatten(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    if b.bad():
        b.node("Flatten", [x.name], axis=b.ch.choice([r + 1, r + 7, -r - 1, 9]))
        return None
    a = b.ch.int(-r, r)
    k = a + r if a < 0 else a
    (y,) = b.node("Flatten", [x.name], axis=a)
    return Value(y, (int(np.prod(x.shape[:k])), int(np.prod(x.shape[k:]))))


def g_concat(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    a = b.axis(r)
    k = a % r
    other = list(x.shape)
    other[k] = b.ch.int(1, 4)
    bad = b.bad()
    if bad:
        if b.ch.bool() and r > 1:
            j = (k + 1) % r
            other[j] += b.ch.int(1, 3)
        else:
            a = b.axis(r, lo_bad=True)
    c = b.const(b.np.uniform(-2, 2, other).astype(np.float32))
    ins = [x.name, c] if b.ch.bool() else [c, x.name, x.name]
    (y,) = b.node("Concat", ins, axis=a)
    if bad:
        return None
    out = list(x.shape)
    out[k] = sum(other[k] if i == c else x.shape[k] for i in ins)
    return Value(y, tuple(out))


def _to2d(b: Builder, x: Value) -> Value:
    if len(x.shape) == 2:
        return x
    (y,) = b.node("Flatten", [x.name], axis=1 if len(x.shape) > 1 else 0)
    shp = (x.shape[0], int(np.prod(x.shape[1:]))) if len(x.shape) > 1 else (1, x.shape[0])
    return Value(y, shp)


def g_gemm(b: Builder, x: Value) -> Value | None:
    x = _to2d(b, x)
    ta, tb = b.ch.int(0, 1), b.ch.int(0, 1)
    M, K = x.shape
    if ta:
        M, K = K, M
    N = b.ch.int(1, 20)
    kb = K
    bad = b.bad()
    cshape: tuple[int, ...] | None = b.ch.choice([None, (N,), (M, N), (1, N), (M, 1), ()])
    if bad:
        if b.ch.bool():
            kb = K + b.ch.int(1, 3)
        else:
            cshape = (N + 1,)
    w = b.np.uniform(-1, 1, (N, kb) if tb else (kb, N)).astype(np.float32)
    ins = [x.name, b.const(w)]
    if cshape is not None:
        ins.append(b.const(b.np.uniform(-1, 1, cshape).astype(np.float32)))
    attrs: dict[str, Any] = {"transA": ta, "transB": tb}
    if b.ch.bool(0.3):
        attrs["alpha"] = 0.5
        attrs["beta"] = 2.0
    (y,) = b.node("Gemm", ins, **attrs)
    return None if bad else Value(y, (M, N))


def g_matmul(b: Builder, x: Value) -> Value | None:
    K = x.shape[-1]
    N = b.ch.int(1, 18)
    kb = K + b.ch.int(1, 3) if b.bad() else K
    wshape = (kb, N) if b.ch.bool(0.7) or len(x.shape) < 3 else (x.shape[-3], kb, N)
    (y,) = b.node("MatMul", [x.name, b.const(b.np.uniform(-1, 1, wshape).astype(np.float32))])
    if kb != K:
        return None
    if len(x.shape) == 1:
        out = (N,)
    else:
        out = tuple(int(d) for d in np.broadcast_shapes(x.shape[:-2], wshape[:-2])) + (x.shape[-2], N)
    return Value(y, out)


def _nchw(b: Builder, x: Value) -> Value:
    """``x`` as a 3-D or 4-D batch of channels (reshaped when it is not)."""
    if len(x.shape) in (3, 4):
        return x
    total = int(np.prod(x.shape))
    shp = (1, 1, total) if b.ch.bool() else (1, 1, 1, total)
    (y,) = b.node("Reshape", [x.name, b.const(np.array(shp, np.int64))])
    return Value(y, shp)


def g_conv(b: Builder, x: Value) -> Value | None:
    x = _nchw(b, x)
    nsp = len(x.shape) - 2
    C = x.shape[1]
    groups = [g for g in range(1, C + 1) if C % g == 0]
    group = b.ch.choice(groups)
    M = group * b.ch.int(1, 3)
    k = [b.ch.int(1, min(3, x.shape[2 + d])) for d in range(nsp)]
    strides = [b.ch.int(1, 2) for _ in range(nsp)]
    dil = [1 if k[d] == 1 else b.ch.int(1, max(1, (x.shape[2 + d] - 1) // max(k[d] - 1, 1))) for d in range(nsp)]
    dil = [min(v, 2) for v in dil]
    pads = [b.ch.int(0, 1) for _ in range(2 * nsp)]
    bias = b.ch.bool()
    attrs: dict[str, Any] = {"strides": strides, "dilations": dil, "pads": pads, "group": group}
    if b.ch.bool(0.5):
        attrs["kernel_shape"] = list(k)
    bad = b.bad()
    wshape = [M, C // group] + k
    bshape = [M]
    if bad:
        kind = b.ch.int(0, 5)
        if kind == 0:
            attrs["kernel_shape"] = [v + 2 for v in k]  # contradicts the weights
        elif kind == 1:
            bshape = [M + 1]
            bias = True
        elif kind == 2:
            wshape[1] = C // group + 1
        elif kind == 3:
            attrs["pads"] = [-1] * (2 * nsp)
        elif kind == 4:
            attrs["strides"] = [0] * nsp
        else:
            wshape = [M, C // group] + [x.shape[2 + d] + 3 for d in range(nsp)]
            attrs.pop("kernel_shape", None)
    ins = [x.name, b.const(b.np.uniform(-1, 1, wshape).astype(np.float32))]
    if bias:
        ins.append(b.const(b.np.uniform(-1, 1, bshape).astype(np.float32)))
    (y,) = b.node("Conv", ins, **attrs)
    if bad:
        return None
    out = [x.shape[0], M]
    for d in range(nsp):
        span = x.shape[2 + d] + pads[d] + pads[nsp + d] - ((k[d] - 1) * dil[d] + 1)
        out.append(span // strides[d] + 1)
    if any(o < 1 for o in out):
        return None
    return Value(y, tuple(out))


def g_pool(b: Builder, x: Value) -> Value | None:
    x = _nchw(b, x)
    nsp = len(x.shape) - 2
    op = b.ch.choice(["MaxPool", "AveragePool"])
    k = [b.ch.int(1, min(3, x.shape[2 + d])) for d in range(nsp)]
    strides = [b.ch.int(1, 2) for _ in range(nsp)]
    pads = [b.ch.int(0, k[d % nsp] - 1) for d in range(2 * nsp)]
    attrs: dict[str, Any] = {"kernel_shape": k, "strides": strides, "pads": pads}
    ceil = b.ch.int(0, 1)
    if ceil:
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and b.ch.bool():
        attrs["count_include_pad"] = 1
    bad = b.bad()
    if bad:
        kind = b.ch.int(0, 2)
        if kind == 0:
            attrs["pads"] = [k[d % nsp] + 1 for d in range(2 * nsp)]
        elif kind == 1:
            attrs["kernel_shape"] = k + [2]
        else:
            attrs["strides"] = [0] * nsp
    (y,) = b.node(op, [x.name], **attrs)
    if bad:
        return None
    out = list(x.shape[:2])
    for d in range(nsp):
        span = x.shape[2 + d] + pads[d] + pads[nsp + d] - k[d]
        o = (-(-span // strides[d]) if ceil else span // strides[d]) + 1
        if ceil and (o - 1) * strides[d] >= x.shape[2 + d] + pads[d]:
            o -= 1
        out.append(o)
    return Value(y, tuple(out))


def g_slice(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    naxes = b.ch.int(1, r)
    axes = list(range(r))
    b.np.shuffle(axes)
    axes = [int(a) for a in axes[:naxes]]
    starts, ends, steps, out = [], [], [], list(x.shape)
    for a in axes:
        n = x.shape[a]
        step = b.ch.choice([1, 1, 2, -1])
        st = b.ch.int(-n - 1, n + 1)
        en = b.ch.choice([b.ch.int(-n - 1, n + 1), 2**62, -(2**62)])
        starts.append(st), ends.append(en), steps.append(step)
        out[a] = len(range(*slice(st, en, step).indices(n)))
    axes_given = [a - r if b.ch.bool() else a for a in axes]
    bad = b.bad()
    if bad:
        kind = b.ch.int(0, 2)
        if kind == 0:
            steps[0] = 0
        elif kind == 1:
            axes_given = axes_given + [axes_given[0]]
            starts, ends, steps = starts + [0], ends + [1], steps + [1]
        else:
            starts = starts + [0]
    ins = [x.name, b.const(np.array(starts, np.int64)), b.const(np.array(ends, np.int64)),
           b.const(np.array(axes_given, np.int64)), b.const(np.array(steps, np.int64))]
    (y,) = b.node("Slice", ins)
    if bad or any(o == 0 for o in out):
        return None
    return Value(y, tuple(out))


def g_gather(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    a = b.axis(r)
    n = x.shape[a % r]
    ishape = b.shape_of(b.ch.int(0, 2), 1, 3)
    idx = b.np.integers(-n, n, ishape).astype(np.int64)
    op = b.ch.choice(["Gather", "Gather", "GatherElements"])
    if op == "GatherElements":
        ishape = tuple(b.ch.int(1, d) for d in x.shape)
        ishape = tuple(b.ch.int(1, 3) if k == a % r else d for k, d in enumerate(ishape))
        idx = b.np.integers(-n, n, ishape).astype(np.int64)
    bad = b.bad()
    if bad:
        kind = b.ch.int(0, 1)
        if kind == 0 and idx.size:
            idx.reshape(-1)[0] = b.ch.choice([n, n + 5, -n - 1, 2**40])
        else:
            a = b.axis(r, lo_bad=True)
    if b.ch.bool(0.3) and not bad:  # indices given at run time
        if b.ch.bool(0.3) and idx.size:
            idx.reshape(-1)[0] = n + 2
            b.runtime_oob = True
        ind = b.input(idx.shape, TensorProto.INT64, idx).name
    else:
        ind = b.const(idx)
    (y,) = b.node(op, [x.name, ind], axis=a)
    if bad:
        return None
    if op == "GatherElements":
        return Value(y, idx.shape)
    k = a % r
    return Value(y, x.shape[:k] + idx.shape + x.shape[k + 1 :]) if x.shape[:k] + idx.shape + x.shape[k + 1 :] else None


def g_squeeze(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    if b.ch.bool():
        a = b.ch.int(-r - 1, r)
        out = list(x.shape)
        out.insert(a + r + 1 if a < 0 else a, 1)
        axes = [a]
        if b.bad():
            axes = b.ch.choice([[r + 2], [0, 0]])
            b.node("Unsqueeze", [x.name, b.const(np.array(axes, np.int64))])
            return None
        (y,) = b.node("Unsqueeze", [x.name, b.const(np.array(axes, np.int64))])
        return Value(y, tuple(out))
    ones = [k for k, d in enumerate(x.shape) if d == 1]
    if b.bad():
        big = [k for k, d in enumerate(x.shape) if d != 1]
        axes = [b.ch.choice(big)] if big else [r + 1]
        b.node("Squeeze", [x.name, b.const(np.array(axes, np.int64))])
        return None
    if not ones or len(ones) == r:
        return g_unary(b, x)
    (y,) = b.node("Squeeze", [x.name, b.const(np.array(ones, np.int64))])
    return Value(y, tuple(d for d in x.shape if d != 1))


def g_softmax(b: Builder, x: Value) -> Value | None:
    op = b.ch.choice(["Softmax", "LogSoftmax", "Hardmax"])
    r = len(x.shape)
    bad = b.bad()
    a = b.axis(r, lo_bad=bad)
    (y,) = b.node(op, [x.name], axis=a)
    return None if bad else Value(y, x.shape)


def g_reduce(b: Builder, x: Value) -> Value | None:
    op = b.ch.choice(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ArgMax"])
    r = len(x.shape)
    keep = b.ch.int(0, 1)
    bad = b.bad()
    if op == "ArgMax":
        a = b.axis(r, lo_bad=bad)
        (y,) = b.node("ArgMax", [x.name], axis=a, keepdims=keep)
        if bad:
            return None
        k = a % r
        out = tuple(1 if d == k else s for d, s in enumerate(x.shape) if keep or d != k)
        if not out:
            return None
        (z,) = b.node("Cast", [y], to=F32)
        return Value(z, out)
    axes = sorted({b.ch.int(0, r - 1) for _ in range(b.ch.int(1, r))})
    given = [a - r if b.ch.bool() else a for a in axes]
    if bad:
        given = [b.axis(r, lo_bad=True)]
    if op == "ReduceSum" or b.opset >= 18:
        (y,) = b.node(op, [x.name, b.const(np.array(given, np.int64))], keepdims=keep)
    else:
        (y,) = b.node(op, [x.name], axes=given, keepdims=keep)
    if bad:
        return None
    out = tuple(1 if d in axes else s for d, s in enumerate(x.shape) if keep or d not in axes)
    return Value(y, out) if out else None


def g_pad(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    mode = b.ch.choice(["constant", "constant", "reflect", "edge", "wrap"])
    pads = []
    for k in range(2 * r):
        n = x.shape[k % r]
        hi = n - 1 if mode == "reflect" else 2
        pads.append(b.ch.int(-min(1, n - 1), max(hi, 0)) if b.ch.bool(0.7) else 0)
    if mode != "constant":
        pads = [max(p, 0) for p in pads]
    bad = b.bad()
    if bad:
        kind = b.ch.int(0, 2)
        if kind == 0:
            pads = pads[:-1]
        elif kind == 1:
            pads[0] = -x.shape[0] - 2
        else:
            mode = "reflect"
            pads[0] = x.shape[0] + 3
    ins = [x.name, b.const(np.array(pads, np.int64))]
    if mode == "constant" and b.ch.bool():
        ins.append(b.const(np.float32(1.5)))
    (y,) = b.node("Pad", ins, mode=mode)
    if bad:
        return None
    out = tuple(x.shape[k] + pads[k] + pads[k + r] for k in range(r))
    return Value(y, out) if all(out) else None


def g_expand_tile(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    bad = b.bad()
    if b.ch.bool():
        target = [d if d != 1 else b.ch.int(1, 3) for d in x.shape]
        if b.ch.bool(0.3):
            target = [b.ch.int(1, 2)] + target
        if bad:
            target = [d + 1 if d != 1 else d for d in x.shape] or [2]
            target = target if target != list(x.shape) else [d + 2 for d in x.shape]
        (y,) = b.node("Expand", [x.name, b.const(np.array(target, np.int64))])
        return None if bad else Value(y, tuple(int(d) for d in np.broadcast_shapes(x.shape, tuple(target))))
    reps = [b.ch.int(1, 2) for _ in range(r)]
    if bad:
        reps = reps[:-1] if b.ch.bool() else [-1] * r
    (y,) = b.node("Tile", [x.name, b.const(np.array(reps, np.int64))])
    return None if bad else Value(y, tuple(d * k for d, k in zip(x.shape, reps)))


def g_split(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    a = b.axis(r)
    n = x.shape[a % r]
    if n < 2:
        return g_unary(b, x)
    cut = b.ch.int(1, n - 1)
    sizes = [cut, n - cut]
    bad = b.bad()
    if bad:
        sizes = [cut, n - cut + 1] if b.ch.bool() else [-1, n + 1]
    outs = b.node("Split", [x.name, b.const(np.array(sizes, np.int64))], nout=2, axis=a)
    if bad:
        return None
    k = a % r
    pick = b.ch.int(0, 1)
    shp = list(x.shape)
    shp[k] = sizes[pick]
    (y,) = b.node("Add", [outs[pick], outs[pick]])
    return Value(y, tuple(shp))


def g_norm(b: Builder, x: Value) -> Value | None:
    if len(x.shape) < 2:
        return g_unary(b, x)
    op = b.ch.choice(["BatchNormalization", "InstanceNormalization", "LayerNormalization"])
    C = x.shape[1]
    bad = b.bad()
    cb = C + 1 if bad else C
    if op == "BatchNormalization":
        ins = [x.name] + [b.const(b.np.uniform(0.5, 1.5, (cb if k == 0 else C,)).astype(np.float32)) for k in range(4)]
        (y,) = b.node(op, ins, epsilon=1e-3)
    elif op == "InstanceNormalization":
        ins = [x.name, b.const(b.np.uniform(0.5, 1.5, (cb,)).astype(np.float32)), b.const(np.zeros(C, np.float32))]
        (y,) = b.node(op, ins)
    else:
        if b.opset < 17:
            return None if bad else g_unary(b, x)
        a = b.ch.int(1, len(x.shape) - 1)
        nshape = tuple(x.shape[a:])
        if bad:
            nshape = tuple(d + 1 for d in nshape)
        ins = [x.name, b.const(b.np.uniform(0.5, 1.5, nshape).astype(np.float32))]
        (y,) = b.node(op, ins, axis=a)
    return None if bad else Value(y, x.shape)


def g_space(b: Builder, x: Value) -> Value | None:
    if len(x.shape) != 4:
        return g_unary(b, x)
    n, c, h, w = x.shape
    bad = b.bad()
    if b.ch.bool():
        bs = [k for k in (2, 3) if c % (k * k) == 0]
        if not bs and not bad:
            return g_unary(b, x)
        k = b.ch.choice(bs) if bs else 2
        if bad:
            k = b.ch.choice([0, c + 1])
        (y,) = b.node("DepthToSpace", [x.name], blocksize=k, mode=b.ch.choice(["DCR", "CRD"]))
        return None if bad else Value(y, (n, c // (k * k), h * k, w * k))
    bs = [k for k in (2, 3) if h % k == 0 and w % k == 0]
    if not bs and not bad:
        return g_unary(b, x)
    k = b.ch.choice(bs) if bs else 2
    if bad:
        k = b.ch.choice([0, h + 1])
    (y,) = b.node("SpaceToDepth", [x.name], blocksize=k)
    return None if bad else Value(y, (n, c * k * k, h // k, w // k))


def g_topk_cumsum(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    a = b.axis(r)
    n = x.shape[a % r]
    bad = b.bad()
    if b.ch.bool():
        k = b.ch.int(1, n)
        if bad:
            k = n + b.ch.int(1, 3) if b.ch.bool() else -1
        vals, _ = b.node("TopK", [x.name, b.const(np.array([k], np.int64))], nout=2, axis=a)
        if bad:
            return None
        shp = list(x.shape)
        shp[a % r] = k
        return Value(vals, tuple(shp))
    ax = b.axis(r, lo_bad=bad)
    (y,) = b.node("CumSum", [x.name, b.const(np.array(ax, np.int64))], exclusive=b.ch.int(0, 1),
                  reverse=b.ch.int(0, 1))
    return None if bad else Value(y, x.shape)


def g_scatter(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    a = b.axis(r)
    k = a % r
    n = x.shape[k]
    ishape = tuple(b.ch.int(1, d) for d in x.shape)
    idx = b.np.integers(-n, n, ishape).astype(np.int64)
    upd_shape = ishape
    bad = b.bad()
    if bad:
        kind = b.ch.int(0, 1)
        if kind == 0:
            idx.reshape(-1)[0] = n + 3
        else:
            upd_shape = tuple(d + 1 for d in ishape)
    upd = b.const(b.np.uniform(-1, 1, upd_shape).astype(np.float32))
    (y,) = b.node("ScatterElements", [x.name, b.const(idx), upd], axis=a)
    return None if bad else Value(y, x.shape)


def g_misc(b: Builder, x: Value) -> Value | None:
    op = b.ch.choice(["Clip", "Where", "Cast", "Trilu"])
    if op == "Clip":
        lo = b.const(np.float32(-0.5))
        (y,) = b.node("Clip", [x.name, lo, b.const(np.float32(1.0))] if b.ch.bool() else [x.name, lo])
        return Value(y, x.shape)
    if op == "Where":
        (c,) = b.node("Greater", [x.name, b.const(np.float32(0.1))])
        (y,) = b.node("Where", [c, x.name, b.const(np.float32(-1.0))])
        return Value(y, x.shape)
    if op == "Cast":
        to = b.ch.choice([TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT32])
        (t,) = b.node("Cast", [x.name], to=to)
        (y,) = b.node("Cast", [t], to=F32)
        return Value(y, x.shape)
    if len(x.shape) < 2:
        if b.bad():
            b.node("Trilu", [x.name])
            return None
        return g_unary(b, x)
    ins = [x.name] + ([b.const(np.array(b.ch.int(-2, 2), np.int64))] if b.ch.bool() else [])
    (y,) = b.node("Trilu", ins, upper=b.ch.int(0, 1))
    return Value(y, x.shape)


def g_conv_transpose(b: Builder, x: Value) -> Value | None:
    x = _nchw(b, x)
    nsp = len(x.shape) - 2
    C = x.shape[1]
    group = b.ch.choice([g for g in range(1, C + 1) if C % g == 0])
    mg = b.ch.int(1, 2)
    k = [b.ch.int(1, 3) for _ in range(nsp)]
    strides = [b.ch.int(1, 2) for _ in range(nsp)]
    pads = [b.ch.int(0, k[d % nsp] - 1) for d in range(2 * nsp)]
    attrs: dict[str, Any] = {"strides": strides, "pads": pads, "group": group}
    opad = [b.ch.int(0, s - 1) for s in strides]
    if b.ch.bool(0.3):
        attrs["output_padding"] = opad
    else:
        opad = [0] * nsp
    wshape = [C, mg] + k
    bad = b.bad()
    if bad:
        kind = b.ch.int(0, 2)
        if kind == 0:
            attrs["kernel_shape"] = [v + 1 for v in k]
        elif kind == 1:
            wshape[0] = C + 1
        else:
            attrs["output_padding"] = [s + 1 for s in strides]
    ins = [x.name, b.const(b.np.uniform(-1, 1, wshape).astype(np.float32))]
    if b.ch.bool():
        ins.append(b.const(b.np.uniform(-1, 1, (mg * group,)).astype(np.float32)))
    (y,) = b.node("ConvTranspose", ins, **attrs)
    if bad:
        return None
    out = [x.shape[0], mg * group]
    for d in range(nsp):
        out.append(strides[d] * (x.shape[2 + d] - 1) + opad[d] + k[d] - pads[d] - pads[nsp + d])
    return Value(y, tuple(out)) if all(o > 0 for o in out) else None


def g_nd(b: Builder, x: Value) -> Value | None:
    r = len(x.shape)
    q = b.ch.int(1, r)
    n = b.ch.int(1, 3)
    idx = np.stack([b.np.integers(-x.shape[k], x.shape[k], n) for k in range(q)], axis=-1).astype(np.int64)
    bad = b.bad()
    if bad and b.ch.bool():
        idx[0, 0] = x.shape[0] + 1
    if b.ch.bool():
        (y,) = b.node("GatherND", [x.name, b.const(idx)])
        return None if bad else Value(y, (n,) + x.shape[q:])
    upd_shape = (n,) + x.shape[q:]
    if bad:
        upd_shape = (n + 1,) + x.shape[q:]
    _, first = np.unique(idx % np.array(x.shape[:q]), axis=0, return_index=True)
    idx = idx[np.sort(first)]  # distinct targets: the result does not depend on the order of updates
    upd_shape = (len(idx) + (1 if bad and upd_shape[0] != n else 0),) + x.shape[q:]
    upd = b.const(b.np.uniform(-1, 1, upd_shape).astype(np.float32))
    (y,) = b.node("ScatterND", [x.name, b.const(idx), upd])
    return None if bad else Value(y, x.shape)


def g_index_ops(b: Builder, x: Value) -> Value | None:
    op = b.ch.choice(["OneHot", "ReverseSequence", "Resize", "LRN"])
    bad = b.bad()
    if op == "OneHot":
        depth = b.ch.int(1, 4) if not bad else b.ch.choice([0, -2])
        n = x.shape[0]
        idx = b.np.integers(-depth if depth > 0 else 0, max(depth, 1), (n,)).astype(np.int64)
        ind = b.input(idx.shape, TensorProto.INT64, idx).name if b.ch.bool() else b.const(idx)
        (o,) = b.node("OneHot", [ind, b.const(np.array([depth], np.int64)),
                                 b.const(np.array([0.0, 1.0], np.float32))], axis=-1)
        if bad:
            return None
        (y,) = b.node("Add", [o, b.const(np.float32(0.5))])
        return Value(y, (n, depth))
    if op == "ReverseSequence":
        if len(x.shape) < 2:
            return g_unary(b, x)
        t, n = x.shape[0], x.shape[1]
        lens = b.np.integers(0, t + 1, (n,)).astype(np.int64)
        if bad:
            lens[0] = t + 3
        lens_name = b.input(lens.shape, TensorProto.INT64, lens).name if b.ch.bool(0.3) and not bad else b.const(lens)
        (y,) = b.node("ReverseSequence", [x.name, lens_name], batch_axis=1, time_axis=0)
        return None if bad else Value(y, x.shape)
    if op == "Resize":
        scales = [float(b.ch.choice([1, 1, 2, 0.5])) for _ in x.shape]
        if bad:
            scales = scales[:-1] or [2.0, 2.0]
        mode = b.ch.choice(["nearest", "linear"])
        (y,) = b.node("Resize", [x.name, "", b.const(np.array(scales, np.float32))], mode=mode)
        if bad:
            return None
        out = tuple(int(np.floor(d * s)) for d, s in zip(x.shape, scales))
        return Value(y, out) if all(out) else None
    if len(x.shape) < 3:
        return g_unary(b, x)
    size = b.ch.int(1, 5) if not bad else 0
    (y,) = b.node("LRN", [x.name], size=size)
    return None if bad else Value(y, x.shape)


GENERATORS: list[Gen] = [
    g_unary, g_binary, g_transpose, g_reshape, g_flatten, g_concat, g_gemm, g_matmul, g_conv, g_pool,
    g_slice, g_gather, g_squeeze, g_softmax, g_reduce, g_pad, g_expand_tile, g_split, g_norm, g_space,
    g_topk_cumsum, g_scatter, g_misc, g_conv_transpose, g_nd, g_index_ops,
]


def structured_model(ch: Chooser, p_bad: float = 0.3, max_ops: int = 4) -> Case:
    """A random chain of up to ``max_ops`` operators on one or two float inputs; with probability
    about ``p_bad`` per node (at most one per model) a rule is broken on purpose."""
    opset = ch.choice([13, 15, 17, 17, 18, 21])
    b = Builder(ch, opset, p_bad)
    rank = ch.int(1, 4)
    x = b.input(b.shape_of(rank))
    ends: list[Value] = []
    cur: Value | None = x
    for _ in range(ch.int(1, max_ops)):
        gen = ch.choice(GENERATORS)
        out = gen(b, cur)
        if out is None:
            cur = None
            break
        if int(np.prod(out.shape)) > 4096 or int(np.prod(out.shape)) == 0 or len(out.shape) > 5:
            ends.append(out)
            cur = None
            break
        cur = out
        if ch.bool(0.15):
            ends.append(cur)
    if cur is not None:
        ends.append(cur)
    outputs = {}
    for v in ends:
        outputs[v.name] = helper.make_tensor_value_info(v.name, v.elem, None)
    last = b.nodes[-1] if b.nodes else None
    if last is not None and cur is None and not any(o in outputs for o in last.output):
        outputs[last.output[0]] = onnx.ValueInfoProto(name=last.output[0])  # type left to inference
    if not outputs:
        (y,) = b.node("Identity", [x.name])
        outputs[y] = helper.make_tensor_value_info(y, F32, None)
    graph = helper.make_graph(b.nodes, "fuzz", b.inputs, list(outputs.values()), b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return Case(model.SerializeToString(), b.feeds, invalid=b.invalid, runtime_oob=b.runtime_oob,
                note=f"opset {opset}: {' '.join(b.ops)}")


def seed_model(ch: Chooser) -> Case:
    """A valid model to mutate: a generated chain without broken rules, or a small conv net."""
    if ch.bool(0.25):
        return convnet(ch)
    for _ in range(20):
        c = structured_model(ch, p_bad=0.0)
        if not c.runtime_oob:
            return c
    return convnet(ch)


def convnet(ch: Chooser) -> Case:
    """Conv + BatchNorm + Relu + MaxPool + Flatten + Gemm + Softmax, the shape of a classifier."""
    rng = np.random.default_rng(ch.int(0, 2**31))
    C, H = ch.int(1, 3), ch.int(4, 8)
    b = Builder(ch, 17, 0.0)
    x = b.input((1, C, H, H))
    w = b.const(rng.uniform(-1, 1, (4, C, 3, 3)).astype(np.float32))
    (c,) = b.node("Conv", [x.name, w, b.const(np.zeros(4, np.float32))], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    bn = [b.const(rng.uniform(0.5, 1.5, 4).astype(np.float32)) for _ in range(4)]
    (n,) = b.node("BatchNormalization", [c] + bn)
    (r,) = b.node("Relu", [n])
    (p,) = b.node("MaxPool", [r], kernel_shape=[2, 2], strides=[2, 2])
    (f,) = b.node("Flatten", [p], axis=1)
    k = 4 * (H // 2) * (H // 2)
    (g,) = b.node("Gemm", [f, b.const(rng.uniform(-1, 1, (5, k)).astype(np.float32)),
                           b.const(np.zeros(5, np.float32))], transB=1)
    (s,) = b.node("Softmax", [g], axis=1)
    graph = helper.make_graph(b.nodes, "convnet", b.inputs, [helper.make_tensor_value_info(s, F32, [1, 5])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return Case(model.SerializeToString(), b.feeds, note="convnet")
