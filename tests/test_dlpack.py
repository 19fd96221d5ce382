"""DLPack in both directions: NumPy always; PyTorch (CPU) when it is installed."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (pip install torch, CPU build)")


@pytest.fixture(scope="module")
def scale2():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    return ember.build(te.create_schedule(B.op), [A, B], name="scale2")


@pytest.mark.parametrize("dt", ["float32", "float64", "int8", "uint16", "int64", "bool", "float16"])
def test_numpy_to_ember_shares_memory(dt):
    x = np.arange(12).reshape(3, 4).astype(dt)
    a = ember.nd.from_dlpack(x)
    assert a.shape == (3, 4) and a.dtype == dt
    np.testing.assert_array_equal(a.numpy(), x)
    if dt != "bool":
        x[1, 2] = 7
        assert a.numpy()[1, 2] == 7  # no copy


@pytest.mark.parametrize("dt", ["float32", "int32", "uint8", "float16"])
def test_ember_to_numpy_shares_memory(dt):
    a = ember.nd.array(np.arange(10).astype(dt))
    y = np.from_dlpack(a)
    np.testing.assert_array_equal(y, np.arange(10).astype(dt))
    a.copyfrom(np.full(10, 3, dtype=dt))
    np.testing.assert_array_equal(y, 3)


def test_non_contiguous_producer_is_refused():
    x = np.arange(20, dtype="float32").reshape(4, 5)[:, ::2]
    with pytest.raises(ember.ArgumentError, match="not contiguous"):
        ember.nd.from_dlpack(x)


def test_kernel_on_dlpack_import(scale2):
    x = np.arange(7, dtype="float32")
    out = np.full(7, np.nan, dtype="float32")
    scale2(ember.nd.from_dlpack(x), ember.nd.from_dlpack(out))
    np.testing.assert_array_equal(out, x * 2)  # written through to the NumPy array


def test_bfloat16_capsule_roundtrip():
    """NumPy has no bfloat16; ember's own capsule must still round-trip through from_dlpack."""
    a = ember.nd.array(np.array([1.5, -2.0, 3.0], dtype=np.float32), dtype="bfloat16")
    b = ember.nd.from_dlpack(a)
    assert b.dtype == "bfloat16"
    np.testing.assert_array_equal(b.numpy(), [1.5, -2.0, 3.0])


@needs_torch
@pytest.mark.parametrize("tdt,edt", [("float32", "float32"), ("float64", "float64"), ("int32", "int32"),
                                     ("float16", "float16"), ("bfloat16", "bfloat16"), ("uint8", "uint8"),
                                     ("bool", "bool")])
def test_torch_to_ember(tdt, edt):
    t = (torch.arange(6) % 3).to(getattr(torch, tdt))
    a = ember.nd.from_dlpack(t)
    assert a.dtype == edt and a.shape == (6,)
    np.testing.assert_array_equal(a.numpy(), t.to(torch.float64 if edt != "bool" else torch.bool).numpy())
    if tdt != "bool":
        t[0] = 2
        assert a.numpy()[0] == 2  # shared memory


@needs_torch
@pytest.mark.parametrize("dt", ["float32", "int64", "bfloat16", "float16"])
def test_ember_to_torch(dt):
    a = ember.nd.array(np.array([1, 2, 3, 4], dtype=np.float32), dtype=dt)
    t = torch.from_dlpack(a)
    assert str(t.dtype) == f"torch.{dt}" and tuple(t.shape) == (4,)
    np.testing.assert_array_equal(t.to(torch.float64).numpy(), [1, 2, 3, 4])
    t[1] = 9
    assert a.numpy()[1] == 9


@needs_torch
def test_kernel_called_with_torch_tensors(scale2):
    x = torch.randn(33)
    y = torch.full((33,), float("nan"))
    scale2(x, y)  # tensors are taken through __dlpack__
    assert torch.equal(y, x * 2)


@needs_torch
def test_torch_non_contiguous_is_refused():
    t = torch.arange(20, dtype=torch.float32).reshape(4, 5).t()
    with pytest.raises(ember.ArgumentError, match="contiguous"):
        ember.nd.from_dlpack(t)


def test_offset_and_empty_producers():
    # Regression: an empty NumPy array (strides 0, 0) was refused as "not contiguous".
    x = np.arange(10, dtype="float32")[4:]  # data pointer inside a larger allocation
    np.testing.assert_array_equal(ember.nd.from_dlpack(x).numpy(), x)
    z = ember.nd.array(np.zeros((0, 3), dtype="float32"))
    assert np.from_dlpack(z).shape == (0, 3)
    assert ember.nd.from_dlpack(np.zeros((0, 3), dtype="float32")).shape == (0, 3)
    assert np.from_dlpack(ember.nd.array(np.array([True, False]))).tolist() == [True, False]


@needs_torch
def test_torch_slice_with_storage_offset():
    t = torch.arange(10, dtype=torch.float32)[3:]
    np.testing.assert_array_equal(ember.nd.from_dlpack(t).numpy(), np.arange(3, 10))
    assert ember.nd.from_dlpack(torch.zeros(0, 3)).shape == (0, 3)
