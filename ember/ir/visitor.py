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


_NODE_TYPES = (PrimExpr, Stmt)


def _is_node(x: Any) -> bool:
    return isinstance(x, _NODE_TYPES)


def _dispatch(walker: type, node_type: type) -> Any:
    """The ``visit_<NodeClass>`` function of the walker class ``walker`` for ``node_type``, or
    None; remembered in the walker class's own ``__dict__`` (so a subclass has its own table and
    a class made per call is collected with its table). Handlers are class attributes: define
    them in the class body, not on instances or after the class was first used."""
    table = walker.__dict__.get("_ember_dispatch")
    if table is None:
        table = {}
        type.__setattr__(walker, "_ember_dispatch", table)
    try:
        return table[node_type]
    except KeyError:
        fn = getattr(walker, "visit_" + node_type.__name__, None)
        table[node_type] = fn
        return fn


class Visitor:
    """Read-only walk over expressions and statements."""

    def visit(self, node: Any) -> None:
        """Visit ``node`` (an expression, statement, or None)."""
        if node is None:
            return
        fn = _dispatch(type(self), type(node))
        if fn is not None:
            fn(self, node)
        else:
            self.generic_visit(node)

    def generic_visit(self, node: Any) -> None:
        """Visit every child of ``node``."""
        visit = self.visit
        for name in _FIELDS.get(type(node)) or _child_fields(type(node)):
            value = getattr(node, name)
            if isinstance(value, _NODE_TYPES):
                visit(value)
            elif isinstance(value, tuple):
                for item in value:
                    if isinstance(item, _NODE_TYPES):
                        visit(item)
                    elif isinstance(item, tuple):
                        for sub in item:
                            if isinstance(sub, _NODE_TYPES):
                                visit(sub)


class Mutator:
    """Rewriting walk; returns new nodes, sharing what did not change."""

    def visit(self, node: Any) -> Any:
        """The rewritten ``node`` (None stays None)."""
        if node is None:
            return None
        fn = _dispatch(type(self), type(node))
        if fn is not None:
            return fn(self, node)
        return self.generic_mutate(node)

    def generic_mutate(self, node: Any) -> Any:
        """``node`` with every child rewritten (the same object when none changed)."""
        changes: dict[str, Any] | None = None
        for name in _FIELDS.get(type(node)) or _child_fields(type(node)):
            value = getattr(node, name)
            if isinstance(value, _NODE_TYPES):
                new = self.visit(value)
            elif isinstance(value, tuple):
                new = self._mutate_field(value)
            else:
                continue
            if new is not value:
                if changes is None:
                    changes = {}
                changes[name] = new
        if not changes:
            return node
        return dataclasses.replace(node, **changes)

    def _mutate_field(self, value: Any) -> Any:
        if isinstance(value, _NODE_TYPES):
            return self.visit(value)
        if isinstance(value, tuple):
            items = [self._mutate_field(v) for v in value]
            if any(a is not b for a, b in zip(items, value)):
                return tuple(items)
        return value


class _PostOrder(Visitor):
    """Calls ``fn`` on every node, children first (one class for every call: making a class per
    call cost more than many walks)."""

    def __init__(self, fn: Callable[[Any], None]) -> None:
        self.fn = fn

    def visit(self, n: Any) -> None:
        if n is None:
            return
        self.generic_visit(n)
        self.fn(n)


def post_order_visit(node: Any, fn: Callable[[Any], None]) -> None:
    """Call ``fn`` on every node below and including ``node``, children first."""
    _PostOrder(fn).visit(node)


class _Substitute(Mutator):
    """Replaces the variables of ``mapping`` (see :func:`substitute`)."""

    def __init__(self, mapping: dict[Var, PrimExpr]) -> None:
        self.mapping = mapping

    def visit_Var(self, v: Var) -> PrimExpr:
        return self.mapping.get(v, v)

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


def post_order_stmts(node: Stmt, fn: Callable[[Stmt], None]) -> None:
    """Call ``fn`` on every statement below and including ``node``, children first: the
    statements :func:`post_order_visit` reaches, in its order, without walking expressions
    (an expression never holds a statement), so it is much faster on large kernels."""
    for name in _FIELDS.get(type(node)) or _child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, Stmt):
            post_order_stmts(value, fn)
        elif isinstance(value, tuple):
            for item in value:
                if isinstance(item, Stmt):
                    post_order_stmts(item, fn)
                elif isinstance(item, tuple):
                    for sub in item:
                        if isinstance(sub, Stmt):
                            post_order_stmts(sub, fn)
    fn(node)


def substitute(node: Any, mapping: dict[Var, PrimExpr]) -> Any:
    """``node`` with every variable in ``mapping`` replaced by its expression."""
    if not mapping:
        return node
    return _Substitute(mapping).visit(node)


class _FreeVars(Visitor):
    """Collects used and bound variables (see :func:`free_vars`)."""

    def __init__(self) -> None:
        self.bound: set[Var] = set()
        self.seen: dict[Var, None] = {}

    def visit_For(self, s: Any) -> None:
        self.visit(s.min)
        self.visit(s.extent)
        self.bound.add(s.loop_var)
        self.visit(s.body)

    def visit_LetStmt(self, s: Any) -> None:
        self.visit(s.value)
        self.bound.add(s.var)
        self.visit(s.body)

    def visit_Let(self, e: Any) -> None:
        self.visit(e.value)
        self.bound.add(e.var)
        self.visit(e.body)

    def visit_Var(self, v: Var) -> None:
        if v not in self.bound:
            self.seen.setdefault(v, None)

    def visit_BufferLoad(self, e: Any) -> None:
        self.seen.setdefault(e.buffer.data, None)
        self.generic_visit(e)

    def visit_BufferStore(self, s: Any) -> None:
        self.seen.setdefault(s.buffer.data, None)
        self.generic_visit(s)

    def visit_Allocate(self, s: Any) -> None:
        self.bound.add(s.buffer.data)
        for e in s.buffer.shape:
            self.visit(e)
        self.visit(s.body)


def free_vars(node: Any) -> list[Var]:
    """Variables used in ``node`` but not bound inside it (by a loop, a let), in first-use order."""
    f = _FreeVars()
    f.visit(node)
    return [v for v in f.seen if v not in f.bound]
