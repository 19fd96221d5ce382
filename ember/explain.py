"""``ember explain``: compile a model with every pass dumped and timed, and say what happened.

:func:`explain` compiles under a :class:`~ember.transform.PassContext` with ``dump_dir`` and
``timing`` on, so the graph after each graph pass, the fusion groups and every kernel's loop IR
after each loop pass land in ``dump_dir`` as numbered text files, and returns a report: the
passes with their times, the kernels, the memory plan and where the dumps are.
:meth:`Explanation.kernel` shows one kernel at every level: its tensor expressions and schedule
(te), its final loop IR, its LLVM IR and its machine code (x86/AArch64 assembly on a CPU, PTX
on CUDA, the AMDGPU ISA on ROCm).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .driver import compile as compile_model
from .errors import ArgumentError
from .model.model import Model
from .transform import PassContext, PassInstrument


class _Schedules(PassInstrument):
    """Keeps the schedule every kernel is lowered from (the input of ``ScheduleToStmt``), in
    lowering order."""

    def __init__(self) -> None:
        self.schedules: list[Any] = []

    def before_pass(self, p: Any, ir: Any) -> None:
        if p.name == "ScheduleToStmt":
            self.schedules.append(ir)


@dataclass
class Explanation:
    """What :func:`explain` found: the compiled model, the pass context that ran (timings, dump
    file names), the directory holding the dumps and the schedule of each kernel (by name)."""

    model: Model
    context: PassContext
    dump_dir: str
    schedules: dict[str, Any] = field(default_factory=dict)

    def report(self, graphs: bool = False) -> str:
        """A text report: passes by total time, kernels, memory plan, dump location; with
        ``graphs``, the graph after each graph pass too."""
        totals: dict[str, list[float]] = {}
        for name, secs in self.context.timings:
            totals.setdefault(name, []).append(secs)
        lines = [f"ember explain: target {self.model.target}", "", "passes (runs, total ms):"]
        for name, ts in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
            lines.append(f"  {name:<28} {len(ts):>5}  {1e3 * sum(ts):10.1f}")
        if graphs:
            lines += self._graph_dumps()
        if self.model.is_static:
            plan = self.model.plan
            kernels = [s for s in plan["steps"] if s["kind"] == "kernel"]
            views = len(plan["steps"]) - len(kernels)
            lines += ["", f"kernels: {len(kernels)} (+ {views} views that copy nothing); "
                          "ember explain MODEL --kernel NAME shows one"]
            for s in kernels:
                nodes = ", ".join(f"{n} ({o})" for n, o in zip(s.get("nodes", []), s.get("ops", [])))
                lines.append(f"  {s['func']:<32} {nodes}")
            planned = sum(int(n) for n in plan["storages"])
            lines += ["", f"memory plan: {len(plan['storages'])} storages, {planned / 2**20:.2f} MiB for "
                      f"{len(plan['assign'])} intermediate values"]
        lines += ["", f"IR after every pass: {self.dump_dir} ({len(self.context.dumps)} files)"]
        return "\n".join(lines)

    def _graph_dumps(self) -> list[str]:
        """The dumps of the graph passes (every dump before the first kernel's ``ScheduleToStmt``)."""
        out = []
        for path in self.context.dumps:
            base = os.path.basename(path)
            if base.split("_", 1)[-1].startswith("ScheduleToStmt"):
                break
            with open(path, encoding="utf-8") as f:
                out += ["", f"-- after {base} " + "-" * max(0, 60 - len(base)), f.read().rstrip()]
        return out

    @property
    def kernel_names(self) -> list[str]:
        """The compiled kernels' names, in execution order."""
        if not self.model.is_static:
            return []
        return list(dict.fromkeys(s["func"] for s in self.model.plan["steps"] if s["kind"] == "kernel"))

    def kernel(self, name: str) -> str:
        """One kernel (by name, or by its index in :attr:`kernel_names`) at every level: te and
        schedule, loop IR, LLVM IR, and PTX (CUDA) or assembly. ArgumentError for an unknown
        kernel (the message lists them)."""
        names = self.kernel_names
        if name.isdigit() and int(name) < len(names):
            name = names[int(name)]
        if name not in names:
            raise ArgumentError(f"no kernel {name!r}; the kernels are: {', '.join(names) or 'none'}")
        kind = self.model.target.split()[0]
        parts = [("te (tensor expressions and schedule)", _te_text(self.schedules.get(name))),
                 ("loop IR", _block(self.model.get_source("ir"), rf"^def {re.escape(name)}\(", r"^def ")),
                 ("LLVM IR", _llvm_functions(self.model.get_source("llvm"), name))]
        if kind == "cuda":
            parts.append(("PTX", _ptx_entries(self.model.get_source("ptx"), name)))
        else:
            title = "assembly" if kind != "rocm" else "AMDGPU ISA"
            parts.append((title, _asm_function(self.model.get_source("asm"), name)))
        out = []
        for title, text in parts:
            out += [f"== {title} " + "=" * max(0, 70 - len(title)), text.rstrip() or "(not available)", ""]
        return "\n".join(out)


def _te_text(schedule: Any) -> str:
    """The stages of a schedule: each operation's compute definition, then its loops (leaf axes
    with their annotations) and where it is attached."""
    if schedule is None:
        return "(no schedule recorded for this kernel)"
    from .te.tensor import ComputeOp, PlaceholderOp

    lines = []
    for st in schedule.stages:
        op = st.op
        if isinstance(op, PlaceholderOp):
            shape = ", ".join(str(d) for d in op.output(0).shape)
            lines.append(f"{op.name} = placeholder([{shape}], {op.output(0).dtype})")
            continue
        if not isinstance(op, ComputeOp):
            lines.append(f"{op.name} = {type(op).__name__}")
            continue
        axes = ", ".join(iv.var.name for iv in op.axis)
        t = op.output(0)
        flags = [f for f in ("materialize", "constant_layout", "workspace") if getattr(op, f, False)]
        head = f"{op.name}[{', '.join(str(d) for d in t.shape)}] {t.dtype}"
        tag = f"  # tag {op.tag!r}" if op.tag else ""
        lines.append(f"{head} = compute(({axes}) -> {'; '.join(str(b) for b in op.body)}){tag}"
                     + (f" [{', '.join(flags)}]" if flags else ""))
        leaves = []
        for iv in st.leaf_iter_vars:
            ann = st.iter_attrs.get(iv)
            note = ""
            if ann is not None and (ann.kind.value != "serial" or ann.thread_tag):
                note = f" ({ann.thread_tag or ann.kind.value})"
            leaves.append(f"{iv.var.name}{note}")
        lines.append(f"    loops: {', '.join(leaves) or '-'}; attached: {st.attach}")
    return "\n".join(lines)


def _block(text: str, start: str, next_start: str) -> str:
    """The lines of ``text`` from the line matching ``start`` to the next line matching
    ``next_start`` (exclusive)."""
    lines = text.splitlines()
    out: list[str] = []
    inside = False
    for ln in lines:
        if inside and re.match(next_start, ln):
            break
        if not inside and re.match(start, ln):
            inside = True
        if inside:
            out.append(ln)
    return "\n".join(out)


def _sections(text: str, start: re.Pattern[str], last: re.Pattern[str]) -> str:
    """Every run of lines of ``text`` from a line matching ``start`` to the next line matching
    ``last`` (included), separated by blank lines."""
    out: list[str] = []
    lines = text.splitlines()
    k = 0
    while k < len(lines):
        if start.match(lines[k]):
            j = k
            while j < len(lines) and not last.match(lines[j]):
                j += 1
            out += lines[k:j + 1] + [""]
            k = j
        k += 1
    return "\n".join(out)


def _llvm_functions(text: str, name: str) -> str:
    """Every ``define`` of LLVM IR ``text`` named ``name`` or ``name_kernelN`` (the device
    kernels of a GPU function), to its closing brace."""
    return _sections(text, re.compile(rf"^define .*@\"?{re.escape(name)}(_kernel\d+)?\"?\("), re.compile(r"^}$"))


def _ptx_entries(text: str, name: str) -> str:
    """The ``.entry`` functions of PTX ``text`` named ``name_kernelN``, to their closing brace."""
    return _sections(text, re.compile(rf"^\s*(\.visible\s+)?\.entry\s+{re.escape(name)}(_kernel\d+)?\("),
                     re.compile(r"^}$"))


def _asm_function(text: str, name: str) -> str:
    """The assembly of function ``name`` (or of a GPU function's ``name_kernelN``): from its
    label to the end of the function (``.Lfunc_end``)."""
    return _sections(text, re.compile(rf"^\"?{re.escape(name)}(_kernel\d+)?\"?:"), re.compile(r"^\.Lfunc_end"))


def explain(model: Any, target: str = "llvm", input_shapes: Mapping[str, Sequence[int]] | None = None,
            dump_dir: str | os.PathLike[str] | None = None, opt_level: int = 2,
            disabled_passes: Sequence[str] = (), precision: str = "float32") -> Explanation:
    """Compile ``model`` (an ONNX path, bytes or ModelProto) for ``target`` with the compile cache
    off, dumping the IR after every pass into ``dump_dir`` (a new temporary directory when None),
    timing every pass and keeping each kernel's schedule (for :meth:`Explanation.kernel`)."""
    out = os.fspath(dump_dir) if dump_dir is not None else tempfile.mkdtemp(prefix="ember-explain-")
    rec = _Schedules()
    with PassContext(opt_level=opt_level, disabled_passes=list(disabled_passes), dump_dir=out, timing=True,
                     instruments=[rec]) as ctx:
        compiled = compile_model(model, target=target, input_shapes=input_shapes, use_cache=False,
                                 precision=precision)
    schedules: dict[str, Any] = {}
    if compiled.is_static:
        # Kernels are lowered in step order, one schedule each; identical kernels share a name.
        steps = [s for s in compiled.plan["steps"] if s["kind"] == "kernel"]
        if len(steps) == len(rec.schedules):
            for st, sch in zip(steps, rec.schedules):
                schedules.setdefault(st["func"], sch)
    return Explanation(compiled, ctx, out, schedules)

