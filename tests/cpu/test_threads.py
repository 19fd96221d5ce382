"""ember's thread pool for parallel CPU loops (``ember/backends/cpu/pool.py``): every chunk runs
exactly once whatever the extent and thread count, two Python threads calling parallel kernels
at once both get right results (the second runs serially), a forked child (which has no pool
workers) still completes its parallel loops, a kernel called while a busy process competes
for the cores completes correctly, and so do loops whose caller and worker share one core.
Outputs are poisoned; nothing here asserts a timing (``benchmarks/threads_cpu.py`` measures
ember and ONNX Runtime under load)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import ember
from ember import te


def _parallel_kernel(n: int, target: str = "llvm"):
    """``y[i] = x[i] * 2 + i`` with the loop parallel (every element written by one chunk)."""
    x = te.placeholder((n,), name="x")
    y = te.compute((n,), lambda i: x[i] * 2.0 + te.cast("float32", i), name="y")
    s = te.create_schedule(y.op)
    s[y].parallel(y.op.axis[0])
    return ember.build(s, [x, y], target=target, name="par")


def _check(f, n: int, rng) -> None:
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    f(x, y)
    ref = x * 2.0 + np.arange(n, dtype=np.float32)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 1000, 100003])
@pytest.mark.parametrize("threads", [None, 1, 3])
def test_every_chunk_runs_once(rng, n, threads) -> None:
    target = "llvm" if threads is None else f"llvm -num_threads={threads}"
    _check(_parallel_kernel(n, target), n, rng)


def test_two_python_threads_call_parallel_kernels_at_once(rng) -> None:
    f = _parallel_kernel(50021)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        r = np.random.default_rng(seed)
        try:
            for _ in range(50):
                _check(f, 50021, r)
        except AssertionError as exc:  # reported below, in the test's thread
            errors.append(exc)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in ts)


def _child(q) -> None:
    rng = np.random.default_rng(1)
    _check(_parallel_kernel(40009), 40009, rng)
    q.put("ok")


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_a_forked_child_runs_parallel_loops(rng) -> None:
    f = _parallel_kernel(40009)
    _check(f, 40009, rng)  # the pool's workers exist in this process now
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    p.join(timeout=60)
    alive = p.is_alive()
    if alive:
        p.kill()
    assert not alive and p.exitcode == 0 and q.get(timeout=5) == "ok"


def test_parallel_kernel_under_a_busy_process(rng) -> None:
    f = _parallel_kernel(200003)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for _ in range(20):
            _check(f, 200003, rng)
    finally:
        busy.kill()
        busy.wait()


_COLOCATED = r"""
import os, sys
import numpy as np
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # the caller and the worker share one core
import ember
from ember import te
n = 100003
for static in (False, True):
    x = te.placeholder((n,), name="x")
    y = te.compute((n,), lambda i: x[i] * 2.0 + te.cast("float32", i), name="y")
    s = te.create_schedule(y.op)
    s[y].parallel(y.op.axis[0], static=static)
    f = ember.build(s, [x, y], target="llvm -num_threads=2", name="colocated")
    rng = np.random.default_rng(3)
    for _ in range(200):
        a = rng.standard_normal(n).astype(np.float32)
        out = np.full(n, np.nan, np.float32)
        f(a, out)
        assert np.array_equal(out, a * 2.0 + np.arange(n, dtype=np.float32))
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_caller_and_worker_on_one_core_complete_every_loop() -> None:
    """A process held to one core with two pool threads (what the scheduler does on a busy
    machine: the worker on the caller's core): the worker sleeps instead of spinning there and
    the caller yields to a worker holding a chunk; every chunk of 400 dynamic and static loops
    still runs exactly once."""
    env = dict(os.environ, OMP_NUM_THREADS="2")
    done = subprocess.run([sys.executable, "-c", _COLOCATED], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")
