"""Tuning on a Dask cluster (``ember tune --workers N`` or ``--dask tcp://HOST:8786``).

Workers are told apart by Dask *resources*: build workers have ``build=1`` (CPU cores: lowering
and LLVM), measuring workers ``measure=1`` (one per GPU, pinned with ``CUDA_VISIBLE_DEVICES`` /
``HIP_VISIBLE_DEVICES``; one for a CPU target). Each candidate is a build task on a build worker
(the tuning task itself is scattered to every worker once) and a measuring task that depends on
it: on a GPU it is submitted with the build, so a measuring worker takes each candidate as soon as
it is built (its parts go from the build worker to the measuring worker, never through the tuner)
while the other candidates — of this batch and the next — build; several GPUs measure side by
side. On a CPU target the measuring tasks are submitted once the whole batch is built, so no build
competes with a timing. A measuring worker keeps one measuring subprocess
(:class:`~ember.tune.measure.Runner`) alive across candidates, so crashes and hangs are contained
as in a local run, and its answer carries the build's result without the parts.

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

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..errors import TuningError
from ..strategy import ConfigEntity
from ..target import Target
from .executor import Outcome
from .keys import gpu_present
from .measure import BuildResult, MeasureResult, Runner, build_one
from .task import Task

CONNECT_TIMEOUT_S = 10
_RUNNERS: dict[tuple[Any, ...], Runner] = {}


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
    return light, _runner(task.target, timeout, repeats).measure(task, ref.parts, built.parts, best_s)


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


class DaskExecutor:
    """Builds and measures on a Dask cluster (see the module docstring). ``stream`` (default: on a
    GPU target): submit each candidate's measurement with its build, not after the batch's builds."""

    def __init__(self, tasks: Sequence[Task], target: Target, workers: int | None = None, address: str | None = None,
                 measuring: bool = True, timeout: float = 30.0, repeats: int = 5, stream: bool | None = None):
        dd = _dask()
        self.tasks = list(tasks)
        self.measuring, self.timeout, self.repeats = measuring, float(timeout), int(repeats)
        self.cluster = None
        if address is not None:
            try:
                self.client = dd.Client(address, timeout=CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                raise TuningError(f"cannot reach the Dask scheduler at {address!r} within {CONNECT_TIMEOUT_S} s "
                                  f"({exc}); start one with `dask scheduler` or check the address") from exc
        else:
            self.cluster = self._local_cluster(dd, int(workers or 1), target)
            self.client = dd.Client(self.cluster)
        info = self.client.scheduler_info()["workers"].values()
        self.build_workers = sum(1 for w in info if w.get("resources", {}).get("build")) or 1
        if measuring and not any(w.get("resources", {}).get("measure") for w in info):
            self.close()
            raise TuningError(f"the Dask cluster at {address or 'local'} has no measuring worker (resources "
                              "measure=1); start one per GPU, see docs/tuning.md")
        if measuring:  # each measuring worker starts its measuring process while the first batch builds
            measurers = [a for a, w in self.client.scheduler_info()["workers"].items()
                         if w.get("resources", {}).get("measure")]
            target_text = self.tasks[0].target if self.tasks else str(target)  # the key measurements use
            self.client.run(_start_measurer, target_text, self.timeout, self.repeats, workers=measurers)
        self._task_futures = [self.client.scatter(t, broadcast=True) for t in self.tasks]
        self._stream = target.is_gpu if stream is None else bool(stream)
        # Two batches ahead: the measuring workers go on with the next batch (built meanwhile)
        # while the tuner stores one and proposes the one after.
        self.lookahead = 2 if self._stream else 0
        self._refs: dict[int, Any] = {}  # task index -> the future of its default schedule's build

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

    def _build(self, task_index: int, config: dict[str, Any]) -> Any:
        return self.client.submit(build_one, self._task_futures[task_index], config, resources={"build": 1},
                                  pure=False)

    def _measure(self, task_index: int, build: Any, best_s: float | None) -> Any:
        return self.client.submit(_measure_on_worker, self._task_futures[task_index], self._refs[task_index], build,
                                  self.timeout, self.repeats, best_s, resources={"measure": 1}, pure=False)

    def start(self, task_index: int, configs: Sequence[ConfigEntity], best_s: float | None = None) -> Any:
        """Submit the builds of ``configs`` (and, once per task, of the default schedule: the
        reference) to the build workers, and on a GPU their measurements too; returns a handle for
        :meth:`finish`."""
        if task_index not in self._refs:
            self._refs[task_index] = self._build(task_index, self.tasks[task_index].space.default.to_json())
        builds = [self._build(task_index, c.to_json()) for c in configs]
        measures = None
        if self.measuring and self._stream:
            measures = [self._measure(task_index, b, best_s) for b in builds]
        return task_index, best_s, builds, measures

    def _result(self, fut: Any, deadline: float) -> Any:
        return fut.result(timeout=max(1.0, deadline - time.monotonic()))

    def finish(self, handle: Any) -> list[Outcome]:
        """Wait for the measurements of ``handle`` (on a CPU target: first for its builds, then
        submit the measurements); returns each candidate's build and measurement."""
        task_index, best_s, builds, measures = handle
        per = max(60.0, self.timeout)
        deadline = time.monotonic() + per * (len(builds) // self.build_workers + 2)
        if not self.measuring:
            return [(self._build_result(b, deadline), None) for b in builds]
        if measures is None:
            try:
                _dask().wait(builds, timeout=max(1.0, deadline - time.monotonic()))
            except TimeoutError:
                pass  # the measurements below wait for what is left, within the deadline
            measures = [self._measure(task_index, b, best_s) for b in builds]
        deadline += self.timeout * (len(measures) + 2)
        out: list[Outcome] = []
        for b, m in zip(builds, measures):
            try:
                out.append(self._result(m, deadline))
            except TimeoutError:
                m.cancel()
                out.append((BuildResult({}), MeasureResult(None, "run: no result from the measuring worker")))
            except _dask().KilledWorker as exc:
                built = self._build_result(b, deadline)
                out.append((built, None if built.parts is None else
                            MeasureResult(None, f"run: the measuring worker died ({exc})")))
        return out

    def _build_result(self, fut: Any, deadline: float) -> BuildResult:
        try:
            return self._result(fut, deadline)
        except TimeoutError:
            fut.cancel()
            return BuildResult(None, "build: timed out on the Dask worker")
        except _dask().KilledWorker as exc:
            return BuildResult(None, f"build: the Dask worker died ({exc})")

    def close(self) -> None:
        """Close the client (and the local cluster this executor started)."""
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
