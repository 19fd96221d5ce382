"""Whole models on the CPU: ember against ONNX Runtime with the same threads and batch.

Run: ``.venv/bin/python benchmarks/models_cpu.py`` (``--quick`` for ResNet-50 only, ``--models
mobilenet_v2,efficientnet_lite0`` for some, ``--batch 8`` for another batch size). Needs
torch (CPU build), onnx, onnxruntime; BERT needs transformers; EfficientNet-Lite0 its two
packages (see ``ember/model_demo.py``). Writes ``benchmarks/results/models_cpu.json`` and prints
latencies, the ratio ember / ONNX Runtime (lower is better), the max relative error of the
outputs, and the compile time of ResNet-50 with the compile cache off and on. ``--cpu-time``
compares one thread each by CPU time (for a shared machine; ``models_cpu_cputime.json``). A batch
other than 1 writes ``..._b<N>.json`` (the exported models' first input dimension set to N).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))

from common import best_of, set_threads, table, write_result  # noqa: E402

MODELS = ["resnet50", "mobilenet_v2", "efficientnet_lite0", "bert_small"]


def _model(name: str, directory: Path, batch: int = 1) -> tuple[Path, dict[str, Any]]:
    import numpy as np

    rng = np.random.default_rng(0)
    if name == "bert_small":
        from nets import export_bert

        ids = rng.integers(0, 1000, (batch, 32)).astype(np.int64)
        path, feeds = export_bert(directory), {"input_ids": ids, "attention_mask": np.ones((batch, 32), np.int64)}
    elif name == "efficientnet_lite0":
        from ember import model_demo

        image = model_demo.cat_image()
        path = model_demo.export_efficientnet_lite0(directory)
        feeds = {"input": np.ascontiguousarray(np.concatenate([image] * batch))}
    else:
        from nets import NETS, export

        shape = (batch, *NETS[name][1][1:])
        path, feeds = export(name, directory), {"input": rng.standard_normal(shape).astype(np.float32)}
    return (path if batch == 1 else _with_batch(path, batch)), feeds


def _with_batch(path: Path, batch: int) -> Path:
    """A copy of the ONNX model at ``path`` whose inputs' and outputs' first dimension is ``batch``
    (the models are exported at batch 1; inferred shapes of intermediates are dropped). A
    ``Reshape`` of a float tensor computed from the inputs to a constant shape starting with 1 (a
    traced ``x.view(1, -1)``) keeps its input's first dimension instead (0 in that shape)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inferred = onnx.shape_inference.infer_shapes(model)
    floats = {v.name for v in [*inferred.graph.value_info, *inferred.graph.input]
              if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    inits = {i.name for i in model.graph.initializer}
    varying = {i.name for i in model.graph.input if i.name not in inits}  # values computed from the inputs
    for node in model.graph.node:
        if any(i in varying for i in node.input):
            varying.update(node.output)
    consts = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant"}
    for node in model.graph.node:
        const = consts.get(node.input[1]) if node.op_type == "Reshape" else None
        if const is None or node.input[0] not in varying or node.input[0] not in floats:
            continue
        value = numpy_helper.to_array(const.attribute[0].t)
        if value.ndim == 1 and value.size >= 2 and value[0] == 1:
            value = value.copy()
            value[0] = 0
            const.attribute[0].t.CopyFrom(numpy_helper.from_array(value.astype(np.int64), const.attribute[0].t.name))
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].Clear()
            dims[0].dim_value = batch
    del model.graph.value_info[:]
    out = path.with_name(f"{path.stem}_b{batch}.onnx")
    onnx.save(model, str(out))
    return out


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
    ap.add_argument("--models", default="", help=f"comma-separated subset of {','.join(MODELS)}")
    ap.add_argument("--batch", type=int, default=1, help="batch size of every model's inputs (default 1)")
    ap.add_argument("--threads", type=int, default=0, help="threads for both (default: all cores)")
    ap.add_argument("--target", default="llvm",
                    help="ember's target, e.g. 'llvm -mcpu=haswell' for the AVX2 kernels on an AVX-512 machine "
                         "(ONNX Runtime keeps the host's kernels); results get the CPU name as suffix")
    ap.add_argument("--tuning-db", default=None, help="compile with this tuning records database (suffix _tuned)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="time ember and ONNX Runtime this many times each, alternating blocks with a pause "
                         "between; reports the best times and the median of the per-pair ratios")
    ap.add_argument("--cpu-time", action="store_true",
                    help="one thread each, timed by the thread's CPU time in alternating calls (a shared, busy "
                         "machine: time spent preempted does not count); writes models_cpu_cputime.json")
    args = ap.parse_args()
    names = ["resnet50"] if args.quick else MODELS
    if args.models:
        names = [n.strip() for n in args.models.split(",") if n.strip()]
        unknown = sorted(set(names) - set(MODELS))
        if unknown:
            ap.error(f"unknown models {unknown}; choose from {MODELS}")
    if args.batch < 1:
        ap.error("--batch must be at least 1")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    from ember.target import Target

    threads = 1 if args.cpu_time else (args.threads or Target("llvm").num_threads)
    set_threads(threads)
    import numpy as np
    import onnxruntime as ort

    import ember

    rows, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for name in names:
            try:
                path, feeds = _model(name, directory, args.batch)
            except ImportError as exc:
                print(f"{name}: skipped ({exc})")
                continue
            t0 = time.perf_counter()
            model = ember.compile(path, target=args.target, tuning_db=args.tuning_db)
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
            pairs = []
            for k in range(args.repeat):
                if k:
                    time.sleep(0.3)  # the other runtime's spinning threads go to sleep
                if args.cpu_time:
                    pairs.append(_cpu_time_best({"ember": lambda m=model, f=feeds: m(**f),
                                                 "ort": lambda s=sess, f=feeds: s.run(None, f)}))
                else:
                    pair = {"ember": best_of(lambda m=model, f=feeds: m(**f), repeat=9)["best_s"]}
                    time.sleep(0.3)
                    pair["ort"] = best_of(lambda s=sess, f=feeds: s.run(None, f), repeat=9)["best_s"]
                    pairs.append(pair)
            best = {k: min(p[k] for p in pairs) for k in ("ember", "ort")}
            r = {
                "model": name,
                "ember_ms": round(best["ember"] * 1e3, 2),
                "ort_ms": round(best["ort"] * 1e3, 2),
                "ratio": round(statistics.median(p["ember"] / p["ort"] for p in pairs), 2),
                "max_rel_err": f"{max(errs):.1e}",
                "kernels": model.num_kernels,
                "compile_s": round(compile_s, 1),
            }
            rows.append(r)
            results[name] = r
        compile_times = {}
        if "resnet50" in results and not args.cpu_time and args.batch == 1:
            path, _ = _model("resnet50", directory)
            old = os.environ.get("EMBER_CACHE_DIR")
            with tempfile.TemporaryDirectory() as cache:
                os.environ["EMBER_CACHE_DIR"] = cache  # an empty cache, then the same one filled
                t0 = time.perf_counter()
                ember.compile(path, target=args.target)
                compile_times["cache_off_s"] = round(time.perf_counter() - t0, 1)
                t0 = time.perf_counter()
                ember.compile(path, target=args.target)
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
    suffix = "" if args.batch == 1 else f"_b{args.batch}"
    if args.target.strip() != "llvm":
        suffix += f"_{Target(args.target).mcpu}"
    if args.tuning_db:
        suffix += "_tuned"
    out = write_result(
        ("models_cpu_cputime" if args.cpu_time else "models_cpu") + suffix,
        {"threads": threads, "batch": args.batch, "target": args.target, "tuning_db": bool(args.tuning_db),
         "repeat": args.repeat,
         "clock": "thread CPU time, alternating calls" if args.cpu_time else "wall",
         "models": results, "resnet50_compile": compile_times},
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
