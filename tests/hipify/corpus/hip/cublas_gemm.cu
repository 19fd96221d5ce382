// Batched and single SGEMM through cuBLAS, with status checking and a user stream.
#include <hip/hip_runtime.h>
#include <hipblas/hipblas.h>
#include <cstdio>
#include <vector>

#define CUBLAS_CHECK(x)                                                   \
  do {                                                                    \
    hipblasStatus_t st_ = (x);                                             \
    if (st_ != HIPBLAS_STATUS_SUCCESS) {                                   \
      std::fprintf(stderr, "cuBLAS error %d at line %d\n", st_, __LINE__); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

int main() {
  const int m = 64, n = 32, k = 16, batch = 8;
  std::vector<float> hA(m * k * batch, 1.0f), hB(k * n * batch, 1.0f), hC(m * n * batch, 0.0f);
  float *dA, *dB, *dC;
  hipMalloc(&dA, hA.size() * sizeof(float));
  hipMalloc(&dB, hB.size() * sizeof(float));
  hipMalloc(&dC, hC.size() * sizeof(float));
  hipStream_t stream;
  hipStreamCreate(&stream);
  hipblasHandle_t handle;
  CUBLAS_CHECK(hipblasCreate(&handle));
  CUBLAS_CHECK(hipblasSetStream(handle, stream));
  CUBLAS_CHECK(hipblasSetMatrix(m, k, sizeof(float), hA.data(), m, dA, m));
  CUBLAS_CHECK(hipblasSetMatrix(k, n, sizeof(float), hB.data(), k, dB, k));
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(hipblasSgemm(handle, HIPBLAS_OP_N, HIPBLAS_OP_N, m, n, k, &alpha, dA, m, dB, k, &beta, dC, m));
  CUBLAS_CHECK(hipblasSgemmStridedBatched(handle, HIPBLAS_OP_N, HIPBLAS_OP_T, m, n, k, &alpha, dA, m,
                                         static_cast<long long>(m) * k, dB, n, static_cast<long long>(k) * n,
                                         &beta, dC, m, static_cast<long long>(m) * n, batch));
  float nrm = 0.0f;
  CUBLAS_CHECK(hipblasSnrm2(handle, m * n, dC, 1, &nrm));
  CUBLAS_CHECK(hipblasGetMatrix(m, n, sizeof(float), dC, m, hC.data(), m));
  std::printf("C[0] = %f, |C| = %f\n", hC[0], nrm);
  CUBLAS_CHECK(hipblasDestroy(handle));
  hipStreamDestroy(stream);
  hipFree(dA);
  hipFree(dB);
  hipFree(dC);
  return 0;
}
