/* The calling thread's current context, kept by the shim so that the launch path need not ask
 * the driver: every call that can change it (set, push, pop, create, destroy, primary-context
 * release and reset) passes through here and either records the new context or forgets the
 * cached one, which the next launch then asks the driver for once. A context that goes takes
 * the shim's timing events in it first (shim/devtime.c). */
#include "shim/shim.h"

__thread uint64_t shim_ctx_cache __attribute__((tls_model("initial-exec")));
__thread int shim_ctx_known __attribute__((tls_model("initial-exec")));

uint64_t shim_current_ctx_slow(void)
{
    CUcontext c = NULL;
    if (shim_real_cuCtxGetCurrent && shim_real_cuCtxGetCurrent(&c) == CUDA_SUCCESS) {
        shim_ctx_cache = (uint64_t)(uintptr_t)c;
        shim_ctx_known = 1;
    }
    return (uint64_t)(uintptr_t)c;
}

static CUresult became(CUresult rc, CUcontext ctx)
{
    if (rc == CUDA_SUCCESS && ctx) {
        shim_ctx_cache = (uint64_t)(uintptr_t)ctx;
        shim_ctx_known = 1;
    } else {
        shim_ctx_known = 0;
    }
    return rc;
}

static CUresult forget(CUresult rc)
{
    shim_ctx_known = 0;
    return rc;
}

/* A context created through the shim (cuCtxCreate makes it current): forgotten like any
 * change, and named under POS_DEBUG, so a program that finds the driver by dlopen can be
 * seen to reach the shim with its context. */
static CUresult created(CUresult rc, CUcontext *pctx, const char *how)
{
    if (rc == CUDA_SUCCESS && shim_cfg.debug)
        shim_log("%s created context %p", how, (void *)*pctx);
    return forget(rc);
}

SHIM_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    return became(SHIM_REAL(cuCtxSetCurrent)(ctx), ctx);
}

SHIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    return became(SHIM_REAL(cuCtxPushCurrent_v2)(ctx), ctx);
}

SHIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    return forget(SHIM_REAL(cuCtxPopCurrent_v2)(pctx));
}

/* The first ABIs (before CUDA 4.0 and 11.0), which NVIDIA's driver still exports: the same
 * bookkeeping, so a program built against an old cuda.h is seen as well. */
SHIM_API CUresult cuCtxPushCurrent(CUcontext ctx)
{
    return became(SHIM_REAL(cuCtxPushCurrent)(ctx), ctx);
}

SHIM_API CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    return forget(SHIM_REAL(cuCtxPopCurrent)(pctx));
}

SHIM_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return created(SHIM_REAL(cuCtxCreate)(pctx, flags, dev), pctx, "cuCtxCreate");
}

SHIM_API CUresult cuCtxDestroy(CUcontext ctx)
{
    shim_devtime_forget((uint64_t)(uintptr_t)ctx);
    return forget(SHIM_REAL(cuCtxDestroy)(ctx));
}

SHIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    shim_devtime_forget(0); /* whichever context goes: the pools are made again as needed */
    return forget(SHIM_REAL(cuDevicePrimaryCtxRelease)(dev));
}

SHIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    shim_devtime_forget(0); /* whichever context goes: the pools are made again as needed */
    return forget(SHIM_REAL(cuDevicePrimaryCtxReset)(dev));
}

SHIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return created(SHIM_REAL(cuCtxCreate_v2)(pctx, flags, dev), pctx, "cuCtxCreate_v2");
}

SHIM_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n,
                                 unsigned int flags, CUdevice dev)
{
    return created(SHIM_REAL(cuCtxCreate_v3)(pctx, params, n, flags, dev), pctx, "cuCtxCreate_v3");
}

SHIM_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                 CUdevice dev)
{
    return created(SHIM_REAL(cuCtxCreate_v4)(pctx, params, flags, dev), pctx, "cuCtxCreate_v4");
}

SHIM_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    shim_devtime_forget((uint64_t)(uintptr_t)ctx);
    return forget(SHIM_REAL(cuCtxDestroy_v2)(ctx));
}

SHIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    shim_devtime_forget(0); /* whichever context goes: the pools are made again as needed */
    return forget(SHIM_REAL(cuDevicePrimaryCtxRelease_v2)(dev));
}

SHIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    shim_devtime_forget(0); /* whichever context goes: the pools are made again as needed */
    return forget(SHIM_REAL(cuDevicePrimaryCtxReset_v2)(dev));
}
