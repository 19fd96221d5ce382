"""The measuring process (``python -m ember.tune.runner``): loads candidates' parts and times them.

It reads messages (:mod:`ember.tune.wire`) from standard input and answers on the original
standard output (the kernels' own output, if any, goes to standard error). A ``measure`` message
carries the task's argument specs, the default schedule's parts (``ref/*``) and the candidate's
(``cand/*``). Per task it makes the inputs once (seeded random values, the same for every
candidate) and the reference outputs with the default schedule; then, per candidate: outputs
poisoned (NaN, or an integer sentinel), one run, the checked outputs compared with the reference
(float32: within ``1e-3`` of the reference's largest magnitude — different summation orders of a
reduction differ by far less, a wrong schedule by O(1); float16/bfloat16: ``2e-2``; integers
exactly), then a warm-up and ``repeats`` timed rounds of ``number`` calls each (``number`` chosen
so that a round lasts ``min_repeat_s``), answered as the median seconds per call. A candidate
whose second call takes more than ``slow_factor`` (8) times the default schedule's is answered
with that one call's time: it cannot win, and timing it fully would cost many of its slow calls.

The tuner (:class:`ember.tune.measure.Runner`) kills this process when it does not answer within
its timeout (a hang) and starts a new one when it dies (a crash).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from ..backends import backend_for
from ..errors import EmberError
from ..runtime.ndarray import device
from ..target import Target
from . import wire

#: Tolerances of the output check, relative to the reference's largest magnitude.
TOLERANCE = {"float32": 1e-3, "float64": 1e-9, "float16": 2e-2, "bfloat16": 2e-2}
_KEEP_TASKS = 4


def _poison(dtype: str) -> Any:
    return np.nan if dtype.startswith(("float", "bfloat")) else -7


def _random(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype.startswith(("float", "bfloat")):
        return rng.standard_normal(shape).astype("float32" if dtype == "bfloat16" else dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(-3, 4, shape).astype(dtype)


def reference_scale(ref: np.ndarray) -> float:
    """The largest finite magnitude of ``ref`` (1 when it has none): what tolerances scale with."""
    finite = np.abs(ref[np.isfinite(ref)]) if ref.size else ref
    return float(finite.max()) if finite.size else 1.0


def compare(got: np.ndarray, ref: np.ndarray, dtype: str, scale: float | None = None) -> str | None:
    """Why ``got`` is not ``ref`` within the dtype's tolerance, or None (NaN where the reference
    has NaN is equal). Floats are compared in their own precision (float16 and bfloat16 in
    float32). ``scale`` is :func:`reference_scale` of ``ref`` (computed when not given)."""
    if dtype in TOLERANCE:
        work = "float32" if dtype in ("float16", "bfloat16") else ref.dtype
        g, r = got.astype(work, copy=False), ref.astype(work, copy=False)
        scale = reference_scale(r) if scale is None else scale
        ok = np.abs(g - r) <= TOLERANCE[dtype] * max(scale, 1e-30)
        if not ok.all():
            ok |= np.isnan(g) & np.isnan(r)
        bad = ~ok
    else:
        bad = got != ref
    if bad.any():
        idx = tuple(int(i[0]) for i in np.nonzero(bad))
        return f"{int(bad.sum())} of {bad.size} values differ from the default schedule's (first at {idx}: " \
               f"{got[idx]!r} vs {ref[idx]!r})"
    return None


class _Measurer:
    def __init__(self) -> None:
        #: per task: its inputs, the reference outputs with their scales, the default's time of one call
        self.tasks: dict[str, tuple[list[Any], list[np.ndarray], list[float], float]] = {}

    def _args(self, dev: Any, specs: list[dict[str, Any]], inputs: list[Any]) -> list[Any]:
        from ..runtime.ndarray import array

        out, k = [], 0
        for s in specs:
            if s["out"]:
                out.append(array(np.full(tuple(s["shape"]), _poison(s["dtype"]),
                                         dtype="float32" if s["dtype"] == "bfloat16" else s["dtype"]), dev,
                                 dtype=s["dtype"]))
            else:
                out.append(inputs[k])
                k += 1
        return out

    def _run(self, fn: Any, args: list[Any], dev: Any) -> float:
        t0 = time.perf_counter()
        fn(*args)
        dev.sync()
        return time.perf_counter() - t0

    def measure(self, header: dict[str, Any], blobs: dict[str, bytes]) -> dict[str, Any]:
        from ..runtime.ndarray import array

        tgt = Target(header["target"])
        backend = backend_for(tgt)
        dev = device(tgt.kind if tgt.is_gpu else "cpu", 0)
        specs = header["args"]
        checked = [k for k, s in enumerate(specs) if s["check"]]
        task = header["task"]
        if task not in self.tasks:
            rng = np.random.default_rng(0)
            inputs = [array(_random(tuple(s["shape"]), s["dtype"], rng), dev, dtype=s["dtype"])
                      for s in specs if not s["out"]]
            ref_mod = backend.load({k[4:]: v for k, v in blobs.items() if k.startswith("ref/")}, tgt)
            args = self._args(dev, specs, inputs)
            self._run(ref_mod[header["func"]], args, dev)
            outs = [args[k].numpy() for k in checked]
            ref_s = min(self._run(ref_mod[header["func"]], args, dev) for _ in range(3))
            if len(self.tasks) >= _KEEP_TASKS:
                self.tasks.pop(next(iter(self.tasks)))
            self.tasks[task] = (inputs, outs, [reference_scale(o) for o in outs], ref_s)
        inputs, refs, scales, ref_s = self.tasks[task]
        mod = backend.load({k[5:]: v for k, v in blobs.items() if k.startswith("cand/")}, tgt)
        fn = mod[header["func"]]
        args = self._args(dev, specs, inputs)
        self._run(fn, args, dev)
        for k, ref, scale in zip(checked, refs, scales):
            why = compare(args[k].numpy(), ref, specs[k]["dtype"], scale)
            if why:
                return {"status": "wrong", "detail": why}
        one = self._run(fn, args, dev)
        slow = float(header.get("slow_factor", 8.0))
        if one > slow * ref_s and one > 1e-3:
            # Far slower than the default schedule: its one timed call is answer enough (it cannot
            # win, and timing it fully would cost the search many calls of it).
            return {"status": "ok", "seconds": one, "times": [one], "number": 1, "slow": True}
        min_s = float(header.get("min_repeat_s", 0.05))
        number = self._calls_per_round(fn, args, dev, min_s)
        times = []
        for _ in range(int(header.get("repeats", 5))):
            t0 = time.perf_counter()
            calls = 0
            # A round ends after `number` calls, or early when the machine is slower than the
            # calibration said (another process took the cores): its time is per call either way.
            while calls < number and (calls == 0 or time.perf_counter() - t0 < 4 * min_s):
                fn(*args)
                calls += 1
            dev.sync()
            times.append((time.perf_counter() - t0) / calls)
        return {"status": "ok", "seconds": statistics.median(times), "times": times, "number": number}

    def _calls_per_round(self, fn: Any, args: list[Any], dev: Any, min_s: float) -> int:
        """Calls that last about ``min_s`` seconds (counted over a warm-up of ``min_s / 4``)."""
        calls, t0 = 0, time.perf_counter()
        while calls == 0 or time.perf_counter() - t0 < min_s / 4:
            fn(*args)
            calls += 1
        dev.sync()
        return max(1, int(calls * min_s / max(time.perf_counter() - t0, 1e-9)))


def main() -> int:
    """Serve measure requests on stdin/stdout until stdin closes."""
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed by kernels or libraries goes to stderr, not into the protocol
    sys.stdout = sys.stderr
    proto_in = sys.stdin.buffer
    m = _Measurer()
    while True:
        try:
            header, blobs = wire.recv(proto_in)
        except EOFError:
            return 0
        if header.get("op") == "ping":
            wire.send(proto_out, {"status": "ok"})
            continue
        try:
            reply = m.measure(header, blobs)
        except (EmberError, ValueError, TypeError, KeyError, IndexError, ArithmeticError, MemoryError) as exc:
            reply = {"status": "error", "detail": f"{type(exc).__name__}: {exc}"}
        wire.send(proto_out, reply)


if __name__ == "__main__":
    sys.exit(main())
