"""Common subexpression elimination on the graph IR.

Exported networks repeat work that depends only on the model's inputs: a 12-layer BERT from
``torch.onnx.export`` computes the same additive attention mask (``Where(mask, 0, -inf)``) once
per layer, each a kernel launch of its own. :func:`eliminate_common_subexpressions` keeps the
first of every set of nodes that apply the same operator, with the same attributes, to the same
inputs (constants compared by value), and points the readers of the others at its outputs.

Guarantees: the graph computes the same outputs; graph outputs keep their names (a duplicate
that produces one is kept); nodes whose results are not a function of their inputs (random
generators) and graphs with subgraph attributes (``If``, ``Loop``, ``Scan``: their bodies may
name outer values) are left alone.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ..errors import GraphError
from ..transform import Pass, PassContext
from .ir import Graph, Node

#: Operators whose outputs are not determined by their inputs and attributes.
NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                              "Multinomial", "Bernoulli"})
#: Constants up to this many bytes are compared by value; larger ones by name (weights).
VALUE_BYTES = 1 << 16


def _attr_key(v: Any) -> Any:
    """A hashable key of attribute value ``v``, or None when it is not plain data."""
    if isinstance(v, (bool, int, float, str, bytes)) or v is None:
        return (type(v).__name__, v)
    if isinstance(v, (list, tuple)):
        keys = [_attr_key(x) for x in v]
        return None if any(k is None for k in keys) else ("seq", tuple(keys))
    if isinstance(v, np.ndarray) and v.dtype != object:
        return ("nd", str(v.dtype), v.shape, hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest())
    if isinstance(v, np.generic):
        return ("np", str(v.dtype), v.item())
    return None


def _plain(node: Node) -> bool:
    return all(_attr_key(v) is not None for v in node.attrs.values())


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """A copy of ``graph`` without repeated computations (see the module docstring)."""
    if not all(_plain(n) for n in graph.nodes):
        return graph
    g = graph.copy()
    outputs = set(g.outputs)
    rename: dict[str, str] = {}
    seen: dict[Any, Node] = {}
    const_keys: dict[str, Any] = {}

    def input_key(name: str) -> Any:
        if name in g.consts:
            hit = const_keys.get(name)
            if hit is None:
                a = np.asarray(g.consts[name])
                if a.dtype != object and a.nbytes <= VALUE_BYTES:
                    hit = ("c", str(a.dtype), a.shape, hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest())
                else:
                    hit = ("n", name)
                const_keys[name] = hit
            return hit
        return ("n", name)

    kept: list[Node] = []
    for node in g.nodes:
        node.inputs = [rename.get(i, i) for i in node.inputs]
        if node.op in NONDETERMINISTIC:
            kept.append(node)
            continue
        attrs = tuple(sorted((k, _attr_key(v)) for k, v in node.attrs.items() if not k.startswith("_")))
        key = (node.op, node.opset, attrs, tuple(input_key(i) if i else None for i in node.inputs),
               len(node.outputs))
        first = seen.get(key)
        if first is None or any(o in outputs for o in node.outputs if o):
            seen.setdefault(key, node)
            kept.append(node)
            continue
        for mine, theirs in zip(node.outputs, first.outputs):
            if mine:
                if not theirs:
                    break
                rename[mine] = theirs
        else:
            continue
        # an output the first node leaves out: keep this node (no rename is used yet)
        for mine in node.outputs:
            rename.pop(mine, None)
        kept.append(node)
    g.nodes = kept
    return g


class EliminateCommonSubexpressions(Pass):
    """:func:`eliminate_common_subexpressions` as a pass."""

    name = "EliminateCommonSubexpressions"
    opt_level = 1
    contract = ("needs a Graph; gives one computing the same outputs in which no two nodes apply the same "
                "deterministic operator and attributes to the same inputs (constants compared by value)")

    def transform(self, ir: Any, ctx: PassContext) -> Graph:
        """A new graph without repeated computations."""
        if not isinstance(ir, Graph):
            raise GraphError(f"graph pass {self.name} needs a Graph, got {type(ir).__name__}")
        return eliminate_common_subexpressions(ir)
