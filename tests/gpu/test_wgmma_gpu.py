"""Hopper ``wgmma`` GEMMs (:func:`ember.strategy.tensorcore.wgmma_matmul`) run on an sm_90 GPU,
checked against NumPy float64 on fresh random inputs, outputs poisoned (NaN), at sizes no tile
divides (M, N, K not multiples of the block's 128 x bn x 64).

Tolerance: float16 and bfloat16 products are exact in float32 and only the float32 accumulation
rounds, so ``|C - ref| <= 2^-20 * (|A| @ |B|)`` (the same bound as the mma.sync tests; the
reference multiplies the inputs as the device sees them); a float16 output adds its own rounding
(``2^-11`` relative, bounded by ``2^-11 * (|A| @ |B|)``)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.lowering.wgmma import WGTile
from ember.strategy.tensorcore import wgmma_matmul

pytestmark = pytest.mark.gpu
rng = np.random.default_rng()


@pytest.fixture(scope="module")
def hopper(cuda_dev):
    """The device, or skip unless it is an sm_90 GPU (wgmma exists on Hopper only)."""
    arch = cuda_dev.attributes["arch"]
    if arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"wgmma needs an sm_90 GPU, this one is {arch}")
    return cuda_dev


def _seen(dt: str, x: np.ndarray) -> np.ndarray:
    """The input as the instruction multiplies it, in float64."""
    if dt == "bfloat16":
        bits = ember.runtime.ndarray.float32_to_bfloat16_bits(x.astype(np.float32)).astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def _run(dev, tmp_path, M, N, K, dt, b_t, tile, out_dtype="float32"):
    f = ember.build(wgmma_matmul(M, N, K, dt, out_dtype, tile, b_t, target="cuda -arch=sm_90"),
                    target="cuda -arch=sm_90", cache_dir=tmp_path)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((N, K) if b_t else (K, N)).astype("float32")
    if dt == "float16":
        a, b = a.astype("float16"), b.astype("float16")
    c = ember.nd.array(np.full((M, N), np.nan, out_dtype), dev)
    da, db = ember.nd.array(a, dev, dtype=dt), ember.nd.array(b, dev, dtype=dt)
    f(da, db, c)
    a64, b64 = _seen(dt, a), _seen(dt, b)
    if b_t:
        b64 = b64.T
    ref, bound = a64 @ b64, np.abs(a64) @ np.abs(b64)
    got = c.numpy().astype(np.float64)
    rel = 2.0**-20 + (2.0**-11 if out_dtype == "float16" else 0.0)
    if dt == "float32":  # TF32: each input keeps 10 mantissa bits (rounded or cut), a product is off by < 2^-9
        rel += 2.0**-9
    excess = np.abs(got - ref) - rel * bound
    assert np.isfinite(got).all(), "NaN left in the output: an element was not written"
    where = np.unravel_index(excess.argmax(), excess.shape)
    assert excess.max() <= 0, f"max error {np.abs(got - ref).max()} beyond the bound at {where}"
    return f


@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (200, 136, 104), (17, 24, 40), (300, 520, 4104)])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("b_t", [False, True])
def test_wgmma_gemm(hopper, tmp_path, M, N, K, dt, b_t):
    _run(hopper, tmp_path, M, N, K, dt, b_t, None)


TILES = [WGTile(2, 256, 4, 1), WGTile(1, 128, 3, 0), WGTile(2, 64, 2, 0), WGTile(1, 256, 4, 1), WGTile(1, 64, 3, 1),
         WGTile(2, 128, 4, 1, 3), WGTile(2, 256, 4, 1, 8),
         # warp-specialised persistent kernels; sms=3 makes every block walk several tiles (333 x 264
         # is 3 x 2 to 6 x 5 tiles), so slots and mbarrier phases carry across tiles
         WGTile(2, 256, 4, 1, 8, ws=1, sms=3), WGTile(1, 128, 3, 1, 0, ws=1, sms=2),
         WGTile(2, 64, 3, 1, 2, ws=1, sms=5),
         # the same with TMA bulk copies (the host encodes the tensor maps)
         WGTile(2, 256, 4, 1, 8, ws=2, sms=3), WGTile(1, 128, 3, 1, 0, ws=2, sms=2),
         WGTile(2, 64, 3, 1, 2, ws=2, sms=5),
         # clusters of two multicasting B: 3 tile rows (an odd one: the pair's second block loads
         # zeros and stores nothing) and pairs walking several tiles; sms=5 gives 2 clusters
         WGTile(2, 256, 4, 1, 8, ws=2, sms=5, cluster=2), WGTile(1, 128, 3, 1, 0, ws=2, sms=2, cluster=2),
         # 64-byte rows (the 64-byte swizzle, chunks of 32 fp16 along K), plain and in clusters
         WGTile(2, 256, 8, 1, 8, ws=2, sms=5, row_bytes=64), WGTile(1, 128, 6, 1, 0, ws=2, sms=2, row_bytes=64),
         WGTile(2, 256, 9, 1, 8, ws=2, sms=5, cluster=2, row_bytes=64)]


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("b_t", [False, True])
def test_wgmma_tiles(hopper, tmp_path, tile, b_t):
    _run(hopper, tmp_path, 333, 264, 520, "float16", b_t, tile)


def test_wgmma_half_output_and_sass(hopper, tmp_path):
    f = _run(hopper, tmp_path, 129, 200, 72, "float16", False, None, out_dtype="float16")
    ptx = f.imported_modules[0].get_source("ptx")
    assert ".target sm_90a" in ptx and "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in ptx


def test_tensorcore_gemm_on_this_gpu(hopper, tmp_path):
    """``tensorcore_gemm`` with ``target="cuda"`` resolves this GPU's sm_90 and runs wgmma."""
    from ember.strategy.tensorcore import tensorcore_gemm

    M, N, K = 250, 136, 96
    f = ember.build(tensorcore_gemm(M, N, K, "bfloat16", "float32", target="cuda"), target="cuda", cache_dir=tmp_path)
    assert "wgmma.mma_async" in f.imported_modules[0].get_source("ptx")
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    c = ember.nd.array(np.full((M, N), np.nan, "float32"), hopper)
    f(ember.nd.array(a, hopper, dtype="bfloat16"), ember.nd.array(b, hopper, dtype="bfloat16"), c)
    a64, b64 = _seen("bfloat16", a), _seen("bfloat16", b)
    assert (np.abs(c.numpy() - a64 @ b64) <= 2.0**-20 * (np.abs(a64) @ np.abs(b64))).all()


@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (17, 24, 40), (300, 520, 4104), (384, 512, 200)])
@pytest.mark.parametrize("b_t", [False, True])
@pytest.mark.parametrize("ws,cluster,rb", [(1, 1, 128), (2, 1, 128), (2, 2, 128), (2, 2, 64)])
def test_wgmma_ws_gemm(hopper, tmp_path, M, N, K, b_t, ws, cluster, rb):
    """The warp-specialised persistent kernels (cp.async or TMA producer, TMA in clusters of two,
    with 128- or 64-byte rows) at sizes no tile divides, bfloat16, float16 output; 384 x 512 has
    no edge tiles (unchecked stores) but, in clusters of two, a third tile row whose pair lies
    past M (checked stores)."""
    tile = WGTile(2, 256, 4 if rb == 128 else 8, 1, 8, ws=ws, cluster=cluster, row_bytes=rb)
    _run(hopper, tmp_path, M, N, K, "bfloat16", b_t, tile, out_dtype="float16")


@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (17, 24, 44), (300, 520, 4100)])
@pytest.mark.parametrize("cluster,rb", [(1, 128), (2, 128), (1, 64)])
def test_wgmma_tf32_tma(hopper, tmp_path, M, N, K, cluster, rb):
    """float32 inputs on TF32 tensor cores (m64nNk8; the TMA kernel with B given as N x K), sizes no
    tile divides (K a multiple of 4 only), against float64 with the TF32 bound."""
    tile = WGTile(2, 256, 4 if rb == 128 else 8, 1, 8, ws=2, sms=7, cluster=cluster, row_bytes=rb)
    _run(hopper, tmp_path, M, N, K, "float32", True, tile)


@pytest.mark.parametrize("M,N,K,b_t,parts,out_dtype", [(16, 520, 4104, False, 3, "float16"),
                                                       (16, 4096, 4096, True, 4, "float32"),
                                                       (100, 264, 1000, True, 4, "float16"),
                                                       (17, 24, 40, False, 2, "float32"),
                                                       (40, 1001, 1000, True, 3, "float16")])
@pytest.mark.parametrize("last", [False, True])
def test_wgmma_split_k(hopper, tmp_path, M, N, K, b_t, parts, out_dtype, last):
    """Split-K (the skinny default): parts of K in float32 summed by a second kernel or by the
    block that takes a tile's last ticket, at sizes no tile divides (N = 1001 with B as N x K); with
    K of one chunk the second part is all zeros past K."""
    tile = WGTile(1, 128, 8, 1, 0, ws=2, sms=132, split_k=parts, last_block_sums=last)
    _run(hopper, tmp_path, M, N, K, "bfloat16", b_t, tile, out_dtype=out_dtype)


@pytest.mark.parametrize("sms,warpgroups", [(3, 1), (5, 2), (132, 2)])
def test_last_block_sums_resets_its_tickets(hopper, tmp_path, sms, warpgroups):
    """The one-launch split-K: the tickets (a zero-initialised workspace) are back at zero after a
    call, so ten calls on fresh inputs each give their own product; with 3 or 5 persistent blocks a
    block takes several parts of one tile in turn. Checked against float64 with the float32
    accumulation bound, the output poisoned before every call."""
    M, N, K, parts = 130, 264, 1000, 3
    tile = WGTile(warpgroups, 128, 8 if warpgroups == 1 else 4, 1, 0, ws=2, sms=sms, split_k=parts,
                  last_block_sums=True)
    f = ember.build(wgmma_matmul(M, N, K, "float16", "float32", tile, bias=True, relu=True,
                                 target="cuda -arch=sm_90"), target="cuda -arch=sm_90", cache_dir=tmp_path)
    assert "device_alloc_zeroed" in f.get_source("host") and "kernel1" not in f.get_source("host")
    for _ in range(10):
        a = rng.standard_normal((M, K)).astype("float16")
        b = rng.standard_normal((K, N)).astype("float16")
        bias = rng.standard_normal(N).astype("float32")
        c = ember.nd.array(np.full((M, N), np.nan, "float32"), hopper)
        f(ember.nd.array(a, hopper), ember.nd.array(b, hopper), ember.nd.array(bias, hopper), c)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        ref = np.maximum(a64 @ b64 + bias, 0.0)
        bound = np.abs(a64) @ np.abs(b64) + np.abs(bias)
        got = c.numpy().astype(np.float64)
        assert np.isfinite(got).all() and (np.abs(got - ref) <= 2.0**-20 * bound).all()


@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
@pytest.mark.parametrize("tile", [WGTile(2, 128, 4, 1, 2), WGTile(1, 128, 8, 1, 0, ws=2, split_k=3),
                                  WGTile(1, 128, 8, 1, 0, ws=2, split_k=3, last_block_sums=True),
                                  WGTile(2, 256, 4, 1, 16, ws=2, cluster=2)])
def test_wgmma_bias_relu(hopper, tmp_path, out_dtype, tile):
    """The fused epilogue: relu(A @ B + bias) rounded once to C's type."""
    M, N, K = 301, 200, 136
    f = ember.build(wgmma_matmul(M, N, K, "float16", out_dtype, tile, bias=True, relu=True,
                                 target="cuda -arch=sm_90"), target="cuda -arch=sm_90", cache_dir=tmp_path)
    a = rng.standard_normal((M, K)).astype("float16")
    b = rng.standard_normal((K, N)).astype("float16")
    bias = (4 * rng.standard_normal(N)).astype(out_dtype)
    c = ember.nd.array(np.full((M, N), np.nan, out_dtype), hopper)
    f(ember.nd.array(a, hopper), ember.nd.array(b, hopper), ember.nd.array(bias, hopper), c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = np.maximum(a64 @ b64 + bias.astype(np.float64), 0.0)
    bound = np.abs(a64) @ np.abs(b64) + np.abs(bias.astype(np.float64))
    rel = 2.0**-20 + (2.0**-11 if out_dtype == "float16" else 0.0)
    got = c.numpy().astype(np.float64)
    assert (np.abs(got - ref) <= rel * bound).all()
    assert (got == 0).any() and (got > 0).any()  # the clamp acted, and not everywhere


def test_tma_maps_follow_the_arguments(hopper, tmp_path):
    """The TMA kernel's tensor maps are encoded from each call's addresses: new arrays (a cache
    miss), the first arrays again (a hit) and PyTorch tensors all give their own products; an input
    view that starts 2 bytes into a buffer, or an output view 4 bytes in, is refused by name."""
    M, N, K = 300, 264, 200
    f = ember.build(wgmma_matmul(M, N, K, "float16", "float32", WGTile(2, 128, 4, 1, 8, ws=2, sms=4),
                                 target="cuda -arch=sm_90"), target="cuda -arch=sm_90", cache_dir=tmp_path)

    def case():
        a = rng.standard_normal((M, K)).astype("float16")
        b = rng.standard_normal((K, N)).astype("float16")
        ref = a.astype(np.float64) @ b.astype(np.float64)
        bound = 2.0**-20 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
        return a, b, ref, bound

    first = case()
    second = case()
    arrays = []
    for a, b, ref, bound in (first, second):
        da, db = ember.nd.array(a, hopper), ember.nd.array(b, hopper)
        c = ember.nd.array(np.full((M, N), np.nan, "float32"), hopper)
        f(da, db, c)
        assert (np.abs(c.numpy() - ref) <= bound).all()
        arrays.append((da, db))
    c = ember.nd.array(np.full((M, N), np.nan, "float32"), hopper)
    f(*arrays[0], c)  # the first maps again
    assert (np.abs(c.numpy() - first[2]) <= first[3]).all()
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    a, b, ref, bound = case()
    tc = torch.full((M, N), float("nan"), device=f"cuda:{hopper.index}")
    f(torch.from_numpy(a).cuda(hopper.index), torch.from_numpy(b).cuda(hopper.index), tc)
    assert (np.abs(tc.cpu().numpy() - ref) <= bound).all()
    flat = torch.zeros(M * K + 1, dtype=torch.float16, device=f"cuda:{hopper.index}")
    with pytest.raises(ember.errors.ArgumentError, match="16-byte aligned"):
        f(flat[1:].view(M, K), torch.from_numpy(b).cuda(hopper.index), tc)
    out = torch.zeros(M * N + 1, device=f"cuda:{hopper.index}")  # C is written by TMA stores: the same rule
    with pytest.raises(ember.errors.ArgumentError, match="argument C .* written by TMA"):
        f(torch.from_numpy(a).cuda(hopper.index), torch.from_numpy(b).cuda(hopper.index), out[1:].view(M, N))
