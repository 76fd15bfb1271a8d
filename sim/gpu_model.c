/* The virtual-GPU device model (see gpu_model.h and docs/sim.md): roofline kernel costs,
 * block residency per SM, issue and DRAM sharing among resident kernels, time-sliced
 * contexts, copy engines. Pure: no clock, no locks, no I/O. */
#include "sim/gpu_model.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define WORK_EPS   1e-3 /* ns of solo work treated as zero */
#define STEP_LIMIT 10000000

static inline double dmin(double a, double b)
{
    return a < b ? a : b;
}

static inline double dmax(double a, double b)
{
    return a > b ? a : b;
}

/* --- costs ---------------------------------------------------------------------------- */

uint32_t sim_gpu_blocks_per_sm(const struct sim_dev_params *p, uint32_t threads, uint32_t smem)
{
    uint32_t warps_threads = (threads + 31) / 32 * 32;
    uint32_t n = p->max_blocks_per_sm;
    if (warps_threads > 0 && p->max_threads_per_sm / warps_threads < n)
        n = p->max_threads_per_sm / warps_threads;
    if (smem > 0 && p->smem_per_sm / smem < n)
        n = p->smem_per_sm / smem;
    return n;
}

static double roofline_exec_ns(const struct sim_dev_params *p, double flops, double bytes,
                               uint32_t blocks, int fp16, double *tc_out)
{
    double fill = dmin(1.0, (double)blocks / p->num_sms);
    double peak = fp16 ? p->fp16_flops : p->fp32_flops;
    double tc = (flops > 0 && fill > 0) ? flops / (peak * fill) * 1e9 : 0.0;
    double tm = bytes > 0 ? bytes / p->dram_bw * 1e9 : 0.0;
    if (tc_out)
        *tc_out = tc;
    return dmax(tc, tm);
}

double sim_gpu_kernel_solo_ns(const struct sim_dev_params *p, double flops, double bytes,
                              uint32_t blocks, int fp16)
{
    return roofline_exec_ns(p, flops, bytes, blocks, fp16, NULL) + p->launch_latency_us * 1e3;
}

static double op_latency_ns(const struct sim_gpu *g, const struct sim_op *op)
{
    if (op->kind != SIM_OP_KERNEL)
        return 0.0;
    if (op->flags & SIM_OPF_GRAPH_NODE)
        return g->p.graph_node_latency_us * 1e3;
    return g->p.launch_latency_us * 1e3;
}

/* The SM limit of context CTX, 0 when it has none. */
static uint32_t ctx_max_sms(const struct sim_gpu *g, int ctx)
{
    if (ctx < 0 || ctx >= SIM_MAX_CTXS || !g->ctxs[ctx].used)
        return 0;
    uint32_t m = g->ctxs[ctx].max_sms;
    return m < g->p.num_sms ? m : 0;
}

static void op_derive_cost(const struct sim_gpu *g, struct sim_op *op)
{
    const struct sim_dev_params *p = &g->p;
    op->exec_ns = 0;
    op->sm_units = 0;
    op->mem_rate = 0;
    if (op->kind == SIM_OP_COPY_H2D || op->kind == SIM_OP_COPY_D2H) {
        op->exec_ns = p->copy_latency_us * 1e3 + op->bytes / p->copy_bw * 1e9;
    } else if (op->kind == SIM_OP_KERNEL) {
        double tc;
        op->exec_ns = roofline_exec_ns(p, op->flops, op->bytes, op->blocks,
                                       (op->flags & SIM_OPF_FP16) != 0, &tc);
        if (op->exec_ns > 0) {
            double fill_sms = dmin((double)op->blocks, (double)p->num_sms);
            op->sm_units = tc / op->exec_ns * fill_sms;
            op->mem_rate = op->bytes / op->exec_ns;
        }
        op->want_sms = op->blocks < p->num_sms ? op->blocks : p->num_sms;
        uint32_t cap = ctx_max_sms(g, op->ctx);
        if (cap && op->want_sms > cap)
            op->want_sms = cap; /* its blocks crowd onto the SMs its context may use */
        uint32_t occ = sim_gpu_blocks_per_sm(p, op->threads, op->smem);
        uint32_t per = op->want_sms ? (op->blocks + op->want_sms - 1) / op->want_sms : 1;
        op->want_per_sm = per < occ ? per : occ;
        if (op->want_per_sm == 0)
            op->want_per_sm = 1;
    }
    op->work_left = op->exec_ns;
}

/* --- small list helpers --------------------------------------------------------------- */

static void idx_list_remove(int32_t *list, uint32_t *n, int32_t v)
{
    for (uint32_t i = 0; i < *n; i++) {
        if (list[i] == v) {
            list[i] = list[--*n];
            return;
        }
    }
}

static void live_add(struct sim_gpu *g, int op)
{
    if (g->nlive < SIM_MAX_STREAMS)
        g->live[g->nlive++] = op;
}

static void live_remove(struct sim_gpu *g, int op)
{
    idx_list_remove(g->live, &g->nlive, op);
}

/* --- init, owners, contexts, streams ----------------------------------------------------- */

static void runs_reset(struct sim_gpu *g);

void sim_gpu_init(struct sim_gpu *g, const struct sim_dev_params *p, int64_t now)
{
    memset(g, 0, sizeof *g);
    g->p = *p;
    g->now = now;
    g->active_ctx = SIM_NONE;
    g->switch_to = SIM_NONE;
    g->rr_next = 0;
    g->copy_running[0] = g->copy_running[1] = SIM_NONE;
    g->free_head = SIM_NONE;
    for (int i = SIM_MAX_OPS - 1; i >= 0; i--) {
        g->ops[i].next = g->free_head;
        g->free_head = i;
    }
    g->nfree = SIM_MAX_OPS;
    runs_reset(g);
}

int sim_gpu_owner_add(struct sim_gpu *g)
{
    for (int i = 0; i < SIM_MAX_OWNERS; i++) {
        struct sim_owner *o = &g->owners[i];
        if (!o->used) {
            memset(o, 0, offsetof(struct sim_owner, ring));
            o->wake_word = 0;
            o->planned_wake_ns = INT64_MAX;
            o->used = 1;
            return i;
        }
    }
    return -ENOSPC;
}

int sim_gpu_ctx_add(struct sim_gpu *g, int owner)
{
    for (int i = 0; i < SIM_MAX_CTXS; i++) {
        if (!g->ctxs[i].used) {
            g->ctxs[i].used = 1;
            g->ctxs[i].owner = (int16_t)owner;
            g->ctxs[i].max_sms = 0;
            return i;
        }
    }
    return -ENOSPC;
}

void sim_gpu_ctx_limit_sms(struct sim_gpu *g, int ctx, uint32_t max_sms)
{
    if (ctx < 0 || ctx >= SIM_MAX_CTXS)
        return;
    g->ctxs[ctx].max_sms = (uint16_t)(max_sms < g->p.num_sms ? max_sms : 0);
}

uint32_t sim_gpu_sms_of_share(uint32_t num_sms, double percent)
{
    if (!(percent > 0))
        return 1;
    if (percent >= 100)
        return num_sms;
    /* a hair below the exact product first, so that 25% of 68 is 17, not 18 by rounding */
    uint32_t n = (uint32_t)ceil(percent / 100.0 * num_sms - 1e-9);
    return n < 1 ? 1 : n > num_sms ? num_sms : n;
}

int sim_gpu_stream_add(struct sim_gpu *g, int owner, int ctx, int prio)
{
    for (int i = 0; i < SIM_MAX_STREAMS; i++) {
        struct sim_stream *s = &g->streams[i];
        if (!s->used) {
            memset(s, 0, sizeof *s);
            s->used = 1;
            s->owner = (int16_t)owner;
            s->ctx = (int16_t)ctx;
            s->prio = prio;
            s->head = s->tail = SIM_NONE;
            s->next_seq = 1;
            return i;
        }
    }
    return -ENOSPC;
}

/* --- ops -------------------------------------------------------------------------------- */

/* OP as allocated to OWNER and not yet filled in, of generation GEN. */
static void op_make_fresh(struct sim_op *op, int owner, uint32_t gen)
{
    memset(op, 0, sizeof *op);
    op->gen = gen;
    op->owner = (int16_t)owner;
    op->next = SIM_NONE;
    op->stream = SIM_NONE;
    op->ctx = SIM_NONE;
    op->state = SIM_OP_ALLOC;
}

int sim_gpu_op_alloc(struct sim_gpu *g, int owner)
{
    struct sim_owner *o = &g->owners[owner];
    if (o->nops >= SIM_OWNER_MAX_OPS)
        return -EAGAIN;
    if (g->free_head == SIM_NONE)
        return -ENOSPC;
    int i = g->free_head;
    struct sim_op *op = &g->ops[i];
    g->free_head = op->next;
    g->nfree--;
    op_make_fresh(op, owner, op->gen);
    o->nops++;
    return i;
}

int sim_gpu_op_recycle(struct sim_gpu *g, int i)
{
    struct sim_op *op = &g->ops[i];
    if (op->state != SIM_OP_DONE)
        return -EINVAL;
    /* a new generation: what named its last use is done from now on */
    op_make_fresh(op, op->owner, op->gen + 1);
    return 0;
}

double sim_gpu_op_solo_ns(const struct sim_gpu *g, struct sim_op *op)
{
    op_derive_cost(g, op);
    return op->exec_ns + op_latency_ns(g, op);
}

int sim_gpu_op_add_dep(struct sim_gpu *g, int op, int dep, uint32_t gen)
{
    struct sim_op *o = &g->ops[op];
    if (dep < 0 || dep >= SIM_MAX_OPS || sim_gpu_op_is_done(g, dep, gen))
        return 0;
    if (o->ndeps >= SIM_MAX_DEPS)
        return -E2BIG;
    o->deps[o->ndeps] = dep;
    o->dep_gens[o->ndeps] = gen;
    o->ndeps++;
    return 0;
}

int sim_gpu_op_is_done(const struct sim_gpu *g, int op, uint32_t gen)
{
    const struct sim_op *o = &g->ops[op];
    return o->gen != gen || o->state == SIM_OP_DONE || o->state == SIM_OP_FREE;
}

static int op_deps_done(const struct sim_gpu *g, const struct sim_op *op)
{
    for (int i = 0; i < op->ndeps; i++) {
        int d = op->deps[i];
        if (d < 0 || d >= SIM_MAX_OPS)
            continue;
        if (!sim_gpu_op_is_done(g, d, op->dep_gens[i]))
            return 0;
    }
    return 1;
}

static void op_release(struct sim_gpu *g, int i, int64_t t)
{
    struct sim_op *op = &g->ops[i];
    int64_t base = t > op->submit_ns ? t : op->submit_ns;
    op->ready_ns = base + (int64_t)llround(op_latency_ns(g, op));
    op->state = SIM_OP_LATENT;
    live_add(g, i);
}

void sim_gpu_submit(struct sim_gpu *g, int i, int64_t now)
{
    struct sim_op *op = &g->ops[i];
    struct sim_stream *s = &g->streams[op->stream];
    op_derive_cost(g, op);
    op->submit_ns = now;
    op->seq = s->next_seq++;
    op->prio = s->prio;
    op->next = SIM_NONE;
    if (s->tail == SIM_NONE) {
        s->head = s->tail = i;
        if (g->nactive_streams < SIM_MAX_STREAMS)
            g->active_streams[g->nactive_streams++] = op->stream;
    } else {
        g->ops[s->tail].next = i;
        s->tail = i;
    }
    op->state = SIM_OP_QUEUED;
    if (s->head == i && op_deps_done(g, op))
        op_release(g, i, now > g->now ? now : g->now);
}

/* --- residency ------------------------------------------------------------------------ */

/* The index of op OP among SM's residents, or -1. */
static int sm_find(const struct sim_sm *sm, int op)
{
    for (uint32_t k = 0; k < sm->nres; k++)
        if (sm->res[k].op == op)
            return (int)k;
    return -1;
}

static uint32_t op_threads_rounded(const struct sim_op *op)
{
    return (op->threads + 31) / 32 * 32;
}

static int sm_same(const struct sim_sm *a, const struct sim_sm *b)
{
    if (a->nres != b->nres || a->threads_used != b->threads_used || a->smem_used != b->smem_used ||
        a->blocks_used != b->blocks_used)
        return 0;
    for (uint32_t k = 0; k < a->nres; k++)
        if (a->res[k].op != b->res[k].op || a->res[k].blocks != b->res[k].blocks)
            return 0;
    return 1;
}

/* One run of empty SMs. */
static void runs_reset(struct sim_gpu *g)
{
    memset(&g->runs[0], 0, sizeof g->runs[0]);
    g->runs[0].count = g->p.num_sms;
    g->nruns = 1;
}

/* Merges neighbouring runs that hold the same. */
static void runs_merge(struct sim_gpu *g)
{
    uint32_t out = 0;
    for (uint32_t r = 1; r < g->nruns; r++) {
        if (sm_same(&g->runs[out].sm, &g->runs[r].sm))
            g->runs[out].count += g->runs[r].count;
        else if (++out != r)
            g->runs[out] = g->runs[r];
    }
    g->nruns = out + 1;
}

/* Splits run R after its first COUNT SMs (0 < COUNT < its count): R keeps those, a new run
 * R + 1 holding the same takes the others. */
static void run_split(struct sim_gpu *g, uint32_t r, uint32_t count)
{
    for (uint32_t k = g->nruns; k > r + 1; k--)
        g->runs[k] = g->runs[k - 1];
    g->nruns++;
    g->runs[r + 1] = g->runs[r];
    g->runs[r + 1].first += count;
    g->runs[r + 1].count -= count;
    g->runs[r].count = count;
}

/* The run whose first SM is FIRST (there is one). */
static uint32_t run_at(const struct sim_gpu *g, uint32_t first)
{
    uint32_t lo = 0, hi = g->nruns - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (g->runs[mid].first < first)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void residency_release(struct sim_gpu *g, int i)
{
    struct sim_op *op = &g->ops[i];
    if (op->res_blocks == 0)
        return;
    uint32_t thr = op_threads_rounded(op);
    uint32_t left = op->res_sms; /* SMs holding it not yet passed */
    for (uint32_t r = 0; r < g->nruns && left > 0; r++) {
        struct sim_sm *sm = &g->runs[r].sm;
        int k = sm_find(sm, i);
        if (k < 0)
            continue;
        uint32_t b = sm->res[k].blocks;
        sm->threads_used -= b * thr;
        sm->smem_used -= b * op->smem;
        sm->blocks_used -= b;
        sm->res[k] = sm->res[--sm->nres];
        left = left > g->runs[r].count ? left - g->runs[r].count : 0;
    }
    op->res_blocks = 0;
    op->res_sms = 0;
    runs_merge(g);
}

static uint32_t sm_room_for(const struct sim_gpu *g, const struct sim_sm *sm,
                            const struct sim_op *op)
{
    const struct sim_dev_params *p = &g->p;
    uint32_t thr = op_threads_rounded(op);
    uint32_t n = p->max_blocks_per_sm - sm->blocks_used;
    uint32_t by_thr = (p->max_threads_per_sm - sm->threads_used) / (thr ? thr : 32);
    if (by_thr < n)
        n = by_thr;
    if (op->smem > 0) {
        uint32_t by_smem = (p->smem_per_sm - sm->smem_used) / op->smem;
        if (by_smem < n)
            n = by_smem;
    }
    return n;
}

/* Adds C blocks of op I on each SM of run R, to its resident K (-1: a new one, last). */
static void run_add(struct sim_gpu *g, uint32_t r, int i, int k, uint32_t c)
{
    struct sim_op *op = &g->ops[i];
    struct sim_sm *sm = &g->runs[r].sm;
    if (k < 0) {
        k = (int)sm->nres++;
        sm->res[k].op = i;
        sm->res[k].blocks = 0;
        op->res_sms += g->runs[r].count;
    }
    sm->res[k].blocks = (uint16_t)(sm->res[k].blocks + c);
    sm->threads_used += c * op_threads_rounded(op);
    sm->smem_used += c * op->smem;
    sm->blocks_used += c;
    op->res_blocks += c * g->runs[r].count;
}

/* Whether SM holds a block of a kernel of context CTX. */
static int sm_holds_ctx(const struct sim_gpu *g, const struct sim_sm *sm, int ctx)
{
    for (uint32_t k = 0; k < sm->nres; k++)
        if (g->ops[sm->res[k].op].ctx == ctx)
            return 1;
    return 0;
}

/* SMs holding a block of a kernel of context CTX. */
static uint32_t ctx_sms_held(const struct sim_gpu *g, int ctx)
{
    uint32_t n = 0;
    for (uint32_t r = 0; r < g->nruns; r++)
        if (sm_holds_ctx(g, &g->runs[r].sm, ctx))
            n += g->runs[r].count;
    return n;
}

/* Places what fits of what op I still wants on the SMs of run R, SM after SM as the block
 * scheduler does, and splits the run where its SMs come to differ: the first ones take all
 * they can, one may take the blocks left, the others nothing. HELD counts the SMs that held
 * op I when the placement began and are not visited yet. CTX_BUDGET, for a kernel of a
 * context with an SM limit, counts the SMs its context may still take (NULL: no limit).
 * Returns the blocks added. */
static uint32_t run_place(struct sim_gpu *g, uint32_t r, int i, uint32_t *held,
                          uint32_t *ctx_budget)
{
    struct sim_op *op = &g->ops[i];
    const struct sim_sm *sm = &g->runs[r].sm;
    uint32_t count = g->runs[r].count;
    int k = *held ? sm_find(sm, i) : -1;
    uint32_t cur = 0, q = count; /* SMs that may take blocks */
    int new_to_ctx = 0;          /* the run's SMs would count against its context's limit */
    if (k >= 0) {
        *held = *held > count ? *held - count : 0;
        cur = sm->res[k].blocks;
    } else {
        if (op->res_sms >= op->want_sms || sm->nres >= SIM_MAX_RES_PER_SM)
            return 0;
        if (op->want_sms - op->res_sms < q)
            q = op->want_sms - op->res_sms;
        if (ctx_budget && !sm_holds_ctx(g, sm, op->ctx)) {
            if (*ctx_budget == 0)
                return 0;
            if (*ctx_budget < q)
                q = *ctx_budget;
            new_to_ctx = 1;
        }
    }
    if (cur >= op->want_per_sm)
        return 0;
    uint32_t c = sm_room_for(g, sm, op);
    if (c > op->want_per_sm - cur)
        c = op->want_per_sm - cur;
    if (c == 0)
        return 0;
    uint32_t left = op->blocks - op->res_blocks;
    uint32_t full = left / c < q ? left / c : q;
    uint32_t part = full < q ? left - full * c : 0;
    uint32_t touched = full + (part > 0);
    if (new_to_ctx)
        *ctx_budget -= touched;
    if (touched < count)
        run_split(g, r, touched);
    if (full > 0 && part > 0)
        run_split(g, r, full);
    if (full > 0)
        run_add(g, r, i, k, c);
    if (part > 0)
        run_add(g, r + (full > 0), i, k, part);
    return full * c + part;
}

/* No SM visited later takes a block of op I: it has all its blocks, or all the SMs it wants
 * and none of those it held is still to be visited. */
static int residency_done(const struct sim_op *op, uint32_t held)
{
    return op->res_blocks >= op->blocks || (held == 0 && op->res_sms >= op->want_sms);
}

/* Places as many more blocks of op I as it wants and fits, least-loaded SMs first (by
 * threads used, then by index). Returns the number of blocks added. */
static uint32_t residency_grow(struct sim_gpu *g, int i)
{
    struct sim_op *op = &g->ops[i];
    /* The runs by load, then by first SM (a stable sort of runs in SM order): the SMs in
     * the scheduler's order, as loaded when the placement began. A run is named by its first
     * SM, which splitting another run does not move. */
    uint32_t first[SIM_MAX_SMS], load[SIM_MAX_SMS];
    uint32_t n = g->nruns;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t t = g->runs[r].sm.threads_used, x = r;
        for (; x > 0 && load[x - 1] > t; x--) {
            load[x] = load[x - 1];
            first[x] = first[x - 1];
        }
        load[x] = t;
        first[x] = g->runs[r].first;
    }
    /* a limited context takes new SMs only while it holds fewer than its limit */
    uint32_t cap = ctx_max_sms(g, op->ctx), budget = 0;
    if (cap) {
        uint32_t in_use = ctx_sms_held(g, op->ctx);
        budget = in_use < cap ? cap - in_use : 0;
    }
    uint32_t held = op->res_sms, added = 0;
    for (uint32_t x = 0; x < n && !residency_done(op, held); x++)
        added += run_place(g, run_at(g, first[x]), i, &held, cap ? &budget : NULL);
    if (added)
        runs_merge(g);
    return added;
}

static int op_fully_placed(const struct sim_op *op)
{
    return op->res_blocks >= op->blocks ||
           (op->res_sms >= op->want_sms && op->res_blocks >= op->res_sms * op->want_per_sm);
}

/* --- completion --------------------------------------------------------------------------- */

static void stream_pop(struct sim_gpu *g, int i)
{
    struct sim_op *op = &g->ops[i];
    if (op->stream < 0 || op->stream >= SIM_MAX_STREAMS)
        return;
    struct sim_stream *s = &g->streams[op->stream];
    if (s->head == i) {
        s->head = op->next;
    } else {
        int prev = s->head;
        while (prev != SIM_NONE && g->ops[prev].next != i)
            prev = g->ops[prev].next;
        if (prev == SIM_NONE)
            return;
        g->ops[prev].next = op->next;
        if (s->tail == i)
            s->tail = prev;
    }
    if (s->head == SIM_NONE) {
        s->tail = SIM_NONE;
        idx_list_remove(g->active_streams, &g->nactive_streams, op->stream);
    }
    op->next = SIM_NONE;
}

static void engine_release(struct sim_gpu *g, int i)
{
    for (int e = 0; e < 2; e++)
        if (g->copy_running[e] == i)
            g->copy_running[e] = SIM_NONE;
}

static void op_complete(struct sim_gpu *g, int i, int64_t t)
{
    struct sim_op *op = &g->ops[i];
    residency_release(g, i);
    engine_release(g, i);
    live_remove(g, i);
    stream_pop(g, i);
    op->end_ns = t;
    op->speed = 0;
    op->work_left = 0;
    if (op->kind == SIM_OP_KERNEL)
        g->stats.kernels_done++;
    op->state = SIM_OP_DONE;
    sim_gpu_ring_push(g, op->owner, i);
}

void sim_gpu_ring_push(struct sim_gpu *g, int owner, int32_t entry)
{
    struct sim_owner *o = &g->owners[owner];
    uint32_t t = o->ring_tail;
    o->ring[t % SIM_OWNER_MAX_OPS] = entry;
    /* the entry before the tail that shows it: its owner reads without the device lock */
    __atomic_store_n(&o->ring_tail, t + 1, __ATOMIC_RELEASE);
}

int sim_gpu_reap(struct sim_gpu *g, int owner)
{
    struct sim_owner *o = &g->owners[owner];
    while (o->ring_head != o->ring_tail) {
        int i = o->ring[o->ring_head % SIM_OWNER_MAX_OPS];
        o->ring_head++;
        if (!(i & (SIM_RING_HOST | SIM_RING_GRANT)))
            return i;
    }
    return SIM_NONE;
}

void sim_gpu_op_free(struct sim_gpu *g, int i)
{
    struct sim_op *op = &g->ops[i];
    if (op->state == SIM_OP_FREE)
        return;
    if (op->owner >= 0 && op->owner < SIM_MAX_OWNERS && g->owners[op->owner].nops > 0)
        g->owners[op->owner].nops--;
    op->gen++;
    op->state = SIM_OP_FREE;
    op->next = g->free_head;
    g->free_head = i;
    g->nfree++;
}

/* Removes op I from wherever it is on the device and frees it (its owner is gone). */
static void op_drop(struct sim_gpu *g, int i)
{
    struct sim_op *op = &g->ops[i];
    if (op->state == SIM_OP_FREE)
        return;
    residency_release(g, i);
    engine_release(g, i);
    if (op->state >= SIM_OP_LATENT && op->state <= SIM_OP_HOSTWAIT)
        live_remove(g, i);
    if (op->state >= SIM_OP_QUEUED && op->state <= SIM_OP_HOSTWAIT)
        stream_pop(g, i);
    sim_gpu_op_free(g, i);
}

/* --- time slicing ------------------------------------------------------------------------- */

static int op_is_slice_work(const struct sim_op *op)
{
    return op->kind == SIM_OP_KERNEL &&
           (op->state == SIM_OP_LATENT || op->state == SIM_OP_READY || op->state == SIM_OP_RUNNING);
}

static void ctx_work_flags(const struct sim_gpu *g, uint8_t *work)
{
    memset(work, 0, SIM_MAX_CTXS);
    for (uint32_t k = 0; k < g->nlive; k++) {
        const struct sim_op *op = &g->ops[g->live[k]];
        if (op_is_slice_work(op) && op->ctx >= 0 && op->ctx < SIM_MAX_CTXS)
            work[op->ctx] = 1;
    }
}

static int next_ctx_with_work(struct sim_gpu *g, const uint8_t *work, int exclude)
{
    for (int k = 0; k < SIM_MAX_CTXS; k++) {
        int c = (g->rr_next + k) % SIM_MAX_CTXS;
        if (c != exclude && work[c] && g->ctxs[c].used) {
            g->rr_next = (c + 1) % SIM_MAX_CTXS;
            return c;
        }
    }
    return SIM_NONE;
}

static int others_have_work(const struct sim_gpu *g, const uint8_t *work)
{
    for (int c = 0; c < SIM_MAX_CTXS; c++)
        if (c != g->active_ctx && work[c])
            return 1;
    return 0;
}

static void preempt_ctx(struct sim_gpu *g, int ctx)
{
    for (uint32_t k = 0; k < g->nlive; k++) {
        int i = g->live[k];
        struct sim_op *op = &g->ops[i];
        if (op->kind == SIM_OP_KERNEL && op->state == SIM_OP_RUNNING && op->ctx == ctx) {
            residency_release(g, i);
            op->speed = 0;
            op->state = SIM_OP_READY;
            g->stats.preemptions++;
        }
    }
}

static void start_switch(struct sim_gpu *g, int target, int64_t t)
{
    g->switch_to = target;
    g->switch_until = t + (int64_t)llround(g->p.ctx_switch_us * 1e3);
    g->stats.ctx_switches++;
}

static int timeslice_step(struct sim_gpu *g, int64_t t)
{
    uint8_t work[SIM_MAX_CTXS];
    int64_t slice = (int64_t)llround(g->p.timeslice_us * 1e3);
    if (g->switch_to != SIM_NONE) {
        if (t < g->switch_until)
            return 0;
        g->active_ctx = g->switch_to;
        g->switch_to = SIM_NONE;
        g->slice_end = t + slice;
        return 1;
    }
    ctx_work_flags(g, work);
    int active = g->active_ctx;
    if (active == SIM_NONE || !g->ctxs[active].used || !work[active]) {
        int target = next_ctx_with_work(g, work, SIM_NONE);
        if (target == SIM_NONE || target == active)
            return 0;
        if (active == SIM_NONE && g->stats.ctx_switches == 0) {
            /* The first context on an idle device pays no switch. */
            g->active_ctx = target;
            g->slice_end = t + slice;
            g->stats.ctx_switches++;
            return 1;
        }
        start_switch(g, target, t);
        return 1;
    }
    if (t >= g->slice_end) {
        int target = next_ctx_with_work(g, work, active);
        if (target == SIM_NONE) {
            g->slice_end = t + slice;
            return 0;
        }
        preempt_ctx(g, active);
        start_switch(g, target, t);
        return 1;
    }
    return 0;
}

/* --- admission ---------------------------------------------------------------------------- */

static int op_may_run(const struct sim_gpu *g, const struct sim_op *op)
{
    if (g->p.mode == SIM_MODE_MPS)
        return 1;
    return g->switch_to == SIM_NONE && op->ctx == g->active_ctx;
}

/* Order for the block scheduler: running kernels first (their remaining blocks dispatch
 * before a later kernel's), then by stream priority, then by readiness. */
static int admit_before(const struct sim_op *a, const struct sim_op *b)
{
    int ra = a->state == SIM_OP_RUNNING, rb = b->state == SIM_OP_RUNNING;
    if (ra != rb)
        return ra;
    if (ra)
        return a->start_ns < b->start_ns;
    if (a->prio != b->prio)
        return a->prio < b->prio;
    if (a->ready_ns != b->ready_ns)
        return a->ready_ns < b->ready_ns;
    return a->seq < b->seq;
}

static uint32_t count_running_kernels(const struct sim_gpu *g)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < g->nlive; k++) {
        const struct sim_op *op = &g->ops[g->live[k]];
        n += op->kind == SIM_OP_KERNEL && op->state == SIM_OP_RUNNING;
    }
    return n;
}

static int admit_kernels(struct sim_gpu *g, int64_t t)
{
    int32_t *cand = g->cand;
    uint32_t n = 0;
    uint32_t running = count_running_kernels(g);
    for (uint32_t k = 0; k < g->nlive; k++) {
        int i = g->live[k];
        struct sim_op *op = &g->ops[i];
        if (op->kind != SIM_OP_KERNEL)
            continue;
        if ((op->state == SIM_OP_READY && op_may_run(g, op)) ||
            (op->state == SIM_OP_RUNNING && !op_fully_placed(op)))
            cand[n++] = i;
    }
    /* insertion sort: the candidate lists are short */
    for (uint32_t a = 1; a < n; a++) {
        int32_t v = cand[a];
        uint32_t b = a;
        while (b > 0 && admit_before(&g->ops[v], &g->ops[cand[b - 1]])) {
            cand[b] = cand[b - 1];
            b--;
        }
        cand[b] = v;
    }
    int changed = 0;
    for (uint32_t k = 0; k < n; k++) {
        struct sim_op *op = &g->ops[cand[k]];
        if (op->exec_ns <= 0 && op->state == SIM_OP_READY) {
            /* nothing to execute: starts and finishes at once */
            running++;
            op->state = SIM_OP_RUNNING;
            op->start_ns = t;
            op->speed = 1;
            changed = 1;
            continue;
        }
        if (op->state == SIM_OP_READY && running >= SIM_MAX_RUNNING)
            continue;
        if (residency_grow(g, cand[k]) == 0)
            continue;
        changed = 1;
        if (op->state == SIM_OP_READY) {
            running++;
            if (op->work_left >= op->exec_ns)
                op->start_ns = t;
            op->state = SIM_OP_RUNNING;
        }
    }
    return changed;
}

static int admit_copies(struct sim_gpu *g, int64_t t)
{
    int changed = 0;
    for (int e = 0; e < 2; e++) {
        if (g->copy_running[e] != SIM_NONE)
            continue;
        int kind = e == 0 ? SIM_OP_COPY_H2D : SIM_OP_COPY_D2H;
        int best = SIM_NONE;
        for (uint32_t k = 0; k < g->nlive; k++) {
            int i = g->live[k];
            struct sim_op *op = &g->ops[i];
            if (op->kind == kind && op->state == SIM_OP_READY &&
                (best == SIM_NONE || op->ready_ns < g->ops[best].ready_ns))
                best = i;
        }
        if (best == SIM_NONE)
            continue;
        g->copy_running[e] = best;
        g->ops[best].state = SIM_OP_RUNNING;
        g->ops[best].start_ns = t;
        g->ops[best].speed = 1;
        changed = 1;
    }
    return changed;
}

/* --- sharing: issue per SM, DRAM per device ------------------------------------------------ */

/* Max-min fair split of CAP among demands D[0..n): X[k] = min(D[k], level). */
static void waterfill(const double *d, double *x, int n, double cap)
{
    int idx[SIM_MAX_RES_PER_SM];
    for (int k = 0; k < n; k++)
        idx[k] = k;
    for (int a = 1; a < n; a++) {
        int v = idx[a], b = a;
        while (b > 0 && d[v] < d[idx[b - 1]]) {
            idx[b] = idx[b - 1];
            b--;
        }
        idx[b] = v;
    }
    double left = cap;
    for (int r = 0; r < n; r++) {
        int k = idx[r];
        double share = left / (n - r);
        x[k] = d[k] <= share ? d[k] : share;
        left -= x[k];
    }
}

static struct sim_run_entry *run_find(struct sim_run_entry *r, int n, int op)
{
    for (int k = 0; k < n; k++)
        if (r[k].op == op)
            return &r[k];
    return NULL;
}

/* One round: splits every SM's issue among its resident kernels by demand, lends unused
 * issue to kernels that are short elsewhere (blocks go where SMs free up), then splits DRAM
 * bandwidth max-min fairly on speed. */
static void share_round(struct sim_gpu *g, struct sim_run_entry *r, int n)
{
    for (int k = 0; k < n; k++)
        r[k].got = 0;
    double leftover[SIM_MAX_SMS]; /* per run of SMs: the same on each of its SMs */
    /* A run holding the same kernels in the same order as the last one split gets the same
     * split: it is computed once (the sums still run SM by SM, in the same order). An empty
     * run gives nothing and lends to no one. */
    double d[SIM_MAX_RES_PER_SM], x[SIM_MAX_RES_PER_SM];
    struct sim_run_entry *e[SIM_MAX_RES_PER_SM];
    int m = 0;
    const struct sim_sm *prev = NULL;
    for (uint32_t u = 0; u < g->nruns; u++) {
        const struct sim_sm *sm = &g->runs[u].sm;
        leftover[u] = 1.0;
        if (sm->nres == 0)
            continue;
        int same = prev && prev->nres == sm->nres;
        for (uint32_t s = 0; same && s < sm->nres; s++)
            same = prev->res[s].op == sm->res[s].op;
        if (!same) {
            m = 0;
            for (uint32_t s = 0; s < sm->nres; s++) {
                struct sim_run_entry *re = run_find(r, n, sm->res[s].op);
                if (!re)
                    continue;
                const struct sim_op *op = &g->ops[re->op];
                e[m] = re;
                d[m] = op->res_sms ? re->target * op->sm_units / op->res_sms : 0;
                m++;
            }
            waterfill(d, x, m, 1.0);
        }
        prev = sm;
        double used = 0;
        for (int k = 0; k < m; k++)
            used += x[k];
        /* each SM of the run adds its share in turn (count x share would round otherwise) */
        double got[SIM_MAX_RES_PER_SM];
        for (int k = 0; k < m; k++)
            got[k] = e[k]->got;
        for (uint32_t t = 0; t < g->runs[u].count; t++)
            for (int k = 0; k < m; k++)
                got[k] += x[k];
        for (int k = 0; k < m; k++)
            e[k]->got = got[k];
        leftover[u] = dmax(0.0, 1.0 - used);
    }
    /* Unused issue goes only to kernels short of their target, and lending makes no kernel
     * short: when none is, there is nothing to lend. */
    int any_short = 0;
    for (int k = 0; k < n && !any_short; k++)
        any_short = r[k].got < r[k].target * g->ops[r[k].op].sm_units - 1e-12;
    for (uint32_t u = 0; any_short && u < g->nruns; u++) {
        const struct sim_sm *sm = &g->runs[u].sm;
        if (sm->nres == 0 || leftover[u] <= 1e-12)
            continue;
        /* SM by SM: what one lends decides who is still short on the next */
        for (uint32_t t = 0; t < g->runs[u].count; t++) {
            double left = leftover[u];
            struct sim_run_entry *shortk[SIM_MAX_RES_PER_SM];
            int m = 0;
            for (uint32_t s = 0; s < sm->nres; s++) {
                struct sim_run_entry *re = run_find(r, n, sm->res[s].op);
                if (re && re->got < re->target * g->ops[re->op].sm_units - 1e-12)
                    shortk[m++] = re;
            }
            if (m == 0)
                break; /* and none on the SMs left in the run */
            for (int k = 0; k < m; k++) {
                double need = shortk[k]->target * g->ops[shortk[k]->op].sm_units - shortk[k]->got;
                double give = dmin(need, left / (m - k));
                shortk[k]->got += give;
                left -= give;
            }
        }
    }
    for (int k = 0; k < n; k++) {
        const struct sim_op *op = &g->ops[r[k].op];
        r[k].speed = op->sm_units > 0 ? dmin(1.0, r[k].got / op->sm_units) : 1.0;
    }
    /* DRAM: find the level L with sum(min(speed, L) * mem_rate) = bandwidth. */
    double bw = g->p.dram_bw / 1e9, total = 0;
    for (int k = 0; k < n; k++)
        total += r[k].speed * g->ops[r[k].op].mem_rate;
    if (total <= bw)
        return;
    double lo = 0, hi = 1;
    for (int it = 0; it < 60; it++) {
        double mid = (lo + hi) / 2, sum = 0;
        for (int k = 0; k < n; k++)
            sum += dmin(r[k].speed, mid) * g->ops[r[k].op].mem_rate;
        if (sum > bw)
            hi = mid;
        else
            lo = mid;
    }
    for (int k = 0; k < n; k++)
        r[k].speed = dmin(r[k].speed, lo);
}

static void recompute_speeds(struct sim_gpu *g)
{
    struct sim_run_entry *r = g->run;
    int n = 0;
    for (uint32_t k = 0; k < g->nlive && n < SIM_MAX_RUNNING; k++) {
        int i = g->live[k];
        struct sim_op *op = &g->ops[i];
        if (op->state != SIM_OP_RUNNING || op->kind != SIM_OP_KERNEL || op->exec_ns <= 0)
            continue;
        r[n].op = i;
        r[n].target = 1.0;
        n++;
    }
    if (n == 0)
        return;
    share_round(g, r, n);
    /* Second round: kernels held back by DRAM ask only for what they can use, so their
     * issue share goes to the compute-bound ones beside them. */
    int memory_bound = 0;
    for (int k = 0; k < n; k++) {
        double before = r[k].speed;
        r[k].target = 1.0;
        if (before < 1.0) {
            const struct sim_op *op = &g->ops[r[k].op];
            double compute_cap = op->sm_units > 0 ? dmin(1.0, r[k].got / op->sm_units) : 1.0;
            if (before < compute_cap - 1e-12) {
                r[k].target = before;
                memory_bound = 1;
            }
        }
    }
    if (memory_bound)
        share_round(g, r, n);
    for (int k = 0; k < n; k++)
        g->ops[r[k].op].speed = r[k].speed > 1e-9 ? r[k].speed : 1e-9;
}

/* --- the event loop ------------------------------------------------------------------------ */

static int64_t op_end_time(const struct sim_gpu *g, const struct sim_op *op)
{
    if (op->work_left <= WORK_EPS)
        return g->now;
    if (op->speed <= 0)
        return INT64_MAX;
    double dt = ceil(op->work_left / op->speed);
    if (dt > 9e18)
        return INT64_MAX;
    return g->now + (int64_t)dt;
}

int64_t sim_gpu_next_event(const struct sim_gpu *g)
{
    if (g->dirty)
        return g->now;
    int64_t t = INT64_MAX;
    for (uint32_t k = 0; k < g->nlive; k++) {
        const struct sim_op *op = &g->ops[g->live[k]];
        int64_t e = INT64_MAX;
        if (op->state == SIM_OP_LATENT)
            e = op->ready_ns;
        else if (op->state == SIM_OP_RUNNING)
            e = op_end_time(g, op);
        if (e < t)
            t = e;
    }
    if (g->p.mode == SIM_MODE_TIMESLICE) {
        if (g->switch_to != SIM_NONE) {
            if (g->switch_until < t)
                t = g->switch_until;
        } else if (g->active_ctx != SIM_NONE) {
            uint8_t work[SIM_MAX_CTXS];
            ctx_work_flags(g, work);
            if (others_have_work(g, work) && g->slice_end < t)
                t = g->slice_end;
        }
    }
    return t < g->now ? g->now : t;
}

/* Earliest time a READY op can start: when its context's slice comes (time slicing), else
 * the next event of the device (something finishes and frees room). */
static int64_t ready_bound(const struct sim_gpu *g, const struct sim_op *op, int64_t *global)
{
    if (g->p.mode == SIM_MODE_TIMESLICE && op->kind == SIM_OP_KERNEL && op->ctx != g->active_ctx) {
        if (g->switch_to == op->ctx)
            return g->switch_until;
        if (g->switch_to == SIM_NONE && g->active_ctx != SIM_NONE)
            return g->slice_end;
    }
    if (*global < 0)
        *global = sim_gpu_next_event(g);
    return *global;
}

#define WALK_LIMIT 64 /* ops looked at per stream: beyond, the bound so far is kept */

/* Lower bound on when ops of stream S complete, walking from its head: stops after STOP (an
 * op index) or, when STOP is SIM_NONE, after the first op its owner observes. DEP_DEPTH
 * limits how far it follows dependencies on other streams. */
static double stream_walk(const struct sim_gpu *g, const struct sim_stream *s, int stop,
                          int dep_depth, int64_t *global);

static double dep_bound(const struct sim_gpu *g, const struct sim_op *op, int dep_depth,
                        int64_t *global)
{
    double t = (double)g->now;
    for (int k = 0; k < op->ndeps && dep_depth > 0; k++) {
        int d = op->deps[k];
        if (d < 0 || d >= SIM_MAX_OPS || sim_gpu_op_is_done(g, d, op->dep_gens[k]))
            continue;
        const struct sim_op *dop = &g->ops[d];
        if (dop->stream < 0 || dop->stream >= SIM_MAX_STREAMS)
            continue;
        t = dmax(t, stream_walk(g, &g->streams[dop->stream], d, dep_depth - 1, global));
    }
    return t;
}

static double stream_walk(const struct sim_gpu *g, const struct sim_stream *s, int stop,
                          int dep_depth, int64_t *global)
{
    double t = (double)g->now;
    int n = 0;
    for (int i = s->head; i != SIM_NONE && n < WALK_LIMIT; i = g->ops[i].next, n++) {
        const struct sim_op *op = &g->ops[i];
        switch (op->state) {
        case SIM_OP_QUEUED:
            t = dmax(t, (double)op->submit_ns);
            if (i == s->head)
                t = dmax(t, dep_bound(g, op, dep_depth, global));
            t += op_latency_ns(g, op) + op->work_left;
            break;
        case SIM_OP_LATENT:
            t = (double)op->ready_ns + (op->kind == SIM_OP_HOST ? 0 : op->work_left);
            break;
        case SIM_OP_READY:
            t = dmax(t, (double)ready_bound(g, op, global)) + op->work_left;
            break;
        case SIM_OP_RUNNING:
            t = (double)op_end_time(g, op);
            break;
        case SIM_OP_HOSTWAIT:
            return 9.9e18; /* waits for its owner: no bound */
        default:
            break;
        }
        if (stop != SIM_NONE
                ? i == stop
                : (op->flags & SIM_OPF_NOTIFY) || op->kind == SIM_OP_HOST || i == s->tail)
            break;
    }
    return t;
}

int64_t sim_gpu_owner_next_event(const struct sim_gpu *g, int owner)
{
    int64_t t = INT64_MAX, global = -1;
    for (uint32_t k = 0; k < g->nactive_streams; k++) {
        const struct sim_stream *s = &g->streams[g->active_streams[k]];
        if (s->owner != owner)
            continue;
        double e = stream_walk(g, s, SIM_NONE, 2, &global);
        if (e < 9e18 && (int64_t)ceil(e) < t)
            t = (int64_t)ceil(e);
    }
    return t < g->now ? g->now : t;
}

static void progress(struct sim_gpu *g, int64_t t)
{
    if (t <= g->now)
        return;
    double dt = (double)(t - g->now);
    int busy = 0;
    for (uint32_t k = 0; k < g->nlive; k++) {
        struct sim_op *op = &g->ops[g->live[k]];
        if (op->state != SIM_OP_RUNNING)
            continue;
        op->work_left -= op->speed * dt;
        if (op->work_left < 0)
            op->work_left = 0;
        if (op->kind == SIM_OP_KERNEL)
            busy = 1;
    }
    if (busy)
        g->stats.busy_ns += dt;
    g->now = t;
}

/* Releases stream heads whose dependencies are done and moves latent ops whose latency has
 * passed; markers complete on the spot, which may release more. */
static int settle_streams(struct sim_gpu *g, int64_t t)
{
    int changed = 0, again = 1;
    while (again) {
        again = 0;
        for (uint32_t k = 0; k < g->nlive; k++) {
            int i = g->live[k];
            struct sim_op *op = &g->ops[i];
            if (op->state == SIM_OP_RUNNING && op->work_left <= WORK_EPS) {
                op_complete(g, i, t);
                again = 1;
                break;
            }
            if (op->state != SIM_OP_LATENT || op->ready_ns > t)
                continue;
            again = 1;
            if (op->kind == SIM_OP_MARKER) {
                op_complete(g, i, t);
                break;
            }
            if (op->kind == SIM_OP_HOST) {
                op->state = SIM_OP_HOSTWAIT;
                sim_gpu_ring_push(g, op->owner, i | SIM_RING_HOST); /* its owner's turn */
            } else {
                op->state = SIM_OP_READY;
            }
        }
        for (uint32_t k = 0; k < g->nactive_streams; k++) {
            struct sim_stream *s = &g->streams[g->active_streams[k]];
            int h = s->head;
            if (h == SIM_NONE || g->ops[h].state != SIM_OP_QUEUED || !op_deps_done(g, &g->ops[h]))
                continue;
            op_release(g, h, t);
            again = 1;
        }
        changed |= again;
    }
    return changed;
}

static void step(struct sim_gpu *g, int64_t t)
{
    int changed = settle_streams(g, t);
    if (g->p.mode == SIM_MODE_TIMESLICE)
        changed |= timeslice_step(g, t);
    changed |= admit_kernels(g, t);
    changed |= admit_copies(g, t);
    /* kernels with nothing to execute finish the moment they start */
    changed |= settle_streams(g, t);
    if (changed)
        recompute_speeds(g);
}

void sim_gpu_advance(struct sim_gpu *g, int64_t now)
{
    for (int guard = 0; guard < STEP_LIMIT; guard++) {
        int64_t t = sim_gpu_next_event(g);
        if (t > now) {
            progress(g, now);
            return;
        }
        progress(g, t);
        g->dirty = 0;
        step(g, g->now);
    }
}

void sim_gpu_host_done(struct sim_gpu *g, int i, int64_t now)
{
    struct sim_op *op = &g->ops[i];
    if (op->state != SIM_OP_HOSTWAIT)
        return;
    progress(g, now);
    op_complete(g, i, g->now);
    g->dirty = 1;
}

/* --- removal ------------------------------------------------------------------------------ */

void sim_gpu_stream_remove(struct sim_gpu *g, int stream, int64_t now)
{
    struct sim_stream *s = &g->streams[stream];
    if (!s->used)
        return;
    progress(g, now);
    while (s->head != SIM_NONE)
        op_drop(g, s->head);
    idx_list_remove(g->active_streams, &g->nactive_streams, stream);
    s->used = 0;
    g->dirty = 1;
}

void sim_gpu_ctx_remove(struct sim_gpu *g, int ctx, int64_t now)
{
    if (!g->ctxs[ctx].used)
        return;
    for (int s = 0; s < SIM_MAX_STREAMS; s++)
        if (g->streams[s].used && g->streams[s].ctx == ctx)
            sim_gpu_stream_remove(g, s, now);
    g->ctxs[ctx].used = 0;
    if (g->active_ctx == ctx)
        g->active_ctx = SIM_NONE;
    if (g->switch_to == ctx)
        g->switch_to = SIM_NONE;
    g->dirty = 1;
}

void sim_gpu_owner_remove(struct sim_gpu *g, int owner, int64_t now)
{
    struct sim_owner *o = &g->owners[owner];
    if (!o->used)
        return;
    progress(g, now);
    for (int c = 0; c < SIM_MAX_CTXS; c++)
        if (g->ctxs[c].used && g->ctxs[c].owner == owner)
            sim_gpu_ctx_remove(g, c, now);
    for (int s = 0; s < SIM_MAX_STREAMS; s++)
        if (g->streams[s].used && g->streams[s].owner == owner)
            sim_gpu_stream_remove(g, s, now);
    for (int i = 0; i < SIM_MAX_OPS; i++)
        if (g->ops[i].state != SIM_OP_FREE && g->ops[i].owner == owner)
            op_drop(g, i);
    o->used = 0;
    o->nops = 0;
    o->ring_head = o->ring_tail = 0;
    g->dirty = 1;
}

/* --- recovery ----------------------------------------------------------------------------- */

static int seq_cmp(const void *a, const void *b, void *arg)
{
    const struct sim_gpu *g = arg;
    const struct sim_op *x = &g->ops[*(const int32_t *)a];
    const struct sim_op *y = &g->ops[*(const int32_t *)b];
    if (x->stream != y->stream)
        return x->stream < y->stream ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

static int end_cmp(const void *a, const void *b, void *arg)
{
    const struct sim_gpu *g = arg;
    const struct sim_op *x = &g->ops[*(const int32_t *)a];
    const struct sim_op *y = &g->ops[*(const int32_t *)b];
    return x->end_ns < y->end_ns ? -1 : (x->end_ns > y->end_ns);
}

static int op_is_valid(const struct sim_gpu *g, const struct sim_op *op)
{
    if (op->state > SIM_OP_DONE || op->owner < 0 || op->owner >= SIM_MAX_OWNERS ||
        !g->owners[op->owner].used)
        return 0;
    if (op->state >= SIM_OP_QUEUED && op->state <= SIM_OP_HOSTWAIT &&
        (op->stream < 0 || op->stream >= SIM_MAX_STREAMS || !g->streams[op->stream].used))
        return 0;
    return 1;
}

void sim_gpu_rebuild(struct sim_gpu *g)
{
    int32_t *order = g->order;
    g->free_head = SIM_NONE;
    g->nfree = 0;
    g->nlive = 0;
    g->nactive_streams = 0;
    g->copy_running[0] = g->copy_running[1] = SIM_NONE;
    runs_reset(g);
    /* The rings stay: their owners read them without the lock. What they hold is known
     * (an owner makes a completed op its own again before it moves its head past it), so only
     * what a dead writer completed without showing goes in below. */
    static uint8_t in_ring[SIM_MAX_OPS];
    memset(in_ring, 0, sizeof in_ring);
    for (int o = 0; o < SIM_MAX_OWNERS; o++) {
        struct sim_owner *ow = &g->owners[o];
        ow->nops = 0;
        uint32_t h = __atomic_load_n(&ow->ring_head, __ATOMIC_ACQUIRE), t = ow->ring_tail;
        if (t - h > SIM_OWNER_MAX_OPS)
            h = t - SIM_OWNER_MAX_OPS;
        for (uint32_t k = h; k != t; k++)
            in_ring[ow->ring[k % SIM_OWNER_MAX_OPS] & SIM_RING_OP & (SIM_MAX_OPS - 1)] = 1;
    }
    for (int s = 0; s < SIM_MAX_STREAMS; s++) {
        struct sim_stream *st = &g->streams[s];
        st->head = st->tail = SIM_NONE;
        if (st->used &&
            (st->owner < 0 || st->owner >= SIM_MAX_OWNERS || !g->owners[st->owner].used))
            st->used = 0;
    }
    for (int c = 0; c < SIM_MAX_CTXS; c++)
        if (g->ctxs[c].used && (g->ctxs[c].owner < 0 || g->ctxs[c].owner >= SIM_MAX_OWNERS ||
                                !g->owners[g->ctxs[c].owner].used))
            g->ctxs[c].used = 0;
    int nq = 0, nd = 0;
    for (int i = SIM_MAX_OPS - 1; i >= 0; i--) {
        struct sim_op *op = &g->ops[i];
        if (op->state == SIM_OP_FREE || !op_is_valid(g, op)) {
            if (op->state != SIM_OP_FREE)
                op->gen++;
            op->state = SIM_OP_FREE;
            op->next = g->free_head;
            g->free_head = i;
            g->nfree++;
            continue;
        }
        g->owners[op->owner].nops++;
        op->res_blocks = op->res_sms = 0;
        if (op->state == SIM_OP_RUNNING) {
            op->state = SIM_OP_READY;
            op->speed = 0;
        }
        if (op->state >= SIM_OP_QUEUED && op->state <= SIM_OP_HOSTWAIT)
            order[nq++] = i;
    }
    qsort_r(order, nq, sizeof order[0], seq_cmp, g);
    for (int k = 0; k < nq; k++) {
        int i = order[k];
        struct sim_op *op = &g->ops[i];
        struct sim_stream *s = &g->streams[op->stream];
        op->next = SIM_NONE;
        if (s->tail == SIM_NONE) {
            s->head = i;
            g->active_streams[g->nactive_streams++] = op->stream;
        } else {
            g->ops[s->tail].next = i;
        }
        s->tail = i;
        if (op->state != SIM_OP_QUEUED)
            g->live[g->nlive++] = i;
    }
    for (int i = 0; i < SIM_MAX_OPS; i++)
        if (g->ops[i].state == SIM_OP_DONE && !in_ring[i])
            order[nd++] = i;
    qsort_r(order, nd, sizeof order[0], end_cmp, g);
    for (int k = 0; k < nd; k++)
        sim_gpu_ring_push(g, g->ops[order[k]].owner, order[k]);
    /* a host op shown twice is run once: its owner marks what it started */
    for (int i = 0; i < SIM_MAX_OPS; i++)
        if (g->ops[i].state == SIM_OP_HOSTWAIT && !in_ring[i])
            sim_gpu_ring_push(g, g->ops[i].owner, i | SIM_RING_HOST);
    if (g->active_ctx != SIM_NONE &&
        (g->active_ctx < 0 || g->active_ctx >= SIM_MAX_CTXS || !g->ctxs[g->active_ctx].used))
        g->active_ctx = SIM_NONE;
    if (g->switch_to != SIM_NONE &&
        (g->switch_to < 0 || g->switch_to >= SIM_MAX_CTXS || !g->ctxs[g->switch_to].used))
        g->switch_to = SIM_NONE;
    g->dirty = 1;
}
