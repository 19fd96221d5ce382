// Half-precision GEMM with float accumulation through cublasGemmEx, after choosing the math mode.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>

cublasStatus_t hgemm_f32(cublasHandle_t handle, int m, int n, int k, const half *a, const half *b, float *c,
                         bool allow_tf32) {
  cublasMath_t previous;
  cublasStatus_t st = cublasGetMathMode(handle, &previous);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  st = cublasSetMathMode(handle, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const float alpha = 1.0f, beta = 0.0f;
  st = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16F, k, b, CUDA_R_16F, k,
                    &beta, c, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
  cublasSetMathMode(handle, previous);
  return st;
}
