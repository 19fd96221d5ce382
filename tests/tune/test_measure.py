"""Measurement contains failures: a wrong result, a hang and a crash of a candidate are recorded as
invalid and the measuring process is replaced; the tuner goes on."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.backends import backend_for
from ember.target import Target
from ember.tune import kernel_task
from ember.tune.measure import LocalBuilder, Runner
from ember.tune.task import FUNC_NAME

N = 64


def _parts(body) -> dict[str, bytes]:
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: body(A, i), name="B")
    s = te.create_schedule(B.op)
    return backend_for("llvm").compile([ember.lower(s, [A, B], FUNC_NAME, target=Target("llvm"))], Target("llvm"))


def _copy_task(name: str = "test.copy"):
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: A[i] * 2.0, name="B")
    from ember.strategy import ConfigSpace

    space = ConfigSpace()
    space.define_knob("unused", [0])
    return kernel_task(lambda cfg: te.create_schedule(B.op), [A, B], "llvm", space, name=name)


def test_wrong_hanging_and_crashing_candidates_are_invalid():
    task = _copy_task()
    ref = _parts(lambda A, i: A[i] * 2.0)
    r = Runner(task.target, timeout=4.0, repeats=2, min_repeat_s=0.005)
    try:
        good = r.measure(task, ref, _parts(lambda A, i: A[i] + A[i]))
        assert good.error is None and good.seconds and good.seconds > 0
        wrong = r.measure(task, ref, _parts(lambda A, i: A[i] * 2.0 + 1e-2))
        assert wrong.seconds is None and wrong.error.startswith("wrong result")
        k = te.reduce_axis((0, (1 << 31) - 1), name="k")  # 1.4e11 additions: far past the timeout
        hang = r.measure(task, ref, _parts(lambda A, i: te.sum(A[(i + k) % N], axis=k)))
        assert hang.seconds is None and "no result within" in hang.error
        crash = r.measure(task, ref, _parts(lambda A, i: A[i * 40_000_000 + 900_000_000] * 2.0))
        assert crash.seconds is None and "died" in crash.error
        again = r.measure(task, ref, _parts(lambda A, i: A[i] * 2.0))  # a new measuring process goes on
        assert again.error is None and r.restarts >= 2
    finally:
        r.close()


def test_build_failures_are_results_not_exceptions():
    task = _copy_task()
    b = LocalBuilder([task], workers=1, timeout=60)
    try:
        ok, bad = b.build([(0, task.space.default.to_json()), (0, {"index": -1, "knobs": {"unused": {"val": 5}}})])
    finally:
        b.close()
    assert ok.parts and ok.error is None
    assert bad.parts is None and "InvalidConfig" in bad.error


def test_a_hanging_build_times_out_and_later_batches_still_build():
    """A build that hangs is a timeout result and its pool is replaced; the builds queued behind
    it on the old pool, of its batch and of a batch started later, are built again on the new one."""
    import time as _time

    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: A[i] * 2.0, name="B")
    from ember.strategy import ConfigSpace

    space = ConfigSpace()
    space.define_knob("hang", [False, True])

    def schedule(cfg):
        if cfg["hang"].val:
            _time.sleep(600)
        return te.create_schedule(B.op)

    task = kernel_task(schedule, [A, B], "llvm", space, name="test.hang")
    ok, hang = ({"index": -1, "knobs": {"hang": {"val": v}}} for v in (False, True))
    b = LocalBuilder([task], workers=1, timeout=5)  # a build of this kernel takes well under 5 s, loaded or not
    try:
        first = b.start([(0, hang), (0, ok)])
        second = b.start([(0, ok)])
        timed_out, after = b.collect(first)
        (again,) = b.collect(second)
    finally:
        b.close()
    assert timed_out.parts is None and "timed out" in timed_out.error
    assert after.parts and after.error is None and again.parts and again.error is None


def test_runner_checks_against_the_default_output_on_the_same_inputs():
    """Two candidates computing the same values pass; the reference's inputs are reused (a
    candidate reading an input it should not sees the same data)."""
    task = _copy_task()
    ref = _parts(lambda A, i: A[i] * 2.0)
    r = Runner(task.target, timeout=30.0, repeats=3, min_repeat_s=0.005)
    try:
        results = [r.measure(task, ref, _parts(lambda A, i: A[i] * 2.0)) for _ in range(2)]
    finally:
        r.close()
    assert all(m.error is None and 1 <= len(m.times) <= 3 for m in results)
    assert np.isfinite([m.seconds for m in results]).all()


@pytest.mark.parametrize("dtype", ["float32"])
def test_tolerance_is_relative_to_the_reference_scale(dtype):
    from ember.tune.runner import compare

    ref = np.full(100, 1000.0, dtype)
    assert compare(ref + 0.5, ref, dtype) is None  # 5e-4 of the largest value: a summation order
    assert compare(ref + 2.0, ref, dtype) is not None
    poisoned = ref.copy()
    poisoned[7] = np.nan
    assert "first at (7,)" in compare(poisoned, ref, dtype)


def test_timing_stops_early_for_a_candidate_slower_than_the_best():
    """A best time no candidate can approach stops the timing after one round (rejected); with
    rejection off the rounds run until they agree or ``repeats`` is reached."""
    task = _copy_task()
    ref = _parts(lambda A, i: A[i] * 2.0)
    r = Runner(task.target, timeout=30.0, repeats=4, min_repeat_s=0.005)
    off = Runner(task.target, timeout=30.0, repeats=4, min_repeat_s=0.005, reject_factor=0)
    try:
        slow = r.measure(task, ref, _parts(lambda A, i: A[i] * 2.0), best_s=1e-15)
        full = off.measure(task, ref, _parts(lambda A, i: A[i] * 2.0), best_s=1e-15)
    finally:
        r.close()
        off.close()
    assert slow.error is None and slow.rejected and len(slow.times) == 1
    assert full.error is None and not full.rejected and 3 <= len(full.times) <= 4
    assert set(slow.phases) == {"load", "check", "time"} and slow.elapsed > 0


def test_reference_is_sent_again_after_the_process_forgot_the_task():
    """The reference goes to the measuring process once per task; a process that dropped the task
    (it keeps four) asks for it again, and the candidate is still checked against it."""
    tasks = [_copy_task(f"test.copy{k}") for k in range(6)]
    ref = _parts(lambda A, i: A[i] * 2.0)
    r = Runner(tasks[0].target, timeout=30.0, repeats=1, min_repeat_s=0.002)
    try:
        results = [r.measure(t, ref, _parts(lambda A, i: A[i] * 2.0)) for t in tasks]
        again = r.measure(tasks[0], ref, _parts(lambda A, i: A[i] * 2.0))
        wrong = r.measure(tasks[1], ref, _parts(lambda A, i: A[i] * 3.0))
    finally:
        r.close()
    assert all(m.error is None for m in results + [again]) and r.restarts == 0
    assert wrong.seconds is None and wrong.error.startswith("wrong result")


def test_streaming_executor_measures_each_candidate_as_it_is_built():
    """``stream=True`` (the GPU way) on the CPU: every candidate of two batches is built and
    measured in order, an illegal one is a build error without a measurement."""
    from ember.tune.executor import LocalExecutor

    from .conftest import gemm_template

    schedule, args, space = gemm_template(21, 30, 17)
    task = kernel_task(schedule, args, "llvm", space, name="test.stream")
    pts = space.sample(60, seed=1)
    good = [c for c in pts if space.is_valid(c)][:4]
    bad = next(c for c in pts if not space.is_valid(c))
    ex = LocalExecutor([task], 2, Runner(task.target, timeout=30.0, repeats=2, min_repeat_s=0.002), stream=True)
    try:
        h1 = ex.start(0, good[:2] + [bad])
        h2 = ex.start(0, good[2:])
        first, second = ex.finish(h1), ex.finish(h2)
    finally:
        ex.close()
    for b, m in first[:2] + second:
        assert b.parts and m is not None and m.error is None and m.seconds > 0
    b, m = first[2]
    assert b.parts is None and "InvalidConfig" in b.error and m is None
