"""The torch backend on an NVIDIA GPU: outputs against eager PyTorch, torch's current stream,
the shared primary context, outputs from torch's caching allocator.

TF32 is turned off in PyTorch for the comparisons (ember computes float32 exactly unless asked
for ``precision="tf32"``); the tolerance is then the float32 one of the CPU tests (1e-4 of the
output's magnitude: other summation orders, no wrong element)."""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

import ember  # noqa: E402
from ember.torch_backend import from_torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from torch_nets import SmallConvNet, randomize_bn, resnet18, small_bert  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda():
    """torch's cuda:0 with TF32 off, or a skip naming why there is none."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    from ember.runtime import cuda_driver

    try:
        if cuda_driver.device_count() == 0:
            pytest.skip("the NVIDIA driver sees no GPU")
    except ember.DeviceError as exc:
        pytest.skip(f"no NVIDIA driver: {exc}")
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def close(got: torch.Tensor, want: torch.Tensor, rtol: float = 1e-4) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype and got.device == want.device
    scale = max(float(want.abs().max()), 1e-6)
    err = float((got.double() - want.double()).abs().max())
    assert err <= rtol * scale, f"max error {err} vs scale {scale}"


def test_ember_and_torch_share_the_primary_context(cuda):
    from ember.runtime import cuda_driver

    torch.zeros(1, device=cuda)  # torch's context is current in this thread now
    torch_ctx = cuda_driver.current_context()
    assert torch_ctx != 0
    assert cuda_driver.primary_context(0) == torch_ctx


@pytest.mark.parametrize("graphs", [True, False])
def test_small_conv_net_on_cuda(cuda, graphs):
    torch.manual_seed(1)
    net = randomize_bn(SmallConvNet()).eval().to(cuda)
    x = torch.randn(2, 3, 7, 9, device=cuda)
    m = from_torch(net, x, cuda_graphs=graphs)
    assert m.model.device == ember.cuda(0)
    with torch.no_grad():
        for _ in range(3):  # the capture call and replays
            x.normal_()
            got, want = m(x), net(x)
            for g, w in zip(got, want):
                close(g, w)


def test_work_goes_on_torch_current_stream(cuda):
    """Inputs produced late on a side stream are read after they are ready, outputs are ready
    for the next op on that stream, with no synchronisation in between."""
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)).eval().to(cuda)
    m = from_torch(net, torch.randn(256, 512, device=cuda))
    big = torch.randn(4096, 4096, device=cuda)
    side = torch.cuda.Stream()
    for k in range(4):  # first call (capture), then replays
        with torch.cuda.stream(side), torch.no_grad():
            slow = big @ big  # keeps the stream busy
            x = torch.randn(256, 512, device=cuda) + slow[:256, :512] * 0
            y = m(x) * 1.0  # a torch op after ember's, same stream
        side.synchronize()
        close(y, net(x).detach())
        assert k >= 0


def test_outputs_come_from_torch_caching_allocator(cuda):
    net = torch.nn.Linear(300, 200).eval().to(cuda)
    x = torch.randn(64, 300, device=cuda)
    m = from_torch(net, x)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(cuda)
    with torch.no_grad():
        y = m(x)
    assert torch.cuda.memory_allocated(cuda) - before >= y.numel() * 4
    close(y, net(x).detach())


def test_resnet18_on_cuda(cuda):
    net, _ = resnet18()
    net = net.to(cuda)
    x = torch.randn(2, 3, 224, 224, device=cuda)
    compiled = torch.compile(net, backend="ember")
    with torch.no_grad():
        close(compiled(x), net(x))
        x2 = torch.randn(2, 3, 224, 224, device=cuda)
        close(compiled(x2), net(x2))  # a replay with new data


def test_bert_encoder_on_cuda(cuda):
    pytest.importorskip("transformers")
    bert = small_bert().to(cuda)
    ids = torch.randint(0, 500, (2, 13), device=cuda)
    mask = torch.ones(2, 13, dtype=torch.int64, device=cuda)
    mask[1, 9:] = 0
    m = from_torch(bert, (ids, mask))
    with torch.no_grad():
        got, want = m(ids, mask), bert(ids, mask)
    close(got.last_hidden_state, want.last_hidden_state)
    close(got.pooler_output, want.pooler_output)
