"""Layouts (``ember.graph.layouts.Layout``) and the ``ember.LayoutTransform`` operator: parsing,
shapes, and the compiled operator against NumPy transposes, reshapes and pads, at channel counts
no block divides; constant inputs folded at compile time."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.graph import Graph, Node, TensorInfo
from ember.graph.layouts import LAYOUT_TRANSFORM, Layout
from ember.graph.passes import default_graph_pipeline
from ember.ops.layout_transform import transform_layout
from tests.ops.oprun import run_op

RNG = np.random.default_rng(7)


# -- the Layout value type ----------------------------------------------------------------------------
def test_layout_parses_tvm_strings() -> None:
    lay = Layout("NCHW16c")
    assert lay.axes == ("N", "C", "H", "W", "c")
    assert lay.primal == "NCHW" and lay.splits == {"C": 16} and lay.ndim == 5
    assert lay.factor("C") == 16 and lay.factor("H") is None and not lay.is_plain
    w = Layout("OIHW16i16o")
    assert w.primal == "OIHW" and w.splits == {"I": 16, "O": 16}
    assert Layout("NHWC").is_plain and Layout("NHWC").primal == "NHWC"
    assert str(lay) == "NCHW16c" and repr(lay) == "Layout('NCHW16c')"
    assert Layout(lay) == lay and Layout(b"NCHW16c") == lay


def test_layout_equality_and_hash() -> None:
    assert Layout("NCHW4c") == Layout("NCHW4c") and hash(Layout("NCHW4c")) == hash(Layout("NCHW4c"))
    assert Layout("NCHW4c") != Layout("NCHW8c") and Layout("NCHW") != "NCHW"
    assert len({Layout("NCHW"), Layout("NCHW"), Layout("NHWC")}) == 2


def test_layout_same_primal() -> None:
    assert Layout("NCHW").is_same_primal("NHWC")
    assert Layout("NCHW").is_same_primal(Layout("NCHW8c"))
    assert not Layout("NCHW").is_same_primal("OIHW")
    assert not Layout("NCHW").is_same_primal("NCH")


def test_layout_shape_of_pads_blocked_axes() -> None:
    assert Layout("NCHW").shape_of((2, 13, 7, 5)) == (2, 13, 7, 5)
    assert Layout("NCHW8c").shape_of((2, 13, 7, 5)) == (2, 2, 7, 5, 8)  # 13 channels -> 2 blocks of 8
    assert Layout("NCHW4c").shape_of((2, 16, 7, 5)) == (2, 4, 7, 5, 4)
    assert Layout("NHWC").shape_of((2, 7, 5, 13)) == (2, 7, 5, 13)  # primal order of the layout itself
    assert Layout("OIHW4i4o").shape_of((13, 6, 3, 3)) == (4, 2, 3, 3, 4, 4)
    assert Layout("NCHW8c").pads((1, 13, 1, 1)) and not Layout("NCHW8c").pads((1, 16, 1, 1))
    assert Layout("NCHW8c").primal_shape_of((2, 2, 7, 5, 8)) == (2, 16, 7, 5)
    assert Layout("NCHW4c").rename({"N": "A", "C": "B"}) == Layout("ABHW4b")
    with pytest.raises(ember.LayoutError, match="4 primal axes"):
        Layout("NCHW").shape_of((2, 3))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "not a layout"),
        ("NCHW16", "not a layout"),
        ("NCHWc", "no factor"),
        ("NC16HW", "has a factor"),
        ("NCHW4c4c", "split more than once"),
        ("NCHW4d", "lacks"),
        ("NCCHW", "appears twice"),
        ("NCHW0c", ">= 1"),
        ("NC-HW", "not a layout"),
        ("NCHW 4c", "not a layout"),
    ],
)
def test_bad_layout_strings_raise_layout_error(text: str, why: str) -> None:
    with pytest.raises(ember.LayoutError, match=why):
        Layout(text)


def test_layout_of_a_non_string_raises() -> None:
    with pytest.raises(ember.LayoutError, match="is a string"):
        Layout(4)  # type: ignore[arg-type]


# -- the operator against NumPy -----------------------------------------------------------------------
def _lt(x: np.ndarray, src: str, dst: str, primal: tuple[int, ...] | None = None) -> np.ndarray:
    attrs: dict[str, object] = {"src_layout": src, "dst_layout": dst}
    if primal is not None:
        attrs["primal_shape"] = list(primal)
    (y,) = run_op(LAYOUT_TRANSFORM, [x], attrs)
    return y


def _block_c(x: np.ndarray, f: int) -> np.ndarray:
    """NumPy NCHW -> NCHW<f>c: pad C with zeros to a multiple of f, split, move the block last."""
    n, c, h, w = x.shape
    cp = -(-c // f) * f
    xp = np.pad(x, ((0, 0), (0, cp - c), (0, 0), (0, 0)))
    return np.ascontiguousarray(xp.reshape(n, cp // f, f, h, w).transpose(0, 1, 3, 4, 2))


def _unblock_c(y: np.ndarray, c: int) -> np.ndarray:
    n, cb, h, w, f = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cb * f, h, w)[:, :c]


def test_nchw_to_nhwc_and_back() -> None:
    x = RNG.standard_normal((2, 13, 3, 5)).astype(np.float32)
    y = _lt(x, "NCHW", "NHWC")
    np.testing.assert_array_equal(y, x.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(_lt(y, "NHWC", "NCHW"), x)


def test_nchw_to_nchw8c_pads_13_channels_with_zeros() -> None:
    x = RNG.standard_normal((2, 13, 3, 5)).astype(np.float32)
    y = _lt(x, "NCHW", "NCHW8c")
    assert y.shape == (2, 2, 3, 5, 8)
    np.testing.assert_array_equal(y, _block_c(x, 8))
    assert not y[:, 1, :, :, 5:].any()  # channels 13..15: the padding is zero
    back = _lt(y, "NCHW8c", "NCHW", (2, 13, 3, 5))
    np.testing.assert_array_equal(back, x)
    np.testing.assert_array_equal(back, _unblock_c(y, 13))


def test_nchw8c_to_nchw4c_and_back() -> None:
    x = RNG.standard_normal((1, 13, 4, 3)).astype(np.float32)
    b8 = _block_c(x, 8)
    b4 = _lt(b8, "NCHW8c", "NCHW4c", (1, 13, 4, 3))
    np.testing.assert_array_equal(b4, _block_c(x, 4))  # 4 blocks: 16 -> the last has 3 zeros
    np.testing.assert_array_equal(_lt(b4, "NCHW4c", "NCHW8c", (1, 13, 4, 3)), b8)


def test_blocked_to_blocked_with_a_factor_that_overruns_the_source() -> None:
    # 13 channels in blocks of 5 span 15 positions, more than the 13 a plain source holds: the
    # padded positions must not be read
    x = RNG.standard_normal((1, 13, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(_lt(x, "NCHW", "NCHW5c"), _block_c(x, 5))
    b4 = _block_c(x, 4)
    np.testing.assert_array_equal(_lt(b4, "NCHW4c", "NCHW5c", (1, 13, 2, 3)), _block_c(x, 5))


def test_oihw_to_oihw4i4o_and_back() -> None:
    w = RNG.standard_normal((13, 6, 3, 2)).astype(np.float32)
    y = _lt(w, "OIHW", "OIHW4i4o")
    wp = np.pad(w, ((0, 3), (0, 2), (0, 0), (0, 0)))  # O 13 -> 16, I 6 -> 8
    ref = wp.reshape(4, 4, 2, 4, 3, 2).transpose(0, 2, 4, 5, 3, 1)  # O, I, H, W, i, o
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(_lt(y, "OIHW4i4o", "OIHW", (13, 6, 3, 2)), w)


def test_integer_tensors_round_trip() -> None:
    x = RNG.integers(-100, 100, (3, 7, 2, 2)).astype(np.int32)
    y = _lt(x, "NCHW", "NHWC4c")
    assert y.shape == (3, 2, 2, 2, 4)
    np.testing.assert_array_equal(_lt(y, "NHWC4c", "NCHW", (3, 2, 2, 7)), x)


def test_reference_evaluation_matches_numpy() -> None:
    x = RNG.standard_normal((2, 13, 3, 5)).astype(np.float32)
    p = ember.te.placeholder(x.shape, "float32", name="x")
    y = transform_layout(p, "NCHW", "NCHW8c")
    (v,) = ember.te.evaluate([y], {p: x})
    np.testing.assert_array_equal(v, _block_c(x, 8))


def test_operator_errors_name_the_node() -> None:
    x = np.zeros((1, 4, 2, 2), np.float32)
    with pytest.raises(ember.LayoutError, match="node 'n0'.*no factor"):
        _lt(x, "NCHW", "NCHWc")
    with pytest.raises(ember.LayoutError, match="primal axes NCHW and OIHW differ"):
        _lt(x, "NCHW", "OIHW")
    with pytest.raises(ember.LayoutError, match="not in layout NCHW4c"):
        _lt(x, "NCHW4c", "NCHW")
    with pytest.raises(ember.OpError, match="dst_layout"):
        run_op(LAYOUT_TRANSFORM, [x], {"src_layout": "NCHW"})


# -- constants fold at compile time -------------------------------------------------------------------
def test_transformed_constant_is_folded_not_computed() -> None:
    x = RNG.standard_normal((2, 13, 3, 5)).astype(np.float32)
    w = RNG.standard_normal((1, 13, 3, 5)).astype(np.float32)
    nodes = [
        Node(LAYOUT_TRANSFORM, ["w"], ["wt"], {"src_layout": "NCHW", "dst_layout": "NCHW4c"}, "tw"),
        Node(LAYOUT_TRANSFORM, ["x"], ["xt"], {"src_layout": "NCHW", "dst_layout": "NCHW4c"}, "tx"),
        Node("Add", ["xt", "wt"], ["s"], {}, "add"),
        Node(LAYOUT_TRANSFORM, ["s"], ["y"],
             {"src_layout": "NCHW4c", "dst_layout": "NCHW", "primal_shape": [2, 13, 3, 5]}, "ty"),
    ]
    g = Graph(["x"], ["y"], nodes, {"x": TensorInfo(x.shape, "float32")}, {"w": w})
    opt = default_graph_pipeline()(g)
    assert "wt" in opt.consts and "w" not in opt.consts  # the weight is stored blocked
    np.testing.assert_array_equal(opt.consts["wt"], _block_c(w, 4))
    assert [n.name for n in opt.nodes] == ["tx", "add", "ty"]
    model = ember.compile(g)
    np.testing.assert_array_equal(model(x)[0], x + w)
    assert "wt" in model.consts
