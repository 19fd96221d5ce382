"""GPU code generation without a GPU: every kernel of ``kernels.py`` compiles for CUDA and for ROCm
(gfx90a, gfx942, gfx1100); the PTX is assembled by ``ptxas -arch=sm_90`` where ptxas is present;
the AMD code object is an ``ET_DYN``/``EM_AMDGPU`` ELF with the kernel symbol, its ``.kd``
descriptor and the AMDGPU metadata note; launch plans, limits and errors are checked."""

from __future__ import annotations

import os
import re
import shlex
import struct
import subprocess

import kernels as K
import numpy as np
import pytest

import ember
from ember import te
from ember.backends.cuda import codegen as nvptx
from ember.backends.rocm import codegen as amdgpu
from ember.backends.rocm import lld as lld_search
from ember.errors import CodegenError, LoweringError, ToolchainError

ROCM_TARGETS = ["rocm -mcpu=gfx90a", "rocm -mcpu=gfx942", "rocm -mcpu=gfx1100"]


def _has_lld() -> str | None:
    try:
        amdgpu.find_lld()
    except ToolchainError as exc:
        return str(exc)
    return None


needs_lld = pytest.mark.skipif(_has_lld() is not None, reason=f"{_has_lld()}")


def _build(name, target, tmp_path):
    s, args, _ = K.ALL_COMPILE[name]()
    return ember.build(s, args, target=target, target_host="llvm", name=name, cache_dir=tmp_path)


@pytest.mark.parametrize("name", sorted(K.ALL_COMPILE))
def test_compiles_for_cuda_and_ptxas_accepts(name, tmp_path):
    f = _build(name, "cuda -arch=sm_90", tmp_path)
    dm = f.imported_modules[0]
    ptx = dm.get_source("ptx")
    assert ".target sm_90" in ptx and ".entry" in ptx
    llvm_ir = dm.get_source("llvm")
    assert "ptx_kernel" in llvm_ir and "addrspace(1)" in llvm_ir
    # LLVM libm intrinsics abort on NVPTX: none may reach the backend
    assert not re.search(r"@llvm\.(exp|log|sin|cos|pow|exp10|log10|tan)\.f(32|64)", llvm_ir)
    assert ".maxntid" in ptx
    ptxas = nvptx.find_ptxas()
    if ptxas is not None:
        cubin, _ = nvptx.ptxas_compile(ptx, "sm_90", ptxas)
        assert cubin[:4] == b"\x7fELF"
        assert dm.binary_format == "cubin" and dm.get_binary()[:4] == b"\x7fELF"
    else:
        assert dm.binary_format == "ptx" and dm.get_binary().startswith(b"//")


def _elf_header(data: bytes) -> tuple[int, int]:
    assert data[:4] == b"\x7fELF" and data[4] == 2  # 64-bit
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    return e_type, e_machine


def _symbols_and_notes(data: bytes) -> tuple[set[str], bytes]:
    """Names in .dynsym/.symtab and the contents of note sections, parsed from the ELF."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize) for k in range(shnum)]
    names: set[str] = set()
    notes = b""
    for sec in secs:
        _, stype, _, _, off, size, link, _, _, entsize = sec
        if stype in (2, 11):  # SYMTAB, DYNSYM
            stroff = secs[link][4]
            for j in range(size // entsize):
                st_name, = struct.unpack_from("<I", data, off + j * entsize)
                end = data.index(b"\0", stroff + st_name)
                names.add(data[stroff + st_name:end].decode())
        elif stype == 7:  # NOTE
            notes += data[off:off + size]
    return names, notes


@needs_lld
@pytest.mark.parametrize("target", ROCM_TARGETS)
@pytest.mark.parametrize("name", ["vector_add", "vector_add_vec4", "row_sum", "softmax", "gemm_tiled", "gemm_fast",
                                  "math_exp", "math_tanh", "math64_erf", "pow", "row_sum_32"])
def test_compiles_for_rocm_code_object(name, target, tmp_path):
    f = _build(name, target, tmp_path)
    dm = f.imported_modules[0]
    hsaco = dm.get_binary()
    assert _elf_header(hsaco) == (3, 224)  # ET_DYN, EM_AMDGPU
    syms, notes = _symbols_and_notes(hsaco)
    for k in dm.kernel_names:
        assert k in syms and f"{k}.kd" in syms
    assert b"AMDGPU" in notes and b"amdhsa.kernels" in notes
    mcpu = target.split("=")[1]
    assert f"amdgcn-amd-amdhsa--{mcpu}".encode() in notes
    llvm_ir = dm.get_source("llvm")
    assert "amdgpu_kernel" in llvm_ir and "amdgpu-flat-work-group-size" in llvm_ir
    asm = dm.get_source("asm")
    assert f".amdgcn_target \"amdgcn-amd-amdhsa--{mcpu}" in asm
    wave = 32 if mcpu == "gfx1100" else 64
    assert f".wavefront_size: {wave}" in asm


@needs_lld
def test_all_kernels_compile_for_rocm_gfx942(tmp_path):
    for name in sorted(K.ALL_COMPILE):
        f = _build(name, "rocm -mcpu=gfx942", tmp_path)
        assert _elf_header(f.imported_modules[0].get_binary()) == (3, 224)


@needs_lld
def test_rocm_kernarg_layout_matches_llvm_metadata(tmp_path):
    from ember.runtime.hip_driver import kernarg_layout

    n = te.var("n", "int64")
    m = te.var("m")
    A = te.placeholder((m,), name="A")
    B = te.placeholder((n,), name="B", dtype="float64")
    C = te.compute((m,), lambda i: A[i] + B[i % n].astype("float32"), name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    f = ember.build(s, [A, B, C], target="rocm -mcpu=gfx942", name="kargs", cache_dir=tmp_path)
    plan = f.get_function("kargs").plan["kernels"][0]
    offsets, size = kernarg_layout(plan["param_types"])
    asm = f.imported_modules[0].get_source("asm")
    meta = asm[asm.index("amdhsa.kernels"):]
    llvm_offsets = [int(x) for x in re.findall(r"\.offset:\s+(\d+)", meta)][:len(offsets)]
    assert offsets == llvm_offsets
    assert plan["param_types"][-2:] in (["i32", "i64"], ["i64", "i32"])


def test_wave_size_from_target():
    assert ember.Target("rocm -mcpu=gfx942").warp_size == 64
    assert ember.Target("rocm -mcpu=gfx90a").warp_size == 64
    assert ember.Target("rocm -mcpu=gfx1100").warp_size == 32
    assert ember.Target("rocm -mcpu=gfx1100 -mattr=+wavefrontsize64").warp_size == 64
    assert ember.Target("cuda -arch=sm_80").warp_size == 32


@pytest.mark.parametrize("target,width", [("cuda -arch=sm_90", 32), ("rocm -mcpu=gfx942", 64),
                                          ("rocm -mcpu=gfx1100", 32)])
def test_allreduce_uses_the_target_warp_size(target, width):
    s, args, _ = K.row_sum(threads=256)
    fn = ember.lower(s, args, "rs")
    from ember.lowering.gpu import split_host_device

    plan = split_host_device(fn, ember.Target(target))
    text = str(plan.kernels[0].func)
    offsets = [int(x) for x in re.findall(r"shfl_xor\(red, (\d+)\)", text)]
    assert offsets == [width // 2 >> k for k in range(int(np.log2(width)))]
    assert f"red_buf = allocate(float32, [{256 // width}]" in text


def test_host_plan_and_launch_dims(tmp_path):
    f = _build("vector_add", "cuda -arch=sm_90", tmp_path)
    plan = f.get_function("vector_add").plan
    k = plan["kernels"][0]
    assert k["block"] == [64, 1, 1] and k["param_types"] == ["ptr", "ptr", "ptr", "i32"]
    from ember.runtime.size_expr import compile_grid

    grid = compile_grid(k["grid"])  # expression trees, evaluated without eval
    assert grid([1]) == (1, 1, 1) and grid([64]) == (1, 1, 1) and grid([65]) == (2, 1, 1)
    assert "launch vector_add_kernel0" in f.get_source("host")
    sm = _build("softmax", "cuda -arch=sm_90", tmp_path)
    assert len(sm.get_function("softmax").plan["kernels"]) == 4
    assert [s[0] for s in sm.get_function("softmax").plan["steps"]].count("alloc") == 3


def test_shared_memory_and_barriers_in_gemm(tmp_path):
    f = _build("gemm_tiled", "cuda -arch=sm_90", tmp_path)
    ptx = f.imported_modules[0].get_source("ptx")
    assert ".shared" in ptx and "bar.sync" in ptx and ptx.count("bar.sync") == 2
    g = _build("gemm_fast", "cuda -arch=sm_90", tmp_path)
    gptx = g.imported_modules[0].get_source("ptx")
    assert "ld.shared.v4" in gptx and "st.global.v4" in gptx


def test_bind_on_cpu_is_a_clear_error(tmp_path):
    s, args, _ = K.vector_add()
    with pytest.raises(CodegenError, match="bound to blockIdx.x, which only GPU targets have"):
        ember.build(s, args, target="llvm", cache_dir=tmp_path)


def test_too_many_threads(tmp_path):
    s, args, _ = K.vector_add(block=2048)
    with pytest.raises(LoweringError, match="threadIdx.x has extent 2048"):
        ember.build(s, args, target="cuda", cache_dir=tmp_path)
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * 2, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.y"))
    s[B].bind(B.op.axis[1], te.thread_axis("threadIdx.x"))
    with pytest.raises(LoweringError, match="4096 threads"):
        ember.build(s, [A, B], target="rocm", cache_dir=tmp_path)


def test_shared_memory_over_the_limit(tmp_path):
    s, args, _ = K.gemm_tiled(256, 256, 256, tile=32)
    ok = ember.build(s, args, target="cuda -arch=sm_80", cache_dir=tmp_path)
    assert ok.get_function("main").plan["kernels"][0]["shared_bytes"] == 8192
    # a whole row of 65536 floats cached in shared memory: 256 KiB, over every GPU's limit
    A = te.placeholder((8, 65536), name="A")
    B = te.compute((8, 65536), lambda i, j: A[i, j] * 2, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    jo, ji = s[B].split(B.op.axis[1], factor=256)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ji, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], B.op.axis[0])
    ao, ai = s[AS].split(s[AS].op.axis[1], factor=256)
    s[AS].bind(ai, te.thread_axis("threadIdx.x"))
    for target in ("cuda -arch=sm_90", "rocm -mcpu=gfx942"):
        with pytest.raises(LoweringError, match=r"262144 bytes of shared memory .*A.shared"):
            ember.build(s, [A, B], target=target, cache_dir=tmp_path)


def test_dynamic_shared_memory_over_48k(tmp_path):
    s, args, _ = K.gemm_fast(1024, 1024, 1024, bk=64)
    f = ember.build(s, args, target="cuda -arch=sm_90", cache_dir=tmp_path)
    k = f.get_function("main").plan["kernels"][0]
    assert k["shared_bytes"] > 48 * 1024 and k["dynamic_shared"] == k["shared_bytes"]
    assert ".extern .shared" in f.imported_modules[0].get_source("ptx")


def test_unbound_stage_on_gpu_is_a_clear_error(tmp_path):
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(CodegenError, match="bound to blockIdx"):
        ember.build(s, [A, B], target="cuda", cache_dir=tmp_path)


def test_reduction_axis_bind_stays_forbidden():
    A = te.placeholder((10, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    B = te.compute((10,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ember.ScheduleError, match="rfactor"):
        s[B].bind(k, te.thread_axis("threadIdx.x"))


def test_missing_lld_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    monkeypatch.delenv("EMBER_LLD", raising=False)
    monkeypatch.setattr(lld_search, "wheel_lld", lambda: None)  # as without ember[rocm]'s ziglang wheel
    amdgpu.find_lld.cache_clear()
    try:
        with pytest.raises(ToolchainError, match="apt-get install lld-22"):
            amdgpu.find_lld(str(tmp_path / "nope"))
    finally:
        amdgpu.find_lld.cache_clear()


def test_too_old_lld_is_skipped(tmp_path, monkeypatch):
    fake = tmp_path / "ld.lld"
    fake.write_text("#!/bin/sh\necho 'Ubuntu LLD 14.0.0 (compatible with GNU linkers)'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    monkeypatch.delenv("EMBER_LLD", raising=False)
    monkeypatch.setattr(lld_search, "wheel_lld", lambda: None)  # as without ember[rocm]'s ziglang wheel
    amdgpu.find_lld.cache_clear()
    try:
        with pytest.raises(ToolchainError, match="older than 19"):
            amdgpu.find_lld(str(fake))
    finally:
        amdgpu.find_lld.cache_clear()


def test_missing_driver_is_one_sentence():
    import importlib

    cuda = importlib.import_module("ember.runtime.cuda_driver")
    try:
        cuda.device_count()
    except ember.DeviceError as exc:
        assert "\n" not in str(exc) and "libcuda.so.1" in str(exc) or "cuInit" in str(exc)
    else:
        pytest.skip("this machine has the NVIDIA driver")


def test_isa_versions():
    assert amdgpu.isa_version("gfx942") == 9402
    assert amdgpu.isa_version("gfx90a") == 9010
    assert amdgpu.isa_version("gfx1100") == 11000


def test_cache_hit_gives_the_same_binary(tmp_path):
    a = _build("row_sum", "cuda -arch=sm_90", tmp_path)
    b = _build("row_sum", "cuda -arch=sm_90", tmp_path)
    assert a.imported_modules[0].get_binary() == b.imported_modules[0].get_binary()
    assert os.listdir(tmp_path)


def test_ptxas_rejects_are_codegen_errors():
    if nvptx.find_ptxas() is None:
        pytest.skip("ptxas is not installed")
    with pytest.raises(CodegenError, match="ptxas rejected"):
        nvptx.ptxas_compile(".version 7.8\n.target sm_90\n.address_size 64\nbogus;\n", "sm_90")


def test_ptx_driver_free_check_of_lld_path_order(tmp_path, monkeypatch):
    real = _has_lld()
    if real is not None:
        pytest.skip(real)
    monkeypatch.setenv("EMBER_LLD", shlex.join(amdgpu.find_lld()))
    amdgpu.find_lld.cache_clear()
    try:
        assert amdgpu.find_lld() == tuple(shlex.split(os.environ["EMBER_LLD"]))
    finally:
        amdgpu.find_lld.cache_clear()
    assert subprocess.run([*shlex.split(os.environ["EMBER_LLD"]), "--version"], capture_output=True).returncode == 0
