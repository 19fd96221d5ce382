"""Nsight Compute profile of ember's default tensor-core GEMM next to cuBLAS's on the same operands:
for each kernel its duration, tensor-pipe activity, instructions issued per cycle, L2 hit rate,
DRAM and L2 throughput and the warp-stall reasons (per issued instruction), one call each after
warm-up, clocks left free (``--clock-control none``). This is the profile behind the "What limits
the TMA kernel" table of ``docs/gpu.md``.

    python benchmarks/gemm_ncu.py [--dtype float16] [--m 4096 --n 4096 --k 4096] [--tn] [--out DIR]

Needs ``ncu`` (Nsight Compute, shipped with the CUDA toolkit) with access to the GPU's
performance counters, PyTorch for cuBLAS, and an NVIDIA GPU. Writes ``gemm_ncu.json`` and
``gemm_ncu.md``.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, write_outputs  # noqa: E402

#: the metrics read for each kernel (ncu names) and what the tables call them
METRICS = {
    "gpu__time_duration.sum": "duration",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_active_pct",
    "sm__inst_executed.avg.per_cycle_active": "ipc",
    "lts__t_sector_hit_rate.pct": "l2_hit_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2_pct",
    "sm__cycles_elapsed.avg.per_second": "sm_clock",
}
#: warp-stall reasons, per issued instruction
STALLS = ("barrier", "long_scoreboard", "mio_throttle", "wait", "gmma", "math_pipe_throttle", "short_scoreboard",
          "dispatch_stall", "selected", "not_selected", "lg_throttle")
#: kernels profiled: ember's (named below) and cuBLAS's (nvjet / sm90_xmma / cutlass names)
KERNELS = "regex:ember_gemm|nvjet|sm90_xmma|cutlass|gemm"


def parse_ncu_csv(text: str) -> dict[str, dict[str, float]]:
    """Metric values per kernel from ``ncu --csv --page raw`` output (one row per kernel launch,
    one column per metric; the first row after the header holds the units): ``{kernel name:
    {metric: value}}``, the last launch of each name kept. Lines ncu prints before the table
    (``==PROF==``) are skipped; numbers may carry thousands separators."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return {}
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, body = rows[0], rows[1:]
    if body and body[0] and body[0][0] == "":  # the units row
        body = body[1:]
    name_col = header.index("Kernel Name")
    out: dict[str, dict[str, float]] = {}
    for row in body:
        values: dict[str, float] = {}
        for col, cell in zip(header, row):
            try:
                values[col] = float(cell.replace(",", ""))
            except ValueError:
                continue
        out[row[name_col]] = values
    return out


def summarise(raw: dict[str, float]) -> dict[str, Any]:
    """The named metrics (:data:`METRICS`) and the stall reasons of one kernel's raw values."""
    s: dict[str, Any] = {short: raw.get(name) for name, short in METRICS.items()}
    s["stalls_per_issue"] = {r: raw.get(f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio")
                             for r in STALLS}
    return s


def child(args: argparse.Namespace) -> None:
    """Build ember's default GEMM, warm both up, then call each once more (the launches ncu
    profiles are the last ones of each name)."""
    import torch

    import ember
    from ember.strategy.tensorcore import tensorcore_gemm

    tdt = getattr(torch, args.dtype)
    A = torch.randn(args.m, args.k, device="cuda").to(tdt)
    B = (torch.randn(args.n, args.k, device="cuda") if args.tn else torch.randn(args.k, args.n, device="cuda")).to(tdt)
    C = torch.empty(args.m, args.n, device="cuda", dtype=tdt)
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "float32"
    f = ember.build(tensorcore_gemm(args.m, args.n, args.k, args.dtype, args.dtype, args.tn, target="cuda",
                                    name="ember_gemm"), target="cuda")
    ea, eb, ec = (ember.nd.from_dlpack(x) for x in (A, B, C))
    Bm = B.t() if args.tn else B
    for _ in range(3):
        f(ea, eb, ec)
        torch.matmul(A, Bm, out=C)
    torch.cuda.synchronize()


def main() -> int:
    """Profile (or, with ``--child``, be the profiled process); returns an exit code."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--tn", action="store_true", help="B given as N x K (nn.Linear's layout; float32 needs it)")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    ncu = shutil.which("ncu") or ("/usr/local/cuda/bin/ncu" if Path("/usr/local/cuda/bin/ncu").exists() else None)
    if ncu is None:
        print("gemm_ncu: ncu (Nsight Compute) was not found: install the CUDA toolkit's nsight-compute")
        return 1
    metrics = list(METRICS) + [f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALLS]
    cmd = [ncu, "--clock-control", "none", "--kernel-name", KERNELS, "--csv", "--page", "raw",
           "--metrics", ",".join(metrics), sys.executable, __file__, "--child", "--dtype", args.dtype,
           "--m", str(args.m), "--n", str(args.n), "--k", str(args.k)] + (["--tn"] if args.tn else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    kernels = {name: summarise(raw) for name, raw in parse_ncu_csv(proc.stdout).items()}
    if proc.returncode or not kernels:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        print("gemm_ncu: ncu failed or profiled no kernel (performance counters may need "
              "NVreg_RestrictProfilingToAdminUsers=0 or root)")
        return 1
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    results = {"case": f"{args.dtype} {args.m}x{args.n}x{args.k}{' TN' if args.tn else ''}", "host": machine(),
               "ncu": version[-1] if version else None, "kernels": kernels}
    lines = [f"# ncu: ember's default GEMM and cuBLAS, {results['case']}", "",
             "| kernel | duration | tensor pipe % | IPC | L2 hit % | DRAM % | L2 % | top stalls per issue |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, k in kernels.items():
        top = sorted(((v, r) for r, v in k["stalls_per_issue"].items() if v), reverse=True)[:3]
        cells = [k.get(x) for x in ("duration", "tensor_pipe_active_pct", "ipc", "l2_hit_pct", "dram_pct", "l2_pct")]
        lines.append(f"| {name[:60]} | " + " | ".join("" if c is None else f"{c:.4g}" for c in cells)
                     + " | " + ", ".join(f"{r} {v:.2f}" for v, r in top) + " |")
    print(write_outputs(args.out, "gemm_ncu", results, lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
