#!/usr/bin/env bash
# Unpacks a HIP 6.4 "sysroot" (headers and device bitcode, no GPU driver) into $EMBER_ROCM_SYSROOT
# (default /opt/ember-rocm-6.4), so that hipify's default target, HIP 6.4, can be compiled for gfx90a
# with Debian 12's clang-22 (clang-22 + clang-tools-22, installed by install_system_deps.sh):
#   libamdhip64-dev 6.4, libhsa-runtime-dev, libamd-comgr-dev   hip/*.h (HIP runtime, bf16/fp8, hipDrv*)
#   rocm-device-libs-21                                          ocml/ockl bitcode (LLVM 21: clang-22 reads it)
#   hipBLAS 6.4 (+ hipblas-common), hipCUB/rocPRIM 6.4, RCCL, hipRAND/rocRAND, hipSPARSE, hipFFT,
#   hipSOLVER, rocThrust, MIOpen                                 the library headers hipify's tables target
# Debian 12 ships HIP 5.2 only; these come from Debian's own archive (unstable), fetched with apt-get download
# through a private apt state and unpacked with dpkg -x: nothing is installed into the system and the system's
# apt sources are not changed. ember.hipify.toolchain finds the result. Best effort and quiet: on any failure
# it says so on stderr and exits 0 (the compile tests then skip, naming this script).
set -u
prefix="${EMBER_ROCM_SYSROOT:-/opt/ember-rocm-6.4}"
stamp="$prefix/VERSIONS"
[ -f "$stamp" ] && [ -f "$prefix/usr/include/hip/hip_runtime.h" ] && exit 0
suite="${EMBER_ROCM_SUITE:-sid}"
# versions checked with clang-22; when the archive has moved on, the suite's current one is taken
pins=(libamdhip64-dev=6.4.3-5 libhsa-runtime-dev=6.4.3+dfsg-5 libamd-comgr-dev=7.0.2+dfsg-3
  rocm-device-libs-21=7.0.2+dfsg-3 libhipblas-dev=6.4.4-1 libhipblas-common-dev=7.1.0-1+b1
  libhipcub-dev=6.4.3-2 librocprim-dev=6.4.3-2 librccl-dev=5.4.3-3+b1 libhiprand-dev=6.4.3-1
  librocrand-dev=6.4.3-1 libhipsparse-dev=6.4.3-1 libhipfft-dev=6.4.3-2 libhipsolver-dev=6.4.1-1
  librocthrust-dev=6.4.4-1 libmiopen-dev=6.4.3+dfsg-1+b1)
exec "$(dirname "$0")/debian_unpack.sh" "$prefix" "$suite" fetch_rocm_sysroot "${pins[@]}"
