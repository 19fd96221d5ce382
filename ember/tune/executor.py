"""Executors: where a batch of candidates is built and measured.

An executor takes one task's batch of configurations and returns, per configuration, its
:class:`~ember.tune.measure.BuildResult` and :class:`~ember.tune.measure.MeasureResult` (None
when nothing was measured: the build failed, or no device is here). The batch is built first, in
parallel, then measured one candidate at a time, so that no build competes with a timing.
Each task's default schedule is built once more as the reference every candidate's output is
compared with.

:class:`LocalExecutor` builds in forked worker processes and measures in one measuring
subprocess; :class:`ember.tune.distributed.DaskExecutor` does the same on a Dask cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..strategy import ConfigEntity
from .measure import BuildResult, LocalBuilder, MeasureResult, Runner
from .task import Task

Outcome = tuple[BuildResult, MeasureResult | None]


class Executor(Protocol):
    """Builds and measures batches (see the module docstring)."""

    def run(self, task_index: int, configs: Sequence[ConfigEntity]) -> list[Outcome]:
        """Build and measure ``configs`` of task ``task_index``."""

    def close(self) -> None:
        """Release workers and processes."""


class LocalExecutor:
    """Builds in ``workers`` forked processes, measures with ``runner`` (None: build only)."""

    def __init__(self, tasks: Sequence[Task], workers: int, runner: Runner | None, build_timeout: float = 120.0):
        self.tasks = list(tasks)
        self.builder = LocalBuilder(self.tasks, workers, build_timeout)
        self.runner = runner
        self._refs: dict[int, BuildResult] = {}

    def run(self, task_index: int, configs: Sequence[ConfigEntity]) -> list[Outcome]:
        """See :class:`Executor`."""
        task = self.tasks[task_index]
        jobs = [(task_index, c.to_json()) for c in configs]
        need_ref = task_index not in self._refs
        if need_ref:
            jobs.append((task_index, task.space.default.to_json()))
        built = self.builder.build(jobs)
        if need_ref:
            self._refs[task_index] = built.pop()
        return measure_batch(task, self._refs[task_index], built, self.runner)

    def close(self) -> None:
        """See :class:`Executor`."""
        self.builder.close()
        if self.runner is not None:
            self.runner.close()


def measure_batch(task: Task, ref: BuildResult, built: Sequence[BuildResult], runner: Runner | None) -> list[Outcome]:
    """Measure each built candidate of ``task`` against reference build ``ref`` with ``runner``."""
    out: list[Outcome] = []
    for b in built:
        if b.parts is None or runner is None:
            out.append((b, None))
        elif ref.parts is None:
            out.append((b, MeasureResult(None, f"no reference: the default schedule does not build ({ref.error})")))
        else:
            out.append((b, runner.measure(task, ref.parts, b.parts)))
    return out
