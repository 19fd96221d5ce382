"""Row reductions on the CPU in vector lanes.

A sum over a row (Softmax's sum of exponentials, LayerNorm's mean and variance, ReduceSum over
the last axis) accumulates into one scalar per output when scheduled plainly, and LLVM may not
vectorize a float sum (that would reorder its additions). :func:`schedule_row_reduction` splits
the reduction by the target's vector width ``VL`` and ``rfactor`` s it: a ``local`` stage of
``VL`` partial sums, updated a vector at a time over the row (the lanes read consecutive
addresses), then the ``VL`` partials added into the result. The sum is reassociated (float32
rounding differs from the serial order in the last bits); ``max``/``min`` give identical
results.
"""

from __future__ import annotations

from .. import te
from ..te import ComputeOp
from ..te.tensor import IterKind
from .base import extent, reads_reduced_innermost

#: A row shorter than this many vectors keeps the plain schedule.
MIN_VECTORS = 2


def row_reduction_lanes(op: ComputeOp, lanes: int) -> int | None:
    """The vector width to split reduction ``op`` by, or None when the plain schedule is kept:
    one output, at least one data axis, a constant reduction of at least :data:`MIN_VECTORS`
    vectors of ``lanes`` read along the innermost dimension of its input."""
    if op.num_outputs != 1 or not op.axis or not op.reduce_axis or lanes < 2:
        return None
    total = 1
    for r in op.reduce_axis:
        total *= extent(r)
    if total < MIN_VECTORS * lanes or not reads_reduced_innermost(op):
        return None
    return lanes


def split_row_reduction(s: te.Schedule, stage: te.Stage, lanes: int) -> te.Tensor:
    """Split the reduction of root ``stage`` into ``lanes`` vector partials (module docstring)
    and return the partials' tensor: a ``local`` stage whose reduction loop runs outside its
    vectorized lane axis. The caller computes it at ``stage``'s innermost data-parallel loop
    (after scheduling ``stage``'s own loops)."""
    red = [iv for iv in stage.leaf_iter_vars if iv.kind is IterKind.REDUCE]
    k = stage.fuse(*red) if len(red) > 1 else red[0]
    _, ki = stage.split(k, factor=lanes)
    rf = s.rfactor(stage.op.output(0), ki)
    s[rf].set_scope("local")
    ko_rf = next(iv for iv in s[rf].leaf_iter_vars if iv.kind is IterKind.REDUCE)
    lane = s[rf].op.axis[0]  # rfactor puts the factored axis first
    s[rf].reorder(ko_rf, lane)
    s[rf].vectorize(lane)
    return rf
