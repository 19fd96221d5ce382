// Extensible launches with attributes, programmatic dependent launch (PDL), thread-block clusters and the
// CUDA 12 graph update, as CUDA 12 code writes them (the patterns of llama.cpp's ggml-cuda and vLLM's kernels).
#include <cuda.h>
#include <cuda_runtime.h>

#include <utility>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float alpha, int n) {
  cudaGridDependencySynchronize();  // wait for the producer kernel before reading x
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i];
  cudaTriggerProgrammaticLaunchCompletion();
}

__global__ void count_kernel(const int* flags, unsigned int* counts, int* extremes) {
  const int lane = threadIdx.x % 32;
  const int v = flags[blockIdx.x * blockDim.x + threadIdx.x];
  const unsigned int total = __reduce_add_sync(0xffffffffu, static_cast<unsigned int>(v));
  const int largest = __reduce_max_sync(0xffffffffu, v);
  const unsigned int odd = __reduce_or_sync(0x0000ffffu, static_cast<unsigned int>(v & 1));
  if (lane == 0) {
    counts[blockIdx.x] = total + odd;
    extremes[blockIdx.x] = largest;
  }
  __nanosleep(100);
}

struct pdl_config {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg;

  pdl_config(dim3 grid, dim3 block, size_t shmem, cudaStream_t stream) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    attr[1].id = cudaLaunchAttributePriority;
    attr[1].val.priority = 0;
    cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = shmem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 2;
  }
};

template <typename Kernel, typename... Args>
cudaError_t launch_pdl(Kernel kernel, dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  pdl_config pdl(grid, block, 0, stream);
  return cudaLaunchKernelEx(&pdl.cfg, kernel, std::forward<Args>(args)...);
}

cudaError_t run(const float* x, float* y, int n, cudaStream_t stream) {
  cudaError_t err = launch_pdl(scale_kernel, dim3((n + 255) / 256), dim3(256), stream, x, y, 2.0f, n);
  if (err != cudaSuccess) return err;

  // a one-block cluster and a cooperative launch through the C form
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = 1;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  attrs[1].id = cudaLaunchAttributeCooperative;
  attrs[1].val.cooperative = 1;
  cudaLaunchConfig_t config = {dim3(1), dim3(256), 0, stream, attrs, 2};
  float alpha = 0.5f;
  void* args[] = {&x, &y, &alpha, &n};
  return cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(scale_kernel), args);
}

// the driver API's form, for a kernel loaded from a module
CUresult run_module(CUfunction f, CUstream stream, void** params) {
  CUlaunchAttribute attr;
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config = {};
  config.gridDimX = 4;
  config.gridDimY = 1;
  config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return cuLaunchKernelEx(&config, f, params, nullptr);
}

// re-instantiate a captured graph only when the update fails
cudaError_t update_graph(cudaGraphExec_t* exec, cudaGraph_t graph) {
  cudaGraphExecUpdateResultInfo info;
  cudaError_t err = cudaGraphExecUpdate(*exec, graph, &info);
  if (err == cudaSuccess) return err;
  if (info.result == cudaGraphExecUpdateErrorTopologyChanged ||
      static_cast<int>(info.result) == cudaGraphExecUpdateErrorAttributesChanged) {
    (void)cudaGetLastError();
    cudaGraphExecDestroy(*exec);
    return cudaGraphInstantiate(exec, graph, 0);
  }
#if CUDART_VERSION < 12000
  cudaGraphNode_t error_node;
  cudaGraphExecUpdateResult result;
  err = cudaGraphExecUpdate(*exec, graph, &error_node, &result);
#endif
  return err;
}
