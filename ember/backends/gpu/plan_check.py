"""Checks of a GPU module's description (``module.json``) before anything uses it."""

from __future__ import annotations

from typing import Any

from ...errors import ModelFormatError


def check_gpu_meta(meta: Any, kind: str, fmt: str) -> None:
    """Raise ModelFormatError unless ``meta`` is a GPU module description of format ``fmt`` for
    ``kind`` with signatures, plans and kernel names of the right shapes."""
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ModelFormatError(f"the GPU module has format {got!r}; this ember reads {fmt}")
    if meta.get("kind") != kind:
        raise ModelFormatError(f"the GPU module was built for {meta.get('kind')!r}, not {kind!r}")
    for key in ("sigs", "plans", "kernels"):
        if not isinstance(meta.get(key), list):
            raise ModelFormatError(f"the GPU module's {key!r} is not a list")
    if len(meta["sigs"]) != len(meta["plans"]) or not meta["sigs"]:
        raise ModelFormatError("the GPU module's signatures and launch plans do not match")
    if not isinstance(meta.get("binary_format"), str):
        raise ModelFormatError("the GPU module does not say what its binary is")
