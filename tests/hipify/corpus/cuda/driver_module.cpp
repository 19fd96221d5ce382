// Driver API: load a compiled module from disk, look up a kernel and launch it with cuLaunchKernel.
#include <cuda.h>
#include <cstdio>
#include <vector>

#define CU_CHECK(x)                                                  \
  do {                                                               \
    CUresult r_ = (x);                                               \
    if (r_ != CUDA_SUCCESS) {                                        \
      std::fprintf(stderr, "%s failed with %d\n", #x, (int)r_);     \
      return 1;                                                      \
    }                                                                \
  } while (0)

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "vector_add.cubin";
  CU_CHECK(cuInit(0));
  int count = 0;
  CU_CHECK(cuDeviceGetCount(&count));
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));
  char name[128];
  CU_CHECK(cuDeviceGetName(name, sizeof(name), dev));
  int major = 0, sms = 0;
  CU_CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU_CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  std::printf("%d device(s); %s, major %d, %d SMs\n", count, name, major, sms);

  CUcontext ctx;
  CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(cuCtxSetCurrent(ctx));
  CUmodule module;
  CU_CHECK(cuModuleLoad(&module, path));
  CUfunction kernel;
  CU_CHECK(cuModuleGetFunction(&kernel, module, "vector_add"));

  const int n = 1024;
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  CUdeviceptr da, db, dc;
  CU_CHECK(cuMemAlloc(&da, n * sizeof(float)));
  CU_CHECK(cuMemAlloc(&db, n * sizeof(float)));
  CU_CHECK(cuMemAlloc(&dc, n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(da, a.data(), n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(db, b.data(), n * sizeof(float)));

  CUstream stream;
  CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  int nn = n;
  void* args[] = {&da, &db, &dc, &nn};
  CU_CHECK(cuLaunchKernel(kernel, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, args, nullptr));
  CU_CHECK(cuStreamSynchronize(stream));
  CU_CHECK(cuMemcpyDtoH(c.data(), dc, n * sizeof(float)));
  std::printf("c[0] = %f\n", c[0]);

  CU_CHECK(cuMemFree(da));
  CU_CHECK(cuMemFree(db));
  CU_CHECK(cuMemFree(dc));
  CU_CHECK(cuStreamDestroy(stream));
  CU_CHECK(cuModuleUnload(module));
  CU_CHECK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
