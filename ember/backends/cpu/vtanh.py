"""float32 ``tanh`` as inline arithmetic, so loops that take it (an LSTM or GRU cell, GELU's
tanh form) vectorize: the code generator otherwise calls ``tanhf`` once per lane, which
made an LSTM cell of 512 units cost ~20 us.

Evaluated in float64 (a vector of doubles with the float lanes' count), like :mod:`.vexp`:

* ``|x| < SMALL`` (1/16): the Taylor polynomial of ``tanh`` up to ``x^13`` (truncation below
  ``0.0034 |x|^15``: < 1e-19 relative);
* otherwise ``1 - 2 / (e^(2|x|) + 1)`` with ``e^(2|x|)`` from :mod:`.vexp`'s reduction and
  degree-9 polynomial (relative error ~1e-11; ``2|x|`` clamped to 40, beyond which float32
  ``tanh`` is 1): the cancellation in ``1 - t`` multiplies that error by at most
  ``t / (1 - t) < 1 / |x| <= 16``, so the double result is within ~2e-10 relative of ``tanh(x)``;
* the sign put back, then rounded once to float32.

So the float32 result is the correctly rounded one except within ~2e-10 of a rounding boundary
(one ulp at most; measured over every float32: at most 0.5003 ulp, 1224 of 4.28e9 finite
inputs not correctly rounded), where glibc documents up to 2 ulp for ``tanhf``. ``-0.0`` stays
``-0.0``, ``±inf`` gives ``±1``, NaN stays NaN. ``tests/cpu/test_recurrent_speed.py`` compares it with
float64 over the whole float32 range.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import llvmlite.ir as ir

from .vexp import TAYLOR, _const, _like

SMALL = 1.0 / 16.0
#: ``2|x|`` beyond this gives float32 ``tanh`` = 1 (``e^-40`` is far below half an ulp of 1).
CLAMP = 40.0


def _tanh_taylor(n: int) -> tuple[float, ...]:
    """Coefficients of ``x, x^3, ..., x^(2n-1)`` of ``tanh``'s Taylor series (exact
    Bernoulli-number formula, rounded to double)."""
    # B_{2k} by the Akiyama-Tanigawa algorithm
    def bernoulli(m: int) -> Fraction:
        a = [Fraction(0)] * (m + 1)
        for i in range(m + 1):
            a[i] = Fraction(1, i + 1)
            for j in range(i, 0, -1):
                a[j - 1] = j * (a[j - 1] - a[j])
        return a[0]

    out = []
    for k in range(1, n + 1):
        c = Fraction(2 ** (2 * k) * (2 ** (2 * k) - 1)) * bernoulli(2 * k) / math.factorial(2 * k)
        out.append(float(c))
    return tuple(out)


#: x, x^3, ..., x^13
POLY = _tanh_taylor(7)


def tanh_f32(b: ir.IRBuilder, x: ir.Value, rint: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """``tanh(x)`` for a float32 scalar or vector ``x`` (see the module docstring); ``rint``
    emits round-to-nearest-even of a double value of the same shape."""
    dty = _like(x.type, ir.DoubleType())
    ity = _like(x.type, ir.IntType(64))
    xd = b.fpext(x, dty)
    a = b.call(_fabs(b, dty), [xd])
    # small |x|: odd Taylor polynomial, x * P(x^2)
    x2 = b.fmul(a, a)
    p = _const(dty, POLY[-1])
    for c in reversed(POLY[:-1]):
        p = b.fadd(b.fmul(p, x2), _const(dty, c))
    small = b.fmul(a, p)
    # otherwise 1 - 2 / (e^(2|x|) + 1); the NaN of a NaN x is restored at the end
    y = b.fmul(a, _const(dty, 2.0))
    y = b.select(b.fcmp_ordered(">", y, _const(dty, CLAMP)), _const(dty, CLAMP), y)
    y = b.select(b.fcmp_unordered("uno", y, y), _const(dty, 0.0), y)
    n = rint(b.fmul(y, _const(dty, 1.0 / math.log(2.0))))
    r = b.fsub(y, b.fmul(n, _const(dty, math.log(2.0))))
    e = _const(dty, TAYLOR[0])
    for c in TAYLOR[1:]:
        e = b.fadd(b.fmul(e, r), _const(dty, c))
    scale = b.bitcast(b.shl(b.add(b.fptosi(n, ity), _const(ity, 1023)), _const(ity, 52)), dty)
    e = b.fmul(e, scale)
    big = b.fsub(_const(dty, 1.0), b.fdiv(_const(dty, 2.0), b.fadd(e, _const(dty, 1.0))))
    mag = b.select(b.fcmp_ordered("<", a, _const(dty, SMALL)), small, big)
    out = b.fptrunc(b.call(_copysign(b, dty), [mag, xd]), x.type)
    return b.select(b.fcmp_unordered("uno", x, x), x, out)


def _intrinsic(b: ir.IRBuilder, name: str, ty: ir.Type, nargs: int) -> ir.Function:
    """The LLVM intrinsic ``llvm.<name>`` on ``ty`` (float or double, scalar or vector), declared once."""
    elem = ty.element if isinstance(ty, ir.VectorType) else ty
    bits = "f32" if isinstance(elem, ir.FloatType) else "f64"
    suffix = f"v{ty.count}{bits}" if isinstance(ty, ir.VectorType) else bits
    full = f"llvm.{name}.{suffix}"
    m = b.module
    fn = m.globals.get(full)
    if fn is None:
        fn = ir.Function(m, ir.FunctionType(ty, [ty] * nargs), full)
    return fn


def _fabs(b: ir.IRBuilder, ty: ir.Type) -> ir.Function:
    return _intrinsic(b, "fabs", ty, 1)


def _copysign(b: ir.IRBuilder, ty: ir.Type) -> ir.Function:
    return _intrinsic(b, "copysign", ty, 2)
