"""float32 ``erf`` as inline arithmetic, so loops that take it (GELU in its exact form,
``x * 0.5 * (1 + erf(x / sqrt(2)))``, in every BERT-style encoder exported from PyTorch)
vectorize: the code generator otherwise calls ``erff`` once per lane, and the call keeps LLVM's
loop vectorizer off the whole elementwise loop.

Evaluated in float64 (a vector of doubles with the float lanes' count), like :mod:`.vexp` and
:mod:`.vtanh`:

* ``|x| < 1``: the Maclaurin series ``2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))`` up to
  ``n = 13`` (the first term left out is below ``1/(14! 29) < 4e-13`` at ``|x| = 1``);
* ``1 <= |x| < 4.5``: ``erf = 1 - e^(-x^2) R(x)`` with ``R(x) = erfc(x) e^(x^2)`` a smooth,
  slowly varying function, interpolated by a Chebyshev series of degree :data:`DEGREE` on
  ``[1, 4.5]`` (coefficients computed once, at import, from :func:`math.erfc` at the Chebyshev
  nodes: relative error ~1e-13) and summed by Clenshaw's recurrence; ``e^(-x^2)`` with
  :mod:`.vexp`'s reduction and degree-9 polynomial (relative ~1e-11; ``x^2`` is exact in
  double for a float32 ``x``);
* ``|x| >= 4.5``: 1 (``erfc(4.5) = 2e-10``, far below half an ulp of float32's 1);
* the sign put back, then rounded once to float32.

So the float32 result is the correctly rounded one except within ~1e-11 relative of a rounding
boundary (one ulp at most; glibc documents up to 1 ulp for ``erff``). ``-0.0`` stays ``-0.0``,
``±inf`` gives ``±1``, NaN stays NaN. ``tests/cpu/test_verf.py`` compares it with
:func:`math.erf` over the float32 range.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import llvmlite.ir as ir
import numpy as np

from .vexp import TAYLOR, _const, _like
from .vtanh import _copysign, _fabs

SPLIT = 1.0
TOP = 4.5
DEGREE = 22
#: 2/sqrt(pi) (-1)^n / (n! (2n+1)) for n = 0 .. 13: erf(x) = x * sum c_n x^(2n)
MACLAURIN = tuple(2.0 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(14))


def _chebyshev_coefficients() -> tuple[float, ...]:
    """Coefficients of the Chebyshev interpolant of ``erfc(x) exp(x^2)`` on ``[SPLIT, TOP]``
    at ``DEGREE + 1`` Chebyshev nodes (deterministic: no fitting, an exact interpolation)."""
    n = DEGREE + 1
    k = np.arange(n)
    u = np.cos(np.pi * (k + 0.5) / n)
    mid, half = (TOP + SPLIT) / 2, (TOP - SPLIT) / 2
    f = np.array([math.erfc(mid + half * v) * math.exp((mid + half * v) ** 2) for v in u])
    c = np.array([2.0 / n * np.sum(f * np.cos(j * np.pi * (k + 0.5) / n)) for j in range(n)])
    c[0] /= 2
    return tuple(float(x) for x in c)


CHEB = _chebyshev_coefficients()


def erf_f32(b: ir.IRBuilder, x: ir.Value, rint: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """``erf(x)`` for a float32 scalar or vector ``x`` (see the module docstring); ``rint``
    emits round-to-nearest-even of a double value of the same shape."""
    dty = _like(x.type, ir.DoubleType())
    ity = _like(x.type, ir.IntType(64))
    xd = b.fpext(x, dty)
    a = b.call(_fabs(b, dty), [xd])
    x2 = b.fmul(a, a)
    # |x| < 1: a * P(x^2)
    p = _const(dty, MACLAURIN[-1])
    for c in reversed(MACLAURIN[:-1]):
        p = b.fadd(b.fmul(p, x2), _const(dty, c))
    small = b.fmul(a, p)
    # 1 <= |x| < TOP: 1 - e^(-x^2) R(x), R by Clenshaw on u = (|x| - mid) / half (clamped, so the
    # lanes this branch does not serve stay finite)
    mid, half = (TOP + SPLIT) / 2, (TOP - SPLIT) / 2
    ac = b.select(b.fcmp_ordered("<", a, _const(dty, SPLIT)), _const(dty, SPLIT), a)
    ac = b.select(b.fcmp_ordered(">", ac, _const(dty, TOP)), _const(dty, TOP), ac)
    ac = b.select(b.fcmp_unordered("uno", ac, ac), _const(dty, SPLIT), ac)
    u = b.fmul(b.fsub(ac, _const(dty, mid)), _const(dty, 1.0 / half))
    u2 = b.fmul(u, _const(dty, 2.0))
    b1 = _const(dty, 0.0)
    b2 = _const(dty, 0.0)
    for c in reversed(CHEB[1:]):
        b1, b2 = b.fadd(b.fsub(b.fmul(u2, b1), b2), _const(dty, c)), b1
    r = b.fadd(b.fsub(b.fmul(u, b1), b2), _const(dty, CHEB[0]))
    # e^(-ac^2) as vexp computes e^y: y = n ln2 + t, |t| <= ln2 / 2
    y = b.fneg(b.fmul(ac, ac))
    n = rint(b.fmul(y, _const(dty, 1.0 / math.log(2.0))))
    t = b.fsub(y, b.fmul(n, _const(dty, math.log(2.0))))
    e = _const(dty, TAYLOR[0])
    for c in TAYLOR[1:]:
        e = b.fadd(b.fmul(e, t), _const(dty, c))
    scale = b.bitcast(b.shl(b.add(b.fptosi(n, ity), _const(ity, 1023)), _const(ity, 52)), dty)
    mid_value = b.fsub(_const(dty, 1.0), b.fmul(b.fmul(e, scale), r))
    mag = b.select(b.fcmp_ordered("<", a, _const(dty, SPLIT)), small, mid_value)
    mag = b.select(b.fcmp_ordered(">=", a, _const(dty, TOP)), _const(dty, 1.0), mag)
    out = b.fptrunc(b.call(_copysign(b, dty), [mag, xd]), x.type)
    return b.select(b.fcmp_unordered("uno", x, x), x, out)
