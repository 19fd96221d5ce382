"""The Hopper wgmma GEMM without a GPU: descriptor encoding, the 128-byte swizzle, the
accumulator layout, the kernel's PTX (``.target sm_90a``, the instructions) and ptxas's
acceptance, and the errors for targets and shapes it does not support.

Sources of the expected values: PTX ISA 8.x, section "Asynchronous Warpgroup Level Matrix
Multiply-Accumulate Instructions" (the matrix-descriptor format table; "Shared Memory Matrix
Layout" with its swizzling modes; the wgmma .m64nNk16 accumulator-D fragment figure)."""

from __future__ import annotations

import itertools
import re

import pytest

import ember
from ember.backends.cuda.codegen import find_ptxas
from ember.errors import EmberError, ScheduleError
from ember.lowering.wgmma import (
    ATOM,
    SWIZZLE_128B,
    WGTile,
    a_offset,
    acc_coord,
    b_offset,
    smem_descriptor,
    swizzle128,
    xor3,
)
from ember.strategy.tensorcore import wgmma_matmul


def test_descriptor_fields():
    d = smem_descriptor(0x1F400, 16, 1024, SWIZZLE_128B)
    assert d & 0x3FFF == 0x1F400 >> 4  # bits 0-13: start address >> 4
    assert (d >> 16) & 0x3FFF == 1  # bits 16-29: leading byte offset >> 4
    assert (d >> 32) & 0x3FFF == 1024 >> 4  # bits 32-45: stride byte offset >> 4
    assert (d >> 49) & 7 == 0  # bits 49-51: base offset
    assert d >> 62 == 1  # bits 62-63: 1 = 128-byte swizzle
    assert smem_descriptor(0, 8192, 1024, 0) == (512 << 16) | (64 << 32)
    with pytest.raises(ValueError):
        smem_descriptor(8, 16, 1024)


def test_xor3_matches_xor():
    for x, y in itertools.product(range(8), range(8)):
        assert xor3(x, y) == x ^ y


def test_swizzle_is_a_permutation_of_each_atom():
    # 128-byte swizzle: 16-byte chunk c of row r goes to chunk c xor (r mod 8); every 8-row atom
    # is a permutation of its 64 chunks, so a tile stays dense and conflict-free by rows.
    for r in range(16):
        assert sorted(swizzle128(r, c) for c in range(8)) == list(range(8))
    for c in range(8):  # one chunk column of 8 rows hits 8 different 16-byte bank groups
        assert sorted(swizzle128(r, c) for r in range(8)) == list(range(8))
    offs = {a_offset(r, k) for r in range(128) for k in range(64)}
    assert len(offs) == 128 * 64 and min(offs) == 0 and max(offs) == 128 * 128 - 2
    assert a_offset(9, 8) == 9 * 128 + (1 ^ 1) * 16  # row 9 (r % 8 = 1), chunk 1
    assert a_offset(3, 17) == 3 * 128 + (2 ^ 3) * 16 + 2


def test_nmajor_layout():
    offs = {b_offset(k, n) for k in range(64) for n in range(256)}
    assert len(offs) == 64 * 256 and max(offs) == 64 * 256 * 2 - 2
    # 64-column blocks are the leading-offset apart, 8-row groups of k the stride-offset apart
    assert b_offset(0, 64) - b_offset(0, 0) == 8192
    assert b_offset(8, 0) - b_offset(0, 0) == 1024
    assert b_offset(1, 0) == 128 + 16  # row 1 swaps chunks 0 and 1


def test_accumulator_layout_is_a_bijection():
    for n in (64, 128, 256):
        seen = {acc_coord(t, r) for t in range(128) for r in range(n // 2)}
        assert seen == {(i, j) for i in range(64) for j in range(n)}
    # the PTX figure: thread 0 holds (0, 0), (0, 1), (8, 0), (8, 1), then (0, 8)...
    assert [acc_coord(0, r) for r in range(5)] == [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8)]
    assert acc_coord(37, 0) == (16 + 1, 2)  # warp 1, lane 5: row 16 + 5 // 4, column 2 * (5 % 4)


def test_tile_checks():
    assert WGTile().check(227 * 1024) is None
    assert "shared memory" in WGTile(2, 256, 6, 1).check(227 * 1024)
    assert WGTile(3).check(227 * 1024) is not None
    assert WGTile(bn=96).check(227 * 1024) is not None
    assert WGTile(stages=2, inflight=1).check(227 * 1024) is not None
    assert WGTile().smem_bytes() % ATOM == 0
    assert WGTile(group_m=-1).check(227 * 1024) is not None
    assert WGTile(ws=1).threads == 384 and WGTile(1, ws=1).threads == 256
    assert "inflight=1" in WGTile(2, 128, 4, 0, ws=1).check(227 * 1024)
    assert WGTile(ws=3).check(227 * 1024) is not None and WGTile(ws=1, sms=0).check(227 * 1024) is not None


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
def test_non_hopper_target_is_refused(arch):
    with pytest.raises(ScheduleError, match="wgmma.mma_async.*mma.sync"):
        wgmma_matmul(256, 256, 256, target=f"cuda -arch={arch}")
    with pytest.raises(ScheduleError, match="Hopper"):
        wgmma_matmul(256, 256, 256, target="rocm -mcpu=gfx942")


def test_unsupported_shapes_and_types():
    with pytest.raises(ScheduleError, match="multiples of 8"):
        wgmma_matmul(100, 100, 101)
    with pytest.raises(ScheduleError, match="multiples of 8"):
        wgmma_matmul(100, 101, 104)
    wgmma_matmul(100, 101, 104, b_transposed=True)  # N x K rows: only K must be a multiple of 8
    with pytest.raises(ScheduleError, match="TF32 only in the TMA kernel"):
        wgmma_matmul(128, 128, 128, in_dtype="float32")
    with pytest.raises(ScheduleError, match="float16, bfloat16 or float32"):
        wgmma_matmul(128, 128, 128, in_dtype="int8")
    wgmma_matmul(100, 100, 36, "float32", tile=WGTile(ws=2), b_transposed=True)  # TF32: K a multiple of 4
    with pytest.raises(ScheduleError, match="32-bit"):
        wgmma_matmul(65536, 128, 32768)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")
@pytest.mark.parametrize("tile,b_t,dt", [(WGTile(), False, "float16"), (WGTile(2, 256, 4, 1), False, "bfloat16"),
                                         (WGTile(1, 64, 3, 0), True, "float16"),
                                         (WGTile(2, 256, 4, 1, 8, ws=1), False, "float16"),
                                         (WGTile(1, 128, 3, 1, 0, ws=1, sms=7), True, "bfloat16"),
                                         (WGTile(2, 256, 4, 1, 8, ws=2), True, "float32"),
                                         (WGTile(2, 256, 4, 1, 8, ws=2, cluster=2), False, "float16"),
                                         (WGTile(1, 128, 3, 1, 0, ws=2, sms=7, cluster=2), True, "bfloat16"),
                                         (WGTile(2, 256, 9, 1, 8, ws=2, cluster=2, row_bytes=64), False, "float16"),
                                         (WGTile(2, 256, 8, 1, 8, ws=2, row_bytes=64), True, "float32")])
def test_ptx_and_ptxas(tmp_path, tile, b_t, dt):
    f = ember.build(wgmma_matmul(200, 136, 104, dt, "float32", tile, b_t), target="cuda -arch=sm_90",
                    cache_dir=tmp_path)
    dev = f.imported_modules[0]
    ptx = dev.get_source("ptx")
    ty = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}[dt]
    kstep = 8 if dt == "float32" else 16
    assert ".target sm_90a" in ptx
    issued = ptx.count(f"wgmma.mma_async.sync.aligned.m64n{tile.bn}k{kstep}.f32.{ty}.{ty}")
    steps = tile.row_bytes // 32  # one instruction per 32 bytes of K in a staged row (LLVM may peel the K loop)
    assert issued >= steps and issued % steps == 0
    loads = ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",) if tile.ws == 2 \
        else ("fence.proxy.async.shared::cta", "cp.async.cg.shared.global")
    for instr in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned",
                  *loads):
        assert instr in ptx
    log = dev.get_source("ptxas")
    assert "sm_90a" in log and "spill stores" in log and " 0 bytes spill stores" in log
    block_barriers = ptx.count("bar.sync \t0;")  # (the TMA-store epilogue's warpgroup barriers have ids 1, 2)
    if tile.cluster == 2:  # clusters of two: cluster barriers around the kernel, multicast B, remote arrivals
        assert block_barriers == 0 and ".reqnctapercluster 2, 1, 1" in ptx
        assert ptx.count("barrier.cluster.arrive.release; barrier.cluster.wait.acquire;") == 2
        for instr in ("complete_tx::bytes.multicast::cluster", "mapa.shared::cluster.u32",
                      "mbarrier.arrive.shared::cluster.b64"):
            assert instr in ptx
    elif tile.ws:  # roles synchronise through mbarriers: one block barrier (after their set-up) in all
        assert block_barriers == 1
    # the epilogue: staged sub-tiles stored by TMA; the producer gives registers to two consumers
    if tile.ws == 2 and tile.out_buffers():
        subtiles = tile.bn // 32  # float32 C: 32 columns per 128-byte sub-tile
        assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == subtiles
        assert len(re.findall(r"bar\.sync %r\d+, 128;", ptx)) == 2 * subtiles and "cp.async.bulk.wait_group 0;" in ptx
        assert ("setmaxnreg.inc.sync.aligned.u32 232;" in ptx) == (tile.warpgroups == 2)
        assert "C7508" not in log  # ptxas found the register count at entry (setmaxnreg not ignored)
    if tile.ws:
        assert f".maxntid {tile.threads}, 1, 1" in ptx
        arrive = "mbarrier.arrive.expect_tx.shared::cta.b64" if tile.ws == 2 else \
            "cp.async.mbarrier.arrive.noinc.shared::cta.b64"
        release = "mbarrier.arrive.shared::cluster.b64" if tile.cluster == 2 else \
            "mbarrier.arrive.shared::cta.b64"
        for instr in ("mbarrier.init.shared::cta.b64", "mbarrier.try_wait.parity.shared::cta.b64", arrive, release):
            assert instr in ptx


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")
@pytest.mark.parametrize("b_t", [False, True])
def test_tma_maps_are_host_steps(tmp_path, b_t):
    """The TMA kernel takes only A, B, C: its three tensor maps (A and B loaded, C stored in
    64-row sub-tiles of 128 bytes) are workspaces the host encodes from the arguments' addresses
    (``tensor_map`` in the plan, named in the host IR), and the plan survives a round trip through
    the module's parts (what the build cache stores)."""
    M, N, K = 200, 136, 104
    f = ember.build(wgmma_matmul(M, N, K, "float16", "float32", WGTile(2, 128, 4, 1, 8, ws=2), b_t),
                    target="cuda -arch=sm_90", cache_dir=tmp_path)
    assert [p["name"] for p in f["wgmma_gemm"]._params] == ["A", "B", "C"]
    ws = f["wgmma_gemm"].plan["workspaces"]
    maps = [w["tensor_map"] for w in ws]
    assert [m["arg"] for m in maps] == [0, 1, 2] and [m["dtype"] for m in maps] == ["float16"] * 2 + ["float32"]
    assert maps[0]["box"] == [64, 128]
    assert maps[1]["box"] == ([64, 128] if b_t else [64, 64])
    assert maps[2]["box"] == [32, 64]  # 32 float32 columns: one 128-byte row
    host = f.get_source("host")
    assert "tmap_A = tensor_map(A, float16, 200 x 104, pitch 208 B, box 64 x 128)" in host
    assert "tensor_map(B" in host
    from ember.backends.cuda import CUDABackend

    g = CUDABackend().load(f.parts)  # what the build cache does: check the description, then load
    assert g["wgmma_gemm"].plan["workspaces"] == ws


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")
@pytest.mark.parametrize("b_t", [False, True])
def test_cluster_kernel_plan(tmp_path, b_t):
    """With ``cluster=2`` the grid is whole pairs of blocks (at most the multiprocessors, rounded
    down to even), the plan and the host IR name the cluster, and B's TMA box is half the tile's
    rows when B is N x K (each block of the pair loads one half and multicasts it)."""
    M, N, K = 1000, 776, 200  # 8 tile rows (4 pairs) x 4 tile columns of 128 x 256
    f = ember.build(wgmma_matmul(M, N, K, "float16", "float32", WGTile(2, 256, 4, 1, 8, ws=2, sms=9, cluster=2), b_t),
                    target="cuda -arch=sm_90", cache_dir=tmp_path)
    (k,) = f["wgmma_gemm"].plan["kernels"]
    assert k["cluster"] == [2, 1, 1] and k["grid"] == [["const", 8], ["const", 1], ["const", 1]]
    assert "cluster=(2, 1, 1)" in f.get_source("host")
    maps = [w["tensor_map"] for w in f["wgmma_gemm"].plan["workspaces"]]
    assert maps[1]["box"] == ([64, 128] if b_t else [64, 64])
    from ember.backends.cuda import CUDABackend

    assert CUDABackend().load(f.parts)["wgmma_gemm"].plan["kernels"][0]["cluster"] == [2, 1, 1]
    # 64-byte rows: boxes 32 fp16 wide, the maps' swizzle in the plan and the host IR
    g = ember.build(wgmma_matmul(M, N, K, "float16", "float32", WGTile(2, 256, 9, 1, 8, ws=2, cluster=2,
                                                                      row_bytes=64), b_t),
                    target="cuda -arch=sm_90", cache_dir=tmp_path)
    maps = [w["tensor_map"] for w in g["wgmma_gemm"].plan["workspaces"]]
    assert [m["swizzle"] for m in maps] == [64, 64] and maps[0]["box"] == [32, 128]
    assert maps[1]["box"] == ([32, 128] if b_t else [32, 32])
    assert "box 32 x 128, 64 B swizzle)" in g.get_source("host")


def test_cluster_tiles_and_grids_are_checked():
    """Clusters need the TMA kernel and a B tile to halve; a kernel whose grid is not whole
    clusters, and a plan with a bad cluster, are refused by name."""
    from ember.backends.gpu.plan_check import check_plan
    from ember.errors import LoweringError, ModelFormatError
    from ember.ir import expr as E
    from ember.ir import stmt as S
    from ember.ir.buffer import Buffer
    from ember.ir.dtypes import INT32
    from ember.lowering.gpu import split_host_device
    from ember.target import Target

    assert "cluster=2" in WGTile(ws=1, cluster=2).check(227 * 1024)
    assert "cluster=2" in WGTile(bn=64, ws=2, cluster=2).check(227 * 1024)
    assert WGTile(ws=2, cluster=3).check(227 * 1024) is not None
    assert WGTile(ws=2, cluster=2).check(227 * 1024) is None
    assert "row_bytes" in WGTile(ws=1, row_bytes=64).check(227 * 1024)
    assert WGTile(ws=2, row_bytes=32).check(227 * 1024) is not None
    assert WGTile(2, 256, 9, ws=2, row_bytes=64).check(227 * 1024) is None  # 9 slots of 24 KiB

    def func(grid: int, dims: object) -> S.PrimFunc:
        c = Buffer("C", ember.ir.dtypes.dtype("float32"), (E.const(32 * grid),))
        blk, tx = E.Var("b", INT32), E.Var("t", INT32)
        body = S.For(tx, E.const(0), E.const(32), S.ForKind.THREAD_BINDING,
                     S.BufferStore(c, E.const(1.0, "float32"), (blk * 32 + tx,)), "threadIdx.x")
        body = S.For(blk, E.const(0), E.const(grid), S.ForKind.THREAD_BINDING,
                     S.AttrStmt(None, "cluster_dims", dims, body), "blockIdx.x")
        return S.PrimFunc("f", [c], body, {})

    tgt = Target("cuda -arch=sm_90")
    assert split_host_device(func(4, (2, 1, 1)), tgt).kernels[0].cluster == (2, 1, 1)
    with pytest.raises(LoweringError, match="not a constant multiple of the cluster's 2"):
        split_host_device(func(3, (2, 1, 1)), tgt)
    with pytest.raises(LoweringError, match="cluster_dims"):
        split_host_device(func(4, (16, 1, 1)), tgt)
    sig = {"name": "f", "params": [{"kind": "buffer"}], "scalars": []}
    kernel = {"name": "k", "grid": [["const", 2], ["const", 1], ["const", 1]], "block": [32, 1, 1],
              "shared_bytes": 0, "dynamic_shared": 0, "param_types": ["ptr"], "args": [["arg", 0]],
              "aligned_args": []}
    check_plan({"kernels": [{**kernel, "cluster": [2, 1, 1]}], "steps": [["launch", 0]], "workspaces": []}, sig)
    for bad in ([2, 1], [0, 1, 1], [4, 4, 1], "2"):
        with pytest.raises(ModelFormatError, match="cluster"):
            check_plan({"kernels": [{**kernel, "cluster": bad}], "steps": [["launch", 0]], "workspaces": []}, sig)


def test_corrupt_tensor_map_plans_are_refused():
    """A module description whose tensor map names no buffer argument, an unknown type or an
    oversize box is refused before anything is encoded."""
    from ember.backends.gpu.plan_check import check_plan
    from ember.errors import ModelFormatError

    sig = {"name": "f", "params": [{"kind": "buffer"}, {"kind": "buffer"}], "scalars": []}
    good = {"arg": 0, "dtype": "float16", "rows": ["const", 8], "cols": ["const", 64], "row_bytes": ["const", 128],
            "box": [64, 8]}
    for bad, match in (({"arg": 2}, "not a buffer argument"), ({"dtype": "float128"}, "not a TMA data type"),
                       ({"box": [64, 512]}, "box"), ({"rows": "8"}, "rows"), ({"swizzle": 32}, "swizzle")):
        plan = {"kernels": [], "steps": [["alloc", 0]],
                "workspaces": [{"name": "m", "nbytes": ["const", 128], "tensor_map": {**good, **bad}}]}
        with pytest.raises(ModelFormatError, match=match):
            check_plan(plan, sig)


def test_codegen_refuses_wgmma_below_sm90():
    func = wgmma_matmul(128, 128, 128)
    with pytest.raises(EmberError, match="sm_90"):
        ember.build(func, target="cuda -arch=sm_80", use_cache=False)


def _ops(func) -> set[str]:
    from ember.ir import expr as E
    from ember.ir.visitor import post_order_visit

    found: set[str] = set()
    post_order_visit(func.body, lambda n: found.add(n.op) if isinstance(n, E.Call) else None)
    return found


def test_tensorcore_gemm_picks_the_path_by_target():
    from ember.strategy.tensorcore import tensorcore_gemm

    on90 = _ops(tensorcore_gemm(300, 264, 520, "bfloat16", target="cuda -arch=sm_90"))
    assert "tc.wgmma:m64n128k16.bf16.t1" in on90
    on80 = _ops(tensorcore_gemm(300, 264, 520, "bfloat16", target="cuda -arch=sm_80"))
    assert "tc.mma:mma.m16n8k16.bf16" in on80 and not any(o.startswith("tc.wgmma") for o in on80)
    odd_k = _ops(tensorcore_gemm(300, 264, 517, "float16", target="cuda -arch=sm_90"))  # rows not 16-byte multiples
    assert "tc.mma:mma.m16n8k16.f16" in odd_k and not any(o.startswith("tc.wgmma") for o in odd_k)
    big = _ops(tensorcore_gemm(4096, 4096, 4096, target="cuda -arch=sm_90a", b_transposed=True))
    assert "tc.wgmma:m64n256k16.f16.t0" in big
    assert any(o.startswith("tc.tma_load_2d") for o in on90 | big)  # the default is the TMA kernel
    tf32 = _ops(tensorcore_gemm(300, 264, 100, "float32", b_transposed=True, target="cuda -arch=sm_90"))
    assert "tc.wgmma:m64n128k8.tf32.t0" in tf32
    tf32_nn = _ops(tensorcore_gemm(300, 264, 100, "float32", target="cuda -arch=sm_90"))
    assert "tc.mma:mma.m16n8k8.tf32" in tf32_nn  # wgmma reads TF32 B only as N x K
    with pytest.raises(ScheduleError, match="float16, bfloat16 or float32"):
        tensorcore_gemm(64, 64, 64, "int8", target="cuda -arch=sm_90")


def test_grouped_grid_and_bias_params():
    f = wgmma_matmul(1000, 520, 64, "float16", "float16", WGTile(2, 128, 4, 1, 3), bias=True, relu=True)
    assert [p.name for p in f.params] == ["A", "B", "bias", "C"]
    if find_ptxas() is None:
        pytest.skip("ptxas (CUDA toolkit) not found")
    m = ember.build(f, target="cuda -arch=sm_90", use_cache=False)
    assert "<<<(40, 1, 1), (256, 1, 1)" in m.get_source("host")  # 8 block rows x 5 block columns, one axis


def test_grouped_order_covers_every_block_once():
    """The kernels' tile order (the functions that build their index expressions, evaluated on
    ints): the plain grouped grid names every (row, column) tile once; the persistent kernel's
    clusters of two cover every tile once, each pair on one column and two adjacent rows, with an
    odd last row giving the second block a row past the matrix (loaded as zeros, not stored)."""
    from ember.lowering.wgmma import grouped_tile
    from ember.lowering.wgmma_ws import tile_of_block

    for mt, nt, g in ((8, 5, 3), (32, 16, 8), (7, 1, 4), (1, 9, 8), (5, 4, 0)):
        seen = [grouped_tile(lin, mt, nt, g) for lin in range(mt * nt)]
        assert sorted(seen) == [(i, j) for i in range(mt) for j in range(nt)]
    for mt, nt, g, cl, sms in ((8, 5, 16, 2, 6), (7, 3, 16, 2, 4), (3, 2, 8, 2, 132), (32, 16, 16, 2, 132),
                               (9, 4, 0, 2, 5), (6, 5, 16, 1, 7)):
        rows = -(-mt // cl)
        groups = max(1, min(rows * nt, sms // cl))
        gm = max(1, g // cl) if g else 0
        seen = []
        for cid in range(groups):
            for i in range((rows * nt - cid + groups - 1) // groups):  # the kernel's rounds of this cluster
                pair = [tile_of_block(cid, r, i, groups, rows, nt, gm, cl)[:2] for r in range(cl)]
                first = pair[0][0]
                assert len({c for _, c in pair}) == 1 and [r for r, _ in pair] == list(range(first, first + cl))
                seen += [t for t in pair if t[0] < mt]
        assert sorted(seen) == [(i, j) for i in range(mt) for j in range(nt)], (mt, nt, g, cl, sms)
    for mt, nt, parts, sms in ((1, 32, 4, 132), (3, 5, 3, 7), (2, 2, 8, 5)):  # split-K: every (tile, part) once
        groups = min(mt * nt * parts, sms)
        seen = [tile_of_block(b, 0, i, groups, mt, nt, 0, 1, parts=parts)
                for b in range(groups) for i in range((mt * nt * parts - b + groups - 1) // groups)]
        assert sorted(seen) == [(i, j, p) for i in range(mt) for j in range(nt) for p in range(parts)]


def test_default_tile_uses_clusters_only_for_large_products():
    """``tensorcore_gemm``'s wgmma tiling: clusters of two 128 x 256 blocks when those tiles fill
    the GPU, plain 128 x 128 blocks below that; both legal in the H100's shared memory."""
    from ember.strategy.tensorcore import default_wgmma_tile

    big, small = default_wgmma_tile(4096, 4096), default_wgmma_tile(1000, 1000)
    assert (big.bn, big.cluster, big.ws) == (256, 2, 2) and (small.bn, small.cluster) == (128, 1)
    assert big.check(227 * 1024) is None and small.check(227 * 1024) is None
    assert default_wgmma_tile(4096, 4096, sms=1).cluster == 1
    skinny = default_wgmma_tile(16, 4096, 132, 4096)  # 32 tiles of 64 x 128, K in 4 parts: 128 blocks
    assert (skinny.bm, skinny.bn, skinny.split_k, skinny.stages) == (64, 128, 4, 8) and skinny.check(227 * 1024) is None
    assert default_wgmma_tile(16, 4096, 132, 256).split_k == 1  # 4 chunks of K: not split


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")
def test_split_k_plan():
    """Split-K: the product kernel writes float32 parts to a workspace, a second kernel sums them
    with the bias and ReLU; an illegal split (with clusters, or without TMA) is refused."""
    f = ember.build(wgmma_matmul(16, 520, 4104, "bfloat16", "bfloat16", WGTile(1, 128, 8, 1, 0, ws=2, split_k=3),
                                 bias=True, relu=True), target="cuda -arch=sm_90", use_cache=False)
    host = f.get_source("host")
    assert "wg_parts = device_alloc(float32, 24960)" in host  # 3 x 16 x 520
    assert "launch wgmma_gemm_kernel0<<<(15, 1, 1)" in host and "launch wgmma_gemm_kernel1" in host
    assert "split_k=2" in WGTile(ws=2, cluster=2, split_k=2).check(227 * 1024)
    assert "split_k=2" in WGTile(ws=1, split_k=2).check(227 * 1024)
    assert "last_block_sums needs split_k" in WGTile(ws=2, last_block_sums=True).check(227 * 1024)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")
def test_last_block_sums_plan():
    """The one-launch split-K: one kernel, the parts workspace and a zero-initialised ticket per
    (tile, consumer warpgroup) in the plan (``zeroed`` in its JSON), and in the PTX the fence, the
    ticket's atomic add and reset, and the barrier that tells the warpgroup who sums."""
    tile = WGTile(2, 128, 4, 1, 0, ws=2, split_k=3, last_block_sums=True)
    f = ember.build(wgmma_matmul(200, 1032, 520, "float16", "float16", tile, bias=True, relu=True),
                    target="cuda -arch=sm_90", use_cache=False)
    host = f.get_source("host")
    assert "wg_tickets = device_alloc_zeroed(int32, 36)" in host  # 2 x 9 tiles of 128 x 128, 2 warpgroups each
    assert "wgmma_gemm_kernel1" not in host
    ptx = f.imported_modules[0].get_source("asm")
    for piece in ("fence.acq_rel.gpu", "atom.global.add.u32", "bar.red.or.pred", "st.global.u32"):
        assert piece in ptx, piece
    ws = f["wgmma_gemm"].plan["workspaces"]
    assert [w.get("zeroed", False) for w in ws].count(True) == 1 and ws[-1]["name"] == "wg_tickets"
    from ember.backends.cuda import CUDABackend

    assert CUDABackend().load(f.parts)["wgmma_gemm"].plan["workspaces"] == ws  # survives the build cache


def test_corrupt_zeroed_workspaces_are_refused():
    """``zeroed`` in a plan is ``true`` on a plain workspace or absent: anything else is refused."""
    from ember.backends.gpu.plan_check import check_plan
    from ember.errors import ModelFormatError

    sig = {"name": "f", "params": [{"kind": "buffer"}], "scalars": []}
    check_plan({"kernels": [], "steps": [["alloc", 0]],
                "workspaces": [{"name": "t", "nbytes": ["const", 16], "zeroed": True}]}, sig)
    for bad in (1, "yes", False, None):
        plan = {"kernels": [], "steps": [["alloc", 0]], "workspaces": [{"name": "t", "nbytes": ["const", 16],
                                                                        "zeroed": bad}]}
        with pytest.raises(ModelFormatError, match="zeroed"):
            check_plan(plan, sig)


@pytest.mark.parametrize("elem_bytes", [2, 4])
def test_epilogue_staging_layout(elem_bytes):
    """The TMA-store epilogue's staging layout, evaluated for every thread and register of a
    warpgroup: each sub-tile element has one byte offset (a bijection onto the 8 KiB buffer), it is
    the 128-byte swizzle the TMA loads use (``a_offset``), and one store instruction of a warp (32
    lanes, one register pair each) touches each 4-byte bank at most ``2 * elem_bytes / 4`` times:
    no bank conflicts beyond the wavefronts its width needs."""
    from ember.lowering.wgmma_ws import staged_offset

    ocols = 128 // elem_bytes
    for j in range(256 // ocols):  # the sub-tiles of a 256-wide tile
        seen = {}
        for r in range(j * ocols // 2, (j + 1) * ocols // 2, 2):
            banks: dict[int, int] = {}
            for lane_t in range(128):
                row = (lane_t // 32) * 16 + (lane_t % 32) // 4 + 8 * ((r // 2) % 2)
                col = 8 * (r // 4) - j * ocols + 2 * (lane_t % 4)
                for h in range(2):
                    at = staged_offset(row, col + h, elem_bytes)
                    assert at == a_offset(row, col + h, elem_bytes)
                    assert (row, col + h) not in seen and at not in seen.values()
                    seen[(row, col + h)] = at
                    if lane_t < 32:  # warp 0's instruction
                        bank = (at // 4) % 32
                        banks[bank] = banks.get(bank, 0) + (1 if elem_bytes == 4 or h == 0 else 0)
            assert max(banks.values()) <= max(1, 2 * elem_bytes // 4)
        assert sorted(seen.values()) == list(range(0, 64 * 128, elem_bytes))
