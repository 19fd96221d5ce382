"""FLOPs and bytes moved by one kernel, counted from its lowered loop IR.

:func:`count_cost` walks a :class:`~ember.ir.stmt.PrimFunc` with the trip count of every
statement (the product of its enclosing loops' extents, less the iterations its enclosing
guards exclude) and counts:

**FLOPs** — per lane of each *floating-point* expression node executed:

* ``Add``, ``Sub``, ``Mul``, ``Div``, ``Mod``, ``FloorDiv``, ``FloorMod``, ``Min``, ``Max``: 1;
  so a reduction's multiply-add ``acc = acc + a * b`` counts 2 (the usual ×2 of a GEMM);
* a math call (``exp``, ``sqrt``, ``tanh``, …): 1; ``fma``: 2;
* a tensor-core instruction ``tc.mma:<name>`` (issued once per lane of a warp): ``2·m·n·k``
  divided by the warp size, so a warp's instruction counts ``2·m·n·k``;
* integer arithmetic (index computation), comparisons, selects, casts and loads: 0.

A ``tc.cp_async:N`` (an asynchronous global-to-shared copy) reads ``N`` bytes of its global
source.

**Bytes moved** — for every *global* buffer (a parameter of the function: inputs, outputs,
workspaces; shared and local allocations are not memory traffic), separately for reads and
writes: ``min(buffer size, bytes the executed accesses touch)``. A buffer read many times (a
GEMM operand) counts once; a strided or partial read counts what it touches, at most the
buffer. So the figure is the compulsory (cold-cache) traffic, the denominator of a roofline's
arithmetic intensity; a buffer that is only read in part through a window counts the whole
buffer (an upper bound).

**Guards** (``if`` around a tail of a split that does not divide, GPU bounds checks): the
iterations of the enclosing loops that a guard depends on are enumerated when there are at most
:data:`ENUMERATE_LIMIT` of them, so such counts are exact; beyond that the guard is taken as
always true and the cost is marked ``exact=False`` (an upper bound). Loop extents must be
integers once ``sizes`` (symbolic dimension -> value) are substituted; otherwise
:class:`CostUnknown` is raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir import expr as E
from ..ir import stmt as S
from ..ir.buffer import Buffer
from ..ir.visitor import free_vars

#: The most loop iterations enumerated to count how many a guard lets through.
ENUMERATE_LIMIT = 1 << 22

_FLOAT_OPS = (E.Add, E.Sub, E.Mul, E.Div, E.Mod, E.FloorDiv, E.FloorMod, E.Min, E.Max)
_NOT_MATH = frozenset({"reinterpret", "gpu.barrier", "gpu.shfl_xor", "likely"})


class CostUnknown(ValueError):
    """The cost cannot be counted (a loop extent that is not an integer after substitution)."""


@dataclass(frozen=True)
class Cost:
    """What one call of a kernel computes and moves: ``flops``, ``bytes_read``,
    ``bytes_written``; ``exact`` is False when a guard was too large to enumerate (then the
    figures are upper bounds)."""

    flops: int
    bytes_read: int
    bytes_written: int
    exact: bool = True

    @property
    def bytes(self) -> int:
        """Bytes read plus bytes written."""
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (0 when nothing moves)."""
        return self.flops / self.bytes if self.bytes else 0.0

    def to_json(self) -> dict[str, Any]:
        """The cost as JSON data (what a model's plan stores per kernel step)."""
        return {"flops": self.flops, "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "exact": self.exact}

    @staticmethod
    def from_json(data: Any) -> Cost | None:
        """The cost stored by :meth:`to_json`, or None when ``data`` is missing or malformed
        (a plan from an older ember, or an untrusted file)."""
        if not isinstance(data, dict):
            return None
        vals = [data.get(k) for k in ("flops", "bytes_read", "bytes_written")]
        if not all(type(v) is int and v >= 0 for v in vals):
            return None
        return Cost(vals[0], vals[1], vals[2], bool(data.get("exact", True)))


@dataclass
class _Loop:
    var: E.Var
    lo: int
    extent: int


@dataclass
class _Scope:
    loops: list[_Loop] = field(default_factory=list)
    guards: list[E.PrimExpr] = field(default_factory=list)
    lets: list[tuple[E.Var, E.PrimExpr]] = field(default_factory=list)


def _mma_flops_per_lane(op: str) -> int:
    from ..te.tensor_intrin import INTRINSICS

    intrin = INTRINSICS.get(op.split(":", 1)[1])
    if intrin is None:
        return 0
    return 2 * intrin.m * intrin.n * intrin.k // max(1, intrin.warp)


class _Counter:
    def __init__(self, func: S.PrimFunc, sizes: dict[E.Var, int]):
        self.sizes = dict(sizes)
        self.globals = {p.data: p for p in func.params if isinstance(p, Buffer) and p.scope == "global"}
        self.flops = 0
        self.read: dict[Any, int] = {}
        self.written: dict[Any, int] = {}
        self.exact = True
        self._mult_cache: dict[tuple[int, ...], int] = {}

    # -- trip counts -----------------------------------------------------------------------------
    def _const(self, e: E.PrimExpr, what: str) -> int:
        try:
            v = _evaluate(e, dict(self.sizes))
        except KeyError as exc:
            raise CostUnknown(f"{what} {e} is not an integer once the sizes are known") from exc
        return int(v)

    def multiplier(self, scope: _Scope) -> int:
        key = tuple(id(x) for x in scope.loops) + (-1,) + tuple(id(g) for g in scope.guards)
        hit = self._mult_cache.get(key)
        if hit is None:
            hit = self._count(scope)
            self._mult_cache[key] = hit
        return hit

    def _count(self, scope: _Scope) -> int:
        total = 1
        if not scope.guards:
            for lp in scope.loops:
                total *= lp.extent
            return total
        let_of = dict(scope.lets)
        used: set[E.Var] = set()
        stack = [v for g in scope.guards for v in free_vars(g)]
        while stack:
            v = stack.pop()
            if v in used:
                continue
            used.add(v)
            if v in let_of:
                stack.extend(free_vars(let_of[v]))
        involved = [lp for lp in scope.loops if lp.var in used]
        for lp in scope.loops:
            if lp.var not in used:
                total *= lp.extent
        space = 1
        for lp in involved:
            space *= lp.extent
        if space == 0:
            return 0
        if space > ENUMERATE_LIMIT:
            self.exact = False
            return total * space
        env: dict[E.Var, Any] = dict(self.sizes)
        nd = len(involved)
        for j, lp in enumerate(involved):
            shape = [1] * nd
            shape[j] = lp.extent
            env[lp.var] = (np.arange(lp.extent, dtype=np.int64) + lp.lo).reshape(shape)
        for v, val in scope.lets:
            if v in used:
                try:
                    env[v] = _evaluate(val, env)
                except KeyError:
                    pass  # a let of loaded data: a guard on it cannot be counted
        ok: Any = True
        for g in scope.guards:
            try:
                ok = np.logical_and(ok, _evaluate(g, env))
            except KeyError:
                self.exact = False  # a guard on data: taken as always true
        return total * int(np.broadcast_to(ok, [lp.extent for lp in involved]).sum())

    # -- statements ------------------------------------------------------------------------------
    def stmt(self, s: S.Stmt | None, scope: _Scope) -> None:
        if s is None:
            return
        if isinstance(s, S.SeqStmt):
            for x in s.seq:
                self.stmt(x, scope)
        elif isinstance(s, S.For):
            lo = self._const(s.min, "the start of loop " + s.loop_var.name)
            ext = self._const(s.extent, "the extent of loop " + s.loop_var.name)
            inner = _Scope(scope.loops + [_Loop(s.loop_var, lo, ext)], scope.guards, scope.lets)
            self.stmt(s.body, inner)
        elif isinstance(s, S.IfThenElse):
            self.expr(s.condition, scope)
            self.stmt(s.then_case, _Scope(scope.loops, scope.guards + [s.condition], scope.lets))
            if s.else_case is not None:
                neg = E.Not(s.condition)
                self.stmt(s.else_case, _Scope(scope.loops, scope.guards + [neg], scope.lets))
        elif isinstance(s, S.LetStmt):
            self.expr(s.value, scope)
            self.stmt(s.body, _Scope(scope.loops, scope.guards, scope.lets + [(s.var, s.value)]))
        elif isinstance(s, S.BufferStore):
            self.expr(s.value, scope)
            for i in s.indices:
                self.expr(i, scope)
            if s.buffer.data in self.globals:
                n = self.multiplier(scope) * _lanes(s.value) * _itemsize(s.buffer)
                self.written[s.buffer.data] = self.written.get(s.buffer.data, 0) + n
        elif isinstance(s, S.Evaluate):
            self.expr(s.value, scope)
        elif isinstance(s, (S.Allocate, S.AttrStmt, S.Assert)):
            self.stmt(s.body, scope)
        else:
            raise CostUnknown(f"cannot count {type(s).__name__} (only lowered loop IR is counted)")

    # -- expressions -----------------------------------------------------------------------------
    def expr(self, e: E.PrimExpr, scope: _Scope) -> None:
        flops, loads = _expr_counts(e)
        if not flops and not loads:
            return
        mult = self.multiplier(scope)
        self.flops += flops * mult
        for buf, n in loads:
            if buf.data in self.globals:
                self.read[buf.data] = self.read.get(buf.data, 0) + n * mult

    def result(self) -> Cost:
        def clip(acc: dict[Any, int]) -> int:
            total = 0
            for data, n in acc.items():
                buf = self.globals[data]
                size = _itemsize(buf)
                for d in buf.shape:
                    size *= self._const(d, f"a dimension of buffer {buf.name}:")
                total += min(n, size)
            return total

        return Cost(self.flops, clip(self.read), clip(self.written), self.exact)


def _lanes(e: E.PrimExpr) -> int:
    return max(1, e.dtype.lanes)


def _itemsize(buf: Buffer) -> int:
    return max(1, buf.dtype.bits // 8)


def _expr_counts(e: E.PrimExpr) -> tuple[int, list[tuple[Buffer, int]]]:
    """FLOPs of one evaluation of ``e`` and the (buffer, bytes) of the loads it makes."""
    flops = 0
    loads: list[tuple[Buffer, int]] = []
    stack: list[Any] = [e]
    while stack:
        n = stack.pop()
        if n is None:
            continue
        if isinstance(n, _FLOAT_OPS):
            if n.dtype.is_float:
                flops += n.dtype.lanes
            stack.extend((n.a, n.b))
        elif isinstance(n, E.Call):
            if n.op.startswith("tc.mma:"):
                flops += _mma_flops_per_lane(n.op)
            elif n.op.startswith("tc.cp_async:"):
                # an asynchronous copy of N bytes: its arguments are the first element of the
                # shared destination and of the global source
                nbytes = int(n.op.split(":", 1)[1])
                loads.extend((a.buffer, nbytes) for a in n.args if isinstance(a, E.BufferLoad))
                continue
            elif n.dtype.is_float and n.op not in _NOT_MATH:
                flops += (2 if n.op == "fma" else 1) * n.dtype.lanes
            stack.extend(n.args)
        elif isinstance(n, E.BufferLoad):
            loads.append((n.buffer, n.dtype.lanes * max(1, n.dtype.bits // 8)))
            stack.extend(n.indices)
            stack.append(n.predicate)
        elif isinstance(n, (E.CmpOp, E.And, E.Or)):
            stack.extend((n.a, n.b))
        elif isinstance(n, E.Not):
            stack.append(n.a)
        elif isinstance(n, E.Select):
            stack.extend((n.condition, n.true_value, n.false_value))
        elif isinstance(n, E.Cast):
            stack.append(n.value)
        elif isinstance(n, E.Let):
            stack.extend((n.value, n.body))
        elif isinstance(n, E.Ramp):
            stack.extend((n.base, n.stride))
        elif isinstance(n, E.Broadcast):
            stack.append(n.value)
    return flops, loads


def _evaluate(e: E.PrimExpr, env: dict[E.Var, Any]) -> Any:
    """The integer (or boolean) value of ``e`` with ``env``'s variables (ints or NumPy arrays);
    KeyError for a variable ``env`` lacks or a node that reads data."""
    if isinstance(e, E.IntImm):
        return e.value
    if isinstance(e, E.Var):
        return env[e]
    if isinstance(e, E.Cast):
        return _evaluate(e.value, env)
    if isinstance(e, E.Not):
        return np.logical_not(_evaluate(e.a, env))
    if isinstance(e, E.Select):
        return np.where(_evaluate(e.condition, env), _evaluate(e.true_value, env), _evaluate(e.false_value, env))
    if isinstance(e, E.Let):
        inner = dict(env)
        inner[e.var] = _evaluate(e.value, env)
        return _evaluate(e.body, inner)
    fn = _BINARY.get(type(e))
    if fn is None or (e.dtype.is_float if not isinstance(e, E.CmpOp) else e.a.dtype.is_float):
        raise KeyError(type(e).__name__)
    return fn(_evaluate(e.a, env), _evaluate(e.b, env))  # type: ignore[attr-defined]


def _trunc_div(a: Any, b: Any) -> Any:
    q = np.floor_divide(a, b)
    return np.where((q < 0) & (q * b != a), q + 1, q)


_BINARY: dict[type, Any] = {
    E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.FloorDiv: np.floor_divide, E.FloorMod: np.mod,
    E.Div: _trunc_div, E.Mod: lambda a, b: a - _trunc_div(a, b) * b, E.Min: np.minimum, E.Max: np.maximum,
    E.EQ: np.equal, E.NE: np.not_equal, E.LT: np.less, E.LE: np.less_equal, E.And: np.logical_and,
    E.Or: np.logical_or,
}


def count_cost(func: S.PrimFunc, sizes: dict[E.Var, int] | None = None) -> Cost:
    """FLOPs and bytes moved by one call of ``func`` (lowered loop IR), by the rules of this
    module's docstring; ``sizes`` gives the value of each symbolic size. Raises
    :class:`CostUnknown` when a loop extent is not an integer after substitution."""
    counter = _Counter(func, sizes or {})
    counter.stmt(func.body, _Scope())
    return counter.result()
