"""``Model.run(inputs, outputs=...)``: outputs written into arrays the caller allocated (I/O
binding), checked for shape, dtype, layout and device."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.errors import ArgumentError
from tests.profiler.tiny_models import reshaped, two_inputs


@pytest.fixture(scope="module")
def add_mul() -> ember.Model:
    return ember.compile(two_inputs(4, 6), use_cache=False)


def test_outputs_are_written_in_place(add_mul, rng) -> None:
    a, b = (rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2))
    s, p = np.full((4, 6), np.nan, np.float32), np.full((4, 6), np.nan, np.float32)  # poisoned
    got = add_mul.run(a, b, outputs=[s, p])
    assert got[0] is s and got[1] is p
    np.testing.assert_array_equal(s, a + b)  # one float32 operation: exact
    np.testing.assert_array_equal(p, a * b)
    # inputs as one dict, outputs by name, one left unbound (returned as a fresh array)
    p2 = np.full((4, 6), np.nan, np.float32)
    got = add_mul.run({"a": b, "b": a}, outputs={"p": p2})
    assert got[1] is p2 and got[0] is not s
    np.testing.assert_array_equal(got[0], a + b)
    np.testing.assert_array_equal(p2, a * b)


def test_outputs_the_plan_places_are_copied_into_the_callers_array(rng) -> None:
    m = ember.compile(reshaped(6, 10), use_cache=False)
    x = rng.standard_normal((6, 10)).astype(np.float32)
    y, z = np.full((10, 6), np.nan, np.float32), np.full((6, 10), np.nan, np.float32)
    got = m.run(x, outputs=[y, z])
    assert got[0] is y and got[1] is z
    want_y, want_z = m(x)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(z, want_z)
    np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(10, 6))


@pytest.mark.parametrize("outputs, message", [
    (lambda: [np.empty((4, 5), np.float32), None], "output 's': expected shape (4, 6) and dtype float32, "
                                                   "got shape (4, 5) and dtype float32"),
    (lambda: [None, np.empty((4, 6), np.float64)], "output 'p': expected shape (4, 6) and dtype float32, "
                                                   "got shape (4, 6) and dtype float64"),
    (lambda: [np.empty((6, 4), np.float32).T, None], "output 's': the array must be C-contiguous and writeable"),
    (lambda: [np.broadcast_to(np.float32(0), (4, 6)), None], "must be C-contiguous and writeable"),
    (lambda: [np.empty((4, 6), np.float32)], "the model has 2 output(s) (s, p), got 1 array(s)"),
    (lambda: {"q": np.empty((4, 6), np.float32)}, "the model has no output 'q' (outputs: s, p)"),
    (lambda: np.empty((4, 6), np.float32), "outputs= takes a list (in output order) or a dict"),
    (lambda: [[0.0] * 6] * 4 + [None] * 0, "the model has 2 output(s)"),
    (lambda: [ember.nd.array(np.zeros((4, 6), np.float32)), None], "output 's': expected a NumPy array with "
                                                                   "shape (4, 6) and dtype float32, got a NDArray"),
])
def test_bad_outputs_are_argument_errors(add_mul, outputs, message) -> None:
    a = np.zeros((4, 6), np.float32)
    with pytest.raises(ArgumentError) as err:
        add_mul.run(a, a, outputs=outputs())
    assert message in str(err.value)


def test_outputs_sharing_memory_with_each_other_or_an_input_are_refused(add_mul) -> None:
    a, b = np.ones((4, 6), np.float32), np.ones((4, 6), np.float32)
    y = np.empty((4, 6), np.float32)
    with pytest.raises(ArgumentError, match="outputs 's' and 'p' are given the same"):
        add_mul.run(a, b, outputs=[y, y])
    with pytest.raises(ArgumentError, match="output 's' is given memory of an input"):
        add_mul.run(a, b, outputs=[a, None])
