"""GPU benchmarks on an NVIDIA GPU, each side by side with PyTorch in one run.

* copy and element-wise add of 256 MiB fp32 arrays (bandwidth: bytes read + written / time);
* row reduction: the sum of each row of a 16384 x 16384 fp32 matrix, against ``torch.sum``;
* SGEMM fp32 4096^3 written with ember (shared-memory and register tiling, 128-bit loads), against
  cuBLAS through ``torch.matmul`` with TF32 off;
* launch overhead: Python time per call of a tiny kernel, next to ``torch.add`` on tiny tensors.

Kernel times are medians of ``triton.testing.do_bench`` (CUDA events, L2 flushed between runs)
when Triton is there, else of CUDA-event timings. Every ember output is checked against PyTorch
first (float64 for the reduction and GEMM). Writes ``gpu_bench.json`` and ``gpu_bench.md`` to
``--out``.

    python benchmarks/gpu_bench.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "gpu"))

import kernels as K  # noqa: E402
from common import machine, torch_without_tf32  # noqa: E402

import ember  # noqa: E402


def bench(fn, torch):
    try:
        from triton.testing import do_bench

        return do_bench(fn, warmup=50, rep=300, return_mode="median") / 1e3
    except ImportError:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(30):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        return float(np.median(times))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    args = ap.parse_args()
    import torch

    torch_without_tf32()
    dev = ember.cuda(0)
    attrs = dev.attributes
    results: dict = {"device": attrs["device_name"], "arch": attrs["arch"], "torch": torch.__version__,
                     "python": platform.python_version(), "timing": "median of triton.testing.do_bench (CUDA events)",
                     "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": machine(), "results": {}}
    R = results["results"]
    nbytes = (16 if args.quick else 256) << 20
    n = nbytes // 4

    # -- copy -----------------------------------------------------------------------------------------
    s, a, _ = K.copy_vec4(block=256)
    fcopy = ember.build(s, a, target="cuda", name="copy")
    x = torch.randn(n, device="cuda")
    y = torch.full((n,), float("nan"), device="cuda")
    ex, ey = ember.nd.from_dlpack(x), ember.nd.from_dlpack(y)
    fcopy(ex, ey)
    torch.cuda.synchronize()
    assert torch.equal(x, y), "ember copy is wrong"
    t_e = bench(lambda: fcopy(ex, ey), torch)
    t_t = bench(lambda: y.copy_(x), torch)
    R["copy_256MiB"] = {"ember_GBps": 2 * nbytes / t_e / 1e9, "torch_GBps": 2 * nbytes / t_t / 1e9,
                        "ember_ms": t_e * 1e3, "torch_ms": t_t * 1e3, "ratio": t_t / t_e}

    # -- add ------------------------------------------------------------------------------------------
    s, a, _ = K.vector_add_vec4(block=256)
    fadd = ember.build(s, a, target="cuda", name="add")
    z = torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    ez, eo = ember.nd.from_dlpack(z), ember.nd.from_dlpack(out)
    fadd(ex, ez, eo)
    torch.cuda.synchronize()
    assert torch.equal(out, x + z), "ember add is wrong"
    t_e = bench(lambda: fadd(ex, ez, eo), torch)
    t_t = bench(lambda: torch.add(x, z, out=out), torch)
    R["add_256MiB"] = {"ember_GBps": 3 * nbytes / t_e / 1e9, "torch_GBps": 3 * nbytes / t_t / 1e9,
                       "ember_ms": t_e * 1e3, "torch_ms": t_t * 1e3, "ratio": t_t / t_e}

    # -- row reduction --------------------------------------------------------------------------------
    m = 4096 if args.quick else 16384
    A = torch.randn(m, m, device="cuda")
    ref = A.double().sum(dim=1)
    eA = ember.nd.from_dlpack(A)
    best = None
    variants = {}
    for threads, unroll in ((256, 4), (512, 4), (1024, 4), (512, 8)):
        s, a, _ = K.row_sum(threads=threads, unroll=unroll)
        f = ember.build(s, a, target="cuda", name=f"rowsum_{threads}_{unroll}")
        B = torch.full((m,), float("nan"), device="cuda")
        eB = ember.nd.from_dlpack(B)
        f(eA, eB)
        torch.cuda.synchronize()
        err = float((B.double() - ref).norm() / ref.norm())
        assert err < 1e-5, f"ember row sum is wrong ({err})"
        t = bench(lambda f=f, eB=eB: f(eA, eB), torch)
        variants[f"threads{threads}_unroll{unroll}"] = t * 1e3
        if best is None or t < best[0]:
            best = (t, threads, unroll)
    B = torch.empty(m, device="cuda")
    t_t = bench(lambda: torch.sum(A, dim=1, out=B), torch)
    t_e = best[0]
    R["row_sum_16384x16384"] = {"ember_ms": t_e * 1e3, "torch_ms": t_t * 1e3, "ratio": t_t / t_e,
                                "ember_GBps": m * m * 4 / t_e / 1e9, "torch_GBps": m * m * 4 / t_t / 1e9,
                                "best": f"threads={best[1]} unroll={best[2]}", "variants_ms": variants}

    # -- SGEMM ----------------------------------------------------------------------------------------
    N = 1024 if args.quick else 4096
    Am = torch.randn(N, N, device="cuda")
    Bm = torch.randn(N, N, device="cuda")
    refm = (Am.double() @ Bm.double())
    eAm, eBm = ember.nd.from_dlpack(Am), ember.nd.from_dlpack(Bm)
    gvariants = {}
    gbest = None
    # (bk, stages, extra gemm_fast arguments): 128 x 128 blocks of 8 x 8 per thread, and 256 x 128
    # blocks of 16 x 8 with 4 x 8 warps (half the shared-memory wavefronts per multiply-add;
    # cuBLAS's SGEMM on the H200 runs 256 x 128 blocks, 3 stages of 8), in the plain staging layout
    # and grouped (rows in padded groups of 32: conflict-free fragment loads)
    xl = {"bm": 256, "bn": 128, "tm": 16, "tn": 8, "warp": (4, 8)}
    grouped = {"grouped": True}
    for bk, stages, extra in ((16, 2, {}), (16, 2, xl), (16, 3, xl), (16, 2, grouped), (16, 3, grouped),
                              (16, 4, grouped), (16, 2, {**xl, **grouped}), (16, 4, {**xl, **grouped}),
                              (32, 2, {**xl, **grouped})):
        s, a, _ = K.gemm_fast(N, N, N, bk=bk, stages=stages, **extra)
        tag = f"bk{bk}_s{stages}" + ("_256x128_w4x8" if "warp" in extra else "")
        tag += "_grouped" if extra.get("grouped") else ""
        f = ember.build(s, a, target="cuda", name=f"sgemm_{tag}")
        Cm = torch.full((N, N), float("nan"), device="cuda")
        eC = ember.nd.from_dlpack(Cm)
        f(eAm, eBm, eC)
        torch.cuda.synchronize()
        err = float((Cm.double() - refm).norm() / refm.norm())
        assert err < 1e-5, f"ember sgemm is wrong ({err})"
        t = bench(lambda f=f, eC=eC: f(eAm, eBm, eC), torch)
        gvariants[tag] = {"ms": t * 1e3, "TFLOPs": 2 * N**3 / t / 1e12, "rel_err": err,
                                "ptxas": f.imported_modules[0].get_source("ptxas").strip().splitlines()[-2:]}
        if gbest is None or t < gbest[0]:
            gbest = (t, tag)
    Ct = torch.empty(N, N, device="cuda")
    t_t = bench(lambda: torch.matmul(Am, Bm, out=Ct), torch)
    t_e = gbest[0]
    R[f"sgemm_{N}"] = {"ember_TFLOPs": 2 * N**3 / t_e / 1e12, "cublas_TFLOPs": 2 * N**3 / t_t / 1e12,
                       "ratio": t_t / t_e, "best": gbest[1], "variants": gvariants,
                       "cublas_rel_err": float((Ct.double() - refm).norm() / refm.norm())}

    # -- launch overhead ------------------------------------------------------------------------------
    s, a, _ = K.vector_add(block=64)
    f = ember.build(s, a, target="cuda", name="tiny")
    ta, tb, tc = (torch.randn(256, device="cuda") for _ in range(3))
    ea, eb, ec = (ember.nd.from_dlpack(t) for t in (ta, tb, tc))
    calls = 20000

    def per_call(fn):
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        best_t = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            best_t = min(best_t, (t1 - t0) / calls)
        return best_t * 1e6

    R["launch_overhead_us"] = {
        "ember_ndarray": per_call(lambda: f(ea, eb, ec)),
        "ember_torch_tensors_dlpack": per_call(lambda: f(ta, tb, tc)),
        "torch_add_out": per_call(lambda: torch.add(ta, tb, out=tc)),
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_bench.json"), "w") as fh:
        json.dump(results, fh, indent=2)
    lines = [f"# GPU benchmarks on {results['device']} ({results['arch']}), torch {results['torch']}", "",
             "| benchmark | ember | torch | ember / torch |", "| --- | --- | --- | --- |"]
    for key, unit_e, unit_t in (("copy_256MiB", "ember_GBps", "torch_GBps"), ("add_256MiB", "ember_GBps", "torch_GBps"),
                                ("row_sum_16384x16384", "ember_GBps", "torch_GBps")):
        if key in R:
            r = R[key]
            lines.append(f"| {key} | {r[unit_e]:.0f} GB/s | {r[unit_t]:.0f} GB/s | {r['ratio']:.3f} |")
    gk = f"sgemm_{N}"
    lines.append(f"| {gk} fp32 (TF32 off) | {R[gk]['ember_TFLOPs']:.1f} TFLOP/s | {R[gk]['cublas_TFLOPs']:.1f} TFLOP/s "
                 f"(cuBLAS) | {R[gk]['ratio']:.3f} |")
    lo = R["launch_overhead_us"]
    lines.append(f"| launch overhead per call | {lo['ember_ndarray']:.2f} µs (NDArray), "
                 f"{lo['ember_torch_tensors_dlpack']:.2f} µs (torch tensors) | {lo['torch_add_out']:.2f} µs | |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "gpu_bench.md"), "w") as fh:
        fh.write(table)
    print(json.dumps(results, indent=1))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
