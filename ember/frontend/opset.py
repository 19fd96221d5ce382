"""The opset version an ONNX model imports for the default (``ai.onnx``) domain."""

from __future__ import annotations

from typing import Any


def default_opset(model: Any) -> int:
    """The version ``model`` (a ``ModelProto``) imports for the default domain (``""`` or
    ``"ai.onnx"``); 1 when it imports none."""
    return max((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), default=1)
