"""Small helpers shared by the operator definitions."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import te
from ..errors import EmberError
from ..ir import expr as E
from ..te import Tensor

_counter = itertools.count()


def reset_names() -> None:
    """Restart stage numbering, so the same kernel built twice prints (and caches) the same."""
    global _counter
    _counter = itertools.count()


def uname(base: str) -> str:
    """A fresh stage name (valid identifier) starting with ``base``."""
    clean = "".join(c if c.isalnum() else "_" for c in base) or "t"
    if clean[0].isdigit():
        clean = "t" + clean
    return f"{clean}_{next(_counter)}"


def shape(t: Tensor) -> tuple[int, ...]:
    """The static shape of ``t`` as Python ints."""
    out = []
    for s in t.shape:
        v = E.const_int_value(s)
        if v is None:
            raise EmberError(
                f"tensor {t.name} has a symbolic dimension {s}; ember's graph compiler needs static shapes"
            )
        out.append(v)
    return tuple(out)


def dtype_of(t: Tensor) -> str:
    """The dtype of ``t`` as a string."""
    return str(t.dtype)


def norm_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """``axis`` made non-negative, checked against ``ndim``."""
    a = int(axis)
    if a < 0:
        a += ndim
    if not 0 <= a < max(ndim, 1):
        raise EmberError(f"{what} {axis} is out of range for a tensor of {ndim} dimension(s)")
    return a


def bcast_load(t: Tensor, out_shape: Sequence[int], idx: Sequence[Any]) -> E.PrimExpr:
    """``t`` read at output index ``idx`` under NumPy broadcasting to ``out_shape``; an
    EmberError when ``t``'s shape does not broadcast to it (the read would leave ``t``)."""
    ts = shape(t)
    off = len(out_shape) - len(ts)
    if off < 0 or any(d != 1 and d != out_shape[off + k] for k, d in enumerate(ts)):
        raise EmberError(f"shape {ts} does not broadcast to {tuple(out_shape)}")
    ind = tuple(0 if ts[k] == 1 and out_shape[off + k] != 1 else idx[off + k] for k in range(len(ts)))
    return t[ind]


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting of static shapes, with an error naming them."""
    try:
        return tuple(int(x) for x in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError as exc:
        raise EmberError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast together") from exc


def cast(x: Any, dt: str) -> E.PrimExpr:
    """``x`` converted to ``dt`` with NumPy's rules (to bool is ``x != 0``)."""
    x = E.convert(x)
    if dt == "bool":
        return x if x.dtype.is_bool else (x != E.const(0, x.dtype))
    if x.dtype.is_bool:
        return te.if_then_else(x, E.const(1, dt), E.const(0, dt))
    return E.cast(dt, x)


def compute(
    shp: Sequence[int],
    f: Callable[..., Any],
    name: str,
    tag: str = "",
    attrs: dict[str, Any] | None = None,
    *,
    materialize: bool = False,
    constant_layout: bool = False,
    workspace: bool = False,
) -> Any:
    """``te.compute`` whose function takes the indices as positional arguments, whatever its
    signature looks like (defaults, ``*rest``); the flags are :func:`ember.te.compute`'s. An
    EmberError for a negative dimension or a tensor larger than :func:`memory_limit`."""
    check_shape(shp, name)
    return te.compute(
        tuple(shp),
        lambda *i: f(*i),
        name=name,
        tag=tag,
        attrs=attrs,
        materialize=materialize,
        constant_layout=constant_layout,
        workspace=workspace,
    )


def memory_limit(fresh: bool = False) -> int:
    """The most bytes a model may take: ``$EMBER_MEMORY_LIMIT`` (bytes, or with a ``K``/``M``/``G``/``T``
    suffix, powers of 1024), else the machine's available memory (``MemAvailable`` of
    ``/proc/meminfo``; physical memory where that file is missing). Read once per process
    unless ``fresh``."""
    global _LIMIT
    if _LIMIT is None or fresh:
        _LIMIT = _read_memory_limit()
    return _LIMIT


_LIMIT: int | None = None


def _read_memory_limit() -> int:
    env = os.environ.get("EMBER_MEMORY_LIMIT", "").strip()
    if env:
        scale = {"K": 1, "M": 2, "G": 3, "T": 4}.get(env[-1].upper(), 0)
        try:
            return int(float(env[:-1] if scale else env) * 1024**scale)
        except ValueError as exc:
            raise EmberError(f"EMBER_MEMORY_LIMIT={env!r} is not a size (bytes, or a number with K/M/G/T)") from exc
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass  # no /proc/meminfo (not Linux): fall back to the physical memory below
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def check_shape(shp: Sequence[int], what: str, itemsize: int = 1) -> None:
    """EmberError when static shape ``shp`` has a negative dimension, or its ``itemsize``-byte
    elements would take more than :func:`memory_limit`."""
    n = 1
    for d in shp:
        if isinstance(d, (int, np.integer)):
            if d < 0:
                raise EmberError(f"{what}: shape {tuple(shp)} has a negative dimension")
            n *= int(d)
    if n * itemsize > memory_limit():
        raise EmberError(
            f"{what}: a tensor of shape {tuple(shp)} would take {n * itemsize / 2**30:.1f} GiB, more than the "
            f"{memory_limit() / 2**30:.1f} GiB limit (available memory, or EMBER_MEMORY_LIMIT)"
        )


def elementwise(name: str, inputs: Sequence[Tensor], f: Callable[..., Any], out_dtype: str | None = None) -> Tensor:
    """A broadcasting elementwise tensor computing ``f(*loads)``."""
    out = broadcast_shapes(*[shape(t) for t in inputs])

    def body(*i: Any) -> Any:
        v = E.convert(f(*[bcast_load(t, out, i) for t in inputs]))
        return cast(v, out_dtype) if out_dtype is not None and str(v.dtype) != out_dtype else v

    return te.compute(out, body, name=uname(name))


def const_like(value: float | int | bool, dt: str) -> E.PrimExpr:
    """A constant of dtype ``dt``."""
    if dt == "bool":
        return E.const(bool(value), "bool")
    if "int" in dt:
        return E.const(int(value), dt)
    return E.const(float(value), dt)


def identity(name: str, t: Tensor) -> Tensor:
    """A copy of ``t``."""
    return te.compute(shape(t), lambda *i: t[i], name=uname(name))


def from_numpy(value: np.ndarray, name: str) -> Tensor:
    """A small constant array as a computed tensor (elements as immediate constants)."""
    flat = value.reshape(-1)
    dt = str(value.dtype)
    if flat.size > 64:
        raise EmberError(f"{name}: constant of {flat.size} elements is too large to embed")

    def body(*i: Any) -> Any:
        lin = E.const(0)
        for k, d in enumerate(value.shape):
            lin = lin * d + i[k]
        out = const_like(flat[-1].item(), dt)
        for j in range(flat.size - 2, -1, -1):
            out = te.if_then_else(lin == j, const_like(flat[j].item(), dt), out)
        return out

    return te.compute(value.shape, body, name=uname(name))


def ints(v: Any) -> list[int]:
    """A list of Python ints from an attribute or a constant array."""
    if v is None:
        return []
    return [int(x) for x in np.asarray(v).reshape(-1)]
