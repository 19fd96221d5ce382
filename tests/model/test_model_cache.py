"""The whole-model compile cache: a model compiled before (same bytes, external data, target,
input shapes, options, ember sources) loads without compiling; anything that differs compiles
again; a corrupt entry is rebuilt; use_cache=False and EMBER_CACHE_DIR=off bypass it."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import driver
from ember.model import cache as model_cache

onnx = pytest.importorskip("onnx", reason="the model cache tests build ONNX models")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def _model(w: np.ndarray) -> onnx.ModelProto:
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Relu", ["y"], ["z"])]
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, ["n", 24])],
                     [h.make_tensor_value_info("z", T.FLOAT, None)], [nh.from_array(w, "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(model_cache, "MODEL_CACHE_MIN_SECONDS", 0.0)
    compiles = []
    real = driver.compile_model
    monkeypatch.setattr(driver, "compile_model", lambda *a, **k: compiles.append(1) or real(*a, **k))
    return compiles


def test_second_compile_loads_from_cache(cache_on, rng, tmp_path) -> None:
    w = rng.standard_normal((24, 20)).astype(np.float32)
    path = tmp_path / "m.onnx"
    onnx.save(_model(w), path)
    x = rng.standard_normal((5, 24)).astype(np.float32)
    want = np.maximum(x.astype(np.float64) @ w, 0)
    a = ember.compile(path, input_shapes={"x": (5, 24)})
    b = ember.compile(path, input_shapes={"x": (5, 24)})
    assert len(cache_on) == 1
    np.testing.assert_allclose(b(x)[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(a(x)[0], b(x)[0])
    ember.compile(path, input_shapes={"x": (6, 24)})  # other shapes: compiled
    ember.compile(path, input_shapes={"x": (5, 24)}, fuse=False)  # other options: compiled
    ember.compile(path, input_shapes={"x": (5, 24)}, use_cache=False)
    assert len(cache_on) == 4
    onnx.save(_model(w + 1), path)  # other weights: compiled, and the new weights are used
    c = ember.compile(path, input_shapes={"x": (5, 24)})
    assert len(cache_on) == 5
    np.testing.assert_allclose(c(x)[0], np.maximum(x.astype(np.float64) @ (w + 1), 0), rtol=1e-5, atol=1e-5)


def test_external_data_is_part_of_the_key(cache_on, rng, tmp_path) -> None:
    w = rng.standard_normal((24, 20)).astype(np.float32)
    path = tmp_path / "ext.onnx"
    onnx.save(_model(w), path, save_as_external_data=True, all_tensors_to_one_file=True, location="ext.onnx.data",
              size_threshold=0)
    ember.compile(path, input_shapes={"x": (3, 24)})
    ember.compile(path, input_shapes={"x": (3, 24)})
    assert len(cache_on) == 1
    onnx.save(_model(2 * w), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.onnx.data", size_threshold=0)
    m = ember.compile(path, input_shapes={"x": (3, 24)})
    assert len(cache_on) == 2
    x = rng.standard_normal((3, 24)).astype(np.float32)
    np.testing.assert_allclose(m(x)[0], np.maximum(x.astype(np.float64) @ (2 * w), 0), rtol=1e-5, atol=1e-5)


def test_corrupt_entry_is_rebuilt(cache_on, rng, tmp_path) -> None:
    w = rng.standard_normal((24, 20)).astype(np.float32)
    path = tmp_path / "m.onnx"
    onnx.save(_model(w), path)
    ember.compile(path, input_shapes={"x": (2, 24)})
    for f in (tmp_path / "cache").rglob("model.ember"):
        f.write_bytes(b"garbage")
    m = ember.compile(path, input_shapes={"x": (2, 24)})
    assert len(cache_on) == 2
    x = rng.standard_normal((2, 24)).astype(np.float32)
    np.testing.assert_allclose(m(x)[0], np.maximum(x.astype(np.float64) @ w, 0), rtol=1e-5, atol=1e-6)


def test_many_saved_models_load_in_one_process(rng, tmp_path) -> None:
    # Each load keeps its kernel library's file until the process exits: dlopen recognises a
    # library by its inode, so a removed file's inode reused by a later library could bring back
    # an earlier model's kernels. This sequence guards the results, not that hazard itself.
    models = []
    for k in range(4):
        w = rng.standard_normal((24, 20 + k)).astype(np.float32)
        path = tmp_path / f"m{k}.ember"
        ember.compile(_model(w), input_shapes={"x": (3, 24)}, use_cache=False).save(path)
        models.append((w, path))
    for _ in range(2):
        for w, path in models:
            m = ember.load(path)
            x = rng.standard_normal((3, 24)).astype(np.float32)
            np.testing.assert_allclose(m(x)[0], np.maximum(x.astype(np.float64) @ w, 0), rtol=1e-5, atol=1e-6)


def test_a_loaded_model_saves_again(rng, tmp_path) -> None:
    # a model that came from a file (or from the compile cache) keeps no object code: saving it
    # copies its kernel library
    w = rng.standard_normal((24, 20)).astype(np.float32)
    first = tmp_path / "a.ember"
    ember.compile(_model(w), input_shapes={"x": (3, 24)}, use_cache=False).save(first)
    second = tmp_path / "b.ember"
    ember.load(first).save(second)
    x = rng.standard_normal((3, 24)).astype(np.float32)
    np.testing.assert_allclose(ember.load(second)(x)[0], np.maximum(x.astype(np.float64) @ w, 0), rtol=1e-5, atol=1e-6)


def test_a_model_from_the_cache_saves_with_its_source(cache_on, rng, tmp_path) -> None:
    """Cache entries hold no ONNX source (it is in the key); a model loaded from one gets its
    source back from the compile call, so saving it and loading with ``rebuild=True`` works."""
    w = rng.standard_normal((24, 20)).astype(np.float32)
    path = tmp_path / "m.onnx"
    onnx.save(_model(w), path)
    ember.compile(path, input_shapes={"x": (5, 24)})
    hit = ember.compile(path, input_shapes={"x": (5, 24)})
    assert len(cache_on) == 1 and hit.source is not None
    saved = tmp_path / "m.ember"
    hit.save(saved)
    rebuilt = ember.load(saved, rebuild=True)
    x = rng.standard_normal((5, 24)).astype(np.float32)
    np.testing.assert_array_equal(rebuilt(x)[0], hit(x)[0])
