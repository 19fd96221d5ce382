"""Operators ember runs through their ONNX function definition (ember/frontend/functions.py):
``ai.onnx.preview.FlexAttention`` with grouped heads, its scale, and ``score_mod``/``prob_mod``
subgraphs, on fresh inputs at sizes no tile divides, against NumPy in float64 and the ONNX
reference implementation."""

from __future__ import annotations

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the function expansion tests build models with onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from ember.frontend.functions import expand_functions  # noqa: E402


def _flex(q_shape, k_shape, v_shape, dtype=T.FLOAT, **attrs) -> bytes:
    node = h.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", **attrs)
    g = h.make_graph([node], "g", [h.make_tensor_value_info("q", dtype, q_shape),
                                   h.make_tensor_value_info("k", dtype, k_shape),
                                   h.make_tensor_value_info("v", dtype, v_shape)],
                     [h.make_tensor_value_info("y", dtype, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 26), h.make_opsetid("ai.onnx.preview", 1)])
    m.ir_version = 13
    return m.SerializeToString()


def _mod(name: str, nodes, inits=()) -> object:
    io = [h.make_tensor_value_info("s", T.FLOAT, None)], [h.make_tensor_value_info("out", T.FLOAT, None)]
    return h.make_graph(nodes, name, io[0], io[1], list(inits))


def _attention(q, k, v, scale=None, score=None, prob=None):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    s = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    if score is not None:
        s = score(s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    if prob is not None:
        p = prob(p)
    return p @ v


def _inputs(rng, q_shape, k_shape, v_shape, dt=np.float32):
    return [rng.standard_normal(s).astype(dt) for s in (q_shape, k_shape, v_shape)]


@pytest.mark.parametrize("shapes", [((2, 4, 7, 16), (2, 4, 9, 16), (2, 4, 9, 16)),
                                    ((1, 6, 5, 12), (1, 2, 11, 12), (1, 2, 11, 20)),  # grouped heads, V wider
                                    ((3, 1, 1, 8), (3, 1, 13, 8), (3, 1, 13, 8))])
def test_flex_attention_plain_and_scaled(rng, shapes):
    for scale in (None, 0.3):
        attrs = {} if scale is None else {"scale": scale}
        m = _flex(*shapes, **attrs)
        q, k, v = _inputs(rng, *shapes)
        (y,) = ember.compile(m)(q, k, v)
        # float32 attention over at most 13 keys against float64
        np.testing.assert_allclose(y, _attention(q, k, v, scale), rtol=1e-5, atol=1e-5)


def test_flex_attention_mods(rng):
    cap = np.array(5.0, np.float32)
    soft_cap = _mod("cap", [h.make_node("Div", ["s", "c"], ["d"]), h.make_node("Tanh", ["d"], ["t"]),
                            h.make_node("Mul", ["t", "c"], ["out"])], [onnx.numpy_helper.from_array(cap, "c")])
    half = _mod("half", [h.make_node("Mul", ["s", "c"], ["out"])],
                [onnx.numpy_helper.from_array(np.array(0.5, np.float32), "c")])
    shapes = ((2, 3, 6, 8), (2, 3, 10, 8), (2, 3, 10, 8))
    m = _flex(*shapes, score_mod=soft_cap, prob_mod=half)
    q, k, v = _inputs(rng, *shapes)
    (y,) = ember.compile(m)(q, k, v)
    want = _attention(q, k, v, score=lambda s: np.tanh(s / 5.0) * 5.0, prob=lambda p: p * 0.5)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    (ref,) = ReferenceEvaluator(onnx.load_from_string(m)).run(None, {"q": q, "k": k, "v": v})
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_flex_attention_double_and_half(rng):
    shapes = ((1, 2, 5, 16), (1, 2, 7, 16), (1, 2, 7, 16))
    q, k, v = _inputs(rng, *shapes, dt=np.float64)
    (y,) = ember.compile(_flex(*shapes, dtype=T.DOUBLE))(q, k, v)
    np.testing.assert_allclose(y, _attention(q, k, v), rtol=1e-12, atol=1e-12)
    q16, k16, v16 = (a.astype(np.float16) for a in (q, k, v))
    (y16,) = ember.compile(_flex(*shapes, dtype=T.FLOAT16))(q16, k16, v16)
    assert y16.dtype == np.float16
    # float16 inputs and output: a few units of float16's 2**-11 relative precision
    np.testing.assert_allclose(y16.astype(np.float64), _attention(q16, k16, v16), rtol=5e-3, atol=5e-3)


def test_models_of_ember_operators_are_untouched():
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    assert expand_functions(m) is m


def test_an_operator_without_definition_stays_unsupported():
    g = h.make_graph([h.make_node("NoSuchOp", ["x"], ["y"], domain="ai.onnx.preview")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [3])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 26), h.make_opsetid("ai.onnx.preview", 1)])
    m.ir_version = 13
    with pytest.raises(ember.UnsupportedOpError, match="NoSuchOp"):
        ember.compile(m.SerializeToString())
