"""A float64 NumPy convolution and small ONNX graph builders for the CPU convolution tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv2d_ref(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    strides: Sequence[int] = (1, 1),
    pads: Sequence[int] = (0, 0, 0, 0),
    dilations: Sequence[int] = (1, 1),
    group: int = 1,
) -> np.ndarray:
    """ONNX Conv (NCHW, weights ``(M, C/group, KH, KW)``, pads ``(top, left, bottom, right)``)
    computed in float64 by summing shifted slices: the reference every kernel is checked against."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    sh, sw = strides
    dh, dw = dilations
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, m, oh, ow))
    mg = m // group
    for g in range(group):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * mg:(g + 1) * mg]
        for r in range(kh):
            for q in range(kw):
                patch = xs[:, :, r * dh: r * dh + (oh - 1) * sh + 1: sh, q * dw: q * dw + (ow - 1) * sw + 1: sw]
                out[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, ws[:, :, r, q])
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    return out


def conv_model(
    x_shape: Sequence[int],
    w: np.ndarray,
    b: np.ndarray | None,
    attrs: dict[str, object],
    epilogue: Sequence[str] = (),
    residual: Sequence[int] | None = None,
) -> onnx.ModelProto:
    """An ONNX model ``X -> Conv(w, b, **attrs) -> [Add(R) when residual] -> epilogue ops`` with
    constant weights; ``epilogue`` names unary ops (``"Relu"``, ``"Clip6"`` for Clip(0, 6),
    ``"Sigmoid"``, ``"HardSwish"``). Inputs ``X`` (and ``R`` of shape ``residual``, the
    convolution's output shape, when given); output ``Y``."""
    inits = [numpy_helper.from_array(w.astype(np.float32), "W")]
    conv_in = ["X", "W"]
    if b is not None:
        inits.append(numpy_helper.from_array(b.astype(np.float32), "B"))
        conv_in.append("B")
    nodes = [helper.make_node("Conv", conv_in, ["c0"], **attrs)]
    cur = "c0"
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape))]
    if residual is not None:
        nodes.append(helper.make_node("Add", [cur, "R"], ["r0"]))
        cur = "r0"
        inputs.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, list(residual)))
    for k, e in enumerate(epilogue):
        nxt = f"e{k}"
        if e == "Clip6":
            inits += [numpy_helper.from_array(np.float32(v), f"{n}{k}") for n, v in (("lo", 0), ("hi", 6))]
            nodes.append(helper.make_node("Clip", [cur, f"lo{k}", f"hi{k}"], [nxt]))
        else:
            nodes.append(helper.make_node(e, [cur], [nxt]))
        cur = nxt
    nodes.append(helper.make_node("Identity", [cur], ["Y"]))
    g = helper.make_graph(nodes, "conv", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def epilogue_ref(y: np.ndarray, epilogue: Sequence[str]) -> np.ndarray:
    """The float64 epilogue ops of :func:`conv_model` applied to ``y``."""
    for e in epilogue:
        if e == "Relu":
            y = np.maximum(y, 0)
        elif e == "Clip6":
            y = np.clip(y, 0, 6)
        elif e == "Sigmoid":
            y = 1 / (1 + np.exp(-y))
        elif e == "HardSwish":
            y = y * np.clip(y / 6 + 0.5, 0, 1)
        else:
            raise ValueError(e)
    return y
