"""Auto-tuning on the CPU: a GEMM (ONNX ``MatMul`` by a constant weight) tuned, then compiled with
and without the records and timed next to NumPy's matmul (OpenBLAS), in alternating rounds.

Reports the tuned and default times, their ratio to OpenBLAS, the trials and seconds spent, and how
soon the search came within 5 % of the best it found (``to_5pct_s``: from the records' times).
The records database (``--db``) is resumable. Writes ``tune_cpu.json`` and ``tune_cpu.md`` to
``--out``.

    python benchmarks/tune_cpu.py --n 1024 --trials 64 --threads 2 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import interleaved, machine, set_threads, write_outputs  # noqa: E402


def gemm_model(n: int, m: int | None = None) -> bytes:
    """ONNX bytes of ``y = x @ w``: ``x`` ``[m, n]`` input, ``w`` ``[n, n]`` constant float32."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    m = m or n
    w = np.random.default_rng(0).standard_normal((n, n)).astype("float32")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def record_times(db: str, workload: str, frac: float = 0.05) -> tuple[float | None, float | None]:
    """(seconds from the first record of ``workload`` to the first within ``frac`` of the best,
    seconds from the first record to the last): the search's pace, over every run that added to
    ``db``."""
    from ember.tune import TuningDB

    with TuningDB(db) as tdb:
        recs = tdb.records(workload=workload)
    valid = [r for r in recs if r.valid]
    if not valid:
        return None, None
    best = min(r.seconds or 0.0 for r in valid)
    first = min(r.created for r in recs)
    hit = min(r.created for r in valid if (r.seconds or 0.0) <= best * (1 + frac))
    return hit - first, max(r.created for r in recs) - first


def main() -> int:
    """Run the benchmark; returns a process exit code."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--m", type=int, default=None, help="rows of the input (default n)")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--time-budget", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--db", default="/tmp/tune_cpu.db")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--name", default="tune_cpu")
    args = ap.parse_args()
    set_threads(args.threads)
    import numpy as np

    import ember

    target = f"llvm -num_threads={args.threads}"
    n, m = args.n, args.m or args.n
    model = gemm_model(n, m)
    t0 = time.perf_counter()
    result = ember.tune(model, target, trials=args.trials, db=args.db, time_budget=args.time_budget)
    print(result, flush=True)
    tuned = ember.compile(model, target, tuning_db=args.db)
    plain = ember.compile(model, target, tuning_db=False)
    x = np.random.default_rng(1).standard_normal((m, n)).astype("float32")
    w = np.random.default_rng(0).standard_normal((n, n)).astype("float32")
    ref = x.astype("float64") @ w.astype("float64")
    errs = {k: float(np.abs(mod(x)[0] - ref).max() / np.abs(ref).max()) for k, mod in (("tuned", tuned),
                                                                                      ("default", plain))}
    out = np.empty((m, n), "float32")
    best = interleaved({"tuned": lambda: tuned(x), "default": lambda: plain(x),
                        "openblas": lambda: np.matmul(x, w, out=out)})
    task = result.tasks[0]
    pace = record_times(args.db, task.workload)
    flop = 2.0 * m * n * n
    res: dict[str, Any] = {
        "gemm": [m, n, n], "threads": args.threads, "target": target,
        "ms": {k: round(v * 1e3, 4) for k, v in best.items()},
        "GFLOPs": {k: round(flop / v / 1e9, 1) for k, v in best.items()},
        "tuned_vs_openblas": round(best["openblas"] / best["tuned"], 3),
        "default_vs_openblas": round(best["openblas"] / best["default"], 3),
        "rel_err_vs_fp64": errs, "new_trials": result.new_trials, "trials_total": task.trials,
        "tuning_s": round(result.elapsed, 1), "bench_s": round(time.perf_counter() - t0, 1),
        "to_5pct_s": _round(pace[0]), "records_span_s": _round(pace[1]), "best_config": task.best_config,
        "cost_model": "xgboost" if _has("xgboost") else "numpy",
        "note": "ember and OpenBLAS timed in alternating rounds in one process (best of 9 rounds); the model "
                "call includes ember's input/output handling",
        "machine": machine(),
    }
    lines = [f"# {args.name}: {m}x{n}x{n} float32 GEMM, {args.threads} threads", "",
             f"tuned {res['ms']['tuned']} ms ({res['GFLOPs']['tuned']} GFLOP/s) = {res['tuned_vs_openblas']}x "
             f"OpenBLAS; default {res['ms']['default']} ms = {res['default_vs_openblas']}x; "
             f"{result.new_trials} trials in {res['tuning_s']} s (within 5 % of the best after {res['to_5pct_s']} s)"]
    print(write_outputs(args.out, args.name, res, lines))
    return 0 if max(errs.values()) < 1e-4 else 1


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def _has(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


if __name__ == "__main__":
    sys.exit(main())
