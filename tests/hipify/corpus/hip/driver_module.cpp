// Driver API: load a compiled module from disk, look up a kernel and launch it with cuLaunchKernel.
#include <hip/hip_runtime.h>
#include <cstdio>
#include <vector>

#define CU_CHECK(x)                                                  \
  do {                                                               \
    hipError_t r_ = (x);                                               \
    if (r_ != hipSuccess) {                                        \
      std::fprintf(stderr, "%s failed with %d\n", #x, (int)r_);     \
      return 1;                                                      \
    }                                                                \
  } while (0)

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "vector_add.cubin";
  CU_CHECK(hipInit(0));
  int count = 0;
  CU_CHECK(hipGetDeviceCount(&count));
  hipDevice_t dev;
  CU_CHECK(hipDeviceGet(&dev, 0));
  char name[128];
  CU_CHECK(hipDeviceGetName(name, sizeof(name), dev));
  int major = 0, sms = 0;
  CU_CHECK(hipDeviceGetAttribute(&major, hipDeviceAttributeComputeCapabilityMajor, dev));
  CU_CHECK(hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, dev));
  std::printf("%d device(s); %s, major %d, %d SMs\n", count, name, major, sms);

  hipCtx_t ctx;
  CU_CHECK(hipDevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(hipCtxSetCurrent(ctx));
  hipModule_t module;
  CU_CHECK(hipModuleLoad(&module, path));
  hipFunction_t kernel;
  CU_CHECK(hipModuleGetFunction(&kernel, module, "vector_add"));

  const int n = 1024;
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  hipDeviceptr_t da, db, dc;
  CU_CHECK(hipMalloc(&da, n * sizeof(float)));
  CU_CHECK(hipMalloc(&db, n * sizeof(float)));
  CU_CHECK(hipMalloc(&dc, n * sizeof(float)));
  CU_CHECK(hipMemcpyHtoD(da, a.data(), n * sizeof(float)));
  CU_CHECK(hipMemcpyHtoD(db, b.data(), n * sizeof(float)));

  hipStream_t stream;
  CU_CHECK(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
  int nn = n;
  void* args[] = {&da, &db, &dc, &nn};
  CU_CHECK(hipModuleLaunchKernel(kernel, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, args, nullptr));
  CU_CHECK(hipStreamSynchronize(stream));
  CU_CHECK(hipMemcpyDtoH(c.data(), dc, n * sizeof(float)));
  std::printf("c[0] = %f\n", c[0]);

  CU_CHECK(hipFree(da));
  CU_CHECK(hipFree(db));
  CU_CHECK(hipFree(dc));
  CU_CHECK(hipStreamDestroy(stream));
  CU_CHECK(hipModuleUnload(module));
  CU_CHECK(hipDevicePrimaryCtxRelease(dev));
  return 0;
}
