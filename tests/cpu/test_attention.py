"""ONNX ``Attention`` (opset 23) on the CPU against a float64 NumPy reference, and the inline
float32 ``exp`` its softmax (and every other softmax, sigmoid, swish) runs on.

Attention: float32 at sizes no tile divides, with a float and a boolean mask, causal, grouped
KV heads (fewer KV than query heads), 3-D inputs; each model run twice on fresh inputs so a
value left from the first run shows. Tolerance rtol = atol = 1e-5: float32 products over at
most 40 terms and a softmax over at most 37, against float64.

exp: every 4099th float32 bit pattern (about a million values: normal, subnormal, both signs)
plus the overflow and underflow edges, inf, -inf, NaN: at most half an ulp from float64's
``exp`` rounded (correctly rounded on this grid), infinities and zeros exact, NaN kept.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ember
from ember import te


def _attention_ref(q, k, v, mask=None, causal=False):
    rep = q.shape[1] // k.shape[1]
    k = np.repeat(k.astype(np.float64), rep, axis=1)
    v = np.repeat(v.astype(np.float64), rep, axis=1)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = s + (np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask)
    if causal:
        s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def _model(qs, ks, mask_shape=None, mask_type=TensorProto.FLOAT, **attrs):
    ins = [helper.make_tensor_value_info("Q", TensorProto.FLOAT, list(qs)),
           helper.make_tensor_value_info("K", TensorProto.FLOAT, list(ks)),
           helper.make_tensor_value_info("V", TensorProto.FLOAT, list(ks))]
    names = ["Q", "K", "V"]
    if mask_shape is not None:
        ins.append(helper.make_tensor_value_info("M", mask_type, list(mask_shape)))
        names.append("M")
    g = helper.make_graph([helper.make_node("Attention", names, ["Y"], **attrs)], "attn", ins,
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    return m.SerializeToString()


@pytest.mark.parametrize(
    "B, QH, KH, S, D, mask, causal",
    [(1, 3, 3, 37, 20, None, False), (2, 4, 4, 13, 8, "float", False), (1, 2, 2, 29, 16, "bool", False),
     (1, 4, 2, 21, 12, None, True), (1, 6, 2, 17, 40, "float", False)],
    ids=["plain", "float-mask", "bool-mask", "causal-gqa", "gqa-mask"],
)
def test_attention_matches_float64(rng, B, QH, KH, S, D, mask, causal) -> None:
    mshape = (B, 1, S, S) if mask else None
    mtype = TensorProto.BOOL if mask == "bool" else TensorProto.FLOAT
    model = ember.compile(_model((B, QH, S, D), (B, KH, S, D), mshape, mtype, is_causal=int(causal)),
                          target="llvm", use_cache=False)
    for _ in range(2):
        q = rng.standard_normal((B, QH, S, D)).astype(np.float32)
        k, v = (rng.standard_normal((B, KH, S, D)).astype(np.float32) for _ in range(2))
        feeds = {"Q": q, "K": k, "V": v}
        m = None
        if mask == "float":
            m = np.where(rng.random(mshape) < 0.3, -1e4, rng.standard_normal(mshape)).astype(np.float32)
        elif mask == "bool":
            m = rng.random(mshape) < 0.7
            m[..., 0] = True  # every row keeps one key
        if m is not None:
            feeds["M"] = m
        np.testing.assert_allclose(model(**feeds)[0], _attention_ref(q, k, v, m, causal), rtol=1e-5, atol=1e-5)


def test_attention_3d_inputs(rng) -> None:
    B, S, H, D = 2, 11, 3, 8
    model = ember.compile(_model((B, S, H * D), (B, S, H * D), q_num_heads=H, kv_num_heads=H), target="llvm",
                          use_cache=False)
    q, k, v = (rng.standard_normal((B, S, H * D)).astype(np.float32) for _ in range(3))

    def heads(t):
        return t.reshape(B, S, H, D).transpose(0, 2, 1, 3)

    ref = _attention_ref(heads(q), heads(k), heads(v)).transpose(0, 2, 1, 3).reshape(B, S, H * D)
    np.testing.assert_allclose(model(Q=q, K=k, V=v)[0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "scalar"])
def test_inline_float32_exp_is_correctly_rounded(vector) -> None:
    bits = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 88.72283, 88.72284, -103.97208, -87.33655], np.float32)
    grid = np.concatenate([bits[~np.isnan(bits)], edges])
    x = te.placeholder((grid.size,), name="x")
    y = te.compute((grid.size,), lambda i: te.exp(x[i]), name="y")
    s = te.create_schedule(y.op)
    if vector:
        s[y].vectorize(s[y].split(y.op.axis[0], factor=16)[1])
    f = ember.build(s, [x, y], target="llvm", name="vexp")
    out = np.full(grid.shape, 7.0, np.float32)
    f(grid, out)
    with np.errstate(over="ignore", under="ignore"):
        ref = np.exp(grid.astype(np.float64))
        ref32 = ref.astype(np.float32)
    normal = np.isfinite(ref32) & (ref32 != 0)
    err = np.abs(out[normal].astype(np.float64) - ref[normal]) / np.spacing(ref32[normal]).astype(np.float64)
    assert err.max() <= 0.5 + 1e-6
    edge = ~normal & ~np.isnan(grid)
    np.testing.assert_array_equal(out[edge], ref32[edge])
    assert np.isnan(out[np.isnan(grid)]).all()
