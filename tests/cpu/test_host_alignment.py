"""Host storages of a model's intermediate values start on a cache line (``HostMemory.storage``,
:data:`ember.model.memory.HOST_ALIGN`), whatever their size, and a model whose values live in them
computes what NumPy does in float64."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import ember
from ember.model.memory import HOST_ALIGN, HostMemory


@pytest.mark.parametrize("nbytes", [0, 1, 15, 64, 1000, 4096 + 17, 1 << 20, (3 << 20) + 5])
def test_storages_start_on_a_cache_line(nbytes: int) -> None:
    mem = HostMemory()
    bufs = [mem.storage(nbytes) for _ in range(4)]
    for buf in bufs:
        assert buf.ctypes.data % HOST_ALIGN == 0
        assert buf.nbytes == max(nbytes, 1) and buf.dtype == np.uint8
        buf[...] = 7  # the whole buffer is writable memory of its own
    view = mem.view(bufs[0], (max(nbytes, 1) // 4,), "float32")
    assert view.ctypes.data == bufs[0].ctypes.data


def test_model_on_aligned_storages_matches_float64(rng) -> None:
    """A chain whose intermediates are planned storages (odd sizes, so that consecutive values
    would not fall on a line by themselves): Conv, ReLU, Conv, Add."""
    x = rng.standard_normal((1, 5, 13, 11)).astype(np.float32)
    w1 = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((7, 7, 1, 1)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["a"], ["b"]),
             h.make_node("Conv", ["b", "w2"], ["c"]), h.make_node("Add", ["c", "a"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, x.shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, (1, 7, 13, 11))],
                     [nh.from_array(w1, "w1"), nh.from_array(w2, "w2")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    model = ember.compile(m.SerializeToString())
    (got,) = model(x)

    def conv(v: np.ndarray, w: np.ndarray, p: int) -> np.ndarray:
        v = np.pad(v.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
        k = w.shape[2]
        out = np.zeros((1, w.shape[0], v.shape[2] - k + 1, v.shape[3] - k + 1))
        for r in range(k):
            for q in range(k):
                out += np.einsum("nchw,oc->nohw", v[:, :, r:r + out.shape[2], q:q + out.shape[3]], w[:, :, r, q])
        return out

    a = conv(x, w1, 1)
    ref = conv(np.maximum(a, 0), w2, 0) + a
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
