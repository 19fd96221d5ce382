#pragma once
// Error-checking macros and a templated kernel shared by several translation units.
#include <hip/hip_runtime.h>
#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(expr)                                                                  \
  do {                                                                                    \
    hipError_t status_ = (expr);                                                         \
    if (status_ != hipSuccess) {                                                         \
      std::fprintf(stderr, "%s failed: %s (cudaError %d)\n", #expr,                       \
                   hipGetErrorString(status_), static_cast<int>(status_));               \
      std::exit(EXIT_FAILURE);                                                            \
    }                                                                                     \
  } while (false)

#define LAUNCH_CHECK() CHECK_CUDA(hipGetLastError())

inline int ceilDiv(int a, int b) { return (a + b - 1) / b; }

template <typename T, int UNROLL>
__global__ void axpyKernel(T a, const T* __restrict__ x, T* __restrict__ y, int n) {
  int base = (blockIdx.x * blockDim.x + threadIdx.x) * UNROLL;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    int i = base + u;
    if (i < n) y[i] = a * x[i] + y[i];
  }
}
