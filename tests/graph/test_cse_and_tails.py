"""Common subexpression elimination and injective tails fused into their reduction's kernel:
the graphs they give, and models that use them compared with ONNX Runtime on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.driver import optimize
from ember.graph import Graph, Node, TensorInfo
from ember.graph.cse import eliminate_common_subexpressions
from ember.graph.passes import Fuse, fuse

onnx = pytest.importorskip("onnx", reason="the end-to-end cases build ONNX models")
ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime is the reference")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def _mask_graph() -> Graph:
    """Three layers each computing the same additive mask from one input, with their own (equal)
    constants, plus one computation that differs only by a constant's value."""
    consts = {f"zero{k}": np.array(0.0, np.float32) for k in range(3)}
    consts.update({f"ninf{k}": np.array(-1e4, np.float32) for k in range(3)})
    consts["other"] = np.array(-5.0, np.float32)
    nodes = [Node("Cast", ["m"], ["mb"], {"to": 9}, "cast")]
    for k in range(3):
        nodes.append(Node("Where", ["mb", f"zero{k}", f"ninf{k}"], [f"w{k}"], {}, f"where{k}"))
        nodes.append(Node("Add", ["x" if k == 0 else f"a{k - 1}", f"w{k}"], [f"a{k}"], {}, f"add{k}"))
    nodes.append(Node("Where", ["mb", "zero0", "other"], ["w_other"], {}, "where_other"))
    nodes.append(Node("Add", ["a2", "w_other"], ["y"], {}, "add_last"))
    values = {"x": TensorInfo((2, 6), "float32"), "m": TensorInfo((2, 6), "int64")}
    return Graph(["x", "m"], ["y"], nodes, values, consts)


def test_equal_computations_are_computed_once() -> None:
    g = eliminate_common_subexpressions(_mask_graph())
    wheres = [n for n in g.nodes if n.op == "Where"]
    assert len(wheres) == 2  # the three equal masks as one, the different one kept
    assert {n.inputs[1] for n in g.nodes if n.op == "Add"} == {"w0", "w_other"}


def test_graph_outputs_and_random_nodes_are_kept() -> None:
    nodes = [Node("Relu", ["x"], ["y1"], {}, "r1"), Node("Relu", ["x"], ["y2"], {}, "r2"),
             Node("RandomNormalLike", ["x"], ["n1"], {}, "n1"), Node("RandomNormalLike", ["x"], ["n2"], {}, "n2"),
             Node("Add", ["n1", "n2"], ["y3"], {}, "add")]
    g = Graph(["x"], ["y1", "y2", "y3"], nodes, {"x": TensorInfo((3,), "float32")}, {})
    out = eliminate_common_subexpressions(g)
    assert [n.name for n in out.nodes] == ["r1", "r2", "n1", "n2", "add"]


def test_graphs_with_subgraphs_are_left_alone() -> None:
    body = Graph([], ["z"], [], {}, {})
    nodes = [Node("Relu", ["x"], ["a"], {}, "r1"), Node("Relu", ["x"], ["b"], {}, "r2"),
             Node("If", ["c"], ["y"], {"then_branch": body, "else_branch": body}, "if")]
    g = Graph(["x", "c"], ["y", "a", "b"], nodes, {"x": TensorInfo((3,), "float32")}, {})
    assert eliminate_common_subexpressions(g) is g


def _attention_tail_model(rows: int, width: int) -> bytes:
    """Scores + an additive mask from an int mask (as torch exports it), Softmax, then
    ``Where(IsNaN(s), 0, s)``: two readers of the Softmax's output."""
    nodes = [h.make_node("Cast", ["m"], ["mb"], to=T.BOOL),
             h.make_node("Where", ["mb", "zero", "ninf"], ["madd"]),
             h.make_node("Add", ["x", "madd"], ["s_in"]),
             h.make_node("Softmax", ["s_in"], ["s"], axis=-1),
             h.make_node("IsNaN", ["s"], ["bad"]),
             h.make_node("Where", ["bad", "zero", "s"], ["y"]),
             h.make_node("Where", ["mb", "zero", "ninf2"], ["madd2"]),
             h.make_node("Add", ["y", "madd2"], ["y2"])]
    inits = [nh.from_array(np.array(0.0, np.float32), "zero"), nh.from_array(np.array(-np.inf, np.float32), "ninf"),
             nh.from_array(np.array(-np.inf, np.float32), "ninf2")]
    g = h.make_graph(nodes, "tail", [h.make_tensor_value_info("x", T.FLOAT, [rows, width]),
                                     h.make_tensor_value_info("m", T.INT64, [1, width])],
                     [h.make_tensor_value_info("y2", T.FLOAT, [rows, width])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_softmax_tail_fuses_into_the_softmax_kernel() -> None:
    from ember.frontend.onnx import import_onnx

    g = optimize(import_onnx(_attention_tail_model(5, 70)))
    groups = [[n.op for n in gr.nodes] for gr in fuse(g)]
    tail = [ops for ops in groups if "Softmax" in ops]
    assert len(tail) == 1 and tail[0][tail[0].index("Softmax"):] == ["Softmax", "IsNaN", "Where", "Add"], groups
    assert sum(n.op == "Where" for n in g.nodes) == 2  # the two equal masks as one


@pytest.mark.parametrize("rows, width", [(5, 70), (3, 129)])
def test_fused_tail_and_shared_mask_match_onnxruntime(rng, rows, width) -> None:
    """Rows fully masked give NaN from Softmax, which the tail turns into 0, as in ONNX Runtime."""
    model = _attention_tail_model(rows, width)
    x = rng.standard_normal((rows, width)).astype(np.float32)
    m = (rng.random((1, width)) < 0.7).astype(np.int64)
    m[0, :3] = 1
    x[0, :] = -np.inf  # a row with nothing left: NaN from the Softmax, 0 after the tail
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x, "m": m})[0]
    compiled = ember.compile(model, target="llvm")
    got = compiled(x=x, m=m)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-7)


def _gelu_model(m: int, k: int, n: int, rng: np.random.Generator) -> onnx.ModelProto:
    """``MatMul(x, W) + b`` then an exported exact GELU: ``y * 0.5 * (1 + erf(y / sqrt 2))``
    (the product's result read by ``Div`` and by ``Mul``)."""
    inits = [nh.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "W"),
             nh.from_array(rng.standard_normal(n).astype(np.float32), "b"),
             nh.from_array(np.array(np.sqrt(2.0), np.float32), "sqrt2"),
             nh.from_array(np.array(1.0, np.float32), "one"), nh.from_array(np.array(0.5, np.float32), "half")]
    nodes = [h.make_node("MatMul", ["x", "W"], ["p"]), h.make_node("Add", ["p", "b"], ["y"]),
             h.make_node("Div", ["y", "sqrt2"], ["d"]), h.make_node("Erf", ["d"], ["e"]),
             h.make_node("Add", ["e", "one"], ["e1"]), h.make_node("Mul", ["y", "e1"], ["g"]),
             h.make_node("Mul", ["g", "half"], ["out"])]
    graph = h.make_graph(nodes, "gelu", [h.make_tensor_value_info("x", T.FLOAT, [m, k])],
                         [h.make_tensor_value_info("out", T.FLOAT, [m, n])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("m,k,n", [(7, 33, 70), (37, 64, 130)])
def test_gelu_after_a_product_runs_in_its_kernel_on_the_cpu(m, k, n, rng) -> None:
    model_proto = _gelu_model(m, k, n, rng)
    model = ember.compile(model_proto)
    assert model.num_kernels == 1  # product, bias and GELU in one kernel
    x = rng.standard_normal((m, k)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    model.run({"x": x}, outputs=[out])
    # float64 reference; float32 products of k terms and a float32 erf: 1e-5 relative to |y|
    from math import erf
    y = x.astype(np.float64) @ nh.to_array(model_proto.graph.initializer[0]).astype(np.float64) \
        + nh.to_array(model_proto.graph.initializer[1])
    want = y * 0.5 * (1 + np.vectorize(erf)(y / np.sqrt(2.0)))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(y).max())
    sess = ort.InferenceSession(model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(out, sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5 * np.abs(y).max())


def test_gelu_after_a_product_stays_a_kernel_of_its_own_on_gpus(rng) -> None:
    from ember.frontend.onnx import import_onnx

    g = optimize(import_onnx(_gelu_model(7, 33, 70, rng)))
    assert len(fuse(g)) == 2  # product_tails off: what GPU targets get
    assert len(fuse(g, product_tails=True)) == 1
    assert len(Fuse(target="cuda")(g).groups) == 2 and len(Fuse(target="llvm")(g).groups) == 1
