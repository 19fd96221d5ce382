"""Tuning throughput against build workers: trials per minute of one GEMM task on a Dask
LocalCluster with each number of build workers in ``--workers`` (plus the measuring workers: one
per GPU, one for a CPU target). Every run starts from an empty records database with the same
batch size and seed, so the runs propose the same first batch. Writes ``tune_scale.json`` and
``tune_scale.md`` to ``--out``.

Per run it reports trials per minute of the tuning loop (starting the cluster is reported
apart, as ``setup_s``) and where the time went: the tuner's own phases (search, waiting, records),
the build workers' seconds (summed over candidates) and the measuring worker's (loading,
checking, timing), how many timings stopped early, and the measuring worker's busy fraction
(measure seconds / loop seconds; near 1 means measurement bounds the rate, so more build
workers cannot help).

Issue 14's goal: on the H100 host (16 cores building, the GPU measuring), 8 build workers give at
least 4x the trials per minute of 1.

    python benchmarks/tune_scale.py --target cuda --workers 1,8 --trials 128 --n 2048 --out benchmarks/results
    python benchmarks/tune_scale.py --target llvm --workers 1,2 --trials 32 --n 512 --out /tmp/scale
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import machine, write_outputs  # noqa: E402
from tune_cpu import gemm_model  # noqa: E402


def run(target: str, workers: int, trials: int, n: int, batch: int) -> dict[str, Any]:
    """Tune the ``n``-sized GEMM for ``trials`` fresh trials with ``workers`` build workers."""
    import ember

    with tempfile.TemporaryDirectory() as tmp:
        result = ember.tune(gemm_model(n), target, trials=trials, db=f"{tmp}/t.db", workers=workers, quiet=True,
                            batch=batch)
    ph = result.phases
    loop = result.elapsed - ph.get("setup", 0.0)
    task = result.tasks[0]
    return {"workers": workers, "trials": result.new_trials, "seconds": round(result.elapsed, 1),
            "setup_s": round(ph.get("setup", 0.0), 1), "loop_s": round(loop, 1),
            "trials_per_min": round(result.trials_per_minute, 1),
            "trials_per_min_with_setup": round(result.new_trials / result.elapsed * 60, 1),
            "phases_s": {k: round(v, 2) for k, v in sorted(ph.items())},
            "build_s_per_trial": round(ph.get("build", 0.0) / max(result.new_trials, 1), 3),
            "measure_s_per_trial": round(ph.get("measure", 0.0) / max(result.new_trials, 1), 3),
            "timing_s_per_trial": round(ph.get("measure_time", 0.0) / max(result.new_trials, 1), 3),
            "measurer_busy": round(ph.get("measure", 0.0) / loop, 2) if loop > 0 else None,
            "rejected": result.rejected, "invalid": task.invalid, "best_gflops": round(task.gflops, 1)}


def main() -> int:
    """Run each configuration; returns a process exit code."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--workers", default="1,8", help="comma-separated build worker counts (the first is the base)")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=16, help="candidates per batch, the same in every run")
    ap.add_argument("--rounds", type=int, default=1, help="run the worker counts this many times, alternating")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    rows = []
    for k in range(args.rounds):
        first = len(rows)
        for w in counts:
            rows.append(dict(run(args.target, w, args.trials, args.n, args.batch), round=k))
            print(rows[-1], flush=True)
        base = max(rows[first]["trials_per_min"], 1e-9)
        for r in rows[first:]:
            r["speedup"] = round(r["trials_per_min"] / base, 2)
    last = [r["speedup"] for r in rows if r["workers"] == counts[-1]]
    res = {"target": args.target, "gemm": args.n, "batch": args.batch, "trials": args.trials, "runs": rows,
           "speedup": sorted(last)[len(last) // 2], "machine": machine(),
           "command": "python benchmarks/tune_scale.py " + " ".join(sys.argv[1:])}
    lines = [f"# tune_scale: {args.target}, GEMM {args.n}^3, batch {args.batch}, {args.trials} trials per run", "",
             f"{counts[-1]} build workers against {counts[0]}: {res['speedup']}x (median over {args.rounds} round(s))",
             "", "| build workers | trials/min | speedup | setup s | loop s | build s/trial | measure s/trial "
             "| of it timing | measurer busy | stopped early | search s | wait s |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        p = r["phases_s"]
        lines.append(f"| {r['workers']} | {r['trials_per_min']} | {r['speedup']}x | {r['setup_s']} | {r['loop_s']} | "
                     f"{r['build_s_per_trial']} | {r['measure_s_per_trial']} | {r['timing_s_per_trial']} | "
                     f"{r['measurer_busy']} | "
                     f"{r['rejected']}/{r['trials']} | {p.get('search', 0)} | {p.get('wait', 0)} |")
    print(write_outputs(args.out, "tune_scale", res, lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
