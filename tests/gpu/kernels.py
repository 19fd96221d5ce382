"""The kernels the GPU tests compile and run: tensor expressions with GPU schedules.

Each function returns ``(schedule, args, reference)`` where ``reference(*numpy inputs)`` computes
the expected output in float64 with NumPy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember import te

Kernel = tuple[Any, list[Any], Callable[..., np.ndarray]]


def vector_add(block: int = 64, dtype: str = "float32") -> Kernel:
    """The walkthrough's ``C = A + B`` over a symbolic ``n``."""
    n = te.var("n")
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.placeholder((n,), name="B", dtype=dtype)
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=block)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B, C], lambda a, b: a.astype(np.float64) + b


def vector_add_vec4(block: int = 256) -> Kernel:
    """``C = A + B`` with 4 elements per thread as one 128-bit load and store (a scalar tail
    where ``n`` is not a multiple of 4)."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    o, v = s[C].split(C.op.axis[0], factor=4)
    bx, tx = s[C].split(o, factor=block)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].vectorize(v)
    return s, [A, B, C], lambda a, b: a.astype(np.float64) + b


def copy_vec4(block: int = 256) -> Kernel:
    """``B = A`` with 128-bit accesses."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: A[i], name="B")
    s = te.create_schedule(B.op)
    o, v = s[B].split(B.op.axis[0], factor=4)
    bx, tx = s[B].split(o, factor=block)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].vectorize(v)
    return s, [A, B], lambda a: a.astype(np.float64)


def row_sum(threads: int = 256, unroll: int = 4, m: Any = None, n: Any = None) -> Kernel:
    """``B[i] = sum_j A[i, j]``: one block per row; rfactor over threadIdx.x, partials in shared
    memory, combined by a warp-shuffle all-reduce."""
    m = te.var("m") if m is None else m
    n = te.var("n") if n is None else n
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=threads)
    BF = s.rfactor(B, ki)
    BL = s.cache_write(BF, "local")
    s[BF].set_scope("shared")
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[BF].compute_at(s[B], B.op.axis[0])
    tx = s[BF].op.axis[0]  # rfactor puts the factored axis first
    s[BF].bind(tx, te.thread_axis("threadIdx.x"))
    s[BL].compute_at(s[BF], tx)
    if unroll > 1:
        lk = s[BL].op.reduce_axis[0]
        _, lki = s[BL].split(lk, factor=unroll)
        s[BL].unroll(lki)
    return s, [A, B], lambda a: a.astype(np.float64).sum(axis=1)


def row_max(threads: int = 128) -> Kernel:
    """``B[i] = max_j A[i, j]`` (a cross-thread max)."""
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.max(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=threads)
    BF = s.rfactor(B, ki)
    s[BF].set_scope("shared")
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[BF].compute_at(s[B], B.op.axis[0])
    s[BF].bind(s[BF].op.axis[0], te.thread_axis("threadIdx.x"))
    return s, [A, B], lambda a: a.astype(np.float64).max(axis=1)


def col_sum(block: int = 128) -> Kernel:
    """``B[j] = sum_i A[i, j]``: one thread per column, coalesced across the warp."""
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda j: te.sum(A[k, j], axis=k), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=block)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B], lambda a: a.astype(np.float64).sum(axis=0)


def softmax(threads: int = 128) -> Kernel:
    """Row softmax in four kernels: row max, exp-sum, then the normalised values."""
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    k1 = te.reduce_axis((0, n), name="k1")
    MX = te.compute((m,), lambda i: te.max(A[i, k1], axis=k1), name="MX")
    E = te.compute((m, n), lambda i, j: te.exp(A[i, j] - MX[i]), name="E")
    k2 = te.reduce_axis((0, n), name="k2")
    SM = te.compute((m,), lambda i: te.sum(E[i, k2], axis=k2), name="SM")
    Y = te.compute((m, n), lambda i, j: E[i, j] / SM[i], name="Y")
    s = te.create_schedule(Y.op)
    for R in (MX, SM):
        ko, ki = s[R].split(R.op.reduce_axis[0], factor=threads)
        RF = s.rfactor(R, ki)
        s[RF].set_scope("shared")
        s[R].bind(R.op.axis[0], te.thread_axis("blockIdx.x"))
        s[RF].compute_at(s[R], R.op.axis[0])
        s[RF].bind(s[RF].op.axis[0], te.thread_axis("threadIdx.x"))
    for T in (E, Y):
        fused = s[T].fuse(*s[T].op.axis)
        bx, tx = s[T].split(fused, factor=256)
        s[T].bind(bx, te.thread_axis("blockIdx.x"))
        s[T].bind(tx, te.thread_axis("threadIdx.x"))

    def ref(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.float64)
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return s, [A, Y], ref


def gemm_tiled(M: int, N: int, K: int, tile: int = 16) -> Kernel:
    """``C = A @ B`` with square shared-memory tiles (one element per thread): the textbook
    kernel, which exercises cache_read into shared memory and barriers."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    by, bx, ty, tx = s[C].tile(C.op.axis[0], C.op.axis[1], tile, tile)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tx)
    (kk,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kk, factor=tile)
    s[AS].compute_at(s[CL], ko)
    s[BS].compute_at(s[CL], ko)
    for S_ in (AS, BS):
        a0, a1 = s[S_].op.axis
        s[S_].bind(a0, te.thread_axis("threadIdx.y"))
        s[S_].bind(a1, te.thread_axis("threadIdx.x"))
    return s, [A, B, C], lambda a, b: a.astype(np.float64) @ b


def gemm_fast(M: int, N: int, K: int, bm: int = 128, bn: int = 128, bk: int = 8, tm: int = 8, tn: int = 8,
              stages: int = 1, warp: tuple[int, int] | None = None, grouped: bool = False) -> Kernel:
    """SGEMM ``C = A @ B`` tiled for speed: a ``bm x bn`` block tile staged through shared
    memory (A transposed on the way so both operands are read as 128-bit vectors), a
    ``tm x tn`` register tile per thread, the reduction blocked by ``bk``; with ``stages`` > 1
    the staging is software-pipelined (``cp.async`` into that many slots). ``warp=(wm, wn)``
    (``wm * wn == 32``) arranges each warp's threads as ``wm x wn`` (``threadIdx.x``: the lane,
    ``threadIdx.y``: the warp) instead of two rows of ``bn / tn``.

    ``grouped`` (``M`` and ``N`` multiples of 32) stages both operands as ``[k, group, 32]``
    with each group of 32 rows (columns) padded to 36 floats and A's ``k`` rows to 4 more than a
    multiple of 32: the 128-bit fragment loads of a warp's lanes then fall on distinct banks. In
    the plain layout, with 4 x 8 warps and 16 x 8 thread tiles, the four row tiles of a warp
    start 16 floats apart, so two of them share a bank group (two wavefronts per load, a third
    of all shared wavefronts conflicted on the H200; ``benchmarks/results/gemm_ncu_h200_sgemm_xl.*``)."""
    if grouped and (M % 32 or N % 32):
        raise ValueError(f"gemm_fast(grouped=True) needs M and N multiples of 32, got {M} x {N}")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    s: Any
    if grouped:
        AT = te.compute((K, M // 32, 32), lambda k, g, r: A[g * 32 + r, k], name="AT")
        BS_ = te.compute((K, N // 32, 32), lambda k, g, r: B[k, g * 32 + r], name="BS")
        C = te.compute((M, N), lambda i, j: te.sum(AT[k, i // 32, i % 32] * BS_[k, j // 32, j % 32], axis=k),
                       name="C")
        s = te.create_schedule(C.op)
        s[BS_].set_scope("shared")
        BS = BS_
    else:
        AT = te.compute((K, M), lambda k, i: A[i, k], name="AT")
        C = te.compute((M, N), lambda i, j: te.sum(AT[k, i] * B[k, j], axis=k), name="C")
        s = te.create_schedule(C.op)
        BS = s.cache_read(B, "shared", [C])
    s[AT].set_scope("shared")
    AL = s.cache_read(AT, "local", [C])
    BL = s.cache_read(BS, "local", [C])
    CL = s.cache_write(C, "local")
    ty_n, tx_n = bm // tm, bn // tn
    by, bx, ii, jj = s[C].tile(C.op.axis[0], C.op.axis[1], bm, bn)
    ty, ti = s[C].split(ii, factor=tm)
    tx, tj = s[C].split(jj, factor=tn)
    if warp is None:
        s[C].reorder(by, bx, ty, tx, ti, tj)
    else:
        wm, wn = warp
        wy, ly = s[C].split(ty, factor=wm)
        wx, lx = s[C].split(tx, factor=wn)
        s[C].reorder(by, bx, wy, wx, ly, lx, ti, tj)
        ty, tx = s[C].fuse(wy, wx), s[C].fuse(ly, lx)
        ty_n, tx_n = (bm // tm) * (bn // tn) // 32, 32
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    tjo, tjv = s[C].split(tj, factor=4)
    s[C].unroll(ti)
    s[C].unroll(tjo)
    s[C].vectorize(tjv)
    s[CL].compute_at(s[C], tx)
    ci, cj = s[CL].op.axis
    (ck,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(ck, factor=bk)
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ki)
    s[CL].unroll(ci)
    s[CL].unroll(cj)
    s[AT].compute_at(s[CL], ko)
    s[BS].compute_at(s[CL], ko)
    s[AL].compute_at(s[CL], ki)
    s[BL].compute_at(s[CL], ki)
    for L_ in (AL, BL):
        (ax,) = s[L_].op.axis[-1:]
        o, v = s[L_].split(ax, factor=4)
        s[L_].vectorize(v)
    nthreads = ty_n * tx_n

    def spread(stage: Any, fused: Any, vector: bool) -> None:
        """Threads of the block over a staging stage's fused loop (4-float vectors with ``vector``)."""
        if vector:
            fused, v = s[stage].split(fused, factor=4)
        fo, fi = s[stage].split(fused, factor=nthreads)
        fy, fx = s[stage].split(fi, factor=tx_n)
        s[stage].bind(fy, te.thread_axis("threadIdx.y"))
        s[stage].bind(fx, te.thread_axis("threadIdx.x"))
        s[stage].unroll(fo)
        if vector:
            s[stage].vectorize(v)

    # A: read consecutive k per thread from global, store transposed into shared; B: 128-bit loads along n
    if grouped:
        ak, ag, ar = s[AT].op.axis
        s[AT].reorder(ag, ar, ak)
        spread(AT, s[AT].fuse(s[AT].fuse(ag, ar), ak), False)
        s[AT].storage_align(ag, 32, 4)  # groups of 32 rows padded to 36 floats
        s[AT].storage_align(ak, 32, 4)  # k rows 4 floats past a multiple of 32: the transposing stores spread
        bk_, bg, br = s[BS].op.axis
        spread(BS, s[BS].fuse(s[BS].fuse(bk_, bg), br), True)
        s[BS].storage_align(bg, 32, 4)
    else:
        ak, ai = s[AT].op.axis
        s[AT].reorder(ai, ak)
        spread(AT, s[AT].fuse(ai, ak), False)
        s[AT].storage_align(ak, bm, 4)  # rows of bm + 4 floats: the transposing stores spread over the banks
        bk_, bn_ = s[BS].op.axis
        spread(BS, s[BS].fuse(bk_, bn_), True)
    if stages > 1:
        s[CL].pipeline(ko, stages)
    return s, [A, B, C], lambda a, b: a.astype(np.float64) @ b


MATH_FUNCS = {
    # name: (te function, numpy float64 function, input sampler)
    "exp": (te.exp, np.exp, lambda r, n: r.uniform(-20, 20, n)),
    "exp2": (te.exp2, np.exp2, lambda r, n: r.uniform(-20, 20, n)),
    "exp10": (lambda x: te.math._unary("exp10", x), lambda x: 10.0 ** x, lambda r, n: r.uniform(-8, 8, n)),
    "log": (te.log, np.log, lambda r, n: r.uniform(1e-3, 1e3, n)),
    "log2": (te.log2, np.log2, lambda r, n: r.uniform(1e-3, 1e3, n)),
    "log10": (te.log10, np.log10, lambda r, n: r.uniform(1e-3, 1e3, n)),
    "sqrt": (te.sqrt, np.sqrt, lambda r, n: r.uniform(0, 1e3, n)),
    "rsqrt": (te.rsqrt, lambda x: 1 / np.sqrt(x), lambda r, n: r.uniform(1e-2, 1e3, n)),
    "sin": (te.sin, np.sin, lambda r, n: r.uniform(-100, 100, n)),
    "cos": (te.cos, np.cos, lambda r, n: r.uniform(-100, 100, n)),
    "tan": (lambda x: te.math._unary("tan", x), np.tan, lambda r, n: r.uniform(-1.2, 1.2, n)),
    "tanh": (te.tanh, np.tanh, lambda r, n: r.uniform(-10, 10, n)),
    "sigmoid": (te.sigmoid, lambda x: 1 / (1 + np.exp(-x)), lambda r, n: r.uniform(-20, 20, n)),
    "erf": (te.erf, None, lambda r, n: r.uniform(-4, 4, n)),
    "expm1": (lambda x: te.math._unary("expm1", x), np.expm1, lambda r, n: r.uniform(-5, 5, n)),
    "log1p": (lambda x: te.math._unary("log1p", x), np.log1p, lambda r, n: r.uniform(-0.9, 100, n)),
    "sinh": (lambda x: te.math._unary("sinh", x), np.sinh, lambda r, n: r.uniform(-10, 10, n)),
    "cosh": (lambda x: te.math._unary("cosh", x), np.cosh, lambda r, n: r.uniform(-10, 10, n)),
    "atan": (lambda x: te.math._unary("atan", x), np.arctan, lambda r, n: r.uniform(-50, 50, n)),
    "asin": (lambda x: te.math._unary("asin", x), np.arcsin, lambda r, n: r.uniform(-1, 1, n)),
    "acos": (lambda x: te.math._unary("acos", x), np.arccos, lambda r, n: r.uniform(-1, 1, n)),
    "floor": (te.floor, np.floor, lambda r, n: r.uniform(-100, 100, n)),
    "ceil": (te.ceil, np.ceil, lambda r, n: r.uniform(-100, 100, n)),
    "round": (te.round, np.round, lambda r, n: r.uniform(-100, 100, n)),
    "abs": (te.abs, np.abs, lambda r, n: r.uniform(-100, 100, n)),
}


def erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64 (math.erf per element)."""
    import math

    return np.vectorize(math.erf)(x.astype(np.float64))


def unary(name: str, dtype: str = "float32", block: int = 128) -> Kernel:
    """``B = f(A)`` for math function ``name``."""
    fte, fnp, _ = MATH_FUNCS[name]
    n = te.var("n")
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute(A.shape, lambda i: fte(A[i]), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=block)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    ref = erf64 if name == "erf" else (lambda a: fnp(a.astype(np.float64)))
    return s, [A, B], ref


def pow_kernel(dtype: str = "float32") -> Kernel:
    """``C = A ** B``."""
    n = te.var("n")
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.placeholder((n,), name="B", dtype=dtype)
    C = te.compute(A.shape, lambda i: te.pow(A[i], B[i]), name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=128)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B, C], lambda a, b: np.power(a.astype(np.float64), b.astype(np.float64))


ALL_COMPILE = {
    "vector_add": lambda: vector_add(),
    "vector_add_f64": lambda: vector_add(dtype="float64"),
    "vector_add_f16": lambda: vector_add(dtype="float16"),
    "vector_add_vec4": lambda: vector_add_vec4(),
    "copy_vec4": lambda: copy_vec4(),
    "row_sum": lambda: row_sum(),
    "row_sum_1024": lambda: row_sum(threads=1024),
    "row_sum_32": lambda: row_sum(threads=32),
    "row_max": lambda: row_max(),
    "col_sum": lambda: col_sum(),
    "softmax": lambda: softmax(),
    "gemm_tiled": lambda: gemm_tiled(256, 192, 320),
    "gemm_fast": lambda: gemm_fast(512, 512, 512),
    "gemm_fast_grouped": lambda: gemm_fast(512, 384, 256, bk=16, stages=2, grouped=True),
    "pow": lambda: pow_kernel(),
    **{f"math_{k}": (lambda k=k: unary(k)) for k in MATH_FUNCS},
    **{f"math64_{k}": (lambda k=k: unary(k, "float64")) for k in ("exp", "log", "sin", "tanh", "erf")},
}
