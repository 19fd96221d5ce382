"""ONNX control flow, sequences and optionals, resolved at import time into a flat graph.

ember compiles static-shape graphs and its graph IR has no subgraphs, so a model that uses
``Scan``, ``If``, ``Loop``, ``SequenceMap``, sequences or optionals is rewritten here into an
equivalent ONNX model with none of them, which the ordinary importer then reads:

* ``Scan``: the trip count is the static length of the scan axis; the body is unrolled, scan
  inputs are sliced with ``Gather`` (either direction, any axis), scan outputs are stacked with
  ``Unsqueeze`` + ``Concat`` (either direction, any axis), state is threaded through. The
  opset-8 form (a batch axis first, ``sequence_lens``) is unrolled per batch entry.
* ``If``: a condition that folds to a constant inlines the taken branch; a run-time condition
  inlines both branches and selects every output with ``Where`` when both branches give the
  same shapes and dtypes.
* ``Loop``: a constant trip count is unrolled; a run-time ``cond`` keeps the carried values of
  the last iteration that ran (``Where`` on the running "still looping" flag); scan outputs are
  concatenated.
* sequences of statically known length are lists of tensor values; optionals are "a value or
  none"; ``SequenceMap`` is unrolled.

Shapes and constant values that the rewrite needs (a scan length, a condition) come from
ember's own shape inference and constant folding, run on the part of the flat graph built so far.
When a trip count, a condition or a sequence length depends on the *value* of a graph input, or
the graph has sequence or optional inputs or outputs, plain import raises
:class:`NeedsCallInputs`; ``ember.compile`` then returns a model specialised at call time
(:class:`ember.specialize.StructureSpecializer`), which does the
rewrite and compiles on the first call for each distinct structure of those inputs (and value of
the inputs that decide trip counts), and returns sequences as lists and absent optionals as
``None``.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph.ir import TensorInfo
from .onnx import FrontendError, UnsupportedOpError, elem_dtype
from .opset import default_opset

#: Operators this module resolves (they never reach the graph IR).
CONTROL_OPS = frozenset(
    {
        "If",
        "Loop",
        "Scan",
        "SequenceMap",
        "SequenceConstruct",
        "SequenceEmpty",
        "SequenceInsert",
        "SequenceAt",
        "SequenceErase",
        "SequenceLength",
        "SplitToSequence",
        "ConcatFromSequence",
        "Optional",
        "OptionalHasElement",
        "OptionalGetElement",
    }
)

#: A ``Loop`` without a trip count is unrolled until its condition folds to false, at most this often.
MAX_UNROLL = 4096


class NeedsCallInputs(FrontendError):
    """The rewrite needs what only a call provides: the lengths of sequence inputs, whether an
    optional input is present, or the values of inputs that decide a trip count or condition.
    ``ember.compile`` answers this with a :class:`ember.specialize.StructureSpecializer`."""

    def __init__(self, msg: str, value_input: str | None = None):
        super().__init__(msg)
        self.value_input = value_input


@dataclass(frozen=True)
class Seq:
    """A sequence value: the names of its tensors, in order (``elem``: ONNX element type or 0)."""

    items: tuple[str, ...]
    elem: int = 0


@dataclass(frozen=True)
class Opt:
    """An optional value: ``value`` is None when absent."""

    value: Value | None


Value = str | Seq | Opt
Structure = str | list["Structure"] | None


def _onnx() -> Any:
    import onnx

    return onnx


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def has_control_flow(m: Any) -> bool:
    """True when the model uses operators, inputs or outputs that this module must resolve."""
    onnx = _onnx()
    for n in m.graph.node:
        if n.domain in ("", "ai.onnx") and n.op_type in CONTROL_OPS:
            return True
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            return True
    inits = {t.name for t in m.graph.initializer}
    return any(not v.type.HasField("tensor_type") for v in m.graph.input if v.name not in inits) or any(
        not v.type.HasField("tensor_type") for v in m.graph.output
    )


def _onnx_elem(dtype: str) -> int:
    from ..ops.elemwise import ONNX_DTYPES

    for code, dt in ONNX_DTYPES.items():
        if dt == dtype:
            return int(code)
    raise FrontendError(f"dtype {dtype} has no ONNX element type known to ember")


class _NeedInput(Exception):
    """Internal: the value of graph input ``name`` is needed."""

    def __init__(self, name: str, why: str):
        super().__init__(why)
        self.name = name
        self.why = why


class _Expander:
    """Rewrites one model; ``nodes`` is the flat node list being built."""

    def __init__(self, m: Any, input_shapes: Mapping[str, Sequence[int]] | None, bound: Mapping[str, Any]):
        from onnx import numpy_helper

        self.m = m
        self.opset = default_opset(m)
        self.shapes = dict(input_shapes or {})
        self.bound = dict(bound)
        self.nodes: list[Any] = []
        self.prod: dict[str, int] = {}
        self.info: dict[str, TensorInfo] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.new_inits: list[Any] = []
        self.flat_inputs: list[Any] = []
        #: flat input name -> (model input name, element index or None)
        self.input_map: dict[str, tuple[str, int | None]] = {}
        self.runtime_inputs: set[str] = set()
        self.used: set[str] = set()
        self.counter = 0
        g = m.graph
        self._reserve_names(g)
        for t in g.initializer:
            try:
                elem_dtype(t.data_type, f"initializer {t.name}")
                self.consts[t.name] = np.require(numpy_helper.to_array(t), requirements="C")
                self.info[t.name] = TensorInfo(tuple(self.consts[t.name].shape), str(self.consts[t.name].dtype))
            except (UnsupportedOpError, ValueError):
                pass  # the importer reports the type; this value only cannot be folded here

    def _reserve_names(self, g: Any) -> None:
        onnx = _onnx()
        self.used.update(v.name for v in g.input)
        self.used.update(v.name for v in g.output)
        self.used.update(t.name for t in g.initializer)
        for n in g.node:
            self.used.update(n.output)
            self.used.update(n.input)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    self._reserve_names(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sg in a.graphs:
                        self._reserve_names(sg)

    # ----------------------------------------------------------------- names and emission
    def fresh(self, base: str) -> str:
        """A value or node name used nowhere in the model."""
        name = base
        while name in self.used or not name:
            self.counter += 1
            name = f"{base}__{self.counter}"
        self.used.add(name)
        return name

    def _append(self, node: Any) -> None:
        k = len(self.nodes)
        self.nodes.append(node)
        for o in node.output:
            if o:
                self.prod[o] = k

    def emit(self, op: str, inputs: Sequence[str], hint: str, out: str | None = None, **attrs: Any) -> str:
        """Append ``op`` (default domain) with one output; returns the output name."""
        from onnx import helper

        o = out or self.fresh(hint)
        self._append(helper.make_node(op, list(inputs), [o], name=self.fresh(f"{hint}/{op}"), **attrs))
        return o

    def const(self, value: Any, hint: str = "cf_const") -> str:
        """A new initializer holding ``value``."""
        from onnx import numpy_helper

        arr = np.require(np.asarray(value), requirements="C")
        name = self.fresh(hint)
        self.consts[name] = arr
        self.info[name] = TensorInfo(tuple(arr.shape), str(arr.dtype))
        self.new_inits.append(numpy_helper.from_array(arr, name))
        return name

    def unsqueeze(self, x: str, axis: int, hint: str) -> str:
        """``x`` with a new axis of length 1 at ``axis`` (the form of the model's opset)."""
        if self.opset >= 13:
            return self.emit("Unsqueeze", [x, self.const(np.array([axis], np.int64), f"{hint}/axes")], hint)
        return self.emit("Unsqueeze", [x], hint, axes=[axis])

    def take(self, x: str, index: int, axis: int, hint: str) -> str:
        """Element ``index`` of ``x`` along ``axis`` (the axis removed)."""
        return self.emit("Gather", [x, self.const(np.array(index, np.int64), f"{hint}/idx")], hint, axis=axis)

    def stack(self, xs: Sequence[str], axis: int, hint: str, out: str | None = None) -> str:
        """``xs`` (same shapes) stacked along a new ``axis`` (negative counts from the new rank's end)."""
        if not xs:
            raise FrontendError(f"{hint}: stacking zero values gives a tensor whose shape ember cannot know")
        if axis < 0:
            self.infer([xs[0]])
            axis += len(self.info[xs[0]].shape) + 1
        parts = [self.unsqueeze(x, axis, hint) for x in xs]
        return self.emit("Concat", parts, hint, out=out, axis=axis)

    def scalar(self, x: str, hint: str) -> str:
        """``x`` (one element) as a 0-d tensor."""
        self.infer([x])
        if self.info[x].shape == ():
            return x
        return self.emit("Reshape", [x, self.const(np.zeros(0, np.int64), f"{hint}/shape")], hint)

    # ----------------------------------------------------------------- inference
    def infer(self, names: Sequence[str]) -> None:
        """Learn the shape, dtype and (when constant) the value of ``names`` by running ember's
        inference and folding on the part of the flat graph they depend on."""
        from onnx import helper, numpy_helper

        from ..graph.passes import infer_and_fold
        from ..ops.registry import NeedValue
        from .onnx import import_onnx

        want = [n for n in names if n and n not in self.info]
        if not want:
            return
        sel: set[int] = set()
        stack, seen = list(want), set()
        while stack:
            v = stack.pop()
            if v in seen or v in self.info:
                continue
            seen.add(v)
            k = self.prod.get(v)
            if k is None:
                raise FrontendError(f"value {v!r} is read but nothing produces it")
            if k not in sel:
                sel.add(k)
                stack.extend(i for i in self.nodes[k].input if i)
        nodes = [self.nodes[k] for k in sorted(sel)]
        produced = {o for n in nodes for o in n.output if o}
        ext = list(dict.fromkeys(i for n in nodes for i in n.input if i and i not in produced))
        inits, vis = [], []
        for e in ext:
            if e in self.consts:
                inits.append(numpy_helper.from_array(self.consts[e], e))
            else:
                inf = self.info[e]
                vis.append(helper.make_tensor_value_info(e, _onnx_elem(inf.dtype), list(inf.shape)))
        outs = [_onnx().ValueInfoProto(name=o) for o in sorted(produced)]
        model = helper.make_model(
            helper.make_graph(nodes, "control_flow_prefix", vis, outs, inits), opset_imports=list(self.m.opset_import)
        )
        model.ir_version = self.m.ir_version
        try:
            g = infer_and_fold(import_onnx(model, validate=False))  # a piece of a model validated whole
        except NeedValue as exc:
            raise self.need(exc.name, str(exc)) from exc
        for o in produced:
            if o in g.values:
                self.info[o] = g.values[o]
            if o in g.consts:
                self.consts[o] = g.consts[o]

    def const_value(self, name: str) -> np.ndarray | None:
        """The constant value of ``name``, or None when it is computed at run time."""
        self.infer([name])
        return self.consts.get(name)

    def need(self, name: str, why: str) -> Exception:
        """The exception for "the value of ``name`` must be known": names the first graph input
        it depends on (to be bound by :class:`ember.specialize.StructureSpecializer`), or a FrontendError when none."""
        seen, stack = set(), [name]
        found: list[str] = []
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in self.runtime_inputs:
                found.append(v)
            elif v in self.prod:
                stack.extend(i for i in self.nodes[self.prod[v]].input if i)
        for v in found:
            src, idx = self.input_map[v]
            if idx is None:
                return _NeedInput(src, why)
        return FrontendError(f"{why}; it is computed from run-time data, and ember needs static shapes")

    # ----------------------------------------------------------------- graphs
    def run(self) -> tuple[Any, list[Structure]]:
        """Rewrite the model; returns the flat model and the structure of every output."""
        from onnx import helper

        g = self.m.graph
        env: ChainMap[str, Value] = ChainMap()
        for name in self.consts:
            env[name] = name
        inits = {t.name for t in g.initializer}
        for vi in g.input:
            if vi.name in inits and vi.name not in self.shapes and vi.name not in self.bound:
                env[vi.name] = vi.name
                continue
            self.consts.pop(vi.name, None)
            self.info.pop(vi.name, None)
            env[vi.name] = self._bind_input(vi.name, vi.type)
        self.run_graph(g, env, "")
        outputs, structures = [], []
        for vo in g.output:
            v = env.get(vo.name)
            if v is None:
                raise FrontendError(f"graph output {vo.name!r} is not computed by any node")
            structures.append(self._output(v, vo.name, outputs))
        inputs_kept = [i for i in self.flat_inputs]
        graph = helper.make_graph(
            self.nodes,
            g.name or "model",
            inputs_kept,
            [_onnx().ValueInfoProto(name=o) for o in outputs],
            [t for t in g.initializer if t.name not in self.bound] + self.new_inits,
        )
        flat = helper.make_model(graph, opset_imports=list(self.m.opset_import))
        flat.ir_version = self.m.ir_version
        return flat, structures

    def _tensor_input(self, name: str, tt: Any, src: str, idx: int | None, shape: Sequence[int] | None) -> str:
        from onnx import helper

        dt = elem_dtype(tt.elem_type, f"input {src}")
        if shape is None:
            dims = []
            for k, d in enumerate(tt.shape.dim):
                if not d.HasField("dim_value"):
                    raise FrontendError(
                        f"input {src!r} has a symbolic dimension {k} ({d.dim_param or '?'}); give its size: "
                        f"ember.compile(model, input_shapes={{{src!r}: (...)}})"
                    )
                dims.append(int(d.dim_value))
            shape = dims
        shape = tuple(int(s) for s in shape)
        self.info[name] = TensorInfo(shape, dt)
        self.flat_inputs.append(helper.make_tensor_value_info(name, int(tt.elem_type), list(shape)))
        self.input_map[name] = (src, idx)
        self.runtime_inputs.add(name)
        return name

    def _bind_input(self, name: str, tp: Any) -> Value:
        kind = tp.WhichOneof("value")
        if kind == "tensor_type":
            if name in self.bound:
                arr = np.asarray(self.bound[name])
                dt = elem_dtype(tp.tensor_type.elem_type, f"input {name}")
                if str(arr.dtype) != dt:
                    raise FrontendError(f"input {name!r} has dtype {arr.dtype}, the model declares {dt}")
                return self.const(arr, name)
            return self._tensor_input(name, tp.tensor_type, name, None, self.shapes.get(name))
        if name not in self.bound:
            raise NeedsCallInputs(
                f"input {name!r} is a {str(kind).replace('_type', '')}: ember compiles it for the length and shapes "
                "given at the first call (use ember.compile, which returns a model that does this)"
            )
        return self._bound_value(name, tp, self.bound[name], None)

    def _bound_value(self, name: str, tp: Any, value: Any, idx: int | None) -> Value:
        """The value of a call-time sequence or optional input (or of one of its elements)."""
        kind = tp.WhichOneof("value")
        if kind == "tensor_type":
            arr = np.asarray(value)
            tt = _elem_type_like(tp.tensor_type, arr)
            dt = elem_dtype(tt.elem_type, f"input {name}")
            if str(arr.dtype) != dt:
                raise FrontendError(f"input {name!r} has dtype {arr.dtype}, the model declares {dt}")
            flat = name if idx is None else self.fresh(f"{name}.{idx}")
            return self._tensor_input(flat, tt, name, idx, arr.shape)
        if kind == "sequence_type":
            if isinstance(value, np.ndarray):
                value = list(value)
            if not isinstance(value, (list, tuple)):
                raise FrontendError(f"input {name!r} is a sequence: pass a list of arrays")
            et = tp.sequence_type.elem_type
            if et.WhichOneof("value") != "tensor_type":
                raise UnsupportedOpError({f"input {name!r}: a sequence of non-tensors": 1})
            items = tuple(self._bound_value(name, et, v, i) for i, v in enumerate(value))
            return Seq(items, int(et.tensor_type.elem_type))  # type: ignore[arg-type]
        if kind == "optional_type":
            if value is None or (
                isinstance(value, np.ndarray) and value.dtype == object and value.shape == () and value.item() is None
            ):
                return Opt(None)  # None, or np.asarray(None)
            return Opt(self._bound_value(name, tp.optional_type.elem_type, value, idx))
        raise UnsupportedOpError({f"input {name!r} of type {kind}": 1})

    def _output(self, v: Value, name: str, outputs: list[str]) -> Structure:
        if isinstance(v, str):
            if v == name and name in self.prod:
                outputs.append(name)
                return name
            free = name not in self.prod and name not in self.info and name not in self.consts
            o = self.emit("Identity", [v], name, out=name if free else self.fresh(name))
            outputs.append(o)
            return o
        if isinstance(v, Seq):
            return [self._output(x, self.fresh(f"{name}.{i}"), outputs) for i, x in enumerate(v.items)]
        if v.value is None:
            return None
        return self._output(v.value, name, outputs)

    def run_graph(self, g: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """Import ``g``'s nodes (a main graph when ``scope`` is empty, else an instance of a subgraph)."""
        from onnx import numpy_helper

        for t in g.initializer if scope else ():
            arr = numpy_helper.to_array(t)
            env[t.name] = self.const(arr, f"{scope}{t.name}")
        for node in g.node:
            self.node(node, env, scope)

    def run_body(self, body: Any, env: Mapping[str, Value], scope: str, args: Sequence[Value]) -> list[Value]:
        """One instance of subgraph ``body`` with its formal inputs bound to ``args``; returns its outputs."""
        if len(args) != len(body.input):
            raise FrontendError(f"{scope}: the subgraph takes {len(body.input)} inputs, {len(args)} given")
        child = env.new_child() if isinstance(env, ChainMap) else ChainMap({}, dict(env))
        for vi, a in zip(body.input, args):
            child[vi.name] = a
        self.run_graph(body, child, scope)
        outs = []
        for vo in body.output:
            if vo.name not in child:
                raise FrontendError(f"{scope}: subgraph output {vo.name!r} is not computed")
            outs.append(child[vo.name])
        return outs

    def out_name(self, scope: str, name: str) -> str:
        """The flat name of value ``name`` produced in ``scope``."""
        return name if not scope else self.fresh(f"{scope}{name}")

    def scope_of(self, node: Any, scope: str, k: int | str) -> str:
        """The scope prefix of instance ``k`` of a subgraph of ``node``."""
        return f"{scope}{node.name or node.op_type}/{k}/"

    def node(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """Import one node into the flat graph."""
        onnx = _onnx()
        if node.domain in ("", "ai.onnx") and node.op_type in CONTROL_OPS:
            getattr(self, f"op_{node.op_type}")(node, env, scope)
            return
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise UnsupportedOpError({f"{node.op_type} (with a subgraph)": 1})
        ins = []
        for i in node.input:
            v = self.get(env, i, node) if i else ""
            if not isinstance(v, str):
                if node.op_type == "Identity":
                    env[node.output[0]] = v
                    return
                raise FrontendError(
                    f"{node.op_type} node {node.name!r} reads {i!r}, a {type(v).__name__.lower()}, "
                    "where a tensor is expected"
                )
            ins.append(v)
        outs = [self.out_name(scope, o) if o else "" for o in node.output]
        new = onnx.NodeProto()
        new.CopyFrom(node)
        del new.input[:]
        new.input.extend(ins)
        del new.output[:]
        new.output.extend(outs)
        new.name = self.fresh(f"{scope}{node.name or node.op_type}")
        self._append(new)
        for o, fo in zip(node.output, outs):
            if o:
                env[o] = fo

    def get(self, env: Mapping[str, Value], name: str, node: Any) -> Value:
        """The value ``name`` read by ``node`` (from its own scope or an enclosing one)."""
        if name not in env:
            raise FrontendError(f"{node.op_type} node {node.name!r} reads {name!r}, which is not defined in its scope")
        return env[name]

    def tensor(self, env: Mapping[str, Value], name: str, node: Any) -> str:
        """``name`` read as a tensor."""
        v = self.get(env, name, node)
        if isinstance(v, Opt) and isinstance(v.value, str):
            return v.value
        if not isinstance(v, str):
            raise FrontendError(f"{node.op_type} node {node.name!r}: input {name!r} is not a tensor")
        return v

    def seq(self, env: Mapping[str, Value], name: str, node: Any) -> Seq:
        """``name`` read as a sequence."""
        v = self.get(env, name, node)
        if isinstance(v, Opt) and isinstance(v.value, Seq):
            return v.value
        if not isinstance(v, Seq):
            raise FrontendError(f"{node.op_type} node {node.name!r}: input {name!r} is not a sequence")
        return v

    def int_value(self, name: str, node: Any, what: str) -> int:
        """The constant integer ``name`` (a scalar or one-element tensor)."""
        v = self.const_value(name)
        if v is None:
            raise self.need(name, f"{node.op_type} node {node.name!r}: {what} must be a constant")
        if v.size != 1:
            raise FrontendError(f"{node.op_type} node {node.name!r}: {what} has {v.size} elements, expected 1")
        return int(v.reshape(-1)[0])

    # ----------------------------------------------------------------- If
    def op_If(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """``If``: the taken branch when the condition folds, else both branches and ``Where``."""
        a = _attrs(node)
        cond = self.tensor(env, node.input[0], node)
        cv = self.const_value(cond)
        if cv is not None:
            if cv.size != 1:
                raise FrontendError(f"If node {node.name!r}: the condition has {cv.size} elements, expected 1")
            branch = a["then_branch"] if bool(cv.reshape(-1)[0]) else a["else_branch"]
            outs = self.run_body(
                branch, env, self.scope_of(node, scope, "then" if bool(cv.reshape(-1)[0]) else "else"), []
            )
            self._bind_outputs(node, env, outs)
            return
        then = self.run_body(a["then_branch"], env, self.scope_of(node, scope, "then"), [])
        other = self.run_body(a["else_branch"], env, self.scope_of(node, scope, "else"), [])
        c = self.scalar(cond, f"{scope}{node.name or 'If'}/cond")
        for o, t, e in zip(node.output, then, other):
            v = self.select(c, t, e, scope, o, node, cond)
            if o:
                env[o] = v

    def select(self, c: str, t: Value, e: Value, scope: str, o: str, node: Any, cond: str) -> Value:
        """``t`` where the run-time flag ``c`` holds, else ``e`` (same structure and shapes)."""
        why = (
            f"{node.op_type} node {node.name!r}: the condition {cond!r} is a run-time value and the two "
            "outcomes differ in structure, shape or dtype"
        )
        if isinstance(t, str) and isinstance(e, str):
            if t == e:
                return t
            self.infer([t, e])
            if self.info[t] != self.info[e]:
                raise self.need(cond, f"{why} ({self.info[t]} vs {self.info[e]})")
            return self.emit(
                "Where", [c, t, e], f"{scope}{o or node.op_type}", out=self.out_name(scope, o) if o else None
            )
        if isinstance(t, Seq) and isinstance(e, Seq) and len(t.items) == len(e.items):
            return Seq(
                tuple(
                    self.select(c, x, y, scope, f"{o}.{i}", node, cond)
                    for i, (x, y) in enumerate(zip(t.items, e.items))
                ),
                t.elem,
            )
        if isinstance(t, Opt) and isinstance(e, Opt) and (t.value is None) == (e.value is None):
            if t.value is None:
                return t
            return Opt(self.select(c, t.value, e.value, scope, o, node, cond))  # type: ignore[arg-type]
        raise self.need(cond, why)

    def _bind_outputs(self, node: Any, env: MutableMapping[str, Value], outs: Sequence[Value]) -> None:
        if len(outs) < len([o for o in node.output if o]):
            raise FrontendError(f"{node.op_type} node {node.name!r}: its subgraph gives {len(outs)} outputs")
        for o, v in zip(node.output, outs):
            if o:
                env[o] = v

    # ----------------------------------------------------------------- Scan
    def op_Scan(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """``Scan``: the body unrolled over the static scan-axis length."""
        a = _attrs(node)
        body = a["body"]
        name = node.name or "Scan"
        m = int(a.get("num_scan_inputs", 0))
        ins = list(node.input)
        if self.opset < 9:
            # opset 8: a batch axis first on every input and output, optional sequence_lens.
            lens, ins = (ins[0] if ins else ""), ins[1:]
            n = len(ins) - m
            k_out = len(body.output) - n
            dirs = list(a.get("directions", [0] * m))
            xs = [self.tensor(env, i, node) for i in ins]
            self.infer(xs)
            if any(not self.info[x].shape for x in xs):
                raise FrontendError(f"Scan node {name!r}: the opset-8 form needs a batch axis on every input")
            batch = self.info[xs[0]].shape[0]
            if lens:
                lv = self.const_value(self.tensor(env, lens, node))
                t_len = self.info[xs[n]].shape[1] if m and len(self.info[xs[n]].shape) > 1 else -1
                if lv is None or np.any(lv != t_len):
                    raise UnsupportedOpError({"Scan with sequence_lens other than the full scan axis": 1})
            per_batch: list[list[str]] = []
            for b in range(batch):
                sc = self.scope_of(node, scope, f"b{b}")
                sub = [self.take(x, b, 0, f"{sc}in") for x in xs]
                states, scans = self.scan_core(
                    node, body, sub[:n], sub[n:], [0] * m, dirs, [0] * k_out, [0] * k_out, env, sc, [None] * k_out
                )
                per_batch.append(states + scans)
            outs: list[Value] = []
            for k, o in enumerate(node.output):
                out = self.out_name(scope, o) if o else None
                outs.append(self.stack([pb[k] for pb in per_batch], 0, f"{scope}{name}/out{k}", out=out))
            self._bind_outputs(node, env, outs)
            return
        n = len(ins) - m
        k_out = len(body.output) - n
        out_names = [
            self.out_name(scope, node.output[n + j]) if n + j < len(node.output) and node.output[n + j] else None
            for j in range(k_out)
        ]
        states, scans = self.scan_core(
            node,
            body,
            [self.tensor(env, i, node) for i in ins[:n]],
            [self.tensor(env, i, node) for i in ins[n:]],
            list(a.get("scan_input_axes", [0] * m)),
            list(a.get("scan_input_directions", [0] * m)),
            list(a.get("scan_output_axes", [0] * k_out)),
            list(a.get("scan_output_directions", [0] * k_out)),
            env,
            self.scope_of(node, scope, ""),
            out_names,
        )
        self._bind_outputs(node, env, [*states, *scans])

    def scan_core(
        self,
        node: Any,
        body: Any,
        states: list[str],
        xs: list[str],
        axes: list[int],
        dirs: list[int],
        out_axes: list[int],
        out_dirs: list[int],
        env: MutableMapping[str, Value],
        base: str,
        out_names: list[str | None],
    ) -> tuple[list[str], list[str]]:
        """Unroll a (batch-free) scan in scopes ``{base}{t}/``: returns the final states and the
        stacked scan outputs (named ``out_names`` where given)."""
        name = node.name or "Scan"
        if not xs:
            raise FrontendError(f"Scan node {name!r} has no scan inputs")
        if len(axes) != len(xs) or len(dirs) != len(xs):
            raise FrontendError(f"Scan node {name!r}: scan_input_axes/directions need {len(xs)} entries")
        self.infer(xs)
        lens, norm_axes = [], []
        for x, ax in zip(xs, axes):
            r = len(self.info[x].shape)
            if not -r <= ax < r:
                raise FrontendError(f"Scan node {name!r}: scan axis {ax} is out of range for input {x!r} of rank {r}")
            norm_axes.append(ax % r)
            lens.append(self.info[x].shape[ax % r])
        if len(set(lens)) != 1:
            raise FrontendError(f"Scan node {name!r}: the scan inputs have different lengths {lens}")
        steps = lens[0]
        if steps == 0:
            raise FrontendError(f"Scan node {name!r}: the scan axis has length 0, so its outputs have no static shape")
        k_out = len(body.output) - len(states)
        if k_out < 0 or len(out_axes) != k_out or len(out_dirs) != k_out:
            raise FrontendError(f"Scan node {name!r}: scan_output_axes/directions need {max(k_out, 0)} entries")
        collected: list[list[str]] = [[] for _ in range(k_out)]
        cur: list[Value] = list(states)
        for t in range(steps):
            sc = f"{base}{t}/"
            elems: list[Value] = [
                self.take(x, (steps - 1 - t) if d else t, ax, f"{sc}in{j}")
                for j, (x, ax, d) in enumerate(zip(xs, norm_axes, dirs))
            ]
            outs = self.run_body(body, env, sc, cur + elems)
            cur = outs[: len(states)]
            for j in range(k_out):
                v = outs[len(states) + j]
                if not isinstance(v, str):
                    raise FrontendError(f"Scan node {name!r}: scan output {j} is not a tensor")
                collected[j].append(v)
        final = [v for v in cur if isinstance(v, str)]
        if len(final) != len(cur):
            raise FrontendError(f"Scan node {name!r}: a state is not a tensor")
        stacked = [
            self.stack(
                collected[j][::-1] if out_dirs[j] else collected[j], int(out_axes[j]), f"{base}out{j}", out=out_names[j]
            )
            for j in range(k_out)
        ]
        return final, stacked

    # ----------------------------------------------------------------- Loop
    def op_Loop(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """``Loop``: unrolled over a constant trip count; a run-time ``cond`` freezes the carried values."""
        a = _attrs(node)
        body = a["body"]
        name = node.name or "Loop"
        m_name = node.input[0] if len(node.input) > 0 else ""
        c_name = node.input[1] if len(node.input) > 1 else ""
        carried: list[Value] = [self.get(env, i, node) for i in node.input[2:]]
        n_carried = len(carried)
        k_out = len(body.output) - 1 - n_carried
        if k_out < 0:
            raise FrontendError(
                f"Loop node {name!r}: the body has {len(body.output)} outputs for {n_carried} carried values"
            )
        trips = self.int_value(self.tensor(env, m_name, node), node, "the trip count M") if m_name else None
        active: bool | str = True
        if c_name:
            c = self.tensor(env, c_name, node)
            cv = self.const_value(c)
            active = bool(cv.reshape(-1)[0]) if cv is not None else self.scalar(c, f"{scope}{name}/cond")
        collected: list[list[str]] = [[] for _ in range(k_out)]
        i = 0
        while trips is None or i < trips:
            if active is False:
                break
            if trips is None and not isinstance(active, bool):
                raise self.need(
                    active,
                    f"Loop node {name!r} has no trip count and a run-time condition, so its iteration count is "
                    "not static",
                )
            if trips is None and i >= MAX_UNROLL:
                raise FrontendError(
                    f"Loop node {name!r} has no trip count and its condition did not fold to false within "
                    f"{MAX_UNROLL} iterations; ember unrolls loops and needs a static iteration count"
                )
            sc = self.scope_of(node, scope, i)
            it = self.const(np.array(i, np.int64), f"{sc}iter")
            cin = self.const(np.array(active), f"{sc}cond") if isinstance(active, bool) else active
            outs = self.run_body(body, env, sc, [it, cin, *carried])
            cond_out = outs[0]
            new = outs[1 : 1 + n_carried]
            scans = outs[1 + n_carried :]
            if isinstance(active, bool):
                carried = list(new)
            else:
                if k_out:
                    raise self.need(
                        active,
                        f"Loop node {name!r}: its condition is a run-time value, so the length of its scan "
                        "outputs is not static",
                    )
                carried = [
                    self.select(active, x, old, sc, f"keep{j}", node, active)
                    for j, (x, old) in enumerate(zip(new, carried))
                ]
            for j, v in enumerate(scans):
                if not isinstance(v, str):
                    raise FrontendError(f"Loop node {name!r}: scan output {j} is not a tensor")
                collected[j].append(v)
            if not isinstance(cond_out, str):
                raise FrontendError(f"Loop node {name!r}: the body's condition output is not a tensor")
            cv = self.const_value(cond_out)
            if cv is not None:
                if not bool(cv.reshape(-1)[0]):
                    active = False
            elif isinstance(active, bool):
                active = self.scalar(cond_out, f"{sc}cond_out")
            else:
                active = self.emit("And", [active, self.scalar(cond_out, f"{sc}cond_out")], f"{sc}active")
            i += 1
        outs: list[Value] = list(carried)
        for j in range(k_out):
            o = node.output[n_carried + j] if len(node.output) > n_carried + j else ""
            if not collected[j]:
                raise FrontendError(
                    f"Loop node {name!r} runs zero iterations, so the shape of scan output {j} is unknown"
                )
            outs.append(
                self.stack(collected[j], 0, f"{scope}{name}/scan{j}", out=self.out_name(scope, o) if o else None)
            )
        self._bind_outputs(node, env, outs)

    # ----------------------------------------------------------------- sequences
    def op_SequenceConstruct(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """A sequence of the given tensors."""
        items = tuple(self.tensor(env, i, node) for i in node.input)
        env[node.output[0]] = Seq(items)

    def op_SequenceEmpty(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """An empty sequence."""
        env[node.output[0]] = Seq((), int(_attrs(node).get("dtype", 1)))

    def _position(self, node: Any, env: Mapping[str, Value], k: int, length: int, default: int, insert: bool) -> int:
        if len(node.input) <= k or not node.input[k]:
            return default
        p = self.int_value(self.tensor(env, node.input[k], node), node, "the position")
        hi = length if insert else length - 1
        if not -length <= p <= hi:
            raise FrontendError(f"{node.op_type} node {node.name!r}: position {p} is out of range for length {length}")
        return p + length if p < 0 else p

    def op_SequenceInsert(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """The sequence with a tensor inserted (at the end by default)."""
        s = self.seq(env, node.input[0], node)
        t = self.tensor(env, node.input[1], node)
        p = self._position(node, env, 2, len(s.items), len(s.items), True)
        env[node.output[0]] = Seq(s.items[:p] + (t,) + s.items[p:], s.elem)

    def op_SequenceAt(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """One tensor of a sequence."""
        s = self.seq(env, node.input[0], node)
        if not s.items:
            raise FrontendError(f"SequenceAt node {node.name!r}: the sequence is empty")
        env[node.output[0]] = s.items[self._position(node, env, 1, len(s.items), 0, False)]

    def op_SequenceErase(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """The sequence without one tensor (the last by default)."""
        s = self.seq(env, node.input[0], node)
        if not s.items:
            raise FrontendError(f"SequenceErase node {node.name!r}: the sequence is empty")
        p = self._position(node, env, 1, len(s.items), len(s.items) - 1, False)
        env[node.output[0]] = Seq(s.items[:p] + s.items[p + 1 :], s.elem)

    def op_SequenceLength(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """The (static) length of a sequence, as an int64 scalar constant."""
        s = self.seq(env, node.input[0], node)
        env[node.output[0]] = self.const(np.array(len(s.items), np.int64), f"{scope}{node.output[0]}")

    def op_SplitToSequence(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """A tensor split into a sequence along an axis (``Gather`` of index ranges)."""
        a = _attrs(node)
        x = self.tensor(env, node.input[0], node)
        self.infer([x])
        shape = self.info[x].shape
        axis = int(a.get("axis", 0))
        if not -len(shape) <= axis < len(shape):
            raise FrontendError(
                f"SplitToSequence node {node.name!r}: axis {axis} is out of range for rank {len(shape)}"
            )
        axis %= len(shape)
        length = shape[axis]
        hint = f"{scope}{node.name or 'SplitToSequence'}"
        split_name = node.input[1] if len(node.input) > 1 else ""
        if not split_name:
            if int(a.get("keepdims", 1)):
                items = [
                    self.emit("Gather", [x, self.const(np.array([i], np.int64), f"{hint}/idx")], hint, axis=axis)
                    for i in range(length)
                ]
            else:
                items = [self.take(x, i, axis, hint) for i in range(length)]
            env[node.output[0]] = Seq(tuple(items))
            return
        sv = self.const_value(self.tensor(env, split_name, node))
        if sv is None:
            raise self.need(split_name, f"SplitToSequence node {node.name!r}: split must be a constant")
        if sv.ndim == 0:
            size = int(sv)
            if size <= 0:
                raise FrontendError(f"SplitToSequence node {node.name!r}: split {size} must be positive")
            sizes = [min(size, length - s) for s in range(0, length, size)]
        else:
            sizes = [int(s) for s in sv.reshape(-1)]
            if sum(sizes) != length or any(s < 0 for s in sizes):
                raise FrontendError(
                    f"SplitToSequence node {node.name!r}: split {sizes} does not add up to the axis length {length}"
                )
        items, start = [], 0
        for s in sizes:
            idx = self.const(np.arange(start, start + s, dtype=np.int64), f"{hint}/idx")
            items.append(self.emit("Gather", [x, idx], hint, axis=axis))
            start += s
        env[node.output[0]] = Seq(tuple(items))

    def op_ConcatFromSequence(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """The tensors of a sequence concatenated (or stacked, ``new_axis=1``)."""
        a = _attrs(node)
        s = self.seq(env, node.input[0], node)
        if "axis" not in a:
            raise FrontendError(f"ConcatFromSequence node {node.name!r}: the axis attribute is required")
        axis = int(a["axis"])
        o = node.output[0]
        hint = f"{scope}{node.name or 'ConcatFromSequence'}"
        if not s.items:
            raise FrontendError(f"ConcatFromSequence node {node.name!r}: the sequence is empty")
        if int(a.get("new_axis", 0)):
            env[o] = self.stack(list(s.items), axis, hint, out=self.out_name(scope, o))
        else:
            env[o] = self.emit("Concat", list(s.items), hint, out=self.out_name(scope, o), axis=axis)

    def op_SequenceMap(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """``SequenceMap``: the body unrolled over the (static) sequence length."""
        body = _attrs(node)["body"]
        first = self.seq(env, node.input[0], node)
        others = [self.get(env, i, node) for i in node.input[1:]]
        length = len(first.items)
        for v in others:
            if isinstance(v, Seq) and len(v.items) != length:
                raise FrontendError(f"SequenceMap node {node.name!r}: the sequences have different lengths")
        results: list[list[Value]] = [[] for _ in body.output]
        for i in range(length):
            args = [first.items[i]] + [v.items[i] if isinstance(v, Seq) else v for v in others]
            outs = self.run_body(body, env, self.scope_of(node, scope, i), args)
            for r, v in zip(results, outs):
                r.append(v)
        for o, r in zip(node.output, results):
            if o:
                if not all(isinstance(v, str) for v in r):
                    raise FrontendError(f"SequenceMap node {node.name!r}: the body must give tensors")
                env[o] = Seq(tuple(r))  # type: ignore[arg-type]

    # ----------------------------------------------------------------- optionals
    def op_Optional(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """An optional holding its input, or an empty one."""
        env[node.output[0]] = Opt(self.get(env, node.input[0], node) if node.input and node.input[0] else None)

    def op_OptionalHasElement(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """Whether an optional holds a value (a constant: optionals are resolved at import)."""
        if not node.input or not node.input[0]:
            has = False
        else:
            v = self.get(env, node.input[0], node)
            has = not (isinstance(v, Opt) and v.value is None)
        env[node.output[0]] = self.const(np.array(has), f"{scope}{node.output[0]}")

    def op_OptionalGetElement(self, node: Any, env: MutableMapping[str, Value], scope: str) -> None:
        """The value of an optional (or the input itself when it is not an optional)."""
        v = self.get(env, node.input[0], node)
        if isinstance(v, Opt):
            if v.value is None:
                raise FrontendError(f"OptionalGetElement node {node.name!r}: the optional {node.input[0]!r} is empty")
            v = v.value
        env[node.output[0]] = v


def _elem_type_like(tt: Any, arr: np.ndarray) -> Any:
    """``tt`` with its element type filled in from ``arr`` when the model leaves it open."""
    if tt.elem_type:
        return tt
    from onnx import helper

    new = type(tt)()
    new.CopyFrom(tt)
    new.elem_type = helper.np_dtype_to_tensor_dtype(arr.dtype)
    return new


def expand(
    model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None, bound: Mapping[str, Any] | None = None
) -> tuple[Any, list[Structure], dict[str, tuple[str, int | None]]]:
    """Rewrite ``model`` without control flow, sequences or optionals.

    ``bound`` gives call-time values: a list of arrays for a sequence input, an array or None for
    an optional input, an array for a tensor input whose value decides a trip count (it becomes a
    constant). Returns the flat model, each output's structure (a flat output name, a list for a
    sequence, None for an absent optional) and, for every flat input, the model input and
    sequence index it comes from. Raises :class:`NeedsCallInputs` when a call-time value is needed."""
    ex = _Expander(model, input_shapes, bound or {})
    try:
        flat, structures = ex.run()
    except _NeedInput as exc:
        raise NeedsCallInputs(
            f"{exc.why}; it depends on the value of input {exc.name!r} (ember.compile compiles such a model "
            "on the first call for each value of that input)",
            exc.name,
        ) from exc
    return flat, structures, ex.input_map


def expand_control_flow(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Any:
    """The importer's hook: ``model`` unchanged when it needs no rewrite, else the flat model.

    Raises :class:`NeedsCallInputs` when the model has sequence or optional inputs or outputs
    or trip counts that depend on input values (``ember.compile`` handles those)."""
    if not has_control_flow(model):
        return model
    flat, structures, _ = expand(model, input_shapes)
    if not all(isinstance(s, str) for s in structures):
        raise NeedsCallInputs(
            "the model returns sequences or optionals; ember.compile returns a model that gives them as lists and None"
        )
    return flat
