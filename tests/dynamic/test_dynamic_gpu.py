"""A model with symbolic dimensions on an NVIDIA GPU: one variant per input shape, each run
with its CUDA graph, against the CPU build at the same shape (and ONNX Runtime)."""

from __future__ import annotations

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the dynamic-shape tests build ONNX graphs")

from . import graphs  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_dev():
    """ember.cuda(0), or skip with the reason there is none."""
    from ember.errors import EmberError
    from ember.runtime import cuda_driver

    try:
        n = cuda_driver.device_count()
    except (EmberError, OSError) as exc:
        pytest.skip(f"no CUDA device: {exc}")
    if n == 0:
        pytest.skip("no CUDA device: the driver sees no GPU")
    return ember.cuda(0)


def test_symbolic_batch_and_width_on_cuda(cuda_dev, rng) -> None:
    m = graphs.conv_matmul_reshape(rng)
    model = ember.compile(m, target="cuda")
    assert model.inputs[0].shape == ("batch", 3, 4, "width")
    for shp in [(1, 3, 4, 5), (3, 3, 4, 37), (1, 3, 4, 5), (3, 3, 4, 37)]:  # repeats replay the CUDA graph
        x = rng.standard_normal(shp).astype(np.float32)
        want = ember.compile(m, input_shapes={"x": shp})(x)[0]  # the CPU build of this shape
        got = model(x)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # float32, other summation order
    assert len(model.variants) == 2


def test_variants_share_their_weights_on_the_device(cuda_dev, rng) -> None:
    """Two variants of a symbolic-batch model read one device copy of each weight (constants are
    uploaded by content), and still answer right."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    w = rng.standard_normal((64, 48)).astype(np.float32)
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Relu", ["m"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, ["batch", 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["batch", 48])], [nh.from_array(w, "w")])
    model = ember.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), target="cuda")
    for n in (2, 5):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        np.testing.assert_allclose(model(x)[0], np.maximum(x.astype(np.float64) @ w, 0), rtol=1e-5, atol=1e-5)
    programs = [v._program for v in model._specializer._variants.values()]
    assert len(programs) == 2
    placed = [{a.data_ptr for a in p._placed[cuda_dev].values()} for p in programs]
    assert placed[0] and placed[0] == placed[1]
