"""Symbolic integer analysis: simplification, bounds and proofs."""

from .bound import const_bound, symbolic_interval
from .linear import structural_equal, structural_key
from .simplifier import Analyzer, ceildiv, simplify

__all__ = ["Analyzer", "ceildiv", "const_bound", "simplify", "structural_equal", "structural_key", "symbolic_interval"]
