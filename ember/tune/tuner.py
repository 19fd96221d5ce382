"""``ember.tune`` and ``ember.tune_kernel``: the tuning loop.

The loop, until the trial budget or the time budget is spent (or Ctrl-C):

1. pick a task: each task's first batch in turn, then the one with the most estimated time in
   the model (its weight x its best time so far), discounted by how often it was tried;
2. ask its :class:`~ember.tune.search.TaskSearch` for a batch of legal unmeasured points;
3. build them in parallel and measure them one at a time (the executor: local processes or a
   Dask cluster; on a GPU each as soon as it is built, with the next batches building meanwhile),
   each output checked against the default schedule's;
4. store every result in the records database at once (invalid ones with their reason), feed
   them to the search's cost model, update the progress bar (trials, best GFLOP/s per task,
   estimated latency of the tuned kernels).

On a GPU, batches overlap: the executor's ``lookahead`` batches (and at least its
``inflight_trials`` candidates) are started beyond the one the tuner waits for, so a batch is
proposed before the results of those in flight are in (the cost model lags by them: one batch,
more when batches are small; with Dask the measuring workers never wait for the tuner).

``trials`` counts every measurement of the tasks in the database, those of earlier runs
included: running the same command again after an interruption resumes and stops at the same
total. Ctrl-C stops after the batch being measured is stored and returns what was found.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends import backend_for
from ..errors import TuningError
from ..strategy import ConfigEntity, ConfigSpace
from ..target import Target
from ..te import Schedule, Tensor
from .executor import Executor, LocalExecutor
from .keys import TargetKey, gpu_present, target_key
from .measure import Runner
from .records import Record, TuningDB
from .search import TaskSearch
from .task import Task, extract_tasks, kernel_task

DEFAULT_TRIALS = 200


@dataclass
class TaskResult:
    """What tuning found for one task."""

    name: str
    workload: str
    weight: int
    flops: float
    trials: int = 0
    invalid: int = 0
    best_seconds: float | None = None
    default_seconds: float | None = None
    best_config: dict[str, Any] | None = None

    @property
    def gflops(self) -> float:
        """GFLOP/s of the best valid configuration (0 when none)."""
        return self.flops / self.best_seconds / 1e9 if self.best_seconds else 0.0

    @property
    def speedup(self) -> float | None:
        """Default time / best time, when both were measured."""
        if self.best_seconds and self.default_seconds:
            return self.default_seconds / self.best_seconds
        return None


@dataclass
class TuneResult:
    """The outcome of :func:`tune` or :func:`tune_kernel`. ``new_trials`` were measured in this
    run; ``measured`` is False when no device was there to time on (candidates were only built and
    checked for legality)."""

    target: str
    target_key: TargetKey
    db: str
    tasks: list[TaskResult]
    new_trials: int = 0
    elapsed: float = 0.0
    interrupted: bool = False
    measured: bool = True
    built: int = 0
    build_failed: int = 0
    notes: list[str] = field(default_factory=list)
    #: where the time went, in seconds: the tuner's own ``setup`` (starting workers), ``search``
    #: (cost model and proposals), ``wait`` (for builds and measurements), ``store`` (records);
    #: the workers' ``build`` and ``measure`` time summed over candidates (``measure_load``,
    #: ``measure_check``, ``measure_time``: its parts in the measuring process)
    phases: dict[str, float] = field(default_factory=dict)
    #: measurements that stopped early because the candidate was clearly slower than the best
    rejected: int = 0
    #: records this run added to the database (a configuration another tuner recorded first is
    #: not added again)
    stored: int = 0
    #: trials lost because the measuring process died while measuring them (a crash, or a kill)
    lost: int = 0
    #: seconds each Dask measuring worker spent measuring, by worker name
    measurers: dict[str, float] = field(default_factory=dict)

    @property
    def trials_per_minute(self) -> float:
        """New trials per minute of the tuning loop (starting the workers not counted)."""
        loop = self.elapsed - self.phases.get("setup", 0.0)
        return self.new_trials / loop * 60 if loop > 0 else 0.0

    @property
    def latency(self) -> float | None:
        """Estimated time of the tuned kernels per model run: sum of weight x best time."""
        if not self.tasks or any(t.best_seconds is None for t in self.tasks):
            return None
        return sum(t.weight * (t.best_seconds or 0.0) for t in self.tasks)

    @property
    def default_latency(self) -> float | None:
        """The same sum for the default schedules, when they were measured."""
        if not self.tasks or any(t.default_seconds is None for t in self.tasks):
            return None
        return sum(t.weight * (t.default_seconds or 0.0) for t in self.tasks)

    def __str__(self) -> str:
        lines = [f"tuned {len(self.tasks)} task(s) on {self.target_key.describe()}: {self.new_trials} new trial(s) "
                 f"in {self.elapsed:.1f} s{' (interrupted)' if self.interrupted else ''}; {self.stored} record(s) "
                 f"stored in {self.db}"]
        lines.append(f"{'task':42} {'weight':>6} {'trials':>6} {'invalid':>7} {'default':>10} {'best':>10} "
                     f"{'GFLOP/s':>8} {'speedup':>7}")
        for t in self.tasks:
            ms = lambda s: f"{s * 1e3:8.3f}ms" if s else f"{'-':>10}"  # noqa: E731
            sp = f"{t.speedup:6.2f}x" if t.speedup else f"{'-':>7}"
            lines.append(f"{t.name[:42]:42} {t.weight:6d} {t.trials:6d} {t.invalid:7d} {ms(t.default_seconds)} "
                         f"{ms(t.best_seconds)} {t.gflops:8.1f} {sp}")
        if self.latency is not None:
            extra = f" (default schedules: {self.default_latency * 1e3:.3f} ms)" if self.default_latency else ""
            lines.append(f"estimated time of the tuned kernels per run: {self.latency * 1e3:.3f} ms{extra}")
        if self.new_trials:
            lines.append(self.describe_phases())
        lines += self.notes
        if self.measured and any(t.best_seconds for t in self.tasks):
            kind = self.target.split()[0]
            lines.append(f"ember.compile(model, {kind!r}, tuning_db={self.db!r}) applies the best records")
        return "\n".join(lines)


    def describe_phases(self) -> str:
        """One line: trials per minute and where the time went (:attr:`phases`)."""
        p = self.phases
        g = lambda k: p.get(k, 0.0)  # noqa: E731
        return (f"{self.trials_per_minute:.1f} trials/min; tuner: setup {g('setup'):.1f} s, "
                f"search {g('search'):.1f} s, waiting {g('wait'):.1f} s, records {g('store'):.1f} s; "
                f"workers: builds {g('build'):.1f} s, "
                f"measurements {g('measure'):.1f} s (load {g('measure_load'):.1f}, check {g('measure_check'):.1f}, "
                f"timing {g('measure_time'):.1f}); {self.rejected} timing(s) stopped early as clearly slower")


def parse_time_budget(value: float | int | str | None) -> float | None:
    """Seconds of a time budget: a number of seconds or a string like ``90s``, ``10m``, ``1.5h``;
    None for no limit. Zero, negative or malformed values are a :class:`TuningError`."""
    if value is None:
        return None
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(s|sec|m|min|h)?\s*", value)
        if m is None:
            raise TuningError(f"time budget {value!r}: give seconds or a duration like 90s, 10m, 1.5h")
        seconds = float(m.group(1)) * {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}[m.group(2) or "s"]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TuningError(f"time budget {value!r}: give seconds or a duration like 90s, 10m, 1.5h")
    if not seconds > 0 or math.isinf(seconds):
        raise TuningError(f"time budget {value!r} must be a positive duration (leave it out for no limit)")
    return seconds


def _check_trials(trials: Any) -> int:
    if isinstance(trials, bool) or not isinstance(trials, int) or trials <= 0:
        raise TuningError(f"trials={trials!r}: give a positive number of configurations to measure")
    return trials


def _check_workers(workers: Any, dask: Any) -> None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise TuningError(f"workers={workers!r}: give a number of build workers >= 0 (0 builds in this process)")
    if workers is not None and dask is not None:
        raise TuningError("give either workers= (a local Dask cluster) or dask= (a running scheduler), not both")


def tune(
    model: Any,
    target: str | Target = "llvm",
    trials: int = DEFAULT_TRIALS,
    db: str | os.PathLike[str] | None = None,
    time_budget: float | str | None = None,
    workers: int | None = None,
    dask: str | None = None,
    input_shapes: dict[str, Sequence[int]] | None = None,
    quiet: bool = False,
    timeout: float = 30.0,
    repeats: int = 5,
    batch: int | None = None,
    cost_model: str = "auto",
    seed: int = 0,
) -> TuneResult:
    """Tune the kernels of ``model`` (an ONNX path, bytes or ModelProto, or a Graph) for
    ``target`` (``"llvm"``, ``"cuda"``, ``"rocm"``, with options).

    The tasks are the model's distinct tunable kernels (:func:`~ember.tune.task.extract_tasks`),
    weighted by how often they occur. ``trials`` is the number of configurations measured over all
    tasks, records of earlier runs in ``db`` included (so a second run resumes); ``time_budget``
    (seconds, or ``"10m"``) stops it earlier: no batch is started that would, at the pace of the
    batches before it, end past the budget (the setup of the workers counts). Records go to
    ``db`` (default: ``EMBER_TUNING_DB``, else ``~/.cache/ember/tuning.db``), where
    ``ember.compile`` finds them.

    Where candidates run: ``workers=None, dask=None`` — local build processes (as many as cores,
    at most 8) and a measuring subprocess; ``workers=N`` — a Dask ``LocalCluster`` of ``N`` build
    workers and one measuring worker per GPU (one for a CPU target); ``dask="tcp://host:8786"``
    — a running Dask scheduler (``docs/tuning.md``). ``timeout`` seconds per build and per
    measurement; ``repeats``: at most this many timed rounds per measurement (their median counts;
    fewer when 3 agree within 3 % or the candidate is clearly slower than the best); ``batch``
    candidates per round (default: twice the build workers, at least 8); ``cost_model``
    ``"auto"``, ``"xgboost"`` or ``"numpy"``; ``quiet`` hides the progress bar."""
    _check_trials(trials)
    parse_time_budget(time_budget)
    _check_workers(workers, dask)
    Target(target)
    tasks = extract_tasks(model, target, input_shapes)
    return run_tasks(tasks, target, trials, db, time_budget, workers, dask, quiet, timeout, repeats, batch,
                     cost_model, seed)


def tune_kernel(
    schedule_fn: Callable[[ConfigEntity], Schedule | tuple[Schedule, Sequence[Tensor]]],
    args: Sequence[Tensor],
    target: str | Target = "llvm",
    space: ConfigSpace | None = None,
    trials: int = 64,
    db: str | os.PathLike[str] | None = None,
    name: str | None = None,
    time_budget: float | str | None = None,
    workers: int | None = None,
    dask: str | None = None,
    quiet: bool = False,
    timeout: float = 30.0,
    repeats: int = 5,
    batch: int | None = None,
    cost_model: str = "auto",
    seed: int = 0,
) -> TuneResult:
    """Tune one te kernel: ``schedule_fn(cfg)`` returns the schedule of configuration ``cfg`` (a
    point of ``space``, the :class:`~ember.strategy.ConfigSpace` declaring its knobs) for the
    tensors ``args`` (inputs, then outputs, in call order), or ``(schedule, arguments)`` built anew
    for that point (see :func:`~ember.tune.task.kernel_task`). ``name`` (default: the function's
    qualified name) keys its records; the other arguments are those of :func:`tune`. The best
    configuration is :func:`best_config`'s answer afterwards."""
    _check_trials(trials)
    parse_time_budget(time_budget)
    _check_workers(workers, dask)
    if space is None:
        raise TuningError("tune_kernel needs space=, the ConfigSpace that declares the schedule's knobs")
    task = kernel_task(schedule_fn, args, target, space, name)
    return run_tasks([task], target, trials, db, time_budget, workers, dask, quiet, timeout, repeats, batch,
                     cost_model, seed)


def best_config(schedule_fn: Callable[[ConfigEntity], Any], args: Sequence[Tensor], target: str | Target,
                space: ConfigSpace, db: str | os.PathLike[str] | None = None, name: str | None = None) -> ConfigEntity:
    """The best valid recorded configuration of a te kernel (as :func:`tune_kernel` keyed it) on
    ``target``, or the space's default point when there is none that fits ``space``."""
    task = kernel_task(schedule_fn, args, target, space, name)
    with TuningDB(db) as tdb:
        recs = sorted(tdb.records(target_key(task.target), task.workload, valid_only=True),
                      key=lambda r: r.seconds or float("inf"))
    for r in recs:
        if space.is_valid(ConfigEntity.from_json(r.config)):
            return space.from_json(r.config)
    return space.default


# -- the loop ----------------------------------------------------------------------------------------
def _default_workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _executor(tasks: list[Task], tgt: Target, workers: int | None, dask: str | None, measuring: bool,
              timeout: float, repeats: int) -> tuple[Executor, int]:
    if workers is None and dask is None:
        n = _default_workers()
        runner = Runner(str(tgt), timeout=timeout, repeats=repeats) if measuring else None
        return LocalExecutor(tasks, n, runner, build_timeout=max(timeout, 60.0), stream=tgt.is_gpu), n
    from .distributed import DaskExecutor

    ex = DaskExecutor(tasks, tgt, workers=workers, address=dask, measuring=measuring, timeout=timeout,
                      repeats=repeats)
    return ex, ex.build_workers


def _pick(searches: list[TaskSearch], tasks: list[Task], tried: list[int]) -> int | None:
    live = [i for i, s in enumerate(searches) if not s.exhausted]
    if not live:
        return None
    fresh = [i for i in live if not searches[i].measured and not tried[i]]  # not even a batch under way
    if fresh:
        return fresh[0]

    def share(i: int) -> float:
        if not searches[i].measured:  # its first batch is under way: its results come first
            return -1.0
        best = searches[i].best
        t = best[1] if best else 1.0
        return tasks[i].weight * t / math.sqrt(1 + tried[i])

    return max(live, key=share)


def run_tasks(tasks: list[Task], target: str | Target, trials: int, db: str | os.PathLike[str] | None,
              time_budget: float | str | None, workers: int | None, dask: str | None, quiet: bool, timeout: float,
              repeats: int, batch: int | None, cost_model: str, seed: int) -> TuneResult:
    """The tuning loop over ``tasks`` (see the module docstring and :func:`tune`)."""
    trials = _check_trials(trials)
    budget = parse_time_budget(time_budget)
    _check_workers(workers, dask)
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise TuningError(f"batch={batch!r}: give a positive number of candidates per batch (or leave it out)")
    tgt = backend_for(target).resolve(Target(target))
    tkey = target_key(tgt)
    measuring = gpu_present(tgt.kind) if tgt.is_gpu else True
    t0 = time.monotonic()
    tdb = TuningDB(db)
    result = TuneResult(str(tgt), tkey, str(tdb.path), [], measured=measuring)
    searches = [TaskSearch(t, cost_model, seed + k) for k, t in enumerate(tasks)]
    tried = [0] * len(tasks)
    for s, t in zip(searches, tasks):
        for r in tdb.records(tkey, t.workload):
            s.add_json(r.config, r.seconds if r.valid else None)
    done = sum(len(s.measured) for s in searches)
    if not tasks:
        result.notes.append("the model has no tunable kernels for this target (no kernel declares a knob space)")
    elif done >= trials:
        result.notes.append(f"{done} trial(s) of these tasks are already in the database (>= trials={trials}): "
                            "raise trials to search further")
    if not measuring:
        result.notes.append(f"no {tgt.kind} device here: candidates are built and checked for legality only, "
                            "nothing is measured or recorded; measuring needs the device")
    executor: Executor | None = None
    bar = _progress(max(0, trials - done), len(tasks), quiet)
    # On a GPU the next batches build on the CPU cores while this one is measured on the device
    # (each candidate measured as soon as it is built; executor.lookahead says how many batches
    # ahead); on a CPU target builds and timings never overlap (they would compete for the cores).
    overlap = 0
    phases = result.phases
    try:
        if tasks and done < trials:
            clock = time.monotonic()
            executor, nworkers = _executor(tasks, tgt, workers, dask, measuring, timeout, repeats)
            phases["setup"] = time.monotonic() - clock
            size = batch or max(8, 2 * nworkers)
            overlap = max(executor.lookahead, math.ceil(executor.inflight_trials / size)) if measuring else 0
            inflight: list[tuple[int, list[ConfigEntity], Any, float]] = []
            proposed, stopping = done, False
            # seconds one more batch adds to the run (the interval between finished batches,
            # smoothed): a batch is not started when it and those in flight would end past the budget
            step_s, last_finish = 0.0, None
            while True:
                added = False
                if not stopping and proposed < trials:
                    if budget is not None and time.monotonic() - t0 + step_s * (len(inflight) + 1) >= budget:
                        result.notes.append(f"stopped at the time budget ({budget:.0f} s)")
                        stopping = True
                    elif (i := _pick(searches, tasks, tried)) is None:
                        if not inflight:
                            result.notes.append("every task's space is exhausted")
                        stopping = not inflight
                    elif cfgs := _timed(phases, "search", searches[i].propose, min(size, trials - proposed)):
                        best = searches[i].best
                        inflight.append((i, cfgs, executor.start(i, cfgs, best[1] if best else None),
                                         time.monotonic()))
                        proposed += len(cfgs)
                        tried[i] += 1
                        added = True
                if not inflight:
                    if added or (not stopping and proposed < trials):
                        continue
                    break
                if added and len(inflight) <= overlap:
                    continue
                i, cfgs, handle, started = inflight.pop(0)
                outcomes = _timed(phases, "wait", executor.finish, handle)
                now = time.monotonic()
                step = now - (started if last_finish is None else max(started, last_finish))
                step_s, last_finish = (step if step_s == 0.0 else 0.5 * (step_s + step)), now
                _timed(phases, "store", _store, result, searches[i], tasks[i], tkey, cfgs, outcomes,
                       tdb if measuring else None)
                done += len(cfgs)
                if bar is not None:
                    bar.update(len(cfgs))
                    bar.set_postfix_str(_postfix(searches, tasks), refresh=True)
    except KeyboardInterrupt:
        result.interrupted = True
        result.notes.append("interrupted: what was measured is stored; run the same command again to resume")
    finally:
        if bar is not None:
            bar.close()
        if executor is not None:
            executor.close()
            result.notes += executor.notes
        tdb.close()
    if result.lost:
        result.notes.append(f"{result.lost} trial(s) lost: the measuring process died while measuring them (a crash "
                            "or a kill; recorded as invalid); a new measuring process took over and the run went on")
    result.tasks = [_task_result(t, s, measuring) for t, s in zip(tasks, searches)]
    if not measuring:
        result.notes.append(f"{result.built} candidate(s) built, {result.build_failed} failed to build")
    result.elapsed = time.monotonic() - t0
    return result


def _store(result: TuneResult, search: TaskSearch, task: Task, tkey: TargetKey, cfgs: list[ConfigEntity],
           outcomes: list[Any], tdb: TuningDB | None) -> None:
    """Note a measured batch in the search and the result, and in ``tdb`` (None: not recorded)."""
    recs = []
    p = result.phases
    for cfg, (b, m) in zip(cfgs, outcomes):
        result.built += b.parts is not None
        result.build_failed += b.parts is None
        p["build"] = p.get("build", 0.0) + b.seconds
        if m is not None:
            p["measure"] = p.get("measure", 0.0) + m.elapsed
            for k, v in m.phases.items():
                p[f"measure_{k}"] = p.get(f"measure_{k}", 0.0) + v
            result.rejected += m.rejected
            result.lost += m.died
            if m.worker:
                result.measurers[m.worker] = result.measurers.get(m.worker, 0.0) + m.elapsed
        seconds = m.seconds if m is not None else None
        error = (m.error if m is not None else b.error) or (None if seconds else "not measured")
        search.add(cfg, seconds)
        if m is not None or b.error:
            recs.append(Record(task.workload, tkey, cfg.to_json(), seconds, error, task.flops, task.name,
                               task.space_signature))
    result.new_trials += len(cfgs)
    if tdb is not None:
        result.stored += tdb.add(recs)


def _timed(phases: dict[str, float], phase: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, its seconds added to ``phases[phase]``."""
    t0 = time.monotonic()
    try:
        return fn(*args)
    finally:
        phases[phase] = phases.get(phase, 0.0) + time.monotonic() - t0


def _task_result(task: Task, search: TaskSearch, measuring: bool = True) -> TaskResult:
    from .search import config_key

    r = TaskResult(task.name, task.workload, task.weight, task.flops, trials=len(search.measured))
    r.invalid = sum(1 for _, s in search.measured.values() if s is None) if measuring else 0
    best = search.best
    if best is not None:
        r.best_seconds, r.best_config = best[1], best[0].to_json()
    d = search.measured.get(config_key(task.space.default))
    r.default_seconds = d[1] if d else None
    return r


def _postfix(searches: list[TaskSearch], tasks: list[Task]) -> str:
    parts, total, complete = [], 0.0, True
    for k, (s, t) in enumerate(zip(searches, tasks)):
        best = s.best
        if best is None:
            complete = False
            continue
        total += t.weight * best[1]
        if k < 4:
            parts.append(f"t{k} {t.flops / best[1] / 1e9:.0f}")
    est = f"est {total * 1e3:.2f} ms" if complete else "est -"
    return f"{est} | GFLOP/s " + " ".join(parts) + (" ..." if len(tasks) > 4 else "")


def _progress(total: int, ntasks: int, quiet: bool) -> Any:
    if quiet:
        return None
    import tqdm

    tqdm.tqdm.monitor_interval = 0  # no monitor thread: build workers are forked from this process
    return tqdm.tqdm(total=total, desc=f"tuning {ntasks} task(s)", unit="trial", file=sys.stderr, dynamic_ncols=True)
