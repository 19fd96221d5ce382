// A cuBLAS handle with a caller-owned workspace (so that graph capture allocates nothing) and a version report.
#include "ember_hip_compat.h"
#include <cstdio>
#include <hipblas/hipblas.h>
#include <hip/hip_runtime.h>

#if defined(CUBLAS_VER_MAJOR) && CUBLAS_VER_MAJOR >= 12
#define WORKSPACE_BYTES (32u << 20)
#else
#define WORKSPACE_BYTES (4u << 20)
#endif

struct blas_context {
  hipblasHandle_t handle = nullptr;
  void* workspace = nullptr;
};

hipblasStatus_t blas_init(blas_context* ctx, hipStream_t stream) {
  hipblasStatus_t status = hipblasCreate(&ctx->handle);
  if (status != HIPBLAS_STATUS_SUCCESS) return status;
  if (hipMalloc(&ctx->workspace, WORKSPACE_BYTES) != hipSuccess) return HIPBLAS_STATUS_ALLOC_FAILED;
  status = hipblasSetStream(ctx->handle, stream);
  if (status != HIPBLAS_STATUS_SUCCESS) return status;
  return ember_hipblasSetWorkspace(ctx->handle, ctx->workspace, WORKSPACE_BYTES);
}

void blas_report() {
  std::printf("BLAS %d.%d.%d (%d)\n", hipblasVersionMajor, hipblasVersionMinor, hipblasVersionPatch, (hipblasVersionMajor * 10000 + hipblasVersionMinor * 100 + hipblasVersionPatch));
}
