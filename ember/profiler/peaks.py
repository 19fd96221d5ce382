"""A device's peak compute and memory bandwidth: the roofs of a roofline.

:func:`device_peaks` measures them once per device with two microbenchmarks and caches the
result in ``<ember cache>/peaks.json`` (``~/.cache/ember`` unless ``EMBER_CACHE_DIR`` says
otherwise):

* CPU — compute: the best of ten float32 NumPy matrix products (n = 1024, through NumPy's
  BLAS on every core); bandwidth: the best of several ``np.copyto`` of 64 MiB (read + write
  counted);
* CUDA — bandwidth: a 256 MiB device-to-device copy timed with CUDA events (read + write);
  compute: a float32 matrix product of PyTorch or CuPy when one is installed (TF32 off); without
  them, the datasheet figure of a known GPU, labelled as such.

Every figure carries its source (``measured: ...`` or ``datasheet: ...``); a figure that cannot
be had is None, and a roofline then says what is missing.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import cache as ember_cache
from ..errors import DeviceError

#: float32 peaks (FLOP/s, non-tensor-core) and memory bandwidth (bytes/s) from vendors'
#: datasheets, by a substring of the device name; used only when a measurement is impossible.
DATASHEET: dict[str, tuple[float, float, str]] = {
    "H200": (67e12, 4.8e12, "NVIDIA H200 SXM datasheet: 67 TFLOP/s FP32, 4.8 TB/s"),
    "H100 PCIe": (51e12, 2.0e12, "NVIDIA H100 PCIe datasheet: 51 TFLOP/s FP32, 2.0 TB/s"),
    "H100": (67e12, 3.35e12, "NVIDIA H100 SXM datasheet: 67 TFLOP/s FP32, 3.35 TB/s"),
    "A100": (19.5e12, 2.0e12, "NVIDIA A100 80GB SXM datasheet: 19.5 TFLOP/s FP32, 2.0 TB/s"),
    "L4": (30.3e12, 0.3e12, "NVIDIA L4 datasheet: 30.3 TFLOP/s FP32, 300 GB/s"),
    "MI300X": (163.4e12, 5.3e12, "AMD Instinct MI300X datasheet: 163.4 TFLOP/s FP32 matrix, 5.3 TB/s"),
    "MI250X": (47.9e12, 3.2e12, "AMD Instinct MI250X datasheet: 47.9 TFLOP/s FP32 vector, 3.2 TB/s"),
}


@dataclass(frozen=True)
class Peaks:
    """The roofs of one device: ``flops_per_s`` (float32) and ``bytes_per_s``, each with its
    source; None where unknown."""

    device: str
    flops_per_s: float | None
    flops_source: str
    bytes_per_s: float | None
    bytes_source: str

    def attainable(self, intensity: float) -> float | None:
        """The roofline at ``intensity`` FLOP/byte: ``min(peak FLOP/s, intensity x bandwidth)``."""
        if self.flops_per_s is None or self.bytes_per_s is None:
            return None
        return min(self.flops_per_s, intensity * self.bytes_per_s)


def device_name(device: Any) -> str:
    """A stable description of ``device`` (an ember Device): the CPU's model and thread count,
    or the GPU's name."""
    if device.kind == "cpu":
        name = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("model name"):
                        name = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass  # not Linux: platform's name stays
        return f"{name} ({os.cpu_count()} threads)"
    attrs = device.attributes
    return str(attrs.get("device_name") or attrs.get("name") or f"{device.kind} GPU {device.index}")


def _cache_file(cache_dir: str | os.PathLike[str] | None) -> Path | None:
    root = ember_cache.cache_dir(cache_dir)
    return None if root is None else root / "peaks.json"


def _read(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _from_json(data: Any) -> Peaks | None:
    if not isinstance(data, dict):
        return None
    try:
        return Peaks(str(data["device"]), _num(data["flops_per_s"]), str(data["flops_source"]),
                     _num(data["bytes_per_s"]), str(data["bytes_source"]))
    except (KeyError, TypeError, ValueError):
        return None


def _num(x: Any) -> float | None:
    return None if x is None else float(x)


def device_peaks(device: Any, cache_dir: str | os.PathLike[str] | None = None, measure: bool = True,
                 refresh: bool = False) -> Peaks:
    """The peaks of ``device`` (an ember Device): from the cache, else measured now (about a
    second) and cached, else (``measure=False`` or nothing to measure with) the datasheet.
    ``refresh`` measures again and replaces the cached figures (after a measurement on a busy
    machine)."""
    try:
        name = device_name(device)
    except DeviceError as exc:  # the driver cannot describe the device: no roofs, and why
        return Peaks(str(device), None, f"unknown: {exc}", None, f"unknown: {exc}")
    key = f"{device.kind}:{name}"
    path = _cache_file(cache_dir)
    cached = None if refresh else _from_json(_read(path).get(key))
    if cached is not None:
        return cached
    if not measure:
        return _datasheet(name, "not measured")
    peaks = _measure_cpu(name) if device.kind == "cpu" else _measure_gpu(device, name)
    if path is not None:
        table = _read(path)
        table[key] = asdict(peaks)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(table, indent=1))
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only cache: measured again next time
    return peaks


def _datasheet(name: str, why: str) -> Peaks:
    for sub, (flops, bw, src) in DATASHEET.items():
        if sub in name:
            return Peaks(name, flops, f"datasheet ({src}); {why}", bw, f"datasheet ({src}); {why}")
    return Peaks(name, None, f"unknown: {why}, and no datasheet entry for {name!r}",
                 None, f"unknown: {why}, and no datasheet entry for {name!r}")


def _best(fn: Any, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _measure_cpu(name: str) -> Peaks:
    n = 1024
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    t = _best(lambda: np.matmul(a, b, out=c), 10)
    src = np.ones(16 << 20, np.float32)
    dst = np.empty_like(src)
    tc = _best(lambda: np.copyto(dst, src), 5)
    return Peaks(name, 2.0 * n**3 / t, f"measured: float32 NumPy matmul {n}x{n}x{n}",
                 2.0 * src.nbytes / tc, f"measured: np.copyto of {src.nbytes >> 20} MiB (read + write)")


def _measure_gpu(device: Any, name: str) -> Peaks:
    drv = device.driver()
    bw: float | None = None
    bw_src = ""
    if hasattr(drv, "Event") and hasattr(drv, "memcpy_dtod_async"):
        nbytes = 256 << 20
        try:
            a = drv.mem_alloc(nbytes, device.index)
            b = drv.mem_alloc(nbytes, device.index)
        except DeviceError as exc:
            bw_src = f"copy not measured ({exc})"
        else:
            try:
                stream = drv.Stream(device.index, non_blocking=True)
                drv.memcpy_dtod_async(b, a, nbytes, stream, device.index)
                best = float("inf")
                for _ in range(5):
                    e0, e1 = drv.Event(device.index), drv.Event(device.index)
                    e0.record(stream)
                    drv.memcpy_dtod_async(b, a, nbytes, stream, device.index)
                    e1.record(stream)
                    e1.synchronize()
                    best = min(best, e0.elapsed_ms(e1) * 1e-3)
                bw, bw_src = 2.0 * nbytes / best, "measured: 256 MiB device-to-device copy, CUDA events (read + write)"
            finally:
                drv.mem_free(a, device.index)
                drv.mem_free(b, device.index)
    flops, flops_src = _gpu_gemm(device)
    sheet = _datasheet(name, "measurement unavailable")
    if bw is None:
        bw, bw_src = sheet.bytes_per_s, sheet.bytes_source + (f"; {bw_src}" if bw_src else "")
    if flops is None:
        flops, flops_src = sheet.flops_per_s, sheet.flops_source + f"; {flops_src}"
    return Peaks(name, flops, flops_src, bw, bw_src)


def _gpu_gemm(device: Any) -> tuple[float | None, str]:
    """float32 GEMM FLOP/s measured with PyTorch (or CuPy) on ``device``, or (None, why)."""
    n = 4096
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and device.kind in ("cuda", "rocm") and torch.cuda.is_available():
        was = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            dev = torch.device("cuda", device.index)
            a = torch.randn(n, n, device=dev)
            b = torch.randn(n, n, device=dev)
            t = _best(lambda: (torch.matmul(a, b), torch.cuda.synchronize(dev)), 5)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = was
        return 2.0 * n**3 / t, f"measured: float32 torch.matmul {n}x{n}x{n} (TF32 off)"
    try:
        import cupy
    except ImportError:
        return None, "no PyTorch or CuPy with GPU support to measure a GEMM with"
    with cupy.cuda.Device(device.index):
        a = cupy.random.standard_normal((n, n), dtype=cupy.float32)
        b = cupy.random.standard_normal((n, n), dtype=cupy.float32)
        t = _best(lambda: (a @ b, cupy.cuda.Device().synchronize()), 5)
    return 2.0 * n**3 / t, f"measured: float32 CuPy matmul {n}x{n}x{n}"
