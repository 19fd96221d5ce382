"""Finding a compiler for hipify's output: the HIP version a translation targets and how to compile it.

Two targets are supported, each with the toolchain this project can install on Debian 12 without a GPU:

* **HIP 6.4** (the default target): Debian 12's ``clang-22`` (with ``clang-tools-22`` for
  ``clang-offload-bundler``) against a sysroot of Debian unstable's HIP 6.4 headers, ROCm libraries'
  headers and ROCm device bitcode, which ``scripts/fetch_rocm_sysroot.sh`` unpacks under
  ``/opt/ember-rocm-6.4`` (``EMBER_ROCM_SYSROOT``). clang 22 no longer predefines
  ``__AMDGCN_WAVEFRONT_SIZE``, which HIP 6.4's headers read; the command defines it as 64, the wavefront
  size of every gfx9 (CDNA) target.
* **HIP 5.2**: Debian 12's own ``hipcc`` with ``HIP_PLATFORM=amd``, plus the hipBLAS/hipCUB/RCCL headers
  ``scripts/fetch_hip_lib_headers.sh`` unpacks under ``/opt/ember-hip-libs`` (``EMBER_HIP_LIBS``).

Both compile for ``--offload-arch=gfx90a`` (MI200) by default; linking needs the ROCm runtime libraries and
is not attempted (``-c`` only).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .errors import HipifyError

HIP_VERSIONS = ("6.4", "5.2")
DEFAULT_HIP_VERSION = "6.4"
DEFAULT_OFFLOAD_ARCH = "gfx90a"


def check_hip_version(hip_version: str) -> str:
    """``hip_version`` itself when it is a supported target, else a HipifyError naming the choices."""
    if hip_version not in HIP_VERSIONS:
        raise HipifyError(f"unsupported HIP target version {hip_version!r}: choose one of {', '.join(HIP_VERSIONS)}")
    return hip_version


def version_tuple(version: str) -> tuple[int, ...]:
    """``"6.4"`` -> ``(6, 4)``, for comparing a table entry's ``since`` with the target."""
    return tuple(int(part) for part in version.split("."))


@dataclass(frozen=True)
class HipToolchain:
    """A found compiler for one HIP target: ``command(source, output)`` gives the argv to run."""

    hip_version: str
    compiler: str
    flags: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    include_root: Path = Path("/usr/include")  # where this target's hip/, hipblas/, ... headers are

    def command(
        self,
        source: str,
        output: str,
        *,
        includes: tuple[str, ...] | list[str] = (),
        defines: tuple[str, ...] | list[str] = (),
        offload_arch: str = DEFAULT_OFFLOAD_ARCH,
        as_hip: bool = True,
    ) -> list[str]:
        """Compile-only argv for ``source`` -> ``output``; ``as_hip=False`` compiles a host-only C++ unit."""
        mode = ["-x", "hip", f"--offload-arch={offload_arch}"] if as_hip else ["-x", "c++"]
        extra = [f"-I{d}" for d in includes] + [f"-D{d}" for d in defines]
        return [self.compiler, *mode, *self.flags, *extra, "-c", source, "-o", output]

    def environment(self) -> dict[str, str]:
        """The process environment to run ``command`` in."""
        return dict(os.environ, **self.env)

    def has_header(self, header: str) -> bool:
        """Whether ``header`` (e.g. ``hipblas/hipblas.h``) is available to this toolchain."""
        return (self.include_root / header).exists()


def rocm_sysroot() -> Path:
    """Where ``scripts/fetch_rocm_sysroot.sh`` unpacks HIP 6.4 (``EMBER_ROCM_SYSROOT``)."""
    return Path(os.environ.get("EMBER_ROCM_SYSROOT", "/opt/ember-rocm-6.4"))


def hip52_library_headers() -> Path:
    """Where ``scripts/fetch_hip_lib_headers.sh`` unpacks hipBLAS/hipCUB/RCCL for HIP 5.2 (``EMBER_HIP_LIBS``)."""
    return Path(os.environ.get("EMBER_HIP_LIBS", "/opt/ember-hip-libs")) / "usr" / "include"


def find_hip_toolchain(hip_version: str = DEFAULT_HIP_VERSION) -> HipToolchain:
    """The compiler for ``hip_version`` output; HipifyError naming the missing piece and how to install it."""
    check_hip_version(hip_version)
    if hip_version == "5.2":
        return _find_hipcc52()
    return _find_clang_hip64()


def _find_hipcc52() -> HipToolchain:
    hipcc = shutil.which("hipcc")
    if hipcc is None:
        raise HipifyError(
            "hipcc not found: install Debian 12's HIP 5.2 compiler (apt-get install hipcc rocm-device-libs)"
        )
    if not Path("/usr/include/hip/hip_runtime.h").exists():
        raise HipifyError("HIP 5.2 headers not found in /usr/include/hip: apt-get install libamdhip64-dev")
    flags = ["-std=c++17", "-DHIPBLAS_V2"]  # rocPRIM 6 needs C++17, as CUB 2 does; hipBLAS v2 API
    libs = hip52_library_headers()
    if libs.is_dir():
        flags += ["-isystem", str(libs)]
    return HipToolchain("5.2", hipcc, tuple(flags), {"HIP_PLATFORM": "amd"}, Path("/usr/include"))


def _find_clang_hip64() -> HipToolchain:
    clang = shutil.which("clang++-22") or _existing("/usr/lib/llvm-22/bin/clang++")
    if clang is None:
        raise HipifyError("clang++-22 not found: HIP 6.4 output is compiled with clang 22 (apt-get install clang-22)")
    bundler = Path(clang).resolve().parent / "clang-offload-bundler"
    if not bundler.exists() and shutil.which("clang-offload-bundler-22") is None:
        raise HipifyError(
            f"clang-offload-bundler not found beside {clang}: clang needs it to build a HIP object "
            "(apt-get install clang-tools-22)"
        )
    root = rocm_sysroot() / "usr"
    if not (root / "include" / "hip" / "hip_runtime.h").exists():
        raise HipifyError(
            f"HIP 6.4 headers not found under {root}/include: run scripts/fetch_rocm_sysroot.sh "
            "(or set EMBER_ROCM_SYSROOT to a ROCm 6.4 install's parent of usr/)"
        )
    bitcode = sorted(root.glob("lib/llvm-*/lib/clang/*/amdgcn/bitcode"))
    if not bitcode or not (bitcode[-1] / "ocml.bc").exists():
        raise HipifyError(
            f"ROCm device bitcode (ocml.bc) not found under {root}/lib: run scripts/fetch_rocm_sysroot.sh"
        )
    flags = (
        f"--rocm-path={root}",
        f"--rocm-device-lib-path={bitcode[-1]}",
        "-isystem",
        str(root / "include"),  # ahead of /usr/include, which may hold Debian 12's HIP 5.2 headers
        "-D__AMDGCN_WAVEFRONT_SIZE=64",  # read by HIP 6.4's headers; clang 22 dropped it (gfx9 is wave64)
        "-DHIPBLAS_V2",
        "-std=c++17",
    )
    return HipToolchain("6.4", clang, flags, {}, root / "include")


def _existing(path: str) -> str | None:
    return path if Path(path).exists() else None
