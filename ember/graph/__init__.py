"""ember.graph: the graph IR, its passes, the executor and the saved-model format."""

from .ir import Graph, Node, TensorInfo

__all__ = ["Graph", "Node", "TensorInfo"]
