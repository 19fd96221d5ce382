"""Checks of an ONNX model before ember imports it: what ONNX Runtime rejects, ember rejects.

:func:`validate_model` runs, in this order (the first rule broken raises; see ``docs/models.md``,
"Validation"):

1. **header**: an ``ir_version`` ember's ``onnx`` knows, one opset per domain, versions >= 1, the
   default domain's version at most the newest ONNX opset (``onnx.defs.onnx_opset_version()``)
   -> :class:`ModelFormatError`;
2. **structure** of the graph and of every subgraph: names defined once (graph inputs,
   initializers, node outputs), every node input and graph output defined, no cycle
   -> :class:`GraphError` naming the node and the name. Nodes out of topological order are
   sorted (ONNX Runtime accepts them too);
3. **operators** ember does not implement -> one :class:`UnsupportedOpError` listing all of them;
4. **tensors** (initializers, ``Constant`` values, every subgraph's): a known element type,
   non-negative dimensions, raw data (or typed values) of exactly the size the dimensions and
   type need -> :class:`ModelFormatError`;
5. **``onnx.checker``** (attributes known to the schema and of the right type, input and output
   counts, required inputs present, opset imports of every domain used) -> :class:`ModelFormatError`;
6. **strict shape inference** (``onnx.shape_inference.infer_shapes(strict_mode=True,
   check_type=True)``; without ``data_prop``, which materializes the values of large 1-D
   tensors: shapes computed from values are checked by ember's folding instead) with the
   ``input_shapes`` given: the operators' own shape and type rules (Transpose ``perm``, Concat
   dimensions, Gemm/MatMul K, Flatten ``axis``, Softmax ``axis``...) -> :class:`GraphError`
   naming the operator, the node and the rule. One deliberate leniency: ember's 8-, 4- and
   2-bit types may pass through operators whose type constraints do not list them (``Slice``,
   ``Gather``: data movement, no arithmetic).

Steps 5 and 6 run on a *light copy* of the model: initializers of more than
:data:`LIGHT_ELEMENTS` elements become graph inputs of the same type and shape (their data was
checked in step 4; no rule reads the values of large tensors), so a 100 MB model is checked in
milliseconds and a model over protobuf's 2 GB limit can be checked at all. Like ONNX Runtime,
the copy leaves out ``value_info`` and the declared shapes of graph outputs (a stale hint is not
an error, only the operators' rules are) and graph outputs without a type (ONNX Runtime infers
it), and, for the checker only, gives graph inputs and outputs that declare no shape an empty one
(the checker wants the field; ONNX Runtime does not). Both run in a forked child process
with its memory capped (:func:`_isolated_onnx_checks`): onnx's C++ code reads the untrusted
model, and some malformed models make it abort; that becomes a :class:`ModelFormatError`.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import FrontendError, GraphError, ModelFormatError, UnsupportedOpError

#: Initializers with more elements than this are replaced by graph inputs in the copy the
#: checker and shape inference see.
LIGHT_ELEMENTS = 1024

#: Domains whose operators ember may implement; a node of another domain is an unsupported
#: operator. ``com.microsoft`` holds the contrib operators ONNX Runtime's tools emit
#: (``QLinearAdd``, ``QLinearGlobalAveragePool``...): the checker has no schema for them, so
#: the rules that apply are those ember's implementation of each checks.
KNOWN_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training", "com.microsoft")

#: Element types stored several to a byte in ``raw_data``: values per byte.
_PACKED = {21: 2, 22: 2, 23: 2, 25: 4, 26: 4}


def _onnx() -> Any:
    import onnx

    return onnx


def op_key(n: Any) -> str:
    """The registry name of node ``n``: its type, prefixed by its domain outside the default one
    (``ai.onnx.ml.Binarizer``, ``com.microsoft.QLinearAdd``)."""
    return n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"


def node_label(n: Any, k: int) -> str:
    """How errors name node ``k``: its name, or ``<op_type>_<k>`` as ember's importer names it."""
    return n.name or f"{n.op_type}_{k}"


def validate_model(m: Any, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Any:
    """Check ``m`` (an ``onnx.ModelProto``) as described in the module docstring; returns it,
    or a copy with its nodes in topological order when they were not. ``m`` is not changed."""
    try:
        _touch_strings(m)
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"the model holds a name or string that is not valid UTF-8 ({exc})") from exc
    _check_header(m)
    order = _check_structure(m.graph, set(), "graph")
    if order is not None:
        m = _sorted_copy(m, order)
    _check_operators(m)
    _check_tensors(m.graph, "graph")
    _check_inputs(m.graph, input_shapes)
    light, filled = _light_copy(m)
    _isolated_onnx_checks(light, filled, input_shapes)
    return m


def _touch_strings(m: Any) -> int:
    """Read every string the importer reads: protobuf decodes them on access and raises
    UnicodeDecodeError, or gives ``bytes``, for data that is not UTF-8. Returns their total length."""
    got = [m.producer_name, m.producer_version, m.domain, m.doc_string]
    got += [imp.domain for imp in m.opset_import]
    got += [x for p in m.metadata_props for x in (p.key, p.value)]
    n = _utf8(got)
    for f in m.functions:
        n += _utf8([f.name, f.domain]) + _touch_graph_strings(f)
    return n + _touch_graph_strings(m.graph)


def _utf8(strings: list[Any]) -> int:
    for s in strings:
        if not isinstance(s, str):
            raise UnicodeDecodeError("utf-8", bytes(s), 0, len(s), f"the string {s!r} is not valid UTF-8")
    return sum(map(len, strings))


def _touch_graph_strings(g: Any) -> int:
    got: list[str] = []
    if hasattr(g, "initializer"):  # a GraphProto (a FunctionProto has nodes only)
        got += [g.name, g.doc_string] + [t.name for t in g.initializer]
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            got.append(vi.name)
            if vi.type.HasField("tensor_type"):
                got += [d.dim_param for d in vi.type.tensor_type.shape.dim]
    n = 0
    for node in g.node:
        got += [node.name, node.op_type, node.domain, node.doc_string, *node.input, *node.output]
        for a in node.attribute:
            got += [a.name, a.ref_attr_name, a.doc_string] + ([a.t.name] if a.HasField("t") else [])
        for _, sub in _subgraphs(node):
            n += _touch_graph_strings(sub)
    return n + _utf8(got)


# -- 1. header -------------------------------------------------------------------------------------
def _check_header(m: Any) -> None:
    onnx = _onnx()
    if not m.HasField("graph"):
        raise ModelFormatError("the model holds no graph")
    if not m.graph.output:
        raise ModelFormatError("the model's graph has no outputs (an ONNX graph has at least one)")
    if m.ir_version <= 0:
        raise ModelFormatError("the model has no ir_version (every ONNX model states the IR version it follows)")
    if m.ir_version > onnx.IR_VERSION:
        raise ModelFormatError(
            f"the model's ir_version {m.ir_version} is newer than the newest ember's onnx {onnx.__version__} "
            f"knows ({onnx.IR_VERSION})"
        )
    newest = onnx.defs.onnx_opset_version()
    seen: dict[str, int] = {}
    for imp in m.opset_import:
        dom = "" if imp.domain == "ai.onnx" else imp.domain
        if dom in seen:
            raise ModelFormatError(f"opset_import names domain {imp.domain or 'ai.onnx'!r} twice")
        seen[dom] = int(imp.version)
        if imp.version < 1:
            raise ModelFormatError(f"opset_import gives domain {imp.domain or 'ai.onnx'!r} version {imp.version}")
        if dom == "" and imp.version > newest:
            raise ModelFormatError(
                f"the model uses ai.onnx opset {imp.version}; the newest opset is {newest} "
                f"(onnx {onnx.__version__})"
            )


# -- 2. structure -----------------------------------------------------------------------------------
def _subgraphs(n: Any) -> Iterable[tuple[str, Any]]:
    onnx = _onnx()
    for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.name, a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            for k, g in enumerate(a.graphs):
                yield f"{a.name}[{k}]", g


def _check_structure(g: Any, outer: set[str], where: str) -> list[int] | None:
    """Names defined once and used after definition in graph ``g`` (subgraphs see ``outer``);
    returns a topological order of ``g``'s nodes when theirs is not one, else None."""
    defined: dict[str, str] = {}

    def define(name: str, what: str) -> None:
        if not name:
            return
        if name in defined:
            raise GraphError(f"{where}: {name!r} is defined twice ({defined[name]} and {what}); "
                             "every value must have one definition")
        defined[name] = what

    inits = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
    for vi in g.input:
        define(vi.name, f"graph input {vi.name!r}")
    seen_init: set[str] = set()
    for t in list(g.initializer) + [s.values for s in g.sparse_initializer]:
        if t.name in seen_init:
            raise GraphError(f"{where}: initializer {t.name!r} is given twice")
        seen_init.add(t.name)
        if t.name not in defined:  # an initializer may also be a graph input (its default value)
            define(t.name, f"initializer {t.name!r}")
    producer: dict[str, int] = {}
    for k, n in enumerate(g.node):
        for o in n.output:
            define(o, f"output of node {node_label(n, k)!r} ({n.op_type})")
            if o:
                producer[o] = k
    visible = outer | set(defined)
    for k, n in enumerate(g.node):
        for i in n.input:
            if i and i not in visible:
                raise GraphError(
                    f"{where}: node {node_label(n, k)!r} ({n.op_type}) reads {i!r}, which is not a graph input, an "
                    "initializer or the output of a node"
                )
        for name, sub in _subgraphs(n):
            order = _check_structure(sub, visible, f"{where}: node {node_label(n, k)!r} attribute {name}")
            if order is not None:
                raise GraphError(
                    f"{where}: the subgraph {name} of node {node_label(n, k)!r} is not in topological order"
                )
    for o in g.output:
        if o.name not in visible:
            raise GraphError(f"{where}: graph output {o.name!r} is not computed by any node nor a graph input")
    del inits
    return _topological_order(g, producer, where)


def _topological_order(g: Any, producer: dict[str, int], where: str) -> list[int] | None:
    """A topological order of ``g``'s nodes (None when theirs is one); GraphError on a cycle."""
    nodes = list(g.node)
    deps: list[set[int]] = []
    in_order = True
    for k, n in enumerate(nodes):
        d = {producer[i] for i in _reads(n) if i in producer}
        if k in d:
            raise GraphError(f"{where}: node {node_label(n, k)!r} ({n.op_type}) reads its own output: a cycle")
        if any(p > k for p in d):
            in_order = False
        deps.append(d)
    if in_order:
        return None
    users: dict[int, list[int]] = {}
    missing = [len(d) for d in deps]
    for k, d in enumerate(deps):
        for p in d:
            users.setdefault(p, []).append(k)
    ready = [k for k in range(len(nodes)) if not missing[k]]
    order: list[int] = []
    import heapq

    heapq.heapify(ready)
    while ready:
        k = heapq.heappop(ready)  # the lowest index first: the model's own order where it can
        order.append(k)
        for u in users.get(k, []):
            missing[u] -= 1
            if not missing[u]:
                heapq.heappush(ready, u)
    if len(order) < len(nodes):
        stuck = [node_label(nodes[k], k) for k in range(len(nodes)) if missing[k]]
        raise GraphError(f"{where}: the graph has a cycle through node(s) {', '.join(map(repr, stuck[:8]))}")
    return order


def _reads(n: Any) -> set[str]:
    """The names node ``n`` reads, including those its subgraphs read from the outside."""
    out = {i for i in n.input if i}
    for _, sub in _subgraphs(n):
        inner = {v.name for v in sub.input} | {t.name for t in sub.initializer}
        for sn in sub.node:
            inner.update(o for o in sn.output if o)
        for sn in sub.node:
            out.update(i for i in _reads(sn) if i not in inner)
        out.update(o.name for o in sub.output if o.name not in inner)
    return out


def _sorted_copy(m: Any, order: list[int]) -> Any:
    onnx = _onnx()
    c = onnx.ModelProto()
    c.CopyFrom(m)
    nodes = [c.graph.node[k] for k in order]
    copies = []
    for n in nodes:
        nn = onnx.NodeProto()
        nn.CopyFrom(n)
        copies.append(nn)
    del c.graph.node[:]
    c.graph.node.extend(copies)
    return c


# -- 3. operators ember implements -----------------------------------------------------------------
def _check_operators(m: Any) -> None:
    from ..ops.registry import lookup
    from .control_flow import CONTROL_OPS
    from .functions import defined_as_function
    from .host_scan import ALWAYS_HOST

    unsupported: dict[str, int] = {}
    opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in m.opset_import}

    def scan(g: Any, main: bool) -> None:
        for n in g.node:
            key = op_key(n)
            control = n.domain in ("", "ai.onnx") and n.op_type in CONTROL_OPS
            host = n.domain in ("", "ai.onnx", "ai.onnx.ml") and n.op_type in ALWAYS_HOST  # ember.host_stages
            if not control and not host and lookup(key) is None:
                # an ONNX function in the main graph is inlined after validation (frontend/functions.py)
                if not (main and defined_as_function(n, opsets)):
                    unsupported[key] = unsupported.get(key, 0) + 1
            for _, sub in _subgraphs(n):
                scan(sub, False)

    scan(m.graph, True)
    if unsupported:
        raise UnsupportedOpError(unsupported)


# -- 4. tensors -----------------------------------------------------------------------------------
def tensor_problem(t: Any) -> str | None:
    """What is wrong with TensorProto ``t`` (None when nothing): its element type, its dimensions,
    the size of its raw data."""
    onnx = _onnx()
    from ..ops.elemwise import ONNX_DTYPES

    T = onnx.TensorProto
    if t.data_type == T.UNDEFINED:
        return "has no element type"
    if t.data_type not in T.DataType.values():
        return f"has element type {t.data_type}, which ONNX does not define"
    dims = [int(d) for d in t.dims]
    if any(d < 0 for d in dims):
        return f"has a negative dimension: dims {dims}"
    count = 1
    for d in dims:
        count *= d
    if t.data_type == T.STRING or t.data_location == T.EXTERNAL:
        return None
    typed = _typed_count(t)
    if typed and t.HasField("raw_data"):
        return "holds both raw_data and typed data"
    field = _TYPED_FIELD.get(int(t.data_type))
    if typed and field is not None and len(getattr(t, field)) != count:
        return f"holds {len(getattr(t, field))} values in {field}, but dims {dims} need {count}"
    if not typed:
        dt = ONNX_DTYPES.get(int(t.data_type))
        if dt is None:
            return None  # complex types: the importer reports them as unsupported
        per = _PACKED.get(int(t.data_type))
        need = -(-count // per) if per else count * np.dtype(_np_storage(dt)).itemsize
        if len(t.raw_data) != need:
            return (f"holds {len(t.raw_data)} bytes of data, but dims {dims} of type "
                    f"{T.DataType.Name(t.data_type)} need {need}")
    return None


def _np_storage(dt: str) -> str:
    """A NumPy dtype of the same item size as ember dtype ``dt``."""
    if dt == "bfloat16" or dt.startswith(("float8", "float4", "int4", "uint4", "int2", "uint2")):
        return "uint16" if dt == "bfloat16" else "uint8"
    return dt


#: The typed field that holds the values of each element type stored one per entry.
_TYPED_FIELD = {1: "float_data", 2: "int32_data", 3: "int32_data", 4: "int32_data", 5: "int32_data",
                6: "int32_data", 7: "int64_data", 9: "int32_data", 10: "int32_data", 11: "double_data",
                12: "uint64_data", 13: "uint64_data", 16: "int32_data", 17: "int32_data", 18: "int32_data",
                19: "int32_data", 20: "int32_data", 24: "int32_data"}


def _typed_count(t: Any) -> int:
    return (len(t.float_data) + len(t.int32_data) + len(t.int64_data) + len(t.double_data)
            + len(t.uint64_data) + len(t.string_data))


def _check_tensors(g: Any, where: str) -> None:
    onnx = _onnx()
    A = onnx.AttributeProto
    for t in g.initializer:
        bad = tensor_problem(t)
        if bad:
            raise ModelFormatError(f"{where}: initializer {t.name!r} {bad}")
    for k, n in enumerate(g.node):
        for a in n.attribute:
            if a.type == A.TENSOR:
                bad = tensor_problem(a.t)
                if bad:
                    raise ModelFormatError(
                        f"{where}: node {node_label(n, k)!r} ({n.op_type}) attribute {a.name!r}: the tensor {bad}"
                    )
        for name, sub in _subgraphs(n):
            _check_tensors(sub, f"{where}: node {node_label(n, k)!r} attribute {name}")


def _check_inputs(g: Any, input_shapes: Mapping[str, Sequence[int]] | None) -> None:
    """``input_shapes`` are shapes. (A negative dimension of a graph input means "unknown" to
    exporters and ONNX Runtime alike: the importer asks for its size as for a symbolic one.)"""
    del g
    for name, shp in (input_shapes or {}).items():
        try:
            dims = [int(d) for d in shp]
        except (TypeError, ValueError) as exc:
            raise FrontendError(f"input_shapes[{name!r}] = {shp!r} is not a sequence of integers") from exc
        if any(d < 0 for d in dims):
            raise FrontendError(f"input_shapes[{name!r}] = {tuple(dims)} has a negative dimension")


# -- 5. and 6. the checker and strict shape inference, on a light copy ----------------------------------
def _light_copy(m: Any) -> tuple[Any, list[Any]]:
    """The model with its large initializers turned into graph inputs and unnamed top-level
    nodes named as ember names them; graph inputs and outputs without a shape get an empty one
    (returned: those value infos, to clear again for inference)."""
    onnx = _onnx()
    c = onnx.ModelProto()
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(c, field, getattr(m, field))
    c.opset_import.extend(m.opset_import)
    for imp in c.opset_import:  # "ai.onnx" names the default domain, as for ONNX Runtime
        if imp.domain == "ai.onnx":
            imp.domain = ""
    c.functions.extend(m.functions)
    g, src = c.graph, m.graph
    g.name = src.name or "graph"
    g.input.extend(src.input)
    g.output.extend(o for o in src.output if o.HasField("type"))  # ONNX Runtime infers an untyped output
    g.sparse_initializer.extend(src.sparse_initializer)
    have = {vi.name for vi in src.input}
    for t in src.initializer:
        count = int(np.prod([int(d) for d in t.dims], dtype=np.float64)) if t.dims else 1
        if count <= LIGHT_ELEMENTS:
            g.initializer.append(t)
        elif t.name not in have:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, [int(d) for d in t.dims]))
    for k, n in enumerate(src.node):
        g.node.append(n)
        if not n.name:
            g.node[-1].name = node_label(n, k)
        if n.domain == "ai.onnx":
            g.node[-1].domain = ""
    for vi in g.input:  # exporters write -1 for "unknown": a symbolic dimension to inference
        if vi.type.HasField("tensor_type"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value < 0:
                    d.dim_param = f"unknown_{vi.name}"
    filled = []
    for vi in list(g.input) + list(g.output):
        if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
            vi.type.tensor_type.shape.SetInParent()
            filled.append(vi)
    return c, filled


#: Seconds the checker and shape inference may take on one model.
ONNX_CHECK_TIMEOUT = 300.0


def _isolated_onnx_checks(light: Any, filled: list[Any], input_shapes: Mapping[str, Sequence[int]] | None) -> None:
    """Steps 5 and 6 in a forked child process. onnx's C++ checker and shape inference read the
    untrusted model, and some malformed models make them abort the process (onnx's wheels are
    built with assertions: a Conv whose inferred output is negative, sliced later, fails an
    ``std::clamp`` assertion); in a child, that is a :class:`ModelFormatError`, not the end of the
    caller's process. ``EMBER_ONNX_CHECKS=inprocess`` (and systems without ``fork``) run them in
    the calling process."""
    if not hasattr(os, "fork") or os.environ.get("EMBER_ONNX_CHECKS", "").lower() == "inprocess":
        _run_checker(light)
        _run_inference(light, filled, input_shapes)
        return
    r, w = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns about fork in a threaded process;
        warnings.simplefilter("ignore", DeprecationWarning)  # the child only runs onnx's C++ code
        pid = os.fork()
    if pid == 0:  # the child: answer in JSON, never return into the caller's code
        code = 3
        try:
            os.close(r)
            _limit_child_memory()
            try:
                _run_checker(light)
                _run_inference(light, filled, input_shapes)
                answer = {"error": None}
            except (ModelFormatError, GraphError) as exc:
                answer = {"error": type(exc).__name__, "msg": str(exc)}
            os.write(w, json.dumps(answer).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    data, status = _collect(pid, r)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        raise ModelFormatError(
            f"onnx's checker or shape inference crashed on the model (signal {sig}, {_signal_name(sig)}): "
            "the model is malformed"
        )
    if status == -1:
        raise ModelFormatError(f"onnx's checker and shape inference did not finish within {ONNX_CHECK_TIMEOUT:.0f} s")
    try:
        answer = json.loads(data.decode())
    except ValueError as exc:
        raise ModelFormatError(f"onnx's checker failed on the model (exit status {os.WEXITSTATUS(status)})") from exc
    if answer["error"] == "GraphError":
        raise GraphError(answer["msg"])
    if answer["error"] is not None:
        raise ModelFormatError(answer["msg"])


def _limit_child_memory() -> None:
    """Cap the child's address space at what it has plus :func:`~ember.ops.util.memory_limit` (at
    least 2 GiB), so
    that onnx's C++ code cannot take the machine's memory for an absurd shape (it fails with
    ``std::bad_alloc`` instead)."""
    import resource

    from ..ops.util import memory_limit

    try:
        with open("/proc/self/statm") as f:
            have = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        cap = have + max(memory_limit(), 2 << 30)
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (OSError, ValueError):
        pass  # no limit can be set here: the child runs uncapped (its crash is still contained)


def _collect(pid: int, fd: int) -> tuple[bytes, int]:
    """The child's answer and wait status (-1 when it timed out and was killed)."""
    chunks = []
    deadline = time.monotonic() + ONNX_CHECK_TIMEOUT
    try:
        while True:
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return b"", -1
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return b"".join(chunks), status


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return "unknown signal"


def _run_checker(light: Any) -> None:
    onnx = _onnx()
    try:
        onnx.checker.check_model(light)
    except onnx.checker.ValidationError as exc:
        msg = " ".join(str(exc).split("==>")[0].split())
        raise ModelFormatError(f"the model breaks the ONNX specification (onnx.checker): {msg}") from exc
    except (ValueError, RuntimeError, TypeError, MemoryError) as exc:
        if _too_large(exc):  # huge Constant nodes: ember's own rules only
            return
        raise ModelFormatError(f"onnx.checker cannot read the model: {type(exc).__name__}: {exc}") from exc


def _too_large(exc: BaseException) -> bool:
    return isinstance(exc, ValueError) and "2GB" in str(exc).replace(" ", "")


def _run_inference(light: Any, filled: list[Any], input_shapes: Mapping[str, Sequence[int]] | None) -> None:
    onnx = _onnx()
    for vi in filled:
        vi.type.tensor_type.ClearField("shape")
    for vi in light.graph.output:  # like ONNX Runtime: a declared output shape is a hint, not a rule
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    # onnx's inference skips the nodes of a graph one of whose outputs is a graph input (or an
    # initializer): such an output is given through an Identity in the copy.
    sources = {vi.name for vi in light.graph.input} | {t.name for t in light.graph.initializer}
    for k, vi in enumerate(light.graph.output):
        if vi.name in sources:
            fresh = f"{vi.name}__ember_output_{k}"
            light.graph.node.append(onnx.helper.make_node("Identity", [vi.name], [fresh]))
            vi.name = fresh
    shapes = dict(input_shapes or {})
    for vi in light.graph.input:
        if vi.name in shapes and vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            tt.ClearField("shape")
            tt.shape.SetInParent()
            for d in shapes[vi.name]:
                tt.shape.dim.add().dim_value = int(d)
    try:
        onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True, data_prop=False)
    except onnx.shape_inference.InferenceError as exc:
        errors = _inference_errors(str(exc))
        if errors:
            raise GraphError(
                f"the model fails ONNX shape inference (ONNX Runtime rejects it too): {'; '.join(errors)}"
            ) from exc
    except (ValueError, RuntimeError, TypeError, MemoryError) as exc:
        if _too_large(exc):
            return
        raise GraphError(f"ONNX shape inference cannot process the model: {type(exc).__name__}: {exc} (shapes "
                         "too large for memory?)" if isinstance(exc, MemoryError) else
                         f"ONNX shape inference cannot process the model: {type(exc).__name__}: {exc}") from exc


_HEAD = "Inference error(s): "


def _inference_errors(text: str) -> list[str]:
    """The errors of a strict inference failure, one line each, without those raised inside the
    function body of an operator (ONNX expands e.g. MeanVarianceNormalization and its strict
    inference cannot resolve the body's attribute references: an onnx limitation, not the
    model's; the operator's own rules are checked by ember's implementation of it)."""
    body = text.split(_HEAD, 1)[1] if _HEAD in text else text
    out = []
    for entry in body.split("\n"):
        entry = " ".join(entry.split())
        if entry and _HEAD not in entry and not _LOWP_TYPE.search(entry):
            out.append(entry)
    return out


#: ember's 8-, 4- and 2-bit storage types flow through data-movement operators whose type
#: constraints predate them (``Slice`` and ``Gather`` list no float8 type): ember accepts that,
#: deliberately more lenient than the spec (arithmetic on them is refused by the IR verifier).
_LOWP_TYPE = re.compile(r"has unsupported type: tensor\((float8\w*|float4\w*|u?int4|u?int2)\)")
