"""Checks that loop IR is well typed before code generation sees it.

LLVM aborts the process on some malformed input, and llvmlite raises plain Python errors on
others; a mismatched store can even pass LLVM's verifier and write past a buffer. :func:`verify`
walks a lowered :class:`~ember.ir.PrimFunc` and raises :class:`~ember.errors.CodegenError`
naming the function and the offending node when:

* the operands of an arithmetic node, a comparison or a select differ in type from each other
  or from the node, or a logical node's operands are not boolean;
* a loop's bounds, a load's or a store's index are not integers, a load or store has more than
  one index (storage was not flattened), or the value stored differs in type from the buffer;
* a condition (``if``, ``assert``, ``select``) is not boolean, or a ``let`` binds a value of
  another type than its variable;
* a ramp or broadcast has inconsistent lanes, or tensor-level nodes (``ProducerLoad``,
  ``Reduce``, ``ProducerStore``, ``ProducerRealize``) survived lowering.
"""

from __future__ import annotations

from typing import Any

from ..errors import CodegenError
from . import expr as E
from . import stmt as S
from .visitor import Visitor

_ARITH = (E.Add, E.Sub, E.Mul, E.Div, E.Mod, E.FloorDiv, E.FloorMod, E.Min, E.Max)


class _Verifier(Visitor):
    def __init__(self, name: str):
        self.name = name

    def fail(self, node: Any, why: str) -> None:
        raise CodegenError(f"invalid loop IR in {self.name}: {why} in `{node}`; this is a bug in the pass or "
                           "the hand-written function that produced it")

    def _index(self, node: Any, indices: tuple[E.PrimExpr, ...]) -> int:
        if len(indices) != 1:
            self.fail(node, f"{len(indices)} indices where flattened storage takes one")
        if not indices[0].dtype.is_int:
            self.fail(node, f"index of type {indices[0].dtype}")
        return indices[0].dtype.lanes

    def visit(self, node: Any) -> None:
        if isinstance(node, (*_ARITH, E.CmpOp)) and node.a.dtype.is_lowp_float:
            self.fail(node, f"{type(node).__name__} of {node.a.dtype}, a storage type: convert it with ember.ops.lowp")
        elif isinstance(node, _ARITH) and not (node.a.dtype == node.b.dtype == node.dtype):
            self.fail(node, f"{type(node).__name__} of {node.a.dtype} and {node.b.dtype} typed {node.dtype}")
        elif isinstance(node, E.CmpOp) and (node.a.dtype != node.b.dtype or not node.dtype.is_bool):
            self.fail(node, f"comparison of {node.a.dtype} and {node.b.dtype}")
        elif isinstance(node, (E.And, E.Or)) and not (node.a.dtype.is_bool and node.b.dtype.is_bool):
            self.fail(node, f"logical {type(node).__name__} of {node.a.dtype} and {node.b.dtype}")
        elif isinstance(node, E.Not) and not node.a.dtype.is_bool:
            self.fail(node, f"logical not of {node.a.dtype}")
        elif isinstance(node, E.Select):
            if not node.condition.dtype.is_bool:
                self.fail(node, f"select condition of type {node.condition.dtype}")
            if not (node.true_value.dtype == node.false_value.dtype == node.dtype):
                self.fail(node, f"select of {node.true_value.dtype} and {node.false_value.dtype} typed {node.dtype}")
        elif isinstance(node, E.Ramp):
            if node.base.dtype.lanes != 1 or not node.base.dtype.is_int or node.stride.dtype != node.base.dtype \
                    or node.dtype != node.base.dtype.with_lanes(node.lanes):
                self.fail(node, "ramp with inconsistent types or lanes")
        elif isinstance(node, E.Broadcast):
            if node.value.dtype.lanes != 1 or node.dtype != node.value.dtype.with_lanes(node.lanes):
                self.fail(node, "broadcast with inconsistent types or lanes")
        elif isinstance(node, E.BufferLoad):
            lanes = self._index(node, node.indices)
            if node.dtype != node.buffer.dtype.with_lanes(lanes):
                self.fail(node, f"load of {node.dtype} from a {node.buffer.dtype} buffer with a {lanes}-lane index")
        elif isinstance(node, E.Let) and node.var.dtype != node.value.dtype:
            self.fail(node, f"let of a {node.var.dtype} variable to a {node.value.dtype} value")
        elif isinstance(node, (E.ProducerLoad, E.Reduce, S.ProducerStore, S.ProducerRealize)):
            self.fail(node, f"{type(node).__name__} left after lowering")
        elif isinstance(node, S.For):
            for what, x in (("start", node.min), ("extent", node.extent)):
                if not x.dtype.is_int or x.dtype.lanes != 1:
                    self.fail(node.loop_var, f"loop {what} {x} of type {x.dtype}")
            if not node.loop_var.dtype.is_int:
                self.fail(node.loop_var, f"loop variable of type {node.loop_var.dtype}")
        elif isinstance(node, S.BufferStore):
            lanes = self._index(node.value, node.indices)
            if node.value.dtype != node.buffer.dtype.with_lanes(lanes):
                self.fail(node.value, f"store of {node.value.dtype} into {node.buffer.name}, a {node.buffer.dtype} "
                                      f"buffer, at a {lanes}-lane index")
        elif isinstance(node, (S.IfThenElse, S.Assert)) and node.condition.dtype != E.BOOL:
            self.fail(node.condition, f"condition of type {node.condition.dtype}")
        elif isinstance(node, S.LetStmt) and node.var.dtype != node.value.dtype:
            self.fail(node.value, f"let of the {node.var.dtype} variable {node.var.name} to a {node.value.dtype} value")
        super().visit(node)


def verify(func: S.PrimFunc) -> None:
    """Raise CodegenError when ``func`` is not well-typed loop IR (see the module doc)."""
    _Verifier(func.name).visit(func.body)
