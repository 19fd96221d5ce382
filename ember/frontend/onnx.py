"""ONNX frontend: a ``ModelProto`` (or a path to one) to ember's graph IR.

* opsets 7 to the newest the installed ``onnx`` knows (the default domain's version is given to
  every operator, which reads its attributes and inputs accordingly);
* initializers, including tensors stored in external data files next to the model
  (``model.onnx.data``);
* input shapes from the model's ``value_info``, or from ``input_shapes`` (which wins); a model
  whose inputs keep symbolic dimensions (``dim_param`` names such as ``batch``, or unknown sizes)
  that ``input_shapes`` does not fix raises :class:`SymbolicShapes`, which carries the declared
  shapes: ``ember.compile`` answers it with a model compiled per call shape
  (:class:`ember.model.dynamic.ShapeSpecializer`);
* a model with operators ember does not implement raises one :class:`UnsupportedOpError` naming
  every such operator type; an unreadable file raises :class:`ModelFormatError`;
* every model is first checked as ONNX Runtime checks it (:mod:`ember.frontend.validate`: the
  ONNX checker, strict shape inference, ember's rules for tensors and graph structure), and the
  graph it becomes by :func:`ember.graph.validate.validate_graph`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import PROTO_ERRORS as _PROTO_ERRORS
from ..errors import FrontendError, ModelFormatError, UnsupportedOpError
from ..graph.ir import Graph, Node, TensorInfo
from ..graph.validate import validate_graph
from ..ops.elemwise import ONNX_DTYPES
from ..ops.registry import lookup
from .functions import expand_functions
from .host_scan import check_host_stages
from .opset import default_opset
from .validate import op_key, validate_model

MIN_OPSET = 1


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise FrontendError("importing ONNX models needs the onnx package: pip install onnx") from exc
    return onnx


_ELEM = ONNX_DTYPES


def elem_dtype(code: int, what: str) -> str:
    """The dtype of ONNX element type ``code``; FrontendError when ember has no such type."""
    dt = _ELEM.get(int(code))
    if dt is None:
        onnx = _onnx()
        try:
            nm = onnx.TensorProto.DataType.Name(int(code))
        except ValueError:
            nm = str(code)
        raise UnsupportedOpError({f"tensor type {nm} ({what})": 1})
    return dt


def load_model(model: Any) -> Any:
    """A ``ModelProto`` from a path, bytes or a ``ModelProto`` (external data loaded)."""
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model))
        except _PROTO_ERRORS as exc:  # protobuf and onnx raise several types
            raise ModelFormatError(f"the bytes given are not an ONNX model ({type(exc).__name__}: {exc})") from exc
    path = os.fspath(model)
    if not os.path.exists(path):
        raise ModelFormatError(f"{path}: no such file")
    try:
        m = onnx.load(path, load_external_data=False)
    except _PROTO_ERRORS as exc:
        raise ModelFormatError(
            f"{path} is not a readable ONNX model: {type(exc).__name__}: {exc}. "
            "Check that the file is complete (not truncated) and is an .onnx file"
        ) from exc
    if not m.graph.node and not m.graph.output:
        raise ModelFormatError(f"{path} holds no ONNX graph (is it an ONNX model?)")
    try:
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(m, os.path.dirname(os.path.abspath(path)))
    except _PROTO_ERRORS as exc:
        raise ModelFormatError(f"{path}: could not read its external data files: {exc}") from exc
    return m


def _attr(a: Any) -> Any:
    onnx = _onnx()
    from onnx import numpy_helper

    t = a.type
    A = onnx.AttributeProto
    if t == A.FLOAT:
        return float(a.f)
    if t == A.INT:
        return int(a.i)
    if t == A.STRING:
        return bytes(a.s)
    if t == A.TENSOR:
        return _tensor(a.t, f"attribute {a.name}")
    if t == A.FLOATS:
        return [float(x) for x in a.floats]
    if t == A.INTS:
        return [int(x) for x in a.ints]
    if t == A.STRINGS:
        return [bytes(x) for x in a.strings]
    if t == A.GRAPH:
        return a.g
    del numpy_helper
    return None


def _tensor(t: Any, what: str) -> np.ndarray:
    from onnx import numpy_helper

    elem_dtype(t.data_type, what)
    try:
        arr = numpy_helper.to_array(t)
    except _PROTO_ERRORS as exc:
        raise ModelFormatError(f"{what}: tensor {t.name!r} cannot be read ({exc})") from exc
    return np.require(arr, requirements="C")


def _constant_value(attrs: dict[str, Any]) -> np.ndarray:
    if "value" in attrs:
        return np.asarray(attrs["value"])
    if "value_float" in attrs:
        return np.array(attrs["value_float"], np.float32)
    if "value_floats" in attrs:
        return np.array(attrs["value_floats"], np.float32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], np.int64)
    if "value_ints" in attrs:
        return np.array(attrs["value_ints"], np.int64)
    raise FrontendError(f"Constant node with attributes {sorted(attrs)} is not supported (strings, sparse tensors)")


_op_key = op_key

#: A declared input dimension: a size, or the name of a size given at call time.
Dim = int | str


class SymbolicShapes(FrontendError):
    """The model's inputs have dimensions known only at call time. ``inputs`` lists every
    tensor input as ``(name, dims, dtype)`` — a dimension is an int (fixed, or fixed by
    ``input_shapes``) or a symbol: its ``dim_param`` name, or ``"<input>[<k>]"`` when the model
    leaves it unnamed or names it ``"?"`` (each such dimension is free on its own); ``input_names`` names every input
    in call order (sequence and optional ones too); ``outputs`` names the outputs."""

    def __init__(self, msg: str, inputs: list[tuple[str, tuple[Dim, ...], str]], input_names: list[str],
                 outputs: list[str]):
        super().__init__(msg)
        self.inputs = inputs
        self.input_names = input_names
        self.outputs = outputs


def declared_inputs(m: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
                    ) -> list[tuple[str, tuple[Dim, ...], str]]:
    """Every tensor input of the ``ModelProto`` ``m`` (initializers excluded) as ``(name, dims,
    dtype)``, dims as :class:`SymbolicShapes` describes them; inputs that ``input_shapes`` names
    get its sizes, and so do the dimensions of other inputs named by the same symbols (fixing
    ``a: (batch, seq)`` to ``(2, 5)`` makes ``mask: (batch, seq)`` ``(2, 5)``). Non-tensor inputs
    (sequences, optionals) are left out."""
    inits = {t.name for t in m.graph.initializer}
    shapes = dict(input_shapes or {})
    found: list[tuple[str, tuple[Dim, ...], str]] = []
    for vi in m.graph.input:
        if (vi.name in inits and vi.name not in shapes) or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims: list[Dim] = []
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value >= 0:  # exporters write -1 for "unknown"
                dims.append(int(d.dim_value))
            else:
                named = d.dim_param and d.dim_param != "?"  # Paddle writes "?" for every unknown size
                dims.append(d.dim_param if named else f"{vi.name}[{k}]")
        found.append((vi.name, tuple(dims), elem_dtype(tt.elem_type, f"input {vi.name}")))
    bound: dict[str, int] = {}
    for name, dims, _ in found:
        if name in shapes and len(shapes[name]) == len(dims):
            bound.update({d: int(v) for d, v in zip(dims, shapes[name]) if isinstance(d, str)})
    return [(name, tuple(int(v) for v in shapes[name]) if name in shapes else
             tuple(bound.get(d, d) if isinstance(d, str) else d for d in dims), dt) for name, dims, dt in found]


def _proto_dims(m: Any, name: str) -> tuple[Dim, ...]:
    """The declared dims of input ``name`` alone (no ``input_shapes`` applied)."""
    return next(dims for n, dims, _ in declared_inputs(m) if n == name)


def _check_symbolic(m: Any, input_shapes: Mapping[str, Sequence[int]] | None) -> Mapping[str, Sequence[int]] | None:
    """Raise :class:`SymbolicShapes` when a tensor input keeps a symbolic dimension (after the
    operators of the main graph are checked, so an unsupported model fails at compile time);
    otherwise the input shapes to import with: ``input_shapes`` plus the inputs whose symbols it
    fixed."""
    from .control_flow import CONTROL_OPS

    try:
        declared = declared_inputs(m, input_shapes)
    except UnsupportedOpError:
        return input_shapes  # the importer reports the type with the rest
    open_dims = [(n, dims) for n, dims, _ in declared if any(isinstance(d, str) for d in dims)]
    if not open_dims:
        if not input_shapes:
            return input_shapes
        fixed = {n: dims for n, dims, _ in declared if n in input_shapes or dims != _proto_dims(m, n)}
        return {**fixed, **input_shapes}  # type: ignore[dict-item]
    unsupported: dict[str, int] = {}
    for n in m.graph.node:
        key = _op_key(n)
        if n.op_type not in CONTROL_OPS and lookup(key) is None:
            unsupported[key] = unsupported.get(key, 0) + 1
    if unsupported:
        raise UnsupportedOpError(unsupported)
    desc = ", ".join(f"{n} {tuple(dims)}" for n, dims in open_dims)
    raise SymbolicShapes(
        f"the model's inputs have dimensions given at call time ({desc}); ember.compile compiles such a model "
        "for each input shape it is called with, or input_shapes= fixes them",
        declared, [vi.name for vi in m.graph.input if vi.name not in {t.name for t in m.graph.initializer}],
        [o.name for o in m.graph.output])


def import_onnx(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None, validate: bool = True) -> Graph:
    """Convert an ONNX model (path, bytes or ModelProto) to ember's graph IR. ``validate=False``
    skips the checks of :func:`~ember.frontend.validate.validate_model` (only for pieces of a
    model that was validated whole, as the control-flow rewrite imports)."""
    m = load_model(model)
    if validate:
        m = validate_model(m, input_shapes)
        m = expand_functions(m)  # operators ONNX defines as functions, inlined
        check_host_stages(m)  # strings, random draws, NonMaxSuppression: ember.host_stages runs those
    input_shapes = _check_symbolic(m, input_shapes)
    from .control_flow import expand_control_flow  # If/Loop/Scan, sequences, optionals: unrolled

    m = expand_control_flow(m, input_shapes)
    opset = default_opset(m)
    if opset < MIN_OPSET:
        raise FrontendError(
            f"the model uses opset {opset}; ember supports opsets {MIN_OPSET} and newer "
            "(convert it with onnx.version_converter)"
        )
    g = m.graph
    unsupported: dict[str, int] = {}
    for n in g.node:
        key = _op_key(n)
        if lookup(key) is None:
            unsupported[key] = unsupported.get(key, 0) + 1
    consts: dict[str, np.ndarray] = {}
    for t in g.initializer:
        try:
            consts[t.name] = _tensor(t, f"initializer {t.name}")
        except UnsupportedOpError as exc:
            unsupported.update(exc.ops)
    values: dict[str, TensorInfo] = {}
    inputs: list[str] = []
    shapes = dict(input_shapes or {})
    for name in shapes:
        if name not in [i.name for i in g.input]:
            raise FrontendError(
                f"input_shapes names {name!r}, which is not an input of the model "
                f"(inputs: {', '.join(i.name for i in g.input if i.name not in consts)})"
            )
    for vi in g.input:
        if vi.name in consts and vi.name not in shapes:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            unsupported[f"non-tensor input {vi.name}"] = 1
            continue
        try:
            dt = elem_dtype(tt.elem_type, f"input {vi.name}")
        except UnsupportedOpError as exc:
            unsupported.update(exc.ops)
            continue
        if vi.name in shapes:
            shp = tuple(int(d) for d in shapes[vi.name])
        else:
            dims = []
            for k, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value") and d.dim_value >= 0:  # exporters write -1 for "unknown"
                    dims.append(int(d.dim_value))
                else:
                    raise FrontendError(
                        f"input {vi.name!r} has a symbolic dimension {k} ({d.dim_param or '?'}); give its size: "
                        f"ember.compile(model, input_shapes={{{vi.name!r}: (...)}})"
                    )
            shp = tuple(dims)
        consts.pop(vi.name, None)
        values[vi.name] = TensorInfo(shp, dt)
        inputs.append(vi.name)
    if unsupported:
        raise UnsupportedOpError(unsupported)
    nodes = []
    for k, n in enumerate(g.node):
        attrs = {a.name: _attr(a) for a in n.attribute}
        if any(a.type == _onnx().AttributeProto.GRAPH for a in n.attribute):
            raise UnsupportedOpError({f"{n.op_type} (with a subgraph)": 1})
        if n.op_type == "Constant":
            attrs = {"value": _constant_value(attrs)}
        nodes.append(Node(_op_key(n), list(n.input), list(n.output), attrs, n.name or f"{n.op_type}_{k}", opset))
    graph = Graph(inputs, [o.name for o in g.output], nodes, values, consts, g.name or "model")
    validate_graph(graph)
    return graph
