"""Fast CPU schedules for convolutions and matrix products.

A packed convolution (``tag == "conv_packed"``, built by :func:`ember.ops.nn.conv_tensor`) is a
GEMM ``[M, N] = W[M, K] @ im2col[K, N]`` whose right operand is already packed into ``nr``-wide
panels. It gets the schedule of :func:`ember.demo.gemm_schedule`: an ``mr x nr`` register tile
accumulated in a local cache, the reduction in the innermost-but-two loop, the tile rows
unrolled and the panel width vectorized, parallel over row blocks; the packing stage is
parallel over panels and vectorized across the panel width.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..ir import expr as E
from ..target import Target

# Below these sizes a parallel region costs more than it saves (and far more on a loaded machine).
PARALLEL_MIN_ELEMS = 1 << 16
PARALLEL_MIN_MACS = 1 << 22


def _ext(iv: te.IterVar) -> int:
    v = E.const_int_value(iv.dom.extent)  # type: ignore[union-attr]
    return int(v) if v is not None else 1


def schedule_fast(s: te.Schedule, stage: te.Stage, handled: set[int] | None = None) -> bool:
    """Give ``stage`` a specialised schedule when one applies; returns True when it did. Stages
    that the schedule also placed (a depthwise convolution's epilogue) are added to ``handled``
    (operation ids) and must not be scheduled again."""
    op = stage.op
    tag = getattr(op, "tag", "")
    if tag == "conv_dw" and stage.attach == "root":
        done = _schedule_depthwise(s, stage)
        if handled is not None:
            handled.add(id(done.op))
        return True
    if tag == "conv_packed":
        _schedule_conv_packed(s, stage)
        return True
    if getattr(op, "name", "").startswith("mm_pack") and tag == "keep":
        no, k, ni = op.axis
        s[op].vectorize(ni)
        if _ext(no) * _ext(k) * _ext(ni) >= PARALLEL_MIN_ELEMS:
            s[op].parallel(no)
        return True
    if getattr(op, "name", "").startswith("conv_pack") and tag == "keep":
        b, no, c, r, q, ni = op.axis
        s[op].vectorize(ni)
        fused = s[op].fuse(b, no)
        if int(np.prod([_ext(a) for a in op.axis])) >= PARALLEL_MIN_ELEMS:
            s[op].parallel(fused)
        return True
    return False


def _schedule_conv_packed(s: te.Schedule, stage: te.Stage) -> None:
    op = stage.op
    nr = int(op.attrs["nr"])
    lanes = Target("llvm").vector_lanes(32)
    M = _ext(op.axis[1])
    cands = (8, 6, 4, 5, 3, 2) if lanes >= 16 else (4, 6, 3, 2)
    mr = next((c for c in cands if M % c == 0), cands[0])
    t = op.output(0)
    cc = s.cache_write(t, "local")
    st = s[t]
    b, m, n = st.op.axis
    mo, no, mi, ni = st.tile(m, n, mr, nr)
    # The larger operand goes outermost, so it streams from memory once while the smaller one
    # stays in cache: panels outermost for large images, weight rows outermost for late layers.
    K = int(op.attrs["K"])
    w_bytes, b_bytes = M * K * 4, _ext(n) * K * 4
    weights_outer = w_bytes > b_bytes
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
    taps = max(1, int(np.prod([_ext(r) for r in taps_axes])) if taps_axes else 1)
    C = _ext(rc)
    if C * taps <= 512:
        s[cc].reorder(rc, *taps_axes, cm, cn)
    else:
        kc = max(d for d in range(1, C + 1) if C % d == 0 and d * taps <= 256) if taps <= 256 else 1
        ko, ki = s[cc].split(rc, factor=kc)
        s[cc].reorder(ko, ki, *taps_axes, cm, cn)
    s[cc].unroll(cm)
    s[cc].vectorize(cn)
    fused = st.fuse(b, mo) if weights_outer else st.fuse(b, no)
    if M * _ext(n) * K >= PARALLEL_MIN_MACS:
        st.parallel(fused)


def _schedule_depthwise(s: te.Schedule, stage: te.Stage) -> te.Stage:
    """A depthwise convolution (:mod:`ember.ops.depthwise`) vectorized along the output row: for
    each (image, channel) pair in parallel and each output row, a vector of ``f`` outputs is
    accumulated in registers over the kernel taps, then the epilogue (bias, activation: the single
    elementwise consumer of the same shape, when there is one) is applied and stored. ``f`` is
    the whole row when it is at most two vectors long (7, 14, 28, 56 on AVX-512), else one vector.
    Returns the stage that holds the loops (the epilogue, or the convolution's own output copy)."""
    op = stage.op
    t = op.output(0)
    shp = tuple(_ext(a) for a in op.axis)
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
            and tuple(_ext(a) for a in cop.axis) == shp
        ):
            out = c
    if out is None:
        conv_t = s.cache_write(t, "local")
        out, conv = s[t], s[conv_t]
    else:
        conv = stage
        conv.set_scope("local")
    lanes = Target("llvm").vector_lanes(32)
    n, m, oh, ow = out.op.axis
    OW = shp[3]
    f = OW if OW <= 2 * lanes else lanes
    owo, owi = out.split(ow, factor=f)
    fused = out.fuse(n, m)
    out.vectorize(owi)
    taps = int(np.prod([_ext(r) for r in op.reduce_axis]))
    if int(np.prod(shp)) * taps >= PARALLEL_MIN_MACS // 8:
        out.parallel(fused)
    conv.compute_at(out, owo)
    cn, cm, coh, cow = conv.op.axis
    rr, rq = conv.op.reduce_axis
    conv.reorder(cn, cm, coh, rr, rq, cow)
    conv.vectorize(cow)
    return out
