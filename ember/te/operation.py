"""Building tensor expressions: ``var``, ``placeholder``, ``compute``, ``reduce_axis``,
``thread_axis`` and reductions (``sum``, ``max``, ``min``, ``prod``, ``comm_reducer``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import EmberError
from ..ir import expr as E
from ..ir.dtypes import DataType, dtype
from ..ir.visitor import substitute
from .tensor import CONSTANT_LAYOUT, MATERIALIZE, WORKSPACE, ComputeOp, IterKind, IterVar, PlaceholderOp, Range, Tensor

ShapeLike = Sequence[Any]


def var(name: str = "n", dtype: str = "int32") -> E.Var:
    """A symbolic scalar, typically a size: ``n = te.var("n")``."""
    return E.Var(name, _dt(dtype))


def size_var(name: str = "n", dtype: str = "int32") -> E.Var:
    """Same as :func:`var` (sizes are assumed non-negative by the analyses that need it)."""
    return var(name, dtype)


def _dt(value: Any) -> DataType:
    return dtype(value)


def _shape(shape: Any, what: str) -> tuple[E.PrimExpr, ...]:
    if isinstance(shape, (int, E.PrimExpr)):
        shape = (shape,)
    out = []
    for k, s in enumerate(shape):
        x = E.convert(s)
        if not x.dtype.is_int:
            raise EmberError(f"dimension {k} of {what} is {x} of type {x.dtype}: shapes must be integers")
        if isinstance(x, E.IntImm) and x.value < 0:
            raise EmberError(f"dimension {k} of {what} is negative ({x.value})")
        out.append(x)
    return tuple(out)


def placeholder(shape: ShapeLike, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` (ints or symbolic vars) and ``dtype``."""
    return PlaceholderOp(name, _shape(shape, f"placeholder {name}"), _dt(dtype)).output(0)


def reduce_axis(dom: Any, name: str = "rv") -> IterVar:
    """A reduction axis over ``dom``: an extent, a ``(min, max)`` pair, or a Range."""
    if isinstance(dom, Range):
        rng = dom
    elif isinstance(dom, (tuple, list)):
        if len(dom) != 2:
            raise EmberError(f"reduce_axis {name}: give an extent or a (begin, end) pair, not {dom!r}")
        lo, hi = E.convert(dom[0]), E.convert(dom[1])
        rng = Range(lo, hi - lo)
    else:
        rng = Range.from_extent(dom)
    return IterVar(rng, E.Var(name), IterKind.REDUCE)


_THREAD_TAGS = {
    "blockIdx.x",
    "blockIdx.y",
    "blockIdx.z",
    "threadIdx.x",
    "threadIdx.y",
    "threadIdx.z",
    "vthread",
}


def thread_axis(tag: str = "", name: str = "") -> IterVar:
    """A hardware index to bind a loop to: ``"blockIdx.x"``, ``"threadIdx.y"``, ``"vthread"``..."""
    if tag not in _THREAD_TAGS:
        raise EmberError(f"unknown thread tag {tag!r}: use one of {sorted(_THREAD_TAGS)}")
    return IterVar(None, E.Var(name or tag), IterKind.THREAD, tag)


def compute(
    shape: ShapeLike,
    fcompute: Callable[..., Any],
    name: str = "compute",
    tag: str = "",
    attrs: dict[str, Any] | None = None,
    *,
    materialize: bool = False,
    constant_layout: bool = False,
    workspace: bool = False,
) -> Any:
    """A tensor whose element at ``indices`` is ``fcompute(*indices)``.

    ``fcompute`` may return one expression, or a tuple of expressions for several outputs (all
    of the same shape; a multi-value reduction returns its values as a tuple). Returns a
    :class:`Tensor`, or a list of tensors when there are several outputs.

    ``tag`` names what the operation is for schedules; ``attrs`` are its parameters. The flags
    say how the compiler treats the stage (see :class:`~ember.te.tensor.ComputeOp`):
    ``materialize`` (never inlined into its readers), ``constant_layout`` (a layout transform
    the model compiler folds at compile time when its inputs are constants) and ``workspace``
    (its buffer is provided by the model's memory plan); the last two imply the first."""
    dims = _shape(shape, f"compute {name}")
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        arg_names = [f"i{k}" for k in range(len(dims))]
    else:
        arg_names = [p.name for p in params]
        if len(arg_names) != len(dims):
            raise EmberError(
                f"compute {name}: the function takes {len(arg_names)} index argument(s) but the shape "
                f"has {len(dims)} dimension(s)"
            )
    axis = tuple(IterVar(Range(E.const(0), d), E.Var(n), IterKind.DATA_PAR) for n, d in zip(arg_names, dims))
    result = fcompute(*[iv.var for iv in axis])
    body = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    body = tuple(E.convert(b) for b in body)
    if not body:
        raise EmberError(f"compute {name}: the function returned no value")
    reduces = [isinstance(b, E.Reduce) for b in body]
    if any(reduces) and not all(reduces):
        raise EmberError(f"compute {name}: a body that is a reduction cannot be mixed with plain values")
    if any(reduces):
        first = body[0]
        for b in body:
            if isinstance(b, E.Reduce) and b.combiner is not first.combiner:
                raise EmberError(f"compute {name}: all reductions of one compute must use one combiner")
        for b in body:
            if _contains_reduce(b, top=True):
                raise EmberError(f"compute {name}: a reduction may only be the whole body, not part of it")
    else:
        for b in body:
            if _contains_reduce(b, top=False):
                raise EmberError(
                    f"compute {name}: a reduction may only be the whole body; put `... + te.sum(...)` into two computes"
                )
    all_attrs = dict(attrs or {})
    for key, on in ((MATERIALIZE, materialize), (CONSTANT_LAYOUT, constant_layout), (WORKSPACE, workspace)):
        if on:
            all_attrs[key] = True
    op = ComputeOp(name, tag, axis, body, all_attrs)
    outs = list(op.outputs)
    return outs[0] if len(outs) == 1 else outs


def _contains_reduce(e: E.PrimExpr, top: bool) -> bool:
    from ..ir.visitor import post_order_visit

    found = []

    def f(n: Any) -> None:
        if isinstance(n, E.Reduce) and not (top and n is e):
            found.append(n)

    post_order_visit(e, f)
    return bool(found)


# -- reductions -------------------------------------------------------------------------------
@dataclass(eq=False)
class CommReducer:
    """A commutative reducer: ``combine(lhs, rhs) -> results`` with an identity per value."""

    name: str
    lhs: tuple[E.Var, ...]
    rhs: tuple[E.Var, ...]
    result: tuple[E.PrimExpr, ...]
    identity: tuple[E.PrimExpr, ...]

    def __hash__(self) -> int:
        return id(self)

    def combine(self, lhs: Sequence[E.PrimExpr], rhs: Sequence[E.PrimExpr]) -> tuple[E.PrimExpr, ...]:
        """The combined values for accumulators ``lhs`` and new values ``rhs``."""
        mapping = {v: x for v, x in zip(self.lhs, lhs)}
        mapping.update({v: x for v, x in zip(self.rhs, rhs)})
        return tuple(substitute(r, mapping) for r in self.result)

    def __call__(self, expr: Any, axis: Any, where: Any = None, init: Any = None) -> Any:
        """The reduction of ``expr`` (one expression, or a tuple for a multi-value reducer) over
        ``axis`` (an IterVar or a list of them), only where ``where`` holds."""
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for ax in axes:
            if not isinstance(ax, IterVar) or ax.kind is not IterKind.REDUCE:
                raise EmberError(f"reduction {self.name}: axis {ax!r} is not a te.reduce_axis")
        values = tuple(expr) if isinstance(expr, (tuple, list)) else (expr,)
        if len(values) != len(self.lhs):
            raise EmberError(f"reducer {self.name} combines {len(self.lhs)} value(s), got {len(values)}")
        converted = []
        for v, lhs in zip(values, self.lhs):
            x = E.convert(v, lhs.dtype)
            converted.append(E.cast(lhs.dtype, x) if x.dtype != lhs.dtype else x)
        cond = None if where is None else E._as_bool(E.convert(where))
        if init is not None:
            raise EmberError(f"reduction {self.name}: init values are not supported; add the value after reducing")
        outs = tuple(E.Reduce(self, tuple(converted), axes, cond, k, converted[k].dtype) for k in range(len(converted)))
        return outs[0] if len(outs) == 1 else outs


def comm_reducer(
    fcombine: Callable[..., Any],
    fidentity: Callable[..., Any],
    name: str = "reduce",
) -> Callable[..., Any]:
    """Define a reducer from ``fcombine(x, y)`` and ``fidentity(dtype)``, as in TVM.

    The returned function is called as ``reducer(expr, axis=k, where=None)``. For several values,
    ``fcombine((x0, x1), (y0, y1))`` returns a tuple and ``fidentity(dtype0, dtype1)`` one too.
    """
    cache: dict[tuple[str, ...], CommReducer] = {}

    def make(dtypes: tuple[DataType, ...]) -> CommReducer:
        key = tuple(str(d) for d in dtypes)
        if key not in cache:
            lhs = tuple(E.Var(f"x{k}", d) for k, d in enumerate(dtypes))
            rhs = tuple(E.Var(f"y{k}", d) for k, d in enumerate(dtypes))
            if len(dtypes) == 1:
                res = (fcombine(lhs[0], rhs[0]),)
                ident = (fidentity(str(dtypes[0])),)
            else:
                res = tuple(fcombine(lhs, rhs))
                ident = tuple(fidentity(*[str(d) for d in dtypes]))
            res = tuple(E.cast(d, E.convert(r, d)) for r, d in zip(res, dtypes))
            ident = tuple(E.cast(d, E.convert(i, d)) for i, d in zip(ident, dtypes))
            cache[key] = CommReducer(name, lhs, rhs, res, ident)
        return cache[key]

    def reducer(expr: Any, axis: Any, where: Any = None) -> Any:
        values = tuple(expr) if isinstance(expr, (tuple, list)) else (expr,)
        values = tuple(E.convert(v) for v in values)
        return make(tuple(v.dtype for v in values))(values if len(values) > 1 else values[0], axis, where)

    reducer.__name__ = name
    reducer.__doc__ = f"The {name} reduction of an expression over reduction axes."
    return reducer


def _bool_to_int(x: E.PrimExpr) -> E.PrimExpr:
    return E.cast("int32", x) if x.dtype.is_bool else x


sum = comm_reducer(lambda x, y: x + y, lambda t: E.const(0, t), name="sum")  # noqa: A001
prod = comm_reducer(lambda x, y: x * y, lambda t: E.const(1, t), name="prod")
max = comm_reducer(  # noqa: A001
    lambda x, y: E.max_expr(x, y),
    lambda t: E.const(dtype(t).min_value() if not dtype(t).is_float else float("-inf"), t),
    name="max",
)
min = comm_reducer(  # noqa: A001
    lambda x, y: E.min_expr(x, y),
    lambda t: E.const(dtype(t).max_value() if not dtype(t).is_float else float("inf"), t),
    name="min",
)
