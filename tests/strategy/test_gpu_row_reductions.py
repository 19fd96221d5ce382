"""The GPU strategy's reduction and tensor-core tilings, checked without a GPU: which reductions
are split across a block's threads (rfactor + warp shuffles) and which keep one thread per
output, and the tensor-core block tiling chosen for a product's padded domain."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import ember
from ember import te
from ember.strategy.gpu import cross_thread_threads
from ember.strategy.tensorcore import tile_for_domain
from ember.te.tensor_intrin import lookup


def _row_sum(m: int, n: int) -> te.ComputeOp:
    a = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    return te.compute((m,), lambda i: te.sum(a[i, k], axis=k), name="B").op


def _col_sum(m: int, n: int) -> te.ComputeOp:
    a = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, m), name="k")
    return te.compute((n,), lambda j: te.sum(a[k, j], axis=k), name="B").op


@pytest.mark.parametrize("n, threads", [(64, 32), (128, 32), (768, 128), (1000, 128), (4096, 256), (100000, 256)])
def test_row_reductions_split_over_threads(n: int, threads: int) -> None:
    assert cross_thread_threads(_row_sum(128, n)) == threads


def test_short_column_and_symbolic_reductions_keep_one_thread_per_output() -> None:
    assert cross_thread_threads(_row_sum(1000, 49)) is None  # 7 x 7 pooling: too short to split
    assert cross_thread_threads(_col_sum(4096, 512)) is None  # threads of a warp read a row together
    m, n = te.var("m"), te.var("n")
    assert cross_thread_threads(_row_sum(m, n)) is None  # the extent is not known


def _layernorm_softmax(rows: int, width: int) -> bytes:
    rng = np.random.default_rng(1)
    nodes = [h.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5),
             h.make_node("Softmax", ["x"], ["z"], axis=-1)]
    inits = [nh.from_array(rng.standard_normal(width).astype(np.float32), "s"),
             nh.from_array(rng.standard_normal(width).astype(np.float32), "b")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [rows, width])],
                     [h.make_tensor_value_info("y", T.FLOAT, [rows, width]),
                      h.make_tensor_value_info("z", T.FLOAT, [rows, width])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def test_layernorm_and_softmax_kernels_reduce_with_warp_shuffles() -> None:
    model = ember.compile(_layernorm_softmax(129, 1000), target="cuda -arch=sm_80")
    ptx = model.get_source("asm")
    assert "shfl.sync.bfly" in ptx
    ir = model.get_source("ir")
    assert "scope='shared'" in ir and "bound to threadIdx.x" in ir


def _acc(batch: int, m: int, n: int, k: int) -> te.Tensor:
    a = te.placeholder((batch, m, k), "float16", name="A")
    b = te.placeholder((k, n), "float16", name="B")
    r = te.reduce_axis((0, k), name="r")
    return te.compute((batch, m, n), lambda z, i, j: te.sum(a[z, i, r].astype("float32") * b[r, j].astype("float32"),
                                                            axis=r), name="acc")


@pytest.mark.parametrize("shape, block", [
    ((1, 512, 64, 4608), (16, 16)),     # ResNet-50 layer 4 at batch 1: 4 blocks of 128 x 128 before
    ((1, 4096, 4096, 4096), (128, 128)),  # large: the largest block
    ((32, 512, 64, 4608), (128, 64)),   # the batch axis counts: 32 x 4 x 1 blocks
    ((1, 64, 3136, 576), (32, 32)),     # a stage-1 convolution: 196 blocks
])
def test_tensorcore_tiling_fills_the_gpu(shape: tuple[int, int, int, int], block: tuple[int, int]) -> None:
    intrin = lookup("mma.m16n8k16.f16")
    t = tile_for_domain(_acc(*shape), intrin)
    assert (t.bm, t.bn) == block
    assert t.check(intrin, 2, 227 * 1024) is None
    assert t.bm % t.wm == 0 and t.bn % t.wn == 0 and t.wm % intrin.m == 0 and t.wn % intrin.n == 0
