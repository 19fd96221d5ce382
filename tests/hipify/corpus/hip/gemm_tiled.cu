/* Tiled single-precision GEMM C = alpha * A * B + beta * C with shared-memory tiles.
 * Row-major; the tile size is a template parameter. */
#include <hip/hip_runtime.h>
#include <vector>
#include <cstdio>

template <int TILE>
__global__ void sgemmTiled(int M, int N, int K, float alpha, const float* A, const float* B,
                           float beta, float* C) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE + 1];  // +1 avoids bank conflicts
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
    int ak = t * TILE + threadIdx.x;
    int bk = t * TILE + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = alpha * acc + beta * C[row * N + col];
}

void gemm(int M, int N, int K, const float* dA, const float* dB, float* dC, hipStream_t stream) {
  constexpr int TILE = 16;
  dim3 block(TILE, TILE);
  dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  sgemmTiled<TILE><<<grid, block, 0, stream>>>(M, N, K, 1.0f, dA, dB, 0.0f, dC);
}

int main() {
  const int M = 256, N = 128, K = 64;
  std::vector<float> hA(M * K, 1.0f), hB(K * N, 2.0f), hC(M * N);
  float *dA, *dB, *dC;
  hipMalloc(reinterpret_cast<void**>(&dA), hA.size() * sizeof(float));
  hipMalloc(reinterpret_cast<void**>(&dB), hB.size() * sizeof(float));
  hipMalloc(reinterpret_cast<void**>(&dC), hC.size() * sizeof(float));
  hipMemcpy(dA, hA.data(), hA.size() * sizeof(float), hipMemcpyHostToDevice);
  hipMemcpy(dB, hB.data(), hB.size() * sizeof(float), hipMemcpyHostToDevice);
  hipStream_t stream;
  hipStreamCreateWithFlags(&stream, hipStreamNonBlocking);
  gemm(M, N, K, dA, dB, dC, stream);
  hipStreamSynchronize(stream);
  hipMemcpy(hC.data(), dC, hC.size() * sizeof(float), hipMemcpyDeviceToHost);
  printf("C[0] = %f (expected %f)\n", hC[0], 2.0f * K);
  hipStreamDestroy(stream);
  hipFree(dA);
  hipFree(dB);
  hipFree(dC);
  return 0;
}
