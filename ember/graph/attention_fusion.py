"""Exported transformers' attention as one operator: the graph pass :class:`FuseAttention`.

``torch.onnx.export`` writes a transformer's scaled dot-product attention as separate nodes (the
eager path of HuggingFace models, or ``scaled_dot_product_attention``):

    MatMul(Q, Kᵀ) → [Mul | Div by a constant scalar] → [Add(mask)] → Softmax(axis = last)
    → [Where(IsNaN(p), 0, p)] → MatMul(p, V) → [Transpose(perm = 0, 2, 1, 3)]

which the graph compiler would run as three kernels or more, with the scores and the
probabilities written to memory whole between them. :func:`fuse_attention` replaces each such
chain by one ``ember.FusedAttention`` node (:mod:`ember.ops.fused_attention`) reading ``Q``,
``Kᵀ``, ``V`` and the mask as they are; the CPU strategy computes it as one kernel, a block of
query rows of one head at a time (:mod:`ember.strategy.cpu_attention`). The ``Transpose`` of
the heads back next to the sequence (HuggingFace's ``transpose(1, 2)``) is taken into the node,
so the ``Reshape`` that follows it is a view. The scale of ``scaled_dot_product_attention``'s
export (``Mul`` of ``Q`` and of ``Kᵀ`` by ``sqrt(scale)``) stays where it is: in the kernels
that compute ``Q`` and ``Kᵀ``.

A chain is fused only when it is float32, every intermediate value has no reader outside the
chain and is no graph output (a model returning its attention probabilities keeps them), the
products have the same batch dimensions (no broadcasting), the scale is a constant with one
element and the mask broadcasts to the scores without enlarging them.

:class:`FuseAttention` runs the rewrite for CPU targets only (``FuseAttention(target)``): GPU
targets keep their kernels (the batched products on the packed GEMM or tensor cores).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import GraphError
from ..ops.fused_attention import FUSED_ATTENTION
from ..target import Target
from ..transform import Pass, PassContext
from .ir import Graph, Node

__all__ = ["FuseAttention", "fuse_attention"]


@dataclass
class _Match:
    """One attention chain: the nodes it replaces and the fused node's inputs and attributes."""

    nodes: list[Node]
    q: str
    kt: str
    v: str
    mask: str
    out: str
    attrs: dict[str, Any]
    name: str


class _Matcher:
    """Finds attention chains in one graph (read-only)."""

    def __init__(self, g: Graph):
        self.g = g
        self.prod = g.producers()
        self.cons = g.consumers()
        self.outputs = set(g.outputs)

    # -- helpers ------------------------------------------------------------------------------------
    def shape(self, v: str) -> tuple[int, ...] | None:
        info = self.g.values.get(v)
        return tuple(info.shape) if info is not None else None

    def f32(self, v: str) -> bool:
        info = self.g.values.get(v)
        return info is not None and info.dtype == "float32"

    def private(self, v: str, reader: Node) -> bool:
        """``v`` is read by ``reader`` only and is no graph output."""
        return v not in self.outputs and [id(n) for n in self.cons.get(v, [])] == [id(reader)]

    def scalar(self, v: str) -> float | None:
        """The value of float32 constant ``v`` when it has one element."""
        c = self.g.consts.get(v)
        if c is None or c.dtype != np.float32 or c.size != 1:
            return None
        return float(c.reshape(-1)[0])

    def keeps_shape(self, small: str, big: tuple[int, ...]) -> bool:
        """``small`` broadcasts to ``big`` without enlarging it."""
        s = self.shape(small)
        if s is None or len(s) > len(big):
            return False
        try:
            return tuple(np.broadcast_shapes(s, big)) == tuple(big)
        except ValueError:
            return False

    # -- the chain ------------------------------------------------------------------------------------
    def softmax_last_axis(self, node: Node) -> bool:
        r = len(self.shape(node.inputs[0]) or ())
        if r < 3:
            return False
        axis = int(node.attrs.get("axis", -1 if node.opset >= 13 else 1))
        return (axis + r if axis < 0 else axis) == r - 1

    def scores(self, x: str, reader: Node) -> tuple[list[Node], dict[str, Any], str, str, str] | None:
        """The producers of Softmax input ``x``: ([nodes], attrs, Q, Kᵀ, mask) or None."""
        nodes: list[Node] = []
        attrs: dict[str, Any] = {}
        mask = ""
        full = self.shape(x)
        if full is None or not self.private(x, reader):
            return None
        node = self.prod.get(x)
        if node is not None and node.op == "Add" and len(node.inputs) == 2:
            for k in (0, 1):
                chain, other = node.inputs[k], node.inputs[1 - k]
                p = self.prod.get(chain)
                if p is not None and p.op in ("MatMul", "Mul", "Div") and self.shape(chain) == full \
                        and self.f32(other) and self.keeps_shape(other, full) and self.private(chain, node):
                    nodes.append(node)
                    mask, x, reader, node = other, chain, node, p
                    break
            else:
                return None
        if node is not None and node.op in ("Mul", "Div") and len(node.inputs) == 2:
            ks = (0, 1) if node.op == "Mul" else (0,)
            for k in ks:
                chain, c = node.inputs[k], node.inputs[1 - k]
                value = self.scalar(c)
                p = self.prod.get(chain)
                if value is not None and p is not None and p.op == "MatMul" and self.shape(chain) == full \
                        and self.keeps_shape(c, full) and self.private(chain, node):
                    nodes.append(node)
                    attrs = {"scale": value, "scale_op": node.op.lower()}
                    x, reader, node = chain, node, p
                    break
            else:
                return None
        if node is None or node.op != "MatMul":
            return None
        q, kt = node.inputs[0], node.inputs[1]
        qs, ks = self.shape(q), self.shape(kt)
        if qs is None or ks is None or len(qs) != len(full) or len(ks) != len(full):
            return None
        if qs[:-2] != full[:-2] or ks[:-2] != full[:-2] or qs[-1] != ks[-2]:
            return None
        if not (self.f32(q) and self.f32(kt)):
            return None
        nodes.append(node)
        return nodes[::-1], attrs, q, kt, mask

    def probabilities(self, p: str) -> tuple[list[Node], Node, dict[str, Any]] | None:
        """The readers of the Softmax output ``p`` up to the second MatMul: ([nodes], MatMul, attrs)."""
        if p in self.outputs:
            return None
        readers = self.cons.get(p, [])
        if len(readers) == 1 and readers[0].op == "MatMul" and readers[0].inputs[0] == p \
                and readers[0].inputs[1] != p:
            return [], readers[0], {}
        if len(readers) != 2:
            return None
        isnan = next((n for n in readers if n.op == "IsNaN"), None)
        where = next((n for n in readers if n.op == "Where"), None)
        if isnan is None or where is None or len(where.inputs) != 3:
            return None
        cond, zero, val = where.inputs
        if cond != isnan.outputs[0] or val != p or not self.private(cond, where) or zero in (p, cond):
            return None
        z = self.g.consts.get(zero)
        if z is None or z.dtype != np.float32 or np.any(z != 0) or not self.keeps_shape(zero, self.shape(p) or ()):
            return None
        w = where.outputs[0]
        mm = self.cons.get(w, [])
        if w in self.outputs or len(mm) != 1 or mm[0].op != "MatMul" or mm[0].inputs[0] != w or mm[0].inputs[1] == w:
            return None
        return [isnan, where], mm[0], {"nan_to_zero": 1}

    def match(self, sm: Node) -> _Match | None:
        """The attention chain around Softmax node ``sm``, or None."""
        if sm.op != "Softmax" or len(sm.inputs) != 1 or not self.softmax_last_axis(sm):
            return None
        x, p = sm.inputs[0], sm.outputs[0]
        if not self.f32(x):
            return None
        low = self.scores(x, sm)
        high = self.probabilities(p)
        if low is None or high is None:
            return None
        before, attrs, q, kt, mask = low
        after, mm, more = high
        full = self.shape(x) or ()
        v = mm.inputs[1]
        vs = self.shape(v)
        if vs is None or not self.f32(v) or len(vs) != len(full) or vs[:-2] != full[:-2] or vs[-2] != full[-1]:
            return None
        nodes = [*before, sm, *after, mm]
        out = mm.outputs[0]
        attrs = {**attrs, **more}
        readers = self.cons.get(out, [])
        if len(full) == 4 and out not in self.outputs and len(readers) == 1 and readers[0].op == "Transpose" \
                and [int(a) for a in readers[0].attrs.get("perm", [])] == [0, 2, 1, 3]:
            nodes.append(readers[0])
            out = readers[0].outputs[0]
            attrs["out_perm"] = [0, 2, 1, 3]
        return _Match(nodes, q, kt, v, mask, out, attrs, f"{sm.name or out}/fused_attention")


def fuse_attention(graph: Graph) -> Graph:
    """``graph`` with each attention chain (module docstring) replaced by one
    ``ember.FusedAttention`` node; the graph itself when it has none. Needs shapes inferred."""
    m = _Matcher(graph)
    matches = [mt for n in graph.nodes if n.op == "Softmax" for mt in [m.match(n)] if mt is not None]
    if not matches:
        return graph
    g = graph.copy()
    index = {id(n): k for k, n in enumerate(graph.nodes)}
    gone: set[int] = set()
    at: dict[int, Node] = {}  # position of the chain's last node -> the fused node
    for mt in matches:
        ids = {index[id(n)] for n in mt.nodes}
        if ids & gone:  # chains never share nodes; kept for safety
            continue
        gone |= ids
        ins = [mt.q, mt.kt, mt.v] + ([mt.mask] if mt.mask else [])
        at[max(ids)] = Node(FUSED_ATTENTION, ins, [mt.out], dict(mt.attrs), mt.name, mt.nodes[0].opset)
        for n in mt.nodes:
            for o in n.outputs:
                if o and o != mt.out:
                    g.values.pop(o, None)
    nodes = []
    for k, n in enumerate(g.nodes):
        if k in at:
            nodes.append(at[k])
        elif k not in gone:
            nodes.append(n)
    g.nodes = nodes
    return g


class FuseAttention(Pass):
    """:func:`fuse_attention` as a pass for ``target``: ``FuseAttention(target)``; for a GPU
    target (or none) the graph is left as it is."""

    name = "FuseAttention"
    opt_level = 1
    contract = (
        "needs a Graph with shapes inferred; gives one computing the same outputs in which, for a CPU target, "
        "every float32 MatMul-[scale]-[mask]-Softmax-[Where(IsNaN)]-MatMul chain with private intermediates "
        "is one ember.FusedAttention node"
    )

    def __init__(self, target: str | Target | None = None) -> None:
        self.on = target is not None and not Target(target).is_gpu

    def transform(self, ir: Any, ctx: PassContext) -> Graph:
        """The graph with its attention chains fused (CPU targets)."""
        if not isinstance(ir, Graph):
            raise GraphError(f"graph pass {self.name} needs a Graph, got {type(ir).__name__}")
        return fuse_attention(ir) if self.on else ir
