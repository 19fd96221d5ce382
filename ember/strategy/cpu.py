"""The CPU strategy: schedules for the operator library on ``llvm`` targets.

:meth:`CPUStrategy.schedule_group` schedules one fused kernel: injective intermediate stages are
inlined into their readers (stages flagged ``materialize`` are not), the remaining stages
(reductions, the outputs) are computed at the root with their outer loops fused and run in
parallel and their innermost loop vectorized where it is contiguous; convolutions and matrix
products get a packed, register-tiled schedule whose knobs the tuner can set
(:mod:`ember.strategy.cpu_gemm`). Layout parameters (the GEMM panel width) and schedules read the
vector width of the strategy's target, not the host's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import te
from ..ops.fused_attention import is_fused_attention
from ..ops.layout import CPULayout
from ..target import Target
from ..te import ComputeOp, PlaceholderOp, Tensor
from ..te.tensor import IterKind
from .base import Strategy, extent
from .cpu_attention import schedule_fused_attention
from .cpu_conv import (
    NCHWC_TAGS,
    conv_nchwc_space,
    is_fusable_conv_gemm,
    schedule_conv_gemm,
    schedule_conv_nchwc,
    schedule_nchwc_pad,
)
from .cpu_gemm import is_fused_product, packed_gemm_space, schedule_fast
from .cpu_layout import CPULayoutPolicy
from .cpu_reduce import row_reduction_lanes, split_row_reduction
from .cpu_winograd import WINOGRAD_TAGS, schedule_winograd
from .space import ConfigEntity, ConfigSpace, InvalidConfig

PARALLEL_MIN_WORK = 1 << 14


class CPUStrategy(Strategy):
    """Schedules for an ``llvm`` target (see the module docstring)."""

    def __init__(self, target: Target | str = "llvm"):
        super().__init__(target)
        if self.target.is_gpu:
            raise ValueError(f"CPUStrategy needs a CPU target, not {self.target}")

    @property
    def vector_registers(self) -> int:
        """Vector registers of the target's ISA: 32 with AVX-512 or on AArch64, else 16."""
        feats = self.target.features
        return 32 if "avx512f" in feats or "neon" in feats else 16

    def gemm_panel_width(self, dtype: str = "float32") -> int:
        """Two vector registers of ``dtype`` elements of this target (32 float32 with AVX-512, 16
        with AVX2), whatever the host is."""
        return CPULayout(self.target).gemm_panel_width(dtype)

    def schedule_group(
        self,
        outs: Sequence[Tensor],
        keep: set[str] | frozenset[str] = frozenset(),
        config: ConfigEntity | None = None,
        parallel: bool = True,
    ) -> te.Schedule:
        """The CPU schedule of the kernel computing ``outs`` (see :func:`schedule_group`)."""
        return schedule_group(outs, keep, parallel, strategy=self, config=config)

    def keeps_in_memory(self, op: ComputeOp) -> bool:
        """Workspace stages, except a convolution's packed GEMM and a matrix product's in the
        register structure: their register tiles are consumed by the epilogue in the output's
        store (:mod:`ember.strategy.cpu_conv`, :func:`ember.strategy.cpu_gemm.is_fused_product`)."""
        return op.workspace and not is_fusable_conv_gemm(op) and not is_fused_product(op)

    def space(self, outs: Sequence[Tensor]) -> ConfigSpace | None:
        """The knob space of the kernel computing ``outs``: that of its first blocked convolution
        or packed GEMM stage (producers first), None when it has neither."""
        found = tunable_stage(outs, self)
        return found[1] if found is not None else None

    def layout_policy(self) -> CPULayoutPolicy:
        """Convolutions in ``NCHW[x]c`` with ``x`` this target's float32 vector width
        (:class:`~ember.strategy.cpu_layout.CPULayoutPolicy`)."""
        return CPULayoutPolicy(self.target)


def tunable_stage(outs: Sequence[Tensor], strategy: CPUStrategy) -> tuple[ComputeOp, ConfigSpace] | None:
    """The first stage (producers first) of the kernel computing ``outs`` that has knobs — a
    blocked convolution or a packed GEMM — with its knob space; None when there is none."""
    from ..te.rewrite import post_order

    for op in post_order([o.op for o in outs]):
        if isinstance(op, ComputeOp) and op.tag in NCHWC_TAGS:
            return op, conv_nchwc_space(op, strategy)
        if isinstance(op, ComputeOp) and op.tag == "conv_packed":
            return op, packed_gemm_space(op, strategy)
    return None


def schedule_root(stage: te.Stage, parallel: bool = True) -> None:
    """Fuse the data-parallel axes of a root stage; run them in parallel when there is enough work."""
    op = stage.op
    assert isinstance(op, ComputeOp)
    axes = list(op.axis)
    if not axes:
        return
    total = int(np.prod([extent(a, literal=True) for a in axes]))
    work = total * max(1, int(np.prod([extent(r, literal=True) for r in op.reduce_axis])) if op.reduce_axis else 1)
    if not parallel or work < PARALLEL_MIN_WORK or total < 2:
        return
    # Parallel over the shortest prefix of axes that gives enough chunks; the remaining inner
    # loops stay nested (contiguous, for LLVM's vectorizer).
    prefix, chunks = 0, 1
    while prefix < len(axes) and chunks < 64:
        chunks *= extent(axes[prefix], literal=True)
        prefix += 1
    fused = stage.fuse(*axes[:prefix]) if prefix > 1 else axes[0]
    stage.parallel(fused)


def schedule_group(
    outs: Sequence[Tensor],
    keep: set[str] | frozenset[str] = frozenset(),
    parallel: bool = True,
    strategy: CPUStrategy | None = None,
    config: ConfigEntity | None = None,
) -> te.Schedule:
    """The default CPU schedule of a fused kernel computing ``outs`` for ``strategy``'s target
    (the host's when None). Stages named in ``keep`` or flagged ``materialize`` are not inlined.
    Without ``parallel`` every loop stays serial and the packed schedules are not used (constant
    folding at compile time). ``config`` sets the knobs of the first packed GEMM (a point of
    :meth:`CPUStrategy.space`; validated before anything is scheduled)."""
    if strategy is None:
        from .base import host_strategy

        host = host_strategy()
        assert isinstance(host, CPUStrategy)
        strategy = host
    tuned = None
    if config is not None:
        found = tunable_stage(outs, strategy)
        if found is None:
            raise InvalidConfig("this kernel has no tunable stage, so it takes no configuration")
        tuned = found[0]
        config = found[1].validate(config)
    ops = list(dict.fromkeys(o.op for o in outs))
    s = te.create_schedule(ops)
    for stage in list(s.stages):
        op = stage.op
        if isinstance(op, PlaceholderOp):
            continue
        assert isinstance(op, ComputeOp)
        if stage.is_output:
            continue
        if not op.is_reduction and not op.materialize and op.name not in keep:
            stage.compute_inline()
    handled: set[int] = set()
    for stage in list(s.stages):  # fused attentions first: they place their inner stages
        if is_fused_attention(stage.op) and stage.attach == "root":
            schedule_fused_attention(s, stage, strategy, handled, parallel)
    for stage in list(s.stages):
        op = stage.op
        if isinstance(op, PlaceholderOp) or stage.attach == "inline" or id(op) in handled:
            continue
        if isinstance(op, ComputeOp) and op.tag == "nchwc_pad" and stage.attach == "root":
            schedule_nchwc_pad(stage, parallel)
            continue
        if parallel and isinstance(op, ComputeOp) and op.tag in NCHWC_TAGS and stage.attach == "root":
            space_c = conv_nchwc_space(op, strategy)
            schedule_conv_nchwc(s, stage, strategy, config if op is tuned and config is not None else space_c.default,
                                handled)
            continue
        if isinstance(op, ComputeOp) and op.tag in WINOGRAD_TAGS:
            schedule_winograd(s, stage, strategy, handled, parallel)
            continue
        if parallel and isinstance(op, ComputeOp) and is_fusable_conv_gemm(op):
            space = packed_gemm_space(op, strategy)
            cfg = config if op is tuned and config is not None else space.default
            schedule_conv_gemm(s, stage, strategy, cfg, handled)
            continue
        if parallel and schedule_fast(s, stage, strategy, handled, config if op is tuned else None):
            continue
        if stage.attach == "root":
            lanes = row_reduction_lanes(op, strategy.target.vector_lanes(op.output(0).dtype.bits)) \
                if parallel and isinstance(op, ComputeOp) and op.is_reduction else None
            if lanes:  # a row sum: vector partials in registers (cpu_reduce)
                rf = split_row_reduction(s, stage, lanes)
                schedule_root(stage, parallel)
                data = [iv for iv in stage.leaf_iter_vars if iv.kind is not IterKind.REDUCE]
                s[rf].compute_at(stage, data[-1])
                continue
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
