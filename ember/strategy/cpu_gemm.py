"""Fast CPU schedules for convolutions and matrix products (templates of the CPU strategy).

A packed GEMM stage (``tag == "conv_packed"``, built by :func:`ember.ops.nn.conv_tensor` and
:func:`ember.ops.nn.matmul_tensor`) computes ``[B, M, N] = W[M, K] @ P[K, N]`` whose right
operand ``P`` is already packed into ``nr``-wide column panels (``op.attrs["nr"]``, the
strategy's :meth:`~ember.strategy.cpu.CPUStrategy.gemm_panel_width`: two vector registers, so
an ``mr x nr`` tile is ``2 mr`` accumulators — 14 x 32 on AVX-512, 8 x 32 where 512-bit
operations are double-pumped (Zen 4: :func:`default_tile_candidates`), 6 x 16 on AVX2). Each
product runs one of two structures:

* **register structure** (:func:`schedule_packed_gemm`, and for a matrix product
  :func:`schedule_product_in_store`): each ``mr x nr`` tile accumulates its whole reduction in
  registers, then is stored once. A matrix product runs inside the store of its reader (the
  view, a bias, an activation), so its epilogue costs no extra pass and the product needs no
  buffer. Panels go in groups (``panel_group``, ``PANEL_GROUP_BYTES`` of them stay in L2) with
  every row tile passing over a group, so the left operand streams from memory once per group;
* **K-blocked structure** (``k_outer``, :func:`_schedule_k_outer`), for skinny products with a
  long reduction (``128 x 4096 x 4096``): the reduction in blocks of ``kc`` outermost, the
  output accumulated in memory; a ``M x kc`` block of the left operand stays in L2 while all
  panels pass, and panels computed in the kernel are packed ``kc x nr`` at a time right before
  their tiles use them (as BLAS packs B).

The knobs (``ConfigSpace``, the tuner's view; the default point is the heuristic):

* ``mr`` — register-tile rows; legal when the ``mr x nr`` accumulators and the loaded panel
  row fit in the target's vector registers (:func:`default_tile_rows` picks it);
* ``order`` — ``"weights_outer"`` (weight rows outermost: late layers, small images) or
  ``"panels_outer"`` (panels outermost: large images; every matrix product);
* ``tile_k`` — the split of the first reduction axis into (chunks, chunk); ``size[0] == 1``
  leaves it unsplit; the K-blocked structure's ``kc`` (:func:`default_k_block`);
* ``unroll_m`` — unroll the tile rows;
* ``parallel`` — run the outer blocks in parallel (above ``PARALLEL_MIN_MACS``);
* ``k_outer``, ``panel_group``, ``parallel_axis`` (``"rows"``: row tiles in parallel, when
  there are at least ``PARALLEL_ROW_TILES``; ``"panels"``: panels or panel groups) — matrix
  products only (a convolution's GEMM, scheduled by :mod:`ember.strategy.cpu_conv`, offers one
  value of each).

The packing stage (``tag == "gemm_pack"``) is parallel over panels and vectorized across the
panel width; a depthwise convolution (``tag == "conv_dw"``) is vectorized along the output row.
Parallel loops run on libgomp threads with a static split (:mod:`ember.backends.cpu.codegen`),
whose loop bodies see their buffers as ``noalias``, so LLVM keeps K-blocked tiles in registers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import te
from .base import extent
from .cpu_arch import cpu_arch
from .space import ConfigEntity, ConfigSpace

if TYPE_CHECKING:
    from .cpu import CPUStrategy

# Below these sizes a parallel region costs more than it saves (and far more on a loaded machine).
PARALLEL_MIN_ELEMS = 1 << 16
PARALLEL_MIN_MACS = 1 << 22
# Products of at most GEMV_ROWS rows whose right operand has at least GEMV_PARALLEL_BYTES run in
# parallel below PARALLEL_MIN_MACS (they stream that operand; see packed_gemm_space).
GEMV_ROWS = 4
GEMV_PARALLEL_BYTES = 1 << 20
# Register-tile rows the space offers, and the heuristic's preference order (wide and narrow
# vector units).
MR_VALUES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14)
MR_PREFERRED_WIDE = (14, 12, 10, 8, 6, 4, 5, 3, 2)
MR_PREFERRED_NARROW = (4, 6, 3, 2)
# The tallest register tile the default takes where 512-bit operations are double-pumped (two
# 256-bit halves, one 512-bit FMA per cycle: AMD Zen 4, see cpu_arch). There 8 rows keep 16
# accumulators, four times what one FMA per cycle of latency 4 needs, so a shorter tile costs no
# FMA throughput, while 14 rows lose whenever the left operand's rows (which the tile reads
# unpacked, K floats apart) fall in few sets of the 8-way, 4 KiB-period L1. Measured on Zen 4,
# one thread, thread CPU time, M = N = 1024: 14 rows 83 GFLOP/s at K = 1024 (85 at 2048³)
# (rows 4 KiB apart: all in one set), 97 at K = 1000, 104-111 at K = 384, 640, 768, 1536;
# 8 rows 106-112 at every K, within 2 % of the best height (6 to 14) everywhere. The loop
# itself is the same (28 FMAs, 14 broadcasts, 2 panel loads a step, no spills).
MR_MAX_DOUBLE_PUMPED = 8
# A reduction longer than this (multiply-adds per output) is blocked into chunks of at most
# KC_MAX_TAPS.
KC_SPLIT_ABOVE = 512
KC_MAX_TAPS = 256
# Cache budgets of the matrix-product structures (bytes; a core's L2 is 1-2 MiB on the x86 CPUs
# ember targets): a group of K x nr panels, and the M x kc block of the left operand.
PANEL_GROUP_BYTES = 512 * 1024
PANEL_GROUP_MAX = 8
PANEL_GROUPS = (1, 2, 4, 8, 16)
A_BLOCK_BYTES = 256 * 1024
# The K-blocked structure: reductions longer than KBLOCK_MIN_K, blocks of KBLOCK_MIN..KBLOCK_MAX.
KBLOCK_MIN_K = 1024
KBLOCK_MIN = 128
KBLOCK_MAX = 512
# Unpacked products get register tiles from this many columns and multiply-adds per batch.
SMALL_MATMUL_MIN_N = 8
SMALL_MATMUL_MIN_MACS = 4096
# Rows of register tiles below which the FMA latency, not the pipes, bounds a tile, and the
# cycles per reduction step a tile costs beyond its FMAs (measured: 14 x 32 beats 8 x 32 at M = 64).
FMA_CHAINS = 4
TILE_OVERHEAD = 3
# Parallel over row tiles when there are at least this many, else over panels.
PARALLEL_ROW_TILES = 16


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
        out = _fusable_reader(s, stage) if is_fused_product(op) and not cfg["k_outer"].val else None
        if out is not None:
            schedule_product_in_store(s, stage, out, cfg)
            if handled is not None:
                handled.add(id(out.op))
        else:
            schedule_packed_gemm(s, stage, cfg)
        return True
    if tag == "matmul" and stage.attach == "root" and _schedule_small_matmul(s, stage):
        return True
    if tag == "gemm_pack":
        # A product's panels are scheduled with the product (schedule_packed_gemm), which may
        # pack them piecewise inside its own loops.
        if not any(isinstance(c.op, te.ComputeOp) and getattr(c.op, "tag", "") == "conv_packed"
                   and _is_plain_product(c.op) for c in s.consumers(stage)):
            _schedule_pack(s, stage)
        return True
    return False


def _schedule_small_matmul(s: te.Schedule, stage: te.Stage) -> bool:
    """A matrix product that is not packed (``tag == "matmul"``: a batch of products of two
    run-time operands, as attention's ``Q Kᵀ`` and ``P V``; a product too small to pack):
    ``[..., M, N] = sum_k a[..., M, k] b[..., k, N]``, with ``N`` contiguous in ``b``. Each tile of
    ``mr`` rows by one or two vectors of columns accumulates in registers over the whole
    reduction (the reduction outside the tile: independent vector FMAs instead of a scalar
    chain of dependent adds per output), batches and row tiles fused and run in parallel when
    the product is large enough. Returns False (nothing scheduled) for other shapes."""
    op = stage.op
    if not isinstance(op, te.ComputeOp) or len(op.reduce_axis) != 1 or op.num_outputs != 1 or len(op.axis) < 2:
        return False
    lanes = 16 if any(str(op.output(0).dtype) == d for d in ("float32", "int32")) else 8
    M, N = extent(op.axis[-2]), extent(op.axis[-1])
    K = extent(op.reduce_axis[0])
    if N < SMALL_MATMUL_MIN_N or M * N * K < SMALL_MATMUL_MIN_MACS:
        return False  # a few dozen products: the default schedule
    nb = min(2 * lanes, N) if N >= lanes else N
    mr = min(M, 6 if nb > lanes else 8)
    t = op.output(0)
    cc = s.cache_write(t, "local")
    st = s[t]
    axes = list(st.op.axis)
    mo, no, mi, ni = st.tile(axes[-2], axes[-1], mr, nb)
    lead = axes[:-2] + [mo]
    st.reorder(*lead, no, mi, ni)
    fused = st.fuse(*lead) if len(lead) > 1 else mo
    st.vectorize(ni)
    s[cc].compute_at(st, no)
    caxes = list(s[cc].op.axis)
    (rk,) = s[cc].op.reduce_axis
    s[cc].reorder(rk, caxes[-2], caxes[-1])
    s[cc].unroll(caxes[-2])
    s[cc].vectorize(caxes[-1])
    batch = int(np.prod([extent(a) for a in axes[:-2]])) if len(axes) > 2 else 1
    if batch * M * N * K >= PARALLEL_MIN_MACS:
        st.parallel(fused)
    return True


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


def _is_plain_product(op: te.ComputeOp) -> bool:
    """A matrix product (one reduction axis), not a convolution's GEMM (whose schedule
    :mod:`ember.strategy.cpu_conv` owns and whose reduction has kernel taps)."""
    return len(op.reduce_axis) == 1 and not (op.attrs and "conv_out" in op.attrs)


def default_panel_group(K: int, nr: int, panels: int | None = None) -> int:
    """Panels per pass over the left operand in the register structure: as many ``K x nr``
    panels as fit in ``PANEL_GROUP_BYTES`` (they stay in L2 while every row tile passes over
    them), at most ``PANEL_GROUP_MAX``, and a power of two that divides ``panels`` (the number
    of panels, when given): a last, partial group would run its lanes unvectorized (384³ took
    3.4 ms in groups of 8 over 12 panels against 0.47 ms at 256 columns)."""
    fit = PANEL_GROUP_BYTES // max(1, K * nr * 4)
    group = int(max(1, min(PANEL_GROUP_MAX, 1 << (max(1, fit).bit_length() - 1))))
    while panels is not None and group > 1 and panels % group:
        group //= 2
    return group


def default_k_block(rows: int, M: int, N: int, K: int, nr: int) -> int | None:
    """The reduction block of the K-blocked structure for a product of ``rows`` batches of ``M x
    K`` by ``K x N``, or None where the register structure is the better one. K-blocked pays
    when few panels fit in L2 at full ``K`` (``K > KBLOCK_MIN_K``) and the left operand does
    not (it would stream from memory once per panel group) while an ``M x kc`` block of the left operand fits in
    ``A_BLOCK_BYTES`` for a ``kc`` of at least ``KBLOCK_MIN`` that divides ``K`` (a skinny
    product: ``128 x 4096 x 4096``, a transformer's projections at small batch)."""
    if rows != 1 or K <= KBLOCK_MIN_K or N < 4 * nr or M * K * 4 <= 2 * PANEL_GROUP_BYTES:
        return None
    kc = min(KBLOCK_MAX, A_BLOCK_BYTES // (4 * max(1, M)))
    while kc >= KBLOCK_MIN and K % kc:
        kc -= 1
    return kc if kc >= KBLOCK_MIN else None


def default_tile_rows(M: int, cands: tuple[int, ...]) -> int:
    """The register-tile height for ``M`` rows among ``cands``: the fewest cycles by a simple
    model — ``ceil(M / mr)`` tiles, each taking ``max(mr, FMA_CHAINS) + TILE_OVERHEAD`` cycles per
    reduction step (two FMA pipes of latency 4 need eight independent accumulators, two per row;
    the panel row's loads and the loop are the overhead of each tile). ``M`` itself when it is below every candidate."""
    if M < min(cands):
        return M
    return min(cands, key=lambda c: (-(-M // c) * (max(c, FMA_CHAINS) + TILE_OVERHEAD), -c))


def default_tile_candidates(strategy: CPUStrategy) -> tuple[int, ...]:
    """The register-tile heights the default point of :func:`packed_gemm_space` chooses from on
    ``strategy``'s CPU, in order of preference: ``MR_PREFERRED_WIDE`` (up to 14 x 32 in AVX-512's
    32 registers) with 16-lane vectors, ``MR_PREFERRED_NARROW`` (up to 6 x 16) with narrower
    ones; where 512-bit operations are double-pumped (:func:`~ember.strategy.cpu_arch.cpu_arch`:
    Zen 4) the wide heights up to ``MR_MAX_DOUBLE_PUMPED``. The knob itself offers every
    height that fits the registers, whatever the CPU."""
    if strategy.target.vector_lanes(32) < 16:
        return MR_PREFERRED_NARROW
    if cpu_arch(strategy.target).avx512_double_pumped:
        return tuple(c for c in MR_PREFERRED_WIDE if c <= MR_MAX_DOUBLE_PUMPED)
    return MR_PREFERRED_WIDE


def packed_gemm_space(op: te.ComputeOp, strategy: CPUStrategy) -> ConfigSpace:
    """The knob space of packed GEMM ``op`` on ``strategy``'s CPU (see the module docstring);
    its default point is the heuristic schedule."""
    nr = int(op.attrs["nr"])
    lanes = strategy.target.vector_lanes(32)
    nregs = strategy.vector_registers
    M, N, K, C, taps = _gemm_dims(op)
    rows = extent(op.axis[0])
    plain = _is_plain_product(op)
    space = ConfigSpace()
    cands = default_tile_candidates(strategy)
    mr = default_tile_rows(M, cands) if plain else next((c for c in cands if M % c == 0), cands[0])
    space.define_knob("mr", MR_VALUES, default=mr)
    order = "weights_outer" if M * K * 4 > N * K * 4 else "panels_outer"
    if plain:
        order = "panels_outer"  # with panel groups (below): both operands are reused from cache
    space.define_knob("order", ("panels_outer", "weights_outer"), default=order)
    kblock = default_k_block(rows, M, N, K, nr) if plain else None
    # The heuristic reads the reduction extents literally (see extent()): the operators write
    # them as (0, C) ranges, so it blocks only reductions whose extents are literals.
    _, _, _, c_lit, taps_lit = _gemm_dims(op, literal=True)
    if kblock is not None:
        kc = kblock
    elif c_lit * taps_lit <= KC_SPLIT_ABOVE:
        kc = C
    elif taps_lit <= KC_MAX_TAPS:  # c_lit is C or 1, so kc divides C
        kc = max(d for d in range(1, c_lit + 1) if c_lit % d == 0 and d * taps_lit <= KC_MAX_TAPS)
    else:
        kc = 1
    space.define_split("tile_k", C, num_outputs=2, policy="factors", default=(C // kc, kc))
    space.define_knob("unroll_m", (True, False), default=True)
    # A matrix-vector-like product (few rows) whose right operand outgrows one core's L2 is
    # bound by streaming that operand: split its panels across the cores, so each core's share
    # can stay in its own cache from call to call (an LSTM's recurrent step: 1 x 512 x 2048).
    gemv_wide = rows * M <= GEMV_ROWS and N * K * 4 >= GEMV_PARALLEL_BYTES
    space.define_knob("parallel", (True, False), default=M * N * K >= PARALLEL_MIN_MACS or gemv_wide)
    # Knobs of plain products only (a convolution's GEMM is scheduled by cpu_conv and offers
    # one value of each, so its space is unchanged).
    space.define_knob("k_outer", (False, True) if plain else (False,), default=kblock is not None)
    mtiles = rows * -(-M // mr)
    axis = "rows" if mtiles >= PARALLEL_ROW_TILES and kblock is None else "panels"
    # panels in parallel: one panel per step, so that every thread has panels to take
    group = default_panel_group(K, nr, -(-N // nr)) if plain and axis == "rows" else 1
    space.define_knob("panel_group", PANEL_GROUPS if plain else (1,), default=group)
    space.define_knob("parallel_axis", ("rows", "panels") if plain else ("rows",), default=axis if plain else "rows")
    vecs_per_row = -(-nr // lanes)

    def registers(cfg: ConfigEntity) -> str | None:
        need = cfg["mr"].val * vecs_per_row + vecs_per_row + 1
        if need > nregs:
            return f"an {cfg['mr'].val} x {nr} register tile needs {need} vector registers, the target has {nregs}"
        return None

    def k_outer_needs_blocks(cfg: ConfigEntity) -> str | None:
        if cfg["k_outer"].val and cfg["tile_k"].size[0] == 1:
            return "k_outer accumulates over reduction blocks: tile_k must split the reduction"
        return None

    space.add_check(registers)
    space.add_check(k_outer_needs_blocks)
    return space


def is_fused_product(op: te.ComputeOp) -> bool:
    """True for a matrix product's packed GEMM that the default schedule computes in registers
    inside the store of its reader (:func:`schedule_product_in_store`), so it needs no buffer:
    a plain product whose default is the register structure (the K-blocked one accumulates in
    memory)."""
    if getattr(op, "tag", "") != "conv_packed" or not _is_plain_product(op):
        return False
    M, N, K, _, _ = _gemm_dims(op)
    return default_k_block(extent(op.axis[0]), M, N, K, int(op.attrs["nr"])) is None


def _fusable_reader(s: te.Schedule, stage: te.Stage) -> te.Stage | None:
    """The one stored stage that reads product ``stage`` (through inlined stages: the view, a
    bias, an activation), when it is a root non-reduction stage whose last two axes are the
    product's rows and columns and whose leading axes flatten onto the product's batch rows."""
    if stage.is_output:  # a workspace of the memory plan: stored by itself
        return None
    from .cpu_conv import _stored_readers as stored_readers  # (cpu_conv imports this module)

    found = stored_readers(s, stage)
    if len(found) != 1:
        return None
    out = found[0]
    op, oop = stage.op, out.op
    if not isinstance(oop, te.ComputeOp) or oop.is_reduction or out.attach != "root" or len(oop.axis) < 2:
        return None
    rows, M, N = (extent(a) for a in op.axis)
    oshape = [extent(a) for a in oop.axis]
    lead = int(np.prod(oshape[:-2])) if len(oshape) > 2 else 1
    if oshape[-2] != M or not (N - int(op.attrs["nr"]) < oshape[-1] <= N) or lead != rows:
        return None
    return out


def schedule_product_in_store(s: te.Schedule, stage: te.Stage, out: te.Stage, cfg: ConfigEntity) -> None:
    """Schedule product ``stage`` (its register structure at point ``cfg``) inside the loops of
    ``out``, the stage that stores it (:func:`_fusable_reader`): ``out`` is tiled ``mr x nr``
    like the product, each tile's product accumulates in registers (scope ``local``) and the
    epilogue inlined into ``out`` (the view, bias, GELU, a residual add) reads it there, so the
    product never goes through memory."""
    op = stage.op
    nr = int(op.attrs["nr"])
    mr = int(cfg["mr"].val)
    stage.set_scope("local")
    axes = list(out.op.axis)
    lead = out.fuse(*axes[:-2]) if len(axes) > 3 else (axes[0] if len(axes) == 3 else None)
    m, n = axes[-2], axes[-1]
    mo, no, mi, ni = out.tile(m, n, mr, nr)
    group = int(cfg["panel_group"].val)
    by_rows = cfg["parallel_axis"].val == "rows"
    head = [lead] if lead is not None else []
    if cfg["order"].val == "weights_outer":
        out.reorder(*head, mo, no, mi, ni)
        stage.compute_at(out, no)
        par = mo
    else:
        # groups of panels outermost (in L2 while every row tile passes over them)
        ng, nin = out.split(no, factor=group)
        out.reorder(*head, ng, mo, nin, mi, ni)
        par = mo if by_rows else ng
        stage.compute_at(out, nin)
    out.vectorize(ni)
    schedule_tile(stage, cfg)
    if cfg["parallel"].val:
        # A matrix-vector product streaming a large constant operand, its panels in parallel:
        # each thread takes the same panels on every call (the pool's static mode), so its share
        # of the weights stays in its core's L2 from call to call (a recurrent layer's steps).
        rows, M, N = (extent(a) for a in op.axis)
        gemv = rows * M <= GEMV_ROWS and N * int((op.attrs or {}).get("K", 0)) * 4 >= GEMV_PARALLEL_BYTES
        out.parallel(par, static=gemv and not by_rows)
    pack = _panel_pack_stage(s, op)
    if pack is not None and pack.attach == "root":
        _schedule_pack(s, pack)


def schedule_tile(tile: te.Stage, cfg: ConfigEntity) -> None:
    """The loops of an ``mr x nr`` register tile (axes ``(b, m, n)``, reductions ``(c, taps...)``)
    at point ``cfg`` of :func:`packed_gemm_space`: the first reduction axis (split by ``tile_k``)
    and the taps outside, the tile rows (unrolled by ``unroll_m``) and the vectorized panel
    width inside. Shared by every register structure: a standalone GEMM, a matrix product and a
    convolution's GEMM computed in their readers' stores."""
    _, cm, cn = tile.op.axis
    red = list(tile.op.reduce_axis)
    rc, taps_axes = red[0], red[1:]
    chunks, kc = cfg["tile_k"].size
    if chunks == 1:
        tile.reorder(rc, *taps_axes, cm, cn)
    else:
        ko, ki = tile.split(rc, factor=kc)
        tile.reorder(ko, ki, *taps_axes, cm, cn)
    if cfg["unroll_m"].val:
        tile.unroll(cm)
    tile.vectorize(cn)


def _panel_pack_stage(s: te.Schedule, op: te.ComputeOp) -> te.Stage | None:
    """The panel-packing stage (``tag == "gemm_pack"``) that ``op`` reads, when it is computed
    in this kernel (not a folded constant) and not one of the kernel's outputs."""
    for t in op.input_tensors:
        if isinstance(t.op, te.ComputeOp) and getattr(t.op, "tag", "") == "gemm_pack":
            st = s[t.op]
            return None if st.is_output or st.attach == "inline" else st
    return None


def schedule_packed_gemm(s: te.Schedule, stage: te.Stage, cfg: ConfigEntity) -> None:
    """Schedule packed GEMM ``stage`` at point ``cfg`` of :func:`packed_gemm_space` (assumed
    legal: validate it first). Two structures (module docstring): the register structure (the
    whole reduction of each ``mr x nr`` tile in registers) and, with ``k_outer``, the K-blocked
    one (the output accumulates over reduction blocks)."""
    op = stage.op
    if "k_outer" in cfg and cfg["k_outer"].val:
        _schedule_k_outer(s, stage, cfg)
        return
    nr = int(op.attrs["nr"])
    mr = int(cfg["mr"].val)
    t = op.output(0)
    cc = s.cache_write(t, "local")
    st = s[t]
    b, m, n = st.op.axis
    mo, no, mi, ni = st.tile(m, n, mr, nr)
    group = int(cfg["panel_group"].val) if "panel_group" in cfg else 1
    by_rows = "parallel_axis" not in cfg or cfg["parallel_axis"].val == "rows"
    # The larger operand goes outermost, so it streams from memory once while the smaller one
    # stays in cache: panels outermost for large images, weight rows outermost for late layers.
    weights_outer = cfg["order"].val == "weights_outer"
    if weights_outer:
        st.reorder(b, mo, no, mi, ni)
        s[cc].compute_at(st, no)
        fused = st.fuse(b, mo)
    elif group > 1:
        # groups of panels (in L2) outermost; every row tile passes over a group
        ng, nin = st.split(no, factor=group)
        if by_rows:
            st.reorder(ng, b, mo, nin, mi, ni)
            fused = st.fuse(b, mo)
        else:
            st.reorder(b, ng, mo, nin, mi, ni)
            fused = st.fuse(b, ng)
        s[cc].compute_at(st, nin)
    else:
        st.reorder(b, no, mo, mi, ni)
        s[cc].compute_at(st, mo)
        fused = st.fuse(b, no)
    st.vectorize(ni)
    schedule_tile(s[cc], cfg)
    if cfg["parallel"].val:
        st.parallel(fused)
    pack = _panel_pack_stage(s, op)
    if pack is not None and pack.attach == "root":
        _schedule_pack(s, pack)


def _schedule_k_outer(s: te.Schedule, stage: te.Stage, cfg: ConfigEntity) -> None:
    """The K-blocked structure: for each reduction block of ``kc`` (outermost), the panels in
    parallel, and in each panel every ``mr x nr`` tile accumulates its ``kc`` products in
    registers onto the output (LLVM keeps the tile in registers over the block: the kernel's
    buffers are ``noalias``). The ``M x kc`` block of the left operand stays in L2 while all
    panels pass; a panel-packing stage computed in this kernel is packed one ``kc x nr`` piece
    at a time, just before the tiles read it (as a BLAS packs B), instead of in a pass of its
    own."""
    op = stage.op
    nr = int(op.attrs["nr"])
    mr = int(cfg["mr"].val)
    st = s[op]
    b, m, n = st.op.axis
    mo, no, mi, ni = st.tile(m, n, mr, nr)
    ko, ki = st.split(st.op.reduce_axis[0], factor=int(cfg["tile_k"].size[1]))
    if cfg["parallel_axis"].val == "rows":
        st.reorder(b, ko, mo, no, ki, mi, ni)
        outer = mo
    else:
        st.reorder(b, ko, no, mo, ki, mi, ni)
        outer = no
    if cfg["unroll_m"].val:
        st.unroll(mi)
    st.vectorize(ni)
    if cfg["parallel"].val:
        st.parallel(outer)
    pack = _panel_pack_stage(s, op)
    if pack is not None and outer is no:
        pack.compute_at(st, no)
        pack.vectorize(pack.op.axis[-1])
    elif pack is not None:
        _schedule_pack(s, pack)


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
