"""Networks the torch backend tests compile: a small conv net, ResNet-18 (torchvision's when it
imports, else the same architecture written out here), and a small BERT encoder from
transformers with random weights."""

from __future__ import annotations

import torch
from torch import nn


class SmallConvNet(nn.Module):
    """Conv + batch norm + ReLU + pooling + linear, and a second output (a mean)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 3 * 4, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(y, 1)), y.mean()


class _BasicBlock(nn.Module):
    def __init__(self, inp: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inp != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class _ResNet18(nn.Module):
    """torchvision's resnet18 architecture (BasicBlock, [2, 2, 2, 2])."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        chans = [64, 64, 128, 256, 512]
        stages = []
        for i in range(4):
            first = _BasicBlock(chans[i], chans[i + 1], 1 if i == 0 else 2)
            stages.append(nn.Sequential(first, _BasicBlock(chans[i + 1], chans[i + 1])))
        self.layers = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.maxpool(self.relu(self.bn1(self.conv1(x)))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def randomize_bn(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give every batch norm non-trivial statistics (fresh ones are mean 0, var 1), so that
    folding them is tested."""
    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return module


def resnet18() -> tuple[nn.Module, str]:
    """ResNet-18 with random weights in eval mode, and where it comes from."""
    torch.manual_seed(0)
    try:
        import torchvision

        net, origin = torchvision.models.resnet18(weights=None), f"torchvision {torchvision.__version__}"
    except (ImportError, RuntimeError):  # not installed, or a build for another torch
        net, origin = _ResNet18(), "tests/torch_backend/torch_nets.py (torchvision's architecture)"
    return randomize_bn(net).eval(), origin


def small_bert(hidden: int = 64, layers: int = 2, vocab: int = 500) -> nn.Module:
    """A BERT encoder from transformers with random weights, eval mode."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                                  intermediate_size=2 * hidden, vocab_size=vocab, max_position_embeddings=64)
    return transformers.BertModel(cfg).eval()
