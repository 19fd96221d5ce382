"""Checks of a loaded model's plan against itself and its constants, before anything runs."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelFormatError


def check_plan(plan: Any, consts: dict[str, np.ndarray], path: str) -> None:
    """Raise ModelFormatError unless ``plan`` has the fields a program needs, of the right
    kinds. (Minimal check; full consistency checks of shapes, steps and storage sizes are in
    progress.)"""
    if not isinstance(plan, dict):
        raise ModelFormatError(f"{path}: the plan is not an object")
    for key, kind in (("inputs", list), ("outputs", list), ("values", dict), ("steps", list),
                      ("assign", dict), ("storages", list), ("target", str)):
        if not isinstance(plan.get(key), kind):
            raise ModelFormatError(f"{path}: the plan's {key!r} is missing or not a {kind.__name__}")
