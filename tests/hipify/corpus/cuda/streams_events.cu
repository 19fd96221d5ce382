// Overlapping copies and kernels on several streams with pinned memory, events and a host callback.
#include <cuda_runtime.h>
#include <cstdio>

__global__ void scale(float* data, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

static void CUDART_CB onDone(cudaStream_t stream, cudaError_t status, void* userData) {
  (void)stream;
  printf("chunk %d done: %s\n", *static_cast<int*>(userData), cudaGetErrorName(status));
}

int main() {
  const int kStreams = 4, n = 1 << 22, chunk = n / kStreams;
  float* host = nullptr;
  float* dev = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&host), n * sizeof(float), cudaHostAllocDefault);
  cudaMalloc(&dev, n * sizeof(float));
  for (int i = 0; i < n; ++i) host[i] = 1.0f;

  cudaStream_t streams[kStreams];
  cudaEvent_t start, stop, copied[kStreams];
  int ids[kStreams];
  for (int s = 0; s < kStreams; ++s) {
    cudaStreamCreate(&streams[s]);
    cudaEventCreateWithFlags(&copied[s], cudaEventDisableTiming);
    ids[s] = s;
  }
  cudaEventCreate(&start);
  cudaEventCreate(&stop);

  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  printf("%s: %d SMs, warp size %d, concurrent kernels %d\n", prop.name, prop.multiProcessorCount, prop.warpSize,
         prop.concurrentKernels);

  cudaEventRecord(start, 0);
  for (int s = 0; s < kStreams; ++s) {
    const int off = s * chunk;
    cudaMemcpyAsync(dev + off, host + off, chunk * sizeof(float), cudaMemcpyHostToDevice, streams[s]);
    cudaEventRecord(copied[s], streams[s]);
    cudaStreamWaitEvent(streams[(s + 1) % kStreams], copied[s], 0);
    scale<<<(chunk + 255) / 256, 256, 0, streams[s]>>>(dev + off, 2.0f, chunk);
    cudaMemcpyAsync(host + off, dev + off, chunk * sizeof(float), cudaMemcpyDeviceToHost, streams[s]);
    cudaStreamAddCallback(streams[s], onDone, &ids[s], 0);
  }
  cudaEventRecord(stop, 0);
  cudaEventSynchronize(stop);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  printf("elapsed %.3f ms, host[0] = %f\n", ms, host[0]);

  for (int s = 0; s < kStreams; ++s) {
    cudaStreamDestroy(streams[s]);
    cudaEventDestroy(copied[s]);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFreeHost(host);
  cudaFree(dev);
  cudaDeviceReset();
  return 0;
}
