"""One visitor and one mutator for the whole IR.

Both walk nodes generically through their dataclass fields: any field holding an expression, a
statement, or a tuple of them is visited. Subclasses override ``visit_<NodeClass>`` to act on one
kind of node and call ``self.generic_visit(node)`` (or ``generic_mutate``) to continue into its
children. The mutator returns the very same node when nothing below it changed, so unchanged
subtrees are shared, never copied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .expr import PrimExpr, Var
from .stmt import Stmt

_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in ("dtype", "buffer", "producer", "combiner", "axis", "uid", "name")
        )
        _FIELDS[cls] = names
    return names


def _is_node(x: Any) -> bool:
    return isinstance(x, (PrimExpr, Stmt))


class Visitor:
    """Read-only walk over expressions and statements."""

    def visit(self, node: Any) -> None:
        """Visit ``node`` (an expression, statement, or None)."""
        if node is None:
            return
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            method(node)
        else:
            self.generic_visit(node)

    def generic_visit(self, node: Any) -> None:
        """Visit every child of ``node``."""
        for name in _child_fields(type(node)):
            value = getattr(node, name)
            if _is_node(value):
                self.visit(value)
            elif isinstance(value, tuple):
                for item in value:
                    if _is_node(item):
                        self.visit(item)
                    elif isinstance(item, tuple):
                        for sub in item:
                            if _is_node(sub):
                                self.visit(sub)


class Mutator:
    """Rewriting walk; returns new nodes, sharing what did not change."""

    def visit(self, node: Any) -> Any:
        """The rewritten ``node`` (None stays None)."""
        if node is None:
            return None
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            return method(node)
        return self.generic_mutate(node)

    def generic_mutate(self, node: Any) -> Any:
        """``node`` with every child rewritten (the same object when none changed)."""
        changes: dict[str, Any] = {}
        for name in _child_fields(type(node)):
            value = getattr(node, name)
            new = self._mutate_field(value)
            if new is not value:
                changes[name] = new
        if not changes:
            return node
        return dataclasses.replace(node, **changes)

    def _mutate_field(self, value: Any) -> Any:
        if _is_node(value):
            return self.visit(value)
        if isinstance(value, tuple):
            items = [self._mutate_field(v) for v in value]
            if any(a is not b for a, b in zip(items, value)):
                return tuple(items)
        return value


def post_order_visit(node: Any, fn: Callable[[Any], None]) -> None:
    """Call ``fn`` on every node below and including ``node``, children first."""

    class _V(Visitor):
        def visit(self, n: Any) -> None:
            if n is None:
                return
            self.generic_visit(n)
            fn(n)

    _V().visit(node)


def substitute(node: Any, mapping: dict[Var, PrimExpr]) -> Any:
    """``node`` with every variable in ``mapping`` replaced by its expression."""
    if not mapping:
        return node

    class _Sub(Mutator):
        def visit_Var(self, v: Var) -> PrimExpr:
            return mapping.get(v, v)

        def visit_Allocate(self, s: Any) -> Any:
            # The allocated shape may use the variables too (a region computed inside a loop);
            # the new buffer keeps its data pointer, so loads and stores still find it.
            out = self.generic_mutate(s)
            buf = s.buffer
            shape = tuple(self.visit(x) for x in buf.shape)
            strides = tuple(self.visit(x) for x in buf.strides)
            if all(a is b for a, b in zip(shape + strides, buf.shape + buf.strides)):
                return out
            return dataclasses.replace(out, buffer=dataclasses.replace(buf, shape=shape, strides=strides))

    return _Sub().visit(node)


def free_vars(node: Any) -> list[Var]:
    """Variables used in ``node`` but not bound inside it (by a loop, a let), in first-use order."""
    bound: set[Var] = set()
    seen: dict[Var, None] = {}

    class _F(Visitor):
        def visit_For(self, s: Any) -> None:
            self.visit(s.min)
            self.visit(s.extent)
            bound.add(s.loop_var)
            self.visit(s.body)

        def visit_LetStmt(self, s: Any) -> None:
            self.visit(s.value)
            bound.add(s.var)
            self.visit(s.body)

        def visit_Let(self, e: Any) -> None:
            self.visit(e.value)
            bound.add(e.var)
            self.visit(e.body)

        def visit_Var(self, v: Var) -> None:
            if v not in bound:
                seen.setdefault(v, None)

        def visit_BufferLoad(self, e: Any) -> None:
            seen.setdefault(e.buffer.data, None)
            self.generic_visit(e)

        def visit_BufferStore(self, s: Any) -> None:
            seen.setdefault(s.buffer.data, None)
            self.generic_visit(s)

        def visit_Allocate(self, s: Any) -> None:
            bound.add(s.buffer.data)
            for e in s.buffer.shape:
                self.visit(e)
            self.visit(s.body)

    _F().visit(node)
    return [v for v in seen if v not in bound]
