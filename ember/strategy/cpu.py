"""Schedules for the operator library on the CPU.

:func:`schedule_group` schedules one fused kernel: injective intermediate stages are inlined
into their readers, the remaining stages (reductions, the outputs) are computed at the root with
their outer loops fused and run in parallel and their innermost loop vectorized where it is
contiguous; convolutions and matrix products get a packed, register-tiled schedule
(:mod:`ember.ops.cpu_fast`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import te
from ..ir import expr as E
from ..te import ComputeOp, PlaceholderOp, Tensor

PARALLEL_MIN_WORK = 1 << 14


def _extent(iv: te.IterVar) -> int:
    v = E.const_int_value(iv.dom.extent)  # type: ignore[union-attr]
    return int(v) if v is not None else 1


def schedule_root(stage: te.Stage, parallel: bool = True) -> None:
    """Fuse the data-parallel axes of a root stage; run them in parallel when there is enough work."""
    op = stage.op
    assert isinstance(op, ComputeOp)
    axes = list(op.axis)
    if not axes:
        return
    total = int(np.prod([_extent(a) for a in axes]))
    work = total * max(1, int(np.prod([_extent(r) for r in op.reduce_axis])) if op.reduce_axis else 1)
    if not parallel or work < PARALLEL_MIN_WORK or total < 2:
        return
    # Parallel over the shortest prefix of axes that gives enough chunks; the remaining inner
    # loops stay nested (contiguous, for LLVM's vectorizer).
    prefix, chunks = 0, 1
    while prefix < len(axes) and chunks < 64:
        chunks *= _extent(axes[prefix])
        prefix += 1
    fused = stage.fuse(*axes[:prefix]) if prefix > 1 else axes[0]
    stage.parallel(fused)


def schedule_group(outs: Sequence[Tensor], keep: set[str], parallel: bool = True) -> te.Schedule:
    """The default CPU schedule of a fused kernel computing ``outs``."""
    ops = list(dict.fromkeys(o.op for o in outs))
    s = te.create_schedule(ops)
    for stage in list(s.stages):
        op = stage.op
        if isinstance(op, PlaceholderOp):
            continue
        assert isinstance(op, ComputeOp)
        if stage.is_output:
            continue
        if not op.is_reduction and op.tag not in ("keep",) and op.name not in keep:
            stage.compute_inline()
    from .cpu_fast import schedule_fast

    handled: set[int] = set()
    for stage in list(s.stages):
        op = stage.op
        if isinstance(op, PlaceholderOp) or stage.attach == "inline" or id(op) in handled:
            continue
        if parallel and schedule_fast(s, stage, handled):
            continue
        if stage.attach == "root":
            if isinstance(op, ComputeOp) and op.is_reduction and op.axis:
                # Accumulate in a local (a register) and store each result once.
                outs_r = [op.output(k) for k in range(op.num_outputs)]
                cache = s.cache_write(outs_r if len(outs_r) > 1 else outs_r[0], "local")
                first = cache[0] if isinstance(cache, list) else cache
                schedule_root(stage, parallel)
                s[first].compute_at(stage, stage.leaf_iter_vars[-1])
                continue
            schedule_root(stage, parallel)
    return s
