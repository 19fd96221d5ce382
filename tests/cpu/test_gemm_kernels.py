"""The CPU packed GEMM (:mod:`ember.strategy.cpu_gemm`) against float64 NumPy at sizes no
register tile, panel or reduction block divides.

* Kernel level: ``matmul_tensor`` scheduled by the CPU strategy with both operands as inputs
  (so the panel packing runs in the kernel), outputs poisoned with NaN — the register structure
  with its epilogue in the store, the K-blocked structure (the default for a skinny product with
  a long reduction, and forced through its knobs at small sizes), every parallel axis, M = 1,
  K not a multiple of anything, a partial last panel.
* Model level (``ember.compile``): MatMul with constant weights (packed at compile time) and
  a bias and activation fused into the store; batched MatMul (3-D @ 2-D and 3-D @ 3-D); Gemm
  with transposed operands; run twice on fresh inputs so a value left from the first run shows.
* Feature fallbacks: the kernel compiled for ``-mcpu=haswell`` (AVX2, 16 vector registers) and
  ``skylake-avx512`` and run where this CPU has the features; AArch64 code compile-checked
  (its assembly holds NEON ``fmla``).

Tolerance: float32 products accumulated in float32 over at most ~3000 terms of O(1) values,
checked against float64 with rtol = atol = 1e-4 (the accumulated rounding is ~1e-5 relative).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember import te
from ember.ops.nn import matmul_tensor
from ember.strategy.cpu import CPUStrategy
from ember.strategy.cpu_gemm import default_k_block, is_fused_product
from ember.target import Target

TOL = {"rtol": 1e-4, "atol": 1e-4}


def _kernel(M: int, N: int, K: int, target: str = "llvm", knobs: dict | None = None, batch: tuple = ()):
    """``A[batch, M, K] @ B[K, N]`` scheduled by the CPU strategy of ``target`` (at the default
    point, with ``knobs`` changed): the schedule, its arguments and the GEMM's space."""
    st = CPUStrategy(target)
    A = te.placeholder(batch + (M, K), name="A")
    B = te.placeholder((K, N), name="B")
    C = matmul_tensor(A, B, strategy=st)
    space = st.space([C])
    assert space is not None
    cfg = None
    if knobs:
        point = space.default.to_json()
        point["knobs"].update({k: {"size": v} if k == "tile_k" else {"val": v} for k, v in knobs.items()})
        cfg = space.from_json(point)
    return st.schedule_group([C], config=cfg), [A, B, C], space


def _run(M, N, K, rng, target="llvm", knobs=None, batch=()):
    s, args, _ = _kernel(M, N, K, target, knobs, batch)
    f = ember.build(s, args, target=target, name="mm")
    a = rng.standard_normal(batch + (M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full(batch + (M, N), np.nan, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), **TOL)


@pytest.mark.parametrize(
    "M, N, K",
    [(1, 300, 70), (3, 33, 100), (17, 65, 129), (29, 97, 515), (130, 70, 31), (64, 96, 1030)],
    ids=["M1", "tiny", "odd", "K515", "tall", "K1030"],
)
def test_register_structure_matches_float64(rng, M, N, K) -> None:
    _run(M, N, K, rng)


@pytest.mark.parametrize(
    "knobs",
    [
        {"k_outer": True, "tile_k": [5, 103], "parallel_axis": "panels"},
        {"k_outer": True, "tile_k": [5, 103], "parallel_axis": "rows", "mr": 6},
        {"k_outer": False, "panel_group": 2, "parallel_axis": "panels", "mr": 5},
        {"k_outer": False, "order": "weights_outer", "mr": 7},
        {"k_outer": False, "panel_group": 16, "tile_k": [5, 103], "unroll_m": False},
    ],
    ids=["kblock-panels", "kblock-rows", "group2-panels", "weights-outer", "group16-ksplit"],
)
def test_every_structure_matches_float64(rng, knobs) -> None:
    # 37 rows, 3 panels and a partial one, a reduction of 5 x 103
    _run(37, 101, 515, rng, knobs=knobs)


def test_skinny_long_reduction_is_k_blocked_and_correct(rng) -> None:
    # the default for a product whose M x K operand overflows L2 while a block of it fits
    M, N, K = 128, 160, 4100  # 4100 = 4 x 1025: no power-of-two block
    assert default_k_block(1, M, N, K, 32) is not None
    s, args, space = _kernel(M, N, K)
    assert space.default["k_outer"].val is True
    assert not is_fused_product(args[2].op.input_tensors[0].op)
    _run(M, N, K, rng)


def test_batched_rows_match_float64(rng) -> None:
    _run(9, 45, 70, rng, batch=(3,))


def test_illegal_k_outer_point_is_refused() -> None:
    _, _, space = _kernel(37, 101, 515)
    point = space.default.to_json()
    point["knobs"].update({"k_outer": {"val": True}, "tile_k": {"size": [1, 515]}})
    with pytest.raises(ember.InvalidConfig, match="tile_k must split"):
        space.from_json(point)


# -- model level ---------------------------------------------------------------------------------
def _model(nodes, inputs, inits, opset=17):
    g = helper.make_graph(nodes, "m", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


@pytest.mark.parametrize("act", ["Relu", "Tanh", None])
def test_matmul_with_constant_weights_bias_and_activation(rng, act) -> None:
    M, K, N = 37, 70, 99
    w = rng.standard_normal((K, N)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["X", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["y0"])]
    nodes.append(helper.make_node(act, ["y0"], ["Y"]) if act else helper.make_node("Identity", ["y0"], ["Y"]))
    model = ember.compile(_model(nodes, [_vi("X", (1, M, K))],
                                 [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "b")]),
                          target="llvm", use_cache=False)
    for _ in range(2):
        x = rng.standard_normal((1, M, K)).astype(np.float32)
        ref = x.astype(np.float64) @ w + bias
        ref = {"Relu": lambda v: np.maximum(v, 0), "Tanh": np.tanh, None: lambda v: v}[act](ref)
        np.testing.assert_allclose(model(x)[0], ref, **TOL)


def test_batched_matmul_of_two_inputs(rng) -> None:
    nodes = [helper.make_node("MatMul", ["A", "B"], ["Y"])]
    model = ember.compile(_model(nodes, [_vi("A", (2, 3, 19, 40)), _vi("B", (2, 3, 40, 23))], []),
                          target="llvm", use_cache=False)
    for _ in range(2):
        a = rng.standard_normal((2, 3, 19, 40)).astype(np.float32)
        b = rng.standard_normal((2, 3, 40, 23)).astype(np.float32)
        np.testing.assert_allclose(model(a, b)[0], a.astype(np.float64) @ b, **TOL)


def test_gemm_transposed_with_bias(rng) -> None:
    M, K, N = 21, 50, 67
    w = rng.standard_normal((N, K)).astype(np.float32)
    c = rng.standard_normal(N).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["X", "W", "C"], ["Y"], transB=1, alpha=0.5, beta=2.0)]
    model = ember.compile(_model(nodes, [_vi("X", (M, K))], [numpy_helper.from_array(w, "W"),
                                                             numpy_helper.from_array(c, "C")]),
                          target="llvm", use_cache=False)
    x = rng.standard_normal((M, K)).astype(np.float32)
    np.testing.assert_allclose(model(x)[0], 0.5 * (x.astype(np.float64) @ w.T) + 2.0 * c, **TOL)


# -- feature fallbacks -----------------------------------------------------------------------------
def _host_has(*feats: str) -> bool:
    have = Target("llvm").features
    return all(f in have for f in feats)


@pytest.mark.parametrize("mcpu, feats, reg", [("haswell", ("avx2", "fma"), "ymm"),
                                               ("skylake-avx512", ("avx512f",), "zmm")])
def test_kernel_for_an_explicit_x86_cpu(rng, mcpu, feats, reg) -> None:
    target = f"llvm -mcpu={mcpu}"
    for knobs in (None, {"k_outer": True, "tile_k": [5, 103], "parallel_axis": "panels"}):
        s, args, _ = _kernel(37, 101, 515, target, knobs)
        f = ember.build(s, args, target=target, name="mm")
        asm = f.get_source("asm")
        assert "vfmadd" in asm and f"%{reg}" in asm
        if mcpu == "haswell":
            assert "%zmm" not in asm  # nothing an AVX2-only CPU would trap on
        if not _host_has(*feats):
            continue  # compile-checked only: this CPU lacks the features
        _run(37, 101, 515, rng, target=target, knobs=knobs)


def test_kernel_for_aarch64_is_compile_checked() -> None:
    target = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
    s, args, space = _kernel(37, 101, 515, target)
    assert space.default["mr"].val * 2 + 3 <= 32  # the tile fits NEON's 32 registers
    from ember.backends.cpu.codegen import assembly, compile_cpu
    from ember.lowering import lower

    compiled = compile_cpu([lower(s, args, "mm", target=target)], Target(target))
    asm = assembly(compiled.llvm_ir, Target(target))
    assert "fmla" in asm and "v0" in asm.replace("\t", " ")


# -- batched products of run-time operands (attention) ------------------------------------------
def _attention_model(B, H, S, D, masked):
    """``softmax(Q Kᵀ / sqrt(D) + mask) V`` as exported transformers write it (no fused op)."""
    nodes = [helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["Q", "Kt"], ["qk"]),
             helper.make_node("Div", ["qk", "scale"], ["s0"])]
    cur, inputs = "s0", [_vi("Q", (B, H, S, D)), _vi("K", (B, H, S, D)), _vi("V", (B, H, S, D))]
    if masked:
        nodes.append(helper.make_node("Add", [cur, "M"], ["s1"]))
        cur = "s1"
        inputs.append(_vi("M", (B, 1, 1, S)))
    nodes += [helper.make_node("Softmax", [cur], ["p"], axis=-1), helper.make_node("MatMul", ["p", "V"], ["Y"])]
    inits = [numpy_helper.from_array(np.float32(np.sqrt(D)), "scale")]
    return _model(nodes, inputs, inits)


@pytest.mark.parametrize("masked", [True, False], ids=["mask", "nomask"])
@pytest.mark.parametrize("B, H, S, D", [(1, 2, 13, 24), (2, 3, 37, 8)], ids=["seq13", "seq37-d8"])
def test_attention_subgraph_matches_float64(rng, masked, B, H, S, D) -> None:
    model = ember.compile(_attention_model(B, H, S, D, masked), target="llvm", use_cache=False)
    for _ in range(2):
        q, k, v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(3))
        feeds = [q, k, v]
        s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2)) / np.sqrt(D)
        if masked:
            m = np.where(rng.random((B, 1, 1, S)) < 0.3, -1e4, 0).astype(np.float32)
            feeds.append(m)
            s = s + m
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = (p / p.sum(-1, keepdims=True)) @ v
        np.testing.assert_allclose(model(*feeds)[0], ref, **TOL)
