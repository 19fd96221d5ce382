"""Neural-network operators: matrix products, convolutions, pooling, normalizations, resize.

Convolutions and matrix products carry a ``tag`` (``"conv"``, ``"matmul"``, ``"conv_packed"``,
``"gemm_pack"``) and ``attrs`` the strategies (:mod:`ember.strategy`) read to pick a fast
schedule; their compute definitions here are the reference. Float32 products run as a GEMM over a
right operand packed into column panels whose width the target's strategy chooses
(:meth:`~ember.strategy.Strategy.gemm_panel_width`, from :attr:`OpContext.strategy`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .depthwise import depthwise_conv2d, is_depthwise
from .layout import Layout, host_layout
from .packed_lowp import batch_index, batch_view, lowp_conv2d, lowp_matmul
from .reduce import acc_dtype, reduce_tensor
from .registry import OpContext, register
from .transform import pad_tensor
from .util import bcast_load, broadcast_shapes, cast, compute, const_like, dtype_of, ints, norm_axis, shape, uname


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# -- matrix products ------------------------------------------------------------------------------
def matmul_tensor(a: Tensor, b: Tensor, name: str = "matmul", strategy: Layout | None = None) -> Tensor:
    """NumPy ``matmul`` semantics (batch broadcasting, 1-D operands promoted then squeezed).
    ``strategy`` (the host CPU's when None) chooses the packed layout of a float32 product."""
    sa, sb = shape(a), shape(b)
    a1, b1 = len(sa) == 1, len(sb) == 1
    ea = (1,) + sa if a1 else sa
    eb = sb + (1,) if b1 else sb
    M, K = ea[-2], ea[-1]
    K2, N = eb[-2], eb[-1]
    if K != K2:
        raise ValueError(f"matmul of {sa} and {sb}: inner dimensions {K} and {K2} differ")
    batch = broadcast_shapes(ea[:-2], eb[:-2])
    out = batch + ((M,) if not a1 else ()) + ((N,) if not b1 else ())
    intrin = (strategy or host_layout()).matrix_intrinsic(dtype_of(a)) if dtype_of(a) == dtype_of(b) else None
    if intrin is None and len(sb) == 2 and not a1 and dtype_of(a) == dtype_of(b) == "float32" and K >= 16 \
            and N >= 16 and M * N * K >= 4096:
        return _matmul_packed(a, b, batch, M, K, N, strategy or host_layout())
    if intrin is None and len(sb) > 2 and not a1 and tuple(ea[:-2]) == tuple(eb[:-2]) == tuple(batch) \
            and dtype_of(a) == dtype_of(b) == "float32" and K >= 16 and N >= 16 and M * N * K >= 4096 \
            and (strategy or host_layout()).packs_batched_gemm():
        return _batched_matmul_packed(a, b, batch, M, K, N, strategy or host_layout())
    if intrin is None and len(sb) == 2 and not a1 and dtype_of(a) == dtype_of(b) in ("float16", "bfloat16") \
            and K >= 16 and N >= 16 and M * N * K >= 4096:
        return lowp_matmul(a, b, M, K, N, strategy or host_layout())  # converted while packing
    if intrin is not None and not a1 and not b1 and K >= 16 and N >= 16 and M * N >= 256:
        lead = ea[:-2]

        def a_at(li: tuple[Any, ...], m: Any, kk: Any) -> Any:
            return a[tuple(li) + (m, kk)]

        if len(sb) == 2:
            return tensorcore_product(a_at, lambda kk, n: b[kk, n], lead, M, N, K, dtype_of(a), intrin, name,
                                      layout=strategy)
        if tuple(eb[:-2]) == tuple(lead):  # a batch of products (attention), no broadcasting
            cacc = tensorcore_accumulator(a_at, lambda li, kk, n: b[tuple(li) + (kk, n)], lead, M, N, K,
                                          dtype_of(a), intrin, name, b_batched=True, layout=strategy)
            return compute(lead + (M, N), lambda *i: cast(cacc[i], dtype_of(a)), name=uname(name + "_round"))
    k = te.reduce_axis((0, K), name="k")
    nb = len(batch)
    dt = dtype_of(a)
    wide = acc_dtype(dt) if dtype_of(b) == dt else dt  # float16 products accumulate in float32

    def body(*i: Any) -> Any:
        bi = i[:nb]
        rest = list(i[nb:])
        m = rest.pop(0) if not a1 else E.const(0)
        n = rest.pop(0) if not b1 else E.const(0)
        ia = tuple(
            0 if ea[:-2][q] == 1 and batch[len(batch) - len(ea[:-2]) + q] != 1 else bi[len(batch) - len(ea[:-2]) + q]
            for q in range(len(ea) - 2)
        )
        ib = tuple(
            0 if eb[:-2][q] == 1 and batch[len(batch) - len(eb[:-2]) + q] != 1 else bi[len(batch) - len(eb[:-2]) + q]
            for q in range(len(eb) - 2)
        )
        av = a[ia + ((m,) if not a1 else ()) + (k.var,)]
        bv = b[ib + (k.var,) + ((n,) if not b1 else ())]
        if wide != dt:
            av, bv = cast(av, wide), cast(bv, wide)
        return te.sum(av * bv, axis=k)

    mm = compute(out, body, name=uname(name), tag="matmul")
    if wide == dt:
        return mm
    return compute(out, lambda *i: cast(mm[i], dt), name=uname(name + "_round"))


# Padding of a tensor-core product's accumulator: rows and columns to a power of two from 16 up to
# 128 (the largest block tile of ember.strategy.tensorcore), k to 32 (its smallest chunk).
TC_MAX_TILE = 128
TC_K_CHUNK = 32


def _tc_pad(n: int) -> int:
    tile = 16
    while tile < min(n, TC_MAX_TILE):
        tile *= 2
    return -(-n // tile) * tile


def tensorcore_accumulator(
    a_at: Any, b_at: Any, lead: tuple[int, ...], M: int, N: int, K: int, dt: str, intrin: Any, name: str,
    b_rows_are_n: bool = False, a_batched: bool = True, b_batched: bool = False, layout: Layout | None = None,
) -> Tensor:
    """``acc[*lead, m, n] = sum_k a_at(li, m, k) * b_at(li, k, n)`` (``li``: the ``lead``
    indices; an operand that is not ``*_batched`` ignores them) accumulated in the matrix
    instruction ``intrin``'s type, over a domain padded to whole tiles (:func:`_tc_pad`: the
    elements past ``M``, ``N`` are not meaningful) that reads zero-padded views of the operands,
    so that the schedule (:func:`ember.strategy.tensorcore.schedule_tensorcore`) needs no guard
    inside a tile. Tag ``"tc_gemm"``. A view that reads no batch index is flagged
    ``constant_layout`` (folded at compile time when its source is a constant).
    ``b_rows_are_n`` stores ``B``'s view as ``N x K`` (when its source is ``N x K``).

    Split-K: when ``layout.tc_split_k`` asks for ``parts > 1`` (a product with few output tiles
    and a long ``K``), the accumulator has a leading axis of ``parts``, each summing its slice of
    ``K`` on its own blocks; a stage stores each part (a float32 workspace) and the returned
    injective stage adds them, inlined into the readers (which round and add the epilogue)."""
    Mp, Np, Kp = _tc_pad(M), _tc_pad(N), -(-K // TC_K_CHUNK) * TC_K_CHUNK
    zero = const_like(0, dt)
    acc = intrin.acc_dtype
    nl = len(lead)

    def inside(v: Any, rows: Any, nrows: int, nrows_p: int, ks: Any) -> Any:
        # Only the conditions the padding needs: whole operands are read without a select.
        conds = ([rows < nrows] if nrows_p != nrows else []) + ([ks < K] if Kp != K else [])
        if not conds:
            return v
        c = conds[0] if len(conds) == 1 else conds[0] & conds[1]
        return te.if_then_else(c, v, zero)

    a_lead = lead if a_batched else ()
    b_lead = lead if b_batched else ()
    ap = compute(a_lead + (Mp, Kp), lambda *i: inside(a_at(i[:-2], i[-2], i[-1]), i[-2], M, Mp, i[-1]),
                 name=uname(name + "_a"), constant_layout=not a_batched)
    if b_rows_are_n:
        bp = compute(b_lead + (Np, Kp), lambda *i: inside(b_at(i[:-2], i[-1], i[-2]), i[-2], N, Np, i[-1]),
                     name=uname(name + "_b"), constant_layout=not b_batched)
    else:
        bp = compute(b_lead + (Kp, Np), lambda *i: inside(b_at(i[:-2], i[-2], i[-1]), i[-1], N, Np, i[-2]),
                     name=uname(name + "_b"), constant_layout=not b_batched)
    parts = layout.tc_split_k(int(np.prod(lead)) if lead else 1, Mp, Np, Kp) if layout is not None else 1
    if parts < 1 or Kp % (parts * TC_K_CHUNK):
        parts = 1
    chunk = Kp // parts
    k = te.reduce_axis((0, chunk), name="k")
    sp = 1 if parts > 1 else 0  # the leading parts axis, when split

    def body(*i: Any) -> Any:
        li = i[sp:sp + nl]
        kk = i[0] * chunk + k.var if sp else k.var
        av = ap[(li if a_batched else ()) + (i[-2], kk)]
        bi = li if b_batched else ()
        bv = bp[bi + (i[-1], kk)] if b_rows_are_n else bp[bi + (kk, i[-1])]
        return te.sum(cast(av, acc) * cast(bv, acc), axis=k)

    dom = ((parts,) if sp else ()) + lead + (Mp, Np)
    cacc = compute(dom, body, name=uname(name + "_tc"), tag="tc_gemm", attrs={"intrin": intrin.name, "split_k": parts})
    if not sp:
        return cacc
    stored = compute(dom, lambda *i: cacc[i], name=uname(name + "_tcpart"), workspace=True)

    def total(*i: Any) -> Any:
        v = stored[(0,) + i]
        for p in range(1, parts):
            v = v + stored[(p,) + i]
        return v

    return compute(lead + (Mp, Np), total, name=uname(name + "_tcsum"))


def tensorcore_product(
    a_at: Any, b_at: Any, lead: tuple[int, ...], M: int, N: int, K: int, dt: str, intrin: Any, name: str,
    b_rows_are_n: bool = False, layout: Layout | None = None,
) -> Tensor:
    """``out[*lead, m, n] = sum_k a_at(lead, m, k) * b_at(k, n)`` in ``dt`` on ``intrin``
    (float32 accumulation, one rounding): :func:`tensorcore_accumulator` viewed at ``M x N``
    (split along ``K`` where ``layout`` says)."""
    cacc = tensorcore_accumulator(a_at, lambda li, kk, n: b_at(kk, n), lead, M, N, K, dt, intrin, name,
                                  b_rows_are_n=b_rows_are_n, layout=layout)
    return compute(lead + (M, N), lambda *i: cast(cacc[i], dt), name=uname(name + "_round"))


def _conv2d_tensorcore(
    x: Tensor, w: Tensor, bias: Tensor | None, strides: list[int], dil: list[int], lo: list[int],
    out_sp: tuple[int, ...], intrin: Any, layout: Layout | None = None,
) -> Tensor:
    """2-D convolution as an implicit GEMM on the matrix instruction ``intrin``: ``W`` viewed as
    ``M x (C KH KW)`` (a constant: padded at compile time) times the im2col view of ``X``
    (``(C KH KW) x (OH OW)`` per image, gathered while it is staged in shared memory, never
    stored), accumulated in float32 and rounded once; bias and what the graph fuses after it run
    in the store."""
    B, C, H, W = shape(x)
    M, _, KH, KW = shape(w)
    OH, OW = out_sp
    dt = dtype_of(x)
    taps = KH * KW

    def w_at(li: Any, m: Any, kk: Any) -> Any:
        return w[m, E.floordiv(kk, taps), E.floormod(E.floordiv(kk, KW), KH), E.floormod(kk, KW)]

    def x_at(li: Any, kk: Any, n: Any) -> Any:
        c, r, q = E.floordiv(kk, taps), E.floormod(E.floordiv(kk, KW), KH), E.floormod(kk, KW)
        ih = E.floordiv(n, OW) * strides[0] + r * dil[0] - lo[0]
        iw = E.floormod(n, OW) * strides[1] + q * dil[1] - lo[1]
        ok = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        return te.if_then_else(ok, x[li[0], c, ih, iw], const_like(0, dt))

    cacc = tensorcore_accumulator(w_at, x_at, (B,), M, OH * OW, C * taps, dt, intrin, "conv", a_batched=False,
                                  b_batched=True, layout=layout)

    def view(b: Any, m: Any, oh: Any, ow: Any) -> Any:
        v = cast(cacc[b, m, oh * OW + ow], dt)
        return v + bias[m] if bias is not None else v

    return compute((B, M, OH, OW), view, name=uname("conv"))


def split_k_product(t: Tensor, parts: int) -> Tensor:
    """The packed GEMM ``t`` (``C[b, m, n] = sum over r0, r... of ...``, tag ``"conv_packed"``)
    computed in ``parts`` pieces along its first reduction axis ``r0`` (``parts`` divides its
    extent): a packed GEMM stage ``P[p * B + b, m, n]`` sums the ``p``-th part (its own blocks on
    a GPU, so a product with few output tiles and a long reduction fills the machine), and the
    returned injective stage adds the parts, inlined into its readers. ``parts <= 1`` returns
    ``t``. The sum is reassociated (float32 rounding differs in the last bits), not changed."""
    if parts <= 1:
        return t
    from ..arith import simplify
    from ..ir.visitor import substitute

    def ext(iv: Any) -> int:
        return int(simplify(iv.dom.extent).value)

    op = t.op
    red = op.body[0]
    r0, *rest = op.reduce_axis
    k0 = ext(r0)
    if k0 % parts:
        raise ValueError(f"split_k_product: {parts} parts do not divide the reduction's {k0}")
    chunk = k0 // parts
    nb, nm, nn = (ext(a) for a in op.axis)
    rk = te.reduce_axis((0, chunk), name=r0.var.name + "_part")
    others = [te.reduce_axis((0, ext(r)), name=r.var.name + "_part") for r in rest]

    def body(pb: Any, m: Any, n: Any) -> Any:
        vmap = {op.axis[0].var: E.floormod(pb, nb), op.axis[1].var: m, op.axis[2].var: n,
                r0.var: E.floordiv(pb, nb) * chunk + rk.var}
        vmap.update({r.var: o.var for r, o in zip(rest, others)})
        return te.sum(substitute(red.source[0], vmap), axis=[rk, *others])

    attrs = dict(op.attrs or {})
    attrs.pop("conv_out", None)
    attrs["split_k"] = parts
    part = compute((parts * nb, nm, nn), body, name=uname(op.name + "_part"), tag="conv_packed", attrs=attrs,
                   workspace=True)

    def total(b: Any, m: Any, n: Any) -> Any:
        acc = part[b, m, n]
        for p in range(1, parts):
            acc = acc + part[p * nb + b, m, n]
        return acc

    return compute((nb, nm, nn), total, name=uname(op.name + "_sum"))


def _batched_matmul_packed(
    a: Tensor, b: Tensor, batch: tuple[int, ...], M: int, K: int, N: int, strategy: Layout
) -> Tensor:
    """A batch of float32 products ``a[..., M, K] @ b[..., K, N]`` of two computed operands with
    the same batch shape (attention's ``Q Kᵀ`` and ``P V``) on the packed GEMM: each ``b`` packed
    into ``nr``-wide panels ``[batch, N / nr, K, nr]`` by a stage of its own (zeros past ``N``),
    the products computed over whole panels (split along ``K`` where the strategy says), then
    viewed at ``N`` columns."""
    nr = strategy.gemm_panel_width("float32")
    npanel = -(-N // nr)
    rows = int(np.prod(batch))
    bp = compute(
        (rows, npanel, K, nr),
        lambda r, no, kk, ni: te.if_then_else(
            no * nr + ni < N, b[batch_index(batch, r) + (kk, E.min_expr(no * nr + ni, N - 1))],
            const_like(0, "float32")),
        name=uname("bmm_pack"),
        tag="gemm_pack",
        attrs={"panel_axis": 1},
        workspace=True,
    )
    k = te.reduce_axis((0, K), name="k")
    cv = compute(
        (rows, M, npanel * nr),
        lambda r, m, n: te.sum(a[batch_index(batch, r) + (m, k.var)] * bp[r, E.floordiv(n, nr), k.var,
                                                                           E.floormod(n, nr)], axis=k),
        name=uname("bmm_gemm"),
        tag="conv_packed",
        attrs={"nr": nr, "K": K},
        workspace=True,
    )
    cv = split_k_product(cv, strategy.gemm_split_k(rows, M, npanel * nr, K, 1))
    return batch_view(cv, batch, M, N, "bmm")


def _matmul_packed(
    a: Tensor, b: Tensor, batch: tuple[int, ...], M: int, K: int, N: int, strategy: Layout
) -> Tensor:
    """``a @ b`` for a 2-D right operand: ``b`` packed into ``nr``-wide panels ``[N / nr, K, nr]``
    (``nr`` from ``strategy``, the last panel padded with zeros) and the product computed over
    whole panels by the packed GEMM schedule, then viewed at ``N`` columns."""
    nr = strategy.gemm_panel_width("float32")
    npanel = -(-N // nr)
    rows = int(np.prod(batch)) if batch else 1
    bp = compute(
        (npanel, K, nr),
        lambda no, kk, ni: te.if_then_else(
            no * nr + ni < N, b[kk, E.min_expr(no * nr + ni, N - 1)], const_like(0, "float32")
        ),
        name=uname("mm_pack"),
        tag="gemm_pack",
        attrs={"panel_axis": 0},
        constant_layout=True,
        workspace=True,
    )
    k = te.reduce_axis((0, K), name="k")

    # The product covers whole panels (its last columns are zeros of the padded panel, never
    # read): no scalar tail for a partial panel.
    cv = compute(
        (rows, M, npanel * nr),
        lambda r, m, n: te.sum(a[batch_index(batch, r) + (m, k.var)] * bp[E.floordiv(n, nr), k.var, E.floormod(n, nr)],
                               axis=k),
        name=uname("mm_gemm"),
        tag="conv_packed",
        attrs={"nr": nr, "K": K},
        workspace=True,
    )
    cv = split_k_product(cv, strategy.gemm_split_k(rows, M, npanel * nr, K, 1))
    return batch_view(cv, batch, M, N, "matmul")


@register("MatMul", pattern="heavy")
def matmul(ctx: OpContext, a: Tensor, b: Tensor) -> Tensor:
    """ONNX MatMul."""
    return matmul_tensor(a, b, strategy=ctx.strategy)


@register("Gemm", pattern="heavy")
def gemm(ctx: OpContext, a: Tensor, b: Tensor, c: Tensor | None = None) -> Tensor:
    """ONNX Gemm: ``alpha * A' @ B' + beta * C``. Float32 products large enough run on the
    packed GEMM of :func:`matmul_tensor` (a constant B is packed once, at compile time)."""
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    sa, sb = shape(a), shape(b)
    if len(sa) != 2 or len(sb) != 2:
        raise ctx.fail(f"A {sa} and B {sb} must be matrices")
    M, K = (sa[1], sa[0]) if ta else sa
    N = sb[0] if tb else sb[1]
    if (sb[1] if tb else sb[0]) != K:
        raise ctx.fail(f"A' is {M} x {K} but B' is {sb[1] if tb else sb[0]} x {N}: the inner dimensions (K) differ")
    if c is not None:
        sc = shape(c)
        if len(sc) > 2 or any(d not in (1, full) for d, full in zip(sc[::-1], (N, M))):
            raise ctx.fail(f"C of shape {sc} does not broadcast to the {M} x {N} result")
    dt = dtype_of(a)
    wide = acc_dtype(dt)  # float16 products accumulate in float32, rounded once
    intrin = ctx.strategy.matrix_intrinsic(dt) if dt == dtype_of(b) else None
    if intrin is not None and K >= 16 and N >= 16 and M * N >= 256:
        mm = tensorcore_product(lambda li, i, kk: a[kk, i] if ta else a[i, kk],
                                lambda kk, j: b[j, kk] if tb else b[kk, j], (), M, N, K, dt, intrin, "gemm",
                                b_rows_are_n=bool(tb), layout=ctx.strategy)
    elif dt == dtype_of(b) == "float32" and K >= 16 and N >= 16 and M * N >= 256:
        a2 = compute((M, K), lambda i, kk: a[kk, i], name=uname("gemm_at")) if ta else a
        b2 = compute((K, N), lambda kk, j: b[j, kk], name=uname("gemm_bt")) if tb else b
        mm = matmul_tensor(a2, b2, name="gemm", strategy=ctx.strategy)
    else:
        k = te.reduce_axis((0, K), name="k")

        def prod(i: Any, j: Any) -> Any:
            av, bv = (a[k.var, i] if ta else a[i, k.var]), (b[j, k.var] if tb else b[k.var, j])
            return cast(av, wide) * cast(bv, wide) if wide != dt else av * bv

        mm = compute((M, N), lambda i, j: te.sum(prod(i, j), axis=k), name=uname("gemm"), tag="matmul")
        if wide != dt:
            wide_mm = mm
            mm = compute((M, N), lambda i, j: cast(wide_mm[i, j], dt), name=uname("gemm_round"))
    if c is None and alpha == 1.0:
        return mm

    def body(i: Any, j: Any) -> Any:
        v = mm[i, j] * const_like(alpha, dt) if alpha != 1.0 else mm[i, j]
        if c is not None:
            cv = bcast_load(c, (M, N), (i, j))
            v = v + (cv * const_like(beta, dt) if beta != 1.0 else cv)
        return v

    return compute((M, N), body, name=uname("gemm_epi"))


# -- convolution ------------------------------------------------------------------------------------
def conv_pads(
    ctx: OpContext, in_sp: tuple[int, ...], k_sp: tuple[int, ...], strides: list[int], dil: list[int]
) -> tuple[list[int], list[int]]:
    """(pads_begin, pads_end) from ``pads`` or ``auto_pad``."""
    n = len(in_sp)
    auto = _s(ctx.attr("auto_pad", "NOTSET"))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for d in range(n):
            out = -(-in_sp[d] // strides[d])
            total = max((out - 1) * strides[d] + (k_sp[d] - 1) * dil[d] + 1 - in_sp[d], 0)
            small, big = total // 2, total - total // 2
            lo.append(small if auto == "SAME_UPPER" else big)
            hi.append(big if auto == "SAME_UPPER" else small)
        return lo, hi
    if auto == "VALID":
        return [0] * n, [0] * n
    p = ints(ctx.attr("pads")) or [0] * (2 * n)
    return p[:n], p[n:]


def check_window(
    ctx: OpContext, what: str, nsp: int, kernel: Sequence[int], strides: Sequence[int], dil: Sequence[int]
) -> None:
    """The attributes of a sliding window over ``nsp`` spatial axes, as the spec states them:
    one positive kernel size, stride and dilation per axis, ``pads`` (unless ``auto_pad`` is set)
    2 x ``nsp`` non-negative values, ``auto_pad`` one of the four modes."""
    auto = _s(ctx.attr("auto_pad", "NOTSET"))
    if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise ctx.fail(f"auto_pad {auto!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    for name, v in (("kernel_shape", kernel), ("strides", strides), ("dilations", dil)):
        if len(v) != nsp or any(int(q) < 1 for q in v):
            raise ctx.fail(f"{name} {list(v)} must be {nsp} positive value(s), one per spatial axis of the {what}")
    pads = ints(ctx.attr("pads"))
    if pads and auto == "NOTSET" and (len(pads) != 2 * nsp or any(p < 0 for p in pads)):
        raise ctx.fail(f"pads {pads} must be {2 * nsp} non-negative values (begin and end of each spatial axis)")


def _check_out(ctx: OpContext, out_sp: Sequence[int], insp: Sequence[int]) -> None:
    if any(o < 1 for o in out_sp):
        raise ctx.fail(f"the window does not fit the input's spatial shape {tuple(insp)}: the output would be "
                       f"{tuple(out_sp)}")


def conv_tensor(
    x: Tensor,
    w: Tensor,
    bias: Tensor | None,
    strides: list[int],
    dil: list[int],
    lo: list[int],
    hi: list[int],
    groups: int,
    strategy: Layout | None = None,
) -> Tensor:
    """N-D grouped convolution, NCHW... layout, weights (M, C/groups, k...). ``strategy`` (the
    host CPU's when None) chooses the packed layout of a float32 2-D convolution."""
    sx, sw = shape(x), shape(w)
    nsp = len(sx) - 2
    N, C = sx[0], sx[1]
    M, Cg = sw[0], sw[1]
    ksp = sw[2:]
    if Cg * groups != C:
        raise ValueError(f"conv: input has {C} channels but weights expect {Cg} x {groups} groups")
    out_sp = tuple((sx[2 + d] + lo[d] + hi[d] - ((ksp[d] - 1) * dil[d] + 1)) // strides[d] + 1 for d in range(nsp))
    intrin = (strategy or host_layout()).matrix_intrinsic(dtype_of(x)) if dtype_of(x) == dtype_of(w) else None
    if intrin is not None and nsp == 2 and groups == 1 and M >= 16 and Cg * int(np.prod(ksp)) >= 16:
        return _conv2d_tensorcore(x, w, bias, strides, dil, lo, out_sp, intrin, strategy)
    if nsp == 2 and groups == 1 and dtype_of(x) == "float32" and dtype_of(w) == "float32":
        return _conv2d_packed(x, w, bias, strides, dil, lo, out_sp, strategy or host_layout())
    if nsp == 2 and groups == 1 and intrin is None and dtype_of(x) == dtype_of(w) in ("float16", "bfloat16"):
        return lowp_conv2d(x, w, bias, lambda x32, w32, b32: _conv2d_packed(  # converted while packing
            x32, w32, b32, strides, dil, lo, out_sp, strategy or host_layout()))
    if is_depthwise(x, w, groups):
        return depthwise_conv2d(x, w, bias, strides, dil, lo, hi)
    xp = pad_tensor(x, [0, 0] + lo, [0, 0] + hi) if any(lo) or any(hi) else x
    rc = te.reduce_axis((0, Cg), name="rc")
    rk = [te.reduce_axis((0, ksp[d]), name=f"rk{d}") for d in range(nsp)]
    Mg = M // groups
    dt = dtype_of(x)
    wide = acc_dtype(dt) if dtype_of(w) == dt else dt  # float16 products accumulate in float32

    def body(n: Any, m: Any, *o: Any) -> Any:
        c = (E.floordiv(m, Mg) * Cg + rc.var) if groups > 1 else rc.var
        xi = (n, c) + tuple(o[d] * strides[d] + rk[d].var * dil[d] for d in range(nsp))
        xv, wv = xp[xi], w[(m, rc.var) + tuple(r.var for r in rk)]
        if wide != dt:
            xv, wv = cast(xv, wide), cast(wv, wide)
        return te.sum(xv * wv, axis=[rc] + rk)

    attrs = {"strides": strides, "dilations": dil, "pads": (lo, hi), "groups": groups}
    out = compute((N, M) + out_sp, body, name=uname("conv"), tag="conv", attrs=attrs)
    if wide != dt:
        wide_out = out
        out = compute(shape(wide_out), lambda *i: cast(wide_out[i], dt), name=uname("conv_round"))
    if bias is None:
        return out
    return compute(shape(out), lambda n, m, *o: out[(n, m) + o] + bias[m], name=uname("conv_bias"))


def _conv2d_packed(
    x: Tensor,
    w: Tensor,
    bias: Tensor | None,
    strides: list[int],
    dil: list[int],
    lo: list[int],
    out_sp: tuple[int, ...],
    strategy: Layout,
) -> Tensor:
    """2-D convolution as a GEMM over an im2col matrix packed into ``nr``-wide column panels
    (``[batch, N / nr, C, kh, kw, nr]``, padding written as zeros; ``nr`` from ``strategy``), so
    the strategy's packed GEMM schedule (:mod:`ember.strategy.cpu_gemm`: the register-tiled
    kernel of :func:`ember.demo.gemm_schedule`) runs on it. The result is computed as
    ``[batch, M, npanel * nr]`` (whole panels) and its first ``OH*OW`` columns viewed as NCHW."""
    B, C, H, W = shape(x)
    M, _, KH, KW = shape(w)
    OH, OW = out_sp
    N = OH * OW
    nr = strategy.gemm_panel_width("float32")
    npanel = -(-N // nr)
    dt = dtype_of(x)

    def pack(b: Any, no: Any, c: Any, r: Any, q: Any, ni: Any) -> Any:
        n = no * nr + ni
        oh, ow = E.floordiv(n, OW), E.floormod(n, OW)
        ih = oh * strides[0] + r * dil[0] - lo[0]
        iw = ow * strides[1] + q * dil[1] - lo[1]
        ok = (n < N) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        return te.if_then_else(ok, x[b, c, ih, iw], const_like(0, dt))

    bp = compute(
        (B, npanel, C, KH, KW, nr),
        pack,
        name=uname("conv_pack"),
        tag="gemm_pack",
        attrs={"panel_axis": 1},
        constant_layout=True,
        workspace=True,
    )
    rc = te.reduce_axis((0, C), name="rc")
    rr = te.reduce_axis((0, KH), name="rr")
    rs = te.reduce_axis((0, KW), name="rs")
    # The product covers every packed column, the zero padding of the last panel included: each
    # panel is then one full vector tile (a partial last panel would run as guarded scalar code).
    cv = compute(
        (B, M, npanel * nr),
        lambda b, m, n: te.sum(
            w[m, rc.var, rr.var, rs.var] * bp[b, E.floordiv(n, nr), rc.var, rr.var, rs.var, E.floormod(n, nr)],
            axis=[rc, rr, rs],
        ),
        name=uname("conv_gemm"),
        tag="conv_packed",
        # conv_out: the CPU strategy may compute this product in registers inside the store of
        # the view below (ember.strategy.cpu_conv); other targets keep it in memory.
        attrs={"nr": nr, "K": C * KH * KW, "conv_out": (OH, OW)},
        workspace=True,
    )
    cv = split_k_product(cv, strategy.gemm_split_k(B, M, npanel * nr, C, KH * KW))

    def view(b: Any, m: Any, oh: Any, ow: Any) -> Any:
        v = cv[b, m, oh * OW + ow]
        return v + bias[m] if bias is not None else v

    return compute((B, M, OH, OW), view, name=uname("conv"))


@register("Conv", pattern="heavy")
def conv(ctx: OpContext, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """ONNX Conv (1-D/2-D/3-D, groups, dilations, strides, pads or auto_pad)."""
    sx, sw = shape(x), shape(w)
    nsp = len(sx) - 2
    if nsp < 1 or len(sw) != len(sx):
        raise ctx.fail(f"X {sx} and W {sw} must have the same rank, at least 3")
    strides = ints(ctx.attr("strides")) or [1] * nsp
    dil = ints(ctx.attr("dilations")) or [1] * nsp
    ks = ctx.attr("kernel_shape")
    if ks is not None and ints(ks) != list(sw[2:]):
        raise ctx.fail(f"kernel_shape {ints(ks)} contradicts the weights' spatial shape {list(sw[2:])}")
    check_window(ctx, "input", nsp, sw[2:], strides, dil)
    group = int(ctx.attr("group", 1))
    if group < 1 or sw[1] * group != sx[1] or sw[0] % group:
        raise ctx.fail(f"group={group}: X has {sx[1]} channels and W {sw} expects {sw[1]} x group, "
                       "with its output channels a multiple of group")
    if b is not None and shape(b) != (sw[0],):
        raise ctx.fail(f"B has shape {shape(b)}; it needs one value per output channel ({sw[0]},)")
    lo, hi = conv_pads(ctx, sx[2:], sw[2:], strides, dil)
    _check_out(ctx, [(sx[2 + d] + lo[d] + hi[d] - ((sw[2 + d] - 1) * dil[d] + 1)) // strides[d] + 1
                     for d in range(nsp)], sx[2:])
    return conv_tensor(x, w, b, strides, dil, lo, hi, group, ctx.strategy)


@register("ConvTranspose", pattern="heavy")
def conv_transpose(ctx: OpContext, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """ONNX ConvTranspose (groups, dilations, strides, pads/auto_pad, output_padding, output_shape)."""
    sx, sw = shape(x), shape(w)
    nsp = len(sx) - 2
    if nsp < 1 or len(sw) != len(sx):
        raise ctx.fail(f"X {sx} and W {sw} must have the same rank, at least 3")
    N, C = sx[0], sx[1]
    groups = int(ctx.attr("group", 1))
    if groups < 1 or sw[0] != C or C % groups:
        raise ctx.fail(f"group={groups}: X has {C} channels, W {sw} must have as many rows, a multiple of group")
    ks = ctx.attr("kernel_shape")
    if ks is not None and ints(ks) != list(sw[2:]):
        raise ctx.fail(f"kernel_shape {ints(ks)} contradicts the weights' spatial shape {list(sw[2:])}")
    if b is not None and shape(b) != (sw[1] * groups,):
        raise ctx.fail(f"B has shape {shape(b)}; it needs one value per output channel ({sw[1] * groups},)")
    check_window(ctx, "input", nsp, sw[2:], ints(ctx.attr("strides")) or [1] * nsp,
                 ints(ctx.attr("dilations")) or [1] * nsp)
    Mg = sw[1]
    M = Mg * groups
    Cg = C // groups
    ksp = sw[2:]
    strides = ints(ctx.attr("strides")) or [1] * nsp
    dil = ints(ctx.attr("dilations")) or [1] * nsp
    opad = ints(ctx.attr("output_padding")) or [0] * nsp
    oshape = ints(ctx.attr("output_shape"))
    if len(opad) != nsp or any(not 0 <= opad[d] < max(strides[d], dil[d]) for d in range(nsp)):
        raise ctx.fail(f"output_padding {opad} must be {nsp} values, each below its axis's stride or dilation")
    if oshape and (len(oshape) not in (nsp, nsp + 2) or any(d < 1 for d in oshape[-nsp:])):
        raise ctx.fail(f"output_shape {oshape} must give {nsp} positive spatial sizes")
    auto = _s(ctx.attr("auto_pad", "NOTSET"))
    full = [strides[d] * (sx[2 + d] - 1) + opad[d] + (ksp[d] - 1) * dil[d] + 1 for d in range(nsp)]
    if oshape or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = oshape[-nsp:] if oshape else [sx[2 + d] * strides[d] for d in range(nsp)]
        lo, hi = [], []
        for d in range(nsp):
            # the spec's split of the total padding: SAME_UPPER puts the odd one at the end,
            # SAME_LOWER and NOTSET (an explicit output_shape) at the start; floor division, so a
            # negative total (output_shape larger than the full result) appends zeros at the end
            total = full[d] - target[d]
            if auto == "SAME_UPPER":
                lo.append(total // 2)
                hi.append(total - total // 2)
            else:
                lo.append(total - total // 2)
                hi.append(total // 2)
    else:
        p = ints(ctx.attr("pads")) or [0] * (2 * nsp)
        lo, hi = p[:nsp], p[nsp:]
    out_sp = tuple(full[d] - lo[d] - hi[d] for d in range(nsp))
    _check_out(ctx, out_sp, sx[2:])
    rc = te.reduce_axis((0, Cg), name="rc")
    rk = [te.reduce_axis((0, ksp[d]), name=f"rk{d}") for d in range(nsp)]

    def body(n: Any, m: Any, *o: Any) -> Any:
        g = E.floordiv(m, Mg) if groups > 1 else E.const(0)
        c = g * Cg + rc.var
        cond, idx = None, []
        for d in range(nsp):
            num = o[d] + lo[d] - rk[d].var * dil[d]
            q = E.floordiv(num, strides[d])
            ok = (num >= 0) & (q < sx[2 + d])
            if strides[d] > 1:
                ok = ok & (E.floormod(num, strides[d]) == 0)
            cond = ok if cond is None else cond & ok
            idx.append(q)
        v = te.if_then_else(cond, x[(n, c) + tuple(idx)], const_like(0, dtype_of(x)))
        wv = w[(c, E.floormod(m, Mg)) + tuple(r.var for r in rk)]
        if wide != dt:
            v, wv = cast(v, wide), cast(wv, wide)
        return te.sum(v * wv, axis=[rc] + rk)

    dt = dtype_of(x)
    wide = acc_dtype(dt) if dtype_of(w) == dt else dt  # float16 products accumulate in float32
    out = compute((N, M) + out_sp, body, name=uname("conv_transpose"))
    if wide != dt:
        wide_out = out
        out = compute(shape(wide_out), lambda *i: cast(wide_out[i], dt), name=uname("convt_round"))
    if b is None:
        return out
    return compute(shape(out), lambda n, m, *o: out[(n, m) + o] + b[m], name=uname("convt_bias"))


# -- pooling ---------------------------------------------------------------------------------------
def _pool_geometry(
    ctx: OpContext, x: Tensor
) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int]]:
    sx = shape(x)
    nsp = len(sx) - 2
    if nsp < 1:
        raise ctx.fail(f"the input {sx} needs a batch, a channel and at least one spatial axis")
    if 0 in sx[1:]:
        raise ctx.fail(f"the input {sx} is empty (as ONNX Runtime requires, only the batch may be 0)")
    k = ints(ctx.attr("kernel_shape"))
    strides = ints(ctx.attr("strides")) or [1] * nsp
    dil = ints(ctx.attr("dilations")) or [1] * nsp
    check_window(ctx, "input", nsp, k, strides, dil)
    lo, hi = conv_pads(ctx, sx[2:], tuple(k), strides, dil)
    if any(p >= k[d % nsp] for d, p in enumerate(lo + hi)):
        raise ctx.fail(f"pads {lo + hi} must be smaller than the kernel {k} (as ONNX Runtime requires)")
    ceil_mode = int(ctx.attr("ceil_mode", 0))
    out = []
    for d in range(nsp):
        span = sx[2 + d] + lo[d] + hi[d] - ((k[d] - 1) * dil[d] + 1)
        o = (-(-span // strides[d]) if ceil_mode else span // strides[d]) + 1
        if ceil_mode and (o - 1) * strides[d] >= sx[2 + d] + lo[d]:
            o -= 1
        out.append(o)
    _check_out(ctx, out, sx[2:])
    return k, strides, dil, lo, hi, out


def _pool(ctx: OpContext, x: Tensor, kind: str) -> list[Tensor]:
    sx = shape(x)
    nsp = len(sx) - 2
    k, strides, dil, lo, hi, out_sp = _pool_geometry(ctx, x)
    rk = [te.reduce_axis((0, k[d]), name=f"pk{d}") for d in range(nsp)]
    dt = dtype_of(x)
    include_pad = int(ctx.attr("count_include_pad", 0))
    p = int(ctx.attr("p", 2))

    def pos(o: Any) -> list[Any]:
        return [o[d] * strides[d] + rk[d].var * dil[d] - lo[d] for d in range(nsp)]

    def inside(q: list[Any]) -> Any:
        c = None
        for d in range(nsp):
            ok = (q[d] >= 0) & (q[d] < sx[2 + d])
            c = ok if c is None else c & ok
        return c

    outs = []
    if kind == "max":

        def body(n: Any, c: Any, *o: Any) -> Any:
            q = pos(o)
            return te.max(te.if_then_else(inside(q), x[(n, c) + tuple(q)], te.min_value_of(dt)), axis=rk)

        outs.append(compute(tuple(sx[:2]) + tuple(out_sp), body, name=uname("maxpool")))
        if len(ctx.attrs.get("_outputs", [])) > 1:
            order = int(ctx.attr("storage_order", 0))
            strides_flat = [int(np.prod(sx[2 + d + 1 :])) for d in range(nsp)]
            if order == 1 and nsp == 2:
                strides_flat = [1, sx[2]]

            def combine(lhs: Any, rhs: Any) -> Any:
                pick = (rhs[1] > lhs[1]) | ((rhs[1] == lhs[1]) & (rhs[0] < lhs[0]))
                return te.if_then_else(pick, rhs[0], lhs[0]), te.if_then_else(pick, rhs[1], lhs[1])

            red = te.comm_reducer(combine, lambda t0, t1: (E.const(2**62, t0), te.min_value_of(t1)), name="maxidx")

            def ibody(n: Any, c: Any, *o: Any) -> Any:
                q = pos(o)
                flat = cast((n * sx[1] + c), "int64") * int(np.prod(sx[2:]))
                for d in range(nsp):
                    flat = flat + cast(q[d], "int64") * strides_flat[d]
                v = te.if_then_else(inside(q), x[(n, c) + tuple(q)], te.min_value_of(dt))
                return red((flat, v), axis=rk, where=inside(q))

            r = compute(tuple(sx[:2]) + tuple(out_sp), ibody, name=uname("maxpool_idx"))
            outs.append(compute(shape(r[0]), lambda *i: r[0][i], name=uname("maxpool_indices")))
        return outs

    def sbody(n: Any, c: Any, *o: Any) -> Any:
        q = pos(o)
        v = x[(n, c) + tuple(q)]
        if kind == "lp":
            v = te.pow(te.abs(v), const_like(p, dt)) if p not in (1, 2) else (te.abs(v) if p == 1 else v * v)
        return te.sum(te.if_then_else(inside(q), v, const_like(0, dt)), axis=rk)

    ssum = compute(tuple(sx[:2]) + tuple(out_sp), sbody, name=uname("pool_sum"))
    if kind == "lp":
        fin = (lambda v: v) if p == 1 else (te.sqrt if p == 2 else (lambda v: te.pow(v, const_like(1.0 / p, dt))))
        return [compute(shape(ssum), lambda *i: fin(ssum[i]), name=uname("lppool"))]

    def count(o: Any) -> Any:
        tot: Any = None
        for d in range(nsp):
            start = o[d] * strides[d] - lo[d]
            lo_b, hi_b = (-lo[d], sx[2 + d] + hi[d]) if include_pad else (0, sx[2 + d])
            # number of r in [0, k) with lo_b <= start + r*dil < hi_b
            cnt: Any = E.const(0)
            for r in range(k[d]):
                pr = start + r * dil[d]
                cnt = cnt + te.if_then_else((pr >= lo_b) & (pr < hi_b), 1, 0)
            tot = cnt if tot is None else tot * cnt
        return tot

    return [compute(shape(ssum), lambda n, c, *o: ssum[(n, c) + o] / cast(count(o), dt), name=uname("avgpool"))]


@register("MaxPool", pattern="reduce")
def maxpool(ctx: OpContext, x: Tensor) -> list[Tensor]:
    """ONNX MaxPool (ceil_mode, dilations, pads/auto_pad, optional Indices output)."""
    return _pool(ctx, x, "max")


@register("AveragePool", pattern="reduce")
def avgpool(ctx: OpContext, x: Tensor) -> list[Tensor]:
    """ONNX AveragePool (ceil_mode, count_include_pad)."""
    return _pool(ctx, x, "avg")


@register("LpPool", pattern="reduce")
def lppool(ctx: OpContext, x: Tensor) -> list[Tensor]:
    """ONNX LpPool."""
    return _pool(ctx, x, "lp")


def _global(kind: str) -> Any:
    def op(ctx: OpContext, x: Tensor) -> Tensor:
        s = shape(x)
        axes = list(range(2, len(s)))
        if kind == "max":
            return reduce_tensor(x, axes, True, te.max, name="gmaxpool")
        if kind == "lp":
            p = int(ctx.attr("p", 2))
            r = reduce_tensor(x, axes, True, te.sum, lambda v: te.abs(v) if p == 1 else v * v, name="glp")
            return compute(shape(r), lambda *i: r[i] if p == 1 else te.sqrt(r[i]), name=uname("glppool"))
        r = reduce_tensor(x, axes, True, te.sum, name="gavg_sum")
        cnt = int(np.prod(s[2:]))
        return compute(shape(r), lambda *i: r[i] / const_like(cnt, dtype_of(x)), name=uname("gavgpool"))

    op.__doc__ = f"ONNX Global{kind}Pool."
    return op


register("GlobalAveragePool", pattern="reduce")(_global("avg"))
register("GlobalMaxPool", pattern="reduce")(_global("max"))
register("GlobalLpPool", pattern="reduce")(_global("lp"))


# -- normalizations -----------------------------------------------------------------------------------
@register("BatchNormalization")
def batchnorm(
    ctx: OpContext, x: Tensor, scale: Tensor, b: Tensor, mean: Tensor, var: Tensor
) -> Tensor | list[Tensor]:
    """ONNX BatchNormalization in inference mode, or with ``training_mode=1`` (opset 14+)."""
    if int(ctx.attr("training_mode", 0)):
        return _batchnorm_training(ctx, x, scale, b, mean, var)
    eps = float(ctx.attr("epsilon", 1e-5))
    dt = dtype_of(x)
    _per_channel(ctx, x, scale=scale, B=b, input_mean=mean, input_var=var)

    def body(n: Any, c: Any, *r: Any) -> Any:
        return (x[(n, c) + r] - mean[c]) / te.sqrt(var[c] + const_like(eps, dt)) * scale[c] + b[c]

    return compute(shape(x), body, name=uname("batchnorm"))


def _batchnorm_training(
    ctx: OpContext, x: Tensor, scale: Tensor, b: Tensor, mean: Tensor, var: Tensor
) -> list[Tensor]:
    """BatchNormalization with ``training_mode=1``: ``Y`` normalized with the batch's own mean and
    (population) variance over every axis but the channel, and the running statistics
    ``input * momentum + batch * (1 - momentum)``. Statistics of float16 inputs are computed in
    float32."""
    s = shape(x)
    if len(s) < 2:
        raise ctx.fail(f"X must have a channel axis (rank >= 2), got shape {s}")
    _per_channel(ctx, x, scale=scale, B=b, input_mean=mean, input_var=var)
    eps = float(ctx.attr("epsilon", 1e-5))
    mom = float(ctx.attr("momentum", 0.9))
    dt = dtype_of(x)
    wide = "float32" if dt == "float16" else dt
    xw = x if wide == dt else compute(s, lambda *i: cast(x[i], wide), name=uname("bn_wide"))
    axes = [a for a in range(len(s)) if a != 1]
    bm, bv = _moments(xw, axes, "bn_train")

    def at(t: Tensor, c: Any) -> Any:
        return t[(0, c) + (0,) * (len(s) - 2)]

    def body(n: Any, c: Any, *r: Any) -> Any:
        xv = cast(x[(n, c) + r], wide)
        y = (xv - at(bm, c)) / te.sqrt(at(bv, c) + const_like(eps, wide)) * cast(scale[c], wide) + cast(b[c], wide)
        return cast(y, dt)

    def running(t: Tensor, batch: Tensor) -> Tensor:
        return compute(
            (s[1],),
            lambda c: cast(
                cast(t[c], wide) * const_like(mom, wide) + at(batch, c) * const_like(1.0 - mom, wide), dtype_of(t)
            ),
            name=uname("bn_running"),
        )

    y = compute(s, body, name=uname("batchnorm_train"))
    return [y, running(mean, bm), running(var, bv)]


def _per_channel(ctx: OpContext, x: Tensor, **params: Tensor) -> None:
    """Each of ``params`` must hold one value per channel (axis 1) of ``x``."""
    s = shape(x)
    if len(s) < 2:
        raise ctx.fail(f"X must have a channel axis (rank >= 2), got shape {s}")
    for name, t in params.items():
        if shape(t) != (s[1],):
            raise ctx.fail(f"{name} has shape {shape(t)}; it needs one value per channel ({s[1]},)")


def _moments(x: Tensor, axes: list[int], name: str) -> tuple[Tensor, Tensor]:
    """Mean and (biased) variance of ``x`` over ``axes``, kept as size-1 dimensions."""
    s = shape(x)
    cnt = int(np.prod([s[a] for a in axes]))
    dt = dtype_of(x)
    ssum = reduce_tensor(x, axes, True, te.sum, name=name + "_sum")
    mean = compute(shape(ssum), lambda *i: ssum[i] / const_like(cnt, dt), name=uname(name + "_mean"))

    def mi(i: Any) -> tuple[Any, ...]:
        return tuple(0 if a in axes else i[a] for a in range(len(s)))

    dev = compute(s, lambda *i: (x[i] - mean[mi(i)]) * (x[i] - mean[mi(i)]), name=uname(name + "_dev"))
    vsum = reduce_tensor(dev, axes, True, te.sum, name=name + "_vsum")
    var = compute(shape(vsum), lambda *i: vsum[i] / const_like(cnt, dt), name=uname(name + "_var"))
    return mean, var


@register("InstanceNormalization", pattern="reduce")
def instancenorm(ctx: OpContext, x: Tensor, scale: Tensor, b: Tensor) -> Tensor:
    """ONNX InstanceNormalization."""
    s = shape(x)
    eps = float(ctx.attr("epsilon", 1e-5))
    if len(s) < 3:
        raise ctx.fail(f"X {s} needs a batch, a channel and at least one spatial axis")
    _per_channel(ctx, x, scale=scale, B=b)
    mean, var = _moments(x, list(range(2, len(s))), "inorm")
    dt = dtype_of(x)

    def body(n: Any, c: Any, *r: Any) -> Any:
        mi = (n, c) + (0,) * len(r)
        return (x[(n, c) + r] - mean[mi]) / te.sqrt(var[mi] + const_like(eps, dt)) * scale[c] + b[c]

    return compute(s, body, name=uname("instancenorm"))


@register("LayerNormalization", pattern="reduce")
def layernorm(ctx: OpContext, x: Tensor, scale: Tensor, b: Tensor | None = None) -> list[Tensor]:
    """ONNX LayerNormalization over the axes from ``axis`` on; also Mean and InvStdDev."""
    s = shape(x)
    a = norm_axis(ctx.attr("axis", -1), len(s))
    eps = float(ctx.attr("epsilon", 1e-5))
    axes = list(range(a, len(s)))
    mean, var = _moments(x, axes, "lnorm")
    dt = dtype_of(x)
    inv = compute(
        shape(var), lambda *i: const_like(1, dt) / te.sqrt(var[i] + const_like(eps, dt)), name=uname("lnorm_inv")
    )
    norm_shape = s[a:]

    def body(*i: Any) -> Any:
        mi = tuple(0 if q in axes else i[q] for q in range(len(s)))
        v = (x[i] - mean[mi]) * inv[mi] * bcast_load(scale, norm_shape, i[a:])
        return v + bcast_load(b, norm_shape, i[a:]) if b is not None else v

    y = compute(s, body, name=uname("layernorm"))
    return [y, mean, inv]


@register("GroupNormalization", pattern="reduce")
def groupnorm(ctx: OpContext, x: Tensor, scale: Tensor, b: Tensor) -> Tensor:
    """ONNX GroupNormalization (per-channel scale/bias since opset 21, per-group before)."""
    s = shape(x)
    G = int(ctx.attr("num_groups"))
    eps = float(ctx.attr("epsilon", 1e-5))
    if len(s) < 2 or G < 1 or s[1] % G:
        raise ctx.fail(f"num_groups={G} must divide the channels of X {s}")
    if shape(scale) not in ((s[1],), (G,)) or shape(b) != shape(scale):
        raise ctx.fail(f"scale {shape(scale)} and bias {shape(b)} need one value per channel or per group")
    N, C = s[0], s[1]
    rest = s[2:]
    from .transform import reshape_to

    xg = reshape_to(x, (N, G, (C // G) * int(np.prod(rest))), "gn_view")
    mean, var = _moments(xg, [2], "gnorm")
    dt = dtype_of(x)
    per_channel = shape(scale)[0] == C

    def body(n: Any, c: Any, *r: Any) -> Any:
        g = E.floordiv(c, C // G)
        sc = scale[c] if per_channel else scale[g]
        bb = b[c] if per_channel else b[g]
        return (x[(n, c) + r] - mean[n, g, 0]) / te.sqrt(var[n, g, 0] + const_like(eps, dt)) * sc + bb

    return compute(s, body, name=uname("groupnorm"))


@register("MeanVarianceNormalization", pattern="reduce")
def mvn(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX MeanVarianceNormalization over ``axes`` (default 0, 2, 3)."""
    s = shape(x)
    axes = [norm_axis(a, len(s)) for a in (ints(ctx.attr("axes")) or [0, 2, 3])]
    mean, var = _moments(x, axes, "mvn")
    dt = dtype_of(x)

    def body(*i: Any) -> Any:
        mi = tuple(0 if a in axes else i[a] for a in range(len(s)))
        return (x[i] - mean[mi]) / (te.sqrt(var[mi]) + const_like(1e-9, dt))

    return compute(s, body, name=uname("mvn"))


@register("RMSNormalization", pattern="reduce")
def rmsnorm(ctx: OpContext, x: Tensor, scale: Tensor) -> Tensor:
    """ONNX RMSNormalization over the axes from ``axis`` on."""
    s = shape(x)
    a = norm_axis(ctx.attr("axis", -1), len(s))
    eps = float(ctx.attr("epsilon", 1e-5))
    axes = list(range(a, len(s)))
    cnt = int(np.prod(s[a:]))
    dt = dtype_of(x)
    ss = reduce_tensor(x, axes, True, te.sum, lambda v: v * v, name="rms_sum")

    def body(*i: Any) -> Any:
        mi = tuple(0 if q in axes else i[q] for q in range(len(s)))
        return x[i] / te.sqrt(ss[mi] / const_like(cnt, dt) + const_like(eps, dt)) * bcast_load(scale, s[a:], i[a:])

    return compute(s, body, name=uname("rmsnorm"))


@register("LRN", pattern="reduce")
def lrn(ctx: OpContext, x: Tensor) -> Tensor:
    """ONNX LRN across channels."""
    s = shape(x)
    size = int(ctx.attr("size"))
    if size < 1 or len(s) < 2:
        raise ctx.fail(f"size={size} must be positive and X {s} have a channel axis")
    alpha, beta, bias = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75)), float(ctx.attr("bias", 1.0))
    dt = dtype_of(x)
    lo = (size - 1) // 2
    r = te.reduce_axis((0, size), name="r")

    def sq(n: Any, c: Any, *rest: Any) -> Any:
        cc = c - lo + r.var
        ok = (cc >= 0) & (cc < s[1])
        v = x[(n, E.max_expr(E.min_expr(cc, s[1] - 1), 0)) + rest]
        return te.sum(te.if_then_else(ok, v * v, const_like(0, dt)), axis=r)

    ssum = compute(s, sq, name=uname("lrn_sum"))
    return compute(
        s,
        lambda *i: x[i] / te.pow(const_like(bias, dt) + const_like(alpha / size, dt) * ssum[i], const_like(beta, dt)),
        name=uname("lrn"),
    )


# -- resize --------------------------------------------------------------------------------------------
def _cubic_weights(t: Any, a: float, dt: str) -> list[Any]:
    """Keys' cubic convolution weights for taps at -1, 0, 1, 2 given the fraction t."""
    A = const_like(a, dt)
    one = const_like(1.0, dt)

    def near(z: Any) -> Any:  # |z| <= 1
        return ((A + const_like(2, dt)) * z - (A + const_like(3, dt))) * z * z + one

    def far(z: Any) -> Any:  # 1 < |z| < 2
        return ((A * z - const_like(5, dt) * A) * z + const_like(8, dt) * A) * z - const_like(4, dt) * A

    return [far(t + one), near(t), near(one - t), far(const_like(2.0, dt) - t)]


@register("Resize", "Upsample")
def resize(ctx: OpContext, x: Tensor, *rest: Any) -> Tensor:
    """ONNX Resize (nearest, linear, cubic; every coordinate transformation mode) and Upsample."""
    s = shape(x)
    n = len(s)
    mode = _s(ctx.attr("mode", "nearest"))
    if ctx.op == "Upsample":
        sc = ctx.value(1) if ctx.opset >= 9 else np.array(ctx.attr("scales"), np.float32)
        scales, sizes, roi, axes = [float(v) for v in sc.reshape(-1)], None, None, list(range(n))
        ctm, nmode = "asymmetric", "floor"
        mode = "linear" if mode in ("bilinear", "linear") else mode
    else:
        axes = [norm_axis(a, n) for a in ints(ctx.attr("axes"))] or list(range(n))
        if ctx.opset < 11:
            scales, sizes, roi = [float(v) for v in ctx.value(1).reshape(-1)], None, None
        else:
            roi_v = ctx.value(1) if ctx.has(1) else None
            roi = [float(v) for v in roi_v.reshape(-1)] if roi_v is not None and roi_v.size else None
            sc = ctx.value(2) if ctx.has(2) else None
            scales = [float(v) for v in sc.reshape(-1)] if sc is not None and sc.size else None
            sz = ctx.value(3) if ctx.has(3) else None
            sizes = ints(sz) if sz is not None and sz.size else None
        ctm = _s(ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 11 else "asymmetric"))
        nmode = _s(ctx.attr("nearest_mode", "round_prefer_floor"))
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.fail(f"mode {mode!r} is not one of nearest, linear, cubic")
    if nmode not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        raise ctx.fail(f"nearest_mode {nmode!r} is not one of round_prefer_floor, round_prefer_ceil, floor, ceil")
    if scales is not None and (len(scales) not in (len(axes), n) or any(not v > 0 for v in scales)):
        raise ctx.fail(f"scales {scales} must be {len(axes)} positive values (one per resized axis)")
    if sizes is not None and (len(sizes) != len(axes) or any(v < 0 for v in sizes)):
        raise ctx.fail(f"sizes {sizes} must be {len(axes)} non-negative values (one per resized axis)")
    antialias = int(ctx.attr("antialias", 0))
    if antialias and mode == "nearest":
        raise ctx.fail("antialias=1 applies to the linear and cubic modes only, not nearest")
    cubic_a = float(ctx.attr("cubic_coeff_a", -0.75))
    exclude = int(ctx.attr("exclude_outside", 0))
    extrap = float(ctx.attr("extrapolation_value", 0.0))
    full_scales = [1.0] * n
    out = list(s)
    if sizes is not None:
        policy = _s(ctx.attr("keep_aspect_ratio_policy", "stretch"))
        if policy != "stretch":
            ratios = [sizes[k] / s[a] for k, a in enumerate(axes)]
            r = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                full_scales[a] = r
                out[a] = int(math.floor(r * s[a] + 0.5))
        else:
            for k, a in enumerate(axes):
                out[a] = sizes[k]
                full_scales[a] = sizes[k] / s[a]
    elif scales is not None:
        for k, a in enumerate(axes):
            full_scales[a] = scales[k] if len(scales) == len(axes) else scales[a]
            out[a] = int(math.floor(s[a] * full_scales[a]))
    else:
        raise ctx.fail("give scales or sizes")
    roi_full = [(0.0, 1.0)] * n
    if roi is not None:
        m = len(axes) if len(roi) == 2 * len(axes) else n
        ax = axes if m == len(axes) else list(range(n))
        roi_full = list(roi_full)
        for k, a in enumerate(ax):
            roi_full[a] = (roi[k], roi[k + m])
    dt = dtype_of(x)
    fdt = "float64" if dt == "float64" else "float32"
    resized = [a for a in range(n) if out[a] != s[a] or full_scales[a] != 1.0 or ctm == "tf_crop_and_resize"]

    def orig_coord(a: int, o: Any) -> Any:
        scale = full_scales[a]
        of = cast(o, fdt)
        F = lambda v: const_like(v, fdt)  # noqa: E731
        if ctm == "half_pixel":
            return (of + F(0.5)) / F(scale) - F(0.5)
        if ctm == "half_pixel_symmetric":
            adj = out[a] / (scale * s[a]) if True else 1.0
            center = s[a] / 2.0
            offset = center * (1 - adj)
            return F(offset) + (of + F(0.5)) / F(scale) - F(0.5)
        if ctm == "pytorch_half_pixel":
            return (of + F(0.5)) / F(scale) - F(0.5) if out[a] > 1 else F(0.0)
        # the resized length of align_corners and tf_crop_and_resize is scale * length, a
        # fraction when it comes from a scale (the output has its floor), as in the reference
        lr = scale * s[a]
        if ctm == "align_corners":
            return of * F((s[a] - 1) / (lr - 1)) if lr != 1 else F(0.0)
        if ctm == "asymmetric":
            return of / F(scale)
        if ctm == "tf_crop_and_resize":
            r0, r1 = roi_full[a]
            if lr != 1:
                return F(r0 * (s[a] - 1)) + of * F((r1 - r0) * (s[a] - 1) / (lr - 1))
            return F(0.5 * (r0 + r1) * (s[a] - 1))
        raise ctx.fail(f"coordinate_transformation_mode {ctm} is not supported")

    def body(*i: Any) -> Any:
        coords = {a: orig_coord(a, i[a]) for a in resized}
        outside = None
        if ctm == "tf_crop_and_resize":
            for a in resized:
                c = (coords[a] < const_like(0.0, fdt)) | (coords[a] > const_like(s[a] - 1, fdt))
                outside = c if outside is None else outside | c
        if mode == "nearest":
            idx = list(i)
            for a in resized:
                c = coords[a]
                if nmode == "round_prefer_floor":
                    r = te.if_then_else(
                        c - te.floor(c) == const_like(0.5, fdt), te.floor(c), te.floor(c + const_like(0.5, fdt))
                    )
                elif nmode == "round_prefer_ceil":
                    r = te.floor(c + const_like(0.5, fdt))
                elif nmode == "floor":
                    r = te.floor(c)
                else:
                    r = te.ceil(c)
                ii = cast(r, "int32")
                idx[a] = E.max_expr(E.min_expr(ii, s[a] - 1), 0)
            v = x[tuple(idx)]
        else:
            taps = []  # per axis: list of (index expr, weight expr)
            for a in resized:
                c = coords[a]
                fl = te.floor(c)
                t = c - fl
                base = cast(fl, "int32")
                if antialias:
                    from .image import antialias_taps

                    offs, ws = antialias_taps(mode, t, full_scales[a], cubic_a, fdt)
                elif mode == "linear":
                    offs, ws = [0, 1], [const_like(1.0, fdt) - t, t]
                else:
                    offs, ws = [-1, 0, 1, 2], _cubic_weights(t, cubic_a, fdt)
                entries = []
                for off, wgt in zip(offs, ws):
                    j = base + off
                    ok = (j >= 0) & (j < s[a])
                    jj = E.max_expr(E.min_expr(j, s[a] - 1), 0)
                    entries.append((jj, wgt, ok))
                if exclude and (mode == "cubic" or antialias):
                    tot = None
                    for _, wgt, ok in entries:
                        term = te.if_then_else(ok, wgt, const_like(0.0, fdt))
                        tot = term if tot is None else tot + term
                    entries = [
                        (jj, te.if_then_else(ok, wgt, const_like(0.0, fdt)) / tot, ok) for jj, wgt, ok in entries
                    ]
                taps.append(entries)
            v = None
            combos: list[tuple[list[Any], Any]] = [([], const_like(1.0, fdt))]
            for entries in taps:
                combos = [(idx + [jj], w * wgt) for idx, w in combos for jj, wgt, _ in entries]
            for jlist, w in combos:
                idx = list(i)
                for a, jj in zip(resized, jlist):
                    idx[a] = jj
                term = cast(x[tuple(idx)], fdt) * w
                v = term if v is None else v + term
            if v is None:
                v = x[i]
            v = cast(v, dt)
        if outside is not None:
            v = te.if_then_else(outside, const_like(extrap, dt), v)
        return v

    return compute(tuple(out), body, name=uname("resize"))


@register("Einsum", pattern="heavy")
def einsum(ctx: OpContext, *xs: Tensor) -> Tensor:
    """ONNX Einsum (explicit or implicit output, ``...`` broadcasting)."""
    eq = _s(ctx.attr("equation")).replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(xs):
        raise ctx.fail(f"equation {eq!r} names {len(terms)} operands but the node has {len(xs)}")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    ell_rank = max((len(shape(x)) - len(t.replace("...", "")) for t, x in zip(terms, xs) if "..." in t), default=0)
    ell = "".join(spare[:ell_rank])
    sizes: dict[str, int] = {}
    full_terms = []
    for t, x in zip(terms, xs):
        s = shape(x)
        if "..." in t:
            r = len(s) - len(t.replace("...", ""))
            t = t.replace("...", ell[ell_rank - r :])
        full_terms.append(t)
        for c, d in zip(t, s):
            sizes[c] = max(sizes.get(c, 1), d)
    if _:
        out = rhs.replace("...", ell)
    else:
        letters = "".join(full_terms)
        out = ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell))
    red = [c for c in dict.fromkeys("".join(full_terms)) if c not in out]
    raxes = {c: te.reduce_axis((0, sizes[c]), name=f"e{c}") for c in red}
    dt = dtype_of(xs[0])

    def body(*i: Any) -> Any:
        env = {c: i[k] for k, c in enumerate(out)}
        env.update({c: r.var for c, r in raxes.items()})
        prod = None
        for t, x in zip(full_terms, xs):
            s = shape(x)
            v = x[tuple(0 if s[k] == 1 and sizes[c] != 1 else env[c] for k, c in enumerate(t))]
            prod = v if prod is None else prod * v
        return te.sum(prod, axis=list(raxes.values())) if raxes else prod

    res = compute(tuple(sizes[c] for c in out), body, name=uname("einsum"))
    return res if dtype_of(res) == dt else compute(shape(res), lambda *i: cast(res[i], dt), name=uname("einsum_cast"))
