"""Bitwise operators on integers: ``BitwiseAnd``, ``BitwiseOr``, ``BitwiseXor``, ``BitwiseNot``.

The loop IR has no bit operations, so they are written with integer arithmetic on the value's
two's-complement bits (viewed as the unsigned type of the same width, where ``/ 2**k`` and
``% 2`` lower to shifts and masks): ``a & b`` is the sum of the common bits,
``a | b = a + b - (a & b)`` and ``a ^ b = a + b - 2 (a & b)`` in wrapping arithmetic, and
``~a = (2**n - 1) - a``.
"""

from __future__ import annotations

from ..ir import expr as E
from ..ir.dtypes import dtype
from ..te import Tensor
from .registry import OpContext, register
from .util import cast, dtype_of, elementwise


def _unsigned(dt: str, ctx: OpContext) -> tuple[str, int]:
    """The unsigned type of ``dt``'s width and that width; fails for non-integers."""
    for prefix in ("uint", "int"):
        if dt.startswith(prefix) and dt[len(prefix) :].isdigit():
            bits = int(dt[len(prefix) :])
            return f"uint{bits}", bits
    raise ctx.fail(f"element type {dt} is not an integer type; bitwise operators take integer tensors")


def bit_and(a: E.PrimExpr, b: E.PrimExpr, udt: str, bits: int) -> E.PrimExpr:
    """``a & b`` of two values of the unsigned type ``udt`` of ``bits`` bits."""
    two = E.const(2, udt)
    acc: E.PrimExpr = E.const(0, udt)
    for k in range(bits):
        p = E.const(1 << k, udt)
        ba = E.truncmod(E.truncdiv(a, p), two)
        bb = E.truncmod(E.truncdiv(b, p), two)
        acc = acc + ba * bb * p
    return acc


def _binary(name: str, kind: str):  # noqa: ANN202 - returns the operator function
    def op(ctx: OpContext, a: Tensor, b: Tensor) -> Tensor:
        dt = dtype_of(a)
        if dtype_of(b) != dt:
            raise ctx.fail(f"inputs have element types {dt} and {dtype_of(b)}; they must be the same")
        udt, bits = _unsigned(dt, ctx)

        def f(x: E.PrimExpr, y: E.PrimExpr) -> E.PrimExpr:
            ux, uy = E.cast(udt, x), E.cast(udt, y)
            both = bit_and(ux, uy, udt, bits)
            if kind == "and":
                r = both
            elif kind == "or":
                r = ux + uy - both
            else:
                r = ux + uy - both * E.const(2, udt)
            return E.cast(dt, r)

        return elementwise(name, [a, b], f, dt)

    op.__name__ = name
    op.__doc__ = f"ONNX {name} with NumPy broadcasting."
    return op


register("BitwiseAnd")(_binary("BitwiseAnd", "and"))
register("BitwiseOr")(_binary("BitwiseOr", "or"))
register("BitwiseXor")(_binary("BitwiseXor", "xor"))


@register("BitwiseNot")
def bitwise_not(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX BitwiseNot: every bit flipped."""
    dt = dtype_of(x)
    udt, bits = _unsigned(dt, ctx)
    ones = E.const((1 << bits) - 1, udt)
    return elementwise("BitwiseNot", [x], lambda v: E.cast(dt, ones - E.cast(udt, v)), dt)


@register("BitCast")
def bitcast(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX BitCast: each element's bits read as the type ``to`` of the same width, through the
    code generators' ``reinterpret`` intrinsic (an LLVM bitcast). Bool is the byte 0/1 it is
    stored as: to an 8-bit integer it is that byte, from one it is ``byte != 0``."""
    from .elemwise import onnx_dtype

    if ctx.attr("to") is None:
        raise ctx.fail("attribute 'to' is required")
    dt = onnx_dtype(ctx.attr("to"), ctx)
    src = dtype_of(x)
    s_t, d_t = dtype(src), dtype(dt)
    for t in (s_t, d_t):
        if t.kind == "bfloat" or (t.is_int and t.bits < 8):
            raise ctx.fail(f"BitCast from {src} to {dt}: ember does not reinterpret {t} bits")
    sb, db = (8 if t.is_bool else t.bits for t in (s_t, d_t))
    if sb != db:
        raise ctx.fail(f"cannot reinterpret {src} ({sb} bits) as {dt} ({db} bits); BitCast needs types of one width")
    if s_t.is_bool or d_t.is_bool:
        return elementwise("BitCast", [x], lambda v: cast(v, dt), dt)
    return elementwise("BitCast", [x], lambda v: E.Call(d_t, "reinterpret", (v,)), dt)
