"""``ember info``: the devices ember finds, its toolchains and the CPU's features, each missing
piece with the way to get it."""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import shlex
from typing import Any

from ..errors import DeviceError, ToolchainError
from ..profiler.peaks import device_name


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``info``."""
    p = sub.add_parser("info", help="devices, toolchains and CPU features ember finds (with fixes)",
                       description="What this machine offers ember: CPU and GPUs, the CUDA and ROCm toolchains "
                                   "(ptxas, libdevice, ld.lld, ocml) and optional packages; each missing piece "
                                   "with how to get it.")
    p.set_defaults(func=run)


def _gpus(kind: str) -> tuple[list[str], str | None]:
    """Descriptions of the GPUs of ``kind`` and None, or [] and why there are none."""
    from ..runtime.ndarray import device

    drv = device(kind, 0).driver()
    try:
        n = drv.device_count()
    except (DeviceError, OSError) as exc:
        return [], str(exc)
    if n == 0:
        return [], "the driver sees no GPU"
    out = []
    for i in range(n):
        try:
            attrs: dict[str, Any] = drv.device_attributes(i)
        except DeviceError as exc:
            out.append(f"{kind}({i}): its attributes cannot be read ({exc})")
            continue
        cc = attrs.get("compute_version") if kind == "cuda" else None
        parts = [str(attrs.get("device_name", "?")), str(attrs.get("arch", "")),
                 f"compute capability {cc}" if cc else "",
                 f"{attrs.get('total_memory', 0) / 2**30:.0f} GiB",
                 f"{attrs['multi_processor_count']} SMs/CUs" if "multi_processor_count" in attrs else ""]
        out.append(f"{kind}({i}): " + ", ".join(p for p in parts if p))
    return out, None


def _version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def report() -> list[tuple[str, str, str | None]]:
    """(section, what was found or ``missing``, the fix or None) rows of ``ember info``."""
    import llvmlite
    import llvmlite.binding as llvm

    from ..backends.cuda.codegen import find_libdevice, find_ptxas
    from ..backends.rocm.codegen import find_device_libs
    from ..backends.rocm.lld import find_lld
    from ..runtime.ndarray import cpu
    from ..target import Target
    from ..version import __version__

    rows: list[tuple[str, str, str | None]] = []
    t = Target("llvm")
    rows.append(("ember", f"{__version__} (Python {platform.python_version()}, llvmlite {llvmlite.__version__}, "
                 f"LLVM {'.'.join(str(v) for v in llvm.llvm_version_info)})", None))
    rows.append(("cpu", f"{device_name(cpu(0))}; LLVM name {t.mcpu}, {t.vector_bits}-bit vectors, "
                 f"{t.num_threads} threads", None))
    wanted = ("sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vnni", "avx512bf16",
              "amx-tile", "neon", "sve")
    feats = t.features
    have = [f for f in wanted if f in feats]
    rows.append(("cpu features", ", ".join(have) or "none of " + ", ".join(wanted), None))
    for kind, fix in (("cuda", "install the NVIDIA driver (libcuda.so.1) and check nvidia-smi"),
                      ("rocm", "install ROCm's runtime (libamdhip64.so) and check rocm-smi")):
        found, why = _gpus(kind)
        if found:
            rows += [(f"{kind} device", d, None) for d in found]
        else:
            rows.append((f"{kind} device", f"missing ({why})", fix))
    ptxas = find_ptxas()
    rows.append(("ptxas", ptxas or "missing (PTX is handed to the driver's JIT instead)",
                 None if ptxas else "pip install nvidia-cuda-nvcc-cu12, or the CUDA toolkit; or EMBER_PTXAS=PATH"))
    libdevice = find_libdevice()
    rows.append(("libdevice", libdevice or "missing (CUDA math functions use ember's own approximations)",
                 None if libdevice else "pip install nvidia-cuda-nvcc-cu12, or the CUDA toolkit; "
                 "or EMBER_LIBDEVICE=/path/libdevice.10.bc"))
    try:
        lld = shlex.join(find_lld())
        rows.append(("ld.lld", lld, None))
    except ToolchainError as exc:
        rows.append(("ld.lld", "missing (needed to compile for rocm)", str(exc).split(": ", 1)[-1]))
    ocml = find_device_libs()
    rows.append(("ocml", ocml or "missing (ROCm math functions use ember's own approximations)",
                 None if ocml else "apt-get install rocm-device-libs (or ROCm); or EMBER_ROCM_DEVICE_LIBS=DIR"))
    for pkg, what, fix in (("onnx", "reading ONNX models", "pip install onnx"),
                           ("onnxruntime", "ember bench --compare, ember compare", "pip install onnxruntime"),
                           ("matplotlib", "ember profile --roofline", "pip install 'ember[profile]'"),
                           ("torch", "torch.compile(backend='ember'), ember.from_torch", "pip install 'ember[torch]'")):
        v = _version(pkg)
        rows.append((pkg, f"{v} ({what})" if v else f"missing ({what})", None if v else fix))
    return rows


def run(args: argparse.Namespace) -> int:
    """Print :func:`report`."""
    for section, found, fix in report():
        print(f"{section:<14} {found}")
        if fix:
            print(f"{'':<14}   fix: {fix}")
    return 0
