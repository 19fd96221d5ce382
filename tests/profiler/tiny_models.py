"""Tiny ONNX models built with onnx.helper for the profiler and CLI tests (fast to compile)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes: list, inputs: list, outputs: list, inits: list[np.ndarray], names: list[str]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "tiny", inputs, outputs,
                          [numpy_helper.from_array(a, n) for a, n in zip(inits, names)])
    # IR version 10: what ONNX Runtime 1.20+ reads (onnx 1.23 writes 14 by default)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(m)
    return m


def two_layers(n: int = 5, d: int = 16, seed: int = 0) -> onnx.ModelProto:
    """x[n, d] -> MatMul -> Relu -> MatMul -> Relu -> y: two identical layers, so the compiled
    model runs one kernel twice (``k0``, then ``k0#2`` as a step)."""
    rng = np.random.default_rng(seed)
    w1, w2 = (rng.standard_normal((d, d)).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
             helper.make_node("Relu", ["h1"], ["a1"], name="relu1"),
             helper.make_node("MatMul", ["a1", "w2"], ["h2"], name="mm2"),
             helper.make_node("Relu", ["h2"], ["y"], name="relu2")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, d])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, d])], [w1, w2], ["w1", "w2"])


def mlp(n: int = 5, d_in: int = 37, d_hidden: int = 23, d_out: int = 11, seed: int = 0) -> onnx.ModelProto:
    """x[n, d_in] -> Gemm(+bias) -> Tanh -> MatMul -> Softmax -> y (four kinds of kernel)."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((d_in, d_hidden)).astype(np.float32) * 0.2
    b1 = rng.standard_normal(d_hidden).astype(np.float32)
    w2 = rng.standard_normal((d_hidden, d_out)).astype(np.float32) * 0.2
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
             helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
             helper.make_node("MatMul", ["t", "w2"], ["l"], name="fc2"),
             helper.make_node("Softmax", ["l"], ["y"], name="softmax", axis=-1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, d_in])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, d_out])], [w1, b1, w2],
                  ["w1", "b1", "w2"])


def two_inputs(n: int = 4, d: int = 6) -> onnx.ModelProto:
    """a[n, d], b[n, d] -> Add -> s; Mul -> p (two inputs, two outputs)."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Mul", ["a", "b"], ["p"], name="mul")]
    vi = helper.make_tensor_value_info
    return _model(nodes, [vi("a", TensorProto.FLOAT, [n, d]), vi("b", TensorProto.FLOAT, [n, d])],
                  [vi("s", TensorProto.FLOAT, [n, d]), vi("p", TensorProto.FLOAT, [n, d])], [], [])


def reshaped(n: int = 6, d: int = 10) -> onnx.ModelProto:
    """x[n, d] -> Relu -> Reshape to [d, n] -> y, and Sigmoid -> z: output y is a view of a
    kernel's result (the plan places it), z a kernel's own output."""
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape"),
             helper.make_node("Sigmoid", ["r"], ["z"], name="sigmoid")]
    return _model(nodes, [vi("x", TensorProto.FLOAT, [n, d])],
                  [vi("y", TensorProto.FLOAT, [d, n]), vi("z", TensorProto.FLOAT, [n, d])],
                  [np.array([d, n], np.int64)], ["shape"])
