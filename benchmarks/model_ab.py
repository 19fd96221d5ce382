"""Wall time of one goal network in this source tree — BERT-base (seq 128, batch 1) in fp32 or
fp16, or ResNet-50 fp32 (batch 1) — an A/B helper for runtime and code-generation changes, run
once per tree, alternating, in one device session (``scripts/gpu_ab.sh``).

    python benchmarks/model_ab.py export DIR                 # once: the three ONNX files into DIR
    python benchmarks/model_ab.py time DIR LABEL [MODEL]     # in each tree: compile, then 5 medians

MODEL is ``fp32`` (BERT-base, the default), ``fp16`` (BERT-base converted to float16) or
``resnet50`` (torchvision-style ResNet-50 from ``tests/models/nets.py``, batch norms randomised).
Each median is of 60 calls (BERT) or 100 (ResNet-50), each followed by a device synchronisation,
after 20 warm-up calls. Prints one JSON line per ``time`` run: the label, the model, the cold
compile seconds (a fresh ``EMBER_CACHE_DIR`` makes it cold; ``gpu_ab.sh`` gives each tree its
own), the medians in ms and the host (CPU model, vector features). ``benchmarks/bert_ab.py`` is
the same command under its earlier name. Needs PyTorch and transformers for ``export``, an
NVIDIA GPU for ``time``.
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
    """Export a randomly initialised BERT-base (12 layers) as ``directory/bert_fp32.onnx``, its
    float16 conversion (``tensorcore_models.to_float16``) as ``directory/bert_fp16.onnx`` and a
    ResNet-50 with randomised batch norms as ``directory/resnet50_fp32.onnx`` (on the GPU when
    there is one, else on the CPU: the files are the same)."""
    import onnx
    import torch
    from tensorcore_models import _export, bert_wrapper, to_float16
    from transformers import BertConfig, BertModel

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    cfg = BertConfig(num_hidden_layers=12)
    wrapper = bert_wrapper(BertModel(cfg).eval().to(dev))
    ids = torch.randint(0, cfg.vocab_size, (1, 128), device=dev)
    fp32 = _export(wrapper, (ids, torch.ones_like(ids)), directory / "bert_fp32.onnx",
                   ["input_ids", "attention_mask"], ["last_hidden_state"])
    onnx.save(to_float16(onnx.load(str(fp32))), str(directory / "bert_fp16.onnx"))
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "models"))
    from nets import randomize_bn, resnet50

    net = resnet50().eval()
    randomize_bn(net)
    _export(net, (torch.randn(1, 3, 224, 224),), directory / "resnet50_fp32.onnx", ["input"], ["output"])
    return fp32


#: the models ``time`` knows: ONNX file in the export directory, calls per median
MODELS = {"fp32": ("bert_fp32.onnx", 60), "fp16": ("bert_fp16.onnx", 60), "resnet50": ("resnet50_fp32.onnx", 100)}


def timed(directory: Path, label: str, model_name: str = "fp32", rounds: int = 5) -> dict:
    """Compile the ONNX file of ``model_name`` (:data:`MODELS`) in ``directory`` for cuda and
    time ``rounds`` medians of its calls."""
    import numpy as np

    import ember

    fname, calls = MODELS[model_name]
    t0 = time.perf_counter()
    model = ember.compile(str(directory / fname), target="cuda")
    compile_s = time.perf_counter() - t0
    dev = ember.cuda(0)
    rng = np.random.default_rng(0)
    if model_name == "resnet50":
        feeds = {"input": ember.nd.array(rng.standard_normal((1, 3, 224, 224)).astype("float32"), dev)}
    else:
        feeds = {"input_ids": ember.nd.array(rng.integers(0, 30000, (1, 128)).astype("int64"), dev),
                 "attention_mask": ember.nd.array(np.ones((1, 128), "int64"), dev)}
    medians = [round(median_ms(lambda: model.run_on_device(**feeds), dev.sync, 20, calls), 4) for _ in range(rounds)]
    return {"label": label, "model": model_name, "dtype": "fp16" if model_name == "fp16" else "fp32",
            "compile_s": round(compile_s, 1), "wall_ms_medians": medians, "host": machine()}


def main() -> int:
    """Run the sub-command named on the command line; returns an exit code."""
    if (len(sys.argv) < 3 or sys.argv[1] not in ("export", "time") or (sys.argv[1] == "time" and len(sys.argv) < 4)
            or (sys.argv[1] == "time" and len(sys.argv) > 5) or (sys.argv[4:] and sys.argv[4] not in MODELS)):
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
