"""translate(): whole-token rewriting, includes, intrinsics, launches, reporting and the lint."""

from __future__ import annotations

import pytest

from ember.hipify import HipifyError, translate


def out(src: str, **kw: object) -> str:
    return translate(src, "t.cu", **kw).output  # type: ignore[arg-type]


def rules(src: str) -> list[str]:
    return [w.rule for w in translate(src, "t.cu").warnings]


def test_identifiers_whole_tokens_only() -> None:
    src = "cudaMalloc(&p, n); my_cudaMalloc(); cudaMallocX(); obj.cudaMalloc(); ns::cudaFree(p);\n"
    assert out(src) == "hipMalloc(&p, n); my_cudaMalloc(); cudaMallocX(); obj.cudaMalloc(); ns::cudaFree(p);\n"


def test_global_scope_qualified_name_is_translated() -> None:
    assert out("::cudaFree(p);") == "::hipFree(p);"


def test_comments_and_strings_untouched() -> None:
    src = (
        '// cudaMalloc here\n/* cudaFree */ const char* s = "cudaMemcpy(x)"; auto r = R"(cudaFree)";\n'
        "char c = 'c'; cudaFree(p);\n"
    )
    assert out(src) == src.replace("cudaFree(p)", "hipFree(p)")


def test_bytes_preserved_crlf_tabs_and_bom() -> None:
    src = "\ufeff#include <cuda_runtime.h>\r\n\tcudaStream_t  s;\r\n\r\ncudaFree( p );  \r\n"
    assert out(src) == "\ufeff#include <hip/hip_runtime.h>\r\n\thipStream_t  s;\r\n\r\nhipFree( p );  \r\n"


@pytest.mark.parametrize(
    "cuda, hip",
    [
        ("<cuda_runtime.h>", "<hip/hip_runtime.h>"),
        ('"cuda_runtime.h"', '"hip/hip_runtime.h"'),
        ("<cublas_v2.h>", "<hipblas/hipblas.h>"),
        ("<curand.h>", "<hiprand/hiprand.h>"),
        ("<cufft.h>", "<hipfft/hipfft.h>"),
        ("<cub/cub.cuh>", "<hipcub/hipcub.hpp>"),
        ("<cub/block/block_reduce.cuh>", "<hipcub/hipcub.hpp>"),
        ("<cusparse.h>", "<hipsparse/hipsparse.h>"),
        ("<cusolverDn.h>", "<hipsolver/hipsolver.h>"),
        ("<cudnn.h>", "<miopen/miopen.h>"),
        ("<cuda_fp16.h>", "<hip/hip_fp16.h>"),
        ("<vector>", "<vector>"),
        ('"my_kernels.cuh"', '"my_kernels.cuh"'),
    ],
)
def test_includes(cuda: str, hip: str) -> None:
    assert out(f"#include {cuda}\n") == f"#include {hip}\n"


def test_has_include_and_unsupported_header() -> None:
    r = translate("#if __has_include(<cuda_runtime.h>)\n#include <nvml.h>\n#endif\n", "t.cu")
    assert "__has_include(<hip/hip_runtime.h>)" in r.output
    assert "#include <nvml.h>" in r.output
    assert [(u.line, u.name) for u in r.unconverted] == [(2, "nvml.h")]
    assert "rocm_smi" in r.unconverted[0].alternative
    assert "cuda-only-library" in [w.rule for w in r.warnings]


def test_sync_intrinsics_drop_the_mask() -> None:
    src = (
        "v += __shfl_down_sync(0xffffffff, v, off);\nw = __shfl_xor_sync(mask, w, 4, 16);\n"
        "b = __ballot_sync(FULL, x > 0); a = __any_sync(m, p) + __all_sync(m, q);\n"
        "u = __activemask(); __syncwarp(); __syncwarp(mask);\n"
    )
    assert out(src) == (
        "v += __shfl_down(v, off);\nw = __shfl_xor(w, 4, 16);\n"
        "b = __ballot(x > 0); a = __any(p) + __all(q);\n"
        "u = __ballot(1); __builtin_amdgcn_wave_barrier(); __builtin_amdgcn_wave_barrier();\n"
    )


def test_cuda_arch_presence_vs_comparison() -> None:
    src = (
        "#ifdef __CUDA_ARCH__\n#endif\n#if defined(__CUDA_ARCH__) && X\n#endif\n#if __CUDA_ARCH__\n#endif\n"
        "#if __CUDA_ARCH__ >= 800\n#endif\n"
    )
    r = translate(src, "t.cu")
    assert r.output.count("__HIP_DEVICE_COMPILE__") == 4
    # a compute-capability comparison answers as sm_60 in the device pass, 0 in the host pass
    assert "#if (__HIP_DEVICE_COMPILE__ * 600) >= 800" in r.output
    assert r.unconverted == []


def test_cuda_arch_value_uses_and_shims() -> None:
    src = (
        "#if defined(FP16) && __CUDA_ARCH__ != 610\n#endif\n"
        "#define ARCH_OF_THIS_PASS __CUDA_ARCH__\n"
        "#define __CUDA_ARCH__ 1300\n#undef __CUDA_ARCH__\n"
    )
    r = translate(src, "t.cu")
    assert r.output == (
        "#if defined(FP16) && (__HIP_DEVICE_COMPILE__ * 600) != 610\n#endif\n"
        "#define ARCH_OF_THIS_PASS (__HIP_DEVICE_COMPILE__ * 600)\n"
        "#define __CUDA_ARCH__ 1300\n#undef __CUDA_ARCH__\n"
    )
    assert len(r.converted) == 2 and r.unconverted == []


def test_cuda_version_macros_kept_in_conditions_only() -> None:
    src = (
        "#if CUDART_VERSION >= 12000\n#endif\n#ifdef __CUDA_ARCH_LIST__\n#endif\n"
        "#elif defined(CUDA_VERSION) && CUDA_VERSION < 11000\n"
        'printf("%d", CUDART_VERSION);\n'
    )
    r = translate(src, "t.cu")
    assert r.output == src
    assert [(c.line, c.kind) for c in r.converted] == [(1, "version"), (3, "version"), (5, "version"), (5, "version")]
    assert [(u.line, u.name) for u in r.unconverted] == [(6, "CUDART_VERSION")]


BF16_SOURCE = (
    "#include <cuda_bf16.h>\n"
    "__device__ void f(nv_bfloat16* p, __nv_bfloat16 x, nv_bfloat162 y, int* c) {\n"
    "  atomicAdd_block(c, 1); atomicMax_block(c, 2); float g = __bfloat162float(x);\n}\n"
)


def test_bf16_hip64_maps_pairs_and_intrinsics() -> None:
    r = translate(BF16_SOURCE, "t.cu")
    assert r.output.splitlines()[:3] == [
        "#include <hip/hip_bf16.h>",
        "__device__ void f(__hip_bfloat16* p, __hip_bfloat16 x, __hip_bfloat162 y, int* c) {",
        "  atomicAdd(c, 1); atomicMax(c, 2); float g = __bfloat162float(x);",
    ]
    assert r.unconverted == []


def test_fp8_and_driver_error_strings_hip64_only() -> None:
    src = "__nv_fp8_e4m3 v(x); const char* s; cuGetErrorString(e, &s); y = CUDART_INF_F;\n"
    r = translate(src, "t.cu")
    assert r.output == "__hip_fp8_e4m3 v(x); const char* s; hipDrvGetErrorString(e, &s); y = HIP_INF_F;\n"
    old = translate(src, "t.cu", hip_version="5.2")
    assert old.output == src
    assert sorted(u.name for u in old.unconverted) == ["CUDART_INF_F", "__nv_fp8_e4m3", "cuGetErrorString"]
    assert all("hip" in u.alternative.lower() for u in old.unconverted)


def test_unknown_hip_version_is_rejected() -> None:
    with pytest.raises(HipifyError, match="6.4"):
        translate("cudaMalloc(&p, n);", "t.cu", hip_version="4.0")


def test_bf16_scalar_and_block_atomics_map_bf16x2_reported() -> None:
    r = translate(BF16_SOURCE, "t.cu", hip_version="5.2")
    assert r.output.splitlines()[:3] == [
        "#include <hip/hip_bfloat16.h>",
        "__device__ void f(hip_bfloat16* p, hip_bfloat16 x, nv_bfloat162 y, int* c) {",
        "  atomicAdd(c, 1); atomicMax(c, 2); float g = __bfloat162float(x);",
    ]
    assert sorted(u.name for u in r.unconverted) == ["__bfloat162float", "nv_bfloat162"]
    assert all(u.alternative for u in r.unconverted)


def test_unsupported_name_defined_by_another_file_is_still_reported() -> None:
    # a vendor shim elsewhere in the tree (#define __cvta_generic_to_shared ...) must not hide it
    src = "size_t a = __cvta_generic_to_shared(p);\nmy_cuda_helperX();\n"
    r = translate(src, "t.cu", local_names={"__cvta_generic_to_shared", "cudaHelperX"})
    assert [u.name for u in r.unconverted] == ["__cvta_generic_to_shared"]
    own = translate("#define __cvta_generic_to_shared(p) to_shared(p)\n" + src, "t.cu")
    assert own.unconverted == []


def test_compat_api_is_converted_even_where_another_file_defines_it() -> None:
    # ggml's vendors/hip.h defines cudaLaunchKernelEx for its own HIP build: the CUDA build still needs one
    src = "cudaLaunchKernelEx(&cfg, k);\n"
    r = translate(src, "t.cu", local_names={"cudaLaunchKernelEx"})
    assert r.output == '#include "ember_hip_compat.h"\nember_hipLaunchKernelEx(&cfg, k);\n' and r.unconverted == []
    own = translate("#define cudaLaunchKernelEx(c, k) launch(c, k)\n" + src, "t.cu")
    assert own.unconverted == [] and "ember_" not in own.output


def test_quoted_project_header_under_cuda_dir_is_not_libcudacxx(tmp_path) -> None:
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "tree.hpp").write_text("")
    src = '#include "cuda/tree.hpp"\n#include "cuda/other.hpp"\n#include <cuda/barrier>\n'
    r = translate(src, str(tmp_path / "a.cu"), local_headers={"cuda/other.hpp"})
    assert [u.name for u in r.unconverted] == ["cuda/barrier"]


def test_cub_namespace() -> None:
    src = "using R = cub::BlockReduce<int, 128>;\nnamespace cb = cub;\ncub::DeviceFor::Bulk(n, f);\n"
    r = translate(src, "t.cu")
    assert r.output.startswith("using R = hipcub::BlockReduce<int, 128>;")
    assert "cub::DeviceFor::Bulk" in r.output
    assert [u.name for u in r.unconverted] == ["cub::DeviceFor"]


def test_unsupported_reported_with_alternative() -> None:
    r = translate("int x;\ncudaProfilerInitialize(a, b, c);\nv = __match_any_sync(m, x);\n", "k.cu")
    names = {u.name: u for u in r.unconverted}
    assert names["cudaProfilerInitialize"].line == 2
    assert "hipProfilerStart" in names["cudaProfilerInitialize"].alternative
    assert names["__match_any_sync"].line == 3
    assert "cudaProfilerInitialize(a, b, c)" in r.output


def test_unknown_cuda_name_reported_but_project_names_not() -> None:
    src = (
        "#define cudaCheckError() check(cudaGetLastError())\n"
        "static void cudaHelperInit(int x) {}\ncudaCheckError(); cudaHelperInit(1); cudaSomethingNew();\n"
    )
    r = translate(src, "t.cu")
    assert [u.name for u in r.unconverted] == ["cudaSomethingNew"]
    assert r.unconverted[0].kind == "unknown"
    assert translate("cudaFooBar();", "t.cu", local_names={"cudaFooBar"}).unconverted == []


def test_device_prop_members() -> None:
    src = "cudaDeviceProp p; x = p.sharedMemPerMultiprocessor + p.asyncEngineCount + p.warpSize;\n"
    assert translate(src, "t.cu").unconverted == []  # HIP 6.4's hipDeviceProp_t has asyncEngineCount
    r = translate(src, "t.cu", hip_version="5.2")
    assert "p.maxSharedMemoryPerMultiProcessor" in r.output and "p.asyncEngineCount" in r.output
    assert [u.name for u in r.unconverted] == ["cudaDeviceProp::asyncEngineCount"]
    assert "hipDeviceAttributeAsyncEngineCount" in r.unconverted[0].alternative


def test_driver_api() -> None:
    src = "CUdeviceptr d; cuMemAlloc(&d, n); cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, s, args, 0);"
    assert out(src) == (
        "hipDeviceptr_t d; hipMalloc(&d, n); hipModuleLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, s, args, 0);"
    )


def test_libraries() -> None:
    src = "cublasSgemm_v2(h, CUBLAS_OP_T, CUBLAS_OP_N); curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT);"
    assert out(src) == (
        "hipblasSgemm(h, HIPBLAS_OP_T, HIPBLAS_OP_N); hiprandCreateGenerator(&g, HIPRAND_RNG_PSEUDO_DEFAULT);"
    )
    assert out("cufftExecC2C(p, a, b, CUFFT_INVERSE);") == "hipfftExecC2C(p, a, b, HIPFFT_BACKWARD);"
    assert out("cudnnCreate(&h); cusolverDnSgetrf(h);") == "miopenCreate(&h); hipsolverDnSgetrf(h);"


LAUNCH = "k<<<grid, block>>>(a, b);\n"


def test_launch_kept_by_default() -> None:
    r = translate(LAUNCH, "t.cu")
    assert r.output == LAUNCH
    assert [c.kind for c in r.converted] == ["launch"]


@pytest.mark.parametrize(
    "src, ggl",
    [
        ("k<<<grid, block>>>(a, b);", "hipLaunchKernelGGL(k, dim3(grid), dim3(block), 0, 0, a, b);"),
        ("k<<<g, b, smem>>>();", "hipLaunchKernelGGL(k, dim3(g), dim3(b), smem, 0);"),
        ("k<<<g, b, 0, s>>>(x);", "hipLaunchKernelGGL(k, dim3(g), dim3(b), 0, s, x);"),
        ("k<T, 4><<<g, b>>>(x);", "hipLaunchKernelGGL(HIP_KERNEL_NAME(k<T, 4>), dim3(g), dim3(b), 0, 0, x);"),
        (
            "ns::k<<<dim3(n, 2), f(a, b)>>>(x);",
            "hipLaunchKernelGGL(ns::k, dim3(dim3(n, 2)), dim3(f(a, b)), 0, 0, x);",
        ),
        ("k << <g, b >> >(x);", "hipLaunchKernelGGL(k, dim3(g), dim3(b), 0, 0, x);"),
        (
            "k<<<g,\n    b, 0,\n    s>>>(\n    x,\n    y);",
            "hipLaunchKernelGGL(k, dim3(g), dim3(b), 0, s,\n    x,\n    y);",
        ),
        (
            "k<<<g, b>>>(cudaStreamDefault);",
            "hipLaunchKernelGGL(k, dim3(g), dim3(b), 0, 0, hipStreamDefault);",
        ),
    ],
)
def test_launch_ggl(src: str, ggl: str) -> None:
    assert out(src, launch_syntax="ggl") == ggl


def test_spaced_launch_closed_up_when_kept() -> None:
    assert out("k << <g, b >> >(x); y = a << b >> c;") == "k <<<g, b >>>(x); y = a << b >> c;"


def test_shift_operators_are_not_launches() -> None:
    src = "x = a << b; y = c >> d; std::vector<std::vector<int>> v; z = a<<<1;\n"
    r = translate(src, "t.cu", launch_syntax="ggl")
    assert r.output == src and not [c for c in r.converted if c.kind == "launch"]


def test_bad_launch_syntax_option() -> None:
    with pytest.raises(ValueError):
        translate("", launch_syntax="chevrons")


def test_statistics() -> None:
    r = translate("#include <cuda.h>\ncudaFree(p);\ncudaProfilerInitialize(0, 0, 0);\nint x;\n", "s.cu")
    s = r.stats()
    assert (s["converted"], s["unconverted"], s["lines_changed"], s["lines_total"]) == (2, 1, 2, 4)
    assert s["percent"] == pytest.approx(66.67)
    assert s["converted_by_kind"] == {"include": 1, "runtime": 1}


# ---- lint ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "src",
    [
        "int lane = threadIdx.x % 32;",
        "int w = threadIdx.x / 32;",
        "int lane = tid & 31;",
        "int w = threadIdx.x >> 5;",
        "#define WARP_SIZE 32\n",
        "constexpr int kWarpSize = 32;",
        "int nwarps = blockDim.x / 32;",
        "for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);",
    ],
)
def test_lint_warp_size(src: str) -> None:
    assert "warp-size" in rules(src)


@pytest.mark.parametrize("src", ["int x = n % 32;", "float a[32];", "x = y >> 5;", "for (int i = 16; i; --i) f();"])
def test_lint_warp_size_quiet_elsewhere(src: str) -> None:
    assert "warp-size" not in rules(src)


def test_lint_full_mask_ballot_asm_texture_bounds() -> None:
    src = (
        "v = __shfl_sync(0xffffffff, v, 0);\nunsigned b = __ballot_sync(0xFFFFFFFFu, p);\n"
        'unsigned a = __activemask();\nasm volatile("mov.u32 %0, %%laneid;" : "=r"(l));\n'
        "texture<float, 1, cudaReadModeElementType> tex;\ncudaBindTexture(0, tex, p, n);\n"
        "__global__ void __launch_bounds__(2048) k() {}\n__global__ void __launch_bounds__(256, 4) j() {}\n"
        "nvmlInit();\n"
    )
    ws = translate(src, "l.cu").warnings
    got = {(w.line, w.rule) for w in ws}
    assert {
        (1, "full-mask"),
        (2, "full-mask"),
        (2, "ballot-64"),
        (3, "ballot-64"),
        (4, "inline-asm"),
        (5, "texture-reference"),
        (6, "texture-reference"),
        (7, "launch-bounds"),
        (8, "launch-bounds"),
        (9, "cuda-only-library"),
    } <= got
    assert all(w.fix for w in ws)
    assert not [w for w in ws if w.rule == "launch-bounds" and w.line == 8 and "exceeds" in w.message]


def test_lint_full_mask_not_for_computed_masks() -> None:
    assert "full-mask" not in rules("v = __shfl_sync(__activemask(), v, 0); w = __shfl_sync(m, w, 1);")


def test_ptx_trap_becomes_builtin_trap_and_other_asm_is_linted() -> None:
    src = 'if (n < 0) asm("trap;");\nasm volatile ( "trap;" );\nasm("exit;");\nputs("trap;");\n'
    r = translate(src, "t.cu")
    assert r.output == 'if (n < 0) __builtin_trap();\n__builtin_trap();\nasm("exit;");\nputs("trap;");\n'
    assert [(w.line, w.rule) for w in r.warnings] == [(3, "inline-asm")]


def test_trap_and_vmm_types_map_to_hip_5_2_names() -> None:
    src = "CUmemAllocationProp p; p.type = CU_MEM_ALLOCATION_TYPE_PINNED; __trap();\n"
    assert out(src) == "hipMemAllocationProp p; p.type = hipMemAllocationTypePinned; abort();\n"


def test_unsupported_name_in_a_branch_hip_never_compiles_is_kept_not_reported() -> None:
    src = (
        "#define CC_HOPPER 900\n"
        "#if CUDART_VERSION >= 12080\n"
        "__nv_fp4x4_e2m1 q;\n"
        "#else\n"
        "int q;\n"
        "#endif\n"
        "#if defined(USE_PDL) && __CUDA_ARCH__ >= CC_HOPPER\n"
        "s = __cvta_generic_to_shared(p);\n"
        "#endif\n"
        "#if __CUDA_ARCH__ >= 600 || defined(OTHER)\n"
        "s = __cvta_generic_to_shared(p);\n"
        "#endif\n"
    )
    r = translate(src, "t.cu", project_defines={"CC_HOPPER": 900})
    assert r.output == src.replace("__CUDA_ARCH__", "(__HIP_DEVICE_COMPILE__ * 600)")
    inactive = [(c.line, c.name) for c in r.converted if c.kind == "inactive"]
    assert inactive == [(3, "__nv_fp4x4_e2m1"), (8, "__cvta_generic_to_shared")]
    assert "line 2: #if CUDART_VERSION >= 12080" in r.converted[[c.line for c in r.converted].index(3)].hip
    assert [(u.line, u.name) for u in r.unconverted] == [(11, "__cvta_generic_to_shared")]  # may be compiled


def test_pointer_attribute_memory_type_renamed_for_hip64() -> None:
    src = "cudaPointerAttributes a; cudaPointerGetAttributes(&a, p); if (a.memoryType == cudaMemoryTypeHost) {}\n"
    assert "a.type == hipMemoryTypeHost" in translate(src, "t.cu").output  # HIP 6 took CUDA's name
    assert "a.memoryType == hipMemoryTypeHost" in translate(src, "t.cu", hip_version="5.2").output


def test_kernel_pointer_argument_cast_for_hip_func_apis() -> None:
    src = (
        "cudaFuncSetAttribute(k<T, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, n);\n"
        "cudaFuncGetAttributes(&a, k);\n"
    )
    assert translate(src, "t.cu").output == (
        "hipFuncSetAttribute(reinterpret_cast<const void*>(k<T, 4>), hipFuncAttributeMaxDynamicSharedMemorySize, n);\n"
        "hipFuncGetAttributes(&a, reinterpret_cast<const void*>(k));\n"
    )
    already = "cudaFuncSetAttribute((const void*)k, cudaFuncAttributeMaxDynamicSharedMemorySize, n);\n"
    assert "((const void*)k," in translate(already, "t.cu").output


# ---- launch attributes, programmatic dependent launch, graph update, cuBLAS workspace (ember_hip_compat.h) ----

COMPAT_LINE = '#include "ember_hip_compat.h"\n'


@pytest.mark.parametrize("hip_version", ["6.4", "5.2"])
def test_launch_kernel_ex_and_its_attributes_use_the_compat_header(hip_version: str) -> None:
    src = (
        "cudaLaunchAttribute attr[2]; cudaLaunchConfig_t cfg = {}; cudaLaunchAttributeValue v;\n"
        "attr[0].id = cudaLaunchAttributeCooperative; attr[1].id = cudaLaunchAttributePriority;\n"
        "cudaLaunchAttributeID id = cudaLaunchAttributeAccessPolicyWindow;\n"
        "cudaLaunchKernelEx(&cfg, kernel, a, b); cudaLaunchKernelExC(&cfg, (const void*)kernel, args);\n"
    )
    r = translate(src, "t.cu", hip_version=hip_version)
    assert r.output == COMPAT_LINE + (
        "ember_hipLaunchAttribute attr[2]; ember_hipLaunchConfig_t cfg = {}; ember_hipLaunchAttributeValue v;\n"
        "attr[0].id = ember_hipLaunchAttributeCooperative; attr[1].id = ember_hipLaunchAttributePriority;\n"
        "ember_hipLaunchAttributeID id = ember_hipLaunchAttributeAccessPolicyWindow;\n"
        "ember_hipLaunchKernelEx(&cfg, kernel, a, b); ember_hipLaunchKernelExC(&cfg, (const void*)kernel, args);\n"
    )
    assert r.unconverted == [] and r.compat and {c.kind for c in r.converted} == {"compat"}
    assert r.warnings == []  # no PDL, no cluster: nothing behaves differently


def test_driver_launch_kernel_ex() -> None:
    src = (
        "CUlaunchAttribute a; a.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE; a.value.cooperative = 1;\n"
        "CUlaunchConfig c = {}; c.attrs = &a; c.numAttrs = 1; CUresult r = cuLaunchKernelEx(&c, f, params, nullptr);\n"
    )
    assert out(src) == COMPAT_LINE + (
        "ember_hipLaunchAttribute a; a.id = ember_hipLaunchAttributeCooperative; a.value.cooperative = 1;\n"
        "ember_HIP_LAUNCH_CONFIG c = {}; c.attrs = &a; c.numAttrs = 1; "
        "hipError_t r = ember_hipDrvLaunchKernelEx(&c, f, params, nullptr);\n"
    )


def test_programmatic_dependent_launch_is_converted_with_a_warning_at_the_use_site() -> None:
    src = (
        "__global__ void k() { cudaGridDependencySynchronize(); work(); cudaTriggerProgrammaticLaunchCompletion(); }\n"
        "attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;\n"
        "attr.val.programmaticStreamSerializationAllowed = 1;\n"
        "a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;\n"
    )
    r = translate(src, "t.cu")
    note = "/* ember-hipify warning [programmatic-launch]: HIP has no programmatic dependent launch: runs serialized"
    lines = r.output.splitlines()
    assert lines[0] == COMPAT_LINE.strip()
    # one comment per line, before the first such name
    assert lines[1].startswith("__global__ void k() { " + note) and lines[1].count("ember-hipify warning") == 1
    assert lines[1].endswith(
        "*/ ember_hipGridDependencySynchronize(); work(); ember_hipTriggerProgrammaticLaunchCompletion(); }"
    )
    assert lines[2].startswith("attr.id = " + note) and lines[2].endswith(
        "ember_hipLaunchAttributeProgrammaticStreamSerialization;"
    )
    assert lines[3] == "attr.val.programmaticStreamSerializationAllowed = 1;"
    assert lines[4].startswith("a.id = " + note) and lines[4].endswith("ember_hipLaunchAttributeProgrammaticEvent;")
    assert r.unconverted == []
    warned = [(w.line, w.rule) for w in r.warnings]
    assert warned == [(1, "programmatic-launch"), (1, "programmatic-launch"), (2, "programmatic-launch")] + [
        (4, "programmatic-launch")
    ]
    assert "no HIP equivalent" in r.warnings[0].message and r.warnings[0].fix


def test_cluster_dimension_attribute_warns() -> None:
    r = translate("attr.id = cudaLaunchAttributeClusterDimension;\n", "t.cu")
    assert "ember_hipLaunchAttributeClusterDimension" in r.output and "[cluster-launch]" in r.output
    assert [w.rule for w in r.warnings] == ["cluster-launch"] and r.unconverted == []


def test_graph_exec_update_cuda12_form_uses_the_compat_header_cuda11_form_hip() -> None:
    src = (
        "cudaGraphExecUpdateResultInfo info; cudaGraphExecUpdate(e, g, &info);\n"
        "if (info.result == cudaGraphExecUpdateErrorTopologyChanged) {}\n"
        "if ((int)info.result == cudaGraphExecUpdateErrorAttributesChanged) {}\n"
        "cudaGraphNode_t n; cudaGraphExecUpdateResult res; cudaGraphExecUpdate(e, g, &n, &res);\n"
        "CUgraphExecUpdateResultInfo di; cuGraphExecUpdate(de, dg, &di); "
        "CUgraphExecUpdateResult dr = CU_GRAPH_EXEC_UPDATE_SUCCESS;\n"
        "if (dr == CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED) {}\n"
        "cudaGraphInstantiate(&e, g, 0); cudaGraphInstantiate(&e, g, nullptr, nullptr, 0); "
        "cuGraphInstantiate(&de, dg, 0);\n"
        "cuGraphInstantiateWithFlags(&de, dg, 0);\n"
    )
    r = translate(src, "t.cu")
    assert r.output == COMPAT_LINE + (
        "ember_hipGraphExecUpdateResultInfo info; ember_hipGraphExecUpdate(e, g, &info);\n"
        "if (info.result == hipGraphExecUpdateErrorTopologyChanged) {}\n"
        "if ((int)info.result == ember_hipGraphExecUpdateErrorAttributesChanged) {}\n"
        "hipGraphNode_t n; hipGraphExecUpdateResult res; hipGraphExecUpdate(e, g, &n, &res);\n"
        "ember_hipGraphExecUpdateResultInfo di; ember_hipGraphExecUpdate(de, dg, &di); "
        "hipGraphExecUpdateResult dr = hipGraphExecUpdateSuccess;\n"
        "if (dr == ember_hipGraphExecUpdateErrorAttributesChanged) {}\n"
        "hipGraphInstantiateWithFlags(&e, g, 0); hipGraphInstantiate(&e, g, nullptr, nullptr, 0); "
        "hipGraphInstantiateWithFlags(&de, dg, 0);\n"
        "hipGraphInstantiateWithFlags(&de, dg, 0);\n"
    )
    assert r.unconverted == []


def test_cublas_workspace_and_version_macros() -> None:
    src = (
        "#if CUBLAS_VER_MAJOR >= 12 && defined(CUBLAS_VERSION) && CUBLAS_VER_BUILD > 0\n"
        "#endif\n"
        "cublasSetWorkspace(h, ws, n); cublasSetWorkspace_v2(h, ws, n);\n"
        'printf("%d.%d.%d %d", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH, CUBLAS_VERSION);\n'
        "int b = CUBLAS_VER_BUILD;\n"
    )
    r = translate(src, "t.cu")
    assert r.output == COMPAT_LINE + (
        "#if CUBLAS_VER_MAJOR >= 12 && defined(CUBLAS_VERSION) && CUBLAS_VER_BUILD > 0\n"  # HIP: all undefined
        "#endif\n"
        "ember_hipblasSetWorkspace(h, ws, n); ember_hipblasSetWorkspace(h, ws, n);\n"
        'printf("%d.%d.%d %d", hipblasVersionMajor, hipblasVersionMinor, hipblasVersionPatch, '
        "(hipblasVersionMajor * 10000 + hipblasVersionMinor * 100 + hipblasVersionPatch));\n"
        "int b = CUBLAS_VER_BUILD;\n"
    )
    assert [c.kind for c in r.converted if c.line == 1] == ["version", "version", "version"]
    assert [(u.line, u.name) for u in r.unconverted] == [(5, "CUBLAS_VER_BUILD")]
    assert "build number" in r.unconverted[0].alternative
    # a #define body may serve an #if, where hipBLAS's numbering (2.x) would pass a CUDA-version test: kept, reported
    body = translate("#define MY_BLAS (CUBLAS_VER_MAJOR * 1000)\n#define CUBLAS_VERSION 1\n", "t.cu")
    assert body.output == "#define MY_BLAS (CUBLAS_VER_MAJOR * 1000)\n#define CUBLAS_VERSION 1\n"
    reported = [(u.name, u.alternative.split(" ")[0]) for u in body.unconverted]
    assert reported == [("CUBLAS_VER_MAJOR", "hipblasVersionMajor")]


def test_vmm_attribute_deprecated_spelling_hip64() -> None:
    src = "cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED, dev);\n"
    assert out(src) == "hipDeviceGetAttribute(&v, hipDeviceAttributeVirtualMemoryManagementSupported, dev);\n"
    assert translate(src, "t.cu", hip_version="5.2").unconverted[0].name.startswith("CU_DEVICE_ATTRIBUTE_VIRTUAL")


def test_nanosleep_and_warp_reductions_use_the_compat_header() -> None:
    src = "__nanosleep(100); int s = __reduce_add_sync(0xffffffff, x); unsigned m = __reduce_or_sync(mask, u);\n"
    r = translate(src, "t.cu", hip_version="5.2")
    assert r.output == COMPAT_LINE + (
        "ember_nanosleep(100); int s = ember_reduce_add_sync(0xffffffff, x); "
        "unsigned m = ember_reduce_or_sync(mask, u);\n"
    )
    assert "full-mask" not in {w.rule for w in r.warnings}  # the compat version keeps the mask's meaning


def test_function_pointer_variable_named_like_cuda_is_the_projects_own() -> None:
    src = "static void (*cudaSetDeviceHandler)(int) = nullptr;\nif (cudaSetDeviceHandler) cudaSetDeviceHandler(0);\n"
    r = translate(src, "t.cu")
    assert r.output == src and r.unconverted == []
