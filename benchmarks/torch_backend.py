"""The PyTorch backend: import path, per-call overhead, latency against eager and inductor.

Parts (``--parts``, comma-separated; default ``import,overhead`` on a CPU-only machine and
``import,overhead,latency`` with a GPU):

* ``import``: how a graph gets into ember, for ResNet-18 and a small BERT encoder (random
  weights): the route ember takes (Dynamo graph -> in-memory ONNX through the TorchScript
  exporter -> ``ember.compile``; seconds of each step, ONNX operators and whether ember implements
  every one) against the FX/ATen route (``torch.export`` + ``run_decompositions``: seconds, and the
  distinct ATen operators an importer would need a converter for).
* ``overhead``: what one call of a one-kernel model (MatMul + Relu, 33x64 @ 64x48) costs from
  Python, back to back (host cost per call) and synchronised after each: with ember arrays
  (``run_on_device`` on CUDA, NumPy on the CPU), with torch tensors through the backend's runner
  (``TorchRunner``: ``data_ptr`` in, ``torch.empty`` outputs, torch's current stream), through
  ``torch.compile(backend="ember")`` (Dynamo's guards added), through ``run_on_device`` with torch
  tensors (DLPack per call: the path before the backend), eager PyTorch, and the module through
  ``torch.compile`` with a backend that runs the graph eagerly (what Dynamo itself costs). On the CPU the
  functions are timed in interleaved rounds (a shared machine).
* ``latency`` (CUDA): ResNet-18, ResNet-50 (torchvision) and BERT-base (transformers, sequence
  128), batch 1, random weights, TF32 off: eager, ``torch.compile`` with inductor and with ember
  (median of synchronised calls, compile seconds, largest error against eager). Models are
  skipped once ``--budget-s`` seconds have passed.

Run: ``.venv/bin/python benchmarks/torch_backend.py [--parts ...] [--out DIR]``; writes
``torch_backend_<device>.json`` and ``.md`` to DIR (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import warnings
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (  # noqa: E402
    RESULTS,
    interleaved,
    machine,
    median_ms,
    per_call_us,
    tiny_model_onnx,
    torch_without_tf32,
    write_outputs,
)

import ember  # noqa: E402
from ember.torch_backend import ember_backend  # noqa: E402
from ember.torch_backend.export import GraphInputs, concrete, export_onnx  # noqa: E402
from ember.torch_backend.runner import TorchRunner  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch_backend"))
from torch_nets import resnet18, small_bert  # noqa: E402


def _capture(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[torch.fx.GraphModule, list[Any], float]:
    """Dynamo's graph of ``module`` on ``args`` (one graph expected), its example inputs, seconds."""
    got: list[Any] = []

    def grab(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        got.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.compile(module, backend=grab)(*args)
    return got[0][0], got[0][1], time.perf_counter() - t0


def import_paths() -> list[dict[str, Any]]:
    """The ONNX route and the FX/ATen route on ResNet-18 and a small BERT (see the module doc)."""
    import onnx

    from ember.frontend.validate import op_key
    from ember.ops.registry import lookup

    rows = []
    bert = small_bert(hidden=128, layers=2, vocab=1000)
    torch.manual_seed(0)
    cases = [("resnet18", resnet18()[0], (torch.randn(1, 3, 224, 224),)),
             ("bert_small", bert, (torch.randint(0, 1000, (1, 32)), torch.ones(1, 32, dtype=torch.int64)))]
    for name, module, args in cases:
        gm, ex, capture_s = _capture(module, args)
        kinds = GraphInputs.of(gm, ex).kinds
        t0 = time.perf_counter()
        data, _ = export_onnx(gm, kinds, [concrete(a) for a in ex])
        export_s = time.perf_counter() - t0
        proto = onnx.load_from_string(data)
        ops = collections.Counter(op_key(n) for n in proto.graph.node)
        missing = sorted(o for o in ops if lookup(o) is None)
        t0 = time.perf_counter()
        ember.compile(data, use_cache=False)
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(module, args)
            export_fx_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            ep = ep.run_decompositions()
        decomp_s = time.perf_counter() - t0
        aten = sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"})
        rows.append({
            "model": name,
            "onnx_route": {"dynamo_capture_s": round(capture_s, 3), "onnx_export_s": round(export_s, 3),
                           "ember_compile_s_cold": round(compile_s, 2), "onnx_ops": dict(ops),
                           "ops_ember_lacks": missing, "compiles_whole": not missing},
            "fx_aten_route": {"torch_export_s": round(export_fx_s, 3), "run_decompositions_s": round(decomp_s, 3),
                              "distinct_aten_ops": len(aten), "aten_ops": aten,
                              "aten_ops_ember_converts_today": 0},
        })
        print(f"{name}: capture {capture_s:.2f} s, ONNX export {export_s:.2f} s, ember compile {compile_s:.1f} s, "
              f"{sum(ops.values())} ONNX nodes ({len(ops)} types, {len(missing)} missing); torch.export "
              f"{export_fx_s:.2f} s + decompositions {decomp_s:.2f} s, {len(aten)} ATen ops")
    return rows


def _tiny(target: str) -> tuple[Any, np.ndarray, np.ndarray]:
    """The one-kernel model compiled for ``target``, a random input and its weight."""
    onnx_bytes, w = tiny_model_onnx()
    x = np.random.default_rng(1).standard_normal((33, 64)).astype(np.float32)
    return ember.compile(onnx_bytes, target=target, use_cache=False), x, w


def _per_call_us(fn: Any, sync: Any, calls: int = 3000, rounds: int = 5) -> float:
    """µs per call: best of ``rounds`` rounds of ``calls`` back-to-back calls and one ``sync``."""
    return per_call_us(fn, calls, sync, rounds=rounds)


def overhead(cuda: bool) -> dict[str, Any]:
    """Per-call costs of the one-kernel model (see the module doc), µs."""
    m, xh, w = _tiny("cuda" if cuda else "llvm")
    dev = torch.device("cuda" if cuda else "cpu")
    xt = torch.from_numpy(xh).to(dev)
    wt = torch.from_numpy(w).to(dev)
    runner = TorchRunner(m)
    lin = torch.nn.Linear(64, 48, bias=False).to(dev).eval()
    lin.weight.data.copy_(wt.t())
    net = torch.nn.Sequential(lin, torch.nn.ReLU()).eval()
    with torch.no_grad():
        compiled = torch.compile(net, backend=ember_backend)
        compiled(xt)
        # Dynamo's own cost: the same module through torch.compile with a backend that runs the
        # captured graph eagerly.
        dynamo_eager = torch.compile(net, backend=lambda gm, example_inputs: gm.forward)
        dynamo_eager(xt)
    want = torch.relu(xt @ wt)
    for got in (runner([xt])[0], compiled(xt)):
        assert float((got - want).abs().max()) < 1e-4 * float(want.abs().max())
    if cuda:
        xe = ember.nd.array(xh, ember.cuda(0))
        fns = {
            "ember_arrays_us": lambda: m.run_on_device(xe),
            "torch_runner_us": lambda: runner([xt]),
            "torch_compile_ember_us": lambda: compiled(xt),
            "torch_via_dlpack_run_on_device_us": lambda: m.run_on_device(xt),
            "torch_eager_us": lambda: torch.relu(xt @ wt),
            "torch_compile_eager_backend_us": lambda: dynamo_eager(xt),
        }
        sync = torch.cuda.synchronize
        with torch.no_grad():
            out = {k: round(_per_call_us(f, sync), 2) for k, f in fns.items()}
            synced = {k.replace("_us", "_synced_us"): round(_per_call_us(lambda f=f: (f(), sync()), sync, 1000), 2)
                      for k, f in fns.items()}
        out.update(synced)
        out["timing"] = "best of 5 rounds of 3000 back-to-back calls then one synchronisation (µs per call); " \
                        "*_synced_us: a synchronisation after every call"
    else:
        fns = {
            "ember_arrays_us": lambda: m(xh),
            "torch_runner_us": lambda: runner([xt]),
            "torch_compile_ember_us": lambda: compiled(xt),
            "torch_eager_us": lambda: torch.relu(xt @ wt),
            "torch_compile_eager_backend_us": lambda: dynamo_eager(xt),
        }
        with torch.no_grad():
            best = interleaved(fns, rounds=7, min_time=0.05, settle=0.05)
        out = {k: round(v * 1e6, 2) for k, v in best.items()}
        out["timing"] = "best of 7 interleaved rounds (shared machine: compare ratios)"
    out["torch_runner_over_ember_arrays"] = round(out["torch_runner_us"] / out["ember_arrays_us"], 3)
    out["torch_compile_over_ember_arrays"] = round(out["torch_compile_ember_us"] / out["ember_arrays_us"], 3)
    print("overhead:", out)
    return out


def _bert_base() -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    return transformers.BertModel(transformers.BertConfig()).eval()


def latency(budget_s: float) -> list[dict[str, Any]]:
    """ResNet-18/50 and BERT-base on CUDA: eager, inductor, ember (see the module doc)."""
    import torchvision

    torch_without_tf32()
    dev = torch.device("cuda")
    start = time.perf_counter()
    cases = [
        ("resnet18", lambda: torchvision.models.resnet18(weights=None).eval(), lambda: (torch.randn(1, 3, 224, 224),)),
        ("bert_base_seq128", _bert_base, lambda: (torch.randint(0, 30522, (1, 128)),)),
        ("resnet50", lambda: torchvision.models.resnet50(weights=None).eval(), lambda: (torch.randn(1, 3, 224, 224),)),
    ]
    rows = []
    sync = torch.cuda.synchronize
    for name, make, make_args in cases:
        if time.perf_counter() - start > budget_s:
            rows.append({"model": name, "skipped": f"over the {budget_s:.0f} s budget"})
            continue
        net = make().to(dev)
        args = tuple(a.to(dev) for a in make_args())
        row: dict[str, Any] = {"model": name}

        def first(out: Any) -> torch.Tensor:
            return out if isinstance(out, torch.Tensor) else out[0]

        with torch.no_grad():
            want = first(net(*args))
            row["eager_ms"] = round(median_ms(lambda net=net, args=args: net(*args), sync), 3)
            for label, backend in (("ember", ember_backend), ("inductor", "inductor")):
                if time.perf_counter() - start > budget_s:
                    row[f"{label}_ms"] = None
                    continue
                torch._dynamo.reset()
                t0 = time.perf_counter()
                c = torch.compile(net, backend=backend)
                got = first(c(*args))
                sync()
                row[f"{label}_compile_s"] = round(time.perf_counter() - t0, 1)
                row[f"{label}_ms"] = round(median_ms(lambda c=c, args=args: c(*args), sync), 3)
                row[f"{label}_max_err_vs_eager"] = float((got - want).abs().max())
        row["ember_over_eager"] = round(row["ember_ms"] / row["eager_ms"], 3) if row.get("ember_ms") else None
        if row.get("inductor_ms") and row.get("ember_ms"):
            row["ember_over_inductor"] = round(row["ember_ms"] / row["inductor_ms"], 3)
        print(row)
        rows.append(row)
    return rows


def main() -> None:
    """Run the parts asked for and write the results."""
    cuda = torch.cuda.is_available() and ember.cuda(0).exist
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="import,overhead,latency" if cuda else "import,overhead")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--budget-s", type=float, default=420.0)
    opts = ap.parse_args()
    parts = opts.parts.split(",")
    dev_name = torch.cuda.get_device_name(0) if cuda else "cpu"
    results: dict[str, Any] = {"device": dev_name, "torch": torch.__version__, "machine": machine(),
                               "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    if "import" in parts:
        results["import_paths"] = import_paths()
    if "overhead" in parts:
        results["overhead"] = overhead(cuda)
    if "latency" in parts and cuda:
        results["latency"] = latency(opts.budget_s)
    lines = [f"# torch backend on {dev_name}, torch {torch.__version__}", ""]
    if "overhead" in results:
        o = results["overhead"]
        lines += ["| call of a one-kernel model | µs per call |", "| --- | --- |"]
        lines += [f"| {k} | {v} |" for k, v in o.items() if k.endswith("_us") or "_over_" in k]
    for row in results.get("latency", []):
        lines.append(f"\n{row}")
    tag = "cpu" if not cuda else dev_name.split()[1].lower() if len(dev_name.split()) > 1 else "gpu"
    print(write_outputs(opts.out, f"torch_backend_{tag}", results, lines))


if __name__ == "__main__":
    main()
