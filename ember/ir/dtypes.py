"""Data types of the loop IR.

A :class:`DataType` is a scalar kind (``float``, ``bfloat``, ``int``, ``uint``, ``bool``), a bit
width and a lane count (``float32x8`` is a vector of eight float32). Strings and NumPy dtypes
convert with :func:`dtype`.

Type promotion (what ``a + b`` gives for two operands of different types) follows NumPy's rules
for arrays of the same rank, with two exceptions that keep kernels in the type the user chose:

* a Python ``int`` or ``float`` literal takes the type of the other operand when that type can
  hold it (``A[i] * 2`` stays ``float16`` for a ``float16`` tensor; ``I[i] + 1.5`` becomes
  ``float32`` for an integer tensor ``I``);
* ``bfloat16`` combined with ``float16`` gives ``float32``; with a wider float it gives that float.

Otherwise: float beats integer (an integer of up to 16 bits becomes ``float32`` when combined with
``float16``... see :func:`promote`), the wider of two floats wins, signed and unsigned integers of
the same width promote to the next wider signed integer (``uint64`` with a signed type gives
``float64``, as in NumPy), and ``bool`` promotes to anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import TypeMismatchError

try:  # registers bfloat16, float8_*, int4... with NumPy (np.dtype("bfloat16") works once imported)
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes comes with onnx; only the low-precision types need it
    _ml_dtypes = None

#: storage-only float formats, named as ``ml_dtypes`` names them (one byte an element)
LOWP_FLOATS = (
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
)
_KINDS = ("bool", "int", "uint", "float", "bfloat", *LOWP_FLOATS)
_PATTERN = re.compile(r"^(bool|int|uint|float|bfloat)(\d*)(?:x(\d+))?$")
_LOWP_PATTERN = re.compile(r"^(" + "|".join(sorted(LOWP_FLOATS, key=len, reverse=True)) + r")(?:x(\d+))?$")
_ML_NAMES = ("bfloat16", "int4", "uint4", "int2", "uint2", *LOWP_FLOATS)


#: text, largest and smallest value of each type seen (a type is immutable; there are few of them)
_STR_CACHE: dict[DataType, str] = {}
_MAX_CACHE: dict[DataType, float | int] = {}
_MIN_CACHE: dict[DataType, float | int] = {}


@dataclass(frozen=True, slots=True)
class DataType:
    """A scalar or vector data type: ``kind``, ``bits`` and ``lanes``."""

    kind: str
    bits: int
    lanes: int = 1

    def __str__(self) -> str:
        text = _STR_CACHE.get(self)
        if text is None:
            text = _STR_CACHE[self] = self._text()
        return text

    def _text(self) -> str:
        if self.kind == "bool":
            base = "bool"
        elif self.kind in LOWP_FLOATS:
            base = self.kind
        else:
            base = f"{self.kind}{self.bits}"
        return base if self.lanes == 1 else f"{base}x{self.lanes}"

    __repr__ = __str__

    @property
    def is_float(self) -> bool:
        """True for float16/32/64 and bfloat16."""
        return self.kind in ("float", "bfloat")

    @property
    def is_int(self) -> bool:
        """True for signed and unsigned integers (not bool)."""
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        """True for signed integers and floats."""
        return self.kind in ("int", "float", "bfloat")

    @property
    def is_bool(self) -> bool:
        """True for the boolean type."""
        return self.kind == "bool"

    @property
    def is_lowp_float(self) -> bool:
        """True for the storage-only float formats (``float8_*``, ``float4_e2m1fn``)."""
        return self.kind in LOWP_FLOATS

    @property
    def is_subbyte_int(self) -> bool:
        """True for ``int4``, ``uint4``, ``int2`` and ``uint2`` (one byte each in memory)."""
        return self.kind in ("int", "uint") and self.bits < 8

    @property
    def is_vector(self) -> bool:
        """True when the type has more than one lane."""
        return self.lanes > 1

    @property
    def itemsize(self) -> int:
        """Bytes one element takes in memory (bool takes one byte)."""
        return max(1, self.bits // 8) * self.lanes

    def element_of(self) -> DataType:
        """The scalar type of one lane."""
        return DataType(self.kind, self.bits, 1)

    def with_lanes(self, lanes: int) -> DataType:
        """This type with ``lanes`` lanes."""
        return DataType(self.kind, self.bits, lanes)

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype, so ``np_array.astype(A.dtype)`` works as in the walkthrough."""
        return self.numpy()

    def numpy(self) -> np.dtype:
        """The NumPy dtype of one element (bfloat16 maps to uint16 storage)."""
        if self.kind == "bool":
            return np.dtype(np.bool_)
        if self.kind == "bfloat":
            return np.dtype(np.uint16)
        if self.is_lowp_float or self.is_subbyte_int:
            return _ml_dtype(str(self.element_of()))
        return np.dtype(f"{self.kind}{self.bits}")

    def max_value(self) -> float | int:
        """Largest finite value of the type."""
        v = _MAX_CACHE.get(self)
        if v is None:
            v = _MAX_CACHE[self] = self._max_value()
        return v

    def _max_value(self) -> float | int:
        if self.kind == "bool":
            return 1
        if self.kind == "bfloat":
            return float(np.float32(3.3895314e38))
        if self.is_float:
            return float(np.finfo(self.numpy()).max)
        if self.is_lowp_float:
            return float(_ml_dtypes.finfo(self.numpy()).max)
        return (1 << (self.bits - 1)) - 1 if self.kind == "int" else (1 << self.bits) - 1

    def min_value(self) -> float | int:
        """Smallest finite value of the type."""
        v = _MIN_CACHE.get(self)
        if v is None:
            v = _MIN_CACHE[self] = self._min_value()
        return v

    def _min_value(self) -> float | int:
        if self.kind == "bool":
            return 0
        if self.is_float:
            return -self.max_value()
        if self.is_lowp_float:
            return float(_ml_dtypes.finfo(self.numpy()).min)
        return -(1 << (self.bits - 1)) if self.kind == "int" else 0


def dtype(value: str | DataType | np.dtype | type) -> DataType:
    """Convert a string (``"float32"``, ``"int8x4"``), a NumPy dtype or a :class:`DataType`."""
    if isinstance(value, DataType):
        return value
    if isinstance(value, str):
        text = value.strip()
        lm = _LOWP_PATTERN.match(text)
        if lm is not None:
            return DataType(lm.group(1), 8, int(lm.group(2)) if lm.group(2) else 1)
        m = _PATTERN.match(text)
        if m is None:
            raise TypeMismatchError(
                f"unknown data type {value!r}: use one of float16, bfloat16, float32, float64, "
                "int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool, int4, uint4, int2, uint2, "
                f"{', '.join(LOWP_FLOATS)}"
            )
        kind, bits, lanes = m.group(1), m.group(2), m.group(3)
        nbits = 1 if kind == "bool" else int(bits or 0)
        widths = (2, 4, 8, 16, 32, 64) if kind in ("int", "uint") else (8, 16, 32, 64)
        if kind != "bool" and (nbits not in widths or (kind == "float" and nbits == 8)):
            raise TypeMismatchError(f"unsupported width in data type {value!r}")
        if kind == "bfloat" and nbits != 16:
            raise TypeMismatchError(f"bfloat only exists as bfloat16, not {value!r}")
        return DataType(kind, nbits, int(lanes) if lanes else 1)
    try:
        np_dtype = np.dtype(value)
    except TypeError as exc:
        raise TypeMismatchError(f"cannot interpret {value!r} as a data type") from exc
    if np_dtype == np.bool_:
        return DataType("bool", 1)
    if _ml_dtypes is not None and np_dtype.name in _ML_NAMES and np_dtype == np.dtype(np_dtype.name):
        return dtype(np_dtype.name)
    if np_dtype.kind in "iuf":
        kind = {"i": "int", "u": "uint", "f": "float"}[np_dtype.kind]
        return DataType(kind, np_dtype.itemsize * 8)
    raise TypeMismatchError(f"NumPy dtype {np_dtype} has no ember counterpart")


BOOL = DataType("bool", 1)
INT32 = DataType("int", 32)
INT64 = DataType("int", 64)
FLOAT32 = DataType("float", 32)
FLOAT64 = DataType("float", 64)


def _ml_dtype(name: str) -> np.dtype:
    """The NumPy dtype ``ml_dtypes`` registers under ``name``."""
    if _ml_dtypes is None:
        raise TypeMismatchError(f"data type {name} needs the ml_dtypes package: pip install ml_dtypes")
    return np.dtype(getattr(_ml_dtypes, name))


def promote(a: DataType, b: DataType) -> DataType:
    """The type two operands of types ``a`` and ``b`` are converted to (NumPy's rules, see module doc)."""
    lanes = max(a.lanes, b.lanes)
    a, b = a.element_of(), b.element_of()
    if a == b:
        out = a
    elif a.is_lowp_float or b.is_lowp_float:
        raise TypeMismatchError(
            f"{a} and {b} do not combine: {a if a.is_lowp_float else b} is a storage type that takes no "
            "arithmetic; convert it to float32 first (ember.ops.lowp, or an ONNX Cast)"
        )
    elif a.is_bool:
        out = b
    elif b.is_bool:
        out = a
    elif a.is_float and b.is_float:
        if {a.kind, b.kind} == {"float", "bfloat"} and max(a.bits, b.bits) == 16:
            out = FLOAT32
        else:
            wide = a if a.bits > b.bits else b
            out = wide if wide.bits > 16 or a.kind == b.kind else FLOAT32
    elif a.is_float or b.is_float:
        f, i = (a, b) if a.is_float else (b, a)
        # NumPy: int8/uint8 with float16 -> float16, int16 -> float32, int32/64 -> float64.
        need = {16: 32, 32: 64, 64: 64}.get(i.bits, 16)
        out = (
            f
            if f.bits >= need and f.kind == "float"
            else DataType("float", max(need, 32 if f.kind == "bfloat" else f.bits))
        )
    elif a.kind == b.kind:
        out = a if a.bits >= b.bits else b
    else:
        s, u = (a, b) if a.kind == "int" else (b, a)
        if s.bits > u.bits:
            out = s
        elif u.bits == 64:
            out = FLOAT64
        else:
            out = DataType("int", u.bits * 2)
    return out.with_lanes(lanes)
