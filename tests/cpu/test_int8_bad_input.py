"""Quantized models with bad quantization parameters fail at compile time with an ember error
that names the node and the parameter (never a crash or a wrong answer)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import ember
from ember.driver import compile_graph
from ember.errors import EmberError
from ember.frontend.onnx import import_onnx


def _model(op: str, names: list[str], consts: dict[str, np.ndarray], x_type: int, shape: list[int], attrs=None):
    inits = [nh.from_array(v, k) for k, v in consts.items()]
    node = oh.make_node(op, names, ["y"], name="bad_node", **(attrs or {}))
    g = oh.make_graph([node], "q", [oh.make_tensor_value_info(names[0], x_type, shape)],
                      [oh.make_tensor_value_info("y", TP.UNDEFINED, None)], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def _fails(m, *words: str, op_words: tuple[str, ...] | None = None) -> None:
    """``ember.compile`` fails naming the node and ``words``; so does the operator itself when
    the model's validation (ONNX's checker, as ONNX Runtime's) is skipped (``op_words``, default
    ``words``): the operators check what they are given whatever checked it before."""
    for fn, want in ((lambda: ember.compile(m, use_cache=False), words),
                     (lambda: compile_graph(import_onnx(m, validate=False)), op_words or words)):
        with pytest.raises(EmberError) as info:
            fn()
        msg = str(info.value)
        assert "bad_node" in msg, msg
        for w in want:
            assert w in msg, msg


def test_scale_of_wrong_length() -> None:
    m = _model("DequantizeLinear", ["x", "s", "z"], {"s": np.ones(3, np.float32), "z": np.zeros(4, np.uint8)},
               TP.UINT8, [2, 4, 5], {"axis": 1})
    _fails(m, "4")


def test_zero_point_of_wrong_type() -> None:
    m = _model("DequantizeLinear", ["x", "s", "z"], {"s": np.array(0.5, np.float32), "z": np.array(3, np.int8)},
               TP.UINT8, [2, 4])
    _fails(m, "zero_point", "int8", op_words=("zero point", "int8", "uint8"))


def test_scale_not_a_float() -> None:
    m = _model("DequantizeLinear", ["x", "s"], {"s": np.array(2, np.int32)}, TP.UINT8, [2, 4])
    _fails(m, "scale", "int32")


def test_missing_scale() -> None:
    m = _model("QuantizeLinear", ["x", ""], {}, TP.FLOAT, [2, 4])
    _fails(m, "input 1", op_words=("scale",))


def test_qlinear_matmul_b_scale_of_wrong_length() -> None:
    consts = {"sa": np.array(0.1, np.float32), "za": np.array(1, np.uint8), "b": np.ones((8, 5), np.int8),
              "sb": np.ones(4, np.float32), "zb": np.array(0, np.int8), "sy": np.array(1.0, np.float32),
              "zy": np.array(0, np.uint8)}
    m = _model("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], consts, TP.UINT8, [3, 8])
    _fails(m, "b_scale", "5")


def test_qlinear_conv_zero_point_of_wrong_type() -> None:
    consts = {"sx": np.array(0.1, np.float32), "zx": np.array(1, np.int8), "w": np.ones((4, 2, 3, 3), np.int8),
              "sw": np.array(0.2, np.float32), "zw": np.array(0, np.int8), "sy": np.array(1.0, np.float32),
              "zy": np.array(0, np.uint8)}
    m = _model("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"], consts, TP.UINT8, [1, 2, 6, 6])
    _fails(m, "zero_point", op_words=("zero point", "int8", "uint8"))
