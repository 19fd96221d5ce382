"""Shared fixtures for ember's core tests.

* Every test session (each xdist worker) gets its own compile cache and tuning-records path in a
  temporary directory, so tests never read or write ``~/.cache/ember`` and workers never share
  fixed paths.
* ``rng`` is a fresh NumPy generator seeded per test (from the test's node id, so a failure
  reproduces with the same inputs).
* ``kernel`` builds a schedule and runs it on fresh inputs with poisoned outputs (see
  :class:`KernelRunner`).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence

import numpy as np
import pytest

import ember
from ember import te


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """Point EMBER_CACHE_DIR at a per-session temporary directory, and EMBER_TUNING_DB at a
    records file there (absent until a test tunes): a developer's own tuning records never
    change the kernels the tests compile."""
    old = {k: os.environ.get(k) for k in ("EMBER_CACHE_DIR", "EMBER_TUNING_DB")}
    os.environ["EMBER_CACHE_DIR"] = str(tmp_path_factory.mktemp("ember-cache"))
    os.environ["EMBER_TUNING_DB"] = str(tmp_path_factory.mktemp("ember-tuning") / "tuning.db")
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the test id: fresh per test, reproducible per test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def poison_value(dtype: str):
    """A value that a correct kernel must overwrite: NaN for floats, a sentinel for integers."""
    if dtype in ("float16", "float32", "float64", "bfloat16"):
        return np.nan
    if dtype == "bool":
        return True
    info = np.iinfo(np.dtype(dtype))
    return info.max - 3 if info.max > 100 else info.max


def random_array(rng: np.random.Generator, shape: Sequence[int], dtype: str,
                 low: float = -4, high: float = 4):
    """Random data of ``dtype`` (bfloat16 as float32 values that bfloat16 represents exactly)."""
    shape = tuple(shape)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype in ("float16", "float32", "float64"):
        return rng.uniform(low, high, size=shape).astype(dtype)
    if dtype == "bfloat16":
        x = rng.uniform(low, high, size=shape).astype(np.float32)
        return (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    info = np.iinfo(np.dtype(dtype))
    lo, hi = max(int(low) * 8, info.min), min(int(high) * 8, info.max)
    return rng.integers(lo, hi + 1, size=shape).astype(dtype)


class KernelRunner:
    """Build a schedule, call it on given inputs and poisoned outputs, return the outputs."""

    def build(self, s: te.Schedule, args: Sequence, name: str = "main") -> ember.Module:
        return ember.build(s, list(args), target="llvm", name=name)

    def run(self, f: ember.Module, inputs: Sequence, out_specs: Sequence[tuple[Sequence[int], str]],
            scalars: Sequence[int] = ()) -> list[np.ndarray]:
        """``out_specs``: (shape, dtype) of each output, poisoned before the call. Scalars go last."""
        dev = ember.cpu(0)
        in_arrays = [x if isinstance(x, ember.NDArray) else ember.nd.array(x, dev, dtype=_dt_of(x))
                     for x in inputs]
        outs = []
        for shape, dt in out_specs:
            poison = np.full(tuple(shape), poison_value(dt), dtype=np.float32 if dt == "bfloat16" else dt)
            outs.append(ember.nd.array(poison, dev, dtype=dt))
        f(*in_arrays, *outs, *scalars)
        return [o.numpy() for o in outs]

    @staticmethod
    def assert_fp(actual: np.ndarray, ref: np.ndarray, scale: np.ndarray | float, dtype: str = "float32",
                  ulps: float = 2) -> None:
        """``actual`` within ``ulps`` units of ``dtype``'s epsilon times ``scale`` (the magnitude of
        the terms summed) of the float64 reference ``ref``. ember lets LLVM contract ``a*b + c``
        into one fused multiply-add (docs/numerics.md), which rounds once instead of twice, so
        results of float arithmetic are compared this way rather than bit for bit."""
        eps = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}[dtype]
        actual = np.asarray(actual, dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        assert actual.shape == ref.shape, (actual.shape, ref.shape)
        assert not np.isnan(actual).any() or np.array_equal(np.isnan(actual), np.isnan(ref)), "NaN in the result"
        bound = ulps * eps * np.abs(scale)
        err = np.abs(actual - ref)
        bad = ~(err <= bound)
        assert not bad.any(), (
            f"{bad.sum()} of {bad.size} elements off by more than {ulps} ulp(s) of {dtype}: "
            f"worst error {err.max():.3g} where the bound is {np.max(np.broadcast_to(bound, err.shape)):.3g}"
        )

    def __call__(self, s: te.Schedule, args: Sequence, inputs: Sequence,
                 out_specs: Sequence[tuple[Sequence[int], str]],
                 scalars: Sequence[int] = ()) -> list[np.ndarray]:
        return self.run(self.build(s, args), inputs, out_specs, scalars)


def _dt_of(x) -> str | None:
    return None if not isinstance(x, np.ndarray) else str(x.dtype)


@pytest.fixture
def kernel() -> KernelRunner:
    """See :class:`KernelRunner`."""
    return KernelRunner()
