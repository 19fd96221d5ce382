"""Linear layers of float16/bfloat16 models on sm_90 compile to the TMA ``wgmma`` GEMM
(:mod:`ember.model.direct_kernels`), built on a machine without a GPU: which groups match (MatMul
of an activation with a constant weight, plus a constant bias, optionally ReLU), the kernel and
its step arguments, and that every other case keeps the scheduled kernels. Running them is tested
on a GPU in tests/gpu/test_gpu_models.py."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.backends.cuda.codegen import find_ptxas

onnx = pytest.importorskip("onnx", reason="the direct-kernel tests build models with onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

pytestmark = pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")


def _linear_model(rng, dtype=np.float16, relu=True, const_weight=True, rows=128, k=768, n=3072) -> bytes:
    onnx_t = {np.float16: T.FLOAT16, np.float32: T.FLOAT}[dtype]
    nodes = [h.make_node("MatMul", ["x", "w"], ["mm"]), h.make_node("Add", ["mm", "b"], ["y" if not relu else "a"])]
    if relu:
        nodes.append(h.make_node("Relu", ["a"], ["y"]))
    inits = [nh.from_array(rng.standard_normal(n).astype(dtype), "b")]
    inputs = [h.make_tensor_value_info("x", onnx_t, [1, rows, k])]
    if const_weight:
        inits.append(nh.from_array((rng.standard_normal((k, n)) / 30).astype(dtype), "w"))
    else:
        inputs.append(h.make_tensor_value_info("w", onnx_t, [k, n]))
    g = h.make_graph(nodes, "linear", inputs, [h.make_tensor_value_info("y", onnx_t, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _steps(model):
    return [st for st in model.program.plan["steps"] if st["kind"] == "kernel"]


def test_linear_layer_runs_on_the_tma_kernel(rng) -> None:
    model = ember.compile(_linear_model(rng), target="cuda -arch=sm_90", use_cache=False)
    steps = _steps(model)
    first = steps[0]
    assert first["args"] == ["x", "w", "b", "y"] and first["nout"] == 1
    assert first["ops"] == ["MatMul", "Add", "Relu"]
    ptx = model.module.imported_modules[0].get_source("ptx")
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in ptx
    host = model.module.get_source("host")
    assert f"{first['func']}(A, B, bias, C)" in host and "tmap_A = tensor_map(A, float16, 128 x 768" in host
    assert "wg_parts = device_alloc(float32" in host  # 24 tiles of 128 x 128 on 132 multiprocessors: K split


@pytest.mark.parametrize("case", ["fp32", "weight_is_an_input", "sm_80"])
def test_other_products_keep_their_schedules(rng, case) -> None:
    target = "cuda -arch=sm_80" if case == "sm_80" else "cuda -arch=sm_90"
    data = _linear_model(rng, dtype=np.float32 if case == "fp32" else np.float16,
                         const_weight=case != "weight_is_an_input")
    model = ember.compile(data, target=target, use_cache=False)
    ptx = model.module.imported_modules[0].get_source("ptx")
    assert "wgmma" not in ptx and "tensor_map" not in model.module.get_source("host")


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_node_runs_on_the_tma_kernel(rng, trans_b) -> None:
    """A plain ONNX Gemm (the weight K x N, or N x K with transB) is a linear layer too."""
    k, n = 256, 520
    w = (rng.standard_normal((n, k) if trans_b else (k, n)) / 16).astype(np.float16)
    g = h.make_graph([h.make_node("Gemm", ["x", "w", "b"], ["y"], transB=trans_b)], "gemm",
                     [h.make_tensor_value_info("x", T.FLOAT16, [100, k])],
                     [h.make_tensor_value_info("y", T.FLOAT16, None)],
                     [nh.from_array(w, "w"), nh.from_array(rng.standard_normal(n).astype(np.float16), "b")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    model = ember.compile(m.SerializeToString(), target="cuda -arch=sm_90", use_cache=False)
    (step,) = _steps(model)
    assert step["args"] == ["x", "w", "b", "y"]
    ptx = model.module.imported_modules[0].get_source("ptx")
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in ptx
    if trans_b:  # B read K-major: boxes of 64 elements of K x 128 rows of N
        host = model.module.get_source("host")
        assert "tmap_B = tensor_map(B, float16, 520 x 256, pitch 512 B, box 64 x 128)" in host


def test_match_linear_refuses_other_groups(rng) -> None:
    """Gemm with alpha != 1, a MatMul followed by something other than ReLU: scheduled kernels."""
    cases = ([h.make_node("Gemm", ["x", "w", "b"], ["y"], alpha=2.0)],
             [h.make_node("MatMul", ["x", "w"], ["mm"]), h.make_node("Add", ["mm", "b"], ["a"]),
              h.make_node("Sigmoid", ["a"], ["y"])])
    for nodes in cases:
        g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT16, [64, 64])],
                         [h.make_tensor_value_info("y", T.FLOAT16, None)],
                         [nh.from_array(rng.standard_normal((64, 64)).astype(np.float16), "w"),
                          nh.from_array(rng.standard_normal(64).astype(np.float16), "b")])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
        m.ir_version = 8
        model = ember.compile(m.SerializeToString(), target="cuda -arch=sm_90", use_cache=False)
        assert "wgmma" not in model.module.imported_modules[0].get_source("ptx")


def test_tf32_precision_runs_float32_layers_on_tf32_wgmma(rng) -> None:
    """``precision="tf32"``: a float32 linear layer runs on TF32 wgmma, its K x N weight
    transposed once at compile time into a new N x K constant; without it float32 stays exact."""
    data = _linear_model(rng, dtype=np.float32, rows=64, k=256, n=520)
    model = ember.compile(data, target="cuda -arch=sm_90", precision="tf32", use_cache=False)
    (step,) = _steps(model)
    assert step["args"][0] == "x" and step["args"][1].endswith("__wT") and step["args"][2:] == ["b", "y"]
    w = next(nh.to_array(t) for t in onnx.load_from_string(data).graph.initializer if t.name == "w")
    np.testing.assert_array_equal(model.program.consts[step["args"][1]], w.T)
    assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in model.module.imported_modules[0].get_source("ptx")
