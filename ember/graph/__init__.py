"""ember.graph: the graph IR and its passes."""

from .ir import Graph, Node, TensorInfo

__all__ = ["Graph", "Node", "TensorInfo"]
