"""Groups compiled to a hand-built kernel instead of a scheduled te program.

A fused group that is exactly a matrix product of an activation with a constant weight, plus a
constant bias (ONNX ``MatMul`` then ``Add``, as exported ``nn.Linear`` layers are, or a plain
``Gemm`` with ``transB`` 0 or 1), optionally followed by ``Relu``, runs on sm_90 as the
warp-specialised TMA ``wgmma`` GEMM (:func:`ember.strategy.tensorcore.wgmma_matmul`, bias and
ReLU in its epilogue) when its inputs are float16 or bfloat16 and the kernel applies
(:func:`~ember.strategy.tensorcore.wgmma_applies`), or float32 in a model compiled with
``precision="tf32"`` (TF32 tensor cores). Every other group, and every other target, keeps the strategy's schedules.

:func:`direct_kernel` is asked by :func:`ember.model.group_lowering.lower_groups` for each group;
it returns the lowered function and the step's argument names, or None.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..graph.ir import Graph, TensorInfo
from ..graph.passes import Group
from ..target import Target

#: input types the wgmma kernel multiplies in a model (float32 stays exact: no TF32 unless asked)
DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class LinearGroup:
    """A group computing ``out = relu?(a @ w + bias)``: value names and sizes (``a`` is ``M x K``
    after flattening its leading dimensions, ``w`` a constant ``K x N`` — ``N x K`` with
    ``w_transposed`` — and ``bias`` a constant ``N``)."""

    a: str
    w: str
    bias: str
    out: str
    relu: bool
    M: int
    N: int
    K: int
    dtype: str
    w_transposed: bool = False


def _product(gr: Group) -> tuple[str, str, str, bool, int] | None:
    """(activation, weight, bias, weight given N x K, nodes used) of a group that starts with
    ``MatMul`` + ``Add`` or with a plain ``Gemm`` (alpha = beta = 1, A not transposed), or None."""
    first = gr.nodes[0]
    if first.op == "Gemm" and len(first.inputs) == 3 and all(first.inputs):
        at = first.attrs
        if at.get("alpha", 1.0) != 1.0 or at.get("beta", 1.0) != 1.0 or at.get("transA", 0):
            return None
        return first.inputs[0], first.inputs[1], first.inputs[2], bool(at.get("transB", 0)), 1
    if first.op != "MatMul" or len(gr.nodes) < 2 or len(first.inputs) != 2:
        return None
    add = gr.nodes[1]
    if add.op != "Add" or len(add.inputs) != 2 or first.outputs[0] not in add.inputs:
        return None
    bias = add.inputs[1] if add.inputs[0] == first.outputs[0] else add.inputs[0]
    return first.inputs[0], first.inputs[1], bias, False, 2


def match_linear(gr: Group, graph: Graph, dtypes: tuple[str, ...] = DTYPES) -> LinearGroup | None:
    """The :class:`LinearGroup` that ``gr`` is, or None (any other shape of group, a non-constant
    weight or bias, a batched weight, a type not in ``dtypes``, symbolic sizes)."""
    if len(gr.outputs) != 1 or not gr.nodes:
        return None
    found = _product(gr)
    if found is None:
        return None
    a, w, bias, w_t, used = found
    rest = gr.nodes[used:]
    if len(rest) > 1 or (rest and (rest[0].op != "Relu" or rest[0].inputs != [gr.nodes[used - 1].outputs[0]])):
        return None
    last = gr.nodes[-1]
    if gr.outputs[0] != last.outputs[0] or a in graph.consts or w not in graph.consts or bias not in graph.consts:
        return None
    va, vw, vb, vo = (graph.values.get(x) for x in (a, w, bias, gr.outputs[0]))
    if va is None or vw is None or vb is None or vo is None:
        return None
    if len({va.dtype, vw.dtype, vb.dtype, vo.dtype}) != 1 or va.dtype not in dtypes:
        return None
    if not all(isinstance(d, int) for d in (*va.shape, *vw.shape, *vb.shape, *vo.shape)):
        return None  # symbolic sizes keep the scheduled kernel
    if len(vw.shape) != 2 or len(va.shape) < 2 or (used == 1 and len(va.shape) != 2):
        return None
    N, K = vw.shape if w_t else vw.shape[::-1]
    if va.shape[-1] != K or tuple(vb.shape) != (N,) or tuple(vo.shape) != (*va.shape[:-1], N):
        return None  # (a Gemm's bias broadcast from a scalar or a column keeps the scheduled kernel)
    M = int(np.prod(va.shape[:-1]))
    return LinearGroup(a, w, bias, gr.outputs[0], bool(rest), M, N, K, va.dtype, w_t)


def direct_kernel(gr: Group, graph: Graph, target: Target, name: str,
                  tf32: bool = False) -> tuple[Any, list[str]] | None:
    """The lowered function ``name`` and its step arguments for group ``gr`` on ``target`` when
    the group has a hand-built kernel there (module doc), else None. With ``tf32`` (the model's
    ``precision="tf32"``) float32 layers run on TF32 tensor cores too: wgmma reads a TF32 weight
    only as ``N x K``, so a ``K x N`` weight is transposed once, now, into a new constant
    (``name__wT``) that the kernel reads instead."""
    if target.kind != "cuda" or target.mcpu not in ("sm_90", "sm_90a"):
        return None
    lin = match_linear(gr, graph, DTYPES + (("float32",) if tf32 else ()))
    if lin is None:
        return None
    from ..strategy.tensorcore import model_wgmma_tile, target_sm_count, wgmma_applies, wgmma_matmul

    transpose = lin.dtype == "float32" and not lin.w_transposed
    if wgmma_applies(lin.M, lin.N, lin.K, lin.dtype, lin.w_transposed or transpose, target) is not None:
        return None
    if transpose:
        wt = f"{name}__wT"
        value = np.ascontiguousarray(np.asarray(graph.consts[lin.w]).T)
        graph.consts[wt] = value
        graph.values[wt] = TensorInfo(value.shape, str(value.dtype))
        lin = replace(lin, w=wt, w_transposed=True)
    tile = model_wgmma_tile(lin.M, lin.N, lin.K, target_sm_count(target))
    func = wgmma_matmul(lin.M, lin.N, lin.K, lin.dtype, lin.dtype, tile, lin.w_transposed, target, name,
                        bias=True, relu=lin.relu)
    return func, [lin.a, lin.w, lin.bias, lin.out]
