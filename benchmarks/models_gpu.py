"""Models on an NVIDIA GPU: ember (``target="cuda"``) next to PyTorch eager, batch 1, fp32.

For each network the same weights run in PyTorch (eager, TF32 off so both compute in fp32) and
through ember from the ONNX export; ember's outputs are checked against ONNX Runtime (CPU) first.
Latency is the median of many synchronised calls with the input already on the device (ember:
``run_on_device`` on a device array; PyTorch: a CUDA tensor), after a warm-up. ember is timed with
its launches replayed as one CUDA graph (the default, ``Model.cuda_graphs``) and with one launch per
kernel (``cuda_graphs=False``); ``saved_us_per_launch`` is the difference per kernel launch (per
node of the graph: a compiled function may launch several kernels); ``graph_replay_ms`` is the
graph's replay alone (no input/output copies, no Python), so ``ember_ms - graph_replay_ms`` is what
a call adds around it. Compile time with an empty cache is reported too. Writes ``models_gpu.json``
and a table to ``--out``.

    python benchmarks/models_gpu.py --out results/
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))

from common import machine, median_ms, torch_without_tf32  # noqa: E402

import ember  # noqa: E402


def _median_ms(fn: Any, sync: Any, warmup: int = 10, iters: int = 50) -> float:
    return median_ms(fn, sync, warmup, iters)


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def _networks(directory: Path) -> list[tuple[str, Path, Any, dict[str, np.ndarray]]]:
    """(name, onnx path, torch module on the GPU or None, inputs)."""
    import torch
    from nets import NETS, export, export_bert, randomize_bn

    rng = np.random.default_rng(0)
    out = []
    for name in ("resnet50", "mobilenet_v2", "super_resolution"):
        path = export(name, directory)
        make, shape = NETS[name]
        torch.manual_seed(0)
        net = make().eval()
        randomize_bn(net)  # the same seeded weights export() used
        out.append((name, path, net, {"input": rng.standard_normal(shape).astype(np.float32)}))
    try:
        path = export_bert(directory)
        ids = rng.integers(0, 1000, (1, 32)).astype(np.int64)
        out.append(("bert_small", path, None, {"input_ids": ids, "attention_mask": np.ones_like(ids)}))
    except ImportError as exc:
        print(f"bert_small skipped: {exc}")
    try:
        from ember.model_demo import cat_image, export_efficientnet_lite0

        path = export_efficientnet_lite0(directory)
        out.append(("efficientnet_lite0", path, None, {"input": cat_image()}))
    except ImportError as exc:
        print(f"efficientnet_lite0 skipped: {exc}")
    return out


def main() -> int:
    """Run the comparison; returns a process exit code (1 when a network disagrees with ORT)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--models", default=None, help="directory for the exported ONNX files (default: a temp dir)")
    ap.add_argument("--only", default=None, help="comma-separated model names to run")
    ap.add_argument("--profile", action="store_true", help="also print the slowest kernels of each model")
    args = ap.parse_args()
    import onnxruntime as ort
    import torch

    torch_without_tf32()
    directory = Path(args.models or tempfile.mkdtemp(prefix="ember-gpu-models-"))
    dev = ember.cuda(0)
    rows = []
    ok = True
    for name, path, net, feeds in _networks(directory):
        if args.only and name not in args.only.split(","):
            continue
        cache = tempfile.mkdtemp(prefix="ember-cache-")
        os.environ["EMBER_CACHE_DIR"] = cache
        t0 = time.perf_counter()
        model = ember.compile(path, target="cuda")
        compile_s = time.perf_counter() - t0
        ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
        got = model(**feeds)
        err = max(_rel_err(g, r) for g, r in zip(got, ref))
        ok &= err <= 1e-4
        dev_feeds = {k: ember.nd.array(v, dev) for k, v in feeds.items()}
        model.cuda_graphs = False
        t_plain = _median_ms(lambda m=model, f=dev_feeds: m.run_on_device(**f), dev.sync)
        model.cuda_graphs = True
        t_ember = _median_ms(lambda m=model, f=dev_feeds: m.run_on_device(**f), dev.sync)
        got_g = model(**feeds)
        err = max(err, max(_rel_err(g, r) for g, r in zip(got_g, ref)))
        ok &= err <= 1e-4
        ctx = model.context()
        t_replay = None
        if ctx.replays > 0 and model._graph_state.failed is None:
            t_replay = _median_ms(ctx.replay, ctx.finish)
        else:
            print(f"{name}: no CUDA graph ({model._graph_state.failed})")
        if args.profile:
            prof = model.profile(*[dev_feeds[i] for i in model.input_names], repeat=5)
            total = sum(t for _, t in prof)
            print(f"{name}: {len(prof)} kernel groups, {total * 1e3:.2f} ms when synchronised one by one")
            for fname, t in sorted(prof, key=lambda p: -p[1])[:12]:
                print(f"  {t * 1e3:7.3f} ms  {fname}")
        t_torch = None
        if net is not None:
            net = net.cuda()
            xt = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
            with torch.no_grad():
                t_torch = _median_ms(lambda n=net, x=xt: n(*x.values()), torch.cuda.synchronize)
                tout = net(*xt.values()).cpu().numpy()
            print(f"{name}: torch eager vs ONNX Runtime max rel err {_rel_err(tout, ref[0]):.1e}")
        row = {
            "model": name,
            "ember_ms": round(t_ember, 3),
            "ember_no_graph_ms": round(t_plain, 3),
            "graph_speedup": round(t_plain / t_ember, 2),
            "saved_us_per_launch": round((t_plain - t_ember) * 1e3 / max(1, ctx.graph_nodes), 2),
            "graph_nodes": ctx.graph_nodes,
            "graph_replay_ms": None if t_replay is None else round(t_replay, 3),
            "torch_eager_ms": None if t_torch is None else round(t_torch, 3),
            "ratio_vs_torch": None if t_torch is None else round(t_ember / t_torch, 2),
            "max_rel_err_vs_ort": err,
            "kernels": model.num_kernels,
            "compile_s_cold_cache": round(compile_s, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
        del os.environ["EMBER_CACHE_DIR"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "batch": 1, "dtype": "float32",
            "tf32": False, "timing": "median of 50 synchronised calls after 10 warm-up calls, inputs on the device",
            "ember_ms": "kernel launches replayed as one CUDA graph (the default)",
            "ember_no_graph_ms": "one launch per kernel (cuda_graphs=False)", "host": machine()}
    (out / "models_gpu.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=1) + "\n")
    lines = ["| model | ember ms (graph) | ember ms (no graph) | graph speedup | saved µs/launch | replay alone ms | "
             "torch eager ms | ember / torch | max rel err vs ORT | kernels | compile s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['ember_ms']} | {r['ember_no_graph_ms']} | {r['graph_speedup']} | "
                     f"{r['saved_us_per_launch']} | {r['graph_replay_ms']} | {r['torch_eager_ms']} | "
                     f"{r['ratio_vs_torch']} | "
                     f"{r['max_rel_err_vs_ort']:.1e} | {r['kernels']} | {r['compile_s_cold_cache']} |")
    (out / "models_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
