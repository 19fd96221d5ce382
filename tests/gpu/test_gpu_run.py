"""Kernels built for CUDA and run on an NVIDIA GPU, checked against NumPy float64.

Marked ``gpu``: they skip with the reason on a machine without the CUDA driver or a GPU."""

from __future__ import annotations

import re

import kernels as K
import numpy as np
import pytest

import ember
from ember.errors import ArgumentError

pytestmark = pytest.mark.gpu
TARGET = "cuda"
rng = np.random.default_rng()


def build(kern, name, tmp_path, **kw):
    s, args, ref = kern
    return ember.build(s, args, target=TARGET, target_host="llvm", name=name, cache_dir=tmp_path, **kw), ref


def run(f, dev, inputs, out_shape, out_dtype="float32"):
    arrs = [ember.nd.array(x, dev) for x in inputs]
    out = ember.nd.array(np.full(out_shape, np.nan, dtype=out_dtype), dev)  # poisoned
    f(*arrs, out)
    return out.numpy()


def rel_err(out, ref):
    return float(np.linalg.norm(out.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30))


@pytest.mark.parametrize("n", [1, 63, 64, 1000, 100003])
def test_vector_add_sizes(cuda_dev, tmp_path, n):
    f, ref = build(K.vector_add(), "vadd", tmp_path)
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    out = run(f, cuda_dev, [a, b], (n,))
    np.testing.assert_allclose(out, ref(a, b), rtol=1e-6, atol=1e-7)


def test_vector_add_vec4_and_copy(cuda_dev, tmp_path):
    f, ref = build(K.vector_add_vec4(), "vadd4", tmp_path)
    assert re.search(r"ld\.global(\.nc)?\.v4", f.imported_modules[0].get_source("ptx"))
    for n4 in (4, 1000, 4 * 256 * 3 + 4):
        a, b = rng.standard_normal(n4).astype("float32"), rng.standard_normal(n4).astype("float32")
        out = run(f, cuda_dev, [a, b], (n4,))
        np.testing.assert_allclose(out, ref(a, b), rtol=1e-6, atol=1e-7)
    g, gref = build(K.copy_vec4(), "copy4", tmp_path)
    a = rng.standard_normal(4096).astype("float32")
    np.testing.assert_array_equal(run(g, cuda_dev, [a], (4096,)), a)


def test_misaligned_vector_argument_is_refused(cuda_dev, torch_cuda, tmp_path):
    torch = torch_cuda
    f, _ = build(K.copy_vec4(), "copy4m", tmp_path)
    base = torch.randn(4 * 65, device="cuda")
    a = base[1:1 + 4 * 64]
    out = torch.empty(4 * 64, device="cuda")
    with pytest.raises(ArgumentError, match="16-byte aligned"):
        f(a, out)


@pytest.mark.parametrize("threads", [32, 256, 1024])
@pytest.mark.parametrize("shape", [(1, 1), (7, 1000), (33, 4096), (5, 12345)])
def test_row_sum(cuda_dev, tmp_path, threads, shape):
    f, ref = build(K.row_sum(threads=threads), "rowsum", tmp_path)
    a = rng.standard_normal(shape).astype("float32")
    out = run(f, cuda_dev, [a], (shape[0],))
    assert rel_err(out, ref(a)) < 1e-5


def test_row_max_and_col_sum(cuda_dev, tmp_path):
    f, ref = build(K.row_max(), "rowmax", tmp_path)
    a = rng.standard_normal((17, 3001)).astype("float32")
    np.testing.assert_array_equal(run(f, cuda_dev, [a], (17,)), ref(a).astype("float32"))
    g, gref = build(K.col_sum(), "colsum", tmp_path)
    a = rng.standard_normal((300, 1001)).astype("float32")
    assert rel_err(run(g, cuda_dev, [a], (1001,)), gref(a)) < 1e-5


def test_softmax(cuda_dev, tmp_path):
    f, ref = build(K.softmax(), "softmax", tmp_path)
    a = (rng.standard_normal((37, 1000)) * 5).astype("float32")
    out = run(f, cuda_dev, [a], a.shape)
    assert rel_err(out, ref(a)) < 1e-5
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)


def test_gemm_tiled_shared_memory(cuda_dev, tmp_path):
    f, ref = build(K.gemm_tiled(256, 192, 320), "gemm16", tmp_path)
    a = rng.standard_normal((256, 320)).astype("float32")
    b = rng.standard_normal((320, 192)).astype("float32")
    assert rel_err(run(f, cuda_dev, [a, b], (256, 192)), ref(a, b)) < 1e-5


@pytest.mark.parametrize("mnk,extra", [
    ((512, 512, 512), {}), ((256, 384, 1024), {}),
    ((512, 384, 1024), {"bm": 256, "bn": 128, "tm": 16, "tn": 8, "warp": (4, 8), "bk": 16, "stages": 2}),
    ((512, 384, 1040), {"bm": 256, "bn": 128, "tm": 16, "tn": 8, "warp": (4, 8), "bk": 16, "stages": 4,
                        "grouped": True}),
    ((384, 640, 528), {"bk": 16, "stages": 3, "grouped": True}),
])
def test_gemm_fast(cuda_dev, tmp_path, mnk, extra):
    M, N, Kd = mnk
    f, ref = build(K.gemm_fast(M, N, Kd, **extra), "sgemm", tmp_path)
    a = rng.standard_normal((M, Kd)).astype("float32")
    b = rng.standard_normal((Kd, N)).astype("float32")
    assert rel_err(run(f, cuda_dev, [a, b], (M, N)), ref(a, b)) < 1e-5


LIBDEVICE_TOL = (1e-6, 3e-7)
FALLBACK_TOL = {
    "exp": (2e-6, 0), "exp2": (1e-6, 0), "exp10": (4e-6, 0), "log": (2e-6, 2e-6), "log2": (2e-6, 2e-6),
    "log10": (2e-6, 2e-6), "sin": (0, 2e-6), "cos": (0, 2e-6), "tan": (1e-5, 1e-6), "tanh": (0, 2e-6),
    "sigmoid": (0, 1e-6), "erf": (0, 1e-6), "expm1": (3e-6, 3e-6), "log1p": (2e-6, 2e-6), "sinh": (4e-6, 2e-6),
    "cosh": (3e-6, 0), "atan": (0, 1e-6), "asin": (0, 2e-6), "acos": (0, 2e-6),
}


def _math_check(dev, tmp_path, name, dtype, libdevice):
    from ember.backends.cuda import CUDABackend
    from ember.backends.cuda.codegen import NVPTXCompiler
    from ember.backends.gpu.build import compile_parts
    from ember.target import Target

    s, args, ref = K.unary(name, dtype)
    fn = ember.lower(s, args, f"m_{name}")
    compiler = NVPTXCompiler(libdevice=None if libdevice else "off")
    if libdevice and compiler.libdevice is None:
        pytest.skip("no libdevice on this machine")
    tgt = CUDABackend().resolve(Target(TARGET))
    f = CUDABackend().load(compile_parts([fn], tgt, compiler), tgt)
    _, _, sampler = K.MATH_FUNCS[name]
    a = sampler(rng, 20000).astype(dtype)
    out = run(f, dev, [a], a.shape, dtype)
    want = ref(a)
    if dtype == "float64":
        rtol, atol = (1e-14, 1e-15) if libdevice else (5e-6, 2e-6)
    else:
        rtol, atol = LIBDEVICE_TOL if libdevice else FALLBACK_TOL.get(name, (0, 0))
    np.testing.assert_allclose(out, want, rtol=rtol, atol=atol, err_msg=f"{name} {dtype} libdevice={libdevice}")


@pytest.mark.parametrize("name", sorted(K.MATH_FUNCS))
def test_math_libdevice(cuda_dev, tmp_path, name):
    _math_check(cuda_dev, tmp_path, name, "float32", True)


@pytest.mark.parametrize("name", ["exp", "log", "sin", "tanh", "erf"])
def test_math_libdevice_f64(cuda_dev, tmp_path, name):
    _math_check(cuda_dev, tmp_path, name, "float64", True)


@pytest.mark.parametrize("name", sorted(FALLBACK_TOL))
def test_math_fallback(cuda_dev, tmp_path, name):
    _math_check(cuda_dev, tmp_path, name, "float32", False)


@pytest.mark.parametrize("name", ["exp", "sin"])
def test_math_fallback_f64(cuda_dev, tmp_path, name):
    _math_check(cuda_dev, tmp_path, name, "float64", False)


def test_pow(cuda_dev, tmp_path):
    f, ref = build(K.pow_kernel(), "powk", tmp_path)
    a = rng.uniform(0.1, 10, 5000).astype("float32")
    b = rng.uniform(-5, 5, 5000).astype("float32")
    np.testing.assert_allclose(run(f, cuda_dev, [a, b], (5000,)), ref(a, b), rtol=1e-6, atol=0)


def test_dlpack_round_trip_with_torch(cuda_dev, torch_cuda, tmp_path):
    torch = torch_cuda
    f, ref = build(K.vector_add(), "vadd_t", tmp_path)
    a = torch.randn(5000, device="cuda")
    b = torch.randn(5000, device="cuda")
    c = torch.full((5000,), float("nan"), device="cuda")
    f(a, b, c)  # torch tensors straight in, no copy
    torch.cuda.synchronize()
    assert torch.allclose(c, a + b)
    e = ember.nd.from_dlpack(a)
    assert e.data_ptr == a.data_ptr() and e.device == ember.cuda(0) and e.shape == (5000,)
    back = torch.from_dlpack(e)
    assert back.data_ptr() == a.data_ptr()
    out = ember.nd.empty((5000,), "float32", cuda_dev)
    f(e, ember.nd.from_dlpack(b), out)
    t_out = torch.from_dlpack(out)
    assert t_out.device.type == "cuda" and t_out.data_ptr() == out.data_ptr
    assert torch.allclose(t_out, a + b)
    np.testing.assert_allclose(out.numpy(), (a + b).cpu().numpy(), rtol=1e-6)


def test_argument_checks_on_device(cuda_dev, tmp_path):
    f, _ = build(K.vector_add(), "vadd_c", tmp_path)
    a = ember.nd.array(np.ones(10, "float32"), cuda_dev)
    with pytest.raises(ArgumentError, match="dtype"):
        f(a, a, ember.nd.array(np.ones(10, "float64"), cuda_dev))
    with pytest.raises(ArgumentError, match="cpu"):
        f(a, a, ember.nd.array(np.ones(10, "float32")))
    with pytest.raises(ArgumentError, match="n"):
        f(a, a, ember.nd.array(np.ones(11, "float32"), cuda_dev))


def test_device_attributes(cuda_dev):
    attrs = cuda_dev.attributes
    assert attrs["multi_processor_count"] > 0 and attrs["max_shared_memory_per_block"] >= 48 * 1024
    assert attrs["clock_rate_khz"] > 0 and attrs["warp_size"] == 32
    from ember.backends.cuda import CUDABackend

    assert cuda_dev.exist and CUDABackend().resolve(ember.Target("cuda")).opt("arch") == attrs["arch"]


def test_get_binary_and_sources(cuda_dev, tmp_path):
    f, _ = build(K.vector_add(), "vadd_s", tmp_path)
    dm = f.imported_modules[0]
    assert "ptx_kernel" in dm.get_source("llvm") and ".entry vadd_s_kernel0" in dm.get_source("ptx")
    assert dm.get_binary()[:4] in (b"\x7fELF", b"//\n/", b"//\r\n") or dm.get_binary().startswith(b"//")
