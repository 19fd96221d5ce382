"""Measure chosen configurations of a model's tuning tasks one by one, each checked against the
default schedule's output in the tuner's measuring process, and print what each gave (seconds, a
wrong result, or the error). For reproducing a tuning run's invalid records: pass the ``config``
JSON of the records (``SELECT config, error FROM records``).

    python scripts/measure_configs.py --gemm 2048 --target cuda CONFIG_JSON [CONFIG_JSON ...]
    python scripts/measure_configs.py --model model.onnx --target cuda --db tuning.db --errors 10
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path


def main() -> int:
    """Build and measure each configuration (see the module docstring); exit status 1 when any failed."""
    ap = argparse.ArgumentParser()
    ap.add_argument("configs", nargs="*", help="configuration JSON (a record's 'config')")
    ap.add_argument("--gemm", type=int, default=None, help="the N x N x N GEMM model of benchmarks/tune_cpu.py")
    ap.add_argument("--model", default=None, help="an ONNX model instead")
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--db", default=None, help="take the configurations of invalid records from this database")
    ap.add_argument("--errors", type=int, default=10, help="at most this many configurations from --db")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from ember.tune.measure import Runner
    from ember.tune.task import extract_tasks

    if args.gemm:
        from tune_cpu import gemm_model

        model = gemm_model(args.gemm)
    else:
        model = args.model
    tasks = extract_tasks(model, args.target)
    configs = [json.loads(c) for c in args.configs]
    if args.db:
        con = sqlite3.connect(args.db)
        rows = con.execute("SELECT config, error FROM records WHERE error IS NOT NULL ORDER BY id LIMIT ?",
                           (args.errors,)).fetchall()
        configs += [json.loads(c) for c, _ in rows]
    runner = Runner(tasks[0].target, timeout=60)
    failed = 0
    try:
        for task in tasks:
            ref = task.build(task.space.default)
            for cfg in configs:
                try:
                    parts = task.build(cfg)
                except Exception as err:  # noqa: BLE001 - a tool reporting each configuration's fate
                    print(f"{task.name} {json.dumps(cfg)}: does not build: {err}")
                    failed += 1
                    continue
                res = runner.measure(task, ref, parts)
                what = f"{res.seconds * 1e3:.3f} ms" if res.seconds is not None else res.error
                failed += res.seconds is None
                print(f"{task.name} {json.dumps(cfg['knobs'] if 'knobs' in cfg else cfg)}: {what}", flush=True)
    finally:
        runner.close()
    print(f"measuring process restarts: {runner.restarts}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
