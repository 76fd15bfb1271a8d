/* Streams and the one submission path every stream operation takes: resolving special stream
 * handles (legacy and per-thread default streams), the implicit ordering of the legacy stream
 * against blocking streams, and handing the op to the shared model. */
#include "sim/driver/drv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

CUresult drv_api_stream(CUstream h, int ptsz, struct drv_stream **out)
{
    CUresult rc = drv_check_init();
    return rc != CUDA_SUCCESS ? rc : drv_stream_resolve(h, ptsz, NULL, out);
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

/* ---- submission ------------------------------------------------------------------------ */

static int is_blocking(const struct drv_stream *s)
{
    return s->kind != STREAM_LEGACY && s->kind != STREAM_HIDDEN &&
           !(s->flags & CU_STREAM_NON_BLOCKING);
}

static void add_dep(struct drv_op_desc *d, int op, uint32_t gen)
{
    if (op == SIM_NONE || sim_gpu_op_is_done(drv.g, op, gen))
        return;
    for (int i = 0; i < d->ndeps; i++)
        if (d->deps[i] == op && d->dep_gens[i] == gen)
            return;
    d->deps[d->ndeps] = op;
    d->dep_gens[d->ndeps] = gen;
    d->ndeps++;
}

/* Puts one op into the model (under the lock). Returns the op or a negative errno. */
static int model_submit(struct drv_stream *s, const struct drv_op_desc *d, int64_t now)
{
    struct sim_gpu *g = drv.g;
    int op = sim_gpu_op_alloc(g, drv.owner);
    if (op < 0)
        return op;
    struct sim_op *o = &g->ops[op];
    o->kind = (uint8_t)d->kind;
    o->flags = (uint8_t)d->flags;
    o->ctx = (int16_t)s->ctx->slot;
    o->stream = s->slot;
    o->blocks = d->blocks ? d->blocks : 1;
    o->threads = d->threads ? d->threads : 1;
    o->smem = d->smem;
    if (d->effect != EFF_NONE)
        o->flags |= SIM_OPF_NOTIFY;
    o->flops = d->flops;
    o->bytes = d->bytes;
    for (int i = 0; i < d->ndeps; i++)
        sim_gpu_op_add_dep(g, op, d->deps[i], d->dep_gens[i]);
    struct drv_local_op *l = &drv.local[op];
    l->d = *d;
    l->stream = s;
    l->started = 0;
    sim_gpu_submit(g, op, now);
    if (d->prio_override)
        o->prio = d->prio;
    s->submitted++;
    s->ctx->submitted++;
    drv.submitted_all++;
    s->last_op = op;
    s->last_gen = o->gen;
    return op;
}

/* The legacy stream waits for every blocking stream of its context. More than SIM_MAX_DEPS
 * such streams take join markers on the legacy stream first. */
static int legacy_deps(struct drv_stream *s, struct drv_op_desc *d, int64_t now)
{
    struct drv_op_desc join;
    memset(&join, 0, sizeof join);
    join.kind = SIM_OP_MARKER;
    for (struct drv_stream *o = s->ctx->streams; o; o = o->next_in_ctx) {
        if (!is_blocking(o))
            continue;
        if (d->ndeps == SIM_MAX_DEPS) {
            join.ndeps = 0;
            for (int i = 0; i < d->ndeps; i++)
                add_dep(&join, d->deps[i], d->dep_gens[i]);
            int op = model_submit(s, &join, now);
            if (op < 0)
                return op;
            d->ndeps = 0;
        }
        add_dep(d, o->last_op, o->last_gen);
    }
    return 0;
}

CUresult drv_submit(struct drv_stream *s, struct drv_op_desc *d, struct drv_ticket *t)
{
    CUresult sticky = (CUresult)atomic_load(&s->ctx->sticky);
    if (sticky)
        return sticky;
    for (;;) {
        drv_lock();
        int64_t now = drv_device_now();
        struct drv_op_desc dd = *d;
        int rc = 0;
        if (s->kind == STREAM_LEGACY)
            rc = legacy_deps(s, &dd, now);
        else if (is_blocking(s) && s->ctx->legacy && dd.ndeps < SIM_MAX_DEPS)
            add_dep(&dd, s->ctx->legacy->last_op, s->ctx->legacy->last_gen);
        int was_idle = drv.g->streams[s->slot].head == SIM_NONE;
        int op = rc < 0 ? rc : model_submit(s, &dd, now);
        if (op == -EAGAIN || op == -ENOSPC) {
            /* the device's queues are full: wait for completions, as a launch blocks when
             * a GPU's push buffer is full */
            drv_unlock();
            drv_wait_for_room();
            continue;
        }
        if (op < 0) {
            drv_unlock();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        struct sim_owner *me = &drv.g->owners[drv.owner];
        const struct sim_op *o = &drv.g->ops[op];
        /* Wake the agent only if this op, the new tail of an idle stream, can end before the
         * agent means to look. On a busy stream the agent already looks at an earlier tail. */
        int kick = was_idle && me->planned_wake_ns > now + (int64_t)o->exec_ns;
        if (kick)
            me->planned_wake_ns = now;
        if (t) {
            t->op = op;
            t->gen = o->gen;
            t->seq = s->submitted;
        }
        drv_unlock();
        if (kick)
            drv_agent_kick();
        return CUDA_SUCCESS;
    }
}

CUresult drv_sync_all(void)
{
    drv_lock();
    uint64_t target = drv.submitted_all;
    drv_unlock();
    return drv_wait_counter(&drv.completed_all, target, NULL);
}
