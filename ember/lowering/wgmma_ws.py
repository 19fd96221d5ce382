"""The warp-specialised, persistent variant of the Hopper ``wgmma`` GEMM (:mod:`ember.lowering.wgmma`).

The plain kernel has every thread both copy operands (``cp.async``) and multiply, with a block
barrier before each refill: the copies of chunk ``k + P`` and the tensor-core work of chunk ``k``
take turns in the same warps, and all warps stop at the barrier once per chunk. This variant
splits the roles, the way CUTLASS's warp-specialised Hopper kernels do:

* warpgroup 0 (128 threads) is the **producer**: it only issues ``cp.async`` copies into
  ``stages`` shared-memory slots (same swizzled layouts as the plain kernel), each slot guarded by
  two ``mbarrier`` objects — ``full[s]`` (128 arrivals: every producer thread's
  ``cp.async.mbarrier.arrive.noinc``, which fires when that thread's copies so far have landed)
  and ``empty[s]`` (one arrival per consumer warpgroup);
* warpgroups 1 .. ``warpgroups`` are **consumers**: each waits on ``full[s]``, issues its four
  ``m64nNk16`` instructions for 64 rows, and once the chunk before has retired
  (``wgmma.wait_group 1``) one thread per warpgroup arrives on that chunk's ``empty`` barrier;
* the kernel is **persistent**: ``min(tiles, sms)`` blocks walk the output tiles
  (``tile = block + i * blocks``, in the same grouped order as the plain kernel), so the producer
  fetches the next tile's first chunks while the consumers run the previous tile's epilogue.
* with ``cluster=2`` (TMA only) the blocks run as Hopper clusters of two (``.reqnctapercluster
  2, 1, 1``): the pair computes two vertically adjacent tiles that share their B tile. Each block
  loads its own A box and half of B, multicast into the same slot of both blocks
  (``.multicast::cluster``), so each ``full`` barrier still expects the whole slot's bytes but
  L2 serves B once per pair. A slot may be refilled only when the consumers of *both* blocks
  are done with it: ``empty`` expects ``2 * warpgroups`` arrivals and each consumer warpgroup
  arrives on its own and on its peer's (``mapa`` + ``mbarrier.arrive.shared::cluster``). A cluster
  barrier after the set-up (the peer's barriers exist before anything lands in them) and one at
  the end (no block leaves while its peer may still write into it) bracket the kernel. The pair
  walks the same tiles, so both issue the same number of chunks; a tile row past ``M`` (odd
  tile rows) is loaded as zeros by TMA and not stored.

* the epilogue of the TMA kernel (without split-K) goes through shared memory: per 64-row x
  128-byte sub-tile each consumer thread writes its column pairs into a swizzled staging buffer,
  and one thread of the warpgroup stores the sub-tile with TMA (C's tensor map clips it at the
  edges) while the warpgroup goes on to the next (:func:`_tma_store_epilogue`); the other kernels
  store column pairs from registers (:func:`_register_store_epilogue`);
* with split-K (``WGTile.split_k``) each block stores its float32 part of K into a ``[P, M, N]``
  workspace; a second kernel sums the parts, or with ``last_block_sums`` the kernel does it
  itself ("serial split-K"): after storing its part every consumer thread fences
  (``fence.acq_rel.gpu``), the warpgroup meets at its named barrier, one thread adds one to the
  tile's ticket (a zero-initialised workspace of one ``int32`` per tile and warpgroup,
  :func:`ember.lowering.gpu.with_zeroed`), and ``bar.red.or`` tells the warpgroup whether that
  was the ``P``-th arrival; that warpgroup resets the ticket to zero, fences again (acquire) and
  sums the ``P`` parts in part order (the same order and rounding as the second kernel) with the
  bias and ReLU into ``C``. No block waits for another, so no walk order can deadlock;
* with two consumer warpgroups the producer gives registers back (``setmaxnreg.dec`` to 40) and the
  consumers take them (``setmaxnreg.inc`` to 232), as CUTLASS's warp-specialised kernels do.

No block barrier is executed after the ``mbarrier`` set-up (the epilogue's ``bar.sync`` are
warpgroup barriers, ids 1 and 2). The phase bookkeeping: chunk ``it``
(counted over the block's whole run) uses slot ``it % stages`` in phase ``(it / stages) % 2``;
consumers wait for that parity on ``full``, the producer for the opposite parity on ``empty``
(a fresh barrier counts the phase before its first as complete, so the first round passes).

Facts used (PTX ISA 8.x, "Parallel Synchronization and Communication Instructions: mbarrier"):
``mbarrier.init.shared::cta.b64 [a], n`` sets the expected arrivals; ``mbarrier.try_wait.parity``
returns whether the phase of the given parity has completed; ``cp.async.mbarrier.arrive.noinc``
makes the barrier track the executing thread's earlier ``cp.async`` operations and counts as one
of the expected arrivals when they complete; labels inside ``{ }`` in PTX are local to the block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ScheduleError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.buffer import Buffer
from ..ir.dtypes import INT32
from ..ir.dtypes import dtype as as_dtype
from .gpu import TensorMapSpec, with_tensor_map, with_zeroed
from .wgmma import ATOM, WGTile, _call, _ev, chunk_copies, grouped_tile, xor3

#: threads of the producer warpgroup
PRODUCER = 128
#: registers per thread the producer warpgroup keeps (``setmaxnreg.dec``): it only counts and copies
PRODUCER_REGS = 40


def consumer_regs(consumers: int) -> int | None:
    """Registers per thread each consumer warpgroup takes (``setmaxnreg.inc``) once the producer has
    given its share back (``setmaxnreg.dec`` to :data:`PRODUCER_REGS`): with two consumers, a block
    of 384 threads starts with 168 each (ptxas allots 64K / 384 at entry when the kernel adjusts
    its registers) and the consumers get 232; None with one consumer (256 threads may keep up to
    255 registers each from the start, and ptxas ignores ``setmaxnreg`` there)."""
    if consumers < 2:
        return None
    return (65536 // PRODUCER - PRODUCER_REGS) // consumers // 8 * 8


def tile_of_block(cid: Any, rank: Any, i: Any, groups: int, rows: int, cols: int, group: int, cl: int,
                  minimum: Callable[[Any, int], Any] = min, parts: int = 1) -> tuple[Any, Any, Any]:
    """(tile row, tile column, part of K) that block ``rank`` of cluster ``cid`` (a plain block when
    ``cl`` is 1) computes in its ``i``-th round, with ``groups`` persistent clusters walking the
    ``rows x cols`` units (a unit is ``cl`` vertically adjacent tiles) in groups of ``group`` unit
    rows, each unit ``parts`` times (consecutive rounds of the walk take its parts of K): step
    ``cid + i groups``, tile row ``unit row * cl + rank``. Ints (``minimum=min``) or kernel
    expressions (``minimum=E.min_expr``)."""
    step = cid + i * groups
    unit, part = (step // parts, step % parts) if parts > 1 else (step, 0)
    uy, bx = grouped_tile(unit, rows, cols, group, minimum)
    return (uy * cl + rank if cl > 1 else uy), bx, part


def sum_parts_kernel(parts: Buffer, P: int, M: int, N: int, C: Buffer, bias: Buffer | None, relu: bool,
                     threads: int = 256) -> S.Stmt:
    """The kernel ``C = relu?(sum_p parts[p] + bias)`` over a float32 workspace of ``P`` partial
    ``M x N`` products (one thread per element, summed in float32, rounded once to ``C``'s type)."""
    f32 = as_dtype("float32")
    total = M * N
    sb, st = E.Var("sb", INT32), E.Var("st", INT32)
    idx = sb * threads + st
    acc: E.PrimExpr = E.BufferLoad(parts, (idx,), f32)
    for p in range(1, P):
        acc = acc + E.BufferLoad(parts, (idx + p * total,), f32)
    if bias is not None:
        b = E.BufferLoad(bias, (idx % N,), bias.dtype)
        acc = acc + (b if bias.dtype == f32 else E.cast(f32, b))
    if relu:
        acc = E.max_expr(acc, E.const(0.0, "float32"))
    value = acc if C.dtype == f32 else E.cast(C.dtype, acc)
    body = S.IfThenElse(idx < total, S.BufferStore(C, value, (idx,)))
    body = S.For(st, E.const(0), E.const(threads), S.ForKind.THREAD_BINDING, body, "threadIdx.x")
    return S.For(sb, E.const(0), E.const(-(-total // threads)), S.ForKind.THREAD_BINDING, body, "blockIdx.x")


def _pair_value(acc: Buffer, r: int, bias: Buffer | None, col: E.PrimExpr, relu: bool, out: Any) -> E.PrimExpr:
    """Accumulator registers ``r, r + 1`` as a pair of type ``out`` (two lanes of it): plus the
    ``bias`` pair at column ``col`` when given (read in its own type, added in float32), ReLU'd
    when asked, rounded once."""
    pair = E.BufferLoad(acc, (E.Ramp(E.const(r), E.const(1), 2, INT32.with_lanes(2)),), acc.dtype.with_lanes(2))
    return _finish(pair, bias, col, relu, out, 2)


def _pair_stores(dest: Buffer, at_of: Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr],
                 pair: Callable[[int, E.PrimExpr, E.PrimExpr], E.PrimExpr],
                 one: Callable[[int, E.PrimExpr, E.PrimExpr], E.PrimExpr], lane_t: E.PrimExpr, wg: E.PrimExpr,
                 m0: E.PrimExpr, n0: E.PrimExpr, size: tuple[int, int], tile: tuple[int, int],
                 edge: bool) -> list[S.Stmt]:
    """One paired store into ``dest`` (at ``at_of(row, col)``) per column pair of a consumer
    warpgroup's ``m64nN`` fragment (registers ``r, r + 1`` hold columns ``col, col + 1`` of one
    row), the values from ``pair(r, row, col)`` (two lanes) and, for a last column alone,
    ``one(r, row, col)``. With ``edge`` (some tile crosses ``M x N``) the stores are checked on the
    tiles that cross it and unchecked on the others."""
    (M, N), (bm, bn) = size, tile
    idx2 = INT32.with_lanes(2)
    checked: list[S.Stmt] = []
    unchecked: list[S.Stmt] = []
    for r in range(0, bn // 2, 2):
        row = m0 + wg * 64 + (lane_t // 32) * 16 + (lane_t % 32) // 4 + 8 * ((r // 2) % 2)
        col = n0 + 8 * (r // 4) + 2 * (lane_t % 4)
        at = at_of(row, col)
        both = S.BufferStore(dest, pair(r, row, col), (E.Ramp(at, E.const(1), 2, idx2),))
        first = S.IfThenElse(col < N, S.BufferStore(dest, one(r, row, col), (at,)))
        checked.append(S.IfThenElse(row < M, S.IfThenElse(col + 1 < N, both, first)))
        unchecked.append(both)
    if not edge:
        return unchecked
    return [S.IfThenElse(E.logical_and(m0 + bm <= M, n0 + bn <= N), S.seq(*unchecked), S.seq(*checked))]


def _finish(value: E.PrimExpr, bias: Buffer | None, col: E.PrimExpr, relu: bool, out: Any, lanes: int) -> E.PrimExpr:
    """A float32 ``value`` of ``lanes`` (1 or 2) columns from ``col``: plus ``bias`` (read in its
    own type, added in float32) when given, ReLU'd when asked, rounded once to ``out``."""
    f32 = as_dtype("float32").with_lanes(lanes)
    if bias is not None:
        b = (E.BufferLoad(bias, (E.Ramp(col, E.const(1), 2, INT32.with_lanes(2)),), bias.dtype.with_lanes(2))
             if lanes == 2 else E.BufferLoad(bias, (col,), bias.dtype))
        value = value + (b if bias.dtype.with_lanes(1) == as_dtype("float32") else E.cast(f32, b))
    if relu:
        zero = E.const(0.0, "float32")
        value = E.max_expr(value, E.Broadcast(zero, 2, f32) if lanes == 2 else zero)
    return value if out == as_dtype("float32") else E.cast(out.with_lanes(lanes), value)


def _register_store_epilogue(acc: Buffer, C: Buffer, parts: Buffer | None, part: E.PrimExpr, bias: Buffer | None,
                             relu: bool, lane_t: E.PrimExpr, wg: E.PrimExpr, m0: E.PrimExpr, n0: E.PrimExpr,
                             size: tuple[int, int], tile: tuple[int, int], edge: bool) -> list[S.Stmt]:
    """The epilogue that stores a consumer warpgroup's accumulators from registers, a column pair
    per store: into ``C`` with the bias, ReLU and rounding, or, with split-K (``parts``), as
    float32 into part ``part`` of the ``[P, M, N]`` workspace (the bias and ReLU wait for the sum)."""
    M, N = size
    f32x2 = as_dtype("float32").with_lanes(2)
    if parts is not None:
        return _pair_stores(
            parts, lambda row, col: part * (M * N) + row * N + col,
            lambda r, row, col: E.BufferLoad(acc, (E.Ramp(E.const(r), E.const(1), 2, INT32.with_lanes(2)),), f32x2),
            lambda r, row, col: E.BufferLoad(acc, (E.const(r),), acc.dtype), lane_t, wg, m0, n0, size, tile, edge)
    return _pair_stores(
        C, lambda row, col: row * N + col, lambda r, row, col: _pair_value(acc, r, bias, col, relu, C.dtype),
        lambda r, row, col: _finish(E.BufferLoad(acc, (E.const(r),), acc.dtype), bias, col, relu, C.dtype, 1),
        lane_t, wg, m0, n0, size, tile, edge)


def _summed_store_epilogue(parts: Buffer, P: int, C: Buffer, bias: Buffer | None, relu: bool, lane_t: E.PrimExpr,
                           wg: E.PrimExpr, m0: E.PrimExpr, n0: E.PrimExpr, size: tuple[int, int],
                           tile: tuple[int, int], edge: bool) -> list[S.Stmt]:
    """The epilogue of the block that took a tile's last split-K ticket: for each of the
    warpgroup's fragment positions, the ``P`` float32 parts of the ``[P, M, N]`` workspace summed
    in part order, plus the bias, ReLU'd, rounded once and stored into ``C`` (as the second
    kernel of :func:`sum_parts_kernel` does for every element)."""
    M, N = size
    f32 = as_dtype("float32")

    def total(row: E.PrimExpr, col: E.PrimExpr, lanes: int) -> E.PrimExpr:
        acc: E.PrimExpr | None = None
        for p in range(P):
            at = p * (M * N) + row * N + col
            x = (E.BufferLoad(parts, (E.Ramp(at, E.const(1), 2, INT32.with_lanes(2)),), f32.with_lanes(2))
                 if lanes == 2 else E.BufferLoad(parts, (at,), f32))
            acc = x if acc is None else acc + x
        assert acc is not None
        return acc

    return _pair_stores(
        C, lambda row, col: row * N + col,
        lambda r, row, col: _finish(total(row, col, 2), bias, col, relu, C.dtype, 2),
        lambda r, row, col: _finish(total(row, col, 1), bias, col, relu, C.dtype, 1),
        lane_t, wg, m0, n0, size, tile, edge)


def staged_offset(row: Any, col: Any, elem_bytes: int) -> Any:
    """Byte offset of element ``(row, col)`` of an epilogue sub-tile (64 rows of 128 bytes) in the
    128-byte-swizzled layout a TMA store reads: 16-byte chunk ``c`` of row ``r`` at chunk
    ``c xor (r mod 8)``. Ints or kernel expressions."""
    byte = col * elem_bytes
    return row * 128 + xor3(byte // 16, row % 8) * 16 + byte % 16


def _tma_store_epilogue(acc: Buffer, C: Buffer, map_c: Buffer, bias: Buffer | None, relu: bool, t: WGTile,
                        lane_t: E.PrimExpr, wg: E.PrimExpr, m0: E.PrimExpr, n0: E.PrimExpr,
                        N: int) -> tuple[Buffer, E.Var, list[S.Stmt], S.Stmt]:
    """The epilogue that writes a consumer warpgroup's ``64 x bn`` accumulators (plus ``bias``,
    ReLU, rounded to ``C``'s type) through shared memory and C's tensor map ``map_c``: per sub-tile
    of 64 rows x 128 bytes, every thread stores its pairs into a staging buffer in the
    128-byte-swizzled layout (conflict-free: the 8 rows of one store instruction land in 8
    different 16-byte chunks), ``fence.proxy.async`` and a warpgroup barrier, then one thread
    issues a TMA store (``cp.async.bulk.tensor``, bounds clipped by the tensor map, so edge tiles
    need no checks) and goes on; a staging buffer is rewritten only after its store has read it
    (``cp.async.bulk.wait_group.read``; two buffers per warpgroup when they fit,
    :meth:`WGTile.out_buffers`). Returns the staging buffer, the variable holding its aligned
    start, the epilogue's statements and the drain to run after the last tile."""
    odt = C.dtype
    oesz = odt.bits // 8
    ocols = 128 // oesz  # columns per sub-tile
    nbuf = t.out_buffers()
    sub = 64 * ocols  # elements per staging buffer
    out_smem = Buffer("wg_out", odt, (E.const(t.warpgroups * nbuf * sub + ATOM // oesz),), (), "shared")
    obase = E.Var("wg_obase", INT32)
    idx2 = INT32.with_lanes(2)
    leader = lane_t == 0
    wrow = (lane_t // 32) * 16 + (lane_t % 32) // 4  # the thread's row in its warpgroup's 64 (first half)
    out: list[S.Stmt] = []
    for j in range(t.bn // ocols):
        buf = obase + (wg * nbuf + j % nbuf) * sub
        body: list[S.Stmt] = [S.IfThenElse(leader, _ev(f"tc.bulk_wait_read:{nbuf - 1}")),
                              _ev("tc.named_barrier:128", wg + 1)]
        for r in range(j * ocols // 2, (j + 1) * ocols // 2, 2):  # registers r, r + 1: columns col, col + 1
            lr = wrow + 8 * ((r // 2) % 2)
            lc = 8 * (r // 4) - j * ocols + 2 * (lane_t % 4)
            at = staged_offset(lr, lc, oesz)
            # the bias column clamped: columns past N are clipped by the store
            col = E.min_expr(n0 + 8 * (r // 4) + 2 * (lane_t % 4), E.const(N - 2))
            value = _pair_value(acc, r, bias, col, relu, odt)
            body.append(S.BufferStore(out_smem, value, (E.Ramp(buf + at // oesz, E.const(1), 2, idx2),)))
        body += [_ev("tc.fence_proxy_async"), _ev("tc.named_barrier:128", wg + 1),
                 S.IfThenElse(leader, S.seq(
                     _ev("tc.tma_store_2d", E.BufferLoad(out_smem, (buf,), odt),
                         E.BufferLoad(map_c, (E.const(0),), map_c.dtype), n0 + j * ocols, m0 + wg * 64),
                     _ev("tc.bulk_commit")))]
        out += body
    return out_smem, obase, out, S.IfThenElse(leader, _ev("tc.bulk_wait:0"))


def ws_gemm_func(M: int, N: int, K: int, idt_name: str, odt_name: str, t: WGTile, b_transposed: bool,
                 name: str, target: str, bias: bool, relu: bool) -> S.PrimFunc:
    """The lowered warp-specialised persistent kernel ``name(A, B[, bias], C)`` (module doc) for
    ``C = A @ B``; arguments as :func:`ember.lowering.wgmma.wgmma_gemm_func`, which checks them and
    calls this for tiles with ``t.ws`` set."""
    idt, odt = as_dtype(idt_name), as_dtype(odt_name)
    A = Buffer("A", idt, (E.const(M), E.const(K)))
    B = Buffer("B", idt, (E.const(N), E.const(K)) if b_transposed else (E.const(K), E.const(N)))
    C = Buffer("C", odt, (E.const(M), E.const(N)))
    bias_buf = Buffer("bias", odt, (E.const(N),)) if bias else None
    tma = t.ws == 2
    u8 = as_dtype("uint8")
    map_a, map_b, map_c = (Buffer(f"tmap_{x}", u8, (E.const(128),)) for x in "ABC")
    bm, bn, stages = t.bm, t.bn, t.stages
    consumers = t.warpgroups
    nthr = PRODUCER * (consumers + 1)
    esz = idt.bits // 8
    rb = t.row_bytes  # bytes of K per staged row: the swizzle span (128 or 64)
    # elements of K per staged chunk, and columns of one N-major B box: one row of the swizzle span
    BK = rb // esz
    sw_code = {128: 1, 64: 2}[rb]  # the descriptor's swizzle-mode code
    a_elems, b_elems = bm * BK, bn * BK
    slot = a_elems + b_elems
    smem = Buffer("wg_smem", idt, (E.const(slot * stages + ATOM // esz),), (), "shared")
    bars = Buffer("wg_bars", as_dtype("uint64"), (E.const(2 * stages),), (), "shared")
    acc = Buffer("wg_acc", as_dtype("float32"), (E.const(bn // 2),), (), "local")
    nk = -(-K // BK)
    mt, nt = -(-M // bm), -(-N // bn)
    cl = t.cluster
    rows = -(-mt // cl)  # rows of units: a unit is the cl vertically adjacent tiles a cluster computes
    P = t.split_k  # WGTile.check (called by wgmma_gemm_func) allows clusters and split-K with TMA only
    cpp = -(-nk // P)  # chunks per part of K (the last part's tail past K is loaded as zeros)
    units = rows * nt * P
    groups = max(1, min(units, t.sms // cl))  # persistent clusters (plain blocks when cl == 1)
    grid = groups * cl

    blk, tx = E.Var("blk", INT32), E.Var("tx", INT32)
    i, kc = E.Var("ti", INT32), E.Var("kc", INT32)
    base = E.Var("wg_base", INT32)
    cid, rank = (blk // cl, blk % cl) if cl > 1 else (blk, E.const(0))
    gm = max(1, t.group_m // cl) if t.group_m else 0
    by, bx, part = tile_of_block(cid, rank, i, groups, rows, nt, gm, cl, E.min_expr, P)
    m0, n0 = by * bm, bx * bn
    it = i * cpp + kc
    slot_of, phase_of = it % stages, (it // stages) % 2

    def smem_ref(off: E.PrimExpr | int) -> E.BufferLoad:
        return E.BufferLoad(smem, (base + off,), idt)

    def bar(idx: E.PrimExpr | int) -> E.BufferLoad:
        return E.BufferLoad(bars, (E.const(idx) if isinstance(idx, int) else idx,), bars.dtype)

    def full(s: E.PrimExpr | int) -> E.BufferLoad:
        return bar(s)

    def empty(s: E.PrimExpr | int) -> E.BufferLoad:
        return bar(s + stages if isinstance(s, int) else s + E.const(stages))

    # -- producer: warpgroup 0, thread p = tx (0..127) ---------------------------------------------------------
    s0 = slot_of * slot
    k0 = (part * cpp + kc) * BK if P > 1 else kc * BK
    if tma:  # one thread: expect the slot's bytes on full[s], then one bulk copy per box
        def box(m: Buffer, c0: E.PrimExpr, c1: E.PrimExpr, dst: E.PrimExpr, multicast: bool = False) -> S.Stmt:
            op = "tc.tma_load_2d_mc:3" if multicast else "tc.tma_load_2d"
            return _ev(op, smem_ref(dst), E.BufferLoad(m, (E.const(0),), u8), c0, c1, full(slot_of))

        loads = [box(map_a, k0, m0, s0)]
        if cl == 2 and b_transposed:  # this block's half of the B rows, into both blocks
            half = rank * (bn // 2)
            loads.append(box(map_b, k0, n0 + half, s0 + a_elems + half * BK, True))
        elif cl == 2:  # this block's half of the BK-column boxes, into both blocks
            per_rank = bn // BK // 2
            for j in range(per_rank):
                nb = rank * per_rank + j
                loads.append(box(map_b, n0 + BK * nb, k0, s0 + a_elems + nb * (BK * BK), True))
        elif b_transposed:
            loads.append(box(map_b, k0, n0, s0 + a_elems))
        else:
            loads += [box(map_b, n0 + BK * nb, k0, s0 + a_elems + nb * BK * BK) for nb in range(bn // BK)]
        producer_step = S.seq(
            _ev("tc.mbar_wait", empty(slot_of), 1 - phase_of),
            _ev(f"tc.mbar_expect_tx:{slot * idt.bits // 8}", full(slot_of)),
            *loads,
        )
    else:
        producer_step = S.seq(
            _ev("tc.mbar_wait", empty(slot_of), 1 - phase_of),
            *chunk_copies(smem_ref, A, B, b_transposed, (bm, bn), (m0, n0), (M, N, K), k0, s0, tx, PRODUCER),
            _ev("tc.cp_async_mbar_arrive", full(slot_of)),
        )
    my_tiles = (units - cid + (groups - 1)) // groups
    producer = S.For(i, E.const(0), my_tiles, S.ForKind.SERIAL,
                     S.For(kc, E.const(0), E.const(cpp), S.ForKind.SERIAL, producer_step, "", ()), "", ())

    # -- consumers: warpgroups 1.., thread q = tx - 128 --------------------------------------------------------
    q = tx - PRODUCER
    wg = q // 128
    lane_t = q % 128
    trans_b = 0 if b_transposed else 1
    ty = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}[idt_name]
    kstep = 32 // esz  # one instruction takes 32 bytes of K: k16 of 16-bit types, k8 of TF32
    instr = f"m64n{bn}k{kstep}.{ty}.t{trans_b}"
    # cp.async writes through the generic proxy: fence them for the tensor cores; TMA writes are async-proxy
    mma = [_ev("tc.mbar_wait", full(slot_of), phase_of), *([] if tma else [_ev("tc.fence_proxy_async")]),
           _ev("tc.wgmma_fence")]
    # K-major operands: 8-row groups 8 * rb bytes apart; N-major B: BK-column blocks one box
    # (BK x BK elements) apart, 8-row groups of K 8 * rb bytes apart
    kmajor = f"tc.wgmma_desc:16:{8 * rb}:{sw_code}"
    nmajor = f"tc.wgmma_desc:{BK * BK * esz}:{8 * rb}:{sw_code}"
    for kk in range(BK // kstep):
        da = _call(kmajor, smem_ref(s0 + wg * 64 * BK + kk * kstep), dt="uint64")
        if b_transposed:
            db = _call(kmajor, smem_ref(s0 + a_elems + kk * kstep), dt="uint64")
        else:
            db = _call(nmajor, smem_ref(s0 + a_elems + kk * kstep * BK), dt="uint64")
        mma.append(_ev(f"tc.wgmma:{instr}", E.BufferLoad(acc, (E.const(0),), acc.dtype), da, db))
    prev = (it + (stages - 1)) % stages  # slot of chunk it - 1

    def release(s: E.PrimExpr) -> S.Stmt:  # this warpgroup is done with slot s (in both blocks of a cluster)
        if cl == 1:
            return _ev("tc.mbar_arrive", empty(s))
        return S.seq(_ev("tc.mbar_arrive", empty(s)), _ev("tc.mbar_arrive_cluster", empty(s), 1 - rank))

    mma += [_ev("tc.wgmma_commit"), _ev("tc.wgmma_wait:1"),
            S.IfThenElse(E.logical_and(kc > 0, lane_t == 0), release(prev))]
    last = (i * cpp + (cpp - 1)) % stages
    # with split-K the parts go to a float32 workspace [P, M, N]; the bias and ReLU wait for the sum
    parts = Buffer("wg_parts", as_dtype("float32"), (E.const(P * M * N),), (), "global") if P > 1 else None
    zero = [S.BufferStore(acc, E.const(0.0, "float32"), (E.const(r),)) for r in range(bn // 2)]
    oesz = odt.bits // 8
    out_smem = None
    if tma and parts is None and (N * oesz) % 16 == 0 and t.out_buffers():
        # C's rows are 16-byte multiples (the tensor map's pitch): through shared memory and TMA stores
        out_smem, obase, epi, drain = _tma_store_epilogue(acc, C, map_c, bias_buf, relu, t, lane_t, wg, m0, n0, N)
    else:  # paired stores from registers; with split-K, float32 parts to the workspace
        edge = bool(M % bm or N % bn or mt % cl)  # edge tiles (or a cluster's tile row past M) exist
        epi = _register_store_epilogue(acc, C, parts, part, bias_buf, relu, lane_t, wg, m0, n0, (M, N), (bm, bn),
                                       edge)
    serial = parts is not None and t.last_block_sums
    tickets = ticket = None
    if serial:
        assert parts is not None
        # one counter per (tile, consumer warpgroup): this warpgroup's rows of the tile are complete
        # when all P parts have arrived; the warpgroup that takes the last ticket sums them
        tickets = Buffer("wg_tickets", INT32, (E.const(mt * nt * consumers),), (), "global")
        ticket = Buffer("wg_ticket", INT32, (E.const(1),), (), "local")
        took = E.BufferLoad(ticket, (E.const(0),), INT32)
        epi = epi + [
            _ev("tc.fence_gpu"),  # this thread's part stores, ordered before the ticket (release)
            S.BufferStore(ticket, E.const(0), (E.const(0),)),
            _ev("tc.named_barrier:128", wg + 1),
            S.IfThenElse(lane_t == 0, S.BufferStore(ticket, _call(
                f"tc.splitk_ticket:{P}", E.BufferLoad(tickets, ((by * nt + bx) * consumers + wg,), INT32)),
                (E.const(0),))),
            S.IfThenElse(_call("tc.bar_or:128", wg + 1, took) != 0, S.seq(
                _ev("tc.fence_gpu"),  # the other blocks' parts, ordered after their tickets (acquire)
                *_summed_store_epilogue(parts, P, C, bias_buf, relu, lane_t, wg, m0, n0, (M, N), (bm, bn),
                                        bool(M % bm or N % bn)))),
        ]
    consumer_tile = S.seq(
        *zero,
        S.For(kc, E.const(0), E.const(cpp), S.ForKind.SERIAL, S.seq(*mma), "", ()),
        _ev("tc.wgmma_wait:0"),
        S.IfThenElse(lane_t == 0, release(last)),
        *epi,
    )
    consumer: S.Stmt = S.For(i, E.const(0), my_tiles, S.ForKind.SERIAL, consumer_tile, "", ())
    if out_smem is not None:  # the last stores have read their staging buffers before the block ends
        out_addr = _call("tc.shared_addr", E.BufferLoad(out_smem, (E.const(0),), odt))
        consumer = S.LetStmt(obase, ((ATOM - out_addr % ATOM) % ATOM) // oesz, S.seq(consumer, drain))
        consumer = S.Allocate(out_smem, consumer)
    consumer = S.Allocate(acc, consumer)
    if ticket is not None:
        consumer = S.Allocate(ticket, consumer)

    init = [_ev(f"tc.mbar_init:{1 if tma else PRODUCER}", full(s)) for s in range(stages)]
    init += [_ev(f"tc.mbar_init:{consumers * cl}", empty(s)) for s in range(stages)]
    sync = _ev("tc.cluster_sync") if cl > 1 else _ev("gpu.barrier")
    # the producer gives registers back to the consumers' accumulators and epilogue (as CUTLASS does)
    regs = consumer_regs(consumers) if tma else None  # (cp.async producers need their registers for addresses)
    give = [_ev(f"tc.setmaxnreg_dec:{PRODUCER_REGS}")] if regs else []
    take = [_ev(f"tc.setmaxnreg_inc:{regs}")] if regs else []
    body = S.seq(
        S.IfThenElse(tx == 0, S.seq(*init, _ev("tc.mbar_init_fence"))),
        sync,
        # the TMA thread first fetches both descriptors (prefetch.tensormap), as CUTLASS's producers do
        S.IfThenElse(tx < PRODUCER, S.seq(*give, S.IfThenElse(tx == 0, S.seq(
            *[_ev("tc.tma_prefetch", E.BufferLoad(m, (E.const(0),), u8)) for m in (map_a, map_b)], producer))
            if tma else producer), S.seq(*take, consumer)),
        *([_ev("tc.cluster_sync")] if cl > 1 else []),
    )
    addr = _call("tc.shared_addr", E.BufferLoad(smem, (E.const(0),), idt))
    pad = ((ATOM - addr % ATOM) % ATOM) // esz
    kernel: S.Stmt = S.LetStmt(base, pad, body)
    kernel = S.Allocate(bars, S.Allocate(smem, S.For(tx, E.const(0), E.const(nthr), S.ForKind.THREAD_BINDING, kernel,
                                                     "threadIdx.x")))
    if cl > 1:
        kernel = S.AttrStmt(None, "cluster_dims", (cl, 1, 1), kernel)
    kernel = S.For(blk, E.const(0), E.const(grid), S.ForKind.THREAD_BINDING, kernel, "blockIdx.x")
    if tickets is not None:  # the last block of each tile sums its parts: the tickets start (and end) zero
        kernel = S.Allocate(parts, with_zeroed(tickets, kernel))
    elif parts is not None:  # a second kernel sums the parts of K (one workspace for both)
        kernel = S.Allocate(parts, S.seq(kernel, sum_parts_kernel(parts, P, M, N, C, bias_buf, relu)))
    if out_smem is not None:  # C is written by TMA stores of 64-row sub-tiles, 128 bytes wide
        kernel = with_tensor_map(map_c, TensorMapSpec(C, odt_name, E.const(M), E.const(N), E.const(N * oesz),
                                                       128 // oesz, 64, 128), kernel)
    if tma:  # the host encodes both maps from A's and B's addresses at each call (cached by address)
        pitch = E.const(K * esz)
        if b_transposed:
            spec_b = TensorMapSpec(B, idt_name, E.const(N), E.const(K), pitch, BK, bn // cl, rb)
        else:
            spec_b = TensorMapSpec(B, idt_name, E.const(K), E.const(N), E.const(N * esz), BK, BK, rb)
        kernel = with_tensor_map(map_b, spec_b, kernel)
        kernel = with_tensor_map(map_a, TensorMapSpec(A, idt_name, E.const(M), E.const(K), pitch, BK, bm, rb), kernel)
    params = [A, B] + ([bias_buf] if bias_buf is not None else []) + [C]
    if max(cpp * units // groups + cpp, P * M * N) >= 2**31:
        raise ScheduleError("the warp-specialised wgmma GEMM counts chunks with 32-bit integers; split the product")
    return S.PrimFunc(name, params, kernel, {"target": target})
