"""BERT-base (seq 128, batch 1) wall time of ember in this source tree, fp32 or fp16: an A/B
helper for runtime and code-generation changes, run once per tree, alternating, in one device
session.

    python benchmarks/bert_ab.py export DIR             # once: DIR/bert_fp32.onnx and DIR/bert_fp16.onnx
    python benchmarks/bert_ab.py time DIR LABEL [fp16]  # in each tree: compile, then 5 medians of 60 calls

Prints one JSON line per ``time`` run: the label, the cold compile seconds, the medians (ms) of
calls each followed by a device synchronisation, and the host (CPU model, vector features).
Needs PyTorch and transformers for ``export``, an NVIDIA GPU for ``time``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

from common import machine, median_ms  # noqa: E402


def export(directory: Path) -> Path:
    """Export a randomly initialised BERT-base (12 layers) as ``directory/bert_fp32.onnx`` and its
    float16 conversion (``tensorcore_models.to_float16``) as ``directory/bert_fp16.onnx``."""
    import onnx
    import torch
    from tensorcore_models import _export, bert_wrapper, to_float16
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(num_hidden_layers=12)
    wrapper = bert_wrapper(BertModel(cfg).eval().cuda())
    ids = torch.randint(0, cfg.vocab_size, (1, 128), device="cuda")
    fp32 = _export(wrapper, (ids, torch.ones_like(ids)), directory / "bert_fp32.onnx",
                   ["input_ids", "attention_mask"], ["last_hidden_state"])
    onnx.save(to_float16(onnx.load(str(fp32))), str(directory / "bert_fp16.onnx"))
    return fp32


def timed(directory: Path, label: str, dtype: str = "fp32", rounds: int = 5, calls: int = 60) -> dict:
    """Compile ``directory/bert_{dtype}.onnx`` for cuda and time ``rounds`` medians of ``calls`` calls."""
    import numpy as np

    import ember

    t0 = time.perf_counter()
    model = ember.compile(str(directory / f"bert_{dtype}.onnx"), target="cuda")
    compile_s = time.perf_counter() - t0
    dev = ember.cuda(0)
    rng = np.random.default_rng(0)
    feeds = {"input_ids": ember.nd.array(rng.integers(0, 30000, (1, 128)).astype("int64"), dev),
             "attention_mask": ember.nd.array(np.ones((1, 128), "int64"), dev)}
    medians = [round(median_ms(lambda: model.run_on_device(**feeds), dev.sync, 20, calls), 4) for _ in range(rounds)]
    return {"label": label, "dtype": dtype, "compile_s": round(compile_s, 1), "wall_ms_medians": medians,
            "host": machine()}


def main() -> int:
    """Run the sub-command named on the command line; returns an exit code."""
    if (len(sys.argv) < 3 or sys.argv[1] not in ("export", "time") or (sys.argv[1] == "time" and len(sys.argv) < 4)
            or sys.argv[4:] not in ([], ["fp16"], ["fp32"])):
        print(__doc__)
        return 2
    directory = Path(sys.argv[2])
    if sys.argv[1] == "export":
        print("exported", export(directory))
    else:
        print(json.dumps(timed(directory, sys.argv[3], *sys.argv[4:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
