"""Fixtures of the GPU tests: a CUDA device (or a skip with the reason) and a fresh cache dir."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def _cuda_reason() -> str | None:
    try:
        import importlib

        n = importlib.import_module("ember.runtime.cuda_driver").device_count()
    except Exception as exc:  # noqa: BLE001 - any driver failure is a reason to skip
        return f"no CUDA device: {exc}"
    if n == 0:
        return "no CUDA device: the driver sees no GPU"
    return None


@pytest.fixture(scope="session")
def cuda_dev():
    """ember.cuda(0), or skip with the reason there is none."""
    reason = _cuda_reason()
    if reason is not None:
        pytest.skip(reason)
    import ember

    return ember.cuda(0)


@pytest.fixture
def torch_cuda(cuda_dev):
    """torch with a CUDA device, or skip."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch
