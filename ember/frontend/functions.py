"""Operators ember has no kernel for but ONNX defines as a function of other operators (their
schema's function body, or a body built for the node's attributes and input types, such as
``ai.onnx.preview.FlexAttention`` with its ``score_mod``/``prob_mod`` subgraphs) are replaced by
that body once the model is validated (validation accepts them in the main graph), before it is
imported: the operators it is made of are compiled and fused like any others. A body is the
specification's own definition of the operator, so the result is the operator's by construction.

:func:`expand_functions` returns the model unchanged (the same object) when no node needs it, so
a model of ember's own operators costs one scan of its nodes.
"""

from __future__ import annotations

from typing import Any

from ..errors import FrontendError

#: Domain of the temporary local functions (inlined away before anything else sees them).
LOCAL_DOMAIN = "ember.expanded"
_KNOWN_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training")


def _implemented(node: Any) -> bool:
    from ..ops.registry import lookup
    from .control_flow import CONTROL_OPS
    from .host_scan import ALWAYS_HOST
    from .validate import op_key

    if node.domain in ("", "ai.onnx") and node.op_type in CONTROL_OPS:
        return True
    if node.domain in ("", "ai.onnx", "ai.onnx.ml") and node.op_type in ALWAYS_HOST:
        return True
    return lookup(op_key(node)) is not None


def _schema(node: Any, opsets: dict[str, int]) -> Any:
    """The node's ONNX schema with a function body, or None."""
    from onnx import defs

    if node.domain not in _KNOWN_DOMAINS:
        return None
    domain = "" if node.domain == "ai.onnx" else node.domain
    try:
        schema = defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
    except defs.SchemaError:
        return None
    return schema if schema.has_function or schema.has_context_dependent_function else None


def defined_as_function(node: Any, opsets: dict[str, int]) -> bool:
    """True when ONNX defines ``node``'s operator as a function of other operators at the model's
    opset (``opsets``: domain -> version, ``""`` for the default domain): :func:`expand_functions`
    inlines such a node of the main graph."""
    return _schema(node, opsets) is not None


def _body(node: Any, schema: Any, types: dict[str, Any]) -> Any:
    """The FunctionProto defining ``node`` (its attributes substituted by the inliner)."""
    import onnx

    if schema.has_context_dependent_function:
        missing = [i for i in node.input if i and i not in types]
        if missing:
            raise FrontendError(f"{node.op_type} node {node.name!r}: ember expands it by its ONNX definition, which "
                                f"needs the types of its inputs; ONNX shape inference gives none for {missing}")
        blob = schema.get_context_dependent_function(node.SerializeToString(),
                                                     [types[i].SerializeToString() if i else b"" for i in node.input])
        return onnx.FunctionProto.FromString(blob)
    body = onnx.FunctionProto()
    body.CopyFrom(schema.function_body)
    return body


def expand_functions(model: Any) -> Any:
    """``model`` (an ONNX ModelProto) with every main-graph node that ember does not implement but
    whose ONNX schema defines a function body replaced by that body; the same object when there is
    none. Raises FrontendError when a body cannot be built (the node's inputs have no type)."""
    import onnx
    from onnx import helper, inliner

    opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}
    todo = [(k, s) for k, n in enumerate(model.graph.node)
            if not _implemented(n) and (s := _schema(n, opsets)) is not None]
    if not todo:
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    types: dict[str, Any] = {}
    if any(s.has_context_dependent_function for _, s in todo):
        try:
            inferred = onnx.shape_inference.infer_shapes(m)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
            raise FrontendError(f"ONNX shape inference failed on the model ({exc})") from exc
        g = inferred.graph
        types = {v.name: v.type for v in list(g.input) + list(g.value_info) + list(g.output)}
    for k, schema in todo:
        node = m.graph.node[k]
        try:
            body = _body(node, schema, types)
        except (RuntimeError, ValueError, onnx.defs.SchemaError) as exc:  # onnx's builders raise these
            raise FrontendError(f"{node.op_type} node {node.name!r}: its ONNX definition cannot be built "
                                f"({exc})") from exc
        body.name, body.domain = f"{node.op_type}_{k}", LOCAL_DOMAIN
        have = {o.domain for o in body.opset_import}
        body.opset_import.extend(o for o in m.opset_import if o.domain not in have)
        if schema.has_context_dependent_function:
            del node.attribute[:]  # the built body has them substituted already
        node.op_type, node.domain = body.name, LOCAL_DOMAIN
        m.functions.append(body)
    m.opset_import.append(helper.make_opsetid(LOCAL_DOMAIN, 1))
    out = inliner.inline_local_functions(m)
    keep = [o for o in out.opset_import if o.domain != LOCAL_DOMAIN]
    del out.opset_import[:]
    out.opset_import.extend(keep)
    return out
