// Row-wise softmax, one block per row; block-wide max and sum through warp shuffles.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <cfloat>

template <typename T>
__device__ __forceinline__ T warpAllReduceMax(T v) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) v = max(v, __shfl_xor(v, mask));
  return v;
}

template <typename T>
__device__ __forceinline__ T warpAllReduceSum(T v) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) v += __shfl_xor(v, mask);
  return v;
}

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) softmaxRows(const __half* x, float* y, int cols) {
  __shared__ float red[BLOCK / 32];
  const __half* row = x + static_cast<size_t>(blockIdx.x) * cols;
  float* out = y + static_cast<size_t>(blockIdx.x) * cols;
  const int lane = threadIdx.x & 31;
  const int wid = threadIdx.x >> 5;

  float m = -FLT_MAX;
  for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, __half2float(row[c]));
  m = warpAllReduceMax(m);
  if (lane == 0) red[wid] = m;
  __syncthreads();
  m = lane < BLOCK / 32 ? red[lane] : -FLT_MAX;
  m = warpAllReduceMax(m);
  __syncthreads();

  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) s += __expf(__half2float(row[c]) - m);
  s = warpAllReduceSum(s);
  if (lane == 0) red[wid] = s;
  __syncthreads();
  s = lane < BLOCK / 32 ? red[lane] : 0.f;
  s = warpAllReduceSum(s);

  for (int c = threadIdx.x; c < cols; c += BLOCK) out[c] = __expf(__half2float(row[c]) - m) / s;
}

hipError_t launchSoftmax(const __half* x, float* y, int rows, int cols, hipStream_t stream) {
  constexpr int kBlock = 256;
  softmaxRows<kBlock>
      <<<rows, kBlock, 0,
         stream>>>(x, y,
                   cols);
  return hipPeekAtLastError();
}
