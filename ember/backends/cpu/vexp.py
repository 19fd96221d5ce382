"""float32 ``exp`` as inline arithmetic, so loops that take it (softmax, sigmoid, swish,
attention) vectorize: LLVM lowers ``llvm.exp`` on vectors to one ``expf`` call per lane.

Evaluated in float64 (a vector of doubles with the float lanes' count): ``x = n ln2 + r`` with
``n = rint(x / ln2)``, ``|r| <= ln2 / 2``; ``e^r`` by its Taylor polynomial of degree 9
(truncation ``|r|^10 / 10! < 1e-11`` relative); ``2^n`` built from its exponent bits; then
rounded once to float32. The double result is within ~1e-11 relative of ``e^x``, so the float32
result is the correctly rounded one except within 1e-11 of a rounding boundary (one ulp at
most), as libm's. Overflow gives ``+inf`` and underflow the correctly rounded subnormal or 0
(the argument is clamped to [-104, 89] first, beyond which float32 ``e^x`` is 0 or ``inf``);
NaN stays NaN. ``tests/cpu/test_gemm_kernels.py`` checks it against float64 over the whole
float32 range.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import llvmlite.ir as ir

LO, HI = -104.0, 89.0
TAYLOR = tuple(1.0 / math.factorial(k) for k in range(9, -1, -1))  # degree 9 .. 0


def _like(ty: ir.Type, elem: ir.Type) -> ir.Type:
    return ir.VectorType(elem, ty.count) if isinstance(ty, ir.VectorType) else elem


def _const(ty: ir.Type, value: float | int) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def exp_f32(b: ir.IRBuilder, x: ir.Value, rint: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """``exp(x)`` for a float32 scalar or vector ``x`` (see the module docstring); ``rint``
    emits round-to-nearest-even of a double value of the same shape."""
    dty = _like(x.type, ir.DoubleType())
    ity = _like(x.type, ir.IntType(64))
    xd = b.fpext(x, dty)
    lo, hi = _const(dty, LO), _const(dty, HI)
    xd = b.select(b.fcmp_ordered(">", xd, hi), hi, xd)
    xd = b.select(b.fcmp_ordered("<", xd, lo), lo, xd)
    n = rint(b.fmul(xd, _const(dty, 1.0 / math.log(2.0))))
    r = b.fsub(xd, b.fmul(n, _const(dty, math.log(2.0))))
    p = _const(dty, TAYLOR[0])
    for c in TAYLOR[1:]:
        p = b.fadd(b.fmul(p, r), _const(dty, c))
    ni = b.fptosi(b.select(b.fcmp_unordered("uno", n, n), _const(dty, 0.0), n), ity)
    scale = b.bitcast(b.shl(b.add(ni, _const(ity, 1023)), _const(ity, 52)), dty)
    out = b.fptrunc(b.fmul(p, scale), x.type)
    return b.select(b.fcmp_unordered("uno", x, x), x, out)
