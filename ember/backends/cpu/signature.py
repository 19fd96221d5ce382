"""The signatures of compiled CPU functions in a module's ``module.json``, checked as data."""

from __future__ import annotations

from typing import Any

from ...errors import ModelFormatError


def check_signatures(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``functions`` list of ``meta``, checked: each entry a dict with a name that is an
    identifier, ``params`` and ``scalars`` lists. Raises ModelFormatError naming the bad entry."""
    sigs = meta.get("functions")
    if not isinstance(sigs, list) or not sigs:
        raise ModelFormatError("the CPU module lists no functions")
    for k, s in enumerate(sigs):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str) or not s["name"].isidentifier():
            raise ModelFormatError(f"function {k} of the CPU module has no valid name")
        if not isinstance(s.get("params"), list) or not isinstance(s.get("scalars"), list):
            raise ModelFormatError(f"function {s['name']} of the CPU module has no parameter list")
    return sigs
