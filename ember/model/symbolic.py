"""One compile for every size of a model's symbolic input dimensions (kernels with symbolic extents).

A model whose inputs declare dimensions by name (``seq``, ``batch``) is compiled by default once
per input shape (:mod:`ember.model.dynamic`). This module compiles it **once** instead, with every
size that depends on those dimensions kept symbolic (``te.var`` extents in the kernels) and the
buffers sized at call time, when the graph allows it. ember's operators build their kernels
for constant shapes, so the symbolic program is found by *probing*: the graph is imported,
optimised, fused and turned into tensor-expression programs at a few sizes of the symbols
(the probes), and the probes are compared node by node:

- the graphs must be the same (nodes, attributes, fusion groups, constants);
- every integer that differs between the probes (a dimension, a loop extent, a stride, an index
  offset) must be ``a * s1 * s2 ... + b`` of the symbols it depends on, with integer ``a`` and
  ``b`` (checked at every probe: two probes of the base size vary each symbol, the others confirm);
  any other difference (a floating-point constant such as a mean's ``1/seq``, a different
  operator or schedule choice, a size that is not linear) refuses the symbolic build, with the
  reason.

The merged programs (each integer replaced by its expression of the symbols) are scheduled by
the target's strategy and lowered once; :meth:`SymbolicBuild.program` then makes a
:class:`~ember.model.program.Program` for concrete sizes in microseconds: shapes evaluated,
memory plan computed, the one compiled module shared, each kernel called with the sizes.

The sizes a build is valid for are checked too: the probes confirm the linear fit only at the
sizes they were taken at, and an operator that clamps (a ``Slice`` ``[:512]`` of a position
table, a ``Conv`` without padding) behaves linearly only above or below some size. A ladder
of small probes (1, 2, 4, ... 32) and large ones (4096, 1024, 256) finds the smallest and the
largest sizes at which the graph still has the probes' form; sizes outside that range are
compiled per shape as before (:attr:`SymbolicBuild.lo` / :attr:`SymbolicBuild.hi`). That check
assumes a clamp has one threshold (monotone ``min``/``max``), which is what ONNX's shape rules give.

Targets: the CPU (``llvm``) only so far. The compile step (ONNX import at given sizes) is handed
in by the caller, so this module imports no frontend.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import te
from ..arith import simplify
from ..errors import EmberError
from ..graph.alter_layout import AlterLayout
from ..graph.ir import Graph, TensorInfo
from ..graph.passes import Fuse, Group, build_node, default_graph_pipeline
from ..ir import expr as E
from ..ir.visitor import substitute
from ..ops.util import reset_names, uname
from ..strategy.base import Strategy, size_hints, strategy_for
from ..target import Target
from ..te.rewrite import LoadMutator as Mutator
from ..te.rewrite import post_order
from ..te.tensor import ComputeOp, IterVar, PlaceholderOp, Range, Tensor
from .group_lowering import _fold_constant_stages, _group_is_view, _node_info, _workspaces, share_identical_kernels
from .memory_plan import plan_memory
from .program import Program

#: Imports the model with the symbolic dimensions set: symbol name -> size, -> the graph.
GraphAt = Callable[[dict[str, int]], Graph]

#: Probe sets, tried in order: the base sizes of the symbols (distinct primes, so no probe size
#: equals another or a fixed dimension by accident) and the size each symbol is varied to (one
#: probe per symbol). The second set serves models whose sizes are capped below the first (a
#: position table of 64 rows sliced to the sequence length).
_PROBE_SETS = (((61, 67, 71, 73, 79, 83, 89, 97), (101, 103, 107, 109, 113, 127, 131, 137)),
               ((11, 13, 17, 19, 23, 29, 31, 37), (41, 43, 47, 53, 59, 61, 67, 71)))
#: Probes for the range of valid sizes: the smallest that passes gives ``lo``, the largest ``hi``.
_LADDER_DOWN = (1, 2, 4, 8, 16, 32)
_LADDER_UP = (4096, 2048, 1024, 512, 256, 128, 64)

_log = logging.getLogger("ember.dynamic")


class NotSymbolic(EmberError):
    """The model cannot be compiled with symbolic extents (the message says why); it is
    compiled per input shape instead. ``smaller``: smaller probe sizes may succeed (the model
    refused the probe sizes themselves, or their range)."""

    def __init__(self, message: str, smaller: bool = False):
        super().__init__(message)
        self.smaller = smaller


@dataclass(frozen=True)
class Affine:
    """``a * (product of the named symbols) + b``: a size as a function of the symbols."""

    a: int
    syms: tuple[int, ...]  # symbol indices
    b: int

    def __call__(self, sizes: Sequence[int]) -> int:
        m = self.a
        for i in self.syms:
            m *= sizes[i]
        return m + self.b


@dataclass(frozen=True)
class SizedConst:
    """A constant whose shape follows the sizes (folded from the input shapes at compile time):
    ``"broadcast"`` — ``value`` (size 1 along the dimensions that follow the sizes) repeated, a
    default token-type embedding of every position; ``"prefix"`` — the leading part of ``value``
    along each dimension, the rows of a position table up to the sequence length."""

    kind: str
    value: np.ndarray
    dims: tuple[Affine, ...]
    #: ``"index"``: element ``idx`` is ``coef[0] + sum(coef[1 + d] * idx[d])`` (flat indices of a
    #: gather over the symbolic dimensions: BERT's attention mask, ``b * seq + s``).
    coef: tuple[Affine, ...] = ()

    def fits(self, sizes: Sequence[int]) -> bool:
        """True when the constant exists at ``sizes`` (a prefix no longer than ``value``)."""
        return self.kind != "prefix" or all(f(sizes) <= n for f, n in zip(self.dims, self.value.shape))

    def at(self, sizes: Sequence[int]) -> np.ndarray:
        """The constant's value at ``sizes`` (C-contiguous; :meth:`fits` must hold)."""
        shape = tuple(f(sizes) for f in self.dims)
        if self.kind == "broadcast":
            return np.ascontiguousarray(np.broadcast_to(self.value, shape))
        if self.kind == "index":
            out = np.full(shape, self.coef[0](sizes), self.value.dtype)
            for d, c in enumerate(self.coef[1:]):
                out += (np.arange(shape[d], dtype=self.value.dtype) * c(sizes)).reshape(
                    [-1 if k == d else 1 for k in range(len(shape))])
            return out
        return np.ascontiguousarray(self.value[tuple(slice(0, n) for n in shape)])


def _index_form(w: np.ndarray) -> list[int] | None:
    """``[c0, c1, ...]`` when integer array ``w`` is ``c0 + sum(c[1 + d] * idx[d])``, else None."""
    if w.dtype.kind not in "iu" or w.size == 0:
        return None
    c = [int(w.flat[0])]
    for d in range(w.ndim):
        step = [0] * w.ndim
        step[d] = 1 if w.shape[d] > 1 else 0
        c.append(int(w[tuple(step)]) - c[0] if w.shape[d] > 1 else 0)
    grid = np.full(w.shape, c[0], np.int64)
    for d in range(w.ndim):
        grid += (np.arange(w.shape[d], dtype=np.int64) * c[1 + d]).reshape([-1 if k == d else 1 for k in range(w.ndim)])
    return c if np.array_equal(grid, w) else None


def _sized_const(ws: Sequence[np.ndarray], fitter: _Fitter) -> SizedConst | None:
    """The :class:`SizedConst` taking the values ``ws`` at the probes, or None."""
    w0 = ws[0]
    if any(w.ndim != w0.ndim or w.dtype != w0.dtype for w in ws):
        return None
    dims = [fitter.fit([int(w.shape[d]) for w in ws]) for d in range(w0.ndim)]
    if any(f is None for f in dims):
        return None
    moving = tuple(d for d, f in enumerate(dims) if f is not None and f.a != 0)
    nan = w0.dtype.kind == "f"
    reduced = [w[tuple(slice(0, 1) if d in moving else slice(None) for d in range(w.ndim))] for w in ws]
    if all(np.array_equal(r, reduced[0], equal_nan=nan)
           and np.array_equal(np.broadcast_to(r, w.shape), w, equal_nan=nan) for r, w in zip(reduced, ws)):
        return SizedConst("broadcast", np.ascontiguousarray(reduced[0]), tuple(dims))  # type: ignore[arg-type]
    forms = [_index_form(w) for w in ws]
    if all(f is not None for f in forms):
        # a dimension of size 1 hides its coefficient: fit on the base probes, check the others
        first = _Fitter(fitter.probes[:1 + fitter.nsym], fitter.nsym)
        coef = []
        for j in range(w0.ndim + 1):
            c = first.fit([f[j] for f in forms[:1 + fitter.nsym]])  # type: ignore[index]
            if c is None or any(f[j] != c(p) for f, p, w in zip(forms, fitter.probes, ws)  # type: ignore[index]
                                if j == 0 or w.shape[j - 1] > 1):
                break
            coef.append(c)
        else:
            return SizedConst("index", np.empty(0, w0.dtype), tuple(dims), tuple(coef))  # type: ignore[arg-type]
    big = max(ws, key=lambda w: w.size)
    for w in ws:
        if any(a > b for a, b in zip(w.shape, big.shape)):
            return None
        if not np.array_equal(big[tuple(slice(0, n) for n in w.shape)], w, equal_nan=nan):
            return None
    return SizedConst("prefix", big, tuple(dims))  # type: ignore[arg-type]


@dataclass
class _Kernel:
    """The tensor program of one kernel group at one probe."""

    fname: str
    args: list[str]  # graph names of ins, outs, workspaces, in call order
    ins: list[Tensor]
    outs: list[Tensor]  # outputs then workspaces


@dataclass
class _Probe:
    sizes: tuple[int, ...]
    graph: Graph  # with the workspaces and folded constants of the kernels
    steps: list[dict[str, Any]]
    kernels: list[_Kernel]
    values: dict[str, TensorInfo]  # the optimised graph's values and constants, before kernels
    consts: dict[str, np.ndarray]


def bucket_of(n: int, lo: int, hi: int) -> int:
    """The size bucket of ``n`` (in ``[lo, hi]``): the smallest power of 4 at least ``n``,
    capped by ``hi``; the kernels of a bucket choose their tiles for that size."""
    b = 1
    while b < n:
        b *= 4
    return max(lo, min(b, hi))


class SymbolicBuild:
    """A model compiled for every size of its symbols in ``[lo, hi]`` (see the module docstring):
    ``symbols`` (names, in order), the plan's steps, the shapes of every value as :class:`Affine`
    sizes, the constants, and the merged kernel programs. The kernels are scheduled and compiled
    per *size bucket* (:func:`bucket_of` of each symbol: 1, 4, 16, 64, 256, 1024, 4096) on the
    bucket's first use, each bucket's strategy choosing tiles for its size; at most
    ``max_buckets`` compiled buckets are kept (least recently used dropped, logged)."""

    def __init__(self, symbols: list[str], steps: list[dict[str, Any]],
                 shapes: dict[str, tuple[tuple[Affine, ...], str]], graph: Graph, target: str,
                 lo: tuple[int, ...], hi: tuple[int, ...], seconds: float, sized: dict[str, SizedConst],
                 compile_bucket: Callable[[tuple[int, ...]], tuple[Any, list[dict[str, Any]], set[str], set[str]]],
                 compile_exact: Callable[[set[str], tuple[int, ...]], Any], max_buckets: int = 8,
                 max_exact: int = 16):
        self.symbols = symbols
        self.steps = steps
        self.shapes = shapes
        self.inputs = list(graph.inputs)
        self.outputs = list(graph.outputs)
        self.consts = graph.consts
        self.target = target
        #: The smallest and largest size of each symbol this build runs (others are compiled per shape).
        self.lo = lo
        self.hi = hi
        #: Seconds the probing took (each bucket's compile: :attr:`bucket_seconds`).
        self.seconds = seconds
        #: Constants that follow the sizes (made for each program).
        self.sized = dict(sized)
        self.max_buckets = max_buckets
        #: Buckets compiled (kept or dropped) and the seconds each took, in order.
        self.bucket_seconds: list[tuple[tuple[int, ...], float]] = []
        self._compile_bucket = compile_bucket
        self._compile_exact = compile_exact
        self._buckets: OrderedDict[tuple[int, ...], tuple[Any, list[dict[str, Any]], set[str], set[str]]] = \
            OrderedDict()
        #: Kernels compiled for one size (their schedule needs constant extents): at most
        #: ``max_exact`` sizes kept; how many were compiled.
        self.max_exact = max_exact
        self.exact_compiles = 0
        self._exact: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    @property
    def buckets(self) -> list[tuple[int, ...]]:
        """The size buckets compiled and kept, least recently used first."""
        return list(self._buckets)

    @property
    def compiles(self) -> int:
        """How many buckets (and sizes of kernels compiled per size) were compiled."""
        return len(self.bucket_seconds) + self.exact_compiles

    def accepts(self, sizes: Sequence[int]) -> bool:
        """True when every symbol's size lies in its range ``[lo, hi]`` (and the tables the
        constants that follow the sizes are cut from are long enough)."""
        return all(lo <= s <= hi for lo, s, hi in zip(self.lo, sizes, self.hi)) and \
            all(c.fits(sizes) for c in self.sized.values())

    def _module(self, sizes: Sequence[int]) -> tuple[Any, list[dict[str, Any]], set[str], set[str]]:
        key = tuple(bucket_of(n, lo, hi) for n, lo, hi in zip(sizes, self.lo, self.hi))
        entry = self._buckets.get(key)
        if entry is not None:
            self._buckets.move_to_end(key)
            return entry
        t0 = time.perf_counter()
        entry = self._buckets[key] = self._compile_bucket(key)
        self.bucket_seconds.append((key, time.perf_counter() - t0))
        _log.info("compiled the kernels of the size bucket %s in %.2f s (%d scheduled as for unknown sizes, %d "
                  "compiled per size)", dict(zip(self.symbols, key)), self.bucket_seconds[-1][1], len(entry[2]),
                  len(entry[3]))
        while len(self._buckets) > self.max_buckets:
            old, _ = self._buckets.popitem(last=False)
            _log.info("dropped the kernels of the least recently used size bucket %s", dict(zip(self.symbols, old)))
        return entry

    def _exact_module(self, names: set[str], sizes: tuple[int, ...]) -> Any:
        key = (*sizes, *sorted(names))
        module = self._exact.get(key)
        if module is None:
            module = self._exact[key] = self._compile_exact(names, sizes)
            self.exact_compiles += 1
            while len(self._exact) > self.max_exact:
                self._exact.popitem(last=False)
        else:
            self._exact.move_to_end(key)
        return module

    def promotable(self, sizes: Sequence[int]) -> bool:
        """True when some kernel of these sizes' bucket runs a schedule made for unknown sizes,
        which :meth:`program` with ``exact`` replaces by one compiled for these sizes."""
        return bool(self._module(sizes)[2])

    def program(self, sizes: Sequence[int], exact: bool = False) -> Program:
        """The program for concrete symbol sizes (in :attr:`symbols` order, :meth:`accepts`
        them): every shape evaluated, the memory plan made for them, the kernels of their size
        bucket (compiled now on the bucket's first use) shared. With ``exact``, the kernels the
        bucket schedules as for unknown sizes are compiled for these sizes (a size called often)."""
        module, steps, slow, exact_only = self._module(sizes)
        exact = exact_only | slow if exact else exact_only
        if exact:
            module = _Modules(module, self._exact_module(exact, tuple(int(n) for n in sizes)), exact)
        values = {n: TensorInfo(tuple(f(sizes) for f in dims), dt) for n, (dims, dt) in self.shapes.items()}
        g = Graph(self.inputs, self.outputs, [], values, self.consts, "symbolic")
        assign, storages = plan_memory(g, steps)
        read = {a for st in steps for a in (st["args"] if st["kind"] == "kernel" else [st["src"]])}
        read |= set(self.outputs)
        plan = {
            "inputs": [{"name": i, "shape": list(values[i].shape), "dtype": values[i].dtype} for i in self.inputs],
            "outputs": [{"name": o, "shape": list(values[o].shape), "dtype": values[o].dtype} for o in self.outputs],
            "values": {k: {"shape": list(v.shape), "dtype": v.dtype} for k, v in values.items()},
            "steps": steps,
            "assign": assign,
            "storages": storages,
            "target": self.target,
            "symbolic_sizes": dict(zip(self.symbols, (int(s) for s in sizes))),
        }
        consts = {k: (self.sized[k].at(sizes) if k in self.sized else v) for k, v in self.consts.items() if k in read}
        prog = Program(plan, module, consts)
        names = [name_of(s) for s in self.symbols]
        for name, fn in prog.functions.items():
            prog.functions[name] = _Sized(fn, [int(sizes[names.index(s["name"])]) for s in fn.sig["scalars"]])
        return prog


class _Sized:
    """A kernel with symbolic extents called with fixed sizes: the executor's ``_invoke(ptrs, [])``
    passes the sizes of the program it belongs to."""

    __slots__ = ("fn", "sizes", "name", "sig")

    def __init__(self, fn: Any, sizes: list[int]):
        self.fn = fn
        self.sizes = sizes
        self.name = fn.name
        self.sig = fn.sig

    def _invoke(self, ptrs: list[int], scalars: Sequence[Any]) -> int:
        return int(self.fn._invoke(ptrs, self.sizes))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fn, name)


# -- probing -------------------------------------------------------------------------------------
def _probe(graph_at: GraphAt, symbols: list[str], sizes: tuple[int, ...], strategy: Strategy) -> _Probe:
    """The graph at ``sizes``, optimised and laid out for ``strategy`` (no kernels yet)."""
    g = default_graph_pipeline(None, strategy.target)(graph_at(dict(zip(symbols, sizes))))
    policy = strategy.layout_policy()
    if policy is not None:
        g = default_graph_pipeline(None, strategy.target)(AlterLayout(policy)(g))
    return _Probe(sizes, g, [], [], dict(g.values), dict(g.consts))


def _add_kernels(probe: _Probe, strategy: Strategy, fuse: bool) -> None:
    """Fuse the probe's graph and build the tensor program of each kernel (what
    :func:`ember.model.group_lowering.lower_groups` builds before it schedules)."""
    g = probe.graph
    packed: dict[tuple[Any, ...], list[str]] = {}
    for k, gr in enumerate(Fuse(enabled=fuse, target=strategy.target)(g).groups):
        if _group_is_view(gr, g):
            probe.steps.append({"kind": "view", "src": gr.nodes[0].inputs[0], "dst": gr.outputs[0], **_node_info(gr)})
            continue
        kern = _kernel(g, gr, k, strategy, packed)
        probe.kernels.append(kern)
        probe.steps.append({"kind": "kernel", "func": kern.fname, "args": kern.args,
                            "nout": len(kern.outs), **_node_info(gr), "cost": None})


def _kernel(g: Graph, gr: Group, k: int, strategy: Strategy, packed: dict[tuple[Any, ...], list[str]]) -> _Kernel:
    """The tensor program of group ``gr`` (as lower_groups builds it, up to the schedule)."""
    reset_names()
    tensors: dict[str, Tensor] = {}
    params = []
    for i in gr.inputs:
        info = g.values[i]
        t = te.placeholder(info.shape, info.dtype, name=uname("p"))
        tensors[i] = t
        params.append(t)
    for node in gr.nodes:
        for o, t in zip(node.outputs, build_node(node, tensors, g.consts, strategy=strategy)):
            if o:
                tensors[o] = t
    seen: set[int] = set()
    fixed = []
    for o in (tensors[o] for o in gr.outputs):
        if id(o.op) in seen or o in params:
            o = te.compute(o.shape, lambda *i, o=o: o[i], name=uname("copy"))
        (o,) = strategy.lift_outputs([o])
        seen.add(id(o.op))
        fixed.append(o)
    fname = f"k{k}_{''.join(c if c.isalnum() else '_' for c in gr.name)}"
    consts = {id(t.op): name for name, t in zip(gr.inputs, params) if name in g.consts}
    fixed, folded = _fold_constant_stages(fixed, consts, g, fname, packed)
    params = params + [t for _, t in folded]
    names = list(gr.inputs) + [n for n, _ in folded]
    fixed = strategy.lift(fixed)
    work = _workspaces(fixed, strategy)
    work_names = [f"{fname}__ws{j}" for j in range(len(work))]
    for wn, wt in zip(work_names, work):
        g.values[wn] = TensorInfo(tuple(int(E.const_int_value(s) or 0) for s in wt.shape), str(wt.dtype))
    used = {id(op) for op in post_order([t.op for t in fixed + work])}
    ins = [(n, t) for n, t in zip(names, params) if id(t.op) in used]
    return _Kernel(fname, [n for n, _ in ins] + list(gr.outputs) + work_names, [t for _, t in ins], fixed + work)


# -- fitting sizes -------------------------------------------------------------------------------
class _Fitter:
    """Fits integers seen at every probe to :class:`Affine` sizes of the symbols (the first
    ``1 + len(symbols)`` probes are the base and one variation per symbol)."""

    def __init__(self, probes: Sequence[tuple[int, ...]], nsym: int):
        self.probes = probes
        self.nsym = nsym

    def fit(self, vals: Sequence[int]) -> Affine | None:
        """The size taking ``vals`` at the probes, or None when there is none."""
        v0 = vals[0]
        dep = tuple(i for i in range(self.nsym) if vals[1 + i] != v0)
        if not dep:
            return Affine(0, (), v0) if all(v == v0 for v in vals) else None
        m = [int(np.prod([p[i] for i in dep], dtype=np.int64)) for p in self.probes]
        j = 1 + dep[0]
        num, den = vals[0] - vals[j], m[0] - m[j]
        if den == 0 or num % den:
            return None
        a = num // den
        f = Affine(a, dep, v0 - a * m[0])
        return f if all(f(p) == v for p, v in zip(self.probes, vals)) else None


class _Merger:
    """Merges the tensor programs of every probe into one with symbolic sizes."""

    def __init__(self, fitter: _Fitter, syms: list[E.Var]):
        self.fitter = fitter
        self.syms = syms
        self.vars: list[dict[int, E.Var]] = [{} for _ in fitter.probes]  # probe var id -> merged var
        self.tensors: dict[tuple[int, int], Tensor] = {}  # base (op id, index) -> merged tensor
        self.ops: list[dict[int, int]] = [{} for _ in fitter.probes]  # probe op id -> base op id
        self.extents: dict[E.Var, E.PrimExpr] = {}  # loop variable -> its extent (from 0)

    def size(self, vals: Sequence[int], dt: Any, what: str) -> E.PrimExpr:
        f = self.fitter.fit(vals)
        if f is None:
            raise NotSymbolic(f"{what} takes the values {list(vals)} at the probe sizes "
                              f"{[list(p) for p in self.fitter.probes]}: not a linear function of the sizes")
        if f.a == 0:
            return E.const(f.b, dt)
        x: E.PrimExpr = self.syms[f.syms[0]]
        for i in f.syms[1:]:
            x = x * self.syms[i]
        if x.dtype != dt:
            x = E.Cast(dt, x)
        if f.a != 1:
            x = x * E.const(f.a, dt)
        return x + E.const(f.b, dt) if f.b else x

    def tensor_list(self, per_probe: Sequence[Sequence[Tensor]], what: str) -> list[Tensor]:
        """Merge each probe's tensors (same positions) and every operation they depend on."""
        orders = [post_order([t.op for t in ts]) for ts in per_probe]
        if len({len(o) for o in orders}) != 1:
            raise NotSymbolic(f"{what}: the kernel has a different number of stages at different sizes")
        for ops in zip(*orders):
            self.op(ops, what)
        out = []
        for ts in zip(*per_probe):
            out.append(self.tensors[(id(ts[0].op), ts[0].value_index)])
        return out

    def op(self, ops: Sequence[Any], what: str) -> None:
        base = ops[0]
        if any(type(o) is not type(base) or o.name != base.name for o in ops):
            raise NotSymbolic(f"{what}: stage {base.name} differs between sizes")
        for k, o in enumerate(ops):
            self.ops[k][id(o)] = id(base)
        if isinstance(base, PlaceholderOp):
            shape = self.shape([o.shape for o in ops], f"{what}: input {base.name}")
            t = te.placeholder(shape, str(base.dtype), name=base.name)
            self.tensors[(id(base), 0)] = t
            return
        if not isinstance(base, ComputeOp):
            raise NotSymbolic(f"{what}: stage {base.name} is a {type(base).__name__}")
        if any(o.tag != base.tag or repr(o.attrs) != repr(base.attrs) or len(o.axis) != len(base.axis)
               or len(o.body) != len(base.body) for o in ops):
            raise NotSymbolic(f"{what}: stage {base.name} ({base.tag or 'compute'}) differs between sizes "
                              "(attributes or axes)")
        axis = tuple(self.itervar([o.axis[d] for o in ops], f"{what}: {base.name} axis {d}")
                     for d in range(len(base.axis)))
        body = tuple(self.expr([o.body[j] for o in ops], f"{what}: {base.name}") for j in range(len(base.body)))
        ranges: dict[E.Var, tuple[int | None, int | None]] = {v: (1, None) for v in self.syms}
        for iv in axis:
            n = E.const_int_value(iv.dom.extent) if iv.dom is not None else None
            ranges[iv.var] = (0, None if n is None else n - 1)
        body = tuple(_Tidy(self.extents).visit(simplify(b, ranges)) for b in body)
        new = ComputeOp(base.name, base.tag, axis, body, base.attrs)
        for j in range(new.num_outputs):
            self.tensors[(id(base), j)] = new.output(j)

    def shape(self, shapes: Sequence[Sequence[E.PrimExpr]], what: str) -> tuple[E.PrimExpr, ...]:
        if len({len(s) for s in shapes}) != 1:
            raise NotSymbolic(f"{what}: the rank differs between sizes")
        return tuple(self.expr([s[d] for s in shapes], f"{what} dimension {d}") for d in range(len(shapes[0])))

    def itervar(self, ivs: Sequence[IterVar], what: str) -> IterVar:
        base = ivs[0]
        if any(iv.kind != base.kind or iv.thread_tag != base.thread_tag or iv.dom is None for iv in ivs):
            raise NotSymbolic(f"{what}: the loop differs between sizes")
        lo = self.expr([iv.dom.min for iv in ivs], what)  # type: ignore[union-attr]
        ext = self.expr([iv.dom.extent for iv in ivs], what)  # type: ignore[union-attr]
        v = E.Var(base.var.name, base.var.dtype)
        for k, iv in enumerate(ivs):
            self.vars[k][id(iv.var)] = v
        if isinstance(lo, E.IntImm) and lo.value == 0:
            self.extents[v] = ext
        return IterVar(Range(lo, ext), v, base.kind, base.thread_tag)

    def expr(self, xs: Sequence[Any], what: str) -> Any:  # noqa: C901 - one case per node kind
        base = xs[0]
        if any(type(x) is not type(base) for x in xs):
            raise NotSymbolic(f"{what}: the expressions differ between sizes ({base} / {xs[1]})")
        if isinstance(base, E.IntImm):
            vals = [int(x.value) for x in xs]
            if all(v == vals[0] for v in vals):
                return base
            if base.dtype.is_bool:
                raise NotSymbolic(f"{what}: a condition differs between sizes")
            return self.size(vals, base.dtype, what)
        if isinstance(base, E.FloatImm):
            if any(x.value != base.value and not (np.isnan(x.value) and np.isnan(base.value)) for x in xs):
                raise NotSymbolic(f"{what}: the floating-point constant {base.value} depends on the sizes "
                                  f"({[x.value for x in xs]}; a mean or scale over a symbolic axis)")
            return base
        if isinstance(base, E.Var):
            mapped = [self.vars[k].get(id(x)) for k, x in enumerate(xs)]
            if mapped[0] is None:
                if any(x is not base for x in xs):
                    raise NotSymbolic(f"{what}: the free variable {base.name} differs between sizes")
                return base
            if any(m is not mapped[0] for m in mapped):
                raise NotSymbolic(f"{what}: the loop variables differ between sizes")
            return mapped[0]
        if isinstance(base, E.ProducerLoad):
            key = (self.ops[0].get(id(base.producer.op)), base.producer.value_index)
            for k, x in enumerate(xs):
                if (self.ops[k].get(id(x.producer.op)), x.producer.value_index) != key:
                    raise NotSymbolic(f"{what}: a load reads different stages at different sizes")
            t = self.tensors.get((id(base.producer.op), base.producer.value_index))
            if t is None:
                raise NotSymbolic(f"{what}: a load reads a stage outside the kernel")
            idx = tuple(self.expr([x.indices[d] for x in xs], what) for d in range(len(base.indices)))
            return E.ProducerLoad(t, idx, base.dtype)
        if isinstance(base, E.Reduce):
            if any(str(x.combiner) != str(base.combiner) or len(x.axis) != len(base.axis) for x in xs):
                raise NotSymbolic(f"{what}: the reduction differs between sizes")
            axis = tuple(self.itervar([x.axis[d] for x in xs], f"{what} reduction axis {d}")
                         for d in range(len(base.axis)))
            src = tuple(self.expr([x.source[j] for x in xs], what) for j in range(len(base.source)))
            cond = None if base.condition is None else self.expr([x.condition for x in xs], what)
            return E.Reduce(base.combiner, src, axis, cond, base.value_index, base.dtype)
        if not isinstance(base, E.PrimExpr):
            if any(x != base for x in xs):
                raise NotSymbolic(f"{what}: {type(base).__name__} differs between sizes")
            return base
        fields = {}
        for f in dataclasses.fields(base):
            vals = [getattr(x, f.name) for x in xs]
            v0 = vals[0]
            if isinstance(v0, E.PrimExpr):
                fields[f.name] = self.expr(vals, what)
            elif isinstance(v0, tuple) and any(isinstance(i, E.PrimExpr) for i in v0):
                if len({len(v) for v in vals}) != 1:
                    raise NotSymbolic(f"{what}: {type(base).__name__} differs between sizes")
                fields[f.name] = tuple(self.expr([v[j] for v in vals], what) for j in range(len(v0)))
            else:
                if any(v != v0 for v in vals):
                    raise NotSymbolic(f"{what}: {type(base).__name__}.{f.name} differs between sizes")
                fields[f.name] = v0
        return type(base)(**fields)


def _same(a: Any, b: Any) -> bool:
    """Structural equality of two expressions (variables by identity)."""
    if a is b:
        return True
    if type(a) is not type(b) or isinstance(a, E.Var):
        return False
    if isinstance(a, E.IntImm):
        return a.value == b.value and a.dtype == b.dtype
    if isinstance(a, E.Cast):
        return a.dtype == b.dtype and _same(a.value, b.value)
    if isinstance(a, E.BinaryOp):
        return _same(a.a, b.a) and _same(a.b, b.b)
    return False


class _Tidy(Mutator):
    """Index arithmetic the probes' constants made trivial and symbolic sizes do not: with ``i``
    a loop variable over ``[0, n)``, ``(q * n + i) // n`` is ``q`` and ``(q * n + i) % n`` is
    ``i`` (a reshape's index, split again), and ``i % n`` is ``i`` (a broadcast's index). The
    simplifier decides such forms only for constant ``n``; left as they are, every element pays
    integer divisions and the loops do not vectorise."""

    def __init__(self, extents: dict[E.Var, E.PrimExpr]):
        self.extents = extents

    def _split(self, x: E.PrimExpr, n: E.PrimExpr) -> tuple[E.PrimExpr | None, E.Var | None] | None:
        """``x`` as ``q * n + i`` (q None: 0; i None: 0, or a variable over ``[0, n)``), or None."""
        if isinstance(x, E.Var) and x in self.extents and _same(self.extents[x], n):
            return None, x
        if isinstance(x, E.Mul) and _same(x.b, n):
            return x.a, None
        if isinstance(x, E.Mul) and _same(x.a, n):
            return x.b, None
        if isinstance(x, E.Add):
            left, right = self._split(x.a, n), self._split(x.b, n)
            if left is None or right is None or (left[1] is not None and right[1] is not None):
                return None
            qs = [q for q in (left[0], right[0]) if q is not None]
            q = qs[0] if len(qs) == 1 else (qs[0] + qs[1] if qs else None)
            return q, left[1] if left[1] is not None else right[1]
        return None

    def visit_FloorDiv(self, e: E.FloorDiv) -> E.PrimExpr:
        e = self.generic_mutate(e)
        if isinstance(e, E.FloorDiv) and not isinstance(e.b, E.IntImm):
            parts = self._split(e.a, e.b)
            if parts is not None:
                q = parts[0]
                return q if q is not None and q.dtype == e.dtype else (E.const(0, e.dtype) if q is None else e)
        return e

    def visit_FloorMod(self, e: E.FloorMod) -> E.PrimExpr:
        e = self.generic_mutate(e)
        if isinstance(e, E.FloorMod) and not isinstance(e.b, E.IntImm):
            parts = self._split(e.a, e.b)
            if parts is not None:
                i = parts[1]
                return i if i is not None and i.dtype == e.dtype else (E.const(0, e.dtype) if i is None else e)
        return e


# -- the build -----------------------------------------------------------------------------------
def _same_graphs(probes: Sequence[_Probe], fitter: _Fitter, kernels: bool = True) -> dict[str, SizedConst]:
    """NotSymbolic unless every probe has the base probe's nodes and constants (and, with
    ``kernels``, its fusion groups and the constants its kernels fold). A constant may differ
    between probes when no kernel reads it (a ``Reshape``'s target shape, which the operators
    use while building kernels, whose programs are compared) and each element is a linear size,
    or when it is a :class:`SizedConst` (returned, by name). Attributes are not compared: what
    they change shows in the shapes and the kernels."""
    p0 = probes[0]
    g0 = p0.graph
    read = {a for st in p0.steps if st["kind"] == "kernel" for a in st["args"]}
    for p in probes[1:]:
        g = p.graph
        if [(n.op, n.inputs, n.outputs) for n in g.nodes] != [(n.op, n.inputs, n.outputs) for n in g0.nodes]:
            raise NotSymbolic(f"the optimised graph differs between sizes {list(p0.sizes)} and "
                              f"{list(p.sizes)} (the passes fold or rewrite nodes depending on the size)")
        if kernels and [(s["kind"], s.get("func"), s.get("args"), s.get("src"), s.get("dst")) for s in p.steps] != \
                [(s["kind"], s.get("func"), s.get("args"), s.get("src"), s.get("dst")) for s in p0.steps]:
            raise NotSymbolic("the fusion groups or the kernels' operands differ between sizes")
        c0, c = (g0.consts, g.consts) if kernels else (p0.consts, p.consts)
        if set(c) != set(c0):
            raise NotSymbolic("the constants differ between sizes")
    sized: dict[str, SizedConst] = {}
    for k, v in (g0.consts if kernels else p0.consts).items():
        ws = [(p.graph.consts if kernels else p.consts)[k] for p in probes]
        if all(w.shape == v.shape and w.dtype == v.dtype and np.array_equal(v, w, equal_nan=v.dtype.kind == "f")
               for w in ws):
            continue
        if k not in read and v.dtype.kind in "iu" and all(w.shape == v.shape and w.dtype == v.dtype for w in ws) \
                and v.size <= 64 and all(fitter.fit([int(w.flat[j]) for w in ws]) is not None for j in range(v.size)):
            continue
        sc = _sized_const(ws, fitter)
        if sc is None:
            raise NotSymbolic(f"the constant {k!r} depends on the sizes ({v.dtype}{list(v.shape)}): a value computed "
                              "from the input shapes at compile time that is neither repeated nor a table's first rows")
        sized[k] = sc
    return sized


def _shapes(probes: Sequence[_Probe], fitter: _Fitter, kernels: bool = True
            ) -> dict[str, tuple[tuple[Affine, ...], str]]:
    """Every value's shape as sizes of the symbols (NotSymbolic when one is not linear);
    without ``kernels``, the values of the optimised graph only."""
    out: dict[str, tuple[tuple[Affine, ...], str]] = {}
    tables = [p.graph.values if kernels else p.values for p in probes]
    for name, info in tables[0].items():
        infos = [t.get(name) for t in tables]
        if any(i is None or len(i.shape) != len(info.shape) or i.dtype != info.dtype for i in infos):
            raise NotSymbolic(f"value {name!r} differs in rank or type between sizes")
        dims = []
        for d in range(len(info.shape)):
            vals = [int(i.shape[d]) for i in infos]  # type: ignore[union-attr]
            f = fitter.fit(vals)
            if f is None:
                raise NotSymbolic(f"value {name!r} dimension {d} is {vals} at the probe sizes "
                                  f"{[list(p.sizes) for p in probes]}: not a linear function of the sizes")
            dims.append(f)
        out[name] = (tuple(dims), info.dtype)
    return out


def _check(probes: Sequence[_Probe], nsym: int, kernels: bool = True
           ) -> tuple[_Fitter, dict[str, tuple[tuple[Affine, ...], str]], dict[str, SizedConst]]:
    """The fitter of ``probes``, every value's shape and the constants that follow the sizes,
    once their graphs and shapes agree (NotSymbolic otherwise)."""
    fitter = _Fitter([p.sizes for p in probes], nsym)
    sized = _same_graphs(probes, fitter, kernels)
    return fitter, _shapes(probes, fitter, kernels), sized


def _merge(probes: Sequence[_Probe], fitter: _Fitter, syms: list[E.Var]) -> list[tuple[_Kernel, list[Tensor]]]:
    """Each kernel's merged program: (the base probe's kernel, inputs + outputs + workspaces)."""
    out = []
    for j, kern in enumerate(probes[0].kernels):
        m = _Merger(fitter, syms)
        tensors = m.tensor_list([p.kernels[j].ins + p.kernels[j].outs for p in probes], kern.fname)
        out.append((kern, tensors))
    return out


def build_symbolic(graph_at: GraphAt, symbols: Sequence[str], target: str, fuse: bool = True,
                   tf32: bool = False) -> SymbolicBuild:
    """Compile the model ``graph_at`` imports once for every size of ``symbols`` in a range
    (see the module docstring). Raises :class:`NotSymbolic` (with the reason) when it cannot be.

    The kernels come from the probes at the primes 61.. and 101.. (one base probe, one more per
    symbol varying it). The range of each symbol is found on the ladders (1, 2, 4, ... 32 up,
    4096, 1024, 256 down; the other symbols at their base size): the smallest and the largest
    ladder size at which the optimised graph has the same nodes, attributes and constants and
    every shape the probes' linear form. The strategy may choose other kernels at some of those
    sizes (a matrix product of few rows left unpacked); the symbolic kernels compute the same
    graph there."""
    from ..backends import backend_for, build_functions
    from ..lowering import LoweringMemo

    t0 = time.perf_counter()
    symbols = list(symbols)
    nsym = len(symbols)
    if not symbols:
        raise NotSymbolic("the model has no symbolic dimension")
    if nsym > len(_PROBE_SETS[0][0]):
        raise NotSymbolic(f"more than {len(_PROBE_SETS[0][0])} symbolic dimensions")
    tgt = backend_for(target).resolve(Target(target))
    if tgt.kind not in ("llvm", "cpu"):
        raise NotSymbolic(f"symbolic kernels are built for the CPU target (llvm) only, not {tgt.kind}")
    strategy = strategy_for(tgt, tf32=tf32)
    syms = [te.var(name_of(s)) for s in symbols]
    for k, (all_base, all_vary) in enumerate(_PROBE_SETS):
        base, vary = tuple(all_base[:nsym]), all_vary[:nsym]
        try:
            probes, shapes, sized, merged = _probe_set(graph_at, symbols, base, vary, strategy, fuse, syms)
            lo, hi, ends = _ranges(graph_at, symbols, probes, vary, strategy)
            break
        except NotSymbolic as exc:
            if k == len(_PROBE_SETS) - 1 or not exc.smaller:
                raise
    # a table's first rows: the largest probe in the range holds the most of them
    sized.update(_check([*probes, *ends], nsym, kernels=False)[2])

    def compile_bucket(bucket: tuple[int, ...]) -> tuple[Any, list[dict[str, Any]], set[str], set[str]]:
        """The bucket's symbolic kernels, the steps calling them, the kernels scheduled as for
        unknown sizes because their hinted schedule needs constant extents (compiled per size
        for sizes called often), and those that only lower at constant sizes (per size always)."""
        memo = LoweringMemo()
        hints = dict(zip(syms, bucket))
        funcs, slow, exact = [], set(), set()
        for kern, tensors in merged:
            f, hinted = _schedule(kern, tensors, strategy, hints, memo)
            if f is None:
                exact.add(kern.fname)
                continue
            funcs.append(f)
            if not hinted:
                slow.add(kern.fname)
        funcs, steps = share_identical_kernels(funcs, probes[0].steps)
        return (build_functions(funcs, tgt) if funcs else None), steps, slow, exact

    def compile_exact(names: set[str], sizes: tuple[int, ...]) -> Any:
        """The kernels ``names`` compiled for these sizes (constant extents)."""
        from ..lowering import lower

        memo = LoweringMemo()
        values = dict(zip(syms, sizes))
        funcs = []
        for kern, tensors in merged:
            if kern.fname in names:
                conc = _concrete(tensors, values)
                s = strategy.schedule_group(conc[len(kern.ins):], config=None)
                funcs.append(lower(s, conc, kern.fname, target=strategy.target, memo=memo))
        return build_functions(funcs, tgt)

    return SymbolicBuild(symbols, probes[0].steps, shapes, probes[0].graph, str(tgt), lo, hi,
                         time.perf_counter() - t0, sized, compile_bucket, compile_exact)


def _probe_set(graph_at: GraphAt, symbols: list[str], base: tuple[int, ...], vary: Sequence[int],
               strategy: Strategy, fuse: bool, syms: list[E.Var]) -> tuple[list[_Probe], Any, Any, Any]:
    """The probes at ``base`` and at ``base`` with each symbol varied, the shapes, the constants
    that follow the sizes and the merged kernels (NotSymbolic when they do not agree). The
    graphs are compared first, so a model refused for its graph costs no kernel programs."""
    nsym = len(symbols)
    probes = []
    for i in range(-1, nsym):
        at = tuple(vary[i] if k == i else base[k] for k in range(nsym))
        try:
            probes.append(_probe(graph_at, symbols, at, strategy))
        except EmberError as exc:
            raise NotSymbolic(f"the model does not compile at the probe sizes {dict(zip(symbols, at))}: {exc}",
                              smaller=True) from exc
        if i >= 0:
            _slopes(probes[0], probes[-1], symbols[i], i)
    _check(probes, nsym, kernels=False)
    for p in probes:
        try:
            _add_kernels(p, strategy, fuse)
        except EmberError as exc:
            raise NotSymbolic(f"the kernels do not build at the probe sizes {dict(zip(symbols, p.sizes))}: "
                              f"{exc}") from exc
    fitter, shapes, sized = _check(probes, nsym)
    return probes, shapes, sized, _merge(probes, fitter, syms)


def _slopes(p0: _Probe, p: _Probe, symbol: str, i: int) -> None:
    """An early NotSymbolic: a dimension that changes by a fraction of what ``symbol`` changes by
    between the base probe and its variation ``p`` (a strided convolution's ``ceil(w / 2)``)."""
    step = p.sizes[i] - p0.sizes[i]
    for name, info in p0.values.items():
        other = p.values.get(name)
        if other is None or len(other.shape) != len(info.shape):
            continue
        for d, (a, b) in enumerate(zip(info.shape, other.shape)):
            if (int(b) - int(a)) % step:
                raise NotSymbolic(f"value {name!r} dimension {d} is {a} at {symbol} = {p0.sizes[i]} and {b} at "
                                  f"{symbol} = {p.sizes[i]}: not a linear function of the sizes (a strided window?)")


def _schedule(kern: _Kernel, tensors: list[Tensor], strategy: Strategy, hints: dict[E.Var, int],
              memo: Any) -> tuple[Any, bool]:
    """The lowered kernel with symbolic extents and whether the strategy scheduled it as for
    the hinted sizes; when that schedule needs constant extents (a vectorised axis whose extent
    the bound inference leaves symbolic), as for unknown (small) sizes; (None, False) when that
    does not lower either (the kernel is then compiled per size)."""
    from ..lowering import lower

    outs = tensors[len(kern.ins):]
    try:
        with size_hints(hints):
            s = strategy.schedule_group(outs, config=None)
        return lower(s, tensors, kern.fname, target=strategy.target, memo=memo), True
    except EmberError as exc:
        _log.debug("kernel %s: the hinted schedule needs constant extents: %s", kern.fname, exc)
    try:
        return lower(strategy.schedule_group(outs, config=None), tensors, kern.fname, target=strategy.target,
                     memo=memo), False
    except EmberError as exc:
        _log.debug("kernel %s is compiled per size: %s", kern.fname, exc)
        return None, False


class _Subst(Mutator):
    """A merged kernel body at constant sizes: the sizes substituted, loads reading the rebuilt
    stages, reductions over rebuilt axes."""

    def __init__(self, sub: dict[E.Var, E.PrimExpr], mapping: dict[tuple[int, int], Tensor]):
        self.sub = sub
        self.mapping = mapping

    def visit_Var(self, e: E.Var) -> E.PrimExpr:
        return self.sub.get(e, e)

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        idx = tuple(self.visit(i) for i in e.indices)
        return E.ProducerLoad(self.mapping[(id(e.producer.op), e.producer.value_index)], idx, e.dtype)

    def visit_Reduce(self, e: E.Reduce) -> E.PrimExpr:
        axis = tuple(self.itervar(iv) for iv in e.axis)
        src = tuple(self.visit(x) for x in e.source)
        cond = None if e.condition is None else self.visit(e.condition)
        return E.Reduce(e.combiner, src, axis, cond, e.value_index, e.dtype)

    def itervar(self, iv: IterVar) -> IterVar:
        dom = iv.dom
        if dom is not None:
            dom = Range(simplify(substitute(dom.min, self.sub)), simplify(substitute(dom.extent, self.sub)))
        return IterVar(dom, iv.var, iv.kind, iv.thread_tag)


def _concrete(tensors: Sequence[Tensor], values: dict[E.Var, int]) -> list[Tensor]:
    """The merged program of ``tensors`` with the symbolic sizes set to ``values``."""
    sub: dict[E.Var, E.PrimExpr] = {v: E.const(n, v.dtype) for v, n in values.items()}
    mapping: dict[tuple[int, int], Tensor] = {}
    rw = _Subst(sub, mapping)
    for op in post_order([t.op for t in tensors]):
        if isinstance(op, PlaceholderOp):
            shape = tuple(simplify(substitute(d, sub)) for d in op.shape)
            mapping[(id(op), 0)] = te.placeholder(shape, str(op.dtype), name=op.name)
            continue
        axis = tuple(rw.itervar(iv) for iv in op.axis)
        body = tuple(simplify(rw.visit(b)) for b in op.body)
        new = ComputeOp(op.name, op.tag, axis, body, op.attrs)
        for j in range(new.num_outputs):
            mapping[(id(op), j)] = new.output(j)
    return [mapping[(id(t.op), t.value_index)] for t in tensors]


class _Modules:
    """A bucket's module of symbolic kernels with the module of the kernels compiled for the
    program's sizes (``names``), as one module for a :class:`~ember.model.program.Program`."""

    def __init__(self, main: Any, extra: Any, names: set[str]):
        self.main = main
        self.extra = extra
        self.names = names

    def get_function(self, name: str) -> Any:
        """The function ``name`` of whichever module holds it."""
        return (self.extra if name in self.names else self.main).get_function(name)

    def get_source(self, fmt: str = "ir") -> str:
        """Both modules' sources."""
        return "\n".join(m.get_source(fmt) for m in (self.main, self.extra) if m is not None)


def _ranges(graph_at: GraphAt, symbols: list[str], probes: list[_Probe], vary: Sequence[int], strategy: Strategy
            ) -> tuple[tuple[int, ...], tuple[int, ...], list[_Probe]]:
    """The smallest and largest ladder size of each symbol (the others at their base size) at
    which the optimised graph keeps the probes' form (NotSymbolic when no small size does), and
    the probes at the largest ones."""
    nsym = len(symbols)
    base = probes[0].sizes
    ends: list[_Probe] = []

    def fits(i: int, n: int) -> bool:
        at = tuple(n if k == i else base[k] for k in range(nsym))
        try:
            p = _probe(graph_at, symbols, at, strategy)
            _check([*probes, p], nsym, kernels=False)
        except EmberError:
            return False
        if n > vary[i]:
            ends.append(p)
        return True

    lo, hi = [], []
    for i, name in enumerate(symbols):
        low = next((n for n in _LADDER_DOWN if fits(i, n)), None)
        if low is None:
            raise NotSymbolic(f"the model does not keep its form for {name} at any size up to {_LADDER_DOWN[-1]}",
                              smaller=True)
        lo.append(low)
        hi.append(next((n for n in _LADDER_UP if n > vary[i] and fits(i, n)), vary[i]))
    return tuple(lo), tuple(hi), ends


def name_of(symbol: str) -> str:
    """The kernel parameter name of a symbol (an identifier)."""
    clean = "".join(c if c.isalnum() else "_" for c in symbol)
    return f"sym_{clean}"


def symbols_of(declared: Sequence[Any]) -> list[str]:
    """The symbol names of the declared inputs (TensorSpecs), in order of first appearance."""
    out: list[str] = []
    for spec in declared:
        for d in spec.shape:
            if isinstance(d, str) and d not in out:
                out.append(d)
    return out


def sizes_of(symbols: Sequence[str], sizes: Mapping[str, int]) -> tuple[int, ...]:
    """The sizes of ``symbols`` (in order) from :func:`~ember.model.dynamic.check_shapes`."""
    return tuple(int(sizes[s]) for s in symbols)
