"""``ember tune``: tune a model's kernels from the command line.

    ember tune MODEL.onnx --target llvm|cuda|rocm --trials N [--time-budget 10m] [--db PATH]
               [--workers N | --dask tcp://HOST:8786] [--input-shape NAME=D0,D1,...] [--quiet]
               [--batch N] [--seed N] [--export RECORDS.jsonl]
    ember tune --import RECORDS.jsonl [--db PATH]

Prints the table of :class:`~ember.tune.tuner.TuneResult` (per task: weight, trials, default and
best time, GFLOP/s, speedup; the estimated time of the tuned kernels). Exit status 0 when tuning
ran (also when interrupted with Ctrl-C: what was measured is kept), 1 for an error (a message
naming the problem), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import EmberError
from .records import TuningDB
from .tuner import DEFAULT_TRIALS, tune


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ember tune", description="search each kernel's schedule knobs, measured on "
                                "the device; ember.compile applies the best records (docs/tuning.md)")
    p.add_argument("model", nargs="?", help="an ONNX file")
    p.add_argument("--target", default="llvm", help="llvm (default), cuda, rocm, with options")
    p.add_argument("--trials", type=int, default=DEFAULT_TRIALS,
                   help=f"configurations measured over all kernels, earlier runs' included (default {DEFAULT_TRIALS})")
    p.add_argument("--time-budget", default=None, metavar="DURATION", help="stop after this long: 90s, 10m, 1.5h")
    p.add_argument("--db", default=None, metavar="PATH",
                   help="records database (default: $EMBER_TUNING_DB, else ~/.cache/ember/tuning.db)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=None, metavar="N",
                       help="a local Dask cluster of N build workers (and one measuring worker per GPU)")
    where.add_argument("--dask", default=None, metavar="ADDR", help="a running Dask scheduler, e.g. tcp://host:8786")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="fix the shape of an input (repeatable)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per build and per measurement (default 30)")
    p.add_argument("--cost-model", choices=("auto", "xgboost", "numpy"), default="auto",
                   help="the search's cost model (default: xgboost when installed)")
    p.add_argument("--batch", type=int, default=None, metavar="N",
                   help="candidates per batch (default: twice the build workers, at least 8)")
    p.add_argument("--seed", type=int, default=0, help="the search's random seed (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--export", default=None, metavar="PATH",
                   help="after tuning, write the model's records as JSON lines")
    p.add_argument("--import", dest="import_", default=None, metavar="PATH",
                   help="add the records of a JSON-lines file to the database (no model needed)")
    return p


def _shapes(specs: list[str], parser: argparse.ArgumentParser) -> dict[str, list[int]] | None:
    shapes: dict[str, list[int]] = {}
    for spec in specs:
        name, _, dims = spec.partition("=")
        try:
            shapes[name] = [int(d) for d in dims.split(",") if d]
        except ValueError:
            parser.error(f"--input-shape {spec!r}: give NAME=D0,D1,... with integer dimensions")
        if not name or not shapes[name]:
            parser.error(f"--input-shape {spec!r}: give NAME=D0,D1,...")
    return shapes or None


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``ember tune`` (see the module docstring); returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.import_:
            with TuningDB(args.db) as db:
                n = db.import_jsonl(args.import_)
                print(f"imported {n} new record(s) into {db.path}")
            if not args.model:
                return 0
        if not args.model:
            parser.error("give the ONNX model to tune (or --import RECORDS.jsonl)")
        result = tune(args.model, args.target, trials=args.trials, db=args.db, time_budget=args.time_budget,
                      workers=args.workers, dask=args.dask, input_shapes=_shapes(args.input_shape, parser),
                      quiet=args.quiet, timeout=args.timeout, batch=args.batch, cost_model=args.cost_model,
                      seed=args.seed)
        print(result)
        if args.export:
            with TuningDB(result.db) as db:
                n = db.export_jsonl(args.export, result.target_key, [t.workload for t in result.tasks])
            print(f"wrote {n} record(s) to {args.export}")
    except EmberError as exc:
        print(f"ember tune: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
