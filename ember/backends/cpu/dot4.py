"""Four-byte dot products on x86 VNNI: the call ``E.Call(int32, OP, (acc, a, b))``.

Semantics, lane by lane (scalars or vectors of int32 words): ``acc + sum_j u8(a, j) * s8(b, j)``
where ``u8(a, j)`` is byte ``j`` of word ``a`` read as unsigned and ``s8(b, j)`` byte ``j`` of
``b`` read as signed; the sum wraps modulo 2**32 (``vpdpbusd``, not the saturating
``vpdpbusds``). The CPU code generator lowers it to ``llvm.x86.avx512.vpdpbusd.{128,256,512}``
(AVX512-VNNI, or the VEX form of AVX-VNNI for 128/256 bits), splitting vectors wider than the
target's instruction, and folds an ``x + OP(0, a, b)`` into one instruction accumulating into
``x``. A target without either feature gets a :class:`~ember.errors.CodegenError`; compute
definitions ask :func:`vnni_width` before they build the call.
"""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.ir as ir

from ...errors import CodegenError
from ...ir import expr as E
from ...target import Target

#: The call's op name.
OP = "x86.vpdpbusd"

# CPUs (LLVM -mcpu names) whose feature set holds AVX512-VNNI or AVX-VNNI: an explicit -mcpu
# without -mattr lists only the base vector features in ember.target.
VNNI512_CPUS = frozenset({
    "cascadelake", "cooperlake", "icelake-client", "icelake-server", "tigerlake", "rocketlake",
    "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids", "znver4", "znver5",
})
AVXVNNI_CPUS = frozenset({
    "alderlake", "raptorlake", "meteorlake", "arrowlake", "arrowlake-s", "lunarlake", "pantherlake", "gracemont",
    "sierraforest", "grandridge", "clearwaterforest",
})

I32 = ir.IntType(32)


def vnni_width(target: Target) -> int:
    """int32 lanes of the widest ``vpdpbusd`` CPU ``target`` runs: 16 with AVX512-VNNI on a
    512-bit vector unit, 8 with AVX-VNNI (or AVX512-VNNI on narrower vectors), 0 without VNNI
    (and for GPU targets). An ``-mattr=-avx512vnni`` / ``-avxvnni`` turns a feature off."""
    if target.is_gpu:
        return 0
    feats = target.features
    off = {f[1:] for f in target.mattr.split(",") if f.startswith("-")}
    has512 = ("avx512vnni" in feats or target.mcpu in VNNI512_CPUS) and "avx512vnni" not in off
    has256 = ("avxvnni" in feats or target.mcpu in AVXVNNI_CPUS) and "avxvnni" not in off
    if has512 and target.vector_bits >= 512:
        return 16
    return 8 if has512 or has256 else 0


def is_fusable(e: E.PrimExpr) -> bool:
    """Whether ``e`` is an ``OP`` call accumulating into zero (an add can take its place)."""
    if not isinstance(e, E.Call) or e.op != OP:
        return False
    acc = e.args[0]
    if isinstance(acc, E.Broadcast):
        acc = acc.value
    return E.is_const_int(acc, 0)


def emit(
    builder: ir.IRBuilder,
    declare: Callable[[str, ir.Type, list[ir.Type]], ir.Function],
    target: Target,
    acc: ir.Value,
    a: ir.Value,
    b: ir.Value,
) -> ir.Value:
    """``acc + dot4(a, b)`` (module docstring) for LLVM values of type i32 or <L x i32>, as
    ``vpdpbusd`` instructions of at most :func:`vnni_width` lanes (``declare`` declares an
    intrinsic). Raises :class:`CodegenError` when the target has no VNNI."""
    width = vnni_width(target)
    if width == 0:
        raise CodegenError(
            f"{OP} needs AVX512-VNNI or AVX-VNNI, which target {target} lacks "
            "(the int8 operators use the int32 packed GEMM there; give -mcpu/-mattr of a VNNI CPU to use it)"
        )
    scalar = not isinstance(acc.type, ir.VectorType)
    if scalar:
        undef = ir.Constant(ir.VectorType(I32, 1), ir.Undefined)
        acc, a, b = (builder.insert_element(undef, v, ir.Constant(I32, 0)) for v in (acc, a, b))
    lanes = acc.type.count
    out: ir.Value = ir.Constant(acc.type, ir.Undefined)
    for start in range(0, lanes, width):
        c = min(width, lanes - start)
        w = next(n for n in (4, 8, 16) if n >= c)
        parts = [_lanes(builder, v, lanes, start, c, w) for v in (acc, a, b)]
        vt = ir.VectorType(I32, w)
        fn = declare(f"llvm.x86.avx512.vpdpbusd.{32 * w}", vt, [vt, vt, vt])
        r = builder.call(fn, parts)
        if c == lanes == w:
            out = r
            break
        wide = _lanes(builder, r, w, 0, w, lanes) if w != lanes else r
        mask = [lanes + k - start if start <= k < start + c else k for k in range(lanes)]
        out = builder.shuffle_vector(out, wide, _mask(mask))
    return builder.extract_element(out, ir.Constant(I32, 0)) if scalar else out


def _lanes(builder: ir.IRBuilder, v: ir.Value, n: int, start: int, count: int, width: int) -> ir.Value:
    """Lanes ``start .. start + count`` of the ``n``-lane vector ``v`` as a ``width``-lane vector
    (the lanes past ``count`` undefined)."""
    if start == 0 and count == n == width:
        return v
    mask = [start + k if k < count else n for k in range(width)]
    return builder.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), _mask(mask))


def _mask(idx: list[int]) -> ir.Constant:
    return ir.Constant(ir.VectorType(I32, len(idx)), [ir.Constant(I32, k) for k in idx])
