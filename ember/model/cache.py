"""The whole-model cache: a compiled model stored under a key of its source bytes, target,
input shapes, options and ember's own sources, and loaded instead of compiling again.

Entries are saved models (:mod:`ember.model.format`) in the compile cache (:mod:`ember.cache`);
an entry that is absent, corrupt or fails to load is a miss, never an error.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from ..errors import PROTO_ERRORS as _PROTO_ERRORS
from ..errors import EmberError
from .format import load_model, save_model
from .model import Model


def source_digest() -> str:
    """A digest of ember's own sources: a compiled model cached by one version of the compiler
    is never reused by another."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        import hashlib
        from pathlib import Path

        h = hashlib.sha256()
        pkg = Path(__file__).resolve().parents[1]
        for f in sorted(pkg.rglob("*.py")):
            h.update(str(f.relative_to(pkg)).encode())
            h.update(f.read_bytes())
        _SOURCE_DIGEST = h.hexdigest()
    return _SOURCE_DIGEST


_SOURCE_DIGEST: str | None = None
#: Whole compiled models are cached only when compiling them took longer than this (a small
#: model compiles faster than it saves: its kernels are cached one by one anyway).
MODEL_CACHE_MIN_SECONDS = 1.0


def model_cache_key(model: Any, target: str, input_shapes: Any, fuse: bool, precision: str = "float32") -> str | None:
    """The cache key of a compiled model, or None when the model cannot be keyed (a ModelProto or
    bytes whose weights live in external files, an unreadable path)."""
    import hashlib
    from pathlib import Path

    from .. import cache
    from ..target import Target

    try:
        import onnx
    except ImportError:
        return None
    base: Path | None = None
    try:
        if isinstance(model, (str, os.PathLike)):
            data = Path(model).read_bytes()
            base = Path(model).resolve().parent
        elif isinstance(model, (bytes, bytearray)):
            data = bytes(model)
        elif hasattr(model, "SerializeToString"):
            data = model.SerializeToString()
        else:
            return None
        proto = onnx.ModelProto.FromString(data) if base is not None else None
    except (OSError, ValueError, TypeError, AttributeError, RuntimeError):
        return None
    except _PROTO_ERRORS:  # garbage: not keyed here, the import reports it
        return None
    parts = [hashlib.sha256(data).hexdigest()]
    locations: set[str] = set()
    if proto is not None:
        for t in proto.graph.initializer:
            for entry in t.external_data:
                if entry.key == "location":
                    locations.add(entry.value)
    elif b"external_data" in data or b"location" in data:
        return None  # weights may live in files we cannot find without a path
    for loc in sorted(locations):
        try:
            parts.append(loc + ":" + hashlib.sha256((base / loc).read_bytes()).hexdigest())  # type: ignore[operator]
        except OSError:
            return None
    shapes = json.dumps({k: list(v) for k, v in (input_shapes or {}).items()}, sort_keys=True)
    return cache.cache_key("model", *parts, str(Target(target)), shapes, str(bool(fuse)), precision, source_digest())


def load_cached_model(root: Any, key: str) -> Model | None:
    """The compiled model stored under ``key``, or None (absent, corrupt, or unloadable)."""
    from .. import cache

    hit = cache.load(root, key)
    if hit is None:
        return None
    try:
        return load_model(f"model cache entry {key[:12]}", data=hit["model.ember"])
    except EmberError:
        return None


def store_cached_model(root: Any, key: str, model: Model) -> None:
    """Store ``model`` under ``key`` (best effort: a model that cannot be saved, for instance
    without a C compiler to link its kernels, is simply not cached)."""
    from .. import cache

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.ember")
        try:
            save_model(model, path, include_source=False)
            with open(path, "rb") as f:
                data = f.read()
        except (EmberError, OSError):
            return
    cache.store(root, key, {"model.ember": data}, {"kind": "model", "target": model.target})
