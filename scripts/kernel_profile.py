"""Per-kernel GPU times of a compiled model, measured by CUPTI through ``torch.profiler`` (every
CUDA kernel of the process, ember's driver-API launches included; the table is
``benchmarks/gpu_kernel_profile.kernel_table``, which also compares with torch.compile): the ground
truth next to ``model.profile`` (CUDA events around each step).

    python scripts/kernel_profile.py MODEL.onnx [--iters 20] [--top 25] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def main() -> int:
    """Compile MODEL for cuda, replay it ``--iters`` times under the profiler, print per-kernel totals."""
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import onnx

    import ember

    model = ember.compile(args.model, target="cuda")
    dev = ember.cuda(0)
    feeds = {}
    m = onnx.load(args.model)
    inits = {i.name for i in m.graph.initializer}
    for i in m.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value or 1 for d in t.shape.dim]
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[i.name] = (np.ones(shape) if np.issubdtype(dt, np.integer) else np.random.rand(*shape)).astype(dt)
    dev_feeds = {k: ember.nd.array(v, dev) for k, v in feeds.items()}
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from gpu_kernel_profile import kernel_table

    table = kernel_table(lambda: model.run_on_device(**dev_feeds), dev.sync, args.iters)
    total = table["kernel_ms_per_call"] * 1e3
    rows = [(ms * 1e3, calls, name) for name, ms, calls in table["by_name"]]
    print(f"{args.model}: GPU kernel time per run {total / 1e3:.3f} ms over {len(rows)} kernels")
    for us, calls, name in rows[: args.top]:
        print(f"{us:9.1f} us {100 * us / total:5.1f}%  x{calls:<5.1f} {name[:90]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "total_us": total,
                       "kernels": [{"name": n, "us_per_run": u, "calls": c} for u, c, n in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
