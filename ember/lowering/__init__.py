"""Passes from a schedule to loop IR: schedule lowering, flattening, simplification, loops."""

from .api import LoweringMemo, lower
from .flatten import flatten_storage
from .loops import unroll_loops, vectorize_loops
from .passes import (
    FlattenStorage,
    PartitionLoops,
    ScheduleToStmt,
    Simplify,
    UnrollLoops,
    VectorizeLoops,
    default_loop_pipeline,
)
from .schedule_ops import schedule_to_stmt
from .stmt_simplify import simplify_stmt

__all__ = [
    "FlattenStorage",
    "LoweringMemo",
    "PartitionLoops",
    "ScheduleToStmt",
    "Simplify",
    "UnrollLoops",
    "VectorizeLoops",
    "default_loop_pipeline",
    "flatten_storage",
    "lower",
    "schedule_to_stmt",
    "simplify_stmt",
    "unroll_loops",
    "vectorize_loops",
]
