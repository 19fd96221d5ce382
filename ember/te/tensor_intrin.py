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
