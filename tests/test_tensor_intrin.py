"""The lane layouts of ember.te.tensor_intrin against the vendors' documents.

Each operand of each instruction is checked three ways: a handful of explicit (lane, register) ->
(row, col) facts read off the document's figure or table; the whole layout against a reference
written the way the document writes it (NVIDIA: the piecewise row/col formulas of the PTX ISA;
AMD: the element -> lane/register formulas of the AMD Matrix Instruction Calculator), over every
lane and register; and ``FragmentLayout.table`` (copies bijections of the tile onto the registers).

Sources:
* NVIDIA PTX ISA, 9.7.14.5.7 "Matrix Fragments for mma.m16n8k8" (.tf32), 9.7.14.5.8 "Matrix
  Fragments for mma.m16n8k16 with floating point type" (.f16/.bf16), 9.7.14.5.10 "Matrix Fragments
  for mma.m16n8k32" (.s8); groupID = %laneid >> 2, threadID_in_group = %laneid % 4.
* AMD Matrix Instruction Calculator (github.com/ROCm/amd_matrix_instruction_calculator,
  matrix_calculator.py): InstCalcGfx9 for v_mfma_f32_16x16x16f16 / v_mfma_f32_16x16x16bf16_1k
  (CDNA2; the same opcodes are v_mfma_f32_16x16x16_f16 / _bf16 on CDNA3), InstCalcGfx11 for
  v_wmma_f32_16x16x16_f16 / _bf16 (RDNA3, wave32); and the ROCm blog "Matrix Core Programming on AMD
  CDNA3 and CDNA4 architecture", section 5.2 (the 16x16x16 f16 kernel's index arithmetic).
"""

from __future__ import annotations

import pytest

from ember.arith import simplify
from ember.ir import expr as E
from ember.ir.visitor import substitute
from ember.target import Target
from ember.te import tensor_intrin as T
from ember.te.tensor_intrin import INTRINSICS, FragmentLayout, MatrixIntrinsic, lookup, register


# -- references written as the documents write them --------------------------------------------------
def _g(lane: int) -> int:
    return lane >> 2  # groupID


def _t(lane: int) -> int:
    return lane % 4  # threadID_in_group


def ptx_16816_a(lane: int, i: int) -> tuple[int, int]:
    row = _g(lane) if (0 <= i < 2 or 4 <= i < 6) else _g(lane) + 8
    col = _t(lane) * 2 + (i & 0x1) if i < 4 else _t(lane) * 2 + (i & 0x1) + 8
    return row, col


def ptx_16816_b(lane: int, i: int) -> tuple[int, int]:
    row = _t(lane) * 2 + (i & 0x1) if i < 2 else _t(lane) * 2 + (i & 0x1) + 8
    return row, _g(lane)


def ptx_c(lane: int, i: int) -> tuple[int, int]:
    # the same for m16n8k8, m16n8k16 and m16n8k32 (f32 and s32 accumulators)
    return (_g(lane) if i < 2 else _g(lane) + 8), _t(lane) * 2 + (i & 0x1)


def ptx_1688_a_tf32(lane: int, i: int) -> tuple[int, int]:
    row = _g(lane) if i in (0, 2) else _g(lane) + 8
    col = _t(lane) if i in (0, 1) else _t(lane) + 4
    return row, col


def ptx_1688_b_tf32(lane: int, i: int) -> tuple[int, int]:
    return (_t(lane) if i == 0 else _t(lane) + 4), _g(lane)


def ptx_16832_a_s8(lane: int, i: int) -> tuple[int, int]:
    row = _g(lane) if (0 <= i < 4 or 8 <= i < 12) else _g(lane) + 8
    col = _t(lane) * 4 + (i & 0x3) if i < 8 else _t(lane) * 4 + (i & 0x3) + 16
    return row, col


def ptx_16832_b_s8(lane: int, i: int) -> tuple[int, int]:
    row = _t(lane) * 4 + (i & 0x3) if i < 4 else _t(lane) * 4 + (i & 0x3) + 16
    return row, _g(lane)


# AMD: element -> [(lane, register), ...] (the calculator's direction).
def gfx9_input(outer: int, k: int) -> list[tuple[int, int]]:
    # M = 16, K = 16, one block: 64 / 16 = 4 elements per register pair; lane = outer + 16 * (k // 4)
    return [(outer + 16 * (k // 4), k % 4)]


def gfx9_output(i: int, j: int) -> list[tuple[int, int]]:
    # 32-bit outputs in multi-rows 4 registers tall: register i % 4, lane 16 * (i // 4) + j
    return [(16 * (i // 4) + j, i % 4)]


def gfx11_input(outer: int, k: int) -> list[tuple[int, int]]:
    # wave32: lanes outer and outer + 16, element k of the register vector
    return [(outer, k), (outer + 16, k)]


def gfx11_output(i: int, j: int, wave: int = 32) -> list[tuple[int, int]]:
    # GPR floor(16 * i / wave_width), lane (16 * i) % wave_width + j
    return [((16 * i) % wave + j, (16 * i) // wave)]


NV_REFERENCE = {
    "mma.m16n8k16.f16": (ptx_16816_a, ptx_16816_b, ptx_c),
    "mma.m16n8k16.bf16": (ptx_16816_a, ptx_16816_b, ptx_c),
    "mma.m16n8k8.tf32": (ptx_1688_a_tf32, ptx_1688_b_tf32, ptx_c),
    "mma.m16n8k32.s8": (ptx_16832_a_s8, ptx_16832_b_s8, ptx_c),
}

AMD_REFERENCE = {
    # role -> element (row, col) -> holders; A is [i][k] (outer = i), B is [k][j] (outer = j)
    "mfma.f32.16x16x16.f16": (lambda r, c: gfx9_input(r, c), lambda r, c: gfx9_input(c, r), gfx9_output),
    "mfma.f32.16x16x16.bf16": (lambda r, c: gfx9_input(r, c), lambda r, c: gfx9_input(c, r), gfx9_output),
    "wmma.f32.16x16x16.f16": (lambda r, c: gfx11_input(r, c), lambda r, c: gfx11_input(c, r), gfx11_output),
    "wmma.f32.16x16x16.bf16": (lambda r, c: gfx11_input(r, c), lambda r, c: gfx11_input(c, r), gfx11_output),
}

AMD_NAMES = sorted(AMD_REFERENCE)


def coords(lay: FragmentLayout, lane: int, r: int) -> tuple[int, int]:
    return tuple(int(x) for x in lay.coord(lane, r))  # type: ignore[return-value]


# -- NVIDIA --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(NV_REFERENCE))
def test_nvidia_layouts_match_the_ptx_formulas_everywhere(name):
    intrin = lookup(name)
    assert intrin.warp == 32 and intrin.kind == "cuda"
    for role, ref in zip("abc", NV_REFERENCE[name]):
        lay = intrin.layout(role)
        for lane in range(32):
            for r in range(lay.per_lane):
                assert coords(lay, lane, r) == ref(lane, r), (name, role, lane, r)


@pytest.mark.parametrize("name,role,lane,reg,rc", [
    # m16n8k16 A (Figure "MMA .m16n8k16 fragment layout for matrix A with .f16/.bf16 type")
    ("mma.m16n8k16.f16", "a", 0, 0, (0, 0)), ("mma.m16n8k16.f16", "a", 0, 1, (0, 1)),
    ("mma.m16n8k16.f16", "a", 0, 2, (8, 0)), ("mma.m16n8k16.f16", "a", 0, 4, (0, 8)),
    ("mma.m16n8k16.f16", "a", 5, 7, (9, 11)), ("mma.m16n8k16.bf16", "a", 31, 6, (15, 14)),
    # m16n8k16 B
    ("mma.m16n8k16.f16", "b", 0, 0, (0, 0)), ("mma.m16n8k16.f16", "b", 1, 1, (3, 0)),
    ("mma.m16n8k16.f16", "b", 7, 3, (15, 1)), ("mma.m16n8k16.bf16", "b", 28, 2, (8, 7)),
    # accumulators
    ("mma.m16n8k16.f16", "c", 0, 0, (0, 0)), ("mma.m16n8k16.f16", "c", 0, 2, (8, 0)),
    ("mma.m16n8k16.f16", "c", 31, 3, (15, 7)), ("mma.m16n8k32.s8", "c", 6, 1, (1, 5)),
    # m16n8k8 .tf32
    ("mma.m16n8k8.tf32", "a", 0, 1, (8, 0)), ("mma.m16n8k8.tf32", "a", 0, 2, (0, 4)),
    ("mma.m16n8k8.tf32", "a", 31, 3, (15, 7)), ("mma.m16n8k8.tf32", "b", 5, 1, (5, 1)),
    ("mma.m16n8k8.tf32", "b", 30, 0, (2, 7)),
    # m16n8k32 .s8
    ("mma.m16n8k32.s8", "a", 0, 3, (0, 3)), ("mma.m16n8k32.s8", "a", 0, 4, (8, 0)),
    ("mma.m16n8k32.s8", "a", 1, 8, (0, 20)), ("mma.m16n8k32.s8", "a", 31, 15, (15, 31)),
    ("mma.m16n8k32.s8", "b", 2, 5, (25, 0)), ("mma.m16n8k32.s8", "b", 31, 3, (15, 7)),
])
def test_nvidia_document_facts(name, role, lane, reg, rc):
    assert coords(lookup(name).layout(role), lane, reg) == rc


# -- AMD -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", AMD_NAMES)
def test_amd_layouts_match_the_calculator_everywhere(name):
    intrin = lookup(name)
    for role, ref in zip("abc", AMD_REFERENCE[name]):
        lay = intrin.layout(role)
        table = lay.table(intrin.warp)
        for row in range(lay.rows):
            for col in range(lay.cols):
                assert sorted(table[(row, col)]) == sorted(ref(row, col)), (name, role, row, col)


@pytest.mark.parametrize("name,role,lane,reg,rc", [
    # MFMA 16x16x16 (calculator register layout: A[0][1] in v0{0}.[31:16], A[0][4] in v0{16}, A[0][8] in
    # v0{32}; the blog's a_reg = A[lane % 16][4 * (lane / 16) + i], c_reg[i] = C[4 * (lane / 16) + i][lane % 16])
    ("mfma.f32.16x16x16.f16", "a", 0, 1, (0, 1)), ("mfma.f32.16x16x16.f16", "a", 16, 0, (0, 4)),
    ("mfma.f32.16x16x16.f16", "a", 32, 0, (0, 8)), ("mfma.f32.16x16x16.f16", "a", 63, 3, (15, 15)),
    ("mfma.f32.16x16x16.f16", "a", 5, 2, (5, 2)),
    ("mfma.f32.16x16x16.f16", "b", 0, 1, (1, 0)), ("mfma.f32.16x16x16.f16", "b", 16, 0, (4, 0)),
    ("mfma.f32.16x16x16.f16", "b", 21, 3, (7, 5)), ("mfma.f32.16x16x16.bf16", "b", 63, 3, (15, 15)),
    ("mfma.f32.16x16x16.f16", "c", 0, 1, (1, 0)), ("mfma.f32.16x16x16.f16", "c", 16, 0, (4, 0)),
    ("mfma.f32.16x16x16.f16", "c", 2, 1, (1, 2)), ("mfma.f32.16x16x16.bf16", "c", 63, 3, (15, 15)),
    # WMMA 16x16x16 wave32: A rows and B columns in lanes l and l + 16, register = k; D rows 2r + l // 16
    ("wmma.f32.16x16x16.f16", "a", 3, 5, (3, 5)), ("wmma.f32.16x16x16.f16", "a", 19, 5, (3, 5)),
    ("wmma.f32.16x16x16.bf16", "a", 31, 15, (15, 15)),
    ("wmma.f32.16x16x16.f16", "b", 3, 5, (5, 3)), ("wmma.f32.16x16x16.f16", "b", 19, 5, (5, 3)),
    ("wmma.f32.16x16x16.f16", "c", 0, 0, (0, 0)), ("wmma.f32.16x16x16.f16", "c", 16, 0, (1, 0)),
    ("wmma.f32.16x16x16.f16", "c", 15, 7, (14, 15)), ("wmma.f32.16x16x16.bf16", "c", 31, 7, (15, 15)),
])
def test_amd_document_facts(name, role, lane, reg, rc):
    assert coords(lookup(name).layout(role), lane, reg) == rc


@pytest.mark.parametrize("name,warp,per_lane,copies,in_dtype,instruction", [
    ("mfma.f32.16x16x16.f16", 64, (4, 4, 4), (1, 1, 1), "float16", "llvm.amdgcn.mfma.f32.16x16x16f16"),
    ("mfma.f32.16x16x16.bf16", 64, (4, 4, 4), (1, 1, 1), "bfloat16", "llvm.amdgcn.mfma.f32.16x16x16bf16.1k"),
    ("wmma.f32.16x16x16.f16", 32, (16, 16, 8), (2, 2, 1), "float16", "llvm.amdgcn.wmma.f32.16x16x16.f16"),
    ("wmma.f32.16x16x16.bf16", 32, (16, 16, 8), (2, 2, 1), "bfloat16", "llvm.amdgcn.wmma.f32.16x16x16.bf16"),
])
def test_amd_entries(name, warp, per_lane, copies, in_dtype, instruction):
    intrin = INTRINSICS[name]
    assert (intrin.m, intrin.n, intrin.k) == (16, 16, 16)
    assert intrin.kind == "rocm" and intrin.warp == warp and intrin.instruction == instruction
    assert intrin.in_dtype == in_dtype and intrin.acc_dtype == "float32"
    assert tuple(intrin.layout(r).per_lane for r in "abc") == per_lane
    assert tuple(intrin.layout(r).copies for r in "abc") == copies
    assert intrin.archs == (T.MFMA_ARCHS if name.startswith("mfma") else T.WMMA_ARCHS)


# -- every layout ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(INTRINSICS))
def test_table_accepts_every_layout(name):
    intrin = INTRINSICS[name]
    for role in "abc":
        lay = intrin.layout(role)
        assert (lay.rows, lay.cols) == intrin.shape(role)
        table = lay.table(intrin.warp)
        assert len(table) == lay.rows * lay.cols
        assert lay.rows * lay.cols * lay.copies == intrin.warp * lay.per_lane
        assert all(len(held) == lay.copies for held in table.values())
    assert intrin.c.copies == 1


@pytest.mark.parametrize("name", sorted(INTRINSICS))
def test_layouts_work_on_loop_ir_expressions(name):
    intrin = INTRINSICS[name]
    lane = E.Var("lane")
    for role in "abc":
        lay = intrin.layout(role)
        for r in range(lay.per_lane):
            exprs = lay.coord(lane, r)
            for value in (0, 5, 17, intrin.warp - 1):
                got = tuple(simplify(substitute(E.convert(x), {lane: E.const(value)})) for x in exprs)
                assert all(isinstance(g, E.IntImm) for g in got), got
                assert tuple(g.value for g in got) == coords(lay, value, r)


# -- broken layouts -----------------------------------------------------------------------------------
def test_broken_layouts_are_rejected():
    with pytest.raises(ValueError, match="held"):
        FragmentLayout(16, 16, 4, lambda lane, r: (0, 0)).table(64)
    with pytest.raises(ValueError, match="outside the tile"):
        FragmentLayout(16, 16, 4, lambda lane, r: (lane % 16, 4 * (lane // 16) + r + 1)).table(64)
    # the WMMA inputs without their copies: every element is held twice
    with pytest.raises(ValueError, match="held 2 times, expected 1"):
        FragmentLayout(16, 16, 16, T.WMMA_F16.a.coord).table(32)
    # MFMA's A layout read in wave32 leaves half of the tile to no lane
    with pytest.raises(ValueError, match="held by no lane"):
        T.MFMA_F16.a.table(32)
    # rows and columns swapped (a transposed B of m16n8k16 is 8 x 16)
    with pytest.raises(ValueError, match="outside the tile"):
        FragmentLayout(16, 8, 4, lambda lane, r: T.MMA_F16.b.coord(lane, r)[::-1]).table(32)


def test_register_rejects_wrong_shapes_and_broken_layouts():
    good = T.MFMA_F16
    with pytest.raises(ValueError, match="operand a is 16 x 8"):
        register(MatrixIntrinsic("bad.shape", 16, 16, 16, "float16", "float32", 64,
                                 FragmentLayout(16, 8, 2, lambda lane, r: (lane % 16, r)), good.b, good.c,
                                 "rocm", "none", archs=("gfx942",)))
    with pytest.raises(ValueError, match="held"):
        register(MatrixIntrinsic("bad.layout", 16, 16, 16, "float16", "float32", 64, good.a,
                                 FragmentLayout(16, 16, 4, lambda lane, r: (r, lane % 16)), good.c,
                                 "rocm", "none", archs=("gfx942",)))  # B without the lane // 16 term
    assert "bad.shape" not in INTRINSICS and "bad.layout" not in INTRINSICS


# -- lookup and targets ----------------------------------------------------------------------------------
def test_lookup_unknown_lists_known_names():
    with pytest.raises(KeyError) as info:
        lookup("mfma.f32.32x32x8.f16")
    msg = str(info.value)
    assert "mfma.f32.32x32x8.f16" in msg
    for name in ("mma.m16n8k16.f16", "mfma.f32.16x16x16.f16", "wmma.f32.16x16x16.bf16"):
        assert name in msg
    assert lookup(T.WMMA_BF16) is T.WMMA_BF16
    assert lookup("mfma.f32.16x16x16.bf16") is T.MFMA_BF16


@pytest.mark.parametrize("name,target,words", [
    ("mfma.f32.16x16x16.f16", "rocm -mcpu=gfx1100", ("mfma.f32.16x16x16.f16", "gfx1100", "gfx942")),
    ("mfma.f32.16x16x16.bf16", "rocm -mcpu=gfx1101", ("mfma.f32.16x16x16.bf16", "gfx1101")),
    ("wmma.f32.16x16x16.f16", "rocm -mcpu=gfx942", ("wmma.f32.16x16x16.f16", "gfx942", "gfx1100")),
    ("wmma.f32.16x16x16.bf16", "rocm -mcpu=gfx90a", ("wmma.f32.16x16x16.bf16", "gfx90a")),
    ("mma.m16n8k16.f16", "cuda -arch=sm_70", ("mma.m16n8k16.f16", "sm_80", "sm_70")),
    ("mma.m16n8k8.tf32", "cuda -arch=sm_75", ("mma.m16n8k8.tf32", "sm_75")),
    ("mfma.f32.16x16x16.f16", "cuda -arch=sm_90", ("mfma.f32.16x16x16.f16", "rocm", "sm_90")),
    ("mma.m16n8k16.bf16", "rocm -mcpu=gfx942", ("mma.m16n8k16.bf16", "cuda", "gfx942")),
    ("wmma.f32.16x16x16.f16", "llvm", ("wmma.f32.16x16x16.f16", "rocm")),
])
def test_unavailable_says_why(name, target, words):
    why = lookup(name).unavailable(Target(target))
    assert why is not None
    for w in words:
        assert w in why, (w, why)


@pytest.mark.parametrize("name,target", [
    ("mfma.f32.16x16x16.f16", "rocm -mcpu=gfx90a"), ("mfma.f32.16x16x16.f16", "rocm -mcpu=gfx942"),
    ("mfma.f32.16x16x16.bf16", "rocm -mcpu=gfx90a"), ("mfma.f32.16x16x16.bf16", "rocm"),
    ("wmma.f32.16x16x16.f16", "rocm -mcpu=gfx1100"), ("wmma.f32.16x16x16.bf16", "rocm -mcpu=gfx1102"),
    ("mma.m16n8k16.f16", "cuda -arch=sm_80"), ("mma.m16n8k32.s8", "cuda -arch=sm_90"),
])
def test_available(name, target):
    assert lookup(name).unavailable(Target(target)) is None
