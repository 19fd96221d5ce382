"""The PP-OCR models that rapidocr-onnxruntime ships (text detector, recognizer, direction
classifier) compiled as they are — batch, height and width symbolic, no ``input_shapes`` — and
run at several sizes against ONNX Runtime. Tolerance: 1e-4 of the largest output magnitude (float32,
as the other real-network tests) plus 3e-7 absolute, because the detector ends in a Sigmoid whose
outputs on random input are all below 1e-3, and ONNX Runtime's logistic (MLAS) is an approximation
whose absolute error near 0 is about 1.2e-7 (measured here: ember 9.05e-8, ORT 2.09e-7 for one
pixel), which alone is 1e-2 of such a small maximum."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ember

ort = pytest.importorskip("onnxruntime", reason="the PP-OCR tests compare with ONNX Runtime")
rapidocr = pytest.importorskip("rapidocr_onnxruntime", reason="the PP-OCR models ship in rapidocr-onnxruntime "
                               "(pip install -e '.[test]')")


def _path(name: str) -> str:
    return os.path.join(os.path.dirname(rapidocr.__file__), "models", name)


def _excess(a: np.ndarray, b: np.ndarray) -> float:
    """How far ``a`` is from ``b`` beyond the tolerance (<= 0: within it)."""
    return float((np.abs(a.astype(np.float64) - b) - (1e-4 * np.abs(b).max() + 3e-7)).max())


@pytest.mark.parametrize("name,shapes", [
    ("ch_ppocr_mobile_v2.0_cls_infer.onnx", [(1, 3, 48, 192), (3, 3, 48, 100)]),
    pytest.param("ch_PP-OCRv4_rec_infer.onnx", [(1, 3, 48, 160), (2, 3, 48, 72)], marks=pytest.mark.long),
    pytest.param("ch_PP-OCRv4_det_infer.onnx", [(1, 3, 64, 96), (2, 3, 96, 64)], marks=pytest.mark.long),
])
def test_ppocr_models_run_without_input_shapes(name: str, shapes, rng) -> None:
    path = _path(name)
    model = ember.compile(path)
    assert not model.is_static
    spec = model.inputs[0]
    assert isinstance(spec.shape[0], str) and isinstance(spec.shape[3], str)  # batch and width symbolic
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for shape in shapes:
        x = rng.uniform(-1, 1, shape).astype(np.float32)  # a normalised image's range
        got = model(x)
        want = sess.run(None, {spec.name: x})
        for g, w in zip(got, want):
            assert g.shape == w.shape
            assert _excess(g, w) <= 0
    assert model.variants == [{spec.name: s} for s in shapes]
