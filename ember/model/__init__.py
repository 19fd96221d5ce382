"""ember.model: compiled models — the program, its executor, memory planning, group lowering,
the saved-file format and the whole-model cache."""

from .model import Model, Specializer
from .program import Program, TensorSpec

__all__ = ["Model", "Program", "Specializer", "TensorSpec"]
