"""Tensor-core GEMMs built with ember (``ember.strategy.tensorcore``) side by side with cuBLAS
(``torch.matmul``) in one run on an NVIDIA GPU.

Cases: 4096^3 in fp16, bf16 (fp32 accumulation, fp16/bf16 output like cuBLAS) and TF32
(fp32 in and out; ``torch.backends.cuda.matmul.allow_tf32 = True`` for the cuBLAS side only),
and the skinny 16 x 4096 x 4096 in bf16. Each ember case tries the tilings of :data:`TILES` and
keeps the fastest (every variant is checked against float64 first). On sm_90 the fp16/bf16 cases
also time the Hopper ``wgmma`` kernels (``ember.strategy.tensorcore.wgmma_matmul``, tilings
:data:`WG_TILES`), reported as their own column. Kernel times are medians of
``triton.testing.do_bench``. The variant ``default`` is :func:`ember.strategy.tensorcore.tensorcore_gemm`,
what a user gets without choosing a tiling. The skinny case is also run as a one-node ONNX model
(``MatMul`` of a bf16 input and a bf16 weight, compiled by ``ember.compile``: the model compiler splits the long
reduction over more blocks, which the standalone schedules do not), compared with cuBLAS by
kernel time per call as CUPTI records it (``gpu_kernel_profile.kernel_table``: the product and the
sum of its parts, launch gaps excluded), with the weight in L2 (repeated calls) and with the L2
overwritten before each call (the weight read from HBM). Writes ``tensorcore_bench.json`` and ``.md`` to ``--out``.

    python benchmarks/tensorcore_bench.py --out benchmarks/results [--quick] [--paths mma,wgmma] [--cases fp16,bf16]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

from common import machine, write_outputs

import ember
from ember.lowering.wgmma import WGTile
from ember.strategy.tensorcore import TCTile, tensorcore_gemm, tensorcore_matmul, wgmma_matmul

TILES = (TCTile(128, 128, 32, 64, 64), TCTile(128, 256, 32, 64, 128), TCTile(256, 128, 32, 128, 64),
         TCTile(128, 128, 64, 64, 64), TCTile(64, 128, 32, 32, 64), TCTile(64, 64, 64, 32, 32),
         TCTile(32, 128, 64, 32, 32), TCTile(16, 128, 64, 16, 32), TCTile(32, 64, 128, 32, 16),
         TCTile(16, 64, 128, 16, 16))

WG_TILES = (WGTile(2, 128, 4, 1), WGTile(2, 256, 3, 1), WGTile(2, 256, 4, 1), WGTile(2, 256, 4, 0),
            WGTile(2, 128, 6, 1), WGTile(1, 256, 4, 1), WGTile(2, 256, 4, 1, 8), WGTile(2, 256, 4, 1, 16),
            WGTile(2, 128, 6, 1, 8), WGTile(2, 256, 4, 1, 8, ws=1), WGTile(2, 256, 3, 1, 8, ws=1),
            WGTile(2, 256, 4, 1, 0, ws=1), WGTile(2, 256, 4, 1, 8, ws=2), WGTile(2, 256, 3, 1, 8, ws=2),
            WGTile(2, 256, 4, 1, 0, ws=2), WGTile(2, 128, 6, 1, 8, ws=2), WGTile(2, 256, 4, 1, 16, ws=2),
            # clusters of two blocks sharing B by TMA multicast (half the L2 -> SM traffic for B)
            WGTile(2, 256, 4, 1, 16, ws=2, cluster=2), WGTile(2, 256, 4, 1, 8, ws=2, cluster=2),
            WGTile(2, 256, 4, 1, 32, ws=2, cluster=2), WGTile(2, 256, 3, 1, 16, ws=2, cluster=2),
            WGTile(2, 256, 4, 1, 0, ws=2, cluster=2), WGTile(2, 128, 6, 1, 16, ws=2, cluster=2),
            WGTile(2, 256, 4, 1, 16, ws=2, sms=128, cluster=2),
            # 64-byte staged rows: half-K chunks, twice the slots (slower on the H200: docs/gpu.md)
            WGTile(2, 256, 8, 1, 16, ws=2, cluster=2, row_bytes=64))
# the skinny product on the TMA kernel: one consumer warpgroup, K split into parts summed by a second kernel
SKINNY_WG = (WGTile(1, 128, 8, 1, 0, ws=2, split_k=2), WGTile(1, 128, 8, 1, 0, ws=2, split_k=4),
             WGTile(1, 128, 8, 1, 0, ws=2, split_k=8), WGTile(1, 64, 12, 1, 0, ws=2, split_k=2),
             WGTile(1, 256, 5, 1, 0, ws=2, split_k=8))


def _model_matmul(A, B, ref, bound, Ct, parts_tried: tuple[int, ...] = ()) -> dict:
    """The product ``A @ B`` (bf16 torch tensors) as a one-node ONNX model compiled by ember, ``B``
    a constant weight as in inference, checked against float64, then timed against
    ``torch.matmul`` on the same tensors by CUPTI kernel time per call. ``parts_tried``: split-K
    part counts forced on the model compiler too (``explore``, to choose its heuristic)."""
    import torch
    from gpu_kernel_profile import kernel_table
    from onnx import TensorProto
    from onnx import helper as h

    import ember.strategy.gpu as gpu_strategy

    M, K = A.shape
    N = B.shape[1]
    weight = h.make_tensor("b", TensorProto.BFLOAT16, [K, N], B.contiguous().view(torch.int16).cpu().numpy().tobytes(),
                           raw=True)
    g = h.make_graph([h.make_node("MatMul", ["a", "b"], ["y"])], "skinny",
                     [h.make_tensor_value_info("a", TensorProto.BFLOAT16, [M, K])],
                     [h.make_tensor_value_info("y", TensorProto.BFLOAT16, [M, N])], [weight])
    onnx_bytes = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    ea = ember.nd.from_dlpack(A)

    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")  # over the L2 (50 MB on the H200)

    def kernels_only(t):
        rows = [r for r in t["by_name"] if "memcpy" not in r[0].lower() and "memset" not in r[0].lower()
                and "FillFunctor" not in r[0]]  # the flush's own kernel
        return sum(r[1] for r in rows), rows

    def cold(fn):
        """``fn`` after overwriting the L2, so that the weight comes from HBM."""
        return lambda: (flush.zero_(), fn())

    def run() -> dict:
        try:
            model = ember.compile(onnx_bytes, target="cuda", use_cache=False, tuning_db=False)
        except ember.EmberError as err:
            return {"error": str(err)[:300]}
        (y,) = model.run_on_device(a=ea)
        got = torch.from_dlpack(y).double()
        excess = float(((got - ref).abs() - 2.0**-8 * bound).max())
        if not excess <= 0:
            return {"error": f"wrong result (excess {excess})"}
        ms, rows = kernels_only(kernel_table(lambda: model.run_on_device(a=ea), torch.cuda.synchronize, 50))
        cold_ms, _ = kernels_only(kernel_table(cold(lambda: model.run_on_device(a=ea)), torch.cuda.synchronize, 50))
        return {"ember_kernel_ms": ms, "ember_kernels": rows, "kernels": len(rows), "ember_cold_kernel_ms": cold_ms}

    theirs, theirs_rows = kernels_only(kernel_table(lambda: torch.matmul(A, B, out=Ct), torch.cuda.synchronize, 50))
    theirs_cold, _ = kernels_only(kernel_table(cold(lambda: torch.matmul(A, B, out=Ct)), torch.cuda.synchronize, 50))
    out = run()
    if "ember_kernel_ms" in out:
        out.update(cublas_kernel_ms=theirs, cublas_kernels=theirs_rows, ratio=theirs / out["ember_kernel_ms"],
                   cublas_cold_kernel_ms=theirs_cold, cold_ratio=theirs_cold / out["ember_cold_kernel_ms"])
    heuristic = gpu_strategy.GPUStrategy.tc_split_k
    explore = {}
    try:
        for parts in parts_tried:
            gpu_strategy.GPUStrategy.tc_split_k = lambda self, *a, parts=parts: parts  # type: ignore[method-assign]
            r = run()
            explore[parts] = {k: r[k] for k in ("ember_kernel_ms", "ember_cold_kernel_ms", "error") if k in r}
    finally:
        gpu_strategy.GPUStrategy.tc_split_k = heuristic  # type: ignore[method-assign]
    out["explore"] = explore
    # warp tiles and stages of the heuristic's split (more warps per block: more loads and MMAs in flight)
    from dataclasses import replace

    choose = gpu_strategy.tile_for_domain
    tiles = {}
    try:
        for wn in (16, 32, 64):
            for stages in (3, 4, 6):
                def pick(acc, intrin, *a, wn=wn, stages=stages):
                    t = choose(acc, intrin, *a)
                    return replace(t, wn=min(wn, t.bn), stages=stages)

                gpu_strategy.tile_for_domain = pick
                r = run()
                tiles[f"wn{wn}_s{stages}"] = {k: r[k] for k in ("ember_kernel_ms", "ember_cold_kernel_ms", "error")
                                              if k in r}
    finally:
        gpu_strategy.tile_for_domain = choose
    out["explore_warp_tiles"] = tiles
    return out


def bench(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=200, return_mode="median") / 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--quick", action="store_true", help="1024^3 and fewer tilings (a smoke run)")
    ap.add_argument("--paths", default="mma,wgmma", help="which kernels to time: mma (mma.sync), wgmma (sm_90)")
    ap.add_argument("--cases", default="fp16,bf16,tf32,bf16_skinny,tf32_tn")
    ap.add_argument("--wg-ws", default="0,1,2",
                    help="which wgmma kernels to time by WGTile.ws: 0 plain, 1 warp-specialised, 2 TMA")
    ap.add_argument("--skinny-parts", default="1,2,4,8,16",
                    help="split-K parts also forced on the skinny ONNX MatMul, to choose the heuristic")
    args = ap.parse_args()
    import torch

    dev = ember.cuda(0)
    attrs = dev.attributes
    n = 1024 if args.quick else 4096
    cases = [("fp16", "mma.m16n8k16.f16", torch.float16, n, n, n),
             ("bf16", "mma.m16n8k16.bf16", torch.bfloat16, n, n, n),
             ("tf32", "mma.m16n8k8.tf32", torch.float32, n, n, n),
             ("bf16_skinny", "mma.m16n8k16.bf16", torch.bfloat16, 16, n, n),
             # B given as N x K (nn.Linear's weight layout, cuBLAS "TN"): the layout wgmma reads TF32 in
             ("tf32_tn", "mma.m16n8k8.tf32", torch.float32, n, n, n)]
    cases = [c for c in cases if c[0] in args.cases.split(",")]
    paths = args.paths.split(",")
    results: dict = {"device": attrs["device_name"], "arch": attrs["arch"], "torch": torch.__version__,
                     "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                     "timing": "median of triton.testing.do_bench (CUDA events)", "host": machine(), "results": {}}
    lines = [f"# Tensor-core GEMM on {results['device']} ({results['arch']}), torch {results['torch']}", "",
             "| case | ember | cuBLAS | ember / cuBLAS | best tiling |", "| --- | --- | --- | --- | --- |"]
    wg_lines = ["", "Hopper wgmma path (`wgmma_matmul`; the table above is the best of the paths timed):", "",
                "| case | ember wgmma | cuBLAS | wgmma / cuBLAS | best tiling |", "| --- | --- | --- | --- | --- |"]
    for name, intrin, tdt, M, N, K in cases:
        bt = name.endswith("_tn")
        A = torch.randn(M, K, device="cuda").to(tdt)
        B = torch.randn(N, K, device="cuda").to(tdt) if bt else torch.randn(K, N, device="cuda").to(tdt)
        Bm = B.t() if bt else B  # the K x N operand, a view
        ref = A.double() @ Bm.double()
        bound = A.double().abs() @ Bm.double().abs()
        out_t = tdt
        torch.backends.cuda.matmul.allow_tf32 = name.startswith("tf32")
        Ct = torch.empty(M, N, device="cuda", dtype=out_t)
        t_cublas = bench(lambda A=A, B=Bm, Ct=Ct: torch.matmul(A, B, out=Ct))
        torch.backends.cuda.matmul.allow_tf32 = False
        variants = {}
        best = None
        tiles = (TILES[:3] if args.quick else TILES) if "mma" in paths and not bt else ()
        hopper = "wgmma" in paths and attrs["arch"] == "sm_90"
        wg_ws = {int(x) for x in args.wg_ws.split(",") if x}
        wg_tiles = tuple(t for t in WG_TILES if t.ws in wg_ws) if hopper and name in ("fp16", "bf16") else ()
        if hopper and name == "bf16_skinny":
            wg_tiles = SKINNY_WG
        if hopper and name == "tf32_tn":  # TF32 wgmma: the TMA kernel only
            wg_tiles = tuple(t for t in WG_TILES if t.ws == 2)
        wg_best = None
        for tile in ("default", *tiles, *wg_tiles):
            if isinstance(tile, TCTile) and M < tile.bm // 2:
                continue
            odt = str(tdt).split(".")[-1]
            try:
                if tile == "default":
                    key = "default"
                    f = built = ember.build(tensorcore_gemm(M, N, K, odt, odt, bt, name=f"def_{name}"), target="cuda")
                elif isinstance(tile, WGTile):
                    key = (f"wgmma_{tile.bm}x{tile.bn}_s{tile.stages}_i{tile.inflight}_g{tile.group_m}"
                           + ("", "_ws", "_tma")[tile.ws] + (f"_c{tile.cluster}" if tile.cluster > 1 else "")
                           + (f"_sm{tile.sms}" if tile.sms != 132 else "")
                           + (f"_rb{tile.row_bytes}" if tile.row_bytes != 128 else "")
                           + (f"_k{tile.split_k}" if tile.split_k > 1 else ""))
                    func = wgmma_matmul(M, N, K, odt, odt, tile, bt, target=f"cuda -arch={attrs['arch']}",
                                        name=f"wg_{name}")
                    f = built = ember.build(func, target="cuda")
                else:
                    key = f"{tile.bm}x{tile.bn}x{tile.bk}_w{tile.wm}x{tile.wn}"
                    s, a = tensorcore_matmul(M, N, K, intrin=intrin, out_dtype=odt, tile=tile)
                    f = built = ember.build(s, a, target="cuda", name=f"tc_{name}")
            except ember.EmberError as err:
                variants[key] = {"error": str(err)[:200]}
                continue
            C = torch.full((M, N), float("nan"), device="cuda", dtype=out_t)
            # ember arrays wrapping the torch tensors once: passing torch tensors costs a DLPack
            # import per call, which makes a 30 us kernel host-bound.
            eA, eB, eC = (ember.nd.from_dlpack(x) for x in (A, B, C))
            f(eA, eB, eC)
            torch.cuda.synchronize()
            excess = float(((C.double() - ref).abs() - (2.0**-9 if name.startswith("tf32") else 2.0**-8) * bound).max())
            if not excess <= 0:
                variants[key] = {"error": f"wrong result (excess {excess})"}
                continue
            t = bench(lambda f=f, a=eA, b=eB, c=eC: f(a, b, c))
            regs = built.imported_modules[0].get_source("ptxas").strip().splitlines()[-2:]
            variants[key] = {"ms": t * 1e3, "TFLOPs": 2 * M * N * K / t / 1e12, "ptxas": regs}
            if best is None or t < best[0]:
                best = (t, key)
            if isinstance(tile, WGTile) and (wg_best is None or t < wg_best[0]):
                wg_best = (t, key)
        r = {"M": M, "N": N, "K": K, "cublas_ms": t_cublas * 1e3, "cublas_TFLOPs": 2 * M * N * K / t_cublas / 1e12,
             "variants": variants}
        if name == "bf16_skinny":
            r["model_path"] = _model_matmul(A, Bm, ref, bound, Ct, tuple(int(x) for x in args.skinny_parts.split(",")
                                                                        if x))
            mp = r["model_path"]
            if "ratio" in mp:
                lines.append(f"| {name} as an ONNX MatMul (kernel time, L2 warm) | "
                             f"{mp['ember_kernel_ms'] * 1e3:.1f} us | {mp['cublas_kernel_ms'] * 1e3:.1f} us | "
                             f"{mp['ratio']:.3f} | {mp['kernels']} kernels |")
                lines.append(f"| {name} as an ONNX MatMul (kernel time, L2 flushed) | "
                             f"{mp['ember_cold_kernel_ms'] * 1e3:.1f} us | {mp['cublas_cold_kernel_ms'] * 1e3:.1f} us "
                             f"| {mp['cold_ratio']:.3f} | {mp['kernels']} kernels |")
        if best is not None:
            r.update(ember_ms=best[0] * 1e3, ember_TFLOPs=2 * M * N * K / best[0] / 1e12, ratio=t_cublas / best[0],
                     best=best[1])
            lines.append(f"| {name} {M}x{N}x{K} | {r['ember_TFLOPs']:.1f} TFLOP/s | {r['cublas_TFLOPs']:.1f} TFLOP/s "
                         f"| {r['ratio']:.3f} | {best[1]} |")
        if wg_best is not None:
            r.update(wgmma_ms=wg_best[0] * 1e3, wgmma_TFLOPs=2 * M * N * K / wg_best[0] / 1e12,
                     wgmma_ratio=t_cublas / wg_best[0], wgmma_best=wg_best[1])
            wg_lines.append(f"| {name} {M}x{N}x{K} | {r['wgmma_TFLOPs']:.1f} TFLOP/s | "
                            f"{r['cublas_TFLOPs']:.1f} TFLOP/s | {r['wgmma_ratio']:.3f} | {wg_best[1]} |")
        results["results"][name] = r
        print(name, json.dumps(r, indent=1), flush=True)
    if len(wg_lines) > 5:
        lines += wg_lines
    print(write_outputs(args.out, "tensorcore_bench", results, lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
