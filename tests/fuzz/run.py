"""The long fuzz run (``make fuzz``): structured and mutated models for a time budget, then the
figures.

    python -m tests.fuzz.run --minutes 30 [--seed 0] [--findings build/fuzz/findings]

Each model is judged by :mod:`tests.fuzz.harness` (ember and ONNX Runtime in worker processes
with a time limit). Every model with a bug verdict is saved in the findings folder (the model,
its inputs and a JSON description); turn each into a test in ``tests/fuzz/test_regressions.py``.
Exits 1 when a bug was found.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from .harness import ROOT, Fuzzer
from .models import Chooser, structured_model
from .mutate import mutated_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0, help="time budget (default 30)")
    ap.add_argument("--seed", type=int, default=None, help="first seed (default: from the clock)")
    ap.add_argument("--mix", type=float, default=0.5, help="share of structured models (the rest are mutated)")
    ap.add_argument("--findings", default=str(ROOT / "build" / "fuzz" / "findings"))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a model counts as a hang")
    ap.add_argument("--max-models", type=int, default=0, help="stop after this many models (0: no limit)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    cache = ROOT / "build" / "fuzz" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    fz = Fuzzer(timeout=args.timeout, findings=args.findings, cache_dir=str(cache))
    end = time.monotonic() + args.minutes * 60
    last = time.monotonic()
    i = 0
    print(f"fuzzing for {args.minutes:g} min from seed {seed}; findings go to {args.findings}", flush=True)
    try:
        while time.monotonic() < end and (not args.max_models or i < args.max_models):
            rng = random.Random(seed + i)
            structured = rng.random() < args.mix
            ch = Chooser(rng)
            try:
                case = structured_model(ch) if structured else mutated_model(ch)
            except Exception as exc:  # noqa: BLE001 - a generator bug must not end the run
                print(f"  [generator error] seed {seed + i}: {type(exc).__name__}: {exc}", flush=True)
                i += 1
                continue
            v = fz.check(case, "structured" if structured else "mutated")
            if v.bug:
                first = v.detail.splitlines()[0] if v.detail else ""
                print(f"  [{v.kind}] seed {seed + i}: {case.note} | {first[:300]}", flush=True)
            i += 1
            if time.monotonic() - last > 60:
                last = time.monotonic()
                f = fz.stats.figures()
                print(f"  {f['models tried']} models, {f['crashes']} crashes, {f['hangs']} hangs, "
                      f"{f['foreign exceptions']} foreign, {f['accepted-invalid']} accepted-invalid, "
                      f"{f['mismatches']} mismatches", flush=True)
    finally:
        fz.close()
    figures = fz.stats.figures()
    figures["first seed"] = seed
    print(json.dumps(figures, indent=1))
    out = Path(args.findings).parent / "figures.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=1))
    bugs = sum(figures[k] for k in ("crashes", "hangs", "foreign exceptions", "accepted-invalid", "mismatches"))
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
