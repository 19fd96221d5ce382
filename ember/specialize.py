"""Models specialised at call time: compiled again for each new value of the inputs their
shapes depend on, or each new structure of their sequence and optional inputs.

Both specialisers answer :class:`ember.model.model.Specializer`'s one method, ``program_for``:
the compiled program for the inputs at hand (compiled on first sight, under a lock, then
reused), the inputs that program takes, and how its outputs become the model's outputs. The
compile step is handed in by the driver (:mod:`ember.driver`), so this module imports no
compiler stage above the model layer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .errors import ArgumentError, EmberError
from .frontend.control_flow import NeedsCallInputs, Structure, expand
from .frontend.onnx import import_onnx, load_model
from .graph.ir import Graph
from .model.model import Model
from .model.program import Program

#: Compiles a graph into a model (static, or itself specialised by value).
CompileGraph = Callable[[Graph], Model]
#: A program, the inputs it takes, and how its outputs become the model's (None: as they are).
Resolved = tuple[Program, dict[str, Any], Callable[[list[Any]], list[Any]] | None]


def _resolve(model: Model, given: dict[str, Any]) -> Resolved:
    """The program of ``model`` for ``given`` (descending into a nested specialiser)."""
    if model.is_static:
        return model.program, given, None
    return model._specializer.program_for(given)  # type: ignore[union-attr]


class ValueSpecializer:
    """A graph whose shapes depend on the values of some inputs (a shape given as an input):
    compiled on first use for each distinct value of those inputs."""

    def __init__(self, graph: Graph, value_inputs: list[str], target: str, compile_graph: CompileGraph):
        self.graph = graph
        self.value_inputs = value_inputs
        self.target = target
        self.input_names = list(graph.inputs)
        self._compile = compile_graph
        self._cache: dict[tuple[Any, ...], Model] = {}
        self._lock = threading.Lock()

    def program_for(self, given: dict[str, Any]) -> Resolved:
        """Compile for the given shape-determining input values (once), see the protocol."""
        key_parts = []
        bound: dict[str, np.ndarray] = {}
        for n in self.value_inputs:
            arr = np.asarray(given[n])
            bound[n] = arr
            key_parts.append((n, arr.dtype.str, arr.shape, arr.tobytes()))
        key = tuple(key_parts)
        with self._lock:
            model = self._cache.get(key)
            if model is None:
                g = self.graph.copy()
                for n, arr in bound.items():
                    info = g.values[n]
                    if tuple(arr.shape) != info.shape or str(arr.dtype) != info.dtype:
                        raise ArgumentError(
                            f"input {n!r} has shape {arr.shape} and dtype {arr.dtype}; the model expects {info}"
                        )
                    g.consts[n] = np.require(arr, requirements="C")
                    g.inputs.remove(n)
                model = self._compile(g)
                self._cache[key] = model
        rest = {n: v for n, v in given.items() if n not in bound}
        return _resolve(model, rest)


class StructureSpecializer:
    """An ONNX model with sequence or optional inputs or outputs, or trip counts decided by
    input values: rewritten into a flat graph and compiled at its first call for each structure
    of those inputs (and value of the inputs that decide trip counts); sequences come back as
    lists of arrays and absent optionals as None."""

    def __init__(self, model: Any, target: str, input_shapes: Mapping[str, Sequence[int]] | None,
                 compile_graph: CompileGraph):
        self.model = load_model(model)
        self.target = target
        self.input_shapes = dict(input_shapes or {})
        self._compile = compile_graph
        inits = {t.name for t in self.model.graph.initializer}
        self.input_names = [v.name for v in self.model.graph.input if v.name not in inits]
        self._tensor_inputs = {
            v.name for v in self.model.graph.input if v.name not in inits and v.type.HasField("tensor_type")
        }
        self.value_inputs: list[str] = []
        self._cache: dict[Any, tuple[Model, list[Structure], dict[str, tuple[str, int | None]]]] = {}
        self._lock = threading.Lock()

    def program_for(self, given: dict[str, Any]) -> Resolved:
        """Compile for these inputs' structure (once); see the protocol."""
        with self._lock:
            while True:
                bound = {n: v for n, v in given.items() if n not in self._tensor_inputs or n in self.value_inputs}
                key = tuple((n, _key(bound[n], n in self.value_inputs)) for n in sorted(bound))
                entry = self._cache.get(key)
                if entry is not None:
                    break
                try:
                    flat, structures, input_map = expand(self.model, self.input_shapes, bound)
                except NeedsCallInputs as exc:
                    if exc.value_input is None or exc.value_input in self.value_inputs:
                        raise
                    self.value_inputs.append(exc.value_input)
                    continue
                entry = (self._compile(import_onnx(flat)), structures, input_map)
                self._cache[key] = entry
                break
        compiled, structures, input_map = entry
        flat_args = {}
        for fname, (src, idx) in input_map.items():
            v = given[src]
            flat_args[fname] = v if idx is None else _element(v, idx)
        program, sub, inner = _resolve(compiled, {k: v for k, v in flat_args.items() if k in compiled.input_names})

        def regroup(results: list[Any]) -> list[Any]:
            if inner is not None:
                results = inner(results)
            by_name = dict(zip(_flat_outputs(structures), results))
            return [_regroup(s, by_name) for s in structures]

        return program, sub, regroup


def _element(v: Any, idx: int) -> Any:
    """Element ``idx`` of a bound sequence (or of an optional holding one)."""
    if isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.ndim > 0 and not isinstance(v, np.generic)):
        return v[idx]
    return v


def _key(v: Any, by_value: bool) -> Any:
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return tuple(_key(x, by_value) for x in v)
    arr = np.asarray(v)
    return (arr.dtype.str, arr.shape, arr.tobytes() if by_value else None)


def _flat_outputs(structures: Sequence[Structure]) -> list[str]:
    out: list[str] = []
    for s in structures:
        if isinstance(s, str):
            out.append(s)
        elif isinstance(s, list):
            out.extend(_flat_outputs(s))
    return out


def _regroup(s: Structure, by_name: Mapping[str, Any]) -> Any:
    if s is None:
        return None
    if isinstance(s, str):
        return by_name[s]
    return [_regroup(x, by_name) for x in s]


def symbolic_compiler(model: Any, declared: Sequence[Any], input_shapes: Mapping[str, Sequence[int]] | None,
                      target: str, fuse: bool = True, tf32: bool = False) -> Callable[[], Any]:
    """The compile step of a model with symbolic dimensions compiled once for every size
    (:func:`ember.model.symbolic.build_symbolic`): ``model`` (ONNX bytes, path or ModelProto),
    ``declared`` (its shaped inputs, :class:`~ember.model.program.TensorSpec` with symbol
    names), ``input_shapes`` (the inputs fixed when compiling). The returned function raises
    :class:`~ember.model.symbolic.NotSymbolic` when the model cannot be compiled that way."""
    from .model.symbolic import NotSymbolic, build_symbolic, symbols_of

    fixed = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    specs = list(declared)

    def graph_at(sizes: dict[str, int]) -> Graph:
        shapes = {s.name: tuple(sizes[d] if isinstance(d, str) else int(d) for d in s.shape) for s in specs}
        try:
            return import_onnx(model, {**fixed, **shapes})
        except NotSymbolic:
            raise
        except EmberError as exc:  # sequence inputs, host stages, values deciding shapes: per shape
            raise NotSymbolic(f"the model does not import with fixed sizes ({type(exc).__name__}: {exc})") from exc

    return lambda: build_symbolic(graph_at, symbols_of(specs), target, fuse, tf32)
