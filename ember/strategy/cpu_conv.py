"""CPU convolution schedules: the packed convolution GEMM with its epilogue in the store.

A 2-D convolution built by :func:`ember.ops.nn.conv_tensor` on the CPU is an im2col panel pack
(``tag == "gemm_pack"``), a packed GEMM ``C[b, m, n]`` over whole panels (``tag ==
"conv_packed"``, ``attrs["conv_out"] = (OH, OW)``) and an NCHW view of its first ``OH * OW``
columns, into which the fusion pass inlines the convolution's consumers (bias, batch-norm,
residual add, activation, clip). :func:`schedule_conv_gemm` schedules the GEMM *inside* the
stage that stores that view: the output's spatial axes are fused into one column axis and tiled
``mr x nr`` like the GEMM; at each tile the GEMM accumulates an ``mr x nr`` register block
(scope ``local``) and the epilogue reads it, so the product never goes through memory and the
activation costs no extra pass over the output. Its knobs are those of the packed GEMM
(:func:`ember.strategy.cpu_gemm.packed_gemm_space`: the tuner sees the same space), and the
default point is the same heuristic.

When the view is read by more than one stored stage (a convolution whose raw output is also an
output of the fused kernel), the GEMM is scheduled on its own as before
(:func:`~ember.strategy.cpu_gemm.schedule_packed_gemm`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import te
from .base import extent
from .cpu_gemm import schedule_packed_gemm
from .space import ConfigEntity

if TYPE_CHECKING:
    from .cpu import CPUStrategy

#: The attribute that marks a convolution's packed GEMM whose NCHW view the schedule may fuse:
#: the output's spatial extents ``(OH, OW)``.
CONV_OUT_ATTR = "conv_out"


def is_fusable_conv_gemm(op: te.ComputeOp) -> bool:
    """True for a convolution's packed GEMM (:func:`ember.ops.nn.conv_tensor`) that
    :func:`schedule_conv_gemm` computes in registers inside its consumer's store."""
    return getattr(op, "tag", "") == "conv_packed" and bool(op.attrs) and CONV_OUT_ATTR in op.attrs


def _stored_readers(s: te.Schedule, stage: te.Stage) -> list[te.Stage]:
    """The stages that are not inlined and read ``stage`` (directly or through inlined stages)."""
    found: list[te.Stage] = []
    todo = list(s.consumers(stage))
    seen: set[int] = set()
    while todo:
        c = todo.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        if c.attach == "inline":
            todo.extend(s.consumers(c))
        else:
            found.append(c)
    return found


def schedule_conv_gemm(
    s: te.Schedule,
    stage: te.Stage,
    strategy: CPUStrategy,
    cfg: ConfigEntity,
    handled: set[int] | None = None,
) -> None:
    """Schedule the convolution GEMM ``stage`` (:func:`is_fusable_conv_gemm`) at point ``cfg``
    of :func:`~ember.strategy.cpu_gemm.packed_gemm_space` (validated by the caller): inside the
    one stored stage that reads it when there is exactly one and it is a 4-D non-reduction stage
    of the convolution's output shape — that stage's id then goes into ``handled`` and must not
    be scheduled again — else as a standalone packed GEMM."""
    op = stage.op
    readers = _stored_readers(s, stage)
    oh_ext, ow_ext = (int(v) for v in op.attrs[CONV_OUT_ATTR])
    bext, mext = extent(op.axis[0]), extent(op.axis[1])
    out = readers[0] if len(readers) == 1 else None
    if out is not None:
        oop = out.op
        ok = (
            isinstance(oop, te.ComputeOp)
            and not oop.is_reduction
            and out.attach == "root"
            and [extent(a) for a in oop.axis] == [bext, mext, oh_ext, ow_ext]
        )
        out = out if ok else None
    if out is None:
        schedule_packed_gemm(s, stage, cfg)
        return
    nr = int(op.attrs["nr"])
    mr = int(cfg["mr"].val)
    stage.set_scope("local")
    b, m, oh, ow = out.op.axis
    col = out.fuse(oh, ow)
    mo, no, mi, ni = out.tile(m, col, mr, nr)
    weights_outer = cfg["order"].val == "weights_outer"
    if weights_outer:
        out.reorder(b, mo, no, mi, ni)
        stage.compute_at(out, no)
    else:
        out.reorder(b, no, mo, mi, ni)
        stage.compute_at(out, mo)
    out.vectorize(ni)
    cb, cm, cn = stage.op.axis
    red = list(stage.op.reduce_axis)
    rc, taps_axes = red[0], red[1:]
    chunks, kc = cfg["tile_k"].size
    if chunks == 1:
        stage.reorder(rc, *taps_axes, cm, cn)
    else:
        ko, ki = stage.split(rc, factor=kc)
        stage.reorder(ko, ki, *taps_axes, cm, cn)
    if cfg["unroll_m"].val:
        stage.unroll(cm)
    stage.vectorize(cn)
    fused = out.fuse(b, mo) if weights_outer else out.fuse(b, no)
    if cfg["parallel"].val:
        out.parallel(fused)
    if handled is not None:
        handled.add(id(out.op))
