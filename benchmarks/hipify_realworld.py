"""Run ember hipify over real CUDA code bases it has never seen; record conversion and hipcc results.

One command reproduces every real-world figure in docs/hipify.md and writes
benchmarks/results/hipify_realworld.json:

    .venv/bin/python benchmarks/hipify_realworld.py [--dl-dir /tmp/ember_hipify_rw] [--only NAME]
        [--compile-limit [PACKAGE=]N]

Each code base is a PyPI source distribution fetched into --dl-dir (kept there, never in the repository) and
unpacked: with pip (`pip download --no-deps --no-binary PKG PKG==V`), or, for a code base pinned by SHA-256, the
sdist PyPI's JSON API names for that version, checked against the pin (pip would first build its metadata, which
needs e.g. torch for mmcv). Besides the two corpus code bases (llama.cpp's ggml, LightGBM), three projects outside
the corpus are translated only (mmcv, vLLM's csrc, XGBoost): their units include PyTorch's CUDA headers or need
libraries with no HIP build here, so none is compiled; each record lists every unconverted reference with its
reason. The whole tree named by `root` is translated
with `ember.hipify` (so headers shared with the CUDA backend, e.g. ggml-common.h, are translated too); then
every translation unit of its CUDA build is compiled with Debian's hipcc for gfx90a (HIP_PLATFORM=amd, no GPU
needed), with the include directories and defines the project's own CUDA build uses. A failure is recorded
with its first error and a reason; a header that no Debian 12 package ships is named as such.

hipBLAS, hipCUB/rocPRIM and RCCL have no Debian 12 package: scripts/fetch_hip_lib_headers.sh (called by
scripts/install_system_deps.sh, and by this script when they are missing) unpacks their headers from Debian's
archive into /opt/ember-hip-libs (EMBER_HIP_LIBS), which every compile gets as -isystem. The tables follow
the hipBLAS v2 API (hipDataType, hipblasComputeType_t), which hipBLAS 6.x enables with -DHIPBLAS_V2 (the
default from hipBLAS 7): every unit is compiled with it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ember.hipify import HipifyError  # noqa: E402
from ember.hipify.cli import main as hipify_main  # noqa: E402
from ember.hipify.toolchain import (  # noqa: E402
    DEFAULT_HIP_VERSION,
    HIP_VERSIONS,
    HipToolchain,
    find_hip_toolchain,
    rocm_sysroot,
)

CODEBASES = [
    {
        "name": "llama.cpp ggml",
        "package": "llama-cpp-python",
        "version": "0.3.36",
        "root": "llama_cpp_python-0.3.36/vendor/llama.cpp/ggml",
        "what": "the whole ggml tree (src/ and include/): CUDA backend src/ggml-cuda plus the shared headers "
        "(ggml-common.h, ggml-impl.h, ...) and the other backends",
        # units of the CUDA backend's build (ggml/src/ggml-cuda/CMakeLists.txt: every .cu there)
        "units": ["src/ggml-cuda/**/*.cu"],
        "includes": ["include", "src", "src/ggml-cuda"],
        "defines": [],
    },
    {
        "name": "LightGBM CUDA",
        "package": "lightgbm",
        "version": "4.7.0",
        "root": "lightgbm-4.7.0",
        "what": "the whole LightGBM source tree (src/, include/, vendored external_libs/); its CUDA tree learner, "
        "objectives, metrics and data code are the CUDA part",
        # CMakeLists.txt with USE_CUDA: src/**/cuda/*.cu and *.cpp (the .cpp ones call the CUDA runtime)
        "units": ["src/**/cuda/*.cu", "src/**/cuda/*.cpp"],
        "includes": [
            "include",
            "external_libs/eigen",
            "external_libs/fmt/include",
            "external_libs/fast_double_parser/include",
        ],
        "defines": ["USE_CUDA", "EIGEN_MPL2_ONLY", "EIGEN_DONT_PARALLELIZE"],
    },
    # Projects outside the corpus, measured once the round's mappings were written (translation only: their CUDA
    # units include PyTorch's CUDA headers, which have no HIP build here, so no unit is compiled)
    {
        "name": "mmcv ops",
        "package": "mmcv",
        "version": "2.2.0",
        "sha256": "ac479247e808d8802f89eadf04d4118de86bdfe81361ec5aed0cc1bf731c67c9",
        "root": "mmcv-2.2.0",
        "what": "the whole mmcv sdist: 111 .cu/.cuh files of CUDA operators (mmcv/ops/csrc: common/cuda kernels, "
        "pytorch/cuda launchers, parrots bindings)",
        "units": [],
        "includes": [],
        "defines": [],
    },
    {
        "name": "vLLM csrc",
        "package": "vllm",
        "version": "0.33.0",
        "sha256": "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112",
        "root": "vllm-0.33.0/csrc",
        "what": "vLLM's csrc/ tree: attention, MoE, quantization, all-reduce and sampling kernels; heavy use of "
        "programmatic dependent launch (cudaLaunchKernelEx) and of CUTLASS/CuTe",
        "units": [],
        "includes": [],
        "defines": [],
    },
    {
        "name": "XGBoost",
        "package": "xgboost",
        "version": "3.2.0",
        "sha256": "99b0e9a2a64896cdaf509c5e46372d336c692406646d20f2af505003c0c5d70d",
        "root": "xgboost-3.2.0/cpp_src",
        "what": "XGBoost's C++ tree (cpp_src: src/, include/, plugin/, gputreeshap, dmlc-core): GPU tree methods, "
        "collectives, data loading; uses libcu++ (cuda/std/*) and CUDA 12.8 hardware decompression",
        "units": [],
        "includes": [],
        "defines": [],
    },
]

# HIP library headers that no Debian 12 package ships (apt-cache search finds no hipblas, hipcub, hipfft,
# hipsolver, miopen, rccl, rocthrust); hipblas, hipcub and rccl come from fetch_hip_lib_headers.sh, so a unit
# that still fails on one of these names a library that script does not fetch (or could not).
NOT_INSTALLABLE = {
    "hipblas": "hipBLAS has no Debian 12 package",
    "hipblaslt": "hipBLASLt has no Debian 12 package",
    "hipcub": "hipCUB has no Debian 12 package",
    "hipfft": "hipFFT has no Debian 12 package",
    "hipsolver": "hipSOLVER has no Debian 12 package",
    "miopen": "MIOpen has no Debian 12 package",
    "rccl": "RCCL has no Debian 12 package",
    "thrust": "rocThrust has no Debian 12 package",
}
_FATAL = re.compile(r"fatal error: '([^']+)' file not found")
ROOT = Path(__file__).resolve().parents[1]
HIP_LIBS = Path(os.environ.get("EMBER_HIP_LIBS", "/opt/ember-hip-libs"))
# hipBLAS 6.x takes hipDataType / hipblasComputeType_t (the API the cuBLAS table maps to) only with HIPBLAS_V2
HIP_DEFINES = ["HIPBLAS_V2"]


def hip_lib_headers() -> dict:
    """Make sure the HIP library headers are unpacked (best effort); their prefix and package versions."""
    if not (HIP_LIBS / "VERSIONS").is_file():
        subprocess.run(["bash", str(ROOT / "scripts" / "fetch_hip_lib_headers.sh")], check=False)
    versions = (HIP_LIBS / "VERSIONS").read_text().split() if (HIP_LIBS / "VERSIONS").is_file() else []
    include = HIP_LIBS / "usr" / "include"
    return {"include": str(include) if include.is_dir() else None, "packages": versions}


def _compiler_version(toolchain: HipToolchain | None) -> str | None:
    """First line of the compiler's --version (None without a toolchain)."""
    if toolchain is None:
        return None
    out = subprocess.run([toolchain.compiler, "--version"], capture_output=True, text=True, check=False).stdout
    return (out.splitlines() or [""])[0]


def rocm_sysroot_info() -> dict:
    """Make sure the HIP 6.4 sysroot is unpacked (best effort); its prefix and package versions."""
    root = rocm_sysroot()
    if not (root / "VERSIONS").is_file():
        subprocess.run(["bash", str(ROOT / "scripts" / "fetch_rocm_sysroot.sh")], check=False)
    versions = (root / "VERSIONS").read_text().split() if (root / "VERSIONS").is_file() else []
    include = root / "usr" / "include"
    return {"include": str(include) if include.is_dir() else None, "packages": versions}


def _sdist(cb: dict, dl: Path) -> Path | None:
    """The code base's sdist already in ``dl``, if any."""
    return next(dl.glob(f"{cb['package'].replace('-', '_')}-{cb['version']}.tar.gz"), None)


def _pypi_sdist(cb: dict, dl: Path) -> Path:
    """Download the sdist named by PyPI's JSON API for the pinned version (no build step, unlike pip, whose
    metadata preparation needs e.g. torch for mmcv); checks its SHA-256 against PyPI's and the pinned one."""
    api = f"https://pypi.org/pypi/{cb['package']}/{cb['version']}/json"
    with urllib.request.urlopen(api, timeout=120) as reply:
        files = [u for u in json.load(reply)["urls"] if u["packagetype"] == "sdist"]
    if not files:
        raise RuntimeError(f"{cb['package']} {cb['version']}: PyPI has no sdist")
    url = urllib.parse.urljoin(api, files[0]["url"])
    data = urllib.request.urlopen(url, timeout=600).read()
    digest = hashlib.sha256(data).hexdigest()
    for want in (files[0]["digests"]["sha256"], cb.get("sha256")):
        if want and digest != want:
            raise RuntimeError(f"{files[0]['filename']}: SHA-256 {digest}, expected {want}")
    path = dl / files[0]["filename"]
    path.write_bytes(data)
    return path


def fetch(cb: dict, dl: Path) -> Path:
    """Download and unpack the code base's sdist into ``dl``; returns the directory to translate."""
    root = dl / cb["root"]
    if root.is_dir():
        return root
    sdist = _sdist(cb, dl)
    if sdist is None and "sha256" in cb:
        sdist = _pypi_sdist(cb, dl)
    if sdist is None:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", cb["package"]]
        cmd += [f"{cb['package']}=={cb['version']}", "-d", str(dl)]
        subprocess.run(cmd, check=True)
        sdist = _sdist(cb, dl)
    with tarfile.open(sdist) as tar:
        tar.extractall(dl, filter="data")
    return root


def reason(log: str, rc: int) -> tuple[str, str]:
    """(reason, first error line) of a failed compile."""
    if rc == -1:
        return "timeout", log
    first = next((line for line in log.splitlines() if "error" in line), log.strip().splitlines()[-1:] or [""])
    first = first if isinstance(first, str) else first[0]
    m = _FATAL.search(log)
    if m:
        header = m.group(1)
        lib = header.split("/")[0].split(".")[0]
        why = NOT_INSTALLABLE.get(lib)
        return (f"missing header {header}: {why}" if why else f"missing header {header}"), first[:300]
    return "compile error", first[:300]


def compile_one(path: Path, tree: Path, cb: dict, timeout: int, toolchain: HipToolchain) -> dict:
    """Compile one translated unit for gfx90a with the target's toolchain (``-c``, output discarded).

    A ``.cu`` unit is compiled as HIP (nvcc compiles it in the CUDA build); any other unit (LightGBM's
    ``cuda/*.cpp``) is compiled as host C++ against the HIP runtime headers, as the CUDA build hands it to the
    host C++ compiler: as HIP, its calls of ``__device__`` helpers from host code would not compile.
    """
    env = toolchain.environment()
    defines = cb["defines"] + HIP_DEFINES
    if path.suffix != ".cu":
        env["HIP_COMPILE_CXX_AS_HIP"] = "0"  # hipcc 5.2: leave a .cpp to the host compiler
        defines = [*defines, "__HIP_PLATFORM_AMD__=1"]
    includes = [str(tree / inc) for inc in cb["includes"]]
    cmd = toolchain.command(str(path), os.devnull, includes=includes, defines=defines, as_hip=path.suffix == ".cu")
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        rc, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        rc, log = -1, f"timeout after {timeout}s"
    out = {"file": str(path.relative_to(tree)), "rc": rc, "seconds": round(time.time() - t0, 1)}
    if rc != 0:
        out["reason"], out["first_error"] = reason(log, rc)
    return out


def compile_limit(specs: list[str], cb: dict) -> int | None:
    """The --compile-limit that applies to code base ``cb`` (a PACKAGE=N entry wins over a bare N)."""
    limit = None
    for spec in specs:
        name, _, n = spec.rpartition("=")
        if name in (cb["package"], cb["name"]):
            return int(n)
        if not name:
            limit = int(n)
    return limit


def baseline_tree(rev: str, work: Path) -> Path:
    """``ember/`` as of git revision ``rev``, unpacked under ``work`` (to translate with an earlier hipify)."""
    dest = work / f"baseline-{rev}"
    dest.mkdir()
    archive = subprocess.run(["git", "archive", rev, "ember"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def translate_with(ember_root: Path, src: Path, work: Path, hip_version: str) -> dict:
    """Totals of translating ``src`` with the hipify found under ``ember_root`` (its own process)."""
    stats, out = work / "baseline-stats.json", work / "baseline-out"
    cmd = [sys.executable, "-m", "ember.hipify", str(src), "-o", str(out), "-q", "--stats-json", str(stats)]
    subprocess.run([*cmd, "--hip-version", hip_version], cwd=ember_root, capture_output=True, check=False)
    total = json.loads(stats.read_text())["total"]
    shutil.rmtree(out, ignore_errors=True)
    keys = ("converted", "unconverted", "percent", "converted_by_kind", "unconverted_names")
    return {"references": total["converted"] + total["unconverted"], **{k: total[k] for k in keys}}


def run_codebase(cb: dict, dl: Path, work: Path, args: argparse.Namespace, toolchain: HipToolchain | None) -> dict:
    """Translate one code base, compile its CUDA units, return its record."""
    src = fetch(cb, dl)
    tree = work / cb["package"]
    stats = work / f"{cb['package']}.json"
    # the build also needs files hipify does not translate (Eigen's extensionless headers, .inc, ...):
    # copy the tree, then write the translations over the copies
    shutil.copytree(src, tree, symlinks=True)
    t0 = time.time()
    rc = hipify_main([str(src), "-o", str(tree), "-q", "--stats-json", str(stats), "--hip-version", args.hip_version])
    seconds = time.time() - t0
    summary = json.loads(stats.read_text())
    total = summary["total"]
    units = sorted({p for pattern in cb["units"] for p in tree.glob(pattern)})
    limit = compile_limit(args.compile_limit, cb)
    if limit is not None:
        units = units[:limit]
    compiled: list[dict] = []
    if toolchain is not None and units:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            compiled = list(pool.map(lambda p: compile_one(p, tree, cb, args.timeout, toolchain), units))
    refs = total["converted"] + total["unconverted"]
    cuda_files = [f for f in summary["files"] if f["converted"] + f["unconverted"]]
    return {
        "name": cb["name"],
        "source": (
            f"PyPI sdist {cb['package']}=={cb['version']} (sha256 {cb['sha256']})"
            if cb.get("sha256")
            else f"pip download --no-deps --no-binary {cb['package']} {cb['package']}=={cb['version']}"
        )
        + f"; tree {cb['root']}",
        "what": cb["what"],
        "hipify_exit": rc,
        "translate_seconds": round(seconds, 2),
        "files": total["files"],
        "files_with_cuda_references": len(cuda_files),
        "lines_total": total["lines_total"],
        "references": refs,
        "converted": total["converted"],
        "unconverted": total["unconverted"],
        "percent": total["percent"],
        "converted_by_kind": total["converted_by_kind"],
        "unconverted_by_kind": total["unconverted_by_kind"],
        "unconverted_names": total["unconverted_names"],
        # every reference left as written, with the reason (the nearest HIP alternative, when there is one)
        "unconverted_refs": [
            {"file": str(Path(f["file"]).relative_to(src)), **ref}
            for f in summary["files"]
            for ref in f["unconverted_refs"]
        ],
        "warnings_by_rule": total["warnings_by_rule"],
        "baseline": {"rev": args.baseline, **translate_with(args.baseline_tree, src, work, args.hip_version)}
        if args.baseline
        else None,
        "errors": summary["errors"],
        "hipcc": {
            "command": " ".join(
                toolchain.command("UNIT.cu", "/dev/null", includes=cb["includes"], defines=cb["defines"] + HIP_DEFINES)
            )
            + " (a .cpp unit: -x c++ -D__HIP_PLATFORM_AMD__=1)"
            if toolchain and cb["units"]
            else None,
            "not_compiled": None
            if cb["units"]
            else "translation only: the units include PyTorch's CUDA headers (no HIP build of them here)",
            "units": len(sorted({p for pattern in cb["units"] for p in tree.glob(pattern)})),
            "attempted": len(compiled),
            "ok": sum(1 for c in compiled if c["rc"] == 0),
            "failures_by_reason": dict(Counter(c["reason"] for c in compiled if c["rc"] != 0).most_common()),
            "results": compiled,
        },
    }


def main() -> int:
    """Fetch, translate and compile every code base; write the JSON result."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dl-dir", default=str(Path(tempfile.gettempdir()) / "ember_hipify_rw"))
    ap.add_argument("--only", action="append", help="code base name (default: all)")
    ap.add_argument(
        "--compile-limit",
        action="append",
        default=[],
        help="compile at most N units (in sorted order) of every code base, or PACKAGE=N for one",
    )
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--hip-version", choices=HIP_VERSIONS, default=DEFAULT_HIP_VERSION, help="HIP target")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "hipify_realworld.json"))
    ap.add_argument(
        "--baseline",
        metavar="REV",
        help="also translate every code base with the hipify of git revision REV (the figures before a change)",
    )
    args = ap.parse_args()
    dl = Path(args.dl_dir)
    dl.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="hipify_rw_"))
    args.baseline_tree = baseline_tree(args.baseline, work) if args.baseline else None
    libs = hip_lib_headers() if args.hip_version == "5.2" else rocm_sysroot_info()
    try:
        toolchain: HipToolchain | None = find_hip_toolchain(args.hip_version)
    except HipifyError as exc:
        print(f"no HIP {args.hip_version} toolchain, translating only: {exc}", file=sys.stderr)
        toolchain = None
    records = []
    for cb in CODEBASES:
        if args.only and cb["name"] not in args.only and cb["package"] not in args.only:
            continue
        rec = run_codebase(cb, dl, work, args, toolchain)
        records.append(rec)
        h = rec["hipcc"]
        print(
            f"{rec['name']}: {rec['files']} files ({rec['files_with_cuda_references']} with CUDA references), "
            f"{rec['references']} references, {rec['converted']} converted, {rec['unconverted']} unconverted "
            f"({rec['percent']}%); HIP {args.hip_version} gfx90a compiles {h['ok']}/{h['attempted']}; "
            f"failures: {h['failures_by_reason']}"
            + (
                f"; with {args.baseline}: {rec['baseline']['converted']}/{rec['baseline']['references']} "
                f"({rec['baseline']['percent']}%)"
                if args.baseline
                else ""
            )
        )
    result = {
        "hip_version": args.hip_version,
        "compiler": _compiler_version(toolchain),
        "hip_headers": libs,
        "command": "python benchmarks/hipify_realworld.py " + " ".join(sys.argv[1:]),
        "codebases": records,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
