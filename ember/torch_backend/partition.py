"""Which nodes of a Dynamo graph ember compiles, and the graph split accordingly.

A node is *supported* when PyTorch's ONNX exporter turns it alone into ONNX operators that
ember's registry implements (:func:`ember.ops.registry.lookup`). Nodes computing plain Python
values (sizes, tuple items) follow the node that produces their input. The supported nodes are
grouped by ``torch.fx``'s :class:`CapabilityBasedPartitioner` into the largest subgraphs that
keep the graph acyclic; each becomes a submodule ember compiles, everything else stays eager.

Only graphs that do not compile whole come here (the whole graph is tried first), so the cost of
exporting node by node (about 10-30 ms a node) is paid only when something falls back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from ..errors import FrontendError
from ..ops.registry import lookup
from .export import EXPORT_ERRORS, export_onnx

COMPUTE = ("call_function", "call_method", "call_module")


def node_label(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    """What a user recognises a node by: ``torch.linalg.inv``, ``Tensor.cumprod``, a module class."""
    if node.op == "call_module":
        return type(gm.get_submodule(str(node.target))).__name__
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    t = node.target
    mod = getattr(t, "__module__", None) or ""
    name = getattr(t, "__name__", str(t))
    mod = mod.replace("torch._C._linalg", "torch.linalg").replace("torch._C._nn", "torch.nn.functional")
    mod = mod.replace("torch._C._special", "torch.special").replace("torch._C._fft", "torch.fft")
    for short in ("linalg", "special", "fft"):
        if mod == f"torch.{short}" and name.startswith(f"{short}_"):
            name = name[len(short) + 1:]
    return f"{mod}.{name}" if mod and not mod.startswith("_operator") else name


def example_values(gm: torch.fx.GraphModule, args: list[Any]) -> dict[torch.fx.Node, Any]:
    """The value of every node of ``gm`` on ``args`` (one eager run)."""
    values: dict[torch.fx.Node, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            values[n] = out
            return out

    with torch.no_grad():
        Recorder(gm).run(*args)
    return values


def _one_node_module(gm: torch.fx.GraphModule, node: torch.fx.Node, values: dict[torch.fx.Node, Any]
                     ) -> tuple[torch.fx.GraphModule, list[Any]]:
    """``node`` alone as a graph module whose placeholders are its tensor inputs (other inputs
    fixed to their example values); and its arguments."""
    g = torch.fx.Graph()
    env: dict[torch.fx.Node, Any] = {}
    args: list[Any] = []
    for inp in node.all_input_nodes:
        v = values.get(inp)
        if isinstance(v, torch.Tensor):
            env[inp] = g.placeholder(f"x{len(args)}")
            args.append(v)
        else:
            env[inp] = v
    new = g.node_copy(node, lambda n: env[n])
    g.output(new)
    root = gm if node.op == "call_module" else torch.nn.Module()
    return torch.fx.GraphModule(root, g), args


class EmberSupport(OperatorSupportBase):
    """Decides, node by node, what ember can compile (see the module doc); ``unsupported``
    counts the labels of the nodes it refused."""

    def __init__(self, gm: torch.fx.GraphModule, values: dict[torch.fx.Node, Any]):
        self.gm = gm
        self.values = values
        self.unsupported: dict[str, int] = {}
        self._memo: dict[torch.fx.Node, bool] = {}
        self._by_signature: dict[tuple[Any, ...], bool] = {}

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        """True when ember compiles ``node``."""
        ok = self._memo.get(node)
        if ok is None:
            ok = self._decide(node)
            self._memo[node] = ok
            if not ok and node.op in COMPUTE:
                label = node_label(self.gm, node)
                self.unsupported[label] = self.unsupported.get(label, 0) + 1
        return ok

    def _decide(self, node: torch.fx.Node) -> bool:
        if node.op not in COMPUTE:
            return False
        out = self.values.get(node)
        tensors_out = out if isinstance(out, (tuple, list)) else (out,)
        if not all(isinstance(o, torch.Tensor) for o in tensors_out) or not tensors_out:
            # A Python value (a size, a tuple item): with the node that produced its input.
            producers = [n for n in node.all_input_nodes if n.op in COMPUTE]
            return all(self.is_node_supported({}, p) for p in producers)
        sig = self._signature(node)
        known = self._by_signature.get(sig)
        if known is not None:  # a repeated layer: decided once
            return known
        ok = self._exports(node)
        self._by_signature[sig] = ok
        return ok

    def _signature(self, node: torch.fx.Node) -> tuple[Any, ...]:
        """What decides a node's support: its operation and its arguments, tensors by shape and dtype."""
        def describe(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                v = self.values.get(a)
                return ("t", tuple(v.shape), str(v.dtype)) if isinstance(v, torch.Tensor) else ("v", repr(v))
            if isinstance(a, (list, tuple)):
                return tuple(describe(x) for x in a)
            return repr(a)

        target = type(self.gm.get_submodule(str(node.target))) if node.op == "call_module" else node.target
        return (node.op, target, describe(node.args), tuple(sorted((k, describe(v)) for k, v in node.kwargs.items())))

    def _exports(self, node: torch.fx.Node) -> bool:
        """True when ``node`` alone exports to ONNX operators ember implements."""
        module, args = _one_node_module(self.gm, node, self.values)
        if not args:
            return True  # a constant: folded into its consumers
        try:
            data, _ = export_onnx(module, ["tensor"] * len(args), args)
        except (FrontendError, *EXPORT_ERRORS):
            return False
        import onnx

        from ..frontend.validate import op_key

        proto = onnx.load_from_string(data)
        return all(lookup(op_key(n)) is not None for n in proto.graph.node)


def split(gm: torch.fx.GraphModule, values: dict[torch.fx.Node, Any]) -> tuple[torch.fx.GraphModule, dict[str, int]]:
    """``gm`` with its supported nodes fused into submodules ``fused_<k>`` (compile them; the
    rest runs eagerly), and the unsupported nodes' labels with their counts."""
    support = EmberSupport(gm, values)
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions)
    return fused, dict(support.unsupported)
