/* possim's simulation (see possim_sim.h and docs/possim.md).
 *
 * Every client is one process with one host thread, one context and one stream on one virtual
 * GPU. It registers with posd when it starts (posd decides at once) and leaves when it ends or
 * is killed. The thread runs its requests like posapp with --streams 1 --threads 1: host time,
 * then each launch goes through the shim's submit path (a sequence number; released at once
 * when the published grant is FREE or covers it, else a spin, a kick and a sleep until posd
 * publishes a grant that covers it; the first launch after an idle point kicks posd when it
 * asks for kicks), then the device model; after the last launch it synchronises (closed loop:
 * at once; open loop: by polling its event every 50 us until the next arrival) and reports
 * the synchronisation to posd, always with a kick. The collector is a loop of its own: every
 * prompt_poll_us while posd asks for kicks and records are pending, every poll_us while they
 * are pending otherwise, with the shim's idle back-off else; each pass takes the new launch
 * records and synchronisations, sees the markers that landed (exact completions at the
 * device's end of each, as the shim's timing events give them, bounding the earlier launches at
 * the pass's time), reports what is complete in launch order and
 * kicks posd when it asks. posd wakes on kicks (after its wake-up latency) and on its tick;
 * each time it drains what the clients wrote into the core exactly as sched/engine.c does
 * (submissions with the synchronisations that follow them, then completions), runs
 * sched_core_decide and publishes the grants. Events (thread wake-ups, collector passes,
 * process starts and exits) sit in a binary heap, merged with the device model's next event
 * and posd's two wake-up times. The shim's and the engine's rules (whether a launch may go,
 * which launches carry markers, which waits help, the collector's sleeps and what it holds
 * back, what posd publishes, the order it reads a client in) are include/pos/rules.h's, the
 * functions the shim and posd call: possim keeps only their state, in plain fields. */
#include "tools/possim_sim.h"
#include "tools/possim_host.h"
#include "tools/timeline.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pos/op_record.h"
#include "pos/rules.h"
#include "sched/core.h"
#include "sched/profile.h"
#include "sched/policy/learned.h"
#include "sched/schedule_file.h"
#include "sched/weights_file.h"
#include "sim/gpu_model.h"
#include "sim/model_file.h"
#include "sim/request.h"
#include "tools/posapp_arrival.h"
#include "tools/posapp_stats.h"

#define MARKED   (1ull << 63)
#define NONE     INT64_MAX
#define STUCK_NS 100000000000LL /* virtual time with no progress: the run is stuck */
#define QUERY_NS 50000          /* posapp's open loop polls its request this often */

/* ---- the event heap --------------------------------------------------------------------- */

enum ev_type { EV_THREAD = 1, EV_POLL, EV_START, EV_LEAVE, EV_NOTIFY };

struct event {
    int64_t t;
    uint64_t order; /* insertion order: ties go first in, first out */
    uint32_t type;
    uint32_t client;
    uint64_t gen; /* EV_THREAD: the thread's wake generation; EV_NOTIFY: the op's tag */
};

struct heap {
    struct event *e;
    size_t n, cap;
    uint64_t order;
};

static int ev_before(const struct event *a, const struct event *b)
{
    return a->t < b->t || (a->t == b->t && a->order < b->order);
}

static int heap_push(struct heap *h, int64_t t, uint32_t type, uint32_t client, uint64_t gen)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 256;
        struct event *e = realloc(h->e, cap * sizeof *e);
        if (!e)
            return -ENOMEM;
        h->e = e;
        h->cap = cap;
    }
    struct event ev = {t, h->order++, type, client, gen};
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!ev_before(&ev, &h->e[parent]))
            break;
        h->e[i] = h->e[parent];
        i = parent;
    }
    h->e[i] = ev;
    return 0;
}

static struct event heap_pop(struct heap *h)
{
    struct event top = h->e[0], last = h->e[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct event *best = &last;
        if (l < h->n && ev_before(&h->e[l], best))
            m = l, best = &h->e[l];
        if (r < h->n && ev_before(&h->e[r], best))
            m = r;
        if (m == i)
            break;
        h->e[i] = h->e[m];
        i = m;
    }
    if (h->n)
        h->e[i] = last;
    return top;
}

/* ---- growable FIFOs of what a client wrote for posd --------------------------------------- */

/* ---- growable FIFOs of what a client wrote ------------------------------------------------ */

struct post {
    uint64_t seq;
    int64_t done_ns;
    int how;
};

struct sub {
    struct pos_sched_op op;
    int released;
};

struct sync_rep {
    uint64_t covers;
    int64_t end_ns;
};

/* A launch record as the collector holds it until its completion is reported. */
struct rec {
    uint64_t seq;
    int marked;
    int how;         /* enum pos_completion: POS_DONE_UNKNOWN until known */
    int64_t t;       /* when it completed, as the collector tells posd */
    int64_t dev_end; /* a marked op: the device's end of it (the shim's timing event), 0 before */
};

#define VEC(T)                                                                                     \
    struct {                                                                                       \
        T *v;                                                                                      \
        size_t head, n, cap;                                                                       \
    }

/* DST (consumed) takes every entry of SRC, and SRC is left empty with DST's buffer: a batch
 * handed over without a copy. */
#define VEC_TAKE(dst, src)                                                                         \
    do {                                                                                           \
        __typeof__((dst).v) v_ = (dst).v;                                                          \
        size_t cap_ = (dst).cap;                                                                   \
        (dst).v = (src).v;                                                                         \
        (dst).cap = (src).cap;                                                                     \
        (dst).head = (src).head;                                                                   \
        (dst).n = (src).n;                                                                         \
        (src).v = v_;                                                                              \
        (src).cap = cap_;                                                                          \
        (src).head = (src).n = 0;                                                                  \
    } while (0)

/* Appends to a FIFO whose consumed prefix [0, head) is reclaimed when it is empty. */
#define VEC_PUSH(q, x)                                                                             \
    ({                                                                                             \
        int rc_ = 0;                                                                               \
        if ((q).head == (q).n)                                                                     \
            (q).head = (q).n = 0;                                                                  \
        if ((q).n == (q).cap) {                                                                    \
            size_t cap_ = (q).cap ? (q).cap * 2 : 64;                                              \
            void *v_ = realloc((q).v, cap_ * sizeof *(q).v);                                       \
            if (v_) {                                                                              \
                (q).v = v_;                                                                        \
                (q).cap = cap_;                                                                    \
            } else {                                                                               \
                rc_ = -ENOMEM;                                                                     \
            }                                                                                      \
        }                                                                                          \
        if (!rc_)                                                                                  \
            (q).v[(q).n++] = (x);                                                                  \
        rc_;                                                                                       \
    })

/* ---- clients ---------------------------------------------------------------------------- */

/* ---- clients ---------------------------------------------------------------------------- */

enum thread_state {
    T_UNBORN,  /* its process has not started yet */
    T_ARRIVAL, /* asleep until its next request's arrival, nothing in flight */
    T_HOST,    /* host time before a launch */
    T_SPIN,    /* spinning for a grant */
    T_SLEEP,   /* asleep on a grant (counted in waiters, posd kicked) */
    T_RESUME,  /* granted: about to launch */
    T_SYNC,    /* blocked in a synchronisation on its last launch */
    T_QUERY,   /* open loop: asleep between two queries of its request in flight */
    T_WOKEN,   /* host model: woken from T_ARRIVAL or T_QUERY, its query's CPU */
    T_DRIVER,  /* host model: in the driver's launch call, its CPU */
    T_SYNCED,  /* host model: its synchronisation returned, the return's CPU */
    T_DONE,
};

struct vclient {
    const struct possim_client_spec *spec;
    int index;
    struct sim_model model;
    struct sim_request req;
    uint64_t *keys; /* per op of the request */
    int owner, ctx, stream;
    int present; /* registered with posd (started, not left) */
    int cpu_low; /* the CPU lever's state of its threads (enum pos_cpu_lever) in the host model */
    int killed;
    int64_t start_ns, stop_ns, slack_ns;
    int64_t issued_ns; /* when the request in flight was issued (its timeline slice) */
    /* the thread */
    int state;
    uint64_t gen;   /* bumped whenever its pending wake-up is superseded */
    uint64_t req_i; /* the request it issues next (or is issuing) */
    size_t op_j;
    int inflight; /* a request is issued and not yet known complete */
    uint64_t inflight_req;
    uint64_t completed; /* requests completed */
    uint64_t late_done; /* ... after their SLO */
    double *schedule;   /* open loop: arrival offsets in s from its start */
    int64_t *arrive_ns, *done_ns;
    uint64_t seq;      /* its last launch number */
    uint64_t wait_seq; /* the launch waiting for a grant */
    int64_t wait_since;
    int wait_step;               /* that wait is for a window step (the cap over its own prefix) */
    int launch_windowed;         /* T_DRIVER: the launch is the last its window allows */
    int helping;                 /* ... and the thread spins doing the collector's pass itself */
    uint64_t step_avg_ns;        /* moving average of its helped window-step waits (wait_avg_ns) */
    _Atomic uint32_t step_waits; /* its long window-step waits so far (pos_wait_helps) */
    uint32_t waiters;            /* threads asleep on a grant, as posd reads it */
    uint64_t dev_done_seq;       /* every launch <= this is complete, as the host knows */
    uint32_t until_marker, shim_sample;
    int idle; /* its last synchronisation covered every launch (the shim's idle flag) */
    struct pos_published pub; /* what posd published for it */
    /* its collector */
    struct posapp_rng rng;
    uint32_t idle_us;
    struct pos_cpu_pressure pressure; /* the host's, as its collector follows it */
    uint64_t launched_seq, drained_seq, bound_seq, reported_seq;
    VEC(struct rec) recs;            /* (reported_seq, launched_seq] */
    VEC(uint64_t) landed;            /* markers landed, not yet seen */
    VEC(struct sync_rep) coll_syncs; /* synchronisations, not yet seen by the collector */
    /* its shared memory, as posd drains it */
    VEC(struct sub) subs;
    /* its driver agent thread ([host] agent_us): completions a look wrote for it, and those
     * its wake-up on the CPU makes known at its end */
    VEC(uint64_t) agent_wait;
    VEC(uint64_t) agent_run;
    int agent_busy;
    VEC(struct post) posts;
    VEC(struct sync_rep) syncs;
    /* statistics */
    uint64_t launches, waits, markers, windowed;
    int64_t wait_ns;
    struct sched_client_stats core; /* what posd knew of it when it left (or at the end) */
};

/* A completion the device process makes known to its client at a look. */
struct dev_note {
    size_t client;
    uint64_t tag;
};

struct sim {
    const struct possim_scenario *sc;
    struct sim_gpu *g;
    struct sched_core *core;  /* NULL: policy none */
    struct pos_profiles prof; /* the core's kernel profiles */
    struct pos_sched_device dev;
    struct sched_grant grants[SCHED_MAX_CLIENTS];
    struct pos_schedule schedule; /* [sched] schedule, what the policy sees */
    struct pos_weights weights;   /* [sched] weights, ... */
    const void *learner;          /* possim train's learner (possim_run_learning) */
    struct vclient *c;
    size_t n, ndone;
    struct heap heap;
    int64_t now;
    int64_t timer_at; /* posd's armed tick, NONE when disarmed */
    int64_t kick_at;  /* posd's wake-up after a kick, NONE when none is due */
    int64_t poll_ns, prompt_poll_ns, wake_ns, grant_wake_ns, spin_ns, help_spin_ns, help_when_ns;
    int64_t notify_ns;
    uint64_t decisions, events;
    double decide_real_ns; /* real time spent in sched_core_decide (the policy's cost) */
    int64_t progress_at;   /* the last launch or request completion */
    struct timeline *tl;   /* --timeline: every op and request, or NULL */
    /* the host model ([host] cores; NULL: unlimited): task 2i is client i's thread, 2i+1 its
     * collector, 2n posd, 2n+1 the simulated driver's device process */
    struct possim_host *host;
    int64_t driver_ns, sync_ns, collector_ns, decide_ns, device_ns, agent_ns;
    /* the device process's looks ([host] device_us): completions waiting for the next look,
     * and those the look on the CPU makes known at its end */
    VEC(struct dev_note) dev_wait;
    VEC(struct dev_note) dev_look;
    int device_busy;
    uint64_t device_looks;
    int posd_busy; /* posd's wake-up is on the CPU: it drains, decides and publishes at its end */
    int64_t posd_woke_at;
    int64_t posd_waited_ns; /* posd's wake-ups' waits for a core, in all */
    int rc;
    char *err;
    size_t errlen;
};

static int64_t us_ns(double us)
{
    return (int64_t)llround(us * 1000.0);
}

static void sim_fail(struct sim *s, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sim_fail(struct sim *s, int rc, const char *fmt, ...)
{
    if (s->rc)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, s->errlen, fmt, ap);
    va_end(ap);
    s->rc = rc;
}

static void push_event(struct sim *s, int64_t t, uint32_t type, const struct vclient *c,
                       uint64_t gen)
{
    if (heap_push(&s->heap, t, type, (uint32_t)c->index, gen) < 0)
        sim_fail(s, -ENOMEM, "out of memory");
}

static void wake_at(struct sim *s, struct vclient *c, int64_t t)
{
    c->gen++;
    push_event(s, t, EV_THREAD, c, c->gen);
}

/* ---- the host's cores ---------------------------------------------------------------------- */

static size_t thread_task(const struct vclient *c)
{
    return 2 * (size_t)c->index;
}

static size_t collector_task(const struct vclient *c)
{
    return 2 * (size_t)c->index + 1;
}

static size_t posd_task(const struct sim *s)
{
    return 2 * s->n;
}

static size_t device_task(const struct sim *s)
{
    return 2 * s->n + 1;
}

static size_t agent_task(const struct sim *s, const struct vclient *c)
{
    return 2 * s->n + 2 + (size_t)c->index;
}

/* C's thread has WORK ns of CPU to do from T, then takes its state's next step
 * (thread_event). Without the host model, or without work, that is WORK later; with it, when
 * the cores it shares have served it that much. */
static void thread_cpu(struct sim *s, struct vclient *c, int64_t t, int64_t work)
{
    if (!s->host || work <= 0) {
        wake_at(s, c, t + work);
        return;
    }
    c->gen++; /* its work's end, not a timer, wakes it */
    possim_host_run(s->host, thread_task(c), (double)work, t);
}

/* C's thread starts spinning at T: it holds a share of the cores until it stops. */
static void spin_begins(struct sim *s, struct vclient *c, int64_t t)
{
    if (s->host)
        possim_host_run(s->host, thread_task(c), INFINITY, t);
}

static void spin_ends(struct sim *s, struct vclient *c, int64_t t)
{
    if (s->host)
        possim_host_stop(s->host, thread_task(c), t);
}

/* A kick: posd wakes wake_us later (kicks coalesce). */
static void kick(struct sim *s, int64_t t)
{
    int64_t at = t + s->wake_ns;
    if (at < s->kick_at)
        s->kick_at = at;
}

/* What C's thread decides by: posd's grant and the completion prefix its collector reported
 * (it reports in seq order: reported_seq is that prefix). */
static struct pos_grant_view grant_of(const struct vclient *c)
{
    return pos_grant_view_of(&c->pub, c->reported_seq);
}

/* The marker rate the shim follows, as it does at the collector's passes. */
static void follow_sample(struct vclient *c)
{
    c->shim_sample = pos_sample_follow(c->spec->sample, c->pub.sample);
}

static int64_t arrival_ns(const struct vclient *c, uint64_t i)
{
    return c->start_ns + (int64_t)llround(c->schedule[i] * 1e9);
}

/* ---- the thread ------------------------------------------------------------------------- */

static void start_op(struct sim *s, struct vclient *c, int64_t t)
{
    c->state = T_HOST;
    thread_cpu(s, c, t, us_ns(c->spec->host_us) + us_ns(c->spec->launch_us));
}

/* Request C->req_i is issued at T (open loop: it arrived at its scheduled time). */
static void start_request(struct sim *s, struct vclient *c, int64_t t)
{
    c->arrive_ns[c->req_i] = c->schedule ? arrival_ns(c, c->req_i) : t;
    c->issued_ns = t;
    c->op_j = 0;
    start_op(s, c, t);
}

static void client_done(struct sim *s, struct vclient *c, int64_t t);

/* The request in flight is known complete at T (a synchronisation returned, or a query said
 * so): posapp timestamps it, and the shim reports the synchronisation to posd, with a kick. */
static void finish_request(struct sim *s, struct vclient *c, int64_t t)
{
    c->done_ns[c->inflight_req] = t;
    c->inflight = 0;
    c->completed++;
    if (c->spec->slo_ms > 0 && (double)(t - c->arrive_ns[c->inflight_req]) > c->spec->slo_ms * 1e6)
        c->late_done++;
    if (s->tl) {
        char name[32], args[64];
        snprintf(name, sizeof name, "request %" PRIu64, c->inflight_req + 1);
        snprintf(args, sizeof args, "\"arrived_us\":%.3f",
                 (double)c->arrive_ns[c->inflight_req] / 1e3);
        timeline_slice(s->tl, (uint32_t)c->index + 1, 1, name, "request", c->issued_ns,
                       t - c->issued_ns, args);
    }
    s->progress_at = t;
    if (!s->core)
        return;
    struct sync_rep r = {c->seq, t};
    if (VEC_PUSH(c->syncs, r) < 0 || VEC_PUSH(c->coll_syncs, r) < 0)
        sim_fail(s, -ENOMEM, "out of memory");
    c->idle = pos_sync_idles(r.covers, c->seq); /* it covered every launch */
    kick(s, t);                                 /* always: posd learns of a request's end at once */
}

/* posapp's open loop waits at T for the arrival of request C->req_i, polling the request in
 * flight (cuEventQuery) every 50 us meanwhile (wait_arrival). */
static void open_wait(struct sim *s, struct vclient *c, int64_t t)
{
    int64_t when = arrival_ns(c, c->req_i);
    if (t < when && c->inflight && c->dev_done_seq >= c->seq)
        finish_request(s, c, t); /* the query answers "done" */
    if (t >= when) {
        if (!c->inflight) {
            start_request(s, c, t);
            return;
        }
        c->state = T_SYNC; /* its slot is busy: it synchronises on the request */
        if (c->dev_done_seq >= c->seq) {
            finish_request(s, c, t);
            start_request(s, c, t);
        }
        return;
    }
    c->state = c->inflight ? T_QUERY : T_ARRIVAL;
    int64_t until = c->inflight && t + QUERY_NS < when ? t + QUERY_NS : when;
    wake_at(s, c, until + c->slack_ns);
}

/* The blocking synchronisation of C returns at T. */
static void sync_returns(struct sim *s, struct vclient *c, int64_t t);

/* What C's blocking synchronisation waits on is known complete at T: it returns once its
 * thread has had the CPU to return (host model), or at once. */
static void sync_done(struct sim *s, struct vclient *c, int64_t t)
{
    if (s->host && s->sync_ns > 0) {
        c->state = T_SYNCED;
        thread_cpu(s, c, t, s->sync_ns);
        return;
    }
    sync_returns(s, c, t);
}

static void sync_returns(struct sim *s, struct vclient *c, int64_t t)
{
    finish_request(s, c, t);
    if (c->req_i == c->spec->requests)
        client_done(s, c, t);
    else
        start_request(s, c, t);
}

/* The launch call of op C->op_j reaches the driver at T: the op goes to the device model. */
/* The device op of request op RO, on context CTX and stream STREAM. */
static void fill_kernel(struct sim_op *o, const struct sim_request_op *ro, int ctx, int stream)
{
    uint64_t blocks = sim_request_op_blocks(ro), threads = sim_request_op_threads(ro);
    o->kind = SIM_OP_KERNEL;
    o->flags = ro->fp16 ? SIM_OPF_FP16 : 0;
    o->ctx = (int16_t)ctx;
    o->stream = stream;
    o->blocks = blocks ? (blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks) : 1;
    o->threads = threads ? (uint32_t)threads : 1;
    o->smem = ro->smem;
    o->flops = ro->flops;
    o->bytes = ro->bytes;
}

static void device_look(struct sim *s, int64_t t);

static void device_launch(struct sim *s, struct vclient *c, int windowed, int64_t t)
{
    if (s->host && s->driver_ns > 0 && c->state != T_DRIVER) {
        /* the driver's work in the launch call first: the op reaches the device at its end */
        c->launch_windowed = windowed;
        c->state = T_DRIVER;
        thread_cpu(s, c, t, s->driver_ns);
        return;
    }
    const struct sim_request_op *ro = &c->req.ops[c->op_j];
    int marked = 0;
    if (s->core) {
        /* the first launch after an idle point starts a request: posd holds others for it */
        if (c->idle) {
            c->idle = 0;
            if (c->pub.kick_on_done)
                kick(s, t);
        }
        /* launch_end: every sample-th launch, and the last one a grant allows, carries a
         * marker */
        marked = pos_marker_due(&c->until_marker, c->shim_sample) || windowed;
        c->markers += (uint64_t)marked;
    }
    sim_gpu_advance(s->g, t);
    int op = sim_gpu_op_alloc(s->g, c->owner);
    if (op < 0) {
        sim_fail(s, -ENOSPC, "client %s: the virtual GPU has no room for another op (%d)",
                 c->spec->name, op);
        return;
    }
    struct sim_op *o = &s->g->ops[op];
    fill_kernel(o, ro, c->ctx, c->stream);
    o->tag = c->seq | (marked ? MARKED : 0);
    /* a launch onto an idle stream kicks the device process: a look */
    if (s->host && s->device_ns > 0 && !s->device_busy && c->dev_done_seq + 1 >= c->seq)
        device_look(s, t);
    sim_gpu_submit(s->g, op, t);
    c->launches++;
    s->progress_at = t;
    if (s->core) {
        /* the launch record the collector will drain */
        struct rec r = {c->seq, marked, POS_DONE_UNKNOWN, 0, 0};
        if (VEC_PUSH(c->recs, r) < 0)
            sim_fail(s, -ENOMEM, "out of memory");
        c->launched_seq = c->seq;
    }
    /* the next op, or the synchronisation */
    if (++c->op_j < c->req.nops) {
        start_op(s, c, t);
        return;
    }
    c->inflight = 1;
    c->inflight_req = c->req_i++;
    if (!c->schedule || c->req_i == c->spec->requests) {
        c->state = T_SYNC; /* closed loop (or the last request): it synchronises at once */
        if (c->dev_done_seq >= c->seq)
            sync_done(s, c, t);
        return;
    }
    open_wait(s, c, t);
}

/* Host time is over at T: the launch enters the shim's submit path. */
static void submit(struct sim *s, struct vclient *c, int64_t t)
{
    uint64_t seq = ++c->seq;
    if (!s->core) {
        device_launch(s, c, 0, t);
        return;
    }
    const struct sim_request_op *ro = &c->req.ops[c->op_j];
    int go_now = c->pub.mode == POS_GRANT_FREE;
    struct sub sb = {
        .op =
            {
                .seq = seq,
                .key = c->keys[c->op_j],
                .kernel_id = (uint32_t)c->op_j + 1,
                .kind = POS_OP_KERNEL,
                .grid = {ro->grid[0], ro->grid[1], ro->grid[2]},
                .block = {ro->block[0], ro->block[1], ro->block[2]},
                .smem = ro->smem,
                .tid = (uint32_t)c->index + 1,
                .stream = 0x1000 + (uint64_t)c->index,
                .ctx = 0x100000 + (uint64_t)c->index,
                .submit_ns = t,
            },
        .released = go_now,
    };
    if (VEC_PUSH(c->subs, sb) < 0) {
        sim_fail(s, -ENOMEM, "out of memory");
        return;
    }
    c->windowed += (uint64_t)!go_now;
    if (!go_now && !pos_grant_allows(grant_of(c), seq)) {
        /* wait_grant: a window step while such waits have been short spins longer, helping */
        c->state = T_SPIN;
        c->wait_seq = seq;
        c->wait_since = t;
        c->wait_step = pos_wait_for_step(grant_of(c));
        c->helping =
            pos_wait_helps(c->wait_step, c->step_avg_ns, (uint64_t)s->help_when_ns, &c->step_waits);
        c->waits++;
        wake_at(s, c, t + (c->helping ? s->help_spin_ns : s->spin_ns));
        spin_begins(s, c, t);
        return;
    }
    /* shim_session_submit: the last launch its grant allows gets a marker of its own */
    device_launch(s, c, !go_now && pos_grant_last(grant_of(c), seq), t);
}

static void thread_event(struct sim *s, struct vclient *c, int64_t t)
{
    switch (c->state) {
    case T_ARRIVAL:
    case T_QUERY:
        if (s->host && s->sync_ns > 0) { /* woken: the query (or the return) takes the CPU */
            c->state = T_WOKEN;
            thread_cpu(s, c, t, s->sync_ns);
            break;
        }
        open_wait(s, c, t);
        break;
    case T_WOKEN:
        open_wait(s, c, t);
        break;
    case T_HOST:
        submit(s, c, t);
        break;
    case T_DRIVER:
        device_launch(s, c, c->launch_windowed, t);
        break;
    case T_SYNCED:
        sync_returns(s, c, t);
        break;
    case T_SPIN: /* nothing came while it spun: it sleeps and kicks posd */
        spin_ends(s, c, t);
        c->state = T_SLEEP;
        c->waiters = 1;
        kick(s, t);
        break;
    case T_RESUME:
        c->waiters = 0;
        c->wait_ns += t - c->wait_since;
        if (c->helping)
            c->step_avg_ns = pos_wait_avg(c->step_avg_ns, (uint64_t)(t - c->wait_since));
        c->helping = 0;
        device_launch(s, c, pos_grant_last(grant_of(c), c->wait_seq), t);
        break;
    default:
        break;
    }
}

/* ---- the collector ------------------------------------------------------------------------ */

static struct rec *rec_of(struct vclient *c, uint64_t seq)
{
    return &c->recs.v[c->recs.head + (seq - c->reported_seq - 1)];
}

/* The collector's work at T (collect_pass): the sample posd asks for; the new launch records;
 * synchronisations (bounding what they covered at their end); markers that landed (exact at
 * T, bounding the earlier launches at T); what is complete goes to posd in launch order, with
 * a kick when posd asks for one; a thread waiting on the window cap goes if the prefix moved.
 * Returns whether the rings gave records (-1: out of memory). */
static int collect(struct sim *s, struct vclient *c, int64_t t)
{
    follow_sample(c);
    int got = c->launched_seq > c->drained_seq;
    c->drained_seq = c->launched_seq;
    for (; c->coll_syncs.head < c->coll_syncs.n; c->coll_syncs.head++) {
        const struct sync_rep *y = &c->coll_syncs.v[c->coll_syncs.head];
        uint64_t upto = y->covers < c->drained_seq ? y->covers : c->drained_seq;
        uint64_t from = c->bound_seq > c->reported_seq ? c->bound_seq : c->reported_seq;
        for (uint64_t q = from + 1; q <= upto; q++) {
            struct rec *r = rec_of(c, q);
            if (pos_done_takes(r->how, POS_DONE_BOUND)) {
                r->how = POS_DONE_BOUND;
                r->t = y->end_ns;
            }
        }
        if (upto > c->bound_seq)
            c->bound_seq = upto;
    }
    for (; c->landed.head < c->landed.n; c->landed.head++) {
        uint64_t m = c->landed.v[c->landed.head];
        if (m <= c->reported_seq || m > c->drained_seq)
            continue;
        struct rec *r = rec_of(c, m);
        if (pos_done_takes(r->how, POS_DONE_MARKER)) {
            /* its timing event gives the device's end (shim/devtime.c) */
            r->how = r->dev_end ? POS_DONE_DEVICE : POS_DONE_MARKER;
            r->t = r->dev_end ? r->dev_end : t;
        }
        uint64_t from = c->bound_seq > c->reported_seq ? c->bound_seq : c->reported_seq;
        for (uint64_t q = from + 1; q < m; q++) {
            struct rec *o = rec_of(c, q);
            if (pos_done_takes(o->how, POS_DONE_BOUND)) {
                o->how = POS_DONE_BOUND;
                o->t = t;
            }
        }
        if (m > c->bound_seq)
            c->bound_seq = m;
    }
    size_t reported = 0;
    while (c->recs.head < c->recs.n) {
        const struct rec *r = &c->recs.v[c->recs.head];
        if (pos_done_pending(r->how, r->marked))
            break;
        struct post p = {r->seq, r->t, r->how};
        if (VEC_PUSH(c->posts, p) < 0) {
            sim_fail(s, -ENOMEM, "out of memory");
            return -1;
        }
        c->reported_seq = r->seq;
        c->recs.head++;
        reported++;
    }
    if (reported && c->pub.kick_on_done)
        kick(s, t); /* posd waits on these to release others */
    /* the completed prefix moved: a thread waiting on the window cap goes (the collector
     * wakes sleepers; a spinning thread sees it at once) */
    if (reported && c->pub.window && (c->state == T_SPIN || c->state == T_SLEEP) &&
        pos_grant_allows(grant_of(c), c->wait_seq)) {
        int64_t at = c->state == T_SPIN ? t : t + s->grant_wake_ns;
        if (c->state == T_SPIN)
            spin_ends(s, c, t);
        c->state = T_RESUME;
        wake_at(s, c, at);
    }
    return got;
}

/* One pass of the collector thread at T (collector_main): its work, then the sleep to the
 * next pass. */
static void collector_pass(struct sim *s, struct vclient *c, int64_t t)
{
    int got = collect(s, c, t);
    if (got < 0)
        return;
    int pending = got || c->recs.head < c->recs.n;
    /* a pass costs collector_ns of CPU in the host model, as the shim measures its own; the
     * host's pressure is the model's stall time, read each window as the shim reads PSI's
     * (without a host model: cores to spare) */
    int contended = 0;
    if (s->host) {
        if (pos_cpu_pressure_due(&c->pressure, (uint64_t)t))
            pos_cpu_pressure_take(&c->pressure, (uint64_t)t, (uint64_t)s->host->stall_ns);
        contended = pos_cpu_contended(&c->pressure);
    }
    uint64_t prompt_ns =
        pos_collector_prompt_ns((uint64_t)s->prompt_poll_ns, (uint64_t)s->poll_ns,
                                s->host ? (uint64_t)s->collector_ns : 0, contended);
    int64_t next = t + (int64_t)pos_collector_sleep_ns(
                           pos_collector_prompt(c->pub.kick_on_done, c->pub.window), pending,
                           (uint64_t)s->poll_ns, prompt_ns, &c->idle_us);
    push_event(s, next > t ? next : t + 1, EV_POLL, c, 0);
}

/* ---- the device ------------------------------------------------------------------------- */

/* The host learns at T that the op tagged TAG of C completed: its marker lands, a
 * synchronisation waiting on it returns. */
static void op_known(struct sim *s, struct vclient *c, uint64_t tag, int64_t t)
{
    if (c->killed)
        return;
    uint64_t seq = tag & ~MARKED;
    if (seq > c->dev_done_seq)
        c->dev_done_seq = seq;
    if ((tag & MARKED) && VEC_PUSH(c->landed, seq) < 0)
        sim_fail(s, -ENOMEM, "out of memory");
    /* a thread spinning on a window step does the collector's pass every 2 us: it sees the
     * marker land (the 2 us are not modelled) */
    if ((tag & MARKED) && c->state == T_SPIN && c->helping)
        collect(s, c, t);
    if (c->state == T_SYNC && c->dev_done_seq >= c->seq)
        sync_done(s, c, t);
}

/* The slice of op O of C on its stream's track: where it ran on the virtual device. */
static void timeline_op(struct sim *s, const struct vclient *c, const struct sim_op *o)
{
    uint64_t seq = o->tag & ~MARKED;
    const char *name = seq ? c->req.ops[(seq - 1) % c->req.nops].name : "?";
    char args[64];
    snprintf(args, sizeof args, "\"seq\":%" PRIu64 ",\"blocks\":%u", seq, o->blocks);
    timeline_slice(s->tl, (uint32_t)c->index + 1, 1, name, "op", o->start_ns,
                   o->end_ns - o->start_ns, args);
}

/* The device process looks at T: what waits for a look is made known at its end. */
static void device_look(struct sim *s, int64_t t)
{
    VEC_TAKE(s->dev_look, s->dev_wait);
    s->device_busy = 1;
    s->device_looks++;
    possim_host_run(s->host, device_task(s), (double)s->device_ns, t);
}

/* C's driver agent wakes at T for what the looks wrote it. */
static void agent_wake(struct sim *s, struct vclient *c, int64_t t)
{
    VEC_TAKE(c->agent_run, c->agent_wait);
    c->agent_busy = 1;
    possim_host_run(s->host, agent_task(s, c), (double)s->agent_ns, t);
}

/* C's agent's wake-up ended at T: the completions it carried are known (markers land, a
 * synchronisation returns); it wakes again if a look wrote it more meanwhile. */
static void agent_done(struct sim *s, struct vclient *c, int64_t t)
{
    for (size_t i = c->agent_run.head; i < c->agent_run.n; i++)
        op_known(s, c, c->agent_run.v[i], t);
    c->agent_run.head = c->agent_run.n = 0;
    c->agent_busy = 0;
    if (c->agent_wait.head < c->agent_wait.n)
        agent_wake(s, c, t);
}

/* The look on the CPU ended at T: its completions are known, through the clients' agents when
 * they are modelled; the next look, if any waits. */
static void device_look_done(struct sim *s, int64_t t)
{
    for (size_t i = s->dev_look.head; i < s->dev_look.n; i++) {
        struct vclient *c = &s->c[s->dev_look.v[i].client];
        if (s->agent_ns <= 0) {
            op_known(s, c, s->dev_look.v[i].tag, t);
            continue;
        }
        if (VEC_PUSH(c->agent_wait, s->dev_look.v[i].tag) < 0) {
            sim_fail(s, -ENOMEM, "out of memory");
            return;
        }
        if (!c->agent_busy)
            agent_wake(s, c, t);
    }
    s->dev_look.head = s->dev_look.n = 0;
    s->device_busy = 0;
    if (s->dev_wait.head < s->dev_wait.n)
        device_look(s, t);
}

/* The host learns at T (after notify_us) that op TAG of C completed. With the device process
 * modelled ([host] device_us), an op that makes it look (a marker, a value write: an op with
 * an effect; or the last op the client launched) is made known at the end of a look that
 * needs a core; an op without is known at once, as the next look carries it. */
static void op_notified(struct sim *s, struct vclient *c, uint64_t tag, int64_t t)
{
    uint64_t seq = tag & ~MARKED;
    if (!s->host || s->device_ns <= 0 || (!(tag & MARKED) && seq != c->seq)) {
        op_known(s, c, tag, t);
        return;
    }
    if (VEC_PUSH(s->dev_wait, ((struct dev_note){(size_t)c->index, tag})) < 0) {
        sim_fail(s, -ENOMEM, "out of memory");
        return;
    }
    if (!s->device_busy)
        device_look(s, t);
}

/* Ops completed on the device at T: the host knows notify_us later. */
static void reap(struct sim *s, int64_t t)
{
    for (size_t i = 0; i < s->n; i++) {
        struct vclient *c = &s->c[i];
        int op;
        while ((op = sim_gpu_reap(s->g, c->owner)) != SIM_NONE) {
            uint64_t tag = s->g->ops[op].tag, seq = tag & ~MARKED;
            if ((tag & MARKED) && s->core && seq > c->reported_seq && seq <= c->launched_seq)
                rec_of(c, seq)->dev_end = s->g->ops[op].end_ns;
            if (s->tl)
                timeline_op(s, c, &s->g->ops[op]);
            sim_gpu_op_free(s->g, op);
            if (s->notify_ns > 0)
                push_event(s, t + s->notify_ns, EV_NOTIFY, c, tag);
            else
                op_notified(s, c, tag, t);
        }
    }
}

/* ---- posd --------------------------------------------------------------------------------- */

/* Where posd's reading of client C at T is (the source of pos_drain_ops). */
struct drain {
    struct sim *s;
    struct vclient *c;
    int64_t t;
};

static int drain_sync_next(void *arg, uint64_t *covers)
{
    struct vclient *c = ((struct drain *)arg)->c;
    if (c->syncs.head == c->syncs.n)
        return 0;
    *covers = c->syncs.v[c->syncs.head].covers;
    return 1;
}

static int drain_subs(void *arg, uint64_t upto)
{
    struct drain *w = arg;
    struct vclient *c = w->c;
    for (; c->subs.head < c->subs.n && c->subs.v[c->subs.head].op.seq <= upto; c->subs.head++) {
        const struct sub *sb = &c->subs.v[c->subs.head];
        if (sched_core_submit(w->s->core, c->index, &sb->op, sb->released, w->t) < 0)
            sim_fail(w->s, -EPROTO, "client %s: the core refused submission %llu", c->spec->name,
                     (unsigned long long)sb->op.seq);
    }
    return 0;
}

static int drain_sync(void *arg)
{
    struct drain *w = arg;
    struct vclient *c = w->c;
    const struct sync_rep *r = &c->syncs.v[c->syncs.head++];
    struct sched_sync sy = {
        .scope = SCHED_SYNC_STREAM,
        .tid = (uint32_t)c->index + 1,
        .stream = 0x1000 + (uint64_t)c->index,
        .ctx = 0x100000 + (uint64_t)c->index,
        .covers = r->covers,
        .end_ns = r->end_ns,
    };
    if (sched_core_sync(w->s->core, c->index, &sy, w->t) < 0)
        sim_fail(w->s, -EPROTO, "client %s: the core refused a synchronisation", c->spec->name);
    return 1;
}

static int drain_completions(void *arg)
{
    struct drain *w = arg;
    struct vclient *c = w->c;
    for (; c->posts.head < c->posts.n; c->posts.head++) {
        const struct post *p = &c->posts.v[c->posts.head];
        /* the launch's call is the core's own submit time in possim: 0 */
        if (sched_core_complete(w->s->core, c->index, p->seq, p->done_ns, sched_done_of(p->how), 0,
                                w->t) < 0)
            sim_fail(w->s, -EPROTO, "client %s: the core refused completion %llu", c->spec->name,
                     (unsigned long long)p->seq);
    }
    return 0;
}

static const struct pos_drain_ops drain_ops = {
    .sync_next = drain_sync_next,
    .submissions = drain_subs,
    .sync = drain_sync,
    .completions = drain_completions,
};

/* What posd's engine does for a client at a wake-up (drain_client): pos_drain, then the
 * waiter count. */
static void drain(struct sim *s, struct vclient *c, int64_t t)
{
    struct drain w = {.s = s, .c = c, .t = t};
    pos_drain(&drain_ops, &w);
    sched_core_waiters(s->core, c->index, c->waiters);
}

/* What posd's engine publishes (pos_publish), and the threads it wakes. */
static void publish(struct sim *s, struct vclient *c, const struct sched_grant *g, int64_t t)
{
    struct pos_published next = {.mode = g->mode,
                                 .window = g->window,
                                 .granted = g->granted,
                                 .sample = g->sample,
                                 .kick_on_done = (uint32_t)g->kick_on_done};
    if (!(pos_publish(&c->pub, next, g->changed) & POS_PUB_GRANT))
        return;
    if ((c->state == T_SPIN || c->state == T_SLEEP) && pos_grant_allows(grant_of(c), c->wait_seq)) {
        int64_t at = c->state == T_SPIN ? t : t + s->grant_wake_ns;
        if (c->state == T_SPIN)
            spin_ends(s, c, t);
        c->state = T_RESUME;
        wake_at(s, c, at);
    }
}

/* The CPU lever in the host model: C's thread, collector and driver agent weighted as posd would
 * set them (SCHED_IDLE, or nice cpu_nice, never above what the scenario gave them) while the core
 * says LOW, as the scenario gave them otherwise. */
static void host_lever(struct sim *s, struct vclient *c, int low, int64_t t)
{
    if (!s->host || low == c->cpu_low)
        return;
    c->cpu_low = low;
    const struct possim_client_spec *sp = c->spec;
    int nice = low == POS_CPU_NICE && s->sc->cpu_nice > sp->nice ? s->sc->cpu_nice : sp->nice;
    double w = possim_host_weight(nice, sp->sched_idle || low == POS_CPU_IDLE);
    possim_host_reweight(s->host, thread_task(c), w, t);
    possim_host_reweight(s->host, collector_task(c), w, t);
    possim_host_reweight(s->host, agent_task(s, c), w, t); /* a thread of its process too */
}

/* possim train's reward (struct pos_learned_learner's slo_state): each SLO client's requests
 * arrived and not complete at T, and those late so far. */
static void learner_slo_state(struct sim *s, int64_t t)
{
    const struct pos_learned_learner *l = s->learner;
    if (!l || !l->slo_state)
        return;
    for (size_t i = 0; i < s->n; i++) {
        struct vclient *c = &s->c[i];
        double slo_ns = c->spec->slo_ms * 1e6;
        if (!(slo_ns > 0) || !c->present)
            continue;
        uint64_t out = 0, late = c->late_done;
        for (uint64_t k = c->completed; k < c->spec->requests; k++) {
            int64_t at;
            if (c->schedule)
                at = arrival_ns(c, k);
            else if (c->inflight && k == c->inflight_req)
                at = c->arrive_ns[k];
            else
                break;
            if (at > t)
                break;
            out++;
            late += (double)(t - at) > slo_ns;
        }
        l->slo_state(l->arg, (int)i, c->spec->slo_ms, out, late, t);
    }
}

/* posd wakes at T (a kick, its tick, a client arriving or leaving): drain, decide, publish,
 * re-arm the tick. */
static void posd_tick(struct sim *s, int64_t t)
{
    if (s->timer_at <= t)
        s->timer_at = NONE;
    if (s->kick_at <= t)
        s->kick_at = NONE;
    for (size_t i = 0; i < s->n; i++)
        if (s->c[i].present)
            drain(s, &s->c[i], t);
    learner_slo_state(s, t);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int64_t next = sched_core_decide(s->core, t, s->grants);
    clock_gettime(CLOCK_MONOTONIC, &b);
    s->decide_real_ns += (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    s->decisions++;
    for (size_t i = 0; i < s->n; i++)
        if (s->c[i].present) {
            publish(s, &s->c[i], &s->grants[i], t);
            host_lever(s, &s->c[i], s->grants[i].cpu_low, t);
        }
    if (next == INT64_MAX)
        return;
    int64_t at = next > t ? next : t;
    /* as posd_arm_tick: an armed tick is only ever brought forward */
    if (s->timer_at == NONE || at < s->timer_at)
        s->timer_at = at;
}

/* posd's loop wakes at T (a kick or its tick): what woke it is taken, and its wake-up's
 * drain, decision and publication happen at once, or (host model) when it has had
 * decide_us of CPU; kicks meanwhile wake it again after. */
static void posd_wake(struct sim *s, int64_t t)
{
    if (!s->host || s->decide_ns <= 0) {
        posd_tick(s, t);
        return;
    }
    if (s->timer_at <= t)
        s->timer_at = NONE;
    if (s->kick_at <= t)
        s->kick_at = NONE;
    s->posd_busy = 1;
    s->posd_woke_at = t;
    possim_host_run(s->host, posd_task(s), (double)s->decide_ns, t);
}

/* The collector of C is due for a pass at T: its work happens when it has had the CPU. */
static void collector_due(struct sim *s, struct vclient *c, int64_t t)
{
    if (!s->host || s->collector_ns <= 0) {
        collector_pass(s, c, t);
        return;
    }
    possim_host_run(s->host, collector_task(c), (double)s->collector_ns, t);
}

/* A host task's work ended at T: its thread's next step, the collector's pass or posd's
 * wake-up. */
static void host_work_done(struct sim *s, int64_t t)
{
    size_t task = possim_host_finish(s->host);
    if (task == POSSIM_HOST_NO_TASK)
        return; /* a time slice ended: the cores were given anew */
    if (task == device_task(s)) {
        device_look_done(s, t);
        return;
    }
    if (task >= agent_task(s, &s->c[0])) {
        agent_done(s, &s->c[task - agent_task(s, &s->c[0])], t);
        return;
    }
    if (task == posd_task(s)) {
        s->posd_busy = 0;
        s->posd_waited_ns += t - s->posd_woke_at - s->decide_ns;
        posd_tick(s, t);
        return;
    }
    struct vclient *c = &s->c[task / 2];
    if (task % 2)
        collector_pass(s, c, t);
    else
        thread_event(s, c, t);
}

/* ---- processes ------------------------------------------------------------------------------ */

/* C's process starts at T: it registers with posd, which decides at once, before its first
 * launch; its collector starts; its first request is issued (or awaited). */
static void client_start(struct sim *s, struct vclient *c, int64_t t)
{
    if (c->killed)
        return;
    if (s->core) {
        struct sched_client_conf conf = {
            .id = (uint32_t)c->index + 1,
            .priority = c->spec->priority,
            .max_inflight = c->spec->max_inflight,
            .min_share = s->sc->min_share,
            .weight = 1.0,
            .slo_ms = c->spec->slo_ms,
            .device = 0,
            .cpu = s->sc->cpu,
        };
        if (sched_core_client_add(s->core, c->index, &conf, t) < 0) {
            sim_fail(s, -ENOMEM, "out of memory");
            return;
        }
        c->present = 1;
        posd_tick(s, t);
        follow_sample(c);
        /* the collector's first pass, at a random phase within its poll interval */
        int64_t phase = (int64_t)llround(posapp_rng_uniform(&c->rng) * (double)s->poll_ns);
        push_event(s, t + phase, EV_POLL, c, 0);
    }
    s->progress_at = t;
    if (c->schedule && arrival_ns(c, 0) > t) {
        c->state = T_ARRIVAL;
        wake_at(s, c, arrival_ns(c, 0));
    } else {
        start_request(s, c, t);
    }
}

/* C stops at T (done, or killed): its process exits, and posd sees it leave a moment later. */
static void client_stop(struct sim *s, struct vclient *c, int64_t t)
{
    c->state = T_DONE;
    c->gen++; /* no wake-up of its thread is left */
    c->stop_ns = t;
    s->ndone++;
    if (s->host) { /* its threads are gone */
        possim_host_stop(s->host, thread_task(c), t);
        possim_host_stop(s->host, collector_task(c), t);
    }
    if (c->present)
        push_event(s, t + s->wake_ns, EV_LEAVE, c, 0);
}

static void client_done(struct sim *s, struct vclient *c, int64_t t)
{
    client_stop(s, c, t);
    for (size_t i = 0; i < s->n; i++) {
        struct vclient *k = &s->c[i];
        if (k->spec->stop_with_index == c->index && k->state != T_DONE) {
            k->killed = 1;
            if (k->state == T_UNBORN)
                k->gen++;
            client_stop(s, k, t);
        }
    }
}

/* posd notices at T that C's process is gone: its last reports count, then it is forgotten. */
static void client_leave(struct sim *s, struct vclient *c, int64_t t)
{
    if (!c->present)
        return;
    drain(s, c, t);
    sched_core_client_stats(s->core, c->index, t, &c->core);
    sched_core_client_remove(s->core, c->index, t);
    c->present = 0;
    posd_tick(s, t);
}

/* ---- setup -------------------------------------------------------------------------------- */

static int client_setup(struct sim *s, struct vclient *c, int index, uint64_t seed)
{
    const struct possim_client_spec *sp = &s->sc->clients[index];
    char msg[512];
    c->spec = sp;
    c->index = index;
    if (s->tl) {
        timeline_process(s->tl, (uint32_t)index + 1, sp->name);
        timeline_track(s->tl, (uint32_t)index + 1, 1, "stream 0");
    }
    if (sim_model_load(sp->model_path, sp->batch, &c->model, msg, sizeof msg) < 0) {
        sim_fail(s, -EINVAL, "%s", msg);
        return -EINVAL;
    }
    if (c->model.nops == 0) {
        sim_fail(s, -EINVAL, "%s: model '%s' has no op lines", sp->model_path, c->model.name);
        return -EINVAL;
    }
    if (sim_request_build(&c->model, &c->req) < 0)
        goto oom;
    c->keys = calloc(c->req.nops, sizeof *c->keys);
    c->arrive_ns = calloc(sp->requests, sizeof *c->arrive_ns);
    c->done_ns = calloc(sp->requests, sizeof *c->done_ns);
    if (!c->keys || !c->arrive_ns || !c->done_ns)
        goto oom;
    for (size_t j = 0; j < c->req.nops; j++)
        c->keys[j] = sim_request_name_key(c->req.ops[j].name);
    if (sp->arrival.kind != POSAPP_ARRIVAL_CLOSED) {
        c->schedule = calloc(sp->requests, sizeof *c->schedule);
        if (!c->schedule)
            goto oom;
        posapp_arrival_schedule(&sp->arrival, sp->seed + seed - 1, c->schedule, sp->requests);
    }
    c->owner = sim_gpu_owner_add(s->g);
    c->ctx = c->owner < 0 ? c->owner : sim_gpu_ctx_add(s->g, c->owner);
    c->stream = c->ctx < 0 ? c->ctx : sim_gpu_stream_add(s->g, c->owner, c->ctx, 0);
    if (c->stream < 0) {
        sim_fail(s, -ENOSPC, "the virtual GPU has no room for client %s", sp->name);
        return -ENOSPC;
    }
    /* its share, as the shim puts it in place before the context exists (MPS only: a
     * time-sliced device runs one context at a time on all of its SMs) */
    if (sp->sm_share && s->sc->dev.mode == SIM_MODE_MPS)
        sim_gpu_ctx_limit_sms(s->g, c->ctx, sim_gpu_sms_of_share(s->sc->dev.num_sms, sp->sm_share));
    posapp_rng_seed(&c->rng, posapp_hash3(seed, (uint64_t)index, 0x706f6c6cull));
    c->start_ns = (int64_t)llround(sp->start_ms * 1e6);
    c->slack_ns = us_ns(sp->sleep_slack_us);
    c->state = T_UNBORN;
    c->until_marker = sp->sample;
    c->shim_sample = sp->sample;
    c->idle_us = POS_IDLE_POLL_US;
    c->pub = pos_published_init();
    return 0;
oom:
    sim_fail(s, -ENOMEM, "out of memory");
    return -ENOMEM;
}

static void client_free(struct vclient *c)
{
    sim_request_free(&c->req);
    sim_model_free(&c->model);
    free(c->keys);
    free(c->arrive_ns);
    free(c->done_ns);
    free(c->schedule);
    free(c->recs.v);
    free(c->agent_wait.v);
    free(c->agent_run.v);
    free(c->landed.v);
    free(c->coll_syncs.v);
    free(c->subs.v);
    free(c->posts.v);
    free(c->syncs.v);
}

static void client_result(const struct vclient *c, struct possim_client_result *r)
{
    const struct possim_client_spec *sp = c->spec;
    uint64_t n = c->completed;
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", sp->name);
    snprintf(r->model, sizeof r->model, "%s", c->model.name);
    r->batch = sp->batch;
    r->priority = sp->priority;
    r->requests = n;
    r->launches = c->launches;
    r->grant_waits = c->waits;
    r->grant_wait_ms = (double)c->wait_ns / 1e6;
    r->markers = c->markers;
    r->windowed = c->windowed;
    r->slo_ms = sp->slo_ms;
    r->killed = c->killed;
    r->posd_op_us = (double)c->core.op_ns / 1e3;
    r->posd_requests = c->core.requests;
    r->lat_ms = calloc(n ? n : 1, sizeof *r->lat_ms);
    double *sorted = calloc(n ? n : 1, sizeof *sorted);
    if (!r->lat_ms || !sorted) {
        free(sorted);
        free(r->lat_ms);
        r->lat_ms = NULL;
        return;
    }
    /* over its own active time: first arrival to last completion, or to its kill */
    int64_t first = n ? INT64_MAX : c->start_ns, last = c->killed ? c->stop_ns : INT64_MIN;
    for (uint64_t i = 0; i < n; i++) {
        r->lat_ms[i] = sorted[i] = (double)(c->done_ns[i] - c->arrive_ns[i]) / 1e6;
        first = c->arrive_ns[i] < first ? c->arrive_ns[i] : first;
        if (!c->killed)
            last = c->done_ns[i] > last ? c->done_ns[i] : last;
    }
    double span = (double)(last - first) / 1e9;
    struct posapp_report rep = {.slo_ms = sp->slo_ms > 0 ? sp->slo_ms : NAN};
    if (n)
        posapp_report_latencies(&rep, sorted, n, span);
    r->p50_ms = n ? rep.p50_ms : NAN;
    r->p90_ms = n ? rep.p90_ms : NAN;
    r->p99_ms = n ? rep.p99_ms : NAN;
    r->mean_ms = n ? rep.mean_ms : NAN;
    r->max_ms = n ? sorted[n - 1] : NAN;
    r->active_s = span;
    r->throughput_rps = span > 0 ? (double)n / span : NAN;
    r->launch_rate = span > 0 ? (double)c->launches / span : NAN;
    r->slo_attainment = n ? rep.slo_attainment : NAN;
    free(sorted);
}

/* The host model, when [host] cores is set: each client's thread, collector and driver agent
 * in its class, the device process real-time (or at nice -10) and posd at nice 0, on the
 * cores. */
static int host_setup(struct sim *s, struct possim_host *h)
{
    const struct possim_host_spec *hs = &s->sc->host;
    if (hs->cores <= 0)
        return 0;
    if (possim_host_init(h, hs->cores, 3 * s->n + 2) < 0) {
        sim_fail(s, -ENOMEM, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < s->n; i++) {
        const struct possim_client_spec *sp = s->c[i].spec;
        double w = possim_host_weight(sp->nice, sp->sched_idle);
        possim_host_set_weight(h, thread_task(&s->c[i]), w);
        possim_host_set_weight(h, collector_task(&s->c[i]), w);
        possim_host_set_weight(h, agent_task(s, &s->c[i]), w);
    }
    possim_host_set_rt(h, device_task(s), hs->device_rt);
    if (!hs->device_rt)
        possim_host_set_weight(h, device_task(s), possim_host_weight(-10, 0));
    double slice_us = hs->slice_us;
    if (slice_us < 0) { /* EEVDF's base slice: 0.75 ms x (1 + ilog2 of the CPUs, at most 8) */
        int k = 0;
        for (int c = hs->cores < 8 ? hs->cores : 8; c > 1; c >>= 1)
            k++;
        slice_us = 750.0 * (1 + k);
    }
    possim_host_set_slice(h, us_ns(slice_us));
    s->host = h;
    s->driver_ns = us_ns(hs->driver_us);
    s->sync_ns = us_ns(hs->sync_us);
    s->collector_ns = us_ns(hs->collector_us);
    s->decide_ns = us_ns(hs->decide_us);
    s->device_ns = us_ns(hs->device_us);
    s->agent_ns = s->device_ns > 0 ? us_ns(hs->agent_us) : 0; /* agents only behind looks */
    return 0;
}

/* ---- the run ------------------------------------------------------------------------------ */

static void run_loop(struct sim *s)
{
    while (!s->rc && s->ndone < s->n) {
        int64_t td = sim_gpu_next_event(s->g);
        int64_t th = s->heap.n ? s->heap.e[0].t : NONE;
        int64_t tc = s->host ? s->host->next_t : NONE;
        int64_t tp = s->posd_busy ? NONE : s->timer_at < s->kick_at ? s->timer_at : s->kick_at;
        s->events++;
        if (s->now - s->progress_at > STUCK_NS) {
            sim_fail(s, -EDEADLK,
                     "no launch and no completion for %.0f s of virtual time at %.6f s: the "
                     "clients are held for good",
                     STUCK_NS / 1e9, (double)s->now / 1e9);
            break;
        }
        if (td != INT64_MAX && td <= th && td <= tc && td <= tp) {
            s->now = td;
            sim_gpu_advance(s->g, td);
            reap(s, td);
        } else if (th != NONE && th <= tc && th <= tp) {
            struct event e = heap_pop(&s->heap);
            struct vclient *c = &s->c[e.client];
            s->now = e.t;
            switch (e.type) {
            case EV_THREAD:
                if (e.gen == c->gen)
                    thread_event(s, c, e.t);
                break;
            case EV_POLL:
                if (c->present)
                    collector_due(s, c, e.t);
                break;
            case EV_START:
                client_start(s, c, e.t);
                break;
            case EV_LEAVE:
                client_leave(s, c, e.t);
                break;
            case EV_NOTIFY:
                op_notified(s, c, e.gen, e.t);
                break;
            }
        } else if (tc != NONE && tc <= tp) {
            s->now = tc;
            host_work_done(s, tc);
        } else if (tp != NONE) {
            s->now = tp;
            posd_wake(s, tp);
        } else {
            sim_fail(s, -EDEADLK,
                     "nothing left to happen at %.6f s with %zu of %zu clients unfinished",
                     (double)s->now / 1e9, s->n - s->ndone, s->n);
        }
    }
}

/* Every kernel of every client: the core's profile of it against the device model's solo
 * duration, for possim --profile-check. */
/* The device model's own duration of RO back to back behind itself on one stream of an idle
 * device (what a client's samples measure): the time between the completions of two copies.
 * G is scratch. */
static double kernel_truth_ns(const struct sim_dev_params *p, struct sim_gpu *g,
                              const struct sim_request_op *ro)
{
    sim_gpu_init(g, p, 0);
    int ow = sim_gpu_owner_add(g);
    int cx = ow < 0 ? ow : sim_gpu_ctx_add(g, ow);
    int st = cx < 0 ? cx : sim_gpu_stream_add(g, ow, cx, 0);
    if (st < 0)
        return NAN;
    int op[2];
    for (int i = 0; i < 2; i++) {
        if ((op[i] = sim_gpu_op_alloc(g, ow)) < 0)
            return NAN;
        fill_kernel(&g->ops[op[i]], ro, cx, st);
        sim_gpu_submit(g, op[i], 0);
    }
    for (int64_t t; (t = sim_gpu_next_event(g)) != INT64_MAX;)
        sim_gpu_advance(g, t);
    return (double)(g->ops[op[1]].end_ns - g->ops[op[0]].end_ns);
}

static int profile_check(struct sim *s, struct possim_result *out)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        n += s->c[i].req.nops;
    out->kcheck = calloc(n ? n : 1, sizeof *out->kcheck);
    struct sim_gpu *scratch = malloc(sizeof *scratch);
    if (!out->kcheck || !scratch) {
        free(scratch);
        return -ENOMEM;
    }
    for (size_t i = 0; i < s->n; i++) {
        const struct vclient *c = &s->c[i];
        for (size_t j = 0; j < c->req.nops; j++) {
            const struct sim_request_op *ro = &c->req.ops[j];
            struct possim_kcheck *k = &out->kcheck[out->nkcheck++];
            snprintf(k->client, sizeof k->client, "%s", c->spec->name);
            snprintf(k->kernel, sizeof k->kernel, "%s", ro->name);
            k->key = c->keys[j];
            k->blocks = (uint32_t)sim_request_op_blocks(ro);
            k->truth_ns = kernel_truth_ns(&s->sc->dev, scratch, ro);
            const struct pos_kprof *p = pos_prof_find(&s->prof, 0, c->keys[j], ro->grid, ro->block);
            if (p) {
                k->learned_ns = p->n ? p->mean_ns : 0;
                k->sd_ns = pos_kprof_sd(p);
                k->n = p->n;
                k->co_n = p->co_n;
                k->co_ratio = p->co_n ? p->co_ratio : 1;
            }
        }
    }
    free(scratch);
    return 0;
}

/* The files given for policies' parameters ([sched] schedule, weights), read into s->schedule
 * and s->weights and handed to the policy in ARGS: one that cannot be used fails the run
 * ("FILE: what"; posd would go on without it, but a benchmark of policy learned that ran pos
 * instead would measure the wrong thing). */
static int read_policy_files(struct sim *s, struct pos_policy_args *args)
{
    for (size_t i = 0; i < args->n; i++) {
        struct pos_policy_arg *a = &args->v[i];
        char msg[512];
        int rc = 0;
        if (a->param->type == POS_PARAM_SCHEDULE) {
            rc = pos_schedule_load(a->file, &s->schedule, msg, sizeof msg);
            a->schedule = rc < 0 ? NULL : &s->schedule;
        } else if (a->param->type == POS_PARAM_WEIGHTS) {
            rc = pos_weights_load(a->file, &s->weights, msg, sizeof msg);
            char why[256];
            if (rc == 0 && (rc = pos_learned_check(&s->weights, why, sizeof why)) < 0)
                snprintf(msg, sizeof msg, "%s: %s", a->file, why);
            a->weights = rc < 0 ? NULL : &s->weights;
        }
        if (rc < 0) {
            sim_fail(s, rc, "%s", msg);
            return rc;
        }
    }
    return 0;
}

int possim_run(const struct possim_scenario *sc, uint64_t seed, struct possim_result *out,
               char *err, size_t errlen)
{
    return possim_run_timeline(sc, seed, out, NULL, err, errlen);
}

int possim_run_timeline(const struct possim_scenario *sc, uint64_t seed, struct possim_result *out,
                        struct timeline *tl, char *err, size_t errlen)
{
    return possim_run_learning(sc, seed, out, tl, NULL, err, errlen);
}

int possim_run_learning(const struct possim_scenario *sc, uint64_t seed,
                        struct possim_result *out, struct timeline *tl, const void *learner,
                        char *err, size_t errlen)
{
    struct possim_host host = {0};
    struct sim s = {.sc = sc,
                    .tl = tl,
                    .n = sc->nclients,
                    .timer_at = NONE,
                    .kick_at = NONE,
                    .err = err,
                    .errlen = errlen,
                    .learner = learner};
    memset(out, 0, sizeof *out);
    s.poll_ns = us_ns(sc->poll_us);
    s.prompt_poll_ns = us_ns(sc->prompt_poll_us);
    s.wake_ns = us_ns(sc->wake_us);
    s.grant_wake_ns = us_ns(sc->grant_wake_us);
    s.spin_ns = us_ns(sc->spin_us);
    s.help_spin_ns = us_ns(sc->help_spin_us);
    s.help_when_ns = us_ns(sc->help_when_us);
    s.notify_ns = us_ns(sc->notify_us);
    s.g = calloc(1, sizeof *s.g);
    s.c = calloc(s.n ? s.n : 1, sizeof *s.c);
    if (!s.g || !s.c) {
        sim_fail(&s, -ENOMEM, "out of memory");
        goto out;
    }
    sim_gpu_init(s.g, &sc->dev, 0);
    s.dev = (struct pos_sched_device){
        .index = 0,
        .sm_count = sc->dev.num_sms,
        .max_threads_per_sm = sc->dev.max_threads_per_sm,
        .max_blocks_per_sm = sc->dev.max_blocks_per_sm,
        .smem_per_sm = sc->dev.smem_per_sm,
        .concurrent = sc->dev.mode == SIM_MODE_MPS,
    };
    if (!sc->no_core) {
        struct sched_params p;
        sched_params_defaults(&p);
        p.tick_ns = us_ns(sc->tick_us);
        p.guard_period_ns = (int64_t)llround(sc->guard_period_ms * 1e6);
        p.stall_ns = (int64_t)llround(sc->stall_ms * 1e6);
        p.credits = sc->credits;
        p.window_ns = us_ns(sc->window_us);
        p.idle_grace_ns = us_ns(sc->idle_grace_us);
        p.profile_min = sc->profile_min;
        p.cpu_hold_ns = (int64_t)llround(sc->cpu_hold_ms * 1e6);
        struct pos_policy_args args = sc->policy_args;
        args.ext = s.learner;
        if (read_policy_files(&s, &args) < 0)
            goto out;
        const struct pos_policy_ops *pol = pos_policy_find(sc->policy);
        if (!pol) {
            sim_fail(&s, -EINVAL, "unknown policy '%s'", sc->policy);
            goto out;
        }
        s.core = sched_core_new(&p, &s.dev, pol, &args, 0);
        if (!s.core || pos_prof_init(&s.prof, 0) < 0) {
            sim_fail(&s, -ENOMEM, "out of memory");
            goto out;
        }
        if (sc->profiles_in[0]) {
            char perr[512];
            int rc = pos_prof_load(&s.prof, &s.dev, sc->profiles_in, perr, sizeof perr);
            if (rc < 0) {
                sim_fail(&s, rc, "%s", perr);
                goto out;
            }
        }
        sched_core_set_profiles(s.core, &s.prof);
    }
    for (size_t i = 0; i < s.n; i++)
        if (client_setup(&s, &s.c[i], (int)i, seed) < 0)
            goto out;
    if (host_setup(&s, &host) < 0)
        goto out;
    /* every process starts (and registers with posd) at its start time, in file order */
    for (size_t i = 0; i < s.n; i++)
        push_event(&s, s.c[i].start_ns, EV_START, &s.c[i], 0);
    run_loop(&s);
    if (s.rc)
        goto out;
    out->seed = seed;
    out->nclients = s.n;
    int64_t makespan = 0;
    for (size_t i = 0; i < s.n; i++) {
        struct vclient *c = &s.c[i];
        if (c->present) { /* what posd learns as it leaves */
            drain(&s, c, s.now);
            sched_core_client_stats(s.core, c->index, s.now, &c->core);
        }
        for (uint64_t k = 0; k < c->completed; k++)
            makespan = c->done_ns[k] > makespan ? c->done_ns[k] : makespan;
        if (c->killed && c->stop_ns > makespan)
            makespan = c->stop_ns;
        client_result(c, &out->clients[i]);
        if (!out->clients[i].lat_ms) {
            sim_fail(&s, -ENOMEM, "out of memory");
            goto out;
        }
        out->launches += c->launches;
    }
    sim_gpu_advance(s.g, makespan);
    out->makespan_s = (double)makespan / 1e9;
    out->busy_fraction = makespan > 0 ? s.g->stats.busy_ns / (double)makespan : NAN;
    out->decisions = s.decisions;
    out->events = s.events;
    out->decide_us = s.decisions ? s.decide_real_ns / 1e3 / (double)s.decisions : NAN;
    if (s.host) {
        out->host_cores = s.host->cores;
        out->host_busy = makespan > 0 ? s.host->busy_ns / ((double)makespan * s.host->cores) : NAN;
        out->posd_core_wait_ms = (double)s.posd_waited_ns / 1e6;
        double span = makespan > 0 ? (double)makespan : NAN;
        for (size_t i = 0; i < s.n; i++) {
            out->host_threads += s.host->t[thread_task(&s.c[i])].served_ns / span;
            out->host_collectors += s.host->t[collector_task(&s.c[i])].served_ns / span;
            out->host_agents += s.host->t[agent_task(&s, &s.c[i])].served_ns / span;
        }
        out->host_posd = s.host->t[posd_task(&s)].served_ns / span;
        out->host_device = s.host->t[device_task(&s)].served_ns / span;
    }
    if (s.core && sc->profiles_out[0]) {
        char perr[512];
        int rc = pos_prof_save(&s.prof, &s.dev, sc->profiles_out, perr, sizeof perr);
        if (rc < 0) {
            sim_fail(&s, rc, "%s", perr);
            goto out;
        }
    }
    if (s.core && sc->profile_check && profile_check(&s, out) < 0) {
        sim_fail(&s, -ENOMEM, "out of memory");
        goto out;
    }
    const char *note = s.core ? sched_core_policy_note(s.core) : NULL;
    snprintf(out->policy_note, sizeof out->policy_note, "%s", note ? note : "");
out:
    for (size_t i = 0; s.c && i < s.n; i++)
        client_free(&s.c[i]);
    free(s.c);
    free(s.heap.e);
    sched_core_free(s.core);
    pos_prof_free(&s.prof);
    pos_schedule_free(&s.schedule);
    pos_weights_free(&s.weights);
    possim_host_free(&host);
    free(s.dev_wait.v);
    free(s.dev_look.v);
    free(s.g);
    if (s.rc)
        possim_result_free(out);
    return s.rc;
}

void possim_result_free(struct possim_result *r)
{
    free(r->kcheck);
    r->kcheck = NULL;
    r->nkcheck = 0;
    for (size_t i = 0; i < r->nclients; i++) {
        free(r->clients[i].lat_ms);
        r->clients[i].lat_ms = NULL;
    }
}

/* ---- reports ------------------------------------------------------------------------------ */

static const char *mode_name(int mode)
{
    return mode == SIM_MODE_MPS ? "mps" : "timeslice";
}

static void fmt_num(char *buf, size_t len, double v, int decimals)
{
    if (isfinite(v))
        snprintf(buf, len, "%.*f", decimals, v);
    else
        snprintf(buf, len, "-");
}

void possim_write_text(FILE *f, const struct possim_scenario *sc, const struct possim_result *r,
                       double cpu_s)
{
    fprintf(f, "# possim %s: device %s %s, policy %s, seed %llu (simulated, virtual time)\n",
            sc->path, sc->device_name, mode_name(sc->dev.mode), sc->policy,
            (unsigned long long)r->seed);
    if (sc->dev.mode != SIM_MODE_MPS)
        for (size_t i = 0; i < sc->nclients; i++)
            if (sc->clients[i].sm_share) {
                fprintf(f, "# sm_share ignored: a %s device runs one process at a time (no MPS)\n",
                        mode_name(sc->dev.mode));
                break;
            }
    fprintf(f, "# %-14s %-14s %5s %5s %8s %9s %10s %10s %10s %10s %10s %11s %7s %7s %8s %10s\n",
            "client", "model", "batch", "prio", "requests", "launches", "p50_ms", "p90_ms",
            "p99_ms", "mean_ms", "req_s", "launch_s", "slo_ms", "slo_ok", "waits", "wait_ms");
    for (size_t i = 0; i < r->nclients; i++) {
        const struct possim_client_result *c = &r->clients[i];
        char slo[32], att[32];
        fmt_num(slo, sizeof slo, c->slo_ms > 0 ? c->slo_ms : NAN, 3);
        fmt_num(att, sizeof att, c->slo_attainment, 4);
        fprintf(f,
                "  %-14s %-14s %5u %5d %8llu %9llu %10.3f %10.3f %10.3f %10.3f %10.2f %11.1f %7s "
                "%7s %8llu %10.3f\n",
                c->name, c->model, c->batch, c->priority, (unsigned long long)c->requests,
                (unsigned long long)c->launches, c->p50_ms, c->p90_ms, c->p99_ms, c->mean_ms,
                c->throughput_rps, c->launch_rate, slo, att, (unsigned long long)c->grant_waits,
                c->grant_wait_ms);
    }
    fprintf(f, "# makespan_s %.6f busy %.4f launches %llu decisions %llu events %llu\n",
            r->makespan_s, r->busy_fraction, (unsigned long long)r->launches,
            (unsigned long long)r->decisions, (unsigned long long)r->events);
    if (r->host_cores)
        fprintf(f,
                "# host cores %d busy %.4f posd_core_wait_ms %.3f (cores used: threads %.3f "
                "collectors %.3f agents %.3f posd %.3f device %.3f)\n",
                r->host_cores, r->host_busy, r->posd_core_wait_ms, r->host_threads,
                r->host_collectors, r->host_agents, r->host_posd, r->host_device);
    if (r->nkcheck)
        fprintf(f, "# profile-check %-10s %-28s %16s %7s %10s %10s %8s %6s %6s %8s %8s\n", "client",
                "kernel", "key", "blocks", "model_us", "posd_us", "sd_us", "n", "co_n", "co_ratio",
                "err_pct");
    for (size_t i = 0; i < r->nkcheck; i++) {
        const struct possim_kcheck *k = &r->kcheck[i];
        char err[32];
        fmt_num(err, sizeof err, k->n ? 100.0 * (k->learned_ns - k->truth_ns) / k->truth_ns : NAN,
                2);
        fprintf(f, "  kcheck %-14s %-28s %016llx %7u %10.2f %10.2f %8.2f %6llu %6llu %8.3f %8s\n",
                k->client, k->kernel, (unsigned long long)k->key, k->blocks, k->truth_ns / 1e3,
                k->learned_ns / 1e3, k->sd_ns / 1e3, (unsigned long long)k->n,
                (unsigned long long)k->co_n, k->co_ratio, err);
    }
    if (r->policy_note[0])
        fprintf(f, "# policy note: %s\n", r->policy_note);
    if (cpu_s > 0)
        fprintf(f, "# speed %.0f launches per cpu second (%.3f cpu s), %.3f us per decision\n",
                (double)r->launches / cpu_s, cpu_s, r->decide_us);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, const char *key, double v, int decimals)
{
    fprintf(f, ",\"%s\":", key);
    if (isfinite(v))
        fprintf(f, "%.*f", decimals, v);
    else
        fputs("null", f);
}

void possim_write_json(FILE *f, const struct possim_scenario *sc, const struct possim_result *r,
                       double cpu_s)
{
    fputs("{\"scenario\":", f);
    json_str(f, sc->path);
    fputs(",\"device\":", f);
    json_str(f, sc->device_name);
    fprintf(f, ",\"mode\":\"%s\",\"policy\":", mode_name(sc->dev.mode));
    json_str(f, sc->policy);
    fprintf(f, ",\"seed\":%llu,\"simulated\":true", (unsigned long long)r->seed);
    json_num(f, "makespan_s", r->makespan_s, 6);
    json_num(f, "busy_fraction", r->busy_fraction, 6);
    fprintf(f, ",\"launches\":%llu,\"decisions\":%llu,\"events\":%llu",
            (unsigned long long)r->launches, (unsigned long long)r->decisions,
            (unsigned long long)r->events);
    if (r->host_cores) {
        fprintf(f, ",\"host_cores\":%d", r->host_cores);
        json_num(f, "host_busy", r->host_busy, 6);
        json_num(f, "posd_core_wait_ms", r->posd_core_wait_ms, 3);
        json_num(f, "host_threads", r->host_threads, 4);
        json_num(f, "host_collectors", r->host_collectors, 4);
        json_num(f, "host_agents", r->host_agents, 4);
        json_num(f, "host_posd", r->host_posd, 4);
        json_num(f, "host_device", r->host_device, 4);
    }
    fputs(",\"clients\":[", f);
    for (size_t i = 0; i < r->nclients; i++) {
        const struct possim_client_result *c = &r->clients[i];
        fputs(i ? ",{\"name\":" : "{\"name\":", f);
        json_str(f, c->name);
        fputs(",\"model\":", f);
        json_str(f, c->model);
        fprintf(f, ",\"batch\":%u,\"priority\":%d,\"requests\":%llu,\"launches\":%llu", c->batch,
                c->priority, (unsigned long long)c->requests, (unsigned long long)c->launches);
        json_num(f, "p50_ms", c->p50_ms, 6);
        json_num(f, "p90_ms", c->p90_ms, 6);
        json_num(f, "p99_ms", c->p99_ms, 6);
        json_num(f, "mean_ms", c->mean_ms, 6);
        json_num(f, "max_ms", c->max_ms, 6);
        json_num(f, "active_s", c->active_s, 6);
        json_num(f, "throughput_rps", c->throughput_rps, 3);
        json_num(f, "launches_per_s", c->launch_rate, 1);
        json_num(f, "slo_ms", c->slo_ms > 0 ? c->slo_ms : NAN, 3);
        json_num(f, "slo_attainment", c->slo_attainment, 6);
        fprintf(f, ",\"grant_waits\":%llu", (unsigned long long)c->grant_waits);
        json_num(f, "grant_wait_ms", c->grant_wait_ms, 3);
        fprintf(f, ",\"markers\":%llu,\"windowed\":%llu", (unsigned long long)c->markers,
                (unsigned long long)c->windowed);
        json_num(f, "posd_op_us", c->posd_op_us > 0 ? c->posd_op_us : NAN, 3);
        fprintf(f, ",\"posd_requests\":%llu,\"killed\":%s}", (unsigned long long)c->posd_requests,
                c->killed ? "true" : "false");
    }
    fputc(']', f);
    if (r->policy_note[0]) {
        fputs(",\"policy_note\":", f);
        json_str(f, r->policy_note);
    }
    if (cpu_s > 0) {
        json_num(f, "cpu_s", cpu_s, 3);
        json_num(f, "launches_per_cpu_s", (double)r->launches / cpu_s, 0);
        json_num(f, "decision_us", r->decide_us, 3);
    }
    fputs("}\n", f);
}
