"""``ember bench MODEL --target ... [--compare onnxruntime]``: latency of a model, next to ONNX
Runtime's in the same process (calls interleaved, so both see the same machine load)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..nd import array as nd_array
from .anchor import normalised_error, onnx_bytes, ort_run, ort_session
from .common import add_measure_options, open_measured, reported


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``bench``."""
    p = sub.add_parser("bench", help="measure a model's latency (optionally next to ONNX Runtime)",
                       description="Call the model (host arrays in and out) after a warm-up and print the median "
                                   "latency and its spread; with --compare onnxruntime, ONNX Runtime's calls are "
                                   "interleaved with ember's and the ratio is printed.")
    add_measure_options(p, warmup=10, repeat=50, what="calls",
                        compare_help="also time ONNX Runtime (with NumPy arrays in and out)")
    p.add_argument("--io", choices=("host", "device"), default="host",
                   help="host (default): NumPy arrays in and out of every call, copies included; device: the "
                        "inputs placed on the model's device once and the outputs left there (run_on_device)")
    p.add_argument("--json", default=None, metavar="PATH", help="write the figures as JSON")
    p.set_defaults(func=run)


def _stats(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"median_ms": float(np.median(a)), "p10_ms": float(np.percentile(a, 10)),
            "p90_ms": float(np.percentile(a, 90)), "min_ms": float(a.min()), "calls": len(ms)}


def measure(fns: dict[str, Callable[[], Any]], warmup: int, repeat: int) -> dict[str, dict[str, float]]:
    """Milliseconds per call of each function, calls interleaved round by round."""
    for _ in range(max(0, warmup)):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(max(1, repeat)):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: _stats(v) for k, v in times.items()}


def run(args: argparse.Namespace) -> int:
    """Benchmark ``args.model``."""
    with reported("bench") as status:
        model, secs, feeds = open_measured(args, args.json)
        if args.io == "device":
            placed = {k: nd_array(v, model.device) for k, v in feeds.items()}
            fns: dict[str, Callable[[], Any]] = {"ember": lambda: model.run_on_device(placed)}
        else:
            fns = {"ember": lambda: model.run(feeds)}
        label = {"ember": f"ember ({model.target}, {args.io} arrays)"}
        agree = None
        if args.compare == "onnxruntime":
            sess, provider = ort_session(onnx_bytes(args.model, model), model.target)
            fns["onnxruntime"] = lambda: sess.run(None, feeds)  # checked by ort_run below
            label["onnxruntime"] = f"onnxruntime ({provider}, host arrays)"
            ours, theirs = model.run(feeds), ort_run(sess, feeds)
            agree = max((normalised_error(a, b)[0] for a, b in zip(ours, theirs)), default=0.0)
        res = measure(fns, args.warmup, args.repeat)
        print(f"ember bench: {args.model}, target {model.target}, compiled/loaded in {secs:.1f} s; "
              f"{args.warmup} warm-up + {args.repeat} timed calls each" + (", interleaved" if len(fns) > 1 else ""))
        print(f"{'runtime':<48} {'median ms':>10} {'p10':>9} {'p90':>9} {'min':>9}")
        for k, s in res.items():
            print(f"{label[k]:<48} {s['median_ms']:>10.3f} {s['p10_ms']:>9.3f} {s['p90_ms']:>9.3f} {s['min_ms']:>9.3f}")
        out: dict[str, Any] = {"model": args.model, "target": model.target, "io": args.io, "results": res}
        if "onnxruntime" in res:
            ratio = res["ember"]["median_ms"] / res["onnxruntime"]["median_ms"]
            out["ember_over_onnxruntime"] = ratio
            out["max_rel_diff"] = agree
            print(f"ember / onnxruntime (median): {ratio:.2f}x   outputs' largest difference: {agree:.2e} of the "
                  "largest value")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(out, f, indent=1)
        return 0
    return status[0]
