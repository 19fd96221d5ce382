"""Timing each step of a model's runs: the clock the executor calls around every kernel.

An :class:`~ember.model.executor.ExecutionContext` given a :class:`StepRecorder` calls
:meth:`StepRecorder.begin_run` once per run, then :meth:`~StepRecorder.start` and
:meth:`~StepRecorder.stop` around each kernel step, in order. The clock depends on the device:

* CPU: ``time.perf_counter_ns`` around the call (CPU kernels return when they are done);
* CUDA: a pair of CUDA events recorded on the context's stream around the launch, read once
  the runs are over (:meth:`StepRecorder.finish`), so launches stay asynchronous and the time
  is the device's;
* a GPU whose driver ember has no timing events for (ROCm today): the host clock around each
  launch with the stream synchronised before and after: it includes the launch overhead, and
  :attr:`StepRecorder.clock` says so.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

#: Names of the clocks, as results report them.
HOST_CLOCK = "host perf_counter around each CPU kernel"
CUDA_EVENTS = "CUDA events on the model's stream"
HOST_SYNC_CLOCK = ("host perf_counter around each launch, stream synchronised before and after "
                   "(no device timers for this target in ember: includes launch overhead)")


@dataclass(frozen=True)
class StepTime:
    """One timed call of one step: ``run`` (0-based, warm-up runs excluded), ``step`` (index in
    the plan's steps), ``start_ns`` (since the first recorded run began) and ``dur_ns``."""

    run: int
    step: int
    start_ns: int
    dur_ns: int


class StepRecorder:
    """Records the time of every kernel step of every run after ``warmup`` runs."""

    def __init__(self, warmup: int = 1):
        self.warmup = max(0, int(warmup))
        self.runs = 0
        #: The clock used (one of this module's ``*_CLOCK`` / ``CUDA_EVENTS`` strings); set by the
        #: first run.
        self.clock = ""
        #: Track of the timed work: the host thread (CPU) or the stream (GPU).
        self.track = ""
        self.program: Any = None
        #: Per step of the plan, its label (:attr:`ExecutionContext.labels`).
        self.labels: list[str] = []
        self.device: Any = None
        self._ctx: Any = None
        self._pending: list[tuple[int, int, Any, Any]] = []
        self._host: list[StepTime] = []
        self._base_ns = 0
        self._base_event: Any = None
        self._t0 = 0
        self._events: Any = None

    @property
    def recording(self) -> bool:
        """True during a run that is recorded (not a warm-up run)."""
        return self.runs > self.warmup

    def begin_run(self, ctx: Any) -> None:
        """Called by the execution context ``ctx`` before each run."""
        self.runs += 1
        if self._ctx is None:
            self._ctx = ctx
            self.program = ctx.program
            self.device = ctx.device
            self.labels = ctx.labels
            stream = getattr(ctx.mem, "stream", None)
            drv = None if ctx.device.kind == "cpu" else ctx.device.driver()
            if drv is None:
                self.clock = HOST_CLOCK
                self.track = f"thread {threading.get_ident()}"
            elif stream is not None and hasattr(getattr(drv, "Event", None), "elapsed_ms"):
                self.clock = CUDA_EVENTS
                handle = getattr(getattr(stream, "handle", None), "value", None)
                self.track = f"stream {int(handle or 0):#x}"
                self._events = drv
            else:
                self.clock = HOST_SYNC_CLOCK
                self.track = "default stream"
        elif ctx is not self._ctx:
            raise ValueError("a StepRecorder times one execution context")
        if self.recording and self.runs == self.warmup + 1:
            if self._events is not None:
                self._base_event = self._new_event()
            else:
                ctx.finish()
                self._base_ns = time.perf_counter_ns()

    def _new_event(self) -> Any:
        ev = self._events.Event(self.device.index, timing=True)
        ev.record(self._ctx.mem.stream)
        return ev

    def start(self, step: int) -> None:
        """Called just before step ``step`` is launched."""
        if not self.recording:
            return
        if self._events is not None:
            self._t0 = self._new_event()
        else:
            if self.clock == HOST_SYNC_CLOCK:
                self._ctx.finish()
            self._t0 = time.perf_counter_ns()

    def stop(self, step: int) -> None:
        """Called just after step ``step`` was launched (on a CPU: has run)."""
        if not self.recording:
            return
        run = self.runs - self.warmup - 1
        if self._events is not None:
            self._pending.append((run, step, self._t0, self._new_event()))
            return
        if self.clock == HOST_SYNC_CLOCK:
            self._ctx.finish()
        t1 = time.perf_counter_ns()
        self._host.append(StepTime(run, step, self._t0 - self._base_ns, t1 - self._t0))

    def finish(self) -> list[StepTime]:
        """Every recorded step time, in launch order (waits for the device's events)."""
        if self._events is None:
            return list(self._host)
        out = []
        if self._pending:
            self._pending[-1][3].synchronize()
        for run, step, ev0, ev1 in self._pending:
            start = int(round(self._base_event.elapsed_ms(ev0) * 1e6))
            dur = int(round(ev0.elapsed_ms(ev1) * 1e6))
            out.append(StepTime(run, step, start, dur))
        return out
