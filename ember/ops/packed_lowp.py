"""Matrix products of narrow types on the packed GEMM: the right operand converted while it is
packed, the product accumulated in a wide type.

The float32 product (:func:`ember.ops.nn.matmul_tensor`) packs a 2-D right operand into
``nr``-wide column panels ``[N / nr, K, nr]`` (stage tag ``"gemm_pack"``, folded at compile time
when the operand is a constant) and computes over whole panels in a stage tagged
``"conv_packed"``, which the CPU strategy schedules as its register-tiled GEMM. The same
structure serves the narrow types: the panels hold the operand already converted to the
accumulation type (int8/uint8 minus its zero point as int32; float16/bfloat16 as float32), and
the left operand is converted as it is read, so the kernel's inner loop is the wide type's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .layout import Layout
from .util import cast, compute, const_like, uname

#: ``a_at(batch_index, m, k)`` / ``b_at(k, n)``: an element of an operand, already in the
#: accumulation type.
ALoad = Callable[[tuple[Any, ...], Any, Any], E.PrimExpr]
BLoad = Callable[[Any, Any], E.PrimExpr]


def packed_product(
    a_at: ALoad,
    b_at: BLoad,
    batch: tuple[int, ...],
    M: int,
    K: int,
    N: int,
    acc: str,
    strategy: Layout,
    name: str = "lp_matmul",
) -> Tensor:
    """``sum_k a_at(i, m, k) * b_at(k, n)`` of shape ``batch + (M, N)`` in type ``acc``
    (``int32`` or ``float32``), with ``b_at`` packed into panels of the strategy's GEMM width
    (the last panel padded with zeros; a constant operand is packed at compile time) and the
    product scheduled as the packed GEMM."""
    nr = strategy.gemm_panel_width("float32")
    npanel = -(-N // nr)
    rows = int(np.prod(batch)) if batch else 1
    bp = pack_panels(npanel, K, nr, lambda no, kk, ni: te.if_then_else(
        no * nr + ni < N, b_at(kk, E.min_expr(no * nr + ni, N - 1)), const_like(0, acc)), name)
    k = te.reduce_axis((0, K), name="k")

    def arow(r: Any) -> tuple[Any, ...]:
        return batch_index(batch, r)

    cv = compute(
        (rows, M, npanel * nr),
        lambda r, m, n: te.sum(a_at(arow(r), m, k.var) * bp[E.floordiv(n, nr), k.var, E.floormod(n, nr)], axis=k),
        name=uname(name + "_gemm"),
        tag="conv_packed",
        attrs={"nr": nr, "K": K},
        workspace=True,
    )

    return batch_view(cv, batch, M, N, name)


def pack_panels(npanel: int, K: int, nr: int, body: Callable[..., E.PrimExpr], name: str) -> Tensor:
    """The right operand's column panels ``[npanel, K, nr]`` with ``body(panel, k, lane)`` (zeros
    past the last column are the body's job): a workspace tagged ``"gemm_pack"`` that the CPU
    strategy schedules as GEMM packing and that is folded at compile time for a constant."""
    return compute((npanel, K, nr), body, name=uname(name + "_pack"), tag="gemm_pack", attrs={"panel_axis": 0},
                   constant_layout=True, workspace=True)


def batch_index(batch: tuple[int, ...], r: Any) -> tuple[Any, ...]:
    """The index into ``batch`` of the flattened (row-major) batch row ``r``."""
    idx, rest = [], r
    for d in reversed(batch):
        idx.append(E.floormod(rest, d))
        rest = E.floordiv(rest, d)
    return tuple(reversed(idx))


def wide_copy(a: Tensor, body: Callable[..., E.PrimExpr], name: str) -> Tensor:
    """The left operand converted to the accumulation type once, into a workspace: the GEMM's
    inner loop then broadcasts wide values as the float32 product does, instead of converting
    each element once per column panel."""
    return compute(tuple(int(E.const_int_value(d)) for d in a.shape), body,  # type: ignore[arg-type]
                   name=uname(name), materialize=True, workspace=True)


def lowp_matmul(a: Tensor, b: Tensor, M: int, K: int, N: int, strategy: Layout) -> Tensor:
    """``a @ b`` for float16/bfloat16 operands and a 2-D ``b`` (``a`` of shape ``batch + (M, K)``):
    ``b`` packed as float32 panels, ``a`` converted as it is read, the sum accumulated in
    float32 and rounded once to the operands' type (as the unpacked product does)."""
    dt = str(a.dtype)
    batch = tuple(int(E.const_int_value(d)) for d in a.shape[:-2])  # type: ignore[arg-type]
    a32 = wide_copy(a, lambda *i: cast(a[i], "float32"), "lp_a")

    def a_at(li: tuple[Any, ...], m: Any, kk: Any) -> E.PrimExpr:
        return a32[tuple(li) + (m, kk)]

    acc = packed_product(a_at, lambda kk, n: cast(b[kk, n], "float32"), batch, M, K, N, "float32", strategy,
                         "lp_matmul")
    return compute(batch + (M, N), lambda *i: cast(acc[i], dt), name=uname("lp_matmul_round"))


def lowp_conv2d(
    x: Tensor, w: Tensor, bias: Tensor | None, packed_conv: Callable[[Tensor, Tensor, Tensor | None], Tensor]
) -> Tensor:
    """A float16/bfloat16 2-D convolution on the float32 packed convolution ``packed_conv(x32,
    w32, bias32)``: the image converted once into a float32 workspace, the weights converted as
    they are packed (a constant at compile time), the bias read as float32, the result rounded
    once to the operands' type."""
    dt = str(x.dtype)
    x32 = wide_copy(x, lambda *i: cast(x[i], "float32"), "lp_conv_x")
    w32 = compute(tuple(int(E.const_int_value(d)) for d in w.shape),  # type: ignore[arg-type]
                  lambda *i: cast(w[i], "float32"), name=uname("lp_conv_w"))
    b32 = None
    if bias is not None:
        b32 = compute(tuple(int(E.const_int_value(d)) for d in bias.shape),  # type: ignore[arg-type]
                      lambda *i: cast(bias[i], "float32"), name=uname("lp_conv_b"))
    out = packed_conv(x32, w32, b32)
    return compute(tuple(int(E.const_int_value(d)) for d in out.shape),  # type: ignore[arg-type]
                   lambda *i: cast(out[i], dt), name=uname("lp_conv_round"))


def batch_view(cv: Tensor, batch: tuple[int, ...], M: int, N: int, name: str) -> Tensor:
    """``cv[rows, M, >= N]`` (rows: the flattened ``batch``, row-major) viewed as ``batch + (M, N)``."""

    def view(*i: Any) -> Any:
        r: Any = E.const(0)
        for d, v in zip(batch, i[:-2]):
            r = r * d + v
        return cv[r, i[-2], i[-1]]

    return compute(batch + (M, N), view, name=uname(name))
