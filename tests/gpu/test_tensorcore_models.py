"""float16 and bfloat16 ONNX models whose matrix products run on tensor cores (``mma.sync``),
against float64 NumPy references of the same graph (ONNX Runtime's CPU provider lacks many
float16 kernels).

Tolerance: the products accumulate in float32 and are rounded once to the model's type, then the
epilogue (bias, activation) runs in that type; the reference does the same in float64. The
rounded product may differ by one unit in the last place (its float32 sum is ordered
differently), which the bias can leave as the whole difference, and the sum adds one more
rounding: ``|out - ref| <= 2 ulp(|x @ W| + |ref|) + 2^-20 (|x| @ |W|)`` with ulp = 2^-10
(float16) or 2^-7 (bfloat16) relative."""

from __future__ import annotations

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the model tests build models with onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

pytestmark = pytest.mark.gpu
rng = np.random.default_rng()
ULP = {"float16": 2.0**-10, "bfloat16": 2.0**-7}


def _bf16_round(x: np.ndarray) -> np.ndarray:
    bits = ember.runtime.ndarray.float32_to_bfloat16_bits(np.asarray(x, np.float32)).astype(np.uint32) << 16
    return bits.view(np.float32).astype(np.float64)


def _round(x: np.ndarray, dt: str) -> np.ndarray:
    return x.astype(np.float16).astype(np.float64) if dt == "float16" else _bf16_round(x)


def _linear_instr(cuda_dev, k: int, n: int, sync: str = "mma.sync.aligned.m16n8k16") -> str:
    """The instruction a linear layer's product runs on: the TMA wgmma kernel on sm_90 when K and
    N are multiples of 8 (``ember.model.direct_kernels``), else ``sync`` (the mma.sync schedule)."""
    hopper = cuda_dev.attributes["arch"] in ("sm_90", "sm_90a")
    return "wgmma.mma_async" if hopper and k % 8 == 0 and n % 8 == 0 else sync


def _model(nodes, inputs, outputs, inits) -> bytes:
    m = h.make_model(h.make_graph(nodes, "g", inputs, outputs, inits), opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _tensor(name: str, x: np.ndarray, dt: str):
    if dt == "float16":
        return nh.from_array(x.astype(np.float16), name)
    # x holds bfloat16 values already (_round), so onnx's float -> bfloat16 conversion is exact
    return h.make_tensor(name, T.BFLOAT16, x.shape, x.astype(np.float32).reshape(-1).tolist())


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("b,m,k,n", [(2, 128, 768, 768), (1, 77, 130, 65), (3, 5, 40, 300), (1, 200, 1032, 520)])
def test_matmul_bias_relu_on_tensor_cores(cuda_dev, dt, b, m, k, n) -> None:
    """A linear layer (MatMul, bias, ReLU): on sm_90 with K and N multiples of 8 the TMA wgmma
    kernel (``ember.model.direct_kernels``; 200 x 1032 x 520 splits K in 4 parts over two consumer
    warpgroups), elsewhere the mma.sync schedule; against float64 with the rounding bound."""
    elem = T.FLOAT16 if dt == "float16" else T.BFLOAT16
    w = _round(rng.standard_normal((k, n)) * 0.1, dt)
    bias = _round(rng.standard_normal(n), dt)
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Add", ["y", "bias"], ["z"]),
             h.make_node("Relu", ["z"], ["out"])]
    model = _model(nodes, [h.make_tensor_value_info("x", elem, [b, m, k])],
                   [h.make_tensor_value_info("out", elem, None)], [_tensor("w", w, dt), _tensor("bias", bias, dt)])
    compiled = ember.compile(model, target="cuda")
    want = _linear_instr(cuda_dev, k, n)
    assert want in compiled.get_source("asm"), f"the product did not run on {want}"
    x = _round(rng.standard_normal((b, m, k)), dt)
    (out,) = compiled(x=x.astype(np.float16 if dt == "float16" else np.dtype("bfloat16")))
    got = np.asarray(out).astype(np.float64)
    mm = x @ w
    ref = np.maximum(_round(_round(mm, dt) + bias, dt), 0)
    bound = np.abs(x) @ np.abs(w)
    err = np.abs(got - ref)
    assert np.all(np.isfinite(got))
    assert np.all(err <= 2 * ULP[dt] * (np.abs(mm) + np.abs(ref)) + 2.0**-20 * bound), float(np.max(err))


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_fused_qkv_projection_with_split(cuda_dev, dt) -> None:
    """A GPT-2-style fused Q/K/V projection (one MatMul + Add, then Split into three outputs,
    each reshaped to heads and transposed) at 77 rows, hidden 96 in 3 heads: the product on
    tensor cores, the Split as a kernel of its own (it used to fail to compile: the
    accumulator had three storing stages). Against float64 with the rounding bound."""
    s_, hid, heads = 77, 96, 3
    elem = T.FLOAT16 if dt == "float16" else T.BFLOAT16
    w = _round(rng.standard_normal((hid, 3 * hid)) * 0.1, dt)
    b = _round(rng.standard_normal(3 * hid), dt)
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "graph"))
    from test_gpu_model_build import fused_qkv_model

    model = fused_qkv_model(elem, _tensor("w", w, dt), _tensor("b", b, dt), s_, hid, heads)
    compiled = ember.compile(model, target="cuda")
    x = _round(rng.standard_normal((1, s_, hid)), dt)
    got = compiled(x=x.astype(np.float16 if dt == "float16" else np.dtype("bfloat16")))
    mm = x @ w
    ref = _round(_round(mm, dt) + b, dt)
    bound = np.abs(x) @ np.abs(w)
    for part, out in enumerate(got):
        def heads_first(a: np.ndarray, cols: slice = slice(part * hid, (part + 1) * hid)) -> np.ndarray:
            return a[..., cols].reshape(1, s_, heads, hid // heads).transpose(0, 2, 1, 3)

        g = np.asarray(out).astype(np.float64)
        assert g.shape == (1, heads, s_, hid // heads) and np.all(np.isfinite(g))
        err = np.abs(g - heads_first(ref))
        assert np.all(err <= 2 * ULP[dt] * (heads_first(np.abs(mm)) + heads_first(np.abs(ref)))
                      + 2.0**-20 * heads_first(bound)), float(np.max(err))


def test_gemm_transposed_weights_on_tensor_cores(cuda_dev) -> None:
    m, k, n = 64, 96, 200
    w = _round(rng.standard_normal((n, k)) * 0.1, "float16")
    c = _round(rng.standard_normal(n), "float16")
    nodes = [h.make_node("Gemm", ["x", "w", "c"], ["out"], transB=1)]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT16, [m, k])],
                   [h.make_tensor_value_info("out", T.FLOAT16, None)],
                   [_tensor("w", w, "float16"), _tensor("c", c, "float16")])
    compiled = ember.compile(model, target="cuda")
    assert _linear_instr(cuda_dev, k, n) in compiled.get_source("asm")
    x = _round(rng.standard_normal((m, k)), "float16")
    (out,) = compiled(x=x.astype(np.float16))
    mm = x @ w.T
    ref = _round(_round(mm, "float16") + c, "float16")
    err = np.abs(out.astype(np.float64) - ref)
    assert np.all(err <= 2 * ULP["float16"] * (np.abs(mm) + np.abs(ref)) + 2.0**-20 * (np.abs(x) @ np.abs(w.T)))


def _conv_ref(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Cross-correlation of NCHW ``x`` with ``w`` (float64)."""
    B, C, H, W = x.shape
    M, _, KH, KW = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    out = np.zeros((B, M, OH, OW))
    for r in range(KH):
        for q in range(KW):
            patch = xp[:, :, r:r + stride * OH:stride, q:q + stride * OW:stride]
            out += np.einsum("bchw,mc->bmhw", patch, w[:, :, r, q])
    return out


@pytest.mark.parametrize("b,c,hw,m,k,stride,pad", [(2, 13, 17, 24, 3, 2, 1), (1, 64, 56, 64, 3, 1, 1),
                                                   (1, 3, 33, 32, 7, 2, 3), (2, 32, 9, 48, 1, 1, 0)])
def test_conv_bias_residual_relu_on_tensor_cores(cuda_dev, b, c, hw, m, k, stride, pad) -> None:
    """An implicit-GEMM convolution (no im2col buffer) with bias, a residual add and ReLU in its store."""
    w = _round(rng.standard_normal((m, c, k, k)) * 0.2, "float16")
    bias = _round(rng.standard_normal(m), "float16")
    oh = (hw + 2 * pad - k) // stride + 1
    nodes = [h.make_node("Conv", ["x", "w", "bias"], ["y"], strides=[stride, stride], pads=[pad] * 4),
             h.make_node("Add", ["y", "res"], ["z"]), h.make_node("Relu", ["z"], ["out"])]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT16, [b, c, hw, hw]),
                           h.make_tensor_value_info("res", T.FLOAT16, [b, m, oh, oh])],
                   [h.make_tensor_value_info("out", T.FLOAT16, None)],
                   [_tensor("w", w, "float16"), _tensor("bias", bias, "float16")])
    compiled = ember.compile(model, target="cuda")
    assert "mma.sync.aligned.m16n8k16" in compiled.get_source("asm")
    x = _round(rng.standard_normal((b, c, hw, hw)), "float16")
    res = _round(rng.standard_normal((b, m, oh, oh)), "float16")
    (out,) = compiled(x=x.astype(np.float16), res=res.astype(np.float16))
    mm = _conv_ref(x, w, stride, pad)
    ref = np.maximum(_round(_round(_round(mm, "float16") + bias[None, :, None, None], "float16") + res, "float16"), 0)
    bound = _conv_ref(np.abs(x), np.abs(w), stride, pad)
    err = np.abs(out.astype(np.float64) - ref)
    assert np.all(err <= 3 * ULP["float16"] * (np.abs(mm) + np.abs(ref) + np.abs(res)) + 2.0**-20 * bound)


def test_attention_block_on_tensor_cores(cuda_dev) -> None:
    """Projection, per-head QK^T and PV (batched products on tensor cores), a scale, softmax and
    the reshapes around them; against NumPy float64 on the same float16 inputs. Tolerance 1e-2 of
    the largest output: the scores, softmax and probabilities are rounded to float16 in between
    (the reference keeps float64)."""
    S, D, H = 128, 64, 4
    wq = _round(rng.standard_normal((H * D, H * D)) * 0.05, "float16")
    nodes = [h.make_node("MatMul", ["x", "wq"], ["q"]),
             h.make_node("Reshape", ["q", "shape"], ["q4"]),
             h.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
             h.make_node("Transpose", ["q4"], ["kt"], perm=[0, 2, 3, 1]),
             h.make_node("MatMul", ["qt", "kt"], ["sc"]), h.make_node("Mul", ["sc", "scale"], ["sc2"]),
             h.make_node("Softmax", ["sc2"], ["p"], axis=-1), h.make_node("MatMul", ["p", "qt"], ["o"]),
             h.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
             h.make_node("Reshape", ["ot", "shape2"], ["out"])]
    inits = [_tensor("wq", wq, "float16"), nh.from_array(np.array([1, S, H, D], np.int64), "shape"),
             nh.from_array(np.array(0.125, np.float16), "scale"),
             nh.from_array(np.array([1, S, H * D], np.int64), "shape2")]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT16, [1, S, H * D])],
                   [h.make_tensor_value_info("out", T.FLOAT16, None)], inits)
    compiled = ember.compile(model, target="cuda")
    assert compiled.get_source("asm").count("mma.sync.aligned.m16n8k16") > 0
    x = _round(rng.standard_normal((1, S, H * D)) * 0.5, "float16")
    (out,) = compiled(x=x.astype(np.float16))
    q = (x @ wq).reshape(1, S, H, D).transpose(0, 2, 1, 3)
    sc = q @ q.transpose(0, 1, 3, 2) * 0.125
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ref = (p @ q).transpose(0, 2, 1, 3).reshape(1, S, H * D)
    assert np.abs(out.astype(np.float64) - ref).max() <= 1e-2 * np.abs(ref).max()


@pytest.mark.parametrize("precision,tol", [("float16", 5e-3), ("bfloat16", 3e-2), ("tf32", 1e-2)])
def test_float32_model_in_reduced_precision_on_tensor_cores(cuda_dev, precision, tol) -> None:
    """``precision=`` on a float32 model: its product runs on tensor cores, inputs and outputs stay
    float32, and it matches ONNX Runtime's float32 within the tolerance of
    ``tests/frontend/test_precision.py`` (the same block, the same reasons; TF32 truncates each
    operand to 10 mantissa bits, 2^-10 relative, before the 64-term products: 1e-2)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "frontend"))
    from test_precision import block

    ort = pytest.importorskip("onnxruntime", reason="the test compares with ONNX Runtime")
    model = block(rng)
    x = rng.standard_normal((2, 16, 64)).astype(np.float32)
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    compiled = ember.compile(model, target="cuda", precision=precision)
    assert _linear_instr(cuda_dev, 64, 64, "mma.sync.aligned.m16n8k") in compiled.get_source("asm")
    (got,) = compiled(x=x)
    assert got.dtype == np.float32 and np.abs(got - want).max() <= tol * np.abs(want).max()
