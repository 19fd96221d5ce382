"""Random operators (ember/ops/random.py) run on the host: shapes, dtypes, ranges and
distribution statistics over many draws (bounds of six standard errors: a correct generator
fails them with probability below 1e-8), seeds that repeat, and Dropout's arithmetic exactly.
The ONNX reference's own draws cannot be matched (another generator), so nothing compares with it."""

from __future__ import annotations

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the random operator tests build models with onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

N = 200_000


def _model(nodes, inputs, outputs, inits=(), opset=22) -> bytes:
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m.SerializeToString()


def _six_sigma(sample: np.ndarray, mean: float, var: float) -> None:
    se = np.sqrt(var / sample.size)
    assert abs(float(sample.mean(dtype=np.float64)) - mean) < 6 * se, (sample.mean(), mean, se)


@pytest.mark.parametrize("dtype,npdt", [(T.FLOAT, np.float32), (T.DOUBLE, np.float64), (T.FLOAT16, np.float16)])
def test_random_uniform(dtype, npdt):
    low, high = -2.0, 3.0
    m = _model([h.make_node("RandomUniform", [], ["y"], shape=[N], low=low, high=high, dtype=dtype, seed=7.0)],
               [], [h.make_tensor_value_info("y", dtype, [N])])
    (y,) = ember.compile(m)()
    assert y.shape == (N,) and y.dtype == npdt
    assert y.min() >= low and y.max() < high
    _six_sigma(y.astype(np.float64), (low + high) / 2, (high - low) ** 2 / 12)
    # the variance: a uniform's squared deviation has variance (b-a)^4/180
    _six_sigma((y.astype(np.float64) - 0.5) ** 2, ((high - low) ** 2) / 12 + 0.0, (high - low) ** 4 / 180 * 4)


def test_random_normal_like_and_compiled_middle(rng):
    x = rng.standard_normal((400, 500)).astype(np.float32)
    m = _model([h.make_node("RandomNormalLike", ["x"], ["noise"], mean=1.5, scale=0.25, seed=3.0),
                h.make_node("Add", ["x", "noise"], ["y"])],
               [h.make_tensor_value_info("x", T.FLOAT, [400, 500])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    model = ember.compile(m)
    (y,) = model(x)
    noise = (y - x).astype(np.float64)  # the Add is compiled: the noise comes back within rounding
    _six_sigma(noise, 1.5, 0.25**2)
    _six_sigma((noise - 1.5) ** 2, 0.25**2, 2 * 0.25**4)
    assert abs(noise.min() - 1.5) > 0.75  # tails are there (a 3-sigma draw among 200,000)


def test_bernoulli_frequencies():
    p = np.repeat(np.array([0.0, 0.1, 0.5, 0.93, 1.0], np.float32), N // 5)
    m = _model([h.make_node("Bernoulli", ["p"], ["y"], seed=11.0)],
               [h.make_tensor_value_info("p", T.FLOAT, [p.size])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    (y,) = ember.compile(m)(p)
    assert y.dtype == np.float32 and set(np.unique(y)) <= {0.0, 1.0}
    for q in (0.1, 0.5, 0.93):
        _six_sigma(y[p == np.float32(q)], float(np.float32(q)), q * (1 - q))
    assert (y[p == 0] == 0).all() and (y[p == 1] == 1).all()


def test_bernoulli_expanded_form_compiles_the_comparison():
    """RandomUniformLike on the host, Less and Cast compiled: the node suite's expanded Bernoulli."""
    p = np.full(N, 0.3, np.float64)
    m = _model([h.make_node("RandomUniformLike", ["p"], ["u"], dtype=T.DOUBLE, seed=5.0),
                h.make_node("Less", ["u", "p"], ["b"]), h.make_node("Cast", ["b"], ["y"], to=T.DOUBLE)],
               [h.make_tensor_value_info("p", T.DOUBLE, [N])], [h.make_tensor_value_info("y", T.DOUBLE, None)])
    model = ember.compile(m)
    stages = model._specializer.stages
    assert [h.op for h in stages[0].host] == ["RandomUniformLike"] and stages[1].compiled
    (y,) = model(p)
    _six_sigma(y, 0.3, 0.21)


def test_multinomial_frequencies():
    logits = np.log(np.array([[0.2, 0.5, 0.3], [0.9, 0.05, 0.05]], np.float32))
    m = _model([h.make_node("Multinomial", ["x"], ["y"], sample_size=N // 2, dtype=T.INT64, seed=2.0)],
               [h.make_tensor_value_info("x", T.FLOAT, [2, 3])], [h.make_tensor_value_info("y", T.INT64, None)])
    (y,) = ember.compile(m)(logits)
    assert y.shape == (2, N // 2) and y.dtype == np.int64 and y.min() >= 0 and y.max() <= 2
    probs = np.exp(logits.astype(np.float64))
    for b in range(2):
        for c in range(3):
            q = probs[b, c]
            _six_sigma((y[b] == c).astype(np.float64), q, q * (1 - q))


@pytest.mark.parametrize("ratio", [0.2, 0.75])
def test_dropout_training(rng, ratio):
    x = rng.standard_normal((300, 700)).astype(np.float32)
    m = _model([h.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=1)],
               [h.make_tensor_value_info("x", T.FLOAT, [300, 700]), h.make_tensor_value_info("r", T.FLOAT, []),
                h.make_tensor_value_info("t", T.BOOL, [])],
               [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("mask", T.BOOL, None)])
    model = ember.compile(m)
    y, mask = model(x, np.array(ratio, np.float32), np.array(True))
    assert mask.dtype == bool and y.dtype == np.float32
    _six_sigma(mask.astype(np.float64), 1 - ratio, ratio * (1 - ratio))
    np.testing.assert_array_equal(y, x * mask * np.float32(1 / (1 - ratio)))
    y, mask = model(x, np.array(ratio, np.float32), np.array(False))  # inference: the data as it is
    np.testing.assert_array_equal(y, x)
    assert mask.all()


def test_dropout_without_training_mode_stays_compiled(rng):
    m = _model([h.make_node("Dropout", ["x"], ["y"]), h.make_node("Relu", ["y"], ["z"])],
               [h.make_tensor_value_info("x", T.FLOAT, [5, 7])], [h.make_tensor_value_info("z", T.FLOAT, None)])
    model = ember.compile(m)
    assert model.is_static
    x = rng.standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_array_equal(model(x)[0], np.maximum(x, 0))


def test_seeds_repeat_and_calls_differ():
    def draw_twice(seed):
        attrs = {"seed": seed} if seed is not None else {}
        m = _model([h.make_node("RandomUniform", [], ["y"], shape=[64], **attrs)], [],
                   [h.make_tensor_value_info("y", T.FLOAT, [64])])
        model = ember.compile(m)
        return model()[0], model()[0]

    a1, a2 = draw_twice(4.0)
    b1, b2 = draw_twice(4.0)
    np.testing.assert_array_equal(a1, b1)  # the same seed: the same stream from compile to compile
    np.testing.assert_array_equal(a2, b2)
    assert not np.array_equal(a1, a2)  # successive calls draw on
    c1, _ = draw_twice(4.5)
    assert not np.array_equal(a1, c1)
    u1, _ = draw_twice(None)
    u2, _ = draw_twice(None)
    assert not np.array_equal(u1, u2)  # no seed: fresh entropy


def test_bad_arguments_name_the_operator():
    m = _model([h.make_node("Bernoulli", ["p"], ["y"])], [h.make_tensor_value_info("p", T.FLOAT, [3])],
               [h.make_tensor_value_info("y", T.FLOAT, None)])
    with pytest.raises(ember.OpError, match=r"Bernoulli: every probability must lie in \[0, 1\]"):
        ember.compile(m)(np.array([0.5, 1.5, 0.0], np.float32))
    m = _model([h.make_node("Dropout", ["x", "r", "t"], ["y"])],
               [h.make_tensor_value_info("x", T.FLOAT, [3]), h.make_tensor_value_info("r", T.FLOAT, []),
                h.make_tensor_value_info("t", T.BOOL, [])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    with pytest.raises(ember.OpError, match=r"Dropout: ratio 1.0 must lie in \[0, 1\)"):
        ember.compile(m)(np.ones(3, np.float32), np.array(1.0, np.float32), np.array(True))
    m = _model([h.make_node("RandomNormal", [], ["y"], shape=[2], dtype=T.INT32)], [],
               [h.make_tensor_value_info("y", T.INT32, None)])
    with pytest.raises(ember.GraphError, match="RandomNormal.*unsupported type tensor.int32"):
        ember.compile(m)  # rejected by validation, as ONNX Runtime rejects it
