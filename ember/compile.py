"""``ember.compile`` and ``ember.load``: models in, runnable compiled models out."""

from __future__ import annotations

from .graph.executor import CompiledModel, LazyModel, compile, load_compiled

load = load_compiled

__all__ = ["CompiledModel", "LazyModel", "compile", "load"]
