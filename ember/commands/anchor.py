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


def ort_session(model: bytes, target: str) -> tuple[Any, str]:
    """An ONNX Runtime session of ``model`` on the device matching ``target`` (CUDA execution
    provider for ``cuda`` when this onnxruntime has it, else the CPU) and its provider's name.
    EmberError when onnxruntime is not installed."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise EmberError("--compare/--against onnxruntime needs onnxruntime: pip install onnxruntime") from exc
    providers = ["CPUExecutionProvider"]
    if target.split()[0] == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model, opts, providers=providers)
    except ort_errors() as exc:
        raise EmberError(f"onnxruntime cannot load the model: {exc}") from exc
    return sess, sess.get_providers()[0]


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
