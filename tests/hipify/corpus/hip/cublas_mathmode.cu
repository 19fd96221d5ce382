// Half-precision GEMM with float accumulation through cublasGemmEx, after choosing the math mode.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hipblas/hipblas.h>

hipblasStatus_t hgemm_f32(hipblasHandle_t handle, int m, int n, int k, const half *a, const half *b, float *c,
                         bool allow_tf32) {
  hipblasMath_t previous;
  hipblasStatus_t st = hipblasGetMathMode(handle, &previous);
  if (st != HIPBLAS_STATUS_SUCCESS) return st;
  st = hipblasSetMathMode(handle, allow_tf32 ? HIPBLAS_TF32_TENSOR_OP_MATH : HIPBLAS_DEFAULT_MATH);
  if (st != HIPBLAS_STATUS_SUCCESS) return st;
  const float alpha = 1.0f, beta = 0.0f;
  st = hipblasGemmEx(handle, HIPBLAS_OP_T, HIPBLAS_OP_N, m, n, k, &alpha, a, HIP_R_16F, k, b, HIP_R_16F, k,
                    &beta, c, HIP_R_32F, m, HIPBLAS_COMPUTE_32F, HIPBLAS_GEMM_DEFAULT);
  hipblasSetMathMode(handle, previous);
  return st;
}
