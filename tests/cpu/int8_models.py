"""Models quantized with ONNX Runtime's own ``quantize_static`` for the int8 tests and
benchmarks: a small CNN (fast, for ``make test``) and ResNet-50, in both formats it writes (QDQ
and QOperator), calibrated on random images, cached under ``build/int8_models/``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "int8_models"


class _RandomImages:
    """A calibration data reader: ``n`` random images of ``shape`` for input ``name``."""

    def __init__(self, name: str, shape: tuple[int, ...], n: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self._it = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(n)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


def small_cnn(directory: Path) -> Path:
    """A float CNN (conv, relu, conv with a residual add, global pool, gemm) with BatchNorm folded
    weights: the layer kinds of ResNet-50 at a size that compiles in seconds."""
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(1)

    def w(*s: int) -> np.ndarray:
        return (rng.standard_normal(s) * (2.0 / np.prod(s[1:])) ** 0.5).astype(np.float32)

    def bias(n: int) -> np.ndarray:
        return (rng.standard_normal(n) * 0.1).astype(np.float32)

    inits = [nh.from_array(w(16, 3, 3, 3), "w1"), nh.from_array(bias(16), "b1"),
             nh.from_array(w(16, 16, 3, 3), "w2"), nh.from_array(bias(16), "b2"),
             nh.from_array(w(10, 16), "wf"), nh.from_array(np.zeros(10, np.float32), "bf")]
    nodes = [
        oh.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        oh.make_node("Relu", ["c1"], ["r1"]),
        oh.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        oh.make_node("Add", ["c2", "r1"], ["s"]),
        oh.make_node("Relu", ["s"], ["r2"]),
        oh.make_node("GlobalAveragePool", ["r2"], ["g"]),
        oh.make_node("Flatten", ["g"], ["f"]),
        oh.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    g = oh.make_graph(nodes, "small_cnn", [oh.make_tensor_value_info("x", TP.FLOAT, [1, 3, 33, 31])],
                      [oh.make_tensor_value_info("y", TP.FLOAT, [1, 10])], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    path = directory / "small_cnn.onnx"
    onnx.save(m, path)
    return path


def quantized(name: str, fmt: str, calib: int = 8) -> tuple[Path, tuple[int, ...]]:
    """The path of ``name`` (``small_cnn`` or ``resnet50``) quantized by ``quantize_static`` in
    format ``fmt`` (``QDQ`` or ``QOperator``; uint8 activations, int8 weights per channel) and its
    input shape; built once and cached."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"{name}_{fmt.lower()}.onnx"
    shape = (1, 3, 33, 31) if name == "small_cnn" else (1, 3, 224, 224)
    if out.exists():
        return out, shape
    if name == "small_cnn":
        fp = small_cnn(CACHE)
    else:
        sys.path.insert(0, str(ROOT / "tests" / "models"))
        from nets import export

        fp = export(name, CACHE)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    quantize_static(str(fp), str(tmp), _RandomImages("input" if name != "small_cnn" else "x", shape, calib),
                    quant_format=QuantFormat.QDQ if fmt == "QDQ" else QuantFormat.QOperator,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    tmp.replace(out)
    return out, shape


def feeds(path: Path, shape: tuple[int, ...], seed: int = 5) -> dict[str, Any]:
    """Random inputs for a model of :func:`quantized`."""
    import onnx

    name = onnx.load(str(path), load_external_data=False).graph.input[0].name
    return {name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
