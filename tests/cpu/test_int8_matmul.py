"""Integer matrix products on the packed GEMM (ember.ops.packed_lowp): MatMulInteger and
QLinearMatMul against an exact int64 NumPy reference, at sizes no panel or register tile divides,
with outputs checked for unwritten elements; QLinearMatMul also against ONNX Runtime (its
requantization rounds in float32, ember's in float64 as ONNX's reference: at most one step apart)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import ember

_TP = {np.uint8: TP.UINT8, np.int8: TP.INT8, np.float32: TP.FLOAT}


def _model(op: str, inputs: list[tuple[str, np.ndarray]], consts: list[tuple[str, np.ndarray]], names: list[str],
           out: int = TP.INT32):
    ins = [oh.make_tensor_value_info(n, _TP[a.dtype.type], list(a.shape)) for n, a in inputs]
    inits = [nh.from_array(a, n) for n, a in consts]
    g = oh.make_graph([oh.make_node(op, names, ["y"])], "q", ins, [oh.make_tensor_value_info("y", out, None)],
                      inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def _run(m, feeds: dict[str, np.ndarray]) -> np.ndarray:
    out = ember.compile(m, use_cache=False)(**feeds)
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)


@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("shape", [(37, 29, 53), (2, 5, 21, 70)])
@pytest.mark.parametrize("b_const", [True, False])
def test_matmul_integer_exact(adt, bdt, shape, b_const: bool) -> None:
    rng = np.random.default_rng(sum(shape))
    *lead, M, K, N = (1, *shape) if len(shape) == 3 else shape
    ai, bi = np.iinfo(adt), np.iinfo(bdt)
    a = rng.integers(ai.min, ai.max + 1, (*([lead[0]] if len(shape) == 4 else []), M, K), dtype=adt)
    b = rng.integers(bi.min, bi.max + 1, (K, N), dtype=bdt)
    azp = np.array(rng.integers(ai.min, ai.max + 1), adt)
    bzp = rng.integers(bi.min, bi.max + 1, (N,), dtype=bdt)  # one per column
    consts = [("azp", azp), ("bzp", bzp)] + ([("b", b)] if b_const else [])
    inputs = [("a", a)] + ([] if b_const else [("b", b)])
    m = _model("MatMulInteger", inputs, consts, ["a", "b", "azp", "bzp"])
    got = _run(m, dict(inputs))
    ref = (a.astype(np.int64) - int(azp)) @ (b.astype(np.int64) - bzp.astype(np.int64))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ref)


def test_qlinear_matmul_reference_and_onnxruntime() -> None:
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    M, K, N = 23, 67, 45
    a = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    sa, sb, sy = np.float32(0.02), np.float32(0.01), np.float32(0.9)
    za, zb, zy = np.uint8(120), np.int8(3), np.uint8(128)
    consts = [("sa", np.array(sa)), ("za", np.array(za)), ("b", b), ("sb", np.array(sb)), ("zb", np.array(zb)),
              ("sy", np.array(sy)), ("zy", np.array(zy))]
    m = _model("QLinearMatMul", [("a", a)], consts, ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], TP.UINT8)
    got = _run(m, {"a": a})
    acc = (a.astype(np.int64) - int(za)) @ (b.astype(np.int64) - int(zb))
    mult = np.float64(np.float32(sa * sb / sy))
    ref = np.clip(np.rint(acc * mult) + int(zy), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, ref)
    theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    assert np.abs(got.astype(np.int32) - theirs).max() <= 1
