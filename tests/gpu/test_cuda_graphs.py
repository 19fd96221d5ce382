"""A GPU model's launches replayed as one CUDA graph (``ember.compile(..., cuda_graphs=True)``).

Each execution context (one per calling thread) has its own CUDA stream; its first call captures
every launch into a graph, later calls copy the inputs into fixed buffers, replay the graph and
copy the outputs out. Checked here on an NVIDIA GPU against the same model with plain launches
and against ONNX Runtime: a small CNN and a transformer block, fresh inputs on every call (host,
ember device arrays, torch tensors computed just before the call), outputs that stay the
caller's, 8 threads x 50 calls on one model, the parameter, ``profile``, and the fallback to
plain launches when capturing fails (refused by the driver, or invalidated by a synchronising
call). The executor's logic is also tested without a GPU in ``tests/model/test_graph_executor.py``.
"""

from __future__ import annotations

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import ember
from ember.errors import DeviceError

onnx = pytest.importorskip("onnx", reason="the CUDA graph tests build models with onnx")
ort = pytest.importorskip("onnxruntime", reason="the CUDA graph tests compare with ONNX Runtime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from test_gpu_models import _model, _ort, _rel_err  # noqa: E402


def _init(name: str, a) -> onnx.TensorProto:
    return nh.from_array(np.asarray(a, dtype=np.float32), name)


@pytest.fixture(scope="module")
def cnn() -> tuple[bytes, tuple[int, ...]]:
    rng = np.random.default_rng(7)
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        h.make_node("BatchNormalization", ["c1", "g", "bb", "m", "v"], ["bn"]),
        h.make_node("Relu", ["bn"], ["r1"]),
        h.make_node("Conv", ["r1", "wd"], ["dw"], pads=[1, 1, 1, 1], group=24),
        h.make_node("Add", ["dw", "r1"], ["res"]),
        h.make_node("MaxPool", ["res"], ["mp"], kernel_shape=[3, 3], strides=[2, 2]),
        h.make_node("GlobalAveragePool", ["mp"], ["gp"]),
        h.make_node("Flatten", ["gp"], ["f"]),
        h.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        h.make_node("Softmax", ["logits"], ["prob"]),
    ]
    inits = [
        _init("w1", rng.standard_normal((24, 3, 3, 3)) * 0.3), _init("b1", rng.standard_normal(24)),
        _init("g", rng.uniform(0.5, 1.5, 24)), _init("bb", rng.standard_normal(24)),
        _init("m", rng.standard_normal(24)), _init("v", rng.uniform(0.5, 2, 24)),
        _init("wd", rng.standard_normal((24, 1, 3, 3)) * 0.3),
        _init("wf", rng.standard_normal((10, 24))), _init("bf", rng.standard_normal(10)),
    ]
    shape = (1, 3, 33, 29)
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, list(shape))],
                   [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("prob", "r1")], inits)
    return model, shape


@pytest.fixture(scope="module")
def transformer() -> tuple[bytes, tuple[int, ...]]:
    """Self-attention (one head) with a residual, LayerNorm and an Erf-GELU MLP."""
    rng = np.random.default_rng(8)
    d, f = 32, 64
    nodes = [
        h.make_node("MatMul", ["x", "wq"], ["q"]),
        h.make_node("MatMul", ["x", "wk"], ["k"]),
        h.make_node("MatMul", ["x", "wv"], ["v"]),
        h.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        h.make_node("MatMul", ["q", "kt"], ["s"]),
        h.make_node("Mul", ["s", "scale"], ["ss"]),
        h.make_node("Softmax", ["ss"], ["p"], axis=-1),
        h.make_node("MatMul", ["p", "v"], ["att"]),
        h.make_node("Add", ["att", "x"], ["h1"]),
        h.make_node("LayerNormalization", ["h1", "ln_g", "ln_b"], ["n1"], axis=-1, epsilon=1e-5),
        h.make_node("MatMul", ["n1", "w1"], ["u"]),
        h.make_node("Mul", ["u", "rsqrt2"], ["u2"]),
        h.make_node("Erf", ["u2"], ["e"]),
        h.make_node("Add", ["e", "one"], ["e1"]),
        h.make_node("Mul", ["u", "e1"], ["g1"]),
        h.make_node("Mul", ["g1", "half"], ["gelu"]),
        h.make_node("MatMul", ["gelu", "w2"], ["o"]),
        h.make_node("Add", ["o", "n1"], ["out"]),
    ]
    inits = [
        _init("wq", rng.standard_normal((d, d)) * 0.2), _init("wk", rng.standard_normal((d, d)) * 0.2),
        _init("wv", rng.standard_normal((d, d)) * 0.2), _init("scale", 1 / np.sqrt(d)),
        _init("ln_g", rng.uniform(0.5, 1.5, d)), _init("ln_b", rng.standard_normal(d) * 0.1),
        _init("w1", rng.standard_normal((d, f)) * 0.2), _init("w2", rng.standard_normal((f, d)) * 0.2),
        _init("rsqrt2", 1 / np.sqrt(2)), _init("one", 1.0), _init("half", 0.5),
    ]
    shape = (2, 17, d)
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, list(shape))],
                   [h.make_tensor_value_info("out", T.FLOAT, None)], inits)
    return model, shape


def _x(rng, shape) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize("which", ["cnn", "transformer"])
def test_graph_matches_plain_launches_and_onnxruntime(cuda_dev, rng, request, which) -> None:
    model, shape = request.getfixturevalue(which)
    graphs = ember.compile(model, target="cuda")
    plain = ember.compile(model, target="cuda", cuda_graphs=False)
    assert graphs.cuda_graphs and not plain.cuda_graphs
    for _ in range(4):
        x = _x(rng, shape)
        want = _ort(model, {"x": x})
        got_g, got_p = graphs(x), plain(x)
        for g_, p_, w_ in zip(got_g, got_p, want):
            np.testing.assert_allclose(g_, p_, rtol=1e-6, atol=1e-7)  # the same kernels on the same data
            assert _rel_err(g_, w_) <= 1e-4, _rel_err(g_, w_)
    ctx = graphs.context()
    assert ctx.captures == 1 and ctx.replays == 3  # the first call runs plainly, then captures
    assert ctx.graph_nodes >= 1
    assert plain.context().replays == 0
    assert graphs._graph_state.failed is None


def test_each_call_gets_its_own_answer(cuda_dev, rng, cnn) -> None:
    """Fresh inputs every call (host arrays, then device arrays) give that call's answer, and
    outputs handed out earlier are not overwritten by later replays."""
    model, shape = cnn
    m = ember.compile(model, target="cuda")
    xs = [_x(rng, shape) for _ in range(6)]
    wants = [_ort(model, {"x": x}) for x in xs]
    host_outs = [m(x) for x in xs]
    dev_outs = [m.run_on_device(ember.nd.array(x, cuda_dev)) for x in xs]
    for outs in (host_outs, [[o.numpy() for o in d] for d in dev_outs]):
        for got, want in zip(outs, wants):
            for g_, w_ in zip(got, want):
                assert _rel_err(g_, w_) <= 1e-4
    ptrs = {o.data_ptr for d in dev_outs for o in d}
    assert len(ptrs) == 2 * len(xs)  # every output a fresh array
    assert m.context().replays == 2 * len(xs) - 1


def test_torch_inputs_computed_just_before_the_call(torch_cuda, rng, cnn) -> None:
    """An input that PyTorch is still computing on the default stream is waited for (the
    context's stream is non-blocking)."""
    torch = torch_cuda
    model, shape = cnn
    m = ember.compile(model, target="cuda")
    big = torch.randn(4096, 4096, device="cuda")
    for k in range(3):
        base = torch.from_numpy(_x(rng, shape)).cuda()
        slow = (big @ big).sum() * 0  # a long kernel queued ahead of the input's last write
        xt = base + slow
        (prob, _) = m.run_on_device(xt)
        want = _ort(model, {"x": xt.cpu().numpy()})[0]
        assert _rel_err(torch.from_dlpack(prob).cpu().numpy(), want) <= 1e-4, k


def test_threads_each_get_their_own_answer(cuda_dev, rng, transformer) -> None:
    """8 threads x 50 calls on one model: each thread captures its own graph on its own stream."""
    model, shape = transformer
    m = ember.compile(model, target="cuda")
    xs = [_x(rng, shape) for _ in range(8)]
    wants = [_ort(model, {"x": x})[0] for x in xs]

    start = threading.Barrier(8)  # one task per pool thread

    def work(tid: int) -> tuple[list[float], int]:
        start.wait()
        errs = [_rel_err(m(xs[(tid * 3 + k) % len(xs)])[0], wants[(tid * 3 + k) % len(xs)]) for k in range(50)]
        return [e for e in errs if e > 1e-4], m.context().replays

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))  # a thread's exception is raised here
    wrong = [e for w, _ in results for e in w]
    replays = [r for _, r in results]
    assert not wrong, f"{len(wrong)} of 400 answers wrong, worst {max(wrong)}"
    assert m._graph_state.failed is None, m._graph_state.failed
    assert replays == [49] * 8


def test_parameter_turns_graphs_off_and_on(cuda_dev, rng, cnn) -> None:
    model, shape = cnn
    m = ember.compile(model, target="cuda", cuda_graphs=False)
    x = _x(rng, shape)
    want = _ort(model, {"x": x})[0]
    assert _rel_err(m(x)[0], want) <= 1e-4
    assert m.context().captures == 0
    m.cuda_graphs = True
    for _ in range(2):
        assert _rel_err(m(x)[0], want) <= 1e-4
    assert m.context().captures == 1 and m.context().replays == 1
    # profile launches kernel by kernel, with the graph on
    prof = m.profile(x, repeat=2)
    assert len(prof) == len(m.program.functions) and all(t > 0 for _, t in prof)
    assert m.context().replays == 1


def test_kernels_with_workspaces_are_captured(cuda_dev, rng) -> None:
    """ArgMax keeps run-time workspaces: on a context's stream they are allocated once (during
    the first, plain call) and reused, so the capture holds their addresses."""
    model = _model([h.make_node("ArgMax", ["x"], ["am"], axis=3, keepdims=0),
                    h.make_node("ReduceMax", ["x"], ["mx"], axes=[1], keepdims=0)],
                   [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 5, 6])],
                   [h.make_tensor_value_info("am", T.INT64, None), h.make_tensor_value_info("mx", T.FLOAT, None)],
                   [])
    m = ember.compile(model, target="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(3):
            x = _x(rng, (2, 3, 5, 6))
            for g_, w_ in zip(m(x), _ort(model, {"x": x})):
                np.testing.assert_allclose(g_, w_)
    assert m.context().captures == 1 and m.context().replays == 2


def test_refused_capture_falls_back_once(cuda_dev, rng, cnn, monkeypatch) -> None:
    from ember.runtime import cuda_driver

    def refuse(stream, mode="thread_local"):
        raise DeviceError("cuStreamBeginCapture failed: CUDA_ERROR_NOT_SUPPORTED (simulated)")

    monkeypatch.setattr(cuda_driver, "begin_capture", refuse)
    model, shape = cnn
    m = ember.compile(model, target="cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x = _x(rng, shape)
            assert _rel_err(m(x)[0], _ort(model, {"x": x})[0]) <= 1e-4
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "CUDA graph" in msgs[0]
    assert m.context().replays == 0


def test_synchronising_call_invalidates_the_capture(cuda_dev, rng, transformer) -> None:
    """A launch followed by a stream synchronisation during the capture (what a kernel with
    run-time workspaces does) is refused by the driver in thread-local mode: the model falls
    back to plain launches and answers right."""
    from ember.runtime import cuda_driver

    model, shape = transformer
    m = ember.compile(model, target="cuda")
    name = next(iter(m.program.functions))
    inner = m.program.functions[name]

    class Syncing:
        def _invoke(self, ptrs, scalars):
            rc = inner._invoke(ptrs, scalars)
            cuda_driver.current_stream().synchronize()
            return rc

    m.program.functions[name] = Syncing()
    try:
        x = _x(rng, shape)
        with pytest.warns(RuntimeWarning, match="CUDA graph"):
            got = m(x)[0]
        assert _rel_err(got, _ort(model, {"x": x})[0]) <= 1e-4
        x2 = _x(rng, shape)
        assert _rel_err(m(x2)[0], _ort(model, {"x": x2})[0]) <= 1e-4
        assert m.context().captures == 0 and m._graph_state.failed
    finally:
        m.program.functions[name] = inner


def test_driver_graph_of_tiny_kernels(cuda_dev) -> None:
    """The driver calls themselves: N launches captured on a stream replay as one graph."""
    from ember import te
    from ember.runtime import cuda_driver as drv

    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    f = ember.build(s, [A, B], target="cuda", name="inc")
    a = ember.nd.array(np.zeros(256, np.float32), cuda_dev)
    b = ember.nd.array(np.zeros(256, np.float32), cuda_dev)
    stream = drv.Stream(0, non_blocking=True)
    prev = drv.set_stream(stream)
    try:
        drv.begin_capture(stream)
        assert stream.is_capturing()
        for k in range(10):
            f(a, b) if k % 2 == 0 else f(b, a)
        graph = drv.end_capture(stream)
    finally:
        drv.set_stream(prev)
    assert graph.nodes == 10
    assert not a.numpy().any()  # nothing ran during the capture
    for _ in range(3):
        graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(a.numpy(), np.full(256, 30, np.float32))
