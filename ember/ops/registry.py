"""The operator registry: ONNX-named operators as tensor-expression builders.

Every operator is a function ``fn(ctx, *inputs) -> Tensor | list[Tensor]`` taking te tensors
(``None`` for an omitted optional input) and reading its attributes from ``ctx``. Its *pattern*
tells the graph compiler how it fuses:

* ``injective``: each output element reads a few input elements (elementwise, broadcast,
  transpose, gather...); fused into producers' epilogues and into consumers;
* ``reduce``: a reduction (sum, softmax, norms); takes injective producers and epilogues;
* ``heavy``: convolution and matrix products; takes injective epilogues only, gets its own
  schedule;
* ``opaque``: computed alone (scans, sorts, scatters).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import EmberError, OpError
from ..ir import expr as E
from ..te import Tensor
from .layout import Layout, host_layout

PATTERNS = ("injective", "reduce", "heavy", "opaque")


class NeedValue(EmberError):
    """An operator needs the value (not only the shape) of an input that is not a constant."""

    def __init__(self, name: str, what: str):
        super().__init__(f"{what} needs the value of {name!r}, which is not a constant")
        self.name = name


@dataclass
class OpContext:
    """What an operator builder sees besides its input tensors. ``strategy`` is the strategy of
    the target the operator is built for (an :class:`ember.strategy.Strategy`, seen through the
    :class:`~ember.ops.layout.Layout` protocol): compute definitions read layout parameters from
    it (the GEMM panel width), never from the host; without a target it is the host CPU's."""

    op: str
    attrs: dict[str, Any]
    inputs: list[str]
    consts: dict[str, np.ndarray]
    opset: int = 21
    node: str = ""
    dtypes: list[str] = field(default_factory=list)
    strategy: Layout = field(default_factory=host_layout)

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute ``name``, or ``default`` when the node does not set it."""
        return self.attrs.get(name, default)

    def has(self, i: int) -> bool:
        """True when optional input ``i`` is given."""
        return i < len(self.inputs) and self.inputs[i] != ""

    def value(self, i: int) -> np.ndarray | None:
        """The constant value of input ``i`` (None when omitted); raises :class:`NeedValue` when
        the input is computed at run time."""
        if not self.has(i):
            return None
        name = self.inputs[i]
        if name not in self.consts:
            raise NeedValue(name, f"{self.op} node {self.node!r}")
        return self.consts[name]

    def fail(self, msg: str) -> OpError:
        """An :class:`OpError` naming this node."""
        return OpError(f"{self.op} node {self.node!r}: {msg}")


@dataclass
class OpDef:
    """A registered operator."""

    name: str
    fn: Callable[..., Any]
    pattern: str


OPS: dict[str, OpDef] = {}


def register(*names: str, pattern: str = "injective") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` under each of ``names`` with fusion ``pattern``."""
    assert pattern in PATTERNS, pattern

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for n in names:
            OPS[n] = OpDef(n, fn, pattern)
        return fn

    return deco


def lookup(op: str) -> OpDef | None:
    """The operator ``op``, or None when ember does not implement it."""
    _load_all()
    return OPS.get(op)


def call(ctx: OpContext, inputs: list[Tensor | None]) -> list[Tensor]:
    """Build operator ``ctx.op`` on ``inputs``; always returns a list of tensors.

    A required input left out, or a shape or attribute check of the operator's helpers that
    fails (a plain :class:`EmberError`), is an :class:`OpError` naming the node; so is an output
    larger than :func:`~ember.ops.util.memory_limit`."""
    from .util import check_shape

    d = lookup(ctx.op)
    if d is None:
        raise OpError(f"operator {ctx.op} is not supported by ember")
    for k, pname in enumerate(_required(d.fn)):
        if k >= len(inputs) or inputs[k] is None:
            raise ctx.fail(f"input {k} ({pname}) is required but {'empty' if k < len(inputs) else 'not given'}")
    try:
        out = d.fn(ctx, *inputs)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        for o in outs:
            if isinstance(o, Tensor):
                dims = [E.const_int_value(s) for s in o.shape]
                check_shape([x for x in dims if x is not None], "output", max(o.dtype.bits, 8) // 8)
            elif isinstance(o, np.ndarray):
                check_shape(o.shape, "output", o.dtype.itemsize)
    except (NeedValue, OpError):
        raise
    except EmberError as exc:
        if type(exc) is EmberError:  # a helper's check (axis, broadcast, size): name the node
            raise ctx.fail(str(exc)) from exc
        raise
    return outs


_REQUIRED: dict[Callable[..., Any], list[str]] = {}


def _required(fn: Callable[..., Any]) -> list[str]:
    """The names of ``fn``'s inputs that have no default (after the context)."""
    got = _REQUIRED.get(fn)
    if got is None:
        params = list(inspect.signature(fn).parameters.values())[1:]
        got = []
        for p in params:
            if p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD or p.default is not inspect.Parameter.empty:
                break
            got.append(p.name)
        _REQUIRED[fn] = got
    return got


_LOADED = False


def _load_all() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        from . import (  # noqa: F401 - importing a module registers its operators
            attention,
            bitwise,
            conv_nchwc,
            detection,
            elemwise,
            fused_attention,
            image,
            layout_transform,
            linalg,
            loss,
            misc,
            ml,
            nn,
            quant,
            recurrent_state,
            reduce,
            rnn,
            signal,
            training,
            transform,
            winograd_nchwc,
        )
