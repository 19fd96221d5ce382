"""SGEMM on the CPU: ember's scheduled GEMM against NumPy (OpenBLAS) with the same threads.

Run: ``.venv/bin/python benchmarks/gemm_cpu.py`` (``--quick`` for one size). Writes
``benchmarks/results/gemm_cpu.json`` and prints a table of GFLOP/s and ratios (ember / OpenBLAS,
higher is better). Also reports compile times of the vector add and the GEMM with the cache off.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import interleaved, set_threads, table, write_result  # noqa: E402

THREADS = len(os.sched_getaffinity(0))
set_threads(THREADS)

import numpy as np  # noqa: E402

import ember  # noqa: E402
from ember.demo import gemm_schedule, vector_add_schedule  # noqa: E402

SIZES = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (128, 4096, 4096)]


def blas_info() -> str:
    """Which BLAS NumPy uses."""
    try:
        cfg = np.show_config(mode="dicts")
        return cfg["Build Dependencies"]["blas"]["name"]
    except Exception:  # noqa: BLE001
        return "unknown"


def compile_times() -> dict[str, float]:
    """Seconds to lower and compile the vector add and the 1024^3 GEMM with the cache off."""
    out = {}
    for label, make in (("vector_add", vector_add_schedule), ("gemm_1024", lambda: gemm_schedule(1024, 1024, 1024))):
        best = float("inf")
        for _ in range(3):
            s, args = make()
            t0 = time.perf_counter()
            ember.build(s, args, target="llvm", use_cache=False)
            best = min(best, time.perf_counter() - t0)
        out[label] = best
    return out


def main() -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="only 1024^3")
    opts = ap.parse_args()
    sizes = [(1024, 1024, 1024)] if opts.quick else SIZES
    rng = np.random.default_rng(0)
    rows = []
    for M, N, K in sizes:
        s, args = gemm_schedule(M, N, K)
        f = ember.build(s, args, target="llvm", name="gemm")
        A = rng.standard_normal((M, K)).astype("float32")
        B = rng.standard_normal((K, N)).astype("float32")
        a, b = ember.nd.array(A), ember.nd.array(B)
        c = ember.nd.array(np.full((M, N), np.nan, dtype="float32"))
        f(a, b, c)
        ref = A.astype(np.float64) @ B.astype(np.float64)
        err = float(np.abs(c.numpy() - ref).max() / np.abs(ref).max())
        assert err < 1e-5, f"ember GEMM wrong at {M}x{N}x{K}: rel err {err}"
        out = np.empty((M, N), dtype=np.float32)
        t = interleaved(
            {
                "ember": lambda f=f, a=a, b=b, c=c: f(a, b, c),
                "openblas": lambda A=A, B=B, out=out: np.matmul(A, B, out=out),
            }
        )
        flops = 2.0 * M * N * K
        rows.append(
            {
                "M": M,
                "N": N,
                "K": K,
                "ember_gflops": round(flops / t["ember"] / 1e9, 1),
                "openblas_gflops": round(flops / t["openblas"] / 1e9, 1),
                "ratio": round(t["openblas"] / t["ember"], 3),
                "max_rel_err": err,
            }
        )
        print(table(rows[-1:], list(rows[-1].keys())), flush=True)
    ct = compile_times()
    print()
    print(table(rows, ["M", "N", "K", "ember_gflops", "openblas_gflops", "ratio"]))
    print(f"\ncompile time, cache off: vector add {ct['vector_add']:.3f} s, GEMM {ct['gemm_1024']:.3f} s")
    if not opts.quick:
        path = write_result("gemm_cpu", {"threads": THREADS, "blas": blas_info(), "rows": rows, "compile_time_s": ct})
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
