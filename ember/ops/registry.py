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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import EmberError, OpError
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
    """Build operator ``ctx.op`` on ``inputs``; always returns a list of tensors."""
    d = lookup(ctx.op)
    if d is None:
        raise OpError(f"operator {ctx.op} is not supported by ember")
    out = d.fn(ctx, *inputs)
    return list(out) if isinstance(out, (list, tuple)) else [out]


_LOADED = False


def _load_all() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        from . import (  # noqa: F401 - importing a module registers its operators
            attention,
            bitwise,
            detection,
            elemwise,
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
        )
