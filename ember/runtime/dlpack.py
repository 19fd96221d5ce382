"""DLPack in both directions, through ctypes (for dtypes and devices NumPy does not cover).

The structures follow dlpack.h (version 0.8 layout, the unversioned ``dltensor`` capsule that
every framework accepts)."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..ir.dtypes import DataType


class DLDevice(ctypes.Structure):
    """dlpack.h DLDevice."""

    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """dlpack.h DLDataType."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """dlpack.h DLTensor."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    """dlpack.h DLManagedTensor."""


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]

_CODE = {"int": 0, "uint": 1, "float": 2, "bfloat": 4, "bool": 6}
_KIND = {v: k for k, v in _CODE.items()}

_pyapi = ctypes.pythonapi
_pyapi.PyCapsule_New.restype = ctypes.py_object
_pyapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_pyapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pyapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_pyapi.PyCapsule_SetName.restype = ctypes.c_int
_pyapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_pyapi.PyCapsule_IsValid.restype = ctypes.c_int
_pyapi.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]

# Producers keep their exported objects alive until the consumer calls the deleter.
_alive: dict[int, tuple[Any, ...]] = {}


@DELETER
def _deleter(ptr: Any) -> None:
    _alive.pop(ctypes.addressof(ptr.contents), None)


def dl_dtype(dt: DataType) -> DLDataType:
    """The DLPack data type of ``dt``."""
    bits = 8 if dt.is_bool else dt.bits
    return DLDataType(_CODE[dt.kind], bits, dt.lanes)


def ember_dtype(d: DLDataType) -> DataType:
    """The ember data type of a DLPack data type."""
    kind = _KIND.get(int(d.code))
    if kind is None or int(d.lanes) != 1:
        raise ArgumentError(f"DLPack data type code={d.code} bits={d.bits} lanes={d.lanes} is not supported")
    if kind == "bool":
        return DataType("bool", 1)
    return DataType(kind, int(d.bits))


def to_dlpack_capsule(ptr: int, shape: tuple[int, ...], dt: DataType, dev: Any, owner: Any) -> Any:
    """A ``dltensor`` capsule describing compact row-major memory at ``ptr`` (kept alive with
    ``owner`` until the consumer releases it)."""
    managed = DLManagedTensor()
    shape_arr = (ctypes.c_int64 * max(1, len(shape)))(*shape)
    managed.dl_tensor.data = ptr
    managed.dl_tensor.device = DLDevice(dev.dlpack_code, dev.index)
    managed.dl_tensor.ndim = len(shape)
    managed.dl_tensor.dtype = dl_dtype(dt)
    managed.dl_tensor.shape = shape_arr
    managed.dl_tensor.strides = None
    managed.dl_tensor.byte_offset = 0
    managed.deleter = _deleter
    _alive[ctypes.addressof(managed)] = (managed, shape_arr, owner)
    return _pyapi.PyCapsule_New(ctypes.addressof(managed), b"dltensor", None)


class _Import:
    """Holds an imported DLPack tensor and calls its deleter when collected."""

    def __init__(self, capsule: Any):
        addr = _pyapi.PyCapsule_GetPointer(capsule, b"dltensor")
        _pyapi.PyCapsule_SetName(capsule, b"used_dltensor")
        self.capsule = capsule
        self.managed = DLManagedTensor.from_address(addr)

    def __del__(self) -> None:
        try:
            if self.managed.deleter:
                self.managed.deleter(ctypes.pointer(self.managed))
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def import_capsule(obj: Any) -> tuple[_Import, int, tuple[int, ...], DataType, tuple[int, int]]:
    """Take a DLPack tensor from ``obj``: (keeper, data pointer, shape, dtype, (device type, id)).

    Raises when the tensor is not compact row-major (ember kernels need contiguous memory)."""
    capsule = obj.__dlpack__() if hasattr(obj, "__dlpack__") else obj
    if not _pyapi.PyCapsule_IsValid(capsule, b"dltensor"):
        raise ArgumentError("from_dlpack: the object did not give a valid 'dltensor' capsule")
    keeper = _Import(capsule)
    t = keeper.managed.dl_tensor
    shape = tuple(int(t.shape[k]) for k in range(t.ndim))
    dt = ember_dtype(t.dtype)
    if t.strides and 0 not in shape:  # an empty tensor is contiguous whatever its strides
        expected = 1
        for k in reversed(range(t.ndim)):
            if shape[k] != 1 and int(t.strides[k]) != expected:
                raise ArgumentError(
                    f"from_dlpack: the tensor of shape {shape} is not contiguous (strides "
                    f"{[int(t.strides[i]) for i in range(t.ndim)]}); call .contiguous() first"
                )
            expected *= shape[k]
    ptr = int(t.data or 0) + int(t.byte_offset)
    return keeper, ptr, shape, dt, (int(t.device.device_type), int(t.device.device_id))


def from_dlpack_cpu(obj: Any) -> Any:
    """A CPU NDArray sharing memory with ``obj``."""
    from .ndarray import NDArray, cpu

    keeper, ptr, shape, dt, _ = import_capsule(obj)
    np_dt = dt.numpy()
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        data = np.empty(shape, dtype=np_dt)
    else:
        buf = (ctypes.c_uint8 * (count * np_dt.itemsize)).from_address(ptr)
        data = np.frombuffer(buf, dtype=np_dt, count=count).reshape(shape)
    arr = NDArray(data, dt, cpu(0))
    arr._keeper = keeper  # type: ignore[attr-defined]
    return arr
