// Monte-Carlo estimate of pi: cuRAND device API for per-thread streams and the host API for a buffer.
#include <hip/hip_runtime.h>
#include <hiprand/hiprand.h>
#include <hiprand/hiprand_kernel.h>
#include <cstdio>

__global__ void setupStates(hiprandState* states, unsigned long long seed) {
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  hiprand_init(seed, id, 0, &states[id]);
}

__global__ void countInside(hiprandState* states, int samples, unsigned int* inside) {
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  hiprandState local = states[id];
  unsigned int hits = 0;
  for (int i = 0; i < samples; ++i) {
    float x = hiprand_uniform(&local);
    float y = hiprand_uniform(&local);
    hits += (x * x + y * y <= 1.0f);
  }
  states[id] = local;
  atomicAdd(inside, hits);
}

int main() {
  const int blocks = 64, threads = 128, samples = 1000;
  hiprandState* states;
  unsigned int* inside;
  hipMalloc(&states, blocks * threads * sizeof(hiprandState));
  hipMalloc(&inside, sizeof(unsigned int));
  hipMemset(inside, 0, sizeof(unsigned int));
  setupStates<<<blocks, threads>>>(states, 1234ULL);
  countInside<<<blocks, threads>>>(states, samples, inside);
  unsigned int hits = 0;
  hipMemcpy(&hits, inside, sizeof(hits), hipMemcpyDeviceToHost);
  printf("pi ~ %f\n", 4.0 * hits / (double(blocks) * threads * samples));

  hiprandGenerator_t gen;
  float* normals;
  const size_t count = 1 << 16;
  hipMalloc(&normals, count * sizeof(float));
  if (hiprandCreateGenerator(&gen, HIPRAND_RNG_PSEUDO_PHILOX4_32_10) != HIPRAND_STATUS_SUCCESS) return 1;
  hiprandSetPseudoRandomGeneratorSeed(gen, 42ULL);
  hiprandGenerateNormal(gen, normals, count, 0.0f, 1.0f);
  hiprandDestroyGenerator(gen);
  hipFree(normals);
  hipFree(states);
  hipFree(inside);
  return 0;
}
