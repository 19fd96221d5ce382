"""Passes from a schedule to loop IR: schedule lowering, flattening, simplification, loops."""

from .api import lower
from .flatten import flatten_storage
from .loops import unroll_loops, vectorize_loops
from .schedule_ops import schedule_to_stmt
from .simplify_stmt import simplify_stmt

__all__ = ["flatten_storage", "lower", "schedule_to_stmt", "simplify_stmt", "unroll_loops", "vectorize_loops"]
