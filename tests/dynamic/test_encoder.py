"""A transformer encoder exported with its batch and sequence length symbolic (a small BERT from a
``transformers`` config, random weights): the attention mask, the position ids sliced to the
sequence length and the head reshapes all follow the call's sizes. Against ONNX Runtime at several
(batch, sequence) sizes, float32, max error relative to the largest output magnitude <= 1e-4."""

from __future__ import annotations

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch", reason="the encoder is exported with torch")
transformers = pytest.importorskip("transformers", reason="the encoder is built from a transformers config")
ort = pytest.importorskip("onnxruntime", reason="the encoder is compared with ONNX Runtime")


@pytest.fixture(scope="module")
def encoder_path(tmp_path_factory: pytest.TempPathFactory):
    cfg = transformers.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    bert = transformers.BertModel(cfg).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    path = tmp_path_factory.mktemp("encoder") / "bert_dynamic.onnx"
    ids = torch.zeros(1, 8, dtype=torch.long)
    torch.onnx.export(Encoder(), (ids, torch.ones_like(ids)), str(path), input_names=["input_ids", "attention_mask"],
                      output_names=["hidden"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                    "hidden": {0: "batch", 1: "seq"}})
    return path


@pytest.mark.long
def test_encoder_with_symbolic_batch_and_sequence(encoder_path, rng) -> None:
    model = ember.compile(str(encoder_path))
    assert [s.shape for s in model.inputs] == [("batch", "seq"), ("batch", "seq")]
    sess = ort.InferenceSession(str(encoder_path), providers=["CPUExecutionProvider"])
    for b, s in [(1, 7), (3, 19), (2, 1), (1, 64), (2, 33)]:
        ids = rng.integers(0, 500, (b, s)).astype(np.int64)
        mask = np.ones((b, s), np.int64)
        mask[0, s // 2 + 1:] = 0  # padding in the first sequence
        got = model(ids, mask)[0]
        want = sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        assert got.shape == want.shape == (b, s, 64)
        assert float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()) <= 1e-4
    # compiled once for every size (ember.model.symbolic): the token types repeated, the positions
    # cut from the table, the mask's flat indices made per size; a sequence of one token (where
    # the graph changes form) compiles its own variant
    spec = model._specializer
    assert spec.symbolic_status == "built" and spec.symbolic.lo[1] <= 2 and spec.symbolic.hi[1] == 64
    assert model.variants == [{"input_ids": (2, 1), "attention_mask": (2, 1)}]
    with pytest.raises(ember.ArgumentError, match="'seq'"):
        model(np.zeros((1, 5), np.int64), np.ones((1, 6), np.int64))
    with pytest.raises(ember.ArgumentError, match=r"does not accept the input shapes .*\(1, 65\)"):
        model(np.zeros((1, 65), np.int64), np.ones((1, 65), np.int64))  # 64 positions
