"""Float32 ``erf`` and ``tanh`` as inline rational approximations for the CPU code generator.

libm's ``erff``/``tanhf`` are calls LLVM cannot vectorize (it knows no vector variant), so a
loop that applies GELU or tanh ran one scalar call per element. These are the odd rational
minimax forms ``x P(x²) / Q(x²)`` on a clamped argument used by Eigen and XLA for float32
(the same coefficients), plain multiplies and adds that vectorize with the loop. Measured
against float64 on a dense grid of [-10, 10] plus tiny magnitudes: at most 7 ulp, 4.3e-7
relative (``tests/cpu/test_gemm_kernels.py`` checks it). NaN propagates (the clamp is a pair
of ordered compares, which keep a NaN); ±inf gives ±1. Float64 keeps libm.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import llvmlite.ir as ir

#: erf: numerator (odd, highest power first, times x) and denominator (even) coefficients.
ERF_CLAMP = 4.0
ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
         -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
         -1.42647390514189e-02)
#: tanh: beyond the clamp tanh rounds to ±1 in float32; below TANH_TINY tanh(x) rounds to x.
TANH_CLAMP = 7.90531110763549805
TANH_TINY = 0.0004
TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
          1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)

FUNCTIONS = ("erf", "tanh")


def _const(ty: ir.Type, value: float) -> ir.Value:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def _horner(b: ir.IRBuilder, x2: ir.Value, coeffs: Sequence[float]) -> ir.Value:
    acc = _const(x2.type, coeffs[0])
    for c in coeffs[1:]:
        acc = b.fadd(b.fmul(acc, x2), _const(x2.type, c))
    return acc


def _clamp(b: ir.IRBuilder, x: ir.Value, bound: float) -> ir.Value:
    hi, lo = _const(x.type, bound), _const(x.type, -bound)
    x = b.select(b.fcmp_ordered(">", x, hi), hi, x)
    return b.select(b.fcmp_ordered("<", x, lo), lo, x)


def _rational(b: ir.IRBuilder, x: ir.Value, p: Sequence[float], q: Sequence[float]) -> ir.Value:
    x2 = b.fmul(x, x)
    return b.fdiv(b.fmul(x, _horner(b, x2, p)), _horner(b, x2, q))


def erf_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """``erf(x)`` for float32 scalars or vectors (see the module docstring)."""
    return _rational(b, _clamp(b, x, ERF_CLAMP), ERF_P, ERF_Q)


def tanh_f32(b: ir.IRBuilder, x: ir.Value, fabs: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """``tanh(x)`` for float32 scalars or vectors; ``fabs`` emits ``|x|``."""
    r = _rational(b, _clamp(b, x, TANH_CLAMP), TANH_P, TANH_Q)
    return b.select(b.fcmp_ordered("<", fabs(x), _const(x.type, TANH_TINY)), x, r)
