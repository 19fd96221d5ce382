"""Tuning on a Dask LocalCluster of two processes (one build worker, one measuring worker), and
the clear error of an address no scheduler answers."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import numpy as np
import pytest

import ember

from .conftest import gemm_template

distributed = pytest.importorskip("distributed", reason="Dask is the optional ember[tune] extra")


def test_local_cluster_of_two_processes_tunes_a_kernel(tmp_path, rng):
    m, n, k = 21, 30, 17
    schedule, args, space = gemm_template(m, n, k)
    db = tmp_path / "t.db"
    result = ember.tune_kernel(schedule, args, "llvm", space=space, trials=6, db=db, name="test.dask.gemm",
                               workers=1, quiet=True, repeats=3, batch=6)
    (task,) = result.tasks
    assert result.new_trials == 6 and task.trials == 6 and task.best_seconds
    cfg = ember.tune.best_config(schedule, args, "llvm", space, db=db, name="test.dask.gemm")
    f = ember.build(schedule(cfg), args, target="llvm")
    a, b = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")
    c = ember.nd.array(np.full((m, n), np.nan, "float32"))
    f(ember.nd.array(a), ember.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a.astype("float64") @ b.astype("float64"), rtol=1e-5, atol=1e-5)


def test_streamed_measurements_depend_on_each_build():
    """The GPU way (each measurement submitted with its build, parts going from the build worker to
    the measuring worker) on the CPU: valid candidates are measured and come back without their
    parts, an illegal one is a build error without a measurement."""
    from ember.target import Target
    from ember.tune import kernel_task
    from ember.tune.distributed import DaskExecutor

    schedule, args, space = gemm_template(21, 30, 17)
    task = kernel_task(schedule, args, "llvm", space, name="test.dask.stream")
    pts = space.sample(60, seed=1)
    good = [c for c in pts if space.is_valid(c)][:3]
    bad = next(c for c in pts if not space.is_valid(c))
    ex = DaskExecutor([task], Target("llvm"), workers=1, timeout=30.0, repeats=2, stream=True)
    try:
        h1 = ex.start(0, [good[0], bad, good[1]])
        h2 = ex.start(0, good[2:], best_s=1e-15)  # no candidate is that fast: timed for one round
        first, second = ex.finish(h1), ex.finish(h2)
    finally:
        ex.close()
    for b, m in [first[0], first[2]] + second:
        assert b.parts == {} and b.error is None and m is not None and m.error is None and m.seconds > 0
    assert second[0][1].rejected and len(second[0][1].times) == 1
    b, m = first[1]
    assert b.parts is None and "InvalidConfig" in b.error and m is None


def test_unreachable_scheduler_is_a_clear_error(tmp_path, monkeypatch):
    from ember.tune import distributed as tune_dask

    monkeypatch.setattr(tune_dask, "CONNECT_TIMEOUT_S", 2)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    schedule, args, space = gemm_template(8, 8, 8)
    addr = f"tcp://127.0.0.1:{port}"
    with pytest.raises(ember.TuningError, match=f"cannot reach the Dask scheduler at '{addr}'"):
        ember.tune_kernel(schedule, args, "llvm", space=space, trials=4, db=tmp_path / "t.db", dask=addr, quiet=True)
    with pytest.raises(ember.TuningError, match="either workers="):
        ember.tune_kernel(schedule, args, "llvm", space=space, trials=4, workers=1, dask=addr)


_FRESH_WORKER = """
import itertools, json
import cloudpickle
import numpy as np
from onnx import TensorProto, helper, numpy_helper
from ember.ir import expr as E
from ember.tune.measure import build_one
from ember.tune.task import extract_tasks

w = np.random.default_rng(0).standard_normal((128, 128)).astype("float32")
model = helper.make_model(helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [128, 128])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [128, 128])], [numpy_helper.from_array(w, "w")]),
    opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
start = next(E._var_ids)
(task,) = extract_tasks(model, "llvm")
# the default, the K-blocked point a Dask run measured as a segfault, and a few others
configs = [task.space.default.to_json(), task.space.get(9649).to_json()]
configs += [c.to_json() for c in task.space.sample(4, seed=0, valid_only=True)]
want = [build_one(task, c) for c in configs]
sent = cloudpickle.dumps(task)
# A worker's process has numbered its variables only up to where the tuner's started its task's
E._var_ids = itertools.count(start)
got = cloudpickle.loads(sent)
made = max(E.Var("v").uid for _ in range(3))
print(json.dumps({"fresh_numbers": made > max(iv.var.uid for iv in got.args[-1].op.axis),
                  "same": [(g.parts, g.error) == (w.parts, w.error)
                           for g, w in zip((build_one(got, c) for c in configs), want)]}))
"""


def test_a_task_sent_to_a_worker_process_builds_the_same_candidates():
    """A Dask worker receives the tuning task pickled, in a process that numbers its variables from
    the start again: the copy's variables must not share numbers with the variables its builds
    make (the simplifier took the batch axis for a loop of the same number, and a K-blocked GEMM
    candidate of the first batch wrote out of bounds: a segfault in the measuring process). In a
    child process (the test moves the variable counter back, as a worker's is)."""
    import json
    import subprocess
    import sys

    pytest.importorskip("cloudpickle")
    out = subprocess.run([sys.executable, "-c", _FRESH_WORKER], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["fresh_numbers"]
    assert result["same"] == [True] * len(result["same"])


# -- feeding the measuring workers (the GPU way) and workers that die ---------------------------------
def _dask_executor(monkeypatch, made, stream):
    """Make the tuner build its executor as a DaskExecutor with ``stream`` (True: measurements fed as
    on a GPU), noted in ``made``."""
    from ember.tune import tuner
    from ember.tune.distributed import DaskExecutor

    def make(tasks, tgt, workers, dask, measuring, timeout, repeats):
        ex = DaskExecutor(tasks, tgt, workers=workers, address=dask, measuring=measuring, timeout=timeout,
                          repeats=repeats, stream=stream)
        made.append(ex)
        return ex, ex.build_workers

    monkeypatch.setattr(tuner, "_executor", make)


def _measuring_worker_pid(ex) -> int:
    (addr,) = [a for a, w in ex.client.scheduler_info()["workers"].items() if w["resources"].get("measure")]
    return ex.client.run(os.getpid, workers=[addr])[addr]


def _executing(dask_worker) -> int:
    return len(dask_worker.state.executing)


def _wait_until_measuring(ex, deadline_s: float = 120.0) -> None:
    """Until the measuring worker runs a measurement (its task is executing)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        measurers = [a for a, w in ex.client.scheduler_info()["workers"].items() if w["resources"].get("measure")]
        if measurers and any(ex.client.run(_executing, workers=measurers).values()):
            return
        time.sleep(0.02)
    raise AssertionError("the measuring worker never started a measurement")


def _after_first_batch(monkeypatch, action):
    """Run ``action()`` in a thread once the tuner has stored its first batch; returns the thread's
    errors (a list, filled when it fails)."""
    from ember.tune import tuner

    real, errors, started = tuner._store, [], []

    def act():
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def store(*args):
        real(*args)
        if not started:
            started.append(threading.Thread(target=act, daemon=True))
            started[0].start()

    monkeypatch.setattr(tuner, "_store", store)
    return errors, started


def test_fed_measurements_go_on_without_the_tuner():
    """With measurements fed (a GPU target), the measuring worker measures a later batch while the
    tuner has not collected an earlier one, with at most MEASURE_DEPTH measurements assigned to it."""
    from ember.target import Target
    from ember.tune import kernel_task
    from ember.tune.distributed import MEASURE_DEPTH, DaskExecutor

    schedule, args, space = gemm_template(21, 30, 17)
    task = kernel_task(schedule, args, "llvm", space, name="test.dask.fed")
    good = [c for c in space.sample(80, seed=2) if space.is_valid(c)]
    ex = DaskExecutor([task], Target("llvm"), workers=1, timeout=30.0, repeats=2, stream=True)
    try:
        h1, h2 = ex.start(0, good[:3]), ex.start(0, good[3:7])
        end = time.monotonic() + 120
        while ex.unfinished(h2) and time.monotonic() < end:  # nobody calls finish meanwhile
            time.sleep(0.05)
        assert ex.unfinished(h1) == 0 and ex.unfinished(h2) == 0
        first, second = ex.finish(h1), ex.finish(h2)
    finally:
        ex.close()
    assert 1 <= ex.max_assigned <= MEASURE_DEPTH
    for b, m in first + second:
        assert b.error is None and m is not None and m.error is None and m.seconds > 0 and m.worker == "measure-0"


def test_tuner_starts_the_next_batch_before_the_last_is_measured(tmp_path, monkeypatch):
    """The pipeline on the fed (GPU) path: every batch after the first is started before the one
    before it has been collected; every trial is counted once and stored once."""
    made: list = []
    _dask_executor(monkeypatch, made, stream=True)
    from ember.tune.distributed import DaskExecutor

    events: list[tuple[str, int]] = []
    real_start, real_finish = DaskExecutor.start, DaskExecutor.finish

    def start(self, *a, **k):
        handle = real_start(self, *a, **k)
        events.append(("start", id(handle)))
        return handle

    def finish(self, handle):
        out = real_finish(self, handle)
        events.append(("finish", id(handle)))
        return out

    monkeypatch.setattr(DaskExecutor, "start", start)
    monkeypatch.setattr(DaskExecutor, "finish", finish)
    schedule, args, space = gemm_template(21, 30, 17)
    db = tmp_path / "t.db"
    result = ember.tune_kernel(schedule, args, "llvm", space=space, trials=12, db=db, name="test.dask.pipe",
                               workers=1, quiet=True, repeats=2, batch=4)
    assert result.new_trials == 12 and result.stored == 12 and result.tasks[0].trials == 12
    with ember.tune.TuningDB(db) as tdb:
        assert len(tdb) == 12
    starts = [h for e, h in events if e == "start"]
    assert len(starts) == 3
    for k in range(1, 3):  # batch k started before batch k - 1 was collected
        assert events.index(("start", starts[k])) < events.index(("finish", starts[k - 1]))
    assert result.measurers.keys() == {"measure-0"} and result.measurers["measure-0"] > 0


def test_a_killed_measuring_worker_costs_no_trial(tmp_path, monkeypatch):
    """The measuring worker's process killed while it measures (fed, as on a GPU): its nanny starts
    it again, Dask measures again what it held, every trial is recorded valid, and the run says so
    once."""
    made: list = []
    _dask_executor(monkeypatch, made, stream=True)

    def kill_worker():
        pid = _measuring_worker_pid(made[0])
        _wait_until_measuring(made[0])
        os.kill(pid, signal.SIGKILL)

    errors, started = _after_first_batch(monkeypatch, kill_worker)
    schedule, args, space = gemm_template(21, 30, 17)
    db = tmp_path / "t.db"
    result = ember.tune_kernel(schedule, args, "llvm", space=space, trials=16, db=db, name="test.dask.kill",
                               workers=1, quiet=True, repeats=2, batch=4)
    started[0].join(10)
    assert not errors
    assert result.new_trials == 16 and result.stored == 16 and result.tasks[0].trials == 16
    with ember.tune.TuningDB(db) as tdb:
        recs = tdb.records()
    assert len(recs) == 16 and all(r.valid for r in recs), [r.error for r in recs if not r.valid]
    assert made[0].workers_died == 1
    assert sum("the measuring worker measure-0" in n and "died" in n for n in result.notes) == 1, result.notes


def test_a_killed_measuring_process_costs_only_its_trial(tmp_path, monkeypatch):
    """The measuring worker's measuring subprocess killed in the middle of a measurement (stopped
    first, so that the kill finds a candidate in flight): that one trial is recorded invalid, a new
    process measures the rest, and the run says so once."""
    psutil = pytest.importorskip("psutil")
    made: list = []
    _dask_executor(monkeypatch, made, stream=False)

    def kill_runner():
        worker = psutil.Process(_measuring_worker_pid(made[0]))
        (runner,) = [p for p in worker.children(recursive=True) if "ember.tune.runner" in " ".join(p.cmdline())]
        runner.send_signal(signal.SIGSTOP)  # whatever it measures next (or now) cannot finish
        _wait_until_measuring(made[0])
        runner.send_signal(signal.SIGKILL)

    errors, started = _after_first_batch(monkeypatch, kill_runner)
    schedule, args, space = gemm_template(21, 30, 17)
    db = tmp_path / "t.db"
    result = ember.tune_kernel(schedule, args, "llvm", space=space, trials=12, db=db, name="test.dask.killrun",
                               workers=1, quiet=True, repeats=2, batch=4)
    started[0].join(10)
    assert not errors
    assert result.new_trials == 12 and result.stored == 12 and result.lost == 1
    with ember.tune.TuningDB(db) as tdb:
        recs = tdb.records()
    died = [r for r in recs if not r.valid and "the measuring process died (exit code -9)" in r.error]
    assert len(recs) == 12 and len(died) == 1
    assert sum("trial(s) lost: the measuring process died" in n for n in result.notes) == 1, result.notes
