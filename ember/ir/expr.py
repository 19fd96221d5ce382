"""Expressions of the loop IR.

Every node is immutable and typed (``node.dtype``). Arithmetic operators on expressions build
nodes, so ``A[i] + B[i] * 2`` is an expression tree; Python numbers are turned into constants of
the other operand's type (see :mod:`ember.ir.dtypes` for promotion). Comparisons (``<``, ``==``)
build comparison nodes too; ``bool(a == b)`` is only defined for identity tests (used by dicts),
never for deciding a symbolic question: use :mod:`ember.arith` for that.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TypeMismatchError
from .dtypes import BOOL, FLOAT32, INT32, INT64, DataType, dtype, promote


class PrimExpr:
    """Base class of all expressions; provides operator overloading."""

    __slots__ = ()
    dtype: DataType

    # -- arithmetic ------------------------------------------------------------------------
    def __add__(self, other: Any) -> PrimExpr:
        return _binary(Add, self, other)

    def __radd__(self, other: Any) -> PrimExpr:
        return _binary(Add, other, self)

    def __sub__(self, other: Any) -> PrimExpr:
        return _binary(Sub, self, other)

    def __rsub__(self, other: Any) -> PrimExpr:
        return _binary(Sub, other, self)

    def __mul__(self, other: Any) -> PrimExpr:
        return _binary(Mul, self, other)

    def __rmul__(self, other: Any) -> PrimExpr:
        return _binary(Mul, other, self)

    def __truediv__(self, other: Any) -> PrimExpr:
        return div(self, other)

    def __rtruediv__(self, other: Any) -> PrimExpr:
        return div(other, self)

    def __floordiv__(self, other: Any) -> PrimExpr:
        return _binary(FloorDiv, self, other)

    def __rfloordiv__(self, other: Any) -> PrimExpr:
        return _binary(FloorDiv, other, self)

    def __mod__(self, other: Any) -> PrimExpr:
        return _binary(FloorMod, self, other)

    def __rmod__(self, other: Any) -> PrimExpr:
        return _binary(FloorMod, other, self)

    def __neg__(self) -> PrimExpr:
        return _binary(Sub, const(0, self.dtype), self)

    def __pos__(self) -> PrimExpr:
        return self

    # -- comparisons and logic ------------------------------------------------------------
    def __lt__(self, other: Any) -> PrimExpr:
        return _compare(LT, self, other)

    def __le__(self, other: Any) -> PrimExpr:
        return _compare(LE, self, other)

    def __gt__(self, other: Any) -> PrimExpr:
        return _compare(LT, other, self)

    def __ge__(self, other: Any) -> PrimExpr:
        return _compare(LE, other, self)

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        if not isinstance(other, (PrimExpr, int, float, bool)):
            return NotImplemented
        return _compare(EQ, self, other)

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        if not isinstance(other, (PrimExpr, int, float, bool)):
            return NotImplemented
        return _compare(NE, self, other)

    def __hash__(self) -> int:
        return id(self)

    def __and__(self, other: Any) -> PrimExpr:
        return logical_and(self, other)

    def __rand__(self, other: Any) -> PrimExpr:
        return logical_and(other, self)

    def __or__(self, other: Any) -> PrimExpr:
        return logical_or(self, other)

    def __ror__(self, other: Any) -> PrimExpr:
        return logical_or(other, self)

    def __invert__(self) -> PrimExpr:
        return logical_not(self)

    def __bool__(self) -> bool:
        raise TypeMismatchError(
            f"the truth value of the symbolic expression {self} is not known in Python: "
            "use ember.te.if_then_else / select instead of `if`, and `&`/`|` instead of `and`/`or`"
        )

    def astype(self, target: str | DataType) -> PrimExpr:
        """This expression converted to ``target``."""
        return cast(target, self)

    def same_as(self, other: object) -> bool:
        """Identity: the very same node object."""
        return self is other

    def __str__(self) -> str:
        from .printer import expr_str

        return expr_str(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"


def _node(cls: type) -> type:
    return dataclass(frozen=True, eq=False, slots=True, repr=False)(cls)


# -- leaves -----------------------------------------------------------------------------------
@_node
class IntImm(PrimExpr):
    """An integer or boolean constant."""

    dtype: DataType
    value: int


@_node
class FloatImm(PrimExpr):
    """A floating-point constant."""

    dtype: DataType
    value: float


@_node
class StringImm(PrimExpr):
    """A string constant (only as an argument of intrinsic calls)."""

    value: str
    dtype: DataType = INT32


_var_ids = itertools.count()


@_node
class Var(PrimExpr):
    """A variable: a loop index, a symbolic size or a pointer. Compared by identity.

    ``uid`` numbers the variables of this process (:func:`ember.arith.linear.structural_key`
    tells variables apart by it), so two variables never share one: it is not an argument, and
    a copy (``pickle``: Dask sends a tuning task to its worker processes; ``copy``) is a new
    variable that takes the next number of the process that makes it. Keeping the number would
    give a worker's copy of a variable the number of another variable the worker made itself
    (its counter starts again), and the simplifier would take the two for one
    (``i0*16384 + i2.outer*32`` became ``i2.outer*16416``: a wrong, crashing candidate)."""

    name: str
    dtype: DataType = INT32
    uid: int = field(default_factory=lambda: next(_var_ids), init=False)

    def __reduce__(self) -> tuple[Any, tuple[str, DataType]]:
        # Pickle keeps one copy per variable (its memo), so the copies stay one variable each.
        return Var, (self.name, self.dtype)


# -- arithmetic -------------------------------------------------------------------------------
@_node
class BinaryOp(PrimExpr):
    """Base of two-operand nodes; both operands have ``dtype`` already."""

    a: PrimExpr
    b: PrimExpr
    dtype: DataType


class Add(BinaryOp):
    """a + b"""

    __slots__ = ()


class Sub(BinaryOp):
    """a - b"""

    __slots__ = ()


class Mul(BinaryOp):
    """a * b"""

    __slots__ = ()


class Div(BinaryOp):
    """a / b for floats; for integers, division rounding toward zero (C semantics)."""

    __slots__ = ()


class Mod(BinaryOp):
    """Remainder with the sign of a (C semantics), integers only."""

    __slots__ = ()


class FloorDiv(BinaryOp):
    """a // b rounding toward minus infinity (Python semantics)."""

    __slots__ = ()


class FloorMod(BinaryOp):
    """a % b with the sign of b (Python semantics)."""

    __slots__ = ()


class Min(BinaryOp):
    """min(a, b)"""

    __slots__ = ()


class Max(BinaryOp):
    """max(a, b)"""

    __slots__ = ()


@_node
class CmpOp(PrimExpr):
    """Base of comparisons; operands share a type, the result is bool (with their lanes)."""

    a: PrimExpr
    b: PrimExpr
    dtype: DataType

    def __bool__(self) -> bool:
        # Only identity decides truth, so Python containers keyed by expressions work.
        if isinstance(self, EQ):
            return self.a is self.b
        if isinstance(self, NE):
            return self.a is not self.b
        return PrimExpr.__bool__(self)


class EQ(CmpOp):
    """a == b"""

    __slots__ = ()


class NE(CmpOp):
    """a != b"""

    __slots__ = ()


class LT(CmpOp):
    """a < b"""

    __slots__ = ()


class LE(CmpOp):
    """a <= b"""

    __slots__ = ()


class And(BinaryOp):
    """Logical and of two booleans."""

    __slots__ = ()


class Or(BinaryOp):
    """Logical or of two booleans."""

    __slots__ = ()


@_node
class Not(PrimExpr):
    """Logical not."""

    a: PrimExpr
    dtype: DataType = BOOL


@_node
class Select(PrimExpr):
    """``true_value if condition else false_value``; both branches may be evaluated."""

    condition: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    dtype: DataType


@_node
class Cast(PrimExpr):
    """Conversion of ``value`` to ``dtype`` (C conversion rules; float to int truncates)."""

    dtype: DataType
    value: PrimExpr


@_node
class Call(PrimExpr):
    """A call of an intrinsic named ``op`` (``"exp"``, ``"sqrt"``, ``"shuffle_down"``, ...)."""

    dtype: DataType
    op: str
    args: tuple[PrimExpr, ...]


@_node
class Let(PrimExpr):
    """``body`` with ``var`` bound to ``value``."""

    var: Var
    value: PrimExpr
    body: PrimExpr
    dtype: DataType


@_node
class Ramp(PrimExpr):
    """The vector ``base, base+stride, ..., base+(lanes-1)*stride``."""

    base: PrimExpr
    stride: PrimExpr
    lanes: int
    dtype: DataType


@_node
class Broadcast(PrimExpr):
    """The vector of ``lanes`` copies of ``value``."""

    value: PrimExpr
    lanes: int
    dtype: DataType


@_node
class BufferLoad(PrimExpr):
    """Element ``indices`` of ``buffer`` (multi-dimensional before flattening, one index after)."""

    buffer: Any  # ember.ir.buffer.Buffer
    indices: tuple[PrimExpr, ...]
    dtype: DataType
    predicate: PrimExpr | None = None


@_node
class ProducerLoad(PrimExpr):
    """Element ``indices`` of a tensor expression's output, before lowering gives it storage."""

    producer: Any  # ember.te.tensor.Tensor
    indices: tuple[PrimExpr, ...]
    dtype: DataType


@_node
class Reduce(PrimExpr):
    """A reduction over ``axis`` (IterVars) combining ``source`` with ``combiner``.

    ``value_index`` picks one output of a multi-value reducer (argmax gives two)."""

    combiner: Any  # ember.te.reduction.CommReducer
    source: tuple[PrimExpr, ...]
    axis: tuple[Any, ...]
    condition: PrimExpr | None
    value_index: int
    dtype: DataType


# -- construction helpers ---------------------------------------------------------------------
def const(value: int | float | bool, dt: str | DataType | None = None) -> PrimExpr:
    """A constant of type ``dt`` (default: int32 for ints, float32 for floats, bool for bools)."""
    if dt is None:
        if isinstance(value, bool):
            dt = BOOL
        elif isinstance(value, int):
            dt = INT32 if -(2**31) <= value < 2**31 else INT64
        else:
            dt = FLOAT32
    t = dtype(dt)
    if t.lanes > 1:
        return Broadcast(const(value, t.element_of()), t.lanes, t)
    if t.is_float:
        return FloatImm(t, float(value))
    if t.is_bool:
        return IntImm(t, int(bool(value)))
    if t.is_lowp_float:  # a storage format: the constant is the bit pattern of the value, rounded
        return IntImm(t, int(np.array([value], np.float32).astype(t.numpy()).view(np.uint8)[0]))
    iv = int(value)
    if not (t.min_value() <= iv <= t.max_value()):
        raise TypeMismatchError(f"constant {value} does not fit in {t}")
    return IntImm(t, iv)


def convert(value: Any, like: DataType | None = None) -> PrimExpr:
    """Turn a Python number into a constant (typed like ``like`` when it fits), pass expressions."""
    if isinstance(value, PrimExpr):
        return value
    if hasattr(value, "as_expr"):
        return value.as_expr()
    if isinstance(value, bool):
        return const(value, BOOL)
    if isinstance(value, int):
        if like is not None and not like.is_bool:
            el = like.element_of()
            if el.is_float or el.min_value() <= value <= el.max_value():
                return const(value, el)
        return const(value)
    if isinstance(value, float):
        if like is not None and like.is_float:
            return const(value, like.element_of())
        return const(value, FLOAT32)
    if isinstance(value, np.generic):
        return const(value.item(), dtype(value.dtype))
    raise TypeMismatchError(f"cannot use {value!r} of type {type(value).__name__} in an expression")


def cast(target: str | DataType, value: Any) -> PrimExpr:
    """``value`` converted to ``target`` (no node when it already has that type)."""
    t = dtype(target)
    v = convert(value)
    if v.dtype.lanes > 1 and t.lanes == 1:
        t = t.with_lanes(v.dtype.lanes)
    if v.dtype == t:
        return v
    if isinstance(v, IntImm) and t.lanes == 1:
        return (
            const(v.value if not t.is_bool else bool(v.value), t)
            if not t.is_int or t.min_value() <= v.value <= t.max_value()
            else Cast(t, v)
        )
    if isinstance(v, FloatImm) and t.is_float and t.lanes == 1:
        return const(v.value, t)
    return Cast(t, v)


def _unify(a: Any, b: Any) -> tuple[PrimExpr, PrimExpr, DataType]:
    """Operands converted to their promoted common type."""
    a_is_expr = isinstance(a, PrimExpr) or hasattr(a, "as_expr")
    b_is_expr = isinstance(b, PrimExpr) or hasattr(b, "as_expr")
    if a_is_expr and not b_is_expr:
        a = convert(a)
        b = convert(b, a.dtype)
    elif b_is_expr and not a_is_expr:
        b = convert(b)
        a = convert(a, b.dtype)
    else:
        a, b = convert(a), convert(b)
    t = promote(a.dtype, b.dtype)
    # A Python float literal with an integer operand gives float32, whatever the integer's width
    # (module doc of ember.ir.dtypes), not NumPy's float64 for 32- and 64-bit integers.
    lit_float = (not a_is_expr and isinstance(a, FloatImm)) or (not b_is_expr and isinstance(b, FloatImm))
    if lit_float and a_is_expr != b_is_expr and not (a.dtype.is_float and b.dtype.is_float):
        t = FLOAT32.with_lanes(t.lanes)
    return _lanes_cast(a, t), _lanes_cast(b, t), t


def _lanes_cast(x: PrimExpr, t: DataType) -> PrimExpr:
    if x.dtype.lanes == 1 and t.lanes > 1:
        x = cast(t.element_of(), x)
        return Broadcast(x, t.lanes, t)
    return cast(t, x)


def _binary(cls: type, a: Any, b: Any) -> PrimExpr:
    a, b, t = _unify(a, b)
    if t.is_bool and cls in (Add, Sub, Mul, FloorDiv, FloorMod):
        a, b, t = cast("int32", a), cast("int32", b), INT32.with_lanes(t.lanes)
    if cls in (FloorDiv, FloorMod) and t.is_float and cls is FloorMod:
        return a - floor(a / b) * b
    if cls is FloorDiv and t.is_float:
        return floor(Div(a, b, t))
    return cls(a, b, t)


def _compare(cls: type, a: Any, b: Any) -> PrimExpr:
    a, b, t = _unify(a, b)
    return cls(a, b, BOOL.with_lanes(t.lanes))


def div(a: Any, b: Any) -> PrimExpr:
    """True division: integers are converted to float32 first (float64 when they are 64-bit)."""
    a, b, t = _unify(a, b)
    if not t.is_float:
        ft = dtype("float64") if t.bits == 64 else FLOAT32
        a, b, t = cast(ft.with_lanes(t.lanes), a), cast(ft.with_lanes(t.lanes), b), ft.with_lanes(t.lanes)
    return Div(a, b, t)


def truncdiv(a: Any, b: Any) -> PrimExpr:
    """Integer division rounding toward zero (C's ``/``)."""
    a, b, t = _unify(a, b)
    return Div(a, b, t)


def truncmod(a: Any, b: Any) -> PrimExpr:
    """Integer remainder with the sign of the dividend (C's ``%``)."""
    a, b, t = _unify(a, b)
    return Mod(a, b, t)


def floordiv(a: Any, b: Any) -> PrimExpr:
    """Division rounding toward minus infinity."""
    return _binary(FloorDiv, a, b)


def floormod(a: Any, b: Any) -> PrimExpr:
    """Remainder with the sign of the divisor."""
    return _binary(FloorMod, a, b)


def min_expr(a: Any, b: Any) -> PrimExpr:
    """Element-wise minimum."""
    return _binary(Min, a, b)


def max_expr(a: Any, b: Any) -> PrimExpr:
    """Element-wise maximum."""
    return _binary(Max, a, b)


def _as_bool(x: Any) -> PrimExpr:
    x = convert(x)
    if not x.dtype.is_bool:
        x = NE(x, const(0, x.dtype), BOOL.with_lanes(x.dtype.lanes))
    return x


def logical_and(a: Any, b: Any) -> PrimExpr:
    """a and b, both converted to bool."""
    a, b = _as_bool(a), _as_bool(b)
    return And(a, b, BOOL.with_lanes(max(a.dtype.lanes, b.dtype.lanes)))


def logical_or(a: Any, b: Any) -> PrimExpr:
    """a or b, both converted to bool."""
    a, b = _as_bool(a), _as_bool(b)
    return Or(a, b, BOOL.with_lanes(max(a.dtype.lanes, b.dtype.lanes)))


def logical_not(a: Any) -> PrimExpr:
    """not a."""
    a = _as_bool(a)
    return Not(a, a.dtype)


def select(condition: Any, true_value: Any, false_value: Any) -> PrimExpr:
    """``true_value`` where ``condition`` holds, else ``false_value`` (both may be evaluated)."""
    t, f, dt = _unify(true_value, false_value)
    c = _as_bool(condition)
    return Select(c, t, f, dt)


def floor(x: Any) -> PrimExpr:
    """Round toward minus infinity (floats only; integers are returned unchanged)."""
    x = convert(x)
    return x if not x.dtype.is_float else Call(x.dtype, "floor", (x,))


def is_const_int(e: Any, value: int | None = None) -> bool:
    """True when ``e`` is an integer constant (equal to ``value`` when given)."""
    return isinstance(e, IntImm) and (value is None or e.value == value)


def const_int_value(e: Any) -> int | None:
    """The value of an integer constant (Python ints pass through), else None."""
    if isinstance(e, int):
        return e
    if isinstance(e, IntImm):
        return e.value
    return None


def index_cast(e: Any, dt: DataType = INT64) -> PrimExpr:
    """An index expression converted to the index type ``dt``."""
    return cast(dt, convert(e))
