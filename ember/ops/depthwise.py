"""Depthwise 2-D convolution (``group == in_channels``), as MobileNet and EfficientNet use it.

:func:`depthwise_conv2d` builds the convolution so the schedules can make it fast: the padded
input is its own stage (flagged ``workspace``: computed once into a buffer the memory plan
provides, so the convolution reads it without bounds tests; ``constant_layout``: folded at compile
time when the input is a constant), and the convolution stage (``tag == "conv_dw"``) reads one
input channel per output channel. The CPU strategy (:mod:`ember.strategy.cpu_gemm`) vectorizes it
along the output row with the kernel taps outermost; the GPU strategy runs one output per thread.
"""

from __future__ import annotations

from typing import Any

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .transform import pad_tensor
from .util import compute, shape, uname


def is_depthwise(x: Tensor, w: Tensor, groups: int) -> bool:
    """True for a 2-D convolution with one input channel per group (``group == C``)."""
    sx, sw = shape(x), shape(w)
    return len(sx) == 4 and groups == sx[1] and groups > 1 and sw[1] == 1 and sw[0] % groups == 0


def depthwise_conv2d(
    x: Tensor,
    w: Tensor,
    bias: Tensor | None,
    strides: list[int],
    dil: list[int],
    lo: list[int],
    hi: list[int],
) -> Tensor:
    """``out[n, m, oh, ow] = sum_{r, q} xpad[n, m // mult, oh*s0 + r*d0, ow*s1 + q*d1] * w[m, 0, r, q]
    (+ bias[m])`` with ``mult = M / C`` output channels per input channel; NCHW."""
    N, C, H, W = shape(x)
    M, _, KH, KW = shape(w)
    mult = M // C
    OH = (H + lo[0] + hi[0] - ((KH - 1) * dil[0] + 1)) // strides[0] + 1
    OW = (W + lo[1] + hi[1] - ((KW - 1) * dil[1] + 1)) // strides[1] + 1
    xp = x
    if any(lo) or any(hi):
        xp = pad_tensor(x, [0, 0] + list(lo), [0, 0] + list(hi))
        xp = compute(shape(xp), lambda *i: xp[i], name=uname("dw_pad"), constant_layout=True, workspace=True)
    rr = te.reduce_axis((0, KH), name="rr")
    rq = te.reduce_axis((0, KW), name="rq")

    def body(n: Any, m: Any, oh: Any, ow: Any) -> Any:
        c = E.floordiv(m, mult) if mult > 1 else m
        v = xp[n, c, oh * strides[0] + rr.var * dil[0], ow * strides[1] + rq.var * dil[1]]
        return te.sum(v * w[m, 0, rr.var, rq.var], axis=[rr, rq])

    attrs = {"strides": strides, "dilations": dil, "pads": (lo, hi), "groups": C}
    out = compute((N, M, OH, OW), body, name=uname("conv_dw"), tag="conv_dw", attrs=attrs)
    if bias is None:
        return out
    return compute(shape(out), lambda n, m, oh, ow: out[n, m, oh, ow] + bias[m], name=uname("conv_bias"))
