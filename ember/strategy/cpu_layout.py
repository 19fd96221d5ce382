"""The CPU layout policy: which graph nodes run on channel-blocked (``NCHW[x]c``) tensors.

:class:`CPULayoutPolicy` answers the graph pass :class:`ember.graph.alter_layout.AlterLayout`
(as TVM's AlterOpLayout and ONNX Runtime's NCHWc transformer): a float32 2-D ``Conv`` with
constant weights runs as ``ember.ConvNCHWc`` (``group == 1``) or ``ember.DepthwiseConvNCHWc``
(one filter per channel) from :mod:`ember.ops.conv_nchwc`, reading and writing ``NCHW{x}c``
with ``x`` the target's float32 vector width (16 with AVX-512, 8 with AVX2, 4 on NEON — of
**the target**, never the host). Its weights are re-laid-out to ``OIHW{ib}i{x}o`` (depthwise:
``OIHW{x}o``) and its bias to ``C{x}c``; both are constants, so the graph pipeline computes them
at compile time. An input with fewer channels than ``x`` (an image's 3) is read in place, plain
``NCHW`` seen as one unpadded block ``NCHW{C}c`` (so a network's input needs no conversion
kernel: 55-90 us for a 224 x 224 image on one thread).

A float32 3x3 ``Conv`` with stride 1, dilation 1, ``group == 1`` and at least 16 input and output
channels runs as ``ember.WinogradConvNCHWc`` (:mod:`ember.ops.winograd_nchwc`) instead, on the
same layouts: F(4x4, 3x3) when the output has at least 9 tiles of 4 x 4 per image, else F(2x2,
3x3) when it has 9 tiles of 2 x 2 and at least 256 channels
(:meth:`CPULayoutPolicy.use_winograd`). Measured (one thread, AVX-512, through
``ember.compile``, weights cold in the caches as inside a network): the direct convolution takes
1.35 / 1.17 / 1.15 / 1.28 ms for ResNet-50's 56x56x64 / 28x28x128 / 14x14x256 / 7x7x512 layers,
Winograd 0.75 / 0.72 / 0.76 (F(4,3)) and 1.06 (F(2,3)); F(4,3) on 7x7 (2 x 2 tiles) 1.25: its
transformed weights (36/9 of the direct ones) stream from memory for 4 tiles each. At 16 and 32
channels (56x56, 28x28) F(4,3) is still 1.1-1.8x faster, so the threshold is one AVX-512 block.
``CPULayoutPolicy(target, winograd=False)`` keeps every convolution direct. Transformed weights
up to ``WINOGRAD_ROW_BY_ROW_BYTES`` (1 MiB) run row by row (``fused``), larger ones every tile
of a point at once (the weights are then read once).

On a target with VNNI, a ``QLinearConv`` with int8 weights runs as ``ember.QLinearConvNCHWc``, an
``ember.IntMaxPool`` as ``ember.MaxPoolNCHWc`` and a ``QLinearGlobalAveragePool`` as
``ember.QLinearGlobalAveragePoolNCHWc``, on ``NCHW{lanes}c`` bytes (``lanes`` the int32
lanes of ``vpdpbusd``; :func:`ember.ops.quant.qconv_layouts`): an int8 network's activations stay
blocked between its convolutions.

A global average or max pooling (a classifier's head) reads the blocked tensor too
(``ember.GlobalPoolNCHWc``), so only the pooled vector is converted back.

Everything else is left to the pass: the elementwise consumers (bias, residual add, ReLU,
Clip...) run in the same blocked layout when that is exact, and layout transforms appear only
where a node that is not placed (pooling, reshape, a grouped convolution) reads a blocked tensor.
"""

from __future__ import annotations

from typing import Any

from ..backends.cpu.dot4 import vnni_width
from ..ops.conv_nchwc import CONV_NCHWC, DEPTHWISE_NCHWC, GLOBAL_POOL_NCHWC, MAXPOOL_NCHWC
from ..ops.layout import CPULayout
from ..ops.layout_transform import LayoutSite, NodeLayouts, ValueLayout
from ..ops.quant import INT_MAXPOOL, qconv_layouts
from ..ops.winograd_nchwc import WINOGRAD_NCHWC
from ..target import Target
from .cpu_winograd import row_tile_rows, winograd_tile_rows

#: Winograd is chosen for 3x3 stride-1 convolutions with at least this many input and output
#: channels (see :meth:`CPULayoutPolicy.use_winograd`).
WINOGRAD_MIN_CHANNELS = 16
#: ... and at least this many output tiles per image (of 4 x 4 for F(4x4, 3x3), else of 2 x 2 for
#: F(2x2, 3x3)).
WINOGRAD_MIN_TILES = 9
#: F(2x2, 3x3) (outputs too small for 9 tiles of 4 x 4) needs this many input and output channels:
#: measured one thread, weights cold, 7x7: 512 channels 1.07 ms against 1.27 direct, 256 0.42
#: against 0.46, but 128 0.22 against 0.21 and 64 0.16 against 0.16 (8x8x32 0.15 against 0.13).
WINOGRAD_F2_MIN_CHANNELS = 256
#: Transformed weights up to this size run row by row (``fused=1``, see
#: :meth:`CPULayoutPolicy.winograd_attrs`).
WINOGRAD_ROW_BY_ROW_BYTES = 1 << 20


def _round_up(n: int, block: int) -> int:
    return -(-n // block) * block


class CPULayoutPolicy:
    """Blocked layouts for the convolutions of an ``llvm`` target (see the module docstring)."""

    def __init__(self, target: Target, winograd: bool = True) -> None:
        self.target = target
        self.block = max(1, target.vector_lanes(32))
        self.winograd = winograd

    def use_winograd(self, site: LayoutSite) -> int | None:
        """The Winograd tile ``m`` (F(m x m, 3 x 3), :mod:`ember.ops.winograd_nchwc`) for the
        ``Conv`` at ``site``, or None for the direct blocked convolution: Winograd when enabled
        (``winograd``), for a 3x3 kernel with stride 1, dilation 1, ``group == 1``, at least
        ``WINOGRAD_MIN_CHANNELS`` input and output channels; F(4x4, 3x3) with at least
        ``WINOGRAD_MIN_TILES`` output tiles of 4 x 4 per image (12 x 12 outputs and more), else
        F(2x2, 3x3) with at least as many tiles of 2 x 2 (6 x 6 and more) and
        ``WINOGRAD_F2_MIN_CHANNELS`` channels, else None."""
        if not self.winograd:
            return None
        x, w = site.inputs[0], site.inputs[1]
        assert x is not None and w is not None
        if tuple(w.shape[2:]) != (3, 3) or int(site.attrs.get("group", 1)) != 1:
            return None
        if any(int(v) != 1 for v in list(site.attrs.get("strides", [])) + list(site.attrs.get("dilations", []))):
            return None
        c, k = x.shape[1], w.shape[0]
        if min(c, k) < WINOGRAD_MIN_CHANNELS or not site.outputs or len(site.outputs[0].shape) != 4:
            return None
        oh, ow = site.outputs[0].shape[2], site.outputs[0].shape[3]
        if -(-oh // 4) * -(-ow // 4) >= WINOGRAD_MIN_TILES:
            return 4
        if min(c, k) >= WINOGRAD_F2_MIN_CHANNELS and -(-oh // 2) * -(-ow // 2) >= WINOGRAD_MIN_TILES:
            return 2
        return None

    def winograd_attrs(self, site: LayoutSite, tile: int) -> dict[str, Any]:
        """The attributes of the ``ember.WinogradConvNCHWc`` replacing the ``Conv`` at ``site``:
        its own, the tile ``m`` and the GEMM's register-tile rows (:func:`winograd_tile_rows`:
        the operator pads the tile count to a multiple of them)."""
        x, y = site.inputs[0], site.outputs[0]
        assert x is not None
        w = site.inputs[1]
        assert w is not None
        tiles_per_row = -(-y.shape[3] // tile)
        tiles = x.shape[0] * -(-y.shape[2] // tile) * tiles_per_row
        nr = CPULayout(self.target).gemm_panel_width("float32")
        u_bytes = (tile + 2) ** 2 * _round_up(x.shape[1], self.block) * _round_up(w.shape[0], nr) * 4
        if u_bytes <= WINOGRAD_ROW_BY_ROW_BYTES and row_tile_rows(tiles_per_row, nr, self.target) is not None:
            return dict(site.attrs, tile=tile, fused=1)
        return dict(site.attrs, tile=tile, tile_rows=winograd_tile_rows(tiles, nr, self.target))

    def layouts(self, site: LayoutSite) -> NodeLayouts | None:
        """``NodeLayouts`` placing a float32 2-D Conv with constant weights (``group == 1``, or
        depthwise with one filter per channel) and a float32 4-D global average or max pooling
        in ``NCHW{x}c``; None for every other node."""
        if site.op in ("QLinearConv", INT_MAXPOOL, "com.microsoft.QLinearGlobalAveragePool"):
            # int8 networks on VNNI: the convolutions read and write NCHW{lanes}c bytes
            return qconv_layouts(site, vnni_width(self.target))
        if site.op in ("GlobalAveragePool", "GlobalMaxPool"):
            x = site.inputs[0] if site.inputs else None
            if x is None or len(x.shape) != 4 or x.dtype != "float32":
                return None
            vl = ValueLayout.of("NCHW", f"NCHW{self.block}c")
            mode = "avg" if site.op == "GlobalAveragePool" else "max"
            return NodeLayouts([vl], [vl], op=GLOBAL_POOL_NCHWC, attrs={"mode": mode})
        if site.op == "MaxPool":
            x = site.inputs[0] if site.inputs else None
            if x is None or len(x.shape) != 4 or x.dtype != "float32" or len(site.outputs) != 1:
                return None
            vl = ValueLayout.of("NCHW", f"NCHW{self.block}c")
            return NodeLayouts([vl], [vl], op=MAXPOOL_NCHWC, attrs=dict(site.attrs))
        if site.op != "Conv" or len(site.inputs) < 2:
            return None
        x, w = site.inputs[0], site.inputs[1]
        b = site.inputs[2] if len(site.inputs) > 2 else None
        if x is None or w is None or not w.constant or len(x.shape) != 4 or len(w.shape) != 4:
            return None
        if x.dtype != "float32" or w.dtype != "float32" or (b is not None and b.dtype != "float32"):
            return None
        group = int(site.attrs.get("group", 1))
        c, m, xb = x.shape[1], w.shape[0], self.block
        bias = [ValueLayout.of("C", f"C{xb}c")] if b is not None else []
        out = [ValueLayout.of("NCHW", f"NCHW{xb}c")]
        if group == 1:
            ib = c if c < xb else xb
            # fewer channels than a block (an image's 3): read in place as one block, no conversion
            xl = ValueLayout.of("NCHW", "NCHW" if c < xb else f"NCHW{ib}c")
            ins = [xl, ValueLayout.of("OIHW", f"OIHW{ib}i{xb}o")]
            tile = self.use_winograd(site)
            if tile is not None:
                return NodeLayouts(ins + bias, out, op=WINOGRAD_NCHWC, attrs=self.winograd_attrs(site, tile))
            return NodeLayouts(ins + bias, out, op=CONV_NCHWC, attrs=dict(site.attrs))
        if group == c == m and w.shape[1] == 1:
            ins = [ValueLayout.of("NCHW", f"NCHW{xb}c"), ValueLayout.of("OIHW", f"OIHW{xb}o")]
            return NodeLayouts(ins + bias, out, op=DEPTHWISE_NCHWC, attrs=dict(site.attrs))
        return None
