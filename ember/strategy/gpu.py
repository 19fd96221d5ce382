"""Schedules for the operator library on GPUs (``cuda`` and ``rocm``).

:func:`schedule_group_gpu` schedules one fused kernel of a model:

* injective intermediate stages are inlined into their readers (as on the CPU);
* every other stage is computed at the root, one output element per thread: its data-parallel
  axes are fused and split into ``blockIdx.x`` x ``threadIdx.x``; a reduction accumulates in a
  register (a ``local`` cache) and stores each result once;
* the packed GEMM stages (``tag == "conv_packed"``: convolutions and matrix products, built by
  :mod:`ember.ops.nn`) get a shared-memory tiled schedule: a ``64 x 64`` block tile, a ``4 x 4``
  register tile per thread (16 x 16 threads), the first reduction axis blocked (about 32 multiply-adds
  per chunk) so that both
  operands' tiles are staged through shared memory.

Guarantees: every root stage is bound to GPU threads (the GPU lowering rejects stages that are
not), block sizes stay within every target's limit (256 threads), and sizes that do not divide
the tiles are guarded by the lowering.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import te
from ..arith import simplify
from ..ir import expr as E
from ..te import ComputeOp, PlaceholderOp, Tensor
from ..te.rewrite import rewrite
from ..te.tensor import IterKind, IterVar, Range

THREADS = 256
# Packed GEMM tilings, largest first: (block tile BM x BN, thread tile TM x TN), always 16 x 16
# threads. The largest that still gives MIN_BLOCKS blocks is used (else the one with the most):
# a late ResNet layer (512 x 49 outputs) makes 8 blocks of 64 x 64 but 128 of 16 x 16, and a
# GPU has about that many multiprocessors (132 on the H100, 108 on the A100).
# A block's columns must cover whole panels of the packed operand (BN a multiple of its panel
# width nr), so that the panels a block stages have a constant count.
GEMM_TILES = ((64, 64, 4, 4), (32, 32, 2, 2), (16, 32, 1, 2), (16, 16, 1, 1))
MIN_BLOCKS = 128
BK_TAPS = 32


def _extent(iv: te.IterVar) -> int:
    v = E.const_int_value(simplify(iv.dom.extent))  # type: ignore[union-attr]
    return int(v) if v is not None else 1


def _threads_for(total: int) -> int:
    """Threads per block for ``total`` independent elements: 256, fewer (a multiple of 32) when
    there is not that much work."""
    return int(min(THREADS, max(32, -(-total // 32) * 32)))


def bind_flat(stage: te.Stage, axes: Sequence[te.IterVar]) -> te.IterVar:
    """Fuse ``axes`` and split them over ``blockIdx.x`` x ``threadIdx.x``; returns the thread axis.
    A stage with no axes (a scalar) gets an extent-1 axis to bind."""
    axes = list(axes)
    total = int(np.prod([_extent(a) for a in axes])) if axes else 1
    if not axes:
        raise ValueError("bind_flat needs at least one axis")
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    bx, tx = stage.split(fused, factor=_threads_for(total))
    stage.bind(bx, te.thread_axis("blockIdx.x"))
    stage.bind(tx, te.thread_axis("threadIdx.x"))
    return tx


def _schedule_root(s: te.Schedule, stage: te.Stage) -> None:
    op = stage.op
    assert isinstance(op, ComputeOp)
    if op.is_reduction:
        outs = [op.output(k) for k in range(op.num_outputs)]
        cache = s.cache_write(outs if len(outs) > 1 else outs[0], "local")
        first = cache[0] if isinstance(cache, list) else cache
        tx = bind_flat(stage, stage.op.axis)
        s[first].compute_at(stage, tx)
        return
    bind_flat(stage, op.axis)


def _schedule_packed_gemm(s: te.Schedule, stage: te.Stage) -> None:
    """``C[b, m, n] = sum W[m, r...] * P[b, n // nr, r..., n % nr]`` (see ``ops.nn``) as a tiled
    GEMM: operands staged through shared memory one reduction chunk at a time, a register tile
    of ``TM x TN`` outputs per thread."""
    op = stage.op
    t = op.output(0)
    readers = [t]
    inputs = list(dict.fromkeys(op.input_tensors))
    shared = [s.cache_read(x, "shared", readers) for x in inputs]
    cl = s.cache_write(t, "local")
    st = s[t]
    b, m, n = st.op.axis
    nb, nm, nn = (_extent(a) for a in (b, m, n))
    nr = int(op.attrs.get("nr", 1)) if op.attrs else 1
    tiles = [t for t in GEMM_TILES if t[1] % nr == 0] or [GEMM_TILES[0]]
    BM, BN, TM, TN = tiles[-1]
    for tile in tiles:
        if nb * -(-nm // tile[0]) * -(-nn // tile[1]) >= MIN_BLOCKS:
            BM, BN, TM, TN = tile
            break
    mo, no, mi, ni = st.tile(m, n, BM, BN)
    ty, ti = st.split(mi, nparts=BM // TM)
    tx, tj = st.split(ni, nparts=BN // TN)
    st.reorder(b, mo, no, ty, tx, ti, tj)
    bz = b
    st.bind(bz, te.thread_axis("blockIdx.z"))
    st.bind(mo, te.thread_axis("blockIdx.y"))
    st.bind(no, te.thread_axis("blockIdx.x"))
    st.bind(ty, te.thread_axis("threadIdx.y"))
    st.bind(tx, te.thread_axis("threadIdx.x"))
    st.unroll(ti)
    st.unroll(tj)
    s[cl].compute_at(st, tx)
    cb, cm, cn = s[cl].op.axis
    red = list(s[cl].op.reduce_axis)
    taps = int(np.prod([_extent(r) for r in red[1:]])) if len(red) > 1 else 1
    # Chunks of about BK_TAPS reduction steps; a divisor of the first reduction axis when one is
    # close, so that no chunk is partial.
    want = max(1, BK_TAPS // taps)
    c0 = _extent(red[0])
    divisors = [d for d in range(1, min(want, c0) + 1) if c0 % d == 0]
    bk = divisors[-1] if divisors and 2 * divisors[-1] >= want else min(want, c0)
    ko, ki = s[cl].split(red[0], factor=bk)
    s[cl].reorder(ko, ki, *red[1:], cm, cn)
    s[cl].unroll(cm)
    s[cl].unroll(cn)
    nthreads = (BM // TM) * (BN // TN)
    for sh in shared:
        s[sh].compute_at(s[cl], ko)
        axes = list(s[sh].op.axis)
        fused = s[sh].fuse(*axes) if len(axes) > 1 else axes[0]
        fo, fi = s[sh].split(fused, factor=nthreads)
        fy, fx = s[sh].split(fi, factor=BN // TN)
        s[sh].bind(fy, te.thread_axis("threadIdx.y"))
        s[sh].bind(fx, te.thread_axis("threadIdx.x"))


def lift_scalar_reductions(outs: Sequence[Tensor]) -> list[Tensor]:
    """Rewrite the program computing ``outs`` so that no intermediate reduction is a scalar:
    a 0-d reduction becomes a one-element vector (GPU stages need an axis to bind to threads),
    and its readers read element 0. Returns the (rebuilt) outputs; computes the same values."""
    out_ops = {id(o.op) for o in outs}

    def lift(op: te.Operation) -> tuple[IterVar, ...] | None:
        if isinstance(op, ComputeOp) and op.is_reduction and not op.axis and id(op) not in out_ops:
            return (IterVar(Range(E.const(0), E.const(1)), E.Var("ax0"), IterKind.DATA_PAR),)
        return None

    return rewrite(outs, lift)


def schedule_group_gpu(outs: Sequence[Tensor], keep: set[str]) -> te.Schedule:
    """The default GPU schedule of a fused kernel computing ``outs`` (see the module docstring)."""
    ops = list(dict.fromkeys(o.op for o in outs))
    s = te.create_schedule(ops)
    for stage in list(s.stages):
        op = stage.op
        if isinstance(op, PlaceholderOp) or stage.is_output:
            continue
        assert isinstance(op, ComputeOp)
        if not op.is_reduction and op.tag != "keep" and op.name not in keep:
            stage.compute_inline()
    for stage in list(s.stages):
        op = stage.op
        if isinstance(op, PlaceholderOp) or stage.attach != "root":
            continue
        if getattr(op, "tag", "") == "conv_packed":
            _schedule_packed_gemm(s, stage)
        else:
            _schedule_root(s, stage)
    return s
