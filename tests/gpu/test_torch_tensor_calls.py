"""A built CUDA kernel called with PyTorch tensors: read in place on torch's default stream (no
DLPack capsule per call), the general DLPack path for everything else (a side stream, a
non-contiguous view, a dtype or shape that does not match)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ArgumentError

pytestmark = pytest.mark.gpu


def _scaled_add(n: int):
    a = te.placeholder((n,), name="a")
    b = te.placeholder((n,), name="b")
    c = te.compute((n,), lambda i: a[i] * 2.0 + b[i], name="c")
    s = te.create_schedule(c.op)
    bx, tx = s[c].split(c.op.axis[0], factor=128)
    s[c].bind(bx, te.thread_axis("blockIdx.x"))
    s[c].bind(tx, te.thread_axis("threadIdx.x"))
    return ember.build(s, [a, b, c], target="cuda", use_cache=False)


def test_torch_tensors_in_place_and_through_dlpack(torch_cuda) -> None:
    torch = torch_cuda
    n = 1000  # no multiple of the 128-thread blocks
    f = _scaled_add(n)
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    want = (a.double() * 2 + b.double()).cpu().numpy()
    c = torch.full((n,), float("nan"), device="cuda")
    f(a, b, c)  # the in-place path: torch's default stream
    torch.cuda.synchronize()
    np.testing.assert_allclose(c.cpu().numpy(), want, rtol=1e-6)

    side = torch.cuda.Stream()
    c.fill_(float("nan"))
    with torch.cuda.stream(side):  # not the default stream: the DLPack path orders the streams
        f(a, b, c)
    torch.cuda.synchronize()
    np.testing.assert_allclose(c.cpu().numpy(), want, rtol=1e-6)

    wide = torch.randn(n, 2, device="cuda")
    c.fill_(float("nan"))
    f(wide[:, 0].contiguous(), b, c)
    torch.cuda.synchronize()
    np.testing.assert_allclose(c.cpu().numpy(), (wide[:, 0].double() * 2 + b.double()).cpu().numpy(), rtol=1e-6)
    with pytest.raises(ArgumentError):
        f(a.double(), b, c)  # float64 for a float32 parameter: named by the general path
    with pytest.raises(ArgumentError):
        f(a[:999], b, c)  # a shape that does not match
