"""Tensor-core GEMMs (``Stage.tensorize`` with ``mma.sync``) run on the GPU, checked against
NumPy float64 on fresh random inputs, outputs poisoned, at sizes no tile divides.

Tolerances, per input type (the reference multiplies the inputs as the device sees them, in
float64): float16 and bfloat16 products are exact in float32 and only the float32 accumulation
rounds, so ``|C - ref| <= 2^-20 * (|A| @ |B|)``; TF32 drops 13 mantissa bits of each input
(truncation), so ``|C - ref| <= 2^-9 * (|A| @ |B|)``; int8 is exact. A float16 output adds its
own rounding (``2^-11`` relative)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.strategy.tensorcore import TCTile, tensorcore_matmul

pytestmark = pytest.mark.gpu
rng = np.random.default_rng()

SIZES = [(200, 136, 100), (1000, 1000, 1000), (17, 9, 5), (256, 256, 64)]


def _inputs(intrin: str, M: int, N: int, K: int, b_t: bool):
    shape_b = (N, K) if b_t else (K, N)
    if intrin.endswith("s8"):
        return rng.integers(-128, 128, (M, K)).astype("int8"), rng.integers(-128, 128, shape_b).astype("int8")
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal(shape_b).astype("float32")
    if intrin.endswith("f16"):
        return a.astype("float16"), b.astype("float16")
    return a, b


def _as_device(intrin: str, x: np.ndarray, dev):
    if intrin.endswith("bf16"):
        return ember.nd.array(x, dev, dtype="bfloat16")
    return ember.nd.array(x, dev)


def _seen(intrin: str, x: np.ndarray) -> np.ndarray:
    """The input as the instruction multiplies it, in float64."""
    x64 = x.astype(np.float64)
    if intrin.endswith("bf16"):
        bits = ember.runtime.ndarray.float32_to_bfloat16_bits(x.astype(np.float32)).astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    return x64


@pytest.mark.parametrize("intrin", ["mma.m16n8k16.f16", "mma.m16n8k16.bf16", "mma.m16n8k8.tf32", "mma.m16n8k32.s8"])
@pytest.mark.parametrize("M,N,K", SIZES)
@pytest.mark.parametrize("b_t", [False, True])
def test_tensorcore_gemm(cuda_dev, tmp_path, intrin, M, N, K, b_t):
    tile = TCTile(64, 64, 32, 32, 32) if M < 300 else None
    s, args = tensorcore_matmul(M, N, K, intrin=intrin, tile=tile, b_transposed=b_t)
    f = ember.build(s, args, target="cuda", name="tc_gemm", cache_dir=tmp_path)
    a, b = _inputs(intrin, M, N, K, b_t)
    out_dtype = "int32" if intrin.endswith("s8") else "float32"
    c = ember.nd.array(np.full((M, N), np.iinfo(np.int32).min if out_dtype == "int32" else np.nan, out_dtype), cuda_dev)
    f(_as_device(intrin, a, cuda_dev), _as_device(intrin, b, cuda_dev), c)
    out = c.numpy()
    a64, b64 = _seen(intrin, a), _seen(intrin, b)
    b64 = b64.T if b_t else b64
    ref = a64 @ b64
    if intrin.endswith("s8"):
        np.testing.assert_array_equal(out, ref.astype(np.int64))
        return
    bound = np.abs(a64) @ np.abs(b64)
    tol = 2.0**-9 if intrin.endswith("tf32") else 2.0**-20
    err = np.abs(out.astype(np.float64) - ref)
    assert np.all(np.isfinite(out)), "poisoned (NaN) outputs were not written"
    assert np.all(err <= tol * bound + 1e-30), f"max excess {np.max(err - tol * bound)}"


def test_tensorcore_gemm_half_output(cuda_dev, tmp_path):
    M, N, K = 130, 70, 300
    tile = TCTile(64, 64, 32, 32, 32)
    s, args = tensorcore_matmul(M, N, K, intrin="mma.m16n8k16.f16", out_dtype="float16", tile=tile)
    f = ember.build(s, args, target="cuda", name="tc_gemm_h", cache_dir=tmp_path)
    a, b = _inputs("mma.m16n8k16.f16", M, N, K, False)
    c = ember.nd.array(np.full((M, N), np.nan, "float16"), cuda_dev)
    f(ember.nd.array(a, cuda_dev), ember.nd.array(b, cuda_dev), c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    err = np.abs(c.numpy().astype(np.float64) - ref)
    assert np.all(err <= 2.0**-20 * bound + 2.0**-11 * np.abs(ref) + 1e-7)
