"""Data-movement operators: reshape family, transpose, concat, split, slice, gather/scatter,
expand, tile, pad, shape queries, range, one-hot, trilu, depth/space rearrangements.

Operators whose result is known when the graph is compiled (``Shape``, ``Size``, ``Constant``,
``Range`` over constants) return NumPy arrays; the graph compiler treats those as constants.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import bcast_load, cast, compute, const_like, dtype_of, ints, norm_axis, shape, uname


def _ravel(idx: Any, shp: tuple[int, ...]) -> E.PrimExpr:
    lin: E.PrimExpr = E.const(0)
    for i, d in zip(idx, shp):
        lin = lin * d + i
    return lin


def _unravel(lin: E.PrimExpr, shp: tuple[int, ...]) -> tuple[E.PrimExpr, ...]:
    out = []
    for d in reversed(shp):
        out.append(E.floormod(lin, d) if d != 1 else E.const(0))
        lin = E.floordiv(lin, d)
    return tuple(reversed(out))


def vector(ctx: OpContext, i: int, what: str, scalar: bool = False) -> list[int]:
    """The constant 1-D integer input ``i`` (the spec's "1-D tensor" of sizes, axes, pads...);
    with ``scalar`` a 0-d one too (ONNX Runtime and the node tests take scalar axes)."""
    v = ctx.value(i)
    if v is None or np.ndim(v) not in ((0, 1) if scalar else (1,)):
        raise ctx.fail(f"input {i} ({what}) must be a 1-D tensor, got {'nothing' if v is None else np.shape(v)}")
    if not np.issubdtype(np.asarray(v).dtype, np.integer):
        raise ctx.fail(f"input {i} ({what}) must hold integers, got {np.asarray(v).dtype}")
    return ints(v)


def reshape_to(x: Tensor, new_shape: tuple[int, ...], name: str = "reshape") -> Tensor:
    """``x`` viewed with ``new_shape`` (same element count; tagged so a lone reshape is a view)."""
    src = shape(x)
    if int(np.prod(src)) != int(np.prod(new_shape)):
        raise ValueError(f"cannot reshape {src} to {new_shape}")
    if src == tuple(new_shape):
        return compute(src, lambda *i: x[i], name=uname(name), tag="alias")
    return compute(
        tuple(new_shape), lambda *i: x[_unravel(_ravel(i, tuple(new_shape)), src)], name=uname(name), tag="alias"
    )


@register("Reshape")
def reshape(ctx: OpContext, x: Tensor, s: Tensor | None = None) -> Tensor:
    """ONNX Reshape (0 copies a dimension unless ``allowzero``; -1 is inferred)."""
    target = ints(ctx.attr("shape")) if ctx.opset < 5 else vector(ctx, 1, "shape")
    src = shape(x)
    allowzero = int(ctx.attr("allowzero", 0))
    if any(d < -1 for d in target):
        raise ctx.fail(f"target shape {target} has a dimension below -1")
    if allowzero and 0 in target and -1 in target:
        raise ctx.fail(f"target shape {target} has both 0 and -1 while allowzero=1")
    if any(d == 0 for d in target) and not allowzero and len(target) > len(src):
        bad = [k for k, d in enumerate(target) if d == 0 and k >= len(src)]
        if bad:
            raise ctx.fail(f"target shape {target} copies dimension {bad[0]} (0), which the input {src} lacks")
    out = [src[k] if d == 0 and not allowzero else d for k, d in enumerate(target)]
    if out.count(-1) > 1:
        raise ctx.fail(f"target shape {target} has more than one -1")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        total = int(np.prod(src))
        if known == 0 or total % known:
            raise ctx.fail(f"cannot reshape {src} to {target}")
        out[out.index(-1)] = total // known
    if int(np.prod(out)) != int(np.prod(src)):
        raise ctx.fail(f"cannot reshape {src} ({int(np.prod(src))} elements) to {target}")
    return reshape_to(x, tuple(out))


@register("Flatten")
def flatten(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX Flatten to 2-D at ``axis``."""
    s = shape(x)
    a = int(ctx.attr("axis", 1))
    if not -len(s) <= a <= len(s):
        raise ctx.fail(f"axis {a} is outside [-r, r] = [{-len(s)}, {len(s)}] for an input of rank {len(s)}")
    a = a + len(s) if a < 0 else a
    return reshape_to(x, (int(np.prod(s[:a])), int(np.prod(s[a:]))), "flatten")


def _axes(ctx: OpContext, i: int, scalar: bool = False) -> list[int] | None:
    """Squeeze's or Unsqueeze's axes (input ``i`` since opset 13; ``scalar``: a 0-d one too, as
    ONNX Runtime's Unsqueeze takes and its Squeeze does not)."""
    if ctx.opset >= 13 and i is not None:
        return vector(ctx, i, "axes", scalar=scalar) if ctx.has(i) else None
    a = ctx.attr("axes")
    return None if a is None else ints(a)


@register("Squeeze")
def squeeze(ctx: OpContext, x: Tensor, axes: Tensor | None = None) -> Tensor:
    """ONNX Squeeze of the given (or all size-1) axes."""
    s = shape(x)
    ax = _axes(ctx, 1)
    ax = [k for k, d in enumerate(s) if d == 1] if ax is None else [norm_axis(a, len(s)) for a in ax]
    if len(set(ax)) != len(ax):
        raise ctx.fail(f"axes {_axes(ctx, 1)} name an axis twice")
    for a in ax:
        if s[a] != 1:
            raise ctx.fail(f"cannot squeeze axis {a} of size {s[a]}")
    return reshape_to(x, tuple(d for k, d in enumerate(s) if k not in ax), "squeeze")


@register("Unsqueeze")
def unsqueeze(ctx: OpContext, x: Tensor, axes: Tensor | None = None) -> Tensor:
    """ONNX Unsqueeze."""
    s = list(shape(x))
    ax = _axes(ctx, 1, scalar=True) or []
    n = len(s) + len(ax)
    ax = sorted(norm_axis(a, n) for a in ax)
    if len(set(ax)) != len(ax):
        raise ctx.fail(f"axes {_axes(ctx, 1)} name an axis twice")
    for a in ax:
        s.insert(a, 1)
    return reshape_to(x, tuple(s), "unsqueeze")


@register("Transpose")
def transpose(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX Transpose by ``perm`` (default: reversed)."""
    s = shape(x)
    given = ctx.attr("perm")
    perm = ints(given) if given is not None else list(range(len(s)))[::-1]
    if sorted(perm) != list(range(len(s))):
        raise ctx.fail(f"perm {perm} is not a permutation of 0..{len(s) - 1} (the input has rank {len(s)})")
    return transpose_to(x, perm)


def transpose_to(x: Tensor, perm: list[int]) -> Tensor:
    """``x`` with axes permuted."""
    s = shape(x)
    out = tuple(s[p] for p in perm)

    def body(*i: Any) -> Any:
        idx = [None] * len(s)
        for k, p in enumerate(perm):
            idx[p] = i[k]
        return x[tuple(idx)]

    return compute(out, body, name=uname("transpose"))


@register("Concat")
def concat(ctx: OpContext, *xs: Tensor) -> Tensor:
    """ONNX Concat along ``axis``."""
    if not xs or any(t is None for t in xs):
        raise ctx.fail("every input must be given (none may be left out)")
    ins = list(xs)
    s0 = shape(ins[0])
    a = norm_axis(ctx.attr("axis", 0), len(s0))
    for k, t in enumerate(ins[1:], 1):
        sk = shape(t)
        if len(sk) != len(s0) or any(p != q for d, (p, q) in enumerate(zip(sk, s0)) if d != a):
            raise ctx.fail(f"input {k} has shape {sk}, input 0 {s0}: all dimensions but axis {a} must be equal")
        if dtype_of(t) != dtype_of(ins[0]):
            raise ctx.fail(f"input {k} has dtype {dtype_of(t)}, input 0 {dtype_of(ins[0])}")
    ins = [t for t in ins if shape(t)[a] > 0] or ins[:1]
    sizes = [shape(t)[a] for t in ins]
    out = list(s0)
    out[a] = sum(sizes)

    def body(*i: Any) -> Any:
        offs = np.cumsum([0] + sizes)
        k = len(ins) - 1
        idx = list(i)
        idx[a] = i[a] - int(offs[k])
        res = ins[k][tuple(idx)]
        for k in range(len(ins) - 2, -1, -1):
            idx = list(i)
            idx[a] = i[a] - int(offs[k])
            res = te.if_then_else(i[a] < int(offs[k + 1]), ins[k][tuple(idx)], res)
        return res

    return compute(tuple(out), body, name=uname("concat"))


def slice_axis(x: Tensor, axis: int, start: int, length: int, step: int = 1) -> Tensor:
    """Elements ``start, start+step, ...`` (``length`` of them) of ``x`` along ``axis``."""
    s = list(shape(x))
    s[axis] = length

    def body(*i: Any) -> Any:
        idx = list(i)
        idx[axis] = i[axis] * step + start
        return x[tuple(idx)]

    return compute(tuple(s), body, name=uname("slice"))


@register("Split")
def split(ctx: OpContext, x: Tensor, sp: Tensor | None = None) -> list[Tensor]:
    """ONNX Split into given sizes, or ``num_outputs`` (equal, the last smaller) parts."""
    s = shape(x)
    a = norm_axis(ctx.attr("axis", 0), len(s))
    sizes = vector(ctx, 1, "split") if ctx.opset >= 13 and ctx.has(1) else ints(ctx.attr("split"))
    if not sizes:
        n = int(ctx.attr("num_outputs", 0)) or ctx.attrs.get("_num_outputs", 1)
        if n < 1:
            raise ctx.fail(f"num_outputs={n} must be at least 1")
        chunk = -(-s[a] // n)
        sizes = [min(chunk, s[a] - k * chunk) for k in range(n)]
    if any(n < 0 for n in sizes) or sum(sizes) != s[a]:
        raise ctx.fail(f"split sizes {sizes} are not non-negative sizes adding up to dimension {a} of size {s[a]}")
    if len(sizes) < len([o for o in ctx.attrs.get("_outputs", []) if o]):
        raise ctx.fail(f"{len(sizes)} split sizes for {len(ctx.attrs.get('_outputs', []))} outputs")
    outs, off = [], 0
    for n in sizes:
        outs.append(slice_axis(x, a, off, n))
        off += n
    return outs


def _slice_bounds(start: int, end: int, step: int, n: int) -> tuple[int, int]:
    """ONNX Slice's clamping (not Python's: a negative step clamps the start to [0, n-1], so
    ``start=-2`` on an axis of 1 element starts at 0, where Python would give nothing)."""
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    if step > 0:
        return min(max(start, 0), n), min(max(end, 0), n)
    return min(max(start, 0), n - 1), min(max(end, -1), n - 1)


@register("Slice")
def slice_op(ctx: OpContext, x: Tensor, *rest: Any) -> Tensor:
    """ONNX Slice (starts/ends/axes/steps as attributes before opset 10, inputs since)."""
    s = shape(x)
    if ctx.opset < 10:
        starts, ends = ints(ctx.attr("starts")), ints(ctx.attr("ends"))
        axes = ints(ctx.attr("axes")) or list(range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts, ends = vector(ctx, 1, "starts"), vector(ctx, 2, "ends")
        axes = vector(ctx, 3, "axes") if ctx.has(3) else list(range(len(starts)))
        steps = vector(ctx, 4, "steps") if ctx.has(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.fail(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    if len({norm_axis(a, len(s)) for a in axes}) != len(axes):
        raise ctx.fail(f"axes {axes} name an axis twice")
    begin, step, out = [0] * len(s), [1] * len(s), list(s)
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        ax = norm_axis(ax, len(s))
        if sp == 0:
            raise ctx.fail("a step of 0 is not allowed")
        b, e = _slice_bounds(st, en, sp, s[ax])
        begin[ax], step[ax] = b, sp
        out[ax] = len(range(b, e, sp))

    def body(*i: Any) -> Any:
        return x[tuple(i[k] * step[k] + begin[k] for k in range(len(s)))]

    return compute(tuple(out), body, name=uname("slice"))


def _wrap(idx: E.PrimExpr, n: int) -> E.PrimExpr:
    idx = cast(idx, "int64") if idx.dtype.bits > 32 else cast(idx, "int32")
    w = te.if_then_else(idx < E.const(0, idx.dtype), idx + E.const(n, idx.dtype), idx)
    # Clamp, so an out-of-range index cannot read outside the buffer.
    w = E.max_expr(E.min_expr(w, E.const(max(n - 1, 0), w.dtype)), E.const(0, w.dtype))
    return cast(w, "int32")


@register("Gather")
def gather(ctx: OpContext, x: Tensor, ind: Tensor) -> Tensor:
    """ONNX Gather along ``axis`` (negative indices wrap)."""
    s, si = shape(x), shape(ind)
    a = norm_axis(ctx.attr("axis", 0), len(s))
    _check_indices(ctx, 1, s[a], f"axis {a}", int(np.prod(si)))
    out = s[:a] + si + s[a + 1 :]

    def body(*i: Any) -> Any:
        j = _wrap(ind[tuple(i[a : a + len(si)])], s[a])
        return x[tuple(i[:a]) + (j,) + tuple(i[a + len(si) :])]

    return compute(out, body, name=uname("gather"))


@register("GatherElements")
def gather_elements(ctx: OpContext, x: Tensor, ind: Tensor) -> Tensor:
    """ONNX GatherElements along ``axis``."""
    s, si = shape(x), shape(ind)
    a = norm_axis(ctx.attr("axis", 0), len(s))
    if len(si) != len(s) or any(si[d] > s[d] for d in range(len(s)) if d != a):
        raise ctx.fail(f"indices of shape {si} do not fit data of shape {s} (same rank; at most the data's size "
                       f"on every axis but {a})")
    _check_indices(ctx, 1, s[a], f"axis {a}", int(np.prod(si)))

    def body(*i: Any) -> Any:
        idx = list(i)
        idx[a] = _wrap(ind[i], s[a])
        return x[tuple(idx)]

    return compute(shape(ind), body, name=uname("gather_elements"))


@register("GatherND")
def gather_nd(ctx: OpContext, x: Tensor, ind: Tensor) -> Tensor:
    """ONNX GatherND with ``batch_dims``."""
    s, si = shape(x), shape(ind)
    b = int(ctx.attr("batch_dims", 0))
    if not si or not 0 <= b < min(len(s), len(si)) or si[:b] != s[:b]:
        raise ctx.fail(f"batch_dims={b} does not fit data {s} and indices {si}")
    q = si[-1]
    if not 1 <= q <= len(s) - b:
        raise ctx.fail(f"indices of shape {si} index {q} axes of data {s} after {b} batch axes")
    if 0 in s[b:b + q] and int(np.prod(si[:-1])):
        raise ctx.fail(f"indices {si} index into an empty axis of data {s}")
    if ctx.has(1) and ctx.inputs[1] in ctx.consts:
        v = np.asarray(ctx.consts[ctx.inputs[1]]).reshape(-1, q)
        for k in range(q):
            n = s[b + k]
            if v.size and (v[:, k].min() < -n or v[:, k].max() >= n):
                raise ctx.fail(f"an index of axis {b + k} is outside [-{n}, {n - 1}]")
    out = si[:-1] + s[b + q :]

    def body(*i: Any) -> Any:
        lead = i[: len(si) - 1]
        idx = list(lead[:b])
        for k in range(q):
            idx.append(_wrap(ind[tuple(lead) + (k,)], s[b + k]))
        idx.extend(i[len(si) - 1 :])
        return x[tuple(idx)]

    return compute(out, body, name=uname("gather_nd"))


@register("Expand")
def expand(ctx: OpContext, x: Tensor, s: Tensor) -> Tensor:
    """ONNX Expand: broadcast ``x`` with the shape input."""
    from .util import broadcast_shapes

    out = broadcast_shapes(shape(x), vector(ctx, 1, "shape"))
    return compute(out, lambda *i: bcast_load(x, out, i), name=uname("expand"))


@register("Tile")
def tile(ctx: OpContext, x: Tensor, reps: Tensor) -> Tensor:
    """ONNX Tile."""
    s = shape(x)
    r = vector(ctx, 1, "repeats")
    if len(r) != len(s) or any(k < 0 for k in r):
        raise ctx.fail(f"repeats {r} must be {len(s)} non-negative counts (one per axis of the input)")
    out = tuple(d * k for d, k in zip(s, r))
    return compute(out, lambda *i: x[tuple(E.floormod(i[k], s[k]) for k in range(len(s)))], name=uname("tile"))


@register("Pad")
def pad(ctx: OpContext, x: Tensor, *rest: Any) -> Tensor:
    """ONNX Pad: ``constant``, ``reflect``, ``edge`` and ``wrap`` modes, optional ``axes``."""
    s = shape(x)
    n = len(s)
    mode = ctx.attr("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if ctx.opset < 11:
        pads = ints(ctx.attr("pads", ctx.attr("paddings")))
        cval = float(ctx.attr("value", 0.0))
        axes = list(range(n))
    else:
        pads = vector(ctx, 1, "pads")
        if ctx.has(2) and int(np.prod(shape(rest[1]))) != 1:
            raise ctx.fail(f"constant_value has shape {shape(rest[1])}; it must be a scalar or one element")
        if ctx.has(2) and ctx.inputs[2] not in ctx.consts:
            t = rest[1]  # a constant value computed at run time: read it in the kernel
            cval = t[(0,) * len(t.shape)]
        else:
            cv = ctx.value(2) if ctx.has(2) else None
            cval = cv.reshape(-1)[0].item() if cv is not None and cv.size else 0
        axes = [norm_axis(a, n) for a in ints(ctx.value(3))] if ctx.has(3) else list(range(n))
    if len(pads) != 2 * len(axes):
        raise ctx.fail(f"pads {pads} must hold 2 x {len(axes)} values (begin and end of each padded axis)")
    if len(set(axes)) != len(axes):
        raise ctx.fail(f"axes {axes} name an axis twice")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.fail(f"mode {mode!r} is not one of constant, reflect, edge, wrap")
    lo, hi = [0] * n, [0] * n
    for k, a in enumerate(axes):
        lo[a], hi[a] = pads[k], pads[k + len(axes)]
    for a in range(n):
        if s[a] + lo[a] + hi[a] < 0:
            raise ctx.fail(f"pads {pads} crop axis {a} of size {s[a]} below 0")
        left = s[a] + min(lo[a], 0) + min(hi[a], 0)
        if (lo[a] or hi[a]) and (mode == "reflect" and left < 2 and (lo[a] > 0 or hi[a] > 0)):
            raise ctx.fail(f"mode 'reflect' pads axis {a}, which has {left} element(s) to reflect: it needs at least 2 "
                           "(as ONNX Runtime requires)")
        if mode != "constant" and left < 1 and (lo[a] or hi[a]):
            raise ctx.fail(f"mode {mode!r} pads axis {a} of size {s[a]} by {lo[a]}, {hi[a]}: nothing of the "
                           "input is left to repeat (as ONNX Runtime requires, some must be)")
        if mode == "reflect" and max(lo[a], hi[a]) >= max(s[a], 1) and s[a] > 1:
            raise ctx.fail(f"mode 'reflect' pads axis {a} of size {s[a]} by {max(lo[a], hi[a])}: at most {s[a] - 1}")
    return pad_tensor(x, lo, hi, mode, cval)


def pad_tensor(x: Tensor, lo: list[int], hi: list[int], mode: str = "constant", cval: Any = 0) -> Tensor:
    """``x`` padded by ``lo``/``hi`` elements per axis (negative values crop)."""
    s = shape(x)
    n = len(s)
    out = tuple(s[k] + lo[k] + hi[k] for k in range(n))
    dt = dtype_of(x)

    def body(*i: Any) -> Any:
        idx, inside = [], None
        for k in range(n):
            j = i[k] - lo[k]
            if mode == "constant":
                if lo[k] > 0 or hi[k] > 0:
                    c = (j >= 0) & (j < s[k])
                    inside = c if inside is None else inside & c
            elif mode == "edge":
                j = E.max_expr(E.min_expr(j, s[k] - 1), 0)
            elif mode == "reflect":
                if s[k] > 1:
                    period = 2 * (s[k] - 1)
                    m = E.floormod(j, period)
                    j = te.if_then_else(m < s[k], m, period - m)
                else:
                    j = E.const(0)
            elif mode == "wrap":
                j = E.floormod(j, s[k])
            idx.append(j)
        v = x[tuple(idx)]
        if inside is not None:
            v = te.if_then_else(inside, v, cval if isinstance(cval, E.PrimExpr) else const_like(cval, dt))
        return v

    return compute(out, body, name=uname("pad"))


@register("Shape")
def shape_op(ctx: OpContext, x: Tensor) -> np.ndarray:
    """ONNX Shape (with ``start``/``end``): a constant."""
    s = shape(x)
    start, end = int(ctx.attr("start", 0)), ctx.attr("end")
    return np.array(s[slice(start, None if end is None else int(end))], dtype=np.int64)


@register("Size")
def size_op(ctx: OpContext, x: Tensor) -> np.ndarray:
    """ONNX Size: a constant."""
    return np.array(int(np.prod(shape(x))), dtype=np.int64)


@register("Constant")
def constant(ctx: OpContext) -> np.ndarray:
    """ONNX Constant (the frontend has turned its attribute into an array)."""
    return np.asarray(ctx.attr("value"))


@register("Range")
def range_op(ctx: OpContext, *xs: Tensor) -> np.ndarray:
    """ONNX Range: its length depends on its inputs' values, so it is computed at compile time."""
    start, limit, delta = (ctx.value(k) for k in range(3))
    if any(v.size != 1 for v in (start, limit, delta)):
        raise ctx.fail("start, limit and delta must be scalars")
    if delta.item() == 0:
        raise ctx.fail("delta must not be 0")
    n = max(int(np.ceil((limit.item() - start.item()) / delta.item())), 0)
    from .util import check_shape

    check_shape((n,), f"{ctx.op} node {ctx.node!r}", start.dtype.itemsize)
    return np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)


@register("ConstantOfShape")
def constant_of_shape(ctx: OpContext, s: Tensor) -> Tensor:
    """ONNX ConstantOfShape."""
    out = tuple(vector(ctx, 0, "shape"))
    if any(d < 0 for d in out):
        raise ctx.fail(f"shape {list(out)} has a negative dimension")
    v = ctx.attr("value")
    v = np.zeros(1, np.float32) if v is None else np.asarray(v).reshape(-1)
    dt = str(v.dtype)
    return compute(out, lambda *i: const_like(v[0].item(), dt), name=uname("const_of_shape"))


@register("EyeLike")
def eyelike(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX EyeLike with diagonal offset ``k``."""
    from .elemwise import onnx_dtype

    dt = onnx_dtype(ctx.attr("dtype"), ctx) if ctx.attr("dtype") is not None else dtype_of(x)
    k = int(ctx.attr("k", 0))
    return compute(
        shape(x), lambda i, j: te.if_then_else(j - i == k, const_like(1, dt), const_like(0, dt)), name=uname("eyelike")
    )


@register("OneHot")
def onehot(ctx: OpContext, ind: Tensor, depth: Tensor, values: Tensor) -> Tensor:
    """ONNX OneHot (negative indices count from the end)."""
    d = int(ctx.value(1).reshape(-1)[0])
    if d < 1:
        raise ctx.fail(f"depth {d} must be at least 1")
    si = shape(ind)
    a = norm_axis(ctx.attr("axis", -1), len(si) + 1)
    out = si[:a] + (d,) + si[a:]

    def body(*i: Any) -> Any:
        v = ind[tuple(i[:a] + i[a + 1 :])]
        v = cast(v, "int64") if not v.dtype.is_float else cast(te.trunc(v) if False else v, "int64")
        v = te.if_then_else(v < E.const(0, "int64"), v + E.const(d, "int64"), v)
        return te.if_then_else(v == cast(i[a], "int64"), values[1], values[0])

    return compute(out, body, name=uname("onehot"))


@register("Trilu")
def trilu(ctx: OpContext, x: Tensor, k: Tensor | None = None) -> Tensor:
    """ONNX Trilu (upper by default) with diagonal offset ``k``."""
    kk = int(ctx.value(1).reshape(-1)[0]) if ctx.has(1) else 0
    upper = int(ctx.attr("upper", 1))
    if len(shape(x)) < 2:
        raise ctx.fail(f"the input has rank {len(shape(x))}; Trilu needs at least 2")
    dt = dtype_of(x)

    def body(*i: Any) -> Any:
        r, c = i[-2], i[-1]
        keep = (c - r >= kk) if upper else (c - r <= kk)
        return te.if_then_else(keep, x[i], const_like(0, dt))

    return compute(shape(x), body, name=uname("trilu"))


@register("DepthToSpace")
def depth_to_space(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX DepthToSpace, DCR or CRD mode."""
    b = int(ctx.attr("blocksize"))
    mode = ctx.attr("mode", b"DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("DCR", "CRD"):
        raise ctx.fail(f"mode={mode!r} is not one of 'DCR', 'CRD'")
    if len(shape(x)) != 4 or b < 1 or shape(x)[1] % (b * b):
        raise ctx.fail(f"blocksize {b} must be >= 1 and its square divide the channels of a 4-D input, got {shape(x)}")
    n, c, h, w = shape(x)
    oc = c // (b * b)

    def body(i: Any, cc: Any, y: Any, xx: Any) -> Any:
        by, bx = E.floormod(y, b), E.floormod(xx, b)
        src_c = (by * b + bx) * oc + cc if mode == "DCR" else cc * b * b + by * b + bx
        return x[i, src_c, E.floordiv(y, b), E.floordiv(xx, b)]

    return compute((n, oc, h * b, w * b), body, name=uname("d2s"))


@register("SpaceToDepth")
def space_to_depth(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX SpaceToDepth, DCR (block offset outermost in the output channel) or CRD (channel
    outermost) mode."""
    b = int(ctx.attr("blocksize"))
    mode = ctx.attr("mode", b"DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("DCR", "CRD"):
        raise ctx.fail(f"mode={mode!r} is not one of 'DCR', 'CRD'")
    if len(shape(x)) != 4 or b < 1 or shape(x)[2] % b or shape(x)[3] % b:
        raise ctx.fail(f"blocksize {b} must be >= 1 and divide the height and width of a 4-D input, got {shape(x)}")
    n, c, h, w = shape(x)

    def body(i: Any, cc: Any, y: Any, xx: Any) -> Any:
        if mode == "DCR":
            blk, src_c = E.floordiv(cc, c), E.floormod(cc, c)
        else:
            src_c, blk = E.floordiv(cc, b * b), E.floormod(cc, b * b)
        return x[i, src_c, y * b + E.floordiv(blk, b), xx * b + E.floormod(blk, b)]

    return compute((n, c * b * b, h // b, w // b), body, name=uname("s2d"))


@register("ReverseSequence")
def reverse_sequence(ctx: OpContext, x: Tensor, lens: Tensor) -> Tensor:
    """ONNX ReverseSequence."""
    ba, ta = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
    s = shape(x)
    if len(s) < 2 or {ba, ta} != {0, 1} or shape(lens) != (s[ba],):
        raise ctx.fail(f"batch_axis {ba} and time_axis {ta} must be 0 and 1 and sequence_lens one length per batch "
                       f"entry, got input {s} and sequence_lens {shape(lens)}")
    if ctx.has(1) and ctx.inputs[1] in ctx.consts:
        v = np.asarray(ctx.consts[ctx.inputs[1]])
        if v.size and (v.min() < 0 or v.max() > s[ta]):
            raise ctx.fail(f"sequence_lens {v.tolist()} must lie in [0, {s[ta]}]")

    def body(*i: Any) -> Any:
        # a run-time length is clamped to [0, time steps], so the read stays inside the input
        n = E.max_expr(E.min_expr(cast(lens[i[ba]], "int32"), E.const(s[ta], "int32")), E.const(0, "int32"))
        idx = list(i)
        idx[ta] = te.if_then_else(i[ta] < n, n - 1 - i[ta], i[ta])
        return x[tuple(idx)]

    return compute(shape(x), body, name=uname("revseq"))


def _scatter_core(
    name: str,
    data: Tensor,
    positions: list[tuple[Any, ...]],
    upd_shape: tuple[int, ...],
    target_of: Any,
    value_of: Any,
    reduction: str,
) -> Tensor:
    """out[j] = data[j] combined with every update whose target is j (in update order)."""
    s = shape(data)
    nupd = int(np.prod(upd_shape)) if upd_shape else 1
    r = te.reduce_axis((0, max(nupd, 1)), name="u")

    def upd_index(lin: Any) -> tuple[Any, ...]:
        return _unravel(lin, upd_shape)

    idt = "int32"
    last = te.comm_reducer(
        lambda a, b: (te.if_then_else(b[0] > a[0], b[0], a[0]), te.if_then_else(b[0] > a[0], b[1], a[1])),
        lambda t0, t1: (E.const(-1, t0), const_like(0, t1)),
        name="last",
    )
    combine = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "max": E.max_expr, "min": E.min_expr}

    def hit(j: Any, u: tuple[Any, ...]) -> Any:
        tgt = target_of(u)
        cond = None
        for a, b in zip(tgt, j):
            c = a == b
            cond = c if cond is None else cond & c
        return cond

    if reduction == "none":
        res = compute(
            s,
            lambda *j: last((cast(r.var, idt), value_of(upd_index(r.var))), axis=r, where=hit(j, upd_index(r.var))),
            name=uname(name + "_red"),
        )
        return compute(s, lambda *j: te.if_then_else(res[0][j] >= 0, res[1][j], data[j]), name=uname(name))
    f = combine[reduction]
    red = te.comm_reducer(
        lambda a, b: (
            E.max_expr(a[0], b[0]),
            te.if_then_else(a[0] < 0, b[1], te.if_then_else(b[0] < 0, a[1], f(a[1], b[1]))),
        ),
        lambda t0, t1: (E.const(-1, t0), const_like(0, t1)),
        name="scat",
    )
    res = compute(
        s,
        lambda *j: red((cast(r.var, idt), value_of(upd_index(r.var))), axis=r, where=hit(j, upd_index(r.var))),
        name=uname(name + "_red"),
    )
    return compute(s, lambda *j: te.if_then_else(res[0][j] >= 0, f(data[j], res[1][j]), data[j]), name=uname(name))


def _reduction(ctx: OpContext) -> str:
    red = ctx.attr("reduction", b"none")
    red = red.decode() if isinstance(red, bytes) else str(red)
    if red not in ("none", "add", "mul", "max", "min"):
        raise ctx.fail(f"reduction {red!r} is not one of none, add, mul, max, min")
    return red


def _check_indices(ctx: OpContext, i: int, n: int, what: str, count: int) -> None:
    """Indices (input ``i``, ``count`` of them) into an axis of size ``n``: constant ones must lie
    in [-n, n-1], as ONNX Runtime checks; run-time ones are clamped into the axis by
    :func:`_wrap` instead (ONNX Runtime fails the call), which needs a non-empty axis."""
    if n == 0 and count:
        raise ctx.fail(f"{count} index(es) into {what}, which is empty")
    if ctx.has(i) and ctx.inputs[i] in ctx.consts:
        v = np.asarray(ctx.consts[ctx.inputs[i]])
        if v.size and (v.min() < -n or v.max() >= n):
            bad = v[(v < -n) | (v >= n)].reshape(-1)[0]
            raise ctx.fail(f"index {bad} is outside [-{n}, {n - 1}] ({what} has size {n})")


@register("ScatterElements", "Scatter", pattern="opaque")
def scatter_elements(ctx: OpContext, data: Tensor, ind: Tensor, upd: Tensor) -> Tensor:
    """ONNX ScatterElements (reduction none/add/mul/max/min)."""
    s = shape(data)
    a = norm_axis(ctx.attr("axis", 0), len(s))
    red = _reduction(ctx)
    si = shape(ind)
    if si != shape(upd) or len(si) != len(s) or any(si[d] > s[d] for d in range(len(s)) if d != a):
        raise ctx.fail(f"indices {si} and updates {shape(upd)} must have one shape, of the data's rank {len(s)} and "
                       f"at most its size on every axis but {a}")
    _check_indices(ctx, 1, s[a], f"axis {a}", 0)

    def target_of(u: tuple[Any, ...]) -> tuple[Any, ...]:
        t = list(u)
        t[a] = _wrap(ind[u], s[a])
        return tuple(t)

    return _scatter_core("scatter", data, [], shape(ind), target_of, lambda u: upd[u], red)


@register("ScatterND", pattern="opaque")
def scatter_nd(ctx: OpContext, data: Tensor, ind: Tensor, upd: Tensor) -> Tensor:
    """ONNX ScatterND (reduction none/add/mul/max/min)."""
    s, si = shape(data), shape(ind)
    if not si or not 1 <= si[-1] <= len(s) or shape(upd) != si[:-1] + s[si[-1]:]:
        raise ctx.fail(f"indices {si} and updates {shape(upd)} do not fit data {s} (updates must have shape "
                       "indices.shape[:-1] + data.shape[indices.shape[-1]:])")
    q = si[-1]
    red = _reduction(ctx)
    if ctx.has(1) and ctx.inputs[1] in ctx.consts:
        v = np.asarray(ctx.consts[ctx.inputs[1]]).reshape(-1, q)
        for k in range(q):
            if v.size and (v[:, k].min() < -s[k] or v[:, k].max() >= s[k]):
                raise ctx.fail(f"an index of axis {k} is outside [-{s[k]}, {s[k] - 1}]")

    def target_of(u: tuple[Any, ...]) -> tuple[Any, ...]:
        lead = u[: len(si) - 1]
        return tuple(_wrap(ind[tuple(lead) + (k,)], s[k]) for k in range(q)) + tuple(u[len(si) - 1 :])

    return _scatter_core("scatter_nd", data, [], shape(upd), target_of, lambda u: upd[u], red)


@register("CenterCropPad")
def center_crop_pad(ctx: OpContext, x: Tensor, s: Tensor) -> Tensor:
    """ONNX CenterCropPad: crop or zero-pad each given axis to the target size, centred."""
    shp = shape(x)
    n = len(shp)
    target = ints(ctx.value(1))
    axes = [norm_axis(a, n) for a in ints(ctx.attr("axes"))] or list(range(n))
    lo, hi = [0] * n, [0] * n
    for a, t in zip(axes, target):
        diff = t - shp[a]
        if diff >= 0:  # pad: an odd element goes to the end
            lo[a], hi[a] = diff // 2, diff - diff // 2
        else:  # crop: an odd element is cut from the end
            cut = -diff
            lo[a], hi[a] = -(cut // 2), -(cut - cut // 2)
    return pad_tensor(x, lo, hi)
