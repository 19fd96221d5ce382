// Monte-Carlo estimate of pi: cuRAND device API for per-thread streams and the host API for a buffer.
#include <cuda_runtime.h>
#include <curand.h>
#include <curand_kernel.h>
#include <cstdio>

__global__ void setupStates(curandState* states, unsigned long long seed) {
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  curand_init(seed, id, 0, &states[id]);
}

__global__ void countInside(curandState* states, int samples, unsigned int* inside) {
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  curandState local = states[id];
  unsigned int hits = 0;
  for (int i = 0; i < samples; ++i) {
    float x = curand_uniform(&local);
    float y = curand_uniform(&local);
    hits += (x * x + y * y <= 1.0f);
  }
  states[id] = local;
  atomicAdd(inside, hits);
}

int main() {
  const int blocks = 64, threads = 128, samples = 1000;
  curandState* states;
  unsigned int* inside;
  cudaMalloc(&states, blocks * threads * sizeof(curandState));
  cudaMalloc(&inside, sizeof(unsigned int));
  cudaMemset(inside, 0, sizeof(unsigned int));
  setupStates<<<blocks, threads>>>(states, 1234ULL);
  countInside<<<blocks, threads>>>(states, samples, inside);
  unsigned int hits = 0;
  cudaMemcpy(&hits, inside, sizeof(hits), cudaMemcpyDeviceToHost);
  printf("pi ~ %f\n", 4.0 * hits / (double(blocks) * threads * samples));

  curandGenerator_t gen;
  float* normals;
  const size_t count = 1 << 16;
  cudaMalloc(&normals, count * sizeof(float));
  if (curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10) != CURAND_STATUS_SUCCESS) return 1;
  curandSetPseudoRandomGeneratorSeed(gen, 42ULL);
  curandGenerateNormal(gen, normals, count, 0.0f, 1.0f);
  curandDestroyGenerator(gen);
  cudaFree(normals);
  cudaFree(states);
  cudaFree(inside);
  return 0;
}
