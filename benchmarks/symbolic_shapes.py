"""One compile for every sequence length: a transformer encoder block (``batch`` and ``seq``
symbolic; tests/dynamic/graphs.py ``attention_block``, d=64, 4 heads, MLP 256) fed 20 distinct
sequence lengths, compiled per shape (``per_shape_only``: the variant cache) against compiled once
with symbolic extents (ember.model.symbolic), on the CPU.

Reported: compiles and total seconds for the 20 first calls, each with an empty compile cache of
its own (a fresh directory); then the per-call latency of the symbolic build against the
fixed-shape build (``input_shapes=``) at three lengths, timed interleaved in alternating rounds
(the figure of merit is the median of the per-round ratios symbolic / fixed; the goal: <= 1.1),
with the outputs checked against ONNX Runtime.

    python benchmarks/symbolic_shapes.py        # -> benchmarks/results/symbolic_shapes_llvm.{json,md}
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from common import machine, table, write_outputs  # noqa: E402
from dynamic import graphs  # noqa: E402

import ember  # noqa: E402

LENGTHS = (3, 8, 13, 19, 24, 31, 37, 45, 50, 58, 64, 71, 80, 97, 111, 128, 143, 160, 177, 200)
TIMED = (16, 77, 200)
D = 64


def _first_calls(m: Any, per_shape: bool, xs: dict[int, np.ndarray]) -> dict[str, Any]:
    """Compile (per shape, or once) and run the 20 lengths with an empty cache of its own."""
    with tempfile.TemporaryDirectory() as cache:
        os.environ["EMBER_CACHE_DIR"] = cache
        t0 = time.perf_counter()
        model = ember.compile(m)
        if per_shape:
            model._specializer.per_shape_only()
            model.max_variants = len(LENGTHS)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for n in LENGTHS:
                model(xs[n])
        total = time.perf_counter() - t0
        spec = model._specializer
        return {"mode": "per shape" if per_shape else "symbolic", "compiles": spec.compiles,
                "total_s": round(total, 2), "status": spec.symbolic_status}


def _latency(m: Any, sess: Any, rounds: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    model = ember.compile(m)
    rows = []
    for n in TIMED:
        x = rng.standard_normal((1, n, D)).astype(np.float32)
        fixed = ember.compile(m, input_shapes={"x": (1, n, D)})
        want = sess.run(None, {"x": x})[0]
        err = max(float(np.abs(model(x)[0] - want).max()), float(np.abs(fixed(x)[0] - want).max()))
        fns = {"symbolic": lambda x=x: model(x), "fixed": lambda x=x, fixed=fixed: fixed(x)}
        inner = {}
        for k, fn in fns.items():
            fn()
            t0 = time.perf_counter()
            fn()
            inner[k] = max(1, int(0.1 / max(time.perf_counter() - t0, 1e-7)))
        per: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(rounds):
            for k, fn in fns.items():
                time.sleep(0.1)
                fn()
                t0 = time.perf_counter()
                for _ in range(inner[k]):
                    fn()
                per[k].append((time.perf_counter() - t0) / inner[k])
        ratios = [a / b for a, b in zip(per["symbolic"], per["fixed"])]
        rows.append({"seq": n, "symbolic_us": round(min(per["symbolic"]) * 1e6, 1),
                     "fixed_us": round(min(per["fixed"]) * 1e6, 1),
                     "median_ratio": round(statistics.median(ratios), 3),
                     "best_ratio": round(min(per["symbolic"]) / min(per["fixed"]), 3),
                     "max_err_vs_ort": f"{err:.1e}"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    m = graphs.attention_block(rng, d=D, heads=4, ffn=256)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    xs = {n: rng.standard_normal((1, n, D)).astype(np.float32) for n in LENGTHS}
    compiles = [_first_calls(m, True, xs), _first_calls(m, False, xs)]
    with tempfile.TemporaryDirectory() as cache:
        os.environ["EMBER_CACHE_DIR"] = cache
        rows = _latency(m, sess, args.rounds, rng)
    results = {"machine": machine(), "lengths": list(LENGTHS), "compiles": compiles, "latency": rows}
    lines = ["# symbolic shapes (CPU)", "", "20 distinct sequence lengths, empty cache:", "", "```",
             table(compiles, ["mode", "compiles", "total_s", "status"]), "```", "",
             "per-call latency, symbolic build / fixed-shape build:", "", "```",
             table(rows, list(rows[0])), "```"]
    print(write_outputs(args.out, "symbolic_shapes_llvm", results, lines))


if __name__ == "__main__":
    main()
