// Compute-capability and toolkit-version tests, bf16 storage and block-scoped atomics.
#include <hip/hip_runtime.h>
#include <hip/hip_bfloat16.h>

#if defined(CUDART_VERSION) && CUDART_VERSION >= 12000
#define HAS_CUDA12 1
#else
#define HAS_CUDA12 0
#endif

__global__ void scale_bf16(hip_bfloat16* out, const hip_bfloat16* in, float s, int n, int* count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
#if (__HIP_DEVICE_COMPILE__ * 600) >= 800
    out[i] = in[i] * hip_bfloat16(s);  // bf16 operators (sm_80 path: not taken on AMD)
#else
    float v = in[i];
    out[i] = hip_bfloat16(v * s);
#endif
#if defined(__HIP_DEVICE_COMPILE__) && (__HIP_DEVICE_COMPILE__ * 600) < 600  // nvcc's host pass must not see it either
#error "needs sm_60 block-scoped atomics"
#endif
    atomicAdd(count, 1);
}

int main() {
    hip_bfloat16* d = nullptr;
    int* c = nullptr;
    hipMalloc(&d, 256 * sizeof(hip_bfloat16));
    hipMalloc(&c, sizeof(int));
    scale_bf16<<<1, 256>>>(d, d, 2.0f, 256, c);
    hipDeviceSynchronize();
    hipFree(c);
    hipFree(d);
    return HAS_CUDA12;
}
