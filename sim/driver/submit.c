/* The one submission path every stream operation takes: the implicit ordering of the legacy
 * stream against blocking streams, and handing the op to the shared model. */
#include "sim/driver/drv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

/* Fills an op of this process's pool with D on S and publishes it in the process's ring, at
 * device time NOW (under drv.lock; the device lock is not needed: the op is this process's
 * alone until it is published, and the next holder of the device lock puts it into the
 * model). *SOLO is the least time it can take once startable. Returns the op, -EAGAIN when
 * the pool is empty, -ENOSPC when the ring is full. */
static int publish_op(struct drv_stream *s, const struct drv_op_desc *d, int64_t now,
                      double *solo)
{
    struct sim_gpu *g = drv.g;
    struct drv_submit_ring *r = &drv.shm->rings[drv.owner];
    uint32_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&r->head, memory_order_acquire) >= DRV_SUBMIT_RING)
        return -ENOSPC;
    if (!drv.npool)
        return -EAGAIN;
    int op = drv.pool[--drv.npool];
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
    o->ndeps = 0;
    for (int i = 0; i < d->ndeps; i++)
        sim_gpu_op_add_dep(g, op, d->deps[i], d->dep_gens[i]);
    *solo = sim_gpu_op_solo_ns(g, o);
    struct drv_local_op *l = &drv.local[op];
    l->d = *d;
    l->stream = s;
    l->started = 0;
    r->e[tail % DRV_SUBMIT_RING] = (struct drv_submission){
        .op = op, .gen = o->gen, .t = now, .prio = d->prio,
        .prio_override = (uint16_t)(d->prio_override != 0), .type = SUB_LAUNCH};
    atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
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
            double solo;
            int op = publish_op(s, &join, now, &solo);
            if (op < 0)
                return op;
            d->ndeps = 0;
        }
        add_dep(d, o->last_op, o->last_gen);
    }
    return 0;
}

/* A launch found the pool empty (the agent keeps it filled; a burst can outrun it): asks the
 * device for ops and waits a moment for them (called with drv.lock, which it releases while
 * it waits). Returns 1 when the pool has ops again. */
static int pool_refill(void)
{
    if (!drv.want_ops &&
        drv_publish(SUB_WANT_OPS, -1, (int32_t)DRV_POOL_FILL) == 0)
        drv.want_ops = 1;
    drv_server_kick();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&drv.cond, &drv.lock, &ts);
    return drv.npool > 0;
}

void drv_host_fn_desc(struct drv_op_desc *d, CUhostFn fn, void *data)
{
    memset(d, 0, sizeof *d);
    d->kind = SIM_OP_HOST;
    d->effect = EFF_HOSTFN;
    d->u.host.fn = fn;
    d->u.host.data = data;
}

CUresult drv_submit(struct drv_stream *s, struct drv_op_desc *d, struct drv_ticket *t)
{
    CUresult sticky = (CUresult)atomic_load(&s->ctx->sticky);
    if (sticky)
        return sticky;
    for (;;) {
        pthread_mutex_lock(&drv.lock);
        int64_t now = drv_device_now();
        struct drv_op_desc dd = *d;
        int rc = 0;
        if (s->kind == STREAM_LEGACY)
            rc = legacy_deps(s, &dd, now);
        else if (is_blocking(s) && s->ctx->legacy && dd.ndeps < SIM_MAX_DEPS)
            add_dep(&dd, s->ctx->legacy->last_op, s->ctx->legacy->last_gen);
        uint64_t before = s->submitted;
        double solo = 0;
        int op = rc < 0 ? rc : publish_op(s, &dd, now, &solo);
        if (op == -EAGAIN) {
            /* no op ready: the device grants more (or, at its quota or with the device's
             * ops used up, once completions come back) */
            pool_refill();
            pthread_mutex_unlock(&drv.lock);
            continue;
        }
        if (op == -ENOSPC) {
            /* its ring is full: the agent drains it as it takes the device lock */
            pthread_mutex_unlock(&drv.lock);
            drv_wait_for_room();
            continue;
        }
        if (op < 0) {
            pthread_mutex_unlock(&drv.lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        /* Published first, then the stream's completions read (the agent counts them, then
         * reads the ring: one of the two sees the other's write), so a stream whose last op
         * the agent is just reaping is either seen idle here, or the agent sees this op. */
        atomic_thread_fence(memory_order_seq_cst);
        int was_idle = atomic_load(&s->completed) >= before;
        struct drv_server *sv = &drv.shm->server;
        /* Wake the device process only if this op, the new tail of an idle stream, can end
         * before it means to look: it drains the ring and sees the op then. On a busy stream
         * it already looks at an earlier tail. (A plain read and write of its plan: a lost
         * update only costs a wake-up, which the kick brings anyway.) */
        int kick = was_idle && sv->planned_ns > now + (int64_t)solo;
        if (kick)
            sv->planned_ns = now;
        if (t) {
            t->op = op;
            t->gen = drv.g->ops[op].gen;
            t->seq = s->submitted;
        }
        pthread_mutex_unlock(&drv.lock);
        if (kick)
            drv_server_kick();
        return CUDA_SUCCESS;
    }
}

CUresult drv_sync_all(void)
{
    pthread_mutex_lock(&drv.lock);
    uint64_t target = drv.submitted_all;
    pthread_mutex_unlock(&drv.lock);
    return drv_wait_counter(&drv.completed_all, target, NULL);
}
