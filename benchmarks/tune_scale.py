"""Tuning throughput against build workers: trials per minute of one GEMM task on a Dask
LocalCluster with 1 build worker and with ``--workers`` build workers (plus the measuring
workers: one per GPU, one for a CPU target). Each run starts from an empty records database, so
both measure the same number of fresh candidates. Writes ``tune_scale.json`` to ``--out``.

Issue 14's goal: on the H100 host (16 cores building, the GPU measuring), 8 build workers give at
least 4x the trials per minute of 1.

    python benchmarks/tune_scale.py --target cuda --workers 8 --trials 64 --out benchmarks/results
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


def run(target: str, workers: int, trials: int, n: int) -> dict[str, Any]:
    """Tune the ``n``-sized GEMM for ``trials`` fresh trials with ``workers`` build workers."""
    import ember

    with tempfile.TemporaryDirectory() as tmp:
        result = ember.tune(gemm_model(n), target, trials=trials, db=f"{tmp}/t.db", workers=workers, quiet=True,
                            batch=max(8, 2 * workers))
    return {"workers": workers, "trials": result.new_trials, "seconds": round(result.elapsed, 1),
            "trials_per_min": round(result.new_trials / result.elapsed * 60, 1)}


def main() -> int:
    """Run both configurations; returns a process exit code."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    rows = [run(args.target, 1, args.trials, args.n), run(args.target, args.workers, args.trials, args.n)]
    ratio = rows[1]["trials_per_min"] / max(rows[0]["trials_per_min"], 1e-9)
    res = {"target": args.target, "gemm": args.n, "runs": rows, "speedup": round(ratio, 2), "machine": machine()}
    lines = [f"# tune_scale: {args.target}, GEMM {args.n}^3", "",
             f"1 build worker {rows[0]['trials_per_min']} trials/min, {args.workers} build workers "
             f"{rows[1]['trials_per_min']} trials/min: {ratio:.2f}x"]
    print(write_outputs(args.out, "tune_scale", res, lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
