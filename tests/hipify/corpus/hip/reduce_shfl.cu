// Sum reduction with warp shuffles: one partial sum per warp in shared memory,
// then the first warp reduces the partials. Typical of CUDA samples and ML kernels.
#include <cstdio>
#include <hip/hip_runtime.h>

#define WARP_SIZE 32
#define FULL_MASK 0xffffffff

#define CUDA_CHECK(call)                                                     \
  do {                                                                       \
    hipError_t err__ = (call);                                              \
    if (err__ != hipSuccess) {                                              \
      fprintf(stderr, "CUDA error %s at %s:%d\n", hipGetErrorString(err__), \
              __FILE__, __LINE__);                                           \
      return 1;                                                              \
    }                                                                        \
  } while (0)

__inline__ __device__ float warpReduceSum(float val) {
  for (int offset = 16; offset > 0; offset /= 2)
    val += __shfl_down(val, offset);
  return val;
}

__global__ void reduceSum(const float* __restrict__ in, float* out, int n) {
  __shared__ float partial[32];
  int lane = threadIdx.x % WARP_SIZE;
  int warp = threadIdx.x / WARP_SIZE;
  float sum = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    sum += in[i];
  sum = warpReduceSum(sum);
  if (lane == 0) partial[warp] = sum;
  __syncthreads();
  sum = (threadIdx.x < blockDim.x / WARP_SIZE) ? partial[lane] : 0.0f;
  if (warp == 0) sum = warpReduceSum(sum);
  if (threadIdx.x == 0) atomicAdd(out, sum);
}

int main() {
  const int n = 1 << 20;
  float *d_in = nullptr, *d_out = nullptr;
  CUDA_CHECK(hipMalloc(&d_in, n * sizeof(float)));
  CUDA_CHECK(hipMalloc(&d_out, sizeof(float)));
  CUDA_CHECK(hipMemset(d_out, 0, sizeof(float)));
  float* h_in = new float[n];
  for (int i = 0; i < n; ++i) h_in[i] = 1.0f;
  CUDA_CHECK(hipMemcpy(d_in, h_in, n * sizeof(float), hipMemcpyHostToDevice));
  reduceSum<<<256, 256>>>(d_in, d_out, n);
  CUDA_CHECK(hipGetLastError());
  float result = 0.0f;
  CUDA_CHECK(hipMemcpy(&result, d_out, sizeof(float), hipMemcpyDeviceToHost));
  printf("sum = %f (expected %d)\n", result, n);
  CUDA_CHECK(hipFree(d_in));
  CUDA_CHECK(hipFree(d_out));
  delete[] h_in;
  return 0;
}
