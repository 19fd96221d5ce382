"""The executor's stream and CUDA-graph logic, run on the CPU against a simulated CUDA driver.

A model compiled for the CPU runs with :class:`~ember.model.memory.DeviceMemory` on a fake
``cuda`` device whose driver keeps "device" memory in host buffers and queues work per stream
the way CUDA does where it matters here: launches and asynchronous copies on a capturing stream
are recorded, not run, and run again on every graph launch; a synchronising call during a
capture fails and invalidates it (thread-local mode). So a graph that baked in an address that
changes between calls, an output that aliases the context's buffers or a capture that drops the
first call's work gives wrong answers here. The real driver is tested in
``tests/gpu/test_cuda_graphs.py``.
"""

from __future__ import annotations

import ctypes
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import ember
from ember.errors import DeviceError
from ember.runtime.ndarray import Device

onnx = pytest.importorskip("onnx", reason="the models are built with onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


class FakeCuda:
    """The parts of ``ember.runtime.cuda_driver`` that the executor and GPU arrays use."""

    def __init__(self, graphs: bool = True):
        self._bufs: dict[int, Any] = {}
        self._tls = threading.local()
        self._lock = threading.Lock()
        self.graphs = graphs
        self.captures = 0
        self.replays = 0
        self.launches = 0
        outer = self

        class Stream:
            def __init__(self, index: int = 0, non_blocking: bool = False):
                self.index = index
                self.handle = self
                self.recording: list[Any] | None = None
                self.invalid = False

            def synchronize(self) -> None:
                if self.recording is not None:
                    self.invalid = True
                    raise DeviceError("cuStreamSynchronize failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")

            def wait(self, event: Any) -> None:
                pass

        class Event:
            def __init__(self, index: int = 0, timing: bool = True):
                pass

            def record(self, stream: Any = None) -> None:
                pass

        class Graph:
            def __init__(self, work: list[Any]):
                self.work = work
                self.nodes = len(work)

            def launch(self, stream: Any) -> None:
                outer.replays += 1
                outer._queue(stream, lambda: [w() for w in self.work])

        self.Stream, self.Event, self.Graph = Stream, Event, Graph
        if graphs:
            self.begin_capture = self._begin_capture
            self.end_capture = self._end_capture

    # -- streams ----------------------------------------------------------------------------------
    def set_stream(self, stream: Any) -> Any:
        prev = getattr(self._tls, "stream", None)
        self._tls.stream = stream
        return prev

    def current_stream(self) -> Any:
        return getattr(self._tls, "stream", None)

    def _queue(self, stream: Any, work: Any) -> None:
        if stream is not None and stream.recording is not None:
            stream.recording.append(work)
        else:
            work()

    def _begin_capture(self, stream: Any, mode: str = "thread_local") -> None:
        assert mode == "thread_local"
        stream.recording, stream.invalid = [], False

    def _end_capture(self, stream: Any) -> Any:
        work, invalid = stream.recording, stream.invalid
        stream.recording = None
        if invalid:
            raise DeviceError("cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED")
        self.captures += 1
        return self.Graph(work)

    def launch(self, fn: Any, ptrs: list[int]) -> int:
        """A kernel launch on the thread's stream."""
        self.launches += 1
        ptrs = list(ptrs)
        self._queue(self.current_stream(), lambda: fn._invoke(ptrs, []))
        return 0

    # -- memory -----------------------------------------------------------------------------------
    def mem_alloc(self, nbytes: int, index: int) -> int:
        buf = ctypes.create_string_buffer(nbytes + 64)
        ptr = (ctypes.addressof(buf) + 63) // 64 * 64
        with self._lock:
            self._bufs[ptr] = buf
        return ptr

    def mem_free(self, ptr: int, index: int) -> None:
        s = self.current_stream()
        if s is not None and s.recording is not None:
            s.invalid = True
            raise DeviceError("cuMemFree failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
        with self._lock:
            self._bufs.pop(ptr, None)

    def _sync_op(self, dst: int, src: int, nbytes: int) -> None:
        s = self.current_stream()
        if s is not None and s.recording is not None:  # a legacy-stream copy during a capture
            s.invalid = True
            raise DeviceError("cuMemcpy failed: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT")
        ctypes.memmove(dst, src, nbytes)

    def memcpy_htod(self, dst: int, src: int, nbytes: int, index: int) -> None:
        self._sync_op(dst, src, nbytes)

    def memcpy_dtoh(self, dst: int, src: int, nbytes: int, index: int) -> None:
        self._sync_op(dst, src, nbytes)

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, index: int) -> None:
        self._sync_op(dst, src, nbytes)

    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: Any, index: int) -> None:
        data = ctypes.string_at(src, nbytes)  # pageable memory: read before the call returns
        self._queue(stream, lambda: ctypes.memmove(dst, data, nbytes))

    def memcpy_dtoh_async(self, dst: int, src: int, nbytes: int, stream: Any, index: int) -> None:
        self._queue(stream, lambda: ctypes.memmove(dst, src, nbytes))

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: Any, index: int) -> None:
        self._queue(stream, lambda: ctypes.memmove(dst, src, nbytes))

    def array(self, src: Any, dt: Any, dev: Any) -> Any:
        from ember.runtime import gpu_array

        return gpu_array.array(src, dt, dev)

    def synchronize(self, index: int = 0) -> None:
        s = self.current_stream()
        if s is not None and s.recording is not None:
            s.invalid = True
            raise DeviceError("cuCtxSynchronize failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")


class _Launched:
    """A CPU kernel launched through the fake driver (recorded during a capture)."""

    def __init__(self, fn: Any, drv: FakeCuda):
        self.fn, self.drv = fn, drv

    def _invoke(self, ptrs: list[int], scalars: list[int]) -> int:
        return self.drv.launch(self.fn, ptrs)


def _fake_gpu_model(monkeypatch, drv: FakeCuda, model_bytes: bytes, **kw: Any) -> ember.Model:
    m = ember.compile(model_bytes, target="llvm", use_cache=False, **kw)
    prog = m.program
    prog.target = "cuda"
    prog.plan = dict(prog.plan, target="cuda")
    prog.functions = {k: _Launched(f, drv) for k, f in prog.functions.items()}
    real_driver = Device.driver

    def driver(self: Device) -> Any:
        return drv if self.kind == "cuda" else real_driver(self)

    monkeypatch.setattr(Device, "driver", driver)
    return m


def _mlp() -> tuple[bytes, Any]:
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((16, 24)).astype(np.float32)
    w2 = rng.standard_normal((24, 8)).astype(np.float32)
    nodes = [h.make_node("MatMul", ["x", "w1"], ["a"]), h.make_node("Relu", ["a"], ["r"]),
             h.make_node("MatMul", ["r", "w2"], ["y"]), h.make_node("Reshape", ["y", "shp"], ["flat"])]
    g = h.make_graph(nodes, "mlp", [h.make_tensor_value_info("x", T.FLOAT, [5, 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("flat", T.FLOAT, None)],
                     [nh.from_array(w1, "w1"), nh.from_array(w2, "w2"),
                      nh.from_array(np.array([-1], np.int64), "shp")])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8

    def want(x: np.ndarray) -> list[np.ndarray]:
        y = np.maximum(x.astype(np.float64) @ w1, 0) @ w2
        return [y, y.reshape(-1)]

    return model.SerializeToString(), want


def _setup(monkeypatch, drv: FakeCuda | None = None, **kw: Any) -> tuple[FakeCuda, ember.Model, Any]:
    drv = drv or FakeCuda()
    data, want = _mlp()
    return drv, _fake_gpu_model(monkeypatch, drv, data, **kw), want


def _inputs(seed: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((5, 16)).astype(np.float32) for _ in range(n)]


def _close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-4)


def test_graph_replays_each_calls_own_inputs(monkeypatch) -> None:
    drv, m, want = _setup(monkeypatch)
    xs = _inputs(0, 5)
    outs = [m(x) for x in xs]
    for x, o in zip(xs, outs):  # each call's own answer; earlier outputs not overwritten
        _close(o, want(x))
    assert drv.captures == 1 and drv.replays == 4  # the first call ran plainly, then captured
    launches = drv.launches
    # device inputs and outputs: copied into / out of the context's fixed buffers
    xd = ember.nd.array(xs[0], ember.cuda(0))
    o1 = m.run_on_device(xd)
    o2 = m.run_on_device(ember.nd.array(xs[1], ember.cuda(0)))
    assert o1[0].data_ptr != o2[0].data_ptr
    _close([o.numpy() for o in o1], want(xs[0]))
    _close([o.numpy() for o in o2], want(xs[1]))
    assert drv.launches == launches and drv.replays == 6  # no kernel launched one by one


def test_graph_off_and_profile_launch_plainly(monkeypatch) -> None:
    drv, m, want = _setup(monkeypatch, cuda_graphs=False)
    assert m.cuda_graphs is False
    x = np.ones((5, 16), np.float32)
    _close(m(x), want(x))
    prof = m.profile(x, repeat=2)
    assert len(prof) == m.num_kernels
    assert drv.captures == 0 and drv.replays == 0
    m.cuda_graphs = True
    _close(m(x), want(x))
    _close(m(2 * x), want(2 * x))
    assert drv.captures == 1 and drv.replays == 1
    m.profile(x)
    assert drv.captures == 1 and drv.replays == 1


def test_capture_failure_falls_back_with_one_warning(monkeypatch) -> None:
    drv, m, want = _setup(monkeypatch)

    def refuse(stream: Any, mode: str = "thread_local") -> None:
        raise DeviceError("cuStreamBeginCapture failed: CUDA_ERROR_NOT_SUPPORTED")

    drv.begin_capture = refuse
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in _inputs(1, 3):
            _close(m(x), want(x))
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "CUDA graph" in msgs[0] and "NOT_SUPPORTED" in msgs[0]
    assert drv.replays == 0


def test_synchronising_kernel_invalidates_capture(monkeypatch) -> None:
    """A launch that synchronises (as a host function with workspaces does) makes the capture
    fail: the call still gets its answer, from plain launches."""
    drv, m, want = _setup(monkeypatch)
    name = next(iter(m.program.functions))
    inner = m.program.functions[name]

    class Syncing:
        def _invoke(self, ptrs: list[int], scalars: list[int]) -> int:
            rc = inner._invoke(ptrs, scalars)
            drv.current_stream().synchronize()
            return rc

    m.program.functions[name] = Syncing()
    x = np.full((5, 16), 0.5, np.float32)
    with pytest.warns(RuntimeWarning, match="CAPTURE_UNSUPPORTED"):
        _close(m(x), want(x))
    assert drv.captures == 0 and m._graph_state.failed
    _close(m(2 * x), want(2 * x))


def test_driver_without_graphs_runs_on_the_stream(monkeypatch) -> None:
    drv, m, want = _setup(monkeypatch, FakeCuda(graphs=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = np.ones((5, 16), np.float32)
        _close(m(x), want(x))
    assert drv.replays == 0


def test_threads_each_capture_their_own_graph(monkeypatch) -> None:
    drv, m, want = _setup(monkeypatch)
    xs = _inputs(2, 8)
    wants = [want(x) for x in xs]
    start = threading.Barrier(4)  # one task per pool thread

    def work(t: int) -> None:
        start.wait()
        for k in range(20):
            j = (t + k) % len(xs)
            _close(m(xs[j]), wants[j])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(work, range(4)))  # a thread's exception is raised here
    assert drv.captures == 4 and drv.replays == 4 * 19
