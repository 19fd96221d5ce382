"""Structural checks of ember's graph IR, before any pass or kernel sees a graph.

:func:`validate_graph` checks what every pass assumes of a :class:`~ember.graph.ir.Graph`:

* every value has one definition: graph inputs, constants and node outputs do not share names;
* nodes are in topological order: a node reads graph inputs, constants and outputs of earlier
  nodes only (so the graph has no cycle), and every graph output is defined;
* graph inputs have a :class:`~ember.graph.ir.TensorInfo` of non-negative integer dimensions
  and a known dtype (``string`` for text, which no compiled node may read); constants are NumPy
  arrays;
* every node names an operator ember implements.

Each broken rule raises :class:`~ember.errors.GraphError` naming the node or value. The rules of
each operator (attribute ranges, shapes that must agree) are checked by the operator itself when
shape inference builds it (``ember/ops``, :meth:`~ember.ops.registry.OpContext.fail`); those of
ONNX models first by :mod:`ember.frontend.validate`.
"""

from __future__ import annotations

import numpy as np

from ..errors import GraphError, TypeMismatchError
from ..ir.dtypes import dtype as as_dtype
from ..ops.registry import lookup
from .ir import STRING, Graph


def validate_graph(graph: Graph) -> None:
    """Raise :class:`GraphError` when ``graph`` breaks one of the rules of the module docstring."""
    defined: dict[str, str] = {}

    def define(name: str, what: str) -> None:
        if name in defined:
            raise GraphError(f"graph {graph.name!r}: {name!r} is defined twice ({defined[name]} and {what})")
        defined[name] = what

    for name in graph.inputs:
        define(name, "a graph input")
        info = graph.values.get(name)
        if info is None:
            raise GraphError(f"graph input {name!r} has no shape and dtype")
        if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in info.shape):
            raise GraphError(f"graph input {name!r} has shape {info.shape}: dimensions must be integers >= 0")
        if info.dtype == STRING:
            continue  # text: shape inference refuses a node that reads it
        try:
            as_dtype(info.dtype)
        except TypeMismatchError as exc:
            raise GraphError(f"graph input {name!r} has dtype {info.dtype!r}, which ember does not know") from exc
    for name, value in graph.consts.items():
        if not isinstance(value, np.ndarray):
            raise GraphError(f"constant {name!r} is a {type(value).__name__}, not a NumPy array")
        if name not in defined:  # a constant may shadow nothing, but an input it replaces is gone
            define(name, "a constant")
    for k, node in enumerate(graph.nodes):
        label = f"{node.op} node {node.name or k!r}"
        if lookup(node.op) is None:
            raise GraphError(f"{label}: ember has no operator {node.op!r}")
        for i in node.inputs:
            if i and i not in defined:
                raise GraphError(
                    f"{label} reads {i!r}, which is neither a graph input, a constant nor the output of an earlier "
                    "node (nodes must be in topological order; the graph must have no cycle)"
                )
        for o in node.outputs:
            if o:
                define(o, f"the output of {label}")
    for o in graph.outputs:
        if o not in defined:
            raise GraphError(f"graph output {o!r} is not computed by any node, nor an input or a constant")
