"""ONNX models compiled by ember for the GPU (``target="cuda"``) against ONNX Runtime on the CPU.

Small graphs built with onnx.helper cover each kind of kernel the GPU schedules produce (packed
convolutions and matrix products on the tiled GEMM, depthwise and grouped convolutions, reductions
to rows and to a scalar, softmax and normalizations, pooling, data movement) at sizes that no tile
divides; real networks (ResNet-50, MobileNetV2, the super-resolution network, a small BERT and,
when its exported file is present, EfficientNet-Lite0 with its real weights) must match ONNX
Runtime within 1e-4 relative (fp32). Outputs come back on the host by default and stay on the device
with ``run_on_device``; a saved GPU model loads and runs without the compiler.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the GPU model tests build models with onnx")
ort = pytest.importorskip("onnxruntime", reason="the GPU model tests compare with ONNX Runtime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> bytes:
    g = h.make_graph(nodes, "g", inputs, outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def _ort(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(model: bytes, feeds: dict[str, np.ndarray], tol: float = 1e-5) -> ember.Model:
    compiled = ember.compile(model, target="cuda")
    got = compiled(**feeds)
    want = _ort(model, feeds)
    assert len(got) == len(want)
    for g_, w_ in zip(got, want):
        assert g_.shape == w_.shape and g_.dtype == w_.dtype
        if w_.dtype.kind == "f":
            assert np.all(np.isfinite(g_))
            assert _rel_err(g_, w_) <= tol, _rel_err(g_, w_)
        else:
            np.testing.assert_array_equal(g_, w_)
    return compiled


def _f32(rng, *shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def test_conv_bn_relu_depthwise_pool_gemm_softmax(cuda_dev, rng) -> None:
    def init(name, a):
        return nh.from_array(np.asarray(a, dtype=np.float32), name)

    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        h.make_node("BatchNormalization", ["c1", "g", "bb", "m", "v"], ["bn"]),
        h.make_node("Relu", ["bn"], ["r1"]),
        h.make_node("Conv", ["r1", "wd"], ["dw"], pads=[1, 1, 1, 1], group=70),
        h.make_node("Clip", ["dw", "lo", "hi"], ["cl"]),
        h.make_node("MaxPool", ["cl"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        h.make_node("Conv", ["mp", "wg"], ["grp"], group=5),
        h.make_node("GlobalAveragePool", ["grp"], ["gp"]),
        h.make_node("Flatten", ["gp"], ["f"]),
        h.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        h.make_node("Softmax", ["logits"], ["prob"]),
        h.make_node("ReduceMean", ["r1"], ["rm"], keepdims=0),
        h.make_node("AveragePool", ["r1"], ["ap"], kernel_shape=[2, 3], pads=[0, 1, 0, 1], count_include_pad=0),
    ]
    inits = [
        init("w1", rng.standard_normal((70, 3, 3, 3))),
        init("b1", rng.standard_normal(70)),
        init("g", rng.uniform(0.5, 1.5, 70)),
        init("bb", rng.standard_normal(70)),
        init("m", rng.standard_normal(70)),
        init("v", rng.uniform(0.5, 2, 70)),
        init("wd", rng.standard_normal((70, 1, 3, 3))),
        init("lo", 0.0),
        init("hi", 6.0),
        init("wg", rng.standard_normal((65, 14, 1, 1))),
        init("wf", rng.standard_normal((10, 65))),
        init("bf", rng.standard_normal(10)),
    ]
    model = _model(
        nodes,
        [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 37, 41])],
        [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("prob", "rm", "ap")],
        inits,
    )
    compiled = _check(model, {"x": _f32(rng, 2, 3, 37, 41)})
    # A second call with fresh data reuses the planned device buffers.
    x2 = _f32(rng, 2, 3, 37, 41)
    for g_, w_ in zip(compiled(x2), _ort(model, {"x": x2})):
        assert _rel_err(g_, w_) <= 1e-5


@pytest.mark.parametrize("m,k,n", [(600, 1000, 520),    # 128 x 128 blocks of 8 x 8, split-K
                                   (2100, 700, 2000)])  # 256 x 128 blocks of 16 x 8 (XL_TILE)
def test_large_float32_products_against_float64(cuda_dev, rng, m, k, n) -> None:
    """The large packed-GEMM tilings (4 x 8 warps, the rows staged transposed) at sizes no tile
    or chunk divides, against float64 NumPy.
    Bound: recursive float32 summation of K products, |error| <= K * 2^-24 * sum |x||w| (the
    worst case; these sums round about sqrt(K) times less). A wrong index or a lost chunk errs
    by the size of the product itself, ~sqrt(K) times the bound's scale."""
    w = rng.standard_normal((k, n)).astype(np.float32)
    model = _model([h.make_node("MatMul", ["x", "w"], ["out"])], [h.make_tensor_value_info("x", T.FLOAT, [m, k])],
                   [h.make_tensor_value_info("out", T.FLOAT, None)], [nh.from_array(w, "w")])
    x = _f32(rng, m, k)
    (got,) = ember.compile(model, target="cuda")(x=x)
    ref = x.astype(np.float64) @ w.astype(np.float64)
    bound = k * 2.0**-24 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64))
    assert got.shape == (m, n) and np.all(np.isfinite(got))
    assert np.all(np.abs(got - ref) <= bound), float(np.max(np.abs(got - ref) / bound))


@pytest.mark.parametrize("m,k,n", [(1, 200, 1000), (77, 130, 65), (128, 64, 256), (3, 5, 7)])
def test_matmul_sizes_that_no_tile_divides(cuda_dev, rng, m, k, n) -> None:
    w = nh.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")
    b = nh.from_array(rng.standard_normal(n).astype(np.float32), "b")
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Add", ["y", "b"], ["z"]),
             h.make_node("Tanh", ["z"], ["out"])]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [m, k])],
                   [h.make_tensor_value_info("out", T.FLOAT, None)], [w, b])
    _check(model, {"x": _f32(rng, m, k)})


def test_batched_matmul_layernorm_attention_block(cuda_dev, rng) -> None:
    d = 48
    wq = nh.from_array(rng.standard_normal((d, d)).astype(np.float32) * 0.2, "wq")
    scale = nh.from_array(rng.uniform(0.5, 1.5, d).astype(np.float32), "scale")
    bias = nh.from_array(rng.standard_normal(d).astype(np.float32), "bias")
    perm = [0, 2, 1]
    nodes = [
        h.make_node("MatMul", ["x", "wq"], ["q"]),
        h.make_node("Transpose", ["q"], ["qt"], perm=perm),
        h.make_node("MatMul", ["q", "qt"], ["s"]),
        h.make_node("Softmax", ["s"], ["p"], axis=-1),
        h.make_node("MatMul", ["p", "x"], ["ctx"]),
        h.make_node("LayerNormalization", ["ctx", "scale", "bias"], ["ln"], axis=-1, epsilon=1e-5),
        h.make_node("Erf", ["ln"], ["e"]),
        h.make_node("ReduceSum", ["e"], ["tot"], keepdims=1),
    ]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [3, 19, d])],
                   [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("ln", "tot")], [wq, scale, bias])
    _check(model, {"x": _f32(rng, 3, 19, d)}, tol=1e-4)


def test_data_movement_and_integer_ops(cuda_dev, rng) -> None:
    idx = nh.from_array(np.array([4, 0, 2, 2], dtype=np.int64), "idx")
    nodes = [
        h.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
        h.make_node("Resize", ["x", "", "scales"], ["r"], mode="linear"),
        h.make_node("Gather", ["t", "idx"], ["gth"], axis=1),
        h.make_node("Concat", ["x", "x"], ["cat"], axis=1),
        h.make_node("ArgMax", ["x"], ["am"], axis=3, keepdims=0),
        h.make_node("Pad", ["x", "pads"], ["pd"], mode="reflect"),
    ]
    scales = nh.from_array(np.array([1, 1, 2, 1.5], dtype=np.float32), "scales")
    pads = nh.from_array(np.array([0, 0, 1, 2, 0, 0, 2, 1], dtype=np.int64), "pads")
    model = _model(
        nodes,
        [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 5, 6])],
        [h.make_tensor_value_info(n, T.FLOAT if n != "am" else T.INT64, None)
         for n in ("t", "r", "gth", "cat", "am", "pd")],
        [idx, scales, pads],
        opset=18,
    )
    _check(model, {"x": _f32(rng, 2, 3, 5, 6)})


def test_device_inputs_outputs_and_save_load(cuda_dev, rng, tmp_path, monkeypatch) -> None:
    w = nh.from_array(rng.standard_normal((33, 17)).astype(np.float32), "w")
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Relu", ["y"], ["out"])]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [9, 33])],
                   [h.make_tensor_value_info("out", T.FLOAT, None)], [w])
    compiled = ember.compile(model, target="cuda")
    x = _f32(rng, 9, 33)
    want = _ort(model, {"x": x})[0]
    xd = ember.nd.array(x, cuda_dev)
    (out_dev,) = compiled.run_on_device(xd)
    assert out_dev.device == cuda_dev and out_dev.shape == (9, 17)
    assert _rel_err(out_dev.numpy(), want) <= 1e-5
    saved = tmp_path / "mm.ember"
    compiled.save(saved)

    def no_build(*a, **k):
        raise AssertionError("load must not compile")

    monkeypatch.setattr(ember, "build", no_build)
    again = ember.load(saved)
    assert again.target.startswith("cuda")
    assert _rel_err(again(x)[0], want) <= 1e-5
    # wrong shape and dtype are named
    with pytest.raises(ember.ArgumentError, match="shape"):
        again(np.zeros((9, 32), np.float32))
    with pytest.raises(ember.ArgumentError, match="dtype"):
        again(x.astype(np.float64))


def test_torch_cuda_tensor_in_place(torch_cuda, rng) -> None:
    w = nh.from_array(rng.standard_normal((20, 30)).astype(np.float32), "w")
    model = _model([h.make_node("MatMul", ["x", "w"], ["y"])], [h.make_tensor_value_info("x", T.FLOAT, [4, 20])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)], [w])
    compiled = ember.compile(model, target="cuda")
    x = _f32(rng, 4, 20)
    xt = torch_cuda.from_numpy(x).cuda()
    (yd,) = compiled.run_on_device(xt)
    yt = torch_cuda.from_dlpack(yd)
    assert yt.is_cuda
    assert _rel_err(yt.cpu().numpy(), _ort(model, {"x": x})[0]) <= 1e-5


NETWORKS = ["super_resolution", "mobilenet_v2", "resnet50"]


@pytest.fixture(scope="module")
def net_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gpu_models")


@pytest.mark.parametrize("name", NETWORKS)
def test_network_on_gpu_matches_onnxruntime(cuda_dev, rng, net_dir, name) -> None:
    pytest.importorskip("torch", reason="the networks are built with torch")
    from nets import NETS, export

    path = export(name, net_dir)
    compiled = ember.compile(path, target="cuda")
    for _ in range(2):
        x = rng.standard_normal(NETS[name][1]).astype(np.float32)
        ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
        out = compiled(x)[0]
        assert out.shape == ref.shape
        assert _rel_err(out, ref) <= 1e-4, _rel_err(out, ref)


def test_small_bert_on_gpu_matches_onnxruntime(cuda_dev, rng, net_dir) -> None:
    pytest.importorskip("transformers", reason="the BERT test builds its network from a transformers config")
    from nets import export_bert

    path = export_bert(net_dir)
    compiled = ember.compile(path, target="cuda")
    ids = rng.integers(0, 1000, (1, 32)).astype(np.int64)
    mask = np.ones((1, 32), np.int64)
    mask[0, 27:] = 0
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids, "attention_mask": mask})
    got = compiled(input_ids=ids, attention_mask=mask)
    for g_, w_ in zip(got, ref):
        assert _rel_err(g_, w_) <= 1e-4, _rel_err(g_, w_)


def test_efficientnet_lite0_real_weights_on_gpu(cuda_dev) -> None:
    from ember.model_demo import cat_image, model_dir

    path = model_dir() / "efficientnet-lite0.onnx"
    if not path.exists():
        pytest.skip(f"{path} is not there: export it with `ember demo` on a machine with the demo's packages")
    pytest.importorskip("skimage", reason="the cat photo comes from scikit-image")
    x = cat_image()
    compiled = ember.compile(path, target="cuda")
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    out = compiled(x)[0]
    assert _rel_err(out, ref) <= 1e-4
    assert int(np.argmax(out)) == 282  # "tiger cat"


def test_one_gpu_model_serves_many_threads(cuda_dev, rng) -> None:
    """8 threads x 200 calls on one model compiled for the GPU on the main thread, each with its
    own inputs: every answer right (the CUDA context used to be current on the compiling thread
    only, and kernel argument buffers were shared without a lock)."""
    import threading

    w = rng.standard_normal((64, 48)).astype(np.float32)
    model = _model([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Relu", ["m"], ["y"])],
                   [h.make_tensor_value_info("x", T.FLOAT, [33, 64])], [h.make_tensor_value_info("y", T.FLOAT, None)],
                   [nh.from_array(w, "w")])
    compiled = ember.compile(model, target="cuda")
    inputs = [rng.standard_normal((33, 64)).astype(np.float32) for _ in range(6)]
    wants = [np.maximum(x.astype(np.float64) @ w, 0) for x in inputs]
    wrong: list[float] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(tid: int) -> None:
        try:
            start.wait()
            for k in range(200):
                j = (tid + k) % len(inputs)
                err = _rel_err(compiled(inputs[j])[0], wants[j])
                if err > 1e-5:  # fp32 products of 64 terms against float64
                    wrong.append(err)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert not wrong, f"{len(wrong)} of 1600 answers wrong, worst {max(wrong)}"


@pytest.mark.parametrize("rows, width", [(129, 1000), (7, 77), (3, 4099)])
def test_row_reductions_split_over_threads_match_onnxruntime(cuda_dev, rng, rows, width) -> None:
    """LayerNormalization, Softmax and ReduceSum over rows that no block of threads divides run
    as cross-thread reductions (rfactor + warp shuffles) and match ONNX Runtime."""
    nodes = [h.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5),
             h.make_node("Softmax", ["x"], ["z"], axis=-1),
             h.make_node("ReduceSum", ["x", "ax"], ["w"], keepdims=0)]
    inits = [nh.from_array(_f32(rng, width), "s"), nh.from_array(_f32(rng, width), "b"),
             nh.from_array(np.array([1], np.int64), "ax")]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [rows, width])],
                   [h.make_tensor_value_info("y", T.FLOAT, [rows, width]),
                    h.make_tensor_value_info("z", T.FLOAT, [rows, width]),
                    h.make_tensor_value_info("w", T.FLOAT, [rows])], inits)
    _check(model, {"x": _f32(rng, rows, width, lo=-4, hi=4)}, tol=1e-5)


@pytest.mark.parametrize("shape", [(2, 5, 300), (1, 3, 1000)])
def test_row_reductions_in_one_kernel_with_their_reader(cuda_dev, rng, shape) -> None:
    """A LayerNorm's mean and variance, and a masked Softmax's maximum and sum, are computed in
    shared memory inside the blocks of the kernel that writes the rows (one kernel each); a
    LayerNorm whose mean and inverse deviation are outputs too keeps them as kernels of their own.
    Both match ONNX Runtime on rows no block of threads divides."""
    width = shape[-1]
    nodes = [h.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5),
             h.make_node("Mul", ["x", "scale"], ["xs"]), h.make_node("Add", ["xs", "mask"], ["xm"]),
             h.make_node("Softmax", ["xm"], ["z"], axis=-1),
             h.make_node("LayerNormalization", ["z", "s", "b"], ["y2", "mean", "istd"], axis=-1, epsilon=1e-5)]
    mask = np.where(rng.random((1, 1, width)) < 0.2, -10000.0, 0.0).astype(np.float32)
    inits = [nh.from_array(_f32(rng, width), "s"), nh.from_array(_f32(rng, width), "b"),
             nh.from_array(np.array(0.125, np.float32), "scale"), nh.from_array(mask, "mask")]
    stats = list(shape[:-1]) + [1]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, list(shape))],
                   [h.make_tensor_value_info("y", T.FLOAT, list(shape)),
                    h.make_tensor_value_info("z", T.FLOAT, list(shape)),
                    h.make_tensor_value_info("y2", T.FLOAT, list(shape)),
                    h.make_tensor_value_info("mean", T.FLOAT, stats),
                    h.make_tensor_value_info("istd", T.FLOAT, stats)], inits)
    _check(model, {"x": _f32(rng, *shape, lo=-4, hi=4)}, tol=1e-5)


@pytest.mark.parametrize("batch, m, k, n", [((2, 3), 37, 45, 29), ((1, 12), 128, 64, 128), ((4,), 19, 600, 40)])
def test_batched_products_of_computed_operands(cuda_dev, rng, batch, m, k, n) -> None:
    """float32 batches of products of two computed operands (attention's shapes and sizes no
    tile divides; the last case long enough along K to be split) run on the packed GEMM with the
    right operands packed per call, and match ONNX Runtime."""
    a_shape, b_shape = list(batch) + [m, k], list(batch) + [k, n]
    nodes = [h.make_node("Relu", ["a"], ["ra"]), h.make_node("MatMul", ["ra", "b"], ["y"])]
    ins = [h.make_tensor_value_info("a", T.FLOAT, a_shape), h.make_tensor_value_info("b", T.FLOAT, b_shape)]
    model = _model(nodes, ins, [h.make_tensor_value_info("y", T.FLOAT, list(batch) + [m, n])], [])
    _check(model, {"a": _f32(rng, *a_shape), "b": _f32(rng, *b_shape)}, tol=1e-5)
