"""A small ONNX model for the device and packaging tests, and its NumPy answer."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the device tests build their model with onnx (ember[onnx])")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

#: Sizes no tile divides.
N, K, M = 3, 37, 29


def mlp(rng: np.random.Generator) -> tuple[bytes, dict[str, np.ndarray]]:
    """``relu(x @ w + b) * 2 - x[:, :M]`` as ONNX bytes, with its weights (``w``, ``b``)."""
    w = rng.standard_normal((K, M)).astype(np.float32)
    b = rng.standard_normal((M,)).astype(np.float32)
    two = np.array(2.0, np.float32)
    nodes = [
        h.make_node("MatMul", ["x", "w"], ["xw"]),
        h.make_node("Add", ["xw", "b"], ["z"]),
        h.make_node("Relu", ["z"], ["r"]),
        h.make_node("Mul", ["r", "two"], ["r2"]),
        h.make_node("Slice", ["x", "starts", "ends", "axes"], ["xs"]),
        h.make_node("Sub", ["r2", "xs"], ["y"]),
    ]
    inits = [nh.from_array(w, "w"), nh.from_array(b, "b"), nh.from_array(two, "two"),
             nh.from_array(np.array([0], np.int64), "starts"), nh.from_array(np.array([M], np.int64), "ends"),
             nh.from_array(np.array([1], np.int64), "axes")]
    g = h.make_graph(nodes, "mlp", [h.make_tensor_value_info("x", T.FLOAT, [N, K])],
                     [h.make_tensor_value_info("y", T.FLOAT, [N, M])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString(), {"w": w, "b": b}


def mlp_reference(x: np.ndarray, weights: dict[str, np.ndarray]) -> np.ndarray:
    """The model's answer in float64."""
    x64 = x.astype(np.float64)
    z = x64 @ weights["w"].astype(np.float64) + weights["b"]
    return np.maximum(z, 0) * 2 - x64[:, :M]
