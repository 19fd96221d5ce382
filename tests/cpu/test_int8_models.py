"""Models quantized by ONNX Runtime's ``quantize_static`` (tests/cpu/int8_models.py), in QDQ and
QOperator format, against ONNX Runtime's own int8 run: the same top-1 and at most one
quantization step of the output apart on >= 99.9 % of the elements (ember requantizes as ONNX's
reference and ONNX Runtime's kernels round; a value on a rounding boundary may land one step
away). The small CNN runs in ``make test``; ResNet-50 is ``long`` (make test-long)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import ember

sys.path.insert(0, str(Path(__file__).resolve().parent))
from int8_models import feeds, quantized  # noqa: E402

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")


def _output_step(path: Path) -> float:
    """The scale of the DequantizeLinear that produces the model's output (one quantization step)."""
    import onnx
    from onnx import numpy_helper as nh

    m = onnx.load(str(path))
    inits = {t.name: nh.to_array(t) for t in m.graph.initializer}
    out = m.graph.output[0].name
    node = next(n for n in m.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear", node.op_type
    return float(inits[node.input[1]])


def _compare(name: str, fmt: str) -> None:
    path, shp = quantized(name, fmt)
    f = feeds(path, shp)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, f)[0]
    out = ember.compile(path, use_cache=False)(**f)
    got = np.asarray(out[0] if isinstance(out, (list, tuple)) else out)
    assert got.shape == ref.shape and np.isfinite(got).all()
    assert got.argmax() == ref.argmax()
    step = _output_step(path)
    close = np.abs(got.astype(np.float64) - ref) <= step * 1.0001
    assert close.mean() >= 0.999, f"{(~close).sum()} of {close.size} elements more than one step apart"


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_small_cnn_int8(fmt: str) -> None:
    _compare("small_cnn", fmt)


@pytest.mark.long
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_resnet50_int8(fmt: str) -> None:
    pytest.importorskip("torch")
    _compare("resnet50", fmt)
