"""Running one ONNX operator of the library in isolation, for the operator tests: built on
placeholders, scheduled as the graph compiler would, compiled, and run with poisoned outputs."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember
from ember import te
from ember.ops.registry import OpContext, call
from ember.strategy.cpu import schedule_group


def poison(shape: list[int], dt: np.dtype) -> np.ndarray:
    """An output buffer filled with NaN (floats) or 0xAB bytes, so unwritten elements show."""
    if dt.kind == "f":
        return np.full(shape, np.nan, dt)
    return np.frombuffer(b"\xab" * (int(np.prod(shape)) * dt.itemsize), dtype=dt).reshape(shape).copy()


def run_op(
    op: str,
    arrays: list[np.ndarray | None],
    attrs: dict[str, Any] | None = None,
    consts: dict[int, np.ndarray] | None = None,
    opset: int = 23,
) -> list[np.ndarray]:
    """Build ONNX operator ``op`` on placeholders for ``arrays`` (None: omitted input; inputs in
    ``consts`` are compile-time values), compile it, run it with poisoned outputs; returns them."""
    consts = consts or {}
    names = ["" if a is None else f"in{k}" for k, a in enumerate(arrays)]
    cvals = {names[k]: v for k, v in consts.items()}
    phs = [None if a is None else te.placeholder(a.shape, str(a.dtype), name=f"in{k}") for k, a in enumerate(arrays)]
    outs = call(OpContext(op, dict(attrs or {}), names, cvals, opset, "n0"), phs)
    s = schedule_group(outs, set())
    used = {id(st.op) for st in s.stages}
    ins = [(p, a) for p, a in zip(phs, arrays) if p is not None and id(p.op) in used]
    f = ember.build(s, [p for p, _ in ins] + outs, name="op")
    res = [poison([int(d.value) for d in o.shape], np.dtype(str(o.dtype))) for o in outs]
    f(*[a for _, a in ins], *res)
    return res
