"""The roofline plot of a profile (matplotlib, an optional dependency: ``ember[profile]``)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import EmberError


def plot_roofline(result: Any, path: str | os.PathLike[str]) -> None:
    """Save the roofline of ``result`` (a :class:`~ember.profiler.result.ProfileResult`) to
    ``path``: log-log axes of arithmetic intensity (FLOP/byte) and achieved GFLOP/s, the
    bandwidth slope and the compute roof with their sources, one point per kernel (area: its
    share of the time). Raises EmberError when matplotlib is missing or a roof is unknown."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise EmberError("the roofline plot needs matplotlib: pip install 'ember[profile]' "
                         "(or pip install matplotlib)") from exc
    peaks = result.peaks
    if peaks is None or peaks.flops_per_s is None or peaks.bytes_per_s is None:
        why = "no peaks" if peaks is None else f"{peaks.flops_source}; {peaks.bytes_source}"
        raise EmberError(f"the roofline needs the device's peak FLOP/s and bandwidth ({why})")
    points = [(k.cost.intensity, k.gflops, k) for k in result.kernels
              if k.cost is not None and k.cost.bytes and k.gflops]
    total = result.total_ns or 1
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ridge = peaks.flops_per_s / peaks.bytes_per_s
    lo = min([p[0] for p in points] + [ridge / 100]) / 2
    hi = max([p[0] for p in points] + [ridge * 10]) * 2
    xs = [lo, ridge, hi]
    ax.plot(xs, [min(peaks.flops_per_s, x * peaks.bytes_per_s) / 1e9 for x in xs], color="black", lw=1.5)
    ax.annotate(f"{peaks.bytes_per_s / 1e9:.0f} GB/s", (lo * 1.2, lo * 1.2 * peaks.bytes_per_s / 1e9), fontsize=8)
    ax.annotate(f"{peaks.flops_per_s / 1e9:.0f} GFLOP/s", (ridge * 1.2, peaks.flops_per_s / 1e9 * 1.1), fontsize=8)
    for x, y, k in points:
        ax.scatter([x], [y], s=20 + 400 * k.total_ns / total, alpha=0.6)
    for x, y, k in sorted(points, key=lambda p: -p[2].total_ns)[:8]:
        ax.annotate(k.name[:28], (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(f"ember roofline: {result.device} ({result.target})", fontsize=10)
    fig.text(0.01, 0.01, f"compute roof: {peaks.flops_source}\nbandwidth roof: {peaks.bytes_source}", fontsize=6)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(os.fspath(path), dpi=120)
    plt.close(fig)
