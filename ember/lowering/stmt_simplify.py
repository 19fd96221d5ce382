"""Statement simplification under loop ranges.

:func:`simplify_stmt` walks a statement, binds each loop variable to its range, simplifies every
expression with those ranges, removes conditions it can prove (true: keep the body; false: drop
it), replaces loops of extent one by their body and drops loops of extent zero. The result
computes the same values as its input.
"""

from __future__ import annotations

from typing import Any

from ..arith import Analyzer
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator, substitute


class _StmtSimplifier(Mutator):
    def __init__(self) -> None:
        self.an = Analyzer()

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):
            return self.an.simplify(node)
        return super().visit(node)

    def visit_For(self, s: S.For) -> S.Stmt:
        lo, ext = self.visit(s.min), self.visit(s.extent)
        if isinstance(ext, E.IntImm) and ext.value <= 0:
            return S.NOP
        if isinstance(ext, E.IntImm) and ext.value == 1 and s.kind is not S.ForKind.THREAD_BINDING:
            return self.visit(substitute(s.body, {s.loop_var: lo}))
        saved = self.an.ranges.get(s.loop_var)
        self.an.bind(s.loop_var, lo, ext)
        lo_b, _ = self.an.const_bound(lo)
        if lo_b is not None and self.an.ranges[s.loop_var][0] is None:
            self.an.ranges[s.loop_var] = (lo_b, None)
        body = self.visit(s.body)
        if saved is None:
            self.an.ranges.pop(s.loop_var, None)
        else:
            self.an.ranges[s.loop_var] = saved
        if isinstance(body, S.SeqStmt) and not body.seq:
            return S.NOP
        if lo is s.min and ext is s.extent and body is s.body:
            return s
        return S.For(s.loop_var, lo, ext, s.kind, body, s.thread_tag, s.annotations)

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        cond = self.visit(s.condition)
        if isinstance(cond, E.IntImm):
            if cond.value:
                return self.visit(s.then_case)
            return self.visit(s.else_case) if s.else_case is not None else S.NOP
        then_case = self.visit(s.then_case)
        else_case = self.visit(s.else_case)
        if cond is s.condition and then_case is s.then_case and else_case is s.else_case:
            return s
        return S.IfThenElse(cond, then_case, else_case)

    def visit_SeqStmt(self, s: S.SeqStmt) -> S.Stmt:
        items = [self.visit(x) for x in s.seq]
        if all(a is b for a, b in zip(items, s.seq)):
            return s
        return S.seq(*[x for x in items if not (isinstance(x, S.SeqStmt) and not x.seq)]) if items else S.NOP


def simplify_stmt(stmt: S.Stmt) -> S.Stmt:
    """``stmt`` simplified under its loop ranges (see module doc)."""
    return _StmtSimplifier().visit(stmt)
