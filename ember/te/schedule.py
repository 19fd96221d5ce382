"""Schedules: how the loops of each stage are arranged, without changing what is computed.

``s = create_schedule(C.op)`` makes one :class:`Stage` per operation that ``C`` depends on;
``s[C]`` is the stage of ``C``. Stage primitives rearrange loops (``split``, ``fuse``,
``reorder``, ``tile``), annotate them (``bind``, ``parallel``, ``vectorize``, ``unroll``), move
computation (``compute_at``, ``compute_inline``, ``compute_root``) and change storage
(``cache_read``, ``cache_write``, ``rfactor``, ``storage_align``). Misuse raises
:class:`~ember.errors.ScheduleError` naming the stage, the axis and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..arith import simplify
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.stmt import ForKind
from ..ir.visitor import substitute
from .rewrite import LoadMutator, post_order
from .tensor import ComputeOp, IterKind, IterVar, Operation, PlaceholderOp, Range, Tensor

#: Storage scopes a stage may have; ``"warp"`` holds matrix fragments spread over a warp's lanes.
SCOPES = ("global", "shared", "local", "warp")


@dataclass(eq=False)
class Split:
    """``parent`` = ``outer * factor + inner`` (``factor`` known, or derived from ``nparts``)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: E.PrimExpr | None
    nparts: E.PrimExpr | None


@dataclass(eq=False)
class Fuse:
    """``fused`` = ``outer * extent(inner) + inner``."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass
class IterAttr:
    """How one leaf loop runs."""

    kind: ForKind = ForKind.SERIAL
    thread_tag: str = ""


class Stage:
    """The schedule of one operation: its loop structure, annotations and attachment."""

    def __init__(self, op: Operation, schedule: Schedule):
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self.scope = "global"
        self.attach = "root" if isinstance(op, ComputeOp) else "none"
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.aligns: dict[int, tuple[int, int]] = {}
        #: the loop tensorize was given and the matrix instruction (or None)
        self.tensorized: tuple[IterVar, Any] | None = None
        self._reset_axes()

    def _reset_axes(self) -> None:
        root: list[IterVar] = []
        if isinstance(self.op, ComputeOp):
            root = list(self.op.axis) + list(self.op.reduce_axis)
        self.all_iter_vars: list[IterVar] = list(root)
        self.leaf_iter_vars: list[IterVar] = list(root)
        self.relations: list[Split | Fuse] = []
        self.iter_attrs: dict[IterVar, IterAttr] = {}
        #: loops software-pipelined by :meth:`pipeline`, with their number of stages
        self.pipelined: dict[IterVar, int] = {}
        #: parallel loops whose chunks go to threads statically (:meth:`parallel`)
        self.static_parallel: set[IterVar] = set()

    # -- helpers ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The operation's name."""
        return self.op.name

    def __repr__(self) -> str:
        return f"Stage({self.name})"

    @property
    def is_output(self) -> bool:
        """True when this stage produces a result of the schedule."""
        return self.origin_op in self.schedule.outputs

    @property
    def root_iter_vars(self) -> list[IterVar]:
        """The operation's own axes followed by its reduction axes."""
        if isinstance(self.op, ComputeOp):
            return list(self.op.axis) + list(self.op.reduce_axis)
        return []

    def _axis(self, ivar: Any, what: str) -> IterVar:
        if not isinstance(ivar, IterVar):
            raise ScheduleError(f"{what} on stage {self.name}: expected an axis (IterVar), got {ivar!r}")
        if ivar not in self.leaf_iter_vars:
            if ivar in self.all_iter_vars:
                users = [
                    r
                    for r in self.relations
                    if (isinstance(r, Split) and r.parent is ivar)
                    or (isinstance(r, Fuse) and ivar in (r.outer, r.inner))
                ]
                if users and isinstance(users[0], Split):
                    r = users[0]
                    raise ScheduleError(
                        f"{what} on stage {self.name}: axis {ivar.var.name} was already split into "
                        f"{r.outer.var.name} and {r.inner.var.name}; use one of those instead"
                    )
                if users and isinstance(users[0], Fuse):
                    raise ScheduleError(
                        f"{what} on stage {self.name}: axis {ivar.var.name} was fused into "
                        f"{users[0].fused.var.name}; use the fused axis instead"
                    )
            names = ", ".join(iv.var.name for iv in self.leaf_iter_vars)
            raise ScheduleError(
                f"{what} on stage {self.name}: axis {ivar.var.name} is not a loop of this stage "
                f"(its loops are: {names}); pass an axis of s[{self.name}]"
            )
        return ivar

    def static_extent(self, ivar: IterVar) -> E.PrimExpr:
        """The extent of a leaf or root axis from the operation's own domains (before bound
        inference narrows a stage that is computed at another)."""
        return leaf_extents(self, {iv: iv.dom for iv in self.root_iter_vars})[ivar].extent

    def _new_iv(self, like: IterVar, suffix: str) -> IterVar:
        iv = IterVar(None, E.Var(f"{like.var.name}.{suffix}", like.var.dtype), like.kind)
        self.all_iter_vars.append(iv)
        return iv

    def _check_not_attached_elsewhere(self) -> None:
        if self.attach == "inline":
            raise ScheduleError(f"stage {self.name} was inlined (compute_inline) and has no loops to schedule")

    # -- loop structure -------------------------------------------------------------------------
    def split(self, parent: IterVar, factor: Any = None, nparts: Any = None) -> tuple[IterVar, IterVar]:
        """Split ``parent`` into ``(outer, inner)`` with ``inner`` of extent ``factor`` (or
        ``outer`` of extent ``nparts``). A factor that does not divide the extent is fine: the
        lowered code guards the tail."""
        self._check_not_attached_elsewhere()
        parent = self._axis(parent, "split")
        if (factor is None) == (nparts is None):
            raise ScheduleError(
                f"split of {parent.var.name} on stage {self.name}: give exactly one of factor= or nparts="
            )
        value = E.convert(factor if factor is not None else nparts)
        if not value.dtype.is_int:
            raise ScheduleError(f"split of {parent.var.name} on stage {self.name}: the factor must be an integer")
        if isinstance(value, E.IntImm) and value.value <= 0:
            raise ScheduleError(
                f"split of {parent.var.name} on stage {self.name}: the factor must be positive, not {value.value}"
            )
        self._check_unannotated(parent)  # refuse before anything changes
        outer = self._new_iv(parent, "outer")
        inner = self._new_iv(parent, "inner")
        self.relations.append(
            Split(parent, outer, inner, value if factor is not None else None, value if nparts is not None else None)
        )
        k = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[k : k + 1] = [outer, inner]
        self._move_attr(parent, outer)
        return outer, inner

    def _move_attr(self, old: IterVar, new: IterVar) -> None:
        self._check_unannotated(old)
        self.iter_attrs.pop(old, None)

    def _check_unannotated(self, old: IterVar) -> None:
        attached = [st.name for st in self.schedule.stages
                    if st.attach == "scope" and st.attach_stage is self and st.attach_ivar is old]
        if attached:
            raise ScheduleError(
                f"stage {self.name}: axis {old.var.name} has {', '.join(attached)} computed at it (compute_at); "
                f"split or fuse first, then compute_at one of the resulting axes"
            )
        attr = self.iter_attrs.get(old)
        if attr is not None and attr.kind is not ForKind.SERIAL:
            raise ScheduleError(
                f"stage {self.name}: axis {old.var.name} was already marked {attr.kind.value}; "
                "split or fuse first, then annotate the resulting axes"
            )

    def fuse(self, *axes: IterVar) -> IterVar:
        """Fuse consecutive axes (outermost first) into one."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        if not axes:
            raise ScheduleError(f"fuse on stage {self.name}: give at least one axis")
        result = self._axis(axes[0], "fuse")
        for inner in axes[1:]:
            inner = self._axis(inner, "fuse")
            i, j = self.leaf_iter_vars.index(result), self.leaf_iter_vars.index(inner)
            if j != i + 1:
                raise ScheduleError(
                    f"fuse on stage {self.name}: {result.var.name} and {inner.var.name} are not adjacent loops "
                    "(outer first); reorder them next to each other first"
                )
            if (result.kind is IterKind.REDUCE) != (inner.kind is IterKind.REDUCE):
                raise ScheduleError(
                    f"fuse on stage {self.name}: cannot fuse reduction axis with data-parallel axis "
                    f"({result.var.name}, {inner.var.name})"
                )
            self._check_unannotated(result)  # refuse before anything changes
            self._check_unannotated(inner)
            fused = IterVar(None, E.Var(f"{result.var.name}.{inner.var.name}.fused", result.var.dtype), result.kind)
            self.all_iter_vars.append(fused)
            self.relations.append(Fuse(result, inner, fused))
            self._move_attr(result, fused)
            self._move_attr(inner, fused)
            self.leaf_iter_vars[i : i + 2] = [fused]
            result = fused
        return result

    def reorder(self, *axes: IterVar) -> None:
        """Put the given loops in this order, in the positions they occupy together."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        checked = [self._axis(a, "reorder") for a in axes]
        if len(set(map(id, checked))) != len(checked):
            raise ScheduleError(f"reorder on stage {self.name}: an axis is given twice")
        positions = sorted(self.leaf_iter_vars.index(a) for a in checked)
        for pos, a in zip(positions, checked):
            self.leaf_iter_vars[pos] = a

    def tile(self, x: IterVar, y: IterVar, x_factor: Any, y_factor: Any) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        """Split ``x`` and ``y`` and reorder to ``(x.outer, y.outer, x.inner, y.inner)``."""
        xo, xi = self.split(x, factor=x_factor)
        yo, yi = self.split(y, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    # -- annotations ------------------------------------------------------------------------------
    def _annotate(self, ivar: IterVar, kind: ForKind, what: str, tag: str = "") -> None:
        ivar = self._axis(ivar, what)
        prev = self.iter_attrs.get(ivar)
        if prev is not None and prev.kind is not ForKind.SERIAL and (prev.kind, prev.thread_tag) != (kind, tag):
            raise ScheduleError(
                f"{what} on stage {self.name}: axis {ivar.var.name} is already "
                f"{prev.thread_tag or prev.kind.value}; an axis takes one annotation"
            )
        self.iter_attrs[ivar] = IterAttr(kind, tag)

    def bind(self, ivar: IterVar, thread_ivar: IterVar) -> None:
        """Run loop ``ivar`` on the hardware index ``thread_ivar`` (from ``te.thread_axis``)."""
        if not isinstance(thread_ivar, IterVar) or thread_ivar.kind is not IterKind.THREAD:
            raise ScheduleError(f"bind on stage {self.name}: the second argument must be te.thread_axis(...)")
        ivar = self._axis(ivar, "bind")
        if ivar.kind is IterKind.REDUCE:
            raise ScheduleError(
                f"bind on stage {self.name}: {ivar.var.name} is a reduction axis; threads would race on one "
                "accumulator. Use s.rfactor() to turn part of the reduction into a data-parallel axis and "
                "bind that instead"
            )
        for other, attr in self.iter_attrs.items():
            if other is not ivar and attr.thread_tag == thread_ivar.thread_tag and thread_ivar.thread_tag != "vthread":
                raise ScheduleError(
                    f"bind on stage {self.name}: {thread_ivar.thread_tag} is already bound to {other.var.name}; "
                    "fuse the loops first or use another thread axis"
                )
        self._annotate(ivar, ForKind.THREAD_BINDING, "bind", thread_ivar.thread_tag)

    def parallel(self, ivar: IterVar, static: bool = False) -> None:
        """Run the iterations of loop ``ivar`` on all CPU cores. ``static``: each thread runs
        the same block of iterations on every call (it keeps its share of the data the block
        reads in its own caches; idle threads still take unstarted chunks), else chunks go to
        whichever thread asks first."""
        iv = self._axis(ivar, "parallel")
        if iv.kind is IterKind.REDUCE:
            raise ScheduleError(
                f"parallel on stage {self.name}: {iv.var.name} is a reduction axis; parallel iterations "
                "would race on the accumulator. Parallelize a data-parallel axis, or rfactor first"
            )
        self._annotate(iv, ForKind.PARALLEL, "parallel")
        if static:
            self.static_parallel.add(iv)

    def vectorize(self, ivar: IterVar) -> None:
        """Turn loop ``ivar`` (constant extent) into vector instructions."""
        iv = self._axis(ivar, "vectorize")
        if iv.kind is IterKind.REDUCE:
            raise ScheduleError(
                f"vectorize on stage {self.name}: {iv.var.name} is a reduction axis; the lanes would race "
                "on one accumulator. Vectorize a data-parallel axis, or rfactor first"
            )
        ext = simplify(self.static_extent(iv))
        if not isinstance(ext, E.IntImm):
            raise ScheduleError(
                f"vectorize on stage {self.name}: axis {iv.var.name} has extent {ext}, which is not a constant; "
                f"split it with a constant factor (s[{self.name}].split(axis, factor=8)) and vectorize the inner axis"
            )
        self._annotate(iv, ForKind.VECTORIZED, "vectorize")

    def unroll(self, ivar: IterVar) -> None:
        """Unroll loop ``ivar`` (fully, when its extent is a constant)."""
        self._annotate(ivar, ForKind.UNROLLED, "unroll")

    # -- attachment -------------------------------------------------------------------------------
    def compute_at(self, parent: Stage, ivar: IterVar) -> None:
        """Compute this stage inside loop ``ivar`` of stage ``parent``, only the part that one
        iteration of ``ivar`` needs."""
        if not isinstance(parent, Stage):
            raise ScheduleError(f"compute_at of {self.name}: the first argument must be a stage (s[T])")
        if not isinstance(self.op, ComputeOp):
            raise ScheduleError(f"compute_at: {self.name} is an input; only computed stages can be moved")
        if self.is_output:
            raise ScheduleError(f"compute_at: {self.name} is an output of the schedule and must stay at the root")
        downstream = self.schedule.downstream(self)
        if parent not in downstream:
            names = ", ".join(c.name for c in self.schedule.consumers(self)) or "none"
            raise ScheduleError(
                f"compute_at of {self.name} into {parent.name}: {parent.name} does not read {self.name}, "
                f"directly or through other stages (its readers are: {names}); attach it to a stage that consumes it"
            )
        parent._axis(ivar, f"compute_at of {self.name}")
        self.attach, self.attach_stage, self.attach_ivar = "scope", parent, ivar

    def compute_inline(self) -> None:
        """Substitute this stage's expression into every reader (no storage, no loops)."""
        if not isinstance(self.op, ComputeOp):
            raise ScheduleError(f"compute_inline: {self.name} is an input and cannot be inlined")
        if self.op.is_reduction:
            raise ScheduleError(
                f"compute_inline: {self.name} is a reduction; only element-wise stages can be inlined. "
                "Use compute_at to place it inside its consumer instead"
            )
        if self.is_output:
            raise ScheduleError(f"compute_inline: {self.name} is an output of the schedule and must be stored")
        self.attach, self.attach_stage, self.attach_ivar = "inline", None, None

    def compute_root(self) -> None:
        """Compute this stage in full before its readers (the default)."""
        if not isinstance(self.op, ComputeOp):
            raise ScheduleError(f"compute_root: {self.name} is an input")
        self.attach, self.attach_stage, self.attach_ivar = "root", None, None

    def storage_align(self, axis: IterVar, factor: int, offset: int) -> None:
        """Pad the row stride of dimension ``axis`` so that ``stride % factor == offset``
        (avoids shared-memory bank conflicts)."""
        if not isinstance(self.op, ComputeOp) or axis not in self.op.axis:
            raise ScheduleError(f"storage_align on stage {self.name}: {axis!r} is not an original axis of it")
        if int(factor) <= 0 or not 0 <= int(offset) < int(factor):
            raise ScheduleError(f"storage_align on stage {self.name}: need factor > 0 and 0 <= offset < factor")
        self.aligns[list(self.op.axis).index(axis)] = (int(factor), int(offset))

    def set_scope(self, scope: str) -> None:
        """Store this stage's result in ``"global"``, ``"shared"``, ``"local"`` or ``"warp"``
        memory (a warp's matrix fragments: see :meth:`tensorize`)."""
        if scope not in SCOPES:
            raise ScheduleError(f"set_scope on stage {self.name}: unknown scope {scope!r} ({', '.join(SCOPES)})")
        self.scope = scope

    def pipeline(self, ivar: IterVar, stages: int) -> None:
        """Software-pipeline serial loop ``ivar``: the shared-memory caches computed at it are
        kept in ``stages`` slots and filled ``stages - 1`` iterations ahead of the compute that
        reads them (asynchronously with ``cp.async`` on NVIDIA sm_80 and newer), so the copies of
        later iterations overlap this one's arithmetic (see :mod:`ember.lowering.pipeline`)."""
        iv = self._axis(ivar, "pipeline")
        if isinstance(stages, bool) or not isinstance(stages, int) or not 2 <= stages <= 8:
            raise ScheduleError(f"pipeline on stage {self.name}: stages must be an integer from 2 to 8, got {stages!r}")
        if iv.kind is not IterKind.REDUCE and iv not in self.leaf_iter_vars:
            raise ScheduleError(f"pipeline on stage {self.name}: {iv.var.name} is not a loop of it")
        self.pipelined[iv] = stages

    def tensorize(self, ivar: IterVar, intrin: Any) -> None:
        """Compute the loops from ``ivar`` inward with the warp-level matrix instruction
        ``intrin`` (a :class:`~ember.te.tensor_intrin.MatrixIntrinsic` or its name, e.g.
        ``"mma.m16n8k16.f16"``). What the loops become depends on the stage:

        * a ``"warp"``-scope stage that reduces ``sum(A[i, k] * B[k, j])`` (``i``, ``j``, ``k``
          the loops from ``ivar`` inward, of extents ``m``, ``n``, ``k`` in any order): one
          instruction per iteration of the outer loops; its zero fill too;
        * a ``"warp"``-scope copy of an operand (the loops over the ``m x k`` or ``k x n`` tile):
          loads into the operand's fragment (``ldmatrix`` on NVIDIA from shared memory where the
          rows are 16-byte aligned; element loads otherwise, with zeros outside the domain);
        * any other stage reading a ``"warp"`` accumulator (the loops over the ``m x n`` tile):
          each lane computes and stores the elements its registers hold (an epilogue may be
          inlined into it).

        The checks (extents, operand layout, dtypes, target) run when the schedule is lowered and
        raise :class:`~ember.errors.ScheduleError` naming the intrinsic, the mismatch and a
        fallback (the same schedule without ``tensorize`` and with ``"local"`` scopes)."""
        from .tensor_intrin import lookup

        iv = self._axis(ivar, "tensorize")
        try:
            found = lookup(intrin)
        except KeyError as err:
            raise ScheduleError(f"tensorize on stage {self.name}: {err.args[0]}") from None
        self.tensorized = (iv, found)


def leaf_extents(stage: Stage, root_ranges: dict[IterVar, Range | None]) -> dict[IterVar, Range]:
    """Ranges of every iteration variable of ``stage`` (leaves from 0), given root ranges."""
    out: dict[IterVar, Range] = {}
    for iv, rng in root_ranges.items():
        if rng is not None:
            out[iv] = rng
    for rel in stage.relations:
        if isinstance(rel, Split):
            parent = out[rel.parent].extent
            if rel.factor is not None:
                inner, outer = rel.factor, E.floordiv(parent + rel.factor - 1, rel.factor)
            else:
                outer, inner = rel.nparts, E.floordiv(parent + rel.nparts - 1, rel.nparts)  # type: ignore[operator]
            out[rel.outer] = Range(E.const(0), simplify(outer))
            out[rel.inner] = Range(E.const(0), simplify(inner))
        else:
            out[rel.fused] = Range(E.const(0), simplify(out[rel.outer].extent * out[rel.inner].extent))
    return out


class Schedule:
    """The stages of a computation, in an order where producers come before consumers."""

    def __init__(self, outputs: Sequence[Operation]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self._by_op: dict[Operation, Stage] = {}
        for op in post_order(self.outputs):
            self._add(Stage(op, self))

    def _add(self, stage: Stage, after: Stage | None = None) -> None:
        if after is None:
            self.stages.append(stage)
        else:
            self.stages.insert(self.stages.index(after) + 1, stage)
        self._by_op[stage.op] = stage
        self._by_op[stage.origin_op] = stage

    def __getitem__(self, key: Tensor | Operation) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        stage = self._by_op.get(op)
        if stage is None:
            raise ScheduleError(f"{getattr(op, 'name', op)!s} is not part of this schedule")
        return stage

    def stage_of(self, tensor: Tensor) -> Stage:
        """The stage producing ``tensor``."""
        return self[tensor]

    def consumers(self, stage: Stage) -> list[Stage]:
        """Stages whose operation reads an output of ``stage``."""
        out = []
        for s in self.stages:
            if isinstance(s.op, ComputeOp) and any(self._by_op.get(t.op) is stage for t in s.op.input_tensors):
                out.append(s)
        return out

    def downstream(self, stage: Stage) -> list[Stage]:
        """Stages that read ``stage``'s result, directly or through other stages."""
        out: list[Stage] = []
        todo = [stage]
        while todo:
            for c in self.consumers(todo.pop()):
                if c not in out:
                    out.append(c)
                    todo.append(c)
        return out

    def _replace_op(self, stage: Stage, new_op: Operation) -> None:
        stage.op = new_op
        self._by_op[new_op] = stage

    # -- storage rewrites -------------------------------------------------------------------------
    def cache_read(self, tensor: Tensor, scope: str, readers: Sequence[Any],
                   axes: Sequence[int] | None = None) -> Tensor:
        """A copy of ``tensor`` in ``scope`` (``"shared"``, ``"local"``, ``"global"``) that the
        given readers read instead of ``tensor``. Returns the cache tensor (schedule it with
        compute_at). ``axes``, a permutation of ``tensor``'s dimensions, stores the copy with
        its dimensions in that order (``(1, 0)``: a matrix transposed, so that a reader walking
        down a column reads consecutive words); the readers' indices are permuted to match."""
        if scope not in SCOPES:
            raise ScheduleError(f"cache_read of {tensor.name}: unknown scope {scope!r} ({', '.join(SCOPES)})")
        if axes is not None and sorted(axes) != list(range(len(tensor.shape))):
            raise ScheduleError(f"cache_read of {tensor.name}: axes {tuple(axes)} is not a permutation of its "
                                f"{len(tensor.shape)} dimensions")
        if isinstance(readers, (Tensor, Operation)):
            readers = [readers]
        producer = self[tensor]
        name = f"{tensor.name}.{scope}"
        perm = None if axes is None else tuple(axes)
        cache = _copy_compute(tensor, name, perm)
        reader_stages = []
        for r in readers:
            st = self[r]
            if not isinstance(st.op, ComputeOp) or tensor not in _inputs_of(st.op, self):
                raise ScheduleError(f"cache_read of {tensor.name}: {st.name} does not read {tensor.name}")
            reader_stages.append(st)
        cache_stage = Stage(cache.op, self)
        cache_stage.scope = scope
        self._add(cache_stage, after=producer)
        for st in reader_stages:
            self._replace_op(st, _replace_reads(st.op, {self._key(tensor): cache}, self, perm))
        return cache

    def _key(self, t: Tensor) -> tuple[Stage, int]:
        return (self[t], t.value_index)

    def cache_write(self, tensor: Tensor | Sequence[Tensor], scope: str) -> Any:
        """Compute ``tensor`` into a cache in ``scope`` and copy it out afterwards. Call before
        other primitives on the stage. Returns the cache tensor(s)."""
        tensors = list(tensor) if isinstance(tensor, (list, tuple)) else [tensor]
        stage = self[tensors[0]]
        op = stage.op
        if not isinstance(op, ComputeOp):
            raise ScheduleError(f"cache_write of {stage.name}: it is an input; only computed tensors can be cached")
        if stage.relations or stage.iter_attrs:
            raise ScheduleError(
                f"cache_write of {stage.name}: the stage was already scheduled; call cache_write before split, "
                "reorder, bind or other primitives on it"
            )
        if scope not in SCOPES:
            raise ScheduleError(f"cache_write of {stage.name}: unknown scope {scope!r} ({', '.join(SCOPES)})")
        new_axis = tuple(IterVar(iv.dom, E.Var(iv.var.name + ".c", iv.var.dtype), iv.kind) for iv in op.axis)
        vmap = {old.var: new.var for old, new in zip(op.axis, new_axis)}
        cache_body = tuple(substitute(b, vmap) for b in op.body)
        cache_op = ComputeOp(f"{op.name}.{scope}", op.tag, new_axis, cache_body, op.attrs)
        cache_stage = Stage(cache_op, self)
        cache_stage.scope = scope
        idx = [iv.var for iv in op.axis]
        copy_body = tuple(cache_op.output(k)[tuple(idx)] for k in range(cache_op.num_outputs))
        new_op = ComputeOp(op.name, op.tag, op.axis, copy_body, op.attrs)
        self.stages.insert(self.stages.index(stage), cache_stage)
        self._by_op[cache_op] = cache_stage
        self._replace_op(stage, new_op)
        stage._reset_axes()
        outs = list(cache_op.outputs)
        return outs[0] if len(outs) == 1 else outs

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Any:
        """Factor the reduction of ``tensor`` over the leaf reduction axis ``axis``: a new stage
        computes partial results with ``axis`` as an ordinary dimension (at ``factor_axis``), and
        ``tensor`` reduces those partials. Returns the new tensor (a list for several outputs)."""
        stage = self[tensor]
        op = stage.op
        if not isinstance(op, ComputeOp) or not op.is_reduction:
            raise ScheduleError(f"rfactor of {stage.name}: it is not a reduction")
        axis = stage._axis(axis, "rfactor")
        if axis.kind is not IterKind.REDUCE:
            raise ScheduleError(f"rfactor of {stage.name}: {axis.var.name} is not a reduction axis")
        if not 0 <= factor_axis <= len(op.axis):
            raise ScheduleError(f"rfactor of {stage.name}: factor_axis must be in [0, {len(op.axis)}]")
        ranges = leaf_extents(stage, {iv: iv.dom for iv in stage.root_iter_vars})
        root_values, predicates = root_value_map(stage, {iv: iv.var for iv in stage.leaf_iter_vars}, ranges)
        # New data-parallel axis for the factored leaf; new reduce axes for the other reduce leaves.
        fax = IterVar(Range(E.const(0), ranges[axis].extent), E.Var(axis.var.name + ".rf"), IterKind.DATA_PAR)
        new_axes = [IterVar(iv.dom, E.Var(iv.var.name + ".rf", iv.var.dtype), IterKind.DATA_PAR) for iv in op.axis]
        other_red = [iv for iv in stage.leaf_iter_vars if iv.kind is IterKind.REDUCE and iv is not axis]
        new_red = [
            IterVar(Range(E.const(0), ranges[iv].extent), E.Var(iv.var.name + ".rf"), IterKind.REDUCE)
            for iv in other_red
        ]
        vmap: dict[E.Var, E.PrimExpr] = {axis.var: fax.var}
        vmap.update({iv.var: n.var for iv, n in zip(other_red, new_red)})
        vmap.update({iv.var: n.var for iv, n in zip(op.axis, new_axes)})
        red_values = {iv.var: simplify(substitute(root_values[iv], vmap)) for iv in op.reduce_axis}
        conds = [
            substitute(p, vmap)
            for p in predicates
            if _mentions_any(p, [iv.var for iv in stage.leaf_iter_vars if iv.kind is IterKind.REDUCE])
        ]
        first: E.Reduce = op.body[0]  # type: ignore[assignment]
        if first.condition is not None:
            conds.append(
                substitute(substitute(first.condition, red_values), {iv.var: n.var for iv, n in zip(op.axis, new_axes)})
            )
        cond = None
        for c in conds:
            cond = c if cond is None else E.logical_and(cond, c)
        axes_rf = new_axes[:factor_axis] + [fax] + new_axes[factor_axis:]
        bodies = []
        for b in op.body:
            assert isinstance(b, E.Reduce)
            src = tuple(
                substitute(substitute(s, red_values), {iv.var: n.var for iv, n in zip(op.axis, new_axes)})
                for s in b.source
            )
            bodies.append(E.Reduce(b.combiner, src, tuple(new_red), cond, b.value_index, b.dtype))
        rf_op = ComputeOp(f"{op.name}.rf", op.tag, tuple(axes_rf), tuple(bodies), op.attrs)
        rf_stage = Stage(rf_op, self)
        self.stages.insert(self.stages.index(stage), rf_stage)
        self._by_op[rf_op] = rf_stage
        rk = IterVar(Range(E.const(0), ranges[axis].extent), E.Var(axis.var.name + ".v"), IterKind.REDUCE)
        idx = [iv.var for iv in op.axis]
        idx = idx[:factor_axis] + [rk.var] + idx[factor_axis:]
        srcs = tuple(rf_op.output(k)[tuple(idx)] for k in range(rf_op.num_outputs))
        new_body = tuple(E.Reduce(first.combiner, srcs, (rk,), None, k, b.dtype) for k, b in enumerate(op.body))
        self._replace_op(stage, ComputeOp(op.name, op.tag, op.axis, new_body, op.attrs))
        stage._reset_axes()
        outs = list(rf_op.outputs)
        return outs[0] if len(outs) == 1 else outs


def _mentions_any(e: E.PrimExpr, vars_: list[E.Var]) -> bool:
    from ..ir.visitor import free_vars

    fv = set(free_vars(e))
    return any(v in fv for v in vars_)


def root_value_map(
    stage: Stage, leaf_values: dict[IterVar, E.PrimExpr], ranges: dict[IterVar, Range]
) -> tuple[dict[IterVar, E.PrimExpr], list[E.PrimExpr]]:
    """The value of every root axis (offset from its range's min) in terms of the leaf values,
    and the predicates that keep non-dividing splits inside their parent's extent."""
    values: dict[IterVar, E.PrimExpr] = dict(leaf_values)
    preds: list[E.PrimExpr] = []
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            inner_ext = ranges[rel.inner].extent
            v = values[rel.outer] * inner_ext + values[rel.inner]
            values[rel.parent] = v
            parent_ext = ranges[rel.parent].extent
            outer_ext = ranges[rel.outer].extent
            covered = simplify(outer_ext * inner_ext - parent_ext)
            if not (isinstance(covered, E.IntImm) and covered.value == 0):
                preds.append(v < parent_ext)
        else:
            inner_ext = ranges[rel.inner].extent
            values[rel.outer] = E.floordiv(values[rel.fused], inner_ext)
            values[rel.inner] = E.floormod(values[rel.fused], inner_ext)
    return values, preds


class _ReadReplacer(LoadMutator):
    def __init__(self, mapping: dict[tuple[Stage, int], Tensor], schedule: Schedule,
                 perm: tuple[int, ...] | None = None):
        self.mapping = mapping
        self.schedule = schedule
        self.perm = perm

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        e = self.generic_mutate(e)
        st = self.schedule._by_op.get(e.producer.op)
        new = self.mapping.get((st, e.producer.value_index)) if st is not None else None
        if new is not None:
            idx = e.indices if self.perm is None else tuple(e.indices[p] for p in self.perm)
            return E.ProducerLoad(new, idx, e.dtype)
        return e


def _replace_reads(op: ComputeOp, mapping: dict[tuple[Stage, int], Tensor], schedule: Schedule,
                   perm: tuple[int, ...] | None = None) -> ComputeOp:
    rep = _ReadReplacer(mapping, schedule, perm)
    body = [rep.visit(b) for b in op.body]
    # Keep one Reduce object shared by multi-output reductions.
    return ComputeOp(op.name, op.tag, op.axis, tuple(body), op.attrs)


def _inputs_of(op: ComputeOp, schedule: Schedule) -> list[Tensor]:
    return op.input_tensors


def _copy_compute(tensor: Tensor, name: str, perm: tuple[int, ...] | None = None) -> Tensor:
    """``name[ax...] = tensor[...]``: a copy of ``tensor``, its dimensions in the order ``perm``
    (cache dimension ``k`` is ``tensor``'s dimension ``perm[k]``)."""
    perm = perm or tuple(range(len(tensor.shape)))
    axis = tuple(IterVar(Range(E.const(0), tensor.shape[p]), E.Var(f"ax{k}"), IterKind.DATA_PAR)
                 for k, p in enumerate(perm))
    src = [None] * len(perm)
    for k, p in enumerate(perm):
        src[p] = axis[k].var
    body = (tensor[tuple(src)],)
    return ComputeOp(name, "cache", axis, body).output(0)


def create_schedule(ops: Any) -> Schedule:
    """A schedule for the given output operation(s) (or tensors) with default loops."""
    if not isinstance(ops, (list, tuple)):
        ops = [ops]
    out_ops = []
    for o in ops:
        op = o.op if isinstance(o, Tensor) else o
        if not isinstance(op, Operation):
            raise ScheduleError(f"create_schedule: expected operations or tensors, got {o!r}")
        if isinstance(op, PlaceholderOp):
            raise ScheduleError(f"create_schedule: {op.name} is a placeholder; pass the computed output's .op")
        out_ops.append(op)
    return Schedule(out_ops)
