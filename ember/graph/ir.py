"""The graph IR: a dataflow graph of operators over named tensors with static shapes.

A :class:`Graph` has input names, output names, nodes in topological order, the shape and dtype
of every value (:class:`TensorInfo`, filled in by shape inference) and constant values (weights
and folded results, as NumPy arrays). Operators are named as in ONNX (``Conv``, ``Add``...)
with attributes as Python values. ``str(graph)`` prints it one node a line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The dtype of text tensors: NumPy ``object`` arrays of ``str``. Only host operators
#: (:mod:`ember.host_stages`) compute on them; shape inference refuses a node of a compiled graph
#: that reads one (GraphError naming the node).
STRING = "string"


@dataclass(frozen=True)
class TensorInfo:
    """The static shape and dtype of a value."""

    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"

    @property
    def nbytes(self) -> int:
        """Bytes the value takes."""
        item = np.dtype(object if self.dtype == STRING else self.dtype).itemsize  # strings: one reference each
        return int(np.prod(self.shape, dtype=np.int64)) * item


@dataclass
class Node:
    """One operator application: ``outputs = op(inputs; attrs)``. An omitted optional input is
    the empty name ``""``."""

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    opset: int = 21

    def __str__(self) -> str:
        attrs = ", ".join(f"{k}={_short(v)}" for k, v in sorted(self.attrs.items()) if not k.startswith("_"))
        ins = ", ".join(f"%{i}" if i else "_" for i in self.inputs)
        outs = ", ".join(f"%{o}" for o in self.outputs)
        return f"{outs} = {self.op}({ins}{'; ' + attrs if attrs else ''})"


def _short(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}" if v.size > 8 else str(v.tolist())
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return str(v)


@dataclass
class Graph:
    """A model's dataflow graph."""

    inputs: list[str]
    outputs: list[str]
    nodes: list[Node]
    values: dict[str, TensorInfo] = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    name: str = "graph"

    def producers(self) -> dict[str, Node]:
        """Map from value name to the node producing it."""
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        """Map from value name to the nodes reading it."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def copy(self) -> Graph:
        """A copy whose node list, value and constant tables can be changed independently."""
        nodes = [Node(n.op, list(n.inputs), list(n.outputs), dict(n.attrs), n.name, n.opset) for n in self.nodes]
        return Graph(list(self.inputs), list(self.outputs), nodes, dict(self.values), dict(self.consts), self.name)

    def info(self, name: str) -> str:
        """``name: dtype[shape]`` when known."""
        v = self.values.get(name)
        return f"%{name}: {v}" if v is not None else f"%{name}"

    def __str__(self) -> str:
        lines = [f"graph {self.name}({', '.join(self.info(i) for i in self.inputs)}) {{"]
        for n in self.nodes:
            shapes = ", ".join(str(self.values[o]) for o in n.outputs if o in self.values)
            lines.append(f"  {n}" + (f"  # {shapes}" if shapes else ""))
        lines.append(f"  return {', '.join('%' + o for o in self.outputs)}")
        lines.append(f"}}  # {len(self.consts)} constant(s)")
        return "\n".join(lines)
