/* The one table of driver entry points the shim intercepts. Each row: the exported
 * (versioned) symbol, its base name as cuGetProcAddress is asked for it, the first CUDA
 * version with that ABI (cudaTypedefs.h), and whether it is the per-thread-default-stream
 * form. The exported wrappers, the dlsym interposer, cuGetProcAddress and the consistency
 * test are all driven from it: intercepting a new symbol is one row plus its wrapper. */
#ifndef POS_SHIM_SYMBOLS_H
#define POS_SHIM_SYMBOLS_H

/* X(symbol, base, version, ptsz) */
#define SHIM_INTERCEPTED(X)                                                                        \
    X(cuInit, cuInit, 2000, 0)                                                                     \
    X(cuGetProcAddress, cuGetProcAddress, 11030, 0)                                                \
    X(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0)                                             \
    X(cuLaunchKernel, cuLaunchKernel, 4000, 0)                                                     \
    X(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, 1)                                                \
    X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0)                                                \
    X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, 1)                                           \
    X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0)                               \
    X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, 1)                          \
    X(cuGraphLaunch, cuGraphLaunch, 10000, 0)                                                      \
    X(cuGraphLaunch_ptsz, cuGraphLaunch, 10000, 1)                                                 \
    X(cuLaunchHostFunc, cuLaunchHostFunc, 10000, 0)                                                \
    X(cuLaunchHostFunc_ptsz, cuLaunchHostFunc, 10000, 1)                                           \
    X(cuModuleGetFunction, cuModuleGetFunction, 2000, 0)                                           \
    X(cuLibraryGetKernel, cuLibraryGetKernel, 12000, 0)                                            \
    X(cuKernelGetFunction, cuKernelGetFunction, 12000, 0)                                          \
    X(cuStreamSynchronize, cuStreamSynchronize, 2000, 0)                                           \
    X(cuStreamSynchronize_ptsz, cuStreamSynchronize, 7000, 1)                                      \
    X(cuCtxSynchronize, cuCtxSynchronize, 2000, 0)                                                 \
    X(cuCtxSynchronize_v2, cuCtxSynchronize, 13000, 0)                                             \
    X(cuEventSynchronize, cuEventSynchronize, 2000, 0)                                             \
    X(cuEventQuery, cuEventQuery, 2000, 0)                                                         \
    X(cuEventRecord, cuEventRecord, 2000, 0)                                                       \
    X(cuEventRecord_ptsz, cuEventRecord, 7000, 1)                                                  \
    X(cuEventRecordWithFlags, cuEventRecordWithFlags, 11010, 0)                                    \
    X(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags, 11010, 1)                               \
    X(cuEventDestroy, cuEventDestroy, 2000, 0)                                                     \
    X(cuEventDestroy_v2, cuEventDestroy, 4000, 0)                                                  \
    X(cuStreamQuery, cuStreamQuery, 2000, 0)                                                       \
    X(cuStreamQuery_ptsz, cuStreamQuery, 7000, 1)                                                  \
    X(cuStreamBeginCapture, cuStreamBeginCapture, 10000, 0)                                        \
    X(cuStreamBeginCapture_ptsz, cuStreamBeginCapture, 10000, 1)                                   \
    X(cuStreamBeginCapture_v2, cuStreamBeginCapture, 10010, 0)                                     \
    X(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture, 10010, 1)                                \
    X(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph, 12030, 0)                          \
    X(cuStreamBeginCaptureToGraph_ptsz, cuStreamBeginCaptureToGraph, 12030, 1)                     \
    X(cuStreamEndCapture, cuStreamEndCapture, 10000, 0)                                            \
    X(cuStreamEndCapture_ptsz, cuStreamEndCapture, 10000, 1)                                       \
    X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, 0)                                                   \
    X(cuCtxPushCurrent, cuCtxPushCurrent, 2000, 0)                                                 \
    X(cuCtxPushCurrent_v2, cuCtxPushCurrent, 4000, 0)                                              \
    X(cuCtxPopCurrent, cuCtxPopCurrent, 2000, 0)                                                   \
    X(cuCtxPopCurrent_v2, cuCtxPopCurrent, 4000, 0)                                                \
    X(cuCtxCreate, cuCtxCreate, 2000, 0)                                                           \
    X(cuCtxCreate_v2, cuCtxCreate, 3020, 0)                                                        \
    X(cuCtxCreate_v3, cuCtxCreate, 11040, 0)                                                       \
    X(cuCtxCreate_v4, cuCtxCreate, 12050, 0)                                                       \
    X(cuCtxDestroy, cuCtxDestroy, 2000, 0)                                                         \
    X(cuCtxDestroy_v2, cuCtxDestroy, 4000, 0)                                                      \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0)                               \
    X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, 0)                           \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000, 0)                                   \
    X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, 11000, 0)                               \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0)                                 \
    X(cuMemGetInfo, cuMemGetInfo, 2000, 0)                                                         \
    X(cuMemGetInfo_v2, cuMemGetInfo, 3020, 0)                                                      \
    X(cuMemAlloc, cuMemAlloc, 2000, 0)                                                             \
    X(cuMemAlloc_v2, cuMemAlloc, 3020, 0)                                                          \
    X(cuMemAllocPitch, cuMemAllocPitch, 2000, 0)                                                   \
    X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0)                                                \
    X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                                               \
    X(cuMemFree, cuMemFree, 2000, 0)                                                               \
    X(cuMemFree_v2, cuMemFree, 3020, 0)                                                            \
    X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)                                                  \
    X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1)                                             \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)                                  \
    X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1)                             \
    X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)                                                    \
    X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1)                                               \
    X(cuMemPoolCreate, cuMemPoolCreate, 11020, 0)                                                  \
    X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, 0)                                                \
    X(cuMemPoolImportPointer, cuMemPoolImportPointer, 11020, 0)                                    \
    X(cuMemCreate, cuMemCreate, 10020, 0)                                                          \
    X(cuMemRelease, cuMemRelease, 10020, 0)                                                        \
    X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, 0)                          \
    X(cuMemMap, cuMemMap, 10020, 0)                                                                \
    X(cuMemUnmap, cuMemUnmap, 10020, 0)                                                            \
    X(cuArrayCreate, cuArrayCreate, 2000, 0)                                                       \
    X(cuArrayCreate_v2, cuArrayCreate, 3020, 0)                                                    \
    X(cuArray3DCreate, cuArray3DCreate, 2000, 0)                                                   \
    X(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0)                                                \
    X(cuArrayDestroy, cuArrayDestroy, 2000, 0)                                                     \
    X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0)                                     \
    X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0)                                   \
    X(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 4010, 0)                                             \
    X(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, 11000, 0)                                         \
    X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, 0)                                           \
    X(cuModuleLoad, cuModuleLoad, 2000, 0)                                                         \
    X(cuModuleLoadData, cuModuleLoadData, 2000, 0)                                                 \
    X(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010, 0)                                             \
    X(cuModuleLoadFatBinary, cuModuleLoadFatBinary, 2000, 0)                                       \
    X(cuModuleUnload, cuModuleUnload, 2000, 0)                                                     \
    X(cuLibraryLoadData, cuLibraryLoadData, 12000, 0)                                              \
    X(cuLibraryLoadFromFile, cuLibraryLoadFromFile, 12000, 0)                                      \
    X(cuLibraryUnload, cuLibraryUnload, 12000, 0)

/* Driver functions the shim itself calls and does not intercept. */
#define SHIM_HELPERS(X)                                                                            \
    X(cuStreamWriteValue32_v2)                                                                     \
    X(cuStreamWriteValue32_v2_ptsz)                                                                \
    X(cuStreamIsCapturing)                                                                         \
    X(cuStreamIsCapturing_ptsz)                                                                    \
    X(cuMemHostRegister_v2)                                                                        \
    X(cuMemHostGetDevicePointer_v2)                                                                \
    X(cuCtxGetCurrent)                                                                             \
    X(cuFuncGetName)                                                                               \
    X(cuKernelGetName)                                                                             \
    X(cuEventCreate)                                                                               \
    X(cuEventElapsedTime)                                                                          \
    X(cuEventElapsedTime_v2)                                                                       \
    X(cuStreamCreate)                                                                              \
    X(cuStreamDestroy_v2)                                                                          \
    X(cuCtxGetDevice)                                                                              \
    X(cuDeviceGet)                                                                                 \
    X(cuDeviceGetCount)                                                                            \
    X(cuDeviceGetUuid_v2)                                                                          \
    X(cuDeviceTotalMem_v2)                                                                         \
    X(cuDevicePrimaryCtxGetState)                                                                  \
    X(cuMemGetAddressRange_v2)

#endif
