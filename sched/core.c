/* The scheduling core (see core.h): every client's operators from submission to completion,
 * requests, stalls, guard periods, grant publication rules and the next decision time. Pure:
 * the clock is an argument, memory is the only resource it takes. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pos/client_shm.h"
#include "pos/op_record.h"
#include "sched/core.h"
#include "sched/profile.h"

/* one client slot's operator table: mapped on the slot's first use, its pages returned when the
 * client leaves (sched_core_client_remove) */
#define OPS_BYTES ((size_t)SCHED_WINDOW * sizeof(struct pos_sched_op))
#define LAT_SUB   16 /* histogram sub-buckets per power of two */

struct core_hist {
    uint64_t n;
    uint64_t sum_ns;
    uint32_t b[SCHED_LAT_BUCKETS * 2];
};

struct core_client {
    int used;
    struct sched_client_conf conf;
    struct pos_sched_op *ops; /* [SCHED_WINDOW] */
    uint64_t submitted, released, completed, presumed;
    uint64_t released_upto, completed_upto;
    uint64_t granted;
    uint32_t mode;
    int held;
    int published; /* something was published once */
    uint32_t pub_mode, pub_window;
    uint64_t pub_granted;
    uint32_t window; /* the policy's window cap at the last decision */
    uint32_t waiters;
    int64_t last_progress_ns, last_done_ns, last_update;
    int64_t last_exact_ns; /* device time of its last exactly known completion */
    uint64_t last_exact_seq;
    double op_ns; /* running estimate of one operator's device time */
    uint64_t prof_until; /* put a marker behind every launch up to this seq (profiling) */
    uint64_t first_until; /* ... and, a new client, up to this one without asking for kicks */
    uint64_t prof_seq;   /* the last exact completion: its seq and time, */
    int64_t prof_ns;     /* for kernel samples, */
    int64_t prof_ns2;    /* and the time of the one before it */
    int prof_device;     /* prof_ns is a device time (a poll time is not compared with it) */
    int stalled;
    uint64_t stalls;
    uint64_t busy_ns;
    int64_t served_ns;
    struct pos_sched_request req;
    int64_t req_end_ns; /* when its last request ended (0: none yet) */
    uint64_t requests, request_ops;
    struct core_hist lat, sync_lag;
    int64_t added_at;
    int64_t runq_delay_ns, runq_ns_per_s, offcpu_ns_per_s; /* telemetry, as the adapter gave it */
    uint64_t mem_used, mem_limit; /* device memory, as the adapter gave it (UINT64_MAX: none) */
};

struct sched_core {
    struct sched_params p;
    const struct pos_sched_device *dev;
    const struct pos_policy_ops *policy;
    void *pstate;
    int64_t period_start;
    int64_t dev_since; /* device busy since, when nbusy > 0 */
    int nbusy;         /* clients with operators in flight */
    int64_t multi_end; /* when the device last went from two or more busy clients to fewer */
    struct pos_profiles *prof;
    uint64_t dev_busy_ns, decisions;
    uint64_t drained; /* devices that get no new grants (bit D: device D) */
    uint64_t retired_submitted, retired_released, retired_completed;
    struct core_client c[SCHED_MAX_CLIENTS];
    struct pos_sched_client view[SCHED_MAX_CLIENTS];
    struct pos_sched_client complete_view; /* the view of the client given to on_complete */
    int order[SCHED_MAX_CLIENTS];
    uint32_t unmanaged; /* telemetry, as the adapter gave it */
};

static void fill_view(const struct core_client *c, struct pos_sched_client *v, int slot);

void sched_params_defaults(struct sched_params *p)
{
    p->tick_ns = SCHED_DEFAULT_TICK_US * 1000LL;
    p->slow_tick_ns = SCHED_DEFAULT_SLOW_TICK_MS * 1000000LL;
    p->guard_period_ns = SCHED_DEFAULT_GUARD_PERIOD_MS * 1000000LL;
    p->stall_ns = SCHED_DEFAULT_STALL_MS * 1000000LL;
    p->credits = SCHED_DEFAULT_CREDITS;
    p->window_ns = SCHED_DEFAULT_WINDOW_US * 1000LL;
    p->idle_grace_ns = SCHED_DEFAULT_IDLE_GRACE_US * 1000LL;
    p->sample_free = SCHED_DEFAULT_SAMPLE_FREE;
    p->profile_min = SCHED_DEFAULT_PROFILE_MIN;
    p->cpu_hold_ns = SCHED_DEFAULT_CPU_HOLD_MS * 1000000LL;
}

/* ---- histograms ----------------------------------------------------------------------- */

static unsigned hist_index(uint64_t us)
{
    if (us < LAT_SUB)
        return (unsigned)us;
    unsigned e = 63u - (unsigned)__builtin_clzll(us); /* >= 4 */
    unsigned sub = (unsigned)(us >> (e - 4)) & (LAT_SUB - 1);
    unsigned idx = (e - 3) * LAT_SUB + sub;
    return idx < SCHED_LAT_BUCKETS * 2 ? idx : SCHED_LAT_BUCKETS * 2 - 1;
}

/* The middle of bucket IDX, in ns. */
static uint64_t hist_value_ns(unsigned idx)
{
    if (idx < LAT_SUB)
        return (uint64_t)idx * 1000 + 500;
    unsigned e = idx / LAT_SUB + 3, sub = idx % LAT_SUB;
    uint64_t lo = ((uint64_t)LAT_SUB + sub) << (e - 4);
    uint64_t width = (uint64_t)1 << (e - 4);
    return (lo * 2 + width) * 500; /* (lo + width / 2) us */
}

static void hist_add(struct core_hist *h, int64_t ns)
{
    h->b[hist_index(ns > 0 ? (uint64_t)ns / 1000 : 0)]++;
    h->n++;
    h->sum_ns += ns > 0 ? (uint64_t)ns : 0;
}

static uint64_t hist_quantile(const struct core_hist *h, double q)
{
    if (!h->n)
        return 0;
    /* nearest rank, as posapp reports its percentiles: the ceil(q * n)-th smallest */
    double r = q * (double)h->n;
    uint64_t want = (uint64_t)r, seen = 0;
    if ((double)want < r - 1e-9)
        want++;
    if (want < 1)
        want = 1;
    for (unsigned i = 0; i < SCHED_LAT_BUCKETS * 2; i++) {
        seen += h->b[i];
        if (seen >= want)
            return hist_value_ns(i);
    }
    return hist_value_ns(SCHED_LAT_BUCKETS * 2 - 1);
}

/* Folds H into powers of two of microseconds (see SCHED_REQ_POW_BUCKETS): each of H's
 * buckets lies within one power of two, so the folding is exact. */
static void hist_fold_pow2(const struct core_hist *h, uint64_t out[SCHED_REQ_POW_BUCKETS])
{
    memset(out, 0, SCHED_REQ_POW_BUCKETS * sizeof out[0]);
    for (unsigned i = 0; i < SCHED_LAT_BUCKETS * 2; i++) {
        if (!h->b[i])
            continue;
        /* the bucket's lowest value in us: below LAT_SUB one us each, then e = i / 16 + 3 */
        unsigned e = i < LAT_SUB ? (i < 2 ? 0 : 31u - (unsigned)__builtin_clz(i)) : i / LAT_SUB + 3;
        out[e < SCHED_REQ_POW_BUCKETS ? e : SCHED_REQ_POW_BUCKETS - 1] += h->b[i];
    }
}

/* ---- accounting ------------------------------------------------------------------------- */

static uint64_t inflight(const struct core_client *c)
{
    return c->released - c->completed;
}

/* Accumulates C's busy time up to NOW (call before C's operators in flight change). */
static void account(struct core_client *c, int64_t now)
{
    if (inflight(c) && now > c->last_update) {
        c->busy_ns += (uint64_t)(now - c->last_update);
        c->served_ns += now - c->last_update;
    }
    c->last_update = now > c->last_update ? now : c->last_update;
}

/* Call after C's in flight changed from WAS_BUSY. Keeps the device's busy time. */
static void busy_changed(struct sched_core *core, struct core_client *c, int was_busy, int64_t now)
{
    int busy = inflight(c) > 0;
    if (busy == was_busy)
        return;
    if (busy) {
        if (core->nbusy++ == 0)
            core->dev_since = now;
        c->last_progress_ns = now; /* the stall clock starts with work in flight */
    } else {
        if (core->nbusy-- == 2)
            core->multi_end = now;
        if (core->nbusy == 0 && now > core->dev_since)
            core->dev_busy_ns += (uint64_t)(now - core->dev_since);
    }
}

static struct core_client *client(struct sched_core *core, int slot)
{
    if (slot < 0 || slot >= SCHED_MAX_CLIENTS || !core->c[slot].used)
        return NULL;
    return &core->c[slot];
}

static struct pos_sched_op *op_at(struct core_client *c, uint64_t seq)
{
    return &c->ops[seq & (SCHED_WINDOW - 1)];
}

static void advance_prefixes(struct core_client *c)
{
    while (c->released_upto < c->submitted &&
           (op_at(c, c->released_upto + 1)->state & POS_SCHED_OP_RELEASED))
        c->released_upto++;
    while (c->completed_upto < c->submitted &&
           (op_at(c, c->completed_upto + 1)->state & POS_SCHED_OP_DONE))
        c->completed_upto++;
}

static void release_op(struct core_client *c, struct pos_sched_op *op, int64_t now)
{
    if (op->state & POS_SCHED_OP_RELEASED)
        return;
    op->state |= POS_SCHED_OP_RELEASED;
    op->release_ns = now;
    c->released++;
}

/* The operators a window cap lets the client launch on its own (as the shim does, over its
 * completed prefix): the core counts them released as soon as it knows of the completions
 * that let them go. */
static void release_window(struct core_client *c, int64_t now)
{
    if (!c->window)
        return;
    uint64_t upto = c->completed_upto + c->window;
    if (upto > c->submitted)
        upto = c->submitted;
    for (uint64_t seq = c->released_upto + 1; seq <= upto; seq++)
        release_op(c, op_at(c, seq), now);
}

/* Marks OP done at WHEN; it is released too (it ran, so it was launched). */
static void finish_op(struct sched_core *core, struct core_client *c, struct pos_sched_op *op,
                      int64_t when, int presumed)
{
    if (op->state & POS_SCHED_OP_DONE)
        return;
    release_op(c, op, when);
    op->state |= POS_SCHED_OP_DONE;
    op->done_ns = when;
    c->completed++;
    if (presumed)
        c->presumed++;
    if (!presumed && core->policy->on_complete) {
        fill_view(c, &core->complete_view, (int)(c - core->c));
        core->policy->on_complete(core->pstate, &core->complete_view, op);
    }
}

/* Work heard of: C is not stalled. */
static void progress(struct core_client *c, int64_t now)
{
    c->last_progress_ns = now;
    c->last_done_ns = now;
    c->stalled = 0;
}

/* ---- lifetime --------------------------------------------------------------------------- */

struct sched_core *sched_core_new(const struct sched_params *p, const struct pos_sched_device *dev,
                                  const struct pos_policy_ops *policy,
                                  const struct pos_policy_args *args, int64_t now)
{
    struct sched_core *core = calloc(1, sizeof *core);
    if (!core)
        return NULL;
    core->p = *p;
    core->dev = dev;
    core->period_start = now;
    core->policy = policy;
    if (policy->init && policy->init(&core->pstate, dev, args) < 0) {
        free(core);
        return NULL;
    }
    return core;
}

void sched_core_free(struct sched_core *core)
{
    if (!core)
        return;
    if (core->policy->fini)
        core->policy->fini(core->pstate);
    for (int i = 0; i < SCHED_MAX_CLIENTS; i++)
        if (core->c[i].ops)
            munmap(core->c[i].ops, OPS_BYTES);
    free(core);
}

int sched_core_set_policy(struct sched_core *core, const struct pos_policy_ops *policy,
                          const struct pos_policy_args *args, const struct sched_params *p)
{
    void *state = NULL;
    if (policy->init && policy->init(&state, core->dev, args) < 0)
        return -ENOMEM;
    if (core->policy->fini)
        core->policy->fini(core->pstate);
    core->policy = policy;
    core->pstate = state;
    core->p = *p;
    return 0;
}

void sched_core_set_profiles(struct sched_core *core, struct pos_profiles *prof)
{
    core->prof = prof;
}

const struct pos_policy_ops *sched_core_policy(const struct sched_core *core)
{
    return core->policy;
}

const char *sched_core_policy_note(const struct sched_core *core)
{
    return core->policy->note ? core->policy->note(core->pstate) : NULL;
}

/* Launches a kernel short of samples (or a new client) is profiled for: a marker behind each. */
#define PROFILE_LAUNCHES 256

int sched_core_client_add(struct sched_core *core, int slot, const struct sched_client_conf *conf,
                          int64_t now)
{
    if (slot < 0 || slot >= SCHED_MAX_CLIENTS)
        return -EINVAL;
    struct core_client *c = &core->c[slot];
    if (c->used)
        sched_core_client_remove(core, slot, now);
    struct pos_sched_op *ops = c->ops;
    if (!ops) {
        void *m = mmap(NULL, OPS_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return -ENOMEM;
        ops = m;
    }
    memset(c, 0, sizeof *c); /* every field: a reused slot keeps nothing */
    c->ops = ops;
    c->used = 1;
    c->conf = *conf;
    c->mode = POS_GRANT_WINDOW;
    c->last_update = c->last_progress_ns = c->added_at = now;
    c->mem_limit = UINT64_MAX; /* no limit until the adapter says one */
    /* a new client gets a marker behind every launch for its first PROFILE_LAUNCHES launches,
     * so that its kernels are learnt from its first completions, whenever posd reads them (a
     * lone client launching freely may never wake posd: a 40 ms one left before posd decided
     * again, and with the default 1 marker in 32 left no profile in 1 run of 3); no kicks for
     * it, no prompt polls: learn_kernel asks for those where its kernels are short of samples */
    if (core->prof && core->p.profile_min)
        c->first_until = PROFILE_LAUNCHES;
    return 0;
}

void sched_core_client_conf(struct sched_core *core, int slot, const struct sched_client_conf *conf)
{
    struct core_client *c = client(core, slot);
    if (c)
        c->conf = *conf;
}

void sched_core_client_remove(struct sched_core *core, int slot, int64_t now)
{
    struct core_client *c = client(core, slot);
    if (!c)
        return;
    account(c, now);
    int was = inflight(c) > 0;
    core->retired_submitted += c->submitted;
    core->retired_released += c->released;
    core->retired_completed += c->completed;
    c->completed = c->released; /* its share is free at once */
    busy_changed(core, c, was, now);
    c->used = 0;
    /* the slot keeps its table's address, not its pages: posd's memory goes back to what its
     * clients use now, not what the most it ever had at once used */
    madvise(c->ops, OPS_BYTES, MADV_DONTNEED);
}

/* ---- events ----------------------------------------------------------------------------- */

/* An exact completion at WHEN. When this operator was released before the client's previous
 * exact completion, it ran back to back behind the operators completed since (a client's
 * operators run one after another on its stream): the time between the two completions over
 * their count is a clean sample of one operator's device time, and feeds an exponentially
 * weighted estimate (1/8), what windows are sized by. An operator released after the previous
 * completion also waited for its launch and for posd: no sample. Completions seen in one poll
 * of the collector share one time; they are counted into the next distinct one. */
static void learn_op_time(struct core_client *c, const struct pos_sched_op *op, int64_t when)
{
    if (when <= c->last_exact_ns || op->seq <= c->last_exact_seq)
        return;
    uint64_t n = op->seq - c->last_exact_seq;
    if (c->last_exact_seq && n <= 1024 && (op->state & POS_SCHED_OP_RELEASED) &&
        op->release_ns <= c->last_exact_ns) {
        double d = (double)(when - c->last_exact_ns) / (double)n;
        c->op_ns = c->op_ns > 0 ? c->op_ns + (d - c->op_ns) / 8 : d;
    }
    c->last_exact_ns = when;
    c->last_exact_seq = op->seq;
}

static int is_kernel(const struct pos_sched_op *op)
{
    return op->kind == POS_OP_KERNEL || op->kind == POS_OP_KERNEL_EX ||
           op->kind == POS_OP_COOPERATIVE;
}

/* When OP went to the device by posd's account: at its call when it was released then (free,
 * or within its grant: the client's own time stamp, which can only shape its own profiles),
 * else when a grant or its window let it go. */
static int64_t launched_at(const struct pos_sched_op *op)
{
    if (op->state & POS_SCHED_OP_AT_CALL)
        return op->submit_ns;
    return op->release_ns > op->submit_ns ? op->release_ns : op->submit_ns;
}

/* Operators on the same stream complete in order. The default stream of a per-thread entry
 * point is the thread's own; the legacy default stream (0) is the context's. */
static int on_scope(const struct pos_sched_op *op, const struct sched_sync *s)
{
    if (s->scope == SCHED_SYNC_CTX)
        return op->ctx == s->ctx;
    if (op->stream != s->stream)
        return 0;
    if (s->stream == POS_STREAM_DEFAULT || s->stream == POS_STREAM_PER_THREAD) {
        int po = op->ptsz || op->stream == POS_STREAM_PER_THREAD;
        int ps = s->ptsz || s->stream == POS_STREAM_PER_THREAD;
        return po == ps && op->ctx == s->ctx && (!po || op->tid == s->tid);
    }
    return 1;
}

/* How far back the core looks for an operator's predecessor on its stream. */
#define PRED_LOOK 64
/* A device sample this many times a kernel's mean is not the kernel's. */
#define DEVICE_OUTLIER 4.0

/* When OP's device time began, for a sample of it: its predecessor's end on its stream, when
 * the device gave that end (POS_SCHED_OP_DEVICE_END) and it came after OP's start of
 * eligibility (launched_at, and CALL_NS: when the client says the launch reached the driver, 0 if
 * not known), so that OP was queued behind it and began as it ended. -1 otherwise: an operator
 * that found its stream idle began some time after its launch, by the launch's own latency (a
 * few us on a real GPU; the simulated device process's lag, up to milliseconds on a loaded
 * host), which is not the kernel's: its end minus its launch is only a bound. Also -1 when the
 * predecessor is not complete yet, or is further back than the window holds. */
static int64_t device_start(struct core_client *c, const struct pos_sched_op *op, int64_t call_ns)
{
    int64_t launch = launched_at(op) > call_ns ? launched_at(op) : call_ns;
    struct sched_sync probe = {.scope = SCHED_SYNC_STREAM,
                               .tid = op->tid,
                               .ptsz = op->ptsz,
                               .stream = op->stream,
                               .ctx = op->ctx};
    for (uint64_t back = 1; back <= PRED_LOOK && back < op->seq; back++) {
        const struct pos_sched_op *p = op_at(c, op->seq - back);
        if (p->seq != op->seq - back)
            return -1; /* out of the window */
        if (!on_scope(p, &probe))
            continue;
        int exact = (p->state & POS_SCHED_OP_DONE) && (p->state & POS_SCHED_OP_DEVICE_END);
        return exact && p->done_ns > launch ? p->done_ns : -1;
    }
    return -1; /* the first on its stream: it found the stream idle */
}

/* One sample D of PR's duration, of a run that began at SINCE: solo when no other client had
 * work in flight since then, else a co-run one. */
static void add_sample(struct sched_core *core, struct pos_kprof *pr, double d, int64_t since)
{
    if (core->nbusy <= 1 && core->multi_end <= since)
        pos_prof_add_solo(core->prof, pr, d);
    else
        pos_prof_add_corun(pr, d);
}

/* Kernel profiles, from an exact completion of OP at WHEN.
 * - With the device's end time (CALL_NS >= 0: the client's call of the driver, 0 if not known),
 *   a sample is WHEN minus the later of OP's start of eligibility and its predecessor's end on
 *   its stream, taken when the predecessor's end is the later (device_start): what the device
 *   spent on OP alone when nothing else ran.
 * - With a poll time, when the previous operator (seq - 1) completed exactly too and OP was
 *   launched before that completion was seen, OP ran back to back behind it on the client's
 *   stream: the time between the two completions is one sample of OP's duration. Both times
 *   carry the collector's poll delay, which cancels on average when each of the two was seen by
 *   a poll of its own; completions seen together (as when the collector slept through a
 *   request's start and caught up) give no sample, and neither does a poll time after a device
 *   time.
 * A kernel shape with too few samples (solo ones; co-run ones while other clients have work)
 * asks its client for a marker behind every launch, and for prompt polls, for the next 256
 * launches, until it has been looked at 16 x profile_min times. */
static void learn_kernel(struct sched_core *core, struct core_client *c,
                         const struct pos_sched_op *op, int64_t when, int64_t call_ns)
{
    uint64_t prev_seq = c->prof_seq;
    int64_t prev_ns = c->prof_ns, prev_ns2 = c->prof_ns2;
    int prev_device = c->prof_device;
    c->prof_seq = op->seq;
    c->prof_ns2 = prev_ns;
    c->prof_ns = when;
    c->prof_device = call_ns >= 0;
    if (!core->prof || !is_kernel(op) || !op->key)
        return;
    struct pos_kprof *pr = pos_prof_get(core->prof, c->conf.uid, op->key, op->grid, op->block, 1);
    if (!pr)
        return;
    pr->tries++;
    if (call_ns >= 0) {
        int64_t start = device_start(c, op, call_ns < when ? call_ns : 0);
        double d = (double)(when - start);
        /* A kernel's device time does not vary fourfold alone: such a sample is the host's
         * doing (an event the device took late). Rejected from the third sample on (not the
         * 16th, as poll times are), and the first two give way to a sample a quarter theirs. */
        if (start >= 0 && when > start && pr->n >= 1 && pr->n < 3 &&
            d * DEVICE_OUTLIER < pr->mean_ns) {
            pr->n = 0;
            pr->mean_ns = pr->m2 = 0;
        }
        if (start >= 0 && when > start && !(pr->n >= 3 && d > DEVICE_OUTLIER * pr->mean_ns))
            add_sample(core, pr, d, start);
    } else if (prev_seq && op->seq == prev_seq + 1 && !prev_device && when > prev_ns &&
               prev_ns > prev_ns2 && launched_at(op) <= prev_ns) {
        add_sample(core, pr, (double)(when - prev_ns), prev_ns);
    }
    /* too few solo samples, or too few co-run ones while others run beside it */
    uint32_t min = core->p.profile_min;
    int beside = core->nbusy > 1;
    if (min && (pr->n < min || (beside && pr->co_n < min)) && pr->tries < 16ull * min)
        c->prof_until = op->seq + PROFILE_LAUNCHES;
}

/* Makes room for SEQ in C's window: the oldest operators are presumed complete. */
static void make_room(struct sched_core *core, struct core_client *c, uint64_t seq, int64_t now)
{
    while (seq - c->completed_upto > SCHED_WINDOW) {
        finish_op(core, c, op_at(c, c->completed_upto + 1), now, 1);
        advance_prefixes(c);
    }
}

static void request_note_launch(struct core_client *c, struct pos_sched_op *op)
{
    if (!c->req.active) {
        c->req.active = 1;
        c->req.id++;
        c->req.start_ns = op->submit_ns;
        c->req.ops = 0;
    }
    c->req.ops++;
    op->request = c->req.id;
}

int sched_core_submit(struct sched_core *core, int slot, const struct pos_sched_op *in,
                      int released, int64_t now)
{
    struct core_client *c = client(core, slot);
    if (!c || in->seq != c->submitted + 1)
        return -EPROTO;
    account(c, now);
    int was = inflight(c) > 0;
    make_room(core, c, in->seq, now);
    struct pos_sched_op *op = op_at(c, in->seq);
    *op = *in;
    op->state = 0;
    op->release_ns = op->done_ns = 0;
    c->submitted = in->seq;
    request_note_launch(c, op);
    if (core->prof && is_kernel(op) && op->key) {
        struct pos_kprof *pr =
            pos_prof_get(core->prof, c->conf.uid, op->key, op->grid, op->block, 1);
        if (pr)
            pr->launches++;
    }
    if (released || (c->mode == POS_GRANT_WINDOW && in->seq <= c->granted) ||
        c->mode == POS_GRANT_FREE) {
        release_op(c, op, now);
        op->state |= POS_SCHED_OP_AT_CALL;
    }
    release_window(c, now);
    advance_prefixes(c);
    busy_changed(core, c, was, now);
    return 0;
}

int sched_core_skip(struct sched_core *core, int slot, uint64_t seq, int64_t now)
{
    struct core_client *c = client(core, slot);
    if (!c || seq != c->submitted + 1)
        return -EPROTO;
    account(c, now);
    int was = inflight(c) > 0;
    make_room(core, c, seq, now);
    struct pos_sched_op *op = op_at(c, seq);
    memset(op, 0, sizeof *op);
    op->seq = seq;
    c->submitted = seq;
    finish_op(core, c, op, now, 1);
    advance_prefixes(c);
    busy_changed(core, c, was, now);
    return 0;
}

int sched_core_complete(struct sched_core *core, int slot, uint64_t seq, int64_t done_ns, int how,
                        int64_t call_ns, int64_t now)
{
    struct core_client *c = client(core, slot);
    if (!c || seq == 0 || seq > c->submitted)
        return -EPROTO;
    if (seq <= c->completed_upto) {
        /* known already (or presumed): a synchronisation that covered it was read first, as
         * when posd reads a client that never woke it all at once. Its own exact end still
         * teaches its kernel's profile, and a device end is still its successor's start. */
        struct pos_sched_op *op = op_at(c, seq);
        if ((how == SCHED_DONE_EXACT || how == SCHED_DONE_DEVICE) && op->seq == seq &&
            !(op->state & POS_SCHED_OP_DEVICE_END)) {
            int64_t when = done_ns > 0 && done_ns <= now ? done_ns : now;
            learn_kernel(core, c, op, when, how == SCHED_DONE_DEVICE ? call_ns : -1);
            if (how == SCHED_DONE_DEVICE && when <= op->done_ns) {
                op->done_ns = when;
                op->state |= POS_SCHED_OP_DEVICE_END;
            }
        }
        return 0;
    }
    account(c, now);
    int was = inflight(c) > 0;
    struct pos_sched_op *op = op_at(c, seq);
    int64_t when = done_ns > 0 && done_ns <= now ? done_ns : now;
    if (how == SCHED_DONE_EXACT || how == SCHED_DONE_DEVICE) {
        learn_kernel(core, c, op, when, how == SCHED_DONE_DEVICE ? call_ns : -1);
        learn_op_time(c, op, when);
    }
    finish_op(core, c, op, when, how == SCHED_DONE_PRESUMED);
    if (how == SCHED_DONE_DEVICE && op->done_ns == when)
        op->state |= POS_SCHED_OP_DEVICE_END;
    advance_prefixes(c);
    release_window(c, now);
    advance_prefixes(c);
    if (how != SCHED_DONE_PRESUMED)
        progress(c, now);
    busy_changed(core, c, was, now);
    return 0;
}

static void request_maybe_end(struct core_client *c, int64_t when)
{
    if (!c->req.active || c->completed != c->submitted)
        return;
    c->req.active = 0;
    c->req.ended++;
    c->req.last_ns = when - c->req.start_ns;
    c->req_end_ns = when;
    c->requests++;
    c->request_ops += c->req.ops;
    hist_add(&c->lat, c->req.last_ns);
}

int sched_core_sync(struct sched_core *core, int slot, const struct sched_sync *s, int64_t now)
{
    struct core_client *c = client(core, slot);
    if (!c || s->covers > c->submitted ||
        (s->scope != SCHED_SYNC_STREAM && s->scope != SCHED_SYNC_CTX))
        return -EPROTO;
    account(c, now);
    int was = inflight(c) > 0;
    int64_t when = s->end_ns > 0 && s->end_ns <= now ? s->end_ns : now;
    for (uint64_t seq = c->completed_upto + 1; seq <= s->covers; seq++) {
        struct pos_sched_op *op = op_at(c, seq);
        if (!(op->state & POS_SCHED_OP_DONE) && on_scope(op, s))
            finish_op(core, c, op, when, 0);
    }
    advance_prefixes(c);
    release_window(c, now);
    advance_prefixes(c);
    progress(c, now);
    busy_changed(core, c, was, now);
    request_maybe_end(c, when);
    if (s->end_ns > 0 && s->end_ns <= now)
        hist_add(&c->sync_lag, now - s->end_ns);
    return 0;
}

void sched_core_waiters(struct sched_core *core, int slot, uint32_t waiters)
{
    struct core_client *c = client(core, slot);
    if (c)
        c->waiters = waiters;
}

/* ---- decisions -------------------------------------------------------------------------- */

static void fill_view(const struct core_client *c, struct pos_sched_client *v, int slot)
{
    memset(v, 0, sizeof *v);
    v->id = c->conf.id;
    v->slot = slot;
    v->priority = c->conf.priority;
    v->max_inflight = c->conf.max_inflight;
    v->min_share = c->conf.min_share;
    v->weight = c->conf.weight;
    v->slo_ms = c->conf.slo_ms;
    v->device = c->conf.device;
    v->submitted = c->submitted;
    v->released = c->released;
    v->completed = c->completed;
    v->granted = c->granted;
    v->released_upto = c->released_upto;
    v->completed_upto = c->completed_upto;
    /* what a client says of its own threads counts only while it has work not released */
    v->waiting = c->submitted > c->released ? (int)(c->waiters < 1024 ? c->waiters : 1024) : 0;
    v->stalled = c->stalled;
    v->served_ns = c->served_ns;
    v->last_done_ns = c->last_done_ns;
    v->op_ns = c->op_ns;
    v->uid = c->conf.uid;
    v->request = c->req;
    v->ops = c->ops;
    v->ops_mask = SCHED_WINDOW - 1;
    v->mode = c->mode;
    v->new_granted = c->granted;
    v->runq_delay_ns = c->runq_delay_ns;
    v->runq_ns_per_s = c->runq_ns_per_s;
    v->offcpu_ns_per_s = c->offcpu_ns_per_s;
    v->mem_used = c->mem_used;
    v->mem_limit = c->mem_limit;
    v->cpu = c->conf.cpu;
}

/* Applies a decided grant: releases what it covers; a grant never goes back. */
static void apply_grant(struct sched_core *core, struct core_client *c,
                        const struct pos_sched_client *v, int64_t now)
{
    int was = inflight(c) > 0;
    uint64_t g = v->new_granted > c->granted ? v->new_granted : c->granted;
    c->mode = v->mode == POS_GRANT_FREE ? POS_GRANT_FREE : POS_GRANT_WINDOW;
    c->granted = g;
    c->held = v->held;
    c->window = c->mode == POS_GRANT_WINDOW ? v->window : 0;
    release_window(c, now);
    uint64_t upto =
        c->mode == POS_GRANT_FREE ? c->submitted : (g < c->submitted ? g : c->submitted);
    for (uint64_t seq = c->released_upto + 1; seq <= upto; seq++)
        release_op(c, op_at(c, seq), now);
    advance_prefixes(c);
    busy_changed(core, c, was, now);
}

/* Does C hold a lower class back by the core's rules? (for the report rate) */
static int outranks_someone(const struct sched_core *core, const struct core_client *c)
{
    for (int i = 0; i < SCHED_MAX_CLIENTS; i++) {
        const struct core_client *o = &core->c[i];
        if (o->used && o != c && o->conf.device == c->conf.device &&
            o->conf.priority > c->conf.priority && (o->held || o->mode == POS_GRANT_WINDOW))
            return 1;
    }
    return 0;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

void sched_core_set_drained(struct sched_core *core, uint64_t mask)
{
    core->drained = mask;
}

/* Whatever the policy decided, a client of a drained device keeps what it was granted and
 * gets nothing more: a window with no cap over its completions, no step past its grant. */
static void hold_drained(struct sched_core *core, size_t n)
{
    for (size_t j = 0; core->drained && j < n; j++) {
        struct pos_sched_client *v = &core->view[j];
        if (v->device < 0 || v->device >= 64 || !(core->drained >> v->device & 1))
            continue;
        v->mode = POS_GRANT_WINDOW;
        v->new_granted = core->c[core->order[j]].granted;
        v->window = 0;
        v->held = 1;
    }
}

/* Does client O hold the host's CPU for itself at NOW: a request under way, or one that ended
 * less than cpu_hold ago (its next one starts with a wake-up that a busy CPU delays)? */
static int holds_cpu(const struct sched_core *core, const struct core_client *o, int64_t now)
{
    return o->req.active || (o->req_end_ns && now - o->req_end_ns < core->p.cpu_hold_ns);
}

/* The CPU lever's rule, for every client at once: the most important priority among the
 * clients that hold the CPU (INT_MAX: none); a client of a less important one with its lever
 * on is lowered. *NEXT is brought forward to the end of the first hold that is not a request
 * under way, when it may lift the lever for someone. */
static int cpu_top(const struct sched_core *core, int64_t now, int64_t *next)
{
    int top = INT_MAX, lever_below = INT_MIN;
    int64_t end = INT64_MAX;
    for (int i = 0; i < SCHED_MAX_CLIENTS; i++) {
        const struct core_client *o = &core->c[i];
        if (!o->used)
            continue;
        if (o->conf.cpu != POS_CPU_OFF && o->conf.priority > lever_below)
            lever_below = o->conf.priority;
        if (!holds_cpu(core, o, now))
            continue;
        if (o->conf.priority < top)
            top = o->conf.priority;
        if (!o->req.active && o->req_end_ns + core->p.cpu_hold_ns < end)
            end = o->req_end_ns + core->p.cpu_hold_ns;
    }
    if (top < lever_below && end < *next)
        *next = end;
    return top;
}

int64_t sched_core_decide(struct sched_core *core, int64_t now, struct sched_grant *grants)
{
    int64_t cpu_next = INT64_MAX;
    int cpu_top_priority = cpu_top(core, now, &cpu_next);
    size_t n = 0;
    for (int i = 0; i < SCHED_MAX_CLIENTS; i++) {
        struct core_client *c = &core->c[i];
        if (!c->used)
            continue;
        account(c, now);
        if (inflight(c) && now - c->last_progress_ns >= core->p.stall_ns) {
            if (!c->stalled)
                c->stalls++;
            c->stalled = 1;
        }
        core->order[n] = i;
        fill_view(c, &core->view[n], i);
        core->view[n].cpu_low = c->conf.priority > cpu_top_priority ? c->conf.cpu : POS_CPU_OFF;
        n++;
    }
    if (now - core->period_start >= core->p.guard_period_ns) {
        core->period_start = now;
        for (size_t j = 0; j < n; j++) {
            core->c[core->order[j]].served_ns = 0;
            core->view[j].served_ns = 0;
        }
    }
    struct pos_sched_view view = {
        .now = now,
        .period_start = core->period_start,
        .guard_period_ns = core->p.guard_period_ns,
        .credits = core->p.credits,
        .window_ns = core->p.window_ns,
        .idle_grace_ns = core->p.idle_grace_ns,
        .device = core->dev,
        .clients = core->view,
        .nclients = n,
        .profiles = core->prof,
        .unmanaged = core->unmanaged,
        .cpu_hold_ns = core->p.cpu_hold_ns,
    };
    int64_t next = core->policy->decide(core->pstate, &view);
    if (next <= now)
        next = now + core->p.tick_ns;
    next = min64(next, cpu_next);
    core->decisions++;
    hold_drained(core, n);
    for (size_t j = 0; j < n; j++)
        apply_grant(core, &core->c[core->order[j]], &core->view[j], now);
    for (size_t j = 0; j < n; j++) {
        struct core_client *c = &core->c[core->order[j]];
        struct sched_grant *g = &grants[core->order[j]];
        g->mode = c->mode;
        g->granted = c->granted;
        g->window = c->window;
        /* a lever the policy names that is none of them counts as off */
        int low = core->view[j].cpu_low;
        g->cpu_low = low == POS_CPU_IDLE || low == POS_CPU_NICE ? low : POS_CPU_OFF;
        g->changed = !c->published || c->pub_mode != c->mode || c->pub_granted != c->granted ||
                     c->pub_window != c->window;
        c->published = 1;
        c->pub_mode = c->mode;
        c->pub_granted = c->granted;
        c->pub_window = c->window;
        /* a windowed client is released by its completions: it reports them at once; a
         * client that holds others back must say at once when it is done */
        int windowed = c->mode == POS_GRANT_WINDOW;
        /* a window advances on completions: a marker a quarter of a window apart (the
         * shim marks the last launch a grant allows as well) */
        uint64_t window = c->granted > c->completed_upto ? c->granted - c->completed_upto : 1;
        uint64_t every = window / 4 ? window / 4 : 1;
        g->sample = windowed ? (uint32_t)(every < core->p.sample_free ? every : core->p.sample_free)
                             : core->p.sample_free;
        /* a window the shim steps itself needs no kicks (its collector still polls promptly) */
        g->kick_on_done = (windowed && !c->window) || outranks_someone(core, c);
        if (c->submitted < c->first_until)
            g->sample = 1; /* a new client's first launches (sched_core_client_add) */
        if (c->submitted < c->prof_until) {
            /* profiling: a marker behind every launch; seen at the prompt poll interval where
             * the samples are poll times (a device end needs no prompt look, and a prompt
             * collector of a sparse client polls every poll_us while idle: 0.18 of a core in
             * possim for a client of 0.5 requests a second) */
            g->sample = 1;
            if (!c->prof_device)
                g->kick_on_done = 1;
        }
        /* when to look again */
        uint64_t q = c->submitted - c->released, f = inflight(c);
        if ((q && (c->held || c->waiters)) || (windowed && f))
            next = min64(next, now + core->p.tick_ns);
        if (f && !c->stalled)
            next = min64(next,
                         min64(now + core->p.slow_tick_ns, c->last_progress_ns + core->p.stall_ns));
        if (now - c->added_at < core->p.slow_tick_ns)
            next = min64(next, now + core->p.slow_tick_ns);
    }
    return next;
}

/* ---- statistics ------------------------------------------------------------------------- */

int sched_core_client_held(const struct sched_core *core, int slot)
{
    return slot >= 0 && slot < SCHED_MAX_CLIENTS && core->c[slot].used && core->c[slot].held;
}

void sched_core_client_stats(struct sched_core *core, int slot, int64_t now,
                             struct sched_client_stats *s)
{
    memset(s, 0, sizeof *s);
    struct core_client *c = client(core, slot);
    if (!c)
        return;
    account(c, now);
    s->submitted = c->submitted;
    s->released = c->released;
    s->completed = c->completed;
    s->presumed = c->presumed;
    s->in_flight = inflight(c);
    s->queued = c->submitted - c->released;
    s->busy_ns = c->busy_ns;
    s->requests = c->requests;
    s->request_ops = c->request_ops;
    s->req_p50_ns = hist_quantile(&c->lat, 0.50);
    s->req_p99_ns = hist_quantile(&c->lat, 0.99);
    s->req_max_ns = hist_quantile(&c->lat, 1.0);
    s->stalls = c->stalls;
    s->sync_lag_n = c->sync_lag.n;
    s->sync_lag_p50_ns = hist_quantile(&c->sync_lag, 0.50);
    s->sync_lag_p99_ns = hist_quantile(&c->sync_lag, 0.99);
    s->op_ns = (uint64_t)c->op_ns;
    hist_fold_pow2(&c->lat, s->req_pow);
    s->req_sum_ns = c->lat.sum_ns;
}

void sched_core_device_stats(struct sched_core *core, int64_t now, struct sched_device_stats *s)
{
    memset(s, 0, sizeof *s);
    s->submitted = core->retired_submitted;
    s->released = core->retired_released;
    s->completed = core->retired_completed;
    for (int i = 0; i < SCHED_MAX_CLIENTS; i++) {
        struct core_client *c = &core->c[i];
        if (!c->used)
            continue;
        s->submitted += c->submitted;
        s->released += c->released;
        s->completed += c->completed;
    }
    s->busy_ns = core->dev_busy_ns;
    if (core->nbusy && now > core->dev_since)
        s->busy_ns += (uint64_t)(now - core->dev_since);
    s->decisions = core->decisions;
}

/* ---- telemetry ------------------------------------------------------------------------------ */

void sched_core_client_telemetry(struct sched_core *core, int slot, int64_t runq_delay_ns,
                                 int64_t runq_ns_per_s, int64_t offcpu_ns_per_s)
{
    struct core_client *c = client(core, slot);
    if (!c)
        return;
    c->runq_delay_ns = runq_delay_ns;
    c->runq_ns_per_s = runq_ns_per_s;
    c->offcpu_ns_per_s = offcpu_ns_per_s;
}

void sched_core_client_mem(struct sched_core *core, int slot, uint64_t used, uint64_t limit)
{
    struct core_client *c = client(core, slot);
    if (!c)
        return;
    c->mem_used = used;
    c->mem_limit = limit;
}

void sched_core_set_unmanaged(struct sched_core *core, uint32_t n)
{
    core->unmanaged = n;
}
