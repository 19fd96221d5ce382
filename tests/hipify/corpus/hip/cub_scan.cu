// CUB block-level reduction inside a kernel and a device-wide exclusive scan with temporary storage.
#include <hipcub/hipcub.hpp>
#include <hip/hip_runtime.h>
#include <cstdio>

template <int BLOCK_THREADS>
__global__ void blockSums(const int* in, int* out) {
  using BlockReduceT = hipcub::BlockReduce<int, BLOCK_THREADS>;
  __shared__ typename BlockReduceT::TempStorage temp;
  int v = in[blockIdx.x * BLOCK_THREADS + threadIdx.x];
  int total = BlockReduceT(temp).Sum(v);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

int main() {
  const int blocks = 32, threads = 128, n = blocks * threads;
  int *d_in, *d_sums, *d_scan;
  hipMalloc(&d_in, n * sizeof(int));
  hipMalloc(&d_sums, blocks * sizeof(int));
  hipMalloc(&d_scan, blocks * sizeof(int));
  hipMemset(d_in, 0, n * sizeof(int));
  blockSums<threads><<<blocks, threads>>>(d_in, d_sums);

  void* d_temp = nullptr;
  size_t temp_bytes = 0;
  hipcub::DeviceScan::ExclusiveSum(d_temp, temp_bytes, d_sums, d_scan, blocks);
  hipMalloc(&d_temp, temp_bytes);
  hipcub::DeviceScan::ExclusiveSum(d_temp, temp_bytes, d_sums, d_scan, blocks);
  hipDeviceSynchronize();
  printf("scan used %zu bytes of temporary storage\n", temp_bytes);
  hipFree(d_temp);
  hipFree(d_in);
  hipFree(d_sums);
  hipFree(d_scan);
  return 0;
}
