// A cuBLAS handle with a caller-owned workspace (so that graph capture allocates nothing) and a version report.
#include <cstdio>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#if defined(CUBLAS_VER_MAJOR) && CUBLAS_VER_MAJOR >= 12
#define WORKSPACE_BYTES (32u << 20)
#else
#define WORKSPACE_BYTES (4u << 20)
#endif

struct blas_context {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
};

cublasStatus_t blas_init(blas_context* ctx, cudaStream_t stream) {
  cublasStatus_t status = cublasCreate(&ctx->handle);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (cudaMalloc(&ctx->workspace, WORKSPACE_BYTES) != cudaSuccess) return CUBLAS_STATUS_ALLOC_FAILED;
  status = cublasSetStream(ctx->handle, stream);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  return cublasSetWorkspace(ctx->handle, ctx->workspace, WORKSPACE_BYTES);
}

void blas_report() {
  std::printf("BLAS %d.%d.%d (%d)\n", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH, CUBLAS_VERSION);
}
