/* possim search (see possim_search.h and docs/schedule.md): the three search methods over an
 * abstract stage cost, the stage cost of a mix measured on the virtual-GPU model with a cache,
 * the schedule file writer and the `possim search` command. */
#include "tools/possim_search.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim/gpu_model.h"
#include "sim/model_file.h"

#define INF        INT64_MAX
#define MAX_STATES (1u << 26) /* DP table entries (12 bytes each) */

/* ---- plans ---------------------------------------------------------------------------------- */

static int plan_push(struct search_plan *pl, size_t n, const uint32_t *runs, int64_t cost,
                     int64_t barrier)
{
    uint32_t *r = realloc(pl->runs, (pl->nstages + 1) * n * sizeof *r);
    if (!r)
        return -ENOMEM;
    pl->runs = r;
    int64_t *c = realloc(pl->cost_ns, (pl->nstages + 1) * sizeof *c);
    if (!c)
        return -ENOMEM;
    pl->cost_ns = c;
    memcpy(pl->runs + pl->nstages * n, runs, n * sizeof *runs);
    pl->cost_ns[pl->nstages++] = cost;
    pl->total_ns += cost + barrier;
    return 0;
}

void search_plan_free(struct search_plan *pl)
{
    free(pl->runs);
    free(pl->cost_ns);
    memset(pl, 0, sizeof *pl);
}

static int64_t stage_cost(const struct search_problem *p, struct search_plan *pl, const uint32_t *u,
                          const uint32_t *r)
{
    pl->evals++;
    return p->cost(p->arg, u, r);
}

int search_sequential(const struct search_problem *p, struct search_plan *out)
{
    memset(out, 0, sizeof *out);
    uint32_t u[SEARCH_MAX_MODELS] = {0}, r[SEARCH_MAX_MODELS] = {0};
    for (size_t m = 0; m < p->n; m++) {
        memset(r, 0, sizeof r);
        r[m] = p->units[m];
        if (!r[m])
            continue;
        if (plan_push(out, p->n, r, stage_cost(p, out, u, r), p->barrier_ns) < 0) {
            search_plan_free(out);
            return -ENOMEM;
        }
    }
    return 0;
}

/* ---- stage enumeration ------------------------------------------------------------------------
 */

/* The stages possible from progress U: every vector of runs with each run at most max_run
 * (several models), then, with solo_any, the longer runs of one model alone. R holds the
 * current vector; *PHASE and R start zeroed; returns 0 when there are no more. */
static int next_stage(const struct search_problem *p, const struct search_limits *lim,
                      const uint32_t *u, uint32_t *r, int *phase)
{
    size_t n = p->n;
    if (*phase == 0) {
        for (size_t m = 0; m < n; m++) {
            uint32_t left = p->units[m] - u[m];
            uint32_t cap = lim->max_run && lim->max_run < left ? lim->max_run : left;
            if (r[m] < cap) {
                r[m]++;
                return 1;
            }
            r[m] = 0;
        }
        *phase = 1; /* the box is exhausted (back to all zero) */
        if (!lim->solo_any || !lim->max_run)
            return 0;
        memset(r, 0, n * sizeof *r);
    }
    /* single-model runs longer than max_run: phase 1 + m walks model m */
    for (;;) {
        size_t m = (size_t)(*phase - 1);
        if (m >= n)
            return 0;
        uint32_t left = p->units[m] - u[m];
        if (r[m] == 0)
            r[m] = lim->max_run;
        if (r[m] < left) {
            r[m]++;
            return 1;
        }
        r[m] = 0;
        (*phase)++;
    }
}

/* Sum of the solo bounds of model M's units U .. U + R - 1 (PRE: prefix sums). */
static int64_t solo_sum(int64_t *const *pre, size_t m, uint32_t u, uint32_t r)
{
    return pre[m][u + r] - pre[m][u];
}

static int64_t stage_bound(const struct search_problem *p, int64_t *const *pre, const uint32_t *u,
                           const uint32_t *r)
{
    int64_t b = 0;
    for (size_t m = 0; m < p->n; m++) {
        int64_t s = r[m] ? solo_sum(pre, m, u[m], r[m]) : 0;
        b = s > b ? s : b;
    }
    return b;
}

/* What is left after U can take no less than its longest model alone. */
static int64_t rest_bound(const struct search_problem *p, int64_t *const *pre, const uint32_t *u)
{
    int64_t b = 0;
    int left = 0;
    for (size_t m = 0; m < p->n; m++) {
        int64_t s = solo_sum(pre, m, u[m], p->units[m] - u[m]);
        b = s > b ? s : b;
        left |= u[m] < p->units[m];
    }
    return b + (left ? p->barrier_ns : 0);
}

static int64_t **prefix_new(const struct search_problem *p)
{
    int64_t **pre = calloc(p->n, sizeof *pre);
    if (!pre)
        return NULL;
    for (size_t m = 0; m < p->n; m++) {
        pre[m] = calloc(p->units[m] + 1, sizeof **pre);
        if (!pre[m])
            goto fail;
        for (uint32_t k = 0; k < p->units[m]; k++)
            pre[m][k + 1] = pre[m][k] + (p->solo[m] ? p->solo[m][k] : 0);
    }
    return pre;
fail:
    for (size_t m = 0; m < p->n; m++)
        free(pre[m]);
    free(pre);
    return NULL;
}

static void prefix_free(const struct search_problem *p, int64_t **pre)
{
    for (size_t m = 0; pre && m < p->n; m++)
        free(pre[m]);
    free(pre);
}

/* ---- greedy -----------------------------------------------------------------------------------
 */

/* Stage by stage, the stage whose runs' solo time summed over its cost is highest (the most
 * overlap per unit of time), the larger on a tie. */
int search_greedy(const struct search_problem *p, const struct search_limits *lim,
                  struct search_plan *out)
{
    memset(out, 0, sizeof *out);
    int64_t **pre = prefix_new(p);
    if (!pre)
        return -ENOMEM;
    size_t n = p->n;
    uint32_t u[SEARCH_MAX_MODELS] = {0};
    int rc = 0;
    for (;;) {
        int left = 0;
        for (size_t m = 0; m < n; m++)
            left |= u[m] < p->units[m];
        if (!left)
            break;
        uint32_t r[SEARCH_MAX_MODELS] = {0}, best[SEARCH_MAX_MODELS] = {0};
        double best_score = -1, best_work = -1;
        int64_t best_cost = 0;
        int phase = 0;
        while (next_stage(p, lim, u, r, &phase)) {
            int64_t c = stage_cost(p, out, u, r);
            double work = 0;
            for (size_t m = 0; m < n; m++)
                work += r[m] ? (double)solo_sum(pre, m, u[m], r[m]) : 0;
            if (!p->solo[0])
                for (size_t m = 0; m < n; m++)
                    work += r[m];
            double score = work / (double)(c + p->barrier_ns > 0 ? c + p->barrier_ns : 1);
            if (score > best_score || (score == best_score && work > best_work)) {
                best_score = score;
                best_work = work;
                best_cost = c;
                memcpy(best, r, sizeof best);
            }
        }
        if ((rc = plan_push(out, n, best, best_cost, p->barrier_ns)) < 0)
            break;
        for (size_t m = 0; m < n; m++)
            u[m] += best[m];
    }
    prefix_free(p, pre);
    if (rc)
        search_plan_free(out);
    return rc;
}

/* ---- dynamic programming ------------------------------------------------------------------------
 */

/* Over progress vectors u (units done per model), dp[u] = the least cost of stages that bring
 * every model from 0 to u, as a stage is a vector of runs from u. States are numbered in mixed
 * radix, so every stage leads to a higher number: one pass in order settles them all. */
int search_dp(const struct search_problem *p, const struct search_limits *lim,
              struct search_plan *out)
{
    memset(out, 0, sizeof *out);
    size_t n = p->n;
    uint64_t stride[SEARCH_MAX_MODELS + 1];
    stride[0] = 1;
    for (size_t m = 0; m < n; m++) {
        stride[m + 1] = stride[m] * (p->units[m] + 1);
        if (stride[m + 1] > MAX_STATES)
            return -E2BIG;
    }
    uint64_t nstates = stride[n];
    int64_t *dp = malloc(nstates * sizeof *dp);
    uint32_t *parent = malloc(nstates * sizeof *parent);
    int64_t **pre = p->solo[0] ? prefix_new(p) : NULL;
    int bound = lim->bound && pre;
    int rc = 0;
    if (!dp || !parent || (p->solo[0] && !pre)) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint64_t i = 0; i < nstates; i++)
        dp[i] = INF;
    dp[0] = 0;
    /* an upper bound to prune against: the sequential schedule, always reachable with
     * solo_any (its stages are then part of the search) */
    int64_t ub = INF;
    if (bound && (lim->solo_any || !lim->max_run)) {
        struct search_plan seq;
        if ((rc = search_sequential(p, &seq)) < 0)
            goto out;
        ub = seq.total_ns;
        out->evals += seq.evals;
        search_plan_free(&seq);
    }
    uint32_t u[SEARCH_MAX_MODELS] = {0}, t[SEARCH_MAX_MODELS] = {0};
    for (uint64_t s = 0; s < nstates; s++) {
        if (s) /* the next progress vector in mixed radix */
            for (size_t m = 0; m < n && ++u[m] > p->units[m]; m++)
                u[m] = 0;
        if (dp[s] == INF)
            continue;
        out->states++;
        if (bound && dp[s] + rest_bound(p, pre, u) > ub)
            continue;
        uint32_t r[SEARCH_MAX_MODELS] = {0};
        int phase = 0;
        while (next_stage(p, lim, u, r, &phase)) {
            uint64_t to = s;
            for (size_t m = 0; m < n; m++) {
                to += r[m] * stride[m];
                t[m] = u[m] + r[m];
            }
            int64_t lb = 0;
            if (bound) {
                lb = stage_bound(p, pre, u, r) + p->barrier_ns;
                if (dp[s] + lb >= dp[to] || dp[s] + lb + rest_bound(p, pre, t) > ub) {
                    out->pruned++;
                    continue;
                }
            }
            int64_t c = stage_cost(p, out, u, r) + p->barrier_ns;
            if (bound && c < lb)
                out->bound_misses++;
            if (dp[s] + c < dp[to]) {
                dp[to] = dp[s] + c;
                parent[to] = (uint32_t)s;
            }
        }
    }
    /* the stages, from the last back */
    uint64_t at = nstates - 1;
    if (dp[at] == INF) {
        rc = -ERANGE; /* the bounds cut every path: a stage came in under its bound */
        goto out;
    }
    size_t k = 0;
    for (uint64_t x = at; x; x = parent[x])
        k++;
    out->nstages = k;
    out->runs = calloc(k * n + 1, sizeof *out->runs);
    out->cost_ns = calloc(k + 1, sizeof *out->cost_ns);
    if (!out->runs || !out->cost_ns) {
        rc = -ENOMEM;
        goto out;
    }
    out->total_ns = dp[at];
    for (uint64_t x = at; x; x = parent[x]) {
        uint64_t from = parent[x];
        k--;
        for (size_t m = 0; m < n; m++) {
            uint32_t a = (uint32_t)(from / stride[m] % (p->units[m] + 1));
            uint32_t b = (uint32_t)(x / stride[m] % (p->units[m] + 1));
            out->runs[k * n + m] = b - a;
        }
        out->cost_ns[k] = dp[x] - dp[from] - p->barrier_ns;
    }
out:
    prefix_free(p, pre);
    free(dp);
    free(parent);
    if (rc) {
        uint64_t e = out->evals;
        search_plan_free(out);
        out->evals = e;
    }
    return rc;
}

/* ---- the mix on the virtual GPU
 * ------------------------------------------------------------------ */

struct cache_entry {
    uint16_t key[2 * SEARCH_MAX_MODELS]; /* (start, len) in operators per model */
    int64_t ns;
    int used;
};

struct search_mix {
    struct sim_dev_params dev;
    char device_name[64];
    size_t n;
    struct search_model m[SEARCH_MAX_MODELS];
    struct sim_gpu *g;
    int owner[SEARCH_MAX_MODELS];
    struct cache_entry *cache;
    size_t cache_cap, cache_n;
    uint64_t sims, hits;
};

size_t search_mix_models(const struct search_mix *x)
{
    return x->n;
}

const struct search_model *search_mix_model(const struct search_mix *x, size_t m)
{
    return &x->m[m];
}

void search_mix_counts(const struct search_mix *x, uint64_t *sims, uint64_t *hits)
{
    *sims = x->sims;
    *hits = x->hits;
}

/* Runs the stage on fresh contexts and streams from an idle device and returns its makespan:
 * every model's run is queued on its own stream at once (as a client launches ahead), the
 * device model runs them together (MPS: sharing the SMs; timeslice: by time slices). */
int64_t search_mix_stage_ns(struct search_mix *x, const uint32_t *op_start, const uint32_t *op_len)
{
    struct sim_gpu *g = x->g;
    int64_t t0 = g->now;
    int ctx[SEARCH_MAX_MODELS];
    size_t left = 0;
    x->sims++;
    for (size_t m = 0; m < x->n; m++) {
        ctx[m] = -1;
        if (!op_len[m])
            continue;
        ctx[m] = sim_gpu_ctx_add(g, x->owner[m]);
        int stream = sim_gpu_stream_add(g, x->owner[m], ctx[m], 0);
        if (ctx[m] < 0 || stream < 0)
            return INF;
        for (uint32_t j = op_start[m]; j < op_start[m] + op_len[m]; j++) {
            const struct sim_request_op *ro = &x->m[m].req.ops[j];
            int op = sim_gpu_op_alloc(g, x->owner[m]);
            if (op < 0)
                return INF;
            struct sim_op *o = &g->ops[op];
            uint64_t blocks = sim_request_op_blocks(ro), threads = sim_request_op_threads(ro);
            o->kind = SIM_OP_KERNEL;
            o->flags = ro->fp16 ? SIM_OPF_FP16 : 0;
            o->ctx = (int16_t)ctx[m];
            o->stream = stream;
            o->blocks = blocks ? (blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks) : 1;
            o->threads = threads ? (uint32_t)threads : 1;
            o->smem = ro->smem;
            o->flops = ro->flops;
            o->bytes = ro->bytes;
            sim_gpu_submit(g, op, t0);
            left++;
        }
    }
    int64_t end = t0;
    while (left) {
        int64_t t = sim_gpu_next_event(g);
        if (t == INT64_MAX)
            return INF;
        sim_gpu_advance(g, t);
        for (size_t m = 0; m < x->n; m++) {
            int op;
            while ((op = sim_gpu_reap(g, x->owner[m])) != SIM_NONE) {
                end = g->ops[op].end_ns > end ? g->ops[op].end_ns : end;
                sim_gpu_op_free(g, op);
                left--;
            }
        }
    }
    for (size_t m = 0; m < x->n; m++)
        if (ctx[m] >= 0)
            sim_gpu_ctx_remove(g, ctx[m], end);
    /* the next stage starts on an idle device, as a fresh one: its first context pays no
     * switch (the model charges none before its first switch) */
    g->stats.ctx_switches = 0;
    g->rr_next = 0;
    return end - t0;
}

static uint64_t key_hash(const uint16_t *k, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < 2 * n; i++) {
        h ^= k[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int cache_grow(struct search_mix *x)
{
    size_t cap = x->cache_cap ? x->cache_cap * 2 : 4096;
    struct cache_entry *e = calloc(cap, sizeof *e);
    if (!e)
        return -ENOMEM;
    for (size_t i = 0; i < x->cache_cap; i++) {
        struct cache_entry *o = &x->cache[i];
        if (!o->used)
            continue;
        size_t j = key_hash(o->key, x->n) & (cap - 1);
        while (e[j].used)
            j = (j + 1) & (cap - 1);
        e[j] = *o;
    }
    free(x->cache);
    x->cache = e;
    x->cache_cap = cap;
    return 0;
}

/* A stage in operators, from the cache or simulated once. */
static int64_t stage_ops_cached(struct search_mix *x, const uint32_t *op_start,
                                const uint32_t *op_len)
{
    uint16_t key[2 * SEARCH_MAX_MODELS] = {0};
    for (size_t m = 0; m < x->n; m++) {
        key[2 * m] = (uint16_t)(op_len[m] ? op_start[m] : 0);
        key[2 * m + 1] = (uint16_t)op_len[m];
    }
    if (2 * (x->cache_n + 1) > x->cache_cap && cache_grow(x) < 0)
        return search_mix_stage_ns(x, op_start, op_len);
    size_t j = key_hash(key, x->n) & (x->cache_cap - 1);
    while (x->cache[j].used) {
        if (memcmp(x->cache[j].key, key, sizeof key) == 0) {
            x->hits++;
            return x->cache[j].ns;
        }
        j = (j + 1) & (x->cache_cap - 1);
    }
    int64_t ns = search_mix_stage_ns(x, op_start, op_len);
    x->cache[j].used = 1;
    memcpy(x->cache[j].key, key, sizeof key);
    x->cache[j].ns = ns;
    x->cache_n++;
    return ns;
}

static int64_t mix_unit_cost(void *arg, const uint32_t *start, const uint32_t *len)
{
    struct search_mix *x = arg;
    uint32_t os[SEARCH_MAX_MODELS] = {0}, ol[SEARCH_MAX_MODELS] = {0};
    for (size_t m = 0; m < x->n; m++) {
        const uint32_t *us = x->m[m].unit_start;
        os[m] = len[m] ? us[start[m]] : 0;
        ol[m] = len[m] ? us[start[m] + len[m]] - us[start[m]] : 0;
    }
    return stage_ops_cached(x, os, ol);
}

void search_mix_problem(struct search_mix *x, int64_t barrier_ns, struct search_problem *p)
{
    memset(p, 0, sizeof *p);
    p->n = x->n;
    p->cost = mix_unit_cost;
    p->arg = x;
    p->barrier_ns = barrier_ns;
    for (size_t m = 0; m < x->n; m++) {
        p->units[m] = x->m[m].nunits;
        p->solo[m] = x->m[m].unit_solo;
    }
}

/* Coarsens model M to at most UNITS units of about equal solo time (each operator alone on
 * the device), and measures each unit alone: the bound the DP prunes with. A stream's
 * kernels run one after another, so a run alone takes the sum of its units alone; rounding
 * to whole ns is allowed for by one ns per operator. */
static int make_units(struct search_mix *x, size_t mi, uint32_t units)
{
    struct search_model *m = &x->m[mi];
    size_t nops = m->req.nops;
    int64_t *solo = calloc(nops, sizeof *solo);
    m->unit_start = calloc(nops + 1, sizeof *m->unit_start);
    m->unit_solo = calloc(nops, sizeof *m->unit_solo);
    if (!solo || !m->unit_start || !m->unit_solo) {
        free(solo);
        return -ENOMEM;
    }
    uint32_t st[SEARCH_MAX_MODELS] = {0}, ln[SEARCH_MAX_MODELS] = {0};
    double total = 0;
    for (size_t j = 0; j < nops; j++) {
        st[mi] = (uint32_t)j;
        ln[mi] = 1;
        solo[j] = search_mix_stage_ns(x, st, ln);
        total += (double)solo[j];
    }
    uint32_t nu = 0;
    double before = 0;
    long last = -1;
    for (size_t j = 0; j < nops; j++) {
        long u = (long)j;
        if (units && units < nops && total > 0) {
            u = (long)floor((before + (double)solo[j] / 2) / total * units);
            u = u >= (long)units ? (long)units - 1 : u;
        }
        if (u != last) {
            m->unit_start[nu++] = (uint32_t)j;
            last = u;
        }
        before += (double)solo[j];
    }
    m->unit_start[nu] = (uint32_t)nops;
    m->nunits = nu;
    for (uint32_t k = 0; k < nu; k++) {
        st[mi] = m->unit_start[k];
        ln[mi] = m->unit_start[k + 1] - m->unit_start[k];
        m->unit_solo[k] = search_mix_stage_ns(x, st, ln) - (int64_t)ln[mi];
    }
    free(solo);
    return 0;
}

struct search_mix *search_mix_new(const struct possim_scenario *sc, uint32_t units, char *err,
                                  size_t errlen)
{
    if (sc->nclients > SEARCH_MAX_MODELS) {
        snprintf(err, errlen, "%s: %zu clients: a search takes at most %d models", sc->path,
                 sc->nclients, SEARCH_MAX_MODELS);
        return NULL;
    }
    struct search_mix *x = calloc(1, sizeof *x);
    if (!x || !(x->g = calloc(1, sizeof *x->g))) {
        free(x);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    x->dev = sc->dev;
    snprintf(x->device_name, sizeof x->device_name, "%.63s", sc->device_name);
    sim_gpu_init(x->g, &x->dev, 0);
    x->n = sc->nclients;
    for (size_t i = 0; i < x->n; i++) {
        const struct possim_client_spec *cs = &sc->clients[i];
        struct search_model *m = &x->m[i];
        struct sim_model model;
        char msg[512];
        if (sim_model_load(cs->model_path, cs->batch, &model, msg, sizeof msg) < 0) {
            snprintf(err, errlen, "%s", msg);
            goto fail;
        }
        snprintf(m->name, sizeof m->name, "%s", model.name);
        snprintf(m->client, sizeof m->client, "%s", cs->name);
        m->batch = cs->batch;
        int rc = sim_request_build(&model, &m->req);
        sim_model_free(&model);
        if (rc < 0 || m->req.nops == 0 || m->req.nops > POS_SCHEDULE_MAX_OPS ||
            m->req.nops > UINT16_MAX) {
            snprintf(err, errlen, "%s: model %s: %s", sc->path, m->name,
                     rc < 0 ? "out of memory" : "no operators, or too many for a schedule");
            goto fail;
        }
        if (!(m->keys = calloc(m->req.nops, sizeof *m->keys)))
            goto oom;
        for (size_t j = 0; j < m->req.nops; j++)
            m->keys[j] = sim_request_name_key(m->req.ops[j].name);
        x->owner[i] = sim_gpu_owner_add(x->g);
        if (x->owner[i] < 0)
            goto oom;
    }
    for (size_t i = 0; i < x->n; i++)
        if (make_units(x, i, units) < 0)
            goto oom;
    return x;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    search_mix_free(x);
    return NULL;
}

void search_mix_free(struct search_mix *x)
{
    if (!x)
        return;
    for (size_t i = 0; i < SEARCH_MAX_MODELS; i++) {
        sim_request_free(&x->m[i].req);
        free(x->m[i].keys);
        free(x->m[i].unit_start);
        free(x->m[i].unit_solo);
    }
    free(x->cache);
    free(x->g);
    free(x);
}

/* ---- schedules
 * ------------------------------------------------------------------------------------ */

int search_plan_schedule(const struct search_mix *x, const struct search_plan *plan,
                         struct pos_schedule *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->device, sizeof out->device, "%s", x->device_name);
    out->concurrent = x->dev.mode == SIM_MODE_MPS;
    out->sm_count = x->dev.num_sms;
    out->nmodels = x->n;
    out->nstages = plan->nstages;
    out->runs = calloc(plan->nstages * x->n + 1, sizeof *out->runs);
    out->stage_us = calloc(plan->nstages + 1, sizeof *out->stage_us);
    if (!out->runs || !out->stage_us)
        goto oom;
    for (size_t m = 0; m < x->n; m++) {
        struct pos_schedule_model *sm = &out->models[m];
        snprintf(sm->name, sizeof sm->name, "%s", x->m[m].name);
        sm->nops = (uint32_t)x->m[m].req.nops;
        if (!(sm->keys = calloc(sm->nops, sizeof *sm->keys)))
            goto oom;
        memcpy(sm->keys, x->m[m].keys, sm->nops * sizeof *sm->keys);
    }
    uint32_t u[SEARCH_MAX_MODELS] = {0};
    for (size_t k = 0; k < plan->nstages; k++) {
        for (size_t m = 0; m < x->n; m++) {
            uint32_t r = plan->runs[k * x->n + m];
            const uint32_t *us = x->m[m].unit_start;
            out->runs[k * x->n + m] = us[u[m] + r] - us[u[m]];
            u[m] += r;
        }
        out->stage_us[k] = (double)plan->cost_ns[k] / 1e3;
    }
    out->predicted_us = (double)plan->total_ns / 1e3;
    if (pos_schedule_finish(out) < 0) {
        pos_schedule_free(out);
        return -EINVAL;
    }
    return 0;
oom:
    pos_schedule_free(out);
    return -ENOMEM;
}

int search_write_schedule(FILE *f, const struct pos_schedule *s, const char *comment)
{
    fprintf(f, "pos-schedule %d\n", POS_SCHEDULE_VERSION);
    if (comment && *comment)
        fprintf(f, "# %s\n", comment);
    fprintf(f, "device %s %s %u\n", s->device, s->concurrent ? "mps" : "timeslice", s->sm_count);
    fprintf(f, "predicted_us %.3f\n", s->predicted_us);
    fprintf(f, "models %zu\n", s->nmodels);
    for (size_t m = 0; m < s->nmodels; m++) {
        fprintf(f, "model %s %u\n", s->models[m].name, s->models[m].nops);
        for (uint32_t j = 0; j < s->models[m].nops; j++)
            fprintf(f, "key %u %016" PRIx64 "\n", j, s->models[m].keys[j]);
    }
    fprintf(f, "stages %zu\n", s->nstages);
    fprintf(f, "# stage INDEX PREDICTED_US then the operators each model runs, in model order\n");
    for (size_t k = 0; k < s->nstages; k++) {
        fprintf(f, "stage %zu %.3f", k, s->stage_us[k]);
        for (size_t m = 0; m < s->nmodels; m++)
            fprintf(f, " %u", s->runs[k * s->nmodels + m]);
        fputc('\n', f);
    }
    fprintf(f, "end\n");
    return ferror(f) ? -EIO : 0;
}

/* ---- the command
 * ---------------------------------------------------------------------------------- */

static const char search_usage[] =
    "usage: possim search [options] SCENARIO\n"
    "Finds a static stage schedule for the mix of SCENARIO's clients (each a model at its\n"
    "batch) on its device, by sequential, greedy and dynamic programming over the models'\n"
    "progress, each stage's cost measured on the virtual-GPU model (docs/schedule.md).\n"
    "  -m, --method M       sequential, greedy, dp or all (default all)\n"
    "  --units N            coarsen each model to at most N units of about equal solo time\n"
    "                       (default 0: one unit per operator)\n"
    "  --max-run N          units one model runs in a stage of several models (default 4;\n"
    "                       0: no limit); stages of one model alone may be any length\n"
    "  --no-bound           no lower-bound pruning in the DP\n"
    "  --barrier-us US      cost added to every stage: the follower's barrier (default 0)\n"
    "  -w, --write FILE     write the best schedule found to FILE\n"
    "  -h, --help           this text\n"
    "Prints one row per method: stages, predicted time of one round of the mix, speedup over\n"
    "sequential, stage evaluations, simulations, DP states, pruned stages and CPU time.\n"
    "Exit status: 0, 1 when the search fails, 2 for a bad option or scenario.\n";

static int parse_u32_arg(const char *s, uint32_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > 1000000)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

enum { M_SEQ = 1, M_GREEDY = 2, M_DP = 4 };

struct method_row {
    const char *name;
    struct search_plan plan;
    double cpu_s;
    uint64_t sims, hits;
    int rc;
};

int possim_search_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"method", required_argument, NULL, 'm'},
        {"units", required_argument, NULL, 'u'},
        {"max-run", required_argument, NULL, 'r'},
        {"no-bound", no_argument, NULL, 'n'},
        {"barrier-us", required_argument, NULL, 'b'},
        {"write", required_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int methods = M_SEQ | M_GREEDY | M_DP, c;
    uint32_t units = 0;
    struct search_limits lim = {.max_run = 4, .bound = 1, .solo_any = 1};
    double barrier_us = 0;
    const char *write = NULL;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:w:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (strcmp(optarg, "sequential") == 0)
                methods = M_SEQ;
            else if (strcmp(optarg, "greedy") == 0)
                methods = M_SEQ | M_GREEDY;
            else if (strcmp(optarg, "dp") == 0)
                methods = M_SEQ | M_DP;
            else if (strcmp(optarg, "all") == 0)
                methods = M_SEQ | M_GREEDY | M_DP;
            else {
                fprintf(stderr, "possim search: bad -m '%s' (sequential, greedy, dp or all)\n",
                        optarg);
                return 2;
            }
            break;
        case 'u':
        case 'r':
            if (parse_u32_arg(optarg, c == 'u' ? &units : &lim.max_run) < 0) {
                fprintf(stderr, "possim search: bad %s '%s' (an integer >= 0)\n",
                        c == 'u' ? "--units" : "--max-run", optarg);
                return 2;
            }
            break;
        case 'n':
            lim.bound = 0;
            break;
        case 'b': {
            char *end;
            barrier_us = strtod(optarg, &end);
            if (*end || !isfinite(barrier_us) || barrier_us < 0 || barrier_us > 1e6) {
                fprintf(stderr, "possim search: bad --barrier-us '%s' (0..1e6)\n", optarg);
                return 2;
            }
            break;
        }
        case 'w':
            write = optarg;
            break;
        case 'h':
            fputs(search_usage, stdout);
            return 0;
        case ':':
            fprintf(stderr, "possim search: option '%s' needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "possim search: bad option '%s' (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "possim search: one scenario file, please (see --help)\n");
        return 2;
    }
    struct possim_scenario *sc = calloc(1, sizeof *sc);
    char err[1024];
    if (!sc) {
        fprintf(stderr, "possim search: out of memory\n");
        return 1;
    }
    if (possim_scenario_load(argv[optind], sc, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        free(sc);
        return 2;
    }
    struct method_row rows[3] = {{.name = "sequential"}, {.name = "greedy"}, {.name = "dp"}};
    int64_t barrier_ns = (int64_t)llround(barrier_us * 1e3);
    int status = 0;
    struct search_mix *keep = NULL; /* the mix of the best plan, to write it */
    int best = -1;
    for (int i = 0; i < 3; i++) {
        if (!(methods & (1 << i)))
            continue;
        /* each method on a fresh mix and cache: its CPU time is its own */
        double t0 = possim_cpu_seconds();
        struct search_mix *x = search_mix_new(sc, i == 0 ? 0 : units, err, sizeof err);
        if (!x) {
            fprintf(stderr, "possim search: %s\n", err);
            status = 1;
            break;
        }
        struct search_problem p;
        search_mix_problem(x, barrier_ns, &p);
        struct method_row *row = &rows[i];
        row->rc = i == 0   ? search_sequential(&p, &row->plan)
                  : i == 1 ? search_greedy(&p, &lim, &row->plan)
                           : search_dp(&p, &lim, &row->plan);
        row->cpu_s = possim_cpu_seconds() - t0;
        search_mix_counts(x, &row->sims, &row->hits);
        if (row->rc < 0) {
            fprintf(stderr, "possim search: %s: %s\n", row->name,
                    row->rc == -E2BIG ? "too many progress states: coarsen with --units"
                                      : strerror(-row->rc));
            search_mix_free(x);
            status = 1;
            continue;
        }
        if (best < 0 || row->plan.total_ns < rows[best].plan.total_ns) {
            best = i;
            search_mix_free(keep);
            keep = x;
        } else {
            search_mix_free(x);
        }
    }
    const char *mode = sc->dev.mode == SIM_MODE_MPS ? "mps" : "timeslice";
    printf("# possim search %s: device %s %s, %zu models (", sc->path, sc->device_name, mode,
           sc->nclients);
    for (size_t i = 0; i < sc->nclients; i++)
        printf("%s%s", i ? " " : "", sc->clients[i].model);
    printf("), units %u, max_run %u, bound %s, barrier %.1f us (simulated, virtual time)\n", units,
           lim.max_run, lim.bound ? "on" : "off", barrier_us);
    if (sc->dev.mode != SIM_MODE_MPS)
        printf("# timeslice: contexts never overlap, so a stage of several models only "
               "serialises them (and pays switches)\n");
    printf("# %-10s %7s %12s %8s %9s %9s %9s %9s %7s %9s\n", "method", "stages", "round_us",
           "speedup", "evals", "sims", "states", "pruned", "misses", "cpu_s");
    double seq = rows[0].plan.total_ns > 0 ? (double)rows[0].plan.total_ns : NAN;
    for (int i = 0; i < 3; i++) {
        const struct method_row *r = &rows[i];
        if (!(methods & (1 << i)) || r->rc < 0 || !r->plan.runs)
            continue;
        printf("  %-10s %7zu %12.3f %8.3f %9" PRIu64 " %9" PRIu64 " %9" PRIu64 " %9" PRIu64
               " %7" PRIu64 " %9.3f\n",
               r->name, r->plan.nstages, (double)r->plan.total_ns / 1e3,
               seq / (double)r->plan.total_ns, r->plan.evals, r->sims, r->plan.states,
               r->plan.pruned, r->plan.bound_misses, r->cpu_s);
    }
    if (write && keep && best >= 0) {
        struct pos_schedule s;
        int rc = search_plan_schedule(keep, &rows[best].plan, &s);
        FILE *f = rc < 0 ? NULL : fopen(write, "w");
        char comment[512];
        snprintf(
            comment, sizeof comment,
            "possim search %.300s: method %s, units %u, max_run %u, barrier %.1f us (simulated)",
            sc->path, rows[best].name, units, lim.max_run, barrier_us);
        if (!f || search_write_schedule(f, &s, comment) < 0 || fclose(f) != 0) {
            fprintf(stderr, "possim search: cannot write %s: %s\n", write, strerror(errno));
            status = 1;
        } else {
            printf("# wrote %s: %s, %zu stages, %.3f us per round\n", write, rows[best].name,
                   s.nstages, s.predicted_us);
        }
        pos_schedule_free(&s);
    }
    for (int i = 0; i < 3; i++)
        search_plan_free(&rows[i].plan);
    search_mix_free(keep);
    free(sc);
    return status ? status : (fflush(stdout) == 0 ? 0 : 1);
}
