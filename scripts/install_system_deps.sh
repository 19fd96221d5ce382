#!/usr/bin/env bash
# Installs the Debian packages ember's AMD path and hipify tests use, when they are missing:
#   lld-22            ld.lld to link AMDGPU code objects (lld 14 rejects code object v6)
#   hipcc, rocm-device-libs   to compile translated HIP sources for gfx90a without a GPU
#   libhiprand-dev, librocrand-dev, libhipsparse-dev   headers the hipify corpus compiles against (HIP 5.2)
#   clang-22, clang-tools-22   to compile hipify's default target, HIP 6.4, for gfx90a against the sysroot that
#                     scripts/fetch_rocm_sysroot.sh unpacks under /opt/ember-rocm-6.4 (Debian 12 ships HIP 5.2 only)
# and, unpacked (never installed) under /opt/ember-hip-libs, the headers of HIP libraries that Debian 12 does not
# package (hipBLAS 6.4 + hipblas-common, hipCUB/rocPRIM 6.4, RCCL 5.4), from Debian unstable, for
# benchmarks/hipify_realworld.py: see scripts/fetch_hip_lib_headers.sh.
# Best effort: without root or apt, it says what is missing and the tests that need it skip.
set -u
need=()
command -v ld.lld-22 >/dev/null 2>&1 || need+=(lld-22)
command -v hipcc >/dev/null 2>&1 || need+=(hipcc)
[ -d /usr/lib/x86_64-linux-gnu/amdgcn ] || dpkg -s rocm-device-libs >/dev/null 2>&1 || need+=(rocm-device-libs)
command -v clang++-22 >/dev/null 2>&1 || need+=(clang-22)
[ -x /usr/lib/llvm-22/bin/clang-offload-bundler ] || need+=(clang-tools-22)
for p in libhiprand-dev librocrand-dev libhipsparse-dev; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
here="$(cd "$(dirname "$0")" && pwd)"
fetch_headers() {
  [ -x "$here/fetch_hip_lib_headers.sh" ] && "$here/fetch_hip_lib_headers.sh"
  [ -x "$here/fetch_rocm_sysroot.sh" ] && "$here/fetch_rocm_sysroot.sh"
  true
}
if [ ${#need[@]} -eq 0 ]; then fetch_headers; exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "install_system_deps: not root; missing ${need[*]} (apt-get install ${need[*]}); their tests will skip" >&2
    exit 0
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_system_deps: no apt-get; missing ${need[*]}; their tests will skip" >&2
  exit 0
fi
echo "install_system_deps: installing ${need[*]}"
$SUDO apt-get update -qq >/dev/null 2>&1 || true
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
  || echo "install_system_deps: apt-get install ${need[*]} failed; their tests will skip" >&2
fetch_headers
exit 0
