"""Small ONNX graphs with symbolic dimensions for the dynamic-shape tests."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits, opset: int = 17):
    g = helper.make_graph(nodes, "dyn", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def conv_matmul_reshape(rng: np.random.Generator, channels: int = 3, hidden: int = 5):
    """x[batch, C, H, width] -> Conv 3x3 (pad 1) -> Relu -> Reshape to [batch, hidden, H*width] (the
    target shape built from Shape ops) -> Transpose -> MatMul with [hidden, 7] -> + bias.
    Output [batch, H*width, 7]; ``batch`` and ``width`` are symbolic, H is 4."""
    w = rng.standard_normal((hidden, channels, 3, 3)).astype(np.float32)
    m = rng.standard_normal((hidden, 7)).astype(np.float32)
    b = rng.standard_normal((7,)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Slice", ["s", "i0", "i2", "i0"], ["bc"]),  # [batch, hidden]
        helper.make_node("Concat", ["bc", "m1"], ["tshape"], axis=0),  # [batch, hidden, -1]
        helper.make_node("Reshape", ["r", "tshape"], ["flat"]),
        helper.make_node("Transpose", ["flat"], ["t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["t", "m"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w", w), ("m", m), ("b", b), ("i0", np.array([0], np.int64)), ("i2", np.array([2], np.int64)),
        ("m1", np.array([-1], np.int64))]]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", channels, 4, "width"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None, 7])
    return _model(nodes, [x], [y], inits)


def two_inputs_shared_symbol(rng: np.random.Generator):
    """a[batch, seq, 8] and mask[batch, seq]: y = Softmax(a @ W, axis=-1) * mask[..., None],
    reduced over seq -> [batch, 6]. ``batch`` and ``seq`` tie the two inputs together."""
    w = rng.standard_normal((8, 6)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["a", "w"], ["p"]),
        helper.make_node("Softmax", ["p"], ["sm"], axis=-1),
        helper.make_node("Unsqueeze", ["mask", "ax"], ["m3"]),
        helper.make_node("Mul", ["sm", "m3"], ["prod"]),
        helper.make_node("ReduceSum", ["prod", "ax1"], ["y"], keepdims=0),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([-1], np.int64), "ax"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1")]
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "seq", 8])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6])
    return _model(nodes, [a, mask], [y], inits)


def if_on_value(rng: np.random.Generator):
    """x[batch, 16], rate (int64 scalar): ``If rate == 16000`` takes a branch with an MLP of width
    32, else one of width 8 (different intermediate and output shapes, as a voice-activity
    detector's per-sample-rate LSTMs). Output: [batch, 32] or [batch, 8]."""
    w1 = rng.standard_normal((16, 32)).astype(np.float32)
    w2 = rng.standard_normal((16, 8)).astype(np.float32)

    def branch(name: str, w: np.ndarray):
        out = helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)
        nodes = [helper.make_node("MatMul", ["x", f"{name}_w"], [f"{name}_p"]),
                 helper.make_node("Tanh", [f"{name}_p"], [f"{name}_y"])]
        return helper.make_graph(nodes, name, [], [out], [numpy_helper.from_array(w, f"{name}_w")])

    nodes = [
        helper.make_node("Equal", ["rate", "sr16k"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["y"], then_branch=branch("wide", w1), else_branch=branch("narrow", w2)),
    ]
    inits = [numpy_helper.from_array(np.array(16000, np.int64), "sr16k")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    rate = helper.make_tensor_value_info("rate", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return _model(nodes, [x, rate], [y], inits)


def reshape_rows_of_four():
    """x[b, w] -> Reshape to [b, -1, 4]: only widths divisible by 4 fit the graph."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = numpy_helper.from_array(np.array([0, -1, 4], np.int64), "s")
    return _model([helper.make_node("Reshape", ["x", "s"], ["y"])], [x], [y], [shape])


def if_on_rate_lstm(rng: np.random.Generator):
    """As a voice-activity detector: x[seq, batch, 16] and rate (int64 scalar); ``If rate == 16000``
    runs an LSTM of hidden size 24, else one of hidden size 8, each giving its last hidden state
    [1, batch, H]. ``seq`` and ``batch`` are symbolic."""

    def branch(name: str, hidden: int):
        w = (rng.standard_normal((1, 4 * hidden, 16)) * 0.3).astype(np.float32)
        r = (rng.standard_normal((1, 4 * hidden, hidden)) * 0.3).astype(np.float32)
        b = (rng.standard_normal((1, 8 * hidden)) * 0.1).astype(np.float32)
        out = helper.make_tensor_value_info(f"{name}_h", TensorProto.FLOAT, None)
        node = helper.make_node("LSTM", ["x", f"{name}_w", f"{name}_r", f"{name}_b"], ["", f"{name}_h"],
                                hidden_size=hidden)
        inits = [numpy_helper.from_array(a, f"{name}_{k}") for k, a in (("w", w), ("r", r), ("b", b))]
        return helper.make_graph([node], name, [], [out], inits)

    nodes = [
        helper.make_node("Equal", ["rate", "sr16k"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["h"], then_branch=branch("wide", 24), else_branch=branch("narrow", 8)),
    ]
    inits = [numpy_helper.from_array(np.array(16000, np.int64), "sr16k")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", "batch", 16])
    rate = helper.make_tensor_value_info("rate", TensorProto.INT64, [])
    h = helper.make_tensor_value_info("h", TensorProto.FLOAT, None)
    return _model(nodes, [x, rate], [h], inits)


def attention_block(rng: np.random.Generator, d: int = 20, heads: int = 2, ffn: int = 36):
    """A transformer encoder block, x[batch, seq, d] -> y[batch, seq, d]: LayerNormalization, Q/K/V
    projections, the heads split by a Reshape whose target shape is built from Shape ops (as
    exporters write it), scaled scores [batch, heads, seq, seq], Softmax over the keys (a reduction
    over ``seq``), the heads merged back, the output projection and residual, then a Relu MLP and a
    second residual. ``batch`` and ``seq`` are symbolic."""
    dh = d // heads

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    inits = {"g": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32), "be": w(d), "wq": w(d, d), "wk": w(d, d),
             "wv": w(d, d), "wo": w(d, d), "w1": w(d, ffn), "b1": w(ffn), "w2": w(ffn, d), "b2": w(d),
             "scale": np.array(1 / np.sqrt(dh), np.float32), "i0": np.array([0], np.int64),
             "i2": np.array([2], np.int64), "hd": np.array([heads, dh], np.int64), "md": np.array([d], np.int64)}
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "be"], ["n"], axis=-1, epsilon=1e-5),
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Slice", ["sx", "i0", "i2"], ["bs"]),  # [batch, seq]
        helper.make_node("Concat", ["bs", "hd"], ["split"], axis=0),  # [batch, seq, heads, dh]
        helper.make_node("Concat", ["bs", "md"], ["merge"], axis=0),  # [batch, seq, d]
    ]
    for p in "qkv":
        nodes += [helper.make_node("MatMul", ["n", f"w{p}"], [f"{p}0"]),
                  helper.make_node("Reshape", [f"{p}0", "split"], [f"{p}1"]),
                  helper.make_node("Transpose", [f"{p}1"], [f"{p}h"], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    nodes += [
        helper.make_node("MatMul", ["qh", "kh"], ["s0"]),  # [batch, heads, seq, seq]
        helper.make_node("Mul", ["s0", "scale"], ["s1"]),
        helper.make_node("Softmax", ["s1"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["c0"]),  # [batch, heads, seq, dh]
        helper.make_node("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["c1", "merge"], ["c2"]),
        helper.make_node("MatMul", ["c2", "wo"], ["o"]),
        helper.make_node("Add", ["x", "o"], ["r1"]),
        helper.make_node("MatMul", ["r1", "w1"], ["f0"]),
        helper.make_node("Add", ["f0", "b1"], ["f1"]),
        helper.make_node("Relu", ["f1"], ["f2"]),
        helper.make_node("MatMul", ["f2", "w2"], ["f3"]),
        helper.make_node("Add", ["f3", "b2"], ["f4"]),
        helper.make_node("Add", ["r1", "f4"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])
    return _model(nodes, [x], [y], [numpy_helper.from_array(a, n) for n, a in inits.items()])


def positions_from_range(rng: np.random.Generator, d: int = 6):
    """x[1, seq, d] + (Range(0, seq) as float)[:, None] * w: the position values are computed from
    the input's shape, so compiling folds them into a constant that depends on ``seq``."""
    w = rng.standard_normal((1, d)).astype(np.float32)
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "one"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["rf", "ax"], ["rc"]),
        helper.make_node("Mul", ["rc", "w"], ["pos"]),
        helper.make_node("Add", ["x", "pos"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w", w), ("zero", np.array(0, np.int64)), ("one", np.array(1, np.int64)), ("ax", np.array([1], np.int64))]]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", d])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", d])
    return _model(nodes, [x], [y], inits)


def capped_slice(rng: np.random.Generator, cap: int = 50, d: int = 5):
    """x[seq, d] -> Tanh(x[:cap] @ w): the Slice keeps min(seq, cap) rows, a size that is linear in
    ``seq`` only below ``cap``."""
    w = rng.standard_normal((d, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Slice", ["x", "s0", "s1", "s2"], ["xs"]),
        helper.make_node("MatMul", ["xs", "w"], ["m"]),
        helper.make_node("Tanh", ["m"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w", w), ("s0", np.array([0], np.int64)), ("s1", np.array([cap], np.int64)), ("s2", np.array([0], np.int64))]]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", d])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])
    return _model(nodes, [x], [y], inits)


def valid_conv(rng: np.random.Generator, k: int = 5):
    """x[1, 2, width] -> Conv1d with a kernel of ``k`` and no padding -> [1, 4, width - k + 1]: a
    width below ``k`` is no valid input."""
    w = rng.standard_normal((4, 2, k)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "width"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, None])
    return _model(nodes, [x], [y], [numpy_helper.from_array(w, "w")])


def mean_over_seq(rng: np.random.Generator, d: int = 6):
    """x[1, seq, d] -> ReduceMean over ``seq`` -> [1, d]: the mean's ``1 / seq`` is a
    floating-point constant that depends on the size."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", d])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, d])
    return _model(nodes, [x], [y], [], opset=17)


def gather_by_flat_index(rng: np.random.Generator):
    """x[batch, seq] -> Gather(x flattened, Range(0, batch * seq) reshaped to [batch, seq]) * 2: the
    flat indices ``b * seq + s`` are folded into a constant of every size (an exported attention
    mask does this)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ReduceProd", ["s"], ["n"], keepdims=0),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Reshape", ["r", "s"], ["idx"]),
        helper.make_node("Reshape", ["x", "m1"], ["flat"]),
        helper.make_node("Gather", ["flat", "idx"], ["g"], axis=0),
        helper.make_node("Mul", ["g", "two"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("zero", np.array(0, np.int64)), ("one", np.array(1, np.int64)), ("m1", np.array([-1], np.int64)),
        ("two", np.array(2, np.float32))]]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])
    return _model(nodes, [x], [y], inits)
