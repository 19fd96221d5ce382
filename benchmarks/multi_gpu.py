"""Two GPUs from one process: one compiled ResNet-50 (fp32, batch 1; the seeded network of
``tests/models/nets.py``) placed on GPU 0 and a second compiled copy on GPU 1, each timed alone
and then both at once from two threads; and the first model moved to GPU 1 with ``model.to``.

Reports per GPU the median milliseconds per call alone and while the other GPU runs, the ratio
(1.0: running both costs neither anything), and the largest difference between the outputs of
the two GPUs and a one-GPU run (the same kernels on the same model of GPU: expected 0). Writes
``multi_gpu.json`` and ``.md`` to ``--out``. Needs two CUDA GPUs.

    python benchmarks/multi_gpu.py --out DIR [--models DIR] [--calls 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "models"))

from common import machine, model_directory, write_outputs  # noqa: E402

import ember  # noqa: E402


def _resnet(directory: Path) -> Path:
    import torch
    from nets import randomize_bn, resnet50

    path = directory / "resnet50_fp32_b1_cpu_export.onnx"
    if not path.exists():
        torch.manual_seed(0)
        net = resnet50().eval()
        randomize_bn(net)
        torch.onnx.export(net, (torch.randn(1, 3, 224, 224),), str(path), input_names=["input"],
                          output_names=["output"], opset_version=17, dynamo=False)
    return path


def _timed_calls(model: Any, feed: Any, dev: Any, calls: int, out: list[float], start: threading.Barrier | None
                 ) -> None:
    """Per-call milliseconds of ``calls`` synchronised calls into ``out``."""
    for _ in range(10):
        model.run_on_device(input=feed)
    dev.sync()
    if start is not None:
        start.wait()
    for _ in range(calls):
        t0 = time.perf_counter()
        model.run_on_device(input=feed)
        dev.sync()
        out.append((time.perf_counter() - t0) * 1e3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="multi_gpu_out")
    ap.add_argument("--models", default=None)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    from ember.runtime import cuda_driver

    n = cuda_driver.device_count()
    if n < 2:
        print(f"multi_gpu: needs two CUDA GPUs, this machine has {n}")
        return 1
    directory = model_directory(args.models, "ember-mgpu-")
    path = _resnet(directory)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")
    d0, d1 = ember.cuda(0), ember.cuda(1)
    t0 = time.perf_counter()
    m0 = ember.compile(str(path), target="cuda", device=d0)
    compile_s = time.perf_counter() - t0
    m1 = ember.compile(str(path), target="cuda", device=d1)
    ref = m0(input=x)[0]
    out1 = m1(input=x)[0]
    f0, f1 = ember.nd.array(x, d0), ember.nd.array(x, d1)
    alone: dict[int, list[float]] = {0: [], 1: []}
    _timed_calls(m0, f0, d0, args.calls, alone[0], None)
    _timed_calls(m1, f1, d1, args.calls, alone[1], None)
    both: dict[int, list[float]] = {0: [], 1: []}
    start = threading.Barrier(2)
    threads = [threading.Thread(target=_timed_calls, args=(m, f, d, args.calls, both[i], start))
               for i, (m, f, d) in enumerate(((m0, f0, d0), (m1, f1, d1)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    moved = m0.to(d1)
    out_moved = moved(input=x)[0]
    res: dict[str, Any] = {
        "devices": [d0.attributes["device_name"], d1.attributes["device_name"]], "host": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "calls": args.calls, "compile_s": round(compile_s, 1),
        "timing": "median of synchronised calls, inputs on the device; 'both': the two GPUs called at once "
                  "from two threads of one process",
        "max_abs_diff_gpu1_vs_gpu0": float(np.abs(out1 - ref).max()),
        "max_abs_diff_moved_vs_gpu0": float(np.abs(out_moved - ref).max()), "results": {}}
    lines = ["| GPU | alone ms | both at once ms | both / alone |", "| --- | ---: | ---: | ---: |"]
    for i in (0, 1):
        a, b = statistics.median(alone[i]), statistics.median(both[i])
        res["results"][f"gpu{i}"] = {"alone_ms": a, "both_ms": b, "ratio": b / a}
        lines.append(f"| {i} | {a:.3f} | {b:.3f} | {b / a:.2f} |")
    lines.append("")
    lines.append(f"outputs: GPU 1 vs GPU 0 max |diff| {res['max_abs_diff_gpu1_vs_gpu0']:.2e}; model moved to GPU 1 "
                 f"with .to() vs GPU 0 {res['max_abs_diff_moved_vs_gpu0']:.2e}")
    print("\n".join(lines))
    print(write_outputs(args.out, "multi_gpu", res, lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
