"""Nsight Compute profile of ember's default tensor-core GEMM next to cuBLAS's on the same operands:
for each kernel its duration, tensor-pipe activity, instructions issued per cycle, L2 hit rate,
DRAM and L2 throughput and the warp-stall reasons (per issued instruction), one call each after
warm-up, clocks left free (``--clock-control none``). This is the profile behind the "What limits
the TMA kernel" table of ``docs/gpu.md``.

    python benchmarks/gemm_ncu.py [--dtype float16] [--m 4096 --n 4096 --k 4096] [--tn] [--out DIR] [--sass]
    python benchmarks/gemm_ncu.py --sgemm fast|fast_w48|xl|xl_grouped|grouped|packed [--m ...]   # float32 on CUDA cores

``--sgemm`` profiles a float32 product on CUDA cores against cuBLAS's with TF32 off instead:
``fast`` is the hand-scheduled SGEMM of ``benchmarks/gpu_bench.py`` (``tests/gpu/kernels.py:
gemm_fast``, bk 16, two stages), ``fast_w48`` the same with each warp a 4 x 8 patch of threads,
``packed`` a one-node ONNX MatMul through the model compiler (the packed GEMM and its pack).

With ``--sass`` it also samples warp stalls per SASS instruction of ember's kernel (``ncu --set
full`` into a report, then its source page) and writes ``gemm_ncu_sass.csv`` (every instruction)
and ``gemm_ncu_sass.md`` (the instructions with the most samples, in program order).

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
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma_pipe_active_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "shared_ld_wavefronts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "shared_ld_bank_conflicts",
    "smsp__inst_executed.sum": "instructions",
}
#: warp-stall reasons, per issued instruction
STALLS = ("barrier", "long_scoreboard", "mio_throttle", "wait", "gmma", "math_pipe_throttle", "short_scoreboard",
          "dispatch_stall", "selected", "not_selected", "lg_throttle")
#: kernels profiled: ember's (named below) and cuBLAS's (nvjet / sm90_xmma / cutlass names)
KERNELS = "regex:ember_gemm|nvjet|sm90_xmma|cutlass|gemm|matmul"


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

    if args.sgemm:
        sgemm_child(args)
        return
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


def sgemm_child(args: argparse.Namespace) -> None:
    """The ``--sgemm`` variant of :func:`child`: ember's float32 CUDA-core product named by
    ``args.sgemm`` and cuBLAS's with TF32 off, warmed up, then one more call each."""
    import torch

    import ember

    A = torch.randn(args.m, args.k, device="cuda")
    B = torch.randn(args.k, args.n, device="cuda")
    C = torch.empty(args.m, args.n, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.sgemm == "packed":
        from onnx import TensorProto, helper

        g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "sgemm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [args.m, args.k]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [args.k, args.n])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        compiled = ember.compile(model.SerializeToString(), target="cuda")
        ea, eb = ember.nd.from_dlpack(A), ember.nd.from_dlpack(B)

        def run() -> None:
            compiled.run_on_device(a=ea, b=eb)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
        import kernels

        extra: dict[str, Any] = {
            "fast": {"stages": 2}, "fast_w48": {"stages": 2, "warp": (4, 8)},
            "xl": {"stages": 2, "bm": 256, "tm": 16, "warp": (4, 8)},
            "xl_grouped": {"stages": 4, "bm": 256, "tm": 16, "warp": (4, 8), "grouped": True},
            "grouped": {"stages": 3, "grouped": True},
        }[args.sgemm]
        s, a, _ = kernels.gemm_fast(args.m, args.n, args.k, bk=16, **extra)
        f = ember.build(s, a, target="cuda", name="ember_gemm")
        ea, eb, ec = (ember.nd.from_dlpack(x) for x in (A, B, C))

        def run() -> None:
            f(ea, eb, ec)
    for _ in range(3):
        run()
        torch.matmul(A, B, out=C)
    torch.cuda.synchronize()


def stall_column(header: list[str]) -> str | None:
    """The column of ``ncu --page source --csv`` holding each instruction's warp-stall samples."""
    for want in ("Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All Cycles)"):
        if want in header:
            return want
    return next((h for h in header if h.startswith("Warp Stall Sampling")), None)


def top_instructions(text: str, count: int = 60) -> list[str]:
    """Markdown rows for the ``count`` SASS instructions with the most stall samples (kept in
    program order) from ``ncu --page source --csv --print-source sass`` output; each row shows
    the address, the instruction, its share of all samples and its top stall reasons."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        return ["(no source rows)"]
    start = next((i for i, r in enumerate(rows) if "Source" in r), 0)  # after a "Kernel Name" row
    header, body = rows[start], rows[start + 1:]
    col = stall_column(header)
    if col is None:
        return ["(no stall column; header: " + ", ".join(header) + ")"]

    def num(row: list[str], c: str) -> float:
        try:
            return float(row[header.index(c)].replace(",", ""))
        except (ValueError, IndexError):
            return 0.0

    total = sum(num(r, col) for r in body) or 1.0
    reasons = [h for h in header if (h.startswith("stall_") or h.startswith("smsp__pcsamp_warps_issue_stalled"))
               and "Not Issued" not in h]
    ranked = sorted(range(len(body)), key=lambda i: -num(body[i], col))[:count]
    out = ["| address | instruction | % samples | top reasons |", "| --- | --- | ---: | --- |"]
    for i in sorted(ranked):
        r = body[i]
        why = sorted(((num(r, c), c) for c in reasons), reverse=True)[:3]
        src = r[header.index("Source")] if "Source" in header else ""
        addr = r[header.index("Address")] if "Address" in header else str(i)
        out.append(f"| {addr} | `{src.strip()[:70]}` | {100 * num(r, col) / total:.2f} | "
                   + ", ".join(f"{c.replace('smsp__pcsamp_warps_issue_stalled_', '')} {v:.0f}" for v, c in why if v)
                   + " |")
    return out


def sass_profile(ncu: str, args: argparse.Namespace) -> None:
    """Sample warp stalls per SASS instruction of ember's kernel into ``gemm_ncu_sass.csv`` and
    ``gemm_ncu_sass.md`` under ``args.out``."""
    rep = Path(args.out) / "gemm_ncu_sass"
    cmd = [ncu, "--clock-control", "none", "--kernel-name", "regex:ember_gemm|matmul", "--launch-skip", "2",
           "--launch-count", "1", "--set", "full", "--import-source", "no", "-f", "-o", str(rep),
           sys.executable, __file__, "--child", "--dtype", args.dtype, "--m", str(args.m), "--n", str(args.n),
           "--k", str(args.k)] + (["--tn"] if args.tn else []) + (["--sgemm", args.sgemm] if args.sgemm else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        print("gemm_ncu --sass: ncu failed:", proc.stdout[-2000:], proc.stderr[-2000:])
        return
    page = subprocess.run([ncu, "--import", f"{rep}.ncu-rep", "--page", "source", "--csv", "--print-source", "sass"],
                          capture_output=True, text=True, timeout=600)
    (Path(args.out) / "gemm_ncu_sass.csv").write_text(page.stdout)
    case = f"float32 CUDA cores ({args.sgemm})" if args.sgemm else f"default GEMM, {args.dtype}"
    table = [f"# ncu stall samples per SASS instruction: ember's {case} {args.m}x{args.n}x{args.k}", ""]
    table += top_instructions(page.stdout)
    (Path(args.out) / "gemm_ncu_sass.md").write_text("\n".join(table) + "\n")
    print("\n".join(table[:80]))


def main() -> int:
    """Profile (or, with ``--child``, be the profiled process); returns an exit code."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--tn", action="store_true", help="B given as N x K (nn.Linear's layout; float32 needs it)")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--sass", action="store_true", help="also sample stalls per SASS instruction of ember's kernel")
    ap.add_argument("--sgemm", choices=("fast", "fast_w48", "xl", "xl_grouped", "grouped", "packed"),
                    help="profile a float32 CUDA-core product instead (see the module docstring)")
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
    cmd = [ncu, "--clock-control", "none", "--kernel-name", KERNELS, "--csv", "--page", "raw", "--print-units", "base",
           "--metrics", ",".join(metrics), sys.executable, __file__, "--child", "--dtype", args.dtype,
           "--m", str(args.m), "--n", str(args.n), "--k", str(args.k)] + (["--tn"] if args.tn else [])
    cmd += ["--sgemm", args.sgemm] if args.sgemm else []
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    kernels = {name: summarise(raw) for name, raw in parse_ncu_csv(proc.stdout).items()}
    if proc.returncode or not kernels:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        print("gemm_ncu: ncu failed or profiled no kernel (performance counters may need "
              "NVreg_RestrictProfilingToAdminUsers=0 or root)")
        return 1
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    case = f"float32 CUDA cores ({args.sgemm})" if args.sgemm else args.dtype
    results = {"case": f"{case} {args.m}x{args.n}x{args.k}{' TN' if args.tn else ''}", "host": machine(),
               "ncu": version[-1] if version else None, "kernels": kernels}
    lines = [f"# ncu: ember's default GEMM and cuBLAS, {results['case']}", "",
             "| kernel | duration (µs) | tensor pipe % | IPC | L2 hit % | DRAM % | L2 % | top stalls per issue |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, k in kernels.items():
        top = sorted(((v, r) for r, v in k["stalls_per_issue"].items() if v), reverse=True)[:3]
        cells = [k["duration"] / 1e3 if k.get("duration") else None]
        cells += [k.get(x) for x in ("tensor_pipe_active_pct", "ipc", "l2_hit_pct", "dram_pct", "l2_pct")]
        lines.append(f"| {name[:60]} | " + " | ".join("" if c is None else f"{c:.4g}" for c in cells)
                     + " | " + ", ".join(f"{r} {v:.2f}" for v, r in top) + " |")
    print(write_outputs(args.out, "gemm_ncu", results, lines))
    if args.sass:
        sass_profile(ncu, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
