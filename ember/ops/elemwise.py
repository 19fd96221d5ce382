"""Elementwise operators with NumPy broadcasting: arithmetic, math, comparisons, logic,
``Where``, ``Cast``, ``Clip`` and the activations."""

from __future__ import annotations

import math
from typing import Any

from .. import te
from ..ir import expr as E
from ..ir.dtypes import dtype as as_dtype
from ..te import Tensor
from . import lowp
from .registry import OpContext, register
from .util import cast, compute, const_like, dtype_of, elementwise, identity, shape, uname


def _f(x: E.PrimExpr, v: float) -> E.PrimExpr:
    """A float constant of x's type."""
    return E.const(v, x.dtype if x.dtype.is_float else "float32")


# -- unary math -------------------------------------------------------------------------------
_UNARY = {
    "Exp": te.exp,
    "Log": te.log,
    "Sqrt": te.sqrt,
    "Tanh": te.tanh,
    "Sigmoid": te.sigmoid,
    "Erf": te.erf,
    "Floor": te.floor,
    "Ceil": te.ceil,
    "Round": te.round,
    "Sin": te.sin,
    "Cos": te.cos,
    "Tan": lambda x: E.Call(x.dtype, "tan", (x,)),
    "Atan": lambda x: E.Call(x.dtype, "atan", (x,)),
    "Asin": lambda x: E.Call(x.dtype, "asin", (x,)),
    "Acos": lambda x: E.Call(x.dtype, "acos", (x,)),
    "Sinh": lambda x: E.Call(x.dtype, "sinh", (x,)),
    "Cosh": lambda x: E.Call(x.dtype, "cosh", (x,)),
    "Asinh": lambda x: te.log(x + te.sqrt(x * x + _f(x, 1.0))),
    "Acosh": lambda x: te.log(x + te.sqrt(x * x - _f(x, 1.0))),
    "Atanh": lambda x: _f(x, 0.5) * te.log((_f(x, 1.0) + x) / (_f(x, 1.0) - x)),
    "Abs": te.abs,
    "Neg": lambda x: -x,
    "Reciprocal": lambda x: _f(x, 1.0) / x,
    "Relu": lambda x: E.max_expr(x, E.const(0, x.dtype)),
    "Softsign": lambda x: x / (_f(x, 1.0) + te.abs(x)),
    "Softplus": lambda x: _softplus(x),
    "Mish": lambda x: x * te.tanh(_softplus(x)),
    "Sign": lambda x: te.if_then_else(
        x > E.const(0, x.dtype),
        const_like(1, str(x.dtype)),
        te.if_then_else(x < E.const(0, x.dtype), const_like(-1, str(x.dtype)), const_like(0, str(x.dtype))),
    ),
    "IsNaN": te.isnan,
    "Not": E.logical_not,
}


def _softplus(x: E.PrimExpr) -> E.PrimExpr:
    # log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|))
    return E.max_expr(x, _f(x, 0.0)) + te.log(_f(x, 1.0) + te.exp(-te.abs(x)))


def _unary_op(name: str) -> Any:
    fn = _UNARY[name]

    def op(ctx: OpContext, x: Tensor) -> Tensor:
        return elementwise(name, [x], fn)

    op.__name__ = name
    op.__doc__ = f"ONNX {name}."
    return op


for _n in _UNARY:
    register(_n)(_unary_op(_n))


@register("IsInf")
def isinf(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX IsInf with detect_negative / detect_positive."""
    neg, pos = int(ctx.attr("detect_negative", 1)), int(ctx.attr("detect_positive", 1))

    def f(v: E.PrimExpr) -> E.PrimExpr:
        inf = te.isinf(v)
        if neg and pos:
            return inf
        if neg:
            return inf & (v < _f(v, 0.0))
        if pos:
            return inf & (v > _f(v, 0.0))
        return E.const(False, "bool")

    return elementwise("isinf", [x], f, "bool")


# -- binary arithmetic --------------------------------------------------------------------------
def _safe_int(a: E.PrimExpr, b: E.PrimExpr, mod: bool, floor: bool) -> E.PrimExpr:
    """Integer division or remainder that cannot trap: a zero divisor gives 0 (ONNX leaves it
    undefined), and ``MIN / -1`` wraps instead of raising SIGFPE."""
    zero = E.const(0, b.dtype)
    d = te.if_then_else(b == zero, E.const(1, b.dtype), b)
    if b.dtype.kind == "int":
        d = te.if_then_else(d == E.const(-1, b.dtype), E.const(1, b.dtype), d)
    if mod:
        r = E.floormod(a, d) if floor else E.truncmod(a, d)
    else:
        r = E.floordiv(a, d) if floor else E.truncdiv(a, d)
    if b.dtype.kind == "int":
        neg1 = b == E.const(-1, b.dtype)
        r = te.if_then_else(neg1, zero if mod else zero - a, r)
    return te.if_then_else(b == zero, zero, r)


def _div(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    return E.div(a, b) if a.dtype.is_float else _safe_int(a, b, False, False)


def _mod(fmod: int) -> Any:
    def f(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
        if a.dtype.is_float:
            r = te.fmod(a, b)
            if fmod:
                return r
            return te.if_then_else((r != _f(r, 0.0)) & ((r < _f(r, 0.0)) != (b < _f(b, 0.0))), r + b, r)
        return _safe_int(a, b, True, not fmod)

    return f


_BINARY = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": _div,
    "Equal": lambda a, b: a == b,
    "Less": lambda a, b: a < b,
    "Greater": lambda a, b: a > b,
    "LessOrEqual": lambda a, b: a <= b,
    "GreaterOrEqual": lambda a, b: a >= b,
    "And": E.logical_and,
    "Or": E.logical_or,
    "Xor": lambda a, b: a != b,
}


def _legacy_broadcast(ctx: OpContext, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    """Before opset 7, B broadcasts only with ``broadcast=1``, as a contiguous part of A's shape
    that starts at ``axis`` (ember supports the part at the end, which NumPy's rule gives)."""
    if not int(ctx.attr("broadcast", 0)):
        if sa != sb:
            raise ctx.fail(f"shapes {sa} and {sb} differ and broadcast=0 (opset {ctx.opset} broadcasts only with "
                           "broadcast=1)")
        return
    axis = ctx.attr("axis")
    end = len(sa) - len(sb)
    if axis is not None and int(axis) % max(len(sa), 1) != end % max(len(sa), 1) and sb:
        raise ctx.fail(f"broadcasting B {sb} at axis {axis} of A {sa} (opset {ctx.opset}) is not supported: "
                       "only B matching the last dimensions of A")
    if end < 0 or sa[end:] != sb:
        raise ctx.fail(f"B {sb} is not the last dimensions of A {sa} (opset {ctx.opset} broadcasting)")


def _binary_op(name: str) -> Any:
    fn = _BINARY[name]
    logic = name in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor")

    def op(ctx: OpContext, a: Tensor, b: Tensor) -> Tensor:
        if ctx.opset < 7:
            _legacy_broadcast(ctx, shape(a), shape(b))
        out_dt = "bool" if logic else dtype_of(a)
        if name == "Equal" and dtype_of(a) == "bool":
            return elementwise(name, [a, b], lambda x, y: E.logical_not(x != y), "bool")
        return elementwise(name, [a, b], fn, out_dt)

    op.__name__ = name
    op.__doc__ = f"ONNX {name} with broadcasting."
    return op


for _n in _BINARY:
    register(_n)(_binary_op(_n))


@register("Mod")
def mod(ctx: OpContext, a: Tensor, b: Tensor) -> Tensor:
    """ONNX Mod (``fmod=0``: sign of the divisor; ``fmod=1``: C's fmod)."""
    return elementwise("mod", [a, b], _mod(int(ctx.attr("fmod", 0))), dtype_of(a))


@register("Pow")
def pow_(ctx: OpContext, a: Tensor, b: Tensor) -> Tensor:
    """ONNX Pow: the result has the base's type."""
    dt = dtype_of(a)
    wide = dt if dt in ("float32", "float64") else "float64"

    def f(x: E.PrimExpr, y: E.PrimExpr) -> E.PrimExpr:
        return cast(te.pow(cast(x, wide), cast(y, wide)), dt)

    return elementwise("pow", [a, b], f, dt)


@register("BitShift")
def bitshift(ctx: OpContext, a: Tensor, b: Tensor) -> Tensor:
    """ONNX BitShift as multiplication / floor division by powers of two. Signed right shifts
    are arithmetic (floor division keeps the sign); a shift count below 0 or at least the bit
    width gives what the sign fill alone gives: -1 for a right shift of a negative value, else 0."""
    left = ctx.attr("direction", b"LEFT") in (b"LEFT", "LEFT")
    dt = dtype_of(a)
    t = as_dtype(dt)
    signed = t.kind == "int"
    bits = t.bits

    def f(x: E.PrimExpr, y: E.PrimExpr) -> E.PrimExpr:
        yy = cast(y, "int64")
        out = (yy < E.const(0, "int64")) | (yy >= E.const(bits, "int64"))
        # a count of bits - 1 on int64 would need 2**63 as a divisor: clamp to 62 and finish the
        # last step from the sign below (floor(x / 2**62) / 2 rounds the same way)
        ys = te.if_then_else(out, E.const(0, "int64"), yy)
        zero = E.const(0, dt)
        if left:
            p = cast(te.pow(E.const(2.0, "float64"), cast(ys, "float64")), "uint64")
            r = cast(cast(x, "uint64") * p, dt)
            return te.if_then_else(out, zero, r)
        if not signed:
            p = cast(te.pow(E.const(2.0, "float64"), cast(ys, "float64")), "uint64")
            r = cast(_safe_int(cast(x, "uint64"), p, False, False), dt)
            return te.if_then_else(out, zero, r)
        last = ys >= E.const(63, "int64")
        yc = te.if_then_else(last, E.const(62, "int64"), ys)
        p = cast(te.pow(E.const(2.0, "float64"), cast(yc, "float64")), "int64")
        q = E.floordiv(cast(x, "int64"), p)
        q = te.if_then_else(last, E.floordiv(q, E.const(2, "int64")), q)
        fill = te.if_then_else(x < zero, E.const(-1, dt), zero)
        return te.if_then_else(out, fill, cast(q, dt))

    return elementwise("bitshift", [a, b], f, dt)


def _variadic(name: str, f: Any) -> Any:
    def op(ctx: OpContext, *xs: Tensor) -> Tensor:
        if not xs or any(x is None for x in xs):
            raise ctx.fail("every input of a variadic operator must be given (none may be left out)")
        ins = list(xs)
        if ctx.opset < 8 and len({shape(x) for x in ins}) > 1:
            raise ctx.fail(f"inputs of shapes {[shape(x) for x in ins]}: before opset 8 they must all be equal")
        if len(ins) == 1:
            return identity(name, ins[0])

        def body(*v: E.PrimExpr) -> E.PrimExpr:
            acc = v[0]
            for x in v[1:]:
                acc = f(acc, x)
            return acc / E.const(len(v), acc.dtype) if name == "Mean" else acc

        return elementwise(name, ins, body, dtype_of(ins[0]))

    op.__name__ = name
    op.__doc__ = f"ONNX {name} of any number of inputs, with broadcasting."
    return op


register("Sum")(_variadic("Sum", lambda a, b: a + b))
register("Mean")(_variadic("Mean", lambda a, b: a + b))
register("Max")(
    _variadic("Max", lambda a, b: te.if_then_else(te.isnan(a) if a.dtype.is_float else a < a, a, E.max_expr(a, b)))
)
register("Min")(
    _variadic("Min", lambda a, b: te.if_then_else(te.isnan(a) if a.dtype.is_float else a < a, a, E.min_expr(a, b)))
)


@register("Where")
def where(ctx: OpContext, c: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """ONNX Where(condition, X, Y) with broadcasting."""
    return elementwise("where", [c, a, b], lambda cc, x, y: te.if_then_else(cc, x, y), dtype_of(a))


ONNX_DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "string",  # text: host operators only (ember.host_stages); no kernel takes it
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
    17: "float8_e4m3fn",
    18: "float8_e4m3fnuz",
    19: "float8_e5m2",
    20: "float8_e5m2fnuz",
    21: "uint4",
    22: "int4",
    23: "float4_e2m1fn",
    24: "float8_e8m0fnu",
    25: "uint2",
    26: "int2",
}


def onnx_dtype(code: int, ctx: OpContext) -> str:
    """The ember dtype of ONNX element type ``code``."""
    dt = ONNX_DTYPES.get(int(code))
    if dt == "string":
        raise ctx.fail("element type STRING: text is computed by host operators only, not by compiled kernels")
    if dt is None:
        raise ctx.fail(f"element type {code} is not supported (ember supports {', '.join(ONNX_DTYPES.values())})")
    return dt


def _cast_value(x: E.PrimExpr, dt: str, saturate: bool = True, round_mode: str = "up") -> E.PrimExpr:
    src = x.dtype
    if src.is_lowp_float or lowp.is_lowp(dt) or (as_dtype(dt).is_subbyte_int and (src.is_float or src.is_bool)):
        return lowp.convert(x, dt, saturate, round_mode)
    if src.is_float and dt not in ("bool",) and "int" in dt:
        # NaN/inf casts to integers are undefined; NumPy and ONNX truncate finite values.
        return E.cast(dt, x)
    if src.is_float and src.bits == 64 and dt == "float16":
        return E.cast("float16", E.cast("float32", x))
    return cast(x, dt)


def _cast_attrs(ctx: OpContext) -> tuple[bool, str]:
    """``saturate`` (float8 targets) and ``round_mode`` (float8_e8m0fnu targets) of a Cast."""
    mode = ctx.attr("round_mode", b"up")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in lowp.ROUND_MODES:
        raise ctx.fail(f"round_mode {mode!r} is not supported: use one of {', '.join(lowp.ROUND_MODES)}")
    return bool(int(ctx.attr("saturate", 1))), mode


@register("Cast")
def cast_op(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX Cast to the element type ``to`` (``saturate`` and ``round_mode`` for the float8 types,
    see :mod:`ember.ops.lowp`)."""
    dt = onnx_dtype(ctx.attr("to"), ctx)
    sat, mode = _cast_attrs(ctx)
    return elementwise("cast", [x], lambda v: _cast_value(v, dt, sat, mode), dt)


@register("CastLike")
def castlike(ctx: OpContext, x: Tensor, like: Tensor) -> Tensor:
    """ONNX CastLike: cast to the element type of the second input."""
    dt = dtype_of(like)
    sat, mode = _cast_attrs(ctx)
    return elementwise("castlike", [x], lambda v: _cast_value(v, dt, sat, mode), dt)


@register("Clip")
def clip(ctx: OpContext, x: Tensor, lo: Tensor | None = None, hi: Tensor | None = None) -> Tensor:
    """ONNX Clip, bounds as attributes (opset < 11) or scalar inputs."""
    dt = dtype_of(x)
    if ctx.opset < 11:
        lo_v, hi_v = ctx.attr("min", -math.inf), ctx.attr("max", math.inf)
        return elementwise(
            "clip",
            [x],
            lambda v: E.min_expr(E.max_expr(v, const_like(lo_v, dt)), const_like(hi_v, dt)) if "float" in dt else v,
            dt,
        )
    ins = [x] + [t for t in (lo, hi) if t is not None]

    def f(v: E.PrimExpr, *b: E.PrimExpr) -> E.PrimExpr:
        k = 0
        if lo is not None:
            v = E.max_expr(v, b[k])
            k += 1
        if hi is not None:
            v = E.min_expr(v, b[k])
        return v

    def scalar(t: Tensor) -> Tensor:
        if math.prod(shape(t)) != 1:
            raise ctx.fail(f"min and max must be scalars (one element), got a bound of shape {shape(t)}")
        return compute((), lambda: t[(0,) * len(t.shape)], name=uname("clipb")) if len(t.shape) else t

    ins = [x] + [scalar(t) for t in (lo, hi) if t is not None]
    return elementwise("clip", ins, f, dt)


_SELU_A, _SELU_G = 1.67326319217681884765625, 1.05070102214813232421875


# -- activations ---------------------------------------------------------------------------------
def _act(name: str, make: Any) -> Any:
    def op(ctx: OpContext, x: Tensor) -> Tensor:
        fn = make(ctx)
        return elementwise(name, [x], fn, dtype_of(x))

    op.__name__ = name
    op.__doc__ = f"ONNX {name}."
    return op


register("LeakyRelu")(
    _act(
        "leakyrelu",
        lambda c: lambda v, a=float(c.attr("alpha", 0.01)): te.if_then_else(v < _f(v, 0.0), v * _f(v, a), v),
    )
)
register("Elu")(
    _act(
        "elu",
        lambda c: (
            lambda v, a=float(c.attr("alpha", 1.0)): te.if_then_else(
                v < _f(v, 0.0), _f(v, a) * (te.exp(v) - _f(v, 1.0)), v
            )
        ),
    )
)
register("Celu")(
    _act(
        "celu",
        lambda c: (
            lambda v, a=float(c.attr("alpha", 1.0)): (
                E.max_expr(v, _f(v, 0.0)) + E.min_expr(_f(v, 0.0), _f(v, a) * (te.exp(v / _f(v, a)) - _f(v, 1.0)))
            )
        ),
    )
)
register("Selu")(
    _act(
        "selu",
        lambda c: (
            lambda v, a=float(c.attr("alpha", _SELU_A)), g=float(c.attr("gamma", _SELU_G)): te.if_then_else(
                v <= _f(v, 0.0), _f(v, g) * (_f(v, a) * te.exp(v) - _f(v, a)), _f(v, g) * v
            )
        ),
    )
)
register("ThresholdedRelu")(
    _act("threlu", lambda c: lambda v, a=float(c.attr("alpha", 1.0)): te.if_then_else(v > _f(v, a), v, _f(v, 0.0)))
)
register("HardSigmoid")(
    _act(
        "hardsigmoid",
        lambda c: (
            lambda v, a=float(c.attr("alpha", 0.2)), b=float(c.attr("beta", 0.5)): E.max_expr(
                _f(v, 0.0), E.min_expr(_f(v, 1.0), _f(v, a) * v + _f(v, b))
            )
        ),
    )
)
register("HardSwish")(
    _act(
        "hardswish",
        lambda c: lambda v: v * E.max_expr(_f(v, 0.0), E.min_expr(_f(v, 1.0), v * _f(v, 1.0 / 6) + _f(v, 0.5))),
    )
)
register("Shrink")(
    _act(
        "shrink",
        lambda c: (
            lambda v, lam=float(c.attr("lambd", 0.5)), bias=float(c.attr("bias", 0.0)): te.if_then_else(
                cast(v, "float64") < E.const(-lam, "float64"),
                cast(cast(v, "float64") + E.const(bias, "float64"), str(v.dtype)),
                te.if_then_else(
                    cast(v, "float64") > E.const(lam, "float64"),
                    cast(cast(v, "float64") - E.const(bias, "float64"), str(v.dtype)),
                    const_like(0, str(v.dtype)),
                ),
            )
        ),
    )
)
register("Swish")(_act("swish", lambda c: lambda v, a=float(c.attr("alpha", 1.0)): v * te.sigmoid(_f(v, a) * v)))


def _gelu(approx: str) -> Any:
    def f(v: E.PrimExpr) -> E.PrimExpr:
        if approx == "tanh":
            inner = _f(v, math.sqrt(2 / math.pi)) * (v + _f(v, 0.044715) * v * v * v)
            return _f(v, 0.5) * v * (_f(v, 1.0) + te.tanh(inner))
        return _f(v, 0.5) * v * (_f(v, 1.0) + te.erf(v * _f(v, 1 / math.sqrt(2))))

    return f


@register("Gelu")
def gelu(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX Gelu with ``approximate`` = ``none`` (erf) or ``tanh``."""
    a = ctx.attr("approximate", b"none")
    a = a.decode() if isinstance(a, bytes) else a
    return elementwise("gelu", [x], _gelu(a), dtype_of(x))


@register("PRelu")
def prelu(ctx: OpContext, x: Tensor, slope: Tensor) -> Tensor:
    """ONNX PRelu: slope broadcast against x."""
    return elementwise("prelu", [x, slope], lambda v, s: te.if_then_else(v < _f(v, 0.0), v * s, v), dtype_of(x))


@register("Identity")
def identity_op(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX Identity (a view: the graph compiler emits no kernel for it alone)."""
    return compute(shape(x), lambda *i: x[i], name=uname("identity"), tag="alias")


@register("Dropout")
def dropout(ctx: OpContext, x: Tensor, ratio: Tensor | None = None, training: Tensor | None = None) -> list[Tensor]:
    """ONNX Dropout in inference mode, or in training mode with ratio 0 (both deterministic):
    the identity, and an all-true mask."""
    if ctx.has(2):
        if ctx.has(1) and ctx.inputs[2] not in ctx.consts:
            ctx.value(1)  # a run-time training_mode: ask for the ratio too, so both get bound at once
        tm = ctx.value(2)
        if tm is not None and bool(tm.reshape(-1)[0]):
            r = ctx.value(1) if ctx.has(1) else None
            ratio = float(r.reshape(-1)[0]) if r is not None else 0.5
            if ratio != 0.0:
                raise ctx.fail(
                    f"training mode with ratio {ratio} draws random numbers, which ember does not; "
                    "compile for inference (training_mode false) or use ratio 0"
                )
    out = identity("dropout", x)
    mask = compute(shape(x), lambda *i: E.const(True, "bool"), name=uname("mask"))
    return [out, mask]


# ruff: noqa: B008  -- attribute defaults of the activation lambdas are read when the operator is built
