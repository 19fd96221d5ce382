"""Auto-tuning on an NVIDIA GPU: fp32 SGEMM 4096^3 tuned against cuBLAS, ResNet-50's kernels tuned.

1. **SGEMM.** An ONNX ``MatMul`` of a ``[n, n]`` input by a constant ``[n, n]`` weight (inference:
   ember packs the weight at compile time) is tuned with ``ember.tune`` for ``--sgemm-trials``
   trials, then compiled with and without the records; both are timed with the input on the
   device (``run_on_device``, CUDA graphs), next to ``torch.mm`` (cuBLAS, TF32 off), each the median
   of synchronised calls, in alternating rounds. Outputs are checked against torch (relative error).
2. **ResNet-50** (batch 1, fp32, the seeded export of ``tests/models/nets.py``) and **BERT-base**
   (sequence 128, batch 1, fp32, seeded random weights): their distinct tunable kernels are tuned
   for ``--resnet-budget`` / ``--bert-budget`` (or that many trials; 0 trials only times the
   records already in the database); each model is compiled with and without the records and timed
   next to torch eager and ``torch.compile(mode="reduce-overhead")`` (CUDA graphs).

The records database (``--db``) is resumable: a later run with the same file goes on from it (the
trial counts include earlier runs). Writes ``tune_gpu.json`` and ``tune_gpu.md`` to ``--out``.

    python benchmarks/tune_gpu.py --out benchmarks/results --db /tmp/tune_gpu.db
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))

from common import machine, median_ms, torch_without_tf32, write_outputs  # noqa: E402
from tune_cpu import gemm_model as sgemm_model  # noqa: E402  (y = x @ w, w a constant)

import ember  # noqa: E402


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def _alternating(fns: dict[str, Any], sync: Any, rounds: int = 3, iters: int = 30) -> dict[str, float]:
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            best[k] = min(best[k], median_ms(fn, sync, warmup=5, iters=iters))
    return best


def tune_summary(result: Any) -> dict[str, Any]:
    """The JSON form of a TuneResult."""
    return {
        "new_trials": result.new_trials, "tuning_s": round(result.elapsed, 1), "interrupted": result.interrupted,
        "trials_per_min": round(result.new_trials / max(result.elapsed, 1e-9) * 60, 1), "notes": result.notes,
        "estimated_ms": None if result.latency is None else round(result.latency * 1e3, 4),
        "estimated_default_ms": None if result.default_latency is None else round(result.default_latency * 1e3, 4),
        "tasks": [{"name": t.name, "weight": t.weight, "trials": t.trials, "invalid": t.invalid,
                   "default_ms": t.default_seconds and round(t.default_seconds * 1e3, 4),
                   "best_ms": t.best_seconds and round(t.best_seconds * 1e3, 4), "gflops": round(t.gflops, 1),
                   "best_config": t.best_config} for t in result.tasks],
    }


def bench_sgemm(n: int, trials: int, db: str, budget: str | None) -> dict[str, Any]:
    """Tune and time the SGEMM (see the module docstring)."""
    import torch

    model = sgemm_model(n)
    result = ember.tune(model, "cuda", trials=trials, db=db, time_budget=budget)
    print(result, flush=True)
    dev = ember.cuda(0)
    tuned = ember.compile(model, "cuda", tuning_db=db)
    plain = ember.compile(model, "cuda", tuning_db=False)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, n)).astype("float32")
    xd = ember.nd.array(x, dev)
    xt = torch.from_numpy(x).cuda()
    wt = torch.from_numpy(np.random.default_rng(0).standard_normal((n, n)).astype("float32")).cuda()
    ref = (xt.double() @ wt.double()).cpu().numpy()
    errs = {"tuned": _rel(tuned(x)[0], ref), "default": _rel(plain(x)[0], ref)}
    ms = _alternating({"tuned": lambda: tuned.run_on_device(x=xd), "default": lambda: plain.run_on_device(x=xd),
                       "cublas": lambda: torch.mm(xt, wt)}, dev.sync)
    tf = {k: 2 * n**3 / (v * 1e-3) / 1e12 for k, v in ms.items()}
    return {"n": n, "ms": {k: round(v, 4) for k, v in ms.items()}, "TFLOPs": {k: round(v, 2) for k, v in tf.items()},
            "tuned_vs_cublas": round(ms["cublas"] / ms["tuned"], 3),
            "default_vs_cublas": round(ms["cublas"] / ms["default"], 3), "rel_err_vs_fp64": errs,
            "tuning": tune_summary(result)}


def _network(name: str, models: Path) -> tuple[Path, Any, dict[str, Any]]:
    """The ONNX file, the torch module (on the GPU, fp32, eval) and the torch inputs of ``name``:
    ``resnet50`` (batch 1, the seeded export of ``tests/models/nets.py``) or ``bert`` (BERT-base,
    12 layers, random weights seeded, sequence 128, batch 1)."""
    import torch

    if name == "resnet50":
        from nets import NETS, export, randomize_bn

        path = export("resnet50", models)
        make, shape = NETS["resnet50"]
        torch.manual_seed(0)
        net = make().eval()
        randomize_bn(net)
        x = np.random.default_rng(0).standard_normal(shape).astype("float32")
        return path, net.cuda(), {"input": torch.from_numpy(x).cuda()}
    from tensorcore_models import _export, bert_wrapper
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(num_hidden_layers=12)
    net = bert_wrapper(BertModel(cfg).eval().cuda())
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (1, 128), generator=g).cuda()
    feeds = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    path = models / "bert_base_fp32_seeded.onnx"
    if not path.exists():
        _export(net, tuple(feeds.values()), path, list(feeds), ["last_hidden_state"])
    return path, net, feeds


def bench_network(name: str, trials: int, db: str, budget: str | None, models: Path,
                  compile_modes: tuple[str, ...] = ("reduce-overhead",)) -> dict[str, Any]:
    """Tune a network's kernels (``trials`` or ``budget``; ``trials=0`` only times the records
    already in ``db``) and time it tuned, untuned, in torch eager and in ``torch.compile`` with
    each of ``compile_modes`` (``"reduce-overhead"``: CUDA graphs; ``"max-autotune"``: Triton
    GEMM autotuning and CUDA graphs; its compile time is recorded too), TF32 off everywhere."""
    import torch

    path, net, feeds = _network(name, models)
    out: dict[str, Any] = {}
    if trials > 0:
        result = ember.tune(str(path), "cuda", trials=trials, db=db, time_budget=budget)
        print(result, flush=True)
        out["tuning"] = tune_summary(result)
    dev = ember.cuda(0)
    t0 = time.perf_counter()
    tuned = ember.compile(path, "cuda", tuning_db=db)
    compile_s = time.perf_counter() - t0
    plain = ember.compile(path, "cuda", tuning_db=False)
    host = {k: v.cpu().numpy() for k, v in feeds.items()}
    dev_feeds = {k: ember.nd.array(v, dev) for k, v in host.items()}
    fns = {"tuned": lambda: tuned.run_on_device(**dev_feeds), "default": lambda: plain.run_on_device(**dev_feeds)}
    with torch.no_grad():
        ref = net(*feeds.values()).double().cpu().numpy()
        out["rel_err_vs_torch"] = {"tuned": _rel(tuned(**host)[0], ref), "default": _rel(plain(**host)[0], ref)}
        fns["torch_eager"] = lambda: net(*feeds.values())
        for mode in compile_modes:
            key = "torch_" + mode.replace("-", "_")
            t1 = time.perf_counter()
            compiled = torch.compile(net, mode=mode)
            for _ in range(3):
                compiled(*feeds.values())
            out[f"{key}_compile_s"] = round(time.perf_counter() - t1, 1)
            fns[key] = lambda compiled=compiled: compiled(*feeds.values())
        if "torch_reduce_overhead_compile_s" in out:  # the name earlier result files used
            out["torch_compile_s"] = out["torch_reduce_overhead_compile_s"]
        ms = _alternating(fns, dev.sync)
    out.update({"ms": {k: round(v, 4) for k, v in ms.items()},
                "tuned_vs_default": round(ms["default"] / ms["tuned"], 3),
                "tuned_vs_torch_eager": round(ms["torch_eager"] / ms["tuned"], 3),
                "compile_with_records_s": round(compile_s, 1)})
    for mode in compile_modes:
        short = mode.replace("-", "_")
        out[f"tuned_over_{short}"] = round(ms["tuned"] / ms["torch_" + short], 3)
        out[f"default_over_{short}"] = round(ms["default"] / ms["torch_" + short], 3)
    if compile_modes:
        torch._dynamo.reset()
    return out


def main() -> int:
    """Run the benchmark; returns a process exit code."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--db", default="/tmp/tune_gpu.db", help="the records database (resumable)")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--sgemm-trials", type=int, default=64)
    ap.add_argument("--sgemm-budget", default=None)
    ap.add_argument("--resnet-trials", type=int, default=1000, help="0: only time the records in --db")
    ap.add_argument("--resnet-budget", default="10m")
    ap.add_argument("--bert-trials", type=int, default=1000, help="0: only time the records in --db")
    ap.add_argument("--bert-budget", default="5m")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: sgemm,resnet,bert")
    ap.add_argument("--no-compile", action="store_true", help="do not time torch.compile at all")
    ap.add_argument("--compile-modes", default="reduce-overhead",
                    help="comma-separated torch.compile modes to time (reduce-overhead, max-autotune)")
    ap.add_argument("--models", default="/tmp/ember_models")
    args = ap.parse_args()
    import torch

    torch_without_tf32()
    key = ember.tune.target_key(ember.backends.backend_for("cuda").resolve(ember.Target("cuda")))
    results: dict[str, Any] = {"device": key.device, "arch": key.arch, "torch": torch.__version__, "host": machine(),
                               "cost_model": "xgboost" if _has("xgboost") else "numpy",
                               "timing": "min over 3 alternating rounds of the median of 30 synchronised calls, "
                                         "inputs on the device; TF32 off"}
    skip = set(args.skip.split(","))
    ok = True
    if "sgemm" not in skip:
        results["sgemm"] = bench_sgemm(args.n, args.sgemm_trials, args.db, args.sgemm_budget)
        ok &= max(results["sgemm"]["rel_err_vs_fp64"].values()) < 1e-4
    models = Path(args.models)
    models.mkdir(parents=True, exist_ok=True)
    for part, key_, trials, budget in (("resnet", "resnet50", args.resnet_trials, args.resnet_budget),
                                       ("bert", "bert", args.bert_trials, args.bert_budget)):
        if part in skip:
            continue
        modes = () if args.no_compile else tuple(m for m in args.compile_modes.split(",") if m)
        results[key_] = bench_network(key_, trials, args.db, budget, models, modes)
        ok &= max(results[key_]["rel_err_vs_torch"].values()) < 1e-3
        print(key_, results[key_], flush=True)
    lines = [f"# Auto-tuning on {key.device} ({key.arch})", ""]
    if "sgemm" in results:
        s = results["sgemm"]
        lines += [f"SGEMM {s['n']}^3 fp32: tuned {s['ms']['tuned']} ms ({s['TFLOPs']['tuned']} TFLOP/s), "
                  f"default {s['ms']['default']} ms, cuBLAS {s['ms']['cublas']} ms: tuned = {s['tuned_vs_cublas']}x "
                  f"cuBLAS; {s['tuning']['new_trials']} trials in {s['tuning']['tuning_s']} s", ""]
    for key_, title in (("resnet50", "ResNet-50 b1 fp32"), ("bert", "BERT-base seq 128 b1 fp32")):
        if key_ not in results:
            continue
        r = results[key_]
        ro = r["ms"].get("torch_reduce_overhead")
        tuning = r.get("tuning")
        lines += [f"{title}: tuned {r['ms']['tuned']} ms, default {r['ms']['default']} ms, torch eager "
                  f"{r['ms']['torch_eager']} ms" + (f", torch.compile reduce-overhead {ro} ms (tuned / it = "
                                                    f"{r['tuned_over_reduce_overhead']})" if ro else "")
                  + (f", torch.compile max-autotune {r['ms']['torch_max_autotune']} ms (tuned / it = "
                     f"{r['tuned_over_max_autotune']}, its compile {r['torch_max_autotune_compile_s']} s)"
                     if "torch_max_autotune" in r["ms"] else "")
                  + (f"; {tuning['new_trials']} trials in {tuning['tuning_s']} s" if tuning else ""), ""]
    print(write_outputs(args.out, "tune_gpu", results, lines))
    return 0 if ok else 1


def _has(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


if __name__ == "__main__":
    sys.exit(main())
