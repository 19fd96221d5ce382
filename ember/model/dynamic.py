"""Models with symbolic input dimensions: one fixed-shape compiled variant per input shape.

An ONNX model whose inputs declare dimensions by name (``batch``, ``width``) or leave them
unknown is compiled by ``ember.compile`` into a :class:`~ember.model.model.Model` holding a
:class:`ShapeSpecializer`: the first call with a new combination of input shapes checks the shapes
against the declared ones (:func:`check_shapes`: same symbol, same size; fixed dimensions
equal; ranks equal), compiles the fixed-shape model for them (the driver's compile, so the
kernel and whole-model caches answer repeats) and keeps it; later calls with those shapes find
it with one dictionary lookup. At most ``max_variants`` variants are kept (8 by default); the
least recently used one is dropped when a new one is needed, with an :class:`EvictionWarning`.

Each variant is an ordinary model, so it runs exactly as a fixed-shape build does (its own
execution contexts, memory plan and, on CUDA, graphs); a dropped variant takes its run state
with it. Constants equal between variants (the weights, usually) are one array in host memory.
This module holds only the cache: the compile step is handed in by the driver.

Before compiling per shape, the specialiser tries once (at the first call) to compile the model
**for every size** with symbolic extents (:mod:`ember.model.symbolic`, when the driver hands in
``compile_symbolic``): sizes within that build's range then cost a program made from it (shapes
evaluated, memory planned: well under a millisecond) instead of a compile, kept in an LRU of
``max_instances`` (64) that drops without a warning (a program is made again as cheaply). When
the model cannot be compiled that way, the reason is logged once (``ember.dynamic``, INFO) and
kept in :attr:`ShapeSpecializer.symbolic_status`; sizes outside the build's range are compiled
per shape as above.
"""

from __future__ import annotations

import logging
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import (
    ArgumentError,
    EmberError,
    FrontendError,
    GraphError,
    ModelFormatError,
    OpError,
    UnsupportedOpError,
)
from .model import Model
from .program import Program, TensorSpec
from .symbolic import NotSymbolic, SymbolicBuild, symbols_of

#: A declared dimension: a size, or the name of a size given at call time.
Dim = int | str
#: The concrete shape of every shaped input, in input order.
ShapeKey = tuple[tuple[int, ...], ...]
#: Compiles the model for concrete shapes of its shaped inputs (name -> shape).
CompileShapes = Callable[[dict[str, tuple[int, ...]]], Model]
#: Variants kept per model unless ``max_variants`` says otherwise.
DEFAULT_MAX_VARIANTS = 8
#: Programs made from a symbolic build kept per model (cheap to make again: no warning on dropping).
DEFAULT_MAX_INSTANCES = 64
#: Calls of one size after which the symbolic build compiles its slow kernels for that size.
DEFAULT_PROMOTE_AFTER = 3
#: Compiles the model once for every size of its symbols (raises NotSymbolic when it cannot).
CompileSymbolic = Callable[[], SymbolicBuild]
#: Input dtypes checked before a variant is compiled (the executor checks the others after).
_PLAIN_DTYPES = frozenset({"bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                           "uint16", "uint32", "uint64"})

_log = logging.getLogger("ember.dynamic")


class EvictionWarning(UserWarning):
    """A shape-specialised model dropped its least recently used variant to make room."""


def shape_of(value: Any) -> tuple[int, ...]:
    """The shape of an input value (a NumPy or ember array, a torch tensor, nested lists)."""
    shp = getattr(value, "shape", None)
    if type(shp) is tuple and all(type(d) is int for d in shp):  # NumPy arrays: the shape as it is
        return shp
    if shp is None:
        shp = np.shape(value)
    return tuple(int(d) for d in shp)


def check_shapes(declared: Sequence[TensorSpec], shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """Check concrete input ``shapes`` against the ``declared`` ones and return the size each
    symbol takes. Raises :class:`~ember.errors.ArgumentError` naming the input, the dimension,
    what the model declares and what was given: a wrong rank, a fixed dimension of another size,
    a negative size, or one symbol given two sizes."""
    sizes: dict[str, int] = {}
    where: dict[str, str] = {}
    for spec in declared:
        got = shapes[spec.name]
        want = _fmt(spec.shape)
        if len(got) != len(spec.shape):
            raise ArgumentError(
                f"input {spec.name!r} has shape {got} ({len(got)} dimensions); the model declares {want} "
                f"({len(spec.shape)} dimensions)")
        for k, (d, g) in enumerate(zip(spec.shape, got)):
            if g < 0:
                raise ArgumentError(f"input {spec.name!r} has a negative dimension {k} ({g})")
            if isinstance(d, int):
                if d != g:
                    raise ArgumentError(
                        f"input {spec.name!r} has shape {got}; the model declares {want}: dimension {k} must be {d}")
                continue
            if d in sizes and sizes[d] != g:
                raise ArgumentError(
                    f"input {spec.name!r} dimension {k} ({d!r}) is {g}, but {where[d]} gave {d!r} = {sizes[d]}: "
                    f"every dimension named {d!r} must have the same size")
            if d not in sizes:
                sizes[d] = g
                where[d] = f"input {spec.name!r} dimension {k}"
    return sizes


def check_dtypes(declared: Sequence[TensorSpec], given: Mapping[str, Any]) -> None:
    """Raise :class:`~ember.errors.ArgumentError` when a NumPy array in ``given`` has another
    dtype than its input declares (checked before a variant is compiled for it; other values and
    types are checked by the executor)."""
    for spec in declared:
        v = given[spec.name]
        if isinstance(v, np.ndarray) and spec.dtype in _PLAIN_DTYPES and v.dtype != np.dtype(spec.dtype):
            raise ArgumentError(f"input {spec.name!r} has dtype {v.dtype}, but the model declares {spec.dtype}: "
                                f"convert it with x.astype({spec.dtype!r})")


def _fmt(dims: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def resolve(model: Model, given: dict[str, Any]) -> tuple[Program, dict[str, Any], Any]:
    """The program of ``model`` for the inputs ``given``, the inputs it takes and how its outputs
    become the model's (None: as they are), descending into a model specialised at call time."""
    if model.is_static:
        return model.program, given, None
    return model._specializer.program_for(given)  # type: ignore[union-attr]


class ShapeSpecializer:
    """The variant cache of a model with symbolic input dimensions (see the module docstring).

    ``declared``: the shaped inputs (name, dims — ints and symbol names —, dtype);
    ``input_names``: every input in call order (sequence and optional inputs too, which pass
    through to the variant); ``compile_shapes``: compiles a variant (None: a loaded model
    that cannot compile, e.g. saved without its source; a new shape is then an error).
    Thread-safe: lookups take a short lock, compiles run one at a time."""

    def __init__(self, declared: Sequence[TensorSpec], input_names: Sequence[str], output_names: Sequence[str],
                 target: str, compile_shapes: CompileShapes | None, max_variants: int = DEFAULT_MAX_VARIANTS,
                 compile_symbolic: CompileSymbolic | None = None):
        self.declared = list(declared)
        #: Compiles the symbolic build (None: per shape only). Tried once, at the first call.
        self.compile_symbolic = compile_symbolic
        #: "not tried", "built", or why the model is compiled per shape instead.
        self.symbolic_status = "not tried" if compile_symbolic is not None else "not available"
        self._symbolic: SymbolicBuild | None = None
        self._symbols = symbols_of(self.declared)
        self._instances: OrderedDict[ShapeKey, Model] = OrderedDict()
        self.max_instances = DEFAULT_MAX_INSTANCES
        #: Calls of each size run by the symbolic build; at ``promote_after`` calls, the kernels
        #: its bucket runs with schedules made for unknown sizes are compiled for the size (0: never).
        self.promote_after = DEFAULT_PROMOTE_AFTER
        self._calls: dict[ShapeKey, int] = {}
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.target = target
        self.compile_shapes = compile_shapes
        self.max_variants = max_variants
        self._variants: OrderedDict[ShapeKey, Model] = OrderedDict()
        # One array per distinct constant of the variants, while some variant holds it.
        self._shared: weakref.WeakValueDictionary[tuple[str, tuple[int, ...], str], np.ndarray] = \
            weakref.WeakValueDictionary()
        self._lock = threading.Lock()
        self._compile_lock = threading.Lock()
        #: Calls answered by a kept variant, variants compiled (or loaded, the symbolic build
        #: included), variants dropped; programs made from the symbolic build.
        self.hits = 0
        self.compiles = 0
        self.evictions = 0
        self.instances = 0

    def per_shape_only(self) -> None:
        """Compile every input shape's variant of its own from now on (no symbolic build; one
        already made is dropped with the programs made from it)."""
        with self._compile_lock, self._lock:
            self.compile_symbolic = None
            self.symbolic_status = "turned off (per_shape_only)"
            self._symbolic = None
            self._instances.clear()
            self._calls.clear()

    @property
    def symbolic(self) -> SymbolicBuild | None:
        """The model compiled once for every size in a range (:mod:`ember.model.symbolic`), or None."""
        return self._symbolic

    @property
    def max_variants(self) -> int:
        """How many variants are kept at most (least recently used ones are dropped)."""
        return self._max_variants

    @max_variants.setter
    def max_variants(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ArgumentError(f"max_variants must be a positive integer, got {n!r}")
        self._max_variants = n
        if hasattr(self, "_variants"):
            with self._lock:
                self._evict()

    @property
    def variants(self) -> list[dict[str, tuple[int, ...]]]:
        """The input shapes of the variants kept, least recently used first."""
        with self._lock:
            keys = list(self._variants)
        return [self._named(k) for k in keys]

    def _named(self, key: ShapeKey) -> dict[str, tuple[int, ...]]:
        return {s.name: shp for s, shp in zip(self.declared, key)}

    def variant_for(self, given: Mapping[str, Any]) -> Model:
        """The variant for the shapes of ``given`` (name -> value, every input present):
        kept, or checked and compiled now (an :class:`ArgumentError` when the shapes break
        the model's declared dimensions)."""
        key = tuple(shape_of(given[s.name]) for s in self.declared)
        with self._lock:
            model = self._instances.get(key)
            if model is not None:
                self._instances.move_to_end(key)
                self.hits += 1
                calls = self._calls[key] = self._calls.get(key, 0) + 1
                if calls != self.promote_after:
                    return model
            else:
                model = self._variants.get(key)
            if model is not None and key not in self._instances:
                self._variants.move_to_end(key)
                self.hits += 1
                return model
        if model is not None:  # a size called promote_after times: its kernels compiled for it
            return self._promote(key, model)
        with self._compile_lock:
            with self._lock:
                model = self._variants.get(key) or self._instances.get(key)
            if model is None:
                shapes = self._named(key)
                sizes = check_shapes(self.declared, shapes)
                check_dtypes(self.declared, given)
                model = self._from_symbolic(key, sizes)
            if model is None:
                if self.compile_shapes is None:
                    raise EmberError(
                        f"this model was loaded with compiled variants for {self.variants} only and cannot compile "
                        f"one for {shapes} (it was saved without its ONNX source); compile the ONNX model again")
                _log.info("compiling a variant for input shapes %s", shapes)
                try:
                    model = self.compile_shapes(shapes)
                except (GraphError, OpError, FrontendError) as exc:
                    if isinstance(exc, (ModelFormatError, UnsupportedOpError)):
                        raise
                    # shape inference or an operator refused these sizes (e.g. a Reshape they do not divide)
                    raise ArgumentError(f"the model does not accept the input shapes {shapes}: {exc}") from exc
                except EmberError as exc:
                    add_note = getattr(exc, "add_note", None)  # Python >= 3.11
                    if add_note is not None:
                        add_note(f"(while compiling the model for the input shapes {shapes})")
                    raise
                self.add(shapes, model)
        return model

    def _from_symbolic(self, key: ShapeKey, sizes: Mapping[str, int]) -> Model | None:
        """The program for these sizes made from the symbolic build (compiled at the first call),
        kept; None when there is no build or the sizes lie outside its range. Holds the compile lock."""
        if self.symbolic_status == "not tried" and self.compile_symbolic is not None:
            try:
                self._symbolic = self.compile_symbolic()
            except NotSymbolic as exc:
                self.symbolic_status = str(exc)
                _log.info("the model is compiled per input shape, not once for every size: %s", exc)
            except EmberError as exc:  # a stage failed on the symbolic program: per shape, as before
                self.symbolic_status = f"the symbolic build failed ({type(exc).__name__}: {exc})"
                _log.warning("ember: the model is compiled per input shape: %s", self.symbolic_status)
            else:
                self.symbolic_status = "built"
                b = self._symbolic
                _log.info("the model runs every size (%s) with symbolic kernels (probed in %.2f s)",
                          ", ".join(f"{n} in [{lo}, {hi}]" for n, lo, hi in zip(b.symbols, b.lo, b.hi)), b.seconds)
        b = self._symbolic
        if b is None:
            return None
        vals = tuple(int(sizes[n]) for n in b.symbols)
        if not b.accepts(vals):
            return None
        before = b.compiles
        model = Model(b.program(vals))  # compiles the kernels of the sizes' bucket on its first use
        with self._lock:
            self.compiles += b.compiles - before
            self._instances[key] = model
            self._calls[key] = 1
            self.instances += 1
            while len(self._instances) > self.max_instances:
                old, _ = self._instances.popitem(last=False)
                self._calls.pop(old, None)
        return model

    def _promote(self, key: ShapeKey, model: Model) -> Model:
        """The program of a size called ``promote_after`` times, with the kernels its bucket runs
        with schedules made for unknown sizes compiled for it (the same model when none does)."""
        b = self._symbolic
        if b is None:
            return model
        with self._compile_lock:
            sizes = check_shapes(self.declared, self._named(key))
            vals = tuple(int(sizes[n]) for n in b.symbols)
            if not b.promotable(vals):
                return model
            before = b.compiles
            try:
                better = Model(b.program(vals, exact=True))
            except EmberError as exc:  # keep the program it has
                _log.warning("ember: compiling the kernels of %s for their sizes failed: %s", self._named(key), exc)
                return model
            with self._lock:
                self.compiles += b.compiles - before
                self._instances[key] = better
            _log.info("compiled the kernels of input shapes %s for their sizes (called %d times)", self._named(key),
                      self.promote_after)
        return better

    def add(self, shapes: Mapping[str, tuple[int, ...]], model: Model) -> None:
        """Keep ``model`` as the variant for ``shapes`` (checked against the declared dims),
        dropping the least recently used variant when ``max_variants`` are kept already."""
        key = tuple(tuple(int(d) for d in shapes[s.name]) for s in self.declared)
        check_shapes(self.declared, self._named(key))
        self._share_constants(model)
        with self._lock:
            self._variants[key] = model
            self._variants.move_to_end(key)
            self.compiles += 1
            self._evict()

    def _share_constants(self, model: Model) -> None:
        """Replace each constant of ``model`` that equals one a kept variant holds (same name,
        shape, dtype and values) by that variant's array: a network's weights do not depend on
        the batch size, so they are kept once in host memory."""
        if not model.is_static:
            return
        consts = model.program.consts
        for name, arr in consts.items():
            key = (name, tuple(arr.shape), arr.dtype.str)
            kept = self._shared.get(key)
            if kept is None:
                self._shared[key] = arr
            elif kept is not arr and np.array_equal(kept, arr):
                consts[name] = kept

    def _evict(self) -> None:
        while len(self._variants) > self._max_variants:
            old, _ = self._variants.popitem(last=False)
            self.evictions += 1
            msg = (f"ember: the model keeps at most {self._max_variants} shape variants (max_variants); dropped the "
                   f"least recently used one, for input shapes {self._named(old)} (calling with them compiles "
                   "again, from the compile cache)")
            _log.debug(msg)
            warnings.warn(msg, EvictionWarning, stacklevel=4)

    def kept(self) -> list[tuple[dict[str, tuple[int, ...]], Model]]:
        """The variants kept (input shapes, model), least recently used first."""
        with self._lock:
            items = list(self._variants.items())
        return [(self._named(k), m) for k, m in items]

    def program_for(self, given: dict[str, Any]) -> tuple[Program, dict[str, Any], Any]:
        """The :class:`~ember.model.model.Specializer` protocol: the variant's program."""
        return resolve(self.variant_for(given), given)
