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
