"""float32 ``erf`` as inline float32 arithmetic, so loops that take it (GELU in its exact form,
``x * 0.5 * (1 + erf(x / sqrt(2)))``, in every BERT-style encoder exported from PyTorch)
vectorize at full float32 width: the code generator otherwise calls ``erff`` once per lane, and
the call keeps LLVM's loop vectorizer off the whole elementwise loop.

For ``a = |x|``, in float32 with fused multiply-adds:

* ``a < 1``: ``erf = a + a * Q(a^2)``, ``Q`` of degree 6 (``erf(a)/a - 1``; adding the small
  correction to ``a`` last keeps the leading term exact, as fdlibm does);
* ``1 <= a < TOP``: ``erf = 1 - e^(-a^2) R(u)`` with ``R`` of degree 11 in
  ``u = (a - 2.4625) / 1.4625`` (``erfc(a) e^(a^2)``, smooth and between 0.15 and 0.43);
  ``a^2 = h + l`` exactly (``l = fma(a, a, -h)``), ``e^(-h)`` by Cody-Waite reduction
  (``ln 2`` in two parts) and a degree-7 Taylor polynomial, times ``(1 - l)``;
* ``a >= TOP`` (3.925, where ``1 - erf`` falls below half an ulp of 1): 1;
* the sign put back.

``Q`` and ``R`` are least-squares fits in float64 (``R`` weighted by ``1/R``; 20001 and 40001
points), rounded to float32 (the numbers below). Measured against :func:`math.erf`
(``tests/cpu/test_verf.py``, every 997th float32 bit pattern plus dense sweeps): at most
1.5 ulp of the float32 result (1.32 seen), about 95 % correctly rounded — glibc's ``erff`` is
documented within 1 ulp; the evaluation in double that would give that costs four times as much
(it made GELU a quarter of BERT-small's time). ``-0.0`` stays ``-0.0``, ``±inf`` gives ``±1``,
NaN stays NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import llvmlite.ir as ir

from .vexp import _const, _like
from .vtanh import _intrinsic

SPLIT = 1.0
TOP = 3.925
R_CENTER, R_HALF = 2.4625, 1.4625
#: erf(a)/a - 1 = Q(a^2) on [0, 1), constant term first
Q = (0.12837916612625122, -0.3761262893676758, 0.11283634603023529, -0.026856068521738052,
     0.005192957352846861, -0.0008053746423684061, 8.00685811555013e-05)
#: erfc(a) e^(a^2) = R(u) on [1, TOP], u = (a - R_CENTER) / R_HALF, constant term first
R = (0.21362988650798798, -0.11151853203773499, 0.055311039090156555, -0.026220474392175674,
     0.01193351298570633, -0.005238640587776899, 0.0022368121426552534, -0.0009148068493232131,
     0.00033634272404015064, -0.0001366435462841764, 7.964680844452232e-05, -2.7207583116251044e-05)
LN2_HI, LN2_LO = 0.693145751953125, 1.428606765330187e-06  # ln 2 = HI + LO, HI with 12 free low bits
EXP_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(8))  # 1, 1, 1/2, ..., 1/7


def _call(b: ir.IRBuilder, name: str, ty: ir.Type, args: list[ir.Value]) -> ir.Value:
    return b.call(_intrinsic(b, name, ty, len(args)), args)


def _horner(b: ir.IRBuilder, ty: ir.Type, coeffs: tuple[float, ...], t: ir.Value) -> ir.Value:
    acc = _const(ty, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = _call(b, "fma", ty, [acc, t, _const(ty, c)])
    return acc


def erf_f32(b: ir.IRBuilder, x: ir.Value, rint: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """``erf(x)`` for a float32 scalar or vector ``x`` (see the module docstring); ``rint``
    emits round-to-nearest-even of a value of ``x``'s type."""
    ty = x.type
    ity = _like(ty, ir.IntType(32))
    a = _call(b, "fabs", ty, [x])
    # a < 1: a + a Q(a^2)
    t = b.fmul(a, a)
    small = _call(b, "fma", ty, [a, _horner(b, ty, Q, t), a])
    # 1 <= a < TOP: 1 - e^(-a^2) R(u), with a clamped so the lanes this branch does not serve stay finite
    ac = b.select(b.fcmp_ordered("<", a, _const(ty, SPLIT)), _const(ty, SPLIT), a)
    ac = b.select(b.fcmp_ordered(">", ac, _const(ty, TOP)), _const(ty, TOP), ac)
    ac = b.select(b.fcmp_unordered("uno", ac, ac), _const(ty, SPLIT), ac)
    hi = b.fmul(ac, ac)
    lo = _call(b, "fma", ty, [ac, ac, b.fneg(hi)])
    y = b.fneg(hi)
    n = rint(b.fmul(y, _const(ty, 1.0 / math.log(2.0))))
    r = _call(b, "fma", ty, [n, _const(ty, -LN2_HI), y])
    r = _call(b, "fma", ty, [n, _const(ty, -LN2_LO), r])
    e = _horner(b, ty, EXP_TAYLOR, r)
    scale = b.bitcast(b.shl(b.add(b.fptosi(n, ity), _const(ity, 127)), _const(ity, 23)), ty)
    e = b.fmul(e, scale)
    e = _call(b, "fma", ty, [b.fneg(e), lo, e])  # e^(-h - l) = e^(-h) (1 - l)
    u = b.fmul(b.fsub(ac, _const(ty, R_CENTER)), _const(ty, 1.0 / R_HALF))
    big = _call(b, "fma", ty, [b.fneg(e), _horner(b, ty, R, u), _const(ty, 1.0)])
    mag = b.select(b.fcmp_ordered("<", a, _const(ty, SPLIT)), small, big)
    mag = b.select(b.fcmp_ordered(">=", a, _const(ty, TOP)), _const(ty, 1.0), mag)
    out = _call(b, "copysign", ty, [mag, x])
    return b.select(b.fcmp_unordered("uno", x, x), x, out)
