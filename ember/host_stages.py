"""Models with host operators: string tensors, text features, random draws, detection
post-processing and image decoding run in NumPy on the host, around compiled parts of the model.

Operators that read or write text (``StringNormalizer``, ``StringSplit``, ``StringConcat``,
``RegexFullMatch``, ``Equal`` and ``LabelEncoder`` on strings, ``TfIdfVectorizer``), whose
output size only the data decide (``NonMaxSuppression``, ``ImageDecoder``) or that draw random
numbers (``RandomUniform``/``Normal``[``Like``], ``Bernoulli``, ``Multinomial``, ``Dropout`` in
training mode: :mod:`ember.ops.random`) run on the host. ember cuts such a model into
alternating **stages**: host stages (those operators, in NumPy: :mod:`ember.ops.strings`,
:mod:`ember.ops.nms`, :mod:`ember.ops.image_decoder`, :mod:`ember.ops.random`) and compiled
stages (the other operators between them, each an ONNX model of its own compiled by ember once
per distinct shapes and dtypes of its inputs, since a host stage's outputs can change size from
call to call). Each node goes to the earliest stage of its kind after the stages of the values it
reads, so a text model is usually host → compiled → host (tokens to numbers, the network, labels)
and a detector compiled → host → compiled (network, box selection, gathering the kept boxes).

:class:`HostStages` answers the model's ``program_for`` (see
:class:`ember.model.model.Specializer`): it runs the stages before the last compiled one, returns
that stage's program with its inputs, and a function that runs the stages after it on the
program's outputs. A string tensor is a NumPy ``object`` array of ``str`` (dtype ``"string"``
in ``Model.inputs`` and the graph IR); text reaches host operators only — a compiled operator
reading it is a GraphError naming the node. ``Model.save`` writes the validated ONNX model, the
stage split as data and the compiled variants (:mod:`ember.model.format`, ``ember-model/3``);
``ember.load`` rebuilds the stages with :func:`restore_host_model`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ArgumentError, EmberError, GraphError, ModelFormatError, OpError
from .frontend.host_scan import training_dropout
from .graph.ir import STRING as STRING_DTYPE
from .graph.ir import Graph
from .model.model import Model
from .model.program import Program, TensorSpec
from .ops import random as rnd
from .ops.image_decoder import image_decoder
from .ops.nms import non_max_suppression
from .ops.strings import (
    STRING_MOVES,
    HostKernel,
    as_strings,
    label_encoder,
    regex_full_match,
    string_concat,
    string_equal,
    string_normalizer,
    string_split,
    tfidf_vectorizer,
)
from .runtime.ndarray import Device
from .target import Target

#: Operators that always run on the host (ONNX op type -> NumPy kernel; the names are
#: ember.frontend.host_scan.ALWAYS_HOST, which finds the models that need this module).
ALWAYS_HOST: dict[str, HostKernel] = {
    "StringNormalizer": string_normalizer,
    "StringSplit": string_split,
    "StringConcat": string_concat,
    "RegexFullMatch": regex_full_match,
    "TfIdfVectorizer": tfidf_vectorizer,
    "NonMaxSuppression": non_max_suppression,
    "RandomUniform": rnd.random_uniform,
    "RandomUniformLike": rnd.random_uniform_like,
    "RandomNormal": rnd.random_normal,
    "RandomNormalLike": rnd.random_normal_like,
    "Bernoulli": rnd.bernoulli,
    "Multinomial": rnd.multinomial,
    "ImageDecoder": image_decoder,
}
#: Operators that run on the host when they read or write a string tensor (compiled otherwise).
HOST_FOR_STRINGS: dict[str, HostKernel] = {"Equal": string_equal, "LabelEncoder": label_encoder}
STRING = 8  # onnx.TensorProto.STRING

#: Compiles ONNX bytes with the given input shapes; compiles a graph (the empty middle).
CompileOnnx = Callable[[bytes, dict[str, tuple[int, ...]]], Model]
CompileGraph = Callable[[Graph], Model]


@dataclass
class HostNode:
    """One host operator: its kernel, decoded attributes, input and output names."""

    op: str
    name: str
    kernel: HostKernel
    attrs: dict[str, Any]
    inputs: list[str]
    outputs: list[str]

    def run(self, env: dict[str, Any]) -> None:
        """Compute the outputs from ``env`` (name -> array) and store them there. A kernel's
        OpError, and any other failure of NumPy on the call's values, is an OpError naming the
        node."""
        try:
            outs = self.kernel(self.attrs, [env[i] if i else None for i in self.inputs])
        except OpError as exc:
            raise OpError(f"node {self.name!r}: {exc}") from exc
        except (ValueError, TypeError, IndexError, OverflowError, MemoryError) as exc:
            raise OpError(f"{self.op} node {self.name!r} failed on this call's values: {exc}") from exc
        for name, value in zip(self.outputs, outs):
            if name:
                env[name] = value


def _attrs(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values: text as ``str``, tensors as NumPy arrays."""
    from onnx import helper, numpy_helper

    out: dict[str, Any] = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [s.decode("utf-8", "replace") for s in v]
        elif hasattr(v, "data_type") and hasattr(v, "dims"):
            v = numpy_helper.to_array(v)
        out[a.name] = v
    return out


def _string_values(proto: Any) -> set[str]:
    """Names of the string-typed values of ``proto``'s main graph (declared or inferred)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError):
        inferred = proto
    g = inferred.graph
    names = {t.name for t in g.initializer if t.data_type == STRING}
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type == STRING:
            names.add(v.name)
    return names


def _kernel_for(node: Any, strings: set[str], inits: dict[str, Any]) -> HostKernel | None:
    if node.domain not in ("", "ai.onnx", "ai.onnx.ml"):
        return None
    k = ALWAYS_HOST.get(node.op_type)
    if k is not None:
        return k
    if training_dropout(node, inits):
        return rnd.dropout
    touches = any(n in strings for n in list(node.input) + list(node.output) if n)
    if node.op_type == "LabelEncoder":
        touches = touches or any(a.name.endswith("_strings") or a.name == "default_string" for a in node.attribute)
    if touches:
        k = HOST_FOR_STRINGS.get(node.op_type) or STRING_MOVES.get(node.op_type)
        if k is None:
            raise GraphError(_string_refusal(node, strings))
    return k


def _string_refusal(node: Any, strings: set[str]) -> str:
    """Why ``node`` (an operator without a host kernel) cannot take or make a string tensor."""
    label = f"{node.op_type} node {node.name or (node.output[0] if node.output else '?')!r}"
    read = [i for i in node.input if i in strings]
    what = f"reads the string tensor {read[0]!r}" if read else \
        f"makes the string tensor {next(o for o in node.output if o in strings)!r}"
    ops = sorted(set(ALWAYS_HOST) | set(HOST_FOR_STRINGS) | set(STRING_MOVES))
    return (f"{label} {what}: string tensors cannot reach a compiled kernel, and ember has no host kernel for "
            f"{node.op_type} on text. Operators that take strings: {', '.join(ops)}")


@dataclass
class Stage:
    """One stage: host operators (run in NumPy) or compiled operators (ONNX nodes compiled as a
    model of their own), with the values it reads from earlier stages and those later stages or
    the graph outputs read from it (compiled stages only)."""

    host: list[HostNode]
    nodes: list[Any]
    inputs: list[str]
    outputs: list[str]
    #: Positions of this stage's nodes in the model's node list (its split as data, saved).
    node_ids: list[int] = field(default_factory=list)

    @property
    def compiled(self) -> bool:
        """True for a stage of compiled operators."""
        return bool(self.nodes)


def split_model(proto: Any) -> list[Stage]:
    """Cut ``proto``'s main graph (nodes in topological order, as ONNX requires) into alternating
    host and compiled stages: each node goes to the earliest stage of its kind after the stages
    of the nodes it reads (stage 0 and every even stage: host; odd stages: compiled)."""
    strings = _string_values(proto)
    g = proto.graph
    init_protos = {t.name: t for t in g.initializer}
    stage_of: dict[str, int] = {}  # value -> stage that computes it (graph inputs, initializers: none)
    placed: list[tuple[int, Any, HostKernel | None]] = []
    for node in g.node:
        kernel = _kernel_for(node, strings, init_protos)
        parity = 0 if kernel is not None else 1
        k = parity
        for i in node.input:
            if i in stage_of:
                p = stage_of[i]
                k = max(k, p if p % 2 == parity else p + 1)
        placed.append((k, node, kernel))
        stage_of.update({o: k for o in node.output if o})
    count = max((k for k, _, _ in placed), default=0) + 1
    stages = [Stage([], [], [], []) for _ in range(count)]
    for pos, (k, node, kernel) in enumerate(placed):
        stages[k].node_ids.append(pos)
        if kernel is None:
            stages[k].nodes.append(node)
        else:
            stages[k].host.append(HostNode(node.op_type, node.name, kernel, _attrs(node), list(node.input),
                                           list(node.output)))
    later_reads = {o.name for o in g.output}
    for k in range(count - 1, -1, -1):  # what each compiled stage reads and must hand on
        st = stages[k]
        made = {o for n in st.nodes for o in n.output if o}
        st.outputs = [o for n in st.nodes for o in n.output if o and o in later_reads]
        reads = [i for n in st.nodes for i in n.input if i] + [i for h in st.host for i in h.inputs if i]
        st.inputs = list(dict.fromkeys(i for i in reads if i not in made and i not in init_protos))
        later_reads |= set(st.inputs)
    return [st for st in stages if st.host or st.nodes]


def middle_model(proto: Any, stage: Stage, inputs: Mapping[str, np.ndarray]) -> bytes:
    """A compiled stage of ``proto`` as ONNX bytes, its inputs typed and shaped like ``inputs``
    (name -> array), its outputs typed by ONNX shape inference."""
    import onnx
    from onnx import helper

    g = proto.graph
    read = {i for n in stage.nodes for i in n.input if i}
    graph_in = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(inputs[n].dtype), inputs[n].shape)
                for n in stage.inputs]
    graph = helper.make_graph(stage.nodes, f"{g.name}_compiled", graph_in,
                              [onnx.ValueInfoProto(name=o) for o in stage.outputs],
                              [t for t in g.initializer if t.name in read])
    graph.value_info.extend(v for v in g.value_info if v.name in read)
    m = helper.make_model(graph, opset_imports=list(proto.opset_import))
    m.ir_version = proto.ir_version
    m.functions.extend(proto.functions)
    typed = onnx.shape_inference.infer_shapes(m)
    known = {v.name: v for v in list(typed.graph.value_info) + list(typed.graph.output)}
    for out in m.graph.output:
        if out.name in known and known[out.name].type.HasField("tensor_type"):
            out.type.CopyFrom(known[out.name].type)
    return m.SerializeToString()


def _declared(v: Any) -> TensorSpec:
    """The TensorSpec of ONNX input ``v``: its dims (ints; ``dim_param`` names or ``"?"``) and
    dtype (``"string"`` for text, ``"?"`` for a type ember does not know)."""
    from onnx import helper

    tt = v.type.tensor_type if v.type.HasField("tensor_type") else None
    if tt is None:
        return TensorSpec(v.name, (), "?")
    dims = tuple(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim)
    if tt.elem_type == STRING:
        return TensorSpec(v.name, dims, STRING_DTYPE)
    try:
        dt = str(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    except (KeyError, TypeError, ValueError):
        dt = "?"
    return TensorSpec(v.name, dims, dt)


def _host_array(value: Any) -> np.ndarray:
    """A call's input as a NumPy array (ember and DLPack arrays are copied to the host)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy") and callable(value.numpy):
        return np.asarray(value.numpy())
    return np.asarray(value)


class HostStages:
    """A model cut into alternating host and compiled stages (see the module doc)."""

    def __init__(self, proto: Any, target: str, compile_onnx: CompileOnnx, compile_graph: CompileGraph):
        from onnx import numpy_helper

        self.proto = proto
        self.target = target
        self.stages = split_model(proto)
        inits = {t.name for t in proto.graph.initializer}
        self.input_names = [v.name for v in proto.graph.input if v.name not in inits]
        self.output_names = [v.name for v in proto.graph.output]
        self._consts = {t.name: (as_strings(numpy_helper.to_array(t), f"initializer {t.name!r}")
                                 if t.data_type == STRING else numpy_helper.to_array(t))
                        for t in proto.graph.initializer}
        #: The declared inputs (name, dims — ints, or symbol names —, dtype: ``"string"`` for text).
        self.declared = [_declared(v) for v in proto.graph.input if v.name not in inits]
        self._text_inputs = {s.name for s in self.declared if s.dtype == STRING_DTYPE}
        self._compile_onnx = compile_onnx
        compiled = [k for k, st in enumerate(self.stages) if st.compiled]
        self._last = compiled[-1] if compiled else None
        self._empty = compile_graph(Graph(inputs=[], outputs=[], nodes=[])) if self._last is None else None
        self._cache: dict[tuple[Any, ...], Model] = {}
        self._lock = threading.Lock()
        self._device: Device | None = None

    def to(self, device: Device) -> None:
        """Run the compiled stages on ``device`` (called by ``Model.to``; checked there)."""
        with self._lock:
            self._device = device
            for model in self._cache.values():
                model.to(device)

    def _model_for(self, k: int, env: dict[str, Any]) -> tuple[Model, dict[str, np.ndarray]]:
        """Compiled stage ``k`` for the inputs in ``env`` (compiled once per their shapes and
        dtypes), and those inputs."""
        st = self.stages[k]
        missing = [n for n in st.inputs if n not in env]
        if missing:
            raise ArgumentError(f"the compiled part of the model reads {missing}, which nothing computes")
        inputs = {n: np.asarray(env[n]) for n in st.inputs}
        for n, v in inputs.items():
            if v.dtype == object:  # a string the scan of the model did not type (split_model refuses the rest)
                node = next(x for x in st.nodes if n in x.input)
                raise GraphError(_string_refusal(node, {n}))
        key = (k,) + tuple((n, inputs[n].dtype.str, inputs[n].shape) for n in st.inputs)
        with self._lock:
            model = self._cache.get(key)
            if model is None:
                model = self._compile_onnx(middle_model(self.proto, st, inputs),
                                           {n: tuple(inputs[n].shape) for n in st.inputs})
                if self._device is not None:
                    model.to(self._device)
                self._cache[key] = model
        return model, inputs

    def _run_stages(self, env: dict[str, Any], stages: range) -> None:
        for k in stages:
            st = self.stages[k]
            if st.compiled:
                model, inputs = self._model_for(k, env)
                env.update(zip(st.outputs, model(**inputs)))
            for h in st.host:
                h.run(env)

    def saved_members(self) -> dict[str, bytes]:
        """What :func:`ember.model.format.save_model` writes for this model besides its source:
        ``host.json`` (the stage split as data: per stage, compiled or not and the positions of
        its nodes; input and output names; the target) and each static compiled variant of a
        compiled stage as a saved model (``variants/<k>.ember``) with its stage index, the
        constants they hold alike (the stage's weights) once in ``shared.npz``."""
        import json

        from .model.format import variant_files

        with self._lock:
            cached = [(key, model) for key, model in self._cache.items() if model.is_static]
        files, members = variant_files([model.program for _, model in cached])
        variants = []
        for k, ((key, _), (data, from_shared)) in enumerate(zip(cached, files)):
            members[f"variants/{k}.ember"] = data
            variants.append({"stage": key[0], "member": f"variants/{k}.ember", "shared": from_shared})
        members["host.json"] = json.dumps({
            "input_names": self.input_names, "output_names": self.output_names, "target": self.target,
            "stages": [{"compiled": st.compiled, "nodes": st.node_ids} for st in self.stages],
            "variants": variants}).encode()
        return members

    def _input(self, name: str, value: Any) -> np.ndarray:
        """A call's input as a NumPy array; a string input as an object array of ``str``
        (lists of ``str``, NumPy unicode or bytes arrays accepted), ArgumentError otherwise."""
        if name not in self._text_inputs:
            return _host_array(value)
        try:
            return as_strings(value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object),
                              f"input {name!r}")
        except OpError as exc:
            raise ArgumentError(f"{exc} (input {name!r} is a string tensor: pass str or UTF-8 bytes)") from exc

    def program_for(self, given: dict[str, Any]) -> tuple[Program, dict[str, Any], Callable[[list[Any]], list[Any]]]:
        """Run every stage before the last compiled one on ``given``; that stage's program and
        inputs; a function that runs the stages after it on the program's outputs and returns the
        model's outputs."""
        env: dict[str, Any] = dict(self._consts)
        env.update({n: self._input(n, v) for n, v in given.items()})
        last = self._last
        if last is None or self._empty is not None:  # host stages only
            self._run_stages(env, range(len(self.stages)))
            assert self._empty is not None
            program, sub, inner, outputs = self._empty.program, {}, None, []
            after = range(0)
        else:
            self._run_stages(env, range(last))
            model, inputs = self._model_for(last, env)
            if model.is_static:
                program, sub, inner = model.program, dict(inputs), None
            else:
                program, sub, inner = model._specializer.program_for(dict(inputs))  # type: ignore[union-attr]
            outputs = self.stages[last].outputs
            after = range(last + 1, len(self.stages))

        def finish(outs: list[Any]) -> list[Any]:
            if inner is not None:
                outs = inner(outs)
            local = dict(env)
            local.update(zip(outputs, outs))
            self._run_stages(local, after)
            return [local[o] for o in self.output_names]

        return program, sub, finish


def host_model(proto: Any, target: str, compile_onnx: CompileOnnx, compile_graph: CompileGraph) -> Model:
    """A :class:`Model` running ``proto``'s host operators around its compiled part (the model
    :func:`ember.frontend.host_scan.needs_host_stages` found needing them)."""
    return Model(specializer=HostStages(proto, target, compile_onnx, compile_graph))


def restore_host_model(model: Model, compile_onnx: CompileOnnx, compile_graph: CompileGraph) -> Model:
    """A model with host stages read from a file (its specializer a
    :class:`~ember.model.format.SavedHostStages`) made callable: the stages rebuilt from the ONNX
    source the file embeds — validated as :func:`ember.compile` validates a model —, the file's
    split checked against the one computed here, and its compiled variants handed to their stages
    (each checked to take exactly its stage's inputs and give its outputs). Raises
    :class:`~ember.errors.ModelFormatError` naming what differs."""
    from .frontend.host_scan import NeedsHostStages
    from .frontend.onnx import import_onnx
    from .model.format import SavedHostStages

    saved = model._specializer
    assert isinstance(saved, SavedHostStages) and model.source is not None
    what = saved.path or "the saved model"
    options = model.source.get("options", {})
    try:
        named = str(Target(str(options.get("target", "llvm"))))
    except EmberError as exc:
        raise ModelFormatError(f"{what}: source/options.json names no valid target ({exc})") from exc
    if named != saved.target:
        raise ModelFormatError(f"{what}: source/options.json names target {named!r}, host.json {saved.target!r}")
    try:
        import_onnx(model.source["onnx"], options.get("input_shapes"))
    except NeedsHostStages as exc:
        proto = exc.model
    except (EmberError, TypeError, ValueError, AttributeError) as exc:  # (options.json's input_shapes: any JSON)
        raise ModelFormatError(f"{what}: its ONNX source is not a valid model with these options ({exc})") from exc
    else:
        raise ModelFormatError(f"{what}: its ONNX source has no host operators, so it has no host stages")
    try:
        stages = HostStages(proto, saved.target, compile_onnx, compile_graph)
    except EmberError as exc:
        raise ModelFormatError(f"{what}: its ONNX source cannot be cut into stages ({exc})") from exc
    got = [(st.compiled, st.node_ids) for st in stages.stages]
    if got != saved.stages or stages.input_names != saved.input_names \
            or stages.output_names != saved.output_names:
        raise ModelFormatError(f"{what}: host.json's stages, inputs or outputs differ from those of its ONNX source "
                               f"(file: {saved.stages[:8]}, source: {got[:8]})")
    for k, variant in saved.variants:
        st = stages.stages[k]
        specs = {sp.name: sp for sp in variant.inputs}
        if sorted(specs) != sorted(st.inputs) or variant.output_names != st.outputs:
            raise ModelFormatError(f"{what}: a compiled variant of stage {k} takes {sorted(specs)} and gives "
                                   f"{variant.output_names}; the stage reads {st.inputs} and gives {st.outputs}")
        try:
            key = (k,) + tuple((n, np.dtype(specs[n].dtype).str, tuple(int(d) for d in specs[n].shape))
                               for n in st.inputs)
        except (TypeError, ValueError) as exc:
            raise ModelFormatError(f"{what}: a compiled variant of stage {k} has inputs NumPy cannot hold") from exc
        stages._cache[key] = variant
    return Model(specializer=stages, source=model.source, cuda_graphs=model.cuda_graphs)
