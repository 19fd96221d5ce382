"""Conversions between float32 and the low-precision formats, written as loop-IR code.

ember stores the 8- and 4-bit float formats (``float8_e4m3fn``, ``float8_e4m3fnuz``,
``float8_e5m2``, ``float8_e5m2fnuz``, ``float8_e8m0fnu``, ``float4_e2m1fn``) as one byte an
element, the bit pattern in the low bits, exactly as ``ml_dtypes`` stores them in NumPy. They take
no arithmetic: kernels convert them with the functions here, which build integer code on the bits
(``reinterpret`` views a float32 as its uint32 bits and a storage byte as a uint8; divisions and
remainders by powers of two lower to shifts and masks). The sub-byte integers (``int4``...) are
ordinary loop-IR integers; :func:`to_subbyte_int` gives the float-to-integer rule of ``ml_dtypes``.

Semantics (those of the ONNX ``Cast`` operator and its reference, which uses ``ml_dtypes``):

* decoding is exact; a format's NaN patterns give NaN, ``float8_e5m2``'s infinities give ±inf;
* encoding rounds to nearest, ties to even, from the float32 value (wider inputs are rounded to
  float32 first, as ``ml_dtypes`` does); with ``saturate`` a value beyond the largest finite one
  (±inf included) becomes ±max, without it it becomes ±inf (``e5m2``) or NaN (the FN/FNUZ
  formats); NaN stays NaN (sign kept where the format has signed NaNs); the FNUZ formats have no
  negative zero; ``float4_e2m1fn`` has neither inf nor NaN and always saturates (NaN becomes a
  zero: ``0x8`` for a positive NaN, ``0x0`` for a negative one, as in ``ml_dtypes``);
* ``float8_e8m0fnu`` (a power of two ``2**(e - 127)``, 0xFF is NaN) follows ONNX's
  ``to_float8e8m0``: the sign is dropped, NaN and ±inf give NaN, ``round_mode`` is ``up``
  (any fraction rounds up), ``down`` (truncate) or ``nearest``; with ``saturate`` nothing rounds
  past ``2**127``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import te
from ..ir import expr as E
from ..ir.dtypes import LOWP_FLOATS, DataType
from ..ir.dtypes import dtype as as_dtype

U8, U32, I32, F32 = "uint8", "uint32", "int32", "float32"
ROUND_MODES = ("up", "down", "nearest")


@dataclass(frozen=True)
class FloatFormat:
    """A small float format: exponent and mantissa widths, exponent bias and special values.

    ``nan`` is ``"ieee"`` (exponent all ones, mantissa non-zero; all ones and mantissa zero is
    inf), ``"fn"`` (exponent and mantissa all ones), ``"fnuz"`` (only the negative-zero pattern)
    or ``"none"``."""

    name: str
    ebits: int
    mbits: int
    bias: int
    nan: str

    @property
    def sign_shift(self) -> int:
        """Position of the sign bit."""
        return self.ebits + self.mbits

    @property
    def max_code(self) -> int:
        """Bit pattern (without sign) of the largest finite value."""
        top_e = (1 << self.ebits) - 1
        if self.nan == "ieee":
            return ((top_e - 1) << self.mbits) | ((1 << self.mbits) - 1)
        if self.nan == "fn":
            return (top_e << self.mbits) | ((1 << self.mbits) - 2)
        return (top_e << self.mbits) | ((1 << self.mbits) - 1)


FORMATS = {
    "float8_e4m3fn": FloatFormat("float8_e4m3fn", 4, 3, 7, "fn"),
    "float8_e4m3fnuz": FloatFormat("float8_e4m3fnuz", 4, 3, 8, "fnuz"),
    "float8_e5m2": FloatFormat("float8_e5m2", 5, 2, 15, "ieee"),
    "float8_e5m2fnuz": FloatFormat("float8_e5m2fnuz", 5, 2, 16, "fnuz"),
    "float4_e2m1fn": FloatFormat("float4_e2m1fn", 2, 1, 1, "none"),
}
E8M0 = "float8_e8m0fnu"
#: the formats whose Cast honours ``saturate`` (the others saturate always or never overflow)
SATURATING = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", E8M0)


# -- bit helpers --------------------------------------------------------------------------------
def _u(v: int, dt: str = U32) -> E.PrimExpr:
    return E.const(v, dt)


def _shr(x: E.PrimExpr, k: int) -> E.PrimExpr:
    """``x >> k`` for an unsigned ``x``."""
    return x if k == 0 else E.truncdiv(x, _u(1 << k, str(x.dtype)))


def _low(x: E.PrimExpr, k: int) -> E.PrimExpr:
    """``x & (2**k - 1)`` for an unsigned ``x``."""
    return E.truncmod(x, _u(1 << k, str(x.dtype)))


def _shl(x: E.PrimExpr, k: int) -> E.PrimExpr:
    """``x << k`` (no overflow in the uses here)."""
    return x if k == 0 else x * _u(1 << k, str(x.dtype))


def reinterpret(x: E.PrimExpr, dt: str | DataType) -> E.PrimExpr:
    """The bits of ``x`` viewed as ``dt`` (same width: float32/uint32, a storage format/uint8)."""
    t = as_dtype(dt).with_lanes(x.dtype.lanes)
    if x.dtype == t:
        return x
    return E.Call(t, "reinterpret", (x,))


def _to_f32(x: E.PrimExpr) -> E.PrimExpr:
    if x.dtype.element_of() == as_dtype(F32):
        return x
    if x.dtype.is_bool:
        return te.if_then_else(x, E.const(1.0, F32), E.const(0.0, F32))
    return E.cast(F32, x)


def is_lowp(dt: str | DataType) -> bool:
    """True for the storage-only float formats."""
    return str(as_dtype(dt).element_of()) in LOWP_FLOATS


# -- decoding -----------------------------------------------------------------------------------
def decode(x: E.PrimExpr) -> E.PrimExpr:
    """The float32 value of ``x``, an expression of one of the storage float formats."""
    name = str(x.dtype.element_of())
    u = E.cast(U32, reinterpret(x, U8))
    if name == E8M0:
        bits = te.if_then_else(u == _u(0), _u(0x00400000), _shl(u, 23))  # 2**-127 is subnormal
        return te.if_then_else(u == _u(0xFF), E.const(float("nan"), F32), reinterpret(bits, F32))
    f = FORMATS[name]
    sign = _low(_shr(u, f.sign_shift), 1)
    ex = _low(_shr(u, f.mbits), f.ebits)
    man = _low(u, f.mbits)
    normal = _shl(sign, 31) + _shl(ex + _u(127 - f.bias), 23) + _shl(man, 23 - f.mbits)
    sub = E.cast(F32, man) * E.const(2.0 ** (1 - f.bias - f.mbits), F32)
    sub = te.if_then_else(sign == _u(1), sub * E.const(-1.0, F32), sub)  # -0.0 stays negative
    val = te.if_then_else(ex == _u(0), sub, reinterpret(normal, F32))
    nan = reinterpret(_shl(sign, 31) + _u(0x7FC00000), F32)  # a quiet NaN with the sign of x
    top = (1 << f.ebits) - 1
    if f.nan == "ieee":
        inf = te.if_then_else(sign == _u(1), E.const(float("-inf"), F32), E.const(float("inf"), F32))
        val = te.if_then_else(ex == _u(top), te.if_then_else(man == _u(0), inf, nan), val)
    elif f.nan == "fn":
        val = te.if_then_else(_low(u, f.sign_shift) == _u((1 << f.sign_shift) - 1), nan, val)
    elif f.nan == "fnuz":
        val = te.if_then_else(u == _u(0x80), nan, val)
    return val


def from_lowp(x: E.PrimExpr, dt: str) -> E.PrimExpr:
    """``x`` (a storage float format) converted to ``dt``: through its exact float32 value."""
    v = decode(x)
    if dt == F32:
        return v
    if is_lowp(dt):
        return to_lowp(v, dt)
    if as_dtype(dt).is_subbyte_int:
        return to_subbyte_int(v, dt)
    if dt == "bool":
        return v != E.const(0.0, F32)
    return E.cast(dt, v)


# -- encoding -----------------------------------------------------------------------------------
def _encode(v: E.PrimExpr, f: FloatFormat, saturate: bool) -> E.PrimExpr:
    """uint32 bit pattern of float32 ``v`` rounded to format ``f`` (module doc)."""
    b = reinterpret(v, U32)
    sign = _shr(b, 31)
    a = _low(b, 31)
    is_nan = a > _u(0x7F800000)
    e32 = E.cast(I32, _shr(a, 23))
    m32 = _low(a, 23)
    drop = 23 - f.mbits
    # A normal result: exponent and mantissa side by side, so a mantissa carry bumps the exponent.
    te_ = e32 - E.const(127 - f.bias, I32)
    trunc = te_ * E.const(1 << f.mbits, I32) + E.cast(I32, _shr(m32, drop))
    rem = _low(m32, drop)
    half = _u(1 << (drop - 1))
    odd = E.truncmod(trunc, E.const(2, I32)) == E.const(1, I32)
    up = (rem > half) | ((rem == half) & odd)
    code_n = trunc + te.if_then_else(up, E.const(1, I32), E.const(0, I32))
    # A subnormal result (or zero): |v| in units of the smallest subnormal, rounded to even;
    # the scaling by a power of two is exact.
    scaled = reinterpret(a, F32) * E.const(2.0 ** (f.bias + f.mbits - 1), F32)
    code_s = E.cast(I32, te.round(E.min_expr(scaled, E.const(float(1 << (f.mbits + 1)), F32))))
    mag = te.if_then_else(te_ >= E.const(1, I32), code_n, code_s)
    over = mag > E.const(f.max_code, I32)
    top_e = (1 << f.ebits) - 1
    if saturate or f.nan == "none":
        big = f.max_code
    elif f.nan == "ieee":
        big = top_e << f.mbits
    elif f.nan == "fn":
        big = (1 << f.sign_shift) - 1
    else:
        big = 0x80
    mag_u = E.cast(U32, te.if_then_else(over, E.const(big, I32), mag))
    signed = _shl(sign, f.sign_shift) + mag_u
    if f.nan == "fnuz":
        # No negative zero; 0x80 (the NaN) carries no sign.
        out = te.if_then_else((mag_u == _u(0)) | (mag_u == _u(0x80)), mag_u, signed)
        return te.if_then_else(is_nan, _u(0x80), out)
    if f.nan == "ieee":
        qnan = (top_e << f.mbits) | (1 << (f.mbits - 1))
        return te.if_then_else(is_nan, _shl(sign, f.sign_shift) + _u(qnan), signed)
    if f.nan == "fn":
        return te.if_then_else(is_nan, _shl(sign, f.sign_shift) + _u((1 << f.sign_shift) - 1), signed)
    # float4_e2m1fn: no NaN; ml_dtypes maps NaN to the zero of the opposite sign.
    return te.if_then_else(is_nan, _shl(_u(1) - sign, f.sign_shift), signed)


def _encode_e8m0(v: E.PrimExpr, saturate: bool, round_mode: str) -> E.PrimExpr:
    """uint32 bit pattern of float32 ``v`` as float8_e8m0fnu (ONNX's ``to_float8e8m0``)."""
    b = reinterpret(v, U32)
    ex = _low(_shr(b, 23), 8)
    if round_mode == "down":
        up = E.const(False, "bool")
    elif round_mode == "up":
        up = _low(b, 23) != _u(0)
    else:
        g = _low(_shr(b, 22), 1) == _u(1)
        r = _low(_shr(b, 21), 1) == _u(1)
        s = _low(b, 21) != _u(0)
        up = g & (r | s | (ex > _u(0)))
    if saturate:
        up = up & (ex != _u(0xFE))
    code = ex + te.if_then_else(up, _u(1), _u(0))
    return te.if_then_else(ex == _u(0xFF), _u(0xFF), code)


def to_lowp(x: E.PrimExpr, dt: str, saturate: bool = True, round_mode: str = "up") -> E.PrimExpr:
    """``x`` (any number type) converted to the storage float format ``dt`` (module doc)."""
    if x.dtype.is_lowp_float:
        x = decode(x)
    v = _to_f32(x)
    if dt == E8M0:
        if round_mode not in ROUND_MODES:
            raise ValueError(f"round_mode {round_mode!r} is not one of {', '.join(ROUND_MODES)}")
        bits = _encode_e8m0(v, saturate, round_mode)
    else:
        bits = _encode(v, FORMATS[dt], saturate)
    return reinterpret(E.cast(U8, bits), dt)


def to_subbyte_int(x: E.PrimExpr, dt: str) -> E.PrimExpr:
    """``x`` converted to ``int4``/``uint4``/``int2``/``uint2`` as ``ml_dtypes`` converts: a float
    is truncated toward zero (NaN gives 0) and the integer wraps modulo ``2**bits``."""
    src = x.dtype
    if src.is_lowp_float:
        x, src = decode(x), as_dtype(F32)
    if src.is_float:
        wide = "float64" if src.bits == 64 else F32
        v = E.cast(wide, x) if str(src.element_of()) != wide else x
        lim = E.const(2.0**62, wide)
        v = te.if_then_else(te.isnan(v), E.const(0.0, wide), E.max_expr(E.min_expr(v, lim), E.const(0.0, wide) - lim))
        x = E.cast("int64", v)
    elif src.is_bool:
        return te.if_then_else(x, E.const(1, dt), E.const(0, dt))
    return E.cast(dt, x)


def convert(x: E.PrimExpr, dt: str, saturate: bool = True, round_mode: str = "up") -> E.PrimExpr:
    """``x`` converted to ``dt`` where either side may be a low-precision type (ONNX Cast rules)."""
    src = x.dtype
    if is_lowp(dt):
        return to_lowp(x, dt, saturate, round_mode)
    if src.is_lowp_float:
        return from_lowp(x, dt)
    if as_dtype(dt).is_subbyte_int:
        return to_subbyte_int(x, dt)
    raise ValueError(f"convert from {src} to {dt}: neither is a low-precision type")


def host_input(value: Any, dt: str) -> Any:
    """A model input at the executor boundary: an ember CPU ``NDArray`` of bfloat16 for a
    bfloat16 input becomes a NumPy ``ml_dtypes.bfloat16`` view of its storage (no copy; its
    ``numpy()`` would give float32); anything else is returned unchanged."""
    from ..runtime.ndarray import NDArray

    if isinstance(value, NDArray) and value.dtype == "bfloat16" == dt and value.device.kind == "cpu":
        return value._data.view(np.dtype("bfloat16"))  # registered by ml_dtypes (ember.ir.dtypes)
    return value
