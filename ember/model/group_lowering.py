"""Group lowering: each fused group of graph nodes becomes one loop-IR function.

:func:`lower_groups` builds the te program of a group from its nodes' operators (with the
target's strategy, :mod:`ember.strategy`, in their context: it chooses layouts such as the GEMM
panel width), replaces constant layout transforms (stages flagged ``constant_layout``: packed
weights) by constants computed now, lifts the buffers the strategy keeps in memory into
workspace arguments that the memory plan provides, schedules the kernel with the strategy and
lowers it. It returns the functions and the model's step list:
``{"kind": "kernel", "func", "args", "nout"}`` or ``{"kind": "view", "src", "dst"}`` (a reshape
that copies nothing), each with ``nodes``/``ops`` (the ONNX node names and types it computes) and
kernel steps with ``cost`` (FLOPs and bytes per call, :mod:`ember.profiler.cost`) for profiles.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import te
from ..graph.ir import Graph, TensorInfo
from ..graph.passes import Group, build_node
from ..ops.util import reset_names, uname
from ..ops.util import shape as te_shape
from ..strategy import ConfigEntity, Strategy, host_strategy, strategy_for
from ..target import Target
from ..te import ComputeOp
from ..te.rewrite import rewrite
from .direct_kernels import direct_kernel

_VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")

#: Chooses a kernel's knob setting (tuning records, :mod:`ember.tune.apply`): called with the
#: kernel's outputs, its workspaces and the strategy; returns a point of
#: ``strategy.space(outputs + workspaces)`` or None for the default schedule.
ConfigChooser = Callable[[Sequence[te.Tensor], Sequence[te.Tensor], Strategy], ConfigEntity | None]


def _group_is_view(gr: Group, graph: Graph) -> bool:
    return (
        len(gr.nodes) == 1
        and gr.nodes[0].op in _VIEW_OPS
        and len(gr.outputs) == 1
        and len([i for i in gr.inputs if i not in graph.consts]) >= 1
    )


def lower_groups(
    graph: Graph,
    groups: list[Group],
    progress: Callable[..., None] | None = None,
    gpu: bool = False,
    target: Target | str | None = None,
    tf32: bool = False,
    configs: ConfigChooser | None = None,
    lowered: Callable[[list[Any], int, int], None] | None = None,
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Build and lower one function per non-view group for ``target``; returns (functions, steps).

    The target's strategy (:func:`ember.strategy.strategy_for`) chooses the operators' layouts,
    rewrites each kernel's program and schedules it; every intermediate stage it keeps in memory
    becomes a workspace from the memory plan. On a GPU (every intermediate reduction is such a
    stage) a scalar (0-d) output is computed as a one-element vector (the same bytes). Without
    ``target``, ``gpu`` picks the GPU strategy (of ``cuda``) or the host CPU's. ``tf32`` lets
    the GPU strategy run float32 products on TF32 tensor cores. ``configs`` chooses each kernel's
    knob setting (None: every kernel gets its strategy's default schedule). ``lowered`` is told
    after each kernel: (the functions so far, groups done, groups in all)."""
    from ..lowering import LoweringMemo, lower

    strategy = _strategy(target, gpu, tf32)
    funcs, steps = [], []
    memo = LoweringMemo()  # repeated layers are lowered once
    costs: dict[int, dict[str, Any] | None] = {}  # by body: a repeated layer's function shares it
    packed: dict[tuple[Any, ...], list[str]] = {}  # folded constants by content: one copy per distinct value
    for k, gr in enumerate(groups):
        if _group_is_view(gr, graph):
            steps.append({"kind": "view", "src": gr.nodes[0].inputs[0], "dst": gr.outputs[0], **_node_info(gr)})
            continue
        if progress:
            progress(f"lowering {gr.name}", k + 1, len(groups))
        fname = f"k{k}_{''.join(c if c.isalnum() else '_' for c in gr.name)}"
        direct = direct_kernel(gr, graph, strategy.target, fname, tf32)
        if direct is not None:  # a hand-built kernel (the TMA wgmma GEMM of a linear layer on sm_90)
            func, args = direct
            funcs.append(func)
            steps.append({"kind": "kernel", "func": fname, "args": args, "nout": 1, **_node_info(gr),
                          "cost": _cost_of(func, costs)})
            if lowered is not None:
                lowered(funcs, k + 1, len(groups))
            continue
        reset_names()
        tensors: dict[str, te.Tensor] = {}
        params = []
        for i in gr.inputs:
            info = graph.values[i]
            t = te.placeholder(info.shape, info.dtype, name=uname("p"))
            tensors[i] = t
            params.append(t)
        for node in gr.nodes:
            outs = build_node(node, tensors, graph.consts, strategy=strategy)
            for o, t in zip(node.outputs, outs):
                if o:
                    tensors[o] = t
        outs = [tensors[o] for o in gr.outputs]
        # An output that is an input (or appears twice) needs its own copy stage.
        seen: set[int] = set()
        fixed = []
        for o in outs:
            if id(o.op) in seen or o in params:
                o = te.compute(o.shape, lambda *i, o=o: o[i], name=uname("copy"))
            (o,) = strategy.lift_outputs([o])
            seen.add(id(o.op))
            fixed.append(o)
        # Packed copies of constants (weights in the layout the GEMM kernels read) are computed
        # once, now, and read from new constants.
        consts = {id(t.op): name for name, t in zip(gr.inputs, params) if name in graph.consts}
        fixed, folded = _fold_constant_stages(fixed, consts, graph, fname, packed)
        params = params + [t for _, t in folded]
        gr_inputs = list(gr.inputs) + [n for n, _ in folded]
        # Large intermediate buffers (packed operands, GEMM results) become workspace arguments,
        # so the memory plan provides them instead of a malloc on every call.
        fixed = strategy.lift(fixed)
        work = _workspaces(fixed, strategy)
        work_names = [f"{fname}__ws{j}" for j in range(len(work))]
        for wn, wt in zip(work_names, work):
            graph.values[wn] = TensorInfo(te_shape(wt), str(wt.dtype))
        s = strategy.schedule_group(fixed + work, config=configs(fixed, work, strategy) if configs else None)
        used = {id(st.op) for st in s.stages}
        ins = [(name, t) for name, t in zip(gr_inputs, params) if id(t.op) in used]
        funcs.append(lower(s, [t for _, t in ins] + fixed + work, fname, target=strategy.target, memo=memo))
        outs_all = list(gr.outputs) + work_names
        steps.append({"kind": "kernel", "func": fname, "args": [n for n, _ in ins] + outs_all, "nout": len(outs_all),
                      **_node_info(gr), "cost": _cost_of(funcs[-1], costs)})
        if lowered is not None:
            lowered(funcs, k + 1, len(groups))
    return funcs, steps


def _node_info(gr: Group) -> dict[str, list[str]]:
    """The graph nodes a step computes (their ONNX names and operator types), for profiles."""
    return {"nodes": [n.name for n in gr.nodes], "ops": [n.op for n in gr.nodes]}


def _cost_of(func: Any, costs: dict[int, dict[str, Any] | None]) -> dict[str, Any] | None:
    """:func:`_cost_json` of ``func``, counted once per body: functions the lowering memo gave
    the same body object (repeated layers) cost the same (``costs``, keyed by the body's id,
    lives while the functions do)."""
    key = id(func.body)
    if key not in costs:
        costs[key] = _cost_json(func)
    return costs[key]


def _cost_json(func: Any) -> dict[str, Any] | None:
    """FLOPs and bytes moved by one call of ``func`` (:mod:`ember.profiler.cost`), as JSON; None
    when its loop extents are not integers (symbolic sizes)."""
    from ..profiler.cost import CostUnknown, count_cost

    try:
        return count_cost(func).to_json()
    except CostUnknown:
        return None


def _strategy(target: Target | str | None, gpu: bool, tf32: bool = False) -> Strategy:
    """The strategy of ``target`` (float32 products on TF32 tensor cores with ``tf32``); without
    one, the GPU strategy (``cuda``) when ``gpu``, else the host CPU's."""
    if target is not None:
        return strategy_for(target, tf32=tf32)
    return strategy_for("cuda", tf32=tf32) if gpu else host_strategy()


def _fold_constant_stages(
    outs: list[te.Tensor], consts: dict[int, str], graph: Graph, fname: str,
    packed: dict[tuple[Any, ...], list[str]] | None = None,
) -> tuple[list[te.Tensor], list[tuple[str, te.Tensor]]]:
    """Layout transforms of constants, computed at compile time. Every stage flagged
    ``constant_layout`` (a matrix product's right operand packed into column panels) that
    depends only on constants (directly or through other computed stages) is evaluated once
    with ember's NumPy reference (:func:`ember.te.evaluate`); its value becomes a new graph
    constant, which the kernel reads through a new placeholder instead of repacking on every
    call. ``packed`` (shared by the kernels of one compile) maps a digest of each folded value
    to its constants (a match is confirmed by comparing every byte): kernels that fold the
    same weights the same way (a recurrent layer's steps, each a kernel of its own reading one
    recurrent weight matrix) read one copy, so a matrix-vector product called once per step
    finds its operand in cache instead of a fresh copy per step. Returns the rewritten outputs
    and the (constant name, placeholder) pairs to pass."""
    from ..te.reference import evaluate

    folded: list[tuple[str, te.Tensor]] = []
    constant: dict[int, list[te.Tensor]] = {}  # op id -> the constant placeholders it reads

    def fold(op: te.Operation) -> te.Tensor | None:
        if id(op) in consts:
            constant[id(op)] = [op.output(0)]
            return None
        if not isinstance(op, ComputeOp) or not op.input_tensors:
            return None
        if any(id(t.op) not in constant for t in op.input_tensors):
            return None
        srcs = list(dict.fromkeys(p for t in op.input_tensors for p in constant[id(t.op)]))
        constant[id(op)] = srcs
        if not op.constant_layout or op.num_outputs != 1:
            return None
        t = op.output(0)
        value = _fold_directly(op, srcs, consts, graph)
        if value is None:
            (value,) = evaluate([t], {x: graph.consts[consts[id(x.op)]] for x in srcs})
        # keyed by a digest of a sample of the bytes (hashing every byte of the large packed
        # weights cost more than the comparison that confirms a match)
        raw = np.ascontiguousarray(np.asarray(value).reshape(-1)).view(np.uint8)
        step = max(1, raw.size // 65536)
        key = (tuple(np.shape(value)), str(np.asarray(value).dtype), hashlib.sha256(raw[::step].tobytes()).digest())
        same = [n for n in (packed or {}).get(key, [])  # the same bytes (-0.0 is not 0.0, NaN matches)
                if np.array_equal(np.ascontiguousarray(np.asarray(graph.consts[n]).reshape(-1)).view(np.uint8), raw)]
        name = same[0] if same and same[0] not in {n for n, _ in folded} else None
        if name is None:
            name = f"{fname}__const{len(folded)}"
            graph.consts[name] = value
            graph.values[name] = TensorInfo(value.shape, str(value.dtype))
            if packed is not None:
                packed.setdefault(key, []).append(name)
        ph = te.placeholder(te_shape(t), str(t.dtype), name=uname("pk"))
        folded.append((name, ph))
        return ph

    return rewrite(outs, fold), folded


def _fold_directly(op: ComputeOp, srcs: list[te.Tensor], consts: dict[int, str], graph: Graph) -> np.ndarray | None:
    """The value of constant stage ``op`` computed by its operator's own NumPy function, equal
    bit for bit to :func:`ember.te.evaluate` of the stage but much faster: the Winograd weight
    transform (:func:`ember.ops.winograd_nchwc.weight_transform_value`) of constant weights.
    None for every other stage (evaluated as te)."""
    from ..ops.winograd_nchwc import weight_transform_source, weight_transform_value

    w = weight_transform_source(op)
    if w is None or len(srcs) != 1 or srcs[0].op is not w.op:
        return None
    value = np.asarray(graph.consts[consts[id(w.op)]])
    if value.dtype != np.float32 or value.shape != tuple(te_shape(w)):
        return None
    return weight_transform_value(value, int(op.attrs["tile"]), int(op.attrs["nr"]))


def _workspaces(outs: list[te.Tensor], strategy: Strategy) -> list[te.Tensor]:
    """Intermediate stages of a kernel that ``strategy`` keeps in memory (packed operands, GEMM
    results; on a GPU every intermediate reduction, which runs as a kernel of its own), in the
    order they are found from the outputs."""
    found: list[te.Tensor] = []
    seen: set[int] = {id(o.op) for o in outs}
    stack = [o.op for o in outs]
    while stack:
        op = stack.pop()
        for t in op.input_tensors:
            if id(t.op) in seen:
                continue
            seen.add(id(t.op))
            stack.append(t.op)
            if isinstance(t.op, ComputeOp) and strategy.keeps_in_memory(t.op) and t.op.num_outputs == 1:
                found.append(t.op.output(0))
    return found


def share_identical_kernels(funcs: list[Any], steps: list[dict[str, Any]]) -> tuple[list[Any], list[dict[str, Any]]]:
    """``funcs`` without the kernels that are identical to an earlier one but for their name
    (the repeated layers of a network: the same loop IR and the same type of every expression),
    and ``steps`` calling the kept one instead: each distinct kernel is generated once. The
    arguments of each step are unchanged."""
    from ..backends import loop_ir_types

    kept: dict[tuple[str, str], str] = {}
    alias: dict[str, str] = {}
    out = []
    # Functions the LoweringMemo gave the same body and parameters (the very objects) print the
    # same but for their name: their key is computed once.
    keys: dict[tuple[Any, ...], tuple[str, str]] = {}
    for f in funcs:
        ident = (id(f.body), tuple(id(p) for p in f.params), repr(f.attrs))
        key = keys.get(ident)
        if key is None:
            key = keys[ident] = (str(f).replace(f.name, "\x00", 1), loop_ir_types([f]))
        first = kept.get(key)
        if first is None:
            kept[key] = f.name
            out.append(f)
        else:
            alias[f.name] = first
    if alias:
        steps = [dict(st, func=alias.get(st["func"], st["func"])) if st["kind"] == "kernel" else st for st in steps]
    return out, steps

