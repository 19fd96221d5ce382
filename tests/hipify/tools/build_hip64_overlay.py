"""Maintenance tool: regenerate ember/hipify/maps/hip64.json, what HIP 6.4 adds to the HIP 5.2 tables.

Not run by the tests. Steps (from the repository root, after scripts/fetch_rocm_sysroot.sh):

    python3 tests/hipify/tools/build_maps.py --hip-include /opt/ember-rocm-6.4/usr/include --out /tmp/maps64
    python3 tests/hipify/tools/build_hip64_overlay.py /tmp/maps64

The overlay holds (1) every CUDA name the header-checked tables (runtime, driver, device, types, cuRAND,
cuSPARSE) map under HIP 6.4 but not under HIP 5.2, as found by build_maps.py against the HIP 6.4 headers, and
(2) the bf16 / fp8 / math-constant names, which build_maps.py lists by hand as unsupported for HIP 5.2: a CUDA
name goes in only when the HIP 6.4 headers declare its HIP counterpart. ``*_sync`` warp functions are left out:
HIP 6.4 declares them only with -DHIP_ENABLE_WARP_SYNC_BUILTINS, and the translator's mask-dropping rewrite
works on every HIP version.
"""

from __future__ import annotations

import glob
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from ember.hipify.tokenizer import IDENT, tokenize  # noqa: E402

MAPS = ROOT / "ember" / "hipify" / "maps"
HIP64 = Path("/opt/ember-rocm-6.4/usr/include")
CUDA_INC = Path("/usr/local/cuda/include")
CHECKED_TABLES = ("runtime", "driver", "device", "types", "curand", "cusparse")

# CUDA header -> HIP 6.4 header, beyond includes.json
INCLUDES = {
    "cuda_bf16.h": "hip/hip_bf16.h",
    "cuda_bf16.hpp": "hip/hip_bf16.h",
    "cuda_fp8.h": "hip/hip_fp8.h",
    "cuda_fp8.hpp": "hip/hip_fp8.h",
    "math_constants.h": "hip/hip_math_constants.h",
}
# driver functions build_maps.py does not derive by rule (HIP 6 added hipDrv* spellings with CUDA's signature)
DRIVER = {
    "cuGetErrorString": "hipDrvGetErrorString",
    "cuGetErrorName": "hipDrvGetErrorName",
    # CUDA's deprecated spelling of CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED (same value, 102)
    "CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED": "hipDeviceAttributeVirtualMemoryManagementSupported",
}
# the bf16 scalar / pair types (HIP 5.2 maps the scalar to its older hip_bfloat16 class)
BF16_TYPES = {
    "nv_bfloat16": "__hip_bfloat16",
    "__nv_bfloat16": "__hip_bfloat16",
    "nv_bfloat162": "__hip_bfloat162",
    "__nv_bfloat162": "__hip_bfloat162",
    "__nv_bfloat16_raw": "__hip_bfloat16_raw",
    "__nv_bfloat162_raw": "__hip_bfloat162_raw",
}


def idents(paths: list[Path]) -> set[str]:
    """Every identifier outside comments and strings in the given files."""
    names: set[str] = set()
    for p in paths:
        names.update(t.text for t in tokenize(p.read_text(errors="replace"), str(p)) if t.kind == IDENT)
    return names


def main(maps64: Path) -> None:
    """Write maps/hip64.json from the HIP 6.4 build of the tables in ``maps64``."""
    hip = idents([Path(f) for f in glob.glob(str(HIP64 / "hip" / "**" / "*.h*"), recursive=True)])
    mapped: dict[str, str] = {}
    fields: list[str] = []
    kinds: dict[str, str] = {}
    same: set[str] = set()
    for table in CHECKED_TABLES:
        old = json.loads((MAPS / f"{table}.json").read_text())
        new = json.loads((maps64 / f"{table}.json").read_text())
        for cuda, name in new.get("map", {}).items():
            if old.get("map", {}).get(cuda) != name:
                mapped[cuda], kinds[cuda] = name, table
        if table == "types":  # cudaDeviceProp fields hipDeviceProp_t gained (same name)
            gone = set(old["struct_members"]["unsupported"]) - set(new["struct_members"]["unsupported"])
            fields = sorted(gone)
        if table == "device":
            same |= {n for n in set(new.get("same", [])) - set(old.get("same", [])) if not n.endswith("_sync")}
    # bf16: the CUDA names HIP 6.4 declares as written are valid as they are; the types are renamed
    cuda_bf16 = idents([CUDA_INC / "cuda_bf16.h", CUDA_INC / "cuda_bf16.hpp"])
    for name in sorted(cuda_bf16):
        if re.match(r"__[a-z0-9_]*bfloat16|make_bfloat162|__[a-z0-9]*2bfloat16|__h[a-z0-9_]*$", name) and name in hip:
            same.add(name)
    for cuda, name in BF16_TYPES.items():
        if name in hip:
            mapped[cuda], kinds[cuda] = name, "device"
    for cuda, name in DRIVER.items():
        if name in hip:
            mapped[cuda], kinds[cuda] = name, "driver"
    same -= {"__host__", "__half"}  # matched by the pattern, not functions
    # fp8: __nv_X -> __hip_X and __NV_X -> __HIP_X where HIP 6.4 declares the counterpart
    cuda_fp8 = idents([CUDA_INC / "cuda_fp8.h", CUDA_INC / "cuda_fp8.hpp"])
    for name in sorted(cuda_fp8):
        for prefix, hprefix in (("__nv_", "__hip_"), ("__NV_", "__HIP_")):
            if name.startswith(prefix) and hprefix + name[len(prefix) :] in hip:
                mapped[name], kinds[name] = hprefix + name[len(prefix) :], "device"
    # math constants: CUDART_X -> HIP_X (hip/hip_math_constants.h; HIP spells them HIP_INF_F, HIP_PI, ...)
    types = json.loads((MAPS / "types.json").read_text())
    constants = idents([HIP64 / "hip" / "amd_detail" / "amd_hip_math_constants.h"])
    for name in types.get("unsupported", {}):
        if name.startswith("CUDART_") and "HIP_" + name[len("CUDART_") :] in constants:
            mapped[name], kinds[name] = "HIP_" + name[len("CUDART_") :], "types"
    includes = {c: h for c, h in INCLUDES.items() if (HIP64 / h).exists()}
    data = {
        "name": "hip64",
        "title": "HIP 6.4 additions to the HIP 5.2 tables",
        "verified_against": "hip64",
        "since": "6.4",
        "map": dict(sorted(mapped.items())),
        "kinds": dict(sorted(kinds.items())),
        "same": sorted(same),
        "includes": dict(sorted(includes.items())),
        "device_prop_fields": fields,
        # HIP 6 renamed hipPointerAttribute_t::memoryType to CUDA's own name, type; code for old CUDA
        # (taken under HIP, where CUDA_VERSION is undefined) still says memoryType
        "member_structs": ["cudaPointerAttributes"],
        "member_renames": {"memoryType": "type"},
    }
    (MAPS / "hip64.json").write_text(json.dumps(data, indent=1, ensure_ascii=True) + "\n")
    print(f"hip64.json: map={len(mapped)} same={len(same)} includes={len(includes)}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/maps64"))
