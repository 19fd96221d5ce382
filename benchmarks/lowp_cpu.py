"""Reduced precision and recurrent layers on the CPU: ember against ONNX Runtime, same threads.

Run: ``.venv/bin/python benchmarks/lowp_cpu.py`` (``--quick``: no ResNet-50). Needs onnx and
onnxruntime (ResNet-50 also torch, for its export). Measures, timing ember and ONNX Runtime in
alternating rounds of one process (best of the rounds):

* the recurrent stand-in of an OCR recognizer (a small CNN, a bidirectional LSTM with hidden
  size 512 over 40 steps, a classifier; ``tests/cpu/rnn_models.py``) — goal <= 1.5x ONNX Runtime;
* a 384^3 MatMul in float32, float16, bfloat16 and MatMulInteger (uint8 x int8) — goal: the
  narrow types no slower than float32 (ONNX Runtime's float32 and int8 for reference; ember's
  int8 runs on VNNI where the CPU has it, ONNX Runtime's on AMX where the CPU has that);
* ResNet-50 quantized by ``onnxruntime.quantization.quantize_static`` in QDQ and QOperator
  format (``tests/cpu/int8_models.py``, cached under ``build/``) — goal <= 1.0x ONNX Runtime.

Writes ``benchmarks/results/lowp_cpu.json``.

``--cpu-time`` (for a shared, busy machine) measures only the two int8 ResNet-50s at one thread
each, ember and ONNX Runtime called in turn and timed by the calling thread's CPU time (time
spent preempted does not count; best and median of ``--calls`` calls), and breaks both down
per layer kind: ember by ``Model.profile`` (each kernel step's fastest of the profiled runs,
the host clock around one-thread kernels), ONNX Runtime by its session profiling (each node's
fastest run). Writes ``benchmarks/results/lowp_cpu_cputime.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cpu"))

from common import interleaved, set_threads, table, write_result  # noqa: E402


def _matmul_model(dt: str, n: int) -> tuple[Any, dict[str, Any]]:
    import ml_dtypes
    import numpy as np
    from onnx import TensorProto as TP
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    if dt == "int8":
        b = rng.integers(-128, 128, (n, n), dtype=np.int8)
        inits = [nh.from_array(b, "b"), nh.from_array(np.array(3, np.uint8), "az"),
                 nh.from_array(np.array(-2, np.int8), "bz")]
        node = oh.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
        a = rng.integers(0, 256, (n, n), dtype=np.uint8)
        et, ot = TP.UINT8, TP.INT32
    else:
        npdt = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dt]
        et = {"float32": TP.FLOAT, "float16": TP.FLOAT16, "bfloat16": TP.BFLOAT16}[dt]
        ot = et
        inits = [nh.from_array(rng.standard_normal((n, n)).astype(npdt), "b")]
        node = oh.make_node("MatMul", ["a", "b"], ["y"])
        a = rng.standard_normal((n, n)).astype(npdt)
    g = oh.make_graph([node], "mm", [oh.make_tensor_value_info("a", et, [n, n])],
                      [oh.make_tensor_value_info("y", ot, [n, n])], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)])
    m.ir_version = 10
    return m, {"a": a}


def _session(model: Any, threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    src = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (list, tuple)) else out


def _cpu_time(fns: dict[str, Any], calls: int) -> dict[str, dict[str, float]]:
    """Best and median thread-CPU seconds per call of each one-thread function, calling them in
    turn ``calls`` times (after two untimed calls each)."""
    for fn in fns.values():
        fn()
        fn()
    got: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(calls):
        for k, fn in fns.items():
            t0 = time.thread_time()
            fn()
            got[k].append(time.thread_time() - t0)
    return {k: {"best_s": min(v), "median_s": statistics.median(v)} for k, v in got.items()}


def _layer_kinds(path: Path) -> dict[str, str]:
    """Each node name of the ONNX model at ``path`` -> its layer kind: ``conv KxK`` for a
    convolution (QLinearConv, or a QDQ ``Conv``), ``add`` (QLinearAdd / QDQ ``Add``), ``maxpool``,
    ``head`` (pooling, classifier), ``other``."""
    import onnx

    m = onnx.load(str(path))
    shapes = {t.name: tuple(t.dims) for t in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    kinds: dict[str, str] = {}
    for n in m.graph.node:
        op = n.op_type
        if op in ("QLinearConv", "Conv"):
            w = n.input[3] if op == "QLinearConv" else n.input[1]
            if w not in shapes and w in prod:  # QDQ: the weights behind a DequantizeLinear
                w = prod[w].input[0]
            k = shapes.get(w, (0, 0, 0, 0))
            kinds[n.name] = f"conv {k[2]}x{k[3]}" if len(k) == 4 else "conv"
        elif op in ("QLinearAdd", "Add"):
            kinds[n.name] = "add"
        elif op == "MaxPool":
            kinds[n.name] = "maxpool"
        elif op in ("QLinearGlobalAveragePool", "GlobalAveragePool", "QGemm", "Gemm", "MatMul", "Flatten"):
            kinds[n.name] = "head"
        else:
            kinds[n.name] = "other"
    return kinds


def _ember_breakdown(model: Any, feeds: dict[str, Any], kinds: dict[str, str], repeat: int) -> dict[str, Any]:
    """ember's time per layer kind: each kernel step's fastest of ``repeat`` profiled runs,
    filed under the kind of its heaviest ONNX node (a convolution with a fused residual add
    counts as ``conv KxK + add``)."""
    prof = model.profile(repeat=repeat, warmup=2, peaks=False, **feeds)
    order = ("conv", "maxpool", "head", "add", "other")
    by: dict[str, float] = {}
    steps = []
    for row in prof.steps:
        ks = [kinds.get(n, "other") for n in row.nodes] or ["other"]
        kind = min(ks, key=lambda k: next(i for i, p in enumerate(order) if k.startswith(p)))
        if kind.startswith("conv") and "add" in ks:
            kind += " + add"
        if kind == "other" and any("layout" in n for n in row.nodes):
            kind = "layout transform"
        by[kind] = by.get(kind, 0.0) + row.min_ns * 1e-6
        steps.append({"kernel": row.name, "kind": kind, "min_ms": round(row.min_ns * 1e-6, 4),
                      "nodes": row.nodes[:4]})
    return {"total_ms": round(sum(by.values()), 3), "by_kind_ms": {k: round(v, 3) for k, v in sorted(by.items())},
            "steps": steps}


def _ort_breakdown(path: Path, feeds: dict[str, Any], kinds: dict[str, str], repeat: int) -> dict[str, Any]:
    """ONNX Runtime's time per layer kind at one thread: each node's fastest of ``repeat`` runs
    of its session profiling (a node ONNX Runtime made, such as a layout transpose, counts as
    ``other``; a fused QDQ group under its convolution's name)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.enable_profiling = True
        so.profile_file_prefix = str(Path(tmp) / "ort")
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        for _ in range(repeat + 2):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    runs: dict[str, list[float]] = {}
    for ev in events:
        if ev.get("cat") != "Node" or not str(ev.get("name", "")).endswith("_kernel_time"):
            continue
        runs.setdefault(ev["name"][: -len("_kernel_time")], []).append(ev["dur"] * 1e-3)
    by: dict[str, float] = {}
    nodes = []
    for name, durs in runs.items():
        kind = kinds.get(name)
        if kind is None:
            base = next((k for k in kinds if name.startswith(k)), None)
            kind = kinds[base] if base is not None else "other"
        best = min(durs[2:] or durs)
        by[kind] = by.get(kind, 0.0) + best
        nodes.append({"node": name, "kind": kind, "min_ms": round(best, 4)})
    return {"total_ms": round(sum(by.values()), 3), "by_kind_ms": {k: round(v, 3) for k, v in sorted(by.items())},
            "nodes": nodes}


def cpu_time_main(args: Any) -> int:
    """``--cpu-time``: the int8 ResNet-50s at one thread each by thread CPU time, with the
    per-layer-kind breakdown of both (module docstring)."""
    set_threads(1)
    import numpy as np
    import onnxruntime as ort
    from int8_models import feeds as qfeeds
    from int8_models import quantized

    import ember

    results: dict[str, Any] = {}
    for fmt in args.formats.split(","):
        path, shp = quantized("resnet50", fmt)
        f = qfeeds(path, shp)
        model = ember.compile(path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        a, b = np.asarray(_first(model(**f))), _first(sess.run(None, f))
        t = _cpu_time({"ember": lambda m=model, f=f: m(**f), "ort": lambda s=sess, f=f: s.run(None, f)}, args.calls)
        r: dict[str, Any] = {
            "ember_ms": round(t["ember"]["best_s"] * 1e3, 3), "ort_ms": round(t["ort"]["best_s"] * 1e3, 3),
            "ratio": round(t["ember"]["best_s"] / t["ort"]["best_s"], 3),
            "ember_median_ms": round(t["ember"]["median_s"] * 1e3, 3),
            "ort_median_ms": round(t["ort"]["median_s"] * 1e3, 3),
            "median_ratio": round(t["ember"]["median_s"] / t["ort"]["median_s"], 3),
            "outputs_equal": bool(np.array_equal(a, b)), "max_abs_err": float(np.abs(a.astype(np.float64) - b).max()),
        }
        print(f"resnet50 int8 {fmt}: " + ", ".join(f"{k} {v}" for k, v in r.items()), flush=True)
        if args.profile:
            kinds = _layer_kinds(path)
            em = _ember_breakdown(model, f, kinds, args.profile)
            rt = _ort_breakdown(path, f, kinds, args.profile)
            r["ember_profile"], r["ort_profile"] = em, rt
            rows = [{"kind": k, "ember_ms": em["by_kind_ms"].get(k, ""), "ort_ms": rt["by_kind_ms"].get(k, "")}
                    for k in sorted(set(em["by_kind_ms"]) | set(rt["by_kind_ms"]))]
            rows.append({"kind": "total", "ember_ms": em["total_ms"], "ort_ms": rt["total_ms"]})
            print(table(rows, ["kind", "ember_ms", "ort_ms"]), flush=True)
        results[f"resnet50_int8_{fmt.lower()}"] = r
    out = write_result("lowp_cpu_cputime", {"threads": 1, "batch": 1, "cases": results, "calls": args.calls,
                                            "clock": "thread CPU time, alternating calls (best and median)"})
    print(f"wrote {out}")
    return 0


def main() -> int:
    """Run the benchmark; returns a process exit code."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="skip ResNet-50")
    ap.add_argument("--threads", type=int, default=0, help="threads for both (default: all cores)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cpu-time", action="store_true",
                    help="only the int8 ResNet-50s, one thread each, by thread CPU time in alternating calls; "
                         "writes lowp_cpu_cputime.json")
    ap.add_argument("--calls", type=int, default=30, help="--cpu-time: timed calls of each")
    ap.add_argument("--formats", default="QDQ,QOperator", help="--cpu-time: the quantization formats")
    ap.add_argument("--profile", type=int, default=0, metavar="RUNS",
                    help="--cpu-time: also break both down per layer kind over RUNS profiled runs")
    args = ap.parse_args()
    if args.cpu_time:
        return cpu_time_main(args)
    from ember.target import Target

    threads = args.threads or Target("llvm").num_threads
    set_threads(threads)
    import numpy as np
    from rnn_models import crnn_standin

    import ember

    rows: list[dict[str, Any]] = []
    results: dict[str, Any] = {}

    def record(case: str, em: Any, ref: Any, feeds: dict[str, Any], note: str = "") -> None:
        err = float(np.abs(np.asarray(_first(em(**feeds)), np.float64) - _first(ref.run(None, feeds))).max())
        t = interleaved({"ember": lambda: em(**feeds), "ort": lambda: ref.run(None, feeds)}, rounds=args.rounds)
        r = {"case": case, "ember_ms": round(t["ember"] * 1e3, 3), "ort_ms": round(t["ort"] * 1e3, 3),
             "ratio": round(t["ember"] / t["ort"], 2), "max_abs_err": f"{err:.1e}", "note": note}
        rows.append(r)
        results[case] = r
        print(r, flush=True)

    m, feeds = crnn_standin()
    record("lstm_standin", ember.compile(m), _session(m, threads), feeds, "CNN + BiLSTM(512) x 40 steps")

    mm: dict[str, Any] = {}
    for dt in ("float32", "float16", "bfloat16", "int8"):
        m, f = _matmul_model(dt, 384)
        mm[dt] = (ember.compile(m), f)
    t = interleaved({dt: (lambda e=e, f=f: e(**f)) for dt, (e, f) in mm.items()}, rounds=args.rounds)
    for dt in mm:
        r = {"case": f"matmul384_{dt}", "ember_ms": round(t[dt] * 1e3, 3), "ort_ms": "",
             "ratio": round(t[dt] / t["float32"], 2), "max_abs_err": "", "note": "ratio: / ember float32"}
        rows.append(r)
        results[r["case"]] = r
    for dt in ("float32", "int8"):
        m, f = _matmul_model(dt, 384)
        record(f"matmul384_{dt}_vs_ort", mm[dt][0], _session(m, threads), f)

    if not args.quick:
        from int8_models import feeds as qfeeds
        from int8_models import quantized

        for fmt in ("QDQ", "QOperator"):
            path, shp = quantized("resnet50", fmt)
            f = qfeeds(path, shp)
            record(f"resnet50_int8_{fmt.lower()}", ember.compile(path), _session(path, threads), f,
                   "quantize_static, per-channel int8 weights")
    print(table(rows, ["case", "ember_ms", "ort_ms", "ratio", "max_abs_err", "note"]))
    import llvmlite.binding as llvm

    int8_feats = sorted(f[1:] for f in llvm.get_host_cpu_features().flatten().split(",")
                        if f.startswith("+") and ("vnni" in f or "amx" in f))
    out = write_result("lowp_cpu", {"threads": threads, "batch": 1, "cases": results, "int8_features": int8_feats,
                                    "note": "ember and ONNX Runtime timed in alternating rounds of one process"})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
