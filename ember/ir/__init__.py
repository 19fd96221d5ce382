"""The loop IR: data types, expressions, statements, buffers, functions, visitor, printer."""

from .buffer import Buffer, decl_buffer
from .dtypes import DataType, dtype, promote
from .expr import *  # noqa: F403
from .stmt import *  # noqa: F403
from .visitor import Mutator, Visitor, free_vars, post_order_visit, substitute

__all__ = ["Buffer", "DataType", "Mutator", "Visitor", "decl_buffer", "dtype", "free_vars", "post_order_visit",
           "promote", "substitute"]
