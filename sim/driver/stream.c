/* Streams: creation and release (the model stream and the process-local object, on its
 * context's list), and resolving a stream handle as an entry point sees it (the legacy and
 * per-thread default streams). Below the submission path and the agent, which both release a
 * drained, destroyed stream. */
#include "sim/driver/drv.h"

#include <stdlib.h>

/* ---- per-thread default streams -------------------------------------------------------- */

#define PT_MAX 8

struct pt_slot {
    struct drv_ctx *ctx;
    struct drv_stream *s;
};

static __thread struct pt_slot pt_streams[PT_MAX];
static pthread_key_t pt_key;
static pthread_once_t pt_once = PTHREAD_ONCE_INIT;

static void pt_destroy(void *arg)
{
    struct pt_slot *slots = arg;
    for (int i = 0; i < PT_MAX; i++) {
        struct drv_stream *s = slots[i].s;
        if (!s)
            continue;
        pthread_mutex_lock(&drv.lock);
        if (!s->ctx->destroyed) {
            s->destroyed = 1;
            if (atomic_load(&s->completed) >= s->submitted)
                drv_stream_release(s);
        }
        pthread_mutex_unlock(&drv.lock);
        slots[i].s = NULL;
    }
}

static void pt_key_init(void)
{
    pthread_key_create(&pt_key, pt_destroy);
}

static CUresult per_thread_stream(struct drv_ctx *ctx, struct drv_stream **out)
{
    int freeslot = -1;
    for (int i = 0; i < PT_MAX; i++) {
        if (pt_streams[i].s && pt_streams[i].ctx == ctx && !pt_streams[i].s->destroyed) {
            *out = pt_streams[i].s;
            return CUDA_SUCCESS;
        }
        if ((!pt_streams[i].s || pt_streams[i].ctx->destroyed) && freeslot < 0)
            freeslot = i;
    }
    if (freeslot < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct drv_stream *s;
    CUresult rc = drv_stream_create(ctx, STREAM_PER_THREAD, 0, 0, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_once(&pt_once, pt_key_init);
    pthread_setspecific(pt_key, pt_streams);
    pt_streams[freeslot].ctx = ctx;
    pt_streams[freeslot].s = s;
    *out = s;
    return CUDA_SUCCESS;
}

CUresult drv_stream_resolve(CUstream h, int ptsz, struct drv_ctx *ctx, struct drv_stream **out)
{
    if (!ctx && (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)) {
        CUresult rc = drv_current_ctx(&ctx);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    if (h == NULL)
        h = ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (h == CU_STREAM_LEGACY) {
        *out = ctx->legacy;
        return CUDA_SUCCESS;
    }
    if (h == CU_STREAM_PER_THREAD)
        return per_thread_stream(ctx, out);
    struct drv_stream *s = drv_handle_get(H_STREAM, h);
    if (!s || s->destroyed)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = s;
    return CUDA_SUCCESS;
}

/* ---- creation and release ----------------------------------------------------------------- */

CUresult drv_stream_create(struct drv_ctx *ctx, int kind, unsigned flags, int prio,
                           struct drv_stream **out)
{
    struct drv_stream *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->ctx = ctx;
    s->kind = kind;
    s->flags = flags;
    s->prio = prio;
    s->last_op = SIM_NONE;
    s->capture_last = -1;
    drv_lock();
    s->slot = sim_gpu_stream_add(drv.g, drv.owner, ctx->slot, prio);
    drv_unlock();
    if (s->slot < 0) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (kind == STREAM_USER) {
        s->handle = drv_handle_new(H_STREAM, s);
        if (!s->handle) {
            drv_lock();
            sim_gpu_stream_remove(drv.g, s->slot, drv_device_now());
            drv_unlock();
            free(s);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_lock(&drv.lock);
    s->next_in_ctx = ctx->streams;
    ctx->streams = s;
    pthread_mutex_unlock(&drv.lock);
    *out = s;
    return CUDA_SUCCESS;
}

void drv_stream_release(struct drv_stream *s)
{
    struct drv_stream **pp = &s->ctx->streams;
    while (*pp && *pp != s)
        pp = &(*pp)->next_in_ctx;
    if (!*pp)
        return; /* released already */
    *pp = s->next_in_ctx;
    drv_lock();
    sim_gpu_stream_remove(drv.g, s->slot, drv_device_now());
    drv_unlock();
    free(s);
}
