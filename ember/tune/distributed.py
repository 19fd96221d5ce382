"""Tuning on a Dask cluster (``ember tune --workers N`` or ``--dask tcp://HOST:8786``).

Workers are told apart by Dask *resources*: build workers have ``build=1`` (CPU cores: lowering
and LLVM), measuring workers ``measure=1`` (one per GPU, pinned with ``CUDA_VISIBLE_DEVICES`` /
``HIP_VISIBLE_DEVICES``; one for a CPU target). Each candidate is a build task on a build worker
(the tuning task itself is scattered to every worker once) and a measuring task that depends on
it. On a GPU the measurements are *fed*: as each build finishes, its candidate joins a queue
ordered by batch and position, and whenever a measuring worker has fewer than
:data:`MEASURE_DEPTH` measurements assigned, the executor submits the next one (from Dask's
callback thread, not the tuner's: feeding goes on while the tuner stores a batch, trains its cost
model and proposes). So every GPU measures without pause across batch boundaries, the batches
finish in order, and at the end of a run no GPU sits with a long queue while another idles (Dask
assigns a submitted task to a worker at once, by estimated durations that vary fivefold between
candidates). The parts go from the build worker to the measuring worker, never through the tuner.
On a CPU target the measuring tasks are submitted once the whole batch is built, so no build
competes with a timing. A measuring worker keeps one measuring subprocess
(:class:`~ember.tune.measure.Runner`) alive across candidates, so crashes and hangs are contained
as in a local run, and its answer carries the build's result without the parts.

A measuring worker that dies (its process killed: Dask's nanny starts it again) costs no trial:
Dask runs the measurements it held again elsewhere, and the executor notes the death once in
:attr:`DaskExecutor.notes`. Build workers run their builds at a lower CPU priority
(:data:`BUILD_NICE`), so that the measuring processes' own CPU work (loading a candidate, checking
its outputs) is not slowed by builds when the cores are all taken.

* ``workers=N``: a ``distributed.LocalCluster`` on this host (``N`` build workers plus the
  measuring workers), closed when tuning ends.
* ``address="tcp://host:8786"``: a running scheduler; start workers on each host with
  ``dask worker tcp://host:8786 --nthreads 1 --resources build=1`` and, per GPU,
  ``CUDA_VISIBLE_DEVICES=i dask worker tcp://host:8786 --nthreads 1 --resources measure=1``. An
  address that does not answer is a :class:`~ember.errors.TuningError` naming it.

Dask is an optional dependency (``pip install 'ember[tune]'``); without it these options are a
:class:`~ember.errors.TuningError` that says so.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import TuningError
from ..strategy import ConfigEntity
from ..target import Target
from .executor import Outcome
from .keys import gpu_present
from .measure import BuildResult, MeasureResult, Runner, build_one
from .task import Task

CONNECT_TIMEOUT_S = 10
#: measurements assigned to one measuring worker at a time when they are fed (a GPU target): the
#: one it runs and the next, whose parts it fetches meanwhile (more would only unbalance the
#: workers at the end of a run)
MEASURE_DEPTH = 2
#: the nice value of a build worker's building thread (and of the ``ptxas`` it starts)
BUILD_NICE = 10
_RUNNERS: dict[tuple[Any, ...], Runner] = {}
_NICED = threading.local()


def _dask() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise TuningError("tuning with workers= or dask= needs Dask: pip install 'ember[tune]' "
                          "(or leave both out to tune with local processes)") from exc
    return distributed


def _gpu_count(kind: str) -> int:
    if not gpu_present(kind):
        return 0
    if kind == "cuda":
        from ..runtime import cuda_driver

        return int(cuda_driver.device_count())
    from ..runtime import hip_driver

    return int(hip_driver.device_count())


def _measure_on_worker(task: Task, ref: BuildResult, built: BuildResult, timeout: float, repeats: int,
                       best_s: float | None) -> tuple[BuildResult, MeasureResult | None]:
    """Runs on a measuring worker: this worker's measuring subprocess checks and times the built
    candidate ``built`` against the default schedule's build ``ref``; returns the build's result
    without its parts (``parts={}`` when it built) and the measurement (None: it did not build)."""
    light = replace(built, parts=None if built.parts is None else {})
    if built.parts is None:
        return light, None
    if ref.parts is None:
        return light, MeasureResult(None, f"no reference: the default schedule does not build ({ref.error})")
    result = _runner(task.target, timeout, repeats).measure(task, ref.parts, built.parts, best_s)
    with contextlib.suppress(ValueError):  # outside a Dask worker (called directly) it names none
        result.worker = str(_dask().get_worker().name)
    return light, result


def _build_on_worker(task: Task, config: dict[str, Any]) -> BuildResult:
    """Runs on a build worker: :func:`~ember.tune.measure.build_one` at nice :data:`BUILD_NICE`
    (set once per thread: Linux keeps a nice value per thread; children inherit it)."""
    if not getattr(_NICED, "done", False):
        _NICED.done = True
        # without setpriority (not POSIX) or the right to use it, the builds run at full priority
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, 0, max(BUILD_NICE, os.getpriority(os.PRIO_PROCESS, 0)))
    return build_one(task, config)


def _runner(target: str, timeout: float, repeats: int) -> Runner:
    """This worker's measuring subprocess for ``target`` (started on first use)."""
    key = (target, timeout, repeats)
    runner = _RUNNERS.get(key)
    if runner is None:
        runner = _RUNNERS[key] = Runner(target, timeout=timeout, repeats=repeats)
        runner.start()
    return runner


def _start_measurer(target: str, timeout: float, repeats: int) -> None:
    """Runs on a measuring worker at the start: its measuring process is started (not awaited)."""
    _runner(target, timeout, repeats)


@dataclass(eq=False)
class _Candidate:
    """One candidate of a fed batch: its build future, and once measured its outcome. ``state``:
    ``building`` -> ``ready`` (built, queued for a measuring worker) -> ``measuring`` -> ``done``,
    or ``abandoned`` when :meth:`DaskExecutor.finish` stopped waiting for it."""

    seq: int
    index: int
    task_index: int
    build: Any
    best_s: float | None
    state: str = "building"
    measure: Any = None
    outcome: Outcome | None = None


class DaskExecutor:
    """Builds and measures on a Dask cluster (see the module docstring). ``stream`` (default: on a
    GPU target): measure each candidate as soon as it is built, fed to the measuring workers as
    they free up, not after the batch's builds. ``notes``: what the tuner should tell (a measuring
    worker that died)."""

    def __init__(self, tasks: Sequence[Task], target: Target, workers: int | None = None, address: str | None = None,
                 measuring: bool = True, timeout: float = 30.0, repeats: int = 5, stream: bool | None = None):
        dd = _dask()
        self.tasks = list(tasks)
        self.measuring, self.timeout, self.repeats = measuring, float(timeout), int(repeats)
        self.cluster = None
        self.notes: list[str] = []
        self.workers_died = 0
        # Feeding (stream): candidates built and waiting for a measuring worker, by (batch, position)
        self._cv = threading.Condition()
        self._ready: list[tuple[int, int, _Candidate]] = []
        self._assigned = 0  # measurements submitted and not finished
        self.max_assigned = 0  # the most measurements ever submitted at once
        self._seq = itertools.count()
        self._order = itertools.count()
        self._best: dict[int, float] = {}  # task index -> best time measured so far (for early rejection)
        self._closed = False
        if address is not None:
            try:
                self.client = dd.Client(address, timeout=CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                raise TuningError(f"cannot reach the Dask scheduler at {address!r} within {CONNECT_TIMEOUT_S} s "
                                  f"({exc}); start one with `dask scheduler` or check the address") from exc
        else:
            self.cluster = self._local_cluster(dd, int(workers or 1), target)
            self.client = dd.Client(self.cluster)
        info = self.client.scheduler_info()["workers"]
        self.build_workers = sum(1 for w in info.values() if w.get("resources", {}).get("build")) or 1
        self._measurers = {a: str(w.get("name", a)) for a, w in info.items() if w.get("resources", {}).get("measure")}
        if measuring and not self._measurers:
            self.close()
            raise TuningError(f"the Dask cluster at {address or 'local'} has no measuring worker (resources "
                              "measure=1); start one per GPU, see docs/tuning.md")
        if measuring:  # each measuring worker starts its measuring process while the first batch builds
            target_text = self.tasks[0].target if self.tasks else str(target)  # the key measurements use
            self.client.run(_start_measurer, target_text, self.timeout, self.repeats, workers=list(self._measurers))
        self._task_futures = [self.client.scatter(t, broadcast=True) for t in self.tasks]
        self._stream = target.is_gpu if stream is None else bool(stream)
        self._refs: dict[int, Any] = {}  # task index -> the future of its default schedule's build
        self._depth = MEASURE_DEPTH * max(1, len(self._measurers))
        # The tuner keeps one batch started beyond the one it waits for, and at least
        # ``inflight_trials`` candidates: enough to keep every build worker busy and the measuring
        # workers' queues full while it stores a batch and proposes the next. The search of a
        # batch proposed meanwhile has not seen the results of the batches in flight.
        self.lookahead = 1 if self._stream else 0
        self.inflight_trials = (self.build_workers + self._depth) if self._stream else 0

    @staticmethod
    def _local_cluster(dd: Any, workers: int, target: Target) -> Any:
        """``workers`` build workers and the measuring workers on this host, all started at once."""
        import dask

        dask.config.set({"distributed.worker.daemon": False, "distributed.scheduler.work-stealing": False})
        cluster = dd.LocalCluster(n_workers=0, threads_per_worker=1, processes=True, resources={"build": 1},
                                  dashboard_address=None, silence_logs=40)
        ((_, spec),) = cluster.new_worker_spec().items()
        for k in range(workers):
            cluster.worker_spec[f"build-{k}"] = spec
        gpus = _gpu_count(target.kind) if target.is_gpu else 0
        var = "CUDA_VISIBLE_DEVICES" if target.kind == "cuda" else "HIP_VISIBLE_DEVICES"
        for k in range(max(1, gpus)):
            env = {var: str(k)} if gpus else {}
            cluster.worker_spec[f"measure-{k}"] = {"cls": spec["cls"], "options": {
                **spec["options"], "resources": {"measure": 1}, "env": env, "memory_limit": 0}}
        cluster.sync(cluster._correct_state)
        cluster.wait_for_workers(workers + max(1, gpus))
        return cluster

    # Each submission gets a lower priority than the one before: Dask orders tasks submitted
    # within 100 ms of each other at random, and the builds of a batch must come before those of
    # the next (the tuner waits for the batches in order).
    def _build(self, task_index: int, config: dict[str, Any]) -> Any:
        return self.client.submit(_build_on_worker, self._task_futures[task_index], config, resources={"build": 1},
                                  pure=False, priority=-next(self._order))

    def _measure(self, task_index: int, build: Any, best_s: float | None) -> Any:
        return self.client.submit(_measure_on_worker, self._task_futures[task_index], self._refs[task_index], build,
                                  self.timeout, self.repeats, best_s, resources={"measure": 1}, pure=False,
                                  priority=-next(self._order))

    def start(self, task_index: int, configs: Sequence[ConfigEntity], best_s: float | None = None) -> Any:
        """Submit the builds of ``configs`` (and, once per task, of the default schedule: the
        reference) to the build workers; on a GPU each candidate is fed to a measuring worker once
        built. Returns a handle for :meth:`finish`."""
        if task_index not in self._refs:
            self._refs[task_index] = self._build(task_index, self.tasks[task_index].space.default.to_json())
        builds = [self._build(task_index, c.to_json()) for c in configs]
        cands = None
        if self.measuring and self._stream:
            seq = next(self._seq)
            cands = [_Candidate(seq, k, task_index, b, best_s) for k, b in enumerate(builds)]
            for c in cands:
                c.build.add_done_callback(lambda _f, c=c: self._built(c))
        return task_index, best_s, builds, cands

    # -- feeding the measuring workers (Dask's callback thread) -----------------------------------
    def _built(self, c: _Candidate) -> None:
        with self._cv:
            if self._closed or c.state != "building":
                return
            c.state = "ready"
            heapq.heappush(self._ready, (c.seq, c.index, c))
            self._feed()

    def _feed(self) -> None:
        """Submit queued measurements, oldest batch first, while fewer than ``_depth`` are assigned
        (called with ``_cv`` held)."""
        while self._ready and self._assigned < self._depth and not self._closed:
            _, _, c = heapq.heappop(self._ready)
            if c.state != "ready":
                continue
            best = self._best.get(c.task_index)
            best_s = best if c.best_s is None else c.best_s if best is None else min(best, c.best_s)
            c.state = "measuring"
            self._assigned += 1
            self.max_assigned = max(self.max_assigned, self._assigned)
            c.measure = self._measure(c.task_index, c.build, best_s)
            c.measure.add_done_callback(lambda f, c=c: self._measured(c, f))

    def _measured(self, c: _Candidate, fut: Any) -> None:
        outcome = None
        if self._closed:
            return
        if fut.status == "finished":  # fetched now, so a worker dying later does not measure it again
            try:
                outcome = fut.result(timeout=5.0)
            except (OSError, TimeoutError, _dask().CancelledError):
                outcome = None  # finish() asks again
        with self._cv:
            if c.state != "measuring":
                return
            c.state = "done"
            self._assigned -= 1
            if outcome is not None:
                c.outcome, c.measure = outcome, None
                m = outcome[1]
                if m is not None and m.seconds and not m.error and not m.rejected:
                    self._best[c.task_index] = min(m.seconds, self._best.get(c.task_index, math.inf))
            self._feed()
            self._cv.notify_all()

    # -- collecting ----------------------------------------------------------------------------
    def unfinished(self, handle: Any) -> int | None:
        """How many candidates of ``handle`` are not measured yet (None: not fed, a CPU target)."""
        cands = handle[3]
        if cands is None:
            return None
        with self._cv:
            return sum(c.state != "done" for c in cands)

    def _result(self, fut: Any, deadline: float) -> Any:
        return fut.result(timeout=max(1.0, deadline - time.monotonic()))

    def finish(self, handle: Any) -> list[Outcome]:
        """Wait for the measurements of ``handle`` (on a CPU target: first for its builds, then
        submit the measurements); returns each candidate's build and measurement."""
        task_index, best_s, builds, cands = handle
        per = max(60.0, self.timeout)
        deadline = time.monotonic() + per * (len(builds) // self.build_workers + 2)
        if not self.measuring:
            return [(self._build_result(b, deadline), None) for b in builds]
        if cands is not None:
            out = self._finish_fed(cands, deadline)
        else:
            try:
                _dask().wait(builds, timeout=max(1.0, deadline - time.monotonic()))
            except TimeoutError:
                pass  # the measurements below wait for what is left, within the deadline
            measures = [self._measure(task_index, b, best_s) for b in builds]
            deadline += self.timeout * (len(measures) + 2)
            out = [self._collect(b, m, deadline) for b, m in zip(builds, measures)]
        self._check_measurers()
        return out

    def _finish_fed(self, cands: list[_Candidate], deadline: float) -> list[Outcome]:
        # Once the builds are due, each candidate may wait for the ones measured before it.
        deadline += self.timeout * (len(cands) + 2)
        with self._cv:
            while any(c.state != "done" for c in cands) and time.monotonic() < deadline:
                self._cv.wait(min(1.0, max(0.0, deadline - time.monotonic())))
            late = {id(c): c.state for c in cands if c.state != "done"}
            for c in cands:
                if c.state == "measuring":
                    self._assigned -= 1
                if c.state != "done":
                    c.state = "abandoned"
            self._feed()
        out: list[Outcome] = []
        for c in cands:
            was = late.get(id(c))
            if c.outcome is not None:
                out.append(c.outcome)
            elif was == "building":
                out.append((self._build_result(c.build, time.monotonic()), None))
            elif was is not None:  # built, but not measured within the deadline
                if c.measure is not None:
                    c.measure.cancel()
                out.append((BuildResult({}), MeasureResult(None, "run: no result from the measuring worker")))
            else:
                out.append(self._collect(c.build, c.measure, time.monotonic() + self.timeout))
        return out

    def _collect(self, b: Any, m: Any, deadline: float) -> Outcome:
        try:
            return self._result(m, deadline)
        except TimeoutError:
            m.cancel()
            return BuildResult({}), MeasureResult(None, "run: no result from the measuring worker")
        except _dask().KilledWorker as exc:  # after Dask's retries: workers died while measuring it
            built = self._build_result(b, deadline)
            return built, (None if built.parts is None else
                           MeasureResult(None, f"run: the measuring worker died ({exc})"))

    def _build_result(self, fut: Any, deadline: float) -> BuildResult:
        try:
            return self._result(fut, deadline)
        except TimeoutError:
            fut.cancel()
            return BuildResult(None, "build: timed out on the Dask worker")
        except _dask().KilledWorker as exc:
            return BuildResult(None, f"build: the Dask worker died ({exc})")

    def _check_measurers(self) -> None:
        """Note each measuring worker gone since the last look (once per worker), and follow the
        measuring workers that joined (a replacement started by a nanny)."""
        if not self.measuring or self._closed:
            return
        try:
            info = self.client.scheduler_info()["workers"]
        except (OSError, TimeoutError):  # the scheduler did not answer: look again after the next batch
            return
        now = {a: str(w.get("name", a)) for a, w in info.items() if w.get("resources", {}).get("measure")}
        for addr, name in self._measurers.items():
            if addr not in now:
                self.workers_died += 1
                back = " (started again)" if name in now.values() else ""
                self.notes.append(f"the measuring worker {name} ({addr}) died or left mid-run{back}: what it was "
                                  "measuring and what was queued on it were measured again; the run went on")
        with self._cv:
            self._measurers = now
            self._depth = MEASURE_DEPTH * max(1, len(now))
            self._feed()

    def close(self) -> None:
        """Close the client (and the local cluster this executor started)."""
        with self._cv:
            self._closed = True
            self._ready.clear()
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
