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
command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 || {
  echo "fetch_rocm_sysroot: needs apt-get and dpkg" >&2
  exit 0
}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "fetch_rocm_sysroot: no $keyring" >&2; exit 0; }
suite="${EMBER_ROCM_SUITE:-sid}"
# versions checked with clang-22; when the archive has moved on, the suite's current one is taken
pins=(libamdhip64-dev=6.4.3-5 libhsa-runtime-dev=6.4.3+dfsg-5 libamd-comgr-dev=7.0.2+dfsg-3
  rocm-device-libs-21=7.0.2+dfsg-3 libhipblas-dev=6.4.4-1 libhipblas-common-dev=7.1.0-1+b1
  libhipcub-dev=6.4.3-2 librocprim-dev=6.4.3-2 librccl-dev=5.4.3-3+b1 libhiprand-dev=6.4.3-1
  librocrand-dev=6.4.3-1 libhipsparse-dev=6.4.3-1 libhipfft-dev=6.4.3-2 libhipsolver-dev=6.4.1-1
  librocthrust-dev=6.4.4-1 libmiopen-dev=6.4.3+dfsg-1+b1)
apt_dir="$(mktemp -d)"
trap 'rm -rf "$apt_dir"' EXIT
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
echo "deb [signed-by=$keyring] http://deb.debian.org/debian $suite main" >"$apt_dir/sources.list"
opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-" -o "Dir::State::Lists=$apt_dir/lists"
  -o "Dir::Cache=$apt_dir/cache" -o "APT::Sandbox::User=root" -qq)
if ! apt-get "${opts[@]}" update >/dev/null 2>&1; then
  echo "fetch_rocm_sysroot: apt-get update of Debian $suite failed; HIP 6.4 sysroot not fetched" >&2
  exit 0
fi
cd "$apt_dir/debs" || exit 0
for pin in "${pins[@]}"; do
  apt-get "${opts[@]}" download "$pin" >/dev/null 2>&1 || apt-get "${opts[@]}" download "${pin%%=*}" >/dev/null 2>&1 ||
    echo "fetch_rocm_sysroot: ${pin%%=*} not found in Debian $suite" >&2
done
ls ./*.deb >/dev/null 2>&1 || exit 0
mkdir -p "$prefix" || exit 0
for deb in ./*.deb; do dpkg -x "$deb" "$prefix" || echo "fetch_rocm_sysroot: cannot unpack $deb" >&2; done
for deb in ./*.deb; do dpkg-deb -f "$deb" Package Version | paste -sd' '; done | sed 's/ Version: /=/; s/^Package: //' >"$stamp"
exit 0
