// Compute-capability and toolkit-version tests, bf16 storage and block-scoped atomics.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#if defined(CUDART_VERSION) && CUDART_VERSION >= 12000
#define HAS_CUDA12 1
#else
#define HAS_CUDA12 0
#endif

__global__ void scale_bf16(nv_bfloat16* out, const __nv_bfloat16* in, float s, int n, int* count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
#if __CUDA_ARCH__ >= 800
    out[i] = in[i] * nv_bfloat16(s);  // bf16 operators (sm_80 path: not taken on AMD)
#else
    float v = in[i];
    out[i] = nv_bfloat16(v * s);
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 600  // nvcc's host pass must not see it either
#error "needs sm_60 block-scoped atomics"
#endif
    atomicAdd_block(count, 1);
}

int main() {
    nv_bfloat16* d = nullptr;
    int* c = nullptr;
    cudaMalloc(&d, 256 * sizeof(nv_bfloat16));
    cudaMalloc(&c, sizeof(int));
    scale_bf16<<<1, 256>>>(d, d, 2.0f, 256, c);
    cudaDeviceSynchronize();
    cudaFree(c);
    cudaFree(d);
    return HAS_CUDA12;
}
