"""Software pipelining of shared-memory staging: copies for later iterations overlap compute.

``Stage.pipeline(axis, stages)`` marks a serial loop whose body begins by filling
``"shared"`` buffers allocated inside it (the staging copies of operands computed at that loop)
and then computes from them. :func:`pipeline_shared_copies` rewrites such a loop ``for ko in
range(n)`` into::

    copy(0); commit; ...; copy(S-2); commit                 # the prologue (guarded by s < n)
    for ko in range(n):
        wait until at most S-2 copy groups are in flight; barrier
        if ko + S - 1 < n: copy(ko + S - 1)
        commit
        compute(ko)                                          # reads slot ko % S

Each staged buffer becomes ``S`` slots (its size rounded up to 16 bytes); copy ``j`` writes slot
``j % S``. On NVIDIA the copies whose source is a global load of 4, 8 or 16 aligned bytes
(optionally under a uniform condition: zero fill otherwise) become asynchronous ``cp.async``
(``tc.cp_async:<bytes>`` calls); the others stay ordinary stores, which the same wait and barrier
order. Guarantees: every element read by ``compute(ko)`` is the one the unpipelined loop would
read; the barrier before each copy keeps it from overwriting a slot another warp still reads.
Raises :class:`~ember.errors.LoweringError` when the marked loop does not have that shape.
"""

from __future__ import annotations

from typing import Any

from ..arith import simplify
from ..errors import LoweringError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.buffer import Buffer
from ..ir.dtypes import INT32
from ..ir.visitor import Mutator, post_order_visit, substitute
from .gpu import buffer_elems

PIPELINE = "pipeline_stages"


def _call(op: str, *args: E.PrimExpr) -> S.Stmt:
    return S.Evaluate(E.Call(INT32, op, tuple(args)))


def _stores_to(s: Any, bufs: set[Buffer]) -> bool:
    hit: list[bool] = []
    post_order_visit(s, lambda n: hit.append(True) if isinstance(n, S.BufferStore) and n.buffer in bufs else None)
    return bool(hit)


def _reads(s: Any, bufs: set[Buffer]) -> bool:
    hit: list[bool] = []
    post_order_visit(s, lambda n: hit.append(True) if isinstance(n, E.BufferLoad) and n.buffer in bufs else None)
    return bool(hit)


class _Slots(Mutator):
    """Accesses of the staged buffers moved to their slot ``slot`` (reads and writes)."""

    def __init__(self, remap: dict[Buffer, tuple[Buffer, int]], slot: E.PrimExpr, async_copies: bool):
        self.remap, self.slot, self.async_copies = remap, slot, async_copies
        self._offsets: dict[Buffer, E.PrimExpr] = {}  # the slot's offset in each buffer, simplified once

    def _index(self, buf: Buffer, idx: E.PrimExpr) -> tuple[Buffer, E.PrimExpr]:
        new, size = self.remap[buf]
        off = self._offsets.get(buf)
        if off is None:
            off = self._offsets[buf] = simplify(self.slot * size)
        if isinstance(idx, E.Ramp):
            return new, E.Ramp(simplify(idx.base + off), idx.stride, idx.lanes, idx.dtype)
        return new, simplify(idx + E.cast(idx.dtype, off))

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        if e.buffer not in self.remap:
            return self.generic_mutate(e)
        new, idx = self._index(e.buffer, self.visit(e.indices[0]))
        return E.BufferLoad(new, (idx,), e.dtype)

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        if s.buffer not in self.remap:
            return self.generic_mutate(s)
        value = self.visit(s.value)
        new, idx = self._index(s.buffer, self.visit(s.indices[0]))
        if self.async_copies:
            copy = _as_cp_async(new, idx, value)
            if copy is not None:
                return copy
        return S.BufferStore(new, value, (idx,))


def _multiple_of(e: E.PrimExpr, n: int) -> bool:
    """True when ``e`` is provably a multiple of ``n``."""
    m = simplify(E.floormod(e, n))
    for _ in range(3):  # nested floormods simplify one level per pass
        if isinstance(m, E.IntImm):
            return m.value == 0
        m = simplify(m)
    return False


def _as_cp_async(dst: Buffer, idx: E.PrimExpr, value: E.PrimExpr) -> S.Stmt | None:
    """``dst[idx] = value`` as one ``cp.async`` when ``value`` reads 4, 8 or 16 aligned bytes of
    global memory (possibly as ``select(c, load, 0)`` with a uniform ``c``: zero fill when false)."""
    cond: E.PrimExpr | None = None
    if isinstance(value, E.Select) and value.condition.dtype.lanes == 1:
        zero = value.false_value
        zval = zero.value if isinstance(zero, E.Broadcast) else zero
        if not (isinstance(zval, (E.IntImm, E.FloatImm)) and zval.value == 0):
            return None
        cond, value = value.condition, value.true_value
    if not (isinstance(value, E.BufferLoad) and value.buffer.scope == "global"):
        return None
    lanes = value.dtype.lanes
    nbytes = lanes * value.dtype.bits // 8
    if nbytes not in (4, 8, 16) or value.dtype.bits < 8:
        return None
    src_idx = value.indices[0]
    if lanes > 1:
        if not (isinstance(src_idx, E.Ramp) and isinstance(idx, E.Ramp)):
            return None
        if not all(isinstance(r.stride, E.IntImm) and r.stride.value == 1 for r in (src_idx, idx)):
            return None
        src_base, dst_base = src_idx.base, idx.base
    else:
        src_base, dst_base = src_idx, idx
    if lanes > 1 and not (_multiple_of(src_base, lanes) and _multiple_of(dst_base, lanes)):
        return None
    size: E.PrimExpr = E.const(nbytes)
    if cond is not None:
        size = E.select(cond, E.const(nbytes), E.const(0))
        src_base = E.select(cond, src_base, E.const(0, src_base.dtype))
    src = E.BufferLoad(value.buffer, (src_base,), value.dtype.with_lanes(1))
    dst_ref = E.BufferLoad(dst, (dst_base,), value.dtype.with_lanes(1))
    return _call(f"tc.cp_async:{nbytes}", dst_ref, src, size)


def _pipeline(loop: S.For, stages: int, async_copies: bool) -> S.Stmt:
    allocs: list[Buffer] = []
    body = loop.body
    while isinstance(body, S.Allocate) and body.buffer.scope == "shared":
        allocs.append(body.buffer)
        body = body.body
    if not allocs:
        raise LoweringError(f"pipeline of loop {loop.loop_var.name}: no shared buffer is staged inside it "
                            "(compute the shared caches at this loop)")
    staged = set(allocs)
    items = list(body.seq) if isinstance(body, S.SeqStmt) else [body]
    k = 0
    while k < len(items) and _stores_to(items[k], staged) and not _reads(items[k], staged):
        k += 1
    copies, rest = items[:k], items[k:]
    if not copies or any(_stores_to(r, staged) for r in rest):
        raise LoweringError(f"pipeline of loop {loop.loop_var.name}: its body must first fill the shared buffers "
                            f"({', '.join(b.name for b in allocs)}) and then only read them")
    remap: dict[Buffer, tuple[Buffer, int]] = {}
    for b in allocs:
        align = max(1, 16 // max(1, b.dtype.bits // 8))
        size = -(-buffer_elems(b) // align) * align
        remap[b] = (Buffer(b.name, b.dtype, (E.const(size * stages),), (), "shared"), size)
    v = loop.loop_var
    n = loop.extent
    copy = S.seq(*copies)

    def copy_at(j: E.PrimExpr) -> S.Stmt:
        moved = substitute(copy, {v: j})
        return _Slots(remap, simplify(E.floormod(j, stages)), async_copies).visit(moved)

    commit = _call("tc.cp_async_commit") if async_copies else S.seq()
    prologue: list[S.Stmt] = []
    for s in range(stages - 1):
        j = simplify(loop.min + s)
        cond = simplify(E.const(s) < n)
        step = copy_at(j)
        prologue += [step if isinstance(cond, E.IntImm) and cond.value else S.IfThenElse(cond, step), commit]
    ahead = simplify(v + (stages - 1))
    nxt = S.IfThenElse(simplify(ahead < loop.min + n), copy_at(ahead))
    compute = _Slots(remap, simplify(E.floormod(v, stages)), False).visit(S.seq(*rest))
    barrier = _call("gpu.barrier")
    wait = _call(f"tc.cp_async_wait:{stages - 2}") if async_copies else S.seq()
    new_body = S.seq(wait, barrier, nxt, commit, compute)
    out: S.Stmt = S.seq(*prologue, S.For(v, loop.min, n, S.ForKind.SERIAL, new_body, "", ()))
    # Nothing may be left in flight when the loop is done (a later stage may reuse the memory).
    out = S.seq(out, _call("tc.cp_async_wait:0") if async_copies else S.seq(), barrier)
    for b in reversed(allocs):
        out = S.Allocate(remap[b][0], out)
    return out


class _Pipeline(Mutator):
    def __init__(self, async_copies: bool):
        self.async_copies = async_copies

    def visit_For(self, s: S.For) -> S.Stmt:
        s2 = self.generic_mutate(s)
        stages = dict(s.annotations).get(PIPELINE)
        if stages is None or not isinstance(s2, S.For):
            return s2
        if s.kind is not S.ForKind.SERIAL:
            raise LoweringError(f"pipeline of loop {s.loop_var.name}: the loop must be serial (not {s.kind.value})")
        return _pipeline(s2, int(stages), self.async_copies)


def pipeline_shared_copies(stmt: S.Stmt, async_copies: bool = True) -> S.Stmt:
    """``stmt`` with every loop marked by ``Stage.pipeline`` software-pipelined (see module doc);
    ``async_copies`` turns eligible copies into ``cp.async`` (NVIDIA sm_80 and newer)."""
    return _Pipeline(async_copies).visit(stmt)
