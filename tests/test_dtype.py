"""Data types: parsing, properties and the NumPy-like promotion table (docs/numerics.md)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ember.errors import EmberError
from ember.ir import dtype, promote
from ember.ir.dtypes import DataType

NUMPY_TYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64"]
ALL_TYPES = NUMPY_TYPES + ["bfloat16"]


@pytest.mark.parametrize("name", ALL_TYPES)
def test_parse_roundtrip(name):
    t = dtype(name)
    assert str(t) == name
    assert dtype(t) is t
    assert t.lanes == 1
    vec = dtype(name + "x8") if name != "bool" else dtype("boolx8")
    assert vec.lanes == 8 and vec.element_of() == t and str(vec.element_of()) == name


@pytest.mark.parametrize("name", NUMPY_TYPES)
def test_numpy_dtype_conversion(name):
    assert dtype(np.dtype(name)) == dtype(name)
    assert dtype(name).numpy() == np.dtype(name)
    assert dtype(name).itemsize == np.dtype(name).itemsize


def test_bfloat16_storage_and_limits():
    t = dtype("bfloat16")
    assert t.is_float and t.bits == 16 and t.itemsize == 2
    assert t.numpy() == np.dtype(np.uint16)  # stored as raw bits
    assert t.max_value() == pytest.approx(3.3895314e38, rel=1e-7)
    assert t.min_value() == -t.max_value()


@pytest.mark.parametrize("bad", ["float8", "int7", "bfloat32", "complex64", "float", "int128", ""])
def test_unknown_types_are_rejected_with_a_clear_error(bad):
    with pytest.raises(EmberError) as info:
        dtype(bad)
    assert repr(bad) in str(info.value)  # the message names what was given


def test_numpy_types_without_counterpart():
    with pytest.raises(EmberError, match="no ember counterpart"):
        dtype(np.dtype("complex64"))


@pytest.mark.parametrize("a,b", list(itertools.product(NUMPY_TYPES, NUMPY_TYPES)))
def test_promotion_matches_numpy_for_arrays(a, b):
    """For NumPy's types, ``promote`` is exactly NumPy's array-array promotion."""
    expected = np.result_type(np.dtype(a), np.dtype(b))
    assert str(promote(dtype(a), dtype(b))) == str(expected)


BF16_TABLE = {
    "bool": "bfloat16", "bfloat16": "bfloat16", "float16": "float32", "float32": "float32",
    "float64": "float64", "int8": "float32", "uint8": "float32", "int16": "float32", "uint16": "float32",
    "int32": "float64", "uint32": "float64", "int64": "float64", "uint64": "float64",
}


@pytest.mark.parametrize("other", ALL_TYPES)
def test_bfloat16_promotion_table(other):
    """bfloat16 has no NumPy counterpart; the documented table (docs/numerics.md) applies."""
    assert str(promote(dtype("bfloat16"), dtype(other))) == BF16_TABLE[other]
    assert str(promote(dtype(other), dtype("bfloat16"))) == BF16_TABLE[other]


@pytest.mark.parametrize("a,b", list(itertools.combinations(ALL_TYPES, 2)))
def test_promotion_is_commutative_and_keeps_lanes(a, b):
    ta, tb = dtype(a), dtype(b)
    assert promote(ta, tb) == promote(tb, ta)
    assert promote(ta.with_lanes(4), tb) == promote(ta, tb).with_lanes(4)


def test_value_ranges():
    for name in ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]:
        info = np.iinfo(np.dtype(name))
        assert dtype(name).min_value() == info.min and dtype(name).max_value() == info.max
    for name in ["float16", "float32", "float64"]:
        assert dtype(name).max_value() == float(np.finfo(np.dtype(name)).max)
    assert isinstance(dtype("bool"), DataType) and dtype("bool").max_value() == 1
