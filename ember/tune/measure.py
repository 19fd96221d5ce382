"""Building and timing candidates, each failure contained.

* :class:`LocalBuilder` builds a batch of candidates in parallel worker processes (forked from
  the tuner, so they share its tasks without serialising them); a build that raises is recorded
  with its error, one that does not finish within ``timeout`` (a hang, or a worker that died) as
  a timeout, and the pool is replaced.
* :class:`Runner` times candidates one at a time in a measuring subprocess
  (:mod:`ember.tune.runner`) that it starts on demand: a reply that does not come within
  ``timeout`` kills it (a hang), a process that dies (a crash) is replaced, and either is
  recorded as an invalid candidate; the tuner goes on.

Both only return results (:class:`BuildResult`, :class:`MeasureResult`); nothing here raises for
a bad candidate.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import EmberError
from . import wire
from .task import FUNC_NAME, Task

#: What a failing build may raise: ember's errors (an illegal point, a schedule the lowering
#: rejects) and the built-in errors of a bug in a schedule template.
BUILD_ERRORS = (EmberError, ArithmeticError, AssertionError, LookupError, TypeError, ValueError, AttributeError,
                RecursionError, NotImplementedError, MemoryError)


@dataclass
class BuildResult:
    """A built candidate: its parts, or why it failed; ``seconds`` spent building."""

    parts: dict[str, bytes] | None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class MeasureResult:
    """A measured candidate: median ``seconds`` per call, or ``error`` (invalid). ``times``: the
    timed rounds' seconds per call; ``rejected``: timing stopped early because the candidate was
    clearly slower than the best (its time is that of its rounds so far); ``elapsed``: seconds
    the measurement took as the tuner saw it; ``phases``: the measuring process's own seconds
    loading, checking and timing the candidate; ``graph``: the rounds were CUDA-graph replays
    timed on the device (else the host's clock around the calls); ``worker``: the name of the Dask
    measuring worker that measured it (empty in a local run); ``died``: the measuring process died
    while measuring it (a crash or a kill: the trial is lost)."""

    seconds: float | None
    error: str | None = None
    times: list[float] = field(default_factory=list)
    rejected: bool = False
    elapsed: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    graph: bool = False
    worker: str = ""
    died: bool = False


def build_one(task: Task, config: dict[str, Any]) -> BuildResult:
    """Build ``config`` of ``task``; never raises for a bad candidate."""
    t0 = time.perf_counter()
    try:
        parts = task.build(config)
    except BUILD_ERRORS as exc:
        return BuildResult(None, f"build: {type(exc).__name__}: {exc}", time.perf_counter() - t0)
    return BuildResult(parts, None, time.perf_counter() - t0)


# -- building in local worker processes ---------------------------------------------------------
_WORKER_TASKS: list[Task] = []


def _build_in_worker(index: int, config: dict[str, Any]) -> BuildResult:
    return build_one(_WORKER_TASKS[index], config)


class LocalBuilder:
    """Builds candidates of ``tasks`` in ``workers`` forked processes (0: in this process)."""

    def __init__(self, tasks: Sequence[Task], workers: int, timeout: float = 120.0):
        self.tasks = list(tasks)
        self.workers = int(workers) if "fork" in multiprocessing.get_all_start_methods() else 0
        self.timeout = float(timeout)
        self._pool: Any = None

    def _get_pool(self) -> Any:
        if self._pool is None:
            global _WORKER_TASKS
            _WORKER_TASKS = self.tasks
            with warnings.catch_warnings():
                # After a GPU target was resolved this process holds a CUDA context (driver
                # threads); the workers never call the driver, so the fork is safe (docs/tuning.md).
                warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks",
                                        category=DeprecationWarning)
                self._pool = multiprocessing.get_context("fork").Pool(self.workers)
        return self._pool

    def start(self, jobs: Sequence[tuple[int, dict[str, Any]]]) -> Any:
        """Start building each ``(task index, config)``; returns a handle for :meth:`collect`
        (without workers the builds run now)."""
        if not self.workers:
            return [build_one(self.tasks[i], c) for i, c in jobs]
        pool = self._get_pool()
        return pool, list(jobs), [pool.apply_async(_build_in_worker, (i, c)) for i, c in jobs]

    def collect(self, handle: Any) -> list[BuildResult]:
        """The results of :meth:`start`'s builds, in the same order (a build that does not finish
        in time is a timeout result, and the pool is replaced; builds still queued on the old pool,
        of this batch or a later one, are built again on the new one)."""
        return list(self.results(handle))

    def results(self, handle: Any) -> Iterator[BuildResult]:
        """:meth:`collect`'s results one at a time, each as soon as it is built (and those before
        it), so that the first can be measured while the others build."""
        if not self.workers:
            yield from handle
            return
        pool, jobs, pending = handle
        deadline = time.monotonic() + self.timeout * max(1, -(-len(pending) // self.workers))
        for (i, c), p in zip(jobs, pending):
            if pool is not self._pool and not p.ready():
                # Queued on a pool replaced since (a build hung): build it again on the new one.
                p = self._get_pool().apply_async(_build_in_worker, (i, c))
                deadline = max(deadline, time.monotonic() + self.timeout)
            try:
                yield p.get(timeout=max(0.0, deadline - time.monotonic()))
            except multiprocessing.TimeoutError:
                self.close()  # the hung worker goes with its pool; what was queued behind it is built again
                yield BuildResult(None, f"build: timed out after {self.timeout:.0f} s (or the build process died)")

    def build(self, jobs: Sequence[tuple[int, dict[str, Any]]]) -> list[BuildResult]:
        """Build each ``(task index, config)``; results in the same order."""
        return self.collect(self.start(jobs))

    def close(self) -> None:
        """Stop the worker processes."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


# -- timing in a measuring subprocess -----------------------------------------------------------
class Runner:
    """Times candidates of one target in a measuring subprocess (see the module docstring).
    At most ``repeats`` timed rounds of about ``min_repeat_s`` each (default 0.05 s on a CPU, 0.02 s
    on a GPU, where a round is timed between two synchronisations), fewer when ``min_rounds``
    rounds agree within ``stable`` or when a round is ``reject_factor`` times slower than the
    task's best (0: never stop early for that; :mod:`ember.tune.runner`); ``timeout`` seconds per
    candidate; ``env`` extra environment of the subprocess (``CUDA_VISIBLE_DEVICES``)."""

    def __init__(self, target: str, timeout: float = 30.0, repeats: int = 5, min_repeat_s: float | None = None,
                 env: dict[str, str] | None = None, min_rounds: int = 3, stable: float = 0.03,
                 reject_factor: float = 1.5):
        from ..target import Target

        self.target = target
        self.timeout = float(timeout)
        self.repeats = int(repeats)
        gpu = Target(target).is_gpu
        self.min_repeat_s = float(min_repeat_s if min_repeat_s is not None else 0.02 if gpu else 0.05)
        self.min_rounds, self.stable, self.reject_factor = int(min_rounds), float(stable), float(reject_factor)
        self.env = dict(env or {})
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._sent: set[str] = set()  # tasks whose reference the running process was sent
        self.restarts = 0

    def start(self) -> None:
        """Start the measuring process now, without waiting for it: it imports while other work
        (the first builds) goes on. :meth:`measure` starts it when this was not called."""
        self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self.restarts += 1
            self._log = tempfile.TemporaryFile()
            self._sent = set()
            env = dict(os.environ, **self.env)
            self._proc = subprocess.Popen([sys.executable, "-m", "ember.tune.runner"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=self._log, env=env)
        return self._proc

    def _stderr_tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").strip().splitlines()
        return (": " + " | ".join(lines[-3:])) if lines else ""

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()

    def measure(self, task: Task, ref_parts: dict[str, bytes], parts: dict[str, bytes],
                best_s: float | None = None) -> MeasureResult:
        """Check and time ``parts`` (a candidate of ``task``) against the default schedule's
        ``ref_parts``; ``best_s``: the task's best time known to the tuner (for early rejection).
        Never raises for a bad candidate."""
        t0 = time.perf_counter()
        result = self._measure(task, ref_parts, parts, best_s)
        result.elapsed = time.perf_counter() - t0
        return result

    def _measure(self, task: Task, ref_parts: dict[str, bytes], parts: dict[str, bytes],
                 best_s: float | None) -> MeasureResult:
        header = {"op": "measure", "target": task.target, "task": task.workload, "func": FUNC_NAME,
                  "args": [s.to_json() for s in task.specs], "repeats": self.repeats,
                  "min_repeat_s": self.min_repeat_s, "min_rounds": self.min_rounds, "stable": self.stable,
                  "reject_factor": self.reject_factor, "best_s": best_s}
        cand = {f"cand/{k}": v for k, v in parts.items()}
        for _ in range(2):  # a second time with the reference when the process asks for it
            proc = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            with_ref = task.workload not in self._sent
            blobs = {**({f"ref/{k}": v for k, v in ref_parts.items()} if with_ref else {}), **cand}
            try:
                wire.send(proc.stdin, header, blobs)
                ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
                if not ready:
                    self._kill()
                    return MeasureResult(None, f"run: no result within {self.timeout:.0f} s (killed)")
                reply, _ = wire.recv(proc.stdout)
            except (EOFError, BrokenPipeError, ValueError, OSError):
                code = proc.wait()
                return MeasureResult(None, f"run: the measuring process died (exit code {code}){self._stderr_tail()}",
                                     died=True)
            if reply.get("status") != "need_ref":
                break
            self._sent.discard(task.workload)
        else:
            return MeasureResult(None, "run: the measuring process did not take the reference")
        self._sent.add(task.workload)
        if reply.get("context_lost"):
            # The candidate faulted and took the process's GPU context with it; the process has
            # ended: the next candidate starts a new one (only this trial is lost).
            proc.wait()
            return MeasureResult(None, f"run: {reply.get('detail', '?')} (the candidate faulted; the measuring "
                                       "process restarts)")
        phases = {str(k): float(v) for k, v in (reply.get("phases") or {}).items()}
        if reply.get("status") == "ok":
            return MeasureResult(float(reply["seconds"]), None, [float(t) for t in reply.get("times", [])],
                                 bool(reply.get("rejected") or reply.get("slow")), phases=phases,
                                 graph=bool(reply.get("graph")))
        return MeasureResult(None, f"{'wrong result' if reply.get('status') == 'wrong' else 'run'}: "
                                   f"{reply.get('detail', '?')}", phases=phases)

    def close(self) -> None:
        """Stop the measuring subprocess."""
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._kill()
        self._proc = None
