"""A NumPy reference evaluator of tensor-expression programs (used for constant folding).

:func:`evaluate` computes the output tensors of a te program from values of the placeholders it
reads, without compiling anything: operations run in topological order, and each
:class:`~ember.te.tensor.ComputeOp` is evaluated *vectorised* — its axes become broadcast index
arrays (``arange`` shaped along one grid dimension each), the body's expression tree is evaluated
node by node over them, and a reduction adds its reduce axes as extra grid dimensions that are
then reduced with the :class:`~ember.te.operation.CommReducer`'s combiner (``np.add.reduce`` and
friends for the built-in sum/prod/max/min; any other reducer, multi-value ones such as ArgMax's
``(index, value)`` included, by combining adjacent pairs in index order until one is left: the
earlier value is always the left operand, so a combiner that is associative — as every reducer
must be, since the kernels' schedules reorder reductions too — gives the sequential result). The
grid is cut into chunks along its outer dimensions so that no chunk has more than
``max_elements`` points; a reduction whose one output point alone is too large is cut along its
reduce axes as well and the partial results combined in order.

Semantics are those of ember's native kernels (:mod:`ember.codegen.llvm`):

* every node computes in its own type: integers wrap (two's complement), ``float32`` stays
  ``float32``, ``float16`` rounds after each operation, ``bfloat16`` is computed in float32 and
  rounded to nearest even after each operation, cast and math call (NaN kept, as the code
  generator does), ``int4``/``uint4``/``int2``/``uint2`` wrap at their width, the 8- and 4-bit
  float formats are bit patterns only ``reinterpret`` touches;
* ``Div`` on integers truncates toward zero and ``Mod`` keeps the dividend's sign (C); ``FloorDiv``
  and ``FloorMod`` round toward minus infinity; float ``Div`` is true division; ``Min``/``Max``
  on floats propagate NaN; ``!=`` on floats is unordered, the other comparisons ordered;
* ``Cast``: float to integer truncates toward zero; int to float rounds to nearest; to ``bool``
  is ``!= 0`` (NaN gives true); integer narrowing wraps, widening sign- or zero-extends;
* ``Select`` (``if_then_else``) evaluates both branches and keeps the chosen one; reads of other
  tensors clip their indices into range, so an out-of-range read under a false condition
  (padding) reads some element and is discarded, while every read where the condition holds
  reads exactly the element the kernel reads;
* math calls (``exp``, ``tanh``, ``erf``, ...) map to NumPy; 16-bit float arguments are computed
  in float32 and rounded back, as the code generator does.

Where the result may differ from the native kernel's:

* **rounding order of float reductions and contractions**: a float sum is reduced by NumPy's
  pairwise summation (the kernel adds sequentially, or in tiles), and LLVM may contract
  ``a * b + c`` into one fused multiply-add; folded float values can therefore differ from the
  kernel's by rounding (a few ulp of the magnitudes summed), never by anything else; integer and
  boolean results, and float results without reductions or contractions, are exact;
* math functions: NumPy's and libm's implementations may differ by an ulp;
* what the kernel leaves undefined: integer division by zero (the kernel may trap; here it gives
  0), float-to-integer conversion of NaN or of values out of the target's range (LLVM poison;
  here NumPy's conversion, on x86 the "integer indefinite" value).

Anything else — a node kind the evaluator does not know (vector ``Ramp``/``Broadcast``, buffer
loads of lowered code, a nested reduction), a math function it does not know, a shape that
depends on a size no input binds — raises :class:`EvaluationError`, naming the node, so that a
caller can fall back to compiling the program.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import EvaluationError
from ..ir import expr as E
from ..ir.dtypes import DataType
from .tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor

#: default bound on the points of one evaluation grid (output points x reduction points of a
#: chunk); each intermediate array of the expression tree has at most this many elements
DEFAULT_MAX_ELEMENTS = 1 << 22

Array = np.ndarray


# -- data types ---------------------------------------------------------------------------------
def compute_dtype(t: DataType) -> np.dtype:
    """The NumPy type values of ember type ``t`` are held in while evaluating: bfloat16 as float32
    (holding bfloat16 values), sub-byte integers as int8/uint8 (holding in-range values), the
    8/4-bit float formats as uint8 bit patterns, everything else as itself. Raises
    :class:`EvaluationError` for vector types."""
    if t.lanes != 1:
        raise EvaluationError(f"vector type {t} cannot be evaluated: te programs compute scalars")
    if t.is_bool:
        return np.dtype(np.bool_)
    if t.kind == "bfloat":
        return np.dtype(np.float32)
    if t.is_lowp_float:
        return np.dtype(np.uint8)
    if t.is_subbyte_int:
        return np.dtype(np.int8 if t.kind == "int" else np.uint8)
    return t.numpy()


def _storage_dtype(t: DataType) -> np.dtype:
    """The NumPy type of an array of ``t`` as ember's runtime and the graph constants hold it."""
    if t.kind == "bfloat" or t.is_lowp_float or t.is_subbyte_int:
        return np.dtype(str(t))  # registered with NumPy by ml_dtypes (imported by ember.ir.dtypes)
    return t.numpy()


def round_bfloat16(x: Array) -> Array:
    """Float32 values rounded to bfloat16 precision, to nearest even, returned as float32; NaN
    stays NaN (quietened) — the rounding of :meth:`CodeGenLLVM._f32_to_bf16_bits`."""
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = bits + np.uint32(0x7FFF) + lsb
    chosen = np.where(np.isnan(x), bits | np.uint32(0x400000), rounded)
    return np.asarray(chosen & np.uint32(0xFFFF0000)).view(np.float32)


def _wrap_subbyte(x: Array, t: DataType) -> Array:
    """``x`` (int8/uint8) wrapped into the range of the sub-byte integer type ``t``."""
    mask = (1 << t.bits) - 1
    if t.kind == "uint":
        return np.asarray(x & np.uint8(mask), np.uint8)
    half = 1 << (t.bits - 1)
    return np.asarray(((x + np.int8(half)) & np.int8(mask)) - np.int8(half), np.int8)


def _fix(x: Any, t: DataType) -> Array:
    """A freshly computed value of type ``t``: as an array of its compute type, rounded to
    bfloat16 or wrapped to a sub-byte width where ``t`` asks for it."""
    x = np.asarray(x)
    if t.kind == "bfloat":
        return round_bfloat16(x)
    if t.is_subbyte_int:
        return _wrap_subbyte(x.astype(compute_dtype(t), copy=False), t)
    cd = compute_dtype(t)
    return x if x.dtype == cd else x.astype(cd)


def to_compute(value: Any, t: DataType, what: str) -> Array:
    """``value`` (an array of ember type ``t`` as the runtime holds it) in its compute type (see
    :func:`compute_dtype`). Accepts bfloat16 as ``ml_dtypes.bfloat16`` or as uint16 bits, the
    small formats as their ``ml_dtypes`` types or uint8 bits. Raises :class:`EvaluationError` when
    the array's type is not ``t``'s."""
    a = np.asarray(value)
    name = a.dtype.name
    if t.kind == "bfloat":
        if a.dtype == np.uint16:
            return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)
        if name == "bfloat16":
            return a.astype(np.float32)
    elif t.is_lowp_float:
        if a.dtype == np.uint8:
            return a
        if name == str(t):
            return a.view(np.uint8)
    elif t.is_subbyte_int:
        if name == str(t) or a.dtype == compute_dtype(t):
            return _wrap_subbyte(a.astype(compute_dtype(t)), t)
    elif a.dtype == compute_dtype(t):
        return a
    raise EvaluationError(f"{what} has element type {t} but its value is an array of {a.dtype}")


def from_compute(value: Array, t: DataType) -> Array:
    """A value in its compute type back as the runtime's array type of ``t`` (C-contiguous)."""
    value = np.require(value, requirements="C")  # (ascontiguousarray would make 0-d arrays 1-d)
    if t.kind == "bfloat":
        return (value.view(np.uint32) >> np.uint32(16)).astype(np.uint16).view(_storage_dtype(t))
    if t.is_lowp_float:
        return value.view(_storage_dtype(t))
    if t.is_subbyte_int:
        return value.astype(_storage_dtype(t))
    return value


# -- expression plans ---------------------------------------------------------------------------
_BINARY_SIMPLE: dict[type, Callable[[Array, Array], Array]] = {
    E.Add: np.add,
    E.Sub: np.subtract,
    E.Mul: np.multiply,
    E.Min: np.minimum,
    E.Max: np.maximum,
}
_COMPARE: dict[type, Callable[[Array, Array], Array]] = {
    E.EQ: np.equal,
    E.NE: np.not_equal,
    E.LT: np.less,
    E.LE: np.less_equal,
}


def _erf(x: Array) -> Array:
    """The error function, through the C library's double-precision ``erf`` element by element."""
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(np.asarray(x, np.float64)), np.float64)


def _exp10(x: Array) -> Array:
    return np.power(np.asarray(10, x.dtype), x)


def _rsqrt(x: Array) -> Array:
    return np.asarray(1, x.dtype) / np.sqrt(x)


def _sigmoid(x: Array) -> Array:
    one = np.asarray(1, x.dtype)
    return one / (one + np.exp(-x))


#: math intrinsics of :mod:`ember.te.math` / :meth:`CodeGenLLVM.math_f32_or_f64` by name
MATH: dict[str, Callable[..., Array]] = {
    "exp": np.exp,
    "exp2": np.exp2,
    "exp10": _exp10,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "erf": _erf,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "round": np.rint,  # roundeven: ties to even
    "pow": np.power,
    "fmod": np.fmod,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinite": np.isfinite,
}


class _Context:
    """What an expression reads besides its operands: variable values and computed tensors."""

    def __init__(self, env: dict[E.Var, Array], tensors: Mapping[tuple[int, int], Array]):
        self.env = env
        self.tensors = tensors


class _Plan:
    """The nodes of one or more expressions in evaluation order (children first, each shared
    node once), with use counts so an intermediate array is dropped after its last use."""

    def __init__(self, roots: Sequence[E.PrimExpr], what: str):
        self.what = what
        self.steps: list[tuple[E.PrimExpr, tuple[int, ...]]] = []
        slot: dict[int, int] = {}
        let_value: dict[E.Var, E.PrimExpr] = {}
        stack: list[tuple[E.PrimExpr, bool]] = [(r, False) for r in reversed(roots)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in slot:
                continue
            kids = self._children(node, let_value)
            if expanded or not kids:
                self.steps.append((node, tuple(slot[id(k)] for k in kids)))
                slot[id(node)] = len(self.steps) - 1
                continue
            stack.append((node, True))
            stack.extend((k, False) for k in reversed(kids) if id(k) not in slot)
        self.roots = [slot[id(r)] for r in roots]
        self.uses = [0] * len(self.steps)
        for _, kids in self.steps:
            for k in kids:
                self.uses[k] += 1
        for r in self.roots:
            self.uses[r] += 1

    def _children(self, node: E.PrimExpr, let_value: dict[E.Var, E.PrimExpr]) -> tuple[E.PrimExpr, ...]:
        if isinstance(node, (E.IntImm, E.FloatImm)):
            return ()
        if isinstance(node, E.Var):
            v = let_value.get(node)
            return () if v is None else (v,)
        if isinstance(node, (E.BinaryOp, E.CmpOp)):
            return (node.a, node.b)
        if isinstance(node, E.Not):
            return (node.a,)
        if isinstance(node, E.Select):
            return (node.condition, node.true_value, node.false_value)
        if isinstance(node, E.Cast):
            return (node.value,)
        if isinstance(node, E.Call):
            return node.args
        if isinstance(node, E.ProducerLoad):
            return node.indices
        if isinstance(node, E.Let):
            old = let_value.get(node.var)
            if old is not None and old is not node.value:
                raise EvaluationError(f"{self.what}: variable {node.var.name} is bound by two different lets")
            let_value[node.var] = node.value
            return (node.body,)
        if isinstance(node, E.Reduce):
            raise EvaluationError(f"{self.what}: a reduction inside an expression ({node}) cannot be evaluated")
        raise EvaluationError(f"{self.what}: {type(node).__name__} nodes cannot be evaluated ({node})")

    def run(self, ctx: _Context) -> list[Array]:
        """The values of the roots, arrays broadcastable to the grid the variables span."""
        vals: list[Array | None] = [None] * len(self.steps)
        left = list(self.uses)
        for k, (node, kids) in enumerate(self.steps):
            vals[k] = self._eval(node, [vals[c] for c in kids], ctx)  # type: ignore[misc]
            for c in kids:
                left[c] -= 1
                if left[c] == 0:
                    vals[c] = None
        return [vals[r] for r in self.roots]  # type: ignore[misc]

    # -- one node ------------------------------------------------------------------------------
    def _eval(self, node: E.PrimExpr, args: list[Array], ctx: _Context) -> Array:
        t = node.dtype
        cls = type(node)
        if cls is E.IntImm:
            return np.asarray(node.value, compute_dtype(t))  # type: ignore[attr-defined]
        if cls is E.FloatImm:
            value = node.value  # type: ignore[attr-defined]
            if t.kind == "bfloat":  # the code generator rounds the float32 constant to bfloat16
                return round_bfloat16(np.asarray(value, np.float32))
            return np.asarray(value, np.float64).astype(compute_dtype(t))
        if cls is E.Var:
            if args:  # bound by a Let
                return args[0]
            value = ctx.env.get(node)  # type: ignore[call-overload]
            if value is None:
                raise EvaluationError(
                    f"{self.what}: variable {node.name} has no value (a symbolic size no input binds?)"  # type: ignore[attr-defined]
                )
            return value
        if cls in _BINARY_SIMPLE:
            return _fix(_BINARY_SIMPLE[cls](args[0], args[1]), t)
        if cls in _COMPARE:
            return np.asarray(_COMPARE[cls](args[0], args[1]))
        if cls is E.Div:
            return _fix(self._div(args[0], args[1], t), t)
        if cls is E.Mod:
            return _fix(np.fmod(args[0], args[1]), t)
        if cls is E.FloorDiv:
            a, b = args
            return _fix(np.floor(a / b) if t.is_float else np.floor_divide(a, b), t)
        if cls is E.FloorMod:
            a, b = args
            return _fix(a - np.floor(a / b) * b if t.is_float else np.remainder(a, b), t)
        if cls is E.And:
            return np.asarray(np.logical_and(args[0], args[1]))
        if cls is E.Or:
            return np.asarray(np.logical_or(args[0], args[1]))
        if cls is E.Not:
            return np.asarray(np.logical_not(args[0]))
        if cls is E.Select:
            return np.asarray(np.where(args[0], args[1], args[2]))
        if cls is E.Cast:
            return cast_value(args[0], node.value.dtype, t)  # type: ignore[attr-defined]
        if cls is E.Call:
            return self._call(node, args)  # type: ignore[arg-type]
        if cls is E.ProducerLoad:
            return self._load(node, args, ctx)  # type: ignore[arg-type]
        if cls is E.Let:
            return args[0]
        raise EvaluationError(f"{self.what}: {cls.__name__} nodes cannot be evaluated ({node})")

    @staticmethod
    def _div(a: Array, b: Array, t: DataType) -> Array:
        if t.is_float:
            return np.true_divide(a, b)
        if t.kind == "uint" or t.is_bool:
            return np.floor_divide(a, b)
        q = np.floor_divide(a, b)
        # floor -> toward zero: one more where the remainder is non-zero and the signs differ
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        return q + fix.astype(q.dtype)

    def _call(self, node: E.Call, args: list[Array]) -> Array:
        t = node.dtype
        if node.op == "reinterpret":
            (x,) = args
            src_t = node.args[0].dtype
            src, dst = compute_dtype(src_t), compute_dtype(t)
            if src.itemsize != dst.itemsize or "bfloat" in (src_t.kind, t.kind) or src_t.is_subbyte_int \
                    or t.is_subbyte_int or src_t.is_bool or t.is_bool:
                raise EvaluationError(f"{self.what}: reinterpret of {src_t} as {t} ({node}) has no meaning")
            return np.asarray(x).view(dst)
        fn = MATH.get(node.op)
        if fn is None:
            raise EvaluationError(f"{self.what}: math function {node.op!r} cannot be evaluated ({node})")
        arg_t = node.args[0].dtype if node.args else t
        if node.op == "abs" and t.is_int:
            return _fix(np.abs(args[0]), t)
        if arg_t.is_float and arg_t.bits == 16:
            wide = [np.asarray(a, np.float32) for a in args]
            out = np.asarray(fn(*wide))
            return out if t.is_bool else _fix(out.astype(np.float16) if t.kind == "float" else out, t)
        if not all(a.dtype.kind == "f" for a in args):
            raise EvaluationError(f"{self.what}: math function {node.op} of a non-float argument ({node})")
        out = np.asarray(fn(*args))
        return out if t.is_bool else _fix(out.astype(compute_dtype(t), copy=False), t)

    def _load(self, node: E.ProducerLoad, idx: list[Array], ctx: _Context) -> Array:
        t: Tensor = node.producer
        src = ctx.tensors.get((id(t.op), t.value_index))
        if src is None:
            raise EvaluationError(f"{self.what}: tensor {t.name} is read before it has a value")
        if src.ndim == 0:
            return src
        shape = np.broadcast_shapes(*(np.shape(i) for i in idx))
        if src.size == 0:  # only a discarded branch can read an empty tensor
            return np.zeros(shape, src.dtype)
        clipped = tuple(np.clip(i, 0, d - 1) for i, d in zip(idx, src.shape))
        return np.asarray(src[clipped])


def cast_value(x: Array, src: DataType, dst: DataType) -> Array:
    """``x`` (compute type of ``src``) converted to ``dst`` by the code generator's rules (module
    doc). Raises :class:`EvaluationError` for the 8/4-bit float formats (only ``reinterpret``
    converts them) and vector types."""
    s, d = src.element_of(), dst.element_of()
    if s == d:
        return x
    if s.is_lowp_float or d.is_lowp_float:
        raise EvaluationError(f"cast from {src} to {dst}: 8- and 4-bit float formats are converted by ember.ops.lowp")
    if d.is_bool:
        return np.asarray(x != 0)
    if s.is_float and d.is_float:
        if d.kind == "bfloat":
            return round_bfloat16(np.asarray(x, np.float32))
        return np.asarray(x, compute_dtype(d))
    if d.kind == "bfloat":  # integer or bool: to float32, then rounded
        return round_bfloat16(np.asarray(x, np.float32))
    if s.is_float:  # toward zero; out of range / NaN: undefined in the kernel (module doc)
        if d.is_subbyte_int:
            return _wrap_subbyte(np.asarray(x).astype(np.int64).astype(compute_dtype(d)), d)
        return np.asarray(x).astype(compute_dtype(d))
    return _fix(np.asarray(x).astype(compute_dtype(d)), d)


# -- chunked grids ------------------------------------------------------------------------------
def _chunking(dims: Sequence[int], max_elements: int) -> tuple[int, int]:
    """``(s, c)``: the grid over ``dims`` (all > 0) is cut at dimension ``s`` into pieces of ``c``
    indices; dimensions before ``s`` are taken one index at a time, those after whole. Each piece
    has at most ``max_elements`` points (or one point of dimension ``s`` when even that is more)."""
    if not dims:
        return 0, 1
    inner = 1  # the points of the dimensions after s
    s = len(dims) - 1
    while s > 0 and inner * dims[s] <= max_elements:
        inner *= dims[s]
        s -= 1
    return s, min(dims[s], max(1, max_elements // inner))


def _pieces(dims: Sequence[int], s: int, c: int) -> Iterator[tuple[tuple[int, ...], int, int]]:
    """``(outer indices, lo, hi)`` of every piece, in row-major order."""
    if not dims:
        yield (), 0, 0
        return
    for outer in itertools.product(*(range(d) for d in dims[:s])):
        for lo in range(0, dims[s], c):
            yield outer, lo, min(lo + c, dims[s])


def _axis_env(
    axes: Sequence[IterVar], mins: Sequence[int], dims: Sequence[int], s: int, outer: tuple[int, ...], lo: int, hi: int
) -> dict[E.Var, Array]:
    """Index arrays of the axes for one piece: scalars before ``s``, ranges along grid dimension
    ``j - s`` from ``s`` on."""
    env: dict[E.Var, Array] = {}
    nd = len(axes) - s
    for j, iv in enumerate(axes):
        dt = compute_dtype(iv.var.dtype)
        if j < s:
            env[iv.var] = np.asarray(mins[j] + outer[j], dt)
            continue
        r = np.arange(lo, hi) if j == s else np.arange(dims[j])
        shape = [1] * nd
        shape[j - s] = -1
        env[iv.var] = (r + mins[j]).astype(dt).reshape(shape)
    return env


# -- reducers -----------------------------------------------------------------------------------
_REDUCER_UFUNCS: dict[type, np.ufunc] = {E.Add: np.add, E.Mul: np.multiply, E.Max: np.maximum, E.Min: np.minimum}


class _Reducer:
    """Applies a :class:`CommReducer`: a NumPy ufunc for sum/prod/max/min (recognised by their
    combining expression, not their name), else its combining expressions pairwise."""

    def __init__(self, combiner: Any, what: str):
        self.combiner = combiner
        self.what = what
        self.types = [v.dtype for v in combiner.lhs]
        self.ufunc: np.ufunc | None = None
        if len(combiner.result) == 1:
            r, lhs, rhs = combiner.result[0], combiner.lhs[0], combiner.rhs[0]
            t = lhs.dtype
            if type(r) in _REDUCER_UFUNCS and {id(r.a), id(r.b)} == {id(lhs), id(rhs)} \
                    and t.kind != "bfloat" and not t.is_bool:
                self.ufunc = _REDUCER_UFUNCS[type(r)]
        self.plan = _Plan(combiner.result, f"{what} (combiner {combiner.name})")
        self.identity = _Plan(combiner.identity, f"{what} (identity of {combiner.name})").run(_Context({}, {}))

    def combine(self, acc: list[Array], new: list[Array]) -> list[Array]:
        """``combine(acc, new)`` element-wise (``acc`` holds the earlier values)."""
        if self.ufunc is not None:
            return [_fix(self.ufunc(acc[0], new[0]), self.types[0])]
        env = dict(zip(self.combiner.lhs, acc))
        env.update(zip(self.combiner.rhs, new))
        return [_fix(v, t) for v, t in zip(self.plan.run(_Context(env, {})), self.types)]

    def reduce(self, values: list[Array], axes: tuple[int, ...]) -> list[Array]:
        """``values`` (full grid arrays) reduced over grid dimensions ``axes`` (trailing ones)."""
        if not axes:
            return values
        if self.ufunc is not None:
            v = values[0]
            kw = {"dtype": v.dtype} if v.dtype.kind in "iu" else {}
            return [_fix(self.ufunc.reduce(v, axis=axes, **kw), self.types[0])]
        keep = values[0].shape[: axes[0]]
        flat = [np.reshape(v, keep + (-1,)) for v in values]
        n = flat[0].shape[-1]
        while n > 1:  # adjacent pairs, earlier element as the accumulator: the sequential order
            half = n // 2
            comb = self.combine([v[..., 0 : 2 * half : 2] for v in flat], [v[..., 1 : 2 * half : 2] for v in flat])
            if n % 2:
                comb = [np.concatenate([np.broadcast_to(c, v[..., :half].shape), v[..., -1:]], axis=-1)
                        for c, v in zip(comb, flat)]
            flat, n = comb, half + n % 2
        return [np.broadcast_to(v, keep + (1,))[..., 0] for v in flat]


# -- operations ---------------------------------------------------------------------------------
class _Evaluator:
    """Evaluates operations in topological order, keeping each value until its last reader."""

    def __init__(self, inputs: Mapping[Tensor, Any], max_elements: int):
        if max_elements < 1:
            raise EvaluationError(f"max_elements must be at least 1, not {max_elements}")
        self.max_elements = int(max_elements)
        self.values: dict[tuple[int, int], Array] = {}
        self.sizes: dict[E.Var, Array] = {}
        self.given: dict[int, Operation] = {}
        for t, v in inputs.items():
            if not isinstance(t, Tensor):
                raise EvaluationError(f"inputs must be keyed by te tensors, not {type(t).__name__}")
            self._bind_sizes(t, np.shape(v))
            self.values[(id(t.op), t.value_index)] = to_compute(v, t.dtype, f"input {t.name}")
            self.given[id(t.op)] = t.op
        for t in inputs:
            shape = self.shape(t)
            if tuple(self.values[(id(t.op), t.value_index)].shape) != shape:
                got = self.values[(id(t.op), t.value_index)].shape
                raise EvaluationError(f"input {t.name} has shape {shape} but its value has shape {tuple(got)}")

    def _bind_sizes(self, t: Tensor, shape: tuple[int, ...]) -> None:
        if len(shape) != len(t.shape):
            raise EvaluationError(f"input {t.name} has {len(t.shape)} dimension(s) but its value has {len(shape)}")
        for d, n in zip(t.shape, shape):
            if isinstance(d, E.Var):
                old = self.sizes.get(d)
                if old is not None and int(old) != n:
                    raise EvaluationError(f"size {d.name} is {int(old)} in one input and {n} in input {t.name}")
                self.sizes[d] = np.asarray(n, compute_dtype(d.dtype))

    def scalar(self, e: E.PrimExpr, what: str) -> int:
        """The integer value of a size expression."""
        if isinstance(e, E.IntImm):
            return int(e.value)
        (v,) = _Plan([e], what).run(_Context(self.sizes, {}))
        if np.ndim(v) != 0:
            raise EvaluationError(f"{what}: {e} is not a scalar")
        return int(v)

    def shape(self, t: Tensor) -> tuple[int, ...]:
        """The constant shape of ``t``."""
        return tuple(self.scalar(d, f"shape of {t.name}") for d in t.shape)

    def run(self, outputs: Sequence[Tensor]) -> list[Array]:
        order: list[Operation] = []
        readers: dict[int, int] = {}
        seen: set[int] = set()
        stack: list[tuple[Operation, bool]] = [(t.op, False) for t in reversed(outputs)]
        while stack:
            op, done = stack.pop()
            if done:
                order.append(op)
                continue
            if id(op) in seen:
                continue
            seen.add(id(op))
            stack.append((op, True))
            if id(op) in self.given:
                continue
            if isinstance(op, PlaceholderOp):
                raise EvaluationError(f"placeholder {op.name} has no value: pass it in inputs")
            if not isinstance(op, ComputeOp):
                raise EvaluationError(f"operation {op.name} of kind {type(op).__name__} cannot be evaluated")
            for t in op.input_tensors:
                readers[id(t.op)] = readers.get(id(t.op), 0) + 1
                if id(t.op) not in seen:
                    stack.append((t.op, False))
        pinned = {id(t.op) for t in outputs}
        for op in order:
            if id(op) not in self.given:
                self._compute(op)  # type: ignore[arg-type]
            if id(op) in self.given:
                continue
            for t in op.input_tensors:
                readers[id(t.op)] -= 1
                if readers[id(t.op)] == 0 and id(t.op) not in pinned and id(t.op) not in self.given:
                    for k in range(t.op.num_outputs):
                        self.values.pop((id(t.op), k), None)
        results = []
        for t in outputs:
            v = from_compute(self.values[(id(t.op), t.value_index)], t.dtype)
            results.append(v.copy() if id(t.op) in self.given else v)
        return results

    def _compute(self, op: ComputeOp) -> None:
        what = f"compute {op.name}"
        dims = [self.scalar(iv.dom.extent, what) for iv in op.axis]  # type: ignore[union-attr]
        mins = [self.scalar(iv.dom.min, what) for iv in op.axis]  # type: ignore[union-attr]
        outs = [np.empty(tuple(dims), compute_dtype(b.dtype)) for b in op.body]
        for k in range(len(outs)):
            self.values[(id(op), k)] = outs[k]
        if 0 in dims:
            return
        if not op.is_reduction:
            plan = _Plan(op.body, what)
            s, c = _chunking(dims, self.max_elements)
            for outer, lo, hi in _pieces(dims, s, c):
                env = dict(self.sizes)
                env.update(_axis_env(op.axis, mins, dims, s, outer, lo, hi))
                vals = plan.run(_Context(env, self.values))
                block = _block(len(dims), s, outer, lo, hi)
                for out, v in zip(outs, vals):
                    out[block] = v
            return
        groups: dict[tuple[int, ...], list[int]] = {}
        for k, b in enumerate(op.body):
            key = (*map(id, b.source), id(b.condition), *map(id, b.axis))  # type: ignore[attr-defined]
            groups.setdefault(key, []).append(k)
        for ks in groups.values():
            self._reduce(op, ks, dims, mins, outs, what)

    def _reduce(
        self, op: ComputeOp, ks: list[int], dims: list[int], mins: list[int], outs: list[Array], what: str
    ) -> None:
        red: E.Reduce = op.body[ks[0]]  # type: ignore[assignment]
        reducer = _Reducer(red.combiner, what)
        rdims = [self.scalar(iv.dom.extent, what) for iv in red.axis]
        rmins = [self.scalar(iv.dom.min, what) for iv in red.axis]
        ident = reducer.identity
        for k in ks:
            outs[k][...] = ident[op.body[k].value_index]  # type: ignore[attr-defined]
        if 0 in rdims:
            return
        roots = list(red.source) + ([red.condition] if red.condition is not None else [])
        plan = _Plan(roots, what)
        axes = list(op.axis) + list(red.axis)
        all_dims, all_mins = dims + rdims, mins + rmins
        n_out = len(dims)
        s, c = _chunking(all_dims, self.max_elements)
        nd = len(all_dims) - s
        red_axes = tuple(range(max(0, n_out - s), nd))
        for outer, lo, hi in _pieces(all_dims, s, c):
            env = dict(self.sizes)
            env.update(_axis_env(axes, all_mins, all_dims, s, outer, lo, hi))
            vals = plan.run(_Context(env, self.values))
            grid = tuple(hi - lo if j == s else all_dims[j] for j in range(s, len(all_dims)))
            src = vals[: len(red.source)]
            if red.condition is not None:
                cond = vals[-1]
                src = [np.where(cond, v, i) for v, i in zip(src, ident)]
            partial = reducer.reduce([np.broadcast_to(v, grid) for v in src], red_axes)
            block = _block(n_out, s, outer[:n_out], lo, hi)
            # the accumulated values in value_index order (the identity for values no output keeps)
            cur = list(ident)
            for k in ks:
                cur[op.body[k].value_index] = outs[k][block]  # type: ignore[attr-defined]
            combined = reducer.combine(cur, partial)
            for k in ks:
                outs[k][block] = combined[op.body[k].value_index]  # type: ignore[attr-defined]


def _block(n: int, s: int, outer: tuple[int, ...], lo: int, hi: int) -> tuple[Any, ...]:
    """The index of a piece's block in an output of ``n`` dimensions."""
    idx: list[Any] = []
    for j in range(n):
        if j < s:
            idx.append(outer[j])
        elif j == s:
            idx.append(slice(lo, hi))
        else:
            idx.append(slice(None))
    return tuple(idx)


def evaluate(
    outputs: Sequence[Tensor], inputs: Mapping[Tensor, Any], max_elements: int = DEFAULT_MAX_ELEMENTS
) -> list[np.ndarray]:
    """The values of the tensors ``outputs`` of a te program, computed with NumPy.

    ``inputs`` maps every placeholder the outputs depend on (or any tensor whose value is known,
    which is then not recomputed) to its value: an array of the tensor's shape and type, as the
    runtime holds it (bfloat16 as ``ml_dtypes.bfloat16`` or its uint16 bits, the 8/4-bit float
    formats and sub-byte integers as their ``ml_dtypes`` types). Symbolic sizes in placeholder
    shapes are bound from the arrays' shapes. No evaluation grid (a compute's output points times
    its reduction points, per chunk) has more than ``max_elements`` points.

    Returns one new C-contiguous array per output, of the output's shape and its runtime type
    (``np.dtype(str(t.dtype))``: ``ml_dtypes`` types for bfloat16 and the small formats). The
    values equal the native kernel's (module doc: float reductions may differ by rounding order).
    Raises :class:`EvaluationError` for anything that cannot be evaluated."""
    with np.errstate(all="ignore"):
        return _Evaluator(inputs, max_elements).run(list(outputs))
