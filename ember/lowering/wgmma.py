"""Hopper (sm_90a) GEMM kernels on ``wgmma.mma_async``: ``C = A @ B`` in fp16/bf16 with fp32
accumulation, built directly as loop IR.

The kernel (:func:`wgmma_gemm_func`):

* a block of ``128 * warpgroups`` threads computes a ``bm x bn`` tile of ``C`` (``bm = 64 *
  warpgroups``); warpgroup ``g`` owns rows ``64 g .. 64 g + 63`` and keeps its ``64 x bn``
  accumulators in registers (``bn / 2`` floats per thread, laid out as :func:`acc_coord` says);
* along ``K`` in chunks of 64, both operands are staged in shared memory by ``cp.async`` (16
  bytes per thread and copy, zero-filled past the matrix edges), ``stages`` slots deep, in the
  128-byte-swizzled layouts the ``wgmma`` descriptors name (:func:`a_offset`, :func:`b_offset`,
  :func:`smem_descriptor`): ``A`` (``M x K``, row-major) K-major; ``B`` either ``K x N``
  row-major (N-major, ``imm-trans-b = 1``) or ``N x K`` (``b_transposed``; K-major);
* per chunk each warpgroup issues four ``m64nNk16`` instructions (one per 16 of ``K``), commits
  them as one group and waits until at most ``inflight`` groups are pending; a block barrier
  before each refill keeps a slot from being overwritten while a warpgroup still reads it, and
  ``fence.proxy.async`` makes the ``cp.async`` writes visible to the tensor cores;
* the epilogue converts the accumulators to the output type and stores them with guards.

Facts used (PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
Instructions"): the shared-memory matrix descriptor holds the start address ``>> 4`` in bits
0-13, the leading-dimension byte offset ``>> 4`` in bits 16-29, the stride-dimension byte offset
``>> 4`` in bits 32-45, the base offset in bits 49-51 and the swizzle mode in bits 62-63 (1 =
128-byte swizzle); with 128-byte swizzling the 16-byte chunk ``c`` of row ``r`` of an 8-row
atom (1024 bytes, aligned to 1024) lives at chunk ``c xor (r mod 8)``; for K-major operands the
stride offset is the distance between 8-row groups (the leading offset is unused), for MN-major
ones the leading offset is the distance between 64-element column blocks and the stride offset
the distance between groups of 8 along K. The instruction needs the ``sm_90a`` target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ScheduleError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.buffer import Buffer
from ..ir.dtypes import INT32
from ..ir.dtypes import dtype as as_dtype

#: swizzle-mode codes of the descriptor's bits 62-63
SWIZZLE_NONE, SWIZZLE_128B, SWIZZLE_64B, SWIZZLE_32B = 0, 1, 2, 3
#: bytes of one 128-byte-swizzle atom (8 rows of 128 bytes); its start must be aligned to this
ATOM = 1024
BK = 64  # elements of K per staged chunk: one 128-byte row of 16-bit elements
#: bytes of one epilogue sub-tile a consumer warpgroup stages for a TMA store: 64 rows of 128 bytes
OUT_SUBTILE_BYTES = 64 * 128
#: shared memory per block on sm_90 (opt-in maximum, bytes)
SM90_SMEM = 227 * 1024
FALLBACK = "use the mma.sync path (tensorcore_matmul with an 'mma.*' intrinsic), which runs on sm_80 and newer"


@dataclass(frozen=True)
class WGTile:
    """A wgmma GEMM tiling: ``warpgroups`` (1 or 2) of 64 rows each, ``bn`` columns (64, 128 or
    256: the instruction's N), ``stages`` shared-memory slots, ``inflight`` wgmma groups left
    pending per chunk (0 or 1); ``group_m`` > 0 launches the blocks in groups of that many block
    rows, column by column (blocks running together share tiles of A and B in L2), 0 as a plain
    2-D grid."""

    warpgroups: int = 2
    bn: int = 128
    stages: int = 4
    inflight: int = 1
    group_m: int = 0
    #: 1: the warp-specialised persistent kernel (:mod:`ember.lowering.wgmma_ws`: a producer
    #: warpgroup copying, ``warpgroups`` consumer warpgroups multiplying, mbarriers between them);
    #: 2: the same with one producer thread issuing TMA bulk copies (the host encodes the tensor
    #: maps of A and B at each call, cached by address: :class:`ember.lowering.gpu.TensorMapSpec`)
    ws: int = 0
    #: blocks the persistent (``ws``) kernel launches at most: the GPU's multiprocessors
    sms: int = 132
    #: 2 (with ``ws=2``): blocks run as clusters of two that compute vertically adjacent tiles,
    #: each loading its own A tile and half of the shared B tile, multicast into both blocks'
    #: shared memory (half the L2 -> SM traffic for B); 1: plain blocks
    cluster: int = 1
    #: bytes of K per staged row (with ``ws=2``): 128 (the 128-byte swizzle; 64 fp16 elements per
    #: chunk) or 64 (the 64-byte swizzle; chunks of half the K, so twice the slots in the same
    #: shared memory and a slot refilled sooner: more bytes in flight per multiprocessor)
    row_bytes: int = 128
    #: > 1 (with ``ws=2``, plain blocks): K is split into this many parts computed by different
    #: blocks into a float32 workspace, summed (with the bias and ReLU) by a second kernel or, with
    #: ``last_block_sums``, by the block that finishes a tile's last part; for products too short
    #: to give every multiprocessor a tile (a skinny ``16 x N x K``)
    split_k: int = 1
    #: with ``split_k`` > 1: no second kernel; each block stores its part, takes a ticket of its
    #: tile (a zero-initialised global counter, ``atom.add`` after a GPU-scope fence), and the block
    #: that takes the last ticket sums the parts (with the bias and ReLU) into ``C`` and resets the
    #: counter (the "serial split-K" / stream-K fix-up: one launch instead of two)
    last_block_sums: bool = False

    @property
    def bm(self) -> int:
        """Rows of ``C`` per block."""
        return 64 * self.warpgroups

    @property
    def threads(self) -> int:
        """Threads per block (with ``ws``, the producer warpgroup's 128 more)."""
        return 128 * (self.warpgroups + (1 if self.ws else 0))

    def out_buffers(self) -> int:
        """Staging buffers per consumer warpgroup of the TMA-store epilogue (the TMA kernel without
        split-K; :mod:`ember.lowering.wgmma_ws`), each :data:`OUT_SUBTILE_BYTES`: two (a sub-tile is
        written while the one before is stored) when they fit next to the slots in sm_90's shared
        memory, else one, else none (the accumulators are stored directly, as by the other kernels)."""
        if self.ws != 2 or self.split_k != 1:
            return 0
        staged = (self.bm + self.bn) * self.row_bytes * self.stages + 2 * ATOM
        return next((n for n in (2, 1) if staged + n * self.warpgroups * OUT_SUBTILE_BYTES <= SM90_SMEM), 0)

    def smem_bytes(self) -> int:
        """Shared memory the staged slots take (plus one atom for aligning the base) and the
        epilogue's staging buffers (plus one atom)."""
        out = self.out_buffers() * self.warpgroups * OUT_SUBTILE_BYTES
        return (self.bm + self.bn) * self.row_bytes * self.stages + ATOM + (out + ATOM if out else 0)

    def check(self, smem_limit: int) -> str | None:
        """Why this tiling is illegal, or None."""
        if self.warpgroups not in (1, 2):
            return f"{self.warpgroups} warpgroups (1 or 2)"
        if self.bn not in (64, 128, 256):
            return f"bn={self.bn} (64, 128 or 256)"
        most = 16 if self.ws == 2 else 8
        if self.inflight not in (0, 1) or not self.inflight + 2 <= self.stages <= most:
            return f"{self.stages} stages with {self.inflight} groups in flight (needs 2 + inflight to {most} stages)"
        if self.split_k < 1 or (self.split_k > 1 and (self.ws != 2 or self.cluster != 1)):
            return f"split_k={self.split_k} (1, or parts of K with the TMA kernel ws=2 in plain blocks)"
        if self.last_block_sums and self.split_k == 1:
            return "last_block_sums needs split_k > 1 (parts of K to sum)"
        if self.row_bytes not in (64, 128) or (self.row_bytes == 64 and self.ws != 2):
            return f"row_bytes={self.row_bytes} (128, or 64 with the TMA kernel ws=2)"
        if self.ws not in (0, 1, 2) or self.sms < 1:
            return f"ws={self.ws}, sms={self.sms} (ws 0, 1 or 2, at least one multiprocessor)"
        if self.ws and self.inflight != 1:
            return "the warp-specialised kernel keeps one wgmma group in flight (inflight=1)"
        if self.cluster not in (1, 2) or (self.cluster == 2 and (self.ws != 2 or self.bn < 128 or self.sms < 2)):
            return (f"cluster={self.cluster} (1, or 2 with the TMA kernel ws=2, bn >= 128 and at least two "
                    "multiprocessors)")
        if self.group_m < 0:
            return f"group_m={self.group_m} (0: a 2-D grid, or a positive number of block rows)"
        if self.smem_bytes() > smem_limit:
            return f"the staged tiles need {self.smem_bytes()} bytes of shared memory, the limit is {smem_limit}"
        return None


# -- layouts (pure functions, unit-tested) ----------------------------------------------------------------
def smem_descriptor(addr: int, lbo: int, sbo: int, swizzle: int = SWIZZLE_128B, base_offset: int = 0) -> int:
    """The 64-bit wgmma shared-memory matrix descriptor of a matrix at shared address ``addr``
    (bytes, 16-aligned) with leading/stride byte offsets ``lbo``/``sbo`` (multiples of 16)."""
    if addr % 16 or lbo % 16 or sbo % 16:
        raise ValueError("descriptor addresses and offsets are multiples of 16 bytes")
    return (((addr & 0x3FFFF) >> 4) | ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32
            | (base_offset & 7) << 49 | (swizzle & 3) << 62)


def xor3(x: E.PrimExpr | int, y: E.PrimExpr | int) -> E.PrimExpr | int:
    """``x xor y`` for ``0 <= x, y < 8``, written with ``//``, ``%``, ``+``, ``*`` (the loop IR has
    no bitwise operators); works on ints and on expressions."""
    out: E.PrimExpr | int = 0
    for bit in (1, 2, 4):
        out = out + ((x // bit + y // bit) % 2) * bit  # type: ignore[operator]
    return out


def swizzle128(row: int, chunk: int) -> int:
    """Where 16-byte chunk ``chunk`` (0-7) of row ``row`` lands inside its 128-byte row."""
    return chunk ^ (row % 8)


def a_offset(row: int, k: int, elem_bytes: int = 2) -> int:
    """Byte offset of ``A[row, k]`` (or of a K-major ``B[n, k]``) in a staged ``rows x 64`` tile."""
    per = 16 // elem_bytes
    return row * 128 + swizzle128(row, k // per) * 16 + (k % per) * elem_bytes


def b_offset(k: int, n: int, elem_bytes: int = 2) -> int:
    """Byte offset of ``B[k, n]`` in a staged N-major ``64 x bn`` tile: blocks of 64 columns
    (8192 bytes each), each 64 rows of 128 swizzled bytes."""
    per = 16 // elem_bytes
    nb, nn = divmod(n, 64)
    return nb * 64 * 128 + k * 128 + swizzle128(k, nn // per) * 16 + (nn % per) * elem_bytes


def acc_coord(thread: int, reg: int) -> tuple[int, int]:
    """``(row, col)`` of accumulator register ``reg`` of thread ``thread`` (0-127) of a
    warpgroup for ``wgmma.mma_async.m64nNk16`` with f32 accumulators (PTX ISA, "Matrix Fragments
    for wgmma.mma_async.m64nNk16", figure of the accumulator D: warp ``w`` holds rows ``16 w ..
    16 w + 15``; in it, lane ``l`` holds row ``l / 4`` (+ 8 for registers 2, 3 of each group of
    four) and columns ``8 (reg / 4) + 2 (l % 4) + reg % 2``)."""
    warp, lane = divmod(thread, 32)
    row = 16 * warp + lane // 4 + 8 * ((reg // 2) % 2)
    col = 8 * (reg // 4) + 2 * (lane % 4) + reg % 2
    return row, col


# -- the kernel ------------------------------------------------------------------------------------------------
def grouped_tile(lin: Any, rows: int, cols: int, group: int,
                 minimum: Callable[[Any, int], Any] = min) -> tuple[Any, Any]:
    """(row, column) of the ``lin``-th tile of a ``rows x cols`` grid of tiles walked in groups of
    ``group`` rows (0: row by row): group ``g = lin / (group cols)`` covers rows ``g group ..``,
    and inside it the walk goes down one column, then to the next, so tiles running together
    share their operands in L2. ``lin`` is an int (``minimum=min``) or a kernel expression
    (``minimum=E.min_expr``); every ``lin`` in ``0 .. rows cols - 1`` names a different tile."""
    if not group:
        return lin // cols, lin % cols
    per = group * cols
    first = (lin // per) * group
    size = minimum(rows - first, group)
    return first + (lin % per) % size, (lin % per) // size


def _call(op: str, *args: E.PrimExpr, dt: str = "int32") -> E.Call:
    return E.Call(as_dtype(dt), op, tuple(args))


def _ev(op: str, *args: E.PrimExpr) -> S.Stmt:
    return S.Evaluate(_call(op, *args))


def chunk_copies(smem_ref: Callable[[E.PrimExpr], E.BufferLoad], A: Buffer, B: Buffer, b_transposed: bool,
                 tile: tuple[int, int], origin: tuple[E.PrimExpr, E.PrimExpr], sizes: tuple[int, int, int],
                 k0: E.PrimExpr, dst0: E.PrimExpr, tid: E.PrimExpr, nthr: int) -> list[S.Stmt]:
    """The 16-byte ``cp.async`` copies that stage one chunk of 64 (16-bit) elements of K from
    ``k0``: ``A``'s ``bm`` rows from ``origin[0]`` (K-major) and ``B``'s ``bn`` columns from
    ``origin[1]`` (N-major blocks of 64 columns, or K-major rows with ``b_transposed``), into the
    slot at element ``dst0`` of the shared buffer ``smem_ref`` addresses, in the swizzled layouts
    of :func:`a_offset` / :func:`b_offset`; thread ``tid`` of ``nthr`` issues its share, and copies
    past the matrix edges write zeros."""
    (bm, bn), (m0, n0), (M, N, K) = tile, origin, sizes
    idt = A.dtype

    def copy16(dst_off: E.PrimExpr, buf: Buffer, src_idx: E.PrimExpr, ok: E.PrimExpr) -> S.Stmt:
        size = E.select(ok, E.const(16), E.const(0))
        src = E.BufferLoad(buf, (E.select(ok, src_idx, E.const(0)),), idt)
        return _ev("tc.cp_async:16", smem_ref(dst_off), src, size)

    def kmajor(buf: Buffer, rows: int, row0: E.PrimExpr, nrows: int, dst: E.PrimExpr) -> list[S.Stmt]:
        c = tid % 8
        out = []
        for i in range(rows * 8 // nthr):
            r = tid // 8 + i * (nthr // 8)
            ok = E.logical_and(row0 + r < nrows, k0 + c * 8 < K)
            out.append(copy16(dst + r * 64 + xor3(c, r % 8) * 8, buf, (row0 + r) * K + k0 + c * 8, ok))
        return out

    def nmajor(dst: E.PrimExpr) -> list[S.Stmt]:
        per_row = bn // 8
        cc = tid % per_row
        c = cc % 8
        out = []
        for i in range(BK * per_row // nthr):
            k = tid // per_row + i * (nthr // per_row)
            ok = E.logical_and(k0 + k < K, n0 + cc * 8 < N)
            out.append(copy16(dst + (cc // 8) * 4096 + k * 64 + xor3(c, k % 8) * 8, B, (k0 + k) * N + n0 + cc * 8, ok))
        return out

    a_elems = bm * BK
    items = kmajor(A, bm, m0, M, dst0)
    items += kmajor(B, bn, n0, N, dst0 + a_elems) if b_transposed else nmajor(dst0 + a_elems)
    return items


def check_target(mcpu: str) -> None:
    """Raise :class:`ScheduleError` unless ``mcpu`` is sm_90 or sm_90a (wgmma exists on Hopper
    only, assembled for sm_90a)."""
    if mcpu not in ("sm_90", "sm_90a"):
        raise ScheduleError(f"wgmma.mma_async needs an sm_90 (Hopper, assembled as sm_90a) target, the target is "
                            f"{mcpu}; {FALLBACK}")


def wgmma_gemm_func(M: int, N: int, K: int, in_dtype: str = "float16", out_dtype: str | None = None,
                    tile: WGTile | None = None, b_transposed: bool = False, name: str = "wgmma_gemm",
                    target: str = "cuda -arch=sm_90", smem_limit: int = SM90_SMEM, bias: bool = False,
                    relu: bool = False) -> S.PrimFunc:
    """The lowered function ``name(A, B, C)`` computing ``C = A @ B`` (see the module doc):
    ``A`` is ``M x K``, ``B`` ``K x N`` (``N x K`` when ``b_transposed``), ``C`` ``M x N`` of
    ``out_dtype`` (default float32). Any ``M``; ``K`` and ``N`` (``K`` only, when
    ``b_transposed``) must be multiples of 8 (rows of whole 16-byte chunks). With ``bias`` the
    function is ``name(A, B, bias, C)`` and adds ``bias[n]`` (of ``C``'s type, added in float32)
    to every row; ``relu`` then clamps at zero; the result is rounded once to ``C``'s type.
    Raises :class:`ScheduleError` for other types, sizes or an illegal tile."""
    t = tile or WGTile()
    if in_dtype == "float32" and not (t.ws == 2 and b_transposed):
        raise ScheduleError("the wgmma GEMM multiplies float32 inputs as TF32 only in the TMA kernel (ws=2) with B "
                            f"given as N x K (b_transposed: wgmma reads TF32 operands K-major); {FALLBACK}")
    if in_dtype not in ("float16", "bfloat16", "float32"):
        raise ScheduleError(f"the wgmma GEMM multiplies float16, bfloat16 or float32 (as TF32), not {in_dtype}; "
                            f"{FALLBACK}")
    out_dtype = out_dtype or "float32"
    why = t.check(smem_limit)
    if why:
        raise ScheduleError(f"wgmma GEMM tile {t}: {why}")
    if in_dtype == "float32" and K % 4:
        raise ScheduleError(f"the TF32 wgmma GEMM loads 16-byte rows: K ({K}) must be a multiple of 4; {FALLBACK}")
    if K % 8 and in_dtype != "float32" or (N % 8 and not b_transposed) or min(M, N, K) < 1:
        raise ScheduleError(f"the wgmma GEMM stages 16-byte rows: K ({K}) and N ({N}, unless B is N x K) must be "
                            f"multiples of 8; {FALLBACK}")
    if max(M * K, K * N, M * N) >= 2**31:
        raise ScheduleError(f"the wgmma GEMM indexes with 32-bit integers: {M} x {N} x {K} has an operand of 2^31 "
                            "elements or more; split the product")
    if t.ws:
        from .wgmma_ws import ws_gemm_func

        return ws_gemm_func(M, N, K, in_dtype, out_dtype, t, b_transposed, name, target, bias, relu)
    idt, odt = as_dtype(in_dtype), as_dtype(out_dtype)
    A = Buffer("A", idt, (E.const(M), E.const(K)))
    B = Buffer("B", idt, (E.const(N), E.const(K)) if b_transposed else (E.const(K), E.const(N)))
    C = Buffer("C", odt, (E.const(M), E.const(N)))
    bias_buf = Buffer("bias", odt, (E.const(N),)) if bias else None
    bm, bn, nthr = t.bm, t.bn, t.threads
    a_elems, b_elems = bm * BK, bn * BK
    slot = a_elems + b_elems
    smem = Buffer("wg_smem", idt, (E.const(slot * t.stages + ATOM // 2),), (), "shared")
    acc = Buffer("wg_acc", as_dtype("float32"), (E.const(bn // 2),), (), "local")
    nk = -(-K // BK)
    P = t.stages - 1 - t.inflight  # chunks copied ahead

    bx, by, tx = E.Var("bx", INT32), E.Var("by", INT32), E.Var("tx", INT32)
    kc = E.Var("kc", INT32)
    base = E.Var("wg_base", INT32)  # elements from smem[0] to the first 1024-aligned byte
    m0, n0 = by * bm, bx * bn

    def smem_ref(off: E.PrimExpr | int) -> E.BufferLoad:
        return E.BufferLoad(smem, (base + off,), idt)

    def copy_chunk(j: E.PrimExpr) -> S.Stmt:
        return S.seq(*chunk_copies(smem_ref, A, B, b_transposed, (bm, bn), (m0, n0), (M, N, K), j * BK,
                                   (j % t.stages) * slot, tx, nthr))

    commit = _ev("tc.cp_async_commit")
    wg = tx // 128
    trans_b = 0 if b_transposed else 1
    instr = f"m64n{bn}k16.{'f16' if in_dtype == 'float16' else 'bf16'}.t{trans_b}"

    def mma_chunk(j: E.PrimExpr) -> list[S.Stmt]:
        s0 = (j % t.stages) * slot
        out = [_ev("tc.wgmma_fence")]
        for kk in range(BK // 16):
            da = _call("tc.wgmma_desc:16:1024", smem_ref(s0 + wg * 64 * 64 + kk * 16), dt="uint64")
            if b_transposed:
                db = _call("tc.wgmma_desc:16:1024", smem_ref(s0 + a_elems + kk * 16), dt="uint64")
            else:  # N-major: 64-column blocks 8192 bytes apart, groups of 8 k-rows 1024 bytes apart
                db = _call("tc.wgmma_desc:8192:1024", smem_ref(s0 + a_elems + kk * 16 * 64), dt="uint64")
            out.append(_ev(f"tc.wgmma:{instr}", E.BufferLoad(acc, (E.const(0),), acc.dtype), da, db))
        out += [_ev("tc.wgmma_commit"), _ev(f"tc.wgmma_wait:{t.inflight}")]
        return out

    prologue = []
    for s in range(P):
        step = copy_chunk(E.const(s))
        prologue += [step if s < nk else S.seq(), commit]
    loop_body = S.seq(
        _ev(f"tc.cp_async_wait:{P - 1}"), _ev("tc.fence_proxy_async"), _ev("gpu.barrier"),
        S.IfThenElse(kc + P < nk, copy_chunk(kc + P)), commit,
        *mma_chunk(kc),
    )
    main = S.For(kc, E.const(0), E.const(nk), S.ForKind.SERIAL, loop_body, "", ())
    zero = [S.BufferStore(acc, E.const(0.0, "float32"), (E.const(r),)) for r in range(bn // 2)]
    lane_t = tx % 128
    epi = []
    for r in range(bn // 2):
        row = m0 + wg * 64 + (lane_t // 32) * 16 + (lane_t % 32) // 4 + 8 * ((r // 2) % 2)
        col = n0 + 8 * (r // 4) + 2 * (lane_t % 4) + r % 2
        v: E.PrimExpr = E.BufferLoad(acc, (E.const(r),), acc.dtype)
        if bias_buf is not None:
            bv = E.BufferLoad(bias_buf, (col,), odt)
            v = v + (bv if odt == acc.dtype else E.cast(acc.dtype, bv))
        if relu:
            v = E.max_expr(v, E.const(0.0, "float32"))
        val = v if odt == acc.dtype else E.cast(odt, v)
        epi.append(S.IfThenElse(E.logical_and(row < M, col < N), S.BufferStore(C, val, (row * N + col,))))
    body = S.seq(*zero, *prologue, main, _ev("tc.wgmma_wait:0"), _ev("tc.cp_async_wait:0"), *epi)
    addr = _call("tc.shared_addr", E.BufferLoad(smem, (E.const(0),), idt))
    pad = ((ATOM - addr % ATOM) % ATOM) // 2
    kernel: S.Stmt = S.LetStmt(base, pad, S.Allocate(acc, body))
    kernel = S.Allocate(smem, S.For(tx, E.const(0), E.const(nthr), S.ForKind.THREAD_BINDING, kernel, "threadIdx.x"))
    mt, nt = -(-M // bm), -(-N // bn)
    if t.group_m:
        # block L of a 1-D grid: group g = L / (group_m nt) covers block rows g group_m ...;
        # inside it, blocks go down the rows of one block column, then to the next column
        lin = E.Var("blk", INT32)
        row, col = grouped_tile(lin, mt, nt, t.group_m, E.min_expr)
        kernel = S.LetStmt(by, row, S.LetStmt(bx, col, kernel))
        kernel = S.For(lin, E.const(0), E.const(mt * nt), S.ForKind.THREAD_BINDING, kernel, "blockIdx.x")
    else:
        kernel = S.For(by, E.const(0), E.const(mt), S.ForKind.THREAD_BINDING, kernel, "blockIdx.y")
        kernel = S.For(bx, E.const(0), E.const(nt), S.ForKind.THREAD_BINDING, kernel, "blockIdx.x")
    params = [A, B] + ([bias_buf] if bias_buf is not None else []) + [C]
    return S.PrimFunc(name, params, kernel, {"target": target})
