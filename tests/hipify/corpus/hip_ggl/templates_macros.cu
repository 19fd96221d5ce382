// Templated kernels, macros, launches in unusual forms, and CUDA names inside comments and strings
// (which must survive translation untouched): cudaMalloc, cudaMemcpy, <<<grid, block>>>.
#include "launch_helpers.cuh"
#include <hip/hip_runtime_api.h>

namespace ops {

template <typename T>
struct Square {
  __host__ __device__ T operator()(T v) const { return v * v; }
};

template <typename T, typename Op>
__global__ void mapKernel(const T* in, T* out, int n, Op op) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) out[i] = op(in[i]);
}

}  // namespace ops

__device__ int arch_tag() {
#ifdef __HIP_DEVICE_COMPILE__
  return 1;
#else
  return 0;
#endif
}

__constant__ float kCoeffs[4];

int main() {
  const char* banner = "using cudaMalloc and cudaMemcpy via <<<grid, block>>>";
  const char* raw = R"doc(cudaFree(ptr); // not code)doc";
  std::printf("%s\n%s\n", banner, raw);
  const int n = 4096;
  float *x, *y;
  CHECK_CUDA(hipMalloc(&x, n * sizeof(float)));
  CHECK_CUDA(hipMalloc(&y, n * sizeof(float)));
  CHECK_CUDA(hipMemset(y, 0, n * sizeof(float)));
  const float coeffs[4] = {1.f, 2.f, 3.f, 4.f};
  CHECK_CUDA(hipMemcpyToSymbol(kCoeffs, coeffs, sizeof(coeffs)));

  hipLaunchKernelGGL(HIP_KERNEL_NAME(axpyKernel<float, 4>), dim3(ceilDiv(n, 256 * 4)), dim3(256), 0, 0, 2.0f, x, y, n);
  LAUNCH_CHECK();
  // The spaced form some code bases use:
  hipLaunchKernelGGL(HIP_KERNEL_NAME(axpyKernel<float, 1>), dim3(ceilDiv(n, 128)), dim3(128), 0, 0, 1.0f, x, y, n);
  LAUNCH_CHECK();
  hipLaunchKernelGGL(HIP_KERNEL_NAME(ops::mapKernel<float, ops::Square<float>>), dim3(dim3(ceilDiv(n, 256))), dim3(dim3(256)), 0, hipStreamPerThread,
          x, y, n,
          ops::Square<float>());
  LAUNCH_CHECK();
  CHECK_CUDA(hipDeviceSynchronize());
  int device = 0, version = 0;
  CHECK_CUDA(hipGetDevice(&device));
  CHECK_CUDA(hipRuntimeGetVersion(&version));
  std::printf("device %d runtime %d\n", device, version);
  CHECK_CUDA(hipFree(x));
  CHECK_CUDA(hipFree(y));
  return 0;
}
