"""Whole models on the CPU: ember against ONNX Runtime with the same threads, batch 1.

Run: ``.venv/bin/python benchmarks/models_cpu.py`` (``--quick`` for ResNet-50 only). Needs
torch (CPU build), onnx, onnxruntime; BERT needs transformers; EfficientNet-Lite0 its two
packages (see ``ember/model_demo.py``). Writes ``benchmarks/results/models_cpu.json`` and prints
latencies, the ratio ember / ONNX Runtime (lower is better), the max relative error of the
outputs, and the compile time of ResNet-50 with the compile cache off and on. ``--cpu-time``
compares one thread each by CPU time (for a shared machine; ``models_cpu_cputime.json``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))

from common import best_of, set_threads, table, write_result  # noqa: E402


def _model(name: str, directory: Path) -> tuple[Path, dict[str, Any]]:
    import numpy as np

    rng = np.random.default_rng(0)
    if name == "bert_small":
        from nets import export_bert

        ids = rng.integers(0, 1000, (1, 32)).astype(np.int64)
        return export_bert(directory), {"input_ids": ids, "attention_mask": np.ones((1, 32), np.int64)}
    if name == "efficientnet_lite0":
        from ember import model_demo

        return model_demo.export_efficientnet_lite0(directory), {"input": model_demo.cat_image()}
    from nets import NETS, export

    return export(name, directory), {"input": rng.standard_normal(NETS[name][1]).astype(np.float32)}


def _cpu_time_best(fns: dict[str, Any], rounds: int = 15) -> dict[str, float]:
    """Best thread-CPU seconds per call of each one-thread function, calling them in turn."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.thread_time()
            fn()
            best[k] = min(best[k], time.thread_time() - t0)
    return best


def main() -> int:
    """Run the benchmark; returns a process exit code."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="ResNet-50 only")
    ap.add_argument("--threads", type=int, default=0, help="threads for both (default: all cores)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="one thread each, timed by the thread's CPU time in alternating calls (a shared, busy "
                         "machine: time spent preempted does not count); writes models_cpu_cputime.json")
    args = ap.parse_args()
    from ember.target import Target

    threads = 1 if args.cpu_time else (args.threads or Target("llvm").num_threads)
    set_threads(threads)
    import numpy as np
    import onnxruntime as ort

    import ember

    names = ["resnet50"] if args.quick else ["resnet50", "mobilenet_v2", "efficientnet_lite0", "bert_small"]
    rows, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for name in names:
            try:
                path, feeds = _model(name, directory)
            except ImportError as exc:
                print(f"{name}: skipped ({exc})")
                continue
            t0 = time.perf_counter()
            model = ember.compile(path)
            compile_s = time.perf_counter() - t0
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            if args.cpu_time:
                so.inter_op_num_threads = 1
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            errs = [
                float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))
                for a, b in zip(model(**feeds), sess.run(None, feeds))
            ]
            # Each timed in its own block (ember, then ONNX Runtime): ORT's pool threads spin after a
            # run and would steal the cores from an interleaved ember call.
            if args.cpu_time:
                best = _cpu_time_best({"ember": lambda m=model, f=feeds: m(**f),
                                       "ort": lambda s=sess, f=feeds: s.run(None, f)})
            else:
                best = {"ember": best_of(lambda m=model, f=feeds: m(**f), repeat=9)["best_s"]}
                best["ort"] = best_of(lambda s=sess, f=feeds: s.run(None, f), repeat=9)["best_s"]
            r = {
                "model": name,
                "ember_ms": round(best["ember"] * 1e3, 2),
                "ort_ms": round(best["ort"] * 1e3, 2),
                "ratio": round(best["ember"] / best["ort"], 2),
                "max_rel_err": f"{max(errs):.1e}",
                "kernels": model.num_kernels,
                "compile_s": round(compile_s, 1),
            }
            rows.append(r)
            results[name] = r
        compile_times = {}
        if "resnet50" in results and not args.cpu_time:
            path, _ = _model("resnet50", directory)
            old = os.environ.get("EMBER_CACHE_DIR")
            with tempfile.TemporaryDirectory() as cache:
                os.environ["EMBER_CACHE_DIR"] = cache  # an empty cache, then the same one filled
                t0 = time.perf_counter()
                ember.compile(path)
                compile_times["cache_off_s"] = round(time.perf_counter() - t0, 1)
                t0 = time.perf_counter()
                ember.compile(path)
                compile_times["cache_on_s"] = round(time.perf_counter() - t0, 1)
            if old is None:
                os.environ.pop("EMBER_CACHE_DIR")
            else:
                os.environ["EMBER_CACHE_DIR"] = old
    print(table(rows, ["model", "ember_ms", "ort_ms", "ratio", "max_rel_err", "kernels", "compile_s"]))
    if compile_times:
        print(
            f"ResNet-50 compile: cold cache {compile_times['cache_off_s']} s, "
            f"warm cache {compile_times['cache_on_s']} s"
        )
    out = write_result(
        "models_cpu_cputime" if args.cpu_time else "models_cpu",
        {"threads": threads, "batch": 1, "clock": "thread CPU time, alternating calls" if args.cpu_time else "wall",
         "models": results, "resnet50_compile": compile_times},
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
