"""Where the GPU time of a network goes: every kernel ember launches, next to the kernels of
torch.compile ``mode="reduce-overhead"`` for the same network, measured by CUPTI through
``torch.profiler`` (it records all CUDA kernels of the process, ember's driver launches included).

For each case of :mod:`tensorcore_models` (``--only NAME``, repeatable) it prints and writes:
the wall time per call (median), the summed kernel time per call, the kernel count per call and
the kernels grouped by name (time per call, count per call), for ember and for torch. The
difference between wall time and summed kernel time is what launching costs (gaps between
kernels on the GPU).

    python benchmarks/gpu_kernel_profile.py --out DIR --models DIR --only bert_base_fp16_seq128 [--fp32]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

from common import machine, median_ms, model_directory, torch_without_tf32  # noqa: E402
from tensorcore_models import _cases  # noqa: E402

import ember  # noqa: E402


def kernel_table(fn: Any, sync: Any, calls: int = 10) -> dict[str, Any]:
    """Kernels launched by ``calls`` calls of ``fn`` (after a warm-up), as CUPTI saw them:
    ``{"kernels_per_call", "kernel_ms_per_call", "by_name": [(name, ms per call, count per call)]}``."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        sync()
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for ev in prof.events():
        if ev.device_type.name != "CUDA" or ev.device_time_total <= 0:
            continue
        if "memcpy" in ev.name.lower() or "memset" in ev.name.lower():
            key = ev.name
        else:
            key = ev.name[:90]
        total[key] += ev.device_time_total / 1e3
        count[key] += 1
    rows = sorted(((k, total[k] / calls, count[k] / calls) for k in total), key=lambda r: -r[1])
    return {"kernels_per_call": sum(count.values()) / calls, "kernel_ms_per_call": sum(total.values()) / calls,
            "by_name": [(k, round(ms, 4), c) for k, ms, c in rows]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gpu_kernel_profile_out")
    ap.add_argument("--models", default=None, help="directory for the exported ONNX files")
    ap.add_argument("--only", action="append", default=None, help="case name (repeatable)")
    ap.add_argument("--fp32", action="store_true", help="include the float32 cases")
    ap.add_argument("--no-torch", action="store_true", help="profile ember only")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    torch = torch_without_tf32()
    directory = model_directory(args.models, "ember-prof-models-")
    dev = ember.cuda(0)
    out: dict[str, Any] = {"device": dev.attributes["device_name"], "torch": torch.__version__, "host": machine(),
                           "results": {}}
    for name, net, feeds, path in _cases(directory, quick=False, with_fp32=args.fp32):
        if args.only and name not in args.only:
            continue
        model = ember.compile(str(path), target="cuda")
        host = {k: v.cpu().numpy() for k, v in feeds.items()}
        model(**host)
        dev_feeds = {k: ember.nd.array(v, dev) for k, v in host.items()}
        run = lambda m=model, f=dev_feeds: m.run_on_device(**f)  # noqa: E731
        res: dict[str, Any] = {"ember_wall_ms": median_ms(run, dev.sync), "ember": kernel_table(run, dev.sync)}
        if not args.no_torch:
            with torch.no_grad():
                ro = torch.compile(net, mode="reduce-overhead")
                call = lambda c=ro, f=feeds: c(*f.values())  # noqa: E731
                res["torch_ro_wall_ms"] = median_ms(call, torch.cuda.synchronize, warmup=5)
                res["torch_ro"] = kernel_table(call, torch.cuda.synchronize)
                torch._dynamo.reset()
        out["results"][name] = res
        for who in ("ember", "torch_ro"):
            if who not in res:
                continue
            t = res[who]
            print(f"== {name} {who}: wall {res[who + '_wall_ms']:.3f} ms, kernels {t['kernel_ms_per_call']:.3f} ms "
                  f"in {t['kernels_per_call']:.0f} launches")
            for k, ms, c in t["by_name"][: args.top]:
                print(f"   {ms:8.4f} ms  x{c:5.1f}  {k}")
        sys.stdout.flush()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "gpu_kernel_profile.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
