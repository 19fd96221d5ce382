"""Layout transforms of constants at compile time: a matrix product's constant right operand is
packed into the GEMM's column-panel layout once, when the model is compiled (Gemm with transB
included), the unpacked weight is dropped, and results match float64 NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="these tests build ONNX models")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


@pytest.mark.parametrize("op,trans_b", [("MatMul", 0), ("Gemm", 0), ("Gemm", 1)])
def test_constant_weights_packed_once(rng, tmp_path, op, trans_b) -> None:
    m, k, n = 9, 67, 45
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    if op == "MatMul":
        nodes = [h.make_node("MatMul", ["x", "w"], ["y0"]), h.make_node("Add", ["y0", "b"], ["y"])]
    else:
        nodes = [h.make_node("Gemm", ["x", "w", "b"], ["y"], transB=trans_b, alpha=0.5)]
    g = h.make_graph(nodes, "mm", [h.make_tensor_value_info("x", T.FLOAT, [m, k])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [nh.from_array(w, "w"), nh.from_array(bias, "b")])
    mdl = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    mdl.ir_version = 8
    model = ember.compile(mdl.SerializeToString())
    packed = [name for name in model.consts if "__const" in name]
    assert len(packed) == 1, list(model.consts)
    assert "w" not in model.consts  # only the packed copy is kept
    wt = (w.T if trans_b else w).astype(np.float64)
    alpha = 0.5 if op == "Gemm" else 1.0
    path = tmp_path / "mm.ember"
    model.save(path)
    again = ember.load(path)
    for mod in (model, again):
        x = rng.standard_normal((m, k)).astype(np.float32)
        want = alpha * (x.astype(np.float64) @ wt) + bias
        np.testing.assert_allclose(mod(x)[0], want, rtol=1e-5, atol=1e-5)
