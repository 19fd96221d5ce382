"""Run ember hipify over real CUDA code it has never seen and record conversion and hipcc results.

The code base is given by path (nothing is downloaded here). The recorded run used llama.cpp's CUDA
backend (ggml/src/ggml-cuda) as shipped in the llama-cpp-python 0.3.36 source distribution:
    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 && tar xzf llama_cpp_python-*.tar.gz
    python3 benchmarks/hipify_realworld.py llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/src/ggml-cuda \
        --include llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/include --compile 8
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ember.hipify.cli import main as hipify_main  # noqa: E402


def compile_one(path: Path, includes: list[str], timeout: int) -> dict:
    """hipcc one translated unit for gfx90a; returns rc, seconds and the first error line."""
    env = dict(os.environ, HIP_PLATFORM="amd")
    cmd = ["hipcc", "--offload-arch=gfx90a", "-x", "hip", "-std=c++17", "-c", str(path), "-o", os.devnull]
    for inc in includes:
        cmd += ["-I", inc]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        rc, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        rc, log = -1, f"timeout after {timeout}s"
    first = next((line for line in log.splitlines() if "error" in line), "")
    return {"file": path.name, "rc": rc, "seconds": round(time.time() - t0, 1), "first_error": first[:300]}


def main() -> int:
    """Translate, summarise, compile a sample, write the JSON result."""
    ap = argparse.ArgumentParser()
    ap.add_argument("source", help="directory of CUDA sources")
    ap.add_argument("--include", action="append", default=[], help="extra include directory for hipcc")
    ap.add_argument("--compile", type=int, default=8, help="number of translated .cu files to compile")
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "hipify_realworld.json"))
    args = ap.parse_args()
    src = Path(args.source)
    work = Path(tempfile.mkdtemp(prefix="hipify_rw_"))
    stats = work / "stats.json"
    t0 = time.time()
    rc = hipify_main([str(src), "-o", str(work / "hip"), "-q", "--stats-json", str(stats)])
    seconds = time.time() - t0
    summary = json.loads(stats.read_text())
    total = summary["total"]
    compiled: list[dict] = []
    if shutil.which("hipcc") and args.compile:
        units = sorted((work / "hip").rglob("*.cu"), key=lambda p: p.stat().st_size)[: args.compile]
        includes = [str(work / "hip"), str(work / "hip" / "..")] + args.include
        with ThreadPoolExecutor(max_workers=2) as pool:
            compiled = list(pool.map(lambda p: compile_one(p, includes, args.timeout), units))
    result = {
        "source": str(src),
        "hipify_exit": rc,
        "translate_seconds": round(seconds, 2),
        "files": total["files"],
        "lines_total": total["lines_total"],
        "converted": total["converted"],
        "unconverted": total["unconverted"],
        "percent": total["percent"],
        "converted_by_kind": total["converted_by_kind"],
        "unconverted_by_kind": total["unconverted_by_kind"],
        "top_unconverted": dict(Counter(total["unconverted_names"]).most_common(40)),
        "warnings_by_rule": total["warnings_by_rule"],
        "errors": summary["errors"],
        "hipcc": {
            "compiled": len(compiled),
            "ok": sum(1 for c in compiled if c["rc"] == 0),
            "results": compiled,
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("files", "lines_total", "converted", "unconverted", "percent")}))
    print(f"hipcc: {result['hipcc']['ok']}/{result['hipcc']['compiled']} compiled")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
