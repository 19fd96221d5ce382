"""Tensor-core kernels of float16 models are tuning tasks: their knob space (block, warp, chunk,
stages) has the heuristic tiling as its default point, rejects illegal points before building,
and its legal points build (PTX for sm_90, a code object for gfx942)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import ember
from ember.strategy.tensorcore import tile_for_domain, tile_of
from ember.te.tensor_intrin import INTRINSICS
from ember.tune import extract_tasks
from ember.tune.keys import anchor_op


def _fp16_conv(n: int = 1, c: int = 64, hw: int = 14, k: int = 96) -> bytes:
    rng = np.random.default_rng(0)
    w = nh.from_array((rng.standard_normal((k, c, 3, 3)) * 0.1).astype(np.float16), "w")
    g = h.make_graph([h.make_node("Conv", ["x", "w"], ["t"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["t"], ["y"])],
                     "g", [h.make_tensor_value_info("x", T.FLOAT16, [n, c, hw, hw])],
                     [h.make_tensor_value_info("y", T.FLOAT16, [n, k, hw, hw])], [w])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("target", ["cuda -arch=sm_90", "rocm -mcpu=gfx942"])
def test_tensorcore_kernels_are_tuning_tasks(target: str) -> None:
    (task,) = extract_tasks(_fp16_conv(), target)
    acc = anchor_op(task.args)
    assert acc is not None and acc.tag == "tc_gemm"
    default = tile_of(task.space.default)
    assert default == tile_for_domain(acc.output(0), INTRINSICS[acc.attrs["intrin"]])
    sample = task.space.sample(300, seed=2)
    illegal = [c for c in sample if not task.space.is_valid(c)]
    legal = [c for c in sample if task.space.is_valid(c)]
    assert illegal and legal
    for cfg in illegal[:3]:
        with pytest.raises(ember.InvalidConfig, match="illegal configuration"):
            task.build(cfg.to_json())
    for cfg in [task.space.default] + legal[:2]:
        assert task.build(cfg.to_json()) is not None
