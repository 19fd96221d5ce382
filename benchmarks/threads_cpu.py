"""Threads under load: ember and ONNX Runtime with and without one busy background process.

Each model runs in ember and in ONNX Runtime with the same threads (all cores of this process),
first on an otherwise idle machine, then while one extra process spins on a core, alternating
the two states twice. The figure per state is the median call over about a second (under load
the typical call, not the luckiest); the ratio loaded / quiet is how much each runtime degrades.
Parallel loops in ember run on its own pool (``ember/backends/cpu/pool.py``).

Models: BERT-small (``tests/models/nets.export_bert``, needs torch and transformers) and a
6-layer MLP (64 x 512, MatMul + bias + ReLU: every layer a parallel packed GEMM).

Run: ``.venv/bin/python benchmarks/threads_cpu.py``. Writes ``benchmarks/results/threads_cpu.json``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))
from common import set_threads, table, write_result  # noqa: E402

THREADS = len(os.sched_getaffinity(0))
set_threads(THREADS)

import numpy as np  # noqa: E402

import ember  # noqa: E402


def mlp(directory: Path, rows: int = 64, width: int = 512, layers: int = 6) -> tuple[Path, dict[str, Any]]:
    """An ONNX MLP of ``layers`` x (MatMul, Add, Relu) and its input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "X"
    for k in range(layers):
        inits += [numpy_helper.from_array((rng.standard_normal((width, width)) / 20).astype(np.float32), f"W{k}"),
                  numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), f"b{k}")]
        nodes += [helper.make_node("MatMul", [cur, f"W{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"]),
                  helper.make_node("Relu", [f"a{k}"], [f"r{k}"])]
        cur = f"r{k}"
    nodes.append(helper.make_node("Identity", [cur], ["Y"]))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [rows, width])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = directory / "mlp.onnx"
    onnx.save(model, str(path))
    return path, {"X": rng.standard_normal((rows, width)).astype(np.float32)}


def bert(directory: Path) -> tuple[Path, dict[str, Any]]:
    """BERT-small at sequence 32 and its inputs."""
    from nets import export_bert

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, (1, 32)).astype(np.int64)
    return export_bert(directory), {"input_ids": ids, "attention_mask": np.ones((1, 32), np.int64)}


def median_call(fn: Callable[[], Any], seconds: float = 1.0) -> float:
    """The median seconds of ``fn`` over about ``seconds`` of calls (after one warm-up)."""
    fn()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    """Run the benchmark."""
    import onnxruntime as ort

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"mlp_64x512x6": mlp(Path(tmp))}
        try:
            cases["bert_small"] = bert(Path(tmp))
        except ImportError as exc:
            print(f"bert_small: skipped ({exc})")
        for name, (path, feeds) in cases.items():
            model = ember.compile(str(path), use_cache=False)
            so = ort.SessionOptions()
            so.intra_op_num_threads = THREADS
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            runs = {"ember": lambda m=model, f=feeds: m(**f), "onnxruntime": lambda s=sess, f=feeds: s.run(None, f)}
            seen: dict[tuple[str, bool], list[float]] = {}
            for loaded in (False, True, False, True):
                busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if loaded else None
                try:
                    time.sleep(0.3)
                    for runtime, fn in runs.items():
                        time.sleep(0.2)
                        seen.setdefault((runtime, loaded), []).append(median_call(fn))
                finally:
                    if busy is not None:
                        busy.kill()
                        busy.wait()
            for runtime in runs:
                quiet, loaded_t = min(seen[(runtime, False)]), min(seen[(runtime, True)])
                rows.append({"model": name, "runtime": runtime, "quiet_ms": round(quiet * 1e3, 3),
                             "one_busy_process_ms": round(loaded_t * 1e3, 3), "slowdown": round(loaded_t / quiet, 2)})
                print(table(rows[-1:], list(rows[-1])), flush=True)
    print()
    print(table(rows, list(rows[0])))
    path = write_result("threads_cpu", {"threads": THREADS, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
