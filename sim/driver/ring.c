/* The submission rings: each process publishes its launches and host completions into a ring
 * of its own in the shared segment (drv_publish, without the device lock), and whoever takes
 * the device lock next puts every process's published ops into the model in the order of
 * their times (drv_drain_submissions, from drv_lock). Calls nothing of sim/driver above the
 * state. */
#include "sim/driver/drv.h"

#include <errno.h>

/* Owner slot O's submissions are forgotten (a new process takes the slot, or its process is
 * gone and its ops with it). Under the lock. */
void drv_ring_reset(int o)
{
    struct drv_submit_ring *r = &drv.shm->rings[o];
    atomic_store_explicit(&r->head, atomic_load_explicit(&r->tail, memory_order_acquire),
                          memory_order_release);
}

/* One published submission of owner O, checked: the process may have written anything into
 * its ring, so the op must be one of its own, allocated and not yet submitted, on a stream of
 * its own. */
static int submission_ok(const struct sim_gpu *g, int o, const struct drv_submission *e)
{
    if (e->op < 0 || e->op >= SIM_MAX_OPS)
        return 0;
    const struct sim_op *op = &g->ops[e->op];
    return op->state == SIM_OP_ALLOC && op->owner == o && op->gen == e->gen &&
           op->stream >= 0 && op->stream < SIM_MAX_STREAMS && g->streams[op->stream].used &&
           g->streams[op->stream].owner == o && op->ctx >= 0 && op->ctx < SIM_MAX_CTXS &&
           g->ctxs[op->ctx].used && g->ctxs[op->ctx].owner == o;
}

/* Under the lock, first thing: every process's published launches go into the model in the
 * order of their times (each ring is in order already: a merge), the model advanced to each
 * time first, so an op enters the device when it was launched however late its ring is
 * drained; an op published after the model passed its time enters at the model's time (its
 * process was descheduled between the two: only its own launch is late). */
void drv_drain_submissions(void)
{
    struct sim_shm *shm = drv.shm;
    struct sim_gpu *g = &shm->gpu;
    uint32_t tail[SIM_MAX_OWNERS];
    int live[SIM_MAX_OWNERS], n = 0;
    for (int o = 0; o < SIM_MAX_OWNERS; o++) {
        if (!g->owners[o].used)
            continue;
        struct drv_submit_ring *r = &shm->rings[o];
        uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
        uint32_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (t - h > DRV_SUBMIT_RING) /* a tail no process of ours wrote: forget it */
            h = t, atomic_store_explicit(&r->head, t, memory_order_release);
        if (t != h) {
            tail[o] = t;
            live[n++] = o;
        }
    }
    while (n > 0) {
        int best = -1;
        int64_t bt = INT64_MAX;
        for (int k = 0; k < n; k++) {
            struct drv_submit_ring *r = &shm->rings[live[k]];
            const struct drv_submission *e =
                &r->e[atomic_load_explicit(&r->head, memory_order_relaxed) % DRV_SUBMIT_RING];
            if (e->t < bt) {
                bt = e->t;
                best = k;
            }
        }
        int o = live[best];
        struct drv_submit_ring *r = &shm->rings[o];
        uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
        struct drv_submission e = r->e[h % DRV_SUBMIT_RING]; /* read once */
        if (e.t > g->now && e.type <= SUB_HOST_DONE)
            sim_gpu_advance(g, e.t);
        int64_t at = e.t > g->now ? e.t : g->now;
        if (e.type == SUB_LAUNCH && submission_ok(g, o, &e)) {
            sim_gpu_submit(g, e.op, at);
            if (e.prio_override)
                g->ops[e.op].prio = e.prio;
        } else if (e.type == SUB_HOST_DONE && e.op >= 0 && e.op < SIM_MAX_OPS &&
                   g->ops[e.op].owner == o && g->ops[e.op].gen == e.gen) {
            sim_gpu_host_done(g, e.op, at); /* nothing unless it waits for its owner */
        } else if (e.type == SUB_WANT_OPS) {
            /* ops for its pool, shown in its ring (what its quota allows, an eighth of the
             * device's ops kept for the others) */
            for (int k = 0; k < e.prio && k < DRV_POOL_FILL && g->nfree > SIM_MAX_OPS / 8; k++) {
                int op = sim_gpu_op_alloc(g, o);
                if (op < 0)
                    break;
                sim_gpu_ring_push(g, o, op | SIM_RING_GRANT);
            }
        }
        atomic_store_explicit(&r->head, h + 1, memory_order_release);
        if (h + 1 == tail[o])
            live[best] = live[--n];
    }
}

int drv_publish(int type, int op, int32_t arg)
{
    struct drv_submit_ring *r = &drv.shm->rings[drv.owner];
    uint32_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&r->head, memory_order_acquire) >= DRV_SUBMIT_RING)
        return -ENOSPC;
    r->e[tail % DRV_SUBMIT_RING] = (struct drv_submission){
        .op = op,
        .gen = type == SUB_HOST_DONE ? (uint32_t)arg : 0,
        .t = drv_device_now(),
        .prio = arg,
        .type = (uint16_t)type};
    atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
    return 0;
}
