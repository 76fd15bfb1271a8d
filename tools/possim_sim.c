/* possim's simulation (see possim_sim.h and docs/possim.md).
 *
 * Every client is one host thread with one context and one stream on one virtual GPU. The
 * thread runs its requests like posapp with --streams 1 --threads 1: host time, then each
 * launch goes through the shim's submit path (a sequence number; released at once when the
 * published grant is FREE or covers it, else a spin, a kick and a sleep until posd publishes
 * a grant that covers it), then the device model; after the last launch it synchronises and
 * reports the synchronisation to posd. The collector sees completion markers poll delay after
 * they land and posts them (each bounding the earlier launches of the stream). posd wakes on
 * kicks (after its wake-up latency) and on its tick; each time it drains what the clients
 * wrote into the core exactly as sched/engine.c does, runs sched_core_decide and publishes
 * the grants. Events (client wake-ups, marker sightings) sit in a binary heap, merged with
 * the device model's next event and posd's two wake-up times. */
#include "tools/possim_sim.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pos/client_shm.h"
#include "pos/op_record.h"
#include "sched/core.h"
#include "sim/gpu_model.h"
#include "sim/model_file.h"
#include "sim/request.h"
#include "tools/posapp_arrival.h"
#include "tools/posapp_stats.h"

#define SHIM_SAMPLE 32 /* the shim's own POS_SAMPLE default: posd can ask for more markers */
#define MARKED      (1ull << 63)
#define NONE        INT64_MAX
#define STUCK_NS    100000000000LL /* virtual time with no progress: the run is stuck */

/* ---- the event heap --------------------------------------------------------------------- */

enum ev_type { EV_THREAD = 1, EV_SIGHT };

struct event {
    int64_t t;
    uint64_t order; /* insertion order: ties go first in, first out */
    uint32_t type;
    uint32_t client;
    uint64_t gen; /* EV_THREAD: the thread's wake generation it belongs to */
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

struct sight {
    uint64_t seq;
    int64_t t;
};

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

#define VEC(T)                                                                                     \
    struct {                                                                                       \
        T *v;                                                                                      \
        size_t head, n, cap;                                                                       \
    }

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

enum thread_state {
    T_ARRIVAL, /* waiting for its next request's arrival */
    T_HOST,    /* host time before a launch */
    T_SPIN,    /* spinning for a grant */
    T_SLEEP,   /* asleep on a grant (counted in waiters, posd kicked) */
    T_RESUME,  /* granted: about to launch */
    T_SYNC,    /* synchronising on its last launch */
    T_DONE,
};

struct vclient {
    const struct possim_client_spec *spec;
    int index;
    struct sim_model model;
    struct sim_request req;
    uint64_t *keys; /* per op of the request */
    int owner, ctx, stream;
    /* the thread */
    int state;
    uint64_t gen; /* bumped whenever its pending wake-up is superseded */
    uint64_t req_i;
    size_t op_j;
    double *schedule; /* open loop: arrival offsets in s */
    int64_t *arrive_ns, *done_ns;
    uint64_t seq;      /* its last launch number */
    uint64_t wait_seq; /* the launch waiting for a grant */
    int64_t wait_since;
    uint32_t waiters;      /* threads asleep on a grant, as posd reads it */
    uint64_t dev_done_seq; /* every launch <= this is complete on the device */
    uint32_t until_marker;
    /* what posd published for it */
    uint32_t pub_mode;
    uint64_t pub_granted;
    uint32_t pub_sample;
    int pub_kick;
    /* its collector */
    struct posapp_rng rng;
    int64_t last_sight;
    uint64_t reported_upto;
    VEC(struct sight) sights;
    /* its shared memory, as posd drains it */
    VEC(struct sub) subs;
    VEC(struct post) posts;
    VEC(struct sync_rep) syncs;
    /* statistics */
    uint64_t launches, waits, markers;
    int64_t wait_ns;
};

struct sim {
    const struct possim_scenario *sc;
    struct sim_gpu *g;
    struct sched_core *core; /* NULL: policy none */
    struct pos_sched_device dev;
    struct sched_grant grants[SCHED_MAX_CLIENTS];
    struct vclient *c;
    size_t n, ndone;
    struct heap heap;
    int64_t now;
    int64_t timer_at; /* posd's armed tick, NONE when disarmed */
    int64_t kick_at;  /* posd's wake-up after a kick, NONE when none is due */
    int64_t poll_ns, wake_ns, grant_wake_ns, spin_ns;
    uint64_t decisions, events;
    int64_t progress_at; /* the last launch or request completion */
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

static void wake_at(struct sim *s, struct vclient *c, int64_t t)
{
    c->gen++;
    if (heap_push(&s->heap, t, EV_THREAD, (uint32_t)c->index, c->gen) < 0)
        sim_fail(s, -ENOMEM, "out of memory");
}

/* A kick: posd wakes wake_us later (kicks coalesce). */
static void kick(struct sim *s, int64_t t)
{
    int64_t at = t + s->wake_ns;
    if (at < s->kick_at)
        s->kick_at = at;
}

static int granted(const struct vclient *c, uint64_t seq)
{
    return c->pub_mode == POS_GRANT_FREE || seq <= c->pub_granted;
}

/* ---- the thread ------------------------------------------------------------------------- */

static void start_op(struct sim *s, struct vclient *c, int64_t t)
{
    c->state = T_HOST;
    wake_at(s, c, t + us_ns(c->spec->host_us) + us_ns(c->spec->launch_us));
}

/* Request C->req_i arrives (or is issued) at T. */
static void start_request(struct sim *s, struct vclient *c, int64_t t)
{
    c->arrive_ns[c->req_i] = c->schedule ? (int64_t)llround(c->schedule[c->req_i] * 1e9) : t;
    c->op_j = 0;
    start_op(s, c, t);
}

static void next_request(struct sim *s, struct vclient *c, int64_t t)
{
    if (++c->req_i == c->spec->requests) {
        c->state = T_DONE;
        s->ndone++;
        return;
    }
    if (c->schedule) {
        int64_t arrive = (int64_t)llround(c->schedule[c->req_i] * 1e9);
        if (arrive > t) {
            c->state = T_ARRIVAL;
            wake_at(s, c, arrive);
            return;
        }
    }
    start_request(s, c, t);
}

/* The synchronisation on the request's last launch returns at T. */
static void sync_returns(struct sim *s, struct vclient *c, int64_t t)
{
    c->done_ns[c->req_i] = t;
    s->progress_at = t;
    if (s->core) {
        struct sync_rep r = {c->seq, t};
        if (VEC_PUSH(c->syncs, r) < 0)
            sim_fail(s, -ENOMEM, "out of memory");
        if (c->pub_kick)
            kick(s, t);
    }
    next_request(s, c, t);
}

/* The launch call of op C->op_j reaches the driver at T: the op goes to the device model. */
static void device_launch(struct sim *s, struct vclient *c, int windowed, int64_t t)
{
    const struct sim_request_op *ro = &c->req.ops[c->op_j];
    int marked = 0;
    if (s->core) {
        uint32_t sample =
            c->pub_sample && c->pub_sample < SHIM_SAMPLE ? c->pub_sample : SHIM_SAMPLE;
        if (c->until_marker > sample)
            c->until_marker = sample;
        int due = --c->until_marker == 0;
        if (due)
            c->until_marker = sample;
        marked = due || windowed;
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
    uint64_t blocks = sim_request_op_blocks(ro), threads = sim_request_op_threads(ro);
    o->kind = SIM_OP_KERNEL;
    o->flags = ro->fp16 ? SIM_OPF_FP16 : 0;
    o->ctx = (int16_t)c->ctx;
    o->stream = c->stream;
    o->blocks = blocks ? (blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks) : 1;
    o->threads = threads ? (uint32_t)threads : 1;
    o->smem = ro->smem;
    o->flops = ro->flops;
    o->bytes = ro->bytes;
    o->tag = c->seq | (marked ? MARKED : 0);
    sim_gpu_submit(s->g, op, t);
    c->launches++;
    s->progress_at = t;
    /* the next op, or the synchronisation */
    if (++c->op_j < c->req.nops) {
        start_op(s, c, t);
        return;
    }
    c->state = T_SYNC;
    if (c->dev_done_seq >= c->seq)
        sync_returns(s, c, t);
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
    int go_now = c->pub_mode == POS_GRANT_FREE;
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
    if (!go_now && !granted(c, seq)) {
        c->state = T_SPIN;
        c->wait_seq = seq;
        c->wait_since = t;
        c->waits++;
        wake_at(s, c, t + s->spin_ns);
        return;
    }
    device_launch(s, c, !go_now, t);
}

static void thread_event(struct sim *s, struct vclient *c, int64_t t)
{
    switch (c->state) {
    case T_ARRIVAL:
        start_request(s, c, t);
        break;
    case T_HOST:
        submit(s, c, t);
        break;
    case T_SPIN: /* nothing came while it spun: it sleeps and kicks posd */
        c->state = T_SLEEP;
        c->waiters = 1;
        kick(s, t);
        break;
    case T_RESUME:
        c->waiters = 0;
        c->wait_ns += t - c->wait_since;
        device_launch(s, c, 1, t);
        break;
    default:
        break;
    }
}

/* ---- the collector ------------------------------------------------------------------------ */

/* A marked op completed on the device at T: the collector sees it 0..poll_us later. */
static void marker_landed(struct sim *s, struct vclient *c, uint64_t seq, int64_t t)
{
    int64_t at = t + (int64_t)llround(posapp_rng_uniform(&c->rng) * (double)s->poll_ns);
    if (at < c->last_sight)
        at = c->last_sight; /* one collector: sightings in order */
    c->last_sight = at;
    struct sight sg = {seq, at};
    if (VEC_PUSH(c->sights, sg) < 0 || heap_push(&s->heap, at, EV_SIGHT, (uint32_t)c->index, 0) < 0)
        sim_fail(s, -ENOMEM, "out of memory");
}

/* The collector sees the oldest pending marker at T and posts it, with every earlier launch
 * of the stream it bounds, to posd's completion channel. */
static void sighting(struct sim *s, struct vclient *c, int64_t t)
{
    struct sight sg = c->sights.v[c->sights.head++];
    for (uint64_t q = c->reported_upto + 1; q <= sg.seq; q++) {
        struct post p = {q, t, q == sg.seq ? SCHED_DONE_EXACT : SCHED_DONE_BOUND};
        if (VEC_PUSH(c->posts, p) < 0) {
            sim_fail(s, -ENOMEM, "out of memory");
            return;
        }
    }
    if (sg.seq > c->reported_upto)
        c->reported_upto = sg.seq;
    if (c->pub_kick)
        kick(s, t); /* posd waits on these to release others */
}

/* ---- the device ------------------------------------------------------------------------- */

static void reap(struct sim *s, int64_t t)
{
    for (size_t i = 0; i < s->n; i++) {
        struct vclient *c = &s->c[i];
        int op;
        while ((op = sim_gpu_reap(s->g, c->owner)) != SIM_NONE) {
            uint64_t tag = s->g->ops[op].tag;
            int64_t end = s->g->ops[op].end_ns;
            sim_gpu_op_free(s->g, op);
            uint64_t seq = tag & ~MARKED;
            if (seq > c->dev_done_seq)
                c->dev_done_seq = seq;
            if (tag & MARKED)
                marker_landed(s, c, seq, end);
            if (c->state == T_SYNC && c->dev_done_seq >= c->seq)
                sync_returns(s, c, t);
        }
    }
}

/* ---- posd --------------------------------------------------------------------------------- */

/* What posd's engine does for a client at a wake-up: submissions, then synchronisations, then
 * completions, then the waiter count. */
static void drain(struct sim *s, struct vclient *c, int64_t t)
{
    int slot = c->index;
    for (; c->subs.head < c->subs.n; c->subs.head++) {
        const struct sub *sb = &c->subs.v[c->subs.head];
        if (sched_core_submit(s->core, slot, &sb->op, sb->released, t) < 0)
            sim_fail(s, -EPROTO, "client %s: the core refused submission %llu", c->spec->name,
                     (unsigned long long)sb->op.seq);
    }
    for (; c->syncs.head < c->syncs.n; c->syncs.head++) {
        const struct sync_rep *r = &c->syncs.v[c->syncs.head];
        struct sched_sync sy = {
            .scope = SCHED_SYNC_STREAM,
            .tid = (uint32_t)c->index + 1,
            .stream = 0x1000 + (uint64_t)c->index,
            .ctx = 0x100000 + (uint64_t)c->index,
            .covers = r->covers,
            .end_ns = r->end_ns,
        };
        if (sched_core_sync(s->core, slot, &sy, t) < 0)
            sim_fail(s, -EPROTO, "client %s: the core refused a synchronisation", c->spec->name);
        if (sy.end_ns > 0 && sy.end_ns <= t)
            sched_core_note_sync_lag(s->core, slot, t - sy.end_ns);
    }
    for (; c->posts.head < c->posts.n; c->posts.head++) {
        const struct post *p = &c->posts.v[c->posts.head];
        if (sched_core_complete(s->core, slot, p->seq, p->done_ns, p->how, t) < 0)
            sim_fail(s, -EPROTO, "client %s: the core refused completion %llu", c->spec->name,
                     (unsigned long long)p->seq);
    }
    sched_core_waiters(s->core, slot, c->waiters);
}

/* What posd's engine publishes, and the threads it wakes. */
static void publish(struct sim *s, struct vclient *c, const struct sched_grant *g, int64_t t)
{
    c->pub_sample = g->sample;
    c->pub_kick = g->kick_on_done;
    if (!g->changed)
        return;
    c->pub_granted = g->granted;
    c->pub_mode = g->mode;
    if ((c->state == T_SPIN || c->state == T_SLEEP) && granted(c, c->wait_seq)) {
        int64_t at = c->state == T_SPIN ? t : t + s->grant_wake_ns;
        c->state = T_RESUME;
        wake_at(s, c, at);
    }
}

/* posd wakes at T (a kick or its tick): drain, decide, publish, re-arm the tick. */
static void posd_tick(struct sim *s, int64_t t)
{
    if (s->timer_at <= t)
        s->timer_at = NONE;
    if (s->kick_at <= t)
        s->kick_at = NONE;
    for (size_t i = 0; i < s->n; i++)
        drain(s, &s->c[i], t);
    int64_t next = sched_core_decide(s->core, t, s->grants);
    s->decisions++;
    for (size_t i = 0; i < s->n; i++)
        publish(s, &s->c[i], &s->grants[i], t);
    if (next == INT64_MAX)
        return;
    int64_t at = next > t ? next : t;
    /* as posd_arm_tick: an armed tick is only ever brought forward */
    if (s->timer_at == NONE || at < s->timer_at)
        s->timer_at = at;
}

/* ---- setup -------------------------------------------------------------------------------- */

static int client_setup(struct sim *s, struct vclient *c, int index, uint64_t seed)
{
    const struct possim_client_spec *sp = &s->sc->clients[index];
    char msg[512];
    c->spec = sp;
    c->index = index;
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
    posapp_rng_seed(&c->rng, posapp_hash3(seed, (uint64_t)index, 0x706f6c6cull));
    c->until_marker = SHIM_SAMPLE;
    c->pub_mode = POS_GRANT_WINDOW; /* as posd's registration leaves the shared memory */
    c->pub_sample = 1;
    if (s->core) {
        struct sched_client_conf conf = {
            .id = (uint32_t)index + 1,
            .priority = sp->priority,
            .max_inflight = sp->max_inflight,
            .min_share = s->sc->min_share,
            .weight = 1.0,
            .slo_ms = sp->slo_ms,
            .device = 0,
        };
        if (sched_core_client_add(s->core, index, &conf, 0) < 0)
            goto oom;
    }
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
    free(c->sights.v);
    free(c->subs.v);
    free(c->posts.v);
    free(c->syncs.v);
}

static void client_result(const struct vclient *c, struct possim_client_result *r)
{
    const struct possim_client_spec *sp = c->spec;
    uint64_t n = sp->requests;
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
    r->slo_ms = sp->slo_ms;
    r->lat_ms = calloc(n, sizeof *r->lat_ms);
    double *sorted = calloc(n, sizeof *sorted);
    if (!r->lat_ms || !sorted) {
        free(sorted);
        return;
    }
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (uint64_t i = 0; i < n; i++) {
        r->lat_ms[i] = sorted[i] = (double)(c->done_ns[i] - c->arrive_ns[i]) / 1e6;
        first = c->arrive_ns[i] < first ? c->arrive_ns[i] : first;
        last = c->done_ns[i] > last ? c->done_ns[i] : last;
    }
    struct posapp_report rep = {.slo_ms = sp->slo_ms > 0 ? sp->slo_ms : NAN};
    posapp_report_latencies(&rep, sorted, n, (double)(last - first) / 1e9);
    r->p50_ms = rep.p50_ms;
    r->p90_ms = rep.p90_ms;
    r->p99_ms = rep.p99_ms;
    r->mean_ms = rep.mean_ms;
    r->max_ms = sorted[n - 1];
    r->active_s = rep.makespan_s;
    r->throughput_rps = rep.throughput_rps;
    r->launch_rate = rep.makespan_s > 0 ? (double)c->launches / rep.makespan_s : NAN;
    r->slo_attainment = rep.slo_attainment;
    free(sorted);
}

/* ---- the run ------------------------------------------------------------------------------ */

static void run_loop(struct sim *s)
{
    while (!s->rc && s->ndone < s->n) {
        int64_t td = sim_gpu_next_event(s->g);
        int64_t th = s->heap.n ? s->heap.e[0].t : NONE;
        int64_t tp = s->timer_at < s->kick_at ? s->timer_at : s->kick_at;
        s->events++;
        if (s->now - s->progress_at > STUCK_NS) {
            sim_fail(s, -EDEADLK,
                     "no launch and no completion for %.0f s of virtual time at %.6f s: the "
                     "clients are held for good",
                     STUCK_NS / 1e9, (double)s->now / 1e9);
            break;
        }
        if (td != INT64_MAX && td <= th && td <= tp) {
            s->now = td;
            sim_gpu_advance(s->g, td);
            reap(s, td);
        } else if (th != NONE && th <= tp) {
            struct event e = heap_pop(&s->heap);
            struct vclient *c = &s->c[e.client];
            s->now = e.t;
            if (e.type == EV_SIGHT)
                sighting(s, c, e.t);
            else if (e.gen == c->gen)
                thread_event(s, c, e.t);
        } else if (tp != NONE) {
            s->now = tp;
            posd_tick(s, tp);
        } else {
            sim_fail(s, -EDEADLK,
                     "nothing left to happen at %.6f s with %zu of %zu clients unfinished",
                     (double)s->now / 1e9, s->n - s->ndone, s->n);
        }
    }
}

int possim_run(const struct possim_scenario *sc, uint64_t seed, struct possim_result *out,
               char *err, size_t errlen)
{
    struct sim s = {.sc = sc,
                    .n = sc->nclients,
                    .timer_at = NONE,
                    .kick_at = NONE,
                    .err = err,
                    .errlen = errlen};
    memset(out, 0, sizeof *out);
    s.poll_ns = us_ns(sc->poll_us);
    s.wake_ns = us_ns(sc->wake_us);
    s.grant_wake_ns = us_ns(sc->grant_wake_us);
    s.spin_ns = us_ns(sc->spin_us);
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
        const struct pos_policy_ops *pol = pos_policy_find(sc->policy);
        if (!pol) {
            sim_fail(&s, -EINVAL, "unknown policy '%s'", sc->policy);
            goto out;
        }
        s.core = sched_core_new(&p, &s.dev, pol, 0);
        if (!s.core) {
            sim_fail(&s, -ENOMEM, "out of memory");
            goto out;
        }
    }
    for (size_t i = 0; i < s.n; i++)
        if (client_setup(&s, &s.c[i], (int)i, seed) < 0)
            goto out;
    /* posd decides as each client registers, before it launches anything */
    if (s.core)
        posd_tick(&s, 0);
    for (size_t i = 0; i < s.n; i++) {
        struct vclient *c = &s.c[i];
        if (c->schedule && c->schedule[0] > 0) {
            c->state = T_ARRIVAL;
            wake_at(&s, c, (int64_t)llround(c->schedule[0] * 1e9));
        } else {
            start_request(&s, c, 0);
        }
    }
    run_loop(&s);
    if (s.rc)
        goto out;
    out->seed = seed;
    out->nclients = s.n;
    int64_t makespan = 0;
    for (size_t i = 0; i < s.n; i++) {
        struct vclient *c = &s.c[i];
        for (uint64_t k = 0; k < c->spec->requests; k++)
            makespan = c->done_ns[k] > makespan ? c->done_ns[k] : makespan;
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
out:
    for (size_t i = 0; s.c && i < s.n; i++)
        client_free(&s.c[i]);
    free(s.c);
    free(s.heap.e);
    sched_core_free(s.core);
    free(s.g);
    if (s.rc)
        possim_result_free(out);
    return s.rc;
}

void possim_result_free(struct possim_result *r)
{
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
    if (cpu_s > 0)
        fprintf(f, "# speed %.0f launches per cpu second (%.3f cpu s)\n",
                (double)r->launches / cpu_s, cpu_s);
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
    fprintf(f, ",\"launches\":%llu,\"decisions\":%llu,\"events\":%llu,\"clients\":[",
            (unsigned long long)r->launches, (unsigned long long)r->decisions,
            (unsigned long long)r->events);
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
        fprintf(f, ",\"markers\":%llu}", (unsigned long long)c->markers);
    }
    fputc(']', f);
    if (cpu_s > 0) {
        json_num(f, "cpu_s", cpu_s, 3);
        json_num(f, "launches_per_cpu_s", (double)r->launches / cpu_s, 0);
    }
    fputs("}\n", f);
}
