"""Networks on the GPU: ember next to PyTorch eager (cuDNN/cuBLAS), torch.compile (default mode) and
torch.compile ``mode="reduce-overhead"`` (CUDA graphs, the issue's bar), in one run on an NVIDIA GPU.

Cases: ResNet-50 (the seeded test network of ``tests/models/nets.py``) at batch 1 and 32, and
BERT-base (``transformers`` default config, random weights, sequence 128, batch 1), each exported
to ONNX in float16 from the CUDA model; with ``--fp32`` also ResNet-50 batch 1 and BERT-base in
float32 (TF32 off on both sides). ember's output is compared with PyTorch's (the largest
difference relative to the largest output, float16 on both sides). Times are medians of
CUDA-synchronised calls with inputs already on the device. Writes ``tensorcore_models.json`` and
``.md`` to ``--out``.

    python benchmarks/tensorcore_models.py --out benchmarks/results [--models DIR] [--quick] [--fp32] [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "models"))

from common import machine, median_ms, model_directory, torch_without_tf32, write_outputs  # noqa: E402

import ember  # noqa: E402


def _median_ms(fn: Any, sync: Any, warmup: int = 10, iters: int = 40) -> float:
    return median_ms(fn, sync, warmup, iters)


def _export(model: Any, inputs: tuple, path: Path, names: list[str], outs: list[str]) -> Path:
    import torch

    if not path.exists():
        tmp = path.with_suffix(".tmp")
        torch.onnx.export(model, inputs, str(tmp), input_names=names, output_names=outs, opset_version=17,
                          dynamo=False)
        os.replace(tmp, path)
    return path


def to_float16(model: Any) -> Any:
    """An fp32 ONNX model with every float32 tensor, constant, cast and input/output made float16
    (constants clipped to float16's range, so a mask's -3.4e38 becomes -65504, not -inf). The
    torch exporter's own float16 BERT is invalid ONNX (its LayerNormalization mixes float and
    float16; ONNX Runtime refuses to load it), so BERT is exported in float32 and converted."""
    import onnx
    from onnx import TensorProto, numpy_helper

    def half(t: Any) -> Any:
        a = np.clip(numpy_helper.to_array(t), -65504, 65504).astype(np.float16)
        return numpy_helper.from_array(a, t.name)

    g = model.graph
    for i, init in enumerate(g.initializer):
        if init.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(half(init))
    for node in g.node:
        for att in node.attribute:
            if att.type == onnx.AttributeProto.TENSOR and att.t.data_type == TensorProto.FLOAT:
                att.t.CopyFrom(half(att.t))
            if node.op_type == "Cast" and att.name == "to" and att.i == TensorProto.FLOAT:
                att.i = TensorProto.FLOAT16
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    return model


def bert_wrapper(bert: Any) -> Any:
    """``bert`` (a transformers ``BertModel``) as a module ``(input_ids, attention_mask) ->
    last_hidden_state`` in eval mode: the two-input, one-output form the ONNX exports use."""
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: Any, mask: Any) -> Any:
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    return Wrapper().eval()


def _cases(directory: Path, quick: bool, with_fp32: bool = False) -> list[tuple[str, Any, dict[str, Any], Path]]:
    import copy

    import torch
    from nets import randomize_bn, resnet50

    torch.manual_seed(0)
    net = resnet50().eval()
    randomize_bn(net)
    cases = []
    if with_fp32:
        net32 = copy.deepcopy(net).cuda()
        x = torch.randn(1, 3, 224, 224, device="cuda")
        path = _export(net32, (x,), directory / "resnet50_fp32_b1.onnx", ["input"], ["output"])
        cases.append(("resnet50_fp32_b1", net32, {"input": x}, path))
    net = net.cuda().half()
    for batch in ((1,) if quick else (1, 32)):
        x = torch.randn(batch, 3, 224, 224, device="cuda").half()
        path = _export(net, (x,), directory / f"resnet50_fp16_b{batch}.onnx", ["input"], ["output"])
        cases.append((f"resnet50_fp16_b{batch}", net, {"input": x}, path))
    from transformers import BertConfig, BertModel

    cfg = BertConfig(num_hidden_layers=2 if quick else 12)
    bert = BertModel(cfg).eval().cuda().half()

    wrapper = bert_wrapper(bert)
    ids = torch.randint(0, cfg.vocab_size, (1, 128), device="cuda")
    mask = torch.ones_like(ids)
    path = directory / f"bert_base_fp16_l{cfg.num_hidden_layers}.onnx"
    if not path.exists():
        import onnx

        fp32 = _export(wrapper.float(), (ids, mask), directory / f"bert_base_fp32_l{cfg.num_hidden_layers}.onnx",
                       ["input_ids", "attention_mask"], ["last_hidden_state"])
        onnx.save(to_float16(onnx.load(str(fp32))), str(path))
        wrapper.half()
    cases.append(("bert_base_fp16_seq128", wrapper, {"input_ids": ids, "attention_mask": mask}, path))
    if with_fp32:
        w32 = copy.deepcopy(wrapper).float()
        path32 = _export(w32, (ids, mask), directory / f"bert_base_fp32_l{cfg.num_hidden_layers}.onnx",
                         ["input_ids", "attention_mask"], ["last_hidden_state"])
        cases.append(("bert_base_fp32_seq128", w32, {"input_ids": ids, "attention_mask": mask}, path32))
    return cases


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--models", default=None, help="directory for the exported ONNX files (default: a temp dir)")
    ap.add_argument("--quick", action="store_true", help="batch 1 and a 2-layer BERT only")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--fp32", action="store_true", help="also ResNet-50 batch 1 and BERT-base in float32 (TF32 off)")
    ap.add_argument("--only", action="append", default=None, help="run only the named case (repeatable)")
    args = ap.parse_args()
    torch = torch_without_tf32()
    directory = model_directory(args.models, "ember-tc-models-")
    dev = ember.cuda(0)
    results: dict = {"device": dev.attributes["device_name"], "torch": torch.__version__, "host": machine(),
                     "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                     "timing": "median of 40 CUDA-synchronised calls, inputs on the device", "results": {}}
    lines = ["| model | ember ms | torch eager ms | torch.compile ms | reduce-overhead ms | ember / eager | "
             "ember / compile | ember / reduce-overhead | max rel diff vs torch | kernels | compile s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, net, feeds, path in _cases(directory, args.quick, args.fp32):
        if args.only and name not in args.only:
            continue
        os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-cache-")
        t0 = time.perf_counter()
        model = ember.compile(str(path), target="cuda")
        compile_s = time.perf_counter() - t0
        with torch.no_grad():
            want = net(*feeds.values()).float().cpu().numpy()
        host = {k: v.cpu().numpy() for k, v in feeds.items()}
        (got,) = model(**host)[:1]
        diff = float(np.abs(got.astype(np.float64) - want).max() / max(np.abs(want).max(), 1e-30))
        dev_feeds = {k: ember.nd.array(v, dev) for k, v in host.items()}
        t_ember = _median_ms(lambda m=model, f=dev_feeds: m.run_on_device(**f), dev.sync)
        with torch.no_grad():
            t_eager = _median_ms(lambda n=net, f=feeds: n(*f.values()), torch.cuda.synchronize)
            t_comp = t_ro = None
            if not args.no_compile:
                try:
                    comp = torch.compile(net)
                    t_comp = _median_ms(lambda c=comp, f=feeds: c(*f.values()), torch.cuda.synchronize, warmup=3)
                    torch._dynamo.reset()
                    ro = torch.compile(net, mode="reduce-overhead")
                    t_ro = _median_ms(lambda c=ro, f=feeds: c(*f.values()), torch.cuda.synchronize, warmup=5)
                    torch._dynamo.reset()
                except Exception as err:  # noqa: BLE001 - report, do not stop the benchmark
                    print(f"torch.compile failed on {name}: {err}", file=sys.stderr)
        prof = model.profile(**host)
        r = {"ember_ms": t_ember, "torch_eager_ms": t_eager, "torch_compile_ms": t_comp,
             "ember_over_eager": t_ember / t_eager, "ember_over_compile": t_ember / t_comp if t_comp else None,
             "torch_compile_reduce_overhead_ms": t_ro, "ember_over_reduce_overhead": t_ember / t_ro if t_ro else None,
             "max_rel_diff_vs_torch": diff,
             "kernels": len(model._program.functions) if model._program is not None else None,
             "compile_s_cold_cache": round(compile_s, 1),
             "slowest_kernels_ms": [(k, round(v * 1e3, 4)) for k, v in sorted(prof, key=lambda p: -p[1])[:8]]}
        results["results"][name] = r
        comp_s = f"{t_comp:.3f}" if t_comp else "n/a"
        ro_s = f"{t_ro:.3f}" if t_ro else "n/a"
        ratio_c = f"{t_ember / t_comp:.2f}" if t_comp else "n/a"
        ratio_ro = f"{t_ember / t_ro:.2f}" if t_ro else "n/a"
        lines.append(f"| {name} | {t_ember:.3f} | {t_eager:.3f} | {comp_s} | {ro_s} | {t_ember / t_eager:.2f} | "
                     f"{ratio_c} | {ratio_ro} | {diff:.1e} | {r['kernels']} | {r['compile_s_cold_cache']} |")
        print(name, json.dumps(r, indent=1), flush=True)
    print(write_outputs(args.out, "tensorcore_models", results, lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
