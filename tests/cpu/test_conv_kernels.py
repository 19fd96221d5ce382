"""CPU convolution kernels against a float64 NumPy convolution, at sizes no register tile or
panel divides (odd channel counts, odd spatial sizes, stride 2, groups, dilation, asymmetric
padding).

* Operator level (``tests/ops/oprun.run_op``: the operator scheduled as the model compiler
  would, outputs poisoned with NaN before the run): every convolution family — the packed GEMM
  convolution (1x1, 3x3, 7x7 stride 2), grouped, depthwise (multiplier 1 and 2).
* Model level (``ember.compile``): a convolution with its epilogue (bias, residual add, ReLU,
  Clip, HardSwish) fused into the store of its register tiles; run twice on fresh inputs so a
  value left over from the first run shows.

Tolerance: float32 accumulation over at most a few thousand products of O(1) values, checked
against float64 with rtol = atol = 1e-4.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import ember

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conv_reference import conv2d_ref, conv_model, epilogue_ref  # noqa: E402
from oprun import run_op  # noqa: E402

TOL = {"rtol": 1e-4, "atol": 1e-4}

# (N, C, H, W), (M, KH, KW), strides, pads (t, l, b, r), dilations, group
CASES = [
    pytest.param((1, 5, 7, 9), (13, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, id="1x1-odd"),
    pytest.param((1, 3, 11, 13), (17, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, id="3x3-pad1"),
    pytest.param((2, 6, 10, 9), (9, 3, 3), (2, 2), (1, 0, 2, 1), (1, 1), 1, id="3x3-s2-asym-batch2"),
    pytest.param((1, 3, 23, 21), (10, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1, id="7x7-s2"),
    pytest.param((1, 4, 12, 12), (7, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1, id="3x3-dil2"),
    pytest.param((1, 6, 9, 8), (9, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 3, id="grouped"),
    pytest.param((1, 7, 9, 11), (7, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 7, id="depthwise-s1"),
    pytest.param((1, 9, 13, 10), (9, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 9, id="depthwise-s2"),
    pytest.param((1, 5, 12, 11), (5, 5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 5, id="depthwise-5x5-s2"),
    pytest.param((1, 4, 9, 9), (8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4, id="depthwise-mult2"),
    pytest.param((1, 37, 14, 14), (70, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, id="1x1-14x14-tail"),
    pytest.param((1, 19, 7, 7), (33, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, id="3x3-7x7-tail"),
]


def _attrs(strides, pads, dil, group, ks):
    return {"kernel_shape": list(ks), "strides": list(strides), "pads": list(pads), "dilations": list(dil),
            "group": group}


@pytest.mark.parametrize("xs, wk, strides, pads, dil, group", CASES)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_conv_operator_matches_float64(rng, xs, wk, strides, pads, dil, group, bias):
    m, kh, kw = wk
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((m, xs[1] // group, kh, kw)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    arrays = [x, w] + ([b] if bias else [])
    (got,) = run_op("Conv", arrays, _attrs(strides, pads, dil, group, (kh, kw)))
    ref = conv2d_ref(x, w, b, strides, pads, dil, group)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, **TOL)


EPILOGUES = [
    pytest.param(("Relu",), False, id="relu"),
    pytest.param(("Relu",), True, id="add-relu"),
    pytest.param(("Clip6",), False, id="clip"),
    pytest.param(("HardSwish",), False, id="hardswish"),
    pytest.param((), True, id="add"),
]


@pytest.mark.parametrize("xs, wk, strides, pads, dil, group", [CASES[0], CASES[2], CASES[6], CASES[10], CASES[11]])
@pytest.mark.parametrize("epilogue, residual", EPILOGUES)
def test_conv_epilogue_in_model_matches_float64(rng, xs, wk, strides, pads, dil, group, epilogue, residual):
    m, kh, kw = wk
    w = rng.standard_normal((m, xs[1] // group, kh, kw)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    out_shape = conv2d_ref(np.zeros(xs, np.float32), w, None, strides, pads, dil, group).shape
    attrs = _attrs(strides, pads, dil, group, (kh, kw))
    model = ember.compile(conv_model(xs, w, b, attrs, epilogue, out_shape if residual else None))
    for _ in range(2):
        x = rng.standard_normal(xs).astype(np.float32)
        ref = conv2d_ref(x, w, b, strides, pads, dil, group)
        feeds = {"X": x}
        if residual:
            r = rng.standard_normal(ref.shape).astype(np.float32)
            feeds["R"] = r
            ref = ref + r
        (got,) = model(**feeds)
        np.testing.assert_allclose(got, epilogue_ref(ref, epilogue), **TOL)
