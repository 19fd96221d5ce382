"""Graph passes: inference with folding, batch-norm folding, no-op removal, fusion, memory plan."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.driver import compile_model, optimize
from ember.graph import Graph, Node, TensorInfo
from ember.graph.passes import fuse, infer_and_fold, simplify
from ember.transform import PassContext


def _conv_bn_graph(rng: np.random.Generator) -> Graph:
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    consts = {
        "w": w,
        "scale": rng.uniform(0.5, 1.5, 5).astype(np.float32),
        "b": rng.standard_normal(5).astype(np.float32),
        "mean": rng.standard_normal(5).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, 5).astype(np.float32),
        "shape": np.array([1, -1], np.int64),
    }
    nodes = [
        Node("Conv", ["x", "w"], ["c"], {"pads": [1, 1, 1, 1]}, "conv"),
        Node("BatchNormalization", ["c", "scale", "b", "mean", "var"], ["bn"], {"epsilon": 1e-5}, "bn"),
        Node("Relu", ["bn"], ["r"], {}, "relu"),
        Node("Identity", ["r"], ["i"], {}, "id"),
        Node("Reshape", ["i", "shape"], ["y"], {}, "reshape"),
    ]
    return Graph(["x"], ["y"], nodes, {"x": TensorInfo((1, 3, 7, 9), "float32")}, consts)


def _reference(g: Graph, x: np.ndarray) -> np.ndarray:
    c = g.consts
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 5, 7, 9))
    for i in range(3):
        for j in range(3):
            out += np.einsum("mc,nchw->nmhw", c["w"][:, :, i, j], xp[:, :, i : i + 7, j : j + 9])
    sh = (1, 5, 1, 1)
    bn = (out - c["mean"].reshape(sh)) / np.sqrt(c["var"].reshape(sh) + 1e-5) * c["scale"].reshape(sh) + c["b"].reshape(
        sh
    )
    return np.maximum(bn, 0).reshape(1, -1)


def test_batchnorm_folded_and_identity_removed(rng) -> None:
    g = simplify(infer_and_fold(_conv_bn_graph(rng)))
    ops = [n.op for n in g.nodes]
    assert "BatchNormalization" not in ops and "Identity" not in ops
    assert ops == ["Conv", "Relu", "Reshape"]
    assert "Conv" in str(g) and "float32[1, 5, 7, 9]" in str(g)


def test_fusion_puts_epilogue_into_conv_kernel(rng) -> None:
    g = optimize(_conv_bn_graph(rng))
    groups = fuse(g)
    assert [[n.op for n in gr.nodes] for gr in groups] == [["Conv", "Relu", "Reshape"]]
    assert [[n.op for n in gr.nodes] for gr in fuse(g, enabled=False)] == [["Conv"], ["Relu"], ["Reshape"]]


@pytest.mark.parametrize("fused", [True, False])
def test_compiled_graph_matches_numpy(rng, fused: bool) -> None:
    g = _conv_bn_graph(rng)
    # NCHW kernels: the CPU layout pass (blocked convolutions) would add conversion kernels at the
    # model's input; tests/cpu/test_conv_layouts.py covers that path.
    with PassContext(disabled_passes=["AlterLayout"]):
        model = compile_model(g, fuse_ops=fused)
    x = rng.standard_normal((1, 3, 7, 9)).astype(np.float32)
    out = model(x)[0]
    np.testing.assert_allclose(out, _reference(g, x), rtol=1e-5, atol=1e-5)
    kinds = [s["kind"] for s in model.plan["steps"]]
    assert kinds == (["kernel"] if fused else ["kernel", "kernel", "view"])  # a lone reshape copies nothing


def test_shape_subgraph_is_folded() -> None:
    nodes = [
        Node("Shape", ["x"], ["s"], {}, "shape"),
        Node("Gather", ["s", "zero"], ["n"], {"axis": 0}, "gather"),
        Node("Unsqueeze", ["n", "axes"], ["n1"], {}, "unsq", opset=13),
        Node("Concat", ["n1", "minus1"], ["target"], {"axis": 0}, "concat"),
        Node("Reshape", ["x", "target"], ["y"], {}, "reshape"),
    ]
    consts = {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    g = Graph(["x"], ["y"], nodes, {"x": TensorInfo((2, 3, 4), "float32")}, consts)
    folded = infer_and_fold(g)
    assert [n.op for n in folded.nodes] == ["Reshape"]
    np.testing.assert_array_equal(folded.consts["target"], [2, -1])
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(ember.compile(g)(x)[0], x.reshape(2, 12))


def test_memory_plan_reuses_buffers(rng) -> None:
    nodes, prev = [], "x"
    for k in range(6):  # a chain of reductions: each kernel's output dies after the next runs
        nodes.append(Node("Softmax", [prev], [f"s{k}"], {"axis": -1}, f"sm{k}", opset=13))
        prev = f"s{k}"
    g = Graph(["x"], [prev], nodes, {"x": TensorInfo((4, 33), "float32")}, {})
    model = compile_model(g)
    assert len(model.plan["storages"]) <= 2 < model.num_kernels
    x = rng.standard_normal((4, 33)).astype(np.float32)
    ref = x.astype(np.float64)
    for _ in range(6):
        e = np.exp(ref - ref.max(-1, keepdims=True))
        ref = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(model(x)[0], ref, rtol=1e-5, atol=1e-6)
