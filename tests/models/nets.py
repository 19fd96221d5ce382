"""Reference networks written in plain ``torch.nn`` (random weights) and their ONNX export:
ResNet-50, MobileNetV2 and the super-resolution network of PyTorch's ONNX tutorial. Used by the
model tests and benchmarks/models_cpu.py; needs torch (CPU build) and onnx."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _torch() -> Any:
    import torch

    return torch


def resnet50() -> Any:
    """torchvision's ResNet-50 architecture (bottleneck blocks 3-4-6-3), random weights."""
    nn = _torch().nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int, down: bool):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(width * 4)
            self.relu = nn.ReLU(inplace=True)
            self.down = (
                nn.Sequential(nn.Conv2d(cin, width * 4, 1, stride, bias=False), nn.BatchNorm2d(width * 4))
                if down
                else None
            )

        def forward(self, x: Any) -> Any:
            idt = x if self.down is None else self.down(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + idt)

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[Any] = [
                nn.Conv2d(3, 64, 7, 2, 3, bias=False),
                nn.BatchNorm2d(64),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(3, 2, 1),
            ]
            cin = 64
            for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for b in range(blocks):
                    layers.append(Bottleneck(cin, width, stride if b == 0 else 1, b == 0))
                    cin = width * 4
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x: Any) -> Any:
            x = self.features(x)
            x = _torch().flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
            return self.fc(x)

    return ResNet()


def mobilenet_v2() -> Any:
    """torchvision's MobileNetV2 architecture (inverted residuals, ReLU6), random weights."""
    nn = _torch().nn

    def cbr(cin: int, cout: int, k: int, s: int, groups: int = 1) -> Any:
        return nn.Sequential(
            nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=True),
        )

    class Inverted(nn.Module):
        def __init__(self, cin: int, cout: int, s: int, t: int):
            super().__init__()
            hid = cin * t
            layers = [] if t == 1 else [cbr(cin, hid, 1, 1)]
            layers += [cbr(hid, hid, 3, s, groups=hid), nn.Conv2d(hid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.conv = nn.Sequential(*layers)
            self.res = s == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            return x + self.conv(x) if self.res else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[Any] = [cbr(3, 32, 3, 2)]
            cin = 32
            for t, c, n, s in (
                (1, 16, 1, 1),
                (6, 24, 2, 2),
                (6, 32, 3, 2),
                (6, 64, 4, 2),
                (6, 96, 3, 1),
                (6, 160, 3, 2),
                (6, 320, 1, 1),
            ):
                for i in range(n):
                    layers.append(Inverted(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers.append(cbr(cin, 1280, 1, 1))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, 1000))

        def forward(self, x: Any) -> Any:
            x = self.features(x)
            x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
            return self.classifier(x)

    return MobileNetV2()


def super_resolution() -> Any:
    """The super-resolution network of PyTorch's ONNX export tutorial (upscale factor 3)."""
    nn = _torch().nn

    class SuperResolutionNet(nn.Module):
        def __init__(self, upscale_factor: int = 3):
            super().__init__()
            self.relu = nn.ReLU()
            self.conv1 = nn.Conv2d(1, 64, 5, 1, 2)
            self.conv2 = nn.Conv2d(64, 64, 3, 1, 1)
            self.conv3 = nn.Conv2d(64, 32, 3, 1, 1)
            self.conv4 = nn.Conv2d(32, upscale_factor**2, 3, 1, 1)
            self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

        def forward(self, x: Any) -> Any:
            x = self.relu(self.conv1(x))
            x = self.relu(self.conv2(x))
            x = self.relu(self.conv3(x))
            return self.pixel_shuffle(self.conv4(x))

    return SuperResolutionNet()


NETS = {
    "resnet50": (resnet50, (1, 3, 224, 224)),
    "mobilenet_v2": (mobilenet_v2, (1, 3, 224, 224)),
    "super_resolution": (super_resolution, (1, 1, 224, 224)),
}


def randomize_bn(model: Any, seed: int = 0) -> None:
    """Give batch-norm layers non-trivial statistics so folding them is really tested."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)


def export(name: str, directory: str | os.PathLike[str]) -> Path:
    """Build network ``name`` (seeded random weights), export it to ONNX in ``directory`` once."""
    torch = _torch()
    Path(directory).mkdir(parents=True, exist_ok=True)
    path = Path(directory) / f"{name}.onnx"
    if path.exists():
        return path
    make, shape = NETS[name]
    torch.manual_seed(0)
    model = make().eval()
    randomize_bn(model)
    x = torch.randn(*shape)
    tmp = path.with_suffix(".tmp")
    torch.onnx.export(
        model, (x,), str(tmp), input_names=["input"], output_names=["output"], opset_version=17, dynamo=False
    )
    os.replace(tmp, path)
    return path


def export_bert(directory: str | os.PathLike[str], seq: int = 32) -> Path:
    """A small BERT (2 layers, hidden 128, random weights) from a ``transformers`` config, exported
    with inputs ``input_ids`` and ``attention_mask`` of shape (1, seq)."""
    torch = _torch()
    from transformers import BertConfig, BertModel

    Path(directory).mkdir(parents=True, exist_ok=True)
    path = Path(directory) / f"bert_small_{seq}.onnx"
    if path.exists():
        return path
    cfg = BertConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    bert = BertModel(cfg).eval()

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: Any, mask: Any) -> Any:
            out = self.bert(input_ids=ids, attention_mask=mask)
            return out.last_hidden_state, out.pooler_output

    ids = torch.zeros(1, seq, dtype=torch.long)
    tmp = path.with_suffix(".tmp")
    torch.onnx.export(
        Wrapper(),
        (ids, torch.ones_like(ids)),
        str(tmp),
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state", "pooler_output"],
        opset_version=17,
        dynamo=False,
    )
    os.replace(tmp, path)
    return path
