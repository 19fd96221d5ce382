"""Matrix-unit instructions that ``Stage.tensorize`` can map a loop nest onto.

A :class:`MatrixIntrinsic` is one warp-wide matrix multiply-accumulate ``D = A B + C`` of shape
``m x n x k`` (NVIDIA ``mma.sync``, AMD MFMA and WMMA). The operands live in registers spread over
the lanes of a warp; :class:`FragmentLayout` says which element of the ``rows x cols`` operand
tile each lane holds in each of its registers. That is all the lowering needs to know about an
instruction: loads into fragments, the initial zero fill and the stores of results are written
element by element through the layout (or, on NVIDIA, with ``ldmatrix`` where the source allows);
the multiply itself is one call the backend turns into the instruction.

The named instructions are in :data:`INTRINSICS`; ``tensorize`` takes one of them or its name.
The layouts are unit-tested against the vendors' documentation (``tests/test_tensor_intrin.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..ir.dtypes import DataType
from ..ir.dtypes import dtype as as_dtype

#: ``(lane, register) -> (row, col)`` written with ``//``, ``%``, ``+`` and ``*`` only, so that
#: it works on Python ints (tests, tables) and on loop-IR expressions (code) alike.
LaneMap = Callable[[Any, int], tuple[Any, Any]]


@dataclass(frozen=True)
class FragmentLayout:
    """How a ``rows x cols`` operand tile is spread over the lanes of a warp: lane ``l`` holds
    ``per_lane`` elements, register ``r`` of it being element ``coord(l, r)``. ``copies`` > 1
    when the instruction wants every element in that many lanes (the A and B operands of RDNA3's
    WMMA are replicated in both half-waves); an accumulator layout always has ``copies == 1``."""

    rows: int
    cols: int
    per_lane: int
    coord: LaneMap
    copies: int = 1

    def table(self, warp: int) -> dict[tuple[int, int], list[tuple[int, int]]]:
        """``{(row, col): [(lane, register), ...]}`` for every element; raises ``ValueError``
        when an element is held by other than ``copies`` registers or a register maps outside the
        tile (the layout is not ``copies`` bijections of the tile onto ``warp x per_lane``
        registers)."""
        out: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for lane in range(warp):
            for r in range(self.per_lane):
                rc = tuple(int(x) for x in self.coord(lane, r))
                if not (0 <= rc[0] < self.rows and 0 <= rc[1] < self.cols):
                    raise ValueError(f"lane {lane} register {r} maps outside the tile: {rc}")
                out.setdefault(rc, []).append((lane, r))  # type: ignore[arg-type]
        if len(out) != self.rows * self.cols:
            raise ValueError(f"{self.rows * self.cols - len(out)} elements are held by no lane")
        bad = [rc for rc, held in out.items() if len(held) != self.copies]
        if bad:
            raise ValueError(f"element {bad[0]} is held {len(out[bad[0]])} times, expected {self.copies}")
        return out


@dataclass(frozen=True)
class MatrixIntrinsic:
    """One warp-level ``m x n x k`` multiply-accumulate instruction.

    ``a`` (``m x k``, row = the ``m`` index), ``b`` (``k x n``, row = the ``k`` index) and ``c``
    (``m x n``; the accumulator and result) give each operand's lane layout; ``in_dtype`` and
    ``acc_dtype`` the element types; ``kind`` the target kind it exists on and ``min_arch`` /
    ``archs`` which devices have it."""

    name: str
    m: int
    n: int
    k: int
    in_dtype: str
    acc_dtype: str
    warp: int
    a: FragmentLayout
    b: FragmentLayout
    c: FragmentLayout
    kind: str  # "cuda" or "rocm"
    #: the instruction, for messages and docs (the backend emits it)
    instruction: str
    #: NVIDIA: the lowest compute capability (80 for sm_80); AMD: the gfx names that have it
    min_arch: int = 0
    archs: tuple[str, ...] = ()

    @property
    def input_type(self) -> DataType:
        """The element type of ``A`` and ``B``."""
        return as_dtype(self.in_dtype)

    @property
    def accumulator_type(self) -> DataType:
        """The element type of ``C`` and ``D``."""
        return as_dtype(self.acc_dtype)

    def layout(self, role: str) -> FragmentLayout:
        """The layout of operand ``role`` (``"a"``, ``"b"`` or ``"c"``)."""
        return {"a": self.a, "b": self.b, "c": self.c}[role]

    def shape(self, role: str) -> tuple[int, int]:
        """``(rows, cols)`` of operand ``role``: ``a`` is m x k, ``b`` k x n, ``c`` m x n."""
        return {"a": (self.m, self.k), "b": (self.k, self.n), "c": (self.m, self.n)}[role]

    def unavailable(self, target: Any) -> str | None:
        """Why ``target`` (a :class:`~ember.target.Target`) lacks this instruction, or None."""
        if target.kind != self.kind:
            return f"{self.name} is an instruction of {self.kind} GPUs, the target is {target}"
        if self.kind == "cuda":
            digits = "".join(ch for ch in target.mcpu if ch.isdigit())
            cc = int(digits or 0)
            if cc < self.min_arch:
                return f"{self.name} needs sm_{self.min_arch} or newer, the target is {target.mcpu}"
        elif self.archs and target.mcpu not in self.archs:
            return f"{self.name} exists on {', '.join(self.archs)}, not on {target.mcpu}"
        if target.warp_size != self.warp:
            return f"{self.name} runs on wave{self.warp}, {target} runs wave{target.warp_size}"
        return None


# -- NVIDIA mma.sync (PTX ISA, "Matrix Fragments for mma.m16n8k16 / m16n8k8 / m16n8k32") ------------
# groupID = lane // 4 and threadID_in_group = lane % 4 in the PTX ISA's figures.


def _nv_a_16x16(lane: Any, r: int) -> tuple[Any, Any]:
    # a0,a1: (g, 2t + 0/1); a2,a3: (g + 8, ...); a4,a5: (g, 2t + 8 + 0/1); a6,a7: (g + 8, 2t + 8 + 0/1)
    return lane // 4 + 8 * ((r // 2) % 2), (lane % 4) * 2 + r % 2 + 8 * (r // 4)


def _nv_b_16x8(lane: Any, r: int) -> tuple[Any, Any]:
    # b0,b1: (k = 2t + 0/1, n = g); b2,b3: (k = 2t + 8 + 0/1, n = g)
    return (lane % 4) * 2 + r % 2 + 8 * (r // 2), lane // 4


def _nv_c_16x8(lane: Any, r: int) -> tuple[Any, Any]:
    # c0,c1: (g, 2t + 0/1); c2,c3: (g + 8, 2t + 0/1)
    return lane // 4 + 8 * (r // 2), (lane % 4) * 2 + r % 2


def _nv_a_16x8_tf32(lane: Any, r: int) -> tuple[Any, Any]:
    # a0: (g, t); a1: (g + 8, t); a2: (g, t + 4); a3: (g + 8, t + 4)
    return lane // 4 + 8 * (r % 2), lane % 4 + 4 * (r // 2)


def _nv_b_8x8_tf32(lane: Any, r: int) -> tuple[Any, Any]:
    # b0: (k = t, n = g); b1: (k = t + 4, n = g)
    return lane % 4 + 4 * r, lane // 4


def _nv_a_16x32_s8(lane: Any, r: int) -> tuple[Any, Any]:
    # a0..a3: (g, 4t + 0..3); a4..a7: (g + 8, ...); a8..a11: (g, 4t + 16 + 0..3); a12..a15: (g + 8, ...)
    return lane // 4 + 8 * ((r // 4) % 2), (lane % 4) * 4 + r % 4 + 16 * (r // 8)


def _nv_b_32x8_s8(lane: Any, r: int) -> tuple[Any, Any]:
    # b0..b3: (k = 4t + 0..3, n = g); b4..b7: (k = 4t + 16 + 0..3, n = g)
    return (lane % 4) * 4 + r % 4 + 16 * (r // 4), lane // 4


_NV_C = FragmentLayout(16, 8, 4, _nv_c_16x8)


def _nv(name: str, k: int, in_dtype: str, acc: str, a: FragmentLayout, b: FragmentLayout, ptx: str) -> MatrixIntrinsic:
    return MatrixIntrinsic(name, 16, 8, k, in_dtype, acc, 32, a, b, _NV_C, "cuda", ptx, min_arch=80)


MMA_F16 = _nv("mma.m16n8k16.f16", 16, "float16", "float32", FragmentLayout(16, 16, 8, _nv_a_16x16),
              FragmentLayout(16, 8, 4, _nv_b_16x8), "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
MMA_BF16 = _nv("mma.m16n8k16.bf16", 16, "bfloat16", "float32", FragmentLayout(16, 16, 8, _nv_a_16x16),
               FragmentLayout(16, 8, 4, _nv_b_16x8), "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
MMA_TF32 = _nv("mma.m16n8k8.tf32", 8, "float32", "float32", FragmentLayout(16, 8, 4, _nv_a_16x8_tf32),
               FragmentLayout(8, 8, 2, _nv_b_8x8_tf32), "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
MMA_S8 = _nv("mma.m16n8k32.s8", 32, "int8", "int32", FragmentLayout(16, 32, 16, _nv_a_16x32_s8),
             FragmentLayout(32, 8, 8, _nv_b_32x8_s8), "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32")

#: Every named matrix instruction, by name (``tensorize`` accepts the name or the object).
INTRINSICS: dict[str, MatrixIntrinsic] = {i.name: i for i in (MMA_F16, MMA_BF16, MMA_TF32, MMA_S8)}


def register(intrin: MatrixIntrinsic) -> MatrixIntrinsic:
    """Add ``intrin`` to :data:`INTRINSICS` (its layouts must be bijections; checked here)."""
    for role in ("a", "b", "c"):
        lay = intrin.layout(role)
        if (lay.rows, lay.cols) != intrin.shape(role):
            raise ValueError(f"{intrin.name}: operand {role} is {lay.rows} x {lay.cols}, expected {intrin.shape(role)}")
        lay.table(intrin.warp)
    INTRINSICS[intrin.name] = intrin
    return intrin


def lookup(intrin: MatrixIntrinsic | str) -> MatrixIntrinsic:
    """The intrinsic ``intrin`` names; ``KeyError`` listing the known names for an unknown one."""
    if isinstance(intrin, MatrixIntrinsic):
        return intrin
    found = INTRINSICS.get(intrin)
    if found is None:
        raise KeyError(f"unknown matrix intrinsic {intrin!r} (known: {', '.join(sorted(INTRINSICS))})")
    return found


# -- AMD matrix cores: MFMA (CDNA2/CDNA3, wave64) and WMMA (RDNA3, wave32) -------------------------------
# ``instruction`` is the LLVM intrinsic the ROCm backend calls (the ISA mnemonic differs between chips:
# v_mfma_f32_16x16x16f16 on gfx90a, v_mfma_f32_16x16x16_f16 on gfx942). Register r of a lane is element
# r of the operand's vector (<4 x half>, <16 x half>, <8 x float>, ...): two 16-bit elements share a
# VGPR, low half first.
#
# MFMA 16x16x16 (f16, and bf16 through v_mfma_f32_16x16x16bf16_1k / v_mfma_f32_16x16x16_bf16), one
# block. Sources: the AMD Matrix Instruction Calculator (github.com/ROCm/amd_matrix_instruction_calculator,
# matrix_calculator.py, InstCalcGfx9: an input element [i][k] sits in lane i + 16 * (k // 4), item
# k % 4 of the register pair; an output element D[i][j] in lane j + 16 * (i // 4), register i % 4),
# and the ROCm blog "Matrix Core Programming on AMD CDNA3 and CDNA4 architecture" (AMD, 2025),
# section 5.2, __builtin_amdgcn_mfma_f32_16x16x16f16: a_reg = A[lane % 16][4 * (lane / 16) + 0..3],
# b_reg[i] = B[4 * (lane / 16) + i][lane % 16], c_reg[i] = C[4 * (lane / 16) + i][lane % 16].


def _mfma_a_16x16(lane: Any, r: int) -> tuple[Any, Any]:
    # A[i][k]: i = lane % 16, k = 4 * (lane // 16) + r
    return lane % 16, 4 * (lane // 16) + r


def _mfma_b_16x16(lane: Any, r: int) -> tuple[Any, Any]:
    # B[k][j]: k = 4 * (lane // 16) + r, j = lane % 16
    return 4 * (lane // 16) + r, lane % 16


def _mfma_c_16x16(lane: Any, r: int) -> tuple[Any, Any]:
    # D[i][j]: i = 4 * (lane // 16) + r, j = lane % 16 (four rows per lane, one column)
    return 4 * (lane // 16) + r, lane % 16


# WMMA 16x16x16 on RDNA3 in wave32. Source: the AMD Matrix Instruction Calculator (matrix_calculator.py,
# InstCalcGfx11): A[i][k] is held by lanes i and i + 16 (the two half-waves hold the same 16 x 16 tile),
# element k of the 16-element register vector; B[k][j] by lanes j and j + 16, element k; D[i][j] (f32) by
# lane (16 * i) % 32 + j, register (16 * i) // 32 — lanes 0-15 hold the even rows, lanes 16-31 the odd ones.


def _wmma_a_16x16(lane: Any, r: int) -> tuple[Any, Any]:
    # A[i][k]: i = lane % 16, k = r (in both half-waves)
    return lane % 16, r


def _wmma_b_16x16(lane: Any, r: int) -> tuple[Any, Any]:
    # B[k][j]: k = r, j = lane % 16 (in both half-waves)
    return r, lane % 16


def _wmma_c_16x16(lane: Any, r: int) -> tuple[Any, Any]:
    # D[i][j]: i = 2 * r + lane // 16, j = lane % 16
    return 2 * r + lane // 16, lane % 16


#: CDNA2 (MI200) and CDNA3 (MI300); gfx908 (CDNA1) has the f16 instruction but not the bf16_1k one
MFMA_ARCHS = ("gfx90a", "gfx942")
#: RDNA3 (the calculator's rdna3 family); RDNA4 (gfx12) changed the WMMA layouts
WMMA_ARCHS = ("gfx1100", "gfx1101", "gfx1102", "gfx1103")


def _mfma(name: str, in_dtype: str, llvm: str) -> MatrixIntrinsic:
    return register(MatrixIntrinsic(
        name, 16, 16, 16, in_dtype, "float32", 64, FragmentLayout(16, 16, 4, _mfma_a_16x16),
        FragmentLayout(16, 16, 4, _mfma_b_16x16), FragmentLayout(16, 16, 4, _mfma_c_16x16), "rocm", llvm,
        archs=MFMA_ARCHS))


def _wmma(name: str, in_dtype: str, llvm: str) -> MatrixIntrinsic:
    return register(MatrixIntrinsic(
        name, 16, 16, 16, in_dtype, "float32", 32, FragmentLayout(16, 16, 16, _wmma_a_16x16, copies=2),
        FragmentLayout(16, 16, 16, _wmma_b_16x16, copies=2), FragmentLayout(16, 16, 8, _wmma_c_16x16), "rocm", llvm,
        archs=WMMA_ARCHS))


MFMA_F16 = _mfma("mfma.f32.16x16x16.f16", "float16", "llvm.amdgcn.mfma.f32.16x16x16f16")
MFMA_BF16 = _mfma("mfma.f32.16x16x16.bf16", "bfloat16", "llvm.amdgcn.mfma.f32.16x16x16bf16.1k")
WMMA_F16 = _wmma("wmma.f32.16x16x16.f16", "float16", "llvm.amdgcn.wmma.f32.16x16x16.f16")
WMMA_BF16 = _wmma("wmma.f32.16x16x16.bf16", "bfloat16", "llvm.amdgcn.wmma.f32.16x16x16.bf16")
