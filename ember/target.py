"""Targets: what a kernel is compiled for.

``Target("llvm")`` is the host CPU (its name and features detected through LLVM; ``-mcpu=`` and
``-mattr=`` override them); ``Target("cuda -arch=sm_90")`` an NVIDIA GPU; ``Target("rocm
-mcpu=gfx942")`` an AMD GPU. A target knows its LLVM triple, vector width, warp size, thread and
shared-memory limits and peak rates (used by the profiler and the tuner).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field

from .errors import TargetError

#: The NVIDIA architecture assumed for a ``cuda`` target without ``-arch`` until a build fills
#: in the GPU present (:meth:`ember.backends.cuda.CUDABackend.resolve`).
DEFAULT_CUDA_ARCH = "sm_80"


@functools.lru_cache(maxsize=1)
def _llvm_host() -> tuple[str, str, str]:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    feats = llvm.get_host_cpu_features().flatten()
    return llvm.get_process_triple(), llvm.get_host_cpu_name(), feats


@dataclass(frozen=True)
class Target:
    """A compilation target parsed from a string such as ``"llvm -mcpu=skylake-avx512"``."""

    kind: str
    options: tuple[tuple[str, str], ...] = field(default=())

    def __init__(self, spec: str | Target = "llvm"):
        if isinstance(spec, Target):
            object.__setattr__(self, "kind", spec.kind)
            object.__setattr__(self, "options", spec.options)
            return
        if not isinstance(spec, str) or not spec.strip():
            raise TargetError(f"target must be a string like 'llvm' or 'cuda -arch=sm_90', got {spec!r}")
        parts = spec.split()
        kind = parts[0]
        if kind in ("c", "cpu", "host"):
            kind = "llvm"
        if kind not in ("llvm", "cuda", "nvptx", "rocm", "amdgpu"):
            raise TargetError(f"unknown target {kind!r}: use 'llvm' (CPU), 'cuda' (NVIDIA) or 'rocm' (AMD)")
        kind = {"nvptx": "cuda", "amdgpu": "rocm"}.get(kind, kind)
        opts: dict[str, str] = {}
        for p in parts[1:]:
            m = re.match(r"^-{1,2}([a-zA-Z_]+)(?:=(.*))?$", p)
            if m is None:
                raise TargetError(f"target option {p!r} in {spec!r} is not of the form -key=value")
            key, value = m.group(1), m.group(2) or ""
            if key not in ("mcpu", "mattr", "arch", "mtriple", "num_threads", "keys"):
                raise TargetError(
                    f"unknown target option -{key} in {spec!r} (known: -mcpu, -mattr, -arch, -mtriple, -num_threads)"
                )
            opts[key] = value
        if kind == "cuda" and opts.get("arch"):
            # Without -arch the CUDA backend fills it in at build time from the GPU present
            # (parsing a target never touches a driver).
            if not re.match(r"^sm_\d+a?$", opts["arch"]):
                raise TargetError(f"-arch={opts['arch']} is not an NVIDIA architecture like sm_80 or sm_90a")
        if kind == "rocm":
            mcpu = opts.get("mcpu", "gfx942")
            if not re.match(r"^gfx[0-9a-f]+$", mcpu):
                raise TargetError(f"-mcpu={mcpu} is not an AMD GPU like gfx90a, gfx942 or gfx1100")
            opts["mcpu"] = mcpu
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "options", tuple(sorted(opts.items())))

    def __str__(self) -> str:
        return " ".join([self.kind] + [f"-{k}={v}" for k, v in self.options])

    def opt(self, key: str, default: str = "") -> str:
        """The value of option ``-key`` (``default`` when absent)."""
        return dict(self.options).get(key, default)

    # -- CPU ------------------------------------------------------------------------------------
    @property
    def triple(self) -> str:
        """The LLVM target triple."""
        if self.kind == "cuda":
            return "nvptx64-nvidia-cuda"
        if self.kind == "rocm":
            return "amdgcn-amd-amdhsa"
        return self.opt("mtriple") or _llvm_host()[0]

    @property
    def mcpu(self) -> str:
        """The CPU or GPU model LLVM generates code for."""
        if self.kind == "cuda":
            return self.opt("arch") or DEFAULT_CUDA_ARCH
        if self.kind == "rocm":
            return self.opt("mcpu")
        return self.opt("mcpu") or _llvm_host()[1]

    @property
    def mattr(self) -> str:
        """LLVM feature string (``+avx2,+fma``...)."""
        if self.kind == "llvm" and not self.opt("mcpu") and not self.opt("mattr"):
            return _llvm_host()[2]
        return self.opt("mattr")

    @property
    def features(self) -> frozenset[str]:
        """Enabled CPU features (``avx2``, ``avx512f``, ``fma``, ``neon``...)."""
        feats = {f[1:] for f in self.mattr.split(",") if f.startswith("+")}
        if self.kind == "llvm" and self.opt("mcpu") and not self.opt("mattr"):
            feats |= _features_of_cpu(self.mcpu)
        if self.triple.startswith(("aarch64", "arm64")):
            feats.add("neon")
        return frozenset(feats)

    @property
    def vector_bits(self) -> int:
        """Width of the widest vector registers, in bits."""
        if self.kind != "llvm":
            return 128
        f = self.features
        if "avx512f" in f:
            return 512
        if "avx2" in f or "avx" in f:
            return 256
        return 128

    def vector_lanes(self, bits: int) -> int:
        """How many elements of ``bits`` bits one vector register holds."""
        return max(1, self.vector_bits // bits)

    @property
    def num_threads(self) -> int:
        """Threads parallel CPU loops use (``-num_threads``, else all cores of this process)."""
        n = self.opt("num_threads")
        if n:
            return int(n)
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover
            return os.cpu_count() or 1

    # -- GPU --------------------------------------------------------------------------------------
    @property
    def is_gpu(self) -> bool:
        """True for cuda and rocm."""
        return self.kind in ("cuda", "rocm")

    @property
    def warp_size(self) -> int:
        """Threads that execute in lock step: 32 on NVIDIA and RDNA (wave32), 64 on CDNA/GCN."""
        if self.kind == "cuda":
            return 32
        if self.kind == "rocm":
            if "+wavefrontsize64" in self.opt("mattr"):
                return 64
            return 32 if int(self.mcpu[3:-2] or "9") >= 10 else 64
        return 1

    @property
    def max_threads_per_block(self) -> int:
        """Most threads one block may have."""
        return 1024 if self.is_gpu else 1

    @property
    def max_shared_memory_per_block(self) -> int:
        """Bytes of shared memory one block may use (static allocation)."""
        if self.kind == "cuda":
            return 48 * 1024
        if self.kind == "rocm":
            return 64 * 1024
        return 0

    @property
    def max_shared_memory_per_block_optin(self) -> int:
        """Bytes of shared memory one block may use when it asks for more than the static limit
        (dynamic shared memory on NVIDIA; the LDS size on AMD)."""
        if self.kind == "cuda":
            cc = int(re.sub(r"\D", "", self.opt("arch")) or 80)
            table = {70: 96, 72: 96, 75: 64, 80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227, 120: 99}
            return table.get(cc, 48) * 1024
        return self.max_shared_memory_per_block

    @property
    def peak_gflops_fp32(self) -> float:
        """Nominal fp32 peak (GFLOP/s), used for roofline estimates."""
        table = {
            "sm_90": 67000.0,
            "sm_90a": 67000.0,
            "sm_80": 19500.0,
            "sm_86": 35600.0,
            "sm_89": 82600.0,
            "gfx942": 163400.0,
            "gfx90a": 47900.0,
            "gfx1100": 61400.0,
        }
        if self.is_gpu:
            return table.get(self.mcpu, 10000.0)
        lanes = self.vector_lanes(32)
        fma = 2 if "fma" in self.features else 1
        return 3.0 * lanes * fma * 2 * self.num_threads  # ~3 GHz, two FMA ports

    @property
    def peak_bandwidth_gbs(self) -> float:
        """Nominal memory bandwidth (GB/s)."""
        table = {
            "sm_90": 3350.0,
            "sm_90a": 3350.0,
            "sm_80": 2039.0,
            "gfx942": 5300.0,
            "gfx90a": 3277.0,
            "gfx1100": 960.0,
        }
        return table.get(self.mcpu, 100.0 if not self.is_gpu else 1000.0)


def _features_of_cpu(mcpu: str) -> set[str]:
    base = {
        "x86-64-v3": {"avx", "avx2", "fma"},
        "x86-64-v4": {"avx", "avx2", "fma", "avx512f"},
        "haswell": {"avx", "avx2", "fma"},
        "skylake": {"avx", "avx2", "fma"},
        "skylake-avx512": {"avx", "avx2", "fma", "avx512f"},
        "icelake-server": {"avx", "avx2", "fma", "avx512f"},
        "sapphirerapids": {"avx", "avx2", "fma", "avx512f"},
        "znver3": {"avx", "avx2", "fma"},
        "znver4": {"avx", "avx2", "fma", "avx512f"},
        "znver5": {"avx", "avx2", "fma", "avx512f"},
    }
    return set(base.get(mcpu, set()))


def create(spec: str | Target) -> Target:
    """A :class:`Target` from a string or a target."""
    return Target(spec)
