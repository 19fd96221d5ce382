"""Math functions on expressions, lowered per target by the code generators.

Integer arguments are converted to float32 first. ``if_then_else``/``select`` choose between two
values; ``const`` makes a typed constant; ``cast`` converts.
"""

from __future__ import annotations

from typing import Any

from ..errors import EmberError
from ..ir import expr as E
from ..ir.dtypes import dtype

UNARY_MATH = (
    "exp",
    "exp2",
    "log",
    "log2",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "erf",
    "abs",
    "floor",
    "ceil",
    "round",
    "sin",
    "cos",
    "trunc",
    "log10",
    "exp10",
    "log1p",
    "expm1",
    "tan",
    "atan",
    "asin",
    "acos",
    "sinh",
    "cosh",
    "isnan",
    "isinf",
    "isfinite",
)


def _float_arg(x: Any, fn: str) -> E.PrimExpr:
    v = E.convert(x)
    if v.dtype.is_bool:
        raise EmberError(f"{fn} of a boolean value {v}: cast it first")
    if not v.dtype.is_float:
        v = E.cast("float32", v)
    return v


def _unary(name: str, x: Any) -> E.PrimExpr:
    v = E.convert(x)
    if name == "abs" and v.dtype.is_int:
        return E.Call(v.dtype, "abs", (v,)) if v.dtype.kind == "int" else v
    if name in ("floor", "ceil", "round", "trunc") and v.dtype.is_int:
        return v
    v = _float_arg(v, name)
    out_dtype = E.BOOL.with_lanes(v.dtype.lanes) if name in ("isnan", "isinf", "isfinite") else v.dtype
    return E.Call(out_dtype, name, (v,))


def exp(x: Any) -> E.PrimExpr:
    """e**x."""
    return _unary("exp", x)


def exp2(x: Any) -> E.PrimExpr:
    """2**x."""
    return _unary("exp2", x)


def log(x: Any) -> E.PrimExpr:
    """Natural logarithm."""
    return _unary("log", x)


def log2(x: Any) -> E.PrimExpr:
    """Base-2 logarithm."""
    return _unary("log2", x)


def log10(x: Any) -> E.PrimExpr:
    """Base-10 logarithm."""
    return _unary("log10", x)


def sqrt(x: Any) -> E.PrimExpr:
    """Square root."""
    return _unary("sqrt", x)


def rsqrt(x: Any) -> E.PrimExpr:
    """1 / sqrt(x)."""
    return _unary("rsqrt", x)


def tanh(x: Any) -> E.PrimExpr:
    """Hyperbolic tangent."""
    return _unary("tanh", x)


def sigmoid(x: Any) -> E.PrimExpr:
    """1 / (1 + exp(-x))."""
    return _unary("sigmoid", x)


def erf(x: Any) -> E.PrimExpr:
    """The error function."""
    return _unary("erf", x)


def abs(x: Any) -> E.PrimExpr:  # noqa: A001
    """Absolute value (integers stay integers)."""
    return _unary("abs", x)


def floor(x: Any) -> E.PrimExpr:
    """Round toward minus infinity."""
    return _unary("floor", x)


def ceil(x: Any) -> E.PrimExpr:
    """Round toward plus infinity."""
    return _unary("ceil", x)


def round(x: Any) -> E.PrimExpr:  # noqa: A001
    """Round to nearest, ties to even (as NumPy's ``round``)."""
    return _unary("round", x)


def trunc(x: Any) -> E.PrimExpr:
    """Round toward zero."""
    return _unary("trunc", x)


def sin(x: Any) -> E.PrimExpr:
    """Sine."""
    return _unary("sin", x)


def cos(x: Any) -> E.PrimExpr:
    """Cosine."""
    return _unary("cos", x)


def isnan(x: Any) -> E.PrimExpr:
    """True where x is NaN."""
    return _unary("isnan", x)


def isinf(x: Any) -> E.PrimExpr:
    """True where x is infinite."""
    return _unary("isinf", x)


def pow(x: Any, y: Any) -> E.PrimExpr:  # noqa: A001
    """x ** y for floats."""
    a, b, t = E._unify(x, y)
    if not t.is_float:
        a, b = E.cast("float32", a), E.cast("float32", b)
        t = dtype("float32")
    return E.Call(t, "pow", (a, b))


def fmod(x: Any, y: Any) -> E.PrimExpr:
    """Floating remainder with the sign of x (C's fmod)."""
    a, b, t = E._unify(x, y)
    return E.Call(t, "fmod", (a, b)) if t.is_float else E.truncmod(a, b)


def if_then_else(cond: Any, t: Any, f: Any) -> E.PrimExpr:
    """``t`` where ``cond`` holds else ``f``. Only the chosen branch's loads are performed, so a
    guarded out-of-bounds read (padding) is safe."""
    return E.select(cond, t, f)


select = E.select
const = E.const
cast = E.cast


def min_value_of(dt: str) -> E.PrimExpr:
    """The smallest value of ``dt`` (minus infinity for floats)."""
    t = dtype(dt)
    return E.const(float("-inf") if t.is_float else t.min_value(), t)


def max_value_of(dt: str) -> E.PrimExpr:
    """The largest value of ``dt`` (infinity for floats)."""
    t = dtype(dt)
    return E.const(float("inf") if t.is_float else t.max_value(), t)
