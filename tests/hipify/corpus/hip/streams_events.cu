// Overlapping copies and kernels on several streams with pinned memory, events and a host callback.
#include <hip/hip_runtime.h>
#include <cstdio>

__global__ void scale(float* data, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

static void  onDone(hipStream_t stream, hipError_t status, void* userData) {
  (void)stream;
  printf("chunk %d done: %s\n", *static_cast<int*>(userData), hipGetErrorName(status));
}

int main() {
  const int kStreams = 4, n = 1 << 22, chunk = n / kStreams;
  float* host = nullptr;
  float* dev = nullptr;
  hipHostMalloc(reinterpret_cast<void**>(&host), n * sizeof(float), hipHostMallocDefault);
  hipMalloc(&dev, n * sizeof(float));
  for (int i = 0; i < n; ++i) host[i] = 1.0f;

  hipStream_t streams[kStreams];
  hipEvent_t start, stop, copied[kStreams];
  int ids[kStreams];
  for (int s = 0; s < kStreams; ++s) {
    hipStreamCreate(&streams[s]);
    hipEventCreateWithFlags(&copied[s], hipEventDisableTiming);
    ids[s] = s;
  }
  hipEventCreate(&start);
  hipEventCreate(&stop);

  hipDeviceProp_t prop;
  hipGetDeviceProperties(&prop, 0);
  printf("%s: %d SMs, warp size %d, concurrent kernels %d\n", prop.name, prop.multiProcessorCount, prop.warpSize,
         prop.concurrentKernels);

  hipEventRecord(start, 0);
  for (int s = 0; s < kStreams; ++s) {
    const int off = s * chunk;
    hipMemcpyAsync(dev + off, host + off, chunk * sizeof(float), hipMemcpyHostToDevice, streams[s]);
    hipEventRecord(copied[s], streams[s]);
    hipStreamWaitEvent(streams[(s + 1) % kStreams], copied[s], 0);
    scale<<<(chunk + 255) / 256, 256, 0, streams[s]>>>(dev + off, 2.0f, chunk);
    hipMemcpyAsync(host + off, dev + off, chunk * sizeof(float), hipMemcpyDeviceToHost, streams[s]);
    hipStreamAddCallback(streams[s], onDone, &ids[s], 0);
  }
  hipEventRecord(stop, 0);
  hipEventSynchronize(stop);
  float ms = 0.0f;
  hipEventElapsedTime(&ms, start, stop);
  printf("elapsed %.3f ms, host[0] = %f\n", ms, host[0]);

  for (int s = 0; s < kStreams; ++s) {
    hipStreamDestroy(streams[s]);
    hipEventDestroy(copied[s]);
  }
  hipEventDestroy(start);
  hipEventDestroy(stop);
  hipHostFree(host);
  hipFree(dev);
  hipDeviceReset();
  return 0;
}
