"""Tensor-core GEMM schedules: ``C = A @ B`` on warp-level matrix instructions.

:func:`tensorcore_matmul` builds the tensor program and schedule of a matrix product for one
:class:`~ember.te.tensor_intrin.MatrixIntrinsic`:

* ``A`` (``M x K``) and ``B`` (``K x N``, or ``N x K`` with ``b_transposed``) are read through
  zero-padded views, so every tile is whole (no guard inside a tile, zeros past ``K``);
* a block computes ``BM x BN`` outputs with ``(BM / WM) x (BN / WN)`` warps (``threadIdx.z``,
  ``threadIdx.y``; ``threadIdx.x`` is the lane); per chunk of ``BK`` along ``K`` both operands
  are staged in shared memory (rows padded by 16 bytes, so ``ldmatrix`` is free of bank
  conflicts) by a software pipeline of ``stages`` slots (``cp.async`` copies issued
  ``stages - 1`` chunks ahead, :mod:`ember.lowering.pipeline`; NVIDIA only, AMD stages
  synchronously), each warp loads its fragments (``ldmatrix``) and issues
  ``(WM / m) x (WN / n)`` instructions per ``k`` step into accumulators held in registers;
* the result is stored from the registers (each lane its own elements), converted to the
  output type, with guards at the matrix edges.

Its knobs (:func:`tensorcore_space`) are the block and warp tiles and ``BK``; illegal points (more
than 1024 threads or the target's shared memory, warp tiles not a multiple of the instruction)
are rejected before anything is built.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import te
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.stmt import PrimFunc
from ..ir.visitor import Mutator, free_vars, post_order_visit, substitute
from ..lowering.wgmma import WGTile, check_target, wgmma_gemm_func
from ..target import Target
from ..te.tensor_intrin import MatrixIntrinsic, lookup
from .space import ConfigSpace


@dataclass(frozen=True)
class TCTile:
    """A tensor-core GEMM tiling: block ``bm x bn``, warp ``wm x wn``, reduction chunk ``bk``,
    ``stages`` shared-memory slots of the software pipeline (1: none)."""

    bm: int = 128
    bn: int = 128
    bk: int = 32
    wm: int = 64
    wn: int = 64
    stages: int = 3

    def check(self, intrin: MatrixIntrinsic, elem_bytes: int, smem_limit: int) -> str | None:
        """Why this tiling is illegal for ``intrin``, or None."""
        if self.bm % self.wm or self.bn % self.wn:
            return f"the block {self.bm} x {self.bn} is not a whole number of warp tiles {self.wm} x {self.wn}"
        if self.wm % intrin.m or self.wn % intrin.n or self.bk % intrin.k:
            return (f"the warp tile {self.wm} x {self.wn} x {self.bk} is not a multiple of the instruction's "
                    f"{intrin.m} x {intrin.n} x {intrin.k}")
        warps = (self.bm // self.wm) * (self.bn // self.wn)
        if warps * intrin.warp > 1024 or self.bn // self.wn > 64:
            return f"{warps} warps of {intrin.warp} lanes exceed a block's 1024 threads"
        pad = 16 // elem_bytes
        smem = (self.bm * (self.bk + pad) + self.bk * (self.bn + pad)) * elem_bytes * self.stages
        if not 1 <= self.stages <= 8:
            return f"{self.stages} pipeline stages (1 to 8)"
        if smem > smem_limit:
            return f"the staged tiles need {smem} bytes of shared memory, the limit is {smem_limit}"
        regs = (self.wm // intrin.m) * (self.wn // intrin.n) * intrin.c.per_lane
        if regs > 128:
            return f"{regs} accumulator registers per lane (at most 128)"
        return None


def default_tile(intrin: MatrixIntrinsic) -> TCTile:
    """The tiling :func:`tensorcore_matmul` uses when given none: 128 x 128 blocks of 64 x 64
    warp tiles; 32 x 32 warp tiles for RDNA3's WMMA, whose replicated operands take twice the
    registers (64 x 64 spills there)."""
    if intrin.kind == "rocm" and intrin.warp == 32:
        return TCTile(64, 64, 32, 32, 32, stages=1)
    if intrin.kind == "rocm":
        return TCTile(stages=1)
    return TCTile()


#: Blocks a model's tensor-core product should launch to fill the GPU (the H100 has 132
#: multiprocessors, the A100 108): the tiling is the largest that still gives this many.
MIN_TC_BLOCKS = 128
BLOCK_SIDES = (128, 64, 32, 16)


def tile_for_domain(acc: te.Tensor, intrin: MatrixIntrinsic, min_blocks: int = MIN_TC_BLOCKS) -> TCTile:
    """The tiling of an accumulator whose domain is whole tiles (``ops.nn.tensorcore_product``
    pads rows and columns to powers of two from 16 to 128, ``k`` to 32): of the blocks of at most
    128 x 128 that divide it, the largest (squarest on a tie) that still launches ``min_blocks``
    blocks, counting the leading (batch) axes; when none does, the one that launches the most
    (a late ResNet layer at batch 1, 512 x 49 outputs, gets 128 blocks of 16 x 16 instead of 4 of
    128 x 128). Warp tiles are half the block along each side (four warps), within the
    instruction's shape and at most 64 x 64 (32 x 32 for RDNA3's WMMA); chunks of 64 along ``k``
    where they divide (else 32)."""
    from ..arith import simplify

    *lead, mp, np_ = (int(simplify(x).value) for x in acc.shape)  # type: ignore[union-attr]
    kp = int(simplify(acc.op.reduce_axis[0].dom.extent).value)  # type: ignore[union-attr]
    batch = 1
    for x in lead:
        batch *= x
    cands = [(bm, bn) for bm in BLOCK_SIDES if mp % bm == 0 for bn in BLOCK_SIDES if np_ % bn == 0]
    if not cands:
        raise ScheduleError(f"the accumulator's domain {mp} x {np_} is not whole 16 x 16 tiles")

    def blocks(c: tuple[int, int]) -> int:
        return batch * (mp // c[0]) * (np_ // c[1])

    enough = [c for c in cands if blocks(c) >= min_blocks]
    if enough:
        bm, bn = max(enough, key=lambda c: (c[0] * c[1], -abs(c[0] - c[1])))
    else:
        bm, bn = max(cands, key=lambda c: (blocks(c), -abs(c[0] - c[1])))
    base = default_tile(intrin)
    wm = max(intrin.m, min(base.wm, bm // 2))
    wn = max(intrin.n, min(base.wn, bn // 2))
    return TCTile(bm, bn, 64 if kp % 64 == 0 else 32, wm, wn, base.stages)


def model_tensorcore_space(acc: te.Tensor, intrin: MatrixIntrinsic, target: Target) -> ConfigSpace:
    """The knob space of a model's tensor-core accumulator ``acc`` (domain padded to whole tiles,
    :func:`ember.ops.nn.tensorcore_accumulator`): block ``bm`` x ``bn`` (sides of
    :data:`BLOCK_SIDES` dividing the padded rows and columns), warp ``wm`` x ``wn``, chunk ``bk``
    (dividing the padded reduction) and pipeline ``stages``. Its default point is
    :func:`tile_for_domain`'s tiling; points over the target's shared memory or registers, or
    with warp tiles that do not divide the block or fit the instruction, are rejected."""
    from ..arith import simplify

    *_, mp, np_ = (int(simplify(x).value) for x in acc.shape)  # type: ignore[union-attr]
    kp = int(simplify(acc.op.reduce_axis[0].dom.extent).value)  # type: ignore[union-attr]
    base = tile_for_domain(acc, intrin)
    space = ConfigSpace()
    space.define_knob("bm", [b for b in BLOCK_SIDES if mp % b == 0], default=base.bm)
    space.define_knob("bn", [b for b in BLOCK_SIDES if np_ % b == 0], default=base.bn)
    space.define_knob("wm", sorted({16, 32, 64, base.wm}), default=base.wm)
    space.define_knob("wn", sorted({8, 16, 32, 64, base.wn}), default=base.wn)
    space.define_knob("bk", sorted({b for b in (32, 64) if kp % b == 0} | {base.bk}), default=base.bk)
    space.define_knob("stages", sorted({1, 2, 3, 4} | {base.stages}), default=base.stages)
    elem = max(1, intrin.input_type.bits // 8)
    limit = target.max_shared_memory_per_block_optin

    def legal(cfg: object) -> str | None:
        t = tile_of(cfg)
        if t.wm > t.bm or t.wn > t.bn:
            return f"the warp tile {t.wm} x {t.wn} exceeds the block {t.bm} x {t.bn}"
        if t.stages > 1 and target.kind != "cuda":
            return "pipelined staging (cp.async) exists on NVIDIA only: 1 stage"
        return t.check(intrin, elem, limit)

    space.add_check(legal)
    return space


#: Split-K of tensor-core products (:func:`tc_split_k`): only a reduction of at least
#: TC_SPLIT_MIN_K (padded) is split, into at most TC_MAX_SPLIT parts of at least TC_PART_CHUNKS
#: chunks of 64 each.
TC_SPLIT_MIN_K = 2048
TC_MAX_SPLIT = 24
TC_PART_CHUNKS = 4
#: padded rows up to which a tensor-core product counts as skinny (memory-bound) in :func:`tc_split_k`
SKINNY_ROWS = 32


def tc_split_k(batch: int, mp: int, np_: int, kp: int, min_blocks: int = MIN_TC_BLOCKS) -> int:
    """Parts to split a tensor-core product's padded reduction ``kp`` into: 1 unless 64 x 64
    blocks over its ``batch`` x ``mp`` x ``np_`` outputs fall short of ``min_blocks`` and ``kp``
    is at least :data:`TC_SPLIT_MIN_K`; then the fewest parts (dividing ``kp / 64``, each at
    least :data:`TC_PART_CHUNKS` chunks) that launch ``min_blocks`` blocks of 64 x 64, or the
    most such parts. BERT-base's 128 x 768 x 3072 product gets 6 parts (144 blocks instead of
    192 blocks of 16 x 32 each looping over all of K); a late ResNet layer at batch 1 (512 x 49
    outputs, K = 4608) 18. A product of at most :data:`SKINNY_ROWS` padded rows reads its
    weights once for few outputs (memory-bound): it aims at twice ``min_blocks``, for more loads in
    flight (16 x 4096 x 4096 bf16 on the H200: 4 parts, 9.9 us of kernels against 11.6 with 2 and
    10.8 with 8; ``benchmarks/results/tensorcore_bench_h200.json``, ``model_path``)."""
    if mp <= SKINNY_ROWS:
        min_blocks *= 2
    blocks = batch * max(1, mp // 64) * max(1, np_ // 64)
    if blocks >= min_blocks or kp < TC_SPLIT_MIN_K or kp % 64:
        return 1
    return fewest_parts(blocks, kp // 64, TC_PART_CHUNKS, TC_MAX_SPLIT, min_blocks)


def fewest_parts(blocks: int, units: int, min_units: int, max_parts: int, min_blocks: int) -> int:
    """Parts to split a reduction of ``units`` steps into so that ``blocks`` output tiles become
    ``min_blocks`` or more: the fewest divisors of ``units`` (up to ``max_parts``) that get there
    with at least ``min_units`` steps per part, else the most that keep ``min_units`` (1: none)."""
    best = 1
    for parts in range(2, min(max_parts, units) + 1):
        if units % parts:
            continue
        if units // parts < min_units:
            break
        best = parts
        if blocks * parts >= min_blocks:
            break
    return best


def _ceil(a: int, b: int) -> int:
    return -(-a // b) * b


def tensorcore_space(intrin: MatrixIntrinsic | str, target: Target | str = "cuda") -> ConfigSpace:
    """The knob space of :func:`tensorcore_matmul` (block, warp tiles, ``bk``); its default point is
    :class:`TCTile`'s default."""
    it = lookup(intrin)
    tgt = Target(target) if isinstance(target, str) else target
    space = ConfigSpace()
    space.define_knob("bm", (32, 64, 128, 256), default=128)
    space.define_knob("bn", (32, 64, 128, 256), default=128)
    space.define_knob("bk", (16, 32, 64), default=32)
    space.define_knob("wm", (16, 32, 64, 128), default=64)
    space.define_knob("wn", (16, 32, 64, 128), default=64)
    space.define_knob("stages", (1, 2, 3, 4), default=3)
    elem = max(1, it.input_type.bits // 8)
    limit = tgt.max_shared_memory_per_block_optin

    def legal(cfg: object) -> str | None:
        return tile_of(cfg).check(it, elem, limit)

    space.add_check(legal)
    return space


def tile_of(cfg: object) -> TCTile:
    """The :class:`TCTile` of a configuration of :func:`tensorcore_space`."""
    return TCTile(*(int(cfg[k].val) for k in ("bm", "bn", "bk", "wm", "wn", "stages")))  # type: ignore[index]


def tensorcore_matmul(
    M: int,
    N: int,
    K: int,
    intrin: MatrixIntrinsic | str = "mma.m16n8k16.f16",
    out_dtype: str | None = None,
    tile: TCTile | None = None,
    b_transposed: bool = False,
    target: Target | str = "cuda",
) -> tuple[te.Schedule, list[te.Tensor]]:
    """Schedule and arguments ``[A, B, C]`` of ``C = A @ B`` (``B`` given as ``N x K`` when
    ``b_transposed``) on ``intrin``; ``C`` is ``out_dtype`` (default: the accumulator type).
    Any ``M``, ``N``, ``K`` works (edges are padded with zeros and guarded). Raises
    :class:`~ember.errors.ScheduleError` for an illegal ``tile`` or an instruction ``target``
    lacks."""
    it = lookup(intrin)
    tgt = Target(target) if isinstance(target, str) else target
    t = tile or default_tile(it)
    why = t.check(it, max(1, it.input_type.bits // 8), tgt.max_shared_memory_per_block_optin) or it.unavailable(tgt)
    if why:
        raise ScheduleError(f"tensorcore_matmul with {it.name}: {why}")
    dt, acc = it.in_dtype, it.acc_dtype
    out_dtype = out_dtype or acc
    Mp, Np, Kp = _ceil(M, t.bm), _ceil(N, t.bn), _ceil(K, t.bk)
    A = te.placeholder((M, K), dt, name="A")
    B = te.placeholder((N, K) if b_transposed else (K, N), dt, name="B")
    zero = E.const(0, dt)
    Ap = te.compute((Mp, Kp), lambda i, k: E.select(E.logical_and(i < M, k < K), A[i, k], zero), name="Ap")
    if b_transposed:
        Bp = te.compute((Np, Kp), lambda j, k: E.select(E.logical_and(j < N, k < K), B[j, k], zero), name="Bp")
    else:
        Bp = te.compute((Kp, Np), lambda k, j: E.select(E.logical_and(k < K, j < N), B[k, j], zero), name="Bp")
    k = te.reduce_axis((0, Kp), name="k")

    def prod(i: E.PrimExpr, j: E.PrimExpr) -> E.PrimExpr:
        b = Bp[j, k] if b_transposed else Bp[k, j]
        if dt == acc:
            return te.sum(Ap[i, k] * b, axis=k)
        return te.sum(E.cast(acc, Ap[i, k]) * E.cast(acc, b), axis=k)

    Cp = te.compute((Mp, Np), prod, name="Cacc")
    C = te.compute((M, N), lambda i, j: E.cast(out_dtype, Cp[i, j]) if out_dtype != acc else Cp[i, j], name="C")
    s = te.create_schedule(C.op)
    s[Ap].compute_inline()
    s[Bp].compute_inline()
    schedule_tensorcore(s, C, Cp, it, t, tgt)
    return s, [A, B, C]


class _Inlined(Mutator):
    """An expression with the reads of inlined stages replaced by their bodies."""

    def __init__(self, s: te.Schedule):
        self.s = s

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        e = self.generic_mutate(e)
        st = self.s[e.producer]
        if st.attach != "inline" or not isinstance(st.op, te.ComputeOp):
            return e
        body = st.op.body[e.producer.value_index]
        return self.visit(substitute(body, {iv.var: ix for iv, ix in zip(st.op.axis, e.indices)}))


def reads_as_matrix(s: te.Schedule, out: te.Tensor, acc: te.Tensor) -> bool:
    """True when ``out``'s stage reads ``acc`` with one of its axes for the rows and others for
    the columns (what :func:`schedule_tensorcore` needs; a reshape that mixes them does not)."""
    try:
        _axes_reading(s, s[out].op, acc)
    except ScheduleError:
        return False
    return True


def _axes_reading(s: te.Schedule, out_op: te.ComputeOp, acc: te.Tensor) -> tuple[list, te.IterVar | None, list]:
    """The output's axes that index the accumulator's row (``i``), its column (``j`` parts, e.g.
    ``oh``, ``ow`` of a convolution) and the others (batch)."""
    reads: list[E.ProducerLoad] = []
    for b in (_Inlined(s).visit(x) for x in out_op.body):
        post_order_visit(b, lambda n: reads.append(n) if isinstance(n, E.ProducerLoad) and n.producer.op is acc.op
                         else None)
    if not reads:
        raise ScheduleError(f"stage {out_op.name} does not read the accumulator {acc.name}")
    idx = reads[0].indices
    row_vars, col_vars = set(free_vars(idx[-2])), set(free_vars(idx[-1]))
    rows = [a for a in out_op.axis if a.var in row_vars]
    cols = [a for a in out_op.axis if a.var in col_vars]
    batch = [a for a in out_op.axis if a not in rows and a not in cols]
    if len(rows) != 1 or not cols or set(map(id, rows)) & set(map(id, cols)):
        raise ScheduleError(f"stage {out_op.name} must read {acc.name} with one axis for its rows and others for "
                            "its columns")
    return batch, rows[0], cols


def schedule_tensorcore(s: te.Schedule, out: te.Tensor, acc: te.Tensor, intrin: MatrixIntrinsic,
                        t: TCTile, target: Target) -> None:
    """Schedule ``out`` (its stage reads the reduction ``acc = sum(A[.., i, k] * B[.., k, j])``,
    possibly through an inlined epilogue) on ``intrin`` with tiling ``t`` (see the module doc).
    ``acc``'s domain must be whole tiles (rows, columns, ``k`` multiples of ``bm``, ``bn``,
    ``bk``); its operands are read through shared memory (zero outside their domains), the
    output's axes beyond the row and the columns go to ``blockIdx.z``."""
    it = intrin
    Cp, C = acc, out
    red = s[Cp].op
    assert isinstance(red, te.ComputeOp) and red.is_reduction

    loads: list[E.ProducerLoad] = []
    post_order_visit(red.body[0], lambda n: loads.append(n) if isinstance(n, E.ProducerLoad) else None)
    operands = list(dict.fromkeys(ld.producer for ld in loads))
    if len(operands) != 2:
        raise ScheduleError(f"the tensor-core schedule needs a product of two tensors in {red.name}")
    Ap, Bp = operands
    As = s.cache_read(Ap, "shared", [Cp])
    Bs = s.cache_read(Bp, "shared", [Cp])
    Af = s.cache_read(As, "warp", [Cp])
    Bf = s.cache_read(Bs, "warp", [Cp])
    s[Cp].set_scope("warp")
    warps_m, warps_n = t.bm // t.wm, t.bn // t.wn

    # The output: block, warp, then (m x n) tiles stored from the accumulators.
    out_op = s[C].op
    batch, i, cols = _axes_reading(s, out_op, Cp)
    j = s[C].fuse(*cols) if len(cols) > 1 else cols[0]
    bi, ii = s[C].split(i, factor=t.bm)
    bj, jj = s[C].split(j, factor=t.bn)
    wi, ii = s[C].split(ii, factor=t.wm)
    wj, jj = s[C].split(jj, factor=t.wn)
    mi, ti = s[C].split(ii, factor=it.m)
    nj, tj = s[C].split(jj, factor=it.n)
    bz = s[C].fuse(*batch) if len(batch) > 1 else (batch[0] if batch else None)
    order = ([bz] if bz is not None else []) + [bi, bj, wi, wj, mi, nj, ti, tj]
    s[C].reorder(*order)
    if bz is not None:
        s[C].bind(bz, te.thread_axis("blockIdx.z"))
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(wi, te.thread_axis("threadIdx.z"))
    s[C].bind(wj, te.thread_axis("threadIdx.y"))
    s[C].unroll(mi)
    s[C].unroll(nj)
    s[C].tensorize(ti, it)

    # The accumulators of one warp, over K in chunks of bk, steps of the instruction's k.
    s[Cp].compute_at(s[C], wj)
    ci, cj = s[Cp].op.axis[-2:]
    (ck,) = s[Cp].op.reduce_axis
    ko, kr = s[Cp].split(ck, factor=t.bk)
    kt, kk = s[Cp].split(kr, factor=it.k)
    cmi, cti = s[Cp].split(ci, factor=it.m)
    cnj, ctj = s[Cp].split(cj, factor=it.n)
    lead = list(s[Cp].op.axis[:-2])
    s[Cp].reorder(*lead, ko, kt, cmi, cnj, cti, ctj, kk)
    if t.stages > 1 and target.kind == "cuda":  # AMD has no asynchronous copy here: stage synchronously
        s[Cp].pipeline(ko, t.stages)
    s[Cp].unroll(kt)
    s[Cp].unroll(cmi)
    s[Cp].unroll(cnj)
    s[Cp].tensorize(cti, it)

    # Fragments: per k step, the warp's rows of A and columns of B (either operand may be stored
    # with k first or last: the reduction's index tells which of its axes is k).
    kvar = ck.var
    for frag, src, tile_rows in ((Af, Ap, it.m), (Bf, Bp, it.n)):
        s[frag].compute_at(s[Cp], kt)
        ld = next(x for x in loads if x.producer is src)
        axes = list(s[frag].op.axis)
        kdim = next(d for d, ix in enumerate(ld.indices) if kvar in free_vars(ix))
        x_k = axes[kdim]
        other = [a for d, a in enumerate(axes) if d != kdim]
        mn = other[-1]  # the row (A) or column (B) axis; leading ones are batch (extent 1 here)
        mo, mnt = s[frag].split(mn, factor=tile_rows)
        s[frag].reorder(*other[:-1], mo, *((mnt, x_k) if kdim > axes.index(mn) else (x_k, mnt)))
        s[frag].unroll(mo)
        first = mnt if kdim > axes.index(mn) else x_k
        s[frag].tensorize(first, it)

    # Shared staging: all threads copy the block's tiles, 16 bytes per thread and step.
    elem = max(1, it.input_type.bits // 8)
    vec = max(1, 16 // elem)
    for sh in (As, Bs):
        s[sh].compute_at(s[Cp], ko)
        axes = list(s[sh].op.axis)
        fused = s[sh].fuse(*axes) if len(axes) > 1 else axes[0]
        fo, fv = s[sh].split(fused, factor=vec)
        fo, tx = s[sh].split(fo, factor=it.warp)
        fo, ty = s[sh].split(fo, factor=warps_n)
        fo, tz = s[sh].split(fo, factor=warps_m)
        s[sh].bind(tz, te.thread_axis("threadIdx.z"))
        s[sh].bind(ty, te.thread_axis("threadIdx.y"))
        s[sh].bind(tx, te.thread_axis("threadIdx.x"))
        s[sh].vectorize(fv)
        # The staged rows are whole chunks of k (bk) or of a block's columns or rows.
        ld = next(x for x in loads if x.producer is (Ap if sh is As else Bp))
        k_last = kvar in free_vars(ld.indices[-1])
        row = t.bk if k_last else (t.bm if sh is As else t.bn)
        s[sh].storage_align(s[sh].op.axis[-2], row, vec)


def wgmma_matmul(
    M: int,
    N: int,
    K: int,
    in_dtype: str = "float16",
    out_dtype: str | None = None,
    tile: WGTile | None = None,
    b_transposed: bool = False,
    target: Target | str = "cuda -arch=sm_90",
    name: str = "wgmma_gemm",
    bias: bool = False,
    relu: bool = False,
) -> PrimFunc:
    """The lowered function ``name(A, B, C)`` of ``C = A @ B`` on Hopper's ``wgmma.mma_async``
    (:mod:`ember.lowering.wgmma`; build it with ``ember.build(func, target=...)``): float16 or
    bfloat16 inputs, float32 accumulation, ``C`` of ``out_dtype`` (default float32); ``B`` is
    ``K x N`` (``N x K`` with ``b_transposed``). Any ``M``; ``K`` and ``N`` multiples of 8.
    Raises :class:`~ember.errors.ScheduleError` on a target other than sm_90/sm_90a (naming the
    ``mma.sync`` fallback), for other types or sizes, or an illegal ``tile``. ``bias`` (an ``N``
    vector of ``C``'s type, then the function is ``name(A, B, bias, C)``) and ``relu`` are fused
    into the store."""
    tgt = Target(target) if isinstance(target, str) else target
    if tgt.kind != "cuda":
        raise ScheduleError(f"wgmma.mma_async is an NVIDIA Hopper instruction, the target is {tgt}")
    check_target(tgt.mcpu)
    return wgmma_gemm_func(M, N, K, in_dtype, out_dtype, tile, b_transposed, name, str(tgt),
                           tgt.max_shared_memory_per_block_optin, bias, relu)


#: split-K products of the TMA kernel in at most this many parts are summed by the block that
#: finishes a tile's last part (``WGTile.last_block_sums``: one launch) instead of by a second
#: kernel. 1, so never by default: measured on the H200 (``benchmarks/results/
#: split_k_last_block_ab_h200.json``), BERT-base fp16 ran 0.80-0.81 ms with two kernels and 0.90
#: ms with the last block summing its products of 3 parts. The serial sum (one warpgroup reads
#: every part of its tile after the ticket's fence) costs more than the second kernel's launch
#: inside a CUDA graph, where the gap between kernels is about a microsecond.
SPLIT_K_LAST_BLOCK_PARTS = 1


def default_wgmma_tile(M: int, N: int, sms: int = 132, K: int = 0) -> WGTile:
    """The wgmma tiling :func:`tensorcore_gemm` picks: the warp-specialised persistent kernel with
    a TMA producer (``ws=2``), two consumer warpgroups, 4 stages, tiles walked in groups of 16 rows
    of blocks; 128 x 256 blocks in clusters of two sharing B by multicast when they give every
    multiprocessor a tile (the fastest measured at 4096^3 on the H200: 601-627 TFLOP/s fp16, the
    clusters 1-1.7 % above plain blocks in eight paired runs, ``docs/gpu.md``); for at most 64
    rows whose 64 x 128 tiles leave half the multiprocessors idle (a skinny product, bandwidth-bound)
    one consumer warpgroup, 8 stages and K split into parts (at least 4 chunks each) until the
    tiles times the parts fill the multiprocessors, summed by the block that finishes a tile's last
    part when there are few (:data:`SPLIT_K_LAST_BLOCK_PARTS`); else 128 x 128 plain blocks (twice
    the tiles; not measured apart)."""
    if -(-M // 128) * -(-N // 256) >= sms:
        return WGTile(2, 256, 4, 1, 16, ws=2, sms=sms, cluster=2 if sms >= 2 else 1)
    nt = -(-N // 128)
    if M <= 64 and 2 * nt < sms:
        parts = max(1, min(-(-K // 64) // 4, sms // nt))
        return WGTile(1, 128, 8, 1, 0, ws=2, sms=sms, split_k=parts,
                      last_block_sums=1 < parts <= SPLIT_K_LAST_BLOCK_PARTS)
    return WGTile(2, 128, 4, 1, 16, ws=2, sms=sms)


def target_sm_count(target: Target) -> int:
    """Multiprocessors of the GPU ``target`` names, for the persistent wgmma kernel (one block per
    multiprocessor): this machine's GPU's count when the target is this GPU, else an H100 / H200
    SXM's 132."""
    from ..runtime.cuda_driver import detected_sm_count

    return detected_sm_count(target.mcpu) or 132


def model_wgmma_tile(M: int, N: int, K: int, sms: int = 132) -> WGTile:
    """The wgmma tiling of a model's product (:mod:`ember.model.direct_kernels`): that of
    :func:`default_wgmma_tile`, except that a product whose 128 x 128 tiles would leave more than
    half the multiprocessors idle (BERT-base's 128-row products: 6 to 24 tiles) also splits K, into
    at most ``sms / tiles`` parts of at least 4 chunks each."""
    tile = default_wgmma_tile(M, N, sms, K)
    if tile.split_k > 1 or tile.cluster > 1:
        return tile
    tiles = -(-M // tile.bm) * -(-N // tile.bn)
    parts = max(1, min(-(-K // 64) // 4, sms // tiles)) if 2 * tiles <= sms else 1
    return (dataclasses.replace(tile, split_k=parts, last_block_sums=parts <= SPLIT_K_LAST_BLOCK_PARTS) if parts > 1
            else tile)


def wgmma_applies(M: int, N: int, K: int, in_dtype: str, b_transposed: bool, target: Target) -> str | None:
    """Why the wgmma path does not apply to this GEMM on ``target`` (None when it does)."""
    if target.kind != "cuda" or target.mcpu not in ("sm_90", "sm_90a"):
        return f"the target {target} is not sm_90"
    if in_dtype == "float32":
        if not b_transposed:
            return "wgmma reads TF32 B only as N x K (K-major)"
        if K % 4:
            return "K must be a multiple of 4 (16-byte TMA rows)"
        return None
    if in_dtype not in ("float16", "bfloat16"):
        return f"the inputs are {in_dtype}, wgmma here multiplies float16, bfloat16 or float32 (TF32)"
    if K % 8 or (N % 8 and not b_transposed):
        return "K (and N, when B is K x N) must be multiples of 8"
    return None


def tensorcore_gemm(
    M: int,
    N: int,
    K: int,
    in_dtype: str = "float16",
    out_dtype: str | None = None,
    b_transposed: bool = False,
    target: Target | str = "cuda",
    name: str = "tc_gemm",
) -> PrimFunc:
    """The lowered function ``name(A, B, C)`` of ``C = A @ B`` on the best tensor-core path of
    ``target`` (``"cuda"`` without ``-arch`` means this machine's GPU, sm_80 without one): the
    Hopper ``wgmma`` kernel (:func:`wgmma_matmul` with :func:`default_wgmma_tile`, TMA loads whose
    tensor maps the host encodes at each call) on sm_90 when :func:`wgmma_applies`, else
    ``mma.sync`` (:func:`tensorcore_matmul`, default tiling). Inputs float16, bfloat16 or float32
    (multiplied as TF32: 10 mantissa bits), float32 accumulation, ``C`` of ``out_dtype`` (default
    float32). Raises :class:`~ember.errors.ScheduleError` for other input types."""
    from ..backends import backend_for
    from ..lowering.api import lower

    tgt = backend_for(target).resolve(Target(target) if isinstance(target, str) else target)
    intrins = {"float16": "mma.m16n8k16.f16", "bfloat16": "mma.m16n8k16.bf16", "float32": "mma.m16n8k8.tf32"}
    if in_dtype not in intrins:
        raise ScheduleError(f"tensorcore_gemm multiplies float16, bfloat16 or float32 (as TF32), not {in_dtype}")
    if wgmma_applies(M, N, K, in_dtype, b_transposed, tgt) is None:
        sms = target_sm_count(tgt)
        return wgmma_matmul(M, N, K, in_dtype, out_dtype, default_wgmma_tile(M, N, sms, K), b_transposed, tgt, name)
    s, args = tensorcore_matmul(M, N, K, intrins[in_dtype], out_dtype or "float32", b_transposed=b_transposed,
                                target=tgt)
    return lower(s, args, name, target=tgt)
