"""Data layouts at the graph level: the layout types, and which graph operators can run in any
layout.

The value types (:class:`Layout`, :class:`ValueLayout`) and the policy protocol
(:class:`LayoutPolicy` with :class:`LayoutSite` and :class:`NodeLayouts`) are defined in
:mod:`ember.ops.layout_transform`, next to the ``ember.LayoutTransform`` operator whose compute
definition needs them and below :mod:`ember.strategy`, whose strategies implement the protocol;
this module re-exports them for graph code.

What it adds is the graph's knowledge of *layout-agnostic* operators, which
:class:`~ember.graph.alter_layout.AlterLayout` runs in a blocked layout when an input arrives in
one:

* :data:`LAYOUT_AGNOSTIC` — the elementwise operators (unary math and activations, binary and
  variadic arithmetic, comparisons and logic, ``Clip``, ``Cast``, ``PRelu``, ``Where``, and
  ONNX Runtime's ``QLinearAdd``, whose scales and zero points are scalars);
* :func:`operand_role` — whether a further operand of such a node stays valid in the blocked
  layout (exactly: its shape equals the output's, or it is a scalar, or it broadcasts only along
  axes the layout does not split);
* :func:`keeps_zero_padding` — whether the node maps the zero padding of its blocked operands to
  zero again (decided by evaluating the node's own te program on the padding values).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from .. import te
from ..errors import EvaluationError
from ..ops.layout_transform import (
    LAYOUT_TRANSFORM,
    Layout,
    LayoutPolicy,
    LayoutSite,
    NodeLayouts,
    SiteValue,
    ValueLayout,
    transform_layout,
)
from ..ops.util import uname
from .ir import Node

__all__ = [
    "LAYOUT_AGNOSTIC",
    "LAYOUT_TRANSFORM",
    "Layout",
    "LayoutPolicy",
    "LayoutSite",
    "NodeLayouts",
    "OperandRole",
    "SiteValue",
    "ValueLayout",
    "keeps_zero_padding",
    "operand_role",
    "transform_layout",
]

_UNARY = (
    "Abs Acos Acosh Asin Asinh Atan Atanh Ceil Cos Cosh Erf Exp Floor IsNaN Log Mish Neg Not Reciprocal "
    "Relu Round Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Tan Tanh IsInf Cast Identity LeakyRelu Elu Celu "
    "Selu ThresholdedRelu HardSigmoid HardSwish Shrink Swish Gelu Clip"
)
_NARY = (
    "Add Sub Mul Div Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Sum Mean Max Min PRelu Where "
    "com.microsoft.QLinearAdd"
)

#: Operators computing each output element from the elements at the same position of their
#: (broadcast) inputs: they run unchanged on tensors stored in any layout, provided every operand
#: is stored in that layout or broadcasts validly (:func:`operand_role`).
LAYOUT_AGNOSTIC: frozenset[str] = frozenset(_UNARY.split()) | frozenset(_NARY.split())

#: How a further operand of a layout-agnostic node takes part when the node runs in a layout:
#: ``"layout"`` — converted into the layout (a LayoutTransform); ``"scalar"`` — read as it is
#: (every dimension 1: it broadcasts against the stored tensor whatever its layout).
OperandRole = Literal["layout", "scalar"]


def operand_role(shape: Sequence[int], out_shape: Sequence[int], vl: ValueLayout) -> OperandRole | None:
    """How an operand of ``shape`` of a layout-agnostic node whose output has ``out_shape`` runs
    in ``vl.layout`` (``out_shape`` in ``vl.plain``): ``"layout"`` when its shape is
    ``out_shape``, or has the same rank and is 1 only along axes ``vl.layout`` does not split
    (converted, it broadcasts against the stored output exactly as before — a dimension 1 along a
    split axis would become a padded block of one value and zeros, which does not broadcast);
    ``"scalar"`` when every dimension is 1 and its rank is at most the output's; None when
    neither holds (the node cannot run in the layout)."""
    s, o = tuple(shape), tuple(out_shape)
    if len(s) <= len(o) and all(d == 1 for d in s):
        return "scalar"
    if len(s) != len(o):
        return None
    split = vl.layout.splits
    for a, (ds, do) in zip(vl.plain.primal, zip(s, o)):
        if ds != do and not (ds == 1 and a not in split):
            return None
    return "layout"


def keeps_zero_padding(
    node: Node,
    roles: Sequence[OperandRole | None],
    dtypes: Sequence[str],
    rank: int,
    scalars: dict[str, np.ndarray],
) -> bool:
    """True when ``node`` (a layout-agnostic operator) computes zero at every padding position of
    its blocked output: there each operand of role ``"layout"`` holds 0 and each ``"scalar"``
    operand its value, which must be a constant in ``scalars`` (a run-time scalar proves
    nothing: ``0 * inf`` is NaN). ``roles`` and ``dtypes`` give each input's role (None for an
    omitted input) and dtype; ``rank`` is the output's. Decided by evaluating the node's own te
    program with :func:`ember.te.evaluate` (NaN counts as non-zero); a program the evaluator
    cannot run counts as False."""
    from .passes import build_node

    tensors: dict[str, te.Tensor] = {}
    values: dict[te.Tensor, np.ndarray] = {}
    consts: dict[str, np.ndarray] = {}
    for name, role, dt in zip(node.inputs, roles, dtypes):
        if not name or name in tensors:
            continue
        if role == "scalar":
            if name not in scalars:
                return False
            v = np.asarray(scalars[name])
            consts[name] = v
        else:
            v = np.zeros((1,) * rank, dtype=dt)
        ph = te.placeholder(tuple(v.shape), str(v.dtype), name=uname("pad"))
        tensors[name] = ph
        values[ph] = v
    probe = Node(node.op, list(node.inputs), list(node.outputs), dict(node.attrs), node.name, node.opset)
    outs = build_node(probe, tensors, consts)
    try:
        results = te.evaluate([o for o in outs if not isinstance(o, np.ndarray)], values)
    except EvaluationError:
        return False
    results += [o for o in outs if isinstance(o, np.ndarray)]
    return all(bool(np.all(np.asarray(r) == 0)) for r in results)
