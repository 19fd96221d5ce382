"""``ember explain``: compile a model with every pass dumped and timed, and say what happened.

:func:`explain` compiles under a :class:`~ember.transform.PassContext` with ``dump_dir`` and
``timing`` on, so the graph after each graph pass, the fusion groups and every kernel's loop IR
after each loop pass land in ``dump_dir`` as numbered text files, and returns a report: the
passes with their times, the kernels, the memory plan and where the dumps are.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .driver import compile as compile_model
from .model.model import Model
from .transform import PassContext


@dataclass
class Explanation:
    """What :func:`explain` found: the compiled model, the pass context that ran (timings, dump
    file names), and the directory holding the dumps."""

    model: Model
    context: PassContext
    dump_dir: str

    def report(self) -> str:
        """A text report: passes by total time, kernels, memory plan, dump location."""
        totals: dict[str, list[float]] = {}
        for name, secs in self.context.timings:
            totals.setdefault(name, []).append(secs)
        lines = [f"ember explain: target {self.model.target}", "", "passes (runs, total ms):"]
        for name, ts in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
            lines.append(f"  {name:<28} {len(ts):>5}  {1e3 * sum(ts):10.1f}")
        if self.model.is_static:
            plan = self.model.plan
            kernels = [s for s in plan["steps"] if s["kind"] == "kernel"]
            views = len(plan["steps"]) - len(kernels)
            lines += ["", f"kernels: {len(kernels)} (+ {views} views that copy nothing)"]
            lines += [f"  {s['func']}" for s in kernels]
            planned = sum(int(n) for n in plan["storages"])
            lines += ["", f"memory plan: {len(plan['storages'])} storages, {planned / 2**20:.2f} MiB for "
                      f"{len(plan['assign'])} intermediate values"]
        lines += ["", f"IR after every pass: {self.dump_dir} ({len(self.context.dumps)} files)"]
        return "\n".join(lines)


def explain(model: Any, target: str = "llvm", input_shapes: Mapping[str, Sequence[int]] | None = None,
            dump_dir: str | os.PathLike[str] | None = None, opt_level: int = 2,
            disabled_passes: Sequence[str] = ()) -> Explanation:
    """Compile ``model`` (an ONNX path, bytes or ModelProto) for ``target`` with the compile cache
    off, dumping the IR after every pass into ``dump_dir`` (a new temporary directory when None)
    and timing every pass."""
    out = os.fspath(dump_dir) if dump_dir is not None else tempfile.mkdtemp(prefix="ember-explain-")
    with PassContext(opt_level=opt_level, disabled_passes=list(disabled_passes), dump_dir=out, timing=True) as ctx:
        compiled = compile_model(model, target=target, input_shapes=input_shapes, use_cache=False)
    return Explanation(compiled, ctx, out)
