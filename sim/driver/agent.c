/* The device agent: one thread per process that plays the GPU's part in real time. It
 * advances the shared model to the present, reaps this process's completed ops, applies
 * their effects on simulated memory in device order (built-in kernels, copies, value writes,
 * event times), runs host functions, polls stream waits, wakes other processes whose ops the
 * model now finishes sooner, and sleeps until the model's next event for this process. */
#include "sim/driver/drv.h"

#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sim/twin_math.h"

#define REAP_BATCH   256
#define HOST_BATCH   64
#define WAIT_POLL_NS 20000 /* wall ns between checks of a stream wait on memory */

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static _Atomic uint32_t *owner_word(int owner)
{
    return (_Atomic uint32_t *)&drv.g->owners[owner].wake_word;
}

static void wake_owner(int owner)
{
    atomic_fetch_add(owner_word(owner), 1);
    futex(owner_word(owner), FUTEX_WAKE, 1, NULL);
}

void drv_agent_kick(void)
{
    if (drv.owner >= 0)
        wake_owner(drv.owner);
}

/* ---- effects --------------------------------------------------------------------------- */

static int dev_range_ok(uint64_t p, size_t n)
{
    return drv_mem_lookup((const void *)(uintptr_t)p, n) != 0;
}

static CUresult run_twin(const struct drv_op_desc *d)
{
    const uint64_t *a = d->u.twin.args;
    float f;
    switch (d->u.twin.twin) {
    case SIM_TWIN_VECTOR_ADD: {
        uint32_t n = (uint32_t)a[3];
        if (!dev_range_ok(a[0], 4ull * n) || !dev_range_ok(a[1], 4ull * n) ||
            !dev_range_ok(a[2], 4ull * n))
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        pos_sim_vector_add_f32((const float *)(uintptr_t)a[0], (const float *)(uintptr_t)a[1],
                               (float *)(uintptr_t)a[2], n);
        return CUDA_SUCCESS;
    }
    case SIM_TWIN_FILL:
    case SIM_TWIN_SCALE: {
        uint32_t n = (uint32_t)a[2];
        uint32_t bits = (uint32_t)a[1];
        memcpy(&f, &bits, sizeof f);
        if (!dev_range_ok(a[0], 4ull * n))
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        if (d->u.twin.twin == SIM_TWIN_FILL)
            pos_sim_fill_f32((float *)(uintptr_t)a[0], f, n);
        else
            pos_sim_scale_f32((float *)(uintptr_t)a[0], f, n);
        return CUDA_SUCCESS;
    }
    case SIM_TWIN_CHECKSUM: {
        uint32_t n = (uint32_t)a[1];
        if (!dev_range_ok(a[0], 4ull * n) || !dev_range_ok(a[2], 8))
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        uint64_t h = pos_sim_checksum_f32((const float *)(uintptr_t)a[0], n);
        memcpy((void *)(uintptr_t)a[2], &h, sizeof h);
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_SUCCESS;
    }
}

CUresult drv_apply_effect(struct drv_op_desc *d)
{
    switch (d->effect) {
    case EFF_TWIN:
        return run_twin(d);
    case EFF_COPY:
        memmove(d->u.copy.dst, d->u.copy.src, d->u.copy.n);
        return CUDA_SUCCESS;
    case EFF_COPY_STAGED:
        memcpy(d->u.copy.dst, d->u.copy.src, d->u.copy.n);
        free((void *)d->u.copy.src);
        d->u.copy.src = NULL;
        return CUDA_SUCCESS;
    case EFF_MEMSET8:
        memset(d->u.set.dst, (int)(d->u.set.value & 0xff), d->u.set.n);
        return CUDA_SUCCESS;
    case EFF_MEMSET16: {
        uint16_t v = (uint16_t)d->u.set.value, *p = d->u.set.dst;
        for (size_t i = 0; i < d->u.set.n; i++)
            p[i] = v;
        return CUDA_SUCCESS;
    }
    case EFF_MEMSET32: {
        uint32_t v = (uint32_t)d->u.set.value, *p = d->u.set.dst;
        for (size_t i = 0; i < d->u.set.n; i++)
            p[i] = v;
        return CUDA_SUCCESS;
    }
    case EFF_WRITE32:
        atomic_store((_Atomic uint32_t *)d->u.val.addr, (uint32_t)d->u.val.value);
        return CUDA_SUCCESS;
    case EFF_WRITE64:
        atomic_store((_Atomic uint64_t *)d->u.val.addr, d->u.val.value);
        return CUDA_SUCCESS;
    default:
        return CUDA_SUCCESS;
    }
}

/* True when a stream wait on memory is satisfied (CU_STREAM_WAIT_VALUE_* semantics). */
static int wait_satisfied(const struct drv_op_desc *d)
{
    uint64_t have, want = d->u.val.value;
    if (d->effect == EFF_WAIT32)
        have = atomic_load((_Atomic uint32_t *)d->u.val.addr);
    else
        have = atomic_load((_Atomic uint64_t *)d->u.val.addr);
    if (d->effect == EFF_WAIT32)
        want &= 0xffffffffu;
    switch (d->u.val.flags & 0xf) {
    case CU_STREAM_WAIT_VALUE_GEQ:
        return d->effect == EFF_WAIT32 ? (int32_t)((uint32_t)have - (uint32_t)want) >= 0
                                       : (int64_t)(have - want) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
        return have == want;
    case CU_STREAM_WAIT_VALUE_AND:
        return (have & want) != 0;
    case CU_STREAM_WAIT_VALUE_NOR:
        return ~(have | want) != 0;
    default:
        return 1;
    }
}

/* ---- completion ------------------------------------------------------------------------ */

struct reaped {
    struct drv_local_op l;
    int64_t end_dev;
};

static void complete_event(struct drv_event *ev, uint64_t record, int64_t end_dev)
{
    pthread_mutex_lock(&drv.lock);
    if (record > atomic_load(&ev->done_rec)) {
        ev->time_ns = drv_wall_of_device(end_dev);
        atomic_store(&ev->done_rec, record);
    }
    int release = ev->handle == NULL && atomic_load(&ev->done_rec) >= ev->records;
    pthread_mutex_unlock(&drv.lock);
    if (release)
        free(ev);
}

/* POS_SIM_TRACE=PATH ("%p" becomes the pid): one line per kernel this process ran, in the
 * order each stream completed them, with the device's own end time on the host's clock
 * (CLOCK_MONOTONIC ns) and the time the agent made it visible to the host (its effects
 * applied, the stream's count moved: a real GPU does that within a few us of the end, the
 * agent as soon as its timer wakes it): "kernel STREAM END_NS SEEN_NS". What the simulated
 * device knows exactly, to check what a tool observing it (the shim's collector) learns.
 * Written by the agent alone. */
static FILE *trace_file(void)
{
    static int opened;
    static FILE *f;
    if (opened)
        return f;
    opened = 1;
    const char *v = getenv("POS_SIM_TRACE");
    if (!v || !*v)
        return NULL;
    char path[4096];
    drv_path_expand(v, path, sizeof path);
    f = fopen(path, "w");
    if (!f)
        drv_debug("cannot write POS_SIM_TRACE=%s", path);
    return f;
}

static void trace_op(const struct reaped *r)
{
    FILE *f = trace_file();
    if (f && r->l.d.kind == SIM_OP_KERNEL)
        fprintf(f, "kernel %p %lld %lld\n", (void *)r->l.stream,
                (long long)drv_wall_of_device(r->end_dev), (long long)drv_mono_ns());
}

static void finish_op(struct reaped *r)
{
    struct drv_stream *s = r->l.stream;
    trace_op(r);
    CUresult rc = CUDA_SUCCESS;
    if (r->l.d.effect == EFF_EVENT)
        complete_event(r->l.d.u.event.ev, r->l.d.u.event.record, r->end_dev);
    else if (s && !atomic_load(&s->ctx->sticky))
        rc = drv_apply_effect(&r->l.d);
    else if (r->l.d.effect == EFF_COPY_STAGED)
        free((void *)r->l.d.u.copy.src);
    if (!s)
        return;
    if (rc != CUDA_SUCCESS) {
        int zero = 0;
        atomic_compare_exchange_strong(&s->ctx->sticky, &zero, (int)rc);
    }
    /* Counting the completion and deciding to free a destroyed stream are one step under
     * drv.lock, as are the destroyers' checks (and a context's teardown, which waits for the
     * context's count): exactly one frees a stream, and only after its last op is done. */
    pthread_mutex_lock(&drv.lock);
    uint64_t done = atomic_fetch_add_explicit(&s->completed, 1, memory_order_release) + 1;
    struct drv_ctx *ctx = s->ctx;
    if (s->destroyed && done >= s->submitted)
        drv_stream_release(s);
    atomic_fetch_add_explicit(&ctx->completed, 1, memory_order_release);
    atomic_fetch_add_explicit(&drv.completed_all, 1, memory_order_release);
    pthread_mutex_unlock(&drv.lock);
}

static uint64_t drv_submitted_now(void)
{
    pthread_mutex_lock(&drv.lock);
    uint64_t v = drv.submitted_all;
    pthread_mutex_unlock(&drv.lock);
    return v;
}

struct host_call {
    int op;
    uint32_t gen;
    CUhostFn fn;
    void *data;
};

static void sleep_until(_Atomic uint32_t *word, uint32_t seen, int64_t wall_deadline)
{
    if (wall_deadline == INT64_MAX) {
        futex(word, FUTEX_WAIT, seen, NULL);
        return;
    }
    int64_t dt = wall_deadline - drv_mono_ns();
    if (dt <= 0)
        return;
    struct timespec ts = {.tv_sec = dt / 1000000000LL, .tv_nsec = dt % 1000000000LL};
    futex(word, FUTEX_WAIT, seen, &ts);
}

/* Tells the device that host op OP (generation GEN) is done: its stream goes on. */
static void host_done(int op, uint32_t gen)
{
    pthread_mutex_lock(&drv.lock);
    while (drv_publish(SUB_HOST_DONE, op, (int32_t)gen) < 0) {
        pthread_mutex_unlock(&drv.lock);
        drv_server_kick();
        usleep(100);
        pthread_mutex_lock(&drv.lock);
    }
    pthread_mutex_unlock(&drv.lock);
    drv_server_kick();
}

/* Asks the device for ops when the pool runs low (at most one request out at a time). */
static void pool_ask(void)
{
    pthread_mutex_lock(&drv.lock);
    int ask = !drv.want_ops && drv.npool < DRV_POOL_FILL / 2;
    if (ask && drv_publish(SUB_WANT_OPS, -1, (int32_t)(DRV_POOL_FILL - drv.npool)) == 0)
        drv.want_ops = 1;
    else
        ask = 0;
    pthread_mutex_unlock(&drv.lock);
    if (ask)
        drv_server_kick();
}

#define DEVICE_CHECK_NS 200000000LL /* work outstanding this long with nothing shown: look */

/* No completion came for a while though work is outstanding: the device process may be gone
 * (killed). Taking the lock repairs what a holder that died left; a new device process is
 * started if the old one is gone. */
static uint64_t device_checks; /* statistics, reported with POS_SIM_DEBUG */

uint64_t drv_device_checks(void)
{
    return device_checks;
}

static void device_check(void)
{
    device_checks++;
    /* an ask for ops the device took and did not answer (it died) is asked again */
    pthread_mutex_lock(&drv.lock);
    drv.want_ops = 0;
    pthread_mutex_unlock(&drv.lock);
    drv_lock();
    if (!drv_server_alive()) {
        drv_debug("the device process of %s is gone: starting another", drv.shm_name);
        drv.shm->server.spawned_ns = 0;
        drv_server_ensure();
    }
    drv_unlock();
    drv_server_kick();
}

/* The agent: reads this process's completion ring, which the device process writes, without
 * the device lock; applies completed ops' effects in device order; runs host functions and
 * polls stream waits on memory, and says when they are done; keeps the op pool filled. */
static void *agent_main(void *arg)
{
    static struct reaped batch[REAP_BATCH];
    static int32_t keep[REAP_BATCH];
    static struct host_call calls[HOST_BATCH];
    static struct host_call waits[SIM_OWNER_MAX_OPS]; /* stream waits on memory, pending */
    int nwaits = 0;
    struct sim_gpu *g = drv.g;
    struct sim_owner *me = &g->owners[drv.owner];
    (void)arg;
    /* wake on time: the default 50 us timer slack would stretch every short device wait */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    drv_role = DRV_ROLE_AGENT;
    int64_t quiet_since = drv_mono_ns();
    while (!atomic_load(&drv.agent_stop)) {
        drv.agent_cycles++;
        uint32_t seen = atomic_load(owner_word(drv.owner));
        uint32_t h = __atomic_load_n(&me->ring_head, __ATOMIC_RELAXED);
        uint32_t t = __atomic_load_n(&me->ring_tail, __ATOMIC_ACQUIRE);
        int n = 0, nkeep = 0, ncalls = 0, granted = 0;
        while (h != t && n < REAP_BATCH && ncalls < HOST_BATCH && nkeep < REAP_BATCH) {
            int32_t e = me->ring[h % SIM_OWNER_MAX_OPS];
            int op = e & SIM_RING_OP;
            struct sim_op *o = op < SIM_MAX_OPS ? &g->ops[op] : NULL;
            if (!o || o->owner != drv.owner) {
                /* not ours: nothing to do */
            } else if (e & SIM_RING_GRANT) {
                if (o->state == SIM_OP_ALLOC)
                    keep[nkeep++] = op;
                granted = 1;
            } else if (e & SIM_RING_HOST) {
                struct drv_local_op *l = &drv.local[op];
                if (o->state == SIM_OP_HOSTWAIT && !l->started) {
                    l->started = 1; /* shown twice (a repaired device) is run once */
                    struct host_call c = {op, o->gen, l->d.u.host.fn, l->d.u.host.data};
                    if (l->d.effect == EFF_HOSTFN)
                        calls[ncalls++] = c;
                    else if (nwaits < SIM_OWNER_MAX_OPS)
                        waits[nwaits++] = c;
                }
            } else if (o->state == SIM_OP_DONE) {
                batch[n].l = drv.local[op];
                batch[n].end_dev = o->end_ns;
                /* ours again, for the pool, before the head moves past it (a repair of the
                 * device puts back what is done and not in the ring: docs/sim.md) */
                if (sim_gpu_op_recycle(g, op) == 0)
                    keep[nkeep++] = op;
                n++;
            }
            h++;
            __atomic_store_n(&me->ring_head, h, __ATOMIC_RELEASE);
        }
        if (nkeep || granted) {
            pthread_mutex_lock(&drv.lock);
            if (granted)
                drv.want_ops = 0;
            drv_pool_put(keep, nkeep);
            pthread_cond_broadcast(&drv.cond); /* a launch may wait for the pool */
            pthread_mutex_unlock(&drv.lock);
        }
        if (n == 0 && ncalls == 0 && !granted)
            drv.early_wakes++;
        for (int i = 0; i < n; i++)
            finish_op(&batch[i]);
        if (n) {
            pthread_mutex_lock(&drv.lock);
            pthread_cond_broadcast(&drv.cond);
            pthread_mutex_unlock(&drv.lock);
            /* A launch that saw its stream busy (its last op counted just now) did not wake
             * the device process: wake it when launches wait in the ring (drv_submit
             * publishes, then reads the count; this counted, then reads the ring). */
            atomic_thread_fence(memory_order_seq_cst);
            struct drv_submit_ring *r = &drv.shm->rings[drv.owner];
            if (atomic_load(&r->tail) != atomic_load(&r->head))
                drv_server_kick();
        }
        for (int i = 0; i < ncalls; i++) {
            atomic_store(&drv.agent_in_host, 1);
            calls[i].fn(calls[i].data);
            atomic_store(&drv.agent_in_host, 0);
            host_done(calls[i].op, calls[i].gen);
        }
        for (int i = 0; i < nwaits;) {
            if (wait_satisfied(&drv.local[waits[i].op].d)) {
                host_done(waits[i].op, waits[i].gen);
                waits[i] = waits[--nwaits];
            } else {
                i++;
            }
        }
        pool_ask();
        int64_t now_mono = drv_mono_ns();
        if (n || ncalls || granted)
            quiet_since = now_mono;
        if (h != __atomic_load_n(&me->ring_tail, __ATOMIC_ACQUIRE))
            continue;
        /* work outstanding: ops not yet completed, stream waits, or ops asked for the pool
         * (a launch may wait for them) */
        int outstanding = atomic_load(&drv.completed_all) < drv_submitted_now() || nwaits ||
                          __atomic_load_n(&drv.want_ops, __ATOMIC_RELAXED);
        if (outstanding && now_mono - quiet_since > DEVICE_CHECK_NS) {
            device_check();
            quiet_since = now_mono;
        }
        /* never for ever: a launch made while it sleeps wakes only the device process, and
         * one that is gone must be noticed (DEVICE_CHECK_NS after the launch at the latest) */
        int64_t wall = now_mono + DEVICE_CHECK_NS;
        if (nwaits)
            wall = now_mono + WAIT_POLL_NS;
        else if (!outstanding)
            quiet_since = now_mono; /* nothing to wait for is not a silence */
        sleep_until(owner_word(drv.owner), seen, wall);
    }
    atomic_store(&drv.agent_exited, 1);
    return NULL;
}

CUresult drv_agent_start(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the agent takes no signals of the app */
    int rc = pthread_create(&drv.agent, NULL, agent_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void drv_agent_stop(void)
{
    if (drv.owner < 0 || !atomic_load(&drv.initialized))
        return;
    atomic_store(&drv.agent_stop, 1);
    drv_agent_kick();
    /* Until it has exited, however long its last cycle takes (on a loaded machine or under a
     * sanitizer it took over the 100 ms this waited at most, and the exit went on to change
     * what the agent still read); only a host function of the application, which may block
     * the agent for ever, is waited for a little (100 ms), not for ever. */
    for (int i = 0; !atomic_load(&drv.agent_exited); i++) {
        if (i >= 200 && atomic_load(&drv.agent_in_host))
            break;
        drv_agent_kick();
        usleep(500);
    }
    if (atomic_load(&drv.agent_exited))
        pthread_join(drv.agent, NULL);
}

/* CLOCK_REALTIME deadline NS from now, for pthread_cond_timedwait. */
static struct timespec deadline_in(long ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ns;
    while (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

CUresult drv_wait_counter(_Atomic uint64_t *counter, uint64_t target, struct drv_ctx *ctx)
{
    if (atomic_load_explicit(counter, memory_order_acquire) >= target)
        return ctx ? (CUresult)atomic_load(&ctx->sticky) : CUDA_SUCCESS;
    pthread_mutex_lock(&drv.lock);
    while (atomic_load_explicit(counter, memory_order_acquire) < target) {
        if (ctx && atomic_load(&ctx->sticky))
            break;
        struct timespec ts = deadline_in(100000000);
        pthread_cond_timedwait(&drv.cond, &drv.lock, &ts);
    }
    pthread_mutex_unlock(&drv.lock);
    return ctx ? (CUresult)atomic_load(&ctx->sticky) : CUDA_SUCCESS;
}

void drv_wait_for_room(void)
{
    drv_server_kick();
    drv_agent_kick();
    pthread_mutex_lock(&drv.lock);
    struct timespec ts = deadline_in(1000000);
    pthread_cond_timedwait(&drv.cond, &drv.lock, &ts);
    pthread_mutex_unlock(&drv.lock);
}
