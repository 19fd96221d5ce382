#!/usr/bin/env bash
# Runs every GPU test and every GPU benchmark of ember in one go on a machine with an NVIDIA GPU.
# Needs no network: python3 with numpy, llvmlite, pytest (and torch/triton for the benchmarks).
# Results go to $OUT (default: ./gpu_check_out): gpu_tests.log, gpu_tests.xml, gpu_bench.json,
# gpu_bench.md, gpu_bench.log, launch_overhead.json, env.txt. Exit status: non-zero when a test failed.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_check_out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 EMBER_CACHE_DIR="$OUT/.cache"
{
  date; nvidia-smi -L 2>&1; $PY --version
  $PY -c "import llvmlite, numpy; print('llvmlite', llvmlite.__version__, 'numpy', numpy.__version__)"
  $PY -c "import ember.codegen.nvptx as n; print('libdevice', n.find_libdevice(), 'ptxas', n.find_ptxas())"
} > "$OUT/env.txt" 2>&1
workers=""
$PY -c "import xdist" 2>/dev/null && workers="-n 8"
$PY -m pytest -q -rs -p no:cacheprovider $workers tests/gpu --junitxml="$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1
tests_rc=$?
tail -n 25 "$OUT/gpu_tests.log"
$PY benchmarks/gpu_bench.py --out "$OUT" ${BENCH_ARGS:-} > "$OUT/gpu_bench.log" 2>&1
bench_rc=$?
tail -n 12 "$OUT/gpu_bench.log"
$PY benchmarks/launch_overhead.py --out "$OUT" > "$OUT/launch_overhead.log" 2>&1 || bench_rc=1
cat "$OUT/launch_overhead.log"
rm -rf "$OUT/.cache"
echo "gpu_check: tests rc=$tests_rc, benchmarks rc=$bench_rc; results in $OUT"
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ]
