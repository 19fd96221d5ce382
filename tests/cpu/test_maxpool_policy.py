"""The CPU layout policy runs a MaxPool between blocked convolutions on the blocked layout
(``ember.MaxPoolNCHWc``): no layout conversion around it, outputs equal to ONNX Runtime's."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import ember

ort = pytest.importorskip("onnxruntime", reason="the reference is ONNX Runtime")


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_maxpool_between_convolutions_stays_blocked(target: str, rng) -> None:
    w1 = nh.from_array((rng.standard_normal((24, 3, 3, 3)) * 0.3).astype(np.float32), "w1")
    w2 = nh.from_array((rng.standard_normal((20, 24, 1, 1)) * 0.3).astype(np.float32), "w2")
    nodes = [h.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             h.make_node("Conv", ["p", "w2"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 37, 41])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [w1, w2])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    data = m.SerializeToString()
    model = ember.compile(data, target=target)
    assert "maxpoolnchwc" in model.get_source("ir").lower()
    x = rng.standard_normal((1, 3, 37, 41)).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    (got,) = model(x=x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # float32 sums in another order
