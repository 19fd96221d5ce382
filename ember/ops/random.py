"""Host kernels for ONNX's random operators, in NumPy: ``RandomUniform``, ``RandomUniformLike``,
``RandomNormal``, ``RandomNormalLike``, ``Bernoulli``, ``Multinomial`` and ``Dropout`` in
training mode.

Each node draws from its own ``numpy.random.Generator`` (PCG64), made on the node's first call:
seeded with the node's ``seed`` attribute (the draws of a compiled model then repeat from one
compile to the next: call k gives the same numbers every time), or from fresh operating-system
entropy without one. Draws follow each operator's specification; they are not the ONNX
reference's draws, so the ONNX node tests of these operators, which store one particular draw,
cannot match them (docs/onnx_node_report.md). They run on the host around a model's compiled part
(:mod:`ember.host_stages`); a generator is used by one call at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import OpError
from .elemwise import ONNX_DTYPES

_lock = threading.Lock()
_FLOATS = ("float16", "float32", "float64")


def _generator(attrs: dict[str, Any]) -> np.random.Generator:
    """The node's generator (kept in its attributes under ``_generator``; made on first use)."""
    gen = attrs.get("_generator")
    if gen is None:
        seed = attrs.get("seed")
        # the float seed's bits: every seed value gives its own stream
        gen = np.random.default_rng(None if seed is None else int(np.array(float(seed)).view(np.uint64)))
        attrs["_generator"] = gen
    return gen


def _dtype(attrs: dict[str, Any], default: str, op: str, allowed: Sequence[str] = _FLOATS) -> np.dtype:
    code = attrs.get("dtype")
    name = default if code is None else ONNX_DTYPES.get(int(code), f"element type {code}")
    if name not in allowed:
        raise OpError(f"{op}: dtype {name} is not supported (use one of {', '.join(allowed)})")
    return np.dtype(name)


def _shape_attr(attrs: dict[str, Any], op: str) -> tuple[int, ...]:
    shape = attrs.get("shape")
    if shape is None or any(int(d) < 0 for d in shape):
        raise OpError(f"{op}: the shape attribute must list non-negative sizes, got {shape}")
    return tuple(int(d) for d in shape)


def _like(inputs: Sequence[np.ndarray | None]) -> np.ndarray:
    x = inputs[0]
    assert x is not None
    return np.asarray(x)


def _uniform(attrs: dict[str, Any], shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    low, high = float(attrs.get("low", 0.0)), float(attrs.get("high", 1.0))
    if not low <= high:
        raise OpError(f"RandomUniform: low ({low}) is above high ({high})")
    with _lock:
        draws = _generator(attrs).uniform(low, high, size=shape)
    # rounding to a narrower type can reach ``high``: keep the interval half-open
    out = draws.astype(dt)
    if high > low:
        out = np.where(out >= dt.type(high), np.nextafter(dt.type(high), dt.type(low)), out).astype(dt)
    return out


def _normal(attrs: dict[str, Any], shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    mean, scale = float(attrs.get("mean", 0.0)), float(attrs.get("scale", 1.0))
    with _lock:
        return _generator(attrs).normal(mean, scale, size=shape).astype(dt)


def random_uniform(attrs: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX RandomUniform: ``shape`` values from U[``low``, ``high``) of ``dtype`` (float32)."""
    return [_uniform(attrs, _shape_attr(attrs, "RandomUniform"), _dtype(attrs, "float32", "RandomUniform"))]


def random_uniform_like(attrs: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX RandomUniformLike: the input's shape, ``dtype`` or the input's."""
    x = _like(inputs)
    return [_uniform(attrs, x.shape, _dtype(attrs, str(x.dtype), "RandomUniformLike"))]


def random_normal(attrs: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX RandomNormal: ``shape`` values from N(``mean``, ``scale``²) of ``dtype`` (float32)."""
    return [_normal(attrs, _shape_attr(attrs, "RandomNormal"), _dtype(attrs, "float32", "RandomNormal"))]


def random_normal_like(attrs: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX RandomNormalLike: the input's shape, ``dtype`` or the input's."""
    x = _like(inputs)
    return [_normal(attrs, x.shape, _dtype(attrs, str(x.dtype), "RandomNormalLike"))]


def bernoulli(attrs: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Bernoulli: 1 with probability ``p`` (each input element, in [0, 1]), else 0, as
    ``dtype`` (default: the input's type)."""
    p = _like(inputs)
    if p.size and (np.nanmin(p) < 0 or np.nanmax(p) > 1 or np.isnan(p).any()):
        raise OpError("Bernoulli: every probability must lie in [0, 1]")
    dt = _dtype(attrs, str(p.dtype), "Bernoulli", _FLOATS + ("int8", "int16", "int32", "int64", "uint8", "bool"))
    with _lock:
        u = _generator(attrs).random(size=p.shape)
    return [(u < p.astype(np.float64)).astype(dt)]


def multinomial(attrs: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Multinomial: ``sample_size`` class indices per row of ``[batch, classes]``
    unnormalised log-probabilities, as ``dtype`` (int32 or int64; default int32)."""
    logits = _like(inputs).astype(np.float64)
    if logits.ndim != 2 or logits.shape[1] == 0:
        raise OpError(f"Multinomial: the input must be [batch, classes], got shape {list(logits.shape)}")
    n = int(attrs.get("sample_size", 1))
    if n < 1:
        raise OpError(f"Multinomial: sample_size={n} must be positive")
    dt = _dtype(attrs, "int32", "Multinomial", ("int32", "int64"))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
    with _lock:
        u = _generator(attrs).random(size=(logits.shape[0], n))
    idx = np.array([np.searchsorted(cdf[b], u[b], side="right") for b in range(logits.shape[0])])
    return [np.minimum(idx, logits.shape[1] - 1).astype(dt).reshape(logits.shape[0], n)]


def dropout(attrs: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Dropout (opset 12+): in training mode each element is kept with probability
    ``1 - ratio`` and scaled by ``1 / (1 - ratio)``, the mask says which were kept; otherwise (or
    with ratio 0) the data as it is and an all-true mask."""
    x = _like(inputs)
    ratio = 0.5 if len(inputs) < 2 or inputs[1] is None else float(np.asarray(inputs[1]).reshape(-1)[0])
    training = len(inputs) > 2 and inputs[2] is not None and bool(np.asarray(inputs[2]).reshape(-1)[0])
    if not 0 <= ratio < 1:
        raise OpError(f"Dropout: ratio {ratio} must lie in [0, 1)")
    if not training or ratio == 0:
        return [x.copy(), np.ones(x.shape, dtype=bool)]
    with _lock:
        mask = _generator(attrs).random(size=x.shape) >= ratio
    scale = x.dtype.type(1.0 / (1.0 - ratio))
    return [(x * mask * scale).astype(x.dtype), mask]
