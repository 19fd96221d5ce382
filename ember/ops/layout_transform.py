"""Data layouts, the ``ember.LayoutTransform`` operator, and what a layout policy answers.

**Layouts** are written as in TVM: primal axes upper-case (``"NCHW"``, ``"NHWC"``, ``"OIHW"``),
a split (blocked) sub-axis of a primal axis as ``<factor><lower-case letter>``: ``"NCHW16c"`` is
``[N, ceil(C/16), H, W, 16]`` with channel ``c = outer*16 + inner``; ``"OIHW16i16o"`` blocks
both the input and the output channels of a convolution weight. A channel count the block does
not divide is padded: the last block holds zeros past the true count.

**The operator** ``ember.LayoutTransform`` (attrs ``src_layout``, ``dst_layout``, optional
``primal_shape``) converts a tensor between any two layouts of the same primal axes: plain to
blocked (padding with zeros), blocked to plain (dropping the padding), blocked to blocked, and
permutations. ``primal_shape`` is the tensor's extent along each primal axis, in the order the
primal axes appear in ``src_layout``; it is needed when the source is blocked and padded (a
``NCHW4c`` tensor with 4 channel blocks holds 13 to 16 channels). Without it a blocked source is
taken to have no padding.

**Layout policies.** The graph pass :class:`ember.graph.alter_layout.AlterLayout` asks a
:class:`LayoutPolicy` (a target's strategy provides one: :meth:`ember.strategy.Strategy.layout_policy`)
where each node should run. The policy sees a :class:`LayoutSite` (the node's operator,
attributes and tensors, no graph objects) and answers :class:`NodeLayouts`. These types live here,
below :mod:`ember.strategy`, so that strategies can implement the protocol; the graph layer
re-exports them from :mod:`ember.graph.layouts`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import LayoutError
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import compute, const_like, dtype_of, shape, uname

__all__ = [
    "LAYOUT_TRANSFORM",
    "Layout",
    "LayoutPolicy",
    "LayoutSite",
    "NodeLayouts",
    "SiteValue",
    "ValueLayout",
    "transform_layout",
]

#: The registry name of the layout transform operator.
LAYOUT_TRANSFORM = "ember.LayoutTransform"

_TOKEN = re.compile(r"(\d*)([A-Za-z])")


class Layout:
    """A data layout parsed from a TVM-style string (see the module docstring).

    ``Layout("NCHW16c")``: ``axes`` are the letters in storage order (``("N", "C", "H", "W",
    "c")``), ``primal`` the upper-case ones in order (``"NCHW"``), ``splits`` the factor of each
    blocked primal axis (``{"C": 16}``). Every split sub-axis has a primal axis in the same
    string, each axis appears once, factors are >= 1. Equal strings give equal, equally hashed
    layouts; ``str()`` gives the string back. Raises :class:`~ember.errors.LayoutError` for a
    malformed string, naming what is wrong."""

    __slots__ = ("_axes", "_splits", "_text")

    def __init__(self, text: str | Layout) -> None:
        if isinstance(text, Layout):
            self._text, self._axes, self._splits = text._text, text._axes, text._splits
            return
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        if not isinstance(text, str):
            raise LayoutError(f"a layout is a string such as 'NCHW16c', got {type(text).__name__} {text!r}")
        axes: list[str] = []
        splits: dict[str, int] = {}
        pos = 0
        for m in _TOKEN.finditer(text):
            if m.start() != pos:
                break
            pos = m.end()
            digits, letter = m.groups()
            if letter.isupper():
                if digits:
                    raise LayoutError(
                        f"layout {text!r}: primal axis {letter!r} has a factor {digits}; write a split "
                        f"sub-axis in lower case ('{digits}{letter.lower()}')"
                    )
            else:
                if not digits:
                    raise LayoutError(
                        f"layout {text!r}: sub-axis {letter!r} has no factor; a split axis is written "
                        f"'<factor>{letter}' (e.g. '16{letter}'), a primal axis in upper case"
                    )
                factor = int(digits)
                if factor < 1:
                    raise LayoutError(f"layout {text!r}: sub-axis {letter!r} has factor {factor}; factors are >= 1")
                if letter.upper() in splits:
                    raise LayoutError(f"layout {text!r}: axis {letter.upper()!r} is split more than once")
                splits[letter.upper()] = factor
            if letter in axes:
                raise LayoutError(f"layout {text!r}: axis {letter!r} appears twice")
            axes.append(letter)
        if pos != len(text) or not text:
            raise LayoutError(
                f"layout {text!r} is not a layout: write primal axes in upper case and split sub-axes as "
                f"'<factor><lower case>' (e.g. 'NCHW', 'NHWC', 'NCHW16c', 'OIHW16i16o')"
            )
        for s in splits:
            if s not in axes:
                raise LayoutError(f"layout {text!r}: sub-axis {s.lower()!r} splits axis {s!r}, which the layout lacks")
        self._text = text
        self._axes = tuple(axes)
        self._splits = dict(splits)

    @property
    def axes(self) -> tuple[str, ...]:
        """The axis letters in storage order (primal upper-case, sub-axes lower-case)."""
        return self._axes

    @property
    def ndim(self) -> int:
        """The rank of a tensor stored in this layout."""
        return len(self._axes)

    @property
    def primal(self) -> str:
        """The primal (upper-case) axes in the order they appear: ``"NCHW"`` for ``"NCHW16c"``."""
        return "".join(a for a in self._axes if a.isupper())

    @property
    def splits(self) -> dict[str, int]:
        """The factor of each split primal axis (a copy): ``{"C": 16}`` for ``"NCHW16c"``."""
        return dict(self._splits)

    @property
    def is_plain(self) -> bool:
        """True when no axis is split (``"NCHW"``, ``"NHWC"``)."""
        return not self._splits

    def factor(self, axis: str) -> int | None:
        """The split factor of primal axis ``axis``, or None when it is not split."""
        return self._splits.get(axis)

    def is_same_primal(self, other: Layout | str) -> bool:
        """True when ``other`` has the same primal axes (in any order): ``NCHW`` and ``NHWC8c``
        do, ``NCHW`` and ``OIHW`` do not. Only such layouts convert into each other."""
        return sorted(self.primal) == sorted(Layout(other).primal)

    def shape_of(self, primal_shape: Sequence[int]) -> tuple[int, ...]:
        """The shape, in this layout, of a tensor whose extent along each primal axis is
        ``primal_shape`` (in the order of :attr:`primal`). A split axis of extent ``n`` with
        factor ``f`` becomes ``ceil(n / f)`` blocks of ``f`` (the last block padded)."""
        ext = self._extents(primal_shape)
        out = []
        for a in self._axes:
            if a.isupper():
                f = self._splits.get(a)
                out.append(ext[a] if f is None else -(-ext[a] // f))
            else:
                out.append(self._splits[a.upper()])
        return tuple(out)

    def primal_shape_of(self, stored_shape: Sequence[int]) -> tuple[int, ...]:
        """The primal extents (in the order of :attr:`primal`) of a tensor of ``stored_shape`` in
        this layout, assuming no padding (a split axis holds ``blocks * factor`` elements)."""
        s = tuple(int(d) for d in stored_shape)
        if len(s) != self.ndim:
            raise LayoutError(f"layout {self} has {self.ndim} axes; a tensor of shape {s} has {len(s)}")
        pos = {a: k for k, a in enumerate(self._axes)}
        return tuple(s[pos[a]] * self._splits.get(a, 1) for a in self.primal)

    def pads(self, primal_shape: Sequence[int]) -> bool:
        """True when storing a tensor of ``primal_shape`` in this layout needs padding: a split
        axis whose extent its factor does not divide."""
        ext = self._extents(primal_shape)
        return any(ext[a] % f for a, f in self._splits.items())

    def rename(self, mapping: Mapping[str, str]) -> Layout:
        """This layout with primal axis letters renamed by ``mapping`` (upper-case to upper-case;
        a sub-axis follows its primal axis; letters not in ``mapping`` are kept)."""
        out = []
        for a in self._axes:
            if a.isupper():
                out.append(mapping.get(a, a))
            else:
                out.append(f"{self._splits[a.upper()]}{mapping.get(a.upper(), a.upper()).lower()}")
        return Layout("".join(out))

    def _extents(self, primal_shape: Sequence[int]) -> dict[str, int]:
        p = tuple(int(d) for d in primal_shape)
        if len(p) != len(self.primal):
            raise LayoutError(
                f"layout {self} has {len(self.primal)} primal axes ({self.primal}); "
                f"a primal shape {p} has {len(p)} dimensions"
            )
        return dict(zip(self.primal, p))

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Layout({self._text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and other._text == self._text

    def __hash__(self) -> int:
        return hash(("Layout", self._text))


def transform_layout(
    x: Tensor, src: Layout | str, dst: Layout | str, primal_shape: Sequence[int] | None = None
) -> Tensor:
    """``x`` (stored in layout ``src``) stored in layout ``dst``: the te program of
    ``ember.LayoutTransform``. ``primal_shape`` (in the order of ``src.primal``) is the tensor's
    true extent per primal axis; without it a blocked ``src`` is taken to have no padding.
    Padding positions of the result (a split axis past its extent) are zero; padding of ``x``
    is never read. Raises :class:`~ember.errors.LayoutError` when the layouts have different
    primal axes or ``x`` does not have the shape ``src`` gives its primal shape."""
    s, d = Layout(src), Layout(dst)
    if not s.is_same_primal(d):
        raise LayoutError(f"cannot transform layout {s} into {d}: their primal axes {s.primal} and {d.primal} differ")
    xs = shape(x)
    if len(xs) != s.ndim:
        raise LayoutError(f"a tensor of shape {xs} is not in layout {s}, which has {s.ndim} axes")
    prim = tuple(int(v) for v in primal_shape) if primal_shape is not None else s.primal_shape_of(xs)
    if s.shape_of(prim) != xs:
        raise LayoutError(
            f"a tensor of shape {xs} is not in layout {s} with primal extents {dict(zip(s.primal, prim))} "
            f"(that would be {s.shape_of(prim)})"
        )
    ext = dict(zip(s.primal, prim))
    out_shape = d.shape_of([ext[a] for a in d.primal])
    dpos = {a: k for k, a in enumerate(d.axes)}
    dt = dtype_of(x)

    def body(*idx: Any) -> Any:
        index: dict[str, Any] = {}
        valid: list[Any] = []
        for a in d.primal:
            f = d.factor(a)
            if f is None:
                index[a] = idx[dpos[a]]
                continue
            i = idx[dpos[a]] * f + idx[dpos[a.lower()]]
            if ext[a] % f:  # a padded block: zero past the extent, and never read past it
                valid.append(i < ext[a])
                i = E.min_expr(i, max(ext[a] - 1, 0))
            index[a] = i
        load = []
        for a in s.axes:
            if a.isupper():
                f = s.factor(a)
                load.append(index[a] if f is None else E.floordiv(index[a], f))
            else:
                load.append(E.floormod(index[a.upper()], s.factor(a.upper())))
        val = x[tuple(load)]
        if not valid:
            return val
        cond = valid[0]
        for c in valid[1:]:
            cond = E.logical_and(cond, c)
        return E.select(cond, val, const_like(0, dt))

    return compute(out_shape, body, name=uname("layout_transform"))


def _layout_attr(ctx: OpContext, name: str) -> Layout:
    v = ctx.attr(name)
    if v is None:
        raise ctx.fail(f"attribute {name} (a layout string such as 'NCHW16c') is missing")
    try:
        return Layout(v)
    except LayoutError as exc:
        raise LayoutError(f"{ctx.op} node {ctx.node!r}: {exc}") from exc


@register(LAYOUT_TRANSFORM, pattern="injective")
def layout_transform(ctx: OpContext, x: Tensor) -> Tensor:
    """ember.LayoutTransform: ``x`` from layout ``src_layout`` to ``dst_layout`` (see
    :func:`transform_layout`; attribute ``primal_shape`` as there)."""
    src, dst = _layout_attr(ctx, "src_layout"), _layout_attr(ctx, "dst_layout")
    ps = ctx.attr("primal_shape")
    try:
        return transform_layout(x, src, dst, None if ps is None else [int(v) for v in ps])
    except LayoutError as exc:
        raise LayoutError(f"{ctx.op} node {ctx.node!r}: {exc}") from exc


# -- what a layout policy is asked and answers --------------------------------------------------------
@dataclass(frozen=True)
class ValueLayout:
    """Where a node reads or writes one tensor: the graph holds it in the plain layout ``plain``
    (its axes in the tensor's dimension order, e.g. ``NCHW``), the node sees it in ``layout``
    (e.g. ``NCHW16c``). Both must have the same primal axes and ``plain`` may not be split
    (:class:`~ember.errors.LayoutError` otherwise). ``ValueLayout.of("NCHW", "NCHW16c")``."""

    plain: Layout
    layout: Layout

    def __post_init__(self) -> None:
        if not self.plain.is_plain:
            raise LayoutError(f"the plain layout of a graph tensor cannot be blocked, got {self.plain}")
        if not self.plain.is_same_primal(self.layout):
            raise LayoutError(
                f"layout {self.layout} has primal axes {self.layout.primal}; the tensor's plain layout "
                f"{self.plain} has {self.plain.primal}"
            )

    @classmethod
    def of(cls, plain: Layout | str, layout: Layout | str) -> ValueLayout:
        """A ValueLayout from two layouts or layout strings."""
        return cls(Layout(plain), Layout(layout))

    @property
    def is_identity(self) -> bool:
        """True when the node sees the tensor as the graph holds it."""
        return self.plain == self.layout

    def __str__(self) -> str:
        return f"{self.plain}->{self.layout}"


LayoutSpec = ValueLayout | tuple[str, str] | None


def _value_layout(v: LayoutSpec) -> ValueLayout | None:
    if v is None or isinstance(v, ValueLayout):
        return v
    if isinstance(v, tuple) and len(v) == 2:
        return ValueLayout.of(v[0], v[1])
    raise LayoutError(f"a tensor's layout is a ValueLayout, a (plain, layout) pair of strings or None, got {v!r}")


@dataclass(frozen=True)
class NodeLayouts:
    """A policy's answer for one node: the layout each input must arrive in (``inputs``, one
    per node input; None leaves that input as the graph holds it — scalars, or weights the
    variant reads as they are), the layout each output is produced in (``outputs``, one per node
    output; None: as the graph holds it), and the node's variant working in those layouts:
    ``op`` (None keeps the operator) with ``attrs`` (None keeps the attributes).

    Entries may be given as ``(plain, layout)`` string pairs; they are parsed into
    :class:`ValueLayout`. Contract for the variant: given inputs in their layouts, it computes
    the node's outputs in theirs, and writes zeros into the padding of every blocked output
    (the padding of blocked inputs is zero as well: the pass keeps that invariant)."""

    inputs: tuple[ValueLayout | None, ...]
    outputs: tuple[ValueLayout | None, ...]
    op: str | None = None
    attrs: Mapping[str, Any] | None = None

    def __init__(
        self,
        inputs: Sequence[LayoutSpec],
        outputs: Sequence[LayoutSpec],
        op: str | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        object.__setattr__(self, "inputs", tuple(_value_layout(v) for v in inputs))
        object.__setattr__(self, "outputs", tuple(_value_layout(v) for v in outputs))
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "attrs", None if attrs is None else dict(attrs))


@dataclass(frozen=True)
class SiteValue:
    """One tensor of a node, as a policy sees it: its graph ``name``, static ``shape``, ``dtype``
    and whether it is a compile-time ``constant`` (a weight)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    constant: bool = False


@dataclass(frozen=True)
class LayoutSite:
    """What a policy is told about a node: its operator ``op`` (registry name), ``attrs``,
    ``opset``, node ``name``, and its ``inputs`` (None for an omitted optional input) and
    ``outputs`` with shapes and dtypes. Graph objects stay out of it, so a strategy (below the
    graph layer) can implement a policy."""

    op: str
    name: str
    inputs: tuple[SiteValue | None, ...]
    outputs: tuple[SiteValue, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    opset: int = 21


class LayoutPolicy(Protocol):
    """Where a target wants nodes to run (see :class:`ember.graph.alter_layout.AlterLayout`)."""

    def layouts(self, site: LayoutSite) -> NodeLayouts | None:
        """The layouts ``site``'s node should run in, or None when the policy has no preference
        (the node then stays as it is, or follows its inputs' layout if it is layout-agnostic)."""
        ...
