"""Row reductions on the CPU in vector lanes (``ember/strategy/cpu_reduce.py``): Softmax,
LayerNorm and ReduceSum/ReduceMax over rows that no vector divides, against float64, with the
partials in registers; short rows and column sums keep the plain schedule."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import ember
from ember import te
from ember.strategy.cpu_reduce import row_reduction_lanes


def _model(rows: int, width: int, rng: np.random.Generator) -> bytes:
    nodes = [h.make_node("Softmax", ["x"], ["sm"], axis=-1),
             h.make_node("LayerNormalization", ["x", "s", "b"], ["ln"], axis=-1),
             h.make_node("ReduceSum", ["x", "ax"], ["rs"], keepdims=0),
             h.make_node("ReduceMax", ["x", "ax"], ["rm"], keepdims=0)]
    inits = [nh.from_array(rng.standard_normal(width).astype(np.float32), "s"),
             nh.from_array(rng.standard_normal(width).astype(np.float32), "b"),
             nh.from_array(np.array([-1], np.int64), "ax")]
    outs = [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("sm", "ln", "rs", "rm")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [rows, width])], outs, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)]).SerializeToString()


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("rows, width", [(7, 77), (33, 1000), (3, 32)])
def test_row_reductions_match_float64(target: str, rows: int, width: int, rng) -> None:
    import onnx

    data = _model(rows, width, rng)
    model = ember.compile(data, target=target)
    x = (rng.standard_normal((rows, width)) * 4).astype(np.float32)
    sm, ln, rs, rm = model(x=x)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    s, b = (nh.to_array(i).astype(np.float64) for i in onnx.load_from_string(data).graph.initializer[:2])
    mu, var = x64.mean(axis=1, keepdims=True), x64.var(axis=1, keepdims=True)
    np.testing.assert_allclose(ln, (x64 - mu) / np.sqrt(var + 1e-5) * s + b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rs, x64.sum(axis=1), rtol=1e-5, atol=1e-4)  # float32 partial sums
    np.testing.assert_array_equal(rm, x.max(axis=1))  # max is exact in any order
    if width >= 32:
        assert ".rf" in model.get_source("ir")  # the vector partials


def test_short_rows_and_column_sums_keep_the_plain_schedule() -> None:
    a = te.placeholder((100, 12), name="a")
    k = te.reduce_axis((0, 12), name="k")
    short = te.compute((100,), lambda i: te.sum(a[i, k], axis=k), name="short").op
    assert row_reduction_lanes(short, 16) is None
    c = te.placeholder((4096, 64), name="c")
    kc = te.reduce_axis((0, 4096), name="kc")
    col = te.compute((64,), lambda j: te.sum(c[kc, j], axis=kc), name="col").op
    assert row_reduction_lanes(col, 16) is None
    kr = te.reduce_axis((0, 64), name="kr")
    row = te.compute((4096,), lambda i: te.sum(c[i, kr], axis=kr), name="row").op
    assert row_reduction_lanes(row, 16) == 16
