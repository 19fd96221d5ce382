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
from .util import cast, compute, shape, uname

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
        # the signed bytes of each column: a plain sum flagged constant_layout, computed at
        # compile time when the right operand is a constant (the weights of a QGemm)
        kc = te.reduce_axis((0, K), name="k")
        csum = compute((N,), lambda n: te.sum(bs(kc.var, n), axis=kc), name=uname(name + "_colsum"),
                       constant_layout=True)

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


# -- direct convolutions on channel-blocked byte words ---------------------------------------------
#: ``x_byte(n, c, h, w)``: the image as an unsigned byte value (int32 in [0, 255]) at a point
#: inside it (``c < C``, ``h < H``, ``w < W``).
XByte = Callable[[Any, Any, Any, Any], E.PrimExpr]
#: ``w_byte(m, c, r, q)``: the weights as a signed byte value (int32 in [-128, 127]).
WByte = Callable[[Any, Any, Any, Any], E.PrimExpr]
#: ``epilogue(acc, mb, k)``: the output value of channel ``mb * lanes + k`` from its int32 sum.
Epilogue = Callable[[E.PrimExpr, Any, Any], E.PrimExpr]


def conv_lanes(strategy: Layout) -> int:
    """Output channels per block of :func:`conv2d_vnni_nchwc` on ``strategy``'s target: the
    int32 lanes of its widest ``vpdpbusd`` (16 with AVX512-VNNI, 8 with AVX-VNNI)."""
    target = getattr(strategy, "target", None)
    return vnni_width(target) if target is not None else 0


def channel_block(value: Callable[[Any], E.PrimExpr], M: int, lanes: int, dtype: str, name: str) -> Tensor:
    """A per-output-channel value ``value(m)`` blocked as ``[ceil(M / lanes), lanes]`` (zero past
    ``M``), flagged ``constant_layout``: computed at compile time when it reads only constants,
    so the convolution's store reads one vector of it per channel block."""
    zero = E.const(0, dtype)

    def body(mb: Any, k: Any) -> E.PrimExpr:
        m = mb * lanes + k
        return te.if_then_else(m < M, cast(value(E.min_expr(m, M - 1)), dtype), zero)

    return compute((-(-M // lanes), lanes), body, name=uname(name), constant_layout=True)


def conv2d_vnni_nchwc(
    x_byte: XByte,
    pad_byte: E.PrimExpr,
    xshape: tuple[int, int, int, int],
    w_byte: WByte,
    wshape: tuple[int, int, int, int],
    strides: list[int],
    dil: list[int],
    lo: list[int],
    hi: list[int],
    lanes: int,
    epilogue: Epilogue,
    name: str = "qconv",
) -> Tensor:
    """A 2-D convolution (group 1) of bytes on ``vpdpbusd`` as a direct, register-blocked
    convolution; the result ``[N, M, OH, OW]`` of ``epilogue``'s type.

    Stages: the image as int32 words of 4 consecutive channels, padded with ``pad_byte`` (an
    unsigned byte value) — ``[N, ceil(C/4), H + pads, W + pads, 1]``, a workspace; the weights as
    words of the same 4 channels for ``lanes`` output channels — ``[ceil(M/lanes), ceil(C/4), KH,
    KW, 1, lanes]``, flagged ``constant_layout`` (packed at compile time), zero bytes past ``C``
    and ``M``; the sum ``acc[n, mb, oh, ow, k] = sum vpdpbusd(image word, weight word)`` over
    channel words and taps, tagged ``"conv_nchwc"`` so the CPU strategy schedules it as its
    blocked convolution (:func:`ember.strategy.cpu_conv.schedule_conv_nchwc`: ``tile_oc`` channel
    vectors x ``tile_ow`` columns of int32 accumulators, each step one broadcast image word and
    one weight vector per channel block); ``epilogue(acc, mb, k)`` in the store of that register
    block (blocked, a workspace), then the NCHW result. The sum is exact (wrapping int32, no
    saturation) and includes the padding taps: the caller takes ``pad_byte`` times the weights'
    sums out in its epilogue where ``pad_byte`` is not the operand's zero."""
    N, C, H, W = xshape
    M = wshape[0]
    out = conv2d_vnni_blocked(x_byte, None, pad_byte, xshape, w_byte, wshape, strides, dil, lo, hi, lanes, epilogue,
                              name)
    yb = compute(shape(out), lambda *i: out[i], name=uname(name + "_store"), materialize=True, workspace=True)
    return compute((N, M) + shape(yb)[2:4], lambda n, m, i, j: yb[n, E.floordiv(m, lanes), i, j,
                                                                     E.floormod(m, lanes)], name=uname(name))


#: ``x_blocked(n, cb, h, w, i)``: byte ``i`` of channel block ``cb`` of a channel-blocked image
#: ``[N, CB, H, W, b]`` as an unsigned byte value (int32 in [0, 255]), at a point inside it.
XBlockedByte = Callable[[Any, Any, Any, Any, Any], E.PrimExpr]


def _word_of(byte: Callable[[int], E.PrimExpr]) -> E.PrimExpr:
    """The uint32 word of the 4 unsigned byte values ``byte(j)`` (low byte first): shifts and
    adds of zero-extended bytes, which LLVM reads as one 32-bit load where the bytes are
    consecutive in memory."""
    w: E.PrimExpr = E.const(0, "uint32")
    for j in range(4):
        v = cast(cast(byte(j), "uint8"), "uint32")
        w = w + (v * (1 << (8 * j)) if j else v)
    return w


def conv2d_vnni_blocked(
    x_byte: XByte | None,
    x_blocked: tuple[XBlockedByte, int] | None,
    pad_byte: E.PrimExpr,
    xshape: tuple[int, int, int, int],
    w_byte: WByte,
    wshape: tuple[int, int, int, int],
    strides: list[int],
    dil: list[int],
    lo: list[int],
    hi: list[int],
    lanes: int,
    epilogue: Epilogue,
    name: str = "qconv",
    zero_pad_channels: bool = False,
) -> Tensor:
    """The convolution of :func:`conv2d_vnni_nchwc` with its result left channel-blocked:
    ``[N, ceil(M / lanes), OH, OW, lanes]`` of ``epilogue``'s type, a plain (not materialized)
    stage reading the register block's sums, so a consumer fused after it (a residual
    ``QLinearAdd``) runs in the same store. With ``zero_pad_channels`` the channels past ``M``
    are exactly zero (the invariant of a blocked tensor), else ``epilogue``'s value there.

    The image is read either as ``x_byte`` (a plain ``[N, C, H, W]`` image, ``xshape``: its
    words of 4 channels copied into a padded workspace, as :func:`conv2d_vnni_nchwc`) or as
    ``x_blocked = (byte, b)``: a channel-blocked image ``[N, ceil(C / b), H, W, b]`` (``b`` a
    multiple of 4, ``xshape`` still ``(N, C, H, W)``) whose words are read where they lie, 4
    consecutive bytes of a block (no copy), or, with spatial padding, from a padded copy of the
    bytes (``pad_byte`` in the padding). The channels past ``C`` in the image's last block are
    multiplied by zero weights, so their bytes do not matter."""
    N, C, H, W = xshape
    M, C2, KH, KW = wshape
    assert C == C2, (xshape, wshape)
    OH = (H + lo[0] + hi[0] - ((KH - 1) * dil[0] + 1)) // strides[0] + 1
    OW = (W + lo[1] + hi[1] - ((KW - 1) * dil[1] + 1)) // strides[1] + 1
    MB = -(-M // lanes)
    Hp, Wp = H + lo[0] + hi[0], W + lo[1] + hi[1]
    u32 = "uint32"
    padded = any(lo) or any(hi)

    if x_blocked is None:
        assert x_byte is not None
        CB, RI = -(-C // 4), 1

        def xword(n: Any, cb: Any, i: Any, j: Any, _u: Any) -> E.PrimExpr:
            ih, iw = i - lo[0], j - lo[1]
            inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            ihc, iwc = E.max_expr(E.min_expr(ih, H - 1), 0), E.max_expr(E.min_expr(iw, W - 1), 0)
            w: E.PrimExpr = E.const(0, u32)
            for b in range(4):
                c = cb * 4 + b
                v = te.if_then_else(inside, x_byte(n, E.min_expr(c, C - 1), ihc, iwc), pad_byte)
                v = te.if_then_else(c < C, cast(cast(v, "uint8"), u32), E.const(0, u32))
                w = w + (v * (1 << (8 * b)) if b else v)
            return w

        xw = compute((N, CB, Hp, Wp, 1), xword, name=uname(name + "_xwords"), materialize=True, workspace=True)

        def read(n: Any, cb: Any, i: Any, j: Any, ri: Any) -> E.PrimExpr:
            return xw[n, cb, i, j, ri]

        def channel(cb: Any, ri: Any, b: int) -> Any:
            return cb * 4 + b
    else:
        xb, blk = x_blocked
        assert blk % 4 == 0, blk
        CB, RI = -(-C // blk), blk // 4
        src: Callable[[Any, Any, Any, Any, Any], E.PrimExpr] = xb
        if padded:
            # the image's unsigned bytes with the padding (pad_byte) around them, one pass that
            # vectorizes along the block: an arithmetic select (no branch around the read)
            def pbody(n: Any, cb: Any, i: Any, j: Any, k: Any) -> E.PrimExpr:
                ih, iw = i - lo[0], j - lo[1]
                inside = cast((ih >= 0) & (ih < H) & (iw >= 0) & (iw < W), "int32")
                v = xb(n, cb, E.max_expr(E.min_expr(ih, H - 1), 0), E.max_expr(E.min_expr(iw, W - 1), 0), k)
                return cast((v - pad_byte) * inside + pad_byte, "uint8")

            # tagged as a blocked convolution's padded input: parallel over rows, the block in lanes
            xp = compute((N, CB, Hp, Wp, blk), pbody, name=uname(name + "_xpad"), tag="nchwc_pad", materialize=True,
                         workspace=True)

            def src(n: Any, cb: Any, i: Any, j: Any, k: Any) -> E.PrimExpr:
                return cast(xp[n, cb, i, j, k], "int32")

        def read(n: Any, cb: Any, i: Any, j: Any, ri: Any) -> E.PrimExpr:
            return _word_of(lambda b: src(n, cb, i, j, ri * 4 + b))

        def channel(cb: Any, ri: Any, b: int) -> Any:
            return cb * blk + ri * 4 + b

    def wword(mb: Any, cb: Any, r: Any, q: Any, ri: Any, k: Any) -> E.PrimExpr:
        m = mb * lanes + k
        w: E.PrimExpr = E.const(0, u32)
        for b in range(4):
            c = channel(cb, ri, b)
            v = cast(cast(w_byte(E.min_expr(m, M - 1), E.min_expr(c, C - 1), r, q), "uint8"), u32)
            v = te.if_then_else((c < C) & (m < M), v, E.const(0, u32))
            w = w + (v * (1 << (8 * b)) if b else v)
        return w

    ww = compute((MB, CB, KH, KW, RI, lanes), wword, name=uname(name + "_wwords"), constant_layout=True,
                 workspace=True)
    rc = te.reduce_axis((0, CB), name="rc")
    rr = te.reduce_axis((0, KH), name="rr")
    rq = te.reduce_axis((0, KW), name="rq")
    ri = te.reduce_axis((0, RI), name="ri")
    zero = E.const(0, "int32")

    def body(n: Any, o: Any, i: Any, j: Any, k: Any) -> E.PrimExpr:
        xv = read(n, rc.var, i * strides[0] + rr.var * dil[0], j * strides[1] + rq.var * dil[1], ri.var)
        wv = ww[o, rc.var, rr.var, rq.var, ri.var, k]
        return te.sum(E.Call(zero.dtype, OP, (zero, xv, wv)), axis=[rc, rr, rq, ri])

    attrs = {"strides": list(strides), "dilations": list(dil), "pads": (list(lo), list(hi))}
    acc = compute((N, MB, OH, OW, lanes), body, name=uname(name + "_acc"), tag="conv_nchwc", attrs=attrs)

    def store(n: Any, o: Any, i: Any, j: Any, k: Any) -> E.PrimExpr:
        v = epilogue(acc[n, o, i, j, k], o, k)
        if zero_pad_channels and M % lanes:
            v = te.if_then_else(o * lanes + k < M, v, E.const(0, v.dtype))
        return v

    return compute((N, MB, OH, OW, lanes), store, name=uname(name + "_out"))


#: ``epilogue(acc, m)``: the output value of channel ``m`` from its int32 sum.
RowEpilogue = Callable[[E.PrimExpr, Any], E.PrimExpr]


def conv1x1_vnni(
    x_byte: XByte,
    xshape: tuple[int, int, int, int],
    w_byte: Callable[[Any, Any], E.PrimExpr],
    M: int,
    strides: list[int],
    strategy: Layout,
    epilogue: RowEpilogue,
    name: str = "qconv1x1",
) -> Tensor:
    """A 1x1 convolution without padding (any stride) of bytes on ``vpdpbusd`` as the packed
    GEMM ``[M, CB] x [CB, P]`` of the weights' words (``w_byte(m, c)``: signed byte values; a
    ``constant_layout`` stage, packed at compile time) with the image's words packed in panels of
    ``nr`` output pixels (``x_byte``: unsigned byte values; ``[N, P / nr, ceil(C / 4), nr]``, tag
    ``"gemm_pack"``, the stride applied while packing); the product is tagged ``"conv_packed"``
    with ``conv_out`` so the CPU strategy computes each ``mr x nr`` tile in registers inside the
    store of the NCHW result (:func:`ember.strategy.cpu_conv.schedule_conv_gemm`), where
    ``epilogue`` runs: the output is written channel-major with the pixels in the vector lanes,
    no transposition. Zero bytes pad the channels to a multiple of 4."""
    N, C, H, W = xshape
    OH, OW = (H - 1) // strides[0] + 1, (W - 1) // strides[1] + 1
    P = OH * OW
    nr = strategy.gemm_panel_width("float32")
    npanel = -(-P // nr)
    CB = -(-C // 4)
    u32 = "uint32"

    def word(byte: Callable[[Any], E.PrimExpr], cb: Any) -> E.PrimExpr:
        w: E.PrimExpr = E.const(0, u32)
        for b in range(4):
            c = cb * 4 + b
            v = te.if_then_else(c < C, cast(cast(byte(E.min_expr(c, C - 1)), "uint8"), u32), E.const(0, u32))
            w = w + (v * (1 << (8 * b)) if b else v)
        return w

    def pack(n: Any, no: Any, cb: Any, ni: Any) -> E.PrimExpr:
        p = E.min_expr(no * nr + ni, P - 1)
        ih, iw = E.floordiv(p, OW) * strides[0], E.floormod(p, OW) * strides[1]
        return te.if_then_else(no * nr + ni < P, word(lambda c: x_byte(n, c, ih, iw), cb), E.const(0, u32))

    bp = compute((N, npanel, CB, nr), pack, name=uname(name + "_pack"), tag="gemm_pack", attrs={"panel_axis": 1},
                 constant_layout=True, workspace=True)
    aw = compute((M, CB), lambda m, cb: word(lambda c: w_byte(m, c), cb), name=uname(name + "_wwords"),
                 constant_layout=True, workspace=True)
    k = te.reduce_axis((0, CB), name="k4")
    zero = E.const(0, "int32")
    cv = compute(
        (N, M, npanel * nr),
        lambda n, m, col: te.sum(E.Call(zero.dtype, OP, (zero, bp[n, E.floordiv(col, nr), k.var, E.floormod(col, nr)],
                                                         aw[m, k.var])), axis=k),
        name=uname(name + "_gemm"),
        tag="conv_packed",
        attrs={"nr": nr, "K": CB, "conv_out": (OH, OW)},
        workspace=True,
    )
    return compute((N, M, OH, OW), lambda n, m, i, j: epilogue(cv[n, m, i * OW + j], m), name=uname(name))
