"""``ember profile MODEL --target llvm|cuda [--input NAME=FILE.npy ...] [--trace t.json]
[--csv s.csv] [--roofline r.png]``: per-kernel and per-node times, FLOPs, bytes and roofline."""

from __future__ import annotations

import argparse

from ..profiler import device_peaks
from .common import add_input_options, add_model_options, add_timing_options, model_inputs, open_model, reported


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``profile``."""
    p = sub.add_parser("profile", help="time every kernel: table, rocprof-style CSV, Chrome trace, roofline",
                       description="Run the model kernel by kernel (device timers on GPUs) and report each "
                                   "kernel's calls, time, FLOPs, bytes, GFLOP/s, GB/s and share of the device's "
                                   "roofline (docs/profiling.md).")
    add_model_options(p)
    add_input_options(p)
    add_timing_options(p, warmup=1, repeat=10, what="runs")
    p.add_argument("--by", choices=("kernel", "node"), default="kernel", help="rows of the printed table")
    p.add_argument("--top", type=int, default=20, help="rows printed (default 20)")
    p.add_argument("--csv", default=None, metavar="STATS.csv",
                   help="per-kernel statistics (rocprof --stats columns first)")
    p.add_argument("--trace", default=None, metavar="TRACE.json", help="Chrome trace (Perfetto, chrome://tracing)")
    p.add_argument("--roofline", default=None, metavar="ROOFLINE.png", help="roofline plot (needs matplotlib)")
    peaks = p.add_mutually_exclusive_group()
    peaks.add_argument("--no-peaks", action="store_true", help="leave out the roofline columns (no peaks measured)")
    peaks.add_argument("--measure-peaks", action="store_true",
                       help="measure the device's peaks again (they are measured once and cached)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Profile ``args.model``."""
    with reported("profile") as status:
        model, _ = open_model(args)
        feeds = model_inputs(args, model)
        if args.measure_peaks:
            device_peaks(model.device, refresh=True)
        prof = model.profile(feeds, repeat=args.repeat, warmup=args.warmup, peaks=not args.no_peaks)
        print(prof.table(top=args.top) if args.by == "kernel" else prof.node_table(top=args.top))
        if args.csv:
            prof.to_csv(args.csv)
            print(f"statistics: {args.csv}")
        if args.trace:
            prof.to_chrome_trace(args.trace)
            print(f"trace: {args.trace} (open in https://ui.perfetto.dev)")
        if args.roofline:
            prof.plot_roofline(args.roofline)
            print(f"roofline: {args.roofline}")
        return 0
    return status[0]
