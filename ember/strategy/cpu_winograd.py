"""CPU schedules of the Winograd convolution on blocked tensors (:mod:`ember.ops.winograd_nchwc`).

Two structures, chosen by the layout policy (the operator's ``fused`` attribute):

**All tiles at once** (transformed weights larger than 1 MiB: read once per call). Three stages
at the root, each parallel over its outer loops:

* the **input transform** (tag ``winograd_in``, ``V[p, t, c]``, a workspace): for each tile
  ``p`` and input channel block (in parallel), ``B^T d`` (tag ``winograd_in1``, ``a x a``
  vectors in registers) then the ``a*a`` points unrolled — each unrolled copy is its own sum of
  vectors, the vectors of one channel block (``ib`` lanes) stored contiguously;
* the **batched GEMM** (tag ``winograd_gemm``, ``M[p, t, :] = V[p, t, :] @ U[t]`` for each
  point ``t``): the packed GEMM's register structure (``mr x nr`` tiles accumulated over the
  input channels in registers; ``mr`` by the packed GEMM's cycle model among the heights that
  divide the tile count, which the operator pads for it), points outermost so one point's
  weights stay in L2 while its tiles pass, parallel over (point, row tile); knobs in
  :func:`winograd_gemm_space`;
* the **output transform** with the epilogue: the transform is injective, so it is inlined into
  the stage that stores the convolution's consumers (bias, residual add, activation, clip);
  :func:`schedule_winograd_store` tiles that stage's output rows and columns by ``m``, computes
  ``A^T M`` (tag ``winograd_out1``, ``m x a`` vectors) in registers per tile, unrolls the ``m x
  m`` positions (each simplifies to its own sum) and vectorizes the channel block: the epilogue
  runs in registers before the one store. A partial last tile row or column is guarded. When
  what follows the epilogue has another shape (the layout transform back to NCHW), the last
  stage of the blocked shape is stored (``compute_root``) and the rest reads it.

**Row by row** (:func:`schedule_winograd_fused`, weights up to 1 MiB: they stay in L2): for each
row of output tiles in parallel, the input transform of the row, its GEMM for every point and
the output transform with the epilogue, so the row's transformed input and products (``TW x
a*a x C`` floats) stay in the core's cache instead of going through memory.

The weight transform (tag ``winograd_wt``) is folded at compile time for constant weights; with
run-time weights (only in tests that build the operator by hand) it runs as a plain root stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import te
from .base import extent
from .cpu_gemm import (
    FMA_CHAINS,
    MR_PREFERRED_NARROW,
    MR_PREFERRED_WIDE,
    MR_VALUES,
    PARALLEL_MIN_MACS,
    TILE_OVERHEAD,
    default_tile_rows,
)
from .space import ConfigEntity, ConfigSpace

if TYPE_CHECKING:
    from ..target import Target
    from .cpu import CPUStrategy

#: The tags of the Winograd stages this module schedules (:func:`schedule_winograd`).
WINOGRAD_TAGS = ("winograd_in1", "winograd_in", "winograd_gemm", "winograd_out1")


def schedule_winograd(
    s: te.Schedule, stage: te.Stage, strategy: CPUStrategy, handled: set[int], parallel: bool = True
) -> None:
    """Schedule Winograd ``stage`` (a tag of :data:`WINOGRAD_TAGS`), the CPU strategy's entry:
    the input transform and the GEMM (with the stores that read it) at the root; the halves of
    the separable transforms (``winograd_in1``, ``winograd_out1``) are placed by their readers'
    schedules, so they are left alone here (without ``parallel``, or where no reader placed
    them, they run as serial root stages)."""
    op = stage.op
    if stage.attach != "root" or op.tag in ("winograd_in1", "winograd_out1"):
        return
    fused = bool(op.attrs and op.attrs.get("fused"))
    if op.tag == "winograd_in" and not fused:
        schedule_winograd_input(s, stage, parallel)
    elif op.tag == "winograd_gemm" and parallel:
        if fused:
            schedule_winograd_fused(s, stage, strategy, handled)
        else:
            schedule_winograd_gemm(s, stage, strategy, None, handled)


def schedule_winograd_fused(s: te.Schedule, stage: te.Stage, strategy: CPUStrategy, handled: set[int]) -> None:
    """Row by row: for each row of output tiles (in parallel), the input transform of the row's
    tiles, their GEMM for every point and the output transform with the epilogue, so the
    transformed input and the products of one row (``TW x a*a x C`` and ``x K`` floats) stay in
    the core's cache instead of going through memory."""
    op = stage.op
    m = int(op.attrs["tile"])
    nr = int(op.attrs["nr"])
    tw = int(op.attrs["tiles_per_row"])
    half = next((c for c in s.consumers(s[op]) if getattr(c.op, "tag", "") == "winograd_out1"), None)
    store = _blocked_store(s, half, [int(v) for v in op.attrs["out"]]) if half is not None else None
    if store is None:
        schedule_winograd_gemm(s, stage, strategy, None, handled)
        return
    if store.attach == "inline":
        store.compute_root()
    n, o, oh, ow, k = store.op.axis
    ho, hi = store.split(oh, factor=m)
    wo, wi = store.split(ow, factor=m)
    store.reorder(n, ho, o, wo, hi, wi, k)
    row = store.fuse(n, ho)
    store.parallel(row)
    store.unroll(hi)
    store.unroll(wi)
    store.vectorize(k)
    h = s[half.op]
    h.set_scope("local")
    h.compute_at(store, wo)
    r, nu, _, hk = h.op.axis
    h.unroll(r)
    h.unroll(nu)
    h.vectorize(hk)
    # the GEMM of the row's tiles
    out = op.output(0)
    cache = s.cache_write(out, "local")
    acc = s[cache[0] if isinstance(cache, list) else cache]
    st = s[out]
    st.compute_at(store, row)
    p, t, kk = st.op.axis
    mr = row_tile_rows(tw, nr, strategy.target) or tw
    po, pi = st.split(p, factor=mr)
    ko, ki = st.split(kk, factor=nr)
    st.reorder(t, po, ko, pi, ki)
    st.vectorize(ki)
    acc.compute_at(st, ko)
    ap, at_, ak = acc.op.axis
    (rc,) = acc.op.reduce_axis
    acc.reorder(rc, ap, at_, ak)
    acc.unroll(ap)
    acc.vectorize(ak)
    # the input transform of the row's tiles
    vt = _producer(op, "winograd_in")
    if vt is not None:
        v = s[vt.op]
        v.compute_at(store, row)
        vp, vtt, vc = v.op.axis
        co, ci = v.split(vc, factor=int(vt.op.attrs["block"]))
        v.reorder(vp, co, vtt, ci)
        v.unroll(vtt)
        v.vectorize(ci)
        half_in = _producer(vt.op, "winograd_in1")
        if half_in is not None:
            h1 = s[half_in.op]
            h1.set_scope("local")
            h1.compute_at(v, co)
            xi, j, _, hc = h1.op.axis
            h1.unroll(xi)
            h1.unroll(j)
            h1.vectorize(hc)
    handled.add(id(store.op))


def winograd_gemm_space(op: te.ComputeOp, strategy: CPUStrategy) -> ConfigSpace:
    """The knob space of a Winograd GEMM stage (tag ``winograd_gemm``, ``M[p, t, k]``): ``mr``
    (tiles per register tile: ``mr x nr`` accumulators), ``unroll_m``, ``parallel``; legal
    when the accumulators, a panel row and a broadcast fit the target's vector registers. The
    default ``mr`` is :func:`tile_rows_dividing` (else the packed GEMM's cycle model,
    :func:`~ember.strategy.cpu_gemm.default_tile_rows`, with a guarded last tile); ``parallel``
    when all the points' products reach the packed GEMM's threshold."""
    nr = int(op.attrs["nr"])
    lanes = max(1, strategy.target.vector_lanes(32))
    nregs = strategy.vector_registers
    rows = extent(op.axis[0])
    macs = rows * extent(op.axis[1]) * extent(op.axis[2]) * int(op.attrs["K"])
    mr = tile_rows_dividing(rows, nr, strategy)
    if mr is None:
        mr = default_tile_rows(rows, MR_PREFERRED_WIDE if lanes >= 16 else MR_PREFERRED_NARROW)
    space = ConfigSpace()
    space.define_knob("mr", MR_VALUES, default=mr)
    space.define_knob("unroll_m", (True, False), default=True)
    space.define_knob("parallel", (True, False), default=macs >= PARALLEL_MIN_MACS)
    vecs = -(-nr // lanes)

    def registers(cfg: ConfigEntity) -> str | None:
        need = cfg["mr"].val * vecs + vecs + 1
        if need > nregs:
            return f"an {cfg['mr'].val} x {nr} register tile needs {need} vector registers, the target has {nregs}"
        return None

    space.add_check(registers)
    return space


def _producer(op: te.Operation, tag: str) -> te.Tensor | None:
    """The tensor that ``op`` reads whose operation has tag ``tag``, or None."""
    return next((t for t in op.input_tensors if getattr(t.op, "tag", "") == tag), None)


def vector_registers(target: Target) -> int:
    """Vector registers of ``target``'s ISA: 32 with AVX-512 or on AArch64, else 16 (as
    :attr:`ember.strategy.cpu.CPUStrategy.vector_registers`, for the layout policy, which
    cannot import the strategy)."""
    feats = target.features
    return 32 if "avx512f" in feats or "neon" in feats else 16


def winograd_tile_rows(tiles: int, nr: int, target: Target) -> int:
    """The register-tile height (output tiles per ``mr x nr`` register tile) of a Winograd GEMM
    over ``tiles`` output tiles on ``target``, by the packed GEMM's cycle model with the tile
    count padded to a multiple of the height (``ceil(tiles / mr) * (max(mr, FMA_CHAINS) +
    TILE_OVERHEAD)``; ties to the taller tile): the layout policy passes it to the operator
    (attribute ``tile_rows``), which pads the tile count to a multiple of it. 49 tiles (28 x
    28): 10 on AVX-512 (50 rows), 6 on AVX2 (54 rows)."""
    lanes = max(1, target.vector_lanes(32))
    vecs = -(-nr // lanes)
    nregs = vector_registers(target)
    fits = [mr for mr in MR_VALUES if mr * vecs + vecs + 1 <= nregs]
    if tiles < FMA_CHAINS:
        return max(1, min(tiles, max(fits)))
    return min(fits, key=lambda mr: (-(-tiles // mr) * (max(mr, FMA_CHAINS) + TILE_OVERHEAD), -mr))


def row_tile_rows(tiles_per_row: int, nr: int, target: Target) -> int | None:
    """The register-tile height of the row-by-row schedule (:func:`schedule_winograd_fused`):
    the best height by the packed GEMM's cycle model among those of at least ``FMA_CHAINS``
    that divide the tiles of one row and fit ``target``'s registers; None when none does."""
    lanes = max(1, target.vector_lanes(32))
    vecs = -(-nr // lanes)
    fits = [mr for mr in MR_VALUES if mr >= FMA_CHAINS and mr * vecs + vecs + 1 <= vector_registers(target)
            and tiles_per_row % mr == 0]
    if not fits:
        return None
    return min(fits, key=lambda mr: (tiles_per_row // mr * (max(mr, FMA_CHAINS) + TILE_OVERHEAD), -mr))


def tile_rows_dividing(rows: int, nr: int, strategy: CPUStrategy) -> int | None:
    """The register-tile height for a GEMM of ``rows`` rows (tiles) and ``nr``-wide panels
    among the heights of at least ``FMA_CHAINS`` that divide ``rows`` and fit the target's
    registers, by the packed GEMM's cycle model (``ceil(rows / mr) * (max(mr, FMA_CHAINS) +
    TILE_OVERHEAD)``); None when no such height divides ``rows``. A dividing height leaves no
    partial row tile, whose per-row guards cost the whole product (49 tiles: 65 GFLOP/s with
    10-row tiles and a guarded tail, one thread, against ~230 without)."""
    vecs = -(-nr // max(1, strategy.target.vector_lanes(32)))
    fits = [mr for mr in MR_VALUES if mr >= FMA_CHAINS and mr * vecs + vecs + 1 <= strategy.vector_registers
            and rows % mr == 0]
    if not fits:
        return None
    return min(fits, key=lambda mr: (rows // mr * (max(mr, FMA_CHAINS) + TILE_OVERHEAD), -mr))


def schedule_winograd_input(s: te.Schedule, stage: te.Stage, parallel: bool = True) -> None:
    """The input transform ``V[t, p, c]`` (tag ``winograd_in``): loops (tile, channel block) —
    parallel — then its first half ``B^T d`` (tag ``winograd_in1``: ``a x a`` vectors, unrolled)
    in registers, then the points unrolled and the channel vector (``attrs["block"]`` lanes)
    vectorized."""
    p, t, c = stage.op.axis
    co, ci = stage.split(c, factor=int(stage.op.attrs["block"]))
    stage.reorder(p, co, t, ci)
    fused = stage.fuse(p, co)
    if parallel:
        stage.parallel(fused)
    stage.unroll(t)
    stage.vectorize(ci)
    half = _producer(stage.op, "winograd_in1")
    if half is not None:
        h = s[half.op]
        h.set_scope("local")
        h.compute_at(stage, fused)
        xi, j, _, hc = h.op.axis
        h.unroll(xi)
        h.unroll(j)
        h.vectorize(hc)


def schedule_winograd_store(s: te.Schedule, out: te.Stage, m: int, parallel: bool = True) -> None:
    """A stage of the convolution's output shape ``[N, MB, OH, OW, ob]`` that reads the GEMM
    through the inlined output transform (and epilogue): tiles of ``m x m`` output positions,
    parallel over (image, channel block, tile row); in each tile the first half of the transform
    (``A^T M``, tag ``winograd_out1``: ``m x a`` vectors, unrolled) in registers, then the ``m x
    m`` positions unrolled and the channel block vectorized."""
    n, o, oh, ow, k = out.op.axis
    ho, hi = out.split(oh, factor=m)
    wo, wi = out.split(ow, factor=m)
    out.reorder(n, o, ho, wo, hi, wi, k)
    fused = out.fuse(n, o, ho)
    if parallel:
        out.parallel(fused)
    out.unroll(hi)
    out.unroll(wi)
    out.vectorize(k)
    half = _find_half(s, out.op)
    if half is not None:
        h = s[half]
        h.set_scope("local")
        h.compute_at(out, wo)
        r, nu, _, hk = h.op.axis
        h.unroll(r)
        h.unroll(nu)
        h.vectorize(hk)


def _find_half(s: te.Schedule, op: te.Operation) -> te.Operation | None:
    """The ``winograd_out1`` stage that ``op`` reads, directly or through inlined stages."""
    todo, seen = [op], set()
    while todo:
        cur = todo.pop()
        for t in cur.input_tensors:
            if id(t.op) in seen or not isinstance(t.op, te.ComputeOp):
                continue
            seen.add(id(t.op))
            if t.op.tag == "winograd_out1":
                return t.op
            if s[t.op].attach == "inline":
                todo.append(t.op)
    return None


def _output_tile(op: te.ComputeOp) -> int | None:
    """``m`` of the Winograd output transform that ``op`` (a GEMM) feeds, None if not found."""
    return int(op.attrs["tile"]) if op.attrs and "tile" in op.attrs else None


def schedule_winograd_gemm(
    s: te.Schedule,
    stage: te.Stage,
    strategy: CPUStrategy,
    cfg: ConfigEntity | None = None,
    handled: set[int] | None = None,
) -> None:
    """The batched GEMM ``stage`` (tag ``winograd_gemm``) at point ``cfg`` of
    :func:`winograd_gemm_space` (None: its default point): ``mr x nr`` register tiles
    accumulated over the input channels, parallel over (point, row tile), and every stored stage that reads it
    through the output transform (:func:`schedule_winograd_store`, their ids added to
    ``handled``)."""
    op = stage.op
    space = winograd_gemm_space(op, strategy)
    cfg = space.default if cfg is None else space.validate(cfg)
    nr, mr = int(op.attrs["nr"]), int(cfg["mr"].val)
    out = op.output(0)
    cache = s.cache_write(out, "local")
    acc = s[cache[0] if isinstance(cache, list) else cache]
    st = s[out]
    p, t, k = st.op.axis
    po, pi = st.split(p, factor=mr)
    ko, ki = st.split(k, factor=nr)
    # points outermost: one point's transformed weights (C x K) stay in L2 while its tiles pass
    st.reorder(t, po, ko, pi, ki)
    fused = st.fuse(t, po)
    if cfg["parallel"].val:
        st.parallel(fused)
    st.vectorize(ki)
    acc.compute_at(st, ko)
    ap, at_, ak = acc.op.axis
    (rc,) = acc.op.reduce_axis
    acc.reorder(rc, ap, at_, ak)
    if cfg["unroll_m"].val:
        acc.unroll(ap)
    acc.vectorize(ak)
    m = _output_tile(op)
    half = next((c for c in s.consumers(s[op]) if getattr(c.op, "tag", "") == "winograd_out1"), None)
    if m is None or half is None:
        return
    store = _blocked_store(s, half, [int(v) for v in op.attrs["out"]])
    if store is None or (handled is not None and id(store.op) in handled):
        return
    if store.attach == "inline":
        store.compute_root()
    schedule_winograd_store(s, store, m, parallel=bool(cfg["parallel"].val))
    if handled is not None:
        handled.add(id(store.op))


def _blocked_store(s: te.Schedule, half: te.Stage, shape: list[int]) -> te.Stage | None:
    """The stage that stores the convolution's output in its blocked shape ``shape``: from the
    output transform (the one reader of ``half``), along the epilogue (inlined stages of that
    shape read by one stage each) to the first stored stage — or to the last inlined stage of
    that shape when what follows has another shape (a layout transform back to NCHW) or several
    readers; the caller then stores that stage (``compute_root``). None when the transform's
    reader is not of that shape."""
    cons = s.consumers(half)
    if len(cons) != 1:
        return None
    cur = cons[0]

    def fits(st: te.Stage) -> bool:
        return (isinstance(st.op, te.ComputeOp) and not st.op.is_reduction
                and [extent(a) for a in st.op.axis] == shape)

    if not fits(cur):
        return None
    while cur.attach == "inline":
        nxt = s.consumers(cur)
        if len(nxt) != 1 or not fits(nxt[0]) or nxt[0].attach not in ("inline", "root"):
            return cur
        cur = nxt[0]
    return cur if cur.attach == "root" else None
