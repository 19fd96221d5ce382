"""Tuning on a Dask LocalCluster of two processes (one build worker, one measuring worker), and
the clear error of an address no scheduler answers."""

from __future__ import annotations

import socket

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
