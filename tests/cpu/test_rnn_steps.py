"""Recurrent layers as GEMM steps (ember.graph.recurrent.ExpandRecurrent) against ONNX Runtime,
and the unrolled reference operators (the pass disabled) on the same cases.

Sizes no tile divides (T=7, B=3, I=5, H=6); every output is compared (max abs error <= 1e-5:
float32 sums of at most I+H=11 products per gate and 7 steps, ORT accumulating in another order)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.frontend.onnx import import_onnx
from ember.graph.passes import InferAndFold
from ember.graph.recurrent import expand_recurrent
from ember.transform import PassContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rnn_models import crnn_standin, rnn_model  # noqa: E402

ort = pytest.importorskip("onnxruntime")

TOL = 1e-5

CASES = [
    dict(),
    dict(direction="reverse"),
    dict(direction="bidirectional", with_init=True, peep=True),
    dict(seq=[7, 3, 5], direction="bidirectional"),
    dict(seq=[7, 2, 4], seq_const=True, direction="bidirectional", with_init=True),
    dict(clip=0.5),
    dict(outputs=(True, False, True)),
    dict(op="GRU"),
    dict(op="GRU", lbr=1, direction="bidirectional", seq=[5, 7, 1]),
    dict(op="GRU", direction="reverse", with_init=True),
    dict(op="GRU", seq=[3, 7, 7], with_init=True, direction="bidirectional"),
    dict(op="RNN", direction="bidirectional", seq=[2, 7, 6]),
    dict(op="RNN", acts=["Relu", "Tanh"], direction="bidirectional"),
]


def _ids(c: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in c.items()) or "lstm"


def _ort(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _check(got, ref) -> None:
    got = got if isinstance(got, (list, tuple)) else [got]
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        a = np.asarray(a)
        assert a.shape == b.shape
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_expanded_matches_onnxruntime(case: dict) -> None:
    m, feeds = rnn_model(**case)
    _check(ember.compile(m, use_cache=False)(**feeds), _ort(m, feeds))


@pytest.mark.parametrize(
    "case", [CASES[3], CASES[11], pytest.param(CASES[8], marks=pytest.mark.long)], ids=_ids
)
def test_reference_operators_match_onnxruntime(case: dict) -> None:
    """The unrolled operators of ember.ops.rnn (what runs without the pass), sequence_lens included."""
    m, feeds = rnn_model(**case)
    with PassContext(disabled_passes=["ExpandRecurrent"]):
        model = ember.compile(m, use_cache=False)
    _check(model(**feeds), _ort(m, feeds))


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_layout_1_is_layout_0_transposed(op: str) -> None:
    """ONNX Runtime has no layout=1; the same weights and inputs in layout 0 are the reference."""
    kw = dict(op=op, direction="bidirectional", seq=[7, 4, 6], with_init=True)
    m1, f1 = rnn_model(layout=1, **kw)
    m0, f0 = rnn_model(layout=0, **kw)
    f0 = {k: (np.swapaxes(v, 0, 1) if k in ("X", "h0", "c0") else v) for k, v in f1.items()}
    ref = _ort(m0, f0)
    got = ember.compile(m1, use_cache=False)(**f1)
    _check([np.transpose(got[0], (1, 2, 0, 3))] + [np.swapaxes(g, 0, 1) for g in got[1:]], ref)


def test_each_step_is_one_gemm_over_held_state() -> None:
    """The expanded graph: one input product per direction, one recurrent product and one cell per
    step and direction, no recurrent node left; each cell reads the previous cell's state."""
    T = 7
    m, _ = rnn_model(direction="bidirectional", T=T)
    g = expand_recurrent(InferAndFold()(import_onnx(m)))
    ops = [n.op for n in g.nodes]
    assert "LSTM" not in ops
    assert ops.count("MatMul") == 2 * (1 + T)
    assert ops.count("ember.LSTMCell") == 2 * T
    cells = [n for n in g.nodes if n.op == "ember.LSTMCell"]
    produced = {o for n in cells for o in n.outputs}
    assert sum(1 for n in cells if n.inputs[1] in produced) == 2 * (T - 1)  # c_prev: the last step's


def test_standin_crnn_matches_onnxruntime() -> None:
    """A small version of the benchmark's stand-in: CNN, bidirectional LSTM, classifier."""
    m, feeds = crnn_standin(T=9, H=24, classes=11)
    ref = _ort(m, feeds)[0]
    out = ember.compile(m, use_cache=False)(**feeds)
    got = np.asarray(out[0] if isinstance(out, (list, tuple)) else out)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * np.abs(ref).max())
