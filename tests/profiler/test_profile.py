"""Model.profile on the CPU: the structured result, its CSV, Chrome trace and roofline."""

from __future__ import annotations

import csv
import io
import json
import sys

import numpy as np
import pytest

import ember
from ember.errors import ArgumentError, EmberError
from ember.profiler import EXTRA_COLUMNS, ROCPROF_COLUMNS, ProfileResult, device_peaks
from ember.profiler.recorder import HOST_CLOCK

from .tiny_models import mlp, two_layers
from .trace_schema import check_trace

N, D = 5, 16
REPEAT = 4


@pytest.fixture(scope="module")
def profiled() -> tuple[ember.Model, ProfileResult]:
    m = ember.compile(two_layers(N, D), use_cache=False)
    x = np.random.default_rng(1).standard_normal((N, D)).astype(np.float32)
    return m, m.profile(x, repeat=REPEAT, warmup=1)


def test_steps_kernels_and_nodes(profiled) -> None:
    m, prof = profiled
    assert prof.clock == HOST_CLOCK and prof.runs == REPEAT and prof.timed
    # the two identical layers share one kernel: two steps, one kernel row with both calls
    assert len(prof.steps) == 2 and prof.steps[1].name == prof.steps[0].name + "#2"
    assert len(prof.kernels) == 1
    (k,) = prof.kernels
    assert k.calls == 2 * REPEAT and all(s.calls == REPEAT for s in prof.steps)
    assert k.total_ns == sum(s.total_ns for s in prof.steps) > 0
    assert k.min_ns <= k.avg_ns
    # hand count per layer: N x D x D multiply-adds (2 FLOPs) and one max per output for the Relu
    assert k.cost is not None and k.cost.flops == 2 * N * D * D + N * D
    assert k.cost.bytes_written == 4 * N * D
    assert k.gflops == pytest.approx(k.cost.flops * k.calls / k.total_ns)
    assert [(n.name, n.op, n.fused_with) for n in prof.nodes] == [
        ("mm1", "MatMul", 2), ("relu1", "Relu", 2), ("mm2", "MatMul", 2), ("relu2", "Relu", 2)]
    assert prof.nodes[2].kernel == prof.steps[1].name


def test_iterating_gives_the_old_step_seconds_pairs(profiled) -> None:
    _, prof = profiled
    pairs = list(prof)
    assert len(pairs) == len(prof) == 2
    assert all(isinstance(n, str) and t > 0 for n, t in pairs)


def test_csv_has_rocprof_columns_first_and_loads(profiled) -> None:
    _, prof = profiled
    text = prof.to_csv()
    header = text.splitlines()[0].split(",")
    assert header == ROCPROF_COLUMNS + EXTRA_COLUMNS
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if pd is not None:
        df = pd.read_csv(io.StringIO(text))
        rows = df.to_dict("records")
    else:
        rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(prof.kernels)
    r = rows[0]
    assert int(r["Calls"]) == 2 * REPEAT
    assert int(r["TotalDurationNs"]) == prof.kernels[0].total_ns
    assert float(r["Percentage"]) == pytest.approx(100.0)
    assert int(r["FLOPs"]) == 2 * N * D * D + N * D
    assert r["Nodes"] == "mm1;relu1;mm2;relu2"


def test_chrome_trace_follows_the_format(profiled, tmp_path) -> None:
    _, prof = profiled
    path = tmp_path / "t.json"
    prof.to_chrome_trace(path)
    events = check_trace(json.loads(path.read_text()))
    spans = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    assert len(spans) == 2 * REPEAT
    assert {e["args"]["onnx_nodes"][0] for e in spans} == {"mm1", "mm2"}
    assert {(e["pid"], e["tid"]) for e in spans} == {(1, 1)}  # one device, one thread
    runs = [e for e in events if e["ph"] == "X" and e["cat"] == "run"]
    assert [e["name"] for e in runs] == [f"run {k}" for k in range(REPEAT)] and {e["tid"] for e in runs} == {0}
    for r in runs:  # each run spans its kernels
        mine = [e for e in spans if e["args"]["run"] == r["args"]["run"]]
        assert min(e["ts"] for e in mine) == r["ts"]
        assert max(e["ts"] + e["dur"] for e in mine) == pytest.approx(r["ts"] + r["dur"])
    meta = [e for e in events if e["ph"] == "M"]
    assert "cpu" in next(e for e in meta if e["name"] == "process_name")["args"]["name"]
    tracks = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert tracks[0] == "runs" and tracks[1].startswith("thread")
    # one thread runs the steps one after another: spans do not overlap
    spans.sort(key=lambda e: e["ts"])
    for a, b in zip(spans, spans[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3


def test_table_and_peaks(profiled) -> None:
    _, prof = profiled
    text = prof.table()
    assert "clock: host perf_counter" in text and "GFLOP/s" in text and prof.kernels[0].name in text
    peaks = prof.peaks
    assert peaks is not None and peaks.flops_per_s and peaks.bytes_per_s
    assert peaks.flops_source.startswith("measured") and peaks.bytes_source.startswith("measured")
    assert device_peaks(ember.cpu(0)) == peaks  # cached: measured once per device
    pf, pb, pr = prof.percent_of_roofline(prof.kernels[0])
    assert pf is not None and pb is not None and pr is not None and pr >= min(pf, pb) - 1e-9


def test_roofline_png(profiled, tmp_path) -> None:
    pytest.importorskip("matplotlib", reason="the roofline plot needs matplotlib (pip install 'ember[profile]')")
    _, prof = profiled
    path = tmp_path / "roof.png"
    prof.plot_roofline(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_roofline_without_matplotlib_says_so(profiled, tmp_path, monkeypatch) -> None:
    _, prof = profiled
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    with pytest.raises(EmberError, match=r"needs matplotlib: pip install 'ember\[profile\]'"):
        prof.plot_roofline(tmp_path / "r.png")


def test_no_recorded_times_is_an_error_not_zeros(profiled) -> None:
    m, prof = profiled
    empty = ProfileResult([], m.plan, [""] * len(m.plan["steps"]), 0, "cpu(0)", "llvm", "", "", None)
    assert not empty.timed and "nothing was timed" in empty.table()
    for write in (empty.to_csv, empty.to_chrome_trace):
        with pytest.raises(EmberError, match="no times were recorded"):
            write()


def test_bad_repeat() -> None:
    m = ember.compile(mlp(), use_cache=False)
    x = np.zeros((5, 37), np.float32)
    with pytest.raises(ArgumentError, match="repeat must be >= 1"):
        m.profile(x, repeat=0)
    prof = m.profile(x, repeat=1, warmup=0, peaks=False)
    assert prof.peaks is None and prof.runs == 1
    assert {n.op for n in prof.nodes} == {"Gemm", "Tanh", "MatMul", "Softmax"}
    assert all(s.cost is not None and s.cost.flops > 0 for s in prof.steps)
