"""Tuning on an NVIDIA GPU: a GEMM model tuned (measured on the device), compiled with its records,
checked against NumPy. Skips without a CUDA GPU (run by scripts/gpu_check.sh)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.tune.keys import gpu_present

from .conftest import matmul_model, reference

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_cuda():
    if not gpu_present("cuda"):
        pytest.skip("no CUDA device: the driver sees no NVIDIA GPU")


def test_tune_gemm_model_on_the_gpu(tmp_path, rng):
    model = matmul_model(200, 84, 84, layers=2)  # sizes no tile divides
    db = tmp_path / "t.db"
    result = ember.tune(model, "cuda", trials=16, db=db, quiet=True, repeats=3)
    (task,) = result.tasks
    assert result.measured and task.trials == 16 and task.best_seconds and task.default_seconds
    assert task.best_seconds <= task.default_seconds
    tuned = ember.compile(model, "cuda", tuning_db=db)
    x = rng.standard_normal((200, 84)).astype("float32")
    (y,) = tuned(x)
    np.testing.assert_allclose(y, reference(model, x), rtol=1e-4, atol=1e-4)


def test_tune_on_a_local_dask_cluster_streams_measurements_on_the_gpu(tmp_path, rng):
    """``workers=2``: builds on two Dask workers, each candidate measured on the GPU's measuring
    worker as soon as it is built; the records give the same correct model."""
    pytest.importorskip("distributed", reason="Dask is the optional ember[tune] extra")
    model = matmul_model(200, 84, 84)
    db = tmp_path / "t.db"
    result = ember.tune(model, "cuda", trials=24, db=db, quiet=True, workers=2, batch=8)
    (task,) = result.tasks
    assert result.measured and task.trials == 24 and task.best_seconds and task.default_seconds
    assert task.best_seconds <= task.default_seconds
    assert result.phases["build"] > 0 and result.phases["measure"] > 0 and result.phases["setup"] > 0
    tuned = ember.compile(model, "cuda", tuning_db=db)
    x = rng.standard_normal((200, 84)).astype("float32")
    (y,) = tuned(x)
    np.testing.assert_allclose(y, reference(model, x), rtol=1e-4, atol=1e-4)


def test_a_faulting_candidate_costs_only_its_own_trial():
    """A candidate whose kernel writes far outside its output (a sticky error: it leaves the
    process's context unusable) is reported as failed, the measuring process restarts, and the next
    candidate is measured normally on a fresh context."""
    from ember import te
    from ember.backends import backend_for
    from ember.errors import STICKY_DEVICE_ERRORS
    from ember.ir import expr as E
    from ember.ir import stmt as S
    from ember.ir.visitor import Mutator
    from ember.lowering import lower
    from ember.strategy.space import ConfigSpace
    from ember.target import Target
    from ember.tune.measure import Runner
    from ember.tune.task import FUNC_NAME, kernel_task

    n = 4096
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")

    def schedule(cfg):
        s = te.create_schedule(B.op)
        bo, bi = s[B].split(B.op.axis[0], factor=256)
        s[B].bind(bo, te.thread_axis("blockIdx.x"))
        s[B].bind(bi, te.thread_axis("threadIdx.x"))
        return s

    task = kernel_task(schedule, [A, B], "cuda", ConfigSpace())
    good = task.build(task.space.default)

    class FarStore(Mutator):  # every store 2^30 elements (4 GiB) past where it belongs
        def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
            return S.BufferStore(s.buffer, s.value, (s.indices[0] + E.const(1 << 30),))

    tgt = Target(task.target)
    func = lower(schedule(None), [A, B], FUNC_NAME, target=tgt)
    func = S.PrimFunc(func.name, func.params, FarStore().visit(func.body), func.attrs)
    bad = backend_for(tgt).compile([func], tgt)
    runner = Runner(task.target, timeout=60)
    try:
        faulted = runner.measure(task, good, bad)
        # the H200 reports this store as CUDA_ERROR_INVALID_ADDRESS_SPACE; any sticky error will do
        assert faulted.seconds is None and "faulted" in faulted.error, faulted
        assert any(name in faulted.error for name in STICKY_DEVICE_ERRORS), faulted
        after = runner.measure(task, good, good)
        assert after.error is None and after.seconds > 0, after
        assert after.graph, after  # timed as CUDA-graph replays on the device, not from the host
        assert runner.restarts == 1
    finally:
        runner.close()
