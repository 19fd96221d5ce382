"""Symbolic batch: one compiled ResNet-50 (batch dimension ``batch``) run at batch 1 and batch 8,
against the fixed-shape builds of the same ONNX file (``input_shapes=``), on the CPU and on CUDA.

The dynamic model and the fixed builds are timed interleaved in the same process (alternating
rounds, each preceded by a short idle pause), so machine noise affects them alike; the figure of
merit is the ratio dynamic / fixed per batch size (the goal: <= 1.1), reported as the median of
the per-round ratios (robust to a burst of load in one round) next to the best times. Also
reported: each batch's output against ONNX Runtime, the compile time of a new shape bucket with an
empty cache and on a repeat (a fresh model, the same bucket: the compile cache answers), and the
per-call cost of the variant lookup on a tiny graph (where it is not hidden by the network's run
time). On the CPU it also times the alternative design, kernels whose batch extent stays symbolic
(``te.var``), against the same kernels built for a constant extent, with the CPU strategy's own
schedules (a ResNet-style bias + ReLU, and a row sum over a fixed axis), both checked against
NumPy.

    python benchmarks/dynamic_shapes.py                      # CPU -> benchmarks/results/dynamic_shapes_llvm.json
    python benchmarks/dynamic_shapes.py --target cuda --out gpu_check_out
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))

from common import interleaved, machine, table, write_outputs  # noqa: E402

import ember  # noqa: E402

BATCHES = (1, 8)


def export_dynamic_resnet50(directory: Path) -> Path:
    """ResNet-50 (torchvision, seeded random weights as ``tests/models/nets.py``) exported with
    its batch dimension symbolic (``batch``)."""
    import torch
    from nets import NETS, randomize_bn

    path = directory / "resnet50_dynamic_batch.onnx"
    if path.exists():
        return path
    make, shape = NETS["resnet50"]
    torch.manual_seed(0)
    net = make().eval()
    randomize_bn(net)
    tmp = path.with_suffix(".tmp")
    torch.onnx.export(net, (torch.randn(*shape),), str(tmp), input_names=["input"], output_names=["output"],
                      opset_version=17, dynamo=False,
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    os.replace(tmp, path)
    return path


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def paired(fns: dict[str, Any], rounds: int, min_time: float = 0.2, settle: float = 0.2) -> dict[str, Any]:
    """Time the functions of ``fns`` in alternating rounds (each round: every function for at
    least ``min_time`` after ``settle`` idle seconds and one untimed call); returns each one's best
    seconds per call and the median over rounds of ``time(first) / time(second)``."""
    names = list(fns)
    inner = {}
    for n, fn in fns.items():
        fn()
        inner[n] = max(1, int(min_time / max(_timed(fn), 1e-7)))
    per_round: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(rounds):
        for n in names:
            time.sleep(settle)
            fns[n]()
            t0 = time.perf_counter()
            for _ in range(inner[n]):
                fns[n]()
            per_round[n].append((time.perf_counter() - t0) / inner[n])
    ratios = sorted(a / b for a, b in zip(per_round[names[0]], per_round[names[1]]))
    return {"best": {n: min(v) for n, v in per_round.items()}, "median_ratio": ratios[len(ratios) // 2]}


def _concrete(shape: Any, n: int) -> tuple[int, ...]:
    """``shape`` (constants, or the symbolic extent) with the symbolic extent set to ``n``."""
    from ember.ir import expr as E

    return tuple(n if isinstance(d, E.Var) else int(d.value if isinstance(d, E.IntImm) else d) for d in shape)


def symbolic_kernels(rounds: int) -> list[dict[str, Any]]:
    """Kernels built with a symbolic leading extent (``te.var("n")``, the alternative to one
    variant per shape) against the same computation built for a constant extent, scheduled by
    the CPU strategy as a model's kernels are; each checked against NumPy, timed interleaved."""
    from ember import te
    from ember.ir.expr import max_expr
    from ember.strategy.base import strategy_for
    from ember.target import Target

    strategy = strategy_for(Target("llvm"))

    def bias_relu(n: Any) -> tuple[list[Any], Any]:
        x, b = te.placeholder((n, 64, 56, 56), name="X"), te.placeholder((64,), name="b")
        return [x, b], te.compute((n, 64, 56, 56), lambda i, c, h, w: max_expr(x[i, c, h, w] + b[c], 0.0), name="Y")

    def row_sum(n: Any) -> tuple[list[Any], Any]:
        x = te.placeholder((n, 1000), name="X")
        k = te.reduce_axis((0, 1000), name="k")
        return [x], te.compute((n,), lambda i: te.sum(x[i, k], axis=k), name="Y")

    rng = np.random.default_rng(0)
    rows = []
    for name, make, ref in [("bias_relu (n,64,56,56)", bias_relu, lambda x, b: np.maximum(x + b[:, None, None], 0)),
                            ("row_sum (n,1000)", row_sum, lambda x: x.sum(axis=1, dtype=np.float64))]:
        for n in BATCHES:
            fns = {}
            for kind, extent in (("symbolic", te.var("n")), ("fixed", n)):
                ins, out = make(extent)
                fns[kind] = ember.build(strategy.schedule_group([out]), [*ins, out], target="llvm", name=f"k_{kind}")
            args = [rng.standard_normal(_concrete(t.shape, n), dtype=np.float32) for t in ins]
            shape = _concrete(out.shape, n)
            outs = {k: ember.nd.array(np.full(shape, np.nan, np.float32)) for k in fns}
            nd_args = [ember.nd.array(a) for a in args]
            for k, f in fns.items():
                f(*nd_args, outs[k])
                np.testing.assert_allclose(outs[k].numpy(), ref(*args), rtol=1e-5, atol=1e-4)
            res = paired({k: (lambda f=f, a=nd_args, o=outs[k]: f(*a, o)) for k, f in fns.items()}, rounds, 0.05, 0.05)
            rows.append({"kernel": name, "n": n, "symbolic_us": round(res["best"]["symbolic"] * 1e6, 1),
                         "fixed_us": round(res["best"]["fixed"] * 1e6, 1),
                         "median_round_ratio": round(res["median_ratio"], 3)})
    return rows


def run(target: str, directory: Path, rounds: int) -> dict[str, Any]:
    """Compile, check and time; returns the result rows and notes."""
    import onnxruntime as ort

    path = export_dynamic_resnet50(directory)
    os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-dyn-cache-")  # cold cache
    rng = np.random.default_rng(0)
    xs = {b: rng.standard_normal((b, 3, 224, 224)).astype(np.float32) for b in BATCHES}
    dyn = ember.compile(str(path), target=target)
    assert dyn.inputs[0].shape[0] == "batch"
    compile_cold = {b: _timed(lambda b=b: dyn(xs[b])) for b in BATCHES}  # first call: compiles the bucket
    compile_repeat = {b: _timed(lambda b=b: ember.compile(str(path), target=target)(xs[b])) for b in BATCHES}
    fixed = {b: ember.compile(str(path), target=target, input_shapes={"input": (b, 3, 224, 224)}) for b in BATCHES}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    errs = {b: _rel_err(dyn(xs[b])[0], sess.run(None, {"input": xs[b]})[0]) for b in BATCHES}
    assert len(dyn.variants) == 2, dyn.variants

    if target == "llvm":
        feeds = xs

        def call(m: ember.Model, b: int) -> Any:
            return m(feeds[b])
    else:
        dev = ember.cuda(0)
        feeds = {b: ember.nd.array(x, dev) for b, x in xs.items()}

        def call(m: ember.Model, b: int) -> Any:
            out = m.run_on_device(feeds[b])
            dev.sync()
            return out

    rows = []
    for b in BATCHES:
        res = paired({"dynamic": lambda b=b: call(dyn, b), "fixed": lambda b=b: call(fixed[b], b)}, rounds)
        best = res["best"]
        rows.append({"batch": b, "dynamic_ms": round(best["dynamic"] * 1e3, 3),
                     "fixed_ms": round(best["fixed"] * 1e3, 3),
                     "ratio_of_best": round(best["dynamic"] / best["fixed"], 3),
                     "median_round_ratio": round(res["median_ratio"], 3),
                     "max_rel_err_vs_ort": float(f"{errs[b]:.2e}"),
                     "bucket_compile_s_cold": round(compile_cold[b], 1),
                     "bucket_compile_s_repeat": round(compile_repeat[b], 2)})
    # The lookup's own cost, on a graph small enough that it shows.
    from onnx import TensorProto, helper

    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])
    tiny = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x_info], [y_info]),
                             opset_imports=[helper.make_opsetid("", 17)])
    small = np.ones((4, 8), np.float32)
    tiny_dyn = ember.compile(tiny, target=target)
    tiny_fixed = ember.compile(tiny, target=target, input_shapes={"x": (4, 8)})
    tiny_best = interleaved({"dynamic": lambda: tiny_dyn(small), "fixed": lambda: tiny_fixed(small)},
                            rounds=rounds, min_time=0.1)
    overhead_us = (tiny_best["dynamic"] - tiny_best["fixed"]) * 1e6
    return {"rows": rows, "symbolic_kernels": symbolic_kernels(rounds) if target == "llvm" else [],
            "lookup_overhead_us": round(overhead_us, 2),
            "tiny_call_us": {k: round(v * 1e6, 2) for k, v in tiny_best.items()}}


def main() -> int:
    """Run for ``--target``; writes ``dynamic_shapes_<target>.json`` and ``.md`` to ``--out``.
    Exit code 1 when an output disagrees with ONNX Runtime (max relative error > 1e-4)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--target", default="llvm", choices=["llvm", "cuda"])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--models", default=None, help="directory for the exported ONNX file (default: a temp dir)")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
    args = ap.parse_args()
    directory = Path(args.models or os.environ.get("EMBER_MODEL_DIR") or tempfile.mkdtemp(prefix="ember-dyn-"))
    directory.mkdir(parents=True, exist_ok=True)
    res = run(args.target, directory, args.rounds)
    import onnxruntime
    import torch

    device = machine()["cpu"] if args.target == "llvm" else torch.cuda.get_device_name(0)
    meta = {"benchmark": "dynamic_shapes", "target": args.target, "device": device, "machine": machine(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "ember": ember.__version__,
            "onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
            "model": "ResNet-50 (torchvision, random weights), float32, batch dimension symbolic",
            "timing": "interleaved rounds (dynamic and fixed alternate, >= 0.2 s each); best per model and the "
                      "median of the per-round ratios; CUDA: inputs on the device, synchronised, CUDA graphs on "
                      "(the default)",
            "note": "the CPU figures taken during a session on a shared 2-core machine are noisy; the ratio "
                    "(same process, interleaved) is the figure to read"}
    lines = [table(res["rows"], list(res["rows"][0])),
             *([table(res["symbolic_kernels"], list(res["symbolic_kernels"][0]))] if res["symbolic_kernels"] else []),
             f"variant lookup: {res['lookup_overhead_us']} us per call (tiny graph: {res['tiny_call_us']})"]
    text = write_outputs(args.out, f"dynamic_shapes_{args.target}", {"meta": meta, **res}, lines)
    print(text)
    return 0 if all(r["max_rel_err_vs_ort"] <= 1e-4 for r in res["rows"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
