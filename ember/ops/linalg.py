"""Linear-algebra operators: ``Det``.

``Det`` is Gaussian elimination with partial pivoting, unrolled over the (static) matrix size:
each elimination step is one stage over the whole batch of matrices, computed in float64.
"""

from __future__ import annotations

from typing import Any

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import cast, compute, dtype_of, shape, uname

_FLOATS = ("float16", "float32", "float64")


@register("Det", pattern="opaque")
def det(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX Det: the determinant of each ``M x M`` matrix in the last two axes of ``x``."""
    dt = dtype_of(x)
    if dt not in _FLOATS:
        raise ctx.fail(f"X has element type {dt}; Det takes float16, float32 or float64")
    s = shape(x)
    if len(s) < 2 or s[-1] != s[-2]:
        raise ctx.fail(f"X must end in two equal dimensions (..., M, M), got shape {s}")
    M = s[-1]
    batch = s[:-2]
    nb = len(batch)
    f64 = "float64"
    zero, one = E.const(0.0, f64), E.const(1.0, f64)

    def load0(b: tuple[Any, ...], i: Any, j: Any) -> Any:
        return cast(x[b + (i, j)], f64)

    a: Any = load0
    sign: Any = lambda b: one  # noqa: E731
    for k in range(M - 1):
        # pivot: the row at or below k with the largest |a[row, k]| (the first one on ties)
        def pivot(*b: Any, a: Any = a, k: int = k) -> Any:
            best, best_v = E.const(k, "int32"), te.abs(a(b, k, k))
            for r in range(k + 1, M):
                v = te.abs(a(b, r, k))
                take = v > best_v
                best = te.if_then_else(take, E.const(r, "int32"), best)
                best_v = te.if_then_else(take, v, best_v)
            return best

        piv = compute(batch, pivot, name=uname("det_pivot"), workspace=True)

        def swapped(b: tuple[Any, ...], i: Any, j: Any, a: Any = a, k: int = k, piv: Tensor = piv) -> Any:
            p = piv[b]
            row = te.if_then_else(i == k, p, te.if_then_else(i == p, E.const(k, "int32"), cast(i, "int32")))
            return a(b, row, j)

        def step(*idx: Any, sw: Any = swapped, k: int = k) -> Any:
            b, i, j = idx[:nb], idx[nb], idx[nb + 1]
            d = sw(b, k, k)
            factor = te.if_then_else(d == zero, zero, sw(b, i, k) / te.if_then_else(d == zero, one, d))
            return te.if_then_else(i > k, sw(b, i, j) - factor * sw(b, k, j), sw(b, i, j))

        st = compute(batch + (M, M), step, name=uname("det_step"), workspace=True)
        a = lambda b, i, j, st=st: st[b + (i, j)]  # noqa: E731
        sign = lambda b, sg=sign, piv=piv, k=k: sg(b) * te.if_then_else(piv[b] == k, one, -one)  # noqa: E731

    def result(*b: Any) -> Any:
        v = sign(b)
        for k in range(M):
            v = v * a(b, k, k)
        return cast(v, dt)

    return compute(batch, result, name=uname("det"))
