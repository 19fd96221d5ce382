"""CPU convolution schedules: direct convolutions on channel-blocked tensors, and the packed
convolution GEMM, each with its epilogue in the store.

**Blocked (NCHW[x]c) convolutions** (:mod:`ember.ops.conv_nchwc`, placed by the CPU layout
policy :mod:`ember.strategy.cpu_layout`): :func:`schedule_conv_nchwc` keeps a register block of
``tile_oc`` output-channel vectors x ``tile_ow`` output columns (``tile_oc * tile_ow`` vector
accumulators) while it runs over the input channels and kernel taps: each step broadcasts one
input value per output column and loads one weight vector per channel block, so the product is
a chain of vector FMAs with no packing of the input. The epilogue (bias, batch-norm folded into
the weights, residual add, activation, clip — the fused consumers in the same blocked layout) is
applied to the register block before its one store. The same function schedules a depthwise
convolution and the blocked max pool (``PER_CHANNEL_TAGS``: ``tile_ow`` accumulators of one
channel vector, the taps outside). Their knobs
(:func:`conv_nchwc_space`): ``tile_ow``, ``tile_oh`` (output rows per block; default 1: two
rows measured slower here, the larger block spilling), ``tile_oc`` (direct only), ``unroll``
(the register block's loops; for a depthwise convolution also the taps of a kernel row, whose
padding tests then fold into constants per block); legal when the accumulators, a weight
vector per channel block and a broadcast fit the target's vector registers. The defaults:
``tile_oc = 2`` when the output-channel blocks pair up, ``tile_ow`` the largest of 8, 7, 6, 4
dividing the output width (else 8, with a tail), capped by the registers; an odd number of
blocks on a target with 32 vector registers takes three blocks x 7 columns, or one block over
several rows (:func:`odd_channel_tiles`). On a target with 16 (AVX2) the cap of a block of
several channel blocks counts a broadcast per column too (2 x 6 and 2 x 7 spilled: 2.1-2.5x
slower), and where no pair of blocks fits a dividing run of columns (14 or 7 columns) four
blocks take 3 columns when the blocks divide by four (a tail column or two), else one block
takes the widest dividing run of at least 7.

**The packed convolution GEMM** (NCHW, what runs when the layout pass is off or a convolution is
not placed: grouped convolutions, other dtypes):

A 2-D convolution built by :func:`ember.ops.nn.conv_tensor` on the CPU is an im2col panel pack
(``tag == "gemm_pack"``), a packed GEMM ``C[b, m, n]`` over whole panels (``tag ==
"conv_packed"``, ``attrs["conv_out"] = (OH, OW)``) and an NCHW view of its first ``OH * OW``
columns, into which the fusion pass inlines the convolution's consumers (bias, batch-norm,
residual add, activation, clip). :func:`schedule_conv_gemm` schedules the GEMM *inside* the
stage that stores that view: the output's spatial axes are fused into one column axis and tiled
``mr x nr`` like the GEMM; at each tile the GEMM accumulates an ``mr x nr`` register block
(scope ``local``) and the epilogue reads it, so the product never goes through memory and the
activation costs no extra pass over the output. Its knobs are those of the packed GEMM
(:func:`ember.strategy.cpu_gemm.packed_gemm_space`: the tuner sees the same space), the default
point is the same heuristic, and the register tile's loops are the GEMM's own
(:func:`ember.strategy.cpu_gemm.schedule_tile`).

When the view is read by more than one stored stage (a convolution whose raw output is also an
output of the fused kernel), the GEMM is scheduled on its own as before
(:func:`~ember.strategy.cpu_gemm.schedule_packed_gemm`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import te
from .base import extent
from .cpu_gemm import schedule_packed_gemm, schedule_tile
from .space import ConfigEntity, ConfigSpace

if TYPE_CHECKING:
    from .cpu import CPUStrategy

#: The attribute that marks a convolution's packed GEMM whose NCHW view the schedule may fuse:
#: the output's spatial extents ``(OH, OW)``.
CONV_OUT_ATTR = "conv_out"


def is_fusable_conv_gemm(op: te.ComputeOp) -> bool:
    """True for a convolution's packed GEMM (:func:`ember.ops.nn.conv_tensor`) that
    :func:`schedule_conv_gemm` computes in registers inside its consumer's store."""
    return getattr(op, "tag", "") == "conv_packed" and bool(op.attrs) and CONV_OUT_ATTR in op.attrs


def _stored_readers(s: te.Schedule, stage: te.Stage) -> list[te.Stage]:
    """The stages that are not inlined and read ``stage`` (directly or through inlined stages)."""
    found: list[te.Stage] = []
    todo = list(s.consumers(stage))
    seen: set[int] = set()
    while todo:
        c = todo.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        if c.attach == "inline":
            todo.extend(s.consumers(c))
        else:
            found.append(c)
    return found


def schedule_conv_gemm(
    s: te.Schedule,
    stage: te.Stage,
    strategy: CPUStrategy,
    cfg: ConfigEntity,
    handled: set[int] | None = None,
) -> None:
    """Schedule the convolution GEMM ``stage`` (:func:`is_fusable_conv_gemm`) at point ``cfg``
    of :func:`~ember.strategy.cpu_gemm.packed_gemm_space` (validated by the caller): inside the
    one stored stage that reads it when there is exactly one and it is a 4-D non-reduction stage
    of the convolution's output shape — that stage's id then goes into ``handled`` and must not
    be scheduled again — else as a standalone packed GEMM."""
    op = stage.op
    readers = _stored_readers(s, stage)
    oh_ext, ow_ext = (int(v) for v in op.attrs[CONV_OUT_ATTR])
    bext, mext = extent(op.axis[0]), extent(op.axis[1])
    out = readers[0] if len(readers) == 1 else None
    if out is not None:
        oop = out.op
        ok = (
            isinstance(oop, te.ComputeOp)
            and not oop.is_reduction
            and out.attach == "root"
            and [extent(a) for a in oop.axis] == [bext, mext, oh_ext, ow_ext]
        )
        out = out if ok else None
    if out is None:
        schedule_packed_gemm(s, stage, cfg)
        return
    nr = int(op.attrs["nr"])
    mr = int(cfg["mr"].val)
    stage.set_scope("local")
    b, m, oh, ow = out.op.axis
    col = out.fuse(oh, ow)
    mo, no, mi, ni = out.tile(m, col, mr, nr)
    weights_outer = cfg["order"].val == "weights_outer"
    if weights_outer:
        out.reorder(b, mo, no, mi, ni)
        stage.compute_at(out, no)
    else:
        out.reorder(b, no, mo, mi, ni)
        stage.compute_at(out, mo)
    out.vectorize(ni)
    schedule_tile(stage, cfg)
    fused = out.fuse(b, mo) if weights_outer else out.fuse(b, no)
    if cfg["parallel"].val:
        out.parallel(fused)
    if handled is not None:
        handled.add(id(out.op))


# -- blocked (NCHW[x]c) convolutions -------------------------------------------------------------------
NCHWC_TAGS = ("conv_nchwc", "dwconv_nchwc", "pool_nchwc")
#: The blocked stages that work per channel (no reduction over channels): one channel vector
#: per register block, the taps outside.
PER_CHANNEL_TAGS = ("dwconv_nchwc", "pool_nchwc")
TILE_OW_VALUES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 28)
TILE_OW_PREFERRED = (8, 7, 6, 4)
TILE_OH_VALUES = (1, 2, 3, 4)
TILE_OC_VALUES = (1, 2, 3, 4, 5, 6, 7, 8)
# Defaults for an odd number of output-channel blocks on a target with 32 vector registers
# (:func:`odd_channel_tiles`): the registers a three-block register block may use (more
# spilled: 3 x 8 columns ran 10 % slower than 3 x 7), and those one channel block's rows may.
ODD_TRIPLE_REGISTERS = 26
ODD_ROWS_REGISTERS = 30
TILE_OW_ROWS = (28, 16, 14, 12, 8, 7)
# The defaults on a target with 16 vector registers (AVX2) count the broadcasts: a register block
# of ``tile_oc > 1`` channel blocks x ``tile_ow`` columns holds ``tile_oc * tile_ow``
# accumulators, the ``tile_ow`` broadcast inputs (LLVM loads each once and reuses it across the
# channel blocks, the weight vectors folded into the FMAs as memory operands) and a weight. 2 x 6
# and 2 x 7 blocks spill: measured one thread, Zen 4 at ``-mcpu=haswell``, 1024 -> 512 channels
# 1x1 at 7x7 1129 us with 2 x 6 (+ a tail column), 538 with 1 x 7, 534 with 2 x 4; 64 -> 384 at
# 14x14 210 us with 2 x 6, 127 with 1 x 14 (AVX-512, 2 x 7 of 16-channel vectors: 130).


def odd_channel_tiles(mb: int, oh: int, ow: int, vecs: int) -> tuple[int, int, int] | None:
    """(tile_oc, tile_oh, tile_ow) for ``mb`` (odd) output-channel blocks of ``vecs`` vectors,
    ``oh x ow`` outputs, on a target with 32 vector registers; None where the even-block rule
    applies unchanged. One channel block in a register block of ``tile_ow`` columns (7 or 8)
    left the FMA pipes half idle on the projections of EfficientNet-Lite0 (7, 5 and 3 blocks of
    112, 80 and 40 channels), 15-20 % slower than ONNX Runtime. Three blocks when they divide
    ``mb`` (x 7 columns); else one block over several output rows ("row tiling": the largest
    ``tile_oh x tile_ow`` of rows dividing ``oh`` and columns dividing ``ow``, within 30
    registers: 2 x 14 at 14x14, 1 x 28 at 28x28 and above). One thread, this machine (Zen 5):
    672 -> 112 channels at 14x14 146 -> 120 us, 480 -> 80 71 -> 62 us, 240 -> 40 at 28x28 89 ->
    73 us, 24 -> 144 at 56x56 129 -> 115 us."""
    if mb % 2 == 0:
        return None
    if mb % 3 == 0:
        tw = next((t for t in TILE_OW_PREFERRED if ow % t == 0 and 3 * vecs * (t + 1) + 1 <= ODD_TRIPLE_REGISTERS),
                  None)
        return (3, 1, tw) if tw is not None else None
    best = None
    for th in TILE_OH_VALUES:
        for tw in TILE_OW_ROWS:
            if oh % th or ow % tw or vecs * (th * tw + 1) + 1 > ODD_ROWS_REGISTERS:
                continue
            if best is None or th * tw > best[0] * best[1]:
                best = (th, tw)
    if best is None or best[0] * best[1] <= 8:
        return None
    return 1, best[0], best[1]


def conv_nchwc_space(op: te.ComputeOp, strategy: CPUStrategy) -> ConfigSpace:
    """The knob space of blocked stage ``op`` (a tag of ``NCHWC_TAGS``: convolution, depthwise, max pool) on
    ``strategy``'s CPU; its default point is the heuristic of the module docstring."""
    nregs = strategy.vector_registers
    lanes = strategy.target.vector_lanes(32)
    _, ob, oh, ow, vb = (extent(a) for a in op.axis)
    vecs = max(1, -(-vb // lanes))  # vector registers per channel block
    depthwise = op.tag in PER_CHANNEL_TAGS
    space = ConfigSpace()
    toc = 1 if depthwise or ob % 2 else 2

    def need(oc: int, tw: int, th: int = 1) -> int:
        return oc * th * tw * vecs + oc * vecs + 1

    def held(oc: int, tw: int, th: int = 1) -> int:
        # 16 registers (AVX2): with several channel blocks LLVM keeps each column's broadcast live
        # across them (the weight vectors become memory operands), so the block holds its
        # accumulators, ``th * tw`` broadcasts and a weight (measured: the comment after
        # TILE_OW_ROWS)
        return oc * th * tw * vecs + (th * tw if oc > 1 else vecs) + 1

    def fits(oc: int, tw: int) -> bool:
        return held(oc, tw) <= nregs if nregs < 32 else need(oc, tw) <= nregs

    tw = next((t for t in TILE_OW_PREFERRED if ow % t == 0 and fits(toc, t)), None)
    if tw is None and nregs < 32 and not depthwise:
        # no pair of blocks fits a dividing run of columns (14 and 7 columns): four blocks x 3
        # columns (with a tail) where the blocks divide by four, else one block over the widest
        # dividing run of at least 7 columns
        wide = [t for t in TILE_OW_VALUES if t >= 7 and ow % t == 0 and fits(1, t)]
        if ob % 4 == 0 and ow >= 3 and fits(4, 3):
            toc, tw = 4, 3
        elif wide:
            toc, tw = 1, max(wide)
    if tw is None:
        tw = max(t for t in TILE_OW_VALUES if t <= max(1, min(ow, 8)) and fits(toc, t))
    th = 1
    odd = None if depthwise or nregs < 32 else odd_channel_tiles(ob, oh, ow, vecs)
    if odd is not None:
        toc, th, tw = odd
    space.define_knob("tile_oc", (1,) if depthwise else TILE_OC_VALUES, default=toc)
    space.define_knob("tile_ow", TILE_OW_VALUES, default=tw)
    space.define_knob("tile_oh", TILE_OH_VALUES, default=th)
    space.define_knob("unroll", (True, False), default=True)

    def registers(cfg: ConfigEntity) -> str | None:
        oc, th, tw_ = cfg["tile_oc"].val, cfg["tile_oh"].val, cfg["tile_ow"].val
        n = need(oc, tw_, th) if nregs >= 32 else min(need(oc, tw_, th), held(oc, tw_, th))
        if n > nregs:
            return (f"a {oc} x {th} x {tw_} block of {vb}-channel vectors needs {n} vector registers, the target "
                    f"has {nregs}")
        return None

    space.add_check(registers)
    return space


def _store_stage(s: te.Schedule, stage: te.Stage) -> tuple[te.Stage, te.Stage]:
    """(the stage that stores the convolution's result, the stage that accumulates it): the one
    stored reader of the same shape (the epilogue) with ``stage`` accumulating in registers, or
    ``stage`` itself with a register cache when there is no such reader."""
    op = stage.op
    shp = [extent(a) for a in op.axis]
    readers = _stored_readers(s, stage)
    if len(readers) == 1:
        out = readers[0]
        oop = out.op
        if (isinstance(oop, te.ComputeOp) and not oop.is_reduction and out.attach == "root"
                and [extent(a) for a in oop.axis] == shp):
            stage.set_scope("local")
            return out, stage
    cache = s.cache_write(op.output(0), "local")
    first = cache[0] if isinstance(cache, list) else cache
    return s[op], s[first]


def schedule_nchwc_pad(stage: te.Stage, parallel: bool = True) -> None:
    """The padded-input stage of a blocked convolution (tag ``nchwc_pad``): parallel over
    (image, channel block, row) — a network's first convolution reads one channel block, whose
    copy ran on one thread when only blocks were parallel — the channel vector innermost."""
    n, c, i, _, k = stage.op.axis
    fused = stage.fuse(n, c, i)
    if parallel:
        stage.parallel(fused)
    stage.vectorize(k)


def schedule_conv_nchwc(
    s: te.Schedule,
    stage: te.Stage,
    strategy: CPUStrategy,
    cfg: ConfigEntity,
    handled: set[int] | None = None,
) -> None:
    """Schedule blocked stage ``stage`` (a tag of ``NCHWC_TAGS``) at point
    ``cfg`` of :func:`conv_nchwc_space` (validated by the caller): register blocks of
    ``tile_oc`` channel vectors x ``tile_ow`` columns accumulated over the reduction, the
    epilogue applied in the store, parallel over (image, channel-block group, output row). The
    stage it places (the store) goes into ``handled``."""
    op = stage.op
    out, acc = _store_stage(s, stage)
    n, o, oh, ow, k = out.op.axis
    oo, oi = out.split(o, factor=int(cfg["tile_oc"].val))
    ho, hi = out.split(oh, factor=int(cfg["tile_oh"].val))
    wo, wi = out.split(ow, factor=int(cfg["tile_ow"].val))
    out.reorder(n, oo, ho, wo, oi, hi, wi, k)
    out.parallel(out.fuse(n, oo, ho))
    out.vectorize(k)
    acc.compute_at(out, wo)
    an, ao, ah, aw, ak = acc.op.axis
    red = list(acc.op.reduce_axis)
    if op.tag in PER_CHANNEL_TAGS:
        acc.reorder(an, *red, ao, ah, aw, ak)
    else:
        rc, rr, rq, ri = red
        acc.reorder(an, rc, rr, rq, ri, ao, ah, aw, ak)
    if cfg["unroll"].val:
        if op.tag in PER_CHANNEL_TAGS:
            # the taps of a kernel row too: each column's padding test and clamped read then
            # become a few constants per block instead of work per tap (5x5: 2.6x faster)
            acc.unroll(red[1])
        acc.unroll(ao)
        acc.unroll(ah)
        acc.unroll(aw)
        out.unroll(oi)
        out.unroll(hi)
        out.unroll(wi)
    acc.vectorize(ak)
    if handled is not None:
        handled.add(id(out.op))
