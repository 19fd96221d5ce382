"""Hopper TMA tensor maps (``CUtensorMap``, 128 opaque bytes) made by the CUDA driver's
``cuTensorMapEncodeTiled``, for kernels that load tiles with ``cp.async.bulk.tensor``
(:mod:`ember.lowering.wgmma_ws` with ``ws=2``).

A map names a row-major 2-D matrix in device memory (its address, rows, columns, row pitch) and
the box one TMA copy moves (``box_cols x box_rows`` elements, written to shared memory in the
swizzled layout of the given span, 128 bytes unless told); elements outside the matrix are filled with zeros.
The map embeds the matrix's address, so it is made again for other buffers.
"""

from __future__ import annotations

import ctypes

from ..errors import DeviceError

#: CUtensorMapDataType values (cuda.h)
DATA_TYPES = {"uint8": 0, "uint16": 1, "uint32": 2, "int32": 3, "uint64": 4, "int64": 5, "float16": 6,
              "float32": 7, "float64": 8, "bfloat16": 9}
#: CUtensorMapSwizzle by the swizzle span in bytes (0: none)
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTION_256B = 3  # CUtensorMapL2promotion
MAP_BYTES = 128


def encode_2d(address: int, dtype: str, rows: int, cols: int, row_bytes: int, box_cols: int, box_rows: int,
              swizzle: int = 128) -> bytes:
    """The 128-byte tensor map of the ``rows x cols`` matrix of ``dtype`` at device ``address``
    (rows ``row_bytes`` apart) read in boxes of ``box_cols x box_rows`` elements, written to shared
    memory ``swizzle``-byte swizzled (128, 64, 32, or 0 for plain rows). Raises
    :class:`DeviceError` naming the driver's complaint (an unaligned address or pitch, a box
    wider than the swizzle span, a driver older than CUDA 12)."""
    from . import cuda_driver

    lib = cuda_driver._lib if cuda_driver._lib is not None else cuda_driver._load()
    fn = getattr(lib, "cuTensorMapEncodeTiled", None)
    if fn is None:
        raise DeviceError("this NVIDIA driver has no cuTensorMapEncodeTiled (TMA needs CUDA 12 or newer); "
                          "use a wgmma tile without ws=2")
    if swizzle not in SWIZZLES:
        raise DeviceError(f"no TMA swizzle of {swizzle} bytes; one of {sorted(SWIZZLES)}")
    if dtype not in DATA_TYPES:
        raise DeviceError(f"no TMA data type for {dtype}; one of {sorted(DATA_TYPES)}")
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, u32, ctypes.c_void_p, ctypes.POINTER(u64), ctypes.POINTER(u64),
                   ctypes.POINTER(u32), ctypes.POINTER(u32), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    out = (ctypes.c_uint8 * (MAP_BYTES + 64))()
    base = (ctypes.addressof(out) + 63) // 64 * 64  # CUtensorMap is 64-byte aligned
    dims = (u64 * 2)(cols, rows)
    strides = (u64 * 1)(row_bytes)
    box = (u32 * 2)(box_cols, box_rows)
    elem = (u32 * 2)(1, 1)
    rc = fn(ctypes.c_void_p(base), DATA_TYPES[dtype], 2, ctypes.c_void_p(address), dims, strides, box, elem, 0,
            SWIZZLES[swizzle], L2_PROMOTION_256B, 0)
    cuda_driver.check(rc, f"cuTensorMapEncodeTiled({rows}x{cols} {dtype}, box {box_cols}x{box_rows})")
    return ctypes.string_at(base, MAP_BYTES)
