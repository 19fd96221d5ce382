"""Reduced-precision compilation of float32 ONNX models (``ember.compile(..., precision=...)``).

:func:`lower_precision` rewrites a float32 model the way TensorRT's reduced-precision modes run
one: every float32 tensor (weights, activations, ``Cast`` targets, constant attributes) becomes
float16 or bfloat16, so matrix products and convolutions run on the low-precision kernels (tensor
cores on a GPU, accumulating in float32); normalizations, softmax and reductions compute in
float32 (their inputs are cast up and their outputs back down), and the model's inputs and
outputs keep their declared float32 type (casts at the boundary). Constants are clipped to the
low type's range first (a mask's -3.4e38 becomes float16's -65504, not -inf). The rewritten model
is ordinary ONNX; it is validated like any other.

bfloat16 needs a recent opset for some operators: ONNX defines ``Conv``, the pooling operators
and others for bfloat16 only from opset 22. A model below that whose operators need it is first
converted to opset 22 (``onnx.version_converter``); an operator that still takes no bfloat16
(or a model the converter cannot convert) computes in float32 between casts, like
:data:`KEEP_FLOAT32`, so the rewritten model stays valid ONNX.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import FrontendError
from .opset import default_opset

#: The values ``precision=`` accepts (``"tf32"`` changes no type: the strategy picks TF32 tensor
#: cores for float32 products).
PRECISIONS = ("float32", "float16", "bfloat16", "tf32")

#: Operators computed in float32 whatever the precision (statistics, exponentials of sums).
KEEP_FLOAT32 = frozenset({
    "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization", "InstanceNormalization",
    "GroupNormalization", "RMSNormalization", "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL2",
    "ReduceLogSumExp", "ReduceLogSum", "MeanVarianceNormalization", "LpNormalization",
})


#: The first opset that defines bfloat16 for ``Conv`` and the pooling operators.
BF16_OPSET = 22


def _takes(op_type: str, version: int, type_str: str) -> bool:
    """Whether ONNX operator ``op_type`` at opset ``version`` accepts tensors of ``type_str``
    (``"tensor(bfloat16)"``) in one of its type constraints; True for operators ONNX does not
    know (ember's own, other domains: nothing to check)."""
    from onnx import defs

    try:
        schema = defs.get_schema(op_type, version, "")
    except defs.SchemaError:  # an operator ONNX does not define at this opset
        return True
    return not schema.type_constraints or any(type_str in tc.allowed_type_strs for tc in schema.type_constraints)


def _for_bfloat16(model: Any) -> Any:
    """``model``, converted to :data:`BF16_OPSET` when one of its operators takes bfloat16 only
    from there (``Conv`` before opset 22); ``model`` itself when none does or the conversion
    fails (those operators then compute in float32)."""
    import onnx

    version = default_opset(model)
    if version >= BF16_OPSET:
        return model
    bf16 = "tensor(bfloat16)"
    if not any(n.domain in ("", "ai.onnx") and not _takes(n.op_type, version, bf16)
               and _takes(n.op_type, BF16_OPSET, bf16) for n in model.graph.node):
        return model
    try:
        return onnx.version_converter.convert_version(model, BF16_OPSET)
    except (RuntimeError, ValueError, TypeError, KeyError, IndexError, onnx.checker.ValidationError):
        return model  # an operator without an adapter: the float32 fallback covers it


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`; a :class:`FrontendError` listing them
    otherwise."""
    if precision not in PRECISIONS:
        raise FrontendError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    return precision


def lower_precision(model: Any, precision: str) -> Any:
    """A copy of ONNX ``model`` (a ``ModelProto``) whose float32 computation runs in
    ``precision`` (see the module doc); ``model`` itself for ``"float32"`` and ``"tf32"``. Raises
    :class:`FrontendError` for a model with control flow (``If``, ``Loop``, ``Scan``), which is not
    rewritten yet."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    check_precision(precision)
    if precision in ("float32", "tf32"):
        return model
    low = TensorProto.FLOAT16 if precision == "float16" else TensorProto.BFLOAT16
    limit = 65504.0 if precision == "float16" else 3.38e38
    m = onnx.ModelProto()
    m.CopyFrom(model if precision == "float16" else _for_bfloat16(model))
    g = m.graph
    version = default_opset(m)
    low_str = "tensor(float16)" if precision == "float16" else "tensor(bfloat16)"
    for node in g.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise FrontendError(f"precision={precision!r}: node {node.name or node.op_type} ({node.op_type}) has a "
                                "subgraph; models with control flow compile in float32 only for now")
    try:
        typed = onnx.shape_inference.infer_shapes(m)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as err:
        raise FrontendError(f"precision={precision!r}: ONNX shape inference failed on the model: {err}") from err
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(typed.graph.value_info) + list(typed.graph.input) + list(typed.graph.output)}
    for init in g.initializer:
        types[init.name] = init.data_type
    is_float = {n for n, t in types.items() if t == TensorProto.FLOAT}

    def low_tensor(t: Any) -> Any:
        a = np.clip(numpy_helper.to_array(t).astype(np.float64), -limit, limit).astype(np.float32)
        if precision == "float16":
            return numpy_helper.from_array(a.astype(np.float16), t.name)
        return helper.make_tensor(t.name, TensorProto.BFLOAT16, a.shape, a.reshape(-1).tolist())

    for i, init in enumerate(g.initializer):
        if init.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(low_tensor(init))
    nodes: list[Any] = []
    rename: dict[str, str] = {}
    for inp in g.input:
        if inp.name in is_float and inp.type.tensor_type.elem_type == TensorProto.FLOAT:
            rename[inp.name] = inp.name + "__lp"
            nodes.append(helper.make_node("Cast", [inp.name], [inp.name + "__lp"], to=low,
                                          name=inp.name + "__to_low"))
    outputs = {o.name for o in g.output if o.type.tensor_type.elem_type == TensorProto.FLOAT}
    tail: list[Any] = []
    for k, node in enumerate(g.node):
        ins = [rename.get(x, x) for x in node.input]
        outs = [o + "__lp" if o in outputs else o for o in node.output]
        for o in node.output:
            if o in outputs:
                rename[o] = o + "__lp"
                tail.append(helper.make_node("Cast", [o + "__lp"], [o], to=TensorProto.FLOAT, name=o + "__to_f32"))
        new = onnx.NodeProto()
        new.CopyFrom(node)
        for att in new.attribute:
            if att.type == onnx.AttributeProto.TENSOR and att.t.data_type == TensorProto.FLOAT:
                att.t.CopyFrom(low_tensor(att.t))
            if att.name in ("to", "dtype") and att.type == onnx.AttributeProto.INT and att.i == TensorProto.FLOAT:
                att.i = low
        untyped = node.domain in ("", "ai.onnx") and not _takes(node.op_type, version, low_str)
        if node.op_type in KEEP_FLOAT32 or untyped:  # computed in float32 between casts
            up = []
            for j, x in enumerate(ins):
                if x and node.input[j] in is_float:
                    name = f"{x}__f32_{k}_{j}"
                    nodes.append(helper.make_node("Cast", [x], [name], to=TensorProto.FLOAT, name=name))
                    x = name
                up.append(x)
            ins = up
            down = []
            for j, o in enumerate(outs):
                if o and node.output[j] in is_float:
                    wide = f"{o}__f32"
                    tail_cast = helper.make_node("Cast", [wide], [o], to=low, name=f"{o}__to_low")
                    down.append((wide, tail_cast))
                    outs[j] = wide
            del new.input[:]
            new.input.extend(ins)
            del new.output[:]
            new.output.extend(outs)
            nodes.append(new)
            nodes.extend(c for _, c in down)
            continue
        del new.input[:]
        new.input.extend(ins)
        del new.output[:]
        new.output.extend(outs)
        nodes.append(new)
    del g.node[:]
    g.node.extend(nodes + tail)
    del g.value_info[:]
    return m
