"""Maintenance tool: regenerate ember/hipify/maps/*.json.

Not run by the tests. It combines hand-written knowledge of the HIP API (the overrides and name
lists below) with the headers installed on the machine:

* CUDA names are read from the CUDA toolkit headers (``/usr/local/cuda/include``) where they exist;
* a HIP name is accepted for the runtime, driver, type and device tables only if it is declared in
  the installed HIP headers (``/usr/include/hip``, Debian's HIP 5.2), and for cuRAND/cuSPARSE only if
  it is declared in the installed hipRAND/hipSPARSE headers;
* hipBLAS, hipFFT, hipSOLVER, hipCUB and MIOpen have no Debian package, so those tables come from the
  name lists below (the HIP libraries mirror the CUDA names) and are not header-checked here.

Usage: python3 tests/hipify/tools/build_maps.py  (from the repository root)

``--hip-include DIR --out DIR`` builds the same tables against another HIP install (e.g.
``/opt/ember-rocm-6.4/usr/include`` from scripts/fetch_rocm_sysroot.sh) into another folder;
``tests/hipify/tools/build_hip64_overlay.py`` turns the difference into ``maps/hip64.json``.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from ember.hipify.tokenizer import IDENT, tokenize  # noqa: E402

_ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_ARGS.add_argument("--hip-include", default="/usr/include", help="include root holding hip/, hiprand/, hipsparse/")
_ARGS.add_argument("--out", default=str(ROOT / "ember" / "hipify" / "maps"), help="folder the tables go to")
_OPTS = _ARGS.parse_args() if __name__ == "__main__" else _ARGS.parse_args([])
CUDA_INC = Path("/usr/local/cuda/include")
HIP_ROOT = Path(_OPTS.hip_include)
HIP_INC = HIP_ROOT / "hip"
OUT = Path(_OPTS.out)


def header_tokens(paths: list[Path]) -> list[tuple[str, str]]:
    """(ident, next significant token text) for every identifier token in the given headers."""
    out: list[tuple[str, str]] = []
    for p in paths:
        if not p.exists():
            continue
        toks = [t for t in tokenize(p.read_text(errors="replace"), str(p)) if t.kind not in ("ws", "nl", "comment")]
        for i, t in enumerate(toks):
            if t.kind == IDENT:
                out.append((t.text, toks[i + 1].text if i + 1 < len(toks) else ""))
    return out


def idents(paths: list[Path]) -> set[str]:
    """Every identifier declared or used (outside comments) in the given headers."""
    return {name for name, _ in header_tokens(paths)}


def hip_idents() -> set[str]:
    """Identifiers of the AMD HIP headers (the NVIDIA-platform wrappers left out)."""
    files = [
        Path(f)
        for f in glob.glob(str(HIP_INC / "**" / "*.h*"), recursive=True)
        if "nvidia_detail" not in f and "nvcc_detail" not in f
    ]
    return idents(files)


def functions(paths: list[Path]) -> set[str]:
    """Identifiers that are followed by '(' somewhere in the headers (functions and function macros)."""
    return {name for name, nxt in header_tokens(paths) if nxt == "("}


def ci_lookup(names: set[str]) -> dict[str, str]:
    """Case-insensitive index of names."""
    return {n.lower(): n for n in names}


def camel(words: str) -> str:
    """INVALID_VALUE -> InvalidValue."""
    return "".join(w[:1].upper() + w[1:].lower() for w in words.split("_") if w)


HIP = hip_idents()
HIP_CI = ci_lookup(HIP)

# --------------------------------------------------------------------------------------------------
# Runtime API, types, enums and macros
# --------------------------------------------------------------------------------------------------
RT_HEADERS = [
    CUDA_INC / h
    for h in (
        "cuda_runtime_api.h",
        "driver_types.h",
        "cuda_runtime.h",
        "vector_types.h",
        "texture_types.h",
        "surface_types.h",
        "library_types.h",
        "channel_descriptor.h",
        "cuda_device_runtime_api.h",
        "cuda_profiler_api.h",
        "vector_functions.h",
        "driver_functions.h",
        "cuda_texture_types.h",
        "cuda_surface_types.h",
        "texture_fetch_functions.h",
        "cuda_gl_interop.h",
    )
]

RUNTIME_OVERRIDES = {
    "cudaMallocHost": "hipHostMalloc",
    "cudaFreeHost": "hipHostFree",
    "cudaHostAlloc": "hipHostMalloc",
    "cudaHostAllocDefault": "hipHostMallocDefault",
    "cudaHostAllocMapped": "hipHostMallocMapped",
    "cudaHostAllocPortable": "hipHostMallocPortable",
    "cudaHostAllocWriteCombined": "hipHostMallocWriteCombined",
    "cudaThreadSynchronize": "hipDeviceSynchronize",
    "cudaThreadExit": "hipDeviceReset",
    "cudaThreadGetCacheConfig": "hipDeviceGetCacheConfig",
    "cudaThreadSetCacheConfig": "hipDeviceSetCacheConfig",
    "cudaThreadGetLimit": "hipDeviceGetLimit",
    "cudaThreadSetLimit": "hipDeviceSetLimit",
    "cudaDeviceProp": "hipDeviceProp_t",
    "cudaDeviceAttr": "hipDeviceAttribute_t",
    "cudaPointerAttributes": "hipPointerAttribute_t",
    "cudaError": "hipError_t",
    "cudaLimit": "hipLimit_t",
    "cudaDeviceBlockingSync": "hipDeviceScheduleBlockingSync",
    "cudaMapHost": "hipDeviceMapHost",
    "cudaErrorLaunchTimeout": "hipErrorLaunchTimeOut",
    "cudaErrorSymbolNotFound": "hipErrorNotFound",
    "cudaErrorNoKernelImageForDevice": "hipErrorNoBinaryForGpu",
    "cudaErrorInvalidPtx": "hipErrorInvalidKernelFile",
    "cudaErrorECCUncorrectable": "hipErrorECCNotCorrectable",
    "cudaErrorInvalidHostPointer": "hipErrorInvalidValue",
    "cudaErrorTextureNotBound": "hipErrorInvalidValue",
    "cudaDataType_t": "hipDataType",
    "cudaDataType": "hipDataType",
    "cudaEnablePeerAccess": "hipDeviceEnablePeerAccess",
    "cudaDeviceMask": "hipDeviceScheduleMask",
}
RUNTIME_UNSUPPORTED_ALT = {
    "cudaProfilerInitialize": "hipProfilerStart (no initialise step on AMD)",
    "cudaLimitStackSize": "hipLimitMallocHeapSize is the only limit in HIP 5.2; hipLimitStackSize from 5.3",
    "cudaLimitDevRuntimeSyncDepth": "none: AMD has no dynamic parallelism",
    "cudaLimitDevRuntimePendingLaunchCount": "none: AMD has no dynamic parallelism",
    "cudaLimitMaxL2FetchGranularity": "none",
    "cudaLimitPersistingL2CacheSize": "none",
    "cudaStreamGetAttribute": "none in HIP 5.2",
    "cudaStreamSetAttribute": "none in HIP 5.2",
    "cudaEventRecordWithFlags": "hipEventRecord",
    "cudaLaunchKernelEx": "hipLaunchKernel / hipExtLaunchKernel (no cluster launch on AMD)",
    "cudaFuncSetAttributes": "hipFuncSetAttribute",
    "cudaGetDriverEntryPoint": "none: load the HIP driver functions directly",
    "cudaDeviceGetTexture1DLinearMaxWidth": "hipDeviceGetAttribute",
    "cudaMemcpy3DPeer": "hipMemcpy3D with hipMemcpyDefault",
    "cudaMemcpy3DPeerAsync": "hipMemcpy3DAsync with hipMemcpyDefault",
    "cudaUserObjectCreate": "hipUserObjectCreate (HIP >= 5.3)",
    "cudaGraphUpload": "hipGraphUpload (HIP >= 5.3)",
    "cudaGraphInstantiateWithParams": "hipGraphInstantiateWithFlags",
    "cudaStreamGetId": "none",
    "cudaInitDevice": "hipSetDevice",
    "cudaSetDoubleForDevice": "none (no-op on AMD)",
    "cudaSetDoubleForHost": "none (no-op on AMD)",
    "cudaDeviceSetLimit": "none in HIP 5.2 (hipDeviceSetLimit from HIP 5.3)",
    "cudaStreamLegacy": "0 (the null stream)",
    "cudaMemoryTypeManaged": "hipMemoryTypeUnified",
}
# CUDA APIs removed from the CUDA 12/13 headers that old code still calls; mapped where HIP 5.2 has them.
RUNTIME_LEGACY = [
    "cudaBindTexture",
    "cudaBindTexture2D",
    "cudaBindTextureToArray",
    "cudaBindTextureToMipmappedArray",
    "cudaUnbindTexture",
    "cudaGetTextureReference",
    "cudaGetTextureAlignmentOffset",
    "cudaGetChannelDesc",
    "cudaConfigureCall",
    "cudaSetupArgument",
    "cudaMemcpyToArray",
    "cudaMemcpyFromArray",
    "cudaMemcpyToArrayAsync",
    "cudaMemcpyFromArrayAsync",
    "cudaMemcpy2DArrayToArray",
    "cudaMemcpyArrayToArray",
    "cudaThreadGetCacheConfig",
    "cudaThreadSetCacheConfig",
    "cudaBindSurfaceToArray",
    "cudaGetSurfaceReference",
    "cudaGLMapBufferObject",
    "cudaGLUnmapBufferObject",
    "cudaGLRegisterBufferObject",
    "cudaGLUnregisterBufferObject",
    "cudaSetDeviceFlags",
    "cudaDeviceGetSharedMemConfig",
    "cudaDeviceSetSharedMemConfig",
    "cudaFuncSetSharedMemConfig",
    "cudaSharedMemConfig",
    "cudaSharedMemBankSizeDefault",
    "cudaSharedMemBankSizeFourByte",
    "cudaSharedMemBankSizeEightByte",
    "cudaLaunch",
    "cudaThreadGetLimit",
    "cudaThreadSetLimit",
    "cudaGetDeviceFlags",
    "cudaErrorTextureNotBound",
    "cudaErrorInvalidHostPointer",
    "cudaErrorInvalidDevicePointer",
    "cudaErrorAddressOfConstant",
    "cudaErrorMemoryValueTooLarge",
    "cudaReadModeElementType",
    "cudaReadModeNormalizedFloat",
    "cudaFilterModePoint",
    "cudaFilterModeLinear",
    "textureReference",
    "surfaceReference",
]
RUNTIME_OVERRIDES.update({"cudaLaunch": "hipLaunchByPtr", "cudaFuncCache": "hipFuncCache_t"})

# --------------------------------------------------------------------------------------------------
# Driver API
# --------------------------------------------------------------------------------------------------
DRIVER_OVERRIDES = {
    # graph update results: the driver's names for the runtime's hipGraphExecUpdate* (the CUDA 12 result-info
    # form of cuGraphExecUpdate and ..._ATTRIBUTES_CHANGED come from ember_hip_compat.h, maps/compat.json)
    "cuGraphInstantiateWithFlags": "hipGraphInstantiateWithFlags",
    "CUgraphExecUpdateResult": "hipGraphExecUpdateResult",
    "CUgraphExecUpdateResult_enum": "hipGraphExecUpdateResult",
    "CU_GRAPH_EXEC_UPDATE_SUCCESS": "hipGraphExecUpdateSuccess",
    "CU_GRAPH_EXEC_UPDATE_ERROR": "hipGraphExecUpdateError",
    "CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED": "hipGraphExecUpdateErrorTopologyChanged",
    "CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED": "hipGraphExecUpdateErrorNodeTypeChanged",
    "CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED": "hipGraphExecUpdateErrorFunctionChanged",
    "CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED": "hipGraphExecUpdateErrorParametersChanged",
    "CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED": "hipGraphExecUpdateErrorNotSupported",
    "CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE": "hipGraphExecUpdateErrorUnsupportedFunctionChange",
    "cuMemAlloc": "hipMalloc",
    "cuMemAlloc_v2": "hipMalloc",
    "cuMemFree": "hipFree",
    "cuMemFree_v2": "hipFree",
    "cuMemFreeHost": "hipHostFree",
    "cuMemHostAlloc": "hipHostMalloc",
    "cuMemAllocManaged": "hipMallocManaged",
    "cuMemHostRegister": "hipHostRegister",
    "cuMemHostRegister_v2": "hipHostRegister",
    "cuMemHostUnregister": "hipHostUnregister",
    "cuMemHostGetFlags": "hipHostGetFlags",
    "cuMemAllocAsync": "hipMallocAsync",
    "cuMemFreeAsync": "hipFreeAsync",
    "cuMemAllocFromPoolAsync": "hipMallocFromPoolAsync",
    "cuLaunchKernel": "hipModuleLaunchKernel",
    "cuDeviceGetCount": "hipGetDeviceCount",
    "cuStreamCreate": "hipStreamCreateWithFlags",
    "cuEventCreate": "hipEventCreateWithFlags",
    "cuMemcpy2D": "hipMemcpyParam2D",
    "cuMemcpy2D_v2": "hipMemcpyParam2D",
    "cuMemcpy2DAsync": "hipMemcpyParam2DAsync",
    "cuMemcpy2DAsync_v2": "hipMemcpyParam2DAsync",
    "cuMemcpy3D": "hipDrvMemcpy3D",
    "cuMemcpy3D_v2": "hipDrvMemcpy3D",
    "cuMemcpy3DAsync": "hipDrvMemcpy3DAsync",
    "cuMemcpy3DAsync_v2": "hipDrvMemcpy3DAsync",
    "cuCtxGetLimit": "hipDeviceGetLimit",
    "cuCtxGetStreamPriorityRange": "hipDeviceGetStreamPriorityRange",
    "cuArrayCreate": "hipArrayCreate",
    "cuArrayCreate_v2": "hipArrayCreate",
    "cuTexRefSetAddress": "hipTexRefSetAddress",
    "CUresult": "hipError_t",
    "CUdevice": "hipDevice_t",
    "CUdevice_v1": "hipDevice_t",
    "CUcontext": "hipCtx_t",
    "CUmodule": "hipModule_t",
    "CUfunction": "hipFunction_t",
    "CUdeviceptr": "hipDeviceptr_t",
    "CUdeviceptr_v2": "hipDeviceptr_t",
    "CUstream": "hipStream_t",
    "CUevent": "hipEvent_t",
    "CUarray": "hipArray_t",
    "CUmipmappedArray": "hipMipmappedArray_t",
    "CUtexObject": "hipTextureObject_t",
    "CUsurfObject": "hipSurfaceObject_t",
    "CUtexref": "hipTexRef",
    "CUdevice_attribute": "hipDeviceAttribute_t",
    "CUfunction_attribute": "hipFunction_attribute",
    "CUjit_option": "hipJitOption",
    "CUipcMemHandle": "hipIpcMemHandle_t",
    "CUipcEventHandle": "hipIpcEventHandle_t",
    "CUlimit": "hipLimit_t",
    "CUmemorytype": "hipMemoryType",
    "CUpointer_attribute": "hipPointer_attribute",
    "CUstreamCallback": "hipStreamCallback_t",
    "CUgraph": "hipGraph_t",
    "CUgraphExec": "hipGraphExec_t",
    "CUgraphNode": "hipGraphNode_t",
    "CUhostFn": "hipHostFn_t",
    "CUmemoryPool": "hipMemPool_t",
    "CUsharedconfig": "hipSharedMemConfig",
    "CUfunc_cache": "hipFuncCache_t",
    "CUDA_MEMCPY2D": "hip_Memcpy2D",
    "CUDA_MEMCPY3D": "HIP_MEMCPY3D",
    "CUDA_SUCCESS": "hipSuccess",
    "CUDA_ERROR_LAUNCH_FAILED": "hipErrorLaunchFailure",
    "CUDA_ERROR_INVALID_PTX": "hipErrorInvalidKernelFile",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "hipErrorNoBinaryForGpu",
    "CUDA_ERROR_ECC_UNCORRECTABLE": "hipErrorECCNotCorrectable",
    "CUDA_ERROR_LAUNCH_TIMEOUT": "hipErrorLaunchTimeOut",
    "CUDA_ERROR_INVALID_SOURCE": "hipErrorInvalidSource",
    "CU_CTX_SCHED_AUTO": "hipDeviceScheduleAuto",
    "CU_CTX_SCHED_SPIN": "hipDeviceScheduleSpin",
    "CU_CTX_SCHED_YIELD": "hipDeviceScheduleYield",
    "CU_CTX_SCHED_BLOCKING_SYNC": "hipDeviceScheduleBlockingSync",
    "CU_CTX_BLOCKING_SYNC": "hipDeviceScheduleBlockingSync",
    "CU_CTX_SCHED_MASK": "hipDeviceScheduleMask",
    "CU_CTX_MAP_HOST": "hipDeviceMapHost",
    "CU_CTX_LMEM_RESIZE_TO_MAX": "hipDeviceLmemResizeToMax",
    "CU_STREAM_DEFAULT": "hipStreamDefault",
    "CU_STREAM_NON_BLOCKING": "hipStreamNonBlocking",
    "CU_EVENT_DEFAULT": "hipEventDefault",
    "CU_EVENT_BLOCKING_SYNC": "hipEventBlockingSync",
    "CU_EVENT_DISABLE_TIMING": "hipEventDisableTiming",
    "CU_EVENT_INTERPROCESS": "hipEventInterprocess",
    "CU_MEMHOSTALLOC_PORTABLE": "hipHostMallocPortable",
    "CU_MEMHOSTALLOC_DEVICEMAP": "hipHostMallocMapped",
    "CU_MEMHOSTALLOC_WRITECOMBINED": "hipHostMallocWriteCombined",
    "CU_MEMHOSTREGISTER_PORTABLE": "hipHostRegisterPortable",
    "CU_MEMHOSTREGISTER_DEVICEMAP": "hipHostRegisterMapped",
    "CU_MEMHOSTREGISTER_IOMEMORY": "hipHostRegisterIoMemory",
    "CU_MEM_ATTACH_GLOBAL": "hipMemAttachGlobal",
    "CU_MEM_ATTACH_HOST": "hipMemAttachHost",
    "CU_MEM_ATTACH_SINGLE": "hipMemAttachSingle",
    "CU_MEMORYTYPE_HOST": "hipMemoryTypeHost",
    "CU_MEMORYTYPE_DEVICE": "hipMemoryTypeDevice",
    "CU_MEMORYTYPE_ARRAY": "hipMemoryTypeArray",
    "CU_MEMORYTYPE_UNIFIED": "hipMemoryTypeUnified",
    "CU_FUNC_CACHE_PREFER_NONE": "hipFuncCachePreferNone",
    "CU_FUNC_CACHE_PREFER_SHARED": "hipFuncCachePreferShared",
    "CU_FUNC_CACHE_PREFER_L1": "hipFuncCachePreferL1",
    "CU_FUNC_CACHE_PREFER_EQUAL": "hipFuncCachePreferEqual",
    "CU_LIMIT_MALLOC_HEAP_SIZE": "hipLimitMallocHeapSize",
    "CU_LIMIT_PRINTF_FIFO_SIZE": "hipLimitPrintfFifoSize",
    "CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS": "hipIpcMemLazyEnablePeerAccess",
    "CU_LAUNCH_PARAM_BUFFER_POINTER": "HIP_LAUNCH_PARAM_BUFFER_POINTER",
    "CU_LAUNCH_PARAM_BUFFER_SIZE": "HIP_LAUNCH_PARAM_BUFFER_SIZE",
    "CU_LAUNCH_PARAM_END": "HIP_LAUNCH_PARAM_END",
    "CU_JIT_MAX_REGISTERS": "hipJitOptionMaxRegisters",
    "CU_JIT_THREADS_PER_BLOCK": "hipJitOptionThreadsPerBlock",
    "CU_JIT_WALL_TIME": "hipJitOptionWallTime",
    "CU_JIT_INFO_LOG_BUFFER": "hipJitOptionInfoLogBuffer",
    "CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES": "hipJitOptionInfoLogBufferSizeBytes",
    "CU_JIT_ERROR_LOG_BUFFER": "hipJitOptionErrorLogBuffer",
    "CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES": "hipJitOptionErrorLogBufferSizeBytes",
    "CU_JIT_OPTIMIZATION_LEVEL": "hipJitOptionOptimizationLevel",
    "CU_JIT_TARGET_FROM_CUCONTEXT": "hipJitOptionTargetFromContext",
    "CU_JIT_TARGET": "hipJitOptionTarget",
    "CU_JIT_FALLBACK_STRATEGY": "hipJitOptionFallbackStrategy",
    "CU_JIT_GENERATE_DEBUG_INFO": "hipJitOptionGenerateDebugInfo",
    "CU_JIT_LOG_VERBOSE": "hipJitOptionLogVerbose",
    "CU_JIT_GENERATE_LINE_INFO": "hipJitOptionGenerateLineInfo",
    "CU_JIT_CACHE_MODE": "hipJitOptionCacheMode",
    "CU_JIT_NUM_OPTIONS": "hipJitOptionNumOptions",
    "CU_POINTER_ATTRIBUTE_CONTEXT": "HIP_POINTER_ATTRIBUTE_CONTEXT",
    "CU_POINTER_ATTRIBUTE_MEMORY_TYPE": "HIP_POINTER_ATTRIBUTE_MEMORY_TYPE",
    "CU_POINTER_ATTRIBUTE_DEVICE_POINTER": "HIP_POINTER_ATTRIBUTE_DEVICE_POINTER",
    "CU_POINTER_ATTRIBUTE_HOST_POINTER": "HIP_POINTER_ATTRIBUTE_HOST_POINTER",
    # virtual memory management types and enums (the cuMem* functions map by rule)
    "CUmemAccessDesc": "hipMemAccessDesc",
    "CUmemAccessDesc_v1": "hipMemAccessDesc",
    "CUmemAccess_flags": "hipMemAccessFlags",
    "CU_MEM_ACCESS_FLAGS_PROT_NONE": "hipMemAccessFlagsProtNone",
    "CU_MEM_ACCESS_FLAGS_PROT_READ": "hipMemAccessFlagsProtRead",
    "CU_MEM_ACCESS_FLAGS_PROT_READWRITE": "hipMemAccessFlagsProtReadWrite",
    "CUmemAllocationProp": "hipMemAllocationProp",
    "CUmemAllocationProp_v1": "hipMemAllocationProp",
    "CUmemAllocationType": "hipMemAllocationType",
    "CU_MEM_ALLOCATION_TYPE_INVALID": "hipMemAllocationTypeInvalid",
    "CU_MEM_ALLOCATION_TYPE_PINNED": "hipMemAllocationTypePinned",
    "CU_MEM_ALLOCATION_TYPE_MAX": "hipMemAllocationTypeMax",
    "CUmemAllocationGranularity_flags": "hipMemAllocationGranularity_flags",
    "CU_MEM_ALLOC_GRANULARITY_MINIMUM": "hipMemAllocationGranularityMinimum",
    "CU_MEM_ALLOC_GRANULARITY_RECOMMENDED": "hipMemAllocationGranularityRecommended",
    "CUmemAllocationHandleType": "hipMemAllocationHandleType",
    "CU_MEM_HANDLE_TYPE_NONE": "hipMemHandleTypeNone",
    "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR": "hipMemHandleTypePosixFileDescriptor",
    "CU_MEM_HANDLE_TYPE_WIN32": "hipMemHandleTypeWin32",
    "CU_MEM_HANDLE_TYPE_WIN32_KMT": "hipMemHandleTypeWin32Kmt",
    "CUmemGenericAllocationHandle": "hipMemGenericAllocationHandle_t",
    "CUmemGenericAllocationHandle_v1": "hipMemGenericAllocationHandle_t",
    "CUmemHandleType": "hipMemHandleType",
    "CU_MEM_HANDLE_TYPE_GENERIC": "hipMemHandleTypeGeneric",
    "CUmemLocation": "hipMemLocation",
    "CUmemLocation_v1": "hipMemLocation",
    "CUmemLocationType": "hipMemLocationType",
    "CU_MEM_LOCATION_TYPE_INVALID": "hipMemLocationTypeInvalid",
    "CU_MEM_LOCATION_TYPE_DEVICE": "hipMemLocationTypeDevice",
    "CUmemOperationType": "hipMemOperationType",
    "CU_MEM_OPERATION_TYPE_MAP": "hipMemOperationTypeMap",
    "CU_MEM_OPERATION_TYPE_UNMAP": "hipMemOperationTypeUnmap",
    "CUmemPoolProps": "hipMemPoolProps",
    "CUmemPoolProps_v1": "hipMemPoolProps",
    "CUmemPoolPtrExportData": "hipMemPoolPtrExportData",
    "CUmemPoolPtrExportData_v1": "hipMemPoolPtrExportData",
    "CUmemPool_attribute": "hipMemPoolAttr",
    "CUmem_advise": "hipMemoryAdvise",
    "CU_MEM_ADVISE_SET_READ_MOSTLY": "hipMemAdviseSetReadMostly",
    "CU_MEM_ADVISE_UNSET_READ_MOSTLY": "hipMemAdviseUnsetReadMostly",
    "CU_MEM_ADVISE_SET_PREFERRED_LOCATION": "hipMemAdviseSetPreferredLocation",
    "CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION": "hipMemAdviseUnsetPreferredLocation",
    "CU_MEM_ADVISE_SET_ACCESSED_BY": "hipMemAdviseSetAccessedBy",
    "CU_MEM_ADVISE_UNSET_ACCESSED_BY": "hipMemAdviseUnsetAccessedBy",
    "CUmem_range_attribute": "hipMemRangeAttribute",
    "CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY": "hipMemRangeAttributeReadMostly",
    "CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION": "hipMemRangeAttributePreferredLocation",
    "CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY": "hipMemRangeAttributeAccessedBy",
    "CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION": "hipMemRangeAttributeLastPrefetchLocation",
    # NVRTC -> HIPRTC (hiprtc.h ships with HIP)
    "nvrtcGetPTX": "hiprtcGetCode",
    "nvrtcGetPTXSize": "hiprtcGetCodeSize",
    "nvrtcGetCUBIN": "hiprtcGetCode",
    "nvrtcGetCUBINSize": "hiprtcGetCodeSize",
}
DRIVER_UNSUPPORTED_ALT = {
    "cuGetErrorString": "hipGetErrorString (returns the string instead of filling a pointer)",
    "cuGetErrorName": "hipGetErrorName (returns the string instead of filling a pointer)",
    "cuMemcpy": "hipMemcpy(dst, src, bytes, hipMemcpyDefault)",
    "cuMemcpyAsync": "hipMemcpyAsync(dst, src, bytes, hipMemcpyDefault, stream)",
    "cuLinkCreate": "hiprtcLinkCreate (HIP >= 5.3)",
    "cuLinkAddData": "hiprtcLinkAddData (HIP >= 5.3)",
    "cuLinkAddFile": "hiprtcLinkAddFile (HIP >= 5.3)",
    "cuLinkComplete": "hiprtcLinkComplete (HIP >= 5.3)",
    "cuLinkDestroy": "hiprtcLinkDestroy (HIP >= 5.3)",
    "cuModuleLoadFatBinary": "hipModuleLoadData with a HIP fat binary",
    "cuStreamGetCtx": "none",
    "cuLaunchCooperativeKernel": "hipModuleLaunchCooperativeKernel (HIP >= 5.5)",
    "cuProfilerInitialize": "hipProfilerStart (no initialise step on AMD)",
    "cuMemsetD2D8": "hipMemset2D",
    "cuMemsetD2D32": "hipMemset2D",
    "cuFuncSetBlockShape": "hipModuleLaunchKernel with block dimensions",
    "cuLaunchGrid": "hipModuleLaunchKernel",
    "cuCtxSetLimit": "none in HIP 5.2 (hipDeviceSetLimit from HIP 5.3)",
}
CU_TYPE_PREFIXES = ("CU", "CUDA_")

# --------------------------------------------------------------------------------------------------
# Device functions and intrinsics
# --------------------------------------------------------------------------------------------------
DEVICE_HEADERS = [Path(p) for p in glob.glob(str(CUDA_INC / "crt" / "*.h*"))] + [
    CUDA_INC / h
    for h in (
        "device_atomic_functions.h",
        "sm_20_atomic_functions.h",
        "sm_32_atomic_functions.h",
        "sm_35_atomic_functions.h",
        "sm_60_atomic_functions.h",
        "sm_20_intrinsics.h",
        "sm_30_intrinsics.h",
        "sm_32_intrinsics.h",
        "sm_35_intrinsics.h",
        "sm_61_intrinsics.h",
        "cuda_fp16.h",
        "cuda_fp16.hpp",
        "texture_indirect_functions.h",
        "surface_indirect_functions.h",
        "device_functions.h",
    )
]
# Warp intrinsics with a mask argument: rewritten by code (the mask is dropped, see intrinsics.py).
DEVICE_REWRITE = {
    "__shfl_sync": "__shfl",
    "__shfl_up_sync": "__shfl_up",
    "__shfl_down_sync": "__shfl_down",
    "__shfl_xor_sync": "__shfl_xor",
    "__ballot_sync": "__ballot",
    "__any_sync": "__any",
    "__all_sync": "__all",
    "__activemask": "__ballot(1)",
    "__syncwarp": "__builtin_amdgcn_wave_barrier()",
}
DEVICE_UNSUPPORTED_ALT = {
    "__match_any_sync": "a loop over __shfl / __ballot comparing values",
    "__match_all_sync": "__ballot comparisons",
    "__reduce_add_sync": "a __shfl_xor reduction",
    "__reduce_min_sync": "a __shfl_xor reduction",
    "__reduce_max_sync": "a __shfl_xor reduction",
    "__reduce_and_sync": "a __shfl_xor reduction",
    "__reduce_or_sync": "a __shfl_xor reduction",
    "__reduce_xor_sync": "a __shfl_xor reduction",
    "__nanosleep": "__builtin_amdgcn_s_sleep(n) (units of 64 clocks)",
    "__dp4a": "__builtin_amdgcn_sdot4 / amd_mixed_dot (gfx906+)",
    "__dp2a_lo": "amd_mixed_dot",
    "__dp2a_hi": "amd_mixed_dot",
    "__cvta_generic_to_shared": "none: AMD shared memory is addressed directly",
    "__isShared": "none",
    "__isGlobal": "none",
    "__prof_trigger": "none",
    "__brkpt": "none",
    "__stwt": "a plain store",
    "__stcg": "a plain store",
    "__stcs": "a plain store",
    "__stwb": "a plain store",
    "__ldlu": "__ldg or a plain load",
    "__ldcv": "__ldg or a plain load",
    "__fns": "none in HIP 5.2",
    "__pm0": "none",
    "__pm1": "none",
    "__pm2": "none",
    "__pm3": "none",
    "__nv_bfloat162": "__hip_bfloat162 (hip/hip_bf16.h, HIP >= 5.7); HIP 5.2 has only the scalar hip_bfloat16",
    "nv_bfloat162": "__hip_bfloat162 (hip/hip_bf16.h, HIP >= 5.7); HIP 5.2 has only the scalar hip_bfloat16",
    "__float2bfloat16": "hip_bfloat16(x) (HIP 5.2's hip_bfloat16 converts from float, rounding to nearest even)",
    "__float2bfloat16_rn": "hip_bfloat16(x) (HIP 5.2's hip_bfloat16 converts from float, rounding to nearest even)",
    "__bfloat162float": "static_cast<float>(x) (HIP 5.2's hip_bfloat16 converts to float)",
    "__low2bfloat16": "none in HIP 5.2 (hip/hip_bf16.h, HIP >= 5.7)",
    "__high2bfloat16": "none in HIP 5.2 (hip/hip_bf16.h, HIP >= 5.7)",
    "__bfloat1622float2": "none in HIP 5.2 (hip/hip_bf16.h, HIP >= 5.7)",
    "__floats2bfloat162_rn": "none in HIP 5.2 (hip/hip_bf16.h, HIP >= 5.7)",
    "__float22bfloat162_rn": "none in HIP 5.2 (hip/hip_bf16.h, HIP >= 5.7)",
    "make_bfloat162": "none in HIP 5.2 (hip/hip_bf16.h, HIP >= 5.7)",
    "__nv_fp8_e4m3": "__hip_fp8_e4m3 (HIP >= 6.0)",
    "__nv_fp8_e5m2": "__hip_fp8_e5m2 (HIP >= 6.0)",
    "__nv_fp8x2_e4m3": "__hip_fp8x2_e4m3 (HIP >= 6.0)",
    "__nv_fp8x2_e5m2": "__hip_fp8x2_e5m2 (HIP >= 6.0)",
    "__nv_fp8x4_e4m3": "__hip_fp8x4_e4m3 (HIP >= 6.0)",
    "__hmax": "__hgt(a, b) ? a : b, or __float2half(fmaxf(__half2float(a), __half2float(b))) (no __hmax in HIP 5.2)",
    "__hmin": "__hlt(a, b) ? a : b (no __hmin in HIP 5.2)",
    "__hmax2": "per-lane __hgt selects (no __hmax2 in HIP 5.2)",
    "__hmin2": "per-lane __hlt selects (no __hmin2 in HIP 5.2)",
    "__shfl": "__shfl (deprecated CUDA form without mask; kept)",
}
# Device names whose HIP equivalent has another name (each HIP name must be declared in the HIP headers).
DEVICE_MAP = {
    # bf16 storage type: HIP 5.2's hip_bfloat16 (hip/hip_bfloat16.h) is a 16-bit bfloat with conversions
    # from/to float (round to nearest even) and arithmetic through float, as __nv_bfloat16
    "__nv_bfloat16": "hip_bfloat16",
    "nv_bfloat16": "hip_bfloat16",
    # CUDA's __trap() aborts the kernel (its own GNU fallback is __builtin_trap()); HIP's device abort() is
    # __builtin_trap() (amd_device_functions.h)
    "__trap": "abort",
}
# Block-scope atomics: HIP 5.2 has no *_block forms; the device-scope atomic is a correct (stronger-scoped)
# equivalent: the same result, possibly slower.
for _op in ("Add", "Sub", "Exch", "Min", "Max", "Inc", "Dec", "CAS", "And", "Or", "Xor"):
    DEVICE_MAP[f"atomic{_op}_block"] = f"atomic{_op}"
DEVICE_EXTRA_SAME = [
    "__syncthreads",
    "__syncthreads_count",
    "__syncthreads_and",
    "__syncthreads_or",
    "__threadfence",
    "__threadfence_block",
    "__threadfence_system",
    "__shfl",
    "__shfl_up",
    "__shfl_down",
    "__shfl_xor",
    "__ballot",
    "__any",
    "__all",
    "__ldg",
    "__popc",
    "__popcll",
    "__clz",
    "__clzll",
    "__ffs",
    "__ffsll",
    "__brev",
    "__brevll",
    "__half",
    "__half2",
    "__float2half",
    "__half2float",
    "atomicAdd",
    "atomicSub",
    "atomicExch",
    "atomicMin",
    "atomicMax",
    "atomicInc",
    "atomicDec",
    "atomicCAS",
    "atomicAnd",
    "atomicOr",
    "atomicXor",
    "clock",
    "clock64",
    "__launch_bounds__",
    "__global__",
    "__device__",
    "__host__",
    "__shared__",
    "__constant__",
    "__managed__",
    "__restrict__",
    "__forceinline__",
    "__noinline__",
]

# --------------------------------------------------------------------------------------------------
# Library tables from name lists (hipBLAS, hipFFT, hipSOLVER, hipCUB, MIOpen)
# --------------------------------------------------------------------------------------------------


def cublas_names() -> tuple[dict[str, str], dict[str, str]]:
    """cuBLAS -> hipBLAS (hipBLAS 6 API: hipDataType, hipblasComputeType_t)."""
    m: dict[str, str] = {}
    uns: dict[str, str] = {}
    real, cplx = ("S", "D"), ("C", "Z")
    lvl1 = {
        "amax": ("I", real + cplx),
        "amin": ("I", real + cplx),
        "asum": ("", real + ("Sc", "Dz")),
        "axpy": ("", real + cplx),
        "copy": ("", real + cplx),
        "dot": ("", real),
        "dotu": ("", cplx),
        "dotc": ("", cplx),
        "nrm2": ("", real + ("Sc", "Dz")),
        "rot": ("", real + cplx + ("Cs", "Zd")),
        "rotg": ("", real + cplx),
        "rotm": ("", real),
        "rotmg": ("", real),
        "scal": ("", real + cplx + ("Cs", "Zd")),
        "swap": ("", real + cplx),
    }
    for op, (pre, types) in lvl1.items():
        for t in types:
            name = f"I{t.lower()}{op}" if pre else f"{t}{op}"
            m[f"cublas{name}"] = f"hipblas{name}"
            m[f"cublas{name}_v2"] = f"hipblas{name}"
    lvl2_real = [
        "gemv",
        "gbmv",
        "symv",
        "sbmv",
        "spmv",
        "trmv",
        "tbmv",
        "tpmv",
        "trsv",
        "tbsv",
        "tpsv",
        "ger",
        "syr",
        "syr2",
        "spr",
        "spr2",
    ]
    lvl2_cplx = [
        "gemv",
        "gbmv",
        "symv",
        "trmv",
        "tbmv",
        "tpmv",
        "trsv",
        "tbsv",
        "tpsv",
        "geru",
        "gerc",
        "hemv",
        "hbmv",
        "hpmv",
        "her",
        "her2",
        "hpr",
        "hpr2",
        "syr",
        "syr2",
        "spmv",
        "spr",
        "spr2",
    ]
    lvl3_real = [
        "gemm",
        "symm",
        "syrk",
        "syr2k",
        "syrkx",
        "trmm",
        "trsm",
        "geam",
        "dgmm",
        "gemmBatched",
        "gemmStridedBatched",
        "trsmBatched",
        "getrfBatched",
        "getrsBatched",
        "getriBatched",
        "geqrfBatched",
        "gelsBatched",
        "matinvBatched",
        "gemvBatched",
        "gemvStridedBatched",
    ]
    lvl3_cplx = lvl3_real + ["hemm", "herk", "her2k", "herkx", "gemm3m"]
    for t in real:
        for op in lvl2_real + lvl3_real:
            m[f"cublas{t}{op}"] = f"hipblas{t}{op}"
            m[f"cublas{t}{op}_v2"] = f"hipblas{t}{op}"
    for t in cplx:
        for op in lvl2_cplx + lvl3_cplx:
            m[f"cublas{t}{op}"] = f"hipblas{t}{op}"
            m[f"cublas{t}{op}_v2"] = f"hipblas{t}{op}"
    m["cublasHgemm"] = "hipblasHgemm"
    m["cublasHgemmBatched"] = "hipblasHgemmBatched"
    m["cublasHgemmStridedBatched"] = "hipblasHgemmStridedBatched"
    for f in [
        "Create",
        "Destroy",
        "SetStream",
        "GetStream",
        "SetPointerMode",
        "GetPointerMode",
        "GetVersion",
    ]:
        m[f"cublas{f}"] = f"hipblas{f}"
        m[f"cublas{f}_v2"] = f"hipblas{f}"
    for f in [
        "SetVector",
        "GetVector",
        "SetMatrix",
        "GetMatrix",
        "SetVectorAsync",
        "GetVectorAsync",
        "SetMatrixAsync",
        "GetMatrixAsync",
        "SetAtomicsMode",
        "GetAtomicsMode",
        "GemmEx",
        "GemmBatchedEx",
        "GemmStridedBatchedEx",
        "AxpyEx",
        "DotEx",
        "DotcEx",
        "Nrm2Ex",
        "RotEx",
        "ScalEx",
        "TrsmEx",
    ]:
        m[f"cublas{f}"] = f"hipblas{f}"
    m["cublasGetStatusString"] = "hipblasStatusToString"
    for t in [
        "Handle_t",
        "Status_t",
        "Operation_t",
        "FillMode_t",
        "DiagType_t",
        "SideMode_t",
        "PointerMode_t",
        "AtomicsMode_t",
        "GemmAlgo_t",
        "ComputeType_t",
    ]:
        m[f"cublas{t}"] = f"hipblas{t}"
    for op in [
        "OP_N",
        "OP_T",
        "OP_C",
        "OP_HERMITAN",
        "OP_CONJG",
        "FILL_MODE_UPPER",
        "FILL_MODE_LOWER",
        "FILL_MODE_FULL",
        "DIAG_NON_UNIT",
        "DIAG_UNIT",
        "SIDE_LEFT",
        "SIDE_RIGHT",
        "POINTER_MODE_HOST",
        "POINTER_MODE_DEVICE",
        "ATOMICS_NOT_ALLOWED",
        "ATOMICS_ALLOWED",
        "STATUS_SUCCESS",
        "STATUS_NOT_INITIALIZED",
        "STATUS_ALLOC_FAILED",
        "STATUS_INVALID_VALUE",
        "STATUS_ARCH_MISMATCH",
        "STATUS_MAPPING_ERROR",
        "STATUS_EXECUTION_FAILED",
        "STATUS_INTERNAL_ERROR",
        "STATUS_NOT_SUPPORTED",
        "GEMM_DEFAULT",
        "COMPUTE_16F",
        "COMPUTE_32F",
        "COMPUTE_32F_FAST_16F",
        "COMPUTE_32F_FAST_16BF",
        "COMPUTE_32F_FAST_TF32",
        "COMPUTE_64F",
        "COMPUTE_32I",
    ]:
        m[f"CUBLAS_{op}"] = f"HIPBLAS_{op}"
    m["CUBLAS_OP_HERMITAN"] = "HIPBLAS_OP_C"
    m["CUBLAS_OP_CONJG"] = "HIPBLAS_OP_C"
    m["CUBLAS_GEMM_DFALT"] = "HIPBLAS_GEMM_DEFAULT"
    m["CUBLAS_GEMM_DEFAULT_TENSOR_OP"] = "HIPBLAS_GEMM_DEFAULT"
    m["CUBLAS_GEMM_DFALT_TENSOR_OP"] = "HIPBLAS_GEMM_DEFAULT"
    # math modes: hipBLAS 6 declares hipblasMath_t and hipblasSet/GetMathMode (rocBLAS ignores the TF32 and
    # tensor-op modes: AMD picks matrix-core paths itself, so the call keeps CUDA's result)
    m["cublasSetMathMode"] = "hipblasSetMathMode"
    m["cublasGetMathMode"] = "hipblasGetMathMode"
    m["cublasMath_t"] = "hipblasMath_t"
    for mode in ("DEFAULT_MATH", "TENSOR_OP_MATH", "TF32_TENSOR_OP_MATH", "PEDANTIC_MATH"):
        m[f"CUBLAS_{mode}"] = f"HIPBLAS_{mode}"
    m["CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION"] = "HIPBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION"
    # version macros outside #if (in #if the translator keeps them: HIP leaves them undefined); CUBLAS_VERSION is
    # rewritten by the translator to hipBLAS's own (major * 10000 + minor * 100 + patch)
    m["CUBLAS_VER_MAJOR"] = "hipblasVersionMajor"
    m["CUBLAS_VER_MINOR"] = "hipblasVersionMinor"
    m["CUBLAS_VER_PATCH"] = "hipblasVersionPatch"
    # generated by rule above but not declared by hipBLAS 6.4 (checked against its header): reported instead
    absent = {
        "Cgemm3m": "hipblasCgemm (no 3M variant)",
        "Zgemm3m": "hipblasZgemm (no 3M variant)",
        "SmatinvBatched": "hipblasSgetrfBatched + hipblasSgetriBatched",
        "DmatinvBatched": "hipblasDgetrfBatched + hipblasDgetriBatched",
        "CmatinvBatched": "hipblasCgetrfBatched + hipblasCgetriBatched",
        "ZmatinvBatched": "hipblasZgetrfBatched + hipblasZgetriBatched",
        "Cspmv": "hipblasChpmv only for Hermitian matrices; none for complex symmetric packed",
        "Zspmv": "hipblasZhpmv only for Hermitian matrices; none for complex symmetric packed",
        "Cspr2": "none (hipBLAS has complex spr, not spr2)",
        "Zspr2": "none (hipBLAS has complex spr, not spr2)",
        "GetVersion": "hipblasVersionMajor/Minor/Patch macros (hipblas-version.h)",
    }
    for base, alt in absent.items():
        for name in (f"cublas{base}", f"cublas{base}_v2"):
            m.pop(name, None)
            uns[name] = alt
    uns.update(
        {
            "CUBLAS_STATUS_LICENSE_ERROR": "HIPBLAS_STATUS_UNKNOWN",
            "CUBLAS_VER_BUILD": "none: hipBLAS has no numeric build number (hipblasVersionTweak is a string)",
            "cublasLtCreate": "hipblasLtCreate (hipBLASLt, ROCm >= 5.7, different header)",
            "cublasLtDestroy": "hipblasLtDestroy (hipBLASLt)",
            "cublasLtMatmul": "hipblasLtMatmul (hipBLASLt)",
            "cublasLtHandle_t": "hipblasLtHandle_t (hipBLASLt)",
            "cublasXtCreate": "none: use hipBLAS per device",
            "cublasInit": "hipblasCreate (legacy cuBLAS API)",
            "cublasShutdown": "hipblasDestroy (legacy cuBLAS API)",
            "cublasAlloc": "hipMalloc (legacy cuBLAS API)",
            "cublasFree": "hipFree (legacy cuBLAS API)",
            "cublasGetError": "check the hipblasStatus_t each call returns (legacy cuBLAS API)",
            "cublasLoggerConfigure": "none",
        }
    )
    return m, uns


def cufft_names() -> tuple[dict[str, str], dict[str, str]]:
    """cuFFT -> hipFFT."""
    m: dict[str, str] = {}
    for f in [
        "Plan1d",
        "Plan2d",
        "Plan3d",
        "PlanMany",
        "MakePlan1d",
        "MakePlan2d",
        "MakePlan3d",
        "MakePlanMany",
        "MakePlanMany64",
        "Create",
        "Destroy",
        "SetStream",
        "ExecC2C",
        "ExecR2C",
        "ExecC2R",
        "ExecZ2Z",
        "ExecD2Z",
        "ExecZ2D",
        "GetSize",
        "GetSize1d",
        "GetSize2d",
        "GetSize3d",
        "GetSizeMany",
        "GetSizeMany64",
        "Estimate1d",
        "Estimate2d",
        "Estimate3d",
        "EstimateMany",
        "SetAutoAllocation",
        "SetWorkArea",
        "GetVersion",
        "GetProperty",
    ]:
        m[f"cufft{f}"] = f"hipfft{f}"
    for t in [
        "Handle",
        "Result",
        "Result_t",
        "Complex",
        "DoubleComplex",
        "Real",
        "DoubleReal",
        "Type",
        "Type_t",
    ]:
        m[f"cufft{t}"] = f"hipfft{t}"
    for e in [
        "SUCCESS",
        "INVALID_PLAN",
        "ALLOC_FAILED",
        "INVALID_TYPE",
        "INVALID_VALUE",
        "INTERNAL_ERROR",
        "EXEC_FAILED",
        "SETUP_FAILED",
        "INVALID_SIZE",
        "UNALIGNED_DATA",
        "INCOMPLETE_PARAMETER_LIST",
        "INVALID_DEVICE",
        "PARSE_ERROR",
        "NO_WORKSPACE",
        "NOT_IMPLEMENTED",
        "NOT_SUPPORTED",
        "R2C",
        "C2R",
        "C2C",
        "D2Z",
        "Z2D",
        "Z2Z",
        "FORWARD",
    ]:
        m[f"CUFFT_{e}"] = f"HIPFFT_{e}"
    m["CUFFT_INVERSE"] = "HIPFFT_BACKWARD"
    uns = {
        "cufftXtMalloc": "hipfftXtMalloc (hipFFT >= 5.7)",
        "cufftXtMemcpy": "hipfftXtMemcpy (hipFFT >= 5.7)",
        "cufftXtSetGPUs": "hipfftXtSetGPUs (hipFFT >= 5.7)",
        "cufftXtExecDescriptor": "hipfftXtExecDescriptor (hipFFT >= 5.7)",
        "cufftSetCompatibilityMode": "none: hipFFT always uses the native data layout",
        "CUFFT_COMPATIBILITY_NATIVE": "none",
        "CUFFT_COMPATIBILITY_FFTW_PADDING": "none",
    }
    return m, uns


def cusolver_names() -> tuple[dict[str, str], dict[str, str]]:
    """cuSOLVER dense -> hipSOLVER (its cusolverDn-compatible 'hipsolverDn' API)."""
    m: dict[str, str] = {}
    for f in [
        "Create",
        "Destroy",
        "SetStream",
        "GetStream",
        "CreateGesvdjInfo",
        "DestroyGesvdjInfo",
        "XgesvdjSetTolerance",
        "XgesvdjSetMaxSweeps",
        "XgesvdjSetSortEig",
        "XgesvdjGetResidual",
        "XgesvdjGetSweeps",
        "CreateSyevjInfo",
        "DestroySyevjInfo",
        "XsyevjSetTolerance",
        "XsyevjSetMaxSweeps",
        "XsyevjSetSortEig",
        "XsyevjGetResidual",
        "XsyevjGetSweeps",
    ]:
        m[f"cusolverDn{f}"] = f"hipsolverDn{f}"
    ops_all = [
        "getrf",
        "getrs",
        "potrf",
        "potrs",
        "potri",
        "potrfBatched",
        "potrsBatched",
        "geqrf",
        "gesvd",
        "gesvdj",
        "gesvdjBatched",
        "gebrd",
        "sytrf",
        "getrf_bufferSize",
        "potrf_bufferSize",
        "potri_bufferSize",
        "geqrf_bufferSize",
        "gesvd_bufferSize",
        "gesvdj_bufferSize",
        "gesvdjBatched_bufferSize",
        "gebrd_bufferSize",
        "sytrf_bufferSize",
    ]
    ops_real = [
        "orgqr",
        "ormqr",
        "orgbr",
        "orgtr",
        "ormtr",
        "syevd",
        "syevj",
        "syevjBatched",
        "sygvd",
        "sygvj",
        "sytrd",
        "orgqr_bufferSize",
        "ormqr_bufferSize",
        "orgbr_bufferSize",
        "orgtr_bufferSize",
        "ormtr_bufferSize",
        "syevd_bufferSize",
        "syevj_bufferSize",
        "syevjBatched_bufferSize",
        "sygvd_bufferSize",
        "sygvj_bufferSize",
        "sytrd_bufferSize",
    ]
    ops_cplx = [o.replace("orm", "unm").replace("org", "ung").replace("sy", "he") for o in ops_real]
    for t in ("S", "D", "C", "Z"):
        for op in ops_all + (ops_real if t in "SD" else ops_cplx):
            m[f"cusolverDn{t}{op}"] = f"hipsolverDn{t}{op}"
        for op in ("gels", "gels_bufferSize"):  # the iterative-refinement solver: cusolverDnSSgels, ...
            m[f"cusolverDn{t}{t}{op}"] = f"hipsolverDn{t}{t}{op}"
    m["cusolverDnHandle_t"] = "hipsolverDnHandle_t"
    m["cusolverStatus_t"] = "hipsolverStatus_t"
    m["cusolverEigMode_t"] = "hipsolverEigMode_t"
    m["cusolverEigType_t"] = "hipsolverEigType_t"
    m["gesvdjInfo_t"] = "hipsolverGesvdjInfo_t"
    m["syevjInfo_t"] = "hipsolverSyevjInfo_t"
    for e in [
        "STATUS_SUCCESS",
        "STATUS_NOT_INITIALIZED",
        "STATUS_ALLOC_FAILED",
        "STATUS_INVALID_VALUE",
        "STATUS_ARCH_MISMATCH",
        "STATUS_MAPPING_ERROR",
        "STATUS_EXECUTION_FAILED",
        "STATUS_INTERNAL_ERROR",
        "STATUS_NOT_SUPPORTED",
        "STATUS_ZERO_PIVOT",
        "EIG_MODE_NOVECTOR",
        "EIG_MODE_VECTOR",
        "EIG_TYPE_1",
        "EIG_TYPE_2",
        "EIG_TYPE_3",
    ]:
        m[f"CUSOLVER_{e}"] = f"HIPSOLVER_{e}"
    uns = {
        "cusolverSpCreate": "none: hipSOLVER has no sparse solver in 5.x (see rocSOLVER/hipSPARSE)",
        "cusolverSpDestroy": "none",
        "cusolverSpHandle_t": "none",
        "cusolverRfCreate": "hipsolverRfCreate (hipSOLVER >= 5.6)",
        "cusolverDnXgetrf": "hipsolverDnXgetrf (hipSOLVER >= 6.1)",
        "cusolverDnXgetrs": "hipsolverDnXgetrs (hipSOLVER >= 6.1)",
        "cusolverDnParams_t": "hipsolverDnParams_t (hipSOLVER >= 6.1)",
        "cusolverMgCreate": "none",
    }
    return m, uns


CUB_SUPPORTED = [
    "BlockReduce",
    "BlockScan",
    "BlockLoad",
    "BlockStore",
    "BlockRadixSort",
    "BlockExchange",
    "BlockHistogram",
    "BlockDiscontinuity",
    "BlockAdjacentDifference",
    "BlockShuffle",
    "BlockRadixRank",
    "BlockMergeSort",
    "WarpReduce",
    "WarpScan",
    "WarpLoad",
    "WarpStore",
    "WarpExchange",
    "WarpMergeSort",
    "DeviceReduce",
    "DeviceScan",
    "DeviceRadixSort",
    "DeviceSegmentedReduce",
    "DeviceSegmentedRadixSort",
    "DeviceSelect",
    "DevicePartition",
    "DeviceHistogram",
    "DeviceRunLengthEncode",
    "DeviceSpmv",
    "DeviceMergeSort",
    "DeviceSegmentedSort",
    "DeviceAdjacentDifference",
    "CachingDeviceAllocator",
    "Sum",
    "Max",
    "Min",
    "ArgMax",
    "ArgMin",
    "KeyValuePair",
    "CountingInputIterator",
    "TransformInputIterator",
    "ConstantInputIterator",
    "DiscardOutputIterator",
    "ArgIndexInputIterator",
    "CacheModifiedInputIterator",
    "CacheModifiedOutputIterator",
    "TexObjInputIterator",
    "TexRefInputIterator",
    "DoubleBuffer",
    "Equality",
    "Inequality",
    "InequalityWrapper",
    "CastOp",
    "SwizzleScanOp",
    "ReduceBySegmentOp",
    "ReduceByKeyOp",
    "Traits",
    "NumericTraits",
    "BaseTraits",
    "RowMajorTid",
    "LaneId",
    "WarpId",
    "CTA_SYNC",
    "WARP_SYNC",
    "ThreadLoad",
    "ThreadStore",
    "ThreadReduce",
    "ThreadScanInclusive",
    "ThreadScanExclusive",
    "LoadDirectBlocked",
    "LoadDirectBlockedVectorized",
    "LoadDirectStriped",
    "LoadDirectWarpStriped",
    "StoreDirectBlocked",
    "StoreDirectBlockedVectorized",
    "StoreDirectStriped",
    "StoreDirectWarpStriped",
    "BLOCK_REDUCE_WARP_REDUCTIONS",
    "BLOCK_REDUCE_RAKING",
    "BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY",
    "BLOCK_SCAN_RAKING",
    "BLOCK_SCAN_WARP_SCANS",
    "BLOCK_SCAN_RAKING_MEMOIZE",
    "BLOCK_LOAD_DIRECT",
    "BLOCK_LOAD_VECTORIZE",
    "BLOCK_LOAD_TRANSPOSE",
    "BLOCK_LOAD_WARP_TRANSPOSE",
    "BLOCK_LOAD_WARP_TRANSPOSE_TIMESLICED",
    "BLOCK_STORE_DIRECT",
    "BLOCK_STORE_VECTORIZE",
    "BLOCK_STORE_TRANSPOSE",
    "BLOCK_STORE_WARP_TRANSPOSE",
    "BLOCK_STORE_WARP_TRANSPOSE_TIMESLICED",
    "BLOCK_HISTO_SORT",
    "BLOCK_HISTO_ATOMIC",
    "LOAD_DEFAULT",
    "LOAD_CA",
    "LOAD_CG",
    "LOAD_CS",
    "LOAD_CV",
    "LOAD_LDG",
    "LOAD_VOLATILE",
    "STORE_DEFAULT",
    "STORE_WB",
    "STORE_CG",
    "STORE_CS",
    "STORE_WT",
    "STORE_VOLATILE",
    "WARP_LOAD_DIRECT",
    "WARP_LOAD_STRIPED",
    "WARP_LOAD_VECTORIZE",
    "WARP_LOAD_TRANSPOSE",
    "WARP_STORE_DIRECT",
    "WARP_STORE_STRIPED",
    "WARP_STORE_VECTORIZE",
    "WARP_STORE_TRANSPOSE",
    "Int2Type",
    "Uninitialized",
    "NullType",
    "If",
    "Log2",
    "PowerOfTwo",
    "DivideAndRoundUp",
    "min",
    "max",
    "Debug",
    "RadixSortTwiddle",
    "FutureValue",
    "Difference",
]
CUB_UNSUPPORTED = {
    "PtxVersion": "hipDeviceGetAttribute / hipGetDeviceProperties (gcnArchName): hipCUB has no PtxVersion",
    "SmVersion": "hipDeviceGetAttribute(hipDeviceAttributeComputeCapabilityMajor/Minor): hipCUB has no SmVersion",
    "MaxSmOccupancy": "hipOccupancyMaxActiveBlocksPerMultiprocessor (hipCUB has no MaxSmOccupancy)",
    "DeviceFor": "a plain kernel (hipCUB has no DeviceFor)",
    "DeviceTransform": "a plain kernel (hipCUB has no DeviceTransform)",
    "DeviceCopy": "hipMemcpyAsync per buffer (hipCUB 5.x has no DeviceCopy)",
    "DeviceMemcpy": "hipMemcpyAsync per buffer (hipCUB 5.x has no DeviceMemcpy)",
    "BlockRunLengthDecode": "none in hipCUB 5.x",
    "ThreadLoadAsync": "none",
}
CUB_MACROS = {
    "CUB_RUNTIME_FUNCTION": "HIPCUB_RUNTIME_FUNCTION",
    "CUB_STDERR": "HIPCUB_STDERR",
    "CubDebug": "HipcubDebug",
    "CUB_PTX_WARP_THREADS": "HIPCUB_WARP_THREADS",
    "CUB_WARP_THREADS": "HIPCUB_WARP_THREADS",
    "CUB_PTX_ARCH": "HIPCUB_ARCH",
    "CUB_MAX": "CUB_MAX",
    "CUB_MIN": "CUB_MIN",
}

CUDNN_MAP = {
    "cudnnHandle_t": "miopenHandle_t",
    "cudnnCreate": "miopenCreate",
    "cudnnDestroy": "miopenDestroy",
    "cudnnSetStream": "miopenSetStream",
    "cudnnGetStream": "miopenGetStream",
    "cudnnStatus_t": "miopenStatus_t",
    "cudnnGetErrorString": "miopenGetErrorString",
    "CUDNN_STATUS_SUCCESS": "miopenStatusSuccess",
    "CUDNN_STATUS_NOT_INITIALIZED": "miopenStatusNotInitialized",
    "CUDNN_STATUS_ALLOC_FAILED": "miopenStatusAllocFailed",
    "CUDNN_STATUS_BAD_PARAM": "miopenStatusBadParm",
    "CUDNN_STATUS_INTERNAL_ERROR": "miopenStatusInternalError",
    "CUDNN_STATUS_NOT_SUPPORTED": "miopenStatusUnsupportedOp",
    "CUDNN_STATUS_INVALID_VALUE": "miopenStatusInvalidValue",
    "cudnnTensorDescriptor_t": "miopenTensorDescriptor_t",
    "cudnnFilterDescriptor_t": "miopenTensorDescriptor_t",
    "cudnnCreateTensorDescriptor": "miopenCreateTensorDescriptor",
    "cudnnDestroyTensorDescriptor": "miopenDestroyTensorDescriptor",
    "cudnnCreateFilterDescriptor": "miopenCreateTensorDescriptor",
    "cudnnDestroyFilterDescriptor": "miopenDestroyTensorDescriptor",
    "cudnnConvolutionDescriptor_t": "miopenConvolutionDescriptor_t",
    "cudnnCreateConvolutionDescriptor": "miopenCreateConvolutionDescriptor",
    "cudnnDestroyConvolutionDescriptor": "miopenDestroyConvolutionDescriptor",
    "cudnnPoolingDescriptor_t": "miopenPoolingDescriptor_t",
    "cudnnCreatePoolingDescriptor": "miopenCreatePoolingDescriptor",
    "cudnnDestroyPoolingDescriptor": "miopenDestroyPoolingDescriptor",
    "cudnnActivationDescriptor_t": "miopenActivationDescriptor_t",
    "cudnnCreateActivationDescriptor": "miopenCreateActivationDescriptor",
    "cudnnDestroyActivationDescriptor": "miopenDestroyActivationDescriptor",
    "cudnnLRNDescriptor_t": "miopenLRNDescriptor_t",
    "cudnnCreateLRNDescriptor": "miopenCreateLRNDescriptor",
    "cudnnDestroyLRNDescriptor": "miopenDestroyLRNDescriptor",
    "cudnnDropoutDescriptor_t": "miopenDropoutDescriptor_t",
    "cudnnCreateDropoutDescriptor": "miopenCreateDropoutDescriptor",
    "cudnnDestroyDropoutDescriptor": "miopenDestroyDropoutDescriptor",
    "cudnnRNNDescriptor_t": "miopenRNNDescriptor_t",
    "cudnnCreateRNNDescriptor": "miopenCreateRNNDescriptor",
    "cudnnDestroyRNNDescriptor": "miopenDestroyRNNDescriptor",
    "cudnnDataType_t": "miopenDataType_t",
    "CUDNN_DATA_FLOAT": "miopenFloat",
    "CUDNN_DATA_HALF": "miopenHalf",
    "CUDNN_DATA_INT8": "miopenInt8",
    "CUDNN_DATA_INT32": "miopenInt32",
    "CUDNN_DATA_BFLOAT16": "miopenBFloat16",
    "CUDNN_DATA_DOUBLE": "miopenDouble",
    "cudnnActivationMode_t": "miopenActivationMode_t",
    "CUDNN_ACTIVATION_RELU": "miopenActivationRELU",
    "CUDNN_ACTIVATION_TANH": "miopenActivationTANH",
    "CUDNN_ACTIVATION_CLIPPED_RELU": "miopenActivationCLIPPEDRELU",
    "CUDNN_ACTIVATION_ELU": "miopenActivationELU",
    "cudnnPoolingMode_t": "miopenPoolingMode_t",
    "CUDNN_POOLING_MAX": "miopenPoolingMax",
    "CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING": "miopenPoolingAverageInclusive",
    "CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING": "miopenPoolingAverage",
    "cudnnBatchNormMode_t": "miopenBatchNormMode_t",
    "CUDNN_BATCHNORM_PER_ACTIVATION": "miopenBNPerActivation",
    "CUDNN_BATCHNORM_SPATIAL": "miopenBNSpatial",
    "cudnnSoftmaxAlgorithm_t": "miopenSoftmaxAlgorithm_t",
    "CUDNN_SOFTMAX_FAST": "MIOPEN_SOFTMAX_FAST",
    "CUDNN_SOFTMAX_ACCURATE": "MIOPEN_SOFTMAX_ACCURATE",
    "CUDNN_SOFTMAX_LOG": "MIOPEN_SOFTMAX_LOG",
    "cudnnSoftmaxMode_t": "miopenSoftmaxMode_t",
    "CUDNN_SOFTMAX_MODE_INSTANCE": "MIOPEN_SOFTMAX_MODE_INSTANCE",
    "CUDNN_SOFTMAX_MODE_CHANNEL": "MIOPEN_SOFTMAX_MODE_CHANNEL",
    "cudnnGetTensor4dDescriptor": "miopenGet4dTensorDescriptor",
    "cudnnSetTensorNdDescriptor": "miopenSetTensorDescriptor",
    "cudnnGetConvolutionNdForwardOutputDim": "miopenGetConvolutionNdForwardOutputDim",
    "cudnnSetLRNDescriptor": "miopenSetLRNDescriptor",
    "cudnnDropoutGetStatesSize": "miopenDropoutGetStatesSize",
    "cudnnDropoutGetReserveSpaceSize": "miopenDropoutGetReserveSpaceSize",
}
CUDNN_UNSUPPORTED = {
    "cudnnSetTensor4dDescriptor": "miopenSet4dTensorDescriptor (no format argument: NCHW only)",
    "cudnnSetFilter4dDescriptor": "miopenSet4dTensorDescriptor",
    "cudnnSetConvolution2dDescriptor": "miopenInitConvolutionDescriptor (different argument order)",
    "cudnnConvolutionForward": "miopenFindConvolutionForwardAlgorithm + miopenConvolutionForward",
    "cudnnConvolutionBackwardData": "miopenFindConvolutionBackwardDataAlgorithm + miopenConvolutionBackwardData",
    "cudnnConvolutionBackwardFilter": "miopenFindConvolutionBackwardWeightsAlgorithm + "
    "miopenConvolutionBackwardWeights",
    "cudnnGetConvolutionForwardAlgorithm_v7": "miopenFindConvolutionForwardAlgorithm",
    "cudnnGetConvolutionForwardWorkspaceSize": "miopenConvolutionForwardGetWorkSpaceSize",
    "cudnnSoftmaxForward": "miopenSoftmaxForward_V2 (different argument order)",
    "cudnnActivationForward": "miopenActivationForward (descriptor set with miopenSetActivationDescriptor)",
    "cudnnSetActivationDescriptor": "miopenSetActivationDescriptor (alpha/beta/gamma, no NaN option)",
    "cudnnSetPooling2dDescriptor": "miopenSet2dPoolingDescriptor (no NaN option)",
    "cudnnPoolingForward": "miopenPoolingForward (needs a workspace)",
    "cudnnBatchNormalizationForwardTraining": "miopenBatchNormalizationForwardTraining",
    "cudnnBatchNormalizationForwardInference": "miopenBatchNormalizationForwardInference",
    "cudnnAddTensor": "miopenOpTensor with miopenTensorOpAdd",
    "cudnnBackendCreateDescriptor": "none: MIOpen has no backend graph API",
    "cudnnTensorFormat_t": "none: MIOpen tensors are NCHW unless strided",
    "CUDNN_TENSOR_NCHW": "none",
    "CUDNN_TENSOR_NHWC": "strided miopenSetTensorDescriptor",
}

INCLUDES = {
    "cuda_runtime.h": "hip/hip_runtime.h",
    "cuda_runtime_api.h": "hip/hip_runtime_api.h",
    "cuda.h": "hip/hip_runtime.h",
    "device_launch_parameters.h": "hip/hip_runtime.h",
    "device_functions.h": "hip/device_functions.h",
    "driver_types.h": "hip/driver_types.h",
    "vector_types.h": "hip/hip_vector_types.h",
    "texture_types.h": "hip/hip_texture_types.h",
    "surface_types.h": "hip/surface_types.h",
    "channel_descriptor.h": "hip/channel_descriptor.h",
    "library_types.h": "hip/library_types.h",
    "math_functions.h": "hip/math_functions.h",
    "cuda_fp16.h": "hip/hip_fp16.h",
    "cuda_bf16.h": "hip/hip_bfloat16.h",
    "cuda_profiler_api.h": "hip/hip_runtime_api.h",
    "cudaProfiler.h": "hip/hip_runtime_api.h",
    "cooperative_groups.h": "hip/hip_cooperative_groups.h",
    "cuComplex.h": "hip/hip_complex.h",
    "nvrtc.h": "hip/hiprtc.h",
    "curand.h": "hiprand/hiprand.h",
    "curand_kernel.h": "hiprand/hiprand_kernel.h",
    "curand_mtgp32_host.h": "hiprand/hiprand_mtgp32_host.h",
    "cublas_v2.h": "hipblas/hipblas.h",
    "cublas.h": "hipblas/hipblas.h",
    "cublas_api.h": "hipblas/hipblas.h",
    "cufft.h": "hipfft/hipfft.h",
    "cufftXt.h": "hipfft/hipfftXt.h",
    "cusparse.h": "hipsparse/hipsparse.h",
    "cusparse_v2.h": "hipsparse/hipsparse.h",
    "cusolverDn.h": "hipsolver/hipsolver.h",
    "cusolver_common.h": "hipsolver/hipsolver.h",
    "cub/cub.cuh": "hipcub/hipcub.hpp",
    "cudnn.h": "miopen/miopen.h",
    "nccl.h": "rccl/rccl.h",
}
for _sub in [
    "block/block_reduce",
    "block/block_scan",
    "block/block_load",
    "block/block_store",
    "block/block_radix_sort",
    "block/block_exchange",
    "warp/warp_reduce",
    "warp/warp_scan",
    "device/device_reduce",
    "device/device_scan",
    "device/device_radix_sort",
    "device/device_select",
    "device/device_segmented_reduce",
    "device/device_segmented_radix_sort",
    "util_allocator",
    "iterator/counting_input_iterator",
    "iterator/transform_input_iterator",
    "util_type",
    "util_ptx",
]:
    INCLUDES[f"cub/{_sub}.cuh"] = "hipcub/hipcub.hpp"
INCLUDES_UNSUPPORTED = {
    "cuda_fp8.h": "hip/hip_fp8.h (HIP >= 6.0)",
    "mma.h": "rocWMMA (rocwmma/rocwmma.hpp, not in HIP 5.2 or Debian): a different API for matrix cores",
    "cuda_pipeline.h": "none: no asynchronous copy pipeline on AMD",
    "cuda/pipeline": "none: no asynchronous copy pipeline on AMD",
    "cuda/barrier": "none",
    "cuda/atomic": "hip atomics / std::atomic (libhipcxx)",
    "cooperative_groups/reduce.h": "hand-written reduction with tile.shfl_down (HIP 5.2 has no cg::reduce)",
    "cooperative_groups/memcpy_async.h": "none",
    "nvToolsExt.h": "roctx (roctracer/roctx.h): roctxRangePushA / roctxRangePop",
    "nvtx3/nvToolsExt.h": "roctx (roctracer/roctx.h): roctxRangePushA / roctxRangePop",
    "cupti.h": "rocprofiler / roctracer",
    "nvml.h": "ROCm SMI (rocm_smi/rocm_smi.h)",
    "cusparseLt.h": "hipSPARSELt (hipsparselt/hipsparselt.h)",
    "cublasLt.h": "hipBLASLt (hipblaslt/hipblaslt.h, ROCm >= 5.7)",
    "cublasXt.h": "none: use hipBLAS on each device",
    "nvjpeg.h": "rocJPEG (ROCm >= 6.2)",
    "npp.h": "none (rocm's 'rpp' covers part of it)",
    "cufile.h": "none: no GPUDirect Storage on AMD",
    "cusolverSp.h": "none in hipSOLVER 5.x",
    "cusolverRf.h": "hipsolverRf (hipSOLVER >= 5.6)",
    "cudnn_frontend.h": "none: MIOpen has no graph frontend",
    "cutlass/cutlass.h": "composable_kernel (ck/ck.hpp): a different API",
    "cuda_awbarrier.h": "none",
    "cuda_gl_interop.h": "hip/hip_gl_interop.h (HIP >= 5.5)",
    "cudaGL.h": "hip/hip_gl_interop.h (HIP >= 5.5)",
    "math_constants.h": "hip/hip_math_constants.h (HIP >= 5.5) or define the constants",
}


def runtime_tables(cuda_rt: set[str], cuda_funcs: set[str]) -> tuple[dict, dict]:
    """Runtime functions -> runtime.json; runtime types/enums/macros -> types.json."""
    funcs: dict[str, dict] = {"map": {}, "unsupported": {}}
    types: dict[str, dict] = {"map": {}, "unsupported": {}}
    attr_ci = ci_lookup({n for n in HIP if n.startswith("hipDeviceAttribute")})
    for name in sorted(n for n in cuda_rt if re.match(r"cuda[A-Z]", n)):
        if re.search(r"_(ptsz|ptds)$", name) or (name.startswith("cudaOcc") and not name.startswith("cudaOccupancy")):
            continue
        tab = funcs if name in cuda_funcs else types
        hip = RUNTIME_OVERRIDES.get(name)
        if hip is None and "hip" + name[4:] in HIP:
            hip = "hip" + name[4:]
        if hip is None and name.startswith("cudaDevAttr"):
            rest = name[len("cudaDevAttr") :]
            for cand in (
                rest,
                rest.replace("SharedMemory", "SharedMem"),
                rest.replace("MaxSharedMemoryPerBlockOptin", "SharedMemPerBlockOptin"),
            ):
                hip = attr_ci.get(("hipDeviceAttribute" + cand).lower())
                if hip:
                    break
        if hip is not None:
            tab["map"][name] = hip
        else:
            tab["unsupported"][name] = RUNTIME_UNSUPPORTED_ALT.get(name, "")
    for name in RUNTIME_LEGACY:
        if name in cuda_rt and name not in RUNTIME_OVERRIDES:
            continue
        tab = (
            types
            if name[4:5].isupper()
            and not re.search(
                r"[a-z](Texture|Array|Config|Argument|Object|Flags"
                r"|Limit|Reference|Call)",
                name,
            )
            else funcs
        )
        if name.startswith(("cudaRead", "cudaFilter", "cudaShared", "cudaError", "texture", "surface")):
            tab = types
        hip = RUNTIME_OVERRIDES.get(name) or ("hip" + name[4:] if name.startswith("cuda") else None)
        if hip is None and name in ("textureReference", "surfaceReference"):
            hip = name
        if hip in HIP:
            if hip != name:
                tab["map"][name] = hip
        else:
            tab["unsupported"][name] = RUNTIME_UNSUPPORTED_ALT.get(name, "")
    for name, hip in RUNTIME_OVERRIDES.items():
        if hip in HIP and name not in funcs["map"] and name not in types["map"]:
            (
                funcs
                if name in cuda_funcs or name.startswith(("cudaThread", "cudaMalloc", "cudaFree", "cudaHostAlloc("))
                else types
            )["map"][name] = hip
    for name, alt in RUNTIME_UNSUPPORTED_ALT.items():
        is_type = name in cuda_rt and name not in cuda_funcs
        (types if is_type else funcs)["unsupported"].setdefault(name, alt)
        funcs["map"].pop(name, None)
        types["map"].pop(name, None)
    # library_types.h, cuComplex.h, macros
    for name in sorted(idents([CUDA_INC / "library_types.h"])):
        if re.match(r"CUDA_[RC]_", name):
            hipname = "HIP_" + name[5:]
            if hipname in HIP:
                types["map"][name] = hipname
            else:
                types["unsupported"][name] = ""
    cplx = idents([CUDA_INC / "cuComplex.h"])
    for name in sorted(cplx):
        if re.match(r"(make_)?cu[A-Z]", name):
            hipname = name.replace("cu", "hip", 1)
            if hipname in HIP:
                types["map"][name] = hipname
    types["map"]["__CUDACC__"] = "__HIPCC__"
    types["map"]["__NVCC__"] = "__HIPCC__"
    types["map"]["CUDART_CB"] = ""  # empty on Linux; HIP 5.2 has no HIPRT_CB for AMD
    types["unsupported"]["CUDART_VERSION"] = "HIP_VERSION (a different numbering)"
    types["unsupported"]["CUDA_VERSION"] = "HIP_VERSION (a different numbering)"
    types["unsupported"]["__CUDACC_VER_MAJOR__"] = "HIP_VERSION_MAJOR (a different numbering)"
    types["unsupported"]["__CUDACC_VER_MINOR__"] = "HIP_VERSION_MINOR (a different numbering)"
    types["unsupported"]["__CUDA_ARCH__"] = (
        "__HIP_DEVICE_COMPILE__ for 'is this the device pass'; __gfx90a__ etc. for an architecture"
    )
    types["unsupported"]["__CUDA_ARCH_LIST__"] = "none"
    for name in sorted(idents([CUDA_INC / "math_constants.h"])):
        if name.startswith("CUDART_") and name != "CUDART_VERSION" and not name.endswith("_H__"):
            types["unsupported"][name] = "HIP_" + name[7:] + " (hip/hip_math_constants.h of HIP 6; --hip-version 6.4)"
    return funcs, types


def _struct_fields(path: Path, start: str, end: str) -> set[str]:
    """Field names of a struct in a header, by the text between ``start`` and ``end``."""
    if not path.exists():
        return set()
    text = path.read_text(errors="replace")
    i = text.index(start)
    body = text[i : text.index(end, i)]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    body = re.sub(r"//.*", "", body)
    return set(re.findall(r"(\w+)\s*(?:\[[^\]]*\])*\s*;", body))


PROP_RENAMED = {
    "sharedMemPerMultiprocessor": "maxSharedMemoryPerMultiProcessor",
}


def device_prop_members() -> dict:
    """cudaDeviceProp fields that hipDeviceProp_t lacks (or names differently)."""
    cuda = _struct_fields(CUDA_INC / "driver_types.h", "struct __device_builtin__ cudaDeviceProp", "};")
    hip = _struct_fields(HIP_INC / "hip_runtime_api.h", "typedef struct hipDeviceProp_t", "} hipDeviceProp_t;")
    attr_ci = ci_lookup({n for n in HIP if n.startswith("hipDeviceAttribute")})
    renamed = {k: v for k, v in PROP_RENAMED.items() if v in hip}
    missing = {}
    for f in sorted(cuda - hip - set(renamed) - {"reserved"}):
        attr = attr_ci.get(("hipDeviceAttribute" + f).lower())
        missing[f] = f"hipDeviceGetAttribute(&v, {attr}, dev)" if attr else "none in HIP 5.2"
    return {"struct": ["cudaDeviceProp", "hipDeviceProp_t"], "map": renamed, "unsupported": missing}


def driver_table(cuda_drv: set[str], cuda_funcs: set[str]) -> dict:
    """Driver API (cu*, CU*, CUDA_*) and NVRTC -> HIP."""
    tab: dict[str, dict] = {"map": {}, "unsupported": {}}
    err_ci = ci_lookup({n for n in HIP if n.startswith("hipError")})
    attr_ci = ci_lookup({n for n in HIP if n.startswith("hipDeviceAttribute")})
    for name in sorted(cuda_drv):
        if (
            re.search(r"_(ptsz|ptds)$", name)
            or name.startswith("PFN_")
            or name.endswith("_enum")
            or name.endswith("_st")
            or re.search(r"_v\d+_st$", name)
        ):
            continue
        hip = DRIVER_OVERRIDES.get(name)
        if hip is None and re.match(r"cu[A-Z]", name) and name in cuda_funcs:
            base = re.sub(r"_v\d+$", "", name)
            for cand in ("hip" + base[2:], "hipDrv" + base[2:], "hipModule" + base[2:]):
                if cand in HIP:
                    hip = cand
                    break
        elif hip is None and name.startswith("CUDA_ERROR_"):
            hip = err_ci.get(("hipError" + camel(name[len("CUDA_ERROR_") :])).lower())
        elif hip is None and name.startswith("CU_DEVICE_ATTRIBUTE_"):
            hip = attr_ci.get(("hipDeviceAttribute" + camel(name[len("CU_DEVICE_ATTRIBUTE_") :])).lower())
        elif hip is None and name.startswith("CUDA_") and "HIP_" + name[5:] in HIP:
            hip = "HIP_" + name[5:]
        elif hip is None and name.startswith("CU_") and "HIP_" + name[3:] in HIP:
            hip = "HIP_" + name[3:]
        elif hip is None and re.match(r"CU[a-z]", name) and "HIP" + name[2:] in HIP:
            hip = "HIP" + name[2:]
        if hip is not None:
            tab["map"][name] = hip
        elif re.match(r"(cu[A-Z]|CU[a-z]|CU_|CUDA_)", name) and not name.endswith("_H"):
            tab["unsupported"][name] = DRIVER_UNSUPPORTED_ALT.get(name, "")
    for name, alt in DRIVER_UNSUPPORTED_ALT.items():
        tab["unsupported"][name] = alt
        tab["map"].pop(name, None)
    for k, v in DRIVER_OVERRIDES.items():
        tab["map"][k] = v
        tab["unsupported"].pop(k, None)
    # NVRTC -> HIPRTC
    for name in [
        "nvrtcCreateProgram",
        "nvrtcDestroyProgram",
        "nvrtcCompileProgram",
        "nvrtcGetProgramLog",
        "nvrtcGetProgramLogSize",
        "nvrtcGetErrorString",
        "nvrtcVersion",
        "nvrtcAddNameExpression",
        "nvrtcGetLoweredName",
        "nvrtcProgram",
        "nvrtcResult",
    ]:
        cand = "hiprtc" + name[5:]
        if cand in HIP:
            tab["map"][name] = cand
    for name in [
        "SUCCESS",
        "ERROR_OUT_OF_MEMORY",
        "ERROR_PROGRAM_CREATION_FAILURE",
        "ERROR_INVALID_INPUT",
        "ERROR_INVALID_PROGRAM",
        "ERROR_INVALID_OPTION",
        "ERROR_COMPILATION",
        "ERROR_BUILTIN_OPERATION_FAILURE",
        "ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
        "ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
        "ERROR_NAME_EXPRESSION_NOT_VALID",
        "ERROR_INTERNAL_ERROR",
    ]:
        if "HIPRTC_" + name in HIP:
            tab["map"]["NVRTC_" + name] = "HIPRTC_" + name
    return tab


def device_table() -> dict:
    """Device functions: 'same' (valid in HIP as written), 'rewrite' (code), 'unsupported'."""
    funcs = functions(DEVICE_HEADERS)
    same: set[str] = set(n for n in DEVICE_EXTRA_SAME if n in HIP)
    unsupported: dict[str, str] = {}
    for name in sorted(funcs):
        if not re.match(r"(__[a-z][a-z0-9_]*|atomic[A-Z]\w*)$", name):
            continue
        if (
            name.startswith(
                (
                    "__cuda",
                    "__nv_",
                    "__internal",
                    "__builtin",
                    "__attribute",
                    "__declspec",
                    "__u_",
                    "__fn",
                    "__fcvt",
                    "__ull2",
                    "__cudart",
                )
            )
            or name in DEVICE_REWRITE
        ):
            continue
        if re.search(
            r"_impl$|^__(cu_va|host_|device_|name__|text_var|libcpp|has_|is_trivially|cmath|pow_helper|"
            r"get_storage|assert|float_simpl|pad__|loc_sc|annotate|location|block_size|isnan|isinf|"
            r"isfinite|finite|signbit|[a-z]mma_|mma_|bmma|imma|hmma|dmma)",
            name,
        ):
            continue
        if name.endswith("_sync") and name not in DEVICE_UNSUPPORTED_ALT:
            unsupported[name] = ""
        elif name in HIP:
            same.add(name)
        else:
            unsupported[name] = DEVICE_UNSUPPORTED_ALT.get(name, "")
    for name, alt in DEVICE_UNSUPPORTED_ALT.items():
        if name not in HIP:
            unsupported[name] = alt
            same.discard(name)
    dmap = {k: v for k, v in DEVICE_MAP.items() if v in HIP and k not in HIP}
    for k in dmap:
        unsupported.pop(k, None)
    return {"map": dmap, "rewrite": DEVICE_REWRITE, "same": sorted(same), "unsupported": unsupported}


def mirror_table(hip_headers: list[Path], lower: str, upper: str, hlower: str, hupper: str) -> dict:
    """cuRAND / cuSPARSE style: every hipX / HIPX in the installed HIP library header -> cuX / CUX."""
    hipnames = idents(hip_headers)
    tab: dict[str, dict] = {"map": {}, "unsupported": {}}
    for name in sorted(hipnames):
        if (
            name.startswith(hlower)
            and not name.endswith(("_H_", "_EXPORTS"))
            and "hcc" not in name
            and "nvcc" not in name
        ):
            tab["map"][lower + name[len(hlower) :]] = name
        elif name.startswith(hupper + "_") and not name.endswith("_H_") and "DOC" not in name:
            tab["map"][upper + name[len(hupper) :]] = name
    return tab


def write(name: str, title: str, tab: dict, verified_against: str) -> None:
    """Write one table as maps/<name>.json."""
    data = {"name": name, "title": title, "verified_against": verified_against}
    data.update(tab)
    for key in ("map", "unsupported", "rewrite"):
        if key in data:
            data[key] = dict(sorted(data[key].items()))
    (OUT / f"{name}.json").write_text(json.dumps(data, indent=1, ensure_ascii=True) + "\n")


def main() -> None:
    """Regenerate every table."""
    cuda_rt = idents(RT_HEADERS)
    cuda_funcs = functions(RT_HEADERS)
    funcs, types = runtime_tables(cuda_rt, cuda_funcs)
    write("runtime", "CUDA runtime API", funcs, "hip")
    types["struct_members"] = device_prop_members()
    write("types", "CUDA types, enums and macros", types, "hip")
    drv_headers = [CUDA_INC / "cuda.h", CUDA_INC / "cudaProfiler.h"]
    write(
        "driver",
        "CUDA driver API and NVRTC",
        driver_table(idents(drv_headers), functions(drv_headers)),
        "hip",
    )
    write("device", "CUDA device functions and intrinsics", device_table(), "hip")
    rand = mirror_table(
        [Path(p) for p in glob.glob(str(HIP_ROOT / "hiprand" / "*.h"))], "curand", "CURAND", "hiprand", "HIPRAND"
    )
    rand["map"] = {
        k: v
        for k, v in rand["map"].items()
        if k not in ("curand_hcc", "curand_kernel_hcc", "curand_name", "curand_version")
    }
    write("curand", "cuRAND -> hipRAND", rand, "hiprand")
    sparse = mirror_table([HIP_ROOT / "hipsparse" / "hipsparse.h"], "cusparse", "CUSPARSE", "hipsparse", "HIPSPARSE")
    write("cusparse", "cuSPARSE -> hipSPARSE", sparse, "hipsparse")
    m, u = cublas_names()
    write("cublas", "cuBLAS -> hipBLAS", {"map": m, "unsupported": u}, "hipblas")
    m, u = cufft_names()
    write("cufft", "cuFFT -> hipFFT", {"map": m, "unsupported": u}, "hipfft")
    m, u = cusolver_names()
    write("cusolver", "cuSOLVER -> hipSOLVER", {"map": m, "unsupported": u}, "hipsolver")
    write(
        "cub",
        "CUB -> hipCUB",
        {
            "namespace": {"cub": "hipcub"},
            "map": CUB_MACROS,
            "members": sorted(CUB_SUPPORTED),
            "unsupported": CUB_UNSUPPORTED,
        },
        "hipcub",
    )
    write("cudnn", "cuDNN -> MIOpen (one-to-one only)", {"map": CUDNN_MAP, "unsupported": CUDNN_UNSUPPORTED}, "miopen")
    write("includes", "CUDA headers -> HIP headers", {"map": INCLUDES, "unsupported": INCLUDES_UNSUPPORTED}, "")
    for p in sorted(OUT.glob("*.json")):
        d = json.loads(p.read_text())
        print(f"{p.name:16} map={len(d.get('map', {})):5} unsupported={len(d.get('unsupported', {})):5}")


if __name__ == "__main__":
    main()
