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


@pytest.mark.parametrize("shape, parts", [
    ((1, 128, 768, 3072, 1), 6),    # BERT-base FFN out: 24 blocks of 64 x 64 before
    ((1, 128, 3072, 768, 1), 2),    # FFN in: 96 blocks
    ((1, 512, 64, 512, 9), 16),     # ResNet-50 layer 4, 3 x 3: 8 blocks
    ((1, 4096, 4096, 4096, 1), 1),  # large: no split
    ((1, 64, 128, 64, 1), 1),       # a short reduction is not split (each part >= 256 products)
])
def test_split_k_only_where_the_tiles_do_not_fill_the_gpu(shape: tuple[int, ...], parts: int) -> None:
    from ember.strategy.gpu import gemm_split_k

    nb, m, n, k0, taps = shape
    got = gemm_split_k(nb, m, n, 32, k0, taps)
    assert got == parts and k0 % got == 0


def test_split_k_product_computes_the_same_values() -> None:
    from ember.ops.nn import split_k_product
    from ember.te.reference import evaluate

    rng = np.random.default_rng(3)
    nb, m, n, c, taps = 2, 5, 7, 12, 3
    w = te.placeholder((m, c, taps), name="w")
    x = te.placeholder((nb, n, c, taps), name="x")
    rc = te.reduce_axis((0, c), name="rc")
    rt = te.reduce_axis((0, taps), name="rt")
    prod = te.compute((nb, m, n), lambda b, i, j: te.sum(w[i, rc, rt] * x[b, j, rc, rt], axis=[rc, rt]),
                      name="gemm", tag="conv_packed", attrs={"nr": 1})
    wv = rng.standard_normal((m, c, taps)).astype(np.float32)
    xv = rng.standard_normal((nb, n, c, taps)).astype(np.float32)
    want = np.einsum("ict,bjct->bij", wv.astype(np.float64), xv.astype(np.float64))
    for parts in (1, 2, 3, 4, 6, 12):
        out = split_k_product(prod, parts)
        (got,) = evaluate([out], {w: wv, x: xv})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # float32 sums in another order
    with pytest.raises(ValueError, match="do not divide"):
        split_k_product(prod, 5)


@pytest.mark.parametrize("shape, parts", [
    ((1, 128, 768, 3072), 6),    # BERT-base FFN out in float16
    ((1, 512, 64, 4608), 18),    # ResNet-50 layer 4, 3 x 3, batch 1
    ((1, 128, 768, 768), 1),     # K too short to split
    ((32, 512, 64, 4608), 1),    # batch 32 fills the GPU already
    ((1, 16, 4096, 4096), 4),    # skinny, memory-bound: 256 blocks of 16 x 64 (2 would give 128)
])
def test_tensorcore_split_k(shape: tuple[int, int, int, int], parts: int) -> None:
    from ember.strategy.tensorcore import tc_split_k

    assert tc_split_k(*shape) == parts


class _Split:
    """A layout asking for a fixed number of tensor-core split-K parts."""

    def __init__(self, parts: int) -> None:
        self.parts = parts

    def tc_split_k(self, batch: int, mp: int, np_: int, kp: int) -> int:
        return self.parts


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_split_tensorcore_accumulator_computes_the_same_product(parts: int) -> None:
    from ember.ops.nn import tensorcore_accumulator
    from ember.te.reference import evaluate

    rng = np.random.default_rng(5)
    lead, m, n, k = (2,), 19, 40, 150  # padded to 32 x 64 x 192: 6 chunks of 32
    a = te.placeholder(lead + (m, k), "float16", name="a")
    b = te.placeholder((k, n), "float16", name="b")
    acc = tensorcore_accumulator(lambda li, i, kk: a[tuple(li) + (i, kk)], lambda li, kk, j: b[kk, j], lead, m, n, k,
                                 "float16", lookup("mma.m16n8k16.f16"), "mm", layout=_Split(parts))
    av = rng.standard_normal(lead + (m, k)).astype(np.float16)
    bv = rng.standard_normal((k, n)).astype(np.float16)
    (got,) = evaluate([acc], {a: av, b: bv})
    want = av.astype(np.float64) @ bv.astype(np.float64)
    # float32 accumulation of float16 products, parts added in another order: float32 rounding
    np.testing.assert_allclose(got[:, :m, :n], want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape, tile", [
    ((1, 4096, 4096), (256, 128, 16, 8)),  # 512 blocks of the XL tile
    ((1, 2048, 2048), (256, 128, 16, 8)),  # 128 of them
    ((1, 1024, 2048), (128, 128, 8, 8)),   # 64 XL blocks only: 128 of 128 x 128
    ((1, 128, 768), (16, 32, 1, 2)),       # BERT's 128 rows unsplit (split-K parts count as batch)
    ((6, 128, 768), (64, 64, 4, 4)),       # ... in 6 parts: 4 x 8 warps, the rows transposed
])
def test_packed_gemm_tiles(shape: tuple[int, int, int], tile: tuple[int, int, int, int]) -> None:
    from ember.strategy.gpu import default_gemm_tile

    assert default_gemm_tile(*shape, 32) == tile


def _matmul_ir(m: int, k: int, n: int) -> ember.Model:
    g = h.make_graph([h.make_node("MatMul", ["a", "b"], ["c"])], "g",
                     [h.make_tensor_value_info("a", T.FLOAT, [m, k]), h.make_tensor_value_info("b", T.FLOAT, [k, n])],
                     [h.make_tensor_value_info("c", T.FLOAT, None)])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return ember.compile(model.SerializeToString(), target="cuda -arch=sm_90")


def test_packed_gemm_warps_stage_the_row_operand_transposed() -> None:
    """BERT's 128 x 768 x 3072 float32 product (6 split-K parts of 64 x 64 blocks, 4 x 4 per
    thread): each warp a 4 x 8 patch of thread tiles (threadIdx.x 32 lanes, threadIdx.y 8
    warps), the row operand's shared copy transposed to [chunk of 32, 64 + 4] (two pipeline
    stages; rows last, so a thread's 4 rows are one 128-bit load; each row padded by 4 words),
    the packed operand copied by 16-byte cp.async, and no spills. A 2048^2 product takes
    256 x 128 blocks of 16 x 8 per thread (XL_TILE) in the older layout."""
    compiled = _matmul_ir(128, 768, 3072)
    ir = compiled.get_source("ir")
    assert f"p_0.shared = allocate(float32, [{2 * 32 * (64 + 4)}], scope='shared')" in ir
    assert "in range(32):  # bound to threadIdx.x" in ir and "in range(8):  # bound to threadIdx.y" in ir
    ptx = compiled.get_source("asm")
    assert "ld.shared.v4.b32" in ptx and "cp.async.cg.shared.global" in ptx
    assert " 0 bytes spill stores" in compiled.get_source("ptxas")
    big = _matmul_ir(2048, 2048, 2048)
    # 16 rows per thread; the older layout's column groups (4 + 4, half a block apart) make the
    # accumulator's bounding box 68 columns wide, of which LLVM keeps the 8 that are stored
    assert "_gemm_3.local = allocate(float32, [1, 16, 68], scope='local')" in big.get_source("ir")
    assert big.get_source("asm").count("fma.rn.f32") >= 16 * 8  # one reduction step of the 16 x 8 tile
    assert " 0 bytes spill stores" in big.get_source("ptxas")
