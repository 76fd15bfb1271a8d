/* pos: operator-level scheduling across processes, from online kernel profiles.
 *
 * Ranks. A client outranks another of its device when its class is more important (a lower
 * priority number); within one class, between two clients that both have an SLO and a
 * request under way, the one with the earlier latest start time (CoMPI's rt = arrival +
 * 0.8 x SLO - remaining, the remaining device time of its request predicted from its kernel
 * profiles and its past requests) outranks the other. Clients without an SLO rank by class.
 *
 * Decisions, per client C:
 *   - nobody outranks C: it launches freely (FREE);
 *   - clients outrank C but none has work (queued, in flight and not stalled, or idle less
 *     than idle_grace): a window of about window_us of device time (or its class's cap), so
 *     that a request arriving above finds little ahead of it: work conservation;
 *   - a client above has work, on a device where processes run at once (MPS): C is released
 *     beside it while it fits: the SM demand of what the clients above run and will run next
 *     (the largest of their next operators) plus what C has in flight and would add stays
 *     within the device, and no kernel above that is in flight or next has shown a co-run
 *     slowdown beyond the budget (corun_budget: 1.05 = 5%). C's window holds as many of its
 *     operators as fit beside them (its largest next kernel's SM demand), at most window_us of
 *     device time; with nothing fitting it is held;
 *   - a client above has work, on a time-sliced device (no MPS: contexts of different
 *     processes never overlap, so nothing can be co-located): C is held, and the ranks order
 *     whole requests back to back by slack;
 *   - held clients keep the starvation guard (min_share of every guard period);
 *   - a grant is never taken back, and grants are prefixes of launch order (the core's rules).
 * Pure code: the same object runs in posd and possim. docs/policy.md documents it. */
#include <math.h>
#include <stdlib.h>

#include "pos/client_shm.h"
#include "sched/policy/policy.h"
#include "sched/profile.h"

#define POS_MAX_TRACKED 256
#define LOOKAHEAD       16  /* next operators of a client looked at for their SM demand */
#define CORUN_BUDGET    1.05
#define CORUN_EVIDENCE  8   /* co-run samples before a kernel's slowdown is believed */
#define SLO_FRACTION    0.8 /* CoMPI: start by arrival + 0.8 x SLO - remaining */

struct pos_track {
    uint32_t id;
    int used;
    uint64_t req_id;  /* the request seen last */
    uint64_t req_ops; /* its operators so far */
    double ops_avg;   /* operators per request, averaged over ended requests */
};

struct pos_state {
    const struct pos_sched_device *dev;
    struct pos_track t[POS_MAX_TRACKED];
};

static int pos_init(void **state, const struct pos_sched_device *dev)
{
    struct pos_state *s = calloc(1, sizeof *s);
    if (!s)
        return -12; /* -ENOMEM */
    s->dev = dev;
    *state = s;
    return 0;
}

static void pos_fini(void *state)
{
    free(state);
}

static int has_work(const struct pos_sched_client *c, const struct pos_sched_view *v)
{
    return pos_sched_queued(c) > 0 || (pos_sched_inflight(c) > 0 && !c->stalled) ||
           (c->last_done_ns && v->now - c->last_done_ns < v->idle_grace_ns);
}

static struct pos_track *track(struct pos_state *s, const struct pos_sched_client *c)
{
    struct pos_track *t = &s->t[c->slot & (POS_MAX_TRACKED - 1)];
    if (!t->used || t->id != c->id) {
        t->used = 1;
        t->id = c->id;
        t->req_id = 0;
        t->req_ops = 0;
        t->ops_avg = 0;
    }
    if (c->request.id != t->req_id) { /* a new request: the last one ended */
        if (t->req_id && t->req_ops)
            t->ops_avg = t->ops_avg > 0 ? t->ops_avg + ((double)t->req_ops - t->ops_avg) / 8
                                        : (double)t->req_ops;
        t->req_id = c->request.id;
    }
    t->req_ops = c->request.ops;
    return t;
}

static const struct pos_kprof *profile_of(const struct pos_sched_view *v,
                                          const struct pos_sched_client *c,
                                          const struct pos_sched_op *op)
{
    if (!v->profiles || !op->key)
        return NULL;
    return pos_prof_find(v->profiles, c->uid, op->key, op->grid, op->block);
}

/* Predicted device time of OP of C: its profile, else the client's operator estimate. */
static double op_time(const struct pos_sched_view *v, const struct pos_sched_client *c,
                      const struct pos_sched_op *op)
{
    const struct pos_kprof *p = profile_of(v, c, op);
    if (p && p->n)
        return p->mean_ns;
    return c->op_ns;
}

/* Device time C's current request still needs: what it has queued and in flight, and the
 * operators its requests usually have beyond those launched so far. */
static double remaining_ns(const struct pos_sched_view *v, const struct pos_sched_client *c,
                           const struct pos_track *t)
{
    double ns = 0;
    for (uint64_t seq = c->completed_upto + 1; seq <= c->submitted; seq++) {
        const struct pos_sched_op *op = pos_sched_op_at(c, seq);
        if (op && !(op->state & POS_SCHED_OP_DONE))
            ns += op_time(v, c, op);
    }
    if (t->ops_avg > (double)c->request.ops)
        ns += (t->ops_avg - (double)c->request.ops) * c->op_ns;
    return ns;
}

/* CoMPI's latest start time of C's current request; +inf without an SLO or a request. */
static double latest_start(const struct pos_sched_view *v, const struct pos_sched_client *c,
                           const struct pos_track *t)
{
    if (c->slo_ms <= 0 || !c->request.active)
        return INFINITY;
    return (double)c->request.start_ns + SLO_FRACTION * c->slo_ms * 1e6 - remaining_ns(v, c, t);
}

static int outranks(const struct pos_sched_client *o, double rt_o, const struct pos_sched_client *c,
                    double rt_c)
{
    if (o->priority != c->priority)
        return o->priority < c->priority;
    return isfinite(rt_o) && isfinite(rt_c) && rt_o < rt_c;
}

static double op_demand(const struct pos_sched_view *v, const struct pos_sched_op *op)
{
    return pos_kprof_sm_demand(v->device, op->grid, op->block, op->smem);
}

/* What client O above occupies and will occupy next: the largest SM demand among its
 * operators in flight and its next queued ones (a stream runs them one after another), and
 * whether one of them has shown a co-run slowdown beyond the budget. */
static double demand_above(const struct pos_sched_view *v, const struct pos_sched_client *o,
                           int *contended)
{
    double d = 0;
    uint64_t looked = 0;
    for (uint64_t seq = o->completed_upto + 1; seq <= o->submitted && looked < LOOKAHEAD;
         seq++, looked++) {
        const struct pos_sched_op *op = pos_sched_op_at(o, seq);
        if (!op || (op->state & POS_SCHED_OP_DONE))
            continue;
        double x = op_demand(v, op);
        d = x > d ? x : d;
        const struct pos_kprof *p = profile_of(v, o, op);
        if (p && p->co_n >= CORUN_EVIDENCE && p->co_ratio > CORUN_BUDGET)
            *contended = 1;
    }
    if (looked == 0) /* between launches: assume its largest kernel is next */
        d = 1;
    return d;
}

/* C's own: the SM demand of its operators in flight, and the largest of its next ones. */
static void demand_own(const struct pos_sched_view *v, const struct pos_sched_client *c,
                       double *inflight, double *next_max)
{
    *inflight = 0;
    *next_max = 0;
    for (uint64_t seq = c->completed_upto + 1; seq <= c->submitted; seq++) {
        const struct pos_sched_op *op = pos_sched_op_at(c, seq);
        if (!op || (op->state & POS_SCHED_OP_DONE))
            continue;
        if (op->state & POS_SCHED_OP_RELEASED)
            *inflight += op_demand(v, op);
    }
    for (uint64_t i = 0; i < LOOKAHEAD; i++) {
        const struct pos_sched_op *op = pos_sched_queued_op(c, i);
        if (!op)
            break;
        double x = op_demand(v, op);
        *next_max = x > *next_max ? x : *next_max;
    }
}

static uint64_t umax(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static int64_t pos_decide(void *state, struct pos_sched_view *v)
{
    struct pos_state *s = state;
    int64_t next = INT64_MAX;
    double rt[v->nclients ? v->nclients : 1];
    for (size_t i = 0; i < v->nclients; i++)
        rt[i] = latest_start(v, &v->clients[i], track(s, &v->clients[i]));
    int concurrent = v->device && v->device->concurrent;
    for (size_t i = 0; i < v->nclients; i++) {
        struct pos_sched_client *c = &v->clients[i];
        int outranked = 0, busy_above = 0, contended = 0;
        double above = 0;
        for (size_t k = 0; k < v->nclients; k++) {
            const struct pos_sched_client *o = &v->clients[k];
            if (k == i || o->device != c->device || !outranks(o, rt[k], c, rt[i]))
                continue;
            outranked = 1;
            if (has_work(o, v)) {
                busy_above = 1;
                above += demand_above(v, o, &contended);
            }
            int64_t grace_end = o->last_done_ns + v->idle_grace_ns;
            if (o->last_done_ns && !pos_sched_queued(o) && !pos_sched_inflight(o) &&
                grace_end > v->now && grace_end < next)
                next = grace_end;
        }
        c->held = 0;
        c->window = 0;
        c->mode = POS_GRANT_WINDOW;
        uint64_t cap = c->max_inflight ? c->max_inflight : pos_sched_ops_in(c, v->window_ns, v->credits);
        if (!outranked) {
            c->mode = POS_GRANT_FREE;
            c->new_granted = umax(c->granted, c->submitted);
            continue;
        }
        if (!busy_above) {
            c->new_granted = pos_sched_window_grant(c, cap);
            c->window = (uint32_t)cap;
            continue;
        }
        /* beside busy clients above: as many operators as fit in the SMs they leave */
        uint64_t fit = 0;
        if (concurrent && !contended && above < 1) {
            double mine, next_max;
            demand_own(v, c, &mine, &next_max);
            double room = 1.0 - above - mine;
            if (next_max <= 0)
                next_max = 1e-3;
            if (room >= next_max) {
                double n = floor(room / next_max) + (double)pos_sched_inflight(c);
                fit = n < (double)cap ? (uint64_t)n : cap;
            }
        }
        if (fit > pos_sched_inflight(c)) {
            c->new_granted = pos_sched_window_grant(c, fit);
            continue;
        }
        /* held, but for the starvation guard */
        double period = (double)v->guard_period_ns;
        int64_t guard_at = v->period_start + (int64_t)((1.0 - c->min_share) * period);
        int starving = pos_sched_queued(c) > 0 && c->min_share > 0 && v->now >= guard_at &&
                       (double)c->served_ns < c->min_share * period;
        if (starving) {
            c->new_granted = pos_sched_window_grant(c, c->max_inflight ? c->max_inflight : 1);
        } else {
            c->new_granted = c->granted;
            c->held = 1;
            if (pos_sched_queued(c) > 0 && c->min_share > 0 && guard_at > v->now &&
                guard_at < next)
                next = guard_at;
        }
    }
    return next;
}

const struct pos_policy_ops pos_policy_pos = {
    .name = "pos",
    .summary = "co-locates lower classes beside busy higher ones where their kernels fit in the "
               "SMs left (MPS), orders SLO clients by latest start time, work-conserving, with "
               "the starvation guard",
    .init = pos_init,
    .fini = pos_fini,
    .decide = pos_decide,
};
