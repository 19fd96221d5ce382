"""The model compiler's float32 products on the GPU, one tiling at a time, against cuBLAS.

Each case is a one-node ONNX MatMul ``[rows, M, K] @ [K, N]`` (a constant right operand, as in a
transformer's linear layers) compiled for ``cuda`` by ``ember.compile``; its kernels are timed by
CUPTI through ``torch.profiler`` (the sum of the GPU time of the kernels of one run: launch gaps
are not counted, so the figure is the schedule's), next to ``torch.matmul`` timed the same way
with TF32 off. ``--tiles`` restricts the packed GEMM's tilings to one at a time (the strategy's
:data:`~ember.strategy.gpu.GEMM_TILES`, with no ``LARGE_TILE`` or ``XL_TILE``), so each tiling of each shape is
measured as the default heuristic would run it (split-K included); ``--stages`` fixes the
software pipeline's depth (``PIPELINE_STAGES``).

    python benchmarks/packed_gemm_gpu.py [--tiles 128x128x8x8,64x64x4x4] [--stages 1,2,3] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable

import numpy as np

import ember
import ember.strategy.gpu as gpu_strategy

#: (rows, M, K, N): BERT-base's products at sequence 128 and ResNet-like late-layer GEMMs.
SHAPES = (
    (1, 128, 768, 768),
    (1, 128, 768, 3072),
    (1, 128, 3072, 768),
    (1, 512, 1024, 1024),
    (1, 2048, 2048, 2048),
    (12, 128, 64, 128),
    (1, 4096, 4096, 4096),
)


def _model(rows: int, m: int, k: int, n: int, rng: np.random.Generator) -> tuple[bytes, np.ndarray, np.ndarray]:
    from onnx import TensorProto, helper, numpy_helper

    w = rng.standard_normal((k, n)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    mod = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mod.ir_version = 8
    return mod.SerializeToString(), w, rng.standard_normal((rows, m, k)).astype(np.float32)


def _gpu_us(fn: Callable[[], object], iters: int) -> float:
    """The GPU time of the kernels ``fn`` launches, per call (CUPTI), after a warm-up."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    total = sum(ev.device_time_total for ev in prof.events() if ev.device_type.name == "CUDA")
    return total / iters


def _parse_tiles(text: str) -> list[tuple[int, int, int, int]]:
    return [tuple(int(v) for v in t.split("x")) for t in text.split(",") if t]  # type: ignore[misc]


def main() -> int:
    """Measure every shape of :data:`SHAPES` at every tiling of ``--tiles``; print and write JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", default="", help="BMxBNxTMxTN,... (default: the strategy's heuristic only)")
    ap.add_argument("--stages", default="", help="pipeline stage counts to try, e.g. 1,2,3 (default: the heuristic's)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = ember.cuda(0)
    rng = np.random.default_rng(0)
    tilings: list[tuple[int, int, int, int] | None] = [None, *_parse_tiles(args.tiles)]
    stage_counts: list[int | None] = [None, *(int(v) for v in args.stages.split(",") if v)]
    variants = [(None, None)] + [(t, st) for t in tilings[1:] for st in (stage_counts[1:] or [None])]
    default_tiles, default_large, default_xl = gpu_strategy.GEMM_TILES, gpu_strategy.LARGE_TILE, gpu_strategy.XL_TILE
    default_stages = gpu_strategy.PIPELINE_STAGES
    rows_out = []
    for rows, m, k, n in SHAPES:
        onnx_bytes, w, x = _model(rows, m, k, n, rng)
        ref = x.astype(np.float64) @ w.astype(np.float64)
        tx, tw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
        t_torch = _gpu_us(lambda tx=tx, tw=tw: torch.matmul(tx, tw), args.iters)
        flops = 2.0 * rows * m * k * n
        for tiling, stages in variants:
            if tiling is not None:
                gpu_strategy.GEMM_TILES, gpu_strategy.LARGE_TILE, gpu_strategy.XL_TILE = (tiling,), None, None
            gpu_strategy.PIPELINE_STAGES = default_stages if stages is None else stages
            try:
                model = ember.compile(onnx_bytes, target="cuda", use_cache=False)
            finally:
                gpu_strategy.GEMM_TILES, gpu_strategy.LARGE_TILE = default_tiles, default_large
                gpu_strategy.XL_TILE = default_xl
                gpu_strategy.PIPELINE_STAGES = default_stages
            ex = ember.nd.array(x, dev)
            out = model.run_on_device(x=ex)
            got = (out[0] if isinstance(out, (list, tuple)) else out).numpy()
            err = float(np.abs(got - ref).max() / np.abs(ref).max())
            t = _gpu_us(lambda model=model, ex=ex: model.run_on_device(x=ex), args.iters)
            name = "default" if tiling is None else "x".join(map(str, tiling)) + f"/s{stages or 'auto'}"
            row = {"shape": [rows, m, k, n], "tiling": name,
                   "ember_us": t, "cublas_us": t_torch, "ratio": t / t_torch, "ember_TFLOPs": flops / t / 1e6,
                   "cublas_TFLOPs": flops / t_torch / 1e6, "max_rel_err": err, "kernels": model.num_kernels}
            rows_out.append(row)
            print(f"{rows}x{m}x{k}x{n:<6} {row['tiling']:>15}: ember {t:8.1f} us ({row['ember_TFLOPs']:5.1f} TFLOP/s)"
                  f"  cuBLAS {t_torch:8.1f} us  ratio {t / t_torch:5.2f}  err {err:.1e}", flush=True)
    if args.json:
        info = {"device": dev.attributes["device_name"], "torch": torch.__version__,
                "python": platform.python_version(),
                "date": time.strftime("%Y-%m-%d %H:%M:%S"), "timing": "CUPTI kernel time per call (torch.profiler)",
                "tf32": False, "results": rows_out}
        with open(args.json, "w") as f:
            json.dump(info, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
