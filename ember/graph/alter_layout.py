"""Layout decisions as a graph pass with the target in hand (as TVM's AlterOpLayout and ONNX
Runtime's NCHWc transformer).

:class:`AlterLayout` asks a :class:`~ember.graph.layouts.LayoutPolicy` (the target strategy's,
:meth:`ember.strategy.Strategy.layout_policy`) where each node should run and rewrites the graph:

* a node the policy places (:class:`~ember.graph.layouts.NodeLayouts`) reads each input in the
  layout asked for and writes its outputs in theirs, rewritten to the policy's variant (another
  operator and attributes, or the same node when it is layout-agnostic);
* a layout-agnostic node (:data:`~ember.graph.layouts.LAYOUT_AGNOSTIC`) whose input is held only
  in a blocked layout runs in that layout when every further operand is valid there
  (:func:`~ember.graph.layouts.operand_role`) and, where the layout pads, it maps the zero
  padding to zero (:func:`~ember.graph.layouts.keeps_zero_padding`): chains stay blocked;
* ``ember.LayoutTransform`` nodes are inserted where a tensor is needed in a layout it is not
  held in — one per (tensor, layout), converting directly from a layout it is held in;
* every other node, and every graph output, gets its tensors in the graph's own layout, under
  their original names: the model computes the same outputs.

**Invariant:** the padding of every blocked tensor is zero (LayoutTransform writes zeros, the
propagation rule keeps them, a policy's variants promise them), so a blocked operator may rely
on it (a convolution summing over padded input channels).

:class:`CancelLayoutTransforms` (:func:`cancel_layout_transforms`) merges a transform of a
transform into one (A→B→C becomes A→C), removes those that undo each other (A→B→A) and
identical duplicates; :class:`AlterLayout` ends with it. Without a policy, or with one that has
no preference, :class:`AlterLayout` gives its input graph back unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import GraphError, LayoutError
from ..transform import Pass, PassContext
from .ir import Graph, Node, TensorInfo
from .layouts import (
    LAYOUT_AGNOSTIC,
    LAYOUT_TRANSFORM,
    Layout,
    LayoutPolicy,
    LayoutSite,
    NodeLayouts,
    OperandRole,
    SiteValue,
    ValueLayout,
    keeps_zero_padding,
    operand_role,
)
from .passes import dead_code_elimination, infer_and_fold, need_graph

__all__ = [
    "AlterLayout",
    "CancelLayoutTransforms",
    "LayoutPolicy",
    "NoLayoutPolicy",
    "NodeLayouts",
    "alter_layout",
    "cancel_layout_transforms",
    "fold_zero_pads",
]


class NoLayoutPolicy:
    """The policy without preferences: every node stays as it is (:class:`AlterLayout` is then
    the identity)."""

    def layouts(self, site: LayoutSite) -> NodeLayouts | None:
        """Always None."""
        return None


def _primal(vl: ValueLayout, plain_shape: tuple[int, ...]) -> list[int]:
    """A tensor's primal extents (plain shape ``plain_shape``) in the order of ``vl.layout``."""
    ext = dict(zip(vl.plain.primal, plain_shape))
    return [ext[a] for a in vl.layout.primal]


class _Rewriter:
    """One run of :func:`alter_layout`: the new node list and where each tensor is held."""

    def __init__(self, graph: Graph, policy: LayoutPolicy) -> None:
        self.g = graph
        self.policy = policy
        self.values = dict(graph.values)
        self.consts = dict(graph.consts)
        self.nodes: list[Node] = []
        # tensor -> the name holding it in the graph's own layout (when it is held so)
        self.home: dict[str, str] = {v: v for v in [*graph.inputs, *graph.consts]}
        # tensor -> the blocked copies made of it: (its layout, the name holding it)
        self.blocked: dict[str, list[tuple[ValueLayout, str]]] = {}
        self.taken = set(graph.values) | set(graph.consts) | {v for n in graph.nodes for v in (*n.inputs, *n.outputs)}
        self.changed = False

    # -- names and shapes ---------------------------------------------------------------------------
    def info(self, v: str, node: Node | None = None) -> TensorInfo:
        info = self.values.get(v)
        if info is None:
            where = f" (read by {node.op} node {node.name!r})" if node is not None else ""
            raise GraphError(f"AlterLayout: value {v!r}{where} has no shape; run InferAndFold first")
        return info

    def fresh(self, base: str, layout: Layout) -> str:
        stem = f"{base}__{re.sub(r'[^A-Za-z0-9]', '_', str(layout))}"
        name, k = stem, 1
        while name in self.taken:
            name, k = f"{stem}_{k}", k + 1
        self.taken.add(name)
        return name

    def emit_transform(
        self, src_name: str, src: Layout, dst: Layout, ext: dict[str, int], out: str, dtype: str
    ) -> None:
        attrs = {"src_layout": str(src), "dst_layout": str(dst), "primal_shape": [ext[a] for a in src.primal]}
        self.nodes.append(Node(LAYOUT_TRANSFORM, [src_name], [out], attrs, f"layout_{out}"))
        self.values[out] = TensorInfo(dst.shape_of([ext[a] for a in dst.primal]), dtype)
        self.changed = True

    # -- tensors in the layouts asked for -----------------------------------------------------------
    def get(self, v: str, vl: ValueLayout | None) -> str:
        """The name holding tensor ``v`` in ``vl`` (None: the graph's own layout), converting it
        (once per layout) when needed."""
        if vl is None or vl.is_identity:
            return self.get_home(v)
        info = self.values[v]
        for have, name in self.blocked.get(v, []):
            if have.layout.rename(dict(zip(have.plain.primal, vl.plain.primal))) == vl.layout:
                return name
        if v in self.home:
            src_name, src = self.home[v], vl.plain
        else:
            have, src_name = self.blocked[v][0]
            src = have.layout.rename(dict(zip(have.plain.primal, vl.plain.primal)))
        out = self.fresh(v, vl.layout)
        self.emit_transform(src_name, src, vl.layout, dict(zip(vl.plain.primal, info.shape)), out, info.dtype)
        self.blocked.setdefault(v, []).append((vl, out))
        return out

    def get_home(self, v: str) -> str:
        """The name holding tensor ``v`` in the graph's own layout: ``v`` itself (converted back
        from a blocked copy under that name when it was produced blocked)."""
        if v in self.home:
            return self.home[v]
        have, name = self.blocked[v][0]
        info = self.values[v]
        self.emit_transform(name, have.layout, have.plain, dict(zip(have.plain.primal, info.shape)), v, info.dtype)
        self.home[v] = v
        return v

    def produced(self, o: str, vl: ValueLayout | None) -> str:
        """Record that a node writes tensor ``o`` in ``vl``; the name it writes."""
        if vl is None or vl.is_identity:
            self.home[o] = o
            return o
        info = self.values[o]
        name = self.fresh(o, vl.layout)
        self.values[name] = TensorInfo(vl.layout.shape_of(_primal(vl, info.shape)), info.dtype)
        self.blocked[o] = [(vl, name)]
        self.changed = True
        return name

    # -- the three kinds of node --------------------------------------------------------------------
    def site(self, node: Node) -> LayoutSite:
        def sv(v: str) -> SiteValue:
            info = self.info(v, node)
            return SiteValue(v, tuple(info.shape), info.dtype, v in self.consts)

        return LayoutSite(
            node.op,
            node.name,
            tuple(sv(v) if v else None for v in node.inputs),
            tuple(sv(o) for o in node.outputs if o),
            dict(node.attrs),
            node.opset,
        )

    def check(self, node: Node, what: str, v: str, vl: ValueLayout) -> None:
        info = self.info(v, node)
        if len(vl.plain.primal) != len(info.shape):
            raise LayoutError(
                f"layout policy {type(self.policy).__name__} asks {what} %{v} ({info}) of {node.op} node "
                f"{node.name!r} to be in {vl.layout} (plain {vl.plain}): its {len(vl.plain.primal)} primal axes "
                f"{vl.plain.primal} do not match the tensor's {len(info.shape)} dimensions"
            )

    def place(self, node: Node, nl: NodeLayouts) -> None:
        if len(nl.inputs) != len(node.inputs) or len(nl.outputs) != len(node.outputs):
            raise LayoutError(
                f"layout policy {type(self.policy).__name__} gives {len(nl.inputs)} input and {len(nl.outputs)} "
                f"output layouts for {node.op} node {node.name!r}, which has {len(node.inputs)} inputs and "
                f"{len(node.outputs)} outputs"
            )
        for k, (v, vl) in enumerate(zip(node.inputs, nl.inputs)):
            if v and vl is not None:
                self.check(node, f"input {k}", v, vl)
        for k, (o, vl) in enumerate(zip(node.outputs, nl.outputs)):
            if o and vl is not None:
                self.check(node, f"output {k}", o, vl)
        ins = [self.get(v, vl) if v else "" for v, vl in zip(node.inputs, nl.inputs)]
        outs = [self.produced(o, vl) if o else "" for o, vl in zip(node.outputs, nl.outputs)]
        op = nl.op if nl.op is not None else node.op
        attrs = dict(nl.attrs) if nl.attrs is not None else dict(node.attrs)
        if op != node.op or nl.attrs is not None:
            self.changed = True
        self.nodes.append(Node(op, ins, outs, attrs, node.name, node.opset))

    def propagate(self, node: Node) -> bool:
        """Run layout-agnostic ``node`` in the blocked layout of an input held only blocked, when
        that is exact; False (nothing done) otherwise."""
        if node.op not in LAYOUT_AGNOSTIC or len(node.outputs) != 1 or not node.outputs[0]:
            return False
        out = node.outputs[0]
        oshape = tuple(self.info(out, node).shape)
        lead = next(
            (v for v in node.inputs if v and v not in self.home and v in self.blocked
             and tuple(self.info(v, node).shape) == oshape),
            None,
        )
        if lead is None:
            return False
        vl = self.blocked[lead][0][0]
        roles: list[OperandRole | None] = []
        for v in node.inputs:
            role: OperandRole | None = None
            if v == lead:
                role = "layout"
            elif v:
                role = operand_role(self.info(v, node).shape, oshape, vl)
                if role is None:
                    return False
            roles.append(role)
        if vl.layout.pads(_primal(vl, oshape)):
            dtypes = [self.info(v, node).dtype if v else "float32" for v in node.inputs]
            scalars = {v: self.consts[v] for v, r in zip(node.inputs, roles) if r == "scalar" and v in self.consts}
            if not keeps_zero_padding(node, roles, dtypes, len(oshape), scalars):
                return False
        ins = [
            self.get(v, vl) if r == "layout" else (self.get_home(v) if v else "") for v, r in zip(node.inputs, roles)
        ]
        self.nodes.append(Node(node.op, ins, [self.produced(out, vl)], dict(node.attrs), node.name, node.opset))
        return True

    def keep(self, node: Node) -> None:
        ins = [self.get_home(v) if v else "" for v in node.inputs]
        for o in node.outputs:
            if o:
                self.home[o] = o
        self.nodes.append(Node(node.op, ins, list(node.outputs), dict(node.attrs), node.name, node.opset))

    def run(self) -> Graph:
        for node in self.g.nodes:
            try:
                nl = self.policy.layouts(self.site(node))
            except LayoutError as exc:
                raise LayoutError(
                    f"layout policy {type(self.policy).__name__} on {node.op} node {node.name!r}: {exc}"
                ) from exc
            if nl is not None:
                self.place(node, nl)
            elif not self.propagate(node):
                self.keep(node)
        for o in self.g.outputs:
            self.get_home(o)
        if not self.changed:
            return self.g
        g = Graph(list(self.g.inputs), list(self.g.outputs), self.nodes, self.values, self.consts, self.g.name)
        return infer_and_fold(_prune_values(cancel_layout_transforms(g)), fold=False)


def alter_layout(graph: Graph, policy: LayoutPolicy | None) -> Graph:
    """``graph`` with its nodes in the layouts ``policy`` asks for (see the module docstring).

    Zero ``Pad`` nodes in front of convolutions are folded into them first
    (:func:`fold_zero_pads`). Needs shapes inferred (:func:`~ember.graph.passes.infer_and_fold`).
    Gives a graph with the
    same inputs and outputs (names, shapes, layouts), shapes inferred, transforms cancelled;
    ``graph`` itself when ``policy`` is None or changes nothing. Raises
    :class:`~ember.errors.LayoutError` when the policy asks for a layout that does not fit a
    tensor of the node (naming the node), or answers for the wrong number of tensors."""
    if policy is None:
        return graph
    return _Rewriter(fold_zero_pads(graph), policy).run()


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _pad_amounts(node: Node, consts: dict[str, np.ndarray]) -> list[int] | None:
    """The ``pads`` of ``Pad`` node ``node`` (4-D, constant mode, zero value, constant pads, no
    ``axes``) when only the spatial axes are padded, by non-negative amounts; else None."""
    if _text(node.attrs.get("mode", "constant")) != "constant":
        return None
    if len(node.inputs) > 1:  # opset >= 11: pads, constant_value, axes are inputs
        if node.inputs[1] not in consts or (len(node.inputs) > 3 and node.inputs[3]):
            return None
        value = consts.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(())
        if value is None or np.any(np.asarray(value) != 0):
            return None
        pads = [int(v) for v in np.asarray(consts[node.inputs[1]]).reshape(-1)]
    else:
        if float(node.attrs.get("value", 0.0)) != 0.0:
            return None
        pads = [int(v) for v in np.asarray(node.attrs.get("pads", [])).reshape(-1)]
    if len(pads) != 8 or any(p < 0 for p in pads) or pads[0] or pads[1] or pads[4] or pads[5]:
        return None
    return pads


def fold_zero_pads(graph: Graph) -> Graph:
    """``graph`` with each zero-padding ``Pad`` of the spatial axes of a 4-D tensor (as
    TensorFlow-exported networks write "SAME" padding before a strided convolution) folded into
    the ``pads`` of the ``Conv`` nodes that read it, when those are its only readers and it is no
    graph output: the convolutions read the unpadded tensor (exactly the same sums) and the
    padded copy — and, in a blocked layout, the conversions around it — disappear. The input
    itself when nothing folds."""
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for v in n.inputs:
            if v:
                readers.setdefault(v, []).append(n)
    folds: dict[str, tuple[str, list[int]]] = {}  # padded tensor -> (its source, pads)
    for n in graph.nodes:
        if n.op != "Pad" or len(n.outputs) != 1 or n.outputs[0] in graph.outputs:
            continue
        pads = _pad_amounts(n, graph.consts)
        rs = readers.get(n.outputs[0], [])
        if pads is None or not rs or any(
            r.op != "Conv" or r.inputs[0] != n.outputs[0] or n.outputs[0] in r.inputs[1:]
            or _text(r.attrs.get("auto_pad", "NOTSET")) not in ("NOTSET", "")
            for r in rs
        ):
            continue
        folds[n.outputs[0]] = (n.inputs[0], pads)
    if not folds:
        return graph
    g = graph.copy()
    nodes = []
    for n in g.nodes:
        if n.op == "Pad" and n.outputs[0] in folds:
            continue
        if n.op == "Conv" and n.inputs and n.inputs[0] in folds:
            src, p = folds[n.inputs[0]]
            old = [int(v) for v in np.asarray(n.attrs.get("pads", [0, 0, 0, 0])).reshape(-1)] or [0, 0, 0, 0]
            attrs = dict(n.attrs, pads=[old[0] + p[2], old[1] + p[3], old[2] + p[6], old[3] + p[7]])
            n = Node(n.op, [src, *n.inputs[1:]], list(n.outputs), attrs, n.name, n.opset)
        nodes.append(n)
    g.nodes = nodes
    return _prune_values(g)


# -- cancelling transforms ------------------------------------------------------------------------------
def _extents(node: Node, src: Layout, values: dict[str, TensorInfo]) -> dict[str, int] | None:
    """The primal extents of the tensor transform ``node`` reads (in layout ``src``): its
    ``primal_shape`` attribute, else derived from the input's shape (no padding), else None."""
    ps = node.attrs.get("primal_shape")
    if ps is not None:
        return dict(zip(src.primal, (int(d) for d in np.asarray(ps).reshape(-1))))
    info = values.get(node.inputs[0])
    if info is None:
        return None
    return dict(zip(src.primal, src.primal_shape_of(info.shape)))


def cancel_layout_transforms(graph: Graph) -> Graph:
    """``graph`` with its ``ember.LayoutTransform`` chains shortened: a transform reading the
    result of another (A→B then B→C) reads that one's input instead (A→C); one that converts a
    layout into itself is removed (its readers read its input; a graph output becomes an
    ``Identity`` so output names stay); a transform identical to an earlier one (same input and
    attributes) is removed the same way. Transforms left without readers are deleted (with
    :func:`~ember.graph.passes.dead_code_elimination`). Exact: blocked tensors' padding is zero
    (see the module docstring), so dropping a round trip through it changes no value."""
    g = graph.copy()
    outputs = set(g.outputs)
    rename: dict[str, str] = {}
    transforms: dict[str, Node] = {}  # output name -> kept transform node
    seen: dict[tuple[Any, ...], str] = {}
    kept: list[Node] = []
    for node in g.nodes:
        node.inputs = [rename.get(i, i) for i in node.inputs]
        if node.op != LAYOUT_TRANSFORM or len(node.inputs) != 1 or len(node.outputs) != 1:
            kept.append(node)
            continue
        src, dst = Layout(node.attrs["src_layout"]), Layout(node.attrs["dst_layout"])
        x, out = node.inputs[0], node.outputs[0]
        ext = _extents(node, src, g.values)
        first = transforms.get(x)
        if first is not None and Layout(first.attrs["dst_layout"]) == src:
            fsrc = Layout(first.attrs["src_layout"])
            ext = _extents(first, fsrc, g.values) or ext
            src, x = fsrc, first.inputs[0]
        if src == dst:
            if out in outputs:
                kept.append(Node("Identity", [x], [out], {}, node.name, node.opset))
            else:
                rename[out] = x
            continue
        attrs: dict[str, Any] = {"src_layout": str(src), "dst_layout": str(dst)}
        if ext is not None:
            attrs["primal_shape"] = [ext[a] for a in src.primal]
        key = (x, str(src), str(dst), tuple(attrs.get("primal_shape", ())))
        if key in seen and out not in outputs:
            rename[out] = seen[key]
            continue
        new = Node(LAYOUT_TRANSFORM, [x], [out], attrs, node.name, node.opset)
        seen.setdefault(key, out)
        transforms[out] = new
        kept.append(new)
    g.nodes = kept
    return dead_code_elimination(g)


def _prune_values(g: Graph) -> Graph:
    """``g`` with ``values`` restricted to the tensors it still has."""
    live = set(g.inputs) | set(g.outputs) | set(g.consts) | {v for n in g.nodes for v in (*n.inputs, *n.outputs)}
    g.values = {k: v for k, v in g.values.items() if k in live}
    return g


# -- pass objects ----------------------------------------------------------------------------------------
class AlterLayout(Pass):
    """:func:`alter_layout` as a pass: ``AlterLayout(policy)`` (None or
    :class:`NoLayoutPolicy`: the identity). The model compiler runs it with the target strategy's
    policy (:meth:`ember.strategy.Strategy.layout_policy`) after the graph pipeline, then the
    pipeline again (folding the transforms of constant weights)."""

    name = "AlterLayout"
    opt_level = 2
    contract = (
        "needs a Graph with shapes inferred and a layout policy; gives one with the same outputs (names, shapes, "
        "values) whose placed nodes run in the policy's layouts, layout-agnostic chains between them stay blocked, "
        "ember.LayoutTransform only where layouts change (no chain, no round trip), blocked padding zero"
    )

    def __init__(self, policy: LayoutPolicy | None = None) -> None:
        self.policy = policy

    def transform(self, ir: Any, ctx: PassContext) -> Graph:
        """The graph with layouts altered (the input itself when nothing changes)."""
        return alter_layout(need_graph(self, ir), self.policy)


class CancelLayoutTransforms(Pass):
    """:func:`cancel_layout_transforms` as a pass."""

    name = "CancelLayoutTransforms"
    opt_level = 2
    contract = (
        "needs a Graph whose blocked tensors have zero padding; gives one computing the same outputs (same names) "
        "with no LayoutTransform reading another, none converting a layout into itself, no duplicates"
    )

    def transform(self, ir: Any, ctx: PassContext) -> Graph:
        """The graph with transform chains merged and round trips removed."""
        return cancel_layout_transforms(need_graph(self, ir))
