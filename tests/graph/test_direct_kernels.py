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
