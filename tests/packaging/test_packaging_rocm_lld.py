"""Compiling for AMD GPUs from a pip install alone: LLD from the ``ziglang`` wheel (``ember[rocm]``;
the test extra installs it) is found with no ``ld.lld`` on PATH, no ROCm and no ``EMBER_LLD``,
links code objects for three GPU generations, and gives the same code object as a system LLD of the
same version. ``EMBER_LLD`` keeps working as a path or as a command line."""

from __future__ import annotations

import os
import shlex
import shutil
import struct
import sys

import pytest

import ember
from ember.backends.rocm import lld

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "devices"))
from device_models import mlp  # noqa: E402

WHEEL = lld.wheel_lld()
needs_wheel = pytest.mark.skipif(WHEEL is None, reason="the ziglang wheel is not installed (pip install 'ember[rocm]')")
EM_AMDGPU, ET_DYN, ELFOSABI_AMDGPU_HSA = 224, 3, 64


@pytest.fixture
def bare_machine(monkeypatch, tmp_path):
    """No ld.lld on PATH, no ROCm, no EMBER_LLD, no compile cache (every code object is linked
    here); the linker cache cleared before and after."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("EMBER_CACHE_DIR", "off")
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    monkeypatch.delenv("EMBER_LLD", raising=False)
    lld.find_lld.cache_clear()
    yield
    lld.find_lld.cache_clear()


def _check_code_object(co: bytes, kernels: list[str]) -> None:
    assert co[:4] == b"\x7fELF" and co[4] == 2 and co[5] == 1  # ELF64, little-endian
    assert co[7] == ELFOSABI_AMDGPU_HSA
    e_type, e_machine = struct.unpack_from("<HH", co, 16)
    assert (e_type, e_machine) == (ET_DYN, EM_AMDGPU)
    secs = lld.code_object_sections(co)
    for need in (".dynsym", ".dynstr", ".text", ".note", ".dynamic"):
        assert need in secs, f"{need} missing from the code object ({sorted(secs)})"
    dynstr = secs[".dynstr"][2]
    for k in kernels:  # HIP finds each kernel by its name and its descriptor, name.kd
        assert k.encode() + b"\0" in dynstr and k.encode() + b".kd\0" in dynstr


@needs_wheel
@pytest.mark.parametrize("mcpu", ["gfx90a", "gfx942", "gfx1100"])
def test_the_wheel_links_with_nothing_else_installed(bare_machine, rng, mcpu):
    assert lld.find_lld() == WHEEL
    assert (lld.lld_version(WHEEL) or 0) >= lld.MIN_LLD
    onnx_bytes, _ = mlp(rng)
    model = ember.compile(onnx_bytes, target=f"rocm -mcpu={mcpu}", use_cache=False)
    dm = model.module.imported_modules[0]
    _check_code_object(dm.get_binary(), dm.kernel_names)
    assert mcpu in dm.get_source("asm")


@needs_wheel
def test_the_wheel_and_a_system_lld_give_the_same_code_object():
    system = next((p for v in range(lld.NEWEST_LLD, lld.MIN_LLD - 1, -1) if (p := shutil.which(f"ld.lld-{v}"))), None)
    if system is None or lld.lld_version((system,)) != lld.lld_version(WHEEL):
        pytest.skip(f"no system ld.lld of the wheel's version (LLD {lld.lld_version(WHEEL)}) to compare with")
    from ember import te
    from ember.backends.rocm.codegen import AMDGPUCompiler
    from ember.lowering.gpu import split_host_device
    from ember.target import Target

    tgt = Target("rocm -mcpu=gfx942")
    A = te.placeholder((1000,), name="A")
    B = te.compute((1000,), lambda i: te.exp(A[i]) * 2.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    compiler = AMDGPUCompiler()
    cg = compiler.codegen(tgt)
    for k in split_host_device(ember.lower(s, [A, B], "expo", target=tgt), tgt).kernels:
        cg.add_kernel(k)
    obj, _ = compiler.relocatable(cg)
    a = lld.link_code_object(obj, system)
    b = lld.link_code_object(obj, shlex.join(WHEEL))
    assert lld.code_object_sections(a) == lld.code_object_sections(b)


@needs_wheel
def test_ember_lld_as_a_command_line(bare_machine, rng):
    os.environ["EMBER_LLD"] = f"{shlex.quote(sys.executable)} -m ziglang ld.lld"
    lld.find_lld.cache_clear()
    assert lld.find_lld() == (sys.executable, "-m", "ziglang", "ld.lld")
    onnx_bytes, _ = mlp(rng)
    model = ember.compile(onnx_bytes, target="rocm -mcpu=gfx90a", use_cache=False)
    dm = model.module.imported_modules[0]
    _check_code_object(dm.get_binary(), dm.kernel_names)


def test_ember_lld_as_a_path(monkeypatch, tmp_path):
    """A path to an LLD executable (a script that runs the wheel's, or a system ld.lld)."""
    target = WHEEL or next((shutil.which(f"ld.lld-{v}") for v in range(lld.NEWEST_LLD, lld.MIN_LLD - 1, -1)
                            if shutil.which(f"ld.lld-{v}")), None)
    if target is None:
        pytest.skip("no LLD here: neither the ziglang wheel nor ld.lld-NN on PATH")
    wrapper = tmp_path / "my-ld.lld"
    cmd = (shlex.join(target) if isinstance(target, tuple) else shlex.quote(target))
    wrapper.write_text(f'#!/bin/sh\nexec {cmd} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("EMBER_LLD", str(wrapper))
    lld.find_lld.cache_clear()
    try:
        assert lld.find_lld() == (str(wrapper),)
    finally:
        lld.find_lld.cache_clear()


def test_no_linker_at_all_says_what_to_install(bare_machine, monkeypatch):
    monkeypatch.setattr(lld, "wheel_lld", lambda: None)  # as on a machine without the wheel
    with pytest.raises(ember.ToolchainError, match=r"pip install 'ember\[rocm\]'.*apt-get install lld-22"):
        lld.find_lld()


def test_linker_failure_is_a_toolchain_error(bare_machine):
    if WHEEL is None:
        pytest.skip("the ziglang wheel is not installed (pip install 'ember[rocm]')")
    with pytest.raises(ember.ToolchainError, match="could not link the AMDGPU code object"):
        lld.link_code_object(b"\x7fELF not an object")



def test_python_link_prototype_agrees_with_lld(rng, monkeypatch):
    """benchmarks/amdgpu_pylink.py (the measured alternative of docs/gpu.md, not used by ember)
    against LLD on a model's objects for three GPU generations."""
    monkeypatch.setenv("EMBER_CACHE_DIR", "off")  # every kernel built (and linked) here
    try:
        lld.find_lld()
    except ember.ToolchainError as exc:
        pytest.skip(str(exc))
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    import amdgpu_pylink

    from ember.backends.rocm import codegen

    onnx_bytes, _ = mlp(rng)
    seen: list[bytes] = []
    real = codegen.link_code_object
    codegen.link_code_object = lambda obj, linker=None: seen.append(obj) or real(obj, linker)
    try:
        for mcpu in ("gfx90a", "gfx942", "gfx1100"):
            ember.compile(onnx_bytes, target=f"rocm -mcpu={mcpu}", use_cache=False)
    finally:
        codegen.link_code_object = real
    assert len(seen) == 3
    for obj in seen:
        assert amdgpu_pylink.compare_with(amdgpu_pylink.link(obj), lld.link_code_object(obj)) == []
