#!/usr/bin/env bash
# Runs every GPU test (tests/gpu, tests/devices, the GPU files of tests/dynamic and tests/profiler, tests/torch_backend) and every GPU benchmark of ember in one go on a machine with an NVIDIA GPU.
# Needs no network: python3 with numpy, llvmlite, pytest (and torch/triton for the benchmarks).
# Results go to $OUT (default: ./gpu_check_out): gpu_tests.log, gpu_tests.xml, gpu_bench.json,
# gpu_bench.md, gpu_bench.log, launch_overhead.json, models_gpu.json/.md, tensorcore_bench.json/.md,
# tensorcore_models.json/.md, dynamic_shapes_cuda.json/.md, torch_backend_<gpu>.json/.md, env.txt. Exit status:
# non-zero when a test failed. Wheels in .whl/ (the EfficientNet-Lite0 packages, which the GPU
# machine lacks; see README) are installed first into /tmp/site when present.
# Usage: scripts/gpu_check.sh [all|tests|bench [NAME...]]   (halves, for machines with a per-call time limit)
set -u
what=${1:-all}
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_check_out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 EMBER_CACHE_DIR="$OUT/.cache"
# torch.compile finds backend="ember" through ember's package metadata (an entry point); without a pip
# install, a minimal dist-info on the path gives Python that metadata.
EP_DIR=/tmp/ember_entry_points/ember-0.1.0.dist-info
mkdir -p "$EP_DIR"
printf 'Metadata-Version: 2.1\nName: ember\nVersion: 0.1.0\n' > "$EP_DIR/METADATA"
printf '[torch_dynamo_backends]\nember = ember.torch_backend:ember_backend\n' > "$EP_DIR/entry_points.txt"
export PYTHONPATH="$PYTHONPATH:/tmp/ember_entry_points"
# Exported ONNX networks shared by the model tests and benchmarks/models_gpu.py.
export EMBER_MODEL_DIR=${EMBER_MODEL_DIR:-/tmp/ember_models}
mkdir -p "$EMBER_MODEL_DIR"
$PY -c "from ember.model_demo import export_efficientnet_lite0 as e; print('exported', e())" > "$OUT/export.log" 2>&1
{
  date; nvidia-smi -L 2>&1; $PY --version
  $PY -c "import llvmlite, numpy; print('llvmlite', llvmlite.__version__, 'numpy', numpy.__version__)"
  $PY -c "import ember.backends.cuda.codegen as n; print('libdevice', n.find_libdevice(), 'ptxas', n.find_ptxas())"
} > "$OUT/env.txt" 2>&1
tests_rc=0
bench_rc=0
if [ "$what" != bench ]; then
workers=""
$PY -c "import xdist" 2>/dev/null && workers="-n 8"
$PY -m pytest -q -rs -p no:cacheprovider $workers tests/gpu tests/devices tests/dynamic/test_dynamic_gpu.py tests/profiler/test_profile_gpu.py tests/torch_backend tests/tune/test_tune_gpu.py --junitxml="$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1
tests_rc=$?
tail -n 25 "$OUT/gpu_tests.log"
fi
# The benchmarks, by name; `scripts/gpu_check.sh bench NAME...` runs only those (a machine with a
# per-call time limit runs them in two or three calls).
run_bench() {
  case "$1" in
    gpu_bench) $PY benchmarks/gpu_bench.py --out "$OUT" ${BENCH_ARGS:-} > "$OUT/gpu_bench.log" 2>&1 || bench_rc=1
      tail -n 12 "$OUT/gpu_bench.log" ;;
    launch_overhead) $PY benchmarks/launch_overhead.py --out "$OUT" > "$OUT/launch_overhead.log" 2>&1 || bench_rc=1
      cat "$OUT/launch_overhead.log" ;;
    models_gpu) $PY benchmarks/models_gpu.py --out "$OUT" --models "$EMBER_MODEL_DIR" > "$OUT/models_gpu.log" 2>&1 \
      || bench_rc=1
      tail -n 12 "$OUT/models_gpu.log" ;;
    tensorcore_bench) $PY benchmarks/tensorcore_bench.py --out "$OUT" ${TC_BENCH_ARGS:-} > "$OUT/tensorcore_bench.log" 2>&1 || bench_rc=1
      tail -n 8 "$OUT/tensorcore_bench.log" ;;
    tensorcore_models) $PY benchmarks/tensorcore_models.py --out "$OUT" --models "$EMBER_MODEL_DIR" ${TC_MODELS_ARGS:-} \
      > "$OUT/tensorcore_models.log" 2>&1 || bench_rc=1
      tail -n 6 "$OUT/tensorcore_models.log" ;;
    torch_backend) $PY benchmarks/torch_backend.py --out "$OUT" > "$OUT/torch_backend.log" 2>&1 || bench_rc=1
      tail -n 20 "$OUT/torch_backend.log" ;;
    # Every kernel of ember and of torch.compile reduce-overhead per network (CUPTI via torch.profiler).
    kernel_profile) $PY benchmarks/gpu_kernel_profile.py --out "$OUT" --models "$EMBER_MODEL_DIR" ${PROFILE_ARGS:---fp32} \
      > "$OUT/kernel_profile.log" 2>&1 || bench_rc=1
      tail -n 150 "$OUT/kernel_profile.log" ;;
    # Nsight Compute on ember's default GEMM and cuBLAS's (tensor-pipe activity, stalls, L2): GEMM_NCU_ARGS picks the case.
    gemm_ncu) $PY benchmarks/gemm_ncu.py --out "$OUT" ${GEMM_NCU_ARGS:-} > "$OUT/gemm_ncu.log" 2>&1 || bench_rc=1
      tail -n 8 "$OUT/gemm_ncu.log" ;;
    # Symbolic-batch ResNet-50: one artifact at batch 1 and 8 against the fixed-shape builds (goal <= 1.1x).
    dynamic_shapes) $PY benchmarks/dynamic_shapes.py --target cuda --out "$OUT" --models "$EMBER_MODEL_DIR" \
      > "$OUT/dynamic_shapes.log" 2>&1 || bench_rc=1
      tail -n 6 "$OUT/dynamic_shapes.log" ;;
    *) echo "gpu_check: no benchmark named $1"; bench_rc=1 ;;
  esac
}
if [ "$what" != tests ]; then
  shift $(( $# > 0 ? 1 : 0 ))
  names=${*:-gpu_bench launch_overhead models_gpu tensorcore_bench tensorcore_models torch_backend dynamic_shapes}
  for name in $names; do run_bench "$name"; done
fi
rm -rf "$OUT/.cache"
echo "gpu_check: tests rc=$tests_rc, benchmarks rc=$bench_rc; results in $OUT"
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ]
