"""Buffers: named, typed, shaped regions of memory that loads and stores address."""

from __future__ import annotations

from dataclasses import dataclass, field

from .dtypes import DataType
from .expr import PrimExpr, Var, const, convert


@dataclass(frozen=True, eq=False, slots=True)
class Buffer:
    """A multi-dimensional view of memory.

    ``shape`` and ``strides`` are in elements and may be symbolic; empty ``strides`` means
    compact row-major. ``scope`` is ``"global"`` (function arguments), ``"local"`` (registers or
    the stack), or ``"shared"`` (GPU shared memory). ``data`` is the pointer variable.
    """

    name: str
    dtype: DataType
    shape: tuple[PrimExpr, ...]
    strides: tuple[PrimExpr, ...] = ()
    scope: str = "global"
    data: Var = field(default=None)  # type: ignore[assignment]
    elem_offset: PrimExpr | None = None

    def __post_init__(self) -> None:
        if self.data is None:
            object.__setattr__(self, "data", Var(self.name, DataType("uint", 64)))

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def compact_strides(self) -> tuple[PrimExpr, ...]:
        """Row-major strides in elements (the given strides when there are some)."""
        if self.strides:
            return self.strides
        strides: list[PrimExpr] = []
        acc: PrimExpr = const(1, "int64")
        for extent in reversed(self.shape):
            strides.append(acc)
            acc = acc * convert(extent).astype("int64")
        return tuple(reversed(strides))

    def __repr__(self) -> str:
        dims = ", ".join(str(s) for s in self.shape)
        return f"Buffer({self.name}: {self.dtype}[{dims}], {self.scope})"


def decl_buffer(shape, dt: DataType, name: str, scope: str = "global") -> Buffer:
    """A compact buffer of ``shape`` (ints or expressions) and type ``dt``."""
    return Buffer(name, dt, tuple(convert(s) for s in shape), (), scope)
