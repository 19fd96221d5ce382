"""The CPU schedule of ``ember.FusedAttention`` (:mod:`ember.ops.fused_attention`): one kernel per
attention, a block of query rows of one head at a time.

The output's loops are ``(batch..., heads, row blocks | rows, values)``; the batch, heads and row
blocks are fused into one loop (run in parallel from :data:`PARALLEL_MIN_MACS` multiply-adds), and
each of its iterations computes, in buffers of that block only (``rows x keys`` floats, on the
stack when the sizes are constants):

1. the scores ``Q Kᵀ`` (scaled, plus the mask): register tiles of ``mr`` rows by one or two
   vectors of keys accumulate the whole head dimension (``Kᵀ``'s keys are contiguous), then are
   scaled, masked and stored once into the block's score buffer;
2. each row's maximum and, after the exponentials (vectorized, ember's inline ``exp``), each
   row's sum — both as vector partial results over the row (:mod:`ember.strategy.cpu_reduce`);
3. the product of the exponentials with ``V`` in register tiles of ``mr`` rows by one or two
   vectors of ``V``'s columns, divided by the row sum as it is stored into the output.

A block is the whole sequence of one head while its two buffers (scores and exponentials) fit in
:data:`BLOCK_BYTES` (L1), else the most rows that fit (a multiple of ``mr``). With symbolic
sizes the buffers come from the heap, once per block. Register tiles take two vectors of columns,
one or half of one, whichever divides the columns (:func:`tile_shape`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import te
from ..arith import simplify
from ..ir import expr as E
from ..ops.fused_attention import TAG_EXP, TAG_MAX, TAG_PV, TAG_QK, TAG_SCORES, TAG_SUM
from ..te import ComputeOp, IterVar
from ..te.tensor import IterKind
from .base import extent
from .cpu_reduce import row_reduction_lanes, split_row_reduction

if TYPE_CHECKING:
    from .cpu import CPUStrategy

#: The bytes a block's score and exponential buffers may take together (a core's L1 data cache).
BLOCK_BYTES = 32 * 1024
#: Multiply-adds (``Q Kᵀ`` and ``P V``) from which the blocks run in parallel: the matrix
#: products' threshold (:data:`ember.strategy.cpu_gemm.PARALLEL_MIN_MACS`). Below it the pool's
#: sleeping workers take longer to wake than the work takes (BERT-small's 262 K: 9.6 us serial,
#: a median of 66 us in parallel on the shared 2-core machine).
PARALLEL_MIN_MACS = 1 << 22


def _stages_by_tag(out: ComputeOp) -> dict[str, ComputeOp]:
    from ..te.rewrite import post_order

    tags = (TAG_QK, TAG_SCORES, TAG_MAX, TAG_EXP, TAG_SUM, TAG_PV)
    return {op.tag: op for op in post_order([out]) if isinstance(op, ComputeOp) and op.tag in tags}


def tile_shape(cols: int, lanes: int, registers: int, constant: bool = True) -> tuple[int, int]:
    """``(mr, nb)``: register-tile rows and columns of a product with ``cols`` output columns
    (``constant``: a constant extent, not the hint of a symbolic one). Columns: two vectors, one,
    or half a vector, the widest that divides ``cols`` (24 columns: three tiles of 8, where a
    24-wide vector or a tile of 16 and a guarded tail run far slower); a row of at most one
    vector whole; else two vectors and a guarded partial tile. Rows: as many as keep the
    accumulators in half the vector registers."""
    nb = min(2 * lanes, cols) if cols >= lanes else max(cols, 1)
    if constant and cols > lanes:
        nb = next((w for w in (2 * lanes, lanes, lanes // 2) if cols % w == 0), 2 * lanes)
    vecs = -(-nb // lanes)
    mr = max(1, min(8, registers // 2 // vecs))
    return mr, nb


def block_rows(rows: int, keys: int, mr: int) -> int:
    """Query rows per block: the whole sequence when the block's two ``rows x keys`` float32
    buffers fit in :data:`BLOCK_BYTES` (no partial block), else the most rows that fit, a
    multiple of ``mr``."""
    fit = max(1, BLOCK_BYTES // (2 * 4 * max(keys, 1)) // mr) * mr
    return rows if rows <= fit else fit


def _constant(iv: IterVar) -> bool:
    """True when ``iv``'s extent is a constant (not a symbolic size)."""
    return iv.dom is not None and E.const_int_value(simplify(iv.dom.extent)) is not None


def _register_tile(tile: te.Stage, mr: int, nb: int) -> None:
    """The loops of a product's ``mr x nb`` register tile (computed at its reader's tile): the
    reduction outside, the rows unrolled, the columns vectorized. The rows and columns are split
    by the tile's constant sizes first (their outer loops run once), so the vectorized loop has a
    constant extent when the sizes are symbolic."""
    *_, r, c = tile.op.axis
    (k,) = tile.op.reduce_axis
    ro, ri = tile.split(r, factor=mr)
    co, ci = tile.split(c, factor=nb)
    tile.reorder(ro, co, k, ri, ci)
    tile.unroll(ri)
    tile.vectorize(ci)


def schedule_fused_attention(s: te.Schedule, stage: te.Stage, strategy: CPUStrategy, handled: set[int],
                             parallel: bool = True) -> None:
    """Schedule the fused attention whose output stage is ``stage`` (module docstring); the
    stages it places are added to ``handled`` (operation ids)."""
    op = stage.op
    assert isinstance(op, ComputeOp)
    parts = _stages_by_tag(op)
    qk, sc, mx, ex, sm, pv = (parts[t] for t in (TAG_QK, TAG_SCORES, TAG_MAX, TAG_EXP, TAG_SUM, TAG_PV))
    handled.update(id(x) for x in (op, qk, sc, mx, ex, sm, pv))
    lanes = strategy.target.vector_lanes(32)
    regs = strategy.vector_registers
    axes = list(op.axis)
    if op.attrs.get("out_perm"):
        b, i, h, e = axes
        lead = [b, h]
    else:
        lead, (i, e) = axes[:-2], axes[-2:]
    S, Dv = extent(i), extent(e)
    L, D = extent(qk.axis[-1]), extent(qk.reduce_axis[0])
    mr_pv, nb_pv = tile_shape(Dv, lanes, regs, _constant(e))
    mr_qk, nb_qk = tile_shape(L, lanes, regs, _constant(qk.axis[-1]))
    rb = block_rows(S, L, int(np.lcm(mr_pv, mr_qk)))
    # the output: (lead, row blocks | row tiles, column tiles, tile rows, tile columns)
    io, ii = stage.split(i, factor=rb)
    iio, eo, iii, ei = stage.tile(ii, e, mr_pv, nb_pv)
    stage.reorder(*lead, io, iio, eo, iii, ei)
    blk = stage.fuse(*lead, io)
    stage.vectorize(ei)
    stage.unroll(iii)
    # P V: a register tile inside the output's store, the whole key axis accumulated there
    pvs = s[pv]
    pvs.set_scope("local")
    pvs.compute_at(stage, eo)
    _register_tile(pvs, mr_pv, nb_pv)
    # the block's scores: Q Kᵀ register tiles stored scaled and masked
    scs = s[sc]
    scs.compute_at(stage, blk)
    *_, si, sj = scs.op.axis
    sio, sjo, sii, sji = scs.tile(si, sj, mr_qk, nb_qk)
    scs.vectorize(sji)
    scs.unroll(sii)
    qks = s[qk]
    qks.set_scope("local")
    qks.compute_at(scs, sjo)
    _register_tile(qks, mr_qk, nb_qk)
    # row maximum and sum: vector partials over the row
    for red in (mx, sm):
        rs = s[red]
        vl = row_reduction_lanes(red, lanes)
        if vl:
            rf = split_row_reduction(s, rs, vl)
            data = [iv for iv in rs.leaf_iter_vars if iv.kind is not IterKind.REDUCE]
            s[rf].compute_at(rs, data[-1])
            handled.update((id(rf.op), id(rs.op)))
        rs.compute_at(stage, blk)
    # the exponentials, a vector at a time
    exs = s[ex]
    exs.compute_at(stage, blk)
    *_, xj = exs.op.axis
    if L >= lanes:
        _, xji = exs.split(xj, factor=lanes)
        exs.vectorize(xji)
    elif L > 1:
        exs.vectorize(xj)
    heads = int(np.prod([extent(a) for a in lead]))
    if parallel and heads * S * L * (D + Dv) >= PARALLEL_MIN_MACS and heads * -(-S // rb) >= 2:
        stage.parallel(blk)
