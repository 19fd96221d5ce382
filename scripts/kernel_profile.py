"""Per-kernel GPU times of a compiled model, measured by CUPTI through ``torch.profiler`` (every
CUDA kernel of the process, ember's driver-API launches included): the ground truth next to
``model.profile`` (CUDA events around each step).

    python scripts/kernel_profile.py MODEL.onnx [--iters 20] [--top 25] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

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
    from torch.profiler import ProfilerActivity, profile

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
    for _ in range(5):
        model.run_on_device(**dev_feeds)
    dev.sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.iters):
            model.run_on_device(**dev_feeds)
        dev.sync()
    per: dict[str, list[float]] = defaultdict(list)
    for ev in prof.events():
        if ev.device_type.name == "CUDA" and ev.device_time_total > 0:
            per[ev.name].append(ev.device_time_total)
    rows = sorted(((sum(v) / args.iters, len(v) // args.iters, k) for k, v in per.items()), reverse=True)
    total = sum(r[0] for r in rows)
    print(f"{args.model}: GPU kernel time per run {total / 1e3:.3f} ms over {len(rows)} kernels")
    for us, calls, name in rows[: args.top]:
        print(f"{us:9.1f} us {100 * us / total:5.1f}%  x{calls:<3d} {name[:90]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "total_us": total,
                       "kernels": [{"name": n, "us_per_run": u, "calls": c} for u, c, n in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
