"""``ember.lower``: a schedule and its arguments to a :class:`~ember.ir.PrimFunc`."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import LoweringError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.buffer import Buffer
from ..ir.printer import stmt_str
from ..ir.visitor import free_vars, post_order_visit
from ..target import Target
from ..te.schedule import Schedule
from ..te.tensor import Tensor
from ..transform import PassContext
from .passes import ScheduleToStmt, default_loop_pipeline


class LoweringMemo:
    """Functions already lowered in one compile, keyed by their loop nest before the loop passes
    (its text, the type of every expression, the parameters and the target). A network repeats
    its layers: a kernel whose nest equals an earlier one's takes that one's lowered body and
    parameters instead of running the loop passes again (the passes are deterministic, so the
    result is the same). Use one memo per compile under one :class:`PassContext`; IR dumps and
    pass timings then cover the first of each kind only."""

    def __init__(self) -> None:
        self._done: dict[tuple[object, ...], S.PrimFunc] = {}
        self.hits = 0

    @staticmethod
    def key(stmt: S.Stmt, params: Sequence[Buffer | E.Var], target: Target | None) -> tuple[object, ...]:
        """The identity of a kernel before its loop passes (see the class doc)."""
        types: list[str] = []
        post_order_visit(stmt, lambda n: types.append(str(n.dtype)) if isinstance(n, E.PrimExpr) else None)
        sig = tuple((p.name, str(p.dtype), tuple(str(d) for d in p.shape)) if isinstance(p, Buffer)
                    else (p.name, str(p.dtype)) for p in params)
        return stmt_str(stmt), tuple(types), sig, str(target)


def lower(
    schedule: Schedule, args: Sequence[Tensor | E.Var], name: str = "main", target: str | Target | None = None,
    memo: LoweringMemo | None = None,
) -> S.PrimFunc:
    """Lower ``schedule`` to a function taking ``args`` (tensors, and scalar vars) in order.

    Runs :class:`~ember.lowering.passes.ScheduleToStmt` (bound inference, loop nests), then the
    passes of :func:`~ember.lowering.passes.default_loop_pipeline` (storage flattening,
    simplification, loop partitioning, unrolling, vectorization) under
    :meth:`PassContext.current() <ember.transform.PassContext.current>`, which may disable or dump
    them. ``target`` (a string or :class:`~ember.target.Target`; ``None`` means ``llvm``) is
    validated, given to the passes that may use it and, when given, recorded as the string
    ``attrs["target"]`` of the function. Raises :class:`~ember.errors.LoweringError` when an input
    or output tensor is missing from ``args`` or a variable is used but bound by nothing, and
    :class:`~ember.errors.TargetError` for a bad ``target``. With ``memo``, a function whose
    loop nest was lowered before reuses that result (:class:`LoweringMemo`)."""
    if not isinstance(schedule, Schedule):
        raise LoweringError(f"lower: expected a schedule from te.create_schedule, got {type(schedule).__name__}")
    if not name.isidentifier():
        raise LoweringError(f"lower: the function name {name!r} is not a valid identifier")
    tgt = Target(target) if target is not None else None
    ctx = PassContext.current()
    entry = ScheduleToStmt(tgt)
    stmt = entry(schedule, ctx)
    low = entry.lowering
    assert low is not None  # ScheduleToStmt is required: it always runs
    params: list[Buffer | E.Var] = []
    arg_buffers = {}
    seen_names: set[str] = set()
    for k, a in enumerate(args):
        if isinstance(a, Tensor):
            key = low.key(a)
            if key in arg_buffers:
                raise LoweringError(f"argument {k} ({a.name}) is passed twice")
            bname = a.name if a.name not in seen_names else f"{a.name}_{k}"
            seen_names.add(bname)
            buf = Buffer(bname, a.dtype, tuple(a.shape), (), "global")
            arg_buffers[key] = buf
            params.append(buf)
        elif isinstance(a, E.Var):
            params.append(a)
        else:
            raise LoweringError(
                f"argument {k} of {name} is {a!r}: pass tensors (placeholders, computes) or te.var sizes"
            )
    for st in schedule.stages:
        if st.is_output:
            for k in range(st.op.num_outputs):
                if (st, k) not in arg_buffers:
                    raise LoweringError(
                        f"output {st.op.output(k).name} is not in the argument list of {name}; add it to args"
                    )
    attrs = {"target": str(tgt)} if tgt is not None else {}
    key = LoweringMemo.key(stmt, params, tgt) if memo is not None else None
    if memo is not None and key in memo._done:
        memo.hits += 1
        first = memo._done[key]
        return S.PrimFunc(name, list(first.params), first.body, attrs)
    body = default_loop_pipeline(low, arg_buffers, tgt or Target("llvm"))(stmt, ctx)
    _check_bound(body, params, name)
    func = S.PrimFunc(name, params, body, attrs)
    if memo is not None:
        memo._done[key] = func
    return func


def _check_bound(body: S.Stmt, params: list[Buffer | E.Var], name: str) -> None:
    known: set[E.Var] = set()
    for p in params:
        if isinstance(p, Buffer):
            known.add(p.data)
            for s in p.shape:
                known.update(v for v in free_vars(s))
        else:
            known.add(p)
    for v in free_vars(body):
        if v not in known:
            raise LoweringError(
                f"variable {v.name} is used in {name} but bound by nothing: it is not a loop, not a dimension "
                "of an argument's shape and not passed as an argument; add it to the argument list"
            )
