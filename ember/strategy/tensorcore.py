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

from dataclasses import dataclass

from .. import te
from ..errors import ScheduleError
from ..ir import expr as E
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
    As = s.cache_read(Ap, "shared", [Cp])
    Bs = s.cache_read(Bp, "shared", [Cp])
    Af = s.cache_read(As, "warp", [Cp])
    Bf = s.cache_read(Bs, "warp", [Cp])
    s[Cp].set_scope("warp")
    warps_m, warps_n = t.bm // t.wm, t.bn // t.wn

    # The output: block, warp, then (m x n) tiles stored from the accumulators.
    i, j = s[C].op.axis
    bi, ii = s[C].split(i, factor=t.bm)
    bj, jj = s[C].split(j, factor=t.bn)
    wi, ii = s[C].split(ii, factor=t.wm)
    wj, jj = s[C].split(jj, factor=t.wn)
    mi, ti = s[C].split(ii, factor=it.m)
    nj, tj = s[C].split(jj, factor=it.n)
    s[C].reorder(bi, bj, wi, wj, mi, nj, ti, tj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(wi, te.thread_axis("threadIdx.z"))
    s[C].bind(wj, te.thread_axis("threadIdx.y"))
    s[C].unroll(mi)
    s[C].unroll(nj)
    s[C].tensorize(ti, it)

    # The accumulators of one warp, over K in chunks of bk, steps of the instruction's k.
    s[Cp].compute_at(s[C], wj)
    ci, cj = s[Cp].op.axis
    (ck,) = s[Cp].op.reduce_axis
    ko, kr = s[Cp].split(ck, factor=t.bk)
    kt, kk = s[Cp].split(kr, factor=it.k)
    cmi, cti = s[Cp].split(ci, factor=it.m)
    cnj, ctj = s[Cp].split(cj, factor=it.n)
    s[Cp].reorder(ko, kt, cmi, cnj, cti, ctj, kk)
    if t.stages > 1 and tgt.kind == "cuda":  # AMD has no asynchronous copy here: stage synchronously
        s[Cp].pipeline(ko, t.stages)
    s[Cp].unroll(kt)
    s[Cp].unroll(cmi)
    s[Cp].unroll(cnj)
    s[Cp].tensorize(cti, it)

    # Fragments: per k step, the warp's rows of A and columns of B.
    for frag, rows_first in ((Af, True), (Bf, b_transposed)):
        s[frag].compute_at(s[Cp], kt)
        x, y = s[frag].op.axis
        # (row axis, tile of it): the m (or n) axis is split by the instruction's m (or n).
        if frag is Af:
            xo, xi = s[frag].split(x, factor=it.m)
            s[frag].reorder(xo, xi, y)
            s[frag].unroll(xo)
            s[frag].tensorize(xi, it)
        elif rows_first:  # B as N x K: rows are n
            xo, xi = s[frag].split(x, factor=it.n)
            s[frag].reorder(xo, xi, y)
            s[frag].unroll(xo)
            s[frag].tensorize(xi, it)
        else:  # B as K x N
            yo, yi = s[frag].split(y, factor=it.n)
            s[frag].reorder(yo, x, yi)
            s[frag].unroll(yo)
            s[frag].tensorize(x, it)

    # Shared staging: all threads copy the block's tiles, 16 bytes per thread and step.
    elem = max(1, it.input_type.bits // 8)
    vec = max(1, 16 // elem)
    for sh in (As, Bs):
        s[sh].compute_at(s[Cp], ko)
        x, y = s[sh].op.axis
        fused = s[sh].fuse(x, y)
        fo, fv = s[sh].split(fused, factor=vec)
        fo, tx = s[sh].split(fo, factor=it.warp)
        fo, ty = s[sh].split(fo, factor=warps_n)
        fo, tz = s[sh].split(fo, factor=warps_m)
        s[sh].bind(tz, te.thread_axis("threadIdx.z"))
        s[sh].bind(ty, te.thread_axis("threadIdx.y"))
        s[sh].bind(tx, te.thread_axis("threadIdx.x"))
        s[sh].vectorize(fv)
    s[As].storage_align(s[As].op.axis[0], t.bk, vec)
    inner_b = t.bk if b_transposed else t.bn
    s[Bs].storage_align(s[Bs].op.axis[0], inner_b, vec)
    return s, [A, B, C]
