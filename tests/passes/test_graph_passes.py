"""The graph passes as Pass objects: one test per pass asserting its contract, and the default
graph pipeline. Results are checked by folding the whole graph (every input made a constant, so
InferAndFold computes the outputs with ember's own compiled kernels) and comparing with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import GraphError, PassError
from ember.graph import Graph, Node, TensorInfo
from ember.graph.passes import (
    DeadCodeElimination,
    Fuse,
    FusedGraph,
    InferAndFold,
    Simplify,
    dead_code_elimination,
    default_graph_pipeline,
    infer_and_fold,
    simplify,
)
from ember.transform import PassContext

H, W = 7, 9  # odd sizes: no tile of the Conv schedule divides them


def _conv_bn(rng: np.random.Generator) -> Graph:
    consts = {
        "w": rng.standard_normal((5, 3, 3, 3)).astype(np.float32),
        "scale": rng.uniform(0.5, 1.5, 5).astype(np.float32),
        "b": rng.standard_normal(5).astype(np.float32),
        "mean": rng.standard_normal(5).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, 5).astype(np.float32),
    }
    nodes = [
        Node("Conv", ["x", "w"], ["c"], {"pads": [1, 1, 1, 1]}, "conv"),
        Node("BatchNormalization", ["c", "scale", "b", "mean", "var"], ["bn"], {"epsilon": 1e-5}, "bn"),
        Node("Relu", ["bn"], ["y"], {}, "relu"),
    ]
    return Graph(["x"], ["y"], nodes, {"x": TensorInfo((1, 3, H, W), "float32")}, consts)


def _conv_bn_relu_ref(g: Graph, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float64 reference of Conv -> BatchNormalization -> Relu, and the magnitude of its terms."""
    c = {k: v.astype(np.float64) for k, v in g.consts.items()}
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 5, H, W))
    mag = np.zeros((1, 5, H, W))
    for i in range(3):
        for j in range(3):
            win = xp[:, :, i : i + H, j : j + W]
            out += np.einsum("mc,nchw->nmhw", c["w"][:, :, i, j], win)
            mag += np.einsum("mc,nchw->nmhw", np.abs(c["w"][:, :, i, j]), np.abs(win))
    sh = (1, 5, 1, 1)
    factor = c["scale"].reshape(sh) / np.sqrt(c["var"].reshape(sh) + 1e-5)
    bn = (out - c["mean"].reshape(sh)) * factor + c["b"].reshape(sh)
    scale = mag * np.abs(factor) + np.abs(c["mean"].reshape(sh) * factor) + np.abs(c["b"]).reshape(sh)
    return np.maximum(bn, 0.0), scale


def _run_by_folding(g: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph's outputs computed by ember: inputs become constants and InferAndFold folds
    every node with its compiled kernel."""
    const = g.copy()
    const.consts.update(feeds)
    const.inputs = [i for i in const.inputs if i not in feeds]
    folded = InferAndFold()(const)
    assert folded.nodes == [], [n.op for n in folded.nodes]
    return {o: folded.consts[o] for o in g.outputs}


def test_infer_and_fold_fills_shapes_and_folds_constant_nodes(rng) -> None:
    c1 = rng.standard_normal((3, 5)).astype(np.float32)
    c2 = rng.standard_normal((1, 5)).astype(np.float32)
    g = Graph(
        ["x"],
        ["y"],
        [Node("Add", ["c1", "c2"], ["s"], {}, "add_consts"), Node("Mul", ["x", "s"], ["y"], {}, "mul")],
        {"x": TensorInfo((3, 5), "float32")},
        {"c1": c1, "c2": c2},
    )
    out = InferAndFold()(g)
    assert [n.op for n in out.nodes] == ["Mul"]
    np.testing.assert_array_equal(out.consts["s"], c1 + c2)  # one float32 add: exact
    assert out.values["s"] == TensorInfo((3, 5), "float32")
    assert out.values["y"] == TensorInfo((3, 5), "float32")
    assert [n.op for n in g.nodes] == ["Add", "Mul"] and "y" not in g.values  # the input is unchanged
    nofold = InferAndFold(fold=False)(g)
    assert [n.op for n in nofold.nodes] == ["Add", "Mul"] and nofold.values["s"] == TensorInfo((3, 5), "float32")


def test_graph_simplify_folds_batchnorm_into_conv_and_still_matches_numpy(rng) -> None:
    g = InferAndFold()(_conv_bn(rng))
    out = Simplify()(g)
    assert [n.op for n in out.nodes] == ["Conv", "Relu"]
    conv = out.nodes[0]
    assert conv.inputs[1] != "w" and len(conv.inputs) == 3  # new weights and a bias
    assert out.consts[conv.inputs[1]].shape == (5, 3, 3, 3) and out.consts[conv.inputs[2]].shape == (5,)
    assert "BatchNormalization" in [n.op for n in g.nodes]  # the input graph is unchanged
    x = rng.uniform(-2, 2, (1, 3, H, W)).astype(np.float32)
    ref, scale = _conv_bn_relu_ref(g, x)
    got = _run_by_folding(out, {"x": x})["y"]
    assert got.shape == ref.shape
    np.testing.assert_array_less(np.abs(got - ref), 64 * 2.0**-23 * scale + 1e-30)
    with PassContext(opt_level=0):  # GraphSimplify has opt_level 1: skipped, the graph is the same object
        assert Simplify()(g) is g


def test_dead_code_elimination_removes_unused_nodes_and_constants(rng) -> None:
    g = Graph(
        ["x"],
        ["y"],
        [
            Node("Relu", ["x"], ["y"], {}, "used"),
            Node("Add", ["x", "unused_c"], ["z"], {}, "dead"),
            Node("Exp", ["z"], ["z2"], {}, "dead_too"),
        ],
        {"x": TensorInfo((4,), "float32")},
        {"unused_c": rng.standard_normal(4).astype(np.float32), "kept_c": np.ones(4, np.float32)},
    )
    out = DeadCodeElimination()(g)
    assert [n.name for n in out.nodes] == ["used"]
    assert out.consts == {}
    assert len(g.nodes) == 3 and set(g.consts) == {"unused_c", "kept_c"}
    x = rng.standard_normal(4).astype(np.float32)
    np.testing.assert_array_equal(_run_by_folding(InferAndFold()(out), {"x": x})["y"], np.maximum(x, 0))


def test_fuse_gives_groups_and_skipping_gives_one_node_per_group(rng) -> None:
    g = default_graph_pipeline()(_conv_bn(rng))
    fused = Fuse()(g)
    assert isinstance(fused, FusedGraph) and fused.graph is g
    assert [[n.op for n in gr.nodes] for gr in fused.groups] == [["Conv", "Relu"]]
    assert fused.groups[0].inputs[0] == "x" and fused.groups[0].outputs == ["y"]
    text = str(fused)
    assert "# 1 kernel(s)" in text and "kernel 0 conv_relu [heavy]" in text
    with PassContext(disabled_passes=["Fuse"]) as ctx:
        alone = Fuse()(g)
    assert ctx.skipped == ["Fuse"]
    assert [[n.op for n in gr.nodes] for gr in alone.groups] == [["Conv"], ["Relu"]]
    assert [[n.op for n in gr.nodes] for gr in Fuse(enabled=False)(g).groups] == [["Conv"], ["Relu"]]


def test_default_graph_pipeline_is_what_optimize_did(rng) -> None:
    g = _conv_bn(rng)
    messages: list[str] = []
    nodes = [Node("Add", ["w", "w"], ["w2"], {}, "const_add"), Node("Add", ["y", "y"], ["y2"], {}, "out_add")]
    g.nodes += nodes
    g.outputs = ["y2"]
    expected = dead_code_elimination(simplify(infer_and_fold(g)))
    got = default_graph_pipeline(progress=messages.append)(g)
    assert str(got) == str(expected)
    assert sorted(got.consts) == sorted(expected.consts)
    assert [n.op for n in got.nodes] == ["Conv", "Relu", "Add"]
    assert messages == ["folding Add const_add"]


def test_graph_pipeline_under_a_context(tmp_path, rng) -> None:
    g = _conv_bn(rng)
    with PassContext(disabled_passes=["GraphSimplify", "ExpandRecurrent", "FuseQDQ", "EliminateCommonSubexpressions"],
                     dump_dir=tmp_path,
                     timing=True) as ctx:
        out = default_graph_pipeline()(g)
    assert [n.op for n in out.nodes] == ["Conv", "BatchNormalization", "Relu"]
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["001_InferAndFold.txt", "002_DeadCodeElimination.txt"]
    assert (tmp_path / "002_DeadCodeElimination.txt").read_text() == str(out) + "\n"
    assert "float32[1, 5, 7, 9]" in (tmp_path / "001_InferAndFold.txt").read_text()
    assert [n for n, _ in ctx.timings] == ["InferAndFold", "DeadCodeElimination"]
    with PassContext(disabled_passes=["InferAndFold"]), pytest.raises(PassError, match="InferAndFold cannot be"):
        default_graph_pipeline()(g)


def test_graph_pass_on_a_non_graph_is_a_graph_error() -> None:
    with pytest.raises(GraphError, match="DeadCodeElimination needs a Graph"):
        DeadCodeElimination()([1, 2])
