"""Fast CPU schedules for convolutions and matrix products (templates of the CPU strategy).

A packed GEMM stage (``tag == "conv_packed"``, built by :func:`ember.ops.nn.conv_tensor` and
:func:`ember.ops.nn.matmul_tensor`) computes ``[B, M, N] = W[M, K] @ P[K, N]`` whose right
operand ``P`` is already packed into ``nr``-wide column panels (``op.attrs["nr"]``, the
strategy's :meth:`~ember.strategy.cpu.CPUStrategy.gemm_panel_width`). Its template
(:func:`packed_gemm_space`, :func:`schedule_packed_gemm`) is the schedule of
:func:`ember.demo.gemm_schedule`: an ``mr x nr`` register tile accumulated in a local cache, the
reduction in the innermost-but-two loop (blocked when it is long), the tile rows unrolled and the
panel width vectorized, parallel over the outer blocks. Its knobs:

* ``mr`` — register-tile rows; legal when the ``mr x nr`` accumulators and the loaded panel
  row fit in the target's vector registers;
* ``order`` — ``"weights_outer"`` (weight rows outermost: late layers, small images) or
  ``"panels_outer"`` (panels outermost: large images);
* ``tile_k`` — the split of the first reduction axis into (chunks, chunk); ``size[0] == 1``
  leaves it unsplit;
* ``unroll_m`` — unroll the tile rows;
* ``parallel`` — run the outer blocks in parallel.

The default point is the heuristic: the largest of a few ``mr`` that divides ``M``, the larger
operand outermost, chunks of at most 256 multiply-adds when the reduction has more than 512,
parallel above ``PARALLEL_MIN_MACS``.

The packing stage (``tag == "gemm_pack"``) is parallel over panels and vectorized across the
panel width; a depthwise convolution (``tag == "conv_dw"``) is vectorized along the output row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import te
from .base import extent
from .space import ConfigEntity, ConfigSpace

if TYPE_CHECKING:
    from .cpu import CPUStrategy

# Below these sizes a parallel region costs more than it saves (and far more on a loaded machine).
PARALLEL_MIN_ELEMS = 1 << 16
PARALLEL_MIN_MACS = 1 << 22
# Register-tile rows the space offers, and the heuristic's preference order (wide and narrow
# vector units).
MR_VALUES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14)
MR_PREFERRED_WIDE = (8, 6, 4, 5, 3, 2)
MR_PREFERRED_NARROW = (4, 6, 3, 2)
# A reduction longer than this (multiply-adds per output) is blocked into chunks of at most
# KC_MAX_TAPS.
KC_SPLIT_ABOVE = 512
KC_MAX_TAPS = 256


def schedule_fast(
    s: te.Schedule,
    stage: te.Stage,
    strategy: CPUStrategy,
    handled: set[int] | None = None,
    config: ConfigEntity | None = None,
) -> bool:
    """Give ``stage`` a specialised schedule for ``strategy``'s target when one applies; returns
    True when it did. Stages that the schedule also placed (a depthwise convolution's epilogue)
    are added to ``handled`` (operation ids) and must not be scheduled again. ``config`` is a
    point of the packed GEMM's space (:func:`packed_gemm_space`); None is its default."""
    op = stage.op
    tag = getattr(op, "tag", "")
    if tag == "conv_dw" and stage.attach == "root":
        done = _schedule_depthwise(s, stage, strategy)
        if handled is not None:
            handled.add(id(done.op))
        return True
    if tag == "conv_packed":
        space = packed_gemm_space(op, strategy)
        cfg = space.default if config is None else space.validate(config)
        schedule_packed_gemm(s, stage, cfg)
        return True
    if tag == "gemm_pack":
        _schedule_pack(s, stage)
        return True
    return False


def _schedule_pack(s: te.Schedule, stage: te.Stage) -> None:
    """A panel-packing stage: axes ``(..., panel, ..., ni)`` with ``op.attrs["panel_axis"]`` the
    index of the panel axis and the panel width last. Vectorized across the panel width, parallel
    over the fused axes up to the panel axis when there is enough to copy."""
    op = stage.op
    axes = list(op.axis)
    st = s[op]
    st.vectorize(axes[-1])
    lead = axes[: int(op.attrs.get("panel_axis", 0)) + 1]
    fused = st.fuse(*lead) if len(lead) > 1 else lead[0]
    if int(np.prod([extent(a) for a in axes])) >= PARALLEL_MIN_ELEMS:
        st.parallel(fused)


def _gemm_dims(op: te.ComputeOp, literal: bool = False) -> tuple[int, int, int, int, int]:
    """(M, N, K, C, taps) of a packed GEMM: output rows and columns, reduction length, extent of
    the first reduction axis and the product of the others (``literal``: see
    :func:`~ember.strategy.base.extent`)."""
    M, N = extent(op.axis[1], literal), extent(op.axis[2], literal)
    red = list(op.reduce_axis)
    taps = max(1, int(np.prod([extent(r, literal) for r in red[1:]])) if red[1:] else 1)
    return M, N, int(op.attrs["K"]), extent(red[0], literal), taps


def packed_gemm_space(op: te.ComputeOp, strategy: CPUStrategy) -> ConfigSpace:
    """The knob space of packed GEMM ``op`` on ``strategy``'s CPU (see the module docstring);
    its default point is today's heuristic schedule."""
    nr = int(op.attrs["nr"])
    lanes = strategy.target.vector_lanes(32)
    nregs = strategy.vector_registers
    M, N, K, C, taps = _gemm_dims(op)
    space = ConfigSpace()
    cands = MR_PREFERRED_WIDE if lanes >= 16 else MR_PREFERRED_NARROW
    mr = next((c for c in cands if M % c == 0), cands[0])
    space.define_knob("mr", MR_VALUES, default=mr)
    order = "weights_outer" if M * K * 4 > N * K * 4 else "panels_outer"
    space.define_knob("order", ("panels_outer", "weights_outer"), default=order)
    # The heuristic reads the reduction extents literally (see extent()): the operators write
    # them as (0, C) ranges, so it blocks only reductions whose extents are literals.
    _, _, _, c_lit, taps_lit = _gemm_dims(op, literal=True)
    if c_lit * taps_lit <= KC_SPLIT_ABOVE:
        kc = C
    elif taps_lit <= KC_MAX_TAPS:  # c_lit is C or 1, so kc divides C
        kc = max(d for d in range(1, c_lit + 1) if c_lit % d == 0 and d * taps_lit <= KC_MAX_TAPS)
    else:
        kc = 1
    space.define_split("tile_k", C, num_outputs=2, policy="factors", default=(C // kc, kc))
    space.define_knob("unroll_m", (True, False), default=True)
    space.define_knob("parallel", (True, False), default=M * N * K >= PARALLEL_MIN_MACS)
    vecs_per_row = -(-nr // lanes)

    def registers(cfg: ConfigEntity) -> str | None:
        need = cfg["mr"].val * vecs_per_row + vecs_per_row + 1
        if need > nregs:
            return f"an {cfg['mr'].val} x {nr} register tile needs {need} vector registers, the target has {nregs}"
        return None

    space.add_check(registers)
    return space


def schedule_packed_gemm(s: te.Schedule, stage: te.Stage, cfg: ConfigEntity) -> None:
    """Schedule packed GEMM ``stage`` at point ``cfg`` of :func:`packed_gemm_space` (assumed
    legal: validate it first)."""
    op = stage.op
    nr = int(op.attrs["nr"])
    mr = int(cfg["mr"].val)
    t = op.output(0)
    cc = s.cache_write(t, "local")
    st = s[t]
    b, m, n = st.op.axis
    mo, no, mi, ni = st.tile(m, n, mr, nr)
    # The larger operand goes outermost, so it streams from memory once while the smaller one
    # stays in cache: panels outermost for large images, weight rows outermost for late layers.
    weights_outer = cfg["order"].val == "weights_outer"
    if weights_outer:
        st.reorder(b, mo, no, mi, ni)
        s[cc].compute_at(st, no)
    else:
        st.reorder(b, no, mo, mi, ni)
        s[cc].compute_at(st, mo)
    st.vectorize(ni)
    cb, cm, cn = s[cc].op.axis
    red = list(s[cc].op.reduce_axis)
    rc, taps_axes = red[0], red[1:]
    chunks, kc = cfg["tile_k"].size
    if chunks == 1:
        s[cc].reorder(rc, *taps_axes, cm, cn)
    else:
        ko, ki = s[cc].split(rc, factor=kc)
        s[cc].reorder(ko, ki, *taps_axes, cm, cn)
    if cfg["unroll_m"].val:
        s[cc].unroll(cm)
    s[cc].vectorize(cn)
    fused = st.fuse(b, mo) if weights_outer else st.fuse(b, no)
    if cfg["parallel"].val:
        st.parallel(fused)


def _schedule_depthwise(s: te.Schedule, stage: te.Stage, strategy: CPUStrategy) -> te.Stage:
    """A depthwise convolution (:mod:`ember.ops.depthwise`) vectorized along the output row: for
    each (image, channel) pair in parallel and each output row, a vector of ``f`` outputs is
    accumulated in registers over the kernel taps, then the epilogue (bias, activation: the single
    elementwise consumer of the same shape, when there is one) is applied and stored. ``f`` is
    the whole row when it is at most two vectors long (7, 14, 28, 56 on AVX-512), else one vector.
    Returns the stage that holds the loops (the epilogue, or the convolution's own output copy)."""
    op = stage.op
    t = op.output(0)
    shp = tuple(extent(a) for a in op.axis)
    consumers = s.consumers(stage)
    # look through inlined elementwise stages (a bias add) to the stage that stores
    while len(consumers) == 1 and consumers[0].attach == "inline":
        consumers = s.consumers(consumers[0])
    out = None
    if len(consumers) == 1:
        c = consumers[0]
        cop = c.op
        if (
            c.attach == "root"
            and isinstance(cop, te.ComputeOp)
            and not cop.is_reduction
            and tuple(extent(a) for a in cop.axis) == shp
        ):
            out = c
    if out is None:
        conv_t = s.cache_write(t, "local")
        out, conv = s[t], s[conv_t]
    else:
        conv = stage
        conv.set_scope("local")
    lanes = strategy.target.vector_lanes(32)
    n, m, oh, ow = out.op.axis
    OW = shp[3]
    f = OW if OW <= 2 * lanes else lanes
    owo, owi = out.split(ow, factor=f)
    fused = out.fuse(n, m)
    out.vectorize(owi)
    taps = int(np.prod([extent(r, literal=True) for r in op.reduce_axis]))
    if int(np.prod(shp)) * taps >= PARALLEL_MIN_MACS // 8:
        out.parallel(fused)
    conv.compute_at(out, owo)
    cn, cm, coh, cow = conv.op.axis
    rr, rq = conv.op.reduce_axis
    conv.reorder(cn, cm, coh, rr, rq, cow)
    conv.vectorize(cow)
    return out
