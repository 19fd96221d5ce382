"""The layout pass (``ember.graph.alter_layout``): AlterLayout with a test policy, propagation
through layout-agnostic operators (and where it must stop), CancelLayoutTransforms, the strategy
hook and the compile driver.

Tolerance: the altered model runs the same float32 operations on every element as the unaltered
one (layout transforms are copies, Relu and Add are elementwise, the Conv and the pool kernels
are the same), so the two models' outputs are compared for exact equality; the float64 NumPy
reference is checked with rtol 1e-5 / atol 1e-5 (float32 rounding of a 45-term convolution sum)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember
from ember.driver import compile_graph, optimize
from ember.graph import Graph, Node, TensorInfo
from ember.graph.alter_layout import (
    AlterLayout,
    CancelLayoutTransforms,
    NodeLayouts,
    NoLayoutPolicy,
    alter_layout,
    cancel_layout_transforms,
)
from ember.graph.layouts import LAYOUT_TRANSFORM, Layout, LayoutSite, ValueLayout, operand_role
from ember.graph.passes import infer_and_fold
from ember.model import Model
from ember.strategy.base import strategy_for
from ember.strategy.cpu import CPUStrategy
from ember.strategy.cpu_layout import CPULayoutPolicy
from ember.transform import PassContext

N, C, H, W = 2, 13, 9, 11  # C = 13: no block of 4 or 8 divides it
RNG = np.random.default_rng(3)
X = RNG.standard_normal((N, 5, H, W)).astype(np.float32)
WEIGHT = RNG.standard_normal((C, 5, 3, 3)).astype(np.float32)


class Blocked:
    """Test policy: the listed ops run in ``layout`` (of ``plain``), treated as layout-agnostic."""

    def __init__(self, ops: tuple[str, ...] = ("Relu",), layout: str = "NCHW4c", plain: str = "NCHW") -> None:
        self.ops, self.layout, self.plain = ops, layout, plain
        self.asked: list[str] = []

    def layouts(self, site: LayoutSite) -> NodeLayouts | None:
        self.asked.append(site.name)
        if site.op not in self.ops:
            return None
        return NodeLayouts([(self.plain, self.layout)], [(self.plain, self.layout)])


def residual_graph(tail: list[Node] | None = None, c: int = C) -> Graph:
    """Conv -> Relu -> Add(residual: the conv output) -> Relu -> GlobalAveragePool."""
    nodes = [
        Node("Conv", ["x", "w"], ["y0"], {"pads": [1, 1, 1, 1]}, "conv"),
        Node("Relu", ["y0"], ["r1"], {}, "relu1"),
        Node("Add", ["r1", "y0"], ["a"], {}, "add"),
        Node("Relu", ["a"], ["r2"], {}, "relu2"),
        *(tail or [Node("GlobalAveragePool", ["r2"], ["y"], {}, "gap")]),
    ]
    w = WEIGHT if c == C else RNG.standard_normal((c, 5, 3, 3)).astype(np.float32)
    return Graph(["x"], ["y"], nodes, {"x": TensorInfo(X.shape, "float32")}, {"w": w})


def transforms(g: Graph) -> list[Node]:
    return [n for n in g.nodes if n.op == LAYOUT_TRANSFORM]


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Float64 NumPy of residual_graph."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y0 = np.zeros((x.shape[0], w.shape[0], H, W))
    for i in range(3):
        for j in range(3):
            y0 += np.einsum("oc,nchw->nohw", w[:, :, i, j].astype(np.float64), xp[:, :, i : i + H, j : j + W])
    r2 = np.maximum(np.maximum(y0, 0) + y0, 0)
    return r2.mean(axis=(2, 3), keepdims=True)


def run(g: Graph, *args: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(o) for o in Model(compile_graph(g))(*args)]


# -- the pass -----------------------------------------------------------------------------------------
def test_blocked_region_needs_one_transform_in_and_one_out() -> None:
    g0 = optimize(residual_graph())
    g1 = AlterLayout(Blocked())(g0)
    ts = transforms(g1)
    assert len(ts) == 2, g1
    into, out = ts
    assert (into.inputs, into.attrs["src_layout"], into.attrs["dst_layout"]) == (["y0"], "NCHW", "NCHW4c")
    assert (out.outputs, out.attrs["src_layout"], out.attrs["dst_layout"]) == (["r2"], "NCHW4c", "NCHW")
    assert out.attrs["primal_shape"] == [N, C, H, W]
    ops = [(n.op, n.name) for n in g1.nodes]
    assert ops == [("Conv", "conv"), (LAYOUT_TRANSFORM, "layout_y0__NCHW4c"), ("Relu", "relu1"), ("Add", "add"),
                   ("Relu", "relu2"), (LAYOUT_TRANSFORM, "layout_r2"), ("GlobalAveragePool", "gap")]
    add = next(n for n in g1.nodes if n.name == "add")
    assert g1.values[add.outputs[0]].shape == (N, 4, H, W, 4)  # the Add was propagated into the layout
    assert g1.inputs == g0.inputs and g1.outputs == g0.outputs and g1.values["y"] == g0.values["y"]
    assert len(transforms(optimize(g1))) == 2  # nothing to fold: no transform reads a constant


def test_altered_model_computes_the_same_outputs() -> None:
    g0 = optimize(residual_graph())
    g1 = AlterLayout(Blocked())(g0)
    (want,) = run(g0, X)
    (got,) = run(g1, X)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, reference(X, WEIGHT), rtol=1e-5, atol=1e-5)


def test_driver_runs_the_strategy_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    # the CPU's own policy places the convolution in NCHW[x]c (tests/cpu/test_conv_layouts.py)
    assert isinstance(strategy_for("llvm").layout_policy(), CPULayoutPolicy)
    with PassContext(disabled_passes=["AlterLayout"]):
        (plain,) = ember.compile(residual_graph())(X)
    np.testing.assert_allclose(ember.compile(residual_graph())(X)[0], plain, rtol=1e-5, atol=1e-5)
    policy = Blocked()
    monkeypatch.setattr(CPUStrategy, "layout_policy", lambda self: policy)
    model = ember.compile(residual_graph())
    assert policy.asked and "r1__NCHW4c" in model.plan["values"]
    np.testing.assert_array_equal(model(X)[0], plain)
    with PassContext(disabled_passes=["AlterLayout"]):
        off = ember.compile(residual_graph())
    assert not any("__NCHW4c" in v for v in off.plan["values"])
    np.testing.assert_array_equal(off(X)[0], plain)


def test_disabled_pass_gives_the_original_graph() -> None:
    g0 = optimize(residual_graph())
    with PassContext(disabled_passes=["AlterLayout"]) as ctx:
        assert AlterLayout(Blocked())(g0) is g0
    assert ctx.skipped == ["AlterLayout"]
    with PassContext(opt_level=1):
        assert AlterLayout(Blocked())(g0) is g0


def test_no_policy_is_the_identity() -> None:
    g0 = optimize(residual_graph())
    assert AlterLayout()(g0) is g0
    assert AlterLayout(NoLayoutPolicy())(g0) is g0
    assert alter_layout(g0, Blocked(ops=("Softmax",))) is g0  # a policy placing nothing changes nothing


def test_unknown_layout_string_raises_layout_error() -> None:
    g0 = optimize(residual_graph())
    with pytest.raises(ember.LayoutError, match="Relu node 'relu1': layout 'NCHWc'.*no factor"):
        AlterLayout(Blocked(layout="NCHWc"))(g0)
    with pytest.raises(ember.LayoutError, match="primal axes OIHW; the tensor's plain layout NCHW"):
        AlterLayout(Blocked(layout="OIHW4o"))(g0)


def test_layout_not_matching_the_rank_names_the_node() -> None:
    g0 = optimize(residual_graph())
    with pytest.raises(ember.LayoutError, match=r"input 0 %y0 .* Relu node 'relu1'.*5 primal axes NCDHW.*4 dimensions"):
        AlterLayout(Blocked(layout="NCDHW4c", plain="NCDHW"))(g0)


def test_wrong_number_of_layouts_is_an_error() -> None:
    class TwoInputs:
        def layouts(self, site: LayoutSite) -> NodeLayouts | None:
            return NodeLayouts([None, None], [None]) if site.op == "Relu" else None

    with pytest.raises(ember.LayoutError, match="2 input and 1 output layouts for Relu node 'relu1'"):
        AlterLayout(TwoInputs())(optimize(residual_graph()))


def test_policy_sees_shapes_and_constants() -> None:
    seen: dict[str, LayoutSite] = {}

    class Record:
        def layouts(self, site: LayoutSite) -> NodeLayouts | None:
            seen[site.name] = site
            return None

    AlterLayout(Record())(optimize(residual_graph()))
    conv = seen["conv"]
    assert conv.op == "Conv" and conv.attrs["pads"] == [1, 1, 1, 1]
    assert [(v.name, v.shape, v.constant) for v in conv.inputs if v] == [
        ("x", (N, 5, H, W), False), ("w", (C, 5, 3, 3), True)]
    assert conv.outputs[0].shape == (N, C, H, W) and conv.outputs[0].dtype == "float32"


def test_equivalent_layouts_of_other_letters_share_one_transform() -> None:
    class Mixed:
        def layouts(self, site: LayoutSite) -> NodeLayouts | None:
            if site.name == "relu1":
                return NodeLayouts([("NCHW", "NCHW4c")], [("NCHW", "NCHW4c")])
            if site.name == "relu2":
                return NodeLayouts([("ABCD", "ABCD4b")], [("ABCD", "ABCD4b")])
            return None

    g1 = AlterLayout(Mixed())(optimize(residual_graph()))
    assert len(transforms(g1)) == 2
    assert transforms(g1)[1].attrs["src_layout"] == "ABCD4b"
    np.testing.assert_array_equal(run(g1, X)[0], run(optimize(residual_graph()), X)[0])


def test_policy_variant_op_and_attrs() -> None:
    class AsLeaky:  # Relu rewritten to its "variant": LeakyRelu(alpha=0) computes the same
        def layouts(self, site: LayoutSite) -> NodeLayouts | None:
            if site.op != "Relu":
                return None
            return NodeLayouts([("NCHW", "NHWC")], [("NCHW", "NHWC")], op="LeakyRelu", attrs={"alpha": 0.0})

    g0 = optimize(residual_graph())
    g1 = AlterLayout(AsLeaky())(g0)
    assert [n.op for n in g1.nodes].count("LeakyRelu") == 2 and "Relu" not in [n.op for n in g1.nodes]
    assert len(transforms(g1)) == 2
    np.testing.assert_array_equal(run(g1, X)[0], run(g0, X)[0])


# -- propagation: where it is exact and where it must stop ----------------------------------------------
def _tail(*nodes: Node) -> list[Node]:
    return [*nodes, Node("GlobalAveragePool", ["t"], ["y"], {}, "gap")]


def _check_same(g: Graph, *extra: np.ndarray) -> Graph:
    g0 = optimize(g)
    g1 = optimize(AlterLayout(Blocked())(g0))
    np.testing.assert_array_equal(run(g1, X, *extra)[0], run(g0, X, *extra)[0])
    return g1


def _blocked_ops(g: Graph) -> set[str]:
    return {n.name for n in g.nodes if n.op != LAYOUT_TRANSFORM and len(g.values[n.outputs[0]].shape) == 5}


def test_padding_that_would_not_stay_zero_stops_propagation() -> None:
    # Sigmoid(0) = 0.5 would fill the 3 padded channels: it must run on the plain tensor
    g = _check_same(residual_graph(_tail(Node("Sigmoid", ["r2"], ["t"], {}, "sig"))))
    assert "sig" not in _blocked_ops(g) and len(transforms(g)) == 2


def test_without_padding_any_elementwise_op_propagates() -> None:
    g = residual_graph(_tail(Node("Sigmoid", ["r2"], ["t"], {}, "sig")), c=16)
    g0 = optimize(g)
    g1 = AlterLayout(Blocked())(g0)
    assert "sig" in _blocked_ops(g1) and len(transforms(g1)) == 2
    np.testing.assert_array_equal(run(g1, X)[0], run(g0, X)[0])


def test_scalar_constants_broadcast_in_the_layout() -> None:
    mul, sub = Node("Mul", ["r2", "two"], ["m"], {}, "mul"), Node("Sub", ["m", "zero"], ["t"], {}, "sub")
    g = residual_graph(_tail(mul, sub))
    g.consts["two"] = np.array(2.0, np.float32)
    g.consts["zero"] = np.zeros((1, 1, 1, 1), np.float32)
    g1 = _check_same(g)
    assert {"mul", "sub"} <= _blocked_ops(g1) and len(transforms(g1)) == 2


def test_a_scalar_that_fills_the_padding_stops_propagation() -> None:
    g = residual_graph(_tail(Node("Add", ["r2", "half"], ["t"], {}, "addh")))
    g.consts["half"] = np.array([0.5], np.float32)
    g1 = _check_same(g)
    assert "addh" not in _blocked_ops(g1)


def test_runtime_scalar_proves_nothing_about_the_padding() -> None:
    g = residual_graph(_tail(Node("Mul", ["r2", "s"], ["t"], {}, "muls")))
    g.inputs.append("s")
    g.values["s"] = TensorInfo((1,), "float32")
    g1 = _check_same(g, np.array([np.inf], np.float32))  # 0 * inf would be NaN in the padding
    assert "muls" not in _blocked_ops(g1)


def test_broadcast_along_unsplit_axes_is_converted_too() -> None:
    # a per-channel bias [1, C, 1, 1] broadcasts along N, H, W, which NCHW4c does not split
    g = residual_graph(_tail(Node("Add", ["r2", "bias"], ["t"], {}, "bias_add")))
    g.consts["bias"] = np.zeros((1, C, 1, 1), np.float32) + RNG.standard_normal((1, C, 1, 1)).astype(np.float32)
    g1 = _check_same(g)
    assert "bias_add" in _blocked_ops(g1) and len(transforms(g1)) == 2  # the bias transform was folded
    assert any(v.shape == (1, 4, 1, 1, 4) for v in g1.consts.values())


def test_broadcast_along_the_split_axis_stops_propagation() -> None:
    # [N, 1, H, W] broadcasts along C: blocked, it would be one value and three zeros per block
    g = residual_graph(_tail(Node("Add", ["r2", "plane"], ["t"], {}, "plane_add")))
    g.consts["plane"] = RNG.standard_normal((N, 1, H, W)).astype(np.float32)
    g1 = _check_same(g)
    assert "plane_add" not in _blocked_ops(g1)


def test_operand_role_is_exact() -> None:
    vl = ValueLayout.of("NCHW", "NCHW4c")
    out = (2, 13, 9, 11)
    assert operand_role(out, out, vl) == "layout"
    assert operand_role((1, 13, 1, 1), out, vl) == "layout"
    assert operand_role((1, 1, 1, 1), out, vl) == "scalar"
    assert operand_role((), out, vl) == "scalar" and operand_role((1,), out, vl) == "scalar"
    assert operand_role((2, 1, 9, 11), out, vl) is None  # 1 along the split axis
    assert operand_role((13, 1, 1), out, vl) is None  # lower rank: not converted
    assert operand_role((1, 1, 1, 1, 1), out, vl) is None  # higher rank: would change the output
    assert operand_role((2, 1, 9, 11), out, ValueLayout.of("NCHW", "NHWC")) == "layout"


def test_graph_output_read_inside_the_region_stays_plain() -> None:
    g = residual_graph()
    g.outputs.append("a")  # the blocked Add's result is also a model output
    g0 = optimize(g)
    g1 = AlterLayout(Blocked())(g0)
    assert g1.outputs == ["y", "a"] and g1.values["a"].shape == (N, C, H, W)
    want, got = run(g0, X), run(g1, X)
    for w, v in zip(want, got):
        np.testing.assert_array_equal(v, w)


# -- cancelling transforms ------------------------------------------------------------------------------
def _t(src: str, dst: str, x: str, y: str, primal: list[int] | None = None) -> Node:
    attrs: dict[str, Any] = {"src_layout": src, "dst_layout": dst}
    if primal is not None:
        attrs["primal_shape"] = primal
    return Node(LAYOUT_TRANSFORM, [x], [y], attrs, f"t_{y}")


def test_cancel_merges_chains_and_removes_round_trips() -> None:
    p = [1, 13, 3, 5]
    nodes = [
        _t("NCHW", "NCHW8c", "x", "b8", p),
        _t("NCHW8c", "NCHW4c", "b8", "b4", p),
        _t("NCHW4c", "NCHW", "b4", "back", p),  # x -> 8c -> 4c -> NCHW: x itself
        Node("Relu", ["back"], ["r"], {}, "relu"),
        _t("NCHW", "NCHW8c", "r", "r8", p),
        _t("NCHW8c", "NHWC", "r8", "y1", p),  # merged: NCHW -> NHWC
        _t("NCHW", "NCHW8c", "r", "r8b", p),  # a duplicate of r8
        _t("NCHW8c", "NCHW", "r8b", "y2", p),  # a round trip ending at an output: Identity
    ]
    g = Graph(["x"], ["y1", "y2"], nodes, {"x": TensorInfo((1, 13, 3, 5), "float32")})
    g = infer_and_fold(g, fold=False)
    c = CancelLayoutTransforms()(g)
    assert [(n.op, n.inputs, n.outputs) for n in c.nodes] == [
        ("Relu", ["x"], ["r"]),
        (LAYOUT_TRANSFORM, ["r"], ["y1"]),
        ("Identity", ["r"], ["y2"]),
    ]
    assert c.nodes[1].attrs == {"src_layout": "NCHW", "dst_layout": "NHWC", "primal_shape": [1, 13, 3, 5]}
    x = RNG.standard_normal((1, 13, 3, 5)).astype(np.float32)
    for want, got in zip(run(g, x), run(c, x)):
        np.testing.assert_array_equal(got, want)
    assert cancel_layout_transforms(c).nodes == c.nodes  # nothing left to cancel


def test_cancel_keeps_transforms_that_do_not_chain() -> None:
    nodes = [
        _t("NCHW", "NCHW4c", "x", "b4"),
        Node("Relu", ["b4"], ["r4"], {}, "relu"),
        _t("NCHW4c", "NCHW", "r4", "y"),
    ]
    g = infer_and_fold(Graph(["x"], ["y"], nodes, {"x": TensorInfo((1, 8, 2, 2), "float32")}), fold=False)
    assert len(transforms(cancel_layout_transforms(g))) == 2


def test_layout_types_are_shared_with_ops() -> None:
    from ember.ops.layout_transform import Layout as OpsLayout

    assert Layout is OpsLayout and Layout("NCHW4c") == OpsLayout("NCHW4c")
