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
"""

from __future__ import annotations

import argparse
import sys
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


def main() -> int:
    """Run the benchmark; returns a process exit code."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="skip ResNet-50")
    ap.add_argument("--threads", type=int, default=0, help="threads for both (default: all cores)")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
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
