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
