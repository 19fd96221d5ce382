"""ember.ops: the operator library (ONNX-named operators as tensor expressions) and schedules."""

from .registry import OPS, OpContext, OpError, lookup, register

__all__ = ["OPS", "OpContext", "OpError", "lookup", "register"]
