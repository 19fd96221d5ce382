"""Several GPUs tuning one model with Dask (issue 17): scale, a killed worker, two tuners at once.

Phases (``--phase``, comma-separated; each writes ``multi_gpu_tune_<phase>.json`` to ``--out`` and
then ``multi_gpu_tune.json``/``.md`` from every phase file found there, so phases can run in
separate calls and a phase run again replaces its own results):

* ``scale`` (= ``scale1,scale2,time``): ResNet-50 (fp32, batch 1; the seeded export of
  ``benchmarks/multi_gpu.py``) tuned for ``cuda`` with ``--trials`` trials and ``--workers`` build
  workers on a Dask LocalCluster, from a fresh database, in a subprocess that sees one GPU
  (``CUDA_VISIBLE_DEVICES=0``: ``scale1``) and one that sees two (``0,1``: ``scale2``); same seed
  and batch size. Reported per run: trials per minute of the tuning loop (starting the cluster
  left out, as ``tune_scale.py`` does), invalid trials, each measuring worker's busy fraction
  (its measuring seconds / loop seconds). ``time``: the model compiled with each database
  (``tuning_db=``) and untuned, timed on GPU 0 in alternating rounds (each the median of
  synchronised calls, ``tune_gpu.py``'s method), the ratio of the two tuned latencies with its
  spread over the rounds. The databases stay in ``--out`` (``multi_gpu_tune_1gpu.db``,
  ``multi_gpu_tune_2gpu.db``).
* ``kill``: a two-GPU tune of a GEMM (``--kill-n``) in a subprocess; once its first batch is
  stored, this script kills one measuring worker: ``worker`` (the Dask worker process measuring on
  GPU ``--kill-gpu``, found as the parent of the ``python -m ember.tune.runner`` process that has
  that ``CUDA_VISIBLE_DEVICES``: expected to cost no trial, as Dask measures again what it held)
  and ``runner`` (that measuring process itself, stopped first and killed a moment later so that
  a candidate is in flight: expected to cost exactly that trial). Checked: the run finishes,
  new trials == requested == records in the database, the trials lost, and the run's message
  appearing once in its output.
* ``concurrent``: two ``python -m ember tune`` processes started at once against one database
  file (seeds 1 and 2, ``--concurrent-workers`` build workers each); afterwards the records in the
  file must equal the sum of what each run says it stored (a configuration both runs measured is
  stored by the first, so the sum of their trials may be larger).

Needs two CUDA GPUs; ``--allow-one-gpu`` runs anyway (a smoke test: ``--target llvm`` runs every
phase on the CPU with a GEMM instead of ResNet-50). Dask must be importable (``ember[tune]``).

    python benchmarks/multi_gpu_tune.py --phase scale --out DIR [--trials 600 --workers 28 --batch 24]
    python benchmarks/multi_gpu_tune.py --phase kill --out DIR
    python benchmarks/multi_gpu_tune.py --phase concurrent --out DIR
    python benchmarks/multi_gpu_tune.py --phase scale,kill,concurrent --out /tmp/mgt --target llvm \\
        --allow-one-gpu --n 128 --trials 24 --batch 8 --workers 1 --rounds 3 --iters 20 --kill-n 128 \\
        --kill-trials 24 --kill-batch 8 --stop-s 4 --concurrent-trials 24 --concurrent-workers 1
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from common import machine, write_outputs  # noqa: E402

NAME = "multi_gpu_tune"
WORKER_NOTE = "died or left mid-run"
RUNNER_NOTE = "trial(s) lost: the measuring process died"
PHASES = ("scale1", "scale2", "time", "kill", "concurrent")


# -- the tuning subprocess ----------------------------------------------------------------------------
def child_env(devices: str | None = None) -> dict[str, str]:
    """This process's environment (``PYTHONPATH`` kept: the Dask wheels may be there), the
    checkout first on the path, and ``CUDA_VISIBLE_DEVICES=devices`` when given."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    if devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = devices
    return env


def child(spec_path: str) -> int:
    """In a subprocess: tune as ``spec`` says, print the result, write its summary as JSON."""
    import ember

    spec = json.loads(Path(spec_path).read_text())
    result = ember.tune(spec["model"], spec["target"], trials=spec["trials"], db=spec["db"], workers=spec["workers"],
                        batch=spec["batch"], seed=spec["seed"], quiet=True)
    print(result, flush=True)
    ph = result.phases
    loop = result.elapsed - ph.get("setup", 0.0)
    summary = {
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "workers": spec["workers"],
        "batch": spec["batch"], "seed": spec["seed"], "tasks": len(result.tasks), "new_trials": result.new_trials,
        "stored": result.stored, "lost": result.lost, "invalid": sum(t.invalid for t in result.tasks),
        "rejected": result.rejected, "interrupted": result.interrupted, "elapsed_s": round(result.elapsed, 2),
        "setup_s": round(ph.get("setup", 0.0), 2), "loop_s": round(loop, 2),
        "trials_per_min": round(result.trials_per_minute, 1),
        "measurer_busy": {k: round(v / loop, 3) for k, v in sorted(result.measurers.items())} if loop > 0 else {},
        "build_s_per_trial": round(ph.get("build", 0.0) / max(result.new_trials, 1), 3),
        "measure_s_per_trial": round(ph.get("measure", 0.0) / max(result.new_trials, 1), 3),
        "phases_s": {k: round(v, 2) for k, v in sorted(ph.items())}, "notes": result.notes,
        "estimated_ms": None if result.latency is None else round(result.latency * 1e3, 4),
        "estimated_default_ms": None if result.default_latency is None else round(result.default_latency * 1e3, 4),
    }
    Path(spec["result"]).write_text(json.dumps(summary, indent=2))
    return 0


def run_child(out: Path, label: str, spec: dict[str, Any], devices: str | None, timeout: float,
              on_start: Any = None) -> tuple[dict[str, Any] | None, str, int]:
    """Run :func:`child` with ``spec`` in a subprocess seeing GPUs ``devices`` (None: as this
    process); ``on_start(proc)`` runs in a thread meanwhile. Returns (summary or None, output,
    exit status)."""
    spec = dict(spec, result=str(out / f"{NAME}_{label}.run.json"))
    Path(spec["result"]).unlink(missing_ok=True)
    spec_path = out / f"{NAME}_{label}.spec.json"
    spec_path.write_text(json.dumps(spec))
    env = child_env(devices)
    log = out / f"{NAME}_{label}.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, __file__, "--child", str(spec_path)], stdout=fh,
                                stderr=subprocess.STDOUT, env=env, cwd=REPO)
        helper = None
        if on_start is not None:
            helper = threading.Thread(target=on_start, args=(proc,), daemon=True)
            helper.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if helper is not None:
            helper.join(30)
    text = log.read_text(errors="replace")
    path = Path(spec["result"])
    return (json.loads(path.read_text()) if path.exists() else None), text, code


# -- models ----------------------------------------------------------------------------------------
def model_path(args: argparse.Namespace, kind: str, n: int | None = None) -> Path:
    """The ONNX file to tune: ResNet-50 (exported with torch, as ``multi_gpu.py`` does) or a GEMM
    of ``n`` (``tune_cpu.py``'s ``gemm_model``)."""
    models = Path(args.models)
    models.mkdir(parents=True, exist_ok=True)
    if kind == "resnet50":
        from multi_gpu import _resnet

        return _resnet(models)
    from tune_cpu import gemm_model

    n = n or args.n
    path = models / f"gemm_{n}.onnx"
    if not path.exists():
        path.write_bytes(gemm_model(n))
    return path


def _model_kind(args: argparse.Namespace) -> str:
    return args.model if args.model != "auto" else ("resnet50" if args.target == "cuda" else "gemm")


def _db_count(path: Path) -> int:
    import sqlite3

    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM records").fetchone()[0])
    except sqlite3.Error:  # not created yet
        return 0


def _db_errors(path: Path, like: str) -> int:
    """Records of ``path`` whose error contains ``like``."""
    import sqlite3

    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM records WHERE error LIKE ?", (f"%{like}%",)).fetchone()[0])


def _fresh(db: Path) -> None:
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        p.unlink(missing_ok=True)


# -- phases ------------------------------------------------------------------------------------------
def phase_scale(args: argparse.Namespace, out: Path, gpus: int) -> dict[str, Any]:
    """Tune with one GPU visible (``scale1``) or two (``scale2``) from a fresh database."""
    which = args.current
    label, devices = ("1gpu", "0") if which == "scale1" else ("2gpu", "0,1")
    path = model_path(args, _model_kind(args))
    db = out / f"{NAME}_{label}.db"
    _fresh(db)
    spec = {"model": str(path), "target": args.target, "trials": args.trials, "db": str(db), "workers": args.workers,
            "batch": args.batch, "seed": args.seed}
    summary, text, code = run_child(out, label, spec, devices if args.target == "cuda" else None, args.timeout)
    if summary is None or code != 0:
        raise SystemExit(f"{NAME}: the {label} tuning run failed (exit status {code}); its output:\n{text[-4000:]}")
    summary.update(model=_model_kind(args), db=str(db), records=_db_count(db), exit_status=code)
    print(f"{label}: {summary['new_trials']} trials, {summary['trials_per_min']} trials/min, busy "
          f"{summary['measurer_busy']}, invalid {summary['invalid']}", flush=True)
    return summary


def phase_time(args: argparse.Namespace, out: Path, gpus: int) -> dict[str, Any]:
    """Time the model compiled with each scale database (and untuned) on device 0."""
    import numpy as np
    import onnx
    from tune_gpu import _alternating

    import ember

    path = model_path(args, _model_kind(args))
    dbs = {label: out / f"{NAME}_{label}.db" for label in ("1gpu", "2gpu")}
    missing = [str(p) for p in dbs.values() if not p.exists()]
    if missing:
        raise SystemExit(f"{NAME}: run --phase scale1,scale2 first (missing {', '.join(missing)})")
    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    rng = np.random.default_rng(0)
    host = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype("float32")
            for i in inputs}
    dev = ember.cuda(0) if args.target == "cuda" else ember.cpu(0)
    models, compile_s = {}, {}
    for label, db in (*dbs.items(), ("untuned", None)):
        t0 = time.perf_counter()
        models[label] = ember.compile(str(path), args.target, tuning_db=str(db) if db else False)
        compile_s[label] = round(time.perf_counter() - t0, 1)
    outs = {label: m(**host)[0] for label, m in models.items()}
    ref = outs["untuned"].astype("float64")
    scale = max(float(np.abs(ref).max()), 1e-30)
    feeds = {k: ember.nd.array(v, dev) for k, v in host.items()}
    fns = {label: (lambda m=m: m.run_on_device(**feeds)) for label, m in models.items()}
    rounds = [_alternating(fns, dev.sync, rounds=1, iters=args.iters) for _ in range(args.rounds)]
    best = {k: min(r[k] for r in rounds) for k in fns}
    per_round = [r["2gpu"] / r["1gpu"] for r in rounds]
    return {"device": str(dev), "rounds": args.rounds, "iters": args.iters,
            "timing": "per round: each model's median of synchronised calls, the models alternating "
                      "(tune_gpu.py's _alternating); best = min over rounds",
            "ms_best": {k: round(v, 4) for k, v in best.items()}, "ms_rounds": [{k: round(v, 4) for k, v in r.items()}
                                                                               for r in rounds],
            "ratio_2gpu_over_1gpu": round(best["2gpu"] / best["1gpu"], 4),
            "ratio_per_round": {"min": round(min(per_round), 4), "median": round(statistics.median(per_round), 4),
                                "max": round(max(per_round), 4)},
            "untuned_over_1gpu": round(best["untuned"] / best["1gpu"], 4),
            "max_rel_diff_vs_untuned": {k: float(np.abs(v.astype("float64") - ref).max() / scale)
                                        for k, v in outs.items() if k != "untuned"},
            "compile_s": compile_s}


def _runner_procs(root: int, gpu: str | None) -> list[Any]:
    """The ``ember.tune.runner`` processes under ``root`` (seeing GPU ``gpu`` when given)."""
    import psutil

    found = []
    for p in psutil.Process(root).children(recursive=True):
        try:
            if "ember.tune.runner" not in " ".join(p.cmdline()):
                continue
            if gpu is not None and p.environ().get("CUDA_VISIBLE_DEVICES") != gpu:
                continue
            found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _kill(args: argparse.Namespace, what: str, db: Path, gpu: str | None, killed: dict[str, Any],
          proc: subprocess.Popen[bytes]) -> None:
    """Once the tuning subprocess ``proc`` stored its first batch in ``db``: kill its measuring
    worker (``what="worker"``) or measuring process (``"runner"``) on GPU ``gpu``; notes in
    ``killed``."""
    import psutil

    end = time.monotonic() + args.timeout
    while _db_count(db) == 0 and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    killed["records_before"] = _db_count(db)
    runners: list[Any] = []
    while not runners and proc.poll() is None and time.monotonic() < end:
        runners = _runner_procs(proc.pid, gpu)
        time.sleep(0.05)
    if not runners:
        killed["error"] = "no measuring process found"
        return
    runner = runners[0]
    try:
        if what == "worker":
            victim = runner.parent()
            killed["pid"], killed["name"] = victim.pid, "the Dask measuring worker"
            victim.send_signal(signal.SIGKILL)
        else:
            killed["pid"], killed["name"] = runner.pid, "the measuring process"
            runner.send_signal(signal.SIGSTOP)  # what it measures now, or next, cannot finish
            time.sleep(args.stop_s)
            runner.send_signal(signal.SIGKILL)
        killed["at_records"] = _db_count(db)
    except psutil.NoSuchProcess:
        killed["error"] = "the process ended before the kill"


def phase_kill(args: argparse.Namespace, out: Path, gpus: int) -> dict[str, Any]:
    """Kill a measuring worker (then, in a second run, a measuring process) after the first batch."""
    path = model_path(args, "gemm", args.kill_n)
    gpu = str(args.kill_gpu) if args.target == "cuda" and gpus > 1 else None
    runs = {}
    for what in ("worker", "runner"):
        db = out / f"{NAME}_kill_{what}.db"
        _fresh(db)
        spec = {"model": str(path), "target": args.target, "trials": args.kill_trials, "db": str(db),
                "workers": args.workers, "batch": args.kill_batch, "seed": args.seed}
        killed: dict[str, Any] = {}
        summary, text, code = run_child(out, f"kill_{what}", spec, None, args.timeout,
                                        functools.partial(_kill, args, what, db, gpu, killed))
        note = WORKER_NOTE if what == "worker" else RUNNER_NOTE
        records = _db_count(db)
        # the trials the kill cost: records of a measuring process killed by SIGKILL (-9), or of a
        # measurement Dask gave up on (a worker died under it too often)
        lost = _db_errors(db, "died (exit code -9)") + _db_errors(db, "the measuring worker died")
        r: dict[str, Any] = {"killed": killed, "exit_status": code, "requested": args.kill_trials,
                             "records": records, "lost": lost, "message_count": text.count(note), "message": note}
        if summary is not None:
            r.update(new_trials=summary["new_trials"], invalid=summary["invalid"], notes=summary["notes"],
                     trials_per_min=summary["trials_per_min"])
        expected_lost = 0 if what == "worker" else 1
        r["ok"] = bool(code == 0 and summary is not None and "error" not in killed
                       and summary["new_trials"] == args.kill_trials == records
                       and lost == expected_lost and r["message_count"] == 1)
        r["expected_lost"] = expected_lost
        print(f"kill {what}: {r}", flush=True)
        runs[what] = r
    return {"model": f"gemm {args.kill_n}", "gpu_killed": gpu, "runs": runs, "ok": all(r["ok"] for r in runs.values())}


def phase_concurrent(args: argparse.Namespace, out: Path, gpus: int) -> dict[str, Any]:
    """Two ``ember tune`` processes at once on one database."""
    kind = _model_kind(args)
    path = model_path(args, kind)
    db = out / f"{NAME}_concurrent.db"
    _fresh(db)
    procs, logs = [], []
    for seed in (1, 2):
        cmd = [sys.executable, "-m", "ember", "tune", str(path), "--target", args.target, "--trials",
               str(args.concurrent_trials), "--db", str(db), "--workers", str(args.concurrent_workers), "--seed",
               str(seed), "--batch", str(args.batch), "--quiet"]
        log = out / f"{NAME}_concurrent_{seed}.log"
        logs.append(log)
        with open(log, "w") as fh:
            procs.append((cmd, subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=child_env(), cwd=REPO)))
    runs = []
    for (cmd, p), log in zip(procs, logs):
        try:
            code = p.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            code = p.wait()
        text = log.read_text(errors="replace")
        m = re.search(r"(\d+) new trial\(s\) in .*?; (\d+) record\(s\) stored", text)
        runs.append({"command": " ".join(cmd[1:]), "exit_status": code,
                     "new_trials": int(m.group(1)) if m else None, "stored": int(m.group(2)) if m else None,
                     "tail": text[-1500:] if code or not m else ""})
    records = _db_count(db)
    stored = sum(r["stored"] or 0 for r in runs)
    new = sum(r["new_trials"] or 0 for r in runs)
    ok = all(r["exit_status"] == 0 and r["stored"] is not None for r in runs) and records == stored
    res = {"model": kind, "db": str(db), "runs": runs, "records": records, "stored_sum": stored,
           "measured_by_both": new - stored, "ok": ok}
    print(f"concurrent: records {records}, stored {[r['stored'] for r in runs]}, trials "
          f"{[r['new_trials'] for r in runs]}: {'ok' if ok else 'RECORDS LOST OR A RUN FAILED'}", flush=True)
    return res


# -- report ------------------------------------------------------------------------------------------
def report(out: Path, args: argparse.Namespace, gpus: int, devices: list[str]) -> str:
    """Merge the phase files in ``out`` into ``multi_gpu_tune.json``/``.md``; returns the table."""
    phases = {}
    for ph in PHASES:
        p = out / f"{NAME}_{ph}.json"
        if p.exists():
            phases[ph] = json.loads(p.read_text())
    res: dict[str, Any] = {"gpus": gpus, "devices": devices, "machine": machine(), "target": args.target,
                           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "phases": phases}
    lines = [f"# {NAME}: tuning across GPUs with Dask ({args.target}, {gpus} GPU(s): {', '.join(devices) or '-'})", ""]
    s1, s2 = phases.get("scale1"), phases.get("scale2")
    if s1 or s2:
        lines += ["| run | model | trials | setup s | loop s | trials/min | measurer busy | build s/trial | "
                  "measure s/trial | invalid | stopped early | est. tuned ms |",
                  "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
        for label, s in (("1 GPU", s1), ("2 GPUs", s2)):
            if s:
                busy = ", ".join(f"{v:.2f}" for v in s["measurer_busy"].values())
                lines.append(f"| {label} | {s['model']} | {s['new_trials']} | {s['setup_s']} | {s['loop_s']} | "
                             f"{s['trials_per_min']} | {busy} | {s['build_s_per_trial']} | "
                             f"{s['measure_s_per_trial']} | {s['invalid']} | {s['rejected']} | {s['estimated_ms']} |")
        if s1 and s2:
            res["scale_2_over_1"] = round(s2["trials_per_min"] / max(s1["trials_per_min"], 1e-9), 3)
            lines += ["", f"trials/min, 2 GPUs / 1 GPU: **{res['scale_2_over_1']}x** (goal >= 1.8x; "
                          f"--workers {s1['workers']}, --batch {s1['batch']})"]
    t = phases.get("time")
    if t:
        ms = t["ms_best"]
        res["tuned_latency_2_over_1"] = t["ratio_2gpu_over_1gpu"]
        lines += ["", f"model timed on {t['device']} ({t['rounds']} alternating rounds of {t['iters']} calls, best): "
                      f"1-GPU records {ms['1gpu']} ms, 2-GPU records {ms['2gpu']} ms, untuned {ms['untuned']} ms; "
                      f"2-GPU / 1-GPU **{t['ratio_2gpu_over_1gpu']}** (per round {t['ratio_per_round']['min']}"
                      f"-{t['ratio_per_round']['max']})"]
    k = phases.get("kill")
    if k:
        lines += ["", "| killed | requested | new trials | records | lost (expected) | message lines | ok |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for what, r in k["runs"].items():
            lines.append(f"| {r['killed'].get('name', what)} | {r['requested']} | {r.get('new_trials')} | "
                         f"{r['records']} | {r['lost']} ({r['expected_lost']}) | {r['message_count']} | "
                         f"{'yes' if r['ok'] else 'NO'} |")
    c = phases.get("concurrent")
    if c:
        lines += ["", f"two `ember tune` at once on one database ({c['model']}): trials "
                      f"{[r['new_trials'] for r in c['runs']]}, stored {[r['stored'] for r in c['runs']]}, "
                      f"records in the file {c['records']} (= {c['stored_sum']}: {'ok' if c['ok'] else 'NOT OK'}; "
                      f"{c['measured_by_both']} configuration(s) measured by both)"]
    res["command"] = "python benchmarks/multi_gpu_tune.py " + " ".join(sys.argv[1:])
    return write_outputs(out, NAME, res, lines)


def _gpus(target: str) -> tuple[int, list[str]]:
    if target != "cuda":
        return 0, []
    from ember.tune.keys import gpu_present

    if not gpu_present("cuda"):
        return 0, []
    import ember
    from ember.runtime import cuda_driver

    n = int(cuda_driver.device_count())
    return n, [str(ember.cuda(i).attributes.get("device_name", "?")) for i in range(n)]


def main() -> int:
    """Run the phases asked for; returns a process exit code."""
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phase", default="scale", help="comma-separated: scale (= scale1,scale2,time), scale1, "
                    "scale2, time, kill, concurrent, report")
    ap.add_argument("--out", default="benchmarks/results/multi_gpu_tune")
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--model", default="auto", choices=("auto", "resnet50", "gemm"),
                    help="what scale and concurrent tune (auto: resnet50 for cuda, a GEMM of --n otherwise)")
    ap.add_argument("--n", type=int, default=256, help="the GEMM's size where a GEMM is tuned")
    ap.add_argument("--models", default="/tmp/ember_models", help="where ONNX exports are kept")
    ap.add_argument("--trials", type=int, default=600)
    ap.add_argument("--workers", type=int, default=28, help="build workers (the measuring workers come on top)")
    ap.add_argument("--batch", type=int, default=24, help="candidates per batch (ResNet-50 has 21 tasks on cuda)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=7, help="alternating timing rounds (time)")
    ap.add_argument("--iters", type=int, default=50, help="synchronised calls per model and round (time)")
    ap.add_argument("--kill-n", type=int, default=1024, help="the GEMM tuned by kill")
    ap.add_argument("--kill-trials", type=int, default=192)
    ap.add_argument("--kill-batch", type=int, default=32)
    ap.add_argument("--kill-gpu", type=int, default=1, help="whose measuring worker is killed")
    ap.add_argument("--stop-s", type=float, default=1.5, help="seconds the measuring process is stopped before "
                    "it is killed (kill runner)")
    ap.add_argument("--concurrent-trials", type=int, default=200)
    ap.add_argument("--concurrent-workers", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=540.0, help="seconds allowed to each tuning subprocess")
    ap.add_argument("--allow-one-gpu", action="store_true", help="run with fewer than two GPUs (a smoke test)")
    args = ap.parse_args()
    try:
        import distributed  # noqa: F401
    except ImportError:
        print(f"{NAME}: needs Dask (pip install 'ember[tune]', or the wheels in .whl/)", file=sys.stderr)
        return 2
    gpus, devices = _gpus(args.target)
    if gpus < 2 and not args.allow_one_gpu:
        print(f"{NAME}: needs two CUDA GPUs for --target {args.target}, this machine has {gpus} "
              "(--allow-one-gpu runs anyway, as a smoke test)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    asked = [p for p in args.phase.split(",") if p]
    todo: list[str] = []
    for p in asked:
        todo += ["scale1", "scale2", "time"] if p == "scale" else [p]
    unknown = [p for p in todo if p not in (*PHASES, "report")]
    if unknown:
        ap.error(f"unknown phase(s) {unknown}")
    funcs = {"scale1": phase_scale, "scale2": phase_scale, "time": phase_time, "kill": phase_kill,
             "concurrent": phase_concurrent}
    ok = True
    for p in todo:
        if p == "report":
            continue
        args.current = p
        t0 = time.monotonic()
        res = funcs[p](args, out, gpus)
        res["phase_s"] = round(time.monotonic() - t0, 1)
        res["command"] = "python benchmarks/multi_gpu_tune.py " + " ".join(sys.argv[1:])
        (out / f"{NAME}_{p}.json").write_text(json.dumps(res, indent=2))
        ok &= res.get("ok", True)
        print(f"{p}: done in {res['phase_s']} s", flush=True)
    print(report(out, args, gpus, devices))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
