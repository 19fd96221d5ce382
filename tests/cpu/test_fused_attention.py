"""Exported transformers' attention fused into one CPU kernel (:mod:`ember.graph.attention_fusion`,
:mod:`ember.ops.fused_attention`, :mod:`ember.strategy.cpu_attention`).

Hand-built ONNX graphs as exporters write them (``MatMul(Q, Transpose(K))``, a ``Mul`` or ``Div``
scale, an additive mask broadcast over heads and rows, ``Softmax``, the ``Where(IsNaN(p), 0, p)``
of ``scaled_dot_product_attention``'s export, ``MatMul(p, V)``, the heads transposed back) at
sizes no tile divides, against ONNX Runtime: each model run twice on fresh inputs into poisoned
output arrays; the fusion is checked in the optimised graph (one ``ember.FusedAttention``, no
Softmax left) and in the kernel count. Tolerance 2e-5 of the largest output magnitude: float32
products over at most 64 terms and a softmax over at most 33 keys, summed in another order.
A small BERT encoder exported by torch is compared the same way (``long``).
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.driver import optimize
from ember.graph import Graph, Node, TensorInfo
from ember.graph.attention_fusion import FuseAttention, fuse_attention
from ember.ops.fused_attention import FUSED_ATTENTION

onnx = pytest.importorskip("onnx", reason="the cases are ONNX models")
ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime is the reference")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def _attention_model(B: int, H: int, S: int | str, L: int | str, D: int, Dv: int, *, scale: str | None,
                     mask: str | None, nan_tail: bool, merge_heads: bool, scale_value: float | None = None) -> bytes:
    """Q ``[B, H, S, D]``, K ``[B, H, L, D]``, V ``[B, H, L, Dv]`` (and a mask) as inputs:
    ``MatMul(Q, Transpose(K))``, the scale, the mask, Softmax, the NaN tail, ``MatMul(., V)`` and,
    with ``merge_heads``, ``Transpose(0, 2, 1, 3)`` + ``Reshape`` to ``[B, S, H * Dv]``. A size
    given as a name is a symbolic dimension."""
    ins = [h.make_tensor_value_info("Q", T.FLOAT, [B, H, S, D]), h.make_tensor_value_info("K", T.FLOAT, [B, H, L, D]),
           h.make_tensor_value_info("V", T.FLOAT, [B, H, L, Dv])]
    inits = []
    nodes = [h.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]), h.make_node("MatMul", ["Q", "Kt"], ["s0"])]
    cur = "s0"
    if scale is not None:
        value = scale_value if scale_value is not None else (np.sqrt(D) if scale == "div" else 1 / np.sqrt(D))
        inits.append(nh.from_array(np.array(value, np.float32), "c"))
        nodes.append(h.make_node(scale.capitalize(), [cur, "c"] if scale == "div" else ["c", cur], ["s1"]))
        cur = "s1"
    if mask is not None:
        mshape = {"b11l": [B, 1, 1, L], "b1sl": [B, 1, S, L], "sl": [S, L]}[mask]
        ins.append(h.make_tensor_value_info("M", T.FLOAT, mshape))
        nodes.append(h.make_node("Add", [cur, "M"], ["s2"]))
        cur = "s2"
    nodes.append(h.make_node("Softmax", [cur], ["p"], axis=-1))
    cur = "p"
    if nan_tail:
        inits.append(nh.from_array(np.array([0.0], np.float32), "zero"))
        nodes += [h.make_node("IsNaN", ["p"], ["bad"]), h.make_node("Where", ["bad", "zero", "p"], ["p2"])]
        cur = "p2"
    nodes.append(h.make_node("MatMul", [cur, "V"], ["y"]))
    out, oshape = "y", [B, H, S, Dv]
    if merge_heads:
        inits.append(nh.from_array(np.array([0, 0, H * Dv], np.int64), "shape"))  # 0: the input's size
        nodes += [h.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
                  h.make_node("Reshape", ["yt", "shape"], ["out"])]
        out, oshape = "out", [B, S, H * Dv]
    g = h.make_graph(nodes, "attention", ins, [h.make_tensor_value_info(out, T.FLOAT, oshape)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _feeds(rng: np.random.Generator, model: bytes, masked: bool = True) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in onnx.load_from_string(model).graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        x = rng.standard_normal(shape).astype(np.float32)
        if vi.name == "M":  # zeros and large negative values, as an exported padding mask
            x = np.where(rng.random(shape) < 0.3, np.float32(np.finfo(np.float32).min), 0.0).astype(np.float32) \
                if masked else x
        feeds[vi.name] = x
    return feeds


def _check(model: bytes, rng: np.random.Generator, kernels: int, masked: bool = True) -> ember.Model:
    compiled = ember.compile(model, target="llvm", use_cache=False)
    assert compiled.num_kernels == kernels
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for _ in range(2):
        feeds = _feeds(rng, model, masked)
        want = sess.run(None, feeds)[0]
        got = compiled.run(feeds, outputs=[np.full(want.shape, np.nan, np.float32)])[0]
        assert got.shape == want.shape
        err = np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()
        assert err <= 2e-5, err
    return compiled


def _fused_ops(model: bytes) -> list[str]:
    from ember.frontend.onnx import import_onnx

    return [n.op for n in optimize(import_onnx(model), target="llvm").nodes]


CASES = {
    # B, H, S, L, D, Dv, scale, mask, nan_tail, merge_heads
    "s7-div-nomask": (1, 2, 7, 7, 8, 8, "div", None, False, True),
    "s13-mul-mask-heads": (2, 3, 13, 13, 16, 16, "mul", "b11l", False, False),
    "s33-div-rowmask-nan": (1, 4, 33, 33, 64, 64, "div", "b1sl", True, True),
    "s13-noscale-2dmask": (1, 2, 13, 13, 24, 24, None, "sl", False, True),
    "cross-s7-l33-mul-nan": (2, 2, 7, 33, 40, 24, "mul", "b11l", True, False),
    "s33-d8": (1, 3, 33, 33, 8, 8, "mul", "b11l", False, True),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_attention_chain_is_one_kernel_and_matches_onnxruntime(rng, case) -> None:
    B, H, S, L, D, Dv, scale, mask, nan_tail, merge = CASES[case]
    model = _attention_model(B, H, S, L, D, Dv, scale=scale, mask=mask, nan_tail=nan_tail, merge_heads=merge)
    ops = _fused_ops(model)
    assert ops.count(FUSED_ATTENTION) == 1 and "Softmax" not in ops and "MatMul" not in ops, ops
    # the transpose of K (a kernel of its own: its producer is an input) and the attention; the
    # heads' reshape is a view
    _check(model, rng, kernels=2)


def test_odd_scale_divides_as_the_graph_does(rng) -> None:
    model = _attention_model(1, 2, 13, 13, 24, 24, scale="div", mask="b11l", nan_tail=False, merge_heads=True,
                             scale_value=4.898979)  # sqrt(24) rounded: x / c is not x * (1 / c)
    _check(model, rng, kernels=2)


def test_fully_masked_rows_follow_the_graph(rng) -> None:
    """Rows whose mask is ``-inf`` everywhere: NaN from the Softmax, so NaN outputs without the
    tail and zeros with it (as ONNX Runtime gives)."""
    for nan_tail in (False, True):
        model = _attention_model(1, 2, 7, 13, 16, 16, scale="mul", mask="b1sl", nan_tail=nan_tail, merge_heads=False)
        compiled = ember.compile(model, target="llvm", use_cache=False)
        assert compiled.num_kernels == 2
        feeds = _feeds(rng, model)
        feeds["M"][0, 0, [2, 5], :] = -np.inf
        want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        got = compiled.run(feeds, outputs=[np.full(want.shape, 7.0, np.float32)])[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert np.isnan(want[0, :, [2, 5]]).all() != nan_tail
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=2e-5, atol=2e-5)


def test_symbolic_sequence_length_compiles_the_fused_kernel_once(rng) -> None:
    """Self-attention whose sequence length is symbolic (Q, K, V, the mask): compiled once for
    every size (``ember.model.symbolic``) with the fused kernel's extents symbolic, no size
    compiled on its own; against ONNX Runtime at lengths no tile divides."""
    model = _attention_model(1, 2, "seq", "seq", 16, 16, scale="mul", mask="b11l", nan_tail=True, merge_heads=True)
    compiled = ember.compile(model, target="llvm", use_cache=False)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for n in (5, 13, 40, 70, 13):
        feeds = {k: rng.standard_normal((1, 2, n, 16)).astype(np.float32) for k in "QKV"}
        feeds["M"] = np.where(rng.random((1, 1, 1, n)) < 0.3, np.float32(-1e30), 0.0).astype(np.float32)
        want = sess.run(None, feeds)[0]
        got = compiled.run(feeds, outputs=[np.full(want.shape, np.nan, np.float32)])[0]
        assert np.abs(got.astype(np.float64) - want).max() / np.abs(want).max() <= 2e-5
    spec = compiled._specializer
    assert spec.symbolic_status == "built" and compiled.variants == []
    assert [op for st in spec.symbolic.steps for op in st.get("ops", [])].count(FUSED_ATTENTION) == 1
    assert spec.symbolic.exact_compiles == 0


def test_rank3_attention_with_merged_batch_and_heads(rng) -> None:
    """Batch and heads merged into one axis (``[B * H, S, D]``), as some exporters write it."""
    BH, S, D = 6, 13, 16
    nodes = [h.make_node("Transpose", ["K"], ["Kt"], perm=[0, 2, 1]), h.make_node("MatMul", ["Q", "Kt"], ["s0"]),
             h.make_node("Div", ["s0", "c"], ["s1"]), h.make_node("Softmax", ["s1"], ["p"], axis=2),
             h.make_node("MatMul", ["p", "V"], ["y"])]
    ins = [h.make_tensor_value_info(n, T.FLOAT, [BH, S, D]) for n in "QKV"]
    g = h.make_graph(nodes, "rank3", ins, [h.make_tensor_value_info("y", T.FLOAT, [BH, S, D])],
                     [nh.from_array(np.array(4.0, np.float32), "c")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    model = m.SerializeToString()
    assert _fused_ops(model).count(FUSED_ATTENTION) == 1
    _check(model, rng, kernels=2)


def test_a_scale_dividing_by_the_scores_is_not_fused() -> None:
    g = _graph_of(_attention_model(1, 2, 7, 7, 8, 8, scale="div", mask=None, nan_tail=False, merge_heads=False))
    div = next(n for n in g.nodes if n.op == "Div")
    div.inputs = div.inputs[::-1]  # c / scores
    assert fuse_attention(g) is g


def _projected_model(B: int, S: int, H: int, D: int, rng: np.random.Generator) -> bytes:
    """A self-attention block as torch exports a HuggingFace BERT layer: Q, K, V projections
    (MatMul + Add), each split into heads (Reshape + Transpose; K transposed for the product), the
    additive mask ``(1 - m) * min`` from an int64 mask, the scale as a Div, the heads merged back
    and the output projection."""
    X = H * D
    inits = [nh.from_array((rng.standard_normal((X, X)) / np.sqrt(X)).astype(np.float32), f"W{n}") for n in "qkvo"]
    inits += [nh.from_array((rng.standard_normal(X) * 0.1).astype(np.float32), f"b{n}") for n in "qkvo"]
    inits += [nh.from_array(np.array([B, S, H, D], np.int64), "heads"),
              nh.from_array(np.array([B, S, X], np.int64), "merged"),
              nh.from_array(np.array(1.0, np.float32), "one"),
              nh.from_array(np.array(np.finfo(np.float32).min, np.float32), "fmin"),
              nh.from_array(np.array(np.sqrt(D), np.float32), "sqrtd"),
              nh.from_array(np.array([1, 2], np.int64), "axes12")]
    nodes = []
    for n, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [h.make_node("MatMul", ["x", f"W{n}"], [f"{n}0"]), h.make_node("Add", [f"{n}0", f"b{n}"], [f"{n}1"]),
                  h.make_node("Reshape", [f"{n}1", "heads"], [f"{n}2"]),
                  h.make_node("Transpose", [f"{n}2"], [f"{n}3"], perm=perm)]
    nodes += [h.make_node("Unsqueeze", ["m", "axes12"], ["m4"]), h.make_node("Cast", ["m4"], ["mf"], to=T.FLOAT),
              h.make_node("Sub", ["one", "mf"], ["inv"]), h.make_node("Mul", ["inv", "fmin"], ["madd"]),
              h.make_node("MatMul", ["q3", "k3"], ["s0"]), h.make_node("Div", ["s0", "sqrtd"], ["s1"]),
              h.make_node("Add", ["s1", "madd"], ["s2"]), h.make_node("Softmax", ["s2"], ["p"], axis=-1),
              h.make_node("MatMul", ["p", "v3"], ["c"]), h.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["ct", "merged"], ["c2"]), h.make_node("MatMul", ["c2", "Wo"], ["o0"]),
              h.make_node("Add", ["o0", "bo"], ["out"])]
    g = h.make_graph(nodes, "layer", [h.make_tensor_value_info("x", T.FLOAT, [B, S, X]),
                                      h.make_tensor_value_info("m", T.INT64, [B, S])],
                     [h.make_tensor_value_info("out", T.FLOAT, [B, S, X])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize("B, S, H, D", [(1, 13, 2, 32), (2, 33, 4, 16)])
def test_projected_self_attention_matches_onnxruntime(rng, B, S, H, D) -> None:
    model = _projected_model(B, S, H, D, rng)
    ops = _fused_ops(model)
    assert ops.count(FUSED_ATTENTION) == 1 and "Softmax" not in ops, ops
    compiled = ember.compile(model, target="llvm", use_cache=False)
    # Q, K, V projections, the mask, the attention, the output projection
    assert compiled.num_kernels == 6
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for _ in range(2):
        x = rng.standard_normal((B, S, H * D)).astype(np.float32)
        m = (rng.random((B, S)) < 0.8).astype(np.int64)
        m[:, 0] = 1
        want = sess.run(None, {"x": x, "m": m})[0]
        got = compiled.run({"x": x, "m": m}, outputs=[np.full(want.shape, np.nan, np.float32)])[0]
        assert np.abs(got.astype(np.float64) - want).max() / np.abs(want).max() <= 2e-5


def _graph_of(model: bytes) -> Graph:
    from ember.frontend.onnx import import_onnx

    return optimize(import_onnx(model))  # shapes inferred, no target: nothing fused yet


def test_gpu_targets_and_no_target_keep_the_chain() -> None:
    g = _graph_of(_attention_model(1, 2, 7, 7, 8, 8, scale="div", mask="b11l", nan_tail=True, merge_heads=True))
    for target in (None, "cuda", "rocm"):
        assert FuseAttention(target)(g) is g
    fused = FuseAttention("llvm")(g)
    assert [n.op for n in fused.nodes].count(FUSED_ATTENTION) == 1


def test_chains_with_other_readers_are_not_fused() -> None:
    """The probabilities (or the scores) read elsewhere, or returned, keep the unfused nodes."""
    g = _graph_of(_attention_model(1, 2, 7, 7, 8, 8, scale="mul", mask=None, nan_tail=False, merge_heads=False))
    assert fuse_attention(g) is not g
    for value in ("p", "s1"):
        g2 = g.copy()
        g2.outputs.append(value)
        assert fuse_attention(g2) is g2
    g3 = g.copy()
    g3.nodes.append(Node("Relu", ["p"], ["extra"], {}, "extra"))
    g3.values["extra"] = g3.values["p"]
    g3.outputs.append("extra")
    assert fuse_attention(g3) is g3


def test_softmax_over_another_axis_or_a_tensor_scale_is_not_fused() -> None:
    g = _graph_of(_attention_model(1, 2, 7, 7, 8, 8, scale="div", mask=None, nan_tail=False, merge_heads=False))
    g1 = g.copy()
    next(n for n in g1.nodes if n.op == "Softmax").attrs["axis"] = 2
    assert fuse_attention(g1) is g1
    g2 = g.copy()
    g2.consts["c"] = np.full((7,), 2.0, np.float32)
    g2.values["c"] = TensorInfo((7,), "float32")
    assert fuse_attention(g2) is g2


@pytest.mark.long
def test_exported_bert_encoder_matches_onnxruntime(tmp_path, rng) -> None:
    torch = pytest.importorskip("torch", reason="the encoder is exported with torch")
    transformers = pytest.importorskip("transformers", reason="the encoder is built from a transformers config")
    cfg = transformers.BertConfig(vocab_size=300, hidden_size=96, num_hidden_layers=2, num_attention_heads=3,
                                  intermediate_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    bert = transformers.BertModel(cfg).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    S = 13
    path = tmp_path / "bert.onnx"
    ids = torch.zeros(2, S, dtype=torch.long)
    torch.onnx.export(Encoder(), (ids, torch.ones_like(ids)), str(path), input_names=["input_ids", "attention_mask"],
                      output_names=["hidden"], opset_version=17, dynamo=False)
    model = ember.compile(str(path), target="llvm", use_cache=False)
    prof = model.profile(np.zeros((2, S), np.int64), np.ones((2, S), np.int64), repeat=1, warmup=0, peaks=False)
    ops = [op for step in prof.steps for op in step.ops]
    assert ops.count(FUSED_ATTENTION) == 2 and "Softmax" not in ops, ops  # one kernel per layer
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for _ in range(2):
        ids = rng.integers(0, 300, (2, S)).astype(np.int64)
        mask = np.ones((2, S), np.int64)
        mask[1, S // 2:] = 0  # padding in the second sequence
        want = sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        got = model.run(ids, mask, outputs=[np.full(want.shape, np.nan, np.float32)])[0]
        assert float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()) <= 1e-4
