"""int8 matrix products on x86 VNNI (``vpdpbusd``: 4 unsigned x signed byte products summed
into an int32 lane).

Both operands are stored as int32 words of four consecutive reduction elements: the left one
row by row (``[..., M, ceil(K / 4)]``, a workspace), the right one in column panels of the GEMM
width ``[N / nr, ceil(K / 4), nr]`` (tag ``"gemm_pack"``: a constant operand is packed at compile
time), K padded with zero bytes. The packed GEMM stage (tag ``"conv_packed"``) sums
``vpdpbusd(0, a_word, b_word)`` over the words, so the CPU strategy's register-tiled schedule
applies unchanged and each vector lane gets 4 multiply-adds per instruction.

Signs. ``vpdpbusd`` multiplies unsigned bytes of ``a`` with signed bytes of ``b``. The caller
gives ``a`` as unsigned bytes ``au`` (an int8 operand plus 128) and ``b`` as signed bytes ``bs``
(a uint8 operand minus 128) with the offsets ``ca`` and ``cb`` such that the wanted operands are
``au - ca`` and ``bs - cb`` (zero points included). Then, exactly in wrapping int32 arithmetic,

    sum_k (au - ca)(bs - cb) = sum_k au bs - cb * sum_k au - ca * sum_k bs + K ca cb,

with the row sums of ``au`` computed next to its words and the column sums of ``bs`` next to its
panels (both skipped where the other offset is zero). No step saturates: ``vpdpbusd`` wraps and a
product of bytes is at most 255 * 128.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import te
from ..backends.cpu.dot4 import OP, vnni_width
from ..ir import expr as E
from ..te import Tensor
from .layout import CPULayout, Layout
from .packed_lowp import batch_index, pack_panels
from .util import cast, compute, uname

#: ``au(batch_index, m, k)``: the left operand as an unsigned byte value (int32 in [0, 255]).
AByte = Callable[[tuple[Any, ...], Any, Any], E.PrimExpr]
#: ``bs(k, n)``: the right operand as a signed byte value (int32 in [-128, 127]).
BByte = Callable[[Any, Any], E.PrimExpr]
#: ``ca(batch_index, m)`` / ``cb(n)``: the offsets (int32), or None where zero.
AOffset = Callable[[tuple[Any, ...], Any], E.PrimExpr]
BOffset = Callable[[Any], E.PrimExpr]


def has_vnni(strategy: Layout) -> bool:
    """Whether ``strategy`` is a CPU target's layout whose CPU has AVX512-VNNI or AVX-VNNI."""
    target = getattr(strategy, "target", None)
    if isinstance(strategy, CPULayout) or target is not None:
        return target is not None and not target.is_gpu and vnni_width(target) > 0
    return False


def _word(byte: Callable[[int], E.PrimExpr], K: int, k4: Any) -> E.PrimExpr:
    """The uint32 word of bytes ``byte(4 k4 + j)`` (j = 0..3, low byte first), zero bytes past ``K``."""
    w: E.PrimExpr = E.const(0, "uint32")
    for j in range(4):
        k = k4 * 4 + j
        v = cast(cast(byte(E.min_expr(k, K - 1)), "uint8"), "uint32")
        v = te.if_then_else(k < K, v, E.const(0, "uint32"))
        w = w + (v * (1 << (8 * j)) if j else v)
    return w


def vnni_product(
    au: AByte,
    bs: BByte,
    ca: AOffset | None,
    cb: BOffset | None,
    batch: tuple[int, ...],
    M: int,
    K: int,
    N: int,
    strategy: Layout,
    name: str = "vnni",
) -> Tensor:
    """int32 ``sum_k (au(i, m, k) - ca(i, m)) * (bs(k, n) - cb(n))`` of shape ``batch + (M, N)``
    (module docstring: the operands as byte words, ``bs`` packed into panels of the strategy's
    GEMM width, the sum on ``vpdpbusd``). Exact for every byte input while the result and the
    partial sums fit in int32 (``K`` below 65,000 is always safe). The target must have VNNI
    (:func:`has_vnni`); its code generator raises otherwise."""
    nr = strategy.gemm_panel_width("float32")
    npanel = -(-N // nr)
    K4 = -(-K // 4)
    rows = 1
    for d in batch:
        rows *= d

    def bidx(r: Any) -> tuple[Any, ...]:
        return batch_index(batch, r)

    aw = compute((rows, M, K4), lambda r, m, k4: _word(lambda k: au(bidx(r), m, k), K, k4),
                 name=uname(name + "_awords"), materialize=True, workspace=True)
    bw = pack_panels(npanel, K4, nr, lambda no, k4, ni: te.if_then_else(
        no * nr + ni < N, _word(lambda k: bs(k, E.min_expr(no * nr + ni, N - 1)), K, k4), E.const(0, "uint32")), name)
    kw = te.reduce_axis((0, K4), name="k4")
    zero = E.const(0, "int32")
    cv = compute(
        (rows, M, npanel * nr),
        lambda r, m, n: te.sum(E.Call(zero.dtype, OP,
                                      (zero, aw[r, m, kw.var], bw[E.floordiv(n, nr), kw.var, E.floormod(n, nr)])),
                               axis=kw),
        name=uname(name + "_gemm"),
        tag="conv_packed",
        attrs={"nr": nr, "K": K4},
        workspace=True,
    )
    rsum = csum = None
    ones = E.const(0x01010101, "uint32")
    if cb is not None:
        # the bytes of each row's words summed by the same instruction against bytes of 1
        kr = te.reduce_axis((0, K4), name="k4")
        rsum = compute((rows, M), lambda r, m: te.sum(E.Call(zero.dtype, OP, (zero, aw[r, m, kr.var], ones)), axis=kr),
                       name=uname(name + "_rowsum"))
    if ca is not None:
        # the signed bytes of each packed column summed against unsigned bytes of 1
        kc = te.reduce_axis((0, K4), name="k4")
        csum = compute((N,), lambda n: te.sum(E.Call(zero.dtype, OP, (
            zero, ones, bw[E.floordiv(n, nr), kc.var, E.floormod(n, nr)])), axis=kc), name=uname(name + "_colsum"))

    def out(*i: Any) -> E.PrimExpr:
        r: Any = E.const(0)
        for d, v in zip(batch, i[:-2]):
            r = r * d + v
        m, n = i[-2], i[-1]
        v = cv[r, m, n]
        if cb is not None and rsum is not None:
            v = v - cb(n) * rsum[r, m]
        if ca is not None and csum is not None:
            cav = ca(tuple(i[:-2]), m)
            v = v - cav * csum[n]
            if cb is not None:
                v = v + cav * cb(n) * K
        return v

    return compute(batch + (M, N), out, name=uname(name))
