// Extensible launches with attributes, programmatic dependent launch (PDL), thread-block clusters and the
// CUDA 12 graph update, as CUDA 12 code writes them (the patterns of llama.cpp's ggml-cuda and vLLM's kernels).
#include "ember_hip_compat.h"
#include <hip/hip_runtime.h>
#include <hip/hip_runtime.h>

#include <utility>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float alpha, int n) {
  /* ember-hipify warning [programmatic-launch]: HIP has no programmatic dependent launch: runs serialized (same results, no overlap) */ ember_hipGridDependencySynchronize();  // wait for the producer kernel before reading x
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i];
  /* ember-hipify warning [programmatic-launch]: HIP has no programmatic dependent launch: runs serialized (same results, no overlap) */ ember_hipTriggerProgrammaticLaunchCompletion();
}

__global__ void count_kernel(const int* flags, unsigned int* counts, int* extremes) {
  const int lane = threadIdx.x % 32;
  const int v = flags[blockIdx.x * blockDim.x + threadIdx.x];
  const unsigned int total = ember_reduce_add_sync(0xffffffffu, static_cast<unsigned int>(v));
  const int largest = ember_reduce_max_sync(0xffffffffu, v);
  const unsigned int odd = ember_reduce_or_sync(0x0000ffffu, static_cast<unsigned int>(v & 1));
  if (lane == 0) {
    counts[blockIdx.x] = total + odd;
    extremes[blockIdx.x] = largest;
  }
  ember_nanosleep(100);
}

struct pdl_config {
  ember_hipLaunchAttribute attr[2];
  ember_hipLaunchConfig_t cfg;

  pdl_config(dim3 grid, dim3 block, size_t shmem, hipStream_t stream) {
    attr[0].id = /* ember-hipify warning [programmatic-launch]: HIP has no programmatic dependent launch: runs serialized (same results, no overlap) */ ember_hipLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    attr[1].id = ember_hipLaunchAttributePriority;
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
hipError_t launch_pdl(Kernel kernel, dim3 grid, dim3 block, hipStream_t stream, Args&&... args) {
  pdl_config pdl(grid, block, 0, stream);
  return ember_hipLaunchKernelEx(&pdl.cfg, kernel, std::forward<Args>(args)...);
}

hipError_t run(const float* x, float* y, int n, hipStream_t stream) {
  hipError_t err = launch_pdl(scale_kernel, dim3((n + 255) / 256), dim3(256), stream, x, y, 2.0f, n);
  if (err != hipSuccess) return err;

  // a one-block cluster and a cooperative launch through the C form
  ember_hipLaunchAttribute attrs[2];
  attrs[0].id = /* ember-hipify warning [cluster-launch]: no thread-block clusters on AMD GPUs: a cluster above 1x1x1 fails with hipErrorNotSupported */ ember_hipLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = 1;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  attrs[1].id = ember_hipLaunchAttributeCooperative;
  attrs[1].val.cooperative = 1;
  ember_hipLaunchConfig_t config = {dim3(1), dim3(256), 0, stream, attrs, 2};
  float alpha = 0.5f;
  void* args[] = {&x, &y, &alpha, &n};
  return ember_hipLaunchKernelExC(&config, reinterpret_cast<const void*>(scale_kernel), args);
}

// the driver API's form, for a kernel loaded from a module
hipError_t run_module(hipFunction_t f, hipStream_t stream, void** params) {
  ember_hipLaunchAttribute attr;
  attr.id = /* ember-hipify warning [programmatic-launch]: HIP has no programmatic dependent launch: runs serialized (same results, no overlap) */ ember_hipLaunchAttributeProgrammaticStreamSerialization;
  attr.value.programmaticStreamSerializationAllowed = 1;
  ember_HIP_LAUNCH_CONFIG config = {};
  config.gridDimX = 4;
  config.gridDimY = 1;
  config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return ember_hipDrvLaunchKernelEx(&config, f, params, nullptr);
}

// re-instantiate a captured graph only when the update fails
hipError_t update_graph(hipGraphExec_t* exec, hipGraph_t graph) {
  ember_hipGraphExecUpdateResultInfo info;
  hipError_t err = ember_hipGraphExecUpdate(*exec, graph, &info);
  if (err == hipSuccess) return err;
  if (info.result == hipGraphExecUpdateErrorTopologyChanged ||
      static_cast<int>(info.result) == ember_hipGraphExecUpdateErrorAttributesChanged) {
    (void)hipGetLastError();
    hipGraphExecDestroy(*exec);
    return hipGraphInstantiateWithFlags(exec, graph, 0);
  }
#if CUDART_VERSION < 12000
  hipGraphNode_t error_node;
  hipGraphExecUpdateResult result;
  err = hipGraphExecUpdate(*exec, graph, &error_node, &result);
#endif
  return err;
}
