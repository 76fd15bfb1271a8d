/* Streams' creation and release: the model stream and the process-local object, on its
 * context's list (drv.lock). Below the submission path and the agent, which both release a
 * drained, destroyed stream. */
#include "sim/driver/drv.h"

#include <stdlib.h>

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
