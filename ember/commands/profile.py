"""``ember profile MODEL --target llvm|cuda [--input NAME=FILE.npy ...] [--trace t.json]
[--csv s.csv] [--roofline r.png]``: per-kernel and per-node times, FLOPs, bytes and roofline."""

from __future__ import annotations

import argparse

from ..profiler import ProfileResult, device_peaks
from .anchor import onnx_bytes, ort_node_times
from .common import add_measure_options, open_measured, reported


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``profile``."""
    p = sub.add_parser("profile", help="time every kernel: table, rocprof-style CSV, Chrome trace, roofline",
                       description="Run the model kernel by kernel (device timers on GPUs) and report each "
                                   "kernel's calls, time, FLOPs, bytes, GFLOP/s, GB/s and share of the device's "
                                   "roofline (docs/profiling.md).")
    add_measure_options(p, warmup=1, repeat=10, what="runs",
                        compare_help="put ONNX Runtime's own profile (its per-node times) next to each kernel")
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
        model, _, feeds = open_measured(args, args.csv, args.trace, args.roofline)
        if args.measure_peaks:
            device_peaks(model.device, refresh=True)
        prof = model.profile(feeds, repeat=args.repeat, warmup=args.warmup, peaks=not args.no_peaks)
        print(prof.table(top=args.top) if args.by == "kernel" else prof.node_table(top=args.top))
        if args.compare == "onnxruntime":
            theirs = ort_node_times(onnx_bytes(args.model, model), feeds, model.target, args.warmup, args.repeat)
            print()
            print(compare_table(prof, theirs, args.top))
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


def compare_table(prof: ProfileResult, theirs: dict[str, float], top: int | None) -> str:
    """Each kernel step of ``prof`` (by time) next to the time ONNX Runtime spends on the same
    ONNX nodes (``theirs``: node name -> median microseconds; a node ONNX Runtime fused under
    another name, or that ember folded, has no match: ``(-)``), medians over the runs, with the
    ratio, and the totals."""
    head = f"{'kernel step':<34} {'ember us':>9} {'ORT us':>9} {'ratio':>7}  nodes ((-): not in ORT's profile)"
    lines = ["per kernel step, next to ONNX Runtime's own profile of the same nodes (medians):", head,
             "-" * len(head)]
    for row in sorted(prof.steps, key=lambda r: -r.median_ns)[:top]:
        matched = [n for n in row.nodes if n in theirs]
        ort_us = sum(theirs[n] for n in matched)
        ratio = f"{row.median_ns / 1e3 / ort_us:>7.2f}" if matched and ort_us > 0 else f"{'-':>7}"
        ort_s = f"{ort_us:>9.1f}" if matched else f"{'-':>9}"
        names = ", ".join(f"{n}{'' if n in theirs else ' (-)'}" for n in row.nodes)
        lines.append(f"{row.name[:34]:<34} {row.median_ns / 1e3:>9.1f} {ort_s} {ratio}  {names[:60]}")
    ember_total = sum(r.median_ns for r in prof.steps) / 1e3
    ort_total = sum(theirs.values())
    lines.append(f"{'all kernels':<34} {ember_total:>9.1f} {ort_total:>9.1f} "
                 f"{(ember_total / ort_total if ort_total else 0):>7.2f}")
    return "\n".join(lines)
