"""ember.strategy: per-target schedule strategies, apart from the operators' compute definitions.

:func:`strategy_for` gives a target's :class:`Strategy` (:class:`CPUStrategy` for ``llvm``,
:class:`GPUStrategy` for ``cuda`` and ``rocm``): the default schedule of a fused kernel, the
layout parameters compute definitions need (the GEMM panel width), the program rewrites the
model compiler applies for the target, and the knob space (:class:`ConfigSpace`) of a kernel's
tunable stage, whose default point (:class:`ConfigEntity`) is the untuned schedule.
"""

from .base import Strategy, extent, host_strategy, strategy_for
from .cpu import CPUStrategy
from .gpu import GPUStrategy
from .space import (
    AnnotateEntity,
    ConfigEntity,
    ConfigSpace,
    InvalidConfig,
    Knob,
    KnobEntity,
    ReorderEntity,
    SplitEntity,
)

__all__ = [
    "AnnotateEntity",
    "CPUStrategy",
    "ConfigEntity",
    "ConfigSpace",
    "GPUStrategy",
    "InvalidConfig",
    "Knob",
    "KnobEntity",
    "ReorderEntity",
    "SplitEntity",
    "Strategy",
    "extent",
    "host_strategy",
    "strategy_for",
]
