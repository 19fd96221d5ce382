"""QDQ fusion (ember.graph.qdq_fusion): QDQ-format models built by hand, at sizes no tile divides,
against ONNX Runtime (which fuses the same groups into its integer kernels).

* What the pass makes of each group (QLinearConv, QLinearMatMul, QGemm, QLinearAdd, ember.IntMaxPool,
  the Relu before a QuantizeLinear at the type's bottom dropped; a MaxPool of QuantizeLinear's
  output) and what it leaves (a bias whose scale is not ``x_scale * w_scale``, a float value read
  twice).
* The compiled model against ONNX Runtime: the same quantized integers (compared through the
  final DequantizeLinear; a value on a rounding boundary may land one step away, as float32
  products differ in the last bit between kernels: at most one step, on at most 0.5 % of the
  elements).
* Bad parameters in a QDQ group: an ember error naming the node, as without the pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import ember
from ember.errors import EmberError
from ember.frontend.onnx import import_onnx
from ember.graph.passes import dead_code_elimination
from ember.graph.qdq_fusion import fuse_qdq

ort = pytest.importorskip("onnxruntime")


class _Builder:
    """A QDQ model under construction: ``q(x)`` quantizes a float value and dequantizes it again
    (as quantize_static writes activations), ``dq_const`` stores a quantized constant behind its
    DequantizeLinear."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.n = 0

    def const(self, value: np.ndarray, name: str | None = None) -> str:
        self.n += 1
        name = name or f"c{self.n}"
        self.inits.append(nh.from_array(value, name))
        return name

    def node(self, op: str, ins: list[str], name: str | None = None, **attrs) -> str:
        self.n += 1
        out = f"v{self.n}"
        self.nodes.append(oh.make_node(op, ins, [out], name=name or f"{op.lower()}{self.n}", **attrs))
        return out

    def q(self, x: str, scale: float, zp: int, dt=np.uint8) -> str:
        s, z = self.const(np.array(scale, np.float32)), self.const(np.array(zp, dt))
        return self.node("DequantizeLinear", [self.node("QuantizeLinear", [x, s, z]), s, z])

    def dq_const(self, q: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int = 0) -> str:
        return self.node("DequantizeLinear", [self.const(q), self.const(scale), self.const(zp)], axis=axis)

    def model(self, inputs: dict[str, list[int]], out: str):
        g = oh.make_graph(self.nodes, "qdq", [oh.make_tensor_value_info(k, TP.FLOAT, v) for k, v in inputs.items()],
                          [oh.make_tensor_value_info(out, TP.FLOAT, None)], self.inits)
        m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 19)])
        m.ir_version = 9
        return m


def _conv_model(seed: int, bias_scale_factor: float = 1.0, relu: bool = True, C=5, M=19, K=3):
    b = _Builder(seed)
    sx, sy = 0.03, 0.05
    sw = (b.rng.random(M) * 0.01 + 0.002).astype(np.float32)
    x = b.q("x", sx, 128)
    w = b.dq_const(b.rng.integers(-127, 128, (M, C, K, K)).astype(np.int8), sw, np.zeros(M, np.int8))
    bq = b.rng.integers(-2000, 2000, M).astype(np.int32)
    bias = b.dq_const(bq, (np.float32(sx) * sw * np.float32(bias_scale_factor)).astype(np.float32),
                      np.zeros(M, np.int32))
    y = b.node("Conv", [x, w, bias], name="the_conv", pads=[1, 0, 1, 2], strides=[2, 1])
    if relu:
        y = b.node("Relu", [y])
    out = b.q(y, sy, 0)
    return b.model({"x": [1, C, 11, 9]}, out), sy


def _run_both(m, feeds: dict[str, np.ndarray], step: float, exact_share: float = 0.995) -> None:
    out = ember.compile(m, use_cache=False)(**feeds)
    got = np.asarray(out[0] if isinstance(out, (list, tuple)) else out)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == ref.shape
    diff = np.abs(got.astype(np.float64) - ref) / step
    assert diff.max() <= 1.0001, diff.max()
    assert (diff < 1e-3).mean() >= exact_share, (diff >= 1e-3).sum()


def _ops(m) -> list[str]:
    return [n.op for n in dead_code_elimination(fuse_qdq(import_onnx(m))).nodes]


def test_conv_relu_becomes_qlinear_conv() -> None:
    m, sy = _conv_model(1)
    ops = _ops(m)
    assert "QLinearConv" in ops and "Conv" not in ops and "Relu" not in ops, ops
    x = np.random.default_rng(2).standard_normal((1, 5, 11, 9)).astype(np.float32) * 2
    _run_both(m, {"x": x}, sy)


@pytest.mark.parametrize("C,M,K", [(3, 64, 7), (16, 33, 1), (37, 20, 3)])
def test_conv_sizes_against_onnxruntime(C: int, M: int, K: int) -> None:
    """Channel counts that are not multiples of 4 (the byte words) or 16 (the channel blocks)."""
    m, sy = _conv_model(C + M, C=C, M=M, K=K, relu=False)
    assert "QLinearConv" in _ops(m)
    x = np.random.default_rng(C).standard_normal((1, C, 11, 9)).astype(np.float32) * 2
    _run_both(m, {"x": x}, sy)


def test_bias_of_another_scale_is_left_in_float() -> None:
    m, sy = _conv_model(3, bias_scale_factor=1.5)
    ops = _ops(m)
    assert "Conv" in ops and "QLinearConv" not in ops, ops
    x = np.random.default_rng(4).standard_normal((1, 5, 11, 9)).astype(np.float32)
    out = ember.compile(m, use_cache=False)(x=x)
    got = np.asarray(out[0] if isinstance(out, (list, tuple)) else out)
    assert got.shape == (1, 19, 6, 9) and np.isfinite(got).all()


def test_float_value_read_twice_is_not_fused() -> None:
    b = _Builder(5)
    x = b.q("x", 0.02, 10)
    w = b.dq_const(b.rng.integers(-127, 128, (17, 4, 1, 1)).astype(np.int8), np.full(17, 0.01, np.float32),
                   np.zeros(17, np.int8))
    y = b.node("Conv", [x, w])
    out = b.node("Add", [b.q(y, 0.05, 0), y])  # the float conv output is read by the Add too
    m = b.model({"x": [1, 4, 5, 7]}, out)
    assert "QLinearConv" not in _ops(m)


def test_add_maxpool_gemm_matmul() -> None:
    """A residual Add, a MaxPool between equal quantizations, a Gemm with an int32 bias and a
    MatMul, each between DequantizeLinear and QuantizeLinear nodes."""
    b = _Builder(7)
    a = b.q("a", 0.04, 120)
    c = b.q("c", 0.03, 100)
    s = b.q(b.node("Add", [a, c]), 0.06, 128)
    p = b.q(b.node("MaxPool", [s], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 0.06, 128)
    f = b.q(b.node("Flatten", [p]), 0.06, 128)  # [1, 3*6*5 = 90]
    N = 37
    sb = (b.rng.random(N) * 0.01 + 0.001).astype(np.float32)
    wq = b.rng.integers(-127, 128, (N, 90)).astype(np.int8)
    bias = b.dq_const(b.rng.integers(-500, 500, N).astype(np.int32), (np.float32(0.06) * sb).astype(np.float32),
                      np.zeros(N, np.int32))
    g = b.q(b.node("Gemm", [f, b.dq_const(wq, sb, np.zeros(N, np.int8)), bias], transB=1), 0.2, 128)
    mq = b.rng.integers(-127, 128, (N, 21)).astype(np.int8)
    mm = b.node("MatMul", [g, b.dq_const(mq, np.full(21, 0.02, np.float32), np.zeros(21, np.int8), axis=1)])
    out = b.q(mm, 0.3, 128)
    m = b.model({"a": [1, 3, 11, 9], "c": [1, 3, 11, 9]}, out)
    ops = _ops(m)
    for want in ("com.microsoft.QLinearAdd", "ember.IntMaxPool", "com.microsoft.QGemm", "QLinearMatMul"):
        assert want in ops, ops
    assert not {"Add", "Gemm", "MatMul"} & set(ops), ops
    rng = np.random.default_rng(8)
    feeds = {k: rng.standard_normal((1, 3, 11, 9)).astype(np.float32) * 2 for k in ("a", "c")}
    _run_both(m, feeds, 0.3, exact_share=0.95)


def test_wrong_scale_length_in_a_group_names_the_node() -> None:
    b = _Builder(9)
    x = b.q("x", 0.02, 10)
    w = b.node("DequantizeLinear", [b.const(np.ones((17, 4, 1, 1), np.int8)), b.const(np.ones(3, np.float32)),
                                    b.const(np.zeros(3, np.int8))], name="bad_weights", axis=0)
    m = b.model({"x": [1, 4, 5, 7]}, b.q(b.node("Conv", [x, w]), 0.05, 0))
    with pytest.raises(EmberError, match="bad_weights"):
        ember.compile(m, use_cache=False)


def test_zero_point_of_wrong_type_in_a_group_names_the_node() -> None:
    b = _Builder(10)
    s, z = b.const(np.array(0.02, np.float32)), b.const(np.array(3, np.int8))
    x = b.node("DequantizeLinear", [b.node("QuantizeLinear", ["x", s, b.const(np.array(3, np.uint8))]), s, z],
               name="bad_dq")
    w = b.dq_const(np.ones((17, 4, 1, 1), np.int8), np.full(17, 0.01, np.float32), np.zeros(17, np.int8))
    m = b.model({"x": [1, 4, 5, 7]}, b.q(b.node("Conv", [x, w]), 0.05, 0))
    with pytest.raises(EmberError, match="bad_dq"):
        ember.compile(m, use_cache=False)


@pytest.mark.parametrize("dt", ["uint8", "int8"])
@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 2, 1, 0], dilations=[2, 1]),
                                   dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2])],
                         ids=["resnet", "dilated", "same_upper"])
def test_maxpool_of_quantized_values_is_integer(dt: str, attrs: dict) -> None:
    """A MaxPool reading QuantizeLinear's output (QOperator format) runs as ember.IntMaxPool:
    padding at the type's minimum, exactly ONNX Runtime's integers at sizes no vector divides."""
    zp = np.array(3 if dt == "uint8" else -5, dt)
    nodes = [oh.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]), oh.make_node("MaxPool", ["q"], ["y"], **attrs)]
    g = oh.make_graph(nodes, "p", [oh.make_tensor_value_info("x", TP.FLOAT, [2, 5, 13, 11])],
                      [oh.make_tensor_value_info("y", TP.UINT8 if dt == "uint8" else TP.INT8, None)],
                      [nh.from_array(np.array(0.05, np.float32), "s"), nh.from_array(zp, "z")])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 19)])
    m.ir_version = 9
    assert _ops(m) == ["QuantizeLinear", "ember.IntMaxPool"]
    x = np.random.default_rng(11).standard_normal((2, 5, 13, 11)).astype(np.float32) * 4
    got = np.asarray(ember.compile(m, use_cache=False)(x=x))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got.reshape(ref.shape), ref)


def test_missing_scale_in_a_group_names_the_node() -> None:
    """A DequantizeLinear of the weights without its scale: the model's validation (as ONNX
    Runtime's) and, with validation skipped, the operator itself name the node."""
    from ember.driver import compile_graph

    b = _Builder(12)
    x = b.q("x", 0.02, 10)
    w = b.node("DequantizeLinear", [b.const(np.ones((17, 4, 1, 1), np.int8)), ""], name="no_scale")
    m = b.model({"x": [1, 4, 5, 7]}, b.q(b.node("Conv", [x, w]), 0.05, 0))
    for compile_it in (lambda: ember.compile(m, use_cache=False),
                       lambda: compile_graph(import_onnx(m, validate=False))):
        with pytest.raises(EmberError, match="no_scale"):
            compile_it()


def test_depthwise_conv_stays_on_the_float_kernels() -> None:
    """A grouped convolution is left to the float kernels (ember's integer convolutions are group
    1); the model still gives ONNX Runtime's values within one step."""
    b = _Builder(13)
    x = b.q("x", 0.03, 128)
    w = b.dq_const(b.rng.integers(-127, 128, (6, 1, 3, 3)).astype(np.int8), np.full(6, 0.01, np.float32),
                   np.zeros(6, np.int8))
    out = b.q(b.node("Conv", [x, w], group=6, pads=[1, 1, 1, 1]), 0.02, 128)
    m = b.model({"x": [1, 6, 9, 11]}, out)
    ops = _ops(m)
    assert "Conv" in ops and "QLinearConv" not in ops, ops
    x = np.random.default_rng(14).standard_normal((1, 6, 9, 11)).astype(np.float32)
    _run_both(m, {"x": x}, 0.02, exact_share=0.99)


@pytest.mark.parametrize("dt", ["uint8", "int8"])
def test_qlinear_add_is_onnxruntime_exactly(dt: str) -> None:
    """com.microsoft QLinearAdd computes as ONNX Runtime's vectorized kernel (scale ratios, a
    fixed part, two fused multiply-adds, half to even, saturation): the same bytes, including a
    broadcast operand, at sizes no vector divides."""
    tp = TP.UINT8 if dt == "uint8" else TP.INT8
    lo, hi = (0, 256) if dt == "uint8" else (-128, 128)
    rng = np.random.default_rng(15 + len(dt))
    consts = {"sa": np.array(0.037, np.float32), "za": np.array(rng.integers(lo, hi), dt),
              "sb": np.array(0.061, np.float32), "zb": np.array(rng.integers(lo, hi), dt),
              "sc": np.array(0.049, np.float32), "zc": np.array(rng.integers(lo, hi), dt)}
    node = oh.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"], domain="com.microsoft")
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("a", tp, [2, 37, 13, 11]),
                                    oh.make_tensor_value_info("b", tp, [37, 1, 11])],
                      [oh.make_tensor_value_info("y", tp, None)], [nh.from_array(v, k) for k, v in consts.items()])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    a = rng.integers(lo, hi, (2, 37, 13, 11)).astype(dt)
    b = rng.integers(lo, hi, (37, 1, 11)).astype(dt)
    got = np.asarray(ember.compile(m, use_cache=False)(a=a, b=b))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(got.reshape(ref.shape), ref)
