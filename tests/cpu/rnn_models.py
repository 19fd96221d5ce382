"""ONNX recurrent models for the tests and benchmarks: one LSTM/GRU/RNN node with every option,
and the stand-in of an OCR recognizer (a small CNN, a bidirectional LSTM, a classifier)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh


def rnn_model(
    op: str = "LSTM",
    T: int = 7,
    B: int = 3,
    I: int = 5,  # noqa: E741
    H: int = 6,
    direction: str = "forward",
    layout: int = 0,
    seq: list[int] | None = None,
    seq_const: bool = False,
    with_init: bool = False,
    peep: bool = False,
    lbr: int = 0,
    clip: float | None = None,
    acts: list[str] | None = None,
    seed: int = 0,
    outputs: tuple[bool, ...] = (True, True, True),
    dtype: Any = np.float32,
) -> tuple[Any, dict[str, np.ndarray]]:
    """A model of one ``op`` node with random weights, and random feeds. ``seq``: sequence_lens
    (a graph input, or an initializer with ``seq_const``); ``with_init``: initial states as inputs;
    ``peep``: LSTM peepholes; ``outputs``: which of Y, Y_h (, Y_c) the node computes."""
    rng = np.random.default_rng(seed)
    G = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    D = 2 if direction == "bidirectional" else 1
    W = (rng.standard_normal((D, G * H, I)) * 0.4).astype(dtype)
    R = (rng.standard_normal((D, G * H, H)) * 0.4).astype(dtype)
    Bb = (rng.standard_normal((D, 2 * G * H)) * 0.3).astype(dtype)
    inits = [nh.from_array(W, "W"), nh.from_array(R, "R"), nh.from_array(Bb, "B")]
    xshape = [B, T, I] if layout else [T, B, I]
    ins = [oh.make_tensor_value_info("X", TP.FLOAT, xshape)]
    feeds = {"X": rng.standard_normal(xshape).astype(dtype)}
    node_in = ["X", "W", "R", "B"]
    if seq is not None:
        if seq_const:
            inits.append(nh.from_array(np.array(seq, np.int32), "lens"))
        else:
            ins.append(oh.make_tensor_value_info("lens", TP.INT32, [B]))
            feeds["lens"] = np.array(seq, np.int32)
        node_in.append("lens")
    else:
        node_in.append("")
    if with_init:
        hshape = [B, D, H] if layout else [D, B, H]
        ins.append(oh.make_tensor_value_info("h0", TP.FLOAT, hshape))
        feeds["h0"] = rng.standard_normal(hshape).astype(dtype)
        node_in.append("h0")
        if op == "LSTM":
            ins.append(oh.make_tensor_value_info("c0", TP.FLOAT, hshape))
            feeds["c0"] = rng.standard_normal(hshape).astype(dtype)
            node_in.append("c0")
    elif op == "LSTM":
        node_in += ["", ""]
    else:
        node_in.append("")
    if peep:
        inits.append(nh.from_array((rng.standard_normal((D, 3 * H)) * 0.3).astype(dtype), "P"))
        node_in.append("P")
    nout = 3 if op == "LSTM" else 2
    outs = [n if keep else "" for n, keep in zip(["Y", "Y_h", "Y_c"][:nout], outputs)]
    attrs = dict(hidden_size=H, direction=direction, layout=layout)
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    if clip is not None:
        attrs["clip"] = clip
    if acts is not None:
        attrs["activations"] = acts
    node = oh.make_node(op, node_in, outs, **attrs)
    vouts = [oh.make_tensor_value_info(o, TP.FLOAT, None) for o in outs if o]
    g = oh.make_graph([node], "rnn", ins, vouts, inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 14)])
    m.ir_version = 8
    return m, feeds


def crnn_standin(T: int = 40, H: int = 512, classes: int = 80, seed: int = 0) -> tuple[Any, dict[str, np.ndarray]]:
    """A small CNN (two conv+relu+pool) over a 32 x 4T image, then a bidirectional LSTM (hidden H)
    over the T columns, then a classifier MatMul: the shape of an OCR recognizer."""
    rng = np.random.default_rng(seed)
    c1, c2 = 32, 64

    def w(*s: int) -> np.ndarray:
        return (rng.standard_normal(s) * (2.0 / np.prod(s[1:])) ** 0.5).astype(np.float32)

    inits = [nh.from_array(w(c1, 1, 3, 3), "w1"), nh.from_array(np.zeros(c1, np.float32), "b1"),
             nh.from_array(w(c2, c1, 3, 3), "w2"), nh.from_array(np.zeros(c2, np.float32), "b2")]
    I = c2 * 8
    inits += [nh.from_array((rng.standard_normal((2, 4 * H, I)) * I ** -0.5).astype(np.float32), "W"),
              nh.from_array((rng.standard_normal((2, 4 * H, H)) * H ** -0.5).astype(np.float32), "R"),
              nh.from_array((rng.standard_normal((2, 8 * H)) * 0.1).astype(np.float32), "B"),
              nh.from_array(np.array([T, 1, I], np.int64), "shp"),
              nh.from_array(np.array([T, 1, 2 * H], np.int64), "shp2"),
              nh.from_array((rng.standard_normal((2 * H, classes)) * (2 * H) ** -0.5).astype(np.float32), "Wc")]
    nodes = [
        oh.make_node("Conv", ["image", "w1", "b1"], ["a1"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["a1"], ["r1"]),
        oh.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        oh.make_node("Conv", ["p1", "w2", "b2"], ["a2"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["a2"], ["r2"]),
        oh.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),  # 1 x c2 x 8 x T
        oh.make_node("Transpose", ["p2"], ["tp"], perm=[3, 0, 1, 2]),  # T x 1 x c2 x 8
        oh.make_node("Reshape", ["tp", "shp"], ["seq"]),
        oh.make_node("LSTM", ["seq", "W", "R", "B"], ["Y", "", ""], hidden_size=H, direction="bidirectional"),
        oh.make_node("Transpose", ["Y"], ["yt"], perm=[0, 2, 1, 3]),  # T x 1 x 2 x H
        oh.make_node("Reshape", ["yt", "shp2"], ["feat"]),
        oh.make_node("MatMul", ["feat", "Wc"], ["logits"]),
    ]
    g = oh.make_graph(nodes, "crnn", [oh.make_tensor_value_info("image", TP.FLOAT, [1, 1, 32, 4 * T])],
                      [oh.make_tensor_value_info("logits", TP.FLOAT, [T, 1, classes])], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m, {"image": rng.standard_normal((1, 1, 32, 4 * T)).astype(np.float32)}
