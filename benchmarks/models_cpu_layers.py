"""Per-layer CPU times of MobileNetV2 / EfficientNet-Lite0 (or any model of ``models_cpu.py``)
next to ONNX Runtime's, by layer kind and layer by layer.

ember's times come from ``Model.profile`` (the host clock around each kernel step), ONNX
Runtime's from its own profiler (``enable_profiling``: the ``*_kernel_time`` events), both with
the same thread count, medians over ``--repeat`` runs, measured in alternating blocks so that a
busy machine affects both alike (each ember block after ``ORT_SETTLE_S`` of idleness: ONNX
Runtime's pool threads spin for tens of milliseconds after a run, and took the second core from
the ember calls that followed them). Each layer is put in a kind from the ONNX graph (ember: the
first ``Conv`` of the step; ONNX Runtime: the node of its optimized graph): ``dw`` (depthwise),
``1x1``, ``kxk`` (other dense convolutions), ``pool``, ``gemm``, ``other``; the convolutions of
both are also paired in execution order (both run them in the graph's order) and printed side by
side. Also the whole call (best of the blocks, wall clock) of each.

Run: ``.venv/bin/python benchmarks/models_cpu_layers.py --threads 2 --models mobilenet_v2``
(``--json OUT``). The thread count is that of ember's pool: set per process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: Seconds of idleness before each block of ember calls (see :func:`measure`).
ORT_SETTLE_S = 0.3


def _conv_kind(group: int, cin: int, kshape: tuple[int, ...]) -> str:
    if group > 1 and group == cin:
        return "dw"
    if all(k == 1 for k in kshape):
        return "1x1"
    return "kxk"


def _onnx_kinds(model: Any) -> dict[str, tuple[str, str]]:
    """node name -> (kind, description) for the nodes of ONNX ``model`` (ORT's optimized graph
    or the source)."""
    shapes = {i.name: tuple(i.dims) for i in model.graph.initializer}
    out: dict[str, tuple[str, str]] = {}
    for node in model.graph.node:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type in ("Conv", "FusedConv"):
            w = shapes.get(node.input[1], ())
            group = attrs["group"].i if "group" in attrs else 1
            ks = tuple(w[2:]) if len(w) == 4 else ()
            stride = tuple(attrs["strides"].ints) if "strides" in attrs else (1, 1)
            cin = (w[1] * group) if len(w) == 4 else 0
            kind = _conv_kind(group, cin, ks)
            desc = f"{cin}->{w[0] if w else '?'} k{'x'.join(map(str, ks))} s{stride[0]}"
            out[node.name] = (kind, desc)
        elif "Pool" in node.op_type:
            out[node.name] = ("pool", node.op_type)
        elif node.op_type in ("Gemm", "MatMul", "FusedGemm"):
            out[node.name] = ("gemm", node.op_type)
        else:
            out[node.name] = ("other", node.op_type)
    return out


def measure(name: str, threads: int, repeat: int, blocks: int, stat: str = "median", batch: int = 1) -> dict[str, Any]:
    """Profile model ``name`` at ``batch`` with ember and ONNX Runtime at ``threads`` threads; per
    layer the ``stat`` (``median`` or ``min``) of its times."""
    pick = statistics.median if stat == "median" else min
    import onnx
    import onnxruntime as ort
    from models_cpu import _model

    import ember

    with tempfile.TemporaryDirectory() as tmp:
        path, feeds = _model(name, Path(tmp), batch)
        src = onnx.load(str(path))
        kinds = _onnx_kinds(src)
        model = ember.compile(path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        so.optimized_model_filepath = os.path.join(tmp, "opt.onnx")
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])  # writes the optimized graph
        ort_kinds = _onnx_kinds(onnx.load(so.optimized_model_filepath))
        so.optimized_model_filepath = ""
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

        ember_steps: dict[int, list[int]] = {}
        ember_rows: list[Any] = []
        call = {"ember": float("inf"), "ort": float("inf")}
        for _ in range(blocks):
            # ONNX Runtime's pool threads keep spinning for tens of milliseconds after a run: an
            # ember call right after one shares the cores with them (its first layers measured at
            # their one-thread time at 2 threads), so every ember block starts after a pause
            time.sleep(ORT_SETTLE_S)
            prof = model.profile(feeds, repeat=repeat, warmup=1, peaks=False)
            ember_rows = prof.steps
            for j, row in enumerate(prof.steps):
                ember_steps.setdefault(j, []).extend(row.durations)
            for _ in range(repeat + 1):
                sess.run(None, feeds)
            for key, fn in (("ember", lambda: model(**feeds)), ("ort", lambda: sess.run(None, feeds))):
                time.sleep(ORT_SETTLE_S)
                fn()
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    fn()
                    call[key] = min(call[key], time.perf_counter() - t0)
        trace = sess.end_profiling()
        with open(trace, encoding="utf-8") as f:
            events = [e for e in json.load(f) if isinstance(e, dict)]
    runs = sorted((float(e["ts"]), float(e["dur"])) for e in events if e.get("name") == "model_run")
    per_run: list[list[tuple[float, str, float]]] = [[] for _ in runs]
    for ev in events:
        nm = str(ev.get("name", ""))
        if ev.get("cat") != "Node" or not nm.endswith("_kernel_time"):
            continue
        ts = float(ev["ts"])
        for k, (t0, d) in enumerate(runs):
            if t0 <= ts <= t0 + d:
                per_run[k].append((ts, nm[: -len("_kernel_time")], float(ev["dur"])))
                break
    per_run = [sorted(r) for r in per_run if r]
    n_nodes = max(len(r) for r in per_run)
    per_run = [r for r in per_run if len(r) == n_nodes]
    ort_layers = []
    for i in range(n_nodes):
        nm = per_run[0][i][1]
        kind, desc = ort_kinds.get(nm, ("other", nm))
        ort_layers.append({"name": nm, "kind": kind, "desc": desc,
                           "us": pick(r[i][2] for r in per_run)})
    ember_layers = []
    for j, row in enumerate(ember_rows):
        conv = next((n for n in row.nodes if kinds.get(n, ("other",))[0] != "other"), None)
        kind, desc = kinds.get(conv, ("other", ",".join(row.ops[:3]))) if conv else ("other", ",".join(row.ops[:3]))
        ember_layers.append({"name": row.name, "kind": kind, "desc": desc,
                             "us": pick(ember_steps[j]) / 1e3})
    by_kind: dict[str, dict[str, float]] = {}
    for who, layers in (("ember", ember_layers), ("ort", ort_layers)):
        for lay in layers:
            d = by_kind.setdefault(lay["kind"], {"ember": 0.0, "ort": 0.0, "ember_n": 0, "ort_n": 0})
            d[who] += lay["us"]
            d[f"{who}_n"] += 1
    convs_e = [x for x in ember_layers if x["kind"] in ("dw", "1x1", "kxk")]
    convs_o = [x for x in ort_layers if x["kind"] in ("dw", "1x1", "kxk")]
    return {"model": name, "threads": threads, "batch": batch, "stat": stat,
            "call_ms": {k: round(v * 1e3, 3) for k, v in call.items()},
            "by_kind": by_kind, "ember_layers": ember_layers, "ort_layers": ort_layers,
            "paired": len(convs_e) == len(convs_o), "convs": list(zip(convs_e, convs_o))}


def report(r: dict[str, Any]) -> str:
    """A text table of :func:`measure`'s result."""
    lines = [f"{r['model']} batch {r['batch']} at {r['threads']} thread(s), {r['stat']} per layer: "
             f"call ember {r['call_ms']['ember']} ms, "
             f"ORT {r['call_ms']['ort']} ms (best, wall)"]
    te = sum(x["us"] for x in r["ember_layers"])
    to = sum(x["us"] for x in r["ort_layers"])
    lines.append(f"sum of layers: ember {te:.1f} us ({len(r['ember_layers'])} steps), ORT {to:.1f} us "
                 f"({len(r['ort_layers'])} nodes)")
    lines.append(f"{'kind':<6} {'ember us':>9} {'n':>3} {'ORT us':>9} {'n':>3} {'ratio':>6}")
    for k, d in sorted(r["by_kind"].items()):
        ratio = d["ember"] / d["ort"] if d["ort"] else float("nan")
        lines.append(f"{k:<6} {d['ember']:>9.1f} {d['ember_n']:>3} {d['ort']:>9.1f} {d['ort_n']:>3} {ratio:>6.2f}")
    if r["paired"]:
        lines.append(f"{'layer':<26} {'ember us':>9} {'ORT us':>9} {'ratio':>6}")
        for e, o in r["convs"]:
            lines.append(f"{e['kind'] + ' ' + e['desc']:<26} {e['us']:>9.1f} {o['us']:>9.1f} "
                         f"{e['us'] / o['us'] if o['us'] else float('nan'):>6.2f}")
    else:
        lines.append(f"convolutions not paired: {sum(1 for _ in r['convs'])} pairs of unequal lists")
    others = [x for x in r["ember_layers"] if x["kind"] not in ("dw", "1x1", "kxk")]
    lines.append("ember other steps: " + ", ".join(f"{x['desc']} {x['us']:.1f}" for x in others))
    oothers = [x for x in r["ort_layers"] if x["kind"] not in ("dw", "1x1", "kxk")]
    lines.append("ORT other nodes: " + ", ".join(f"{x['desc']} {x['us']:.1f}" for x in oothers))
    return "\n".join(lines)


def main() -> int:
    """Run the comparison; returns a process exit code."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="mobilenet_v2,efficientnet_lite0")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="per layer: the median of its times (default) or the least (a busy machine)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if os.environ.get("OMP_NUM_THREADS") != str(args.threads):
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # ember's pool size, read at its start
        os.execv(sys.executable, [sys.executable, *sys.argv])
    results = []
    for name in args.models.split(","):
        r = measure(name.strip(), args.threads, args.repeat, args.blocks, args.stat, args.batch)
        print(report(r), flush=True)
        results.append(r)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
