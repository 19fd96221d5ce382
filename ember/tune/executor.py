"""Executors: where a batch of candidates is built and measured.

An executor takes one task's batch of configurations and returns, per configuration, its
:class:`~ember.tune.measure.BuildResult` and :class:`~ember.tune.measure.MeasureResult` (None
when nothing was measured: the build failed, or no device is here). Each task's default schedule
is built once more as the reference every candidate's output is compared with.

On a CPU target the batch is built first, in parallel, then measured one candidate at a time, so
that no build competes with a timing for the cores. On a GPU (``stream=True``) each candidate is
measured as soon as it is built, while the rest of the batch and the next batch build on the CPU
cores: the measuring device is kept busy.

:class:`LocalExecutor` builds in forked worker processes and measures in one measuring
subprocess; :class:`ember.tune.distributed.DaskExecutor` does the same on a Dask cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ..strategy import ConfigEntity
from .measure import BuildResult, LocalBuilder, MeasureResult, Runner
from .task import Task

Outcome = tuple[BuildResult, MeasureResult | None]


class Executor(Protocol):
    """Builds and measures batches (see the module docstring). ``lookahead``: how many batches the
    tuner keeps started beyond the one it waits for (0: builds and timings must not overlap);
    ``inflight_trials``: when measuring overlaps, the fewest candidates the tuner keeps started
    beyond that batch (more batches when they are small); ``notes``: what the tuner should tell
    at the end (a worker that died)."""

    lookahead: int
    inflight_trials: int
    notes: list[str]

    def start(self, task_index: int, configs: Sequence[ConfigEntity], best_s: float | None = None) -> Any:
        """Start building ``configs`` of task ``task_index`` (``best_s``: the task's best time so
        far, for early rejection); returns a handle for :meth:`finish`."""

    def finish(self, handle: Any) -> list[Outcome]:
        """Wait for the builds of ``handle`` and measure them (handles finish in start order)."""

    def close(self) -> None:
        """Release workers and processes."""


class LocalExecutor:
    """Builds in ``workers`` forked processes, measures with ``runner`` (None: build only);
    ``stream``: measure each candidate as soon as it is built (a GPU target)."""

    def __init__(self, tasks: Sequence[Task], workers: int, runner: Runner | None, build_timeout: float = 120.0,
                 stream: bool = False):
        self.tasks = list(tasks)
        self.builder = LocalBuilder(self.tasks, workers, build_timeout)
        self.runner = runner
        if runner is not None:
            runner.start()
        self.stream = stream
        # The next batch builds while this process measures one; one batch ahead is enough, as the
        # measurements wait for this process anyway while it proposes the next batch.
        self.lookahead = 1 if stream else 0
        self.inflight_trials = 0
        self.notes: list[str] = []
        self._refs: dict[int, BuildResult] = {}
        self._ref_asked: set[int] = set()

    def start(self, task_index: int, configs: Sequence[ConfigEntity], best_s: float | None = None) -> Any:
        """See :class:`Executor`."""
        jobs = [(task_index, c.to_json()) for c in configs]
        with_ref = task_index not in self._ref_asked
        if with_ref:  # the default schedule first: the reference every output is checked against
            self._ref_asked.add(task_index)
            jobs.insert(0, (task_index, self.tasks[task_index].space.default.to_json()))
        return task_index, with_ref, best_s, self.builder.start(jobs)

    def finish(self, handle: Any) -> list[Outcome]:
        """See :class:`Executor`."""
        task_index, with_ref, best_s, pending = handle
        built: Iterable[BuildResult] = self.builder.results(pending)
        if not self.stream:
            built = list(built)
        it = iter(built)
        if with_ref:
            self._refs[task_index] = next(it)
        return measure_batch(self.tasks[task_index], self._refs[task_index], it, self.runner, best_s)

    def run(self, task_index: int, configs: Sequence[ConfigEntity]) -> list[Outcome]:
        """Build and measure ``configs`` of task ``task_index`` now."""
        return self.finish(self.start(task_index, configs))

    def close(self) -> None:
        """See :class:`Executor`."""
        self.builder.close()
        if self.runner is not None:
            self.runner.close()


def measure_batch(task: Task, ref: BuildResult, built: Iterable[BuildResult], runner: Runner | None,
                  best_s: float | None = None) -> list[Outcome]:
    """Measure each built candidate of ``task`` against reference build ``ref`` with ``runner``
    (as ``built`` yields them); ``best_s`` is the task's best time known to the tuner."""
    out: list[Outcome] = []
    for b in built:
        if b.parts is None or runner is None:
            out.append((b, None))
        elif ref.parts is None:
            out.append((b, MeasureResult(None, f"no reference: the default schedule does not build ({ref.error})")))
        else:
            out.append((b, runner.measure(task, ref.parts, b.parts, best_s)))
    return out
