"""Tuning on a Dask cluster (``ember tune --workers N`` or ``--dask tcp://HOST:8786``).

Workers are told apart by Dask *resources*: build workers have ``build=1`` (CPU cores: lowering
and LLVM), measuring workers ``measure=1`` (one per GPU, pinned with ``CUDA_VISIBLE_DEVICES`` /
``HIP_VISIBLE_DEVICES``; one for a CPU target). A batch is built on the build workers (each
candidate a Dask task; the tuning task itself is scattered to every worker once), then measured on
the measuring workers — several GPUs measure candidates of the batch side by side; a CPU target
is measured while no build runs. A measuring worker keeps one measuring subprocess
(:class:`~ember.tune.measure.Runner`) alive across candidates, so crashes and hangs are contained
as in a local run.

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

from collections.abc import Sequence
from typing import Any

from ..errors import TuningError
from ..strategy import ConfigEntity
from ..target import Target
from .executor import Outcome
from .keys import gpu_present
from .measure import BuildResult, MeasureResult, Runner, build_one
from .task import Task

CONNECT_TIMEOUT_S = 10
_RUNNERS: dict[tuple[str, float, int], Runner] = {}


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


def _measure_on_worker(task: Task, ref: dict[str, bytes], parts: dict[str, bytes], timeout: float,
                       repeats: int) -> MeasureResult:
    """Runs on a measuring worker: this worker's measuring subprocess times ``parts``."""
    key = (task.target, timeout, repeats)
    runner = _RUNNERS.get(key)
    if runner is None:
        runner = _RUNNERS[key] = Runner(task.target, timeout=timeout, repeats=repeats)
    return runner.measure(task, ref, parts)


class DaskExecutor:
    """Builds and measures on a Dask cluster (see the module docstring)."""

    def __init__(self, tasks: Sequence[Task], target: Target, workers: int | None = None, address: str | None = None,
                 measuring: bool = True, timeout: float = 30.0, repeats: int = 5):
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
        self._task_futures = [self.client.scatter(t, broadcast=True) for t in self.tasks]
        self._refs: dict[int, BuildResult] = {}
        self._ref_asked: set[int] = set()

    @staticmethod
    def _local_cluster(dd: Any, workers: int, target: Target) -> Any:
        """``workers`` build workers and the measuring workers on this host."""
        import dask

        dask.config.set({"distributed.worker.daemon": False, "distributed.scheduler.work-stealing": False})
        cluster = dd.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, resources={"build": 1},
                                  dashboard_address=None, silence_logs=40)
        gpus = _gpu_count(target.kind) if target.is_gpu else 0
        var = "CUDA_VISIBLE_DEVICES" if target.kind == "cuda" else "HIP_VISIBLE_DEVICES"
        for k in range(max(1, gpus)):
            env = {var: str(k)} if gpus else {}
            cluster.worker_spec[f"measure-{k}"] = {"cls": dd.Nanny, "options": {
                "nthreads": 1, "resources": {"measure": 1}, "env": env, "memory_limit": 0}}
        cluster.sync(cluster._correct_state)
        cluster.wait_for_workers(workers + max(1, gpus))
        return cluster

    def _submit_builds(self, jobs: list[tuple[int, dict[str, Any]]]) -> list[Any]:
        return [self.client.submit(build_one, self._task_futures[i], c, resources={"build": 1}, pure=False)
                for i, c in jobs]

    def _gather_builds(self, futs: list[Any]) -> list[BuildResult]:
        out = []
        for f in futs:
            try:
                out.append(f.result(timeout=max(60.0, self.timeout) * max(1, len(futs) // self.build_workers + 1)))
            except TimeoutError:
                f.cancel()
                out.append(BuildResult(None, "build: timed out on the Dask worker"))
            except _dask().KilledWorker as exc:
                out.append(BuildResult(None, f"build: the Dask worker died ({exc})"))
        return out

    def start(self, task_index: int, configs: Sequence[ConfigEntity]) -> Any:
        """Submit the builds of ``configs`` (and, once per task, of the default schedule: the
        reference) to the build workers; returns a handle for :meth:`finish`."""
        jobs = [(task_index, c.to_json()) for c in configs]
        with_ref = task_index not in self._ref_asked
        if with_ref:
            self._ref_asked.add(task_index)
            jobs.append((task_index, self.tasks[task_index].space.default.to_json()))
        return task_index, with_ref, self._submit_builds(jobs)

    def finish(self, handle: Any) -> list[Outcome]:
        """Gather the builds of ``handle``, then measure them on the measuring workers."""
        task_index, with_ref, futs = handle
        built = self._gather_builds(futs)
        if with_ref:
            self._refs[task_index] = built.pop()
        ref = self._refs[task_index]
        if not self.measuring:
            return [(b, None) for b in built]
        if ref.parts is None:
            return [(b, MeasureResult(None, f"no reference: the default schedule does not build ({ref.error})")
                     if b.parts is not None else None) for b in built]
        ref_future = self.client.scatter(ref.parts, broadcast=True)
        futs = {k: self.client.submit(_measure_on_worker, self._task_futures[task_index], ref_future, b.parts,
                                      self.timeout, self.repeats, resources={"measure": 1}, pure=False)
                for k, b in enumerate(built) if b.parts is not None}
        out: list[Outcome] = []
        for k, b in enumerate(built):
            if k not in futs:
                out.append((b, None))
                continue
            try:
                out.append((b, futs[k].result(timeout=self.timeout * (len(futs) + 2))))
            except TimeoutError:
                out.append((b, MeasureResult(None, "run: no result from the measuring worker")))
            except _dask().KilledWorker as exc:
                out.append((b, MeasureResult(None, f"run: the measuring worker died ({exc})")))
        return out

    def close(self) -> None:
        """Close the client (and the local cluster this executor started)."""
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

