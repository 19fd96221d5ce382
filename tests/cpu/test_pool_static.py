"""The CPU pool's static mode (``ember/backends/cpu/pool.py``, ``Stage.parallel(axis, static=True)``):
every chunk runs exactly once for extents below, at and above the thread count and the chunk
cap (fewer chunks than threads, more chunks than threads, odd sizes), results are equal bit for
bit to the dynamic mode's and to NumPy's, loops of both modes interleave in one process, two
Python threads calling static kernels at once both finish correctly (the second runs serially),
and a static loop completes while a busy process holds a core (idle threads take the chunks of
a thread that is not running). The mode shows in the loop IR (it is part of the cache key).
Outputs are poisoned with NaN; nothing here asserts a timing."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

import ember
from ember import te
from ember.backends.cpu.pool import MAX_STATIC_CHUNKS


def _kernel(n: int, static: bool, target: str = "llvm"):
    """``y[i] = x[i] * 2 + i`` with the loop parallel (every element written by one chunk)."""
    x = te.placeholder((n,), name="x")
    y = te.compute((n,), lambda i: x[i] * 2.0 + te.cast("float32", i), name="y")
    s = te.create_schedule(y.op)
    s[y].parallel(y.op.axis[0], static=static)
    return ember.build(s, [x, y], target=target, name="par_static" if static else "par_dynamic")


def _gemv(rows: int, k: int, static: bool, target: str = "llvm"):
    """``y[j] = sum_k x[k] * w[k, j]`` in float32, parallel over blocks of 16 columns (a
    matrix-vector product as the recurrent steps use it, with a column tail)."""
    x = te.placeholder((k,), name="x")
    w = te.placeholder((k, rows), name="w")
    r = te.reduce_axis((0, k), name="r")
    y = te.compute((rows,), lambda j: te.sum(x[r] * w[r, j], axis=r), name="y")
    s = te.create_schedule(y.op)
    jo, _ = s[y].split(y.op.axis[0], factor=16)
    s[y].parallel(jo, static=static)
    return ember.build(s, [x, w, y], target=target, name="gemv_static" if static else "gemv_dynamic")


def _run(f, n: int, x: np.ndarray) -> np.ndarray:
    y = np.full(n, np.nan, np.float32)
    f(x, y)
    return y


# extents: 1 (serial), below the thread count, odd, at and around the static chunk cap (32),
# and far above it
@pytest.mark.parametrize("n", [1, 2, 3, 5, 31, 32, 33, 97, 1000, 100003])
@pytest.mark.parametrize("threads", [None, 1, 2, 3, 5])
def test_static_runs_every_chunk_once_and_equals_dynamic(rng, n, threads) -> None:
    target = "llvm" if threads is None else f"llvm -num_threads={threads}"
    x = rng.standard_normal(n).astype(np.float32)
    got = _run(_kernel(n, True, target), n, x)
    np.testing.assert_array_equal(got, x * 2.0 + np.arange(n, dtype=np.float32))
    np.testing.assert_array_equal(got, _run(_kernel(n, False, target), n, x))


@pytest.mark.parametrize("rows,k", [(1, 7), (17, 5), (100, 33), (2051, 513)])
def test_static_gemv_equals_dynamic_bit_for_bit_and_float64(rng, rows, k) -> None:
    x = rng.standard_normal(k).astype(np.float32)
    w = rng.standard_normal((k, rows)).astype(np.float32)
    fs, fd = _gemv(rows, k, True), _gemv(rows, k, False)
    ys, yd = (np.full(rows, np.nan, np.float32) for _ in range(2))
    for _ in range(3):  # repeated calls: the same blocks go to the same threads
        fs(x, w, ys)
        fd(x, w, yd)
        np.testing.assert_array_equal(ys, yd)
    ref = x.astype(np.float64) @ w.astype(np.float64)
    # float32 sums of k products of unit normals: error ~ k * 2^-24 * sum |x w|
    bound = k * 2.0**-24 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64))
    assert (np.abs(ys - ref) <= bound + 1e-30).all()


def test_static_and_dynamic_loops_interleave(rng) -> None:
    n = 4099
    fs, fd = _kernel(n, True), _kernel(n, False)
    ref_x = rng.standard_normal(n).astype(np.float32)
    ref = ref_x * 2.0 + np.arange(n, dtype=np.float32)
    for k in range(200):
        np.testing.assert_array_equal(_run(fs if k % 3 else fd, n, ref_x), ref)


def test_the_mode_is_in_the_loop_ir() -> None:
    assert "parallel (static)" in _kernel(64, True).get_source("ir")
    assert "(static)" not in _kernel(64, False).get_source("ir")


def test_more_chunks_than_the_cap_is_capped_not_lost(rng) -> None:
    # more threads than the claim word has bits per thread: still every element once
    n = 3 * MAX_STATIC_CHUNKS + 1
    x = rng.standard_normal(n).astype(np.float32)
    got = _run(_kernel(n, True, f"llvm -num_threads={MAX_STATIC_CHUNKS + 3}"), n, x)
    np.testing.assert_array_equal(got, x * 2.0 + np.arange(n, dtype=np.float32))


def test_two_python_threads_call_static_kernels_at_once() -> None:
    n = 50021
    f = _kernel(n, True)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        r = np.random.default_rng(seed)
        try:
            for _ in range(50):
                x = r.standard_normal(n).astype(np.float32)
                np.testing.assert_array_equal(_run(f, n, x), x * 2.0 + np.arange(n, dtype=np.float32))
        except AssertionError as exc:  # reported below, in the test's thread
            errors.append(exc)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in ts)


def test_static_loop_under_a_busy_process(rng) -> None:
    n = 200003
    f = _kernel(n, True)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for _ in range(100):
            x = rng.standard_normal(n).astype(np.float32)
            np.testing.assert_array_equal(_run(f, n, x), x * 2.0 + np.arange(n, dtype=np.float32))
    finally:
        busy.kill()
        busy.wait()


_MANY = """
import numpy as np, ember
from ember import te
for n in (1, 7, 33, 40, 41, 1001):
    for static in (True, False):
        x = te.placeholder((n,), name="x")
        y = te.compute((n,), lambda i: x[i] * 2.0 + te.cast("float32", i), name="y")
        s = te.create_schedule(y.op)
        s[y].parallel(y.op.axis[0], static=static)
        f = ember.build(s, [x, y], name="many")
        a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        for _ in range(20):
            b = np.full(n, np.nan, np.float32)
            f(a, b)
            assert (b == a * 2.0 + np.arange(n, dtype=np.float32)).all(), (n, static)
print("ok")
"""


def test_more_threads_than_static_chunks() -> None:
    # 40 threads (39 workers) on this machine's cores: threads beyond the 32 chunks own none and
    # only take others' chunks; every element is still written once
    import os

    env = dict(os.environ, OMP_NUM_THREADS="40")
    out = subprocess.run([sys.executable, "-c", _MANY], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def _forked_child(q) -> None:
    n = 40009
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    ok = bool((_run(_kernel(n, True), n, x) == x * 2.0 + np.arange(n, dtype=np.float32)).all())
    q.put("ok" if ok else "wrong")


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_a_forked_child_runs_static_loops(rng) -> None:
    # the child has no pool workers: the caller runs its own block, then takes every other one
    import multiprocessing

    n = 40009
    x = rng.standard_normal(n).astype(np.float32)
    _run(_kernel(n, True), n, x)  # the pool's workers exist in this process now
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_forked_child, args=(q,))
    p.start()
    p.join(timeout=60)
    assert p.exitcode == 0 and q.get(timeout=5) == "ok"


def test_static_and_dynamic_kernels_from_two_python_threads_at_once() -> None:
    # one thread's static jobs and the other's dynamic jobs share the pool (whichever finds it
    # busy runs its loop serially): every result stays exact
    n = 30011
    kernels = [_kernel(n, True), _kernel(n, False)]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        r = np.random.default_rng(k)
        try:
            for _ in range(100):
                x = r.standard_normal(n).astype(np.float32)
                np.testing.assert_array_equal(_run(kernels[k % 2], n, x), x * 2.0 + np.arange(n, dtype=np.float32))
        except AssertionError as exc:  # reported below, in the test's thread
            errors.append(exc)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in ts)
