"""The project's CUDA corpus: expected HIP output line by line, 100 % conversion, and compiles.

Both HIP targets are checked. HIP 6.4 (the default): expected output in corpus/hip/, compiled for gfx90a by
clang-22 against the HIP 6.4 sysroot (scripts/fetch_rocm_sysroot.sh). HIP 5.2: expected output in corpus/hip52/
where it differs from corpus/hip/, compiled by Debian 12's hipcc (HIP_PLATFORM=amd). No GPU is needed.
nvcc compiles every original whose CUDA headers are installed. A file whose library headers are not installable
here is skipped with the reason, never stubbed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import pytest

from ember.hipify import HipifyError, translate
from ember.hipify.maps import TABLES, _load, compat_header_text
from ember.hipify.toolchain import HIP_VERSIONS, find_hip_toolchain, rocm_sysroot

CORPUS = Path(__file__).parent / "corpus"
CUDA_DIR, HIP_DIR, GGL_DIR, HIP52_DIR = CORPUS / "cuda", CORPUS / "hip", CORPUS / "hip_ggl", CORPUS / "hip52"
SOURCES = sorted(p.name for p in CUDA_DIR.iterdir())
UNITS = [n for n in SOURCES if n.endswith((".cu", ".cpp"))]
HIP_INCLUDE = Path("/usr/include")
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
# hipBLAS/hipCUB/RCCL have no Debian 12 package: scripts/fetch_hip_lib_headers.sh unpacks their headers (Debian
# unstable's) under EMBER_HIP_LIBS; compiles get them with -isystem, and -DHIPBLAS_V2 for the hipBLAS v2 API
_HIP_LIBS = Path(os.environ.get("EMBER_HIP_LIBS", "/opt/ember-hip-libs")) / "usr" / "include"


def translated(name: str, syntax: str = "keep", hip_version: str = "6.4") -> str:
    text = (CUDA_DIR / name).read_bytes().decode("utf-8")
    return translate(text, name, launch_syntax=syntax, hip_version=hip_version).output


def expected(name: str, hip_version: str) -> Path:
    """The expected translation of corpus file ``name`` for a HIP target."""
    if hip_version == "5.2" and (HIP52_DIR / name).exists():
        return HIP52_DIR / name
    return HIP_DIR / name


@pytest.mark.parametrize("hip_version", HIP_VERSIONS)
@pytest.mark.parametrize("name", SOURCES)
def test_expected_output_line_by_line(name: str, hip_version: str) -> None:
    got = translated(name, hip_version=hip_version).splitlines(keepends=True)
    want = expected(name, hip_version).read_bytes().decode("utf-8").splitlines(keepends=True)
    assert len(got) == len(want), name
    for number, (g, w) in enumerate(zip(got, want), start=1):
        assert g == w, f"{name}:{number}: got {g!r}, expected {w!r}"


@pytest.mark.parametrize("name", sorted(p.name for p in GGL_DIR.glob("*.cu")))
def test_expected_ggl_output(name: str) -> None:
    assert translated(name, "ggl") == (GGL_DIR / name).read_bytes().decode("utf-8")


@pytest.mark.parametrize("hip_version", HIP_VERSIONS)
def test_corpus_converts_every_reference(hip_version: str) -> None:
    total = 0
    for name in SOURCES:
        if hip_version == "5.2" and name in HIP64_ONLY:
            continue  # uses names HIP 5.2 lacks (checked to be reported in test_hip52_reports_what_it_lacks)
        r = translate((CUDA_DIR / name).read_text(), name, hip_version=hip_version)
        assert r.unconverted == [], f"{name}: {r.unconverted}"
        total += len(r.converted)
    assert total > 200


def test_corpus_lint_finds_the_warp_size_assumptions() -> None:
    r = translate((CUDA_DIR / "softmax.cu").read_text(), "softmax.cu")
    lines = {(w.line, w.rule) for w in r.warnings}
    assert {(9, "warp-size"), (9, "full-mask"), (25, "warp-size"), (26, "warp-size")} <= lines


# corpus files that use what only HIP 6.4 has (bf16 pairs, fp8, hipDrvGetErrorString, ...)
HIP64_ONLY: set[str] = set()


def test_hip52_reports_what_it_lacks() -> None:
    for name in sorted(HIP64_ONLY):
        r = translate((CUDA_DIR / name).read_text(), name, hip_version="5.2")
        assert r.unconverted, f"{name}: HIP 5.2 lacks names it uses, yet nothing was reported"
        assert all(u.alternative for u in r.unconverted if u.kind != "unknown")


# ---- compile tests --------------------------------------------------------------------------------

# Headers each corpus file needs beyond the core runtime, per toolchain.
NEEDS_HIP = {
    "cublas_gemm.cu": ["hipblas/hipblas.h"],
    "cublas_mathmode.cu": ["hipblas/hipblas.h"],
    "cublas_workspace.cu": ["hipblas/hipblas.h"],
    "cub_scan.cu": ["hipcub/hipcub.hpp"],
    "curand_mc.cu": ["hiprand/hiprand.h", "rocrand/rocrand.h"],
    "cusparse_spmv.cu": ["hipsparse/hipsparse.h"],
}
NEEDS_CUDA = {
    "cublas_gemm.cu": ["cublas_v2.h"],
    "cublas_mathmode.cu": ["cublas_v2.h"],
    "cublas_workspace.cu": ["cublas_v2.h"],
    "curand_mc.cu": ["curand.h"],
    "cusparse_spmv.cu": ["cusparse.h"],
}
# nvcc flags beyond -c: the PDL device functions and __reduce_*_sync need sm_80 / sm_90
NVCC_FLAGS = {"launch_ex.cu": ["-arch=sm_90"]}
DEBIAN_PACKAGE = {
    "hipblas/hipblas.h": "hipBLAS has no Debian 12 package: scripts/fetch_hip_lib_headers.sh",
    "hipcub/hipcub.hpp": "hipCUB has no Debian 12 package: scripts/fetch_hip_lib_headers.sh",
    "hiprand/hiprand.h": "apt-get install libhiprand-dev",
    "rocrand/rocrand.h": "apt-get install librocrand-dev",
    "hipsparse/hipsparse.h": "apt-get install libhipsparse-dev",
}


def _missing(headers: list[str], hip_version: str) -> list[str]:
    """Headers the toolchain of ``hip_version`` cannot find."""
    if hip_version == "6.4":
        root = rocm_sysroot() / "usr" / "include"
        return [h for h in headers if not (root / h).exists()]
    return [h for h in headers if not (HIP_INCLUDE / h).exists() and not (_HIP_LIBS / h).exists()]


def _missing_cuda(headers: list[str], root: Path) -> list[str]:
    """CUDA library headers not under ``root``."""
    return [h for h in headers if not (root / h).exists()]


def _missing_reason(missing: list[str], hip_version: str) -> str:
    if hip_version == "6.4":
        return f"{', '.join(missing)} not in the HIP 6.4 sysroot (run scripts/fetch_rocm_sysroot.sh)"
    return f"{', '.join(missing)} not installed ({'; '.join(DEBIAN_PACKAGE[m] for m in missing)})"


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@lru_cache(maxsize=2)
def compile_results(tmp: str, hip_version: str) -> dict[str, tuple[int, str]]:
    """Compile every translated unit (and the ggl variants) for one HIP target in parallel, once per session."""
    toolchain = find_hip_toolchain(hip_version)
    work = Path(tmp) / hip_version
    for sub, syntax in (("keep", "keep"), ("ggl", "ggl")):
        (work / sub).mkdir(parents=True, exist_ok=True)
        for n in SOURCES:
            (work / sub / n).write_bytes(translated(n, syntax, hip_version).encode("utf-8"))
        (work / sub / "ember_hip_compat.h").write_text(compat_header_text(), encoding="utf-8")
    jobs = {}
    for sub in ("keep", "ggl"):
        for n in UNITS:
            if sub == "ggl" and not (GGL_DIR / n).exists():
                continue
            if _missing(NEEDS_HIP.get(n, []), hip_version) or (hip_version == "5.2" and n in HIP64_ONLY):
                continue
            jobs[f"{sub}/{n}"] = (toolchain.command(n, f"{n}.o", includes=["."]), work / sub)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futs = {k: pool.submit(_run, cmd, cwd, toolchain.environment()) for k, (cmd, cwd) in jobs.items()}
        return {k: f.result() for k, f in futs.items()}


COMPILE_CASES = [(n, "keep", v) for v in HIP_VERSIONS for n in UNITS] + [
    (n, "ggl", v) for v in HIP_VERSIONS for n in UNITS if (GGL_DIR / n).exists()
]


@pytest.mark.slow
@pytest.mark.parametrize("name, variant, hip_version", COMPILE_CASES)
def test_translated_file_compiles_for_gfx90a(
    name: str, variant: str, hip_version: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    try:
        find_hip_toolchain(hip_version)
    except HipifyError as exc:
        pytest.skip(f"HIP {hip_version} toolchain: {exc}")
    if hip_version == "5.2" and name in HIP64_ONLY:
        pytest.skip(f"{name} uses names only HIP 6.4 has (HIP 5.2 reports them: test_hip52_reports_what_it_lacks)")
    missing = _missing(NEEDS_HIP.get(name, []), hip_version)
    if missing:
        pytest.skip(_missing_reason(missing, hip_version) + "; the text output is still checked line by line")
    results = compile_results(str(tmp_path_factory.getbasetemp() / "hipcc"), hip_version)
    rc, log = results[f"{variant}/{name}"]
    assert rc == 0, f"HIP {hip_version} compile failed on translated {name}:\n{log[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("name", UNITS)
def test_original_compiles_with_nvcc(name: str, tmp_path: Path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    missing = _missing_cuda(NEEDS_CUDA.get(name, []), CUDA_INCLUDE)
    if missing:
        pytest.skip(f"{', '.join(missing)} not in {CUDA_INCLUDE} (that CUDA library is not installed)")
    rc, log = _run(
        ["nvcc", *NVCC_FLAGS.get(name, []), "-c", str(CUDA_DIR / name), "-I", str(CUDA_DIR), "-o", str(tmp_path / "o")],
        tmp_path,
        dict(os.environ),
    )
    assert rc == 0, f"nvcc failed on original {name}:\n{log[-3000:]}"


# ---- the tables against the installed headers -----------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_]\w*")


@lru_cache(maxsize=4)
def header_identifiers(folder: str, skip: tuple[str, ...] = ()) -> frozenset[str]:
    names: set[str] = set()
    for p in Path(folder).rglob("*.h*"):
        if any(s in str(p) for s in skip):
            continue
        text = p.read_text(errors="replace")
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        names.update(_IDENT.findall(text))
    return frozenset(names)


# HIP 5.2 tables against Debian 12's headers; the cuBLAS table against the unpacked hipBLAS 6.4 headers; hipFFT,
# hipSOLVER, hipCUB, MIOpen and the HIP 6.4 overlay against the HIP 6.4 sysroot (scripts/fetch_rocm_sysroot.sh)
_SYSROOT = rocm_sysroot() / "usr" / "include"
HEADER_SETS = {
    "hip": ("/usr/include/hip", ("nvidia_detail", "nvcc_detail")),
    "hipblas": (str(_HIP_LIBS), ("rocprim", "hipcub", "rccl")),
    "hiprand": ("/usr/include/hiprand", ()),
    "hipsparse": ("/usr/include/hipsparse", ()),
    "hipfft": (str(_SYSROOT / "hipfft"), ()),
    "hipsolver": (str(_SYSROOT / "hipsolver"), ()),
    "hipcub": (str(_SYSROOT / "hipcub"), ()),
    "miopen": (str(_SYSROOT / "miopen"), ()),
    "hip64": (str(_SYSROOT / "hip"), ("nvidia_detail", "nvcc_detail")),
}


@pytest.mark.parametrize("table", (*TABLES, "hip64"))
def test_every_hip_name_exists_in_the_installed_headers(table: str) -> None:
    data = _load(table)
    against = data.get("verified_against", "")
    if not against:
        pytest.skip(f"{data['title']}: no Debian package ships its HIP headers; the table is checked by review")
    folder, skip = HEADER_SETS[against]
    if not Path(folder).is_dir():
        pytest.skip(f"{folder} not installed (scripts/install_system_deps.sh fetches it)")
    known = header_identifiers(folder, skip)
    if table == "hip64":  # renamed names and those valid as written, except the *_sync ones the tool leaves out
        known |= header_identifiers(str(_SYSROOT / "hiprand"), ()) | header_identifiers(str(_SYSROOT / "hipsparse"), ())
    wanted = set(data.get("map", {}).values()) | set(data.get("same", []))
    wanted |= set(data.get("struct_members", {}).get("map", {}).values())
    wanted |= set(data.get("members", []))
    wanted |= set(data.get("device_prop_fields", []))
    for expr in data.get("rewrite", {}).values():
        wanted.add(expr.split("(")[0])
    wanted.discard("")
    wanted -= {"__builtin_amdgcn_wave_barrier"}  # a clang builtin, not declared in a header
    absent = sorted(n for n in wanted if n not in known)
    assert absent == [], f"{table}: HIP names not declared in {folder}: {absent[:30]}"


def test_hip64_includes_exist_in_the_sysroot() -> None:
    if not (_SYSROOT / "hip" / "hip_runtime.h").exists():
        pytest.skip(f"HIP 6.4 sysroot not in {_SYSROOT} (run scripts/fetch_rocm_sysroot.sh)")
    inc = _load("includes")
    hip64 = _load("hip64")
    wanted = set(hip64["includes"].values()) | {
        v for v in inc["map"].values() if v.split("/")[0] in {p.name for p in _SYSROOT.iterdir()}
    }
    assert sorted(h for h in wanted if not (_SYSROOT / h).exists()) == []


def test_tables_are_json_data() -> None:
    maps_dir = Path(__file__).parents[2] / "ember" / "hipify" / "maps"
    for p in maps_dir.glob("*.json"):
        data = json.loads(p.read_text())
        assert data["title"] and isinstance(data["map"], dict)


# HIP headers that Debian 12 packages (the others — hipBLAS, hipFFT, hipSOLVER, hipCUB, MIOpen, RCCL — have no
# package and are checked by review).
_INSTALLABLE_INCLUDE_ROOTS = ("hip/", "hiprand/", "rocrand/", "hipsparse/")


def test_every_mapped_hip_header_exists_in_the_installed_headers() -> None:
    if not (HIP_INCLUDE / "hip" / "hip_runtime.h").exists():
        pytest.skip("HIP headers not installed")
    inc = _load("includes")
    wanted = sorted({v for v in inc["map"].values() if v.startswith(_INSTALLABLE_INCLUDE_ROOTS)})
    absent = [h for h in wanted if not (HIP_INCLUDE / h).exists()]
    absent = [
        h
        for h in absent
        if not (h.startswith(("hiprand/", "rocrand/", "hipsparse/")) and not (HIP_INCLUDE / h.split("/")[0]).is_dir())
    ]
    assert "hip/hip_bfloat16.h" in wanted
    assert absent == [], f"HIP headers named by includes.json but not installed: {absent}"
