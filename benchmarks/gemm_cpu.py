"""SGEMM on the CPU: ember's packed GEMM against NumPy (OpenBLAS) with the same threads.

The GEMM is the one models run: ``ember.ops.nn.matmul_tensor`` scheduled by the target's
``CPUStrategy`` at its default (untuned) point, with both operands as inputs, so the panel
packing of ``B`` is timed too (OpenBLAS packs both operands as well). ember and OpenBLAS are
timed in alternating rounds in one process (``common.interleaved``), so the ratio holds on a
shared machine even when the absolute figures do not.

Run: ``.venv/bin/python benchmarks/gemm_cpu.py`` (``--quick`` for one size, ``--threads N``). Writes
``benchmarks/results/gemm_cpu.json`` (with the CPU model, its LLVM name — the default register
tile depends on it, :func:`ember.strategy.cpu_gemm.default_tile_candidates` — and its vector
features) and prints a
table of GFLOP/s and ratios (OpenBLAS time / ember time: above 1 ember is faster), with the
schedule point each size used. Also reports compile times of the vector add and the GEMM with
the cache off.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import interleaved, set_threads, table, write_result  # noqa: E402


def _threads_arg() -> int:
    """``--threads N`` (read before NumPy loads, which fixes OpenBLAS's threads); all cores of
    this process by default."""
    for k, a in enumerate(sys.argv):
        if a == "--threads" and k + 1 < len(sys.argv) and sys.argv[k + 1].isdigit():
            return int(sys.argv[k + 1])
    return len(os.sched_getaffinity(0))


THREADS = _threads_arg()
set_threads(THREADS)

import numpy as np  # noqa: E402

import ember  # noqa: E402
from ember import te  # noqa: E402
from ember.demo import vector_add_schedule  # noqa: E402
from ember.ops.nn import matmul_tensor  # noqa: E402
from ember.strategy.cpu import CPUStrategy  # noqa: E402
from ember.target import Target  # noqa: E402

SIZES = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (128, 4096, 4096)]


def gemm_schedule(M: int, N: int, K: int) -> tuple[te.Schedule, list[te.Tensor], str]:
    """``C = A @ B`` as the model compiler builds it for the host: the schedule, its arguments
    and the knob point it used."""
    st = CPUStrategy("llvm")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    C = matmul_tensor(A, B, strategy=st)
    space = st.space([C])
    point = ", ".join(f"{k}={v}" for k, v in space.default.to_json()["knobs"].items()) if space else "generic"
    return st.schedule_group([C]), [A, B, C], point


def blas_info() -> str:
    """Which BLAS NumPy uses."""
    try:
        cfg = np.show_config(mode="dicts")
        return cfg["Build Dependencies"]["blas"]["name"]
    except (KeyError, TypeError, AttributeError):  # an older NumPy or another layout of the dict
        return "unknown"


VECTOR_FEATURES = {"sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd",
                   "avx512vnni", "avxvnni", "avx512bf16", "avx512fp16", "amx-tile", "amx-bf16", "amx-int8", "neon",
                   "sve", "sve2"}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's processor string."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def compile_times() -> dict[str, float]:
    """Seconds to lower and compile the vector add and the 1024^3 GEMM with the cache off."""
    out = {}
    for label, make in (("vector_add", vector_add_schedule),
                        ("gemm_1024", lambda: gemm_schedule(1024, 1024, 1024)[:2])):
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
    ap.add_argument("--threads", type=int, default=THREADS,
                    help="threads for ember and OpenBLAS (default: all cores); results go to gemm_cpu_<N>t.json "
                         "when it is not all cores")
    opts = ap.parse_args()
    sizes = [(1024, 1024, 1024)] if opts.quick else SIZES
    rng = np.random.default_rng(0)
    rows = []
    for M, N, K in sizes:
        s, args, point = gemm_schedule(M, N, K)
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
                "schedule": point,
            }
        )
        print(table(rows[-1:], [c for c in rows[-1] if c != "schedule"]), flush=True)
    ct = compile_times()
    print()
    print(table(rows, ["M", "N", "K", "ember_gflops", "openblas_gflops", "ratio"]))
    print(f"\ncompile time, cache off: vector add {ct['vector_add']:.3f} s, GEMM {ct['gemm_1024']:.3f} s")
    if not opts.quick:
        host = Target("llvm")
        name = "gemm_cpu" if THREADS == len(os.sched_getaffinity(0)) else f"gemm_cpu_{THREADS}t"
        path = write_result(name, {"threads": THREADS, "blas": blas_info(), "cpu_model": cpu_model(),
                                         "llvm_cpu": host.mcpu,
                                         "vector_features": sorted(f for f in host.features if f in VECTOR_FEATURES),
                                         "rows": rows, "compile_time_s": ct})
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
