// A growable device pool on the driver's virtual memory API, and a kernel that traps on bad input.
#include <hip/hip_runtime.h>
#include <hip/hip_runtime.h>
#include <cstdio>

#define DRV_CHECK(x)                                             \
  do {                                                           \
    hipError_t r_ = (x);                                           \
    if (r_ != hipSuccess) {                                    \
      std::fprintf(stderr, "driver error %d at %d\n", r_, __LINE__); \
      return 1;                                                  \
    }                                                            \
  } while (0)

__global__ void checked_scale(float *x, int n, float s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (n < 0) {
    abort();
  }
  if (i < n) x[i] *= s;
}

int grow(int device, size_t bytes) {
  hipMemAllocationProp prop = {};
  prop.type = hipMemAllocationTypePinned;
  prop.location.type = hipMemLocationTypeDevice;
  prop.location.id = device;
  size_t granularity = 0;
  DRV_CHECK(hipMemGetAllocationGranularity(&granularity, &prop, hipMemAllocationGranularityRecommended));
  bytes = (bytes + granularity - 1) / granularity * granularity;
  hipDeviceptr_t base = 0;
  DRV_CHECK(hipMemAddressReserve(&base, bytes, 0, 0, 0));
  hipMemGenericAllocationHandle_t handle;
  DRV_CHECK(hipMemCreate(&handle, bytes, &prop, 0));
  DRV_CHECK(hipMemMap(base, bytes, 0, handle, 0));
  DRV_CHECK(hipMemRelease(handle));
  hipMemAccessDesc access = {};
  access.location.type = hipMemLocationTypeDevice;
  access.location.id = device;
  access.flags = hipMemAccessFlagsProtReadWrite;
  DRV_CHECK(hipMemSetAccess(base, bytes, &access, 1));
  int n = static_cast<int>(bytes / sizeof(float));
  checked_scale<<<(n + 255) / 256, 256>>>(reinterpret_cast<float *>(base), n, 2.0f);
  hipDeviceSynchronize();
  DRV_CHECK(hipMemUnmap(base, bytes));
  DRV_CHECK(hipMemAddressFree(base, bytes));
  return 0;
}
