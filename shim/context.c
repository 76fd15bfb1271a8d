/* The calling thread's current context, kept by the shim so that the launch path need not ask
 * the driver: every call that can change it (set, push, pop, create, destroy, primary-context
 * release and reset) passes through here and either records the new context or forgets the
 * cached one, which the next launch then asks the driver for once. A context that goes takes
 * the shim's timing events in it first (shim/devtime.c). A context's own device memory is
 * measured (under a limit, this process's own usage as NVML lists it, before and after its
 * creation; else, and as the bound, the driver's free memory before and after, where a context
 * of the same device is current to ask, NVML's for a device's first context under a limit) and
 * charged until it goes, with all that was charged in it (docs/memory.md). */
#include "pos/client_shm.h"
#include "shim/shim.h"

#include <pthread.h>

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

/* ---- context memory ------------------------------------------------------------------------ */

/* How a context's memory is measured: under a limit, this process's own usage on its device
 * as NVML lists it, before and after (shim_own_begin), bounded by the device-wide fall of free
 * memory; without that figure, the device-wide fall alone: the driver's free memory on its
 * device (a context of it current on the thread), or, for a device's first context under a
 * limit, NVML's. */
enum measure_by { MEASURE_NONE = 0, MEASURE_DRIVER, MEASURE_NVML };

struct ctx_measure {
    enum measure_by by;
    uint64_t before;
    struct shim_own own;
};

static enum measure_by wide_before(CUdevice dev, uint64_t *before);

/* Before a context is made on DEV. */
static void free_before(CUdevice dev, struct ctx_measure *m)
{
    m->before = 0;
    m->own.have = -1;
    m->by = wide_before(dev, &m->before);
    if (m->by != MEASURE_NONE)
        shim_own_begin(&m->own, (int)dev);
}

/* Free memory on DEV before a context is made, and how it was asked for. */
static enum measure_by wide_before(CUdevice dev, uint64_t *before)
{
    if (!shim_active)
        return MEASURE_NONE;
    if (shim_mem_driver_free((int)dev, before) == 0)
        return MEASURE_DRIVER;
    /* no context to ask: NVML's device-wide figure, whose start-up is paid only where the
     * charge matters to a limit */
    if (shim_mem_limit((int)dev) != POS_MEM_UNLIMITED &&
        shim_nvml_device_free((int)dev, before) == 0)
        return MEASURE_NVML;
    return MEASURE_NONE;
}

/* After CTX was made current on DEV: charges what this process's own usage grew by, or else
 * what the free memory fell by since M's, asked again the same way. Never more than the driver
 * (or NVML) says was taken from the whole device. */
static void charge_context(CUresult rc, const struct ctx_measure *m, CUdevice dev, CUcontext ctx)
{
    enum measure_by by = m->by;
    uint64_t before = m->before;
    uint64_t after = 0;
    if (rc != CUDA_SUCCESS || !shim_active || !ctx)
        return;
    int have_after = by == MEASURE_DRIVER ? shim_mem_driver_free((int)dev, &after) == 0
                     : by == MEASURE_NVML ? shim_nvml_device_free((int)dev, &after) == 0
                                          : 0;
    uint64_t wide = have_after && before > after ? before - after : 0, taken = wide;
    const char *own = by != MEASURE_NONE ? shim_own_charge(&m->own, (int)dev, wide, &taken) : NULL;
    if (shim_cfg.debug)
        shim_log("context %p on device %d: %llu bytes (%s%s)", (void *)ctx, (int)dev,
                 (unsigned long long)taken,
                 own                    ? own
                 : by == MEASURE_DRIVER ? "the driver's free memory before and after"
                 : by == MEASURE_NVML   ? "NVML's free memory before and after"
                                        : "not measured: no context or NVML to ask before it",
                 own ? ", bounded by the device's free memory" : "");
    shim_mem_charge((int)dev, taken, POS_MEM_CONTEXT, SHIM_MEM_CTX, (uint64_t)(uintptr_t)ctx,
                    (uint64_t)(uintptr_t)ctx);
}

/* A context went (destroyed, its primary released for the last time, reset). */
static CUresult ctx_gone(CUresult rc, CUcontext ctx)
{
    if (rc == CUDA_SUCCESS && shim_active)
        shim_mem_ctx_gone((uint64_t)(uintptr_t)ctx);
    return rc;
}

/* The primary contexts the process retained through the shim, by device, and how often. */
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary_ctx[POS_MEM_MAX_DEVICES];
static uint32_t primary_refs[POS_MEM_MAX_DEVICES];

SHIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    __typeof__(&cuDevicePrimaryCtxRetain) real = SHIM_REAL(cuDevicePrimaryCtxRetain);
    unsigned flags = 0;
    int active = 1;
    struct ctx_measure m = {.by = MEASURE_NONE, .own.have = -1};
    if (shim_active && pctx && dev >= 0 && dev < POS_MEM_MAX_DEVICES &&
        shim_real_cuDevicePrimaryCtxGetState &&
        shim_real_cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active)
        free_before(dev, &m);
    CUresult rc = real(pctx, dev);
    if (rc != CUDA_SUCCESS || !shim_active || !pctx || dev < 0 || dev >= POS_MEM_MAX_DEVICES)
        return rc;
    pthread_mutex_lock(&primary_lock);
    int first = primary_refs[dev]++ == 0 || primary_ctx[dev] != *pctx;
    primary_ctx[dev] = *pctx;
    pthread_mutex_unlock(&primary_lock);
    if (first && !active) {
        /* the retain made it: measured after it is current somewhere we can ask */
        CUcontext prev = NULL;
        int pushed = shim_real_cuCtxPushCurrent_v2 && shim_real_cuCtxPushCurrent_v2(*pctx) ==
                                                          CUDA_SUCCESS;
        charge_context(rc, &m, dev, *pctx);
        if (pushed)
            shim_real_cuCtxPopCurrent_v2(&prev);
    }
    return rc;
}

/* A release of DEV's primary context through the shim: the last one takes its memory. */
static CUresult primary_released(CUresult rc, CUdevice dev, int reset)
{
    if (rc != CUDA_SUCCESS || !shim_active || dev < 0 || dev >= POS_MEM_MAX_DEVICES)
        return rc;
    pthread_mutex_lock(&primary_lock);
    CUcontext ctx = primary_ctx[dev];
    if (primary_refs[dev] > 0)
        primary_refs[dev]--;
    int gone = reset || primary_refs[dev] == 0;
    if (gone && !reset)
        primary_ctx[dev] = NULL;
    pthread_mutex_unlock(&primary_lock);
    return gone && ctx ? ctx_gone(rc, ctx) : rc;
}

/* A context created through the shim (cuCtxCreate makes it current): forgotten like any
 * change, and named under POS_DEBUG, so a program that finds the driver by dlopen can be
 * seen to reach the shim with its context. */
static CUresult created(CUresult rc, CUcontext *pctx, const char *how, CUdevice dev,
                        const struct ctx_measure *m)
{
    if (rc == CUDA_SUCCESS && shim_cfg.debug)
        shim_log("%s created context %p", how, (void *)*pctx);
    forget(rc);
    if (rc == CUDA_SUCCESS && pctx)
        charge_context(rc, m, dev, *pctx);
    return rc;
}

/* What a cuCtxCreate needs before the driver's: the free memory it may measure from. */
#define CREATE_BEFORE() struct ctx_measure m; free_before(dev, &m)

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
    CREATE_BEFORE();
    return created(SHIM_REAL(cuCtxCreate)(pctx, flags, dev), pctx, "cuCtxCreate", dev, &m);
}

SHIM_API CUresult cuCtxDestroy(CUcontext ctx)
{
    shim_devtime_forget((uint64_t)(uintptr_t)ctx);
    return ctx_gone(forget(SHIM_REAL(cuCtxDestroy)(ctx)), ctx);
}

SHIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    shim_devtime_forget(0); /* whichever context goes: the pools are made again as needed */
    return primary_released(forget(SHIM_REAL(cuDevicePrimaryCtxRelease)(dev)), dev, 0);
}

SHIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    shim_devtime_forget(0); /* whichever context goes: the pools are made again as needed */
    return primary_released(forget(SHIM_REAL(cuDevicePrimaryCtxReset)(dev)), dev, 1);
}

SHIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CREATE_BEFORE();
    return created(SHIM_REAL(cuCtxCreate_v2)(pctx, flags, dev), pctx, "cuCtxCreate_v2", dev, &m);
}

SHIM_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n,
                                 unsigned int flags, CUdevice dev)
{
    CREATE_BEFORE();
    return created(SHIM_REAL(cuCtxCreate_v3)(pctx, params, n, flags, dev), pctx, "cuCtxCreate_v3",
                   dev, &m);
}

SHIM_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                 CUdevice dev)
{
    CREATE_BEFORE();
    return created(SHIM_REAL(cuCtxCreate_v4)(pctx, params, flags, dev), pctx, "cuCtxCreate_v4",
                   dev, &m);
}

SHIM_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    shim_devtime_forget((uint64_t)(uintptr_t)ctx);
    return ctx_gone(forget(SHIM_REAL(cuCtxDestroy_v2)(ctx)), ctx);
}

SHIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    shim_devtime_forget(0); /* whichever context goes: the pools are made again as needed */
    return primary_released(forget(SHIM_REAL(cuDevicePrimaryCtxRelease_v2)(dev)), dev, 0);
}

SHIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    shim_devtime_forget(0); /* whichever context goes: the pools are made again as needed */
    return primary_released(forget(SHIM_REAL(cuDevicePrimaryCtxReset_v2)(dev)), dev, 1);
}
