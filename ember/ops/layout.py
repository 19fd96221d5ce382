"""Layout parameters that compute definitions take from the target's strategy.

Operators build packed layouts (a GEMM's right operand in column panels) whose shape depends on
the target. :mod:`ember.ops` sits below :mod:`ember.strategy`, so the operators see the
strategy through the :class:`Layout` protocol it implements (``OpContext.strategy``); code
that builds operators without a target gets :func:`host_layout`, the host CPU's choice (the
same one :class:`ember.strategy.CPUStrategy` makes for the host).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol

from ..ir.dtypes import dtype as as_dtype
from ..target import Target
from ..te.tensor_intrin import MatrixIntrinsic


class Layout(Protocol):
    """What compute definitions ask a target's strategy about data layout."""

    def gemm_panel_width(self, dtype: str = "float32") -> int:
        """The width ``nr`` (>= 1) of the column panels ``[N / nr, K, nr]`` a packed GEMM's right
        operand of ``dtype`` elements is stored in."""
        ...

    def matrix_intrinsic(self, dtype: str) -> MatrixIntrinsic | None:
        """The warp-level matrix instruction (tensor cores, AMD matrix cores) products of two
        ``dtype`` operands run on, or None (CUDA-core or CPU code)."""
        ...

    def tc_split_k(self, batch: int, mp: int, np_: int, kp: int) -> int:
        """Parts (1 for none) a tensor-core product of ``batch`` x ``mp`` x ``np_`` padded
        outputs splits its padded reduction ``kp`` into (each a multiple of 32 long)."""
        ...

    def packs_batched_gemm(self) -> bool:
        """Whether a batch of float32 products of two computed operands (equal batch shapes, as in
        attention) runs on the packed GEMM, each right operand packed by a stage of its own."""
        ...

    def gemm_split_k(self, batch: int, m: int, n: int, k0: int, taps: int) -> int:
        """Parts (a divisor of ``k0``, 1 for none) a packed GEMM of ``batch`` x ``m`` x ``n``
        outputs splits its first reduction axis (``k0`` long; ``taps`` more products per step of
        it) into, each part summed by blocks of its own and the parts added in the readers."""
        ...


def vector_panel_width(vector_bits: int, dtype: str = "float32") -> int:
    """Two vector registers of ``dtype`` elements for vector registers of ``vector_bits``: the
    panel a CPU register tile's row spans (32 float32 with AVX-512, 16 with AVX2). Always >= 1."""
    return max(1, 2 * vector_bits // max(1, as_dtype(dtype).bits))


@dataclass(frozen=True)
class CPULayout:
    """The layout choices for CPU ``target``: panels of two of its vector registers."""

    target: Target

    def gemm_panel_width(self, dtype: str = "float32") -> int:
        """:func:`vector_panel_width` of the target's vector width."""
        return vector_panel_width(self.target.vector_bits, dtype)

    def matrix_intrinsic(self, dtype: str) -> MatrixIntrinsic | None:
        """None: the CPU has no warp-level matrix instructions."""
        return None

    def tc_split_k(self, batch: int, mp: int, np_: int, kp: int) -> int:
        """1: the CPU has no tensor cores."""
        return 1

    def packs_batched_gemm(self) -> bool:
        """False: the CPU computes batched products of computed operands as plain reductions."""
        return False

    def gemm_split_k(self, batch: int, m: int, n: int, k0: int, taps: int) -> int:
        """1: CPU threads split a GEMM's rows and columns, never its reduction."""
        return 1


@functools.cache
def host_layout() -> CPULayout:
    """The host CPU's layout choices (``Target("llvm")``)."""
    return CPULayout(Target("llvm"))
