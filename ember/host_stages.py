"""Models with host operators: string tensors, text features and detection post-processing run in
NumPy on the host, before and after the compiled part of the model.

ONNX models that read or write text (``StringNormalizer``, ``StringSplit``, ``StringConcat``,
``RegexFullMatch``, ``Equal`` and ``LabelEncoder`` on strings, ``TfIdfVectorizer``), whose
output length only the data decide (``NonMaxSuppression``, ``ImageDecoder``) or that draw random numbers
(``RandomUniform``/``Normal``[``Like``], ``Bernoulli``, ``Multinomial``, ``Dropout`` in training
mode: :mod:`ember.ops.random`) keep those operators at their ends: text is turned into numbers
first, and numbers into labels or kept boxes last. ember splits such a model into three stages:

* a **host prefix**: the host operators that depend on no compiled operator, run in NumPy on
  each call (:mod:`ember.ops.strings`, :mod:`ember.ops.nms`);
* the **compiled middle**: every other operator, as an ONNX model of its own compiled by ember
  (once per distinct shapes and dtypes of its inputs, since a prefix's outputs can change size
  from call to call);
* a **host suffix**: the host operators that read compiled results, run in NumPy after them.

A host operator between two compiled ones (a compiled operator reading a suffix result) is a
:class:`~ember.errors.GraphError` naming it. :class:`HostStages` answers the model's
``program_for`` (see :class:`ember.model.model.Specializer`): it runs the prefix, returns the
middle's program with its inputs, and a function that runs the suffix on the program's outputs.
A string tensor is a NumPy ``object`` array of ``str``; a model with host stages cannot be saved
(it is compiled per call shape), like other specialised models.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ArgumentError, GraphError, UnsupportedOpError
from .frontend.host_scan import training_dropout
from .graph.ir import Graph
from .model.model import Model
from .model.program import Program
from .ops import random as rnd
from .ops.image_decoder import image_decoder
from .ops.nms import non_max_suppression
from .ops.strings import (
    HostKernel,
    label_encoder,
    regex_full_match,
    string_concat,
    string_equal,
    string_normalizer,
    string_split,
    tfidf_vectorizer,
)

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
        """Compute the outputs from ``env`` (name -> array) and store them there."""
        outs = self.kernel(self.attrs, [env[i] if i else None for i in self.inputs])
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
        k = HOST_FOR_STRINGS.get(node.op_type)
        if k is None:
            raise UnsupportedOpError({f"{node.op_type} on string tensors (node {node.name!r})": 1})
    return k


@dataclass
class Split:
    """A model cut into host prefix, compiled middle (ONNX nodes) and host suffix."""

    prefix: list[HostNode]
    middle: list[Any]
    suffix: list[HostNode]
    middle_inputs: list[str]
    middle_outputs: list[str]


def split_model(proto: Any) -> Split:
    """Cut ``proto``'s main graph (nodes in topological order, as ONNX requires) into stages.
    Raises GraphError for a host operator that a compiled operator reads (see the module doc)."""
    strings = _string_values(proto)
    g = proto.graph
    init_protos = {t.name: t for t in g.initializer}
    inits = set(init_protos)
    compiled_derived: set[str] = set()  # values computed by, or from, a compiled operator
    prefix: list[HostNode] = []
    suffix: list[HostNode] = []
    middle: list[Any] = []
    suffix_out: dict[str, str] = {}
    for node in g.node:
        kernel = _kernel_for(node, strings, init_protos)
        ins = [i for i in node.input if i]
        if kernel is None:
            for i in ins:
                if i in suffix_out:
                    raise GraphError(
                        f"{node.op_type} node {node.name!r} reads {i!r} from host operator {suffix_out[i]}, which "
                        "itself reads compiled results: ember runs host operators (strings, NonMaxSuppression, "
                        "TfIdfVectorizer) only before or after the compiled part of a model")
            middle.append(node)
            compiled_derived.update(o for o in node.output if o)
            continue
        host = HostNode(node.op_type, node.name, kernel, _attrs(node), list(node.input), list(node.output))
        if any(i in compiled_derived for i in ins):
            suffix.append(host)
            compiled_derived.update(o for o in node.output if o)
            suffix_out.update({o: f"{node.op_type} {node.name!r}" for o in node.output if o})
        else:
            prefix.append(host)
    produced_middle = {o for n in middle for o in n.output if o}
    read_by_middle = [i for n in middle for i in n.input if i]
    middle_inputs = list(dict.fromkeys(i for i in read_by_middle if i not in produced_middle and i not in inits))
    wanted = {i for h in suffix for i in h.inputs if i} | {o.name for o in g.output}
    middle_outputs = [o for n in middle for o in n.output if o and o in wanted]
    return Split(prefix, middle, suffix, middle_inputs, middle_outputs)


def middle_model(proto: Any, split: Split, inputs: Mapping[str, np.ndarray]) -> bytes:
    """The compiled middle of ``proto`` as ONNX bytes, its inputs typed and shaped like
    ``inputs`` (name -> array), its outputs typed by ONNX shape inference."""
    import onnx
    from onnx import helper

    g = proto.graph
    read = {i for n in split.middle for i in n.input if i}
    graph_in = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(inputs[n].dtype), inputs[n].shape)
                for n in split.middle_inputs]
    graph = helper.make_graph(split.middle, f"{g.name}_compiled", graph_in,
                              [onnx.ValueInfoProto(name=o) for o in split.middle_outputs],
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


def _host_array(value: Any) -> np.ndarray:
    """A call's input as a NumPy array (ember and DLPack arrays are copied to the host)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy") and callable(value.numpy):
        return np.asarray(value.numpy())
    return np.asarray(value)


class HostStages:
    """A model cut into host prefix, compiled middle and host suffix (see the module doc)."""

    def __init__(self, proto: Any, target: str, compile_onnx: CompileOnnx, compile_graph: CompileGraph):
        from onnx import numpy_helper

        self.proto = proto
        self.target = target
        self.split = split_model(proto)
        inits = {t.name for t in proto.graph.initializer}
        self.input_names = [v.name for v in proto.graph.input if v.name not in inits]
        self.output_names = [v.name for v in proto.graph.output]
        self._consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
        self._compile_onnx = compile_onnx
        self._empty = compile_graph(Graph(inputs=[], outputs=[], nodes=[])) if not self.split.middle else None
        self._cache: dict[tuple[Any, ...], Model] = {}
        self._lock = threading.Lock()

    def _middle_for(self, inputs: dict[str, np.ndarray]) -> Model:
        key = tuple((n, inputs[n].dtype.str, inputs[n].shape) for n in self.split.middle_inputs)
        with self._lock:
            model = self._cache.get(key)
            if model is None:
                onnx_bytes = middle_model(self.proto, self.split, inputs)
                model = self._compile_onnx(onnx_bytes, {n: tuple(inputs[n].shape) for n in self.split.middle_inputs})
                self._cache[key] = model
        return model

    def program_for(self, given: dict[str, Any]) -> tuple[Program, dict[str, Any], Callable[[list[Any]], list[Any]]]:
        """Run the host prefix on ``given``; the compiled middle's program and inputs; a function
        that runs the host suffix on the program's outputs and returns the model's outputs."""
        env: dict[str, Any] = dict(self._consts)
        env.update({n: _host_array(v) for n, v in given.items()})
        for h in self.split.prefix:
            h.run(env)
        if self._empty is not None:
            program, sub, inner = self._empty.program, {}, None
        else:
            missing = [n for n in self.split.middle_inputs if n not in env]
            if missing:
                raise ArgumentError(f"the compiled part of the model reads {missing}, which nothing computes")
            middle_in = {n: np.asarray(env[n]) for n in self.split.middle_inputs}
            model = self._middle_for(middle_in)
            if model.is_static:
                program, sub, inner = model.program, dict(middle_in), None
            else:
                program, sub, inner = model._specializer.program_for(dict(middle_in))  # type: ignore[union-attr]

        def finish(outs: list[Any]) -> list[Any]:
            if inner is not None:
                outs = inner(outs)
            local = dict(env)
            local.update(zip(self.split.middle_outputs, outs))
            for h in self.split.suffix:
                h.run(local)
            return [local[o] for o in self.output_names]

        return program, sub, finish


def host_model(proto: Any, target: str, compile_onnx: CompileOnnx, compile_graph: CompileGraph) -> Model:
    """A :class:`Model` running ``proto``'s host operators around its compiled part (the model
    :func:`ember.frontend.host_scan.needs_host_stages` found needing them)."""
    return Model(specializer=HostStages(proto, target, compile_onnx, compile_graph))
