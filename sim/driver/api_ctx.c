/* Contexts: creation and destruction, the primary context, the entry points of each thread's
 * current-context stack (the stack itself is enter.c's), synchronisation, and the stream
 * priority range. */
#include "sim/driver/drv.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

/* The SMs a new context may use: in mps mode, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE as it is in
 * the environment now (read at every context's creation, as MPS does with per-context
 * partitioning; fixed for the context's life); 0 (all) otherwise, or when it is not a
 * number in (0, 100]. */
static uint32_t ctx_share_sms(void)
{
    const char *v = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    if (drv.g->p.mode != SIM_MODE_MPS || !v || !*v)
        return 0;
    char *end;
    errno = 0;
    double pct = strtod(v, &end);
    if (errno || *end || !isfinite(pct) || pct <= 0 || pct > 100) {
        drv_debug("ignoring CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='%s' (want a number in 0..100)", v);
        return 0;
    }
    uint32_t n = sim_gpu_sms_of_share(drv.g->p.num_sms, pct);
    drv_debug("context limited to %u of %u SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s)", n,
              drv.g->p.num_sms, v);
    return n < drv.g->p.num_sms ? n : 0;
}

static CUresult ctx_new(CUdevice dev, unsigned flags, int primary, struct drv_ctx **out)
{
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    struct drv_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->dev = dev;
    c->flags = flags;
    c->primary = primary;
    c->max_sms = ctx_share_sms();
    drv_mem_limit_read();
    /* what a context holds on the device from its creation (ctx_mem_bytes: its stacks,
     * heap, printf FIFO and the driver's state), given back at its destruction */
    if (drv_mem_charge(drv.g->p.ctx_mem_bytes, CHARGE_OVERHEAD) != CUDA_SUCCESS) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    drv_lock();
    c->slot = sim_gpu_ctx_add(drv.g, drv.owner);
    if (c->slot >= 0)
        sim_gpu_ctx_limit_sms(drv.g, c->slot, c->max_sms);
    drv_unlock();
    if (c->slot < 0) {
        drv_mem_uncharge(drv.g->p.ctx_mem_bytes, CHARGE_OVERHEAD);
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = drv_stream_create(c, STREAM_LEGACY, 0, 0, &c->legacy);
    if (rc == CUDA_SUCCESS) {
        c->handle = drv_handle_new(H_CTX, c);
        if (!c->handle)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc != CUDA_SUCCESS) {
        drv_lock();
        sim_gpu_ctx_remove(drv.g, c->slot, drv_device_now());
        drv_unlock();
        drv_mem_uncharge(drv.g->p.ctx_mem_bytes, CHARGE_OVERHEAD);
        free(c->legacy);
        free(c);
        return rc;
    }
    *out = c;
    return CUDA_SUCCESS;
}

CUresult drv_ctx_sync(struct drv_ctx *ctx)
{
    pthread_mutex_lock(&drv.lock);
    uint64_t target = ctx->submitted;
    pthread_mutex_unlock(&drv.lock);
    return drv_wait_counter(&ctx->completed, target, ctx);
}

#define CTX_GONE_MAX 8
static void (*ctx_gone[2][CTX_GONE_MAX])(struct drv_ctx *);
static int n_ctx_gone[2];

void drv_ctx_on_gone(int late, void (*fn)(struct drv_ctx *ctx))
{
    late = !!late;
    if (n_ctx_gone[late] < CTX_GONE_MAX) /* a fixed set of files, at load: never full */
        ctx_gone[late][n_ctx_gone[late]++] = fn;
}

static void ctx_gone_run(int late, struct drv_ctx *c)
{
    for (int i = 0; i < n_ctx_gone[late]; i++)
        ctx_gone[late][i](c);
}

/* Waits for the context, then takes it off the device. Its struct stays allocated (marked
 * destroyed) so that stale module, event and graph pointers never dangle, on the process's
 * list of retired contexts: kept on purpose, not leaked (a leak checker sees it reachable). */
static void ctx_teardown(struct drv_ctx *c)
{
    drv_ctx_sync(c);
    drv_handle_free(H_CTX, c->handle);
    drv_linear_ctx_gone(c);
    ctx_gone_run(0, c); /* arrays, opened IPC memory */
    pthread_mutex_lock(&drv.lock);
    c->destroyed = 1;
    c->retired_next = drv.retired;
    drv.retired = c;
    struct drv_stream *s = c->streams;
    c->streams = NULL;
    pthread_mutex_unlock(&drv.lock);
    while (s) {
        struct drv_stream *next = s->next_in_ctx;
        if (s->handle)
            drv_handle_free(H_STREAM, s->handle);
        free(s);
        s = next;
    }
    c->legacy = NULL;
    ctx_gone_run(1, c); /* its modules */
    drv_lock();
    sim_gpu_ctx_remove(drv.g, c->slot, drv_device_now());
    drv_unlock();
    drv_mem_uncharge(drv.g->p.ctx_mem_bytes, CHARGE_OVERHEAD);
}

API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult rc = drv_enter(pctx != NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_ctx *c;
    rc = ctx_new(dev, flags, 0, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (drv_ctx_push(c->handle) < 0) { /* the stack is full */
        ctx_teardown(c);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pctx = c->handle;
    return CUDA_SUCCESS;
}

API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                            CUdevice dev)
{
    /* Execution affinity and CIG parameters are accepted and have no effect here. */
    (void)params;
    return cuCtxCreate_v2(pctx, flags, dev);
}

API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult rc;
    struct drv_ctx *c = drv_enter_handle(1, H_CTX, ctx, &rc);
    if (!c)
        return rc;
    if (c->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    drv_ctx_forget(ctx);
    ctx_teardown(c);
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx != NULL && !drv_handle_get(H_CTX, ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    drv_ctx_set_top(ctx); /* NULL: pops */
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = drv_enter(pctx != NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    *pctx = drv_ctx_top();
    return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult rc;
    if (!drv_enter_handle(1, H_CTX, ctx, &rc))
        return rc;
    return drv_ctx_push(ctx) < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    CUcontext top;
    if (drv_ctx_pop(&top) < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx)
        *pctx = top;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *device)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(device != NULL, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    *device = c->dev;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    if (ctx == NULL)
        return cuCtxGetDevice(device);
    CUresult rc;
    struct drv_ctx *c = drv_enter_handle(device != NULL, H_CTX, ctx, &rc);
    if (!c)
        return rc;
    *device = c->dev;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetFlags(unsigned int *flags)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(flags != NULL, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetExecAffinity(CUexecAffinityParam *param, CUexecAffinityType type)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(param != NULL, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
        return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    param->type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    param->param.smCount.val = c->max_sms ? c->max_sms : drv.g->p.num_sms;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    CUresult rc = drv_enter(version != NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx && !drv_handle_get(H_CTX, ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020;
    return CUDA_SUCCESS;
}

static int capturing_in(struct drv_ctx *c)
{
    int any = 0;
    pthread_mutex_lock(&drv.lock);
    for (struct drv_stream *s = c->streams; s; s = s->next_in_ctx)
        any |= s->capture != NULL;
    pthread_mutex_unlock(&drv.lock);
    return any;
}

API CUresult cuCtxSynchronize(void)
{
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (capturing_in(c))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return drv_ctx_sync(c);
}

API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    if (ctx == NULL)
        return cuCtxSynchronize();
    CUresult rc;
    struct drv_ctx *c = drv_enter_handle(1, H_CTX, ctx, &rc);
    if (!c)
        return rc;
    if (capturing_in(c))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return drv_ctx_sync(c);
}

API CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return CUDA_SUCCESS;
}

/* ---- primary context -------------------------------------------------------------------- */

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = drv_enter_dev(pctx != NULL, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&drv.lock);
    if (!drv.primary) {
        pthread_mutex_unlock(&drv.lock);
        struct drv_ctx *c;
        rc = ctx_new(dev, 0, 1, &c);
        if (rc != CUDA_SUCCESS)
            return rc;
        pthread_mutex_lock(&drv.lock);
        if (drv.primary) { /* another thread won */
            pthread_mutex_unlock(&drv.lock);
            c->primary = 0;
            ctx_teardown(c);
            pthread_mutex_lock(&drv.lock);
        } else {
            drv.primary = c;
        }
    }
    drv.primary->primary_refs++;
    *pctx = drv.primary->handle;
    pthread_mutex_unlock(&drv.lock);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult rc = drv_enter_dev(1, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&drv.lock);
    struct drv_ctx *c = drv.primary;
    if (!c || c->primary_refs == 0) {
        pthread_mutex_unlock(&drv.lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    int last = --c->primary_refs == 0;
    if (last)
        drv.primary = NULL;
    pthread_mutex_unlock(&drv.lock);
    if (last)
        ctx_teardown(c);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = drv_enter_dev(flags && active, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&drv.lock);
    *active = drv.primary != NULL;
    *flags = drv.primary ? drv.primary->flags : 0;
    pthread_mutex_unlock(&drv.lock);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    CUresult rc = drv_enter_dev(1, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&drv.lock);
    if (drv.primary)
        drv.primary->flags = flags;
    pthread_mutex_unlock(&drv.lock);
    return CUDA_SUCCESS;
}
