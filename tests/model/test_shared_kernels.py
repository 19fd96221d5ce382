"""Kernels identical but for their name are generated once (``share_identical_kernels``): a
network's repeated layers call one function, the answers stay ONNX Runtime's, and a saved model
round-trips."""

from __future__ import annotations

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the test builds a model with onnx")
ort = pytest.importorskip("onnxruntime", reason="the test compares with ONNX Runtime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def _model(rng: np.random.Generator, layers: int, widths: list[int]) -> bytes:
    nodes, inits, cur = [], [], "x"
    for i in range(layers):
        cin, cout = widths[i], widths[i + 1]
        inits.append(nh.from_array(rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * 0.2, f"w{i}"))
        nodes += [h.make_node("Conv", [cur, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  h.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        cur = f"r{i}"
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, widths[0], 13, 11])],
                     [h.make_tensor_value_info(cur, T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_repeated_layers_share_one_kernel(rng, tmp_path) -> None:
    # Layers 1-3 are alike (16 -> 16 channels); layer 0 (8 -> 16) differs in its weights' shape.
    model = _model(rng, 4, [8, 16, 16, 16, 16])
    # In NCHW: the layout pass would add conversions at both ends (the last layer's kernel then
    # differs from the others by its fused conversion), which this count does not want to track.
    with ember.transform.PassContext(disabled_passes=["AlterLayout"]):
        compiled = ember.compile(model, target="llvm")
    steps = [s["func"] for s in compiled._program.plan["steps"] if s["kind"] == "kernel"]
    assert len(steps) == 4 and len(set(steps)) == 2 and len(compiled._program.functions) == 2
    x = rng.standard_normal((1, 8, 13, 11)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    (got,) = compiled(x=x)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    # Each step keeps its own profile entry: the shared kernel's later calls are "name#2", "name#3".
    names = [name for name, _ in compiled.profile(x=x)]
    assert len(names) == 4 and names[2] == f"{steps[1]}#2" and names[3] == f"{steps[1]}#3"
    compiled.save(tmp_path / "m.ember")
    (again,) = ember.load(tmp_path / "m.ember")(x=x)
    np.testing.assert_array_equal(again, got)
