"""Tensors, operations and iteration variables of the tensor-expression language."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..errors import EmberError
from ..ir import expr as E
from ..ir.dtypes import DataType


@dataclass(frozen=True, slots=True)
class Range:
    """The half-open interval ``[min, min + extent)``."""

    min: E.PrimExpr
    extent: E.PrimExpr

    @staticmethod
    def from_extent(extent: Any) -> Range:
        """``[0, extent)``."""
        return Range(E.const(0), E.convert(extent))

    def __repr__(self) -> str:
        return f"Range({self.min}, {self.extent})"


class IterKind(Enum):
    """What an iteration variable ranges over."""

    DATA_PAR = "data_par"
    REDUCE = "reduce"
    THREAD = "thread"


@dataclass(eq=False, slots=True)
class IterVar:
    """An iteration variable: a loop axis of a stage (``var`` ranges over ``dom``)."""

    dom: Range | None
    var: E.Var
    kind: IterKind = IterKind.DATA_PAR
    thread_tag: str = ""

    def __hash__(self) -> int:
        return id(self)

    def as_expr(self) -> E.Var:
        """The loop variable, so an IterVar can be used wherever an expression can."""
        return self.var

    def __repr__(self) -> str:
        extent = self.dom.extent if self.dom is not None else "?"
        return f"IterVar({self.var.name}, extent={extent}, {self.kind.value})"

    # Arithmetic on IterVars works on their variables.
    def __add__(self, o: Any) -> E.PrimExpr:
        return self.var + o

    def __radd__(self, o: Any) -> E.PrimExpr:
        return o + self.var

    def __sub__(self, o: Any) -> E.PrimExpr:
        return self.var - o

    def __rsub__(self, o: Any) -> E.PrimExpr:
        return o - self.var

    def __mul__(self, o: Any) -> E.PrimExpr:
        return self.var * o

    def __rmul__(self, o: Any) -> E.PrimExpr:
        return o * self.var

    def __floordiv__(self, o: Any) -> E.PrimExpr:
        return self.var // o

    def __mod__(self, o: Any) -> E.PrimExpr:
        return self.var % o

    def __lt__(self, o: Any) -> E.PrimExpr:
        return self.var < o

    def __le__(self, o: Any) -> E.PrimExpr:
        return self.var <= o

    def __gt__(self, o: Any) -> E.PrimExpr:
        return self.var > o

    def __ge__(self, o: Any) -> E.PrimExpr:
        return self.var >= o

    def __neg__(self) -> E.PrimExpr:
        return -self.var


class Operation:
    """Base of operations: something that produces tensors."""

    name: str

    @property
    def num_outputs(self) -> int:
        """How many tensors the operation produces."""
        return 1

    def output(self, index: int = 0) -> Tensor:
        """The ``index``-th output tensor."""
        outs = self.outputs
        if not 0 <= index < len(outs):
            raise EmberError(f"operation {self.name} has {len(outs)} output(s), not {index + 1}")
        return outs[index]

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """All output tensors."""
        raise NotImplementedError  # each concrete operation defines its outputs

    @property
    def input_tensors(self) -> list[Tensor]:
        """Tensors this operation reads."""
        return []

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


class PlaceholderOp(Operation):
    """An input tensor of a kernel."""

    def __init__(self, name: str, shape: tuple[E.PrimExpr, ...], dtype: DataType):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self._outputs = (Tensor(shape, dtype, self, 0),)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self._outputs

    def __repr__(self) -> str:
        return f"placeholder({self.name})"


# Keys of ``ComputeOp.attrs`` that say how the compiler treats a stage (set through
# ``te.compute(..., materialize=True, constant_layout=True, workspace=True)``). They live in
# ``attrs`` so that every rebuild of an operation (``with_body``, ``cache_write``, program
# rewrites) keeps them.
MATERIALIZE = "materialize"
CONSTANT_LAYOUT = "constant_layout"
WORKSPACE = "workspace"


class ComputeOp(Operation):
    """``out[axis] = body`` for every point of the axes (``body`` may be reductions).

    ``tag`` says what the operation is (``"conv_packed"``, ``"gemm_pack"``...), for schedules
    that specialise on it; ``attrs`` holds its parameters and the flags :attr:`materialize`,
    :attr:`constant_layout` and :attr:`workspace`."""

    def __init__(
        self,
        name: str,
        tag: str,
        axis: tuple[IterVar, ...],
        body: tuple[E.PrimExpr, ...],
        attrs: dict[str, Any] | None = None,
    ):
        self.name = name
        self.tag = tag
        self.axis = axis
        self.body = body
        self.attrs = dict(attrs or {})
        reduce_axis: list[IterVar] = []
        if body and isinstance(body[0], E.Reduce):
            reduce_axis = list(body[0].axis)
        self.reduce_axis = tuple(reduce_axis)
        shape = tuple(iv.dom.extent for iv in axis)  # type: ignore[union-attr]
        self._outputs = tuple(Tensor(shape, b.dtype, self, i) for i, b in enumerate(body))

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self._outputs

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    @property
    def is_reduction(self) -> bool:
        """True when the body is a reduction."""
        return bool(self.body) and isinstance(self.body[0], E.Reduce)

    @property
    def materialize(self) -> bool:
        """True when the stage must never be inlined into its readers (it is computed into a
        buffer of its own). Implied by :attr:`constant_layout` and :attr:`workspace`."""
        return bool(self.attrs.get(MATERIALIZE)) or self.constant_layout or self.workspace

    @property
    def constant_layout(self) -> bool:
        """True when the stage is a layout transform (packing, padding) that the model compiler
        computes once, at compile time, when everything it reads is constant."""
        return bool(self.attrs.get(CONSTANT_LAYOUT))

    @property
    def workspace(self) -> bool:
        """True when the stage's buffer is a workspace that the model's memory plan provides (an
        intermediate the kernel keeps in memory), instead of an allocation in the kernel."""
        return bool(self.attrs.get(WORKSPACE))

    @property
    def input_tensors(self) -> list[Tensor]:
        from ..ir.visitor import post_order_visit

        seen: dict[Tensor, None] = {}

        def f(n: Any) -> None:
            if isinstance(n, E.ProducerLoad):
                seen.setdefault(n.producer, None)

        for b in self.body:
            post_order_visit(b, f)
        return list(seen)

    def with_body(self, body: tuple[E.PrimExpr, ...], name: str | None = None) -> ComputeOp:
        """The same axes with another body."""
        return ComputeOp(name or self.name, self.tag, self.axis, body, self.attrs)

    def __repr__(self) -> str:
        return f"compute({self.name})"


@dataclass(eq=False)
class Tensor:
    """One output of an operation. Index it (``A[i, j]``) to read an element in an expression."""

    shape: tuple[E.PrimExpr, ...]
    dtype: DataType
    op: Operation
    value_index: int = 0
    _name: str = field(default="", repr=False)

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:  # type: ignore[override]
        if isinstance(other, Tensor):
            return self.op is other.op and self.value_index == other.value_index
        return False

    @property
    def name(self) -> str:
        """The operation's name (with ``.vN`` for outputs after the first)."""
        return self.op.name if self.value_index == 0 else f"{self.op.name}.v{self.value_index}"

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def __getitem__(self, indices: Any) -> E.PrimExpr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise EmberError(
                f"tensor {self.name} has {len(self.shape)} dimension(s) but was indexed with "
                f"{len(indices)} index(es): give one index per dimension"
            )
        idx = []
        for k, i in enumerate(indices):
            x = E.convert(i)
            if not x.dtype.is_int:
                raise EmberError(f"index {k} of tensor {self.name} is {x} of type {x.dtype}: indices must be integers")
            idx.append(x)
        return E.ProducerLoad(self, tuple(idx), self.dtype)

    def __repr__(self) -> str:
        dims = ", ".join(str(s) for s in self.shape)
        return f"Tensor({self.name}: {self.dtype}[{dims}])"
