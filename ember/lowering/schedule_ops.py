"""From a schedule to loop IR with tensor-level loads and stores.

:func:`schedule_to_stmt` infers the region each stage must compute (bound inference), builds each
stage's loop nest from its leaf axes, inserts stages computed at another stage's loop, and wraps
intermediate results in ``ProducerRealize`` nodes. It guarantees: every element that a consumer
reads is computed before it is read; non-dividing splits are guarded by predicates so no
iteration runs outside the original domain; reductions are initialised before their first update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..arith import simplify, symbolic_interval
from ..errors import LoweringError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator, post_order_visit, substitute
from ..te.schedule import Schedule, Stage, leaf_extents, root_value_map
from ..te.tensor import ComputeOp, IterKind, IterVar, Range, Tensor

StageKey = tuple[Stage, int]


@dataclass
class StageInfo:
    """What lowering knows about one stage: its effective body and the root ranges."""

    stage: Stage
    body: tuple[E.PrimExpr, ...]
    root_ranges: dict[IterVar, Range]
    clamp: dict[IterVar, E.PrimExpr]  # full extent of axes whose computed region may overhang


class _Inliner(Mutator):
    """Replaces reads of inlined stages by their expressions."""

    def __init__(self, lowering: _Lowering):
        self.low = lowering

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        e = self.generic_mutate(e)
        st = self.low.schedule._by_op.get(e.producer.op)
        if st is not None and st.attach == "inline":
            op = st.op
            assert isinstance(op, ComputeOp)
            body = self.low.effective_body(st)[e.producer.value_index]
            return substitute(body, {iv.var: idx for iv, idx in zip(op.axis, e.indices)})
        return e

    def visit_Reduce(self, e: E.Reduce) -> E.PrimExpr:
        src = tuple(self.visit(s) for s in e.source)
        cond = self.visit(e.condition)
        if all(a is b for a, b in zip(src, e.source)) and cond is e.condition:
            return e
        return E.Reduce(e.combiner, src, e.axis, cond, e.value_index, e.dtype)


class _Lowering:
    def __init__(self, schedule: Schedule, target: Any = None):
        self.schedule = schedule
        self.target = target
        #: tensorization state (lowering/tensorize.py): warp tensors' layouts, loop ranges
        self.warp_infos: dict[Stage, Any] = {}
        self.loop_ranges: dict[E.Var, tuple[int | None, int | None]] | None = None
        self._bodies: dict[Stage, tuple[E.PrimExpr, ...]] = {}
        self.infos: dict[Stage, StageInfo] = {}
        self.thread_ranges: dict[E.Var, tuple[str, E.PrimExpr]] = {}

    def key(self, tensor: Tensor) -> StageKey:
        st = self.schedule._by_op.get(tensor.op)
        if st is None:
            raise LoweringError(f"tensor {tensor.name} is not part of the schedule")
        return (st, tensor.value_index)

    def effective_body(self, stage: Stage) -> tuple[E.PrimExpr, ...]:
        if stage not in self._bodies:
            op = stage.op
            assert isinstance(op, ComputeOp)
            inl = _Inliner(self)
            self._bodies[stage] = tuple(inl.visit(b) for b in op.body)
        return self._bodies[stage]

    # -- bound inference ---------------------------------------------------------------------
    def infer_bounds(self) -> None:
        compute_stages = [s for s in self.schedule.stages if isinstance(s.op, ComputeOp) and s.attach != "inline"]
        for st in reversed(compute_stages):
            op = st.op
            assert isinstance(op, ComputeOp)
            ranges: dict[IterVar, Range] = {iv: iv.dom for iv in op.reduce_axis}  # type: ignore[misc]
            clamp: dict[IterVar, E.PrimExpr] = {}
            if st.attach == "scope":
                region = self.region_needed(st)
                for iv, full, reg in zip(op.axis, [iv.dom for iv in op.axis], region):
                    if reg is None:
                        ranges[iv] = full  # type: ignore[assignment]
                        continue
                    lo, ext = reg
                    ranges[iv] = Range(lo, ext)
                    clamp[iv] = full.extent  # type: ignore[union-attr]
            else:
                for iv in op.axis:
                    ranges[iv] = iv.dom  # type: ignore[assignment]
            self.infos[st] = StageInfo(st, self.effective_body(st), ranges, clamp)
            leaves = leaf_extents(st, ranges)
            for iv, attr in st.iter_attrs.items():
                if attr.thread_tag:
                    self.thread_ranges[iv.var] = (attr.thread_tag, leaves[iv].extent)

    def nested_in(self, stage: Stage, ivar: IterVar) -> list[Stage]:
        """Stages computed inside loop ``ivar`` of ``stage`` (at it or deeper), transitively."""
        pos = stage.leaf_iter_vars.index(ivar)
        inner = set(map(id, stage.leaf_iter_vars[pos:]))
        out: list[Stage] = []
        for s in self.schedule.stages:
            if s.attach == "scope" and s.attach_stage is stage and id(s.attach_ivar) in inner:
                out.append(s)
                for iv in s.leaf_iter_vars:
                    out.extend(x for x in self.nested_in(s, iv) if x not in out)
                    break
        return out

    def _thread_relax(self, scope: str, stage: Stage, leaves: dict[IterVar, Range]) -> dict[E.Var, Any]:
        relax: dict[E.Var, tuple[E.PrimExpr, E.PrimExpr]] = {}

        def shared_by(tag: str) -> bool:
            return ((scope == "shared" and tag.startswith("threadIdx")) or (scope == "global" and tag != "vthread")
                    or (scope == "warp" and tag == "threadIdx.x"))

        for var, (tag, ext) in self.thread_ranges.items():
            if shared_by(tag):
                relax[var] = (E.const(0), simplify(ext - 1))
        for iv, attr in stage.iter_attrs.items():
            if attr.thread_tag and shared_by(attr.thread_tag):
                relax[iv.var] = (E.const(0), simplify(leaves[iv].extent - 1))
        return relax

    def region_needed(self, st: Stage) -> list[tuple[E.PrimExpr, E.PrimExpr] | None]:
        """Per dimension of ``st``'s output: (min, extent) needed by one iteration of its attach
        loop, or None when unknown (the full dimension is used).

        The readers are the attach stage and any stage computed inside the attach loop; the
        loops below the attach point (the attach stage's inner loops and every loop of the
        nested readers) are relaxed to their full ranges."""
        attach = st.attach_stage
        assert attach is not None and st.attach_ivar is not None
        if attach not in self.infos:
            raise LoweringError(f"stage {st.name} is computed at {attach.name}, which is not computed itself")
        nested = [x for x in self.nested_in(attach, st.attach_ivar) if x is not st]
        scope_stages = [attach, *nested]
        readers = [c for c in self.schedule.consumers(st) if c.attach != "inline"]
        readers += [c for c in self._inline_readers(st) if c not in readers]
        outside = [c.name for c in readers if c not in scope_stages]
        if outside:
            raise LoweringError(
                f"stage {st.name} is computed at {attach.name}.{st.attach_ivar.var.name} but is also read by "
                f"{', '.join(outside)} outside that loop; use cache_read to give each reader its own copy"
            )
        relax: dict[E.Var, tuple[E.PrimExpr, E.PrimExpr]] = {}
        attach_leaves = leaf_extents(attach, self.infos[attach].root_ranges)
        pos = attach.leaf_iter_vars.index(st.attach_ivar)
        for iv in attach.leaf_iter_vars[pos + 1 :]:
            relax[iv.var] = (E.const(0), simplify(attach_leaves[iv].extent - 1))
        relax.update(self._thread_relax(st.scope, attach, attach_leaves))
        reads: list[E.PrimExpr | tuple[E.PrimExpr, ...]] = []
        targets = {(st, k) for k in range(st.op.num_outputs)}
        for c in scope_stages:
            cinfo = self.infos.get(c)
            if cinfo is None:
                continue
            leaves = leaf_extents(c, cinfo.root_ranges)
            if c is not attach:
                for iv in c.leaf_iter_vars:
                    relax[iv.var] = (E.const(0), simplify(leaves[iv].extent - 1))
                relax.update(self._thread_relax(st.scope, c, leaves))
            root_vals, _ = root_value_map(c, {iv: iv.var for iv in c.leaf_iter_vars}, leaves)
            vmap = {iv.var: cinfo.root_ranges[iv].min + root_vals[iv] for iv in c.root_iter_vars}

            def collect(n: Any, vmap: dict[E.Var, E.PrimExpr] = vmap) -> None:
                if isinstance(n, E.ProducerLoad) and self.key(n.producer) in targets:
                    reads.append(tuple(substitute(i, vmap) for i in n.indices))

            for b in cinfo.body:
                post_order_visit(b, collect)
        op = st.op
        assert isinstance(op, ComputeOp)
        region: list[tuple[E.PrimExpr, E.PrimExpr] | None] = []
        for d in range(len(op.axis)):
            lo_all: E.PrimExpr | None = None
            hi_all: E.PrimExpr | None = None
            known = bool(reads)
            for idx in reads:
                itv = symbolic_interval(simplify(idx[d]), relax)
                if itv is None:
                    known = False
                    break
                lo_all = itv[0] if lo_all is None else E.min_expr(lo_all, itv[0])
                hi_all = itv[1] if hi_all is None else E.max_expr(hi_all, itv[1])
            if not known or lo_all is None or hi_all is None:
                region.append(None)
                continue
            lo_s = simplify(lo_all)
            ext = simplify(hi_all - lo_all + 1)
            region.append((lo_s, ext))
        return region

    def _inline_readers(self, st: Stage) -> list[Stage]:
        """Non-inline stages that read ``st`` through inlined stages."""
        out: list[Stage] = []
        for c in self.schedule.consumers(st):
            if c.attach == "inline":
                for r in self.schedule.consumers(c):
                    if r.attach == "inline":
                        out.extend(x for x in self._inline_readers(r) if x not in out)
                    elif r not in out:
                        out.append(r)
        return out

    # -- loop nests ----------------------------------------------------------------------------
    def build(self) -> S.Stmt:
        self.infer_bounds()
        root_stages = [s for s in self.schedule.stages if isinstance(s.op, ComputeOp) and s.attach == "root"]
        for s in self.schedule.stages:
            if s.scope == "warp" and s.attach != "scope":
                raise LoweringError(f"warp-scope stage {s.name} must be computed inside a warp's loops (compute_at)")
        body = S.seq(*[self.stage_stmt(s) for s in root_stages])
        for s in reversed(root_stages):
            if not s.is_output:
                body = self.realize(s, body)
        if any(s.scope == "warp" for s in self.schedule.stages):
            from .tensorize import check_no_stray_warp_access

            check_no_stray_warp_access(body, self)
        return body

    def realize(self, st: Stage, body: S.Stmt) -> S.Stmt:
        info = self.infos[st]
        op = st.op
        assert isinstance(op, ComputeOp)
        bounds = tuple((info.root_ranges[iv].min, info.root_ranges[iv].extent) for iv in op.axis)
        scope = st.scope
        if scope == "warp":  # fragments: registers of each lane (see lowering/tensorize.py)
            from .tensorize import warp_realize_bounds

            bounds, scope = warp_realize_bounds(self, st), "local"
        for k in reversed(range(op.num_outputs)):
            body = S.ProducerRealize(op.output(k), bounds, body, scope)
        return body

    def attached_at(self, consumer: Stage, ivar: IterVar) -> list[Stage]:
        return [
            s
            for s in self.schedule.stages
            if s.attach == "scope" and s.attach_stage is consumer and s.attach_ivar is ivar
        ]

    def leaf_values(self, st: Stage) -> tuple[dict[IterVar, Range], dict[E.Var, E.PrimExpr], list[E.PrimExpr]]:
        """The ranges of ``st``'s leaves, the value of each root variable in leaf variables
        (offset by its region's start) and the guards of non-dividing splits and overhanging
        regions."""
        info = self.infos[st]
        leaves = leaf_extents(st, info.root_ranges)
        root_vals, preds = root_value_map(st, {iv: iv.var for iv in st.leaf_iter_vars}, leaves)
        values: dict[E.Var, E.PrimExpr] = {}
        for iv in st.root_iter_vars:
            values[iv.var] = simplify(info.root_ranges[iv].min + root_vals[iv])
        for iv, full in info.clamp.items():
            lo = info.root_ranges[iv].min
            v = values[iv.var]
            # The region of an attached stage may overhang its domain at the edges.
            if not (isinstance(simplify(lo >= 0), E.IntImm)):
                preds.append(v >= 0)
            preds.append(v < full)
        return leaves, values, [simplify(substitute(p, {})) for p in preds]

    def tensorized_stmt(self, st: Stage) -> S.Stmt:
        """The loop nest of a tensorized stage: its outer loops around the instruction's code
        (:func:`~ember.lowering.tensorize.tensorize_stage`), the zero fill of a reduction before
        its outermost reduction loop."""
        from .tensorize import tensorize_stage

        update, init, inner = tensorize_stage(self, st)
        for iv in inner:
            if self.attached_at(st, iv) and iv is not inner[0]:
                names = ", ".join(c.name for c in self.attached_at(st, iv))
                raise LoweringError(f"stages {names} are computed inside the tensorized loops of {st.name}; "
                                    "attach them outside the tensorized axis")
        leaves = leaf_extents(st, self.infos[st].root_ranges)
        outer = st.leaf_iter_vars[: len(st.leaf_iter_vars) - len(inner)]
        children = self.attached_at(st, inner[0])
        if children:
            update = S.seq(*[self.stage_stmt(c) for c in children], update)
            for c in reversed(children):
                update = self.realize(c, update)
        first_red = next((k for k, iv in enumerate(outer) if iv.kind is IterKind.REDUCE), None)
        body = update if init is None or first_red is not None else S.seq(init, update)
        for k in reversed(range(len(outer))):
            iv = outer[k]
            body = self.loop(st, iv, leaves, body)
            if init is not None and k == first_red:
                init_nest = init
                for iv2 in reversed(outer[first_red:]):
                    if iv2.kind is not IterKind.REDUCE:
                        init_nest = self.loop(st, iv2, leaves, init_nest, with_attached=False)
                body = S.seq(init_nest, body)
        return body

    def stage_stmt(self, st: Stage) -> S.Stmt:
        if st.tensorized is not None:
            return self.tensorized_stmt(st)
        op = st.op
        assert isinstance(op, ComputeOp)
        info = self.infos[st]
        leaves, values, preds = self.leaf_values(st)
        red_leaf_vars = {iv.var for iv in st.leaf_iter_vars if iv.kind is IterKind.REDUCE}

        def mentions_reduce(p: E.PrimExpr) -> bool:
            found = []
            post_order_visit(p, lambda n: found.append(n) if isinstance(n, E.Var) and n in red_leaf_vars else None)
            return bool(found)

        outputs = [op.output(k) for k in range(op.num_outputs)]
        index = tuple(values[iv.var] for iv in op.axis)
        body_exprs = [substitute(b, values) for b in info.body]

        if op.is_reduction:
            first: E.Reduce = body_exprs[0]  # type: ignore[assignment]
            combiner = first.combiner
            lhs = [E.ProducerLoad(t, index, t.dtype) for t in outputs]
            rhs = list(first.source)
            new_vals = combiner.combine(lhs, rhs)
            temps = [E.Var(f"{op.name}_v{k}", t.dtype) for k, t in enumerate(outputs)]
            update: S.Stmt = S.seq(*[S.ProducerStore(t, tv, index) for t, tv in zip(outputs, temps)])
            for tv, nv in reversed(list(zip(temps, new_vals))):
                update = S.LetStmt(tv, nv, update)
            if len(outputs) == 1:
                update = S.ProducerStore(outputs[0], new_vals[0], index)
            if first.condition is not None:
                update = S.IfThenElse(first.condition, update)
            update = _guard(preds, update)
            init: S.Stmt = S.seq(*[S.ProducerStore(t, ident, index) for t, ident in zip(outputs, combiner.identity)])
            init = _guard([p for p in preds if not mentions_reduce(p)], init)
        else:
            update = _guard(preds, S.seq(*[S.ProducerStore(t, b, index) for t, b in zip(outputs, body_exprs)]))
            init = None

        first_red = next((k for k, iv in enumerate(st.leaf_iter_vars) if iv.kind is IterKind.REDUCE), None)
        body: S.Stmt = update
        for k in reversed(range(len(st.leaf_iter_vars))):
            iv = st.leaf_iter_vars[k]
            if init is not None and first_red is not None and k == first_red:
                body = self.loop(st, iv, leaves, body)
                init_nest = init
                for iv2 in reversed(st.leaf_iter_vars[first_red:]):
                    if iv2.kind is not IterKind.REDUCE:
                        init_nest = self.loop(st, iv2, leaves, init_nest, with_attached=False)
                body = S.seq(init_nest, body)
                continue
            body = self.loop(st, iv, leaves, body)
        if init is not None and first_red is None:
            body = S.seq(init, body)
        return body

    def loop(
        self, st: Stage, iv: IterVar, leaves: dict[IterVar, Range], body: S.Stmt, with_attached: bool = True
    ) -> S.Stmt:
        if with_attached:
            children = self.attached_at(st, iv)
            if children:
                inner = S.seq(*[self.stage_stmt(c) for c in children], body)
                for c in reversed(children):
                    inner = self.realize(c, inner)
                body = inner
        attr = st.iter_attrs.get(iv)
        kind = attr.kind if attr is not None else S.ForKind.SERIAL
        tag = attr.thread_tag if attr is not None else ""
        notes: tuple[tuple[str, Any], ...] = ()
        if iv in st.pipelined:
            from .pipeline import PIPELINE

            notes = ((PIPELINE, st.pipelined[iv]),)
        if kind is S.ForKind.PARALLEL and iv in st.static_parallel:
            notes += ((S.STATIC_PARALLEL, True),)
        return S.For(iv.var, E.const(0), simplify(leaves[iv].extent), kind, body, tag, notes)


def _guard(preds: list[E.PrimExpr], body: S.Stmt) -> S.Stmt:
    cond: E.PrimExpr | None = None
    for p in preds:
        if isinstance(p, E.IntImm) and p.value:
            continue
        cond = p if cond is None else E.logical_and(cond, p)
    return body if cond is None else S.IfThenElse(cond, body)


def schedule_to_stmt(schedule: Schedule, target: Any = None) -> tuple[S.Stmt, _Lowering]:
    """The loop nest of every stage of ``schedule`` with tensor-level loads and stores;
    ``target`` (a :class:`~ember.target.Target` or None) is checked by tensorized stages."""
    low = _Lowering(schedule, target)
    return low.build(), low
