"""ember.te: the tensor-expression language users write kernels in, and its schedules."""

from ..ir.expr import const, floordiv, floormod, truncdiv, truncmod
from ..ir.expr import max_expr as max_value_expr
from .math import (
    abs, cast, ceil, cos, erf, exp, exp2, floor, fmod, if_then_else, isinf, isnan, log, log2, log10,
    max_value_of, min_value_of, pow, round, rsqrt, select, sigmoid, sin, sqrt, tanh, trunc,
)
from .operation import (
    CommReducer, comm_reducer, compute, max, min, placeholder, prod, reduce_axis, size_var, sum,
    thread_axis, var,
)
from .schedule import Schedule, Stage, create_schedule
from .tensor import ComputeOp, IterVar, PlaceholderOp, Range, Tensor

__all__ = [
    "CommReducer", "ComputeOp", "IterVar", "PlaceholderOp", "Range", "Schedule", "Stage", "Tensor",
    "abs", "cast", "ceil", "comm_reducer", "compute", "const", "cos", "create_schedule", "erf", "exp",
    "exp2", "floor", "floordiv", "floormod", "fmod", "if_then_else", "isinf", "isnan", "log", "log10",
    "log2", "max", "max_value_expr", "max_value_of", "min", "min_value_of", "placeholder", "pow", "prod",
    "reduce_axis", "round", "rsqrt", "select", "sigmoid", "sin", "size_var", "sqrt", "sum", "tanh",
    "thread_axis", "trunc", "truncdiv", "truncmod", "var",
]
