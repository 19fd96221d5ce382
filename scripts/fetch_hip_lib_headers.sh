#!/usr/bin/env bash
# Unpacks the headers of the HIP libraries that Debian 12 does not package into $EMBER_HIP_LIBS
# (default /opt/ember-hip-libs), so that benchmarks/hipify_realworld.py can compile translated code that
# includes them with Debian 12's hipcc 5.2:
#   libhipblas-dev 6.4 + libhipblas-common-dev   hipblas/hipblas.h (hipBLAS 6 API: hipblasComputeType_t,
#                                                 hipDataType with -DHIPBLAS_V2, hipblasSetMathMode)
#   libhipcub-dev, librocprim-dev 6.4            hipcub/hipcub.hpp (header-only)
#   librccl-dev 5.4                              rccl/rccl.h
# They come from Debian's own archive (unstable; bookworm and trixie have none of these at hipBLAS 6), fetched
# with apt-get download through a private apt state, and are unpacked with dpkg -x: nothing is installed into
# the system and the system's apt sources are not changed. Only headers are used (compile with -c, no link).
# Best effort and quiet: on any failure it says so on stderr and exits 0.
set -u
prefix="${EMBER_HIP_LIBS:-/opt/ember-hip-libs}"
stamp="$prefix/VERSIONS"
[ -f "$stamp" ] && [ -f "$prefix/usr/include/hipblas/hipblas.h" ] && exit 0
suite="${EMBER_HIP_LIBS_SUITE:-sid}"
# versions checked to compile with hipcc 5.2; when the archive has moved on, the suite's current one is taken
pins=(libhipblas-dev=6.4.4-1 libhipblas-common-dev=7.1.0-1+b1 libhipcub-dev=6.4.3-2 librocprim-dev=6.4.3-2
  librccl-dev=5.4.3-3+b1)
exec "$(dirname "$0")/debian_unpack.sh" "$prefix" "$suite" fetch_hip_lib_headers "${pins[@]}"
