"""Fixtures of the CLI tests: tiny ONNX models and input files in a temporary directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.profiler.tiny_models import mlp, two_inputs


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """mlp.onnx (x[5, 37] -> y[5, 11]), two.onnx (a, b [4, 6] -> s, p) and .npy inputs."""
    d = tmp_path_factory.mktemp("cli")
    onnx.save(mlp(), d / "mlp.onnx")
    onnx.save(two_inputs(), d / "two.onnx")
    rng = np.random.default_rng(7)
    np.save(d / "x.npy", rng.standard_normal((5, 37)).astype(np.float32))
    np.save(d / "x64.npy", rng.standard_normal((5, 37)))
    np.save(d / "x_short.npy", rng.standard_normal((5, 36)).astype(np.float32))
    np.save(d / "a.npy", rng.standard_normal((4, 6)).astype(np.float32))
    np.save(d / "b.npy", rng.standard_normal((4, 6)).astype(np.float32))
    (d / "not_npy.npy").write_bytes(b"this is not an array")
    return {p.stem if p.suffix == ".npy" else p.name: p for p in d.iterdir()} | {"dir": d}
