"""AMD matrix cores without an AMD GPU: ``tc.mma:`` calls compiled for gfx90a/gfx942 (MFMA, wave64)
and gfx1100 (WMMA, wave32), checked in the assembly, linked into code objects when ld.lld is there.

The kernel is the loop IR the tensorize lowering produces after storage flattening, written by hand:
one wave loads a 16 x 16 x 16 tile of A, B and C into ``"local"`` fragments element by element through
the instruction's layouts (ember.te.tensor_intrin), calls ``tc.mma:<name>(acc, a, b)`` with the three
fragments' first elements (their addresses are meant), and stores the accumulator back. Nothing here
runs on AMD hardware.
"""

from __future__ import annotations

import re
import struct

import pytest

import ember
from ember.backends.cpu.codegen import optimize, parse_and_verify
from ember.backends.gpu.codegen import finalize_kernels
from ember.backends.rocm import codegen as amdgpu
from ember.errors import CodegenError, ScheduleError, ToolchainError
from ember.ir import expr as E
from ember.ir import stmt as S
from ember.ir.buffer import Buffer
from ember.ir.dtypes import dtype
from ember.lowering.gpu import split_host_device
from ember.strategy.tensorcore import TCTile, tensorcore_matmul
from ember.target import Target
from ember.te.tensor_intrin import MatrixIntrinsic, lookup

try:
    amdgpu.find_lld()
    LLD_MISSING = ""
except ToolchainError as exc:  # the linker tests skip, saying what to install
    LLD_MISSING = str(exc)
needs_lld = pytest.mark.skipif(bool(LLD_MISSING), reason=LLD_MISSING)

#: (intrinsic, target, the mnemonic LLVM prints for it there)
CASES = [
    ("mfma.f32.16x16x16.f16", "rocm -mcpu=gfx90a", "v_mfma_f32_16x16x16f16"),
    ("mfma.f32.16x16x16.f16", "rocm -mcpu=gfx942", "v_mfma_f32_16x16x16_f16"),
    ("mfma.f32.16x16x16.bf16", "rocm -mcpu=gfx90a", "v_mfma_f32_16x16x16bf16_1k"),
    ("mfma.f32.16x16x16.bf16", "rocm -mcpu=gfx942", "v_mfma_f32_16x16x16_bf16"),
    ("wmma.f32.16x16x16.f16", "rocm -mcpu=gfx1100", "v_wmma_f32_16x16x16_f16"),
    ("wmma.f32.16x16x16.bf16", "rocm -mcpu=gfx1100", "v_wmma_f32_16x16x16_bf16"),
]


def tile_kernel(intrin: MatrixIntrinsic | str, acc_dtype: str | None = None, in_dtype: str | None = None,
                call: str | None = None) -> S.PrimFunc:
    """``C += A @ B`` for one m x n x k tile in one wave (row-major A, B, C), through ``tc.mma``.
    ``acc_dtype``/``in_dtype``/``call`` override the fragments' types and the call name (for the
    error tests)."""
    it = lookup(intrin)
    tin, tacc = dtype(in_dtype or it.in_dtype), dtype(acc_dtype or it.acc_dtype)
    A = Buffer("A", tin, (E.const(it.m * it.k),))
    B = Buffer("B", tin, (E.const(it.k * it.n),))
    C = Buffer("C", tacc, (E.const(it.m * it.n),))
    fa = Buffer("a_frag", tin, (E.const(it.a.per_lane),), scope="local")
    fb = Buffer("b_frag", tin, (E.const(it.b.per_lane),), scope="local")
    fc = Buffer("c_frag", tacc, (E.const(it.c.per_lane),), scope="local")
    lane = E.Var("lane")
    body: list[S.Stmt] = []
    for frag, src, lay, width in ((fa, A, it.a, it.k), (fb, B, it.b, it.n), (fc, C, it.c, it.n)):
        for r in range(lay.per_lane):
            row, col = lay.coord(lane, r)
            body.append(S.BufferStore(frag, E.BufferLoad(src, (row * width + col,), src.dtype), (E.const(r),)))
    first = tuple(E.BufferLoad(f, (E.const(0),), f.dtype) for f in (fc, fa, fb))
    body.append(S.Evaluate(E.Call(E.const(0).dtype, call or "tc.mma:" + it.name, first)))
    for r in range(it.c.per_lane):
        row, col = it.c.coord(lane, r)
        body.append(S.BufferStore(C, E.BufferLoad(fc, (E.const(r),), tacc), (row * it.n + col,)))
    inner = S.Allocate(fa, S.Allocate(fb, S.Allocate(fc, S.SeqStmt(tuple(body)))))
    loop = S.For(lane, E.const(0), E.const(it.warp), S.ForKind.THREAD_BINDING, inner, "threadIdx.x")
    block = S.For(E.Var("bx"), E.const(0), E.const(1), S.ForKind.THREAD_BINDING, loop, "blockIdx.x")
    return S.PrimFunc("tile_" + re.sub(r"\W", "_", it.name), [A, B, C], block)


def assembly(func: S.PrimFunc, target: str) -> tuple[str, str]:
    """(optimized LLVM IR, AMDGPU assembly) of ``func``'s kernels, without linking: the ROCm code
    generator on the kernels of the host/device split, then LLVM's O3 pipeline and the AMDGPU
    assembly printer."""
    tgt = Target(target)
    plan = split_host_device(func, tgt)
    cg = amdgpu.AMDGPUCompiler().codegen(tgt)
    for k in plan.kernels:
        cg.add_kernel(k)
    mod = parse_and_verify(finalize_kernels(str(cg.module), cg.kernel_attrs), "the test kernels")
    tm = amdgpu._target_machine(tgt)
    optimize(mod, tm, 3)
    text = str(mod)
    return text, amdgpu._target_machine(tgt).emit_assembly(parse_and_verify(text, "the optimized test kernels"))


def matrix_ops(asm: str) -> list[str]:
    return re.findall(r"^\s*(v_(?:mfma|wmma)\w*)\s", asm, re.M)


@pytest.mark.parametrize("name,target,mnemonic", CASES)
def test_matrix_instruction_in_the_assembly(name, target, mnemonic):
    intrin = lookup(name)
    llvm_ir, asm = assembly(tile_kernel(intrin), target)
    assert matrix_ops(asm) == [mnemonic]
    assert f"@{intrin.instruction}" in llvm_ir
    # the fragments live in registers: no private (scratch) memory is left after optimization
    assert "addrspace(5)" not in llvm_ir.split("define", 1)[1]
    assert f".wavefront_size: {intrin.warp}" in asm


def test_mfma_call_signature():
    llvm_ir, _ = assembly(tile_kernel("mfma.f32.16x16x16.bf16"), "rocm -mcpu=gfx942")
    # bfloat16 fragments are passed as their i16 bits; cbsz, abid and blgp are 0
    assert re.search(r"call <4 x float> @llvm\.amdgcn\.mfma\.f32\.16x16x16bf16\.1k\(<4 x i16> %[\w.]+, "
                     r"<4 x i16> %[\w.]+, <4 x float> %[\w.]+, i32 0, i32 0, i32 0\)", llvm_ir)


def test_wmma_call_signature():
    llvm_ir, _ = assembly(tile_kernel("wmma.f32.16x16x16.f16"), "rocm -mcpu=gfx1100")
    assert re.search(r"call <8 x float> @llvm\.amdgcn\.wmma\.f32\.16x16x16\.f16\.v8f32\.v16f16\(<16 x half> %[\w.]+, "
                     r"<16 x half> %[\w.]+, <8 x float> %[\w.]+\)", llvm_ir)


@pytest.mark.parametrize("name,target,threads", [("mfma.f32.16x16x16.f16", "rocm -mcpu=gfx942", 64),
                                                  ("wmma.f32.16x16x16.f16", "rocm -mcpu=gfx1100", 32)])
def test_kernel_is_one_wave(name, target, threads):
    plan = split_host_device(tile_kernel(name), Target(target))
    assert plan.kernels[0].block == (threads, 1, 1)


def _elf_header(data: bytes) -> tuple[int, int]:
    assert data[:4] == b"\x7fELF" and data[4] == 2
    return struct.unpack_from("<HH", data, 16)


@needs_lld
@pytest.mark.parametrize("name,target,mnemonic", CASES)
def test_links_into_a_code_object(name, target, mnemonic, tmp_path):
    m = ember.build(tile_kernel(name), target=target, cache_dir=tmp_path)
    dm = m.imported_modules[0]
    assert _elf_header(dm.get_binary()) == (3, 224)  # ET_DYN, EM_AMDGPU
    assert matrix_ops(dm.get_source("asm")) == [mnemonic]


# -- errors: LLVM aborts on an intrinsic the chip lacks, so codegen must refuse first -----------------------
@pytest.mark.parametrize("name,target,words", [
    ("mfma.f32.16x16x16.f16", "rocm -mcpu=gfx1100", ("llvm.amdgcn.mfma.f32.16x16x16f16", "gfx1100", "gfx942")),
    ("mfma.f32.16x16x16.bf16", "rocm -mcpu=gfx1100", ("mfma.f32.16x16x16.bf16", "gfx1100")),
    ("wmma.f32.16x16x16.f16", "rocm -mcpu=gfx942", ("llvm.amdgcn.wmma.f32.16x16x16.f16", "gfx942", "gfx1100")),
    ("wmma.f32.16x16x16.bf16", "rocm -mcpu=gfx90a", ("wmma.f32.16x16x16.bf16", "gfx90a")),
    ("wmma.f32.16x16x16.f16", "rocm -mcpu=gfx1100 -mattr=+wavefrontsize64", ("wave32", "wave64")),
    ("mma.m16n8k16.f16", "rocm -mcpu=gfx942", ("mma.m16n8k16.f16", "cuda", "gfx942")),
])
def test_target_without_the_instruction(name, target, words):
    with pytest.raises(CodegenError) as info:
        assembly(tile_kernel(name), target)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_unknown_matrix_intrinsic():
    with pytest.raises(CodegenError, match=r"tc\.mma:mfma\.f32\.4x4x4\.f16: .*known: .*mfma\.f32\.16x16x16\.f16"):
        assembly(tile_kernel("mfma.f32.16x16x16.f16", call="tc.mma:mfma.f32.4x4x4.f16"), "rocm -mcpu=gfx942")


def test_fragment_of_the_wrong_type():
    with pytest.raises(CodegenError, match="operand c is buffer c_frag of float16, the instruction takes float32"):
        assembly(tile_kernel("mfma.f32.16x16x16.f16", acc_dtype="float16"), "rocm -mcpu=gfx942")
    with pytest.raises(CodegenError, match="operand a is buffer a_frag of bfloat16"):
        assembly(tile_kernel("wmma.f32.16x16x16.f16", in_dtype="bfloat16"), "rocm -mcpu=gfx1100")


# -- the tensor-core GEMM schedule (ember.strategy.tensorcore) for AMD ------------------------------------------
GEMM_CASES = [
    ("mfma.f32.16x16x16.f16", "rocm -mcpu=gfx942", "v_mfma_f32_16x16x16_f16"),
    ("mfma.f32.16x16x16.bf16", "rocm -mcpu=gfx90a", "v_mfma_f32_16x16x16bf16_1k"),
    pytest.param("wmma.f32.16x16x16.f16", "rocm -mcpu=gfx1100", "v_wmma_f32_16x16x16_f16"),
    pytest.param("wmma.f32.16x16x16.bf16", "rocm -mcpu=gfx1100", "v_wmma_f32_16x16x16_bf16"),
]


def _gemm(name: str, target: str, tile: TCTile | None, b_t: bool = False, size=(200, 136, 100)) -> S.PrimFunc:
    s, args = tensorcore_matmul(*size, intrin=name, tile=tile, b_transposed=b_t, target=target)
    return ember.lower(s, args, "tc_gemm", target=target)


@pytest.mark.parametrize("b_t", [False, True])
@pytest.mark.parametrize("name,target,mnemonic", GEMM_CASES)
def test_tensorcore_gemm_uses_the_matrix_cores(name, target, mnemonic, b_t):
    # 2 x 2 warps of 32 x 32 outputs: 2 x 2 instructions per warp and k step, 2 k steps per chunk of 32
    _, asm = assembly(_gemm(name, target, TCTile(64, 64, 32, 32, 32), b_t), target)
    ops = matrix_ops(asm)
    assert ops and set(ops) == {mnemonic} and len(ops) % 8 == 0
    # Fragments and accumulators stay in registers where the tiles are whole (the ragged sizes'
    # element-wise guarded staging spills 132 bytes on gfx1100 f16: a speed issue, not tested here).
    _, asm = assembly(_gemm(name, target, TCTile(64, 64, 32, 32, 32), b_t, size=(256, 256, 256)), target)
    assert ".private_segment_fixed_size: 0" in asm


def test_tensorcore_gemm_default_tile_gfx942():
    # the default 128 x 128 x 32 block of 2 x 2 waves, 64 x 64 outputs each: 16 MFMAs per k step
    _, asm = assembly(_gemm("mfma.f32.16x16x16.f16", "rocm -mcpu=gfx942", None, size=(512, 512, 512)),
                      "rocm -mcpu=gfx942")
    ops = matrix_ops(asm)
    assert ops and set(ops) == {"v_mfma_f32_16x16x16_f16"} and len(ops) % 32 == 0
    assert ".private_segment_fixed_size: 0" in asm
    assert ".wavefront_size: 64" in asm and re.search(r"\.max_flat_workgroup_size: 256\b", asm)


@needs_lld
def test_tensorcore_gemm_links(tmp_path):
    s, args = tensorcore_matmul(200, 136, 100, intrin="mfma.f32.16x16x16.f16", tile=TCTile(64, 64, 32, 32, 32),
                                target="rocm -mcpu=gfx942")
    dm = ember.build(s, args, target="rocm -mcpu=gfx942", name="tc_gemm", cache_dir=tmp_path).imported_modules[0]
    assert _elf_header(dm.get_binary()) == (3, 224)
    assert set(matrix_ops(dm.get_source("asm"))) == {"v_mfma_f32_16x16x16_f16"}


@pytest.mark.parametrize("name,target", [("mfma.f32.16x16x16.f16", "rocm -mcpu=gfx1100"),
                                         ("wmma.f32.16x16x16.f16", "rocm -mcpu=gfx942")])
def test_tensorcore_gemm_on_a_chip_without_the_instruction(name, target):
    with pytest.raises(ScheduleError, match=re.escape(name)):
        tensorcore_matmul(64, 64, 64, intrin=name, target=target)
