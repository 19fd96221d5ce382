"""Tensorized loop nests: warp-level matrix instructions in place of scalar loops.

``Stage.tensorize(axis, intrin)`` marks a loop; :func:`tensorize_stage` (called by schedule
lowering for such a stage) replaces the loops from that axis inward. Three kinds of stages take
part (see :meth:`ember.te.schedule.Stage.tensorize`):

* **mma** — a ``"warp"``-scope reduction ``C[.., i, j] = sum(A[.., i, k] * B[.., k, j])``: one
  ``tc.mma:<intrinsic>`` call per iteration of the outer loops (and a zero fill for its init);
* **load** — a ``"warp"``-scope copy of an operand: ``tc.ldmatrix`` (NVIDIA, 16-bit operands in
  shared memory, rows 16-byte aligned) or one load per register through the operand's layout;
* **store** — a stage reading a ``"warp"`` accumulator: each lane computes the elements its
  registers hold.

A ``"warp"``-scope tensor is stored per lane: its realize region (``rows x cols`` of fragments in
the two tile dimensions) becomes a ``"local"`` buffer of shape ``[..., rows / m, cols / n,
per_lane]`` (:func:`warp_realize_bounds`). Every tensorized region is wrapped in a loop over the
lanes bound to ``threadIdx.x`` (extent = the warp size), so the kernel's ``threadIdx.x`` must be
the lane of a warp. Guarantees: the emitted code computes what the scalar loops would (for the
mma: exactly, up to the instruction's accumulation order); every mismatch between the loops and
the instruction (extents, operand roles, dtypes, guards inside the tile, the target) raises
:class:`~ember.errors.ScheduleError` naming the stage, the instruction and the fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..arith import simplify
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.dtypes import INT32
from ..ir.visitor import Mutator, free_vars, post_order_visit, substitute
from ..te.tensor import ComputeOp, IterKind, IterVar, Range, Tensor
from ..te.tensor_intrin import MatrixIntrinsic

if TYPE_CHECKING:
    from ..te.schedule import Stage
    from .schedule_ops import _Lowering

FALLBACK = "schedule the stage without tensorize (scope 'local' instead of 'warp') to use CUDA-core code"


@dataclass(frozen=True)
class WarpInfo:
    """How a ``"warp"``-scope tensor is laid out: the operand ``role`` (``"a"``, ``"b"``, ``"c"``)
    of instruction ``intrin`` it holds, and which of its dimensions are the fragment's rows and
    columns."""

    intrin: MatrixIntrinsic
    role: str
    row_dim: int
    col_dim: int


@dataclass
class StageLoops:
    """What schedule lowering knows about the stage being tensorized: its inner (tensorized)
    leaves with their ranges, the value of each root variable in leaf variables, the split
    guards, the body with values substituted, and the output index."""

    stage: Stage
    inner: list[IterVar]
    leaves: dict[IterVar, Range]
    values: dict[E.Var, E.PrimExpr]
    preds: list[E.PrimExpr]
    body: list[E.PrimExpr]
    index: tuple[E.PrimExpr, ...]


def _err(stage: Stage, intrin: MatrixIntrinsic, what: str) -> ScheduleError:
    return ScheduleError(f"tensorize of stage {stage.name} with {intrin.name}: {what}; {FALLBACK}")


def _mentions(e: Any, v: E.Var) -> bool:
    return v in free_vars(e)


def _unit_step(idx: E.PrimExpr, leaf: IterVar, ext: int) -> bool:
    """True when ``idx`` grows by exactly one per step of ``leaf`` over its extent."""
    v = leaf.var
    at0 = substitute(idx, {v: E.const(0, v.dtype)})
    at1 = substitute(idx, {v: E.const(1, v.dtype)})
    last = substitute(idx, {v: E.const(ext - 1, v.dtype)})
    d1, dl = simplify(at1 - at0), simplify(last - at0)
    return isinstance(d1, E.IntImm) and d1.value == 1 and isinstance(dl, E.IntImm) and dl.value == ext - 1


def _const(e: E.PrimExpr) -> int | None:
    s = simplify(e)
    return s.value if isinstance(s, E.IntImm) else None


def _strip_cast(e: E.PrimExpr) -> E.PrimExpr:
    while isinstance(e, E.Cast):
        e = e.value
    return e


def _loads(e: Any) -> list[E.ProducerLoad]:
    out: list[E.ProducerLoad] = []
    for x in e if isinstance(e, (list, tuple)) else [e]:
        post_order_visit(x, lambda n: out.append(n) if isinstance(n, E.ProducerLoad) else None)
    return out


# -- the mma pattern ----------------------------------------------------------------------------------
@dataclass
class MmaPattern:
    """The roles found in a tensorized warp reduction: which inner leaf is ``i``, ``j`` and
    ``k``, the operand loads, and the layout of each warp tensor involved."""

    li: IterVar
    lj: IterVar
    lk: IterVar
    a: E.ProducerLoad
    b: E.ProducerLoad
    infos: dict[int, WarpInfo]  # id(stage key tensor op) -> info


def _dim_driven(index: tuple[E.PrimExpr, ...], leaf: IterVar, others: list[IterVar], ext: int) -> int | None:
    """The one dimension of ``index`` that moves with ``leaf`` (by one per step, no other inner
    leaf in it); None when there is none or more than one."""
    dims = [d for d, ix in enumerate(index) if _mentions(ix, leaf.var)]
    if len(dims) != 1:
        return None
    ix = index[dims[0]]
    if any(_mentions(ix, o.var) for o in others if o is not leaf) or not _unit_step(ix, leaf, ext):
        return None
    return dims[0]


def mma_pattern(low: _Lowering, loops: StageLoops, intrin: MatrixIntrinsic) -> MmaPattern:
    """Match the tensorized warp reduction of ``loops`` against ``intrin`` (see module doc)."""
    st = loops.stage
    op = st.op
    assert isinstance(op, ComputeOp)
    if len(loops.inner) != 3:
        names = ", ".join(iv.var.name for iv in loops.inner)
        raise _err(st, intrin, f"the loops from the tensorized axis inward must be the three tile loops "
                               f"(m={intrin.m}, n={intrin.n}, k={intrin.k}); they are: {names}")
    red = loops.body[0]
    if not isinstance(red, E.Reduce) or len(loops.body) != 1:
        raise _err(st, intrin, "the stage is not a single reduction")
    ident = simplify(red.combiner.identity[0])
    if not (isinstance(ident, (E.IntImm, E.FloatImm)) and ident.value == 0):
        raise _err(st, intrin, "the reduction is not a sum")
    lhs = [E.ProducerLoad(op.output(0), loops.index, red.dtype)]
    combined = red.combiner.combine(lhs, list(red.source))[0]
    src = red.source[0]
    if not (isinstance(combined, E.Add) and isinstance(_strip_cast(src), E.Mul)):
        raise _err(st, intrin, "the reduction is not a sum of products")
    if red.condition is not None and _const(red.condition) != 1:
        raise _err(st, intrin, "the reduction has a condition (where=...), which one instruction cannot apply")
    prod = _strip_cast(src)
    assert isinstance(prod, E.Mul)
    xa, xb = _strip_cast(prod.a), _strip_cast(prod.b)
    if not (isinstance(xa, E.ProducerLoad) and isinstance(xb, E.ProducerLoad)):
        raise _err(st, intrin, "the product's factors must be reads of warp-scope fragments")
    if op.output(0).dtype != intrin.accumulator_type:
        raise _err(st, intrin, f"the accumulator is {op.output(0).dtype}, the instruction accumulates in "
                               f"{intrin.acc_dtype}")
    for x in (xa, xb):
        if x.dtype != intrin.input_type:
            raise _err(st, intrin, f"operand {x.producer.name} is {x.dtype}, the instruction multiplies "
                                   f"{intrin.in_dtype}")
        xst = low.schedule._by_op.get(x.producer.op)
        if xst is None or xst.scope != "warp":
            raise _err(st, intrin, f"operand {x.producer.name} must be a 'warp'-scope stage "
                                   "(s.cache_read(..., 'warp', [...]) computed inside this stage's loops)")
    ext = {iv: _const(loops.leaves[iv].extent) for iv in loops.inner}
    red_vars = {iv.var for iv in op.reduce_axis}
    kinds: dict[str, list[IterVar]] = {"k": [], "data": []}
    for leaf in loops.inner:
        driven = [v for v, val in loops.values.items() if _mentions(val, leaf.var)]
        if len(driven) != 1:
            raise _err(st, intrin, f"loop {leaf.var.name} must come from splitting one axis (it drives "
                                   f"{len(driven)})")
        kinds["k" if driven[0] in red_vars else "data"].append(leaf)
    if len(kinds["k"]) != 1 or len(kinds["data"]) != 2:
        raise _err(st, intrin, "the tile loops must be two data-parallel loops and one reduction loop")
    lk = kinds["k"][0]
    la = [leaf for leaf in kinds["data"] if any(_mentions(i, leaf.var) for i in xa.indices)]
    lb = [leaf for leaf in kinds["data"] if any(_mentions(i, leaf.var) for i in xb.indices)]
    if len(la) != 1 or len(lb) != 1 or la[0] is lb[0]:
        raise _err(st, intrin, "each operand must be indexed by the reduction loop and one of the output loops")
    li, lj = la[0], lb[0]
    for leaf, want, what in ((li, intrin.m, "m"), (lj, intrin.n, "n"), (lk, intrin.k, "k")):
        if ext[leaf] != want:
            raise _err(st, intrin, f"loop {leaf.var.name} ({what}) has extent {ext[leaf]}, the instruction "
                                   f"needs {want}")
    infos: dict[int, WarpInfo] = {}
    roles = ((op.output(0), loops.index, "c", li, lj), (xa.producer, xa.indices, "a", li, lk),
             (xb.producer, xb.indices, "b", lk, lj))
    for tensor, index, role, rl, cl in roles:
        rows, cols = intrin.shape(role)
        rd = _dim_driven(index, rl, loops.inner, rows)
        cd = _dim_driven(index, cl, loops.inner, cols)
        if rd is None or cd is None or rd == cd:
            raise _err(st, intrin, f"{tensor.name} must be indexed by the tile loops with unit steps, one "
                                   "dimension each")
        infos[id(tensor.op)] = WarpInfo(intrin, role, rd, cd)
    return MmaPattern(li, lj, lk, xa, xb, infos)


def _mma_stage_of(low: _Lowering, st: Stage) -> Stage:
    """The tensorized warp reduction that ``st`` (a warp tensor) feeds or is."""
    if st.tensorized is not None and isinstance(st.op, ComputeOp) and st.op.is_reduction:
        return st
    for c in low.schedule.stages:
        if c.scope == "warp" and c.tensorized is not None and isinstance(c.op, ComputeOp) and c.op.is_reduction:
            if any(ld.producer.op is st.op for ld in _loads(low.effective_body(c))):
                return c
    raise ScheduleError(
        f"stage {st.name} has scope 'warp' but no tensorized warp reduction reads it; 'warp' scope holds the "
        "operands and accumulator of a tensorized matrix instruction (use 'local' otherwise)"
    )


def warp_info(low: _Lowering, st: Stage) -> WarpInfo:
    """The layout of warp-scope stage ``st`` (from the tensorized reduction it feeds or is)."""
    cache = low.warp_infos
    if st in cache:
        return cache[st]
    mst = _mma_stage_of(low, st)
    if mst not in low.infos:
        raise ScheduleError(f"warp stage {mst.name} is not computed (attach it with compute_at)")
    assert mst.tensorized is not None
    pat = mma_pattern(low, stage_loops(low, mst), mst.tensorized[1])
    for s2 in low.schedule.stages:
        info = pat.infos.get(id(s2.op))
        if info is not None:
            cache[s2] = info
    if st not in cache:
        raise ScheduleError(f"warp stage {st.name} is not an operand of {mst.name}'s matrix instruction")
    return cache[st]


def stage_loops(low: _Lowering, st: Stage) -> StageLoops:
    """:class:`StageLoops` of a tensorized stage (leaf values, guards, substituted body)."""
    assert st.tensorized is not None
    op = st.op
    assert isinstance(op, ComputeOp)
    leaves, values, preds = low.leaf_values(st)
    preds = _simplify_preds(low, preds)
    pos = st.leaf_iter_vars.index(st.tensorized[0])
    inner = list(st.leaf_iter_vars[pos:])
    body = [substitute(b, values) for b in low.effective_body(st)]
    index = tuple(values[iv.var] for iv in op.axis)
    return StageLoops(st, inner, leaves, values, preds, body, index)


# -- the per-lane storage of warp tensors -----------------------------------------------------------
def warp_realize_bounds(low: _Lowering, st: Stage) -> tuple[tuple[E.PrimExpr, E.PrimExpr], ...]:
    """The ``"local"`` bounds that hold warp-scope stage ``st`` per lane: each dimension of its
    region, the row and column dimensions counted in fragments, then the registers of one
    fragment."""
    info = warp_info(low, st)
    op = st.op
    assert isinstance(op, ComputeOp)
    rows, cols = info.intrin.shape(info.role)
    out: list[tuple[E.PrimExpr, E.PrimExpr]] = []
    for d, iv in enumerate(op.axis):
        ext = _const(low.infos[st].root_ranges[iv].extent)
        tile = rows if d == info.row_dim else cols if d == info.col_dim else 1
        if ext is None or ext % tile:
            raise _err(st, info.intrin, f"its region along dimension {d} is {low.infos[st].root_ranges[iv].extent} "
                                        f"elements, not a multiple of the fragment's {tile}")
        out.append((E.const(0), E.const(ext // tile)))
    out.append((E.const(0), E.const(info.intrin.layout(info.role).per_lane)))
    return tuple(out)


def _phys_index(
    low: _Lowering, st: Stage, origin: tuple[E.PrimExpr, ...], reg: E.PrimExpr | int
) -> tuple[E.PrimExpr, ...]:
    """Index of register ``reg`` of the fragment whose first element is at logical ``origin``."""
    info = warp_info(low, st)
    op = st.op
    assert isinstance(op, ComputeOp)
    rows, cols = info.intrin.shape(info.role)
    out: list[E.PrimExpr] = []
    for d, (iv, ix) in enumerate(zip(op.axis, origin)):
        rel = simplify(ix - low.infos[st].root_ranges[iv].min)
        tile = rows if d == info.row_dim else cols if d == info.col_dim else 1
        if tile > 1:
            if _const(E.floormod(rel, tile)) != 0:
                raise _err(st, info.intrin, f"a fragment of {op.name} starts at {rel} along dimension {d}, not at a "
                                            f"multiple of {tile}: split the tile loops by the instruction's shape")
            rel = simplify(E.floordiv(rel, tile))
        out.append(rel)
    out.append(E.const(reg) if isinstance(reg, int) else reg)
    return tuple(out)


class _WarpReads(Mutator):
    """Replaces reads of warp tensors (at a lane's element) by reads of the register holding it."""

    def __init__(self, low: _Lowering, reg: int, tile_leaves: tuple[IterVar, ...]):
        self.low, self.reg = low, reg
        self.tile_leaves = tile_leaves

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        st = self.low.schedule._by_op.get(e.producer.op)
        if st is None or st.scope != "warp":
            return self.generic_mutate(e)
        at0 = {iv.var: E.const(0, iv.var.dtype) for iv in self.tile_leaves}
        origin = tuple(substitute(ix, at0) for ix in e.indices)
        return E.ProducerLoad(e.producer, _phys_index(self.low, st, origin, self.reg), e.dtype)


def _lane_loop(lane: E.Var, warp: int, body: S.Stmt) -> S.Stmt:
    return S.For(lane, E.const(0), E.const(warp), S.ForKind.THREAD_BINDING, body, "threadIdx.x")


def _condition(preds: list[E.PrimExpr]) -> E.PrimExpr | None:
    """The conjunction of the predicates that are not provably true (None: all are)."""
    cond: E.PrimExpr | None = None
    for p in preds:
        p = simplify(p)
        if isinstance(p, E.IntImm) and p.value:
            continue
        cond = p if cond is None else E.logical_and(cond, p)
    return cond


def _guard(preds: list[E.PrimExpr], body: S.Stmt) -> S.Stmt:
    cond = _condition(preds)
    return body if cond is None else S.IfThenElse(cond, body)


def _check_target(low: _Lowering, st: Stage, intrin: MatrixIntrinsic) -> None:
    target = getattr(low, "target", None)
    if target is None:
        return
    why = intrin.unavailable(target)
    if why:
        raise _err(st, intrin, why)


# -- emission ---------------------------------------------------------------------------------------
def tensorize_stage(low: _Lowering, st: Stage) -> tuple[S.Stmt, S.Stmt | None, list[IterVar]]:
    """The statement replacing the tensorized loops of ``st`` and, for a reduction, the statement
    replacing the same loops in its init (the zero fill); plus the tensorized leaves."""
    assert st.tensorized is not None
    intrin: MatrixIntrinsic = st.tensorized[1]
    _check_target(low, st, intrin)
    loops = stage_loops(low, st)
    op = st.op
    assert isinstance(op, ComputeOp)
    if st.scope == "warp" and op.is_reduction:
        return (*_emit_mma(low, loops, intrin), loops.inner)
    if st.scope == "warp":
        return _emit_load(low, loops, intrin), None, loops.inner
    return _emit_store(low, loops, intrin), None, loops.inner


def loop_ranges(low: _Lowering) -> dict[E.Var, tuple[int | None, int | None]]:
    """Constant ranges of every loop variable of the schedule (to prove guards away)."""
    if low.loop_ranges is not None:
        return low.loop_ranges
    from ..te.schedule import leaf_extents

    out: dict[E.Var, tuple[int | None, int | None]] = {}
    for st, info in low.infos.items():
        for iv, rng in leaf_extents(st, info.root_ranges).items():
            ext = _const(rng.extent)
            if ext is not None and iv in st.leaf_iter_vars:
                out[iv.var] = (0, ext - 1)
    low.loop_ranges = out
    return out


def _simplify_preds(low: _Lowering, preds: list[E.PrimExpr]) -> list[E.PrimExpr]:
    ranges = loop_ranges(low)
    out = []
    for p in preds:
        q = simplify(p, ranges)
        if not (isinstance(q, E.IntImm) and q.value):
            out.append(p)
    return out


def _outer_preds(loops: StageLoops, intrin: MatrixIntrinsic) -> list[E.PrimExpr]:
    inner = {iv.var for iv in loops.inner}
    out = []
    for p in loops.preds:
        if any(v in inner for v in free_vars(p)):
            raise _err(loops.stage, intrin, f"the guard {p} (a split that does not divide) falls inside the tile; "
                                            "pad the tensor to whole tiles")
        out.append(p)
    return out


def _emit_mma(low: _Lowering, loops: StageLoops, intrin: MatrixIntrinsic) -> tuple[S.Stmt, S.Stmt]:
    st = loops.stage
    op = st.op
    assert isinstance(op, ComputeOp)
    pat = mma_pattern(low, loops, intrin)
    at0 = {iv.var: E.const(0, iv.var.dtype) for iv in loops.inner}
    c_origin = tuple(substitute(ix, at0) for ix in loops.index)
    out = op.output(0)
    c_arg = E.ProducerLoad(out, _phys_index(low, st, c_origin, 0), out.dtype)
    args: list[E.PrimExpr] = [c_arg]
    for ld in (pat.a, pat.b):
        xst = low.schedule._by_op[ld.producer.op]
        origin = tuple(substitute(ix, at0) for ix in ld.indices)
        args.append(E.ProducerLoad(ld.producer, _phys_index(low, xst, origin, 0), ld.dtype))
    lane = E.Var(f"{st.name}.lane", INT32)
    call = S.Evaluate(E.Call(E.const(0).dtype, "tc.mma:" + intrin.name, tuple(args)))
    update = _guard(_outer_preds(loops, intrin), _lane_loop(lane, intrin.warp, call))
    red_leaves = {iv.var for iv in loops.inner if iv.kind is IterKind.REDUCE}
    init_preds = [p for p in _outer_preds(loops, intrin) if not any(v in red_leaves for v in free_vars(p))]
    per = intrin.c.per_lane
    fills = [S.ProducerStore(out, E.const(0, out.dtype), _phys_index(low, st, c_origin, r)) for r in range(per)]
    init = _guard(init_preds, S.seq(*fills))
    return update, init


def _tile_leaves(loops: StageLoops, tensor_index: tuple[E.PrimExpr, ...], info: WarpInfo) -> tuple[IterVar, IterVar]:
    """The inner leaves that move along the fragment's rows and columns of a warp tensor read or
    written at ``tensor_index``."""
    st, intrin = loops.stage, info.intrin
    rows, cols = intrin.shape(info.role)
    if len(loops.inner) != 2:
        raise _err(st, intrin, f"the loops from the tensorized axis inward must be the {rows} x {cols} tile of "
                               f"operand {info.role.upper()}; they are: {', '.join(iv.var.name for iv in loops.inner)}")
    found: dict[int, IterVar] = {}
    for leaf in loops.inner:
        ext = _const(loops.leaves[leaf].extent)
        for d, want in ((info.row_dim, rows), (info.col_dim, cols)):
            if _mentions(tensor_index[d], leaf.var):
                if ext != want or not _unit_step(tensor_index[d], leaf, want):
                    raise _err(st, intrin, f"loop {leaf.var.name} has extent {ext} along a dimension of {want}")
                found[d] = leaf
    if set(found) != {info.row_dim, info.col_dim}:
        raise _err(st, intrin, "the two tile loops must run along the fragment's rows and columns")
    return found[info.row_dim], found[info.col_dim]


def _emit_load(low: _Lowering, loops: StageLoops, intrin: MatrixIntrinsic) -> S.Stmt:
    st = loops.stage
    op = st.op
    assert isinstance(op, ComputeOp)
    info = warp_info(low, st)
    if info.role == "c":
        raise _err(st, intrin, "the accumulator is not loaded; it is computed by the tensorized reduction")
    lrow, lcol = _tile_leaves(loops, loops.index, info)
    lay = intrin.layout(info.role)
    out = op.output(0)
    at0 = {lrow.var: E.const(0, lrow.var.dtype), lcol.var: E.const(0, lcol.var.dtype)}
    origin = tuple(substitute(ix, at0) for ix in loops.index)
    lane = E.Var(f"{st.name}.lane", INT32)
    fast = _ldmatrix(low, loops, intrin, info, lrow, lcol, lane, origin)
    if fast is not None:
        return _lane_loop(lane, intrin.warp, fast)
    stores: list[S.Stmt] = []
    for r in range(lay.per_lane):
        u, v = lay.coord(lane, r)
        sub = {lrow.var: simplify(E.convert(u)), lcol.var: simplify(E.convert(v))}
        value = substitute(loops.body[0], sub)
        cond = _condition([substitute(p, sub) for p in loops.preds])
        if cond is not None:
            value = E.select(cond, value, E.const(0, value.dtype))
        stores.append(S.ProducerStore(out, value, _phys_index(low, st, origin, r)))
    return _lane_loop(lane, intrin.warp, S.seq(*stores))


def _ldmatrix(low: _Lowering, loops: StageLoops, intrin: MatrixIntrinsic, info: WarpInfo, lrow: IterVar,
              lcol: IterVar, lane: E.Var, origin: tuple[E.PrimExpr, ...]) -> S.Stmt | None:
    """``ldmatrix`` (``x4`` for A, ``x2`` for B; ``.trans`` when the fragment's register pairs
    run across the shared rows) when the operand is a 16-bit copy from shared memory with no guard
    and 16-byte aligned rows; None when any of that does not hold."""
    if intrin.kind != "cuda" or intrin.input_type.bits != 16 or intrin.warp != 32:
        return None
    src = loops.body[0]
    if not isinstance(src, E.ProducerLoad):
        return None
    sst = low.schedule._by_op.get(src.producer.op)
    if sst is None or sst.scope != "shared" or sst not in low.infos:
        return None
    if any(not (isinstance(simplify(p), E.IntImm) and simplify(p).value) for p in loops.preds):
        return None
    lay = intrin.layout(info.role)
    npairs = lay.per_lane // 2
    if npairs not in (1, 2, 4):
        return None
    # The register pairs: pair p of lane (g, t) must hold (origin_p + g * e_other + 2t * e_pair) and
    # the element after it along e_pair, which is ldmatrix's 8 x 8 layout (or its transpose).
    pair_dim = None
    origins: list[tuple[int, int]] = []
    for p in range(npairs):
        o = tuple(int(x) for x in lay.coord(0, 2 * p))
        nxt = tuple(int(x) for x in lay.coord(0, 2 * p + 1))
        step = (nxt[0] - o[0], nxt[1] - o[1])
        if step not in ((1, 0), (0, 1)):
            return None
        pd = 0 if step == (1, 0) else 1
        if pair_dim not in (None, pd):
            return None
        pair_dim = pd
        origins.append(o)  # type: ignore[arg-type]
        for ln in range(32):
            g, t = ln // 4, ln % 4
            want = [o[0], o[1]]
            want[1 - pd] += g
            want[pd] += 2 * t
            if tuple(int(x) for x in lay.coord(ln, 2 * p)) != tuple(want):
                return None
    assert pair_dim is not None
    # Which logical dimension is contiguous in shared memory (the source's last dimension)?
    last = len(src.indices) - 1
    leaf_of = {0: lrow, 1: lcol}
    contig = [d for d in (0, 1) if _mentions(src.indices[last], leaf_of[d].var)]
    if len(contig) != 1 or not _unit_step(src.indices[last], leaf_of[contig[0]], 8):
        return None
    cdim = contig[0]
    other = 1 - cdim
    if not any(_mentions(ix, leaf_of[other].var) for ix in src.indices[:last]):
        return None
    trans = pair_dim != cdim
    # Alignment: every row of 8 elements starts on 16 bytes.
    sinfo = low.infos[sst]
    sop = sst.op
    assert isinstance(sop, ComputeOp)
    exts = [_const(sinfo.root_ranges[iv].extent) for iv in sop.axis]
    if any(x is None for x in exts):
        return None
    from .flatten import _aligned_strides  # the strides flattening will give the buffer

    strides = [_const(x) for x in _aligned_strides(tuple(E.const(x) for x in exts), sst.aligns)]
    if any(s is None or (s * 2) % 16 for s in strides[:-1]):  # type: ignore[operator]
        return None
    src0 = [simplify(substitute(ix, {lrow.var: E.const(0), lcol.var: E.const(0)}) - sinfo.root_ranges[iv].min)
            for ix, iv in zip(src.indices, sop.axis)]
    if _const(E.floormod(src0[last], 8)) != 0:
        return None
    # Lane l gives the address of row (l % 8) of matrix q = (l // 8) % npairs.
    q = (lane // 8) % npairs
    i8 = lane % 8

    def pick(vals: list[int]) -> E.PrimExpr:
        e: E.PrimExpr = E.const(vals[-1])
        for k in reversed(range(len(vals) - 1)):
            e = E.select(E.EQ(q, E.const(k), E.BOOL), E.const(vals[k]), e)
        return e

    coord = [pick([o[0] for o in origins]), pick([o[1] for o in origins])]
    coord[other] = coord[other] + i8
    addr = E.ProducerLoad(src.producer, tuple(simplify(substitute(ix, {lrow.var: coord[0], lcol.var: coord[1]}))
                                              for ix in src.indices), src.dtype)
    out = loops.stage.op.output(0)
    dst = E.ProducerLoad(out, _phys_index(low, loops.stage, origin, 0), out.dtype)
    op_name = f"tc.ldmatrix:x{npairs}{'.trans' if trans else ''}"
    return S.Evaluate(E.Call(E.const(0).dtype, op_name, (dst, addr)))


def _emit_store(low: _Lowering, loops: StageLoops, intrin: MatrixIntrinsic) -> S.Stmt:
    st = loops.stage
    op = st.op
    assert isinstance(op, ComputeOp)
    warp_reads = [ld for ld in _loads(loops.body) if (s2 := low.schedule._by_op.get(ld.producer.op)) is not None
                  and s2.scope == "warp"]
    tensors = {id(ld.producer.op): ld for ld in warp_reads}
    if len(tensors) != 1:
        raise _err(st, intrin, "a tensorized store must read exactly one 'warp' accumulator "
                               f"(it reads {len(tensors)})")
    ld = warp_reads[0]
    if any(x.indices != ld.indices for x in warp_reads):
        raise _err(st, intrin, f"{ld.producer.name} is read at more than one index")
    wst = low.schedule._by_op[ld.producer.op]
    info = warp_info(low, wst)
    if info.role != "c":
        raise _err(st, intrin, f"{ld.producer.name} is operand {info.role.upper()}, not the accumulator")
    lrow, lcol = _tile_leaves(loops, ld.indices, info)
    lay = intrin.c
    lane = E.Var(f"{st.name}.lane", INT32)
    stores: list[S.Stmt] = []
    outs = [op.output(k) for k in range(op.num_outputs)]
    for r in range(lay.per_lane):
        u, v = lay.coord(lane, r)
        sub = {lrow.var: simplify(E.convert(u)), lcol.var: simplify(E.convert(v))}
        reads = _WarpReads(low, r, (lrow, lcol))
        vals = [substitute(reads.visit(b), sub) for b in loops.body]
        index = tuple(simplify(substitute(ix, sub)) for ix in loops.index)
        body = S.seq(*[S.ProducerStore(t, val, index) for t, val in zip(outs, vals)])
        stores.append(_guard([substitute(p, sub) for p in loops.preds], body))
    return _lane_loop(lane, intrin.warp, S.seq(*stores))


def check_no_stray_warp_access(stmt: S.Stmt, low: _Lowering) -> None:
    """Raise :class:`ScheduleError` when a warp tensor is read or written outside a tensorized
    region (its per-lane storage has one more dimension than its logical shape)."""

    def visit(n: Any) -> None:
        if isinstance(n, (E.ProducerLoad, S.ProducerStore)):
            t: Tensor = n.producer
            s2 = low.schedule._by_op.get(t.op)
            if s2 is not None and s2.scope == "warp" and len(n.indices) == len(t.shape):
                raise ScheduleError(
                    f"warp-scope tensor {t.name} is accessed outside a tensorized loop nest; tensorize every stage "
                    "that writes or reads it (its copy, the reduction and the stage that stores the result)"
                )

    post_order_visit(stmt, visit)
