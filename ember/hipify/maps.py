"""The CUDA -> HIP mapping tables, loaded from the JSON files in ``ember/hipify/maps/``.

Each table file has ``name``, ``title``, ``map`` (CUDA name -> HIP name) and ``unsupported``
(CUDA name -> nearest HIP alternative, "" when there is none). ``device.json`` also has ``same``
(device functions valid in HIP as written) and ``rewrite`` (warp intrinsics whose mask argument is
dropped); ``cub.json`` has ``namespace`` and ``members``; ``includes.json`` maps header names.

Two overlays change the tables for a target: ``hip64.json`` (what HIP 6.4 adds to HIP 5.2: more runtime,
driver and library names, the bf16 pair type and intrinsics, fp8, ``HIPRT_*`` math constants; applied when the
target is HIP >= its ``since``) and ``compat.json`` (CUDA device intrinsics no HIP version has, renamed to the
``ember_*`` functions of ``ember_hip_compat.h``, which the translated file then includes; its ``replace`` section,
the launch-attribute, graph-update and cuBLAS-workspace APIs HIP 6.4 lacks, replaces the tables' entries on every
target, and ``warn`` names those converted with a warning at the use site).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from .toolchain import DEFAULT_HIP_VERSION, check_hip_version, version_tuple

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
    """All tables for one HIP target version, indexed for lookup by CUDA name."""

    def __init__(self, hip_version: str = DEFAULT_HIP_VERSION) -> None:
        self.hip_version = check_hip_version(hip_version)
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
        self.info.append(TableInfo("includes", inc["title"], len(self.includes), len(self.includes_unsupported), ""))
        self.compat: dict[str, str] = {}  # cuda -> ember_* function of the compat header
        self.warn: dict[str, str] = {}  # cuda -> lint rule: converted, with a warning at the use site
        self.compat_header = ""
        self._overlay_hip64()
        self._overlay_compat()

    def _overlay_hip64(self) -> None:
        """Apply hip64.json when the target is at least its version."""
        data = _load("hip64")
        if version_tuple(self.hip_version) < version_tuple(data["since"]):
            return
        kinds = data["kinds"]
        for cuda, hip in data["map"].items():
            self.names[cuda] = (kinds.get(cuda, "types"), hip)
            self.unsupported.pop(cuda, None)
        for name in data["same"]:
            self.same.add(name)
            self.unsupported.pop(name, None)
        for field in data["device_prop_fields"]:
            self.prop_missing.pop(field, None)
        self.prop_structs.update(data["member_structs"])
        self.prop_members.update(data["member_renames"])
        for cuda, hip in data["includes"].items():
            self.includes[cuda] = hip
            self.includes_unsupported.pop(cuda, None)
        n = len(data["map"]) + len(data["same"]) + len(data["includes"])
        self.info.append(TableInfo("hip64", data["title"], n, 0, data.get("verified_against", "")))

    def _overlay_compat(self) -> None:
        """Rename the intrinsics of compat.json that this HIP version lacks to their ember_* functions."""
        try:
            data = _load("compat")
        except FileNotFoundError:  # pragma: no cover - only in a tree without the compat header
            return
        self.compat_header = data["header"]
        for cuda, ember in data["map"].items():
            if cuda in self.same or cuda in self.names:
                continue  # this HIP version has it
            self.compat[cuda] = ember
            self.unsupported.pop(cuda, None)
        self.info.append(TableInfo("compat", data["title"], len(self.compat), 0, ""))
        # APIs HIP lacks or has only in part (launch attributes: HIP 6.4 has 3 of CUDA's 16 ids, and no launch
        # function taking them): the compat header's version replaces the tables' on every target
        replace = data.get("replace", {})
        for cuda, ember in replace.items():
            for table in (self.names, self.unsupported, self.rewrite):
                table.pop(cuda, None)
            self.same.discard(cuda)
            self.compat[cuda] = ember
        if replace:
            self.info.append(TableInfo("compat-api", data["replace_title"], len(replace), 0, ""))
        for rule, names in data.get("warn", {}).items():
            for cuda in names:
                self.warn[cuda] = rule

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


@lru_cache(maxsize=4)
def load_maps(hip_version: str = DEFAULT_HIP_VERSION) -> Maps:
    """The tables for one HIP target version, loaded once per process."""
    return Maps(hip_version)


def table_sizes(hip_version: str = DEFAULT_HIP_VERSION) -> list[TableInfo]:
    """Title and number of mapped / unsupported entries of every table (overlays included)."""
    return list(load_maps(hip_version).info)


def compat_header_text() -> str:
    """The text of ``ember_hip_compat.h``, the ``ember_*`` implementations of intrinsics HIP lacks."""
    return resources.files("ember.hipify").joinpath("compat", "ember_hip_compat.h").read_text(encoding="utf-8")
