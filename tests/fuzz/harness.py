"""The fuzzer's oracle: each model runs in ONNX Runtime and in ember, each in a worker process of
its own (:mod:`tests.fuzz.worker`) with a time limit, and the two answers are judged.

==================  =====  ==========================================================================
verdict             bug?   meaning
==================  =====  ==========================================================================
``crash``           yes    ember's worker died (a signal, an abort)
``hang``            yes    ember gave no answer within the time limit
``foreign``         yes    ember raised an exception that is not an ``ember.EmberError``
``accepted_invalid`` yes   ONNX Runtime rejects the model, ember compiled (and ran) it
``mismatch``        yes    both ran it; the outputs differ (count, shape, dtype or values)
``match``           no     both ran it; same outputs
``both_reject``     no     ONNX Runtime rejects it, ember raises an ember error
``rejected_valid``  no     ONNX Runtime runs it, ember raises an ember error (stricter, or unsupported)
``clamped``         no     run-time indices outside their axis: ONNX Runtime fails the call, ember
                           clamps them (documented in docs/models.md)
``compiled``        no     both accepted it and there are no inputs to run it with
``ort_unsupported`` no     ONNX Runtime does not implement it (a kernel, opset or IR version); ember
                           answered with an error or a result
``ort_quirk``       no     ONNX Runtime rejects what the spec allows (``_ORT_QUIRKS``)
``ort_failed``      no     ONNX Runtime itself crashed or hung (ember's answer is still checked)
==================  =====  ==========================================================================
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import resource
import select
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .models import Case
from .worker import write_msg

ROOT = Path(__file__).resolve().parents[2]
BUGS = ("crash", "hang", "foreign", "accepted_invalid", "mismatch")

#: ONNX Runtime errors that say it lacks something, not that the model is wrong: no kernel for a
#: type, opset or IR version, and limits of its CPU kernels the spec does not have (LRN on 4-D
#: inputs with an odd size only, linear Resize of 2-D/3-D/4-D inputs only).
_ORT_UNSUPPORTED = re.compile(
    r"NOT_IMPLEMENTED|Could not find an implementation|official support for domain|Unsupported model IR version|"
    r"under development|is not supported|no kernel|Unsupported data type|"
    r"lrn\.cc.*NumDimensions\(\) == 4|size_ % 2 == 1|'Linear' mode only supports",
    re.I,
)
#: ONNX Runtime behaviour that departs from the spec, where ember follows the spec: a trailing
#: omitted optional input ("") of Squeeze/Unsqueeze is "given but null" to ONNX Runtime.
_ORT_QUIRKS = re.compile(r"Axes input is null", re.I)
#: ONNX Runtime run-time errors about index values (ember clamps run-time indices instead).
_ORT_INDEX = re.compile(r"out of (data )?bounds|out of range|must be within|invalid ind|indices element", re.I)


@dataclass
class Verdict:
    kind: str
    detail: str = ""

    @property
    def bug(self) -> bool:
        return self.kind in BUGS


class Worker:
    """One worker process (``role`` ``ember`` or ``ort``), restarted after a crash or hang and
    every ``recycle`` models."""

    def __init__(self, role: str, timeout: float, recycle: int = 300, mem_limit_gb: float = 6.0,
                 cache_dir: str | None = None):
        self.role, self.timeout, self.recycle, self.mem_limit = role, timeout, recycle, mem_limit_gb
        self.cache_dir = cache_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.count = 0
        self.log = tempfile.TemporaryFile()

    def _start(self) -> None:
        env = dict(os.environ)
        env.update({"OMP_NUM_THREADS": "1", "EMBER_MEMORY_LIMIT": env.get("EMBER_FUZZ_MEMORY", "2G"),
                    "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")})
        if self.cache_dir:
            env["EMBER_CACHE_DIR"] = self.cache_dir
        limit = int(self.mem_limit * 2**30)

        def limits() -> None:  # runs in the child: address space capped, no core files
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.worker", self.role], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     preexec_fn=limits)
        self.count = 0
        ready = self._read(120.0)
        if not isinstance(ready, dict) or ready.get("status") != "ready":
            raise RuntimeError(f"the {self.role} worker did not start: {ready}")

    def _read(self, timeout: float) -> Any:
        """The next message, or ``("hang", timeout)`` / ``("crash", returncode)``."""
        deadline = time.monotonic() + timeout
        head = self._read_exact(8, deadline)
        if isinstance(head, tuple):
            return head
        (n,) = struct.unpack("<Q", head)
        body = self._read_exact(n, deadline)
        return body if isinstance(body, tuple) else pickle.loads(body)

    def _read_exact(self, n: int, deadline: float) -> bytes | tuple[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                return ("hang", round(self.timeout))
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                return ("crash", self.proc.wait())
            buf += chunk
        return bytes(buf)

    def stop(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.proc = None

    def call(self, req: dict[str, Any]) -> Any:
        """The worker's answer: a dict, or ``("crash", returncode)`` / ``("hang", seconds)``."""
        if self.proc is None or self.count >= self.recycle or self.proc.poll() is not None:
            self.stop()
            self._start()
        self.count += 1
        assert self.proc is not None and self.proc.stdin is not None
        try:
            write_msg(self.proc.stdin, req)
        except (BrokenPipeError, OSError):
            self.stop()
            return ("crash", "the worker closed its input")
        got = self._read(self.timeout)
        if isinstance(got, tuple):
            self.stop()
        return got

    def stderr_tail(self, n: int = 2000) -> str:
        self.log.seek(0, os.SEEK_END)
        size = self.log.tell()
        self.log.seek(max(0, size - n))
        return self.log.read().decode(errors="replace")


def judge(case: Case, ort_res: Any, ember_res: Any) -> Verdict:
    """The verdict on one model from the two answers (see the module docstring)."""
    if isinstance(ember_res, tuple):
        return Verdict(ember_res[0], f"ember worker: {ember_res[0]} ({ember_res[1]})")
    es = ember_res["status"]
    if es == "foreign":
        return Verdict("foreign", f"{ember_res['type']} at {ember_res['stage']}: {ember_res['msg'][:300]}\n"
                                  f"{ember_res['tb']}")
    if isinstance(ort_res, tuple):
        return Verdict("ort_failed", f"ONNX Runtime {ort_res[0]}; ember: {es}")
    os_ = ort_res["status"]
    ember_ran = es in ("ok", "compiled")
    if os_ == "load_error" or os_ == "run_error":
        msg = ort_res["msg"]
        if _ORT_UNSUPPORTED.search(msg):
            return Verdict("ort_unsupported", msg[:200])
        if _ORT_QUIRKS.search(msg):
            return Verdict("ort_quirk", msg[:200])
        if os_ == "run_error" and _ORT_INDEX.search(msg) and (case.runtime_oob or _int_inputs(case)):
            return Verdict("clamped" if ember_ran else "both_reject", msg[:200])
        if ember_ran:
            return Verdict("accepted_invalid", f"ONNX Runtime: {msg[:400]}")
        return Verdict("both_reject",
                       f"ONNX Runtime: {msg[:150]} | ember {ember_res['type']}: {ember_res['msg'][:150]}")
    if not ember_ran:
        return Verdict("rejected_valid", f"ember {ember_res['type']} at {ember_res['stage']}: {ember_res['msg'][:300]}")
    if os_ == "compiled" or es == "compiled":
        return Verdict("compiled")
    empty = any(np.asarray(v).size == 0 for v in case.feeds.values())
    bad = compare(ort_res["outputs"], ember_res["outputs"], nan_ok=empty)
    return Verdict("mismatch", bad) if bad else Verdict("match")


def _int_inputs(case: Case) -> bool:
    return any(np.asarray(v).dtype.kind in "iu" for v in case.feeds.values())


def compare(want: list[Any], got: list[Any], nan_ok: bool = False) -> str:
    """'' when ``got`` matches ``want`` (ONNX Runtime's), else what differs. With ``nan_ok`` (an
    input is empty) a NaN of ember's matches anything: a mean over no values is undefined in the
    spec (ember gives 0/0, ONNX Runtime 0)."""
    if len(want) != len(got):
        return f"{len(got)} outputs, ONNX Runtime gives {len(want)}"
    for k, (w, g) in enumerate(zip(want, got)):
        if isinstance(w, list) or isinstance(g, list):
            continue
        w, g = np.asarray(w), np.asarray(g)
        if w.shape != g.shape:
            return f"output {k}: shape {g.shape}, ONNX Runtime {w.shape}"
        if w.dtype != g.dtype:
            return f"output {k}: dtype {g.dtype}, ONNX Runtime {w.dtype}"
        if w.dtype.kind == "f":
            w64, g64 = w.astype(np.float64), g.astype(np.float64)
            tol = 1e-3 if w.dtype == np.float16 else 1e-4
            scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(w64), w64, 0)))) if w.size else 1.0)
            ok = np.isclose(g64, w64, rtol=tol * 10, atol=tol * scale, equal_nan=True)
            # near the float range's end, the order of operations decides between a huge value
            # and inf (a batch norm folded into its convolution, a fused multiply-add)
            huge = float(np.finfo(w.dtype).max) / 1e3
            ok |= (np.abs(w64) > huge) & (np.abs(g64) > huge) & (np.sign(w64) == np.sign(g64))
            if nan_ok:
                ok |= np.isnan(g64)
            if not ok.all():
                i = np.argwhere(~ok)[0]
                return (f"output {k}: {int((~ok).sum())} of {ok.size} values differ, first at {tuple(i)}: "
                        f"ember {g64[tuple(i)]!r}, ONNX Runtime {w64[tuple(i)]!r}")
        elif not np.array_equal(w, g):
            return f"output {k}: values differ"
    return ""


@dataclass
class Stats:
    """The fuzz figures."""

    tried: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    by_source: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, v: Verdict, source: str) -> None:
        self.tried += 1
        self.counts[v.kind] = self.counts.get(v.kind, 0) + 1
        self.by_source[source] = self.by_source.get(source, 0) + 1

    def figures(self) -> dict[str, Any]:
        c = self.counts
        return {
            "models tried": self.tried,
            "by generator": dict(self.by_source),
            "crashes": c.get("crash", 0),
            "hangs": c.get("hang", 0),
            "foreign exceptions": c.get("foreign", 0),
            "accepted-invalid": c.get("accepted_invalid", 0),
            "mismatches": c.get("mismatch", 0),
            "verdicts": dict(sorted(c.items())),
            "seconds": round(self.seconds, 1),
        }


class Fuzzer:
    """Both workers and the figures; :meth:`check` judges one case."""

    def __init__(self, timeout: float = 120.0, findings: str | os.PathLike[str] | None = None,
                 cache_dir: str | None = None):
        self.ember = Worker("ember", timeout, cache_dir=cache_dir)
        self.ort = Worker("ort", timeout)
        self.stats = Stats()
        self.findings = Path(findings) if findings else None
        self._seen: set[str] = set()

    def close(self) -> None:
        self.ember.stop()
        self.ort.stop()

    def check(self, case: Case, source: str = "structured") -> Verdict:
        req = {"model": case.model, "feeds": case.feeds, "input_shapes": case.input_shapes}
        t0 = time.monotonic()
        ort_res = self.ort.call(req)
        ember_res = self.ember.call(req)
        v = judge(case, ort_res, ember_res)
        if v.kind == "crash":
            v.detail += "\n" + self.ember.stderr_tail()
        self.stats.add(v, source)
        self.stats.seconds += time.monotonic() - t0
        if v.bug and self.findings is not None:
            self._save(case, v, source)
        return v

    def _save(self, case: Case, v: Verdict, source: str) -> None:
        sig = v.kind + ":" + re.sub(r"\d+", "N", v.detail.splitlines()[0] if v.detail else "")[:160]
        digest = hashlib.sha256(case.model).hexdigest()[:12]
        assert self.findings is not None
        self.findings.mkdir(parents=True, exist_ok=True)
        new = sig not in self._seen
        self._seen.add(sig)
        base = self.findings / f"{v.kind}-{digest}"
        base.with_suffix(".onnx").write_bytes(case.model)
        np.savez(base.with_suffix(".npz"), **case.feeds)
        base.with_suffix(".json").write_text(json.dumps(
            {"verdict": v.kind, "detail": v.detail, "source": source, "note": case.note, "signature": sig,
             "new_signature": new, "input_shapes": {k: list(s) for k, s in case.input_shapes.items()}}, indent=1))
