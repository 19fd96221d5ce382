"""Expressions: operator overloading, literal typing, constants, casts, errors and the printer."""

from __future__ import annotations

import numpy as np
import pytest

from ember import te
from ember.errors import EmberError
from ember.ir import expr as E


def _load(dt: str):
    return te.placeholder((4,), dtype=dt, name=f"T_{dt}")[0]


@pytest.mark.parametrize("dt", ["int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
                                "float64"])
def test_int_literal_takes_the_tensor_type(dt):
    x = _load(dt)
    for e in (x + 1, 1 + x, x * 2, 2 * x, x - 3, 3 - x):
        assert str(e.dtype) == dt


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32", "float64"])
def test_float_literal_keeps_float_tensor_type(dt):
    assert str((_load(dt) * 2.5).dtype) == dt


@pytest.mark.parametrize("dt", ["int8", "uint16", "int32", "int64", "uint64"])
def test_float_literal_on_integer_tensor_gives_float32(dt):
    # Regression: int32/int64 + 1.5 gave float64 (NumPy's array rule) although the documented
    # rule for literals is float32 for any integer tensor.
    assert str((_load(dt) + 1.5).dtype) == "float32"


def test_int_literal_that_does_not_fit_widens():
    x = _load("int8")
    assert str((x + 1000).dtype) == "int32"
    assert str((_load("uint8") + 255).dtype) == "uint8"
    assert str((_load("uint8") + 256).dtype) == "int32"


def test_mixed_tensor_types_promote_like_numpy():
    assert str((_load("int8") + _load("float16")).dtype) == "float16"
    assert str((_load("int16") + _load("float16")).dtype) == "float32"
    assert str((_load("int32") * _load("float32")).dtype) == "float64"
    assert str((_load("uint8") + _load("int8")).dtype) == "int16"
    assert str((_load("uint64") + _load("int64")).dtype) == "float64"
    assert str((_load("bfloat16") + _load("float16")).dtype) == "float32"


def test_true_division_of_integers_is_float():
    assert str((_load("int32") / 2).dtype) == "float32"
    assert str((_load("int64") / 2).dtype) == "float64"
    assert str((_load("float16") / 2).dtype) == "float16"
    assert str((_load("int32") // 2).dtype) == "int32"


def test_bool_arithmetic_becomes_int32_and_logic_stays_bool():
    b = _load("bool")
    assert str((b + b).dtype) == "int32"
    assert str((b & b).dtype) == "bool"
    assert str((b | (_load("int32") < 3)).dtype) == "bool"
    assert str((~b).dtype) == "bool"


def test_comparisons_build_bool_nodes():
    i = te.var("i")
    cases = ((i < 3, E.LT), (i <= 3, E.LE), (i > 3, E.LT), (i >= 3, E.LE), (i == 3, E.EQ), (i != 3, E.NE))
    for e, cls in cases:
        assert isinstance(e, cls) and e.dtype.is_bool


def test_symbolic_truth_value_raises_a_named_error():
    i = te.var("i")
    with pytest.raises(EmberError, match="if_then_else"):
        if i < 3:
            pass
    with pytest.raises(EmberError):
        bool(i + 1)


def test_const_and_fit_checks():
    assert te.const(3).dtype == E.INT32
    assert str(te.const(2**40).dtype) == "int64"
    assert str(te.const(1.5).dtype) == "float32"
    assert str(te.const(True).dtype) == "bool"
    assert str(te.const(3, "float16").dtype) == "float16"
    with pytest.raises(EmberError, match="does not fit"):
        te.const(300, "int8")
    with pytest.raises(EmberError, match="does not fit"):
        te.const(-1, "uint32")
    v = te.const(1.0, "float32x4")
    assert isinstance(v, E.Broadcast) and v.lanes == 4


def test_casts():
    x = _load("float32")
    c = te.cast("int8", x)
    assert isinstance(c, E.Cast) and str(c.dtype) == "int8"
    assert te.cast("float32", x) is x  # no node for the same type
    assert str(x.astype("float64").dtype) == "float64"
    folded = te.cast("int8", te.const(5))
    assert isinstance(folded, E.IntImm) and folded.value == 5 and str(folded.dtype) == "int8"


def test_numpy_scalars_in_expressions():
    x = _load("int8")
    assert str((x + np.int64(3)).dtype) == "int64"
    assert str((x + np.int8(3)).dtype) == "int8"


def test_unsupported_operand():
    with pytest.raises(EmberError, match="cannot use"):
        _load("float32") + "a"


def test_tensor_indexing_errors():
    A = te.placeholder((4, 5), name="A")
    with pytest.raises(EmberError, match="2 dimension"):
        A[1]
    with pytest.raises(EmberError, match="must be integers"):
        A[1.5, 2]


def test_select_and_if_then_else_unify_branch_types():
    x = _load("float16")
    e = te.if_then_else(x > 0, x, 0)
    assert isinstance(e, E.Select) and str(e.dtype) == "float16"
    e2 = te.select(_load("int32") > 0, 1.5, _load("int32"))
    assert str(e2.dtype) == "float32"


def test_printer_is_readable():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    i = te.var("i")
    text = str(te.if_then_else(i < n, A[i] * 2.0, 0.0) + te.exp(A[i]))
    assert text == "(select((i < n), (A[i] * 2.0), 0.0) + exp(A[i]))"
    assert str(E.truncdiv(i, 3)) == "truncdiv(i, 3)"
    assert str(E.floormod(i, 3)) == "floormod(i, 3)"
    assert str(te.min_value_of("float32")) == "-inf"
    assert str(te.cast("int8", i)) == "int8(i)"


def test_vars_compare_by_identity():
    a, b = te.var("n"), te.var("n")
    assert a is not b and a.uid != b.uid
    d = {a: 1}
    assert d.get(b) is None and d[a] == 1


def test_a_copied_var_is_a_new_variable():
    """A copy of a variable (pickle: Dask sends a tuning task to its workers; copy) is a new variable
    with a number of its own, so the simplifier never takes it for another variable of the process
    that shares its number (``i0*16384 + i2.outer*32`` was simplified to ``i2.outer*16416``)."""
    import copy
    import pickle

    from ember.arith.linear import structural_key
    from ember.arith.simplifier import simplify

    a = te.var("i0")
    for b in (pickle.loads(pickle.dumps(a)), copy.copy(a), copy.deepcopy(a)):
        assert b is not a and b.uid != a.uid and (b.name, b.dtype) == (a.name, a.dtype)
        assert structural_key(b) != structural_key(a)
        assert str(simplify(a * 16384 + b * 32)) == "((i0 * 16384) + (i0 * 32))"
    e = pickle.loads(pickle.dumps(a * 4 + a))  # one copy per variable: the expression's two uses stay one
    assert e.a.a is e.b and e.b is not a
    assert str(simplify(e)) == "(i0 * 5)"
    assert E.Var("n").uid > a.uid
    with pytest.raises(TypeError):
        E.Var("n", E.INT32, a.uid)  # the number is not an argument
