"""Shared helpers for benchmarks: timing, machine description, JSON results and tables."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def best_of(fn: Callable[[], Any], repeat: int = 7, min_time: float = 0.2) -> dict[str, float]:
    """Run ``fn`` once to warm up, then ``repeat`` timed rounds (each long enough to measure);
    returns best and median seconds per call."""
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, int(min_time / one / repeat))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return {"best_s": min(times), "median_s": statistics.median(times)}


def interleaved(
    fns: dict[str, Callable[[], Any]], rounds: int = 9, min_time: float = 0.1, settle: float = 0.2
) -> dict[str, float]:
    """Best seconds per call of each function, timing them in alternating rounds so that a
    noisy machine (other processes, frequency changes) affects all of them alike; ``settle``
    seconds of idleness (and one untimed call) precede each function's timed block."""
    inner: dict[str, int] = {}
    for name, fn in fns.items():
        fn()
        t0 = time.perf_counter()
        fn()
        inner[name] = max(1, int(min_time / max(time.perf_counter() - t0, 1e-7)))
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            # Thread pools (OpenBLAS, OpenMP) spin for a while after their last task; let them go
            # idle so that they do not steal the cores from the next function measured.
            time.sleep(settle)
            fn()
            t0 = time.perf_counter()
            for _ in range(inner[name]):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / inner[name])
    return best


def _cpuinfo_field(name: str) -> str:
    """The first ``name`` field of ``/proc/cpuinfo``; empty where there is none (or no such file)."""
    path = Path("/proc/cpuinfo")
    lines = path.read_text().splitlines() if path.exists() else []
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.split(":")[0].strip() == name), "")


def _cpu_model_name() -> str:
    """The CPU's model name as the OS reports it (``/proc/cpuinfo``; ``platform.processor()`` else)."""
    return _cpuinfo_field("model name") or platform.processor()


def _vector_features() -> list[str]:
    """The vector and matrix extensions the CPU reports (AVX*, FMA, AMX, NEON/SVE), sorted."""
    flags = (_cpuinfo_field("flags") or _cpuinfo_field("Features")).split()
    keep = ("avx", "fma", "amx", "sse4", "f16c", "asimd", "sve", "neon")
    return sorted(f for f in flags if f.startswith(keep))


def machine() -> dict[str, Any]:
    """A description of the machine the benchmark ran on."""
    from ember.target import Target

    t = Target("llvm")
    return {
        "cpu": t.mcpu,
        "cpu_model": _cpu_model_name(),
        "vector_features": _vector_features(),
        "vector_bits": t.vector_bits,
        "threads": t.num_threads,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``benchmarks/results/<name>.json``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A plain-text table of ``rows``."""
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[k]) for row in cells)) for k, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def set_threads(n: int) -> None:
    """Ask OpenBLAS, OpenMP and MKL for ``n`` threads (call before importing numpy)."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)


def median_ms(fn: Callable[[], Any], sync: Callable[[], Any], warmup: int = 10, iters: int = 50) -> float:
    """Median milliseconds of ``fn`` followed by ``sync`` (a device synchronisation), after
    ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def write_outputs(out_dir: str | os.PathLike[str], name: str, results: dict[str, Any], lines: list[str]) -> str:
    """Write ``results`` to ``<out_dir>/<name>.json`` and the markdown table ``lines`` to
    ``<name>.md``; returns the table."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w") as fh:
        json.dump(results, fh, indent=2)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, f"{name}.md"), "w") as fh:
        fh.write(text)
    return text



def per_call_us(fn: Callable[[], Any], calls: int, sync: Callable[[], Any] | None = None, rounds: int = 5,
                warmup: int = 200) -> float:
    """Microseconds per call of ``fn``: the best of ``rounds`` rounds of ``calls`` back-to-back
    calls, each round ending with one ``sync()`` (a device synchronisation, timed with the
    round; none when None), after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if sync:
            sync()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def tiny_model_onnx() -> tuple[bytes, Any]:
    """The one-kernel model of the per-call benchmarks (MatMul + Relu, 33x64 @ 64x48, a random
    float32 weight of seed 0) as ONNX bytes, and its weight."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    w = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32)
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Relu", ["m"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [33, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [nh.from_array(w, "w")])
    proto = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    proto.ir_version = 8
    return proto.SerializeToString(), w


def torch_without_tf32() -> Any:
    """``torch`` with TF32 off for its matrix products and convolutions (float32 comparisons with
    ember, whose default is exact float32, are then like for like)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def model_directory(path: str | None, prefix: str) -> Path:
    """The directory for exported ONNX files: ``path`` (made when missing) or a new temporary one."""
    import tempfile

    directory = Path(path or tempfile.mkdtemp(prefix=prefix))
    directory.mkdir(parents=True, exist_ok=True)
    return directory
