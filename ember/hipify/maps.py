"""The CUDA -> HIP mapping tables, loaded from the JSON files in ``ember/hipify/maps/``.

Each table file has ``name``, ``title``, ``map`` (CUDA name -> HIP name) and ``unsupported``
(CUDA name -> nearest HIP alternative, "" when there is none). ``device.json`` also has ``same``
(device functions valid in HIP as written) and ``rewrite`` (warp intrinsics whose mask argument is
dropped); ``cub.json`` has ``namespace`` and ``members``; ``includes.json`` maps header names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

# Order matters only for the (rare) names present in two tables: the first one wins.
TABLES = (
    "runtime",
    "driver",
    "device",
    "types",
    "cublas",
    "curand",
    "cufft",
    "cusparse",
    "cusolver",
    "cub",
    "cudnn",
)

# Identifiers that look like a CUDA API by their prefix; one that is in no table is reported.
CUDA_LIKE = re.compile(
    r"^(?:cuda[A-Z]\w*|cublas[A-Z]\w*|CUBLAS_\w+|curand(?:_|[A-Z])\w*|CURAND_\w+|cufft[A-Z]\w*|CUFFT_\w+|"
    r"cusparse[A-Z]\w*|CUSPARSE_\w+|cusolver[A-Z]\w*|CUSOLVER_\w+|cudnn[A-Z]\w*|CUDNN_\w+|nvrtc[A-Z]\w*|"
    r"NVRTC_\w+|nvml[A-Z]\w*|cupti[A-Z]\w*|nvtx[A-Z]\w*|nvjpeg[A-Z]\w*|__nv_[a-z]\w*|nv_bfloat16\w*)$"
)
# Prefixes of CUDA-only libraries with no HIP counterpart (for the lint and the report).
CUDA_ONLY_PREFIXES = {
    "nvml": "ROCm SMI (rsmi_*)",
    "cupti": "rocprofiler / roctracer",
    "nvtx": "roctx (roctxRangePushA / roctxRangePop)",
    "nvjpeg": "rocJPEG (ROCm >= 6.2)",
    "cufile": "none: no GPUDirect Storage on AMD",
    "cusparseLt": "hipSPARSELt",
    "cublasLt": "hipBLASLt",
}


@dataclass(frozen=True, slots=True)
class TableInfo:
    """Size and title of one table, for ``--list-maps``."""

    name: str
    title: str
    mapped: int
    unsupported: int
    verified_against: str


class Maps:
    """All tables, indexed for lookup by CUDA name."""

    def __init__(self) -> None:
        self.names: dict[str, tuple[str, str]] = {}  # cuda -> (kind, hip)
        self.unsupported: dict[str, tuple[str, str]] = {}  # cuda -> (kind, alternative)
        self.same: set[str] = set()
        self.rewrite: dict[str, str] = {}
        self.cub_namespace: dict[str, str] = {}
        self.cub_members: set[str] = set()
        self.cub_unsupported: dict[str, str] = {}
        self.includes: dict[str, str] = {}
        self.includes_unsupported: dict[str, str] = {}
        self.info: list[TableInfo] = []
        self.prop_structs: set[str] = set()  # struct names whose member accesses are checked
        self.prop_members: dict[str, str] = {}  # cudaDeviceProp field -> hipDeviceProp_t field
        self.prop_missing: dict[str, str] = {}  # cudaDeviceProp field -> alternative
        for name in TABLES:
            data = _load(name)
            for cuda, hip in data.get("map", {}).items():
                self.names.setdefault(cuda, (name, hip))
            if name == "cub":
                self.cub_namespace = dict(data["namespace"])
                self.cub_members = set(data["members"])
                self.cub_unsupported = dict(data["unsupported"])
            else:
                for cuda, alt in data.get("unsupported", {}).items():
                    if cuda not in self.names:
                        self.unsupported.setdefault(cuda, (name, alt))
            if "struct_members" in data:
                self.prop_structs.update(data["struct_members"]["struct"])
                self.prop_members.update(data["struct_members"]["map"])
                self.prop_missing.update(data["struct_members"]["unsupported"])
            self.same.update(data.get("same", []))
            self.rewrite.update(data.get("rewrite", {}))
            mapped = len(data.get("map", {})) + len(data.get("rewrite", {})) + len(data.get("members", []))
            self.info.append(
                TableInfo(
                    name,
                    data["title"],
                    mapped,
                    len(data.get("unsupported", {})),
                    data.get("verified_against", ""),
                )
            )
        inc = _load("includes")
        self.includes = dict(inc["map"])
        self.includes_unsupported = dict(inc["unsupported"])
        self.info.append(
            TableInfo("includes", inc["title"], len(self.includes), len(self.includes_unsupported), "")
        )

    def include(self, header: str) -> str | None:
        """HIP header for a CUDA header name such as ``cuda_runtime.h`` (None when not a CUDA header)."""
        if header in self.includes:
            return self.includes[header]
        if header.startswith("cub/") and header.endswith(".cuh"):
            return "hipcub/hipcub.hpp"
        return None

    def include_alternative(self, header: str) -> str | None:
        """Nearest alternative for a CUDA-only header (None when the header is not one)."""
        if header in self.includes_unsupported:
            return self.includes_unsupported[header]
        for prefix in (
            "cutlass/",
            "cute/",
            "nvtx3/",
            "cuda/",
            "cudnn_frontend",
            "cusparseLt",
            "nvjpeg",
            "npp",
        ):
            if header.startswith(prefix):
                return self.includes_unsupported.get(prefix.rstrip("/") + "/cutlass.h", "") or "none"
        return None


def _load(name: str) -> dict:
    """One table file as a dict."""
    text = resources.files("ember.hipify").joinpath("maps", f"{name}.json").read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def load_maps() -> Maps:
    """The tables, loaded once per process."""
    return Maps()


def table_sizes() -> list[TableInfo]:
    """Title and number of mapped / unsupported entries of every table."""
    return list(load_maps().info)
