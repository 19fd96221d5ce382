"""ONNX Runtime as the anchor of ``ember bench`` and ``ember compare``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError, EmberError
from ..model.model import Model


def onnx_bytes(path: str, model: Model) -> bytes:
    """The ONNX model behind ``path``: the file itself, or the source a ``.ember`` file embeds."""
    if not path.endswith(".ember"):
        with open(path, "rb") as f:
            return f.read()
    src = model.source or {}
    data = src.get("onnx")
    if not isinstance(data, (bytes, bytearray)):
        raise ArgumentError(f"{path!r} embeds no ONNX model to compare with; give the ONNX file instead")
    return bytes(data)


def ort_session(model: bytes, target: str, profile_prefix: str | None = None) -> tuple[Any, str]:
    """An ONNX Runtime session of ``model`` on the device matching ``target`` (CUDA execution
    provider for ``cuda`` when this onnxruntime has it, else the CPU) and its provider's name;
    with ``profile_prefix``, ONNX Runtime's profiler on (its trace file starts with it).
    EmberError when onnxruntime is not installed or cannot load the model."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise EmberError("--compare/--against onnxruntime needs onnxruntime: pip install onnxruntime") from exc
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if profile_prefix is not None:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    try:
        sess = ort.InferenceSession(model, opts, providers=_providers(ort, target))
    except ort_errors() as exc:
        raise EmberError(f"onnxruntime cannot load the model: {exc}") from exc
    return sess, sess.get_providers()[0]


def _providers(ort: Any, target: str) -> list[str]:
    """ONNX Runtime's execution providers for ``target``: CUDA's first for ``cuda`` when this
    onnxruntime has it, then the CPU."""
    providers = ["CPUExecutionProvider"]
    if target.split()[0] == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    return providers


def ort_node_times(model: bytes, feeds: dict[str, Any], target: str, warmup: int, repeat: int) -> dict[str, float]:
    """ONNX Runtime's own profile of ``model``: the median microseconds per call of each node
    (by ONNX node name; a node ONNX Runtime fused others into keeps its first node's name) over
    ``repeat`` runs after ``warmup`` untimed ones, from its ``enable_profiling`` trace."""
    import json
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ember-ort-profile-") as tmp:
        sess, _ = ort_session(model, target, profile_prefix=os.path.join(tmp, "ort"))
        for _ in range(max(0, warmup) + max(1, repeat)):
            ort_run(sess, feeds)
        with open(sess.end_profiling(), encoding="utf-8") as f:
            events = [e for e in json.load(f) if isinstance(e, dict)]
    # the trace holds every run: each node's time in each timed run, then the median over runs
    runs = sorted((float(e.get("ts", 0)), float(e.get("dur", 0))) for e in events if e.get("name") == "model_run")
    timed = runs[max(0, warmup):]
    per_node: dict[str, list[float]] = {}
    for ev in events:
        name = str(ev.get("name", ""))
        if ev.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        ts = float(ev.get("ts", 0))
        if not any(t0 <= ts <= t0 + d for t0, d in timed):
            continue
        name = name[: -len("_kernel_time")]
        name = name[len("fused "):] if name.startswith("fused ") else name
        per_node.setdefault(name, []).append(float(ev.get("dur", 0)))
    return {k: float(np.median(v)) for k, v in per_node.items()}


def ort_errors() -> tuple[type[Exception], ...]:
    """The exception classes onnxruntime raises (they derive from Exception directly)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as s

    names = ("Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf", "NoSuchFile", "NotImplemented",
             "RuntimeException", "EPFail", "NoModel", "NotFound")
    return tuple(getattr(s, n) for n in names if hasattr(s, n))


def ort_run(sess: Any, feeds: dict[str, Any]) -> list[Any]:
    """``sess.run(None, feeds)``; EmberError with onnxruntime's message when it fails."""
    try:
        return sess.run(None, feeds)
    except ort_errors() as exc:
        raise EmberError(f"onnxruntime failed to run the model: {exc}") from exc


def normalised_error(ours: Any, ref: Any) -> tuple[float, float]:
    """(error, largest absolute difference) of ``ours`` against ``ref``: for floats
    ``max|ours - ref| / max|ref|`` (NaN where both are NaN counts as equal; the scale ignores
    infinities), for integers and booleans the share of elements that differ; infinite when the
    shapes differ."""
    a, b = np.asarray(ours), np.asarray(ref)
    if a.shape != b.shape:
        return float("inf"), float("inf")
    if b.size == 0:
        return 0.0, 0.0
    if b.dtype.kind in "fc":
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        both_nan = np.isnan(a64) & np.isnan(b64)
        d = np.where(both_nan, 0.0, np.abs(a64 - b64))
        d = np.where(np.isnan(d), np.inf, d)
        scale = float(np.nanmax(np.abs(np.where(np.isfinite(b64), b64, 0.0)))) or 1.0
        m = float(d.max())
        return m / scale, m
    wrong = a != b
    return float(wrong.mean()), float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())
