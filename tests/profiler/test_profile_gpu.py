"""The profiler and I/O binding on an NVIDIA GPU: CUDA-event timings, the trace, device peaks,
``Model.run(outputs=...)`` with device and host arrays, ``ember profile --target cuda``."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ember
from ember.cli import main
from ember.errors import ArgumentError
from ember.profiler import device_peaks
from ember.profiler.recorder import CUDA_EVENTS

from .tiny_models import two_inputs, two_layers
from .trace_schema import check_trace

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu() -> ember.Device:
    dev = ember.cuda(0)
    if not dev.exist:
        pytest.skip("no CUDA device (or no NVIDIA driver) on this machine")
    return dev


def test_profile_uses_cuda_events(gpu, tmp_path) -> None:
    m = ember.compile(two_layers(37, 48), target="cuda", use_cache=False)
    x = np.random.default_rng(0).standard_normal((37, 48)).astype(np.float32)
    m(x)
    m(x)  # a CUDA graph is captured and replayed; profiling still launches kernel by kernel
    prof = m.profile(x, repeat=5)
    assert prof.clock == CUDA_EVENTS and prof.track.startswith("stream 0x")
    assert len(prof.steps) == 2 and all(s.calls == 5 and s.min_ns > 0 for s in prof.steps)
    assert all(t.dur_ns > 0 for t in prof.times)
    k = prof.kernels[0]
    assert k.cost is not None and k.cost.flops >= 2 * 37 * 48 * 48  # + the Relu; GPU guards counted exactly
    doc = prof.to_chrome_trace(tmp_path / "t.json")
    events = check_trace(json.loads((tmp_path / "t.json").read_text()))
    spans = sorted((e for e in events if e["ph"] == "X" and e["cat"] == "kernel"), key=lambda e: e["ts"])
    assert len(spans) == 10 and doc["otherData"]["clock"] == CUDA_EVENTS
    for a, b in zip(spans, spans[1:]):  # one stream: kernels one after another (up to ns rounding)
        assert a["ts"] + a["dur"] <= b["ts"] + 0.01
    assert prof.to_csv().startswith("Name,Calls,TotalDurationNs,AverageNs,Percentage,")


def test_device_peaks_are_measured(gpu) -> None:
    p = device_peaks(gpu)
    assert p.bytes_per_s and p.bytes_source.startswith("measured: 256 MiB device-to-device copy")
    assert p.flops_per_s is None or p.flops_per_s > 1e11  # measured with torch/CuPy, else a datasheet figure


@pytest.mark.parametrize("graphs", [True, False])
def test_run_outputs_on_the_device_and_on_the_host(gpu, graphs) -> None:
    m = ember.compile(two_inputs(33, 65), target="cuda", use_cache=False, cuda_graphs=graphs)
    rng = np.random.default_rng(1)
    for _ in range(3):  # first call, capture, replays
        a, b = (rng.standard_normal((33, 65)).astype(np.float32) for _ in range(2))
        s_dev = ember.nd.array(np.full((33, 65), np.nan, np.float32), gpu)
        p_host = np.full((33, 65), np.nan, np.float32)
        got = m.run(a, b, outputs=[s_dev, p_host])
        assert got[0] is s_dev and got[1] is p_host
        np.testing.assert_array_equal(s_dev.numpy(), a + b)
        np.testing.assert_array_equal(p_host, a * b)
    with pytest.raises(ArgumentError, match="expected shape"):
        m.run(a, b, outputs=[ember.nd.array(np.zeros((33, 64), np.float32), gpu), None])


def test_cli_profile_on_cuda(gpu, tmp_path, capsys) -> None:
    import onnx

    path = tmp_path / "m.onnx"
    onnx.save(two_layers(8, 32), path)
    rc = main(["profile", str(path), "--target", "cuda", "--repeat", "3", "--csv", str(tmp_path / "s.csv"), "-q"])
    out = capsys.readouterr().out
    assert rc == 0 and "clock: CUDA events" in out and (tmp_path / "s.csv").exists()


def test_info_lists_the_gpu(gpu, capsys) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("cuda device"))
    assert "cuda(0): " in line and "compute capability" in line and "GiB" in line
