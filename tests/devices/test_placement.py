"""Choosing the device a compiled model runs on, on any machine (no GPU needed): ``device=`` of
``ember.compile``/``ember.load``, ``Model.to``, device strings, and the errors for a device of the
wrong kind, one that does not exist, or a GPU driver that is absent."""

from __future__ import annotations

import numpy as np
import pytest
from device_models import mlp, mlp_reference

import ember
import ember.runtime.cuda_driver
import ember.runtime.hip_driver
from ember.model.placement import as_device, cuda_code_runs_on
from ember.runtime.ndarray import Device


def _has_cuda_driver() -> bool:
    try:
        ember.runtime.cuda_driver.device_count()
    except ember.DeviceError:
        return False
    return True


def _check(model: ember.Model, weights: dict, rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 37)).astype(np.float32)
    (y,) = model(x)
    np.testing.assert_allclose(y, mlp_reference(x, weights), rtol=1e-5, atol=1e-5)


def test_cpu_device_by_object_and_string(rng):
    onnx_bytes, weights = mlp(rng)
    m = ember.compile(onnx_bytes, device=ember.cpu(0))
    assert m.device == ember.cpu(0) and m.target.startswith("llvm")
    _check(m, weights, rng)
    assert m.to("cpu") is m and m.to("cpu:0") is m and m.to(ember.cpu()) is m
    _check(m, weights, rng)
    m2 = ember.compile(onnx_bytes, "llvm", device="cpu(0)")
    assert m2.device == ember.cpu(0)


def test_device_strings():
    assert as_device("cuda:1") == ember.cuda(1)
    assert as_device("rocm(2)") == ember.rocm(2)
    assert as_device(" cuda ") == ember.cuda(0)
    assert as_device("gpu:3") == ember.cuda(3)
    for bad in ("tpu:0", "cuda:-1", "cuda:x", "", 3.5, None):
        with pytest.raises(ember.DeviceError, match="not a device|unknown device kind"):
            as_device(bad)  # type: ignore[arg-type]
    with pytest.raises(ember.DeviceError, match="non-negative integer"):
        as_device(Device("cuda", -1))
    with pytest.raises(ember.DeviceError, match="non-negative integer"):
        as_device(Device("cuda", True))  # type: ignore[arg-type]


def test_cpu_model_cannot_move_to_a_gpu(rng):
    onnx_bytes, _ = mlp(rng)
    m = ember.compile(onnx_bytes)
    for dev in (ember.cuda(0), ember.rocm(1), "cuda:0"):
        with pytest.raises(ember.DeviceError, match=r"target 'llvm.*runs on the CPU.*target='(cuda|rocm)'"):
            m.to(dev)
    assert m.device == ember.cpu(0)  # a refused move changes nothing


def test_the_cpu_has_one_index(rng):
    onnx_bytes, _ = mlp(rng)
    m = ember.compile(onnx_bytes)
    with pytest.raises(ember.DeviceError, match=r"cpu\(1\) does not exist: there is one CPU device"):
        m.to(Device("cpu", 1))
    with pytest.raises(ember.DeviceError, match=r"cpu\(1\) does not exist"):
        ember.compile(onnx_bytes, device=Device("cpu", 1))


def test_target_of_another_kind_than_the_device_fails_before_compiling(rng):
    onnx_bytes, _ = mlp(rng)
    with pytest.raises(ember.DeviceError, match=r"target 'cuda'.*NVIDIA GPUs.*cannot run on cpu\(0\)"):
        ember.compile(onnx_bytes, target="cuda", device=ember.cpu(0))
    with pytest.raises(ember.DeviceError, match=r"target 'llvm'.*cannot run on rocm\(0\)"):
        ember.compile(onnx_bytes, target="llvm", device=ember.rocm(0))


@pytest.mark.skipif(_has_cuda_driver(), reason="this machine has the NVIDIA driver (tests/devices/test_gpu_devices.py)")
def test_gpu_device_without_a_driver_is_a_clear_error(rng):
    onnx_bytes, _ = mlp(rng)
    with pytest.raises(ember.DeviceError, match=r"libcuda\.so\.1.*not installed"):
        ember.compile(onnx_bytes, device=ember.cuda(0))
    with pytest.raises(ember.DeviceError, match=r"libcuda\.so\.1.*not installed"):
        ember.compile(onnx_bytes, target="cuda -arch=sm_90", device="cuda:1")


def test_cuda_model_built_here_refuses_to_move_without_a_driver(rng):
    """Compiling for CUDA needs no GPU (ptxas, or PTX without it); moving the model to one does."""
    if _has_cuda_driver():
        pytest.skip("this machine has the NVIDIA driver (tests/devices/test_gpu_devices.py)")
    onnx_bytes, _ = mlp(rng)
    m = ember.compile(onnx_bytes, target="cuda -arch=sm_80")
    assert m.device == ember.cuda(0)
    with pytest.raises(ember.DeviceError, match=r"libcuda\.so\.1.*not installed"):
        m.to(ember.cuda(0))
    with pytest.raises(ember.DeviceError, match="runs on NVIDIA GPUs"):
        m.to(ember.cpu(0))
    assert m.device == ember.cuda(0)


def test_rocm_device_without_hip_is_a_clear_error(rng):
    try:
        ember.runtime.hip_driver.device_count()
        pytest.skip("this machine has HIP")
    except ember.DeviceError:
        pass
    onnx_bytes, _ = mlp(rng)
    # Without the HIP runtime, or with it but no AMD GPU (hipInit fails): both name what is missing.
    with pytest.raises(ember.DeviceError, match=r"libamdhip64\.so.*not installed|hipInit failed"):
        ember.compile(onnx_bytes, target="rocm -mcpu=gfx90a", device=ember.rocm(1))


def test_cuda_architecture_compatibility():
    assert cuda_code_runs_on("sm_80", "sm_86")
    assert cuda_code_runs_on("sm_90", "sm_90")
    assert not cuda_code_runs_on("sm_86", "sm_80")
    assert not cuda_code_runs_on("sm_80", "sm_90")  # a cubin does not cross major versions
    assert cuda_code_runs_on("sm_90a", "sm_90")
    assert not cuda_code_runs_on("sm_90a", "sm_100")
    assert cuda_code_runs_on("sm_100", "sm_103")
    assert not cuda_code_runs_on("sm_120", "sm_100")


def test_load_on_a_device(rng, tmp_path):
    onnx_bytes, weights = mlp(rng)
    path = tmp_path / "mlp.ember"
    ember.compile(onnx_bytes).save(path)
    m = ember.load(path, device="cpu")
    assert m.device == ember.cpu(0)
    _check(m, weights, rng)
    with pytest.raises(ember.DeviceError, match="runs on the CPU"):
        ember.load(path, device=ember.cuda(0))
    with pytest.raises(ember.DeviceError, match="runs on the CPU"):
        ember.load(path, rebuild=True, device=ember.cuda(0))
    _check(ember.load(path, rebuild=True, device=ember.cpu(0)), weights, rng)
