"""``ember.compile(..., precision=...)``: a float32 ONNX model computed in float16 or bfloat16
(normalization and softmax in float32, float32 inputs and outputs), against ONNX Runtime's float32.

Tolerances, relative to the largest output: float16 5e-3 and bfloat16 3e-2 — each weight and
activation is rounded to the type (2^-11 and 2^-8 relative) before 64-term products, and the
layer norm re-scales the rounded values; float32 (and tf32, which the CPU runs as float32) stays
within 1e-5."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember
from ember.errors import FrontendError

onnx = pytest.importorskip("onnx", reason="the test builds models with onnx")
ort = pytest.importorskip("onnxruntime", reason="the test compares with ONNX Runtime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

from ember.frontend.precision import lower_precision  # noqa: E402

# tf32 on the CPU is exact float32 (no TF32 unit): the float32 tolerance.
TOL = {"float32": 1e-5, "float16": 5e-3, "bfloat16": 3e-2, "tf32": 1e-5}


def block(rng: np.random.Generator, d: int = 64) -> bytes:
    """MatMul + bias, LayerNorm, Softmax, a ReLU branch and a residual add; a -3.4e38 constant
    that float16 cannot hold (a mask value) multiplied by zero."""
    w1 = nh.from_array((rng.standard_normal((d, d)) * 0.1).astype(np.float32), "w1")
    b1 = nh.from_array(rng.standard_normal(d).astype(np.float32), "b1")
    sc = nh.from_array((rng.random(d) + 0.5).astype(np.float32), "sc")
    bi = nh.from_array(rng.standard_normal(d).astype(np.float32), "bi")
    big = nh.from_array(np.array(-3.4e38, np.float32), "big")
    zero = nh.from_array(np.array(0.0, np.float32), "zero")
    nodes = [h.make_node("MatMul", ["x", "w1"], ["y"]), h.make_node("Add", ["y", "b1"], ["z"]),
             h.make_node("LayerNormalization", ["z", "sc", "bi"], ["n"], axis=-1),
             h.make_node("Mul", ["big", "zero"], ["nothing"]), h.make_node("Add", ["n", "nothing"], ["n2"]),
             h.make_node("Softmax", ["n2"], ["p"], axis=-1), h.make_node("Relu", ["z"], ["r"]),
             h.make_node("Add", ["p", "r"], ["out"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 16, d])],
                     [h.make_tensor_value_info("out", T.FLOAT, None)], [w1, b1, sc, bi, big, zero])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16", "tf32"])
def test_precision_against_onnxruntime(rng, precision) -> None:
    model = block(rng)
    x = rng.standard_normal((2, 16, 64)).astype(np.float32)
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    compiled = ember.compile(model, target="llvm", precision=precision)
    assert [s.dtype for s in compiled.inputs] == ["float32"] and [s.dtype for s in compiled.outputs] == ["float32"]
    (got,) = compiled(x=x)
    assert got.dtype == np.float32 and np.all(np.isfinite(got))
    assert np.abs(got - want).max() <= TOL[precision] * np.abs(want).max()


def test_lowered_graph_keeps_statistics_in_float32(rng) -> None:
    low = lower_precision(onnx.load_from_string(block(rng)), "float16")
    ops = {n.output[0]: n for n in low.graph.node}
    ln = next(n for n in low.graph.node if n.op_type == "LayerNormalization")
    feeding = [ops[i] for i in ln.input if i in ops]
    assert all(f.op_type == "Cast" and f.attribute[0].i == T.FLOAT for f in feeding)
    assert {i.data_type for i in low.graph.initializer} == {T.FLOAT16}
    assert low.graph.input[0].type.tensor_type.elem_type == T.FLOAT
    big = next(i for i in low.graph.initializer if i.name == "big")
    assert nh.to_array(big) == np.float16(-65504)  # clipped, not -inf
    onnx.shape_inference.infer_shapes(low, check_type=True, strict_mode=True)


def test_unknown_precision_lists_the_valid_ones(rng) -> None:
    with pytest.raises(FrontendError, match="float32, float16, bfloat16"):
        ember.compile(block(rng), precision="fp8")


def test_precision_needs_an_onnx_model(rng) -> None:
    from ember.frontend.onnx import import_onnx

    with pytest.raises(FrontendError, match="pass the ONNX model"):
        ember.compile(import_onnx(block(rng)), precision="float16")


def test_tf32_changes_no_type_and_uses_tf32_tensor_cores(rng) -> None:
    model = block(rng)
    assert lower_precision(onnx.load_from_string(model), "tf32").SerializeToString() == model
    compiled = ember.compile(model, target="cuda -arch=sm_80", precision="tf32")
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in compiled.get_source("asm")
    hopper = ember.compile(model, target="cuda -arch=sm_90", precision="tf32")  # linear layers on TF32 wgmma
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k8\.f32\.tf32\.tf32", hopper.get_source("asm"))
    plain = ember.compile(model, target="cuda -arch=sm_90")
    assert "mma.sync" not in plain.get_source("asm")


def _conv_pool(rng: np.random.Generator, opset: int) -> bytes:
    """Conv + MaxPool + a float Range added in: ONNX defines Conv and MaxPool for bfloat16 only
    from opset 22, Range never (float, double and integers only)."""
    w = nh.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32), "w")
    lims = [nh.from_array(np.array(v, np.float32), n) for n, v in (("r0", 0.0), ("r1", 10.0), ("rd", 1.0))]
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Range", ["r0", "r1", "rd"], ["r"]), h.make_node("Add", ["p", "r"], ["out"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 8, 20, 20])],
                     [h.make_tensor_value_info("out", T.FLOAT, None)], [w, *lims])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8 if opset < 21 else 10
    return m.SerializeToString()


@pytest.mark.parametrize("opset", [17, 22])
@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_operators_without_the_low_type_in_the_opset(rng, opset, precision) -> None:
    """bfloat16 on a model below opset 22 used to fail ONNX validation (the rewritten Conv took
    a type its opset does not define): the model is converted to opset 22 first, and an operator
    that takes neither low type (Range) computes in float32 between casts. Against ONNX Runtime's
    float32 with the precision's tolerance; for cuda the convolution lands on tensor cores."""
    model = _conv_pool(rng, opset)
    x = rng.standard_normal((1, 8, 20, 20)).astype(np.float32)
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = ember.compile(model, target="llvm", precision=precision)(x=x)
    assert got.dtype == np.float32 and np.abs(got - want).max() <= TOL[precision] * np.abs(want).max()
    lowered = onnx.load_from_string(lower_precision(onnx.load_from_string(model), precision).SerializeToString())
    onnx.shape_inference.infer_shapes(lowered, check_type=True, strict_mode=True)  # valid ONNX, types included
    ops = {n.op_type: n for n in lowered.graph.node}
    assert "__f32_" not in ops["Conv"].input[0] and "__f32_" not in ops["MaxPool"].input[0]  # in the low type
    assert all("__f32_" in i for i in ops["Range"].input)  # float32 between casts
    assert max(o.version for o in lowered.opset_import if o.domain in ("", "ai.onnx")) == (
        22 if precision == "bfloat16" else opset)
    asm = ember.compile(model, target="cuda -arch=sm_80", precision=precision).get_source("asm")
    assert "mma.sync.aligned.m16n8k16" in asm
