// A growable device pool on the driver's virtual memory API, and a kernel that traps on bad input.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>

#define DRV_CHECK(x)                                             \
  do {                                                           \
    CUresult r_ = (x);                                           \
    if (r_ != CUDA_SUCCESS) {                                    \
      std::fprintf(stderr, "driver error %d at %d\n", r_, __LINE__); \
      return 1;                                                  \
    }                                                            \
  } while (0)

__global__ void checked_scale(float *x, int n, float s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (n < 0) {
    __trap();
  }
  if (i < n) x[i] *= s;
}

int grow(int device, size_t bytes) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  DRV_CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  bytes = (bytes + granularity - 1) / granularity * granularity;
  CUdeviceptr base = 0;
  DRV_CHECK(cuMemAddressReserve(&base, bytes, 0, 0, 0));
  CUmemGenericAllocationHandle handle;
  DRV_CHECK(cuMemCreate(&handle, bytes, &prop, 0));
  DRV_CHECK(cuMemMap(base, bytes, 0, handle, 0));
  DRV_CHECK(cuMemRelease(handle));
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  DRV_CHECK(cuMemSetAccess(base, bytes, &access, 1));
  int n = static_cast<int>(bytes / sizeof(float));
  checked_scale<<<(n + 255) / 256, 256>>>(reinterpret_cast<float *>(base), n, 2.0f);
  cudaDeviceSynchronize();
  DRV_CHECK(cuMemUnmap(base, bytes));
  DRV_CHECK(cuMemAddressFree(base, bytes));
  return 0;
}
