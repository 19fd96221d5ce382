"""What a profile holds and how it is written: a table, a rocprof-style CSV, a Chrome trace and
a roofline plot.

A :class:`ProfileResult` is built from the step times a
:class:`~ember.profiler.recorder.StepRecorder` took, the model's plan (each kernel step names the
ONNX nodes it computes and carries its :class:`~ember.profiler.cost.Cost`) and the device's
:class:`~ember.profiler.peaks.Peaks`. Three views of the same times:

* :attr:`ProfileResult.steps` — one row per kernel step of the plan, in execution order;
* :attr:`ProfileResult.kernels` — one row per compiled kernel (steps that call one kernel
  shared by several identical layers are summed), sorted by total time: the rocprof
  ``--stats`` view;
* :attr:`ProfileResult.nodes` — one row per ONNX node, with the time of the kernel that computes
  it; nodes fused into one kernel share that kernel's time (``fused_with`` says how many), so
  node times do not add up to the run time when kernels are fused.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import EmberError
from .cost import Cost
from .peaks import Peaks
from .recorder import StepTime

#: The first columns of the CSV, as ``rocprof --stats`` writes them.
ROCPROF_COLUMNS = ["Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage"]
#: The columns ember adds after them.
EXTRA_COLUMNS = ["MinNs", "FLOPs", "BytesRead", "BytesWritten", "GFLOPs", "GBps", "Intensity",
                 "PercentPeakFLOPs", "PercentPeakBandwidth", "PercentRoofline", "CostExact", "Nodes"]


@dataclass
class Stats:
    """Times and cost of one row (a step, a kernel or a node): ``calls``, ``total_ns``,
    ``min_ns``, ``cost`` per call (None when unknown) and the derived rates."""

    name: str
    calls: int = 0
    total_ns: int = 0
    min_ns: int = 0
    cost: Cost | None = None
    nodes: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    #: Every call's nanoseconds, in order.
    durations: list[int] = field(default_factory=list)

    @property
    def avg_ns(self) -> float:
        """Average nanoseconds per call (0 without calls)."""
        return self.total_ns / self.calls if self.calls else 0.0

    @property
    def gflops(self) -> float | None:
        """Achieved GFLOP/s (None when the cost is unknown or no time was measured)."""
        if self.cost is None or not self.total_ns:
            return None
        return self.cost.flops * self.calls / self.total_ns

    @property
    def gbps(self) -> float | None:
        """Achieved GB/s (bytes read and written per second / 1e9)."""
        if self.cost is None or not self.total_ns:
            return None
        return self.cost.bytes * self.calls / self.total_ns

    @property
    def median_ns(self) -> float:
        """Median nanoseconds per call (0 without calls): robust to a busy machine's outliers."""
        d = sorted(self.durations)
        if not d:
            return 0.0
        mid = len(d) // 2
        return float(d[mid]) if len(d) % 2 else (d[mid - 1] + d[mid]) / 2

    def add(self, dur_ns: int) -> None:
        """Count one call of ``dur_ns``."""
        self.min_ns = dur_ns if not self.calls else min(self.min_ns, dur_ns)
        self.calls += 1
        self.total_ns += dur_ns
        self.durations.append(dur_ns)


@dataclass
class NodeStats:
    """One ONNX node: its ``name``, ``op`` type, the ``kernel`` step computing it, how many
    nodes that kernel computes (``fused_with``) and that kernel's times."""

    name: str
    op: str
    kernel: str
    fused_with: int
    stats: Stats


class ProfileResult:
    """A profile of a model's runs (see the module docstring). Iterating gives ``(step label,
    average seconds)`` per kernel step in execution order — the list ``Model.profile`` returned
    before it returned this object."""

    def __init__(self, times: list[StepTime], plan: dict[str, Any], labels: list[str], runs: int,
                 device: str, target: str, clock: str, track: str,
                 peaks: Peaks | Callable[[], Peaks] | None = None):
        """Made by ``Model.profile``: ``times`` from :meth:`StepRecorder.finish`, the program's
        ``plan`` and step ``labels``, the number of recorded ``runs``, the ``device`` and
        ``target``, the ``clock`` and ``track`` the recorder used, and the device's ``peaks``
        (or a function measuring them on first use; None: no roofline columns)."""
        self.device = device
        self.target = target
        #: The clock the times come from (see :mod:`ember.profiler.recorder`).
        self.clock = clock
        self.track = track
        #: Recorded runs (warm-up runs excluded).
        self.runs = runs
        self._peaks = peaks
        self.times = times
        steps = plan["steps"]
        self.steps: list[Stats] = []
        index: dict[int, Stats] = {}
        for j, st in enumerate(steps):
            if st.get("kind") != "kernel":
                continue
            row = Stats(labels[j] or st["func"], cost=Cost.from_json(st.get("cost")),
                        nodes=_names(st.get("nodes")), ops=_names(st.get("ops")))
            index[j] = row
            self.steps.append(row)
        for t in times:
            index[t.step].add(t.dur_ns)
        self._by_step = index
        kernels: dict[str, Stats] = {}
        for j, row in index.items():
            func = steps[j]["func"]
            k = kernels.get(func)
            if k is None:
                k = kernels[func] = Stats(func, cost=row.cost)
            k.calls += row.calls
            k.total_ns += row.total_ns
            k.min_ns = row.min_ns if k.calls == row.calls else min(k.min_ns, row.min_ns)
            k.durations.extend(row.durations)
            k.nodes.extend(row.nodes)
            k.ops.extend(row.ops)
        self.kernels: list[Stats] = sorted(kernels.values(), key=lambda s: -s.total_ns)
        self.nodes: list[NodeStats] = []
        for row in self.steps:
            for k, name in enumerate(row.nodes):
                op = row.ops[k] if k < len(row.ops) else ""
                self.nodes.append(NodeStats(name, op, row.name, len(row.nodes), row))

    # -- summaries -------------------------------------------------------------------------------
    @property
    def peaks(self) -> Peaks | None:
        """The device's roofs (measured on first use and cached: :func:`~.peaks.device_peaks`);
        None when the result was made without them."""
        if callable(self._peaks):
            self._peaks = self._peaks()
        return self._peaks

    @property
    def total_ns(self) -> int:
        """Nanoseconds of all kernel calls together."""
        return sum(s.total_ns for s in self.steps)

    @property
    def timed(self) -> bool:
        """True when times were recorded (a run happened after the warm-up)."""
        return bool(self.times)

    def percent_of_roofline(self, row: Stats) -> tuple[float | None, float | None, float | None]:
        """(% of peak FLOP/s, % of peak bandwidth, % of the roofline at the row's intensity)."""
        if row.cost is None or self.peaks is None or not row.total_ns:
            return None, None, None
        flops_s = row.cost.flops * row.calls / (row.total_ns * 1e-9)
        bytes_s = row.cost.bytes * row.calls / (row.total_ns * 1e-9)
        pf = 100 * flops_s / self.peaks.flops_per_s if self.peaks.flops_per_s else None
        pb = 100 * bytes_s / self.peaks.bytes_per_s if self.peaks.bytes_per_s else None
        roof = self.peaks.attainable(row.cost.intensity)
        # A kernel that only moves data is measured against the bandwidth roof.
        pr = pb if not row.cost.flops else (100 * flops_s / roof if roof else None)
        return pf, pb, pr

    def __iter__(self) -> Iterator[tuple[str, float]]:
        return iter([(s.name, s.avg_ns * 1e-9) for s in self.steps])

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        return (f"<ember.ProfileResult {len(self.kernels)} kernel(s), {self.runs} run(s), "
                f"{self.total_ns / max(1, self.runs) / 1e6:.3f} ms per run, {self.device}>")

    # -- text ------------------------------------------------------------------------------------
    def table(self, top: int | None = None) -> str:
        """The kernels by total time as a text table, with the clock and the roofs used."""
        if not self.timed:
            return f"ember profile: nothing was timed on {self.device} ({self.clock or 'no runs recorded'})"
        lines = [f"ember profile: {self.device}, target {self.target}, {self.runs} run(s), "
                 f"{self.total_ns / self.runs / 1e6:.3f} ms of kernels per run",
                 f"clock: {self.clock}"]
        if self.peaks is not None:
            lines.append(f"peak FLOP/s: {_fmt(self.peaks.flops_per_s, 1e-9, 'GFLOP/s')} "
                         f"[{self.peaks.flops_source}]")
            lines.append(f"peak bandwidth: {_fmt(self.peaks.bytes_per_s, 1e-9, 'GB/s')} [{self.peaks.bytes_source}]")
        head = (f"{'kernel':<34} {'calls':>6} {'total ms':>9} {'avg us':>9} {'%':>6} {'GFLOP/s':>9} {'GB/s':>8} "
                f"{'%roof':>6}")
        lines += ["", head, "-" * len(head)]
        total = self.total_ns or 1
        for k in self.kernels[:top]:
            _, _, pr = self.percent_of_roofline(k)
            lines.append(f"{k.name[:34]:<34} {k.calls:>6} {k.total_ns / 1e6:>9.3f} {k.avg_ns / 1e3:>9.1f} "
                         f"{100 * k.total_ns / total:>6.1f} {_opt(k.gflops, 9, 1)} {_opt(k.gbps, 8, 1)} "
                         f"{_opt(pr, 6, 1)}")
        if top is not None and len(self.kernels) > top:
            lines.append(f"... {len(self.kernels) - top} more kernel(s)")
        return "\n".join(lines)

    def node_table(self, top: int | None = None) -> str:
        """The ONNX nodes in execution order with the kernel computing each and that kernel's
        time (nodes fused into one kernel share it: see the module docstring)."""
        if not self.timed:
            return self.table()
        head = f"{'node':<28} {'op':<16} {'kernel':<32} {'fused':>5} {'avg us':>9} {'GFLOP/s':>9}"
        lines = [self.table(top=0).split("\n\n")[0], "", head, "-" * len(head)]
        for n in self.nodes[:top]:
            lines.append(f"{n.name[:28]:<28} {n.op[:16]:<16} {n.kernel[:32]:<32} {n.fused_with:>5} "
                         f"{n.stats.avg_ns / 1e3:>9.1f} {_opt(n.stats.gflops, 9, 1)}")
        if top is not None and len(self.nodes) > top:
            lines.append(f"... {len(self.nodes) - top} more node(s)")
        return "\n".join(lines)

    # -- files -----------------------------------------------------------------------------------
    def csv_rows(self) -> list[dict[str, Any]]:
        """One dict per kernel with :data:`ROCPROF_COLUMNS` then :data:`EXTRA_COLUMNS` (empty
        strings where a figure is unknown)."""
        self._require_times("a CSV")
        total = self.total_ns or 1
        rows = []
        for k in self.kernels:
            pf, pb, pr = self.percent_of_roofline(k)
            c = k.cost
            rows.append({
                "Name": k.name, "Calls": k.calls, "TotalDurationNs": k.total_ns, "AverageNs": round(k.avg_ns),
                "Percentage": round(100 * k.total_ns / total, 4), "MinNs": k.min_ns,
                "FLOPs": _blank(c and c.flops), "BytesRead": _blank(c and c.bytes_read),
                "BytesWritten": _blank(c and c.bytes_written), "GFLOPs": _blank(k.gflops, 4),
                "GBps": _blank(k.gbps, 4), "Intensity": _blank(c and c.intensity, 4),
                "PercentPeakFLOPs": _blank(pf, 3), "PercentPeakBandwidth": _blank(pb, 3),
                "PercentRoofline": _blank(pr, 3), "CostExact": "" if c is None else int(c.exact),
                "Nodes": ";".join(k.nodes),
            })
        return rows

    def to_csv(self, path: str | os.PathLike[str] | None = None) -> str:
        """The per-kernel statistics as CSV text (rocprof ``--stats`` columns first); written
        to ``path`` when given."""
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=ROCPROF_COLUMNS + EXTRA_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(self.csv_rows())
        text = buf.getvalue()
        if path is not None:
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        return text

    def trace_events(self) -> list[dict[str, Any]]:
        """Chrome trace events: process and thread names (``ph: "M"``), then one complete event
        (``ph: "X"``, ``ts``/``dur`` in microseconds) per timed step call, with the ONNX nodes,
        operator types, run and FLOPs/bytes in ``args``. One process per device, one thread
        (track) per host thread or stream, and a ``runs`` track with one span per run (its first
        kernel's start to its last kernel's end)."""
        self._require_times("a trace")
        pid, tid, runs_tid = 1, 1, 0
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": pid, "tid": tid, "ts": 0,
             "args": {"name": f"ember {self.device} ({self.target})"}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": runs_tid, "ts": 0, "args": {"name": "runs"}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "ts": 0, "args": {"name": self.track}},
        ]
        spans: dict[int, tuple[int, int]] = {}
        for t in self.times:
            lo, hi = spans.get(t.run, (t.start_ns, t.start_ns + t.dur_ns))
            spans[t.run] = (min(lo, t.start_ns), max(hi, t.start_ns + t.dur_ns))
        for run, (lo, hi) in sorted(spans.items()):
            events.append({"name": f"run {run}", "cat": "run", "ph": "X", "ts": lo / 1e3, "dur": (hi - lo) / 1e3,
                           "pid": pid, "tid": runs_tid, "args": {"run": run}})
        for t in self.times:
            row = self._by_step[t.step]
            args: dict[str, Any] = {"onnx_nodes": row.nodes, "op_types": row.ops, "run": t.run, "step": t.step}
            if row.cost is not None:
                args.update(flops=row.cost.flops, bytes=row.cost.bytes)
            events.append({"name": row.name, "cat": "kernel", "ph": "X", "ts": t.start_ns / 1e3,
                           "dur": t.dur_ns / 1e3, "pid": pid, "tid": tid, "args": args})
        return events

    def to_chrome_trace(self, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """The trace as ``{"traceEvents": [...], "displayTimeUnit": "ns", ...}`` (opens in
        Perfetto and chrome://tracing); written as JSON to ``path`` when given."""
        doc = {"traceEvents": self.trace_events(), "displayTimeUnit": "ns",
               "otherData": {"device": self.device, "target": self.target, "clock": self.clock,
                             "runs": self.runs}}
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(doc, f)
        return doc

    def plot_roofline(self, path: str | os.PathLike[str]) -> None:
        """Draw the roofline (log-log: the bandwidth slope and the compute roof) with each kernel
        as a point (size: its share of the time) and save it to ``path`` (PNG, SVG... by the
        suffix). Raises EmberError when matplotlib is missing (``pip install ember[profile]``)
        or a roof or the kernels' costs are unknown."""
        from .plot import plot_roofline

        self._require_times("a roofline")
        plot_roofline(self, path)

    def _require_times(self, what: str) -> None:
        if not self.timed:
            why = self.clock or "no run after the warm-up"
            raise EmberError(f"profile: no times were recorded on {self.device} ({why}), so there is "
                             f"nothing to write as {what}")


def _names(x: Any) -> list[str]:
    """A list of strings from untrusted plan data (anything else: empty)."""
    if isinstance(x, list) and all(isinstance(v, str) for v in x):
        return list(x)
    return []


def _fmt(v: float | None, scale: float, unit: str) -> str:
    return "unknown" if v is None else f"{v * scale:.1f} {unit}"


def _opt(v: float | None, width: int, prec: int) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.{prec}f}"


def _blank(v: Any, digits: int | None = None) -> Any:
    if v is None:
        return ""
    return round(v, digits) if digits is not None else v
