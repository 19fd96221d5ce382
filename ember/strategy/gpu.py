"""The GPU strategy: schedules for the operator library on ``cuda`` and ``rocm``.

:meth:`GPUStrategy.schedule_group` schedules one fused kernel of a model:

* injective intermediate stages are inlined into their readers (as on the CPU; stages flagged
  ``materialize`` are not);
* every other stage is computed at the root, one output element per thread: its data-parallel
  axes are fused and split into ``blockIdx.x`` x ``threadIdx.x``; a reduction accumulates in a
  register (a ``local`` cache) and stores each result once — except a reduction of at least
  :data:`CROSS_THREAD_MIN` values per output along its input's innermost dimension (the rows of
  LayerNorm, Softmax, ReduceMean), which gets one block per output: its threads each accumulate a
  strided share (``rfactor``) and the lowering combines the partials with warp shuffles
  (:func:`cross_thread_threads`; BERT-base's 24 LayerNorms went from 2.7 ms to 0.12 ms);
* the packed GEMM stages (``tag == "conv_packed"``: convolutions and matrix products, built by
  :mod:`ember.ops.nn`) get a shared-memory tiled schedule (:func:`packed_gemm_space`,
  :func:`schedule_packed_gemm`): a ``BM x BN`` block tile of ``(BM / TM) x (BN / TN)`` threads, a
  ``TM x TN`` register tile per thread, the first reduction axis blocked in chunks of ``bk`` so
  that both operands' tiles are staged through shared memory. Its knobs are ``tile_m`` and
  ``tile_n`` (splits of the output rows and columns into blocks x threads x per-thread values),
  ``bk``, ``unroll`` and ``stages``; legal points keep the block within 256 threads, the staged
  tiles within the target's shared memory, the register tile within 128 accumulators, and a
  block's columns on whole panels of the packed operand. The default point is the heuristic:
  :data:`XL_TILE` or :data:`LARGE_TILE` where they fill the GPU, else the largest of
  :data:`GEMM_TILES` that still gives :data:`MIN_BLOCKS` blocks (16 x 16 threads), chunks of about
  :data:`BK_TAPS` multiply-adds (:data:`BK_TAPS_LARGE` for blocks of 128 x 128 and more). Small
  register tiles run their warps as 4 x 8 patches of thread tiles with the row operand staged
  transposed (:data:`WARP_SHAPE`).

The model compiler also asks the strategy to compute a 0-d output as a one-element vector
(:meth:`GPUStrategy.lift_outputs`), to give every intermediate scalar reduction an axis
(:func:`lift_scalar_reductions`) and to keep every intermediate reduction in a workspace (it runs
as a kernel of its own).

Guarantees: every root stage is bound to GPU threads (the GPU lowering rejects stages that are
not), block sizes stay within every target's limit (256 threads), and sizes that do not divide
the tiles are guarded by the lowering.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from .. import te
from ..arith import simplify
from ..ir import expr as E
from ..ir.dtypes import dtype as as_dtype
from ..ir.visitor import post_order_visit
from ..target import Target
from ..te import ComputeOp, PlaceholderOp, Tensor
from ..te.rewrite import rewrite
from ..te.tensor import IterKind, IterVar, Range
from ..te.tensor_intrin import INTRINSICS, MatrixIntrinsic
from .base import Strategy, extent, first_tagged, reads_reduced_innermost
from .space import ConfigEntity, ConfigSpace, InvalidConfig
from .tensorcore import (
    fewest_parts,
    model_tensorcore_space,
    reads_as_matrix,
    schedule_tensorcore,
    tc_split_k,
    tile_for_domain,
    tile_of,
)

THREADS = 256
#: Targets already told that their float16 products cannot use a matrix unit (said once each).
_WARNED_NO_MATRIX_UNIT: set[str] = set()
# Packed GEMM tilings, largest first: (block tile BM x BN, thread tile TM x TN), always 16 x 16
# threads. The largest that still gives MIN_BLOCKS blocks is the default (else the one with the
# most): a late ResNet layer (512 x 49 outputs) makes 8 blocks of 64 x 64 but 128 of 16 x 16, and
# a GPU has about that many multiprocessors (132 on the H100, 108 on the A100).
# A block's columns must cover whole panels of the packed operand (BN a multiple of its panel
# width nr), so that the panels a block stages have a constant count.
GEMM_TILES = ((64, 64, 4, 4), (32, 32, 2, 2), (16, 32, 1, 2), (16, 16, 1, 1))
# A larger tiling taken first wherever it launches MIN_BLOCKS blocks, with a split-K if needed
# (see gemm_split_k): on the H100 a 2048^3 product runs at 37.5 TFLOP/s in 128 x 128 blocks of
# 8 x 8 per thread against 25.6 in 64 x 64 blocks. None: never.
LARGE_TILE: tuple[int, int, int, int] | None = (128, 128, 8, 8)
# Larger still, taken first wherever it launches MIN_BLOCKS blocks without a split: 256 x 128
# blocks of 16 x 8 per thread halve the shared-memory wavefronts per multiply-add of 128 x 128
# blocks of 8 x 8, which is what limits those (ncu on the H200: the shared-load pipe ~90 % busy;
# cuBLAS's SGEMM runs 256 x 128 blocks). None: never.
XL_TILE: tuple[int, int, int, int] | None = (256, 128, 16, 8)
MIN_BLOCKS = 128
BK_TAPS = 32
# Blocks of at least 128 x 128 outputs take chunks of BK_TAPS_LARGE reduction steps instead: two
# pipeline stages of them fit in 48 KB of shared memory.
BK_TAPS_LARGE = 16
# Split-K (gemm_split_k): a product whose largest tile launches fewer than MIN_BLOCKS blocks is
# summed in up to MAX_SPLIT_K parts of at least SPLIT_K_MIN products each.
MAX_SPLIT_K = 16
SPLIT_K_MIN = 256
# A reduction over at least CROSS_THREAD_MIN values per output along its input's innermost
# dimension (a LayerNorm's or Softmax's row) is split over the threads of a block, about one
# thread per CROSS_THREAD_PER values: a row of 768 gets 128 threads, 6 values each.
CROSS_THREAD_MIN = 64
CROSS_THREAD_PER = 4
# A plain matrix product (tag "matmul": one that did not become a packed GEMM) with at least
# this many outputs keeps one thread per output; fewer (a GEMV) split each output's reduction.
MATMUL_FLAT_OUTPUTS = 2048
# What the knob space offers: threads along one block dimension, values per thread along it,
# reduction chunks; and the limits of a legal point.
THREAD_COUNTS = (1, 2, 4, 8, 16, 32)
PER_THREAD = (1, 2, 4, 8, 16)
BK_VALUES = (1, 2, 4, 8, 16, 32, 64)
MAX_ACCUMULATORS = 128
# Shared-memory slots of the software pipeline over the reduction chunks (1: none; see
# Stage.pipeline): the copies of the next chunks overlap this one's arithmetic. The default is
# default_stages's; PIPELINE_STAGES (None: that heuristic) fixes it for an experiment.
STAGE_VALUES = (1, 2, 3)
PIPELINE_STAGES: int | None = None
MAX_GRID_YZ = 65535
# A panel row of the packed operand is one 128-byte memory transaction.
PANEL_BYTES = 128
# Shared memory: 32 banks of 4 bytes; a 128-bit load covers VEC float32 values.
BANKS = 32
VEC = 4
# A packed GEMM warp as a patch of 4 x 8 thread tiles (rows x columns) where that tiles the block
# and a thread's columns are whole vectors (_warp_shape); the row operand is then staged
# transposed, so that a thread's rows are consecutive words.
WARP_SHAPE = (4, 8)
# ... for register tiles of fewer outputs than this: 64 x 64 blocks of 4 x 4 (BERT's split
# products 1.1x faster on the H200, ResNet-50 fp32 1.08x); 128 x 128 blocks of 8 x 8 measured
# slower with it (512 x 1024 x 1024 in 4 parts 45.5 -> 56.1 us, 2048^3 451 -> 467 us) and
# 256 x 128 blocks of 16 x 8 the same (4096^3 3405 us either way).
WARP_TILE_OUTPUTS = 64


class GPUStrategy(Strategy):
    """Schedules for a ``cuda`` or ``rocm`` target (see the module docstring)."""

    def __init__(self, target: Target | str = "cuda", tf32: bool = False):
        super().__init__(target)
        if not self.target.is_gpu:
            raise ValueError(f"GPUStrategy needs a GPU target, not {self.target}")
        #: float32 products on TF32 tensor cores (``precision="tf32"``)
        self.tf32 = bool(tf32)

    def gemm_panel_width(self, dtype: str = "float32") -> int:
        """Elements of ``dtype`` in 128 bytes (32 float32): a panel row is one memory
        transaction, and every tile of :data:`GEMM_TILES` but the narrowest covers whole panels.
        Independent of the host CPU (it equals what the AVX-512 hosts of the H100 machines gave
        before the strategy layer, so those kernels are unchanged; measured in one run on the
        H100: MobileNetV2 1.234 ms before, 1.269 ms with 64-byte panels)."""
        return max(1, PANEL_BYTES * 8 // max(1, as_dtype(dtype).bits))

    def schedule_group(
        self, outs: Sequence[Tensor], keep: set[str] | frozenset[str] = frozenset(), config: ConfigEntity | None = None
    ) -> te.Schedule:
        """The GPU schedule of the kernel computing ``outs`` (see :func:`schedule_group_gpu`)."""
        return schedule_group_gpu(outs, keep, strategy=self, config=config)

    def space(self, outs: Sequence[Tensor]) -> ConfigSpace | None:
        """The knob space of the kernel computing ``outs``: its first packed GEMM stage's
        (:func:`packed_gemm_space`), else its tensor-core accumulator's
        (:func:`~ember.strategy.tensorcore.model_tensorcore_space`), else None."""
        op = first_tagged(outs, "conv_packed")
        if op is not None:
            return packed_gemm_space(op, self.target)
        tc = first_tagged(outs, "tc_gemm")
        if tc is not None:
            return model_tensorcore_space(tc.output(0), INTRINSICS[tc.attrs["intrin"]], self.target)
        return None

    def tc_split_k(self, batch: int, mp: int, np_: int, kp: int) -> int:
        """:func:`ember.strategy.tensorcore.tc_split_k`."""
        return tc_split_k(batch, mp, np_, kp)

    def packs_batched_gemm(self) -> bool:
        """True: a batch of float32 products of two computed operands (attention's ``Q Kᵀ`` and
        ``P V``) runs on the packed GEMM, its right operands packed by a kernel of their own."""
        return True

    def gemm_split_k(self, batch: int, m: int, n: int, k0: int, taps: int) -> int:
        """:func:`gemm_split_k` with this target's float32 panel width."""
        return gemm_split_k(batch, m, n, self.gemm_panel_width("float32"), k0, taps)

    def lift_outputs(self, outs: Sequence[Tensor]) -> list[Tensor]:
        """Each 0-d output computed as a one-element vector (GPU stages need an axis to bind)."""
        from ..ops.util import uname

        def vector(t: Tensor) -> Tensor:
            return te.compute((1,), lambda i: t[()], name=uname("scalar"))

        return [vector(t) if not t.shape else t for t in outs]

    def lift(self, outs: Sequence[Tensor]) -> list[Tensor]:
        """:func:`lift_scalar_reductions`."""
        return lift_scalar_reductions(outs)

    def keeps_in_memory(self, op: ComputeOp) -> bool:
        """Workspace stages and every intermediate reduction (which runs as a kernel of its own),
        except a tensor-core accumulator (it stays in registers of its consumer's kernel) and a
        row reduction (:func:`cross_thread_threads`: a LayerNorm's or Softmax's), which the
        schedule computes in shared memory inside its reader's blocks where the rows line up
        (:func:`_fuse_row_reductions`) and otherwise as a kernel of its own."""
        if op.workspace:
            return True
        return op.is_reduction and op.tag != "tc_gemm" and cross_thread_threads(op) is None

    def matrix_intrinsic(self, dtype: str) -> MatrixIntrinsic | None:
        """The target's matrix instruction for float16 and bfloat16 products: ``mma.sync``
        m16n8k16 on NVIDIA sm_80 and newer (sm_90 included: ``wgmma`` is not emitted yet), MFMA
        16x16x16 on gfx90a/gfx942, WMMA on RDNA3; float32 on ``mma.m16n8k8.tf32`` when the strategy
        was made with ``tf32``; None otherwise (CUDA-core schedules)."""
        names = {"float16": ("mma.m16n8k16.f16", "mfma.f32.16x16x16.f16", "wmma.f32.16x16x16.f16"),
                 "bfloat16": ("mma.m16n8k16.bf16", "mfma.f32.16x16x16.bf16", "wmma.f32.16x16x16.bf16")}
        if self.tf32:
            names["float32"] = ("mma.m16n8k8.tf32",)
        reasons = []
        for name in names.get(str(dtype), ()):
            intrin = INTRINSICS.get(name)
            if intrin is not None:
                why = intrin.unavailable(self.target)
                if why is None:
                    return intrin
                if intrin.kind == self.target.kind:
                    reasons.append(why)
        if reasons and str(self.target) not in _WARNED_NO_MATRIX_UNIT:
            _WARNED_NO_MATRIX_UNIT.add(str(self.target))
            warnings.warn(f"ember: {dtype} products on {self.target} run on CUDA-core code ({'; '.join(reasons)})",
                          RuntimeWarning, stacklevel=2)
        return None


def _threads_for(total: int) -> int:
    """Threads per block for ``total`` independent elements: 256, fewer (a multiple of 32) when
    there is not that much work."""
    return int(min(THREADS, max(32, -(-total // 32) * 32)))


def bind_flat(stage: te.Stage, axes: Sequence[te.IterVar]) -> te.IterVar:
    """Fuse ``axes`` and split them over ``blockIdx.x`` x ``threadIdx.x``; returns the thread axis.
    A stage with no axes (a scalar) gets an extent-1 axis to bind."""
    axes = list(axes)
    total = int(np.prod([extent(a) for a in axes])) if axes else 1
    if not axes:
        raise ValueError("bind_flat needs at least one axis")
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    bx, tx = stage.split(fused, factor=_threads_for(total))
    stage.bind(bx, te.thread_axis("blockIdx.x"))
    stage.bind(tx, te.thread_axis("threadIdx.x"))
    return tx


def _reduce_extent(op: ComputeOp) -> int | None:
    """Elements each output of reduction ``op`` combines (None when an extent is symbolic)."""
    total = 1
    for iv in op.reduce_axis:
        ext = simplify(iv.dom.extent)
        if not isinstance(ext, E.IntImm):
            return None
        total *= int(ext.value)
    return total


def cross_thread_threads(op: ComputeOp) -> int | None:
    """Threads that should split each output of reduction ``op`` (a power of two from 32 to
    :data:`THREADS`, about one per :data:`CROSS_THREAD_PER` values), or None when one thread per
    output is the better schedule: fewer than :data:`CROSS_THREAD_MIN` values per output, several
    outputs per element (arg-reductions), a symbolic extent, or a reduction that does not run
    along its input's innermost dimension."""
    if op.num_outputs != 1 or not op.axis:
        return None
    outputs = 1
    for a in op.axis:
        outputs *= extent(a)
    if op.tag == "matmul" and outputs >= MATMUL_FLAT_OUTPUTS:
        return None  # a matrix product with many outputs: a thread per output reuses rows in cache
    kr = _reduce_extent(op)
    if kr is None or kr < CROSS_THREAD_MIN or not reads_reduced_innermost(op):
        return None
    want = max(32, kr // CROSS_THREAD_PER)
    return int(min(THREADS, 1 << (want.bit_length() - 1)))


def _schedule_cross_thread(s: te.Schedule, stage: te.Stage, threads: int) -> None:
    """One block per output of the reduction ``stage``: ``threads`` threads each accumulate a
    strided share of its values in a register (``rfactor`` + a ``local`` cache), write it to a
    ``shared`` partial buffer, and the GPU lowering combines the partials with warp shuffles
    (:class:`ember.lowering.gpu._CrossThread`)."""
    op = stage.op
    red = list(stage.leaf_iter_vars[len(op.axis):])
    k = stage.fuse(*red) if len(red) > 1 else red[0]
    _, ki = stage.split(k, factor=threads)
    out = op.output(0)
    rf = s.rfactor(out, ki)
    local = s.cache_write(rf, "local")
    s[rf].set_scope("shared")
    axes = list(stage.op.axis)
    b = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    stage.bind(b, te.thread_axis("blockIdx.x"))
    s[rf].compute_at(stage, b)
    tx = s[rf].op.axis[0]  # rfactor puts the factored axis first
    s[rf].bind(tx, te.thread_axis("threadIdx.x"))
    s[local].compute_at(s[rf], tx)


def _row_reductions(s: te.Schedule, stage: te.Stage) -> list[te.Stage]:
    """The root reduction stages that ``stage`` reads directly or through inlined stages, in
    schedule order, when every one of them can be computed inside ``stage``'s blocks: a row
    reduction (:func:`cross_thread_threads`) of one output, not kept in memory, read only by
    ``stage``, by the others or by stages inlined into them. Empty otherwise."""
    found: dict[int, te.Stage] = {}
    todo = list(stage.op.input_tensors)
    seen: set[int] = set()
    while todo:
        t = todo.pop()
        if id(t.op) in seen or isinstance(t.op, PlaceholderOp):
            continue
        seen.add(id(t.op))
        st = s[t]
        op = st.op
        if st.attach == "inline":
            todo.extend(op.input_tensors)
        elif st.attach == "root" and isinstance(op, ComputeOp) and op.is_reduction:
            if op.num_outputs != 1 or op.workspace or st.is_output or cross_thread_threads(op) is None:
                return []
            found[id(st)] = st
            todo.extend(op.input_tensors)
    if not found:
        return []
    members = set(found) | {id(stage)}
    for st in found.values():
        for c in s.downstream(st):
            if id(c) not in members and c.attach != "inline":
                return []
            if c.attach == "inline" and not any(id(d) in members for d in s.downstream(c)):
                return []
    return [st for st in s.stages if id(st) in found]


def _fuse_row_reductions(s: te.Schedule, stage: te.Stage) -> bool:
    """Schedule root stage ``stage`` (a LayerNorm's or Softmax's output) and the row reductions
    it reads (:func:`_row_reductions`: the mean and variance, or the maximum and the sum) as one
    kernel: one block per row, each reduction computed at the block into ``shared`` memory by the
    block's threads (``rfactor`` + the lowering's warp-shuffle all-reduce), then the row's
    outputs written by the same threads. Returns False, scheduling nothing, when ``stage`` has
    no such reductions or its rows do not line up with theirs (leading axes of equal extents,
    the rest of ``stage``'s axes as long as each reduction)."""
    op = stage.op
    if not isinstance(op, ComputeOp) or op.is_reduction or getattr(op, "tag", "") in ("conv_packed", "tc_gemm"):
        return False
    reds = _row_reductions(s, stage)
    if not reds:
        return False
    dims = [extent(a) for a in op.axis]
    row_dims = None
    for r in reds:
        rdims = [extent(a) for a in r.op.axis]
        k = len(rdims)
        while k and rdims[k - 1] == 1:
            k -= 1
        kr = _reduce_extent(r.op)
        if len(rdims) != len(dims) or rdims[:k] != dims[:k] or kr != int(np.prod(dims[k:])):
            return False
        if row_dims not in (None, k):
            return False
        row_dims = k
    assert row_dims is not None
    if row_dims == 0 or row_dims == len(dims):
        return False
    threads = max(cross_thread_threads(r.op) or 32 for r in reds)
    axes = list(op.axis)
    rows = stage.fuse(*axes[:row_dims]) if row_dims > 1 else axes[0]
    inner = stage.fuse(*axes[row_dims:]) if len(axes) - row_dims > 1 else axes[row_dims]
    _, tx = stage.split(inner, factor=threads)
    stage.bind(rows, te.thread_axis("blockIdx.x"))
    stage.bind(tx, te.thread_axis("threadIdx.x"))
    for r in reds:
        red = list(r.leaf_iter_vars[len(r.op.axis):])
        k = r.fuse(*red) if len(red) > 1 else red[0]
        _, ki = r.split(k, factor=threads)
        rf = s.rfactor(r.op.output(0), ki)
        local = s.cache_write(rf, "local")
        s[rf].set_scope("shared")
        r.set_scope("shared")
        r.compute_at(stage, rows)
        raxes = list(r.op.axis)
        last = r.fuse(*raxes) if len(raxes) > 1 else raxes[0]
        s[rf].compute_at(r, last)
        s[rf].bind(s[rf].op.axis[0], te.thread_axis("threadIdx.x"))
        s[local].compute_at(s[rf], s[rf].op.axis[0])
    return True


def _schedule_root(s: te.Schedule, stage: te.Stage) -> None:
    op = stage.op
    assert isinstance(op, ComputeOp)
    if op.is_reduction:
        threads = cross_thread_threads(op)
        if threads is not None:
            _schedule_cross_thread(s, stage, threads)
            return
        outs = [op.output(k) for k in range(op.num_outputs)]
        cache = s.cache_write(outs if len(outs) > 1 else outs[0], "local")
        first = cache[0] if isinstance(cache, list) else cache
        tx = bind_flat(stage, stage.op.axis)
        s[first].compute_at(stage, tx)
        return
    bind_flat(stage, op.axis)


def _gemm_dims(op: ComputeOp) -> tuple[int, int, int, int, int, int]:
    """(batch, M, N, nr, c0, taps) of a packed GEMM: output extents, the panel width, the extent
    of the first reduction axis and the product of the others."""
    nb, nm, nn = (extent(a) for a in op.axis)
    nr = int(op.attrs.get("nr", 1)) if op.attrs else 1
    red = list(op.reduce_axis)
    taps = int(np.prod([extent(r) for r in red[1:]])) if len(red) > 1 else 1
    return nb, nm, nn, nr, extent(red[0]), taps


def _gemm_tiles(nr: int) -> list[tuple[int, int, int, int]]:
    """The entries of :data:`GEMM_TILES` whose block columns cover whole panels of ``nr``."""
    return [t for t in GEMM_TILES if t[1] % nr == 0] or [GEMM_TILES[0]]


def _large_tile_split(nb: int, nm: int, nn: int, nr: int, k0: int, taps: int) -> int | None:
    """Parts of the first reduction axis with which :data:`LARGE_TILE` launches
    :data:`MIN_BLOCKS` blocks (1: without a split), or None when it cannot (or does not cover
    whole panels of ``nr``)."""
    if LARGE_TILE is None or LARGE_TILE[1] % nr:
        return None
    blocks = nb * -(-nm // LARGE_TILE[0]) * -(-nn // LARGE_TILE[1])
    if blocks >= MIN_BLOCKS:
        return 1
    parts = fewest_parts(blocks, k0, -(-SPLIT_K_MIN // max(1, taps)), MAX_SPLIT_K, MIN_BLOCKS)
    return parts if blocks * parts >= MIN_BLOCKS else None


def default_gemm_tile(nb: int, nm: int, nn: int, nr: int) -> tuple[int, int, int, int]:
    """The heuristic tiling ``(BM, BN, TM, TN)`` of a packed GEMM with ``nb`` x ``nm`` x ``nn``
    outputs: :data:`LARGE_TILE` when it launches :data:`MIN_BLOCKS` blocks, else the largest of
    :data:`GEMM_TILES` that does, else the one that launches the most."""
    if XL_TILE is not None and XL_TILE[1] % nr == 0 and nb * -(-nm // XL_TILE[0]) * -(-nn // XL_TILE[1]) >= MIN_BLOCKS:
        return XL_TILE
    if _large_tile_split(nb, nm, nn, nr, 1, 1) == 1:
        return LARGE_TILE
    tiles = _gemm_tiles(nr)
    for tile in tiles:
        if nb * -(-nm // tile[0]) * -(-nn // tile[1]) >= MIN_BLOCKS:
            return tile
    return tiles[-1]


def gemm_split_k(nb: int, nm: int, nn: int, nr: int, k0: int, taps: int) -> int:
    """Parts to split a packed GEMM's first reduction axis (``k0`` steps of ``taps`` products)
    into (:func:`ember.ops.nn.split_k_product`). When :data:`LARGE_TILE` launches
    :data:`MIN_BLOCKS` blocks with some split (the fewest parts, a divisor of ``k0``, at most
    :data:`MAX_SPLIT_K`, each at least :data:`SPLIT_K_MIN` products long), those parts: a
    512 x 1024 x 1024 product runs 128 blocks of 128 x 128 in 4 parts, 1.4x faster on the H100
    than 128 unsplit blocks of 64 x 64. Otherwise 1 when the largest of :data:`GEMM_TILES`
    launches that many; else the fewest parts with which it does, or the most such parts when
    none does. BERT-base's 128 x 768 x 3072 product gets 24 blocks of 64 x 64 in 6 parts
    instead of 96 of 32 x 32."""
    large = _large_tile_split(nb, nm, nn, nr, k0, taps)
    if large is not None:
        return large
    big = _gemm_tiles(nr)[0]
    blocks = nb * -(-nm // big[0]) * -(-nn // big[1])
    if blocks >= MIN_BLOCKS:
        return 1
    return fewest_parts(blocks, k0, -(-SPLIT_K_MIN // max(1, taps)), MAX_SPLIT_K, MIN_BLOCKS)


def default_stages(tile: tuple[int, int, int, int], need: int, smem: int) -> int:
    """Pipeline stages (:meth:`ember.te.Stage.pipeline`) of a packed GEMM with block tiling
    ``tile`` whose staged operands take ``need`` bytes per stage, on a target with ``smem``
    bytes of shared memory per block: 2 for blocks of at least 64 x 64 outputs when two copies
    fit (on the H100: 1.1-1.3x faster for 64 x 64 tiles, even for 128 x 128 ones), else 1 (a
    second slot slowed 32 x 32 tiles by a few per cent). :data:`PIPELINE_STAGES` overrides."""
    if PIPELINE_STAGES is not None:
        return PIPELINE_STAGES
    return 2 if tile[0] * tile[1] >= 64 * 64 and 2 * need <= smem else 1


def packed_gemm_space(op: ComputeOp, target: Target) -> ConfigSpace:
    """The knob space of packed GEMM ``op`` on GPU ``target`` (see the module docstring); its
    default point is the heuristic tiling of :data:`GEMM_TILES`."""
    nb, nm, nn, nr, c0, taps = _gemm_dims(op)
    BM, BN, TM, TN = default_gemm_tile(nb, nm, nn, nr)
    splits = [(-1, t, v) for t in THREAD_COUNTS for v in PER_THREAD]
    space = ConfigSpace()
    space.define_split("tile_m", nm, num_outputs=3, policy="candidate", candidate=splits, default=(-1, BM // TM, TM))
    space.define_split("tile_n", nn, num_outputs=3, policy="candidate", candidate=splits, default=(-1, BN // TN, TN))
    # Chunks of about BK_TAPS reduction steps; a divisor of the first reduction axis when one is
    # close, so that no chunk is partial.
    want = max(1, (BK_TAPS_LARGE if BM * BN >= 128 * 128 else BK_TAPS) // taps)
    divisors = [d for d in range(1, min(want, c0) + 1) if c0 % d == 0]
    bk = divisors[-1] if divisors and 2 * divisors[-1] >= want else min(want, c0)
    space.define_knob("bk", sorted({v for v in BK_VALUES if v <= c0} | {bk}), default=bk)
    space.define_knob("unroll", (True, False), default=True)
    elem = max(1, op.output(0).dtype.bits // 8)
    smem = target.max_shared_memory_per_block
    per_stage = (BM + BN) * bk * taps * elem
    space.define_knob("stages", STAGE_VALUES, default=default_stages((BM, BN, TM, TN), per_stage, smem))

    def block(cfg: ConfigEntity) -> tuple[int, int, int, int, int, int]:
        (mo, ty, tm), (_, tx, tn) = cfg["tile_m"].size, cfg["tile_n"].size
        return mo, ty, tm, tx, tn, int(cfg["bk"].val)

    def threads(cfg: ConfigEntity) -> str | None:
        _, ty, _, tx, _, _ = block(cfg)
        return f"{ty} x {tx} threads per block exceed {THREADS}" if ty * tx > THREADS else None

    def registers(cfg: ConfigEntity) -> str | None:
        _, _, tm, _, tn, _ = block(cfg)
        if tm * tn > MAX_ACCUMULATORS:
            return f"a {tm} x {tn} register tile exceeds {MAX_ACCUMULATORS} accumulators"
        return None

    def panels(cfg: ConfigEntity) -> str | None:
        _, _, _, tx, tn, _ = block(cfg)
        return f"a block's {tx * tn} columns do not cover whole panels of {nr}" if (tx * tn) % nr else None

    def shared_memory(cfg: ConfigEntity) -> str | None:
        _, ty, tm, tx, tn, kb = block(cfg)
        need = (ty * tm + tx * tn) * kb * taps * elem * int(cfg["stages"].val)
        return f"the staged tiles need {need} bytes of shared memory, {target} has {smem}" if need > smem else None

    def grid(cfg: ConfigEntity) -> str | None:
        mo = block(cfg)[0]
        return f"a grid of {nb} x {mo} blocks exceeds {MAX_GRID_YZ} along y or z" if max(mo, nb) > MAX_GRID_YZ else None

    for check in (threads, registers, panels, shared_memory, grid):
        space.add_check(check)
    return space


def schedule_packed_gemm(s: te.Schedule, stage: te.Stage, cfg: ConfigEntity) -> None:
    """``C[b, m, n] = sum W[m, r...] * P[b, n // nr, r..., n % nr]`` (see ``ops.nn``) as a tiled
    GEMM at point ``cfg`` of :func:`packed_gemm_space` (assumed legal: validate it first):
    operands staged through shared memory one reduction chunk at a time, a register tile of
    ``TM x TN`` outputs per thread."""
    op = stage.op
    t = op.output(0)
    readers = [t]
    inputs = list(dict.fromkeys(op.input_tensors))
    _, ty_n, TM = cfg["tile_m"].size
    _, tx_n, TN = cfg["tile_n"].size
    nr = int(op.attrs.get("nr", 1)) if op.attrs else 1
    rows = _row_operand_axes(op)
    warp = _warp_shape(ty_n, tx_n, TM, TN)
    # with warps as patches, the row operand is staged transposed (see the staging loop below)
    transpose = warp is not None and TM % VEC == 0

    def staged(x: Tensor) -> Tensor:
        if transpose and id(x.op) in rows:
            pos = rows[id(x.op)]
            order = [d for d in range(len(x.shape)) if d != pos] + [pos]
            return s.cache_read(x, "shared", readers, axes=order)
        return s.cache_read(x, "shared", readers)

    shared = [staged(x) for x in inputs]
    cl = s.cache_write(t, "local")
    st = s[t]
    b, m, n = st.op.axis
    BM, BN = ty_n * TM, tx_n * TN
    unroll = bool(cfg["unroll"].val)
    mo, no, mi, ni = st.tile(m, n, BM, BN)
    ty, ti = st.split(mi, nparts=ty_n)
    if warp is not None:
        # Each warp a WARP_M x WARP_N patch of thread tiles, a thread's TN columns contiguous:
        # threadIdx.x is the lane, threadIdx.y the warp.
        tx, tj = st.split(ni, nparts=tx_n)
        wy, ly = st.split(ty, factor=warp[0])
        wx, lx = st.split(tx, factor=warp[1])
        st.reorder(b, mo, no, wy, wx, ly, lx, ti, tj)
        ty, tx = st.fuse(wy, wx), st.fuse(ly, lx)
        inner = [ti, tj]
    elif TN > VEC and TN % VEC == 0:
        # A thread's columns in groups of VEC, the groups BN / (TN / VEC) apart: each group is
        # one 128-bit shared load, and a quarter warp's loads fall on distinct banks.
        tjo, rest = st.split(ni, nparts=TN // VEC)
        tx, tjv = st.split(rest, factor=VEC)
        inner = [ti, tjo, tjv]
    else:
        tx, tj = st.split(ni, nparts=tx_n)
        inner = [ti, tj]
    if warp is None:
        st.reorder(b, mo, no, ty, tx, *inner)
    if len(inner) == 3:
        tj = st.fuse(inner[1], inner[2])
    st.bind(b, te.thread_axis("blockIdx.z"))
    st.bind(mo, te.thread_axis("blockIdx.y"))
    st.bind(no, te.thread_axis("blockIdx.x"))
    st.bind(ty, te.thread_axis("threadIdx.y"))
    st.bind(tx, te.thread_axis("threadIdx.x"))
    if unroll:
        st.unroll(ti)
        st.unroll(tj)
    s[cl].compute_at(st, tx)
    cb, cm, cn = s[cl].op.axis
    red = list(s[cl].op.reduce_axis)
    ko, ki = s[cl].split(red[0], factor=int(cfg["bk"].val))
    s[cl].reorder(ko, ki, *red[1:], cm, cn)
    if unroll:
        s[cl].unroll(cm)
        s[cl].unroll(cn)
    nthreads = ty_n * tx_n
    lanes = warp[0] * warp[1] if warp is not None else tx_n  # threadIdx.x's extent
    for x, sh in zip(inputs, shared):
        s[sh].compute_at(s[cl], ko)
        axes = list(s[sh].op.axis)
        if transpose and id(x.op) in rows:
            # Stored transposed (rows last, see below): a thread's TM rows are consecutive
            # words, read as 128-bit loads; each reduction step's row of BM words is padded by
            # VEC words so that the staging stores spread over the banks. The copy walks the
            # operand in its own order (reduction innermost: coalesced global reads).
            s[sh].storage_align(axes[-2], BANKS, VEC)
            axes = [axes[-1]] + axes[:-1]
        elif id(x.op) in rows:
            # Rows one stride apart plus one: the threads of a warp that read different rows
            # (TM rows apart) hit different banks.
            s[sh].storage_align(s[sh].op.axis[rows[id(x.op)]], BANKS, 1)
        if len(axes) > 1:
            s[sh].reorder(*axes)
        fused = s[sh].fuse(*axes) if len(axes) > 1 else axes[0]
        if warp is not None and id(x.op) not in rows and nr % VEC == 0 and len(axes) > 1:
            # (its innermost axis is the panel's nr columns, whole in every block)
            # the packed operand's panel rows copied as 128-bit vectors (cp.async.cg when pipelined)
            fused, vec = s[sh].split(fused, factor=VEC)
            s[sh].vectorize(vec)
        fo, fi = s[sh].split(fused, factor=nthreads)
        fy, fx = s[sh].split(fi, factor=lanes)
        s[sh].bind(fy, te.thread_axis("threadIdx.y"))
        s[sh].bind(fx, te.thread_axis("threadIdx.x"))
    stages = int(cfg["stages"].val)
    if stages > 1:
        s[cl].pipeline(ko, stages)


def _warp_shape(ty_n: int, tx_n: int, tm: int, tn: int) -> tuple[int, int] | None:
    """The ``(rows, columns)`` of thread tiles that one warp of a packed GEMM block of
    ``ty_n x tx_n`` threads with ``tm x tn`` register tiles covers: :data:`WARP_SHAPE` when it
    tiles the block, a thread's ``tn`` columns are whole 128-bit loads and the register tile has
    fewer than :data:`WARP_TILE_OUTPUTS` outputs, else None (the threads of a warp then run along
    the columns, ``threadIdx.x`` being the column of a thread tile)."""
    wm, wn = WARP_SHAPE
    if ty_n % wm or tx_n % wn or tn % VEC or tm * tn >= WARP_TILE_OUTPUTS:
        return None
    return WARP_SHAPE


def _row_operand_axes(op: ComputeOp) -> dict[int, int]:
    """For each input of packed GEMM ``op`` read with an index built from its row axis ``m``
    (and not its column axis ``n``), keyed by the id of its operation: the position of that
    index, the dimension whose stride separates the rows a block's threads read."""
    m, n = op.axis[1].var, op.axis[2].var
    found: dict[int, int] = {}

    def uses(e: E.PrimExpr, v: E.Var) -> bool:
        hit = [False]

        def mark(x: object) -> None:
            if x is v:
                hit[0] = True

        post_order_visit(e, mark)
        return hit[0]

    def visit(x: object) -> None:
        if isinstance(x, E.ProducerLoad):
            if any(uses(i, n) for i in x.indices):
                return
            for pos, i in enumerate(x.indices):
                if uses(i, m):
                    found.setdefault(id(x.producer.op), pos)

    post_order_visit(op.body[0] if isinstance(op.body, (list, tuple)) else op.body, visit)
    return found


def lift_scalar_reductions(outs: Sequence[Tensor]) -> list[Tensor]:
    """Rewrite the program computing ``outs`` so that no intermediate reduction is a scalar:
    a 0-d reduction becomes a one-element vector (GPU stages need an axis to bind to threads),
    and its readers read element 0. Returns the (rebuilt) outputs; computes the same values."""
    out_ops = {id(o.op) for o in outs}

    def lift(op: te.Operation) -> tuple[IterVar, ...] | None:
        if isinstance(op, ComputeOp) and op.is_reduction and not op.axis and id(op) not in out_ops:
            return (IterVar(Range(E.const(0), E.const(1)), E.Var("ax0"), IterKind.DATA_PAR),)
        return None

    return rewrite(outs, lift)


def _tensorcore_input(s: te.Schedule, stage: te.Stage) -> Tensor | None:
    """The tensor-core accumulator (tag ``"tc_gemm"``) that root stage ``stage`` reads, directly or
    through inlined stages, or None."""
    seen: set[int] = set()
    todo = list(stage.op.input_tensors) if isinstance(stage.op, ComputeOp) else []
    while todo:
        t = todo.pop()
        if id(t.op) in seen:
            continue
        seen.add(id(t.op))
        st = s[t]
        if getattr(st.op, "tag", "") == "tc_gemm" and st.attach == "root" and not st.is_output:
            return st.op.output(0)
        if st.attach == "inline" and isinstance(st.op, ComputeOp):
            todo.extend(st.op.input_tensors)
    return None


def schedule_group_gpu(
    outs: Sequence[Tensor],
    keep: set[str] | frozenset[str] = frozenset(),
    strategy: GPUStrategy | None = None,
    config: ConfigEntity | None = None,
) -> te.Schedule:
    """The default GPU schedule of a fused kernel computing ``outs`` (see the module docstring)
    for ``strategy``'s target (``cuda`` when None). Stages named in ``keep`` or flagged
    ``materialize`` are not inlined. ``config`` sets the knobs of the first packed GEMM (a point of
    :meth:`GPUStrategy.space`; validated before anything is scheduled)."""
    target = strategy.target if strategy is not None else Target("cuda")
    tuned = first_tagged(outs, "conv_packed")
    tuned_tc = first_tagged(outs, "tc_gemm") if tuned is None else None
    cfg_tuned = None
    if config is not None:
        if tuned is not None:
            cfg_tuned = packed_gemm_space(tuned, target).validate(config)
        elif tuned_tc is not None:
            intrin_tc = INTRINSICS[tuned_tc.attrs["intrin"]]
            cfg_tuned = model_tensorcore_space(tuned_tc.output(0), intrin_tc, target).validate(config)
        else:
            raise InvalidConfig("this kernel has no tunable stage, so it takes no configuration")
    ops = list(dict.fromkeys(o.op for o in outs))
    s = te.create_schedule(ops)
    for stage in list(s.stages):
        op = stage.op
        if isinstance(op, PlaceholderOp) or stage.is_output:
            continue
        assert isinstance(op, ComputeOp)
        if not op.is_reduction and not op.materialize and op.name not in keep:
            stage.compute_inline()
    done: set[int] = set()
    for stage in list(s.stages):
        if stage.attach == "root" and _fuse_row_reductions(s, stage):
            done.add(id(stage))
    for stage in list(s.stages):
        op = stage.op
        if isinstance(op, PlaceholderOp) or stage.attach != "root":
            continue
        if getattr(op, "tag", "") == "tc_gemm" and not stage.is_output:
            continue  # computed in registers of the stage that reads it (below)
        if id(stage) in done:
            continue
        acc = _tensorcore_input(s, stage)
        if acc is not None:
            intrin = INTRINSICS[acc.op.attrs["intrin"]]
            store = stage
            if not reads_as_matrix(s, stage.op.output(0), acc):
                # The epilogue mixes the rows and columns (a reshape): the stage that reads the
                # accumulator directly stores it, and the rest runs as a kernel of its own.
                store = next(c for c in s.consumers(s[acc]))
                store.compute_root()
                _schedule_root(s, stage)
            tuned_here = cfg_tuned is not None and tuned_tc is not None and acc.op is tuned_tc
            tile = tile_of(cfg_tuned) if tuned_here else tile_for_domain(acc, intrin)
            schedule_tensorcore(s, store.op.output(0), acc, intrin, tile, target)
            done.add(id(store))
            continue
        if getattr(op, "tag", "") == "conv_packed":
            assert isinstance(op, ComputeOp)
            cfg = cfg_tuned if op is tuned and cfg_tuned is not None else packed_gemm_space(op, target).default
            schedule_packed_gemm(s, stage, cfg)
        else:
            _schedule_root(s, stage)
    return s
