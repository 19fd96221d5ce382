"""The measuring process (``python -m ember.tune.runner``): loads candidates' parts and times them.

It reads messages (:mod:`ember.tune.wire`) from standard input and answers on the original
standard output (the kernels' own output, if any, goes to standard error). A ``measure`` message
carries the task's argument specs and the candidate's parts (``cand/*``), and the default
schedule's parts (``ref/*``) the first time the tuner sends a task to this process (a message
without them for a task this process does not hold is answered ``need_ref``, and the tuner sends
them). Per task it keeps the inputs (seeded random values, the same for every candidate), the
output buffers, the reference outputs computed with the default schedule, the default's time of
one call, and the best time measured so far. Per candidate: outputs reset to poison (NaN, or an
integer sentinel), one run, the checked outputs compared with the reference (float32: within
``1e-3`` of the reference's largest magnitude — different summation orders of a reduction differ
by far less, a wrong schedule by O(1); float16/bfloat16: ``2e-2``; integers exactly), then a
warm-up (groups of 1, 2, 4, ... calls, each synchronised, until one lasts ``min_repeat_s / 8``) and
timed rounds of ``number`` calls each (``number`` chosen so that a round lasts ``min_repeat_s``),
answered as the median seconds per call. On CUDA a round replays a CUDA graph of up to 256 calls
until it lasts ``min_repeat_s`` (captured once per candidate on a stream of this process's own,
timed by events on that stream: :class:`_GraphRounds`), so that what is timed is the kernels and not the host's
launch path — a kernel of a few microseconds launched from Python would otherwise measure the
launch (about 25 us per call), and every candidate of a small kernel would look the same. A
candidate whose calls cannot be captured is timed from the host as on other targets. The rounds
stop early:

* after ``min_rounds`` (3) rounds that agree within ``stable`` (3 %): more would not move the
  median; at most ``repeats`` rounds;
* after any round whose time (the fastest so far) is more than ``reject_factor`` (1.5) times the
  best time of the task (this process's best, or ``best_s`` from the tuner's records): the
  candidate cannot win (answered with ``rejected``); before the first round when the warm-up's
  time per call is already more than twice that (answered with the warm-up's time);
* a candidate whose second call takes more than ``slow_factor`` (8) times the default
  schedule's is answered with that one call's time (``slow``), one whose first call (the checked
  one) takes more than twice that and over 50 ms with the first call's time.

The answer carries ``phases``: seconds loading the candidate, running and checking it, timing it.
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
from ..errors import DeviceError, EmberError
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
        limit = TOLERANCE[dtype] * max(scale, 1e-30)
        diff = np.subtract(g, r)
        np.abs(diff, out=diff)
        if diff.size == 0 or diff.max() <= limit:  # the common case, one pass (max is NaN if any is)
            return None
        ok = diff <= limit
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


class _TaskState:
    """What the measuring process keeps per task: the inputs, poisoned output buffers (and the host
    poison they are reset from), the reference outputs with their scales, the default schedule's
    time of one call and the best time measured here."""

    def __init__(self, inputs: list[Any], poison: list[np.ndarray | None], refs: list[np.ndarray],
                 scales: list[float], ref_s: float):
        self.inputs, self.poison, self.refs, self.scales, self.ref_s = inputs, poison, refs, scales, ref_s
        self.best_s = float("inf")  # of complete timings only (the default's single calls are no rounds)
        self.buffers: list[Any] | None = None


class _Measurer:
    def __init__(self) -> None:
        self.tasks: dict[str, _TaskState] = {}

    @staticmethod
    def _host_poison(s: dict[str, Any]) -> np.ndarray:
        dtype = "float32" if s["dtype"] == "bfloat16" else s["dtype"]
        return np.full(tuple(s["shape"]), _poison(s["dtype"]), dtype=dtype)

    def _args(self, dev: Any, specs: list[dict[str, Any]], state: _TaskState) -> list[Any]:
        """The call's arguments: the task's inputs and its output buffers, outputs reset to poison
        (the buffers are made once per task and reused by every candidate)."""
        from ..runtime.ndarray import array

        if state.buffers is None:
            state.buffers = [array(p, dev, dtype=s["dtype"]) if p is not None else None
                             for s, p in zip(specs, state.poison)]
        else:
            for b, p in zip(state.buffers, state.poison):
                if p is not None:
                    b.copyfrom(p)
        it = iter(state.inputs)
        return [b if b is not None else next(it) for b in state.buffers]

    @staticmethod
    def _run(fn: Any, args: list[Any], dev: Any) -> float:
        t0 = time.perf_counter()
        fn(*args)
        dev.sync()
        return time.perf_counter() - t0

    def _state(self, header: dict[str, Any], blobs: dict[str, bytes], backend: Any, tgt: Target,
               dev: Any) -> _TaskState | None:
        """The task's state, made from the reference parts on its first candidate (None when the
        message carries no reference and this process has not seen the task: the tuner resends)."""
        from ..runtime.ndarray import array

        task = header["task"]
        if task in self.tasks:
            return self.tasks[task]
        ref_parts = {k[4:]: v for k, v in blobs.items() if k.startswith("ref/")}
        if not ref_parts:
            return None
        specs = header["args"]
        rng = np.random.default_rng(0)
        inputs = [array(_random(tuple(s["shape"]), s["dtype"], rng), dev, dtype=s["dtype"])
                  for s in specs if not s["out"]]
        poison = [self._host_poison(s) if s["out"] else None for s in specs]
        state = _TaskState(inputs, poison, [], [], 0.0)
        ref_mod = backend.load(ref_parts, tgt)
        fn = ref_mod[header["func"]]
        args = self._args(dev, specs, state)
        self._run(fn, args, dev)
        state.refs = [args[k].numpy() for k, s in enumerate(specs) if s["check"]]
        state.scales = [reference_scale(o) for o in state.refs]
        state.ref_s = min(self._run(fn, args, dev) for _ in range(3))
        if len(self.tasks) >= _KEEP_TASKS:
            self.tasks.pop(next(iter(self.tasks)))
        self.tasks[task] = state
        return state

    def measure(self, header: dict[str, Any], blobs: dict[str, bytes]) -> dict[str, Any]:
        t0 = time.perf_counter()
        tgt = Target(header["target"])
        backend = backend_for(tgt)
        dev = device(tgt.kind if tgt.is_gpu else "cpu", 0)
        specs = header["args"]
        state = self._state(header, blobs, backend, tgt, dev)
        if state is None:
            return {"status": "need_ref"}
        mod = backend.load({k[5:]: v for k, v in blobs.items() if k.startswith("cand/")}, tgt)
        fn = mod[header["func"]]
        t1 = time.perf_counter()
        args = self._args(dev, specs, state)
        first = self._run(fn, args, dev)
        checked = [k for k, s in enumerate(specs) if s["check"]]
        for k, ref, scale in zip(checked, state.refs, state.scales):
            why = compare(args[k].numpy(), ref, specs[k]["dtype"], scale)
            if why:
                return {"status": "wrong", "detail": why}
        t2 = time.perf_counter()
        slow = float(header.get("slow_factor", 8.0))
        if first > 2 * slow * state.ref_s and first > 0.05:
            # So slow that the first call's cold start cannot explain it: that call is the answer.
            reply = {"status": "ok", "seconds": first, "times": [first], "number": 1, "slow": True}
        else:
            reply = self._time(fn, args, dev, header, state)
        reply["phases"] = {"load": t1 - t0, "check": t2 - t1, "time": time.perf_counter() - t2}
        return reply

    def _time(self, fn: Any, args: list[Any], dev: Any, header: dict[str, Any], state: _TaskState) -> dict[str, Any]:
        """Time a checked candidate (see the module docstring): its answer without ``phases``."""
        one = self._run(fn, args, dev)
        if one > float(header.get("slow_factor", 8.0)) * state.ref_s and one > 1e-3:
            # Far slower than the default schedule: its one timed call is answer enough (it cannot
            # win, and timing it fully would cost the search many calls of it).
            return {"status": "ok", "seconds": one, "times": [one], "number": 1, "slow": True}
        min_s = float(header.get("min_repeat_s", 0.05))
        repeats = max(1, int(header.get("repeats", 5)))
        min_rounds = min(repeats, int(header.get("min_rounds", 3)))
        stable, reject = float(header.get("stable", 0.03)), float(header.get("reject_factor", 1.5))
        best = min(state.best_s, float(header.get("best_s") or "inf"))
        number, estimate = self._calls_per_round(fn, args, dev, min_s)
        graph = _GraphRounds.make(fn, args, dev, number, min_s)
        if graph is not None:
            number, estimate = graph.number, graph.round()
        if reject > 0 and estimate > 2 * reject * best:
            # The warm-up alone shows it far slower than the best: no round is needed to know it
            # cannot win (rounds would only narrow down how much slower it is).
            return {"status": "ok", "seconds": estimate, "times": [estimate], "number": number, "rejected": True}
        times: list[float] = []
        rejected = False
        while len(times) < repeats:
            if graph is not None:
                times.append(graph.round())
            else:
                t0 = time.perf_counter()
                calls = 0
                # A round ends after `number` calls, or early when the machine is slower than the
                # calibration said (another process took the cores): its time is per call either way.
                while calls < number and (calls == 0 or time.perf_counter() - t0 < 4 * min_s):
                    fn(*args)
                    calls += 1
                dev.sync()
                times.append((time.perf_counter() - t0) / calls)
            if reject > 0 and min(times) > reject * best:
                rejected = True  # clearly slower than the best so far: it cannot win
                break
            if len(times) >= min_rounds and max(times) <= (1 + stable) * min(times):
                break  # the rounds agree: more of them would not move the median
        seconds = statistics.median(times)
        if not rejected:
            state.best_s = min(state.best_s, seconds)
        return {"status": "ok", "seconds": seconds, "times": times, "number": number, "rejected": rejected,
                "graph": graph is not None}

    @staticmethod
    def _calls_per_round(fn: Any, args: list[Any], dev: Any, min_s: float) -> tuple[int, float]:
        """Calls that last about ``min_s`` seconds, and the seconds per call they were counted from:
        a warm-up of 1, 2, 4, ... calls, each group ending with a synchronisation, until a group
        lasts ``min_s / 8``. (Calls on a GPU only queue work: counting calls over a stretch of time
        without synchronising would queue hundreds and then wait for all of them.)"""
        group = 1
        while True:
            t0 = time.perf_counter()
            for _ in range(group):
                fn(*args)
            dev.sync()
            spent = max(time.perf_counter() - t0, 1e-9)
            if spent >= min_s / 8 or group >= 1 << 20:
                break
            group *= 2
        per_call = spent / group
        return max(1, int(min_s / per_call)), per_call


class _GraphRounds:
    """Timed rounds of a CUDA candidate: ``number`` calls captured once into a CUDA graph on a
    stream of their own; :meth:`round` replays it between two events on that stream and returns
    the device's seconds per call."""

    #: most calls captured into one graph (a larger round replays the graph several times):
    #: capturing costs a host launch per call, replaying costs nothing per call
    MAX_NODES = 256

    def __init__(self, graph: Any, stream: Any, index: int, calls: int, replays: int):
        self.graph, self.stream, self.index = graph, stream, index
        self.calls, self.replays = calls, replays
        self.number = calls * replays

    @classmethod
    def make(cls, fn: Any, args: list[Any], dev: Any, number: int, min_s: float) -> _GraphRounds | None:
        """The rounds of ``fn(*args)`` on CUDA device ``dev`` with about ``number`` calls each
        (None on other devices, or when the calls cannot be captured: the caller times them
        from the host)."""
        if getattr(dev, "kind", None) != "cuda":
            return None
        from ..runtime import cuda_driver as drv

        stream = drv.Stream(dev.index, non_blocking=True)
        prev = drv.set_stream(stream)
        try:
            fn(*args)  # on this stream first: its workspaces and tensor maps are made outside the capture
            stream.synchronize()
            calls = max(1, min(number, cls.MAX_NODES))
            drv.begin_capture(stream)
            try:
                for _ in range(calls):
                    fn(*args)
            finally:
                graph = drv.end_capture(stream)
        except DeviceError as exc:
            if exc.context_lost:
                raise
            return None
        finally:
            drv.set_stream(prev)
        rounds = cls(graph, stream, dev.index, calls, 1)
        per_call = rounds.round()
        rounds.replays = max(1, min(1024, int(min_s / max(per_call * calls, 1e-9))))
        rounds.number = calls * rounds.replays
        return rounds

    def round(self) -> float:
        """Replay the graph ``replays`` times between two events; seconds per call."""
        from ..runtime import cuda_driver as drv

        start, end = drv.Event(self.index), drv.Event(self.index)
        start.record(self.stream)
        for _ in range(self.replays):
            self.graph.launch(self.stream)
        end.record(self.stream)
        end.synchronize()
        return start.elapsed_ms(end) / 1e3 / (self.calls * self.replays)


def main() -> int:
    """Serve measure requests on stdin/stdout until stdin closes, or until a candidate's fault
    leaves the GPU context unusable (exit status 3, after the reply that says so)."""
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
            if isinstance(exc, DeviceError) and exc.context_lost:
                # The candidate faulted: this process's GPU context is gone, and every later
                # candidate would fail here too. Say so and end; the parent starts a new process.
                reply["context_lost"] = True
                wire.send(proto_out, reply)
                return 3
        wire.send(proto_out, reply)


if __name__ == "__main__":
    sys.exit(main())
