"""End to end on the CPU: a te GEMM and a model tuned, their tuned code checked against NumPy;
an interrupted `ember tune` keeps its measurements and a second run resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import ember
from ember.tune import TuningDB, best_config, target_key

from .conftest import gemm_template, matmul_model, reference


def test_tune_kernel_gemm_matches_numpy(tmp_path, rng):
    m, n, k = 37, 45, 29  # no tile of the space divides these
    schedule, args, space = gemm_template(m, n, k)
    db = tmp_path / "t.db"
    result = ember.tune_kernel(schedule, args, "llvm", space=space, trials=8, db=db, name="test.gemm", quiet=True,
                               repeats=3, batch=8)
    (task,) = result.tasks
    assert result.new_trials == 8 and task.trials == 8 and task.best_seconds and task.default_seconds
    assert task.best_seconds <= task.default_seconds
    cfg = best_config(schedule, args, "llvm", space, db=db, name="test.gemm")
    assert cfg.to_json()["knobs"] == task.best_config["knobs"]
    f = ember.build(schedule(cfg), args, target="llvm")
    a, b = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")
    c = ember.nd.array(np.full((m, n), np.nan, "float32"))
    f(ember.nd.array(a), ember.nd.array(b), c)
    # float32 sums of 29 products against float64: a few ulps of the largest partial sums
    np.testing.assert_allclose(c.numpy(), a.astype("float64") @ b.astype("float64"), rtol=1e-5, atol=1e-5)
    with TuningDB(db) as tdb:
        assert len(tdb.records(target_key("llvm"))) == 8


def test_tune_model_then_compile_with_records(tmp_path, rng):
    model = matmul_model(45, 36, 36, layers=2)
    db = tmp_path / "t.db"
    result = ember.tune(model, "llvm", trials=8, db=db, quiet=True, repeats=3)
    assert len(result.tasks) == 1 and result.tasks[0].weight == 2 and result.latency
    tuned = ember.compile(model, "llvm", tuning_db=db)
    x = rng.standard_normal((45, 36)).astype("float32")
    (y,) = tuned(x)
    np.testing.assert_allclose(y, reference(model, x), rtol=1e-4, atol=1e-4)


def _count(db) -> int:
    try:
        with TuningDB(db) as tdb:
            return len(tdb)
    except ember.TuningError:
        return 0


def test_ctrl_c_keeps_measurements_and_rerun_resumes(tmp_path):
    model = tmp_path / "mm.onnx"
    model.write_bytes(matmul_model(50, 40, 44))
    db = tmp_path / "t.db"
    cmd = [sys.executable, "-m", "ember.cli", "tune", str(model), "--trials", "400", "--db", str(db), "--quiet",
           "--timeout", "30"]
    # A test run started in the background of a non-interactive shell (`make test &`) ignores
    # SIGINT, and an ignored signal stays ignored in the child: give the child the default.
    try:
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: leave the disposition as it is
        previous = None
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + 120
    while _count(db) < 8 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "interrupted" in out
    first = _count(db)
    assert first >= 8
    again = subprocess.run(cmd[:5] + ["--trials", str(first + 4), "--db", str(db), "--quiet"],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "4 new trial(s)" in again.stdout
    assert _count(db) == first + 4


def _conv_model(rng) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(rng.standard_normal((20, 8, 3, 3)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal(20).astype("float32"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 13, 11])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 20, 13, 11])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_tune_convolution_then_compile_matches_onnxruntime(tmp_path, rng):
    """Whatever template the CPU strategy gives a convolution (packed GEMM or blocked NCHW[x]c),
    its knobs are tuned and the records applied; the result is checked against ONNX Runtime."""
    ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime is the reference of this test")
    model = _conv_model(rng)
    db = tmp_path / "t.db"
    result = ember.tune(model, "llvm", trials=6, db=db, quiet=True, repeats=2, batch=6)
    assert len(result.tasks) == 1 and result.tasks[0].best_seconds
    x = rng.standard_normal((1, 8, 13, 11)).astype("float32")
    (y,) = ember.compile(model, "llvm", tuning_db=db)(x)
    (ref,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_template_that_builds_its_program_per_point(tmp_path, rng):
    """``schedule_fn`` may return (schedule, arguments) built anew for each configuration."""
    m, n, k = 19, 26, 11

    def fresh(cfg):
        schedule, args, _ = gemm_template(m, n, k)
        return schedule(cfg), args

    _, args, space = gemm_template(m, n, k)
    db = tmp_path / "t.db"
    result = ember.tune_kernel(fresh, args, "llvm", space=space, trials=4, db=db, name="test.fresh", quiet=True,
                               repeats=2, batch=4)
    assert result.new_trials == 4 and result.tasks[0].invalid == 0
    s, fargs = fresh(best_config(fresh, args, "llvm", space, db=db, name="test.fresh"))
    f = ember.build(s, fargs, target="llvm")
    a, b = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")
    c = ember.nd.array(np.full((m, n), np.nan, "float32"))
    f(ember.nd.array(a), ember.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a.astype("float64") @ b.astype("float64"), rtol=1e-5, atol=1e-5)


def test_each_task_starts_its_first_batch_before_any_gets_a_second():
    """With batches under way ahead (a GPU), a task whose first batch is started but not measured
    yet is not picked again while another task has none started."""
    from ember.tune import kernel_task
    from ember.tune.search import TaskSearch
    from ember.tune.tuner import _pick

    templates = [gemm_template(16 + k, 24, 8) for k in range(3)]
    tasks = [kernel_task(fn, args, "llvm", space, name=f"test.pick{k}")
             for k, (fn, args, space) in enumerate(templates)]
    searches = [TaskSearch(t, "numpy") for t in tasks]
    assert _pick(searches, tasks, [0, 0, 0]) == 0
    assert _pick(searches, tasks, [1, 0, 0]) == 1
    assert _pick(searches, tasks, [1, 1, 0]) == 2
    assert _pick(searches, tasks, [1, 1, 1]) in (0, 1, 2)
    # once one has results, the tasks whose first batch is still under way wait for theirs
    searches[1].add(tasks[1].space.default, 1e-3)
    assert _pick(searches, tasks, [1, 1, 1]) == 1
    assert _pick(searches, tasks, [1, 2, 1]) == 1


def test_cli_batch_and_seed(tmp_path, capsys):
    """``ember tune --batch N --seed S`` reach the tuner; the summary says how many records were stored;
    a batch below 1 is a clear error."""
    from ember.tune.cli import main

    model = tmp_path / "m.onnx"
    model.write_bytes(matmul_model(16, 24, 24))
    db = tmp_path / "t.db"
    assert main([str(model), "--trials", "6", "--batch", "3", "--seed", "5", "--db", str(db), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "6 new trial(s)" in out and "6 record(s) stored" in out
    assert main([str(model), "--trials", "9", "--batch", "0", "--db", str(db), "--quiet"]) == 1
    assert "batch=0" in capsys.readouterr().err
