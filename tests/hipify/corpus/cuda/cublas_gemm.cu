// Batched and single SGEMM through cuBLAS, with status checking and a user stream.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cstdio>
#include <vector>

#define CUBLAS_CHECK(x)                                                   \
  do {                                                                    \
    cublasStatus_t st_ = (x);                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                   \
      std::fprintf(stderr, "cuBLAS error %d at line %d\n", st_, __LINE__); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

int main() {
  const int m = 64, n = 32, k = 16, batch = 8;
  std::vector<float> hA(m * k * batch, 1.0f), hB(k * n * batch, 1.0f), hC(m * n * batch, 0.0f);
  float *dA, *dB, *dC;
  cudaMalloc(&dA, hA.size() * sizeof(float));
  cudaMalloc(&dB, hB.size() * sizeof(float));
  cudaMalloc(&dC, hC.size() * sizeof(float));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cublasHandle_t handle;
  CUBLAS_CHECK(cublasCreate(&handle));
  CUBLAS_CHECK(cublasSetStream(handle, stream));
  CUBLAS_CHECK(cublasSetMatrix(m, k, sizeof(float), hA.data(), m, dA, m));
  CUBLAS_CHECK(cublasSetMatrix(k, n, sizeof(float), hB.data(), k, dB, k));
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA, m, dB, k, &beta, dC, m));
  CUBLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, dA, m,
                                         static_cast<long long>(m) * k, dB, n, static_cast<long long>(k) * n,
                                         &beta, dC, m, static_cast<long long>(m) * n, batch));
  float nrm = 0.0f;
  CUBLAS_CHECK(cublasSnrm2(handle, m * n, dC, 1, &nrm));
  CUBLAS_CHECK(cublasGetMatrix(m, n, sizeof(float), dC, m, hC.data(), m));
  std::printf("C[0] = %f, |C| = %f\n", hC[0], nrm);
  CUBLAS_CHECK(cublasDestroy(handle));
  cudaStreamDestroy(stream);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  return 0;
}
