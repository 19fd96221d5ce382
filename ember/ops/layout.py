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


@functools.cache
def host_layout() -> CPULayout:
    """The host CPU's layout choices (``Target("llvm")``)."""
    return CPULayout(Target("llvm"))
