"""Device indices on an NVIDIA GPU (``gpu`` marker; skipped without a GPU, run by
scripts/gpu_check.sh): a model compiled for ``cuda(0)`` explicitly, moved with ``.to``, an index
that does not exist, PyTorch tensors on the chosen device, and every GPU of the machine in turn."""

from __future__ import annotations

import numpy as np
import pytest
from device_models import mlp, mlp_reference

import ember
import ember.runtime.cuda_driver as cuda_driver

pytestmark = pytest.mark.gpu


def _gpu_count() -> int:
    try:
        return cuda_driver.device_count()
    except ember.DeviceError as exc:
        pytest.skip(f"no CUDA device: {exc}")
    return 0


@pytest.fixture(scope="module")
def gpus() -> int:
    n = _gpu_count()
    if n == 0:
        pytest.skip("no CUDA device: the driver sees no GPU")
    return n


def _check(model: ember.Model, weights: dict, rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 37)).astype(np.float32)
    (y,) = model(x)
    # float32 products of 37 terms, compared with float64
    np.testing.assert_allclose(y, mlp_reference(x, weights), rtol=1e-5, atol=1e-5)


def test_compile_for_cuda_0(gpus, rng):
    onnx_bytes, weights = mlp(rng)
    m = ember.compile(onnx_bytes, device=ember.cuda(0))
    assert m.device == ember.cuda(0)
    assert f"-arch={ember.cuda(0).attributes['arch']}" in m.target
    _check(m, weights, rng)
    (y,) = m.run_on_device(rng.standard_normal((3, 37)).astype(np.float32))
    assert y.device == ember.cuda(0)


def test_to_cuda_0(gpus, rng):
    onnx_bytes, weights = mlp(rng)
    m = ember.compile(onnx_bytes, target="cuda")
    assert m.to(ember.cuda(0)) is m and m.to("cuda:0") is m
    assert m.device == ember.cuda(0)
    _check(m, weights, rng)


def test_missing_index_names_the_count(gpus, rng):
    onnx_bytes, _ = mlp(rng)
    m = ember.compile(onnx_bytes, target="cuda")
    with pytest.raises(ember.DeviceError, match=rf"cuda\({gpus}\) does not exist: the driver found {gpus} NVIDIA GPU"):
        m.to(ember.cuda(gpus))
    assert m.device == ember.cuda(0)
    with pytest.raises(ember.DeviceError, match=rf"found {gpus} NVIDIA GPU.*index from 0 to {gpus - 1}"):
        ember.compile(onnx_bytes, device=f"cuda:{gpus + 3}")


def test_ember_arrays_on_the_models_device(gpus, rng):
    """A model on cuda(0) takes ember arrays already on cuda(0) (no copy through the host)."""
    onnx_bytes, weights = mlp(rng)
    m = ember.compile(onnx_bytes, device=ember.cuda(0))
    x = rng.standard_normal((3, 37)).astype(np.float32)
    (y,) = m(ember.nd.array(x, ember.cuda(0)))
    np.testing.assert_allclose(y, mlp_reference(x, weights), rtol=1e-5, atol=1e-5)


def test_torch_tensors_on_the_models_device(gpus, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    onnx_bytes, weights = mlp(rng)
    m = ember.compile(onnx_bytes, device=ember.cuda(0))
    x = rng.standard_normal((3, 37)).astype(np.float32)
    (y,) = m.run_on_device(torch.from_numpy(x).to("cuda:0"))
    got = torch.from_dlpack(y).cpu().numpy()  # shares the primary context's memory
    np.testing.assert_allclose(got, mlp_reference(x, weights), rtol=1e-5, atol=1e-5)


def test_every_gpu_in_turn(gpus, rng):
    """One compiled model moved across every GPU of the machine (one GPU: index 0 only)."""
    onnx_bytes, weights = mlp(rng)
    m = ember.compile(onnx_bytes, target="cuda")
    arch0 = ember.cuda(0).attributes["arch"]
    for i in range(gpus):
        if ember.cuda(i).attributes["arch"] != arch0:
            with pytest.raises(ember.DeviceError, match="compile it again"):
                m.to(ember.cuda(i))
            continue
        m.to(ember.cuda(i))
        _check(m, weights, rng)
        (y,) = m.run_on_device(rng.standard_normal((3, 37)).astype(np.float32))
        assert y.device == ember.cuda(i)


def test_host_stages_follow_the_device(gpus, rng):
    """A model with a host operator between two compiled parts: both parts run on the chosen GPU."""
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("RandomUniformLike", ["r"], ["u"], seed=1.0),
             h.make_node("Add", ["r", "u"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [5, 7])],
                                  [h.make_tensor_value_info("y", T.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", 17)])
    model = ember.compile(m.SerializeToString(), device=ember.cuda(0))
    x = rng.standard_normal((5, 7)).astype(np.float32)
    (y,) = model(x)
    u = y - np.maximum(x, 0)
    assert u.min() >= -1e-6 and u.max() < 1 + 1e-6  # uniform draws in [0, 1) added on the GPU
    assert model.to(ember.cuda(0)) is model
    assert all(part.device == ember.cuda(0) for part in model._specializer._cache.values())
