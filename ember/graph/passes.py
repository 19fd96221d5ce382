"""Graph passes: shape and type inference with constant folding, dead-code elimination,
algebraic simplification, and operator fusion.

Each pass takes a :class:`Graph` and returns a new one (the input is not changed). The functions
(:func:`infer_and_fold`, :func:`simplify`, :func:`dead_code_elimination`, :func:`fuse`) are also
wrapped as :class:`~ember.transform.Pass` objects (:class:`InferAndFold`, :class:`Simplify`,
:class:`DeadCodeElimination`, :class:`Fuse`) that run under a
:class:`~ember.transform.PassContext`; :func:`default_graph_pipeline` is the graph optimization a
model compile runs. Fusion does not give a graph but kernel groups: :class:`Fuse` is a
``Graph -> FusedGraph`` pass, run by the model compiler after the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import te
from ..errors import EmberError, GraphError
from ..ops.registry import NeedValue, OpContext, call, lookup
from ..ops.util import shape as te_shape
from ..ops.util import uname
from ..strategy.base import Strategy
from ..target import Target
from ..transform import Pass, PassContext, Sequential
from .attention_fusion import FuseAttention
from .cse import EliminateCommonSubexpressions
from .ir import STRING, Graph, Node, TensorInfo
from .qdq_fusion import FuseQDQ
from .recurrent import ExpandRecurrent


def node_context(node: Node, consts: dict[str, np.ndarray], strategy: Strategy | None = None) -> OpContext:
    """The operator context of ``node``; ``strategy`` is the target's (the host CPU's when None)."""
    attrs = dict(node.attrs)
    attrs["_outputs"] = list(node.outputs)
    attrs["_num_outputs"] = len(node.outputs)
    ctx = OpContext(node.op, attrs, list(node.inputs), consts, node.opset, node.name)
    if strategy is not None:
        ctx.strategy = strategy
    return ctx


def build_node(
    node: Node, tensors: dict[str, te.Tensor], consts: dict[str, np.ndarray], strategy: Strategy | None = None
) -> list[Any]:
    """Apply ``node``'s operator to te tensors; outputs are tensors or NumPy arrays (constants).
    ``strategy`` (the target's; the host CPU's when None) chooses the operators' layouts."""
    ins = [tensors[i] if i else None for i in node.inputs]
    ctx = node_context(node, consts, strategy)
    try:
        return call(ctx, ins)
    except (NeedValue, EmberError):
        raise
    except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError) as exc:
        shapes = ", ".join(str(te_shape(t)) if t is not None else "_" for t in ins)
        raise GraphError(f"{node.op} node {node.name!r} (inputs {shapes}): {exc}") from exc


@dataclass
class InferResult:
    """What inference learned besides shapes: the inputs whose values shapes depend on."""

    needs_values: set[str] = field(default_factory=set)


def infer_and_fold(
    graph: Graph, fold: bool = True, target: str = "llvm", progress: Callable[[str], None] | None = None
) -> Graph:
    """Infer every value's shape and dtype; fold nodes whose inputs are all constants.

    Folding runs the node's own compiled kernel (so a folded value is exactly what the kernel
    would compute). Raises :class:`NeedValue` when a shape depends on a run-time value."""
    from ..ops.util import dtype_of

    g = graph.copy()
    tensors: dict[str, te.Tensor] = {}
    for name in g.inputs:
        info = g.values[name]
        if info.dtype != STRING:  # text: no kernel reads it (a node that does is refused below)
            tensors[name] = te.placeholder(info.shape, info.dtype, name=uname("in"))
    for name, v in g.consts.items():
        if v.dtype == object:
            g.values[name] = TensorInfo(tuple(v.shape), STRING)
            continue
        g.values[name] = TensorInfo(tuple(v.shape), str(v.dtype))
        tensors[name] = te.placeholder(tuple(v.shape), str(v.dtype), name=uname("c"))
    kept: list[Node] = []
    for node in g.nodes:
        for i in node.inputs:
            if i and i not in tensors and i in g.values and g.values[i].dtype == STRING:
                raise GraphError(f"{node.op} node {node.name!r} reads the string tensor {i!r}: compiled kernels "
                                 "take numbers only (ONNX models run their text operators on the host: "
                                 "docs/models.md, Host stages)")
            if i and i not in tensors:
                raise GraphError(f"{node.op} node {node.name!r} reads {i!r}, which no earlier node produces")
        outs = build_node(node, tensors, g.consts)
        if len(outs) < len([o for o in node.outputs if o]):
            raise GraphError(
                f"{node.op} node {node.name!r} has {len(node.outputs)} outputs but ember computes {len(outs)}"
            )
        all_const = all((not i) or i in g.consts for i in node.inputs)
        is_np = all(isinstance(o, np.ndarray) for o in outs)
        if is_np:
            for o, v in zip(node.outputs, outs):
                if o:
                    g.consts[o] = np.require(v, requirements="C")
        elif fold and all_const and lookup(node.op) is not None:
            if progress:
                progress(f"folding {node.op} {node.name}")
            vals = fold_node(node, tensors, outs, g.consts)
            for o, v in zip(node.outputs, vals):
                if o:
                    g.consts[o] = v
        else:
            kept.append(node)
        for o, t in zip(node.outputs, outs):
            if not o:
                continue
            if isinstance(t, np.ndarray):
                g.values[o] = TensorInfo(tuple(t.shape), str(t.dtype))
                tensors[o] = te.placeholder(tuple(t.shape), str(t.dtype), name=uname("c"))
            else:
                g.values[o] = TensorInfo(te_shape(t), dtype_of(t))
                if o in g.consts:
                    tensors[o] = te.placeholder(te_shape(t), dtype_of(t), name=uname("c"))
                else:
                    tensors[o] = t
    g.nodes = kept
    return g


def fold_node(
    node: Node, tensors: dict[str, te.Tensor], outs: list[Any], consts: dict[str, np.ndarray]
) -> list[np.ndarray | None]:
    """Compute a node whose inputs are all constants with ember's NumPy reference of its te
    program (:func:`ember.te.evaluate`), not by compiling it. ``outs`` are the node's outputs as
    built on ``tensors`` (placeholders standing for the constant inputs); returns one array per
    name in ``node.outputs`` (None for an unused output). Float values may differ from the
    compiled kernel's by rounding order only. Raises :class:`~ember.errors.EvaluationError` for a
    program the reference cannot evaluate."""
    from ..te.reference import evaluate

    live = [o for o, name in zip(outs, node.outputs) if name]
    values = {tensors[i]: consts[i] for i in dict.fromkeys(node.inputs) if i}
    computed = iter(evaluate([o for o in live if not isinstance(o, np.ndarray)], values))
    results = iter([o if isinstance(o, np.ndarray) else next(computed) for o in live])
    return [next(results) if name else None for name in node.outputs]


def dead_code_elimination(graph: Graph) -> Graph:
    """Remove nodes whose outputs reach no graph output, and unused constants."""
    g = graph.copy()
    needed = set(g.outputs)
    kept: list[Node] = []
    for node in reversed(g.nodes):
        if any(o in needed for o in node.outputs if o):
            kept.append(node)
            needed.update(i for i in node.inputs if i)
    g.nodes = kept[::-1]
    g.consts = {k: v for k, v in g.consts.items() if k in needed}
    return g


_NOOP = ("Identity", "Dropout")


def simplify(graph: Graph) -> Graph:
    """Algebraic simplification: batch-norm folded into a preceding convolution's constant
    weights, identities and no-op reshapes removed (their readers read the source)."""
    g = graph.copy()
    cons = g.consumers()
    prod = g.producers()
    rename: dict[str, str] = {}
    kept: list[Node] = []
    outputs = set(g.outputs)
    for node in g.nodes:
        node.inputs = [rename.get(i, i) for i in node.inputs]
        src = node.inputs[0] if node.inputs else ""
        out = node.outputs[0] if node.outputs else ""
        noop = node.op in _NOOP and (node.op == "Identity" or len([o for o in node.outputs if o]) == 1)
        if node.op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten") and src in g.values and out in g.values:
            noop = g.values[src].shape == g.values[out].shape
        if noop and out not in outputs and src and src not in g.consts:
            rename[out] = src
            continue
        if node.op == "BatchNormalization" and _fold_bn(g, node, prod, cons, kept):
            rename[out] = prod[src].outputs[0]
            continue
        kept.append(node)
    g.nodes = kept
    g.outputs = [rename.get(o, o) for o in g.outputs]
    return dead_code_elimination(g)


def _fold_bn(g: Graph, bn: Node, prod: dict[str, Node], cons: dict[str, list[Node]], kept: list[Node]) -> bool:
    if int(bn.attrs.get("training_mode", 0)):  # normalizes with the batch's statistics: nothing to fold
        return False
    src = bn.inputs[0]
    conv = prod.get(src)
    if conv is None or conv.op != "Conv" or len(cons.get(src, [])) != 1 or src in g.outputs:
        return False
    if conv not in kept or not all(i in g.consts for i in bn.inputs[1:5]):
        return False
    if conv.inputs[1] not in g.consts or (len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in g.consts):
        return False
    scale, b, mean, var = (g.consts[i].astype(np.float64) for i in bn.inputs[1:5])
    eps = float(bn.attrs.get("epsilon", 1e-5))
    w = g.consts[conv.inputs[1]]
    factor = scale / np.sqrt(var + eps)
    wide_w = w.astype(np.float64) * factor.reshape((-1,) + (1,) * (w.ndim - 1))
    old_b = g.consts[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2] else 0.0
    wide_b = (old_b - mean) * factor + b
    if not _fits(wide_w, w.dtype) or not _fits(wide_b, w.dtype):
        # The folded weights or bias leave the range of the weights' type (a weight near the float32
        # limit times a factor > 1): keep Conv and BatchNormalization apart, which stay finite.
        return False
    new_w, new_b = wide_w.astype(w.dtype), wide_b.astype(w.dtype)
    wn, bname = conv.outputs[0] + "__bn_w", conv.outputs[0] + "__bn_b"
    g.consts[wn], g.consts[bname] = new_w, new_b
    g.values[wn] = TensorInfo(new_w.shape, str(new_w.dtype))
    g.values[bname] = TensorInfo(new_b.shape, str(new_b.dtype))
    conv.inputs = [conv.inputs[0], wn, bname]
    return True


def _fits(wide: np.ndarray, dtype: np.dtype) -> bool:
    """True when every finite value of ``wide`` stays finite in ``dtype`` (a float type)."""
    if not np.issubdtype(dtype, np.floating):
        return True
    finite = np.isfinite(wide)
    return bool(np.all(np.abs(wide[finite]) <= np.finfo(dtype).max))


# -- fusion ------------------------------------------------------------------------------------------
@dataclass
class Group:
    """Nodes compiled into one kernel; ``inputs``/``outputs`` are the values crossing its border."""

    nodes: list[Node]
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    @property
    def pattern(self) -> str:
        """The strongest pattern among its nodes."""
        order = {"injective": 0, "reduce": 1, "heavy": 2, "opaque": 3}
        return max((lookup(n.op).pattern for n in self.nodes), key=lambda p: order[p])  # type: ignore[union-attr]

    @property
    def name(self) -> str:
        """A readable name: the ops of the group."""
        return "_".join(dict.fromkeys(n.op.lower() for n in self.nodes))[:48]


def fuse(graph: Graph, enabled: bool = True, product_tails: bool = False,
         single_output_epilogues: bool = False) -> list[Group]:
    """Partition the nodes into kernels, as TVM's FuseOps: an injective node joins the group of
    its single consumer (inlined into it), and injective consumers join their producer's
    group as its epilogue. A group holds at most one non-injective node; convolutions and matrix
    products take only epilogues. ``product_tails`` (the CPU targets, whose products compute in
    their reader's store): an all-injective group that reads a product group's otherwise-unread
    result several times (an exported GELU, ``x * 0.5 * (1 + erf(x / sqrt 2))``) joins it too.
    ``single_output_epilogues`` (the GPU targets, where a tensor-core accumulator lives in the
    registers of the one stage that stores it): an injective node with several outputs (a
    ``Split`` of a fused Q/K/V projection) does not join a group that holds a non-injective node;
    it starts a group of its own, which reads the product from memory."""
    nodes = graph.nodes
    group_of: dict[int, int] = {}
    groups: list[list[Node]] = []
    cons = graph.consumers()
    prod = graph.producers()
    outputs = set(graph.outputs)

    def pattern(n: Node) -> str:
        return lookup(n.op).pattern  # type: ignore[union-attr]

    def heavy_count(nodes_: list[Node]) -> int:
        return sum(1 for n in nodes_ if pattern(n) != "injective")

    def depends_on(ga: int, gb: int) -> bool:
        """True when group ``ga`` reads (transitively) an output of group ``gb``."""
        seen, stack = set(), [ga]
        while stack:
            cur = stack.pop()
            if cur == gb:
                return True
            if cur in seen:
                continue
            seen.add(cur)
            for n in groups[cur]:
                for i in n.inputs:
                    p = prod.get(i)
                    if p is not None and id(p) in group_of and group_of[id(p)] != cur:
                        stack.append(group_of[id(p)])
        return False

    def can_join(node: Node, gi: int) -> bool:
        for i in node.inputs:
            p = prod.get(i)
            if p is None or group_of[id(p)] == gi:
                continue
            if depends_on(group_of[id(p)], gi):
                return False
        return True

    for node in nodes:
        target = None
        if enabled and pattern(node) == "injective":
            # epilogue: join the group of the producer of an input when this node is its only
            # reader (the first such input whose group can take it)
            for i in node.inputs:
                p = prod.get(i)
                if p is None:
                    continue
                if len(cons.get(i, [])) == 1 and i not in outputs and len([o for o in p.outputs if o]) == 1:
                    gi = group_of[id(p)]
                    if single_output_epilogues and len([o for o in node.outputs if o]) > 1 and heavy_count(groups[gi]):
                        continue
                    if all(pattern(n) != "opaque" for n in groups[gi]) and can_join(node, gi):
                        target = gi
                        break
        elif enabled and pattern(node) in ("reduce",):
            # inline injective producers that only this node reads
            cands = set()
            for i in node.inputs:
                p = prod.get(i)
                if p is None or len(cons.get(i, [])) != 1 or i in outputs:
                    continue
                gi = group_of[id(p)]
                if heavy_count(groups[gi]) == 0:
                    cands.add(gi)
            if len(cands) == 1:
                target = cands.pop()
                if not can_join(node, target):
                    target = None
        if target is None:
            groups.append([node])
            group_of[id(node)] = len(groups) - 1
        else:
            groups[target].append(node)
            group_of[id(node)] = target
    if enabled:
        groups = _merge_injective_tails(groups, cons, prod, outputs, pattern, product_tails)
    result = []
    for gnodes in groups:
        produced = {o for n in gnodes for o in n.outputs if o}
        ins: list[str] = []
        for n in gnodes:
            for i in n.inputs:
                if i and i not in produced and i not in ins:
                    ins.append(i)
        outs = [
            o for o in produced if o in outputs or any(id(c) not in {id(x) for x in gnodes} for c in cons.get(o, []))
        ]
        outs = [o for n in gnodes for o in n.outputs if o in outs]
        result.append(Group(gnodes, ins, outs))
    return _order_groups(result, graph)


def _merge_injective_tails(
    groups: list[list[Node]],
    cons: dict[str, list[Node]],
    prod: dict[str, Node],
    outputs: set[str],
    pattern: Callable[[Node], str],
    product_tails: bool = False,
) -> list[list[Node]]:
    """``groups`` with each all-injective group that reads computed values of a reduction group
    (one holding no product or opaque node), values that no third group reads, moved into that
    group as its epilogue: the ``Where(IsNaN(s), 0, s)`` after an exported attention's Softmax
    ``s`` (two readers of ``s``, so the one-reader epilogue rule of :func:`fuse` leaves it a
    kernel of its own) runs in the Softmax's kernel. The tail's other inputs may come from any
    group that does not depend on the reduction's (so no cycle forms). Groups keep their nodes in
    topological order. With ``product_tails`` the reduction may also be a matrix product
    (``MatMul``/``Gemm``: one heavy node, the rest injective)."""
    owner = {id(n): gi for gi, g in enumerate(groups) for n in g}

    def takes_tail(g: list[Node]) -> bool:
        kinds = [pattern(n) for n in g]
        if any(k == "reduce" for k in kinds) and all(k in ("injective", "reduce") for k in kinds):
            return True
        heavy = [n for n in g if pattern(n) != "injective"]
        return (product_tails and len(heavy) == 1 and heavy[0].op in ("MatMul", "Gemm")
                and pattern(heavy[0]) != "opaque")

    def depends(a: int, b: int) -> bool:
        seen, stack = set(), [a]
        while stack:
            cur = stack.pop()
            if cur == b:
                return True
            if cur in seen:
                continue
            seen.add(cur)
            stack.extend(owner[id(prod[i])] for n in groups[cur] for i in n.inputs
                         if i in prod and owner[id(prod[i])] != cur)
        return False

    merged: set[int] = set()
    for hi, h in enumerate(groups):
        if any(pattern(n) != "injective" for n in h):
            continue
        members = {id(n) for n in h}
        reads: dict[int, set[str]] = {}
        for n in h:
            for i in n.inputs:
                p = prod.get(i)
                if p is not None and id(p) not in members:
                    reads.setdefault(owner[id(p)], set()).add(i)
        cands = [gi for gi, vals in reads.items()
                 if gi not in merged and takes_tail(groups[gi])
                 and not any(v in outputs for v in vals)
                 and all(owner[id(c)] in (gi, hi) for v in vals for c in cons.get(v, []))]
        if len(cands) != 1:
            continue
        gi = cands[0]
        if any(depends(k, gi) for k in reads if k != gi):
            continue
        groups[gi].extend(h)
        for n in h:
            owner[id(n)] = gi
        merged.add(hi)
    return [g for gi, g in enumerate(groups) if gi not in merged]


def _order_groups(groups: list[Group], graph: Graph) -> list[Group]:
    """Groups in an order where every group runs after the groups producing its inputs."""
    made = set(graph.inputs) | set(graph.consts)
    pending = list(groups)
    ordered: list[Group] = []
    while pending:
        for k, gr in enumerate(pending):
            if all(i in made for i in gr.inputs):
                ordered.append(gr)
                made.update(o for n in gr.nodes for o in n.outputs if o)
                pending.pop(k)
                break
        else:
            raise GraphError("fusion produced a cycle between kernels; compile with fuse=False and report this model")
    return ordered


# -- pass objects ------------------------------------------------------------------------------------
def need_graph(p: Pass, ir: Any) -> Graph:
    """``ir`` when it is a :class:`Graph`; a GraphError naming pass ``p`` otherwise."""
    if not isinstance(ir, Graph):
        raise GraphError(f"graph pass {p.name} needs a Graph, got {type(ir).__name__}")
    return ir


class InferAndFold(Pass):
    """:func:`infer_and_fold` as a pass: ``InferAndFold(fold=True, target="llvm", progress=None)``.

    Required: every later graph pass and the model compiler read the shapes it fills in."""

    name = "InferAndFold"
    required = True
    contract = (
        "needs a Graph in topological order with input shapes; gives every value's shape and dtype "
        "in values and, with fold, nodes whose inputs are all constants replaced by their values"
    )

    def __init__(self, fold: bool = True, target: str = "llvm", progress: Callable[[str], None] | None = None) -> None:
        self.fold = fold
        self.target = target
        self.progress = progress

    def transform(self, ir: Any, ctx: PassContext) -> Graph:
        """A new graph with shapes inferred and constants folded."""
        return infer_and_fold(need_graph(self, ir), fold=self.fold, target=self.target, progress=self.progress)


class Simplify(Pass):
    """:func:`simplify` as a pass, named ``GraphSimplify`` (``Simplify`` is the loop pass)."""

    name = "GraphSimplify"
    opt_level = 1
    contract = (
        "needs a Graph with shapes inferred; gives one computing the same outputs with inference "
        "BatchNormalization after a single-reader Conv folded into its weights, no-ops removed, dead nodes gone"
    )

    def transform(self, ir: Any, ctx: PassContext) -> Graph:
        """A new, simplified graph."""
        return simplify(need_graph(self, ir))


class DeadCodeElimination(Pass):
    """:func:`dead_code_elimination` as a pass."""

    name = "DeadCodeElimination"
    opt_level = 0
    contract = (
        "needs any Graph; gives one with the same outputs, without the nodes no output depends on "
        "and without the constants no remaining node or output reads"
    )

    def transform(self, ir: Any, ctx: PassContext) -> Graph:
        """A new graph without dead nodes and constants."""
        return dead_code_elimination(need_graph(self, ir))


@dataclass
class FusedGraph:
    """A graph and its kernels: what :class:`Fuse` gives. ``groups`` are in an order where every
    group runs after the groups producing its inputs; ``str()`` prints both."""

    graph: Graph
    groups: list[Group]

    def __str__(self) -> str:
        lines = [str(self.graph), f"# {len(self.groups)} kernel(s)"]
        for k, gr in enumerate(self.groups):
            ins = ", ".join("%" + i for i in gr.inputs)
            outs = ", ".join("%" + o for o in gr.outputs)
            lines.append(f"kernel {k} {gr.name} [{gr.pattern}] ({ins}) -> ({outs})")
            lines.extend(f"  {n}" for n in gr.nodes)
        return "\n".join(lines)


class Fuse(Pass):
    """:func:`fuse` as a pass: ``Graph -> FusedGraph``. ``Fuse(enabled=True, target=None)``: for a
    CPU ``target`` with :func:`fuse`'s ``product_tails``, for a GPU one with its
    ``single_output_epilogues`` (neither without a target).

    Not part of :func:`default_graph_pipeline` (its output is not a graph): the model compiler runs
    it on the pipeline's result. Skipped (disabled, or ``opt_level`` 0) it still gives a
    :class:`FusedGraph`, with one node per kernel, as ``fuse(graph, enabled=False)``."""

    name = "Fuse"
    opt_level = 1
    contract = (
        "needs a Graph with shapes inferred and every node a registered operator; gives FusedGraph: "
        "every node in exactly one group, groups topologically ordered, at most one non-injective node each"
    )

    def __init__(self, enabled: bool = True, target: str | Target | None = None) -> None:
        self.enabled = enabled
        # products compute in their reader's store on CPU targets, so they can take tails there
        self.product_tails = target is not None and not Target(target).is_gpu
        # a GPU tensor-core accumulator is stored by one stage: no multi-output epilogues there
        self.single_output_epilogues = target is not None and Target(target).is_gpu

    def transform(self, ir: Any, ctx: PassContext) -> FusedGraph:
        """The graph with its fusion groups."""
        g = need_graph(self, ir)
        return FusedGraph(g, fuse(g, enabled=self.enabled, product_tails=self.product_tails,
                                  single_output_epilogues=self.single_output_epilogues))

    def skip(self, ir: Any) -> FusedGraph:
        """The graph with one group per node."""
        g = need_graph(self, ir)
        return FusedGraph(g, fuse(g, enabled=False))


def default_graph_pipeline(progress: Callable[[str], None] | None = None,
                           target: str | Target | None = None) -> Sequential:
    """The graph optimization of a model compile, as a :class:`~ember.transform.Sequential` named
    ``OptimizeGraph``: :class:`~ember.graph.qdq_fusion.FuseQDQ` (QDQ groups as integer operators,
    before folding dequantizes the weights), :class:`InferAndFold` (``progress`` is told about each folded node),
    :class:`~ember.graph.recurrent.ExpandRecurrent` (LSTM/GRU/RNN as GEMM steps), :class:`Simplify`,
    :class:`~ember.graph.cse.EliminateCommonSubexpressions`,
    :class:`~ember.graph.attention_fusion.FuseAttention` (exported attention as one operator; only
    for a CPU ``target``: not there without one), :class:`DeadCodeElimination`. Run it as
    ``default_graph_pipeline(p, target)(graph)``;
    the result is what ``optimize(graph, p, target)`` gave."""
    attention = [FuseAttention(target)] if target is not None and not Target(target).is_gpu else []
    return Sequential([FuseQDQ(), InferAndFold(progress=progress), ExpandRecurrent(), Simplify(),
                       EliminateCommonSubexpressions(), *attention, DeadCodeElimination()], name="OptimizeGraph")
