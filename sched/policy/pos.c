/* pos: operator-level scheduling across processes, from online kernel profiles.
 *
 * Ranks. A client outranks another of its device when its class is more important (a lower
 * priority number); within one class, between two clients that both have an SLO and a
 * request under way, the one with the earlier latest start time (CoMPI's rt = arrival +
 * 0.8 x SLO - remaining, the remaining device time of its request predicted from its kernel
 * profiles and its past requests) outranks the other. Clients without an SLO rank by class.
 *
 * Decisions, per client C:
 *   - nobody outranks C: it launches freely (FREE), unless C has an SLO and another client of
 *     its class has one too: then a window of about window_us of work, so that the other's
 *     next request, should it be more urgent, does not queue behind all of C's kernels;
 *   - clients outrank C but none has work (queued, in flight and not stalled, or idle less
 *     than idle_grace): a window of about window_us of device time (or its class's cap), so
 *     that a request arriving above finds little ahead of it: work conservation; under MPS
 *     more where it fits beside their largest kernels, unless a client above showed a
 *     co-run slowdown beyond the budget when it last had kernels (its next request would
 *     start beside that work and slow the same way);
 *   - a client above has work, on a device where processes run at once (MPS): C is released
 *     beside it while it fits: the SM demand of what the clients above run and will run next
 *     (the largest of their next operators) plus what C has in flight and would add, and what
 *     the clients that do not outrank C (its peers, those below) have in flight, stays
 *     within the device (its parameter corun_room times its SMs, default 1), and no kernel
 *     above that is in flight or next has shown a co-run slowdown beyond the budget (its
 *     parameter corun_budget, default 1.20: 20%, chosen from bench/pos.sh). C's window holds
 *     as many of its operators as fit beside them (its largest next kernel's SM demand), at
 *     most window_us of device time; with nothing fitting it is held. While C's own kernels
 *     in flight or next are not yet learnt (a client that has just come), one at a time;
 *   - a client above has work, on a time-sliced device (no MPS: contexts of different
 *     processes never overlap, so nothing can be co-located): C is held, and the ranks order
 *     whole requests back to back by slack;
 *   - the SLO guard: while more than about 2% of an SLO client's recent requests took posd
 *     more than 0.8 x its SLO (first launch to completion), nothing runs beside it and the
 *     clients below it get no wider window than window_us while it is idle, until the share
 *     falls under 1%: co-location is tried again where it did not cost the SLO, whatever
 *     the profiles predicted (on a loaded host, or with profiles learnt from coarse polls,
 *     they can be wrong);
 *   - held clients keep the starvation guard (min_share of every guard period);
 *   - a grant is never taken back, and grants are prefixes of launch order (the core's rules).
 * With a searched stage schedule loaded (its parameter schedule) and exactly its mix running, pos
 * follows it (sched/schedule.c) and returns to these online decisions when the mix changes.
 * Pure code: the same object runs in posd and possim. docs/policy.md documents it. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "pos/client_shm.h"
#include "sched/policy/pos.h"
#include "sched/profile.h"
#include "sched/schedule.h"

#define POS_MAX_TRACKED 256
#define LOOKAHEAD       16  /* next operators of a client looked at for their SM demand */
#define CORUN_EVIDENCE  8   /* co-run samples before a kernel's slowdown is believed */
#define SLO_FRACTION    0.8 /* CoMPI: start by arrival + 0.8 x SLO - remaining */
/* The SLO guard: an SLO client's requests that take posd more than SLO_FRACTION of the SLO
 * (first launch to completion) are late; their share, a moving average over about the last
 * 1/TIGHT_WEIGHT requests, past TIGHT_ON guards the client (nothing beside it, no wider
 * window below it while it is idle) until it falls under TIGHT_OFF. */
#define TIGHT_WEIGHT   (1.0 / 32)
#define TIGHT_ON       0.02
#define TIGHT_OFF      0.01
#define SCHED_MAX_VIEW 256 /* clients of one view (the core's SCHED_MAX_CLIENTS) */

struct pos_track {
    uint32_t id;
    int used;
    uint64_t req_id;   /* the request seen last */
    uint64_t req_ops;  /* its operators so far */
    double ops_avg;    /* operators per request, averaged over ended requests */
    double max_demand; /* the largest SM demand of its kernels seen so far */
    uint64_t ended;    /* its requests ended, when last looked at */
    double tight;      /* SLO clients: moving share of its requests that ended late */
    int guarded;       /* SLO clients: its guard is on (nothing beside it) */
    int contended; /* its kernels in flight or next slowed beside others, when it last had some */
};

/* What one decision works out once per client. */
struct pos_pre {
    double rt;         /* latest start time (ns); +inf without an SLO or a request */
    double demand;     /* largest SM demand of its operators in flight and next */
    double max_demand; /* ... of any kernel it has launched */
    double mine;       /* SM demand of its operators in flight */
    double next_max;   /* largest SM demand of its next queued operators */
    int contended;     /* one of its kernels in flight or next slows down beside others */
    int was_contended; /* ... or did when it last had any (pos_track) */
    int unlearnt;      /* one of them has no solo profile yet */
    int guarded;       /* its SLO guard is on (pos_track) */
    int work;          /* has_work */
};

/* Its parameters (posd.conf's [policy], possim's [sched]; docs/policy.md). */
enum { P_CORUN_BUDGET, P_CORUN_ROOM, P_SCHEDULE };
static const struct pos_policy_param pos_params[] = {
    [P_CORUN_BUDGET] = POS_PARAM_CORUN_BUDGET,
    [P_CORUN_ROOM] = POS_PARAM_CORUN_ROOM,
    [P_SCHEDULE] = POS_PARAM_SCHEDULE_FILE,
    {.name = NULL},
};

struct pos_state {
    double corun_budget;                 /* pos_params' */
    double corun_room;                   /* ... */
    const struct pos_schedule *schedule; /* ... (NULL: none) */
    struct pos_schedule_state st;        /* following the schedule, when it applies */
    char note[160];
    struct pos_track t[POS_MAX_TRACKED];
    struct pos_pre pre[SCHED_MAX_VIEW];
};

int pos_state_new(struct pos_state **out, const struct pos_policy_args *args)
{
    struct pos_state *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->corun_budget = pos_policy_number(args, &pos_params[P_CORUN_BUDGET]);
    s->corun_room = pos_policy_number(args, &pos_params[P_CORUN_ROOM]);
    s->schedule = pos_policy_schedule(args, &pos_params[P_SCHEDULE]);
    pos_schedule_state_init(&s->st, NULL);
    *out = s;
    return 0;
}

void pos_state_free(struct pos_state *s)
{
    free(s);
}

static int pos_init(void **state, const struct pos_sched_device *dev,
                    const struct pos_policy_args *args)
{
    (void)dev; /* the view carries the device */
    return pos_state_new((struct pos_state **)state, args);
}

static void pos_fini(void *state)
{
    pos_state_free(state);
}

static struct pos_track *track(struct pos_state *s, const struct pos_sched_client *c)
{
    struct pos_track *t = &s->t[(unsigned)c->slot & (POS_MAX_TRACKED - 1)];
    if (!t->used || t->id != c->id) {
        *t = (struct pos_track){.used = 1, .id = c->id};
    }
    if (c->request.id != t->req_id) { /* a new request: the last one ended */
        if (t->req_id && t->req_ops)
            t->ops_avg = t->ops_avg > 0 ? t->ops_avg + ((double)t->req_ops - t->ops_avg) / 8
                                        : (double)t->req_ops;
        t->req_id = c->request.id;
    }
    t->req_ops = c->request.ops;
    if (c->request.ended != t->ended) { /* a request ended since: was it late? */
        t->ended = c->request.ended;
        int late = c->slo_ms > 0 && (double)c->request.last_ns > SLO_FRACTION * c->slo_ms * 1e6;
        t->tight += ((double)late - t->tight) * TIGHT_WEIGHT;
        t->guarded = t->guarded ? t->tight > TIGHT_OFF : t->tight > TIGHT_ON;
    }
    return t;
}

static double op_demand(const struct pos_sched_view *v, const struct pos_sched_op *op)
{
    return pos_kprof_sm_demand(v->device, op->grid, op->block, op->smem);
}

/* One pass over C's operators not known complete: the remaining device time of its request
 * (profiles, else its operator estimate; plus the operators its requests usually have beyond
 * those launched so far), their SM demands, and what their profiles say. */
static void prepare(const struct pos_state *s, const struct pos_sched_view *v,
                    struct pos_sched_client *c, struct pos_track *t, struct pos_pre *p)
{
    *p = (struct pos_pre){.work = pos_sched_has_work(c, v), .guarded = t->guarded};
    double remaining = 0;
    uint64_t looked = 0, queued = 0;
    for (uint64_t seq = c->completed_upto + 1; seq <= c->submitted; seq++) {
        const struct pos_sched_op *op = pos_sched_op_at(c, seq);
        if (!op || (op->state & POS_SCHED_OP_DONE))
            continue;
        const struct pos_kprof *pr =
            v->profiles && op->key
                ? pos_prof_find(v->profiles, c->uid, op->key, op->grid, op->block)
                : NULL;
        remaining += pr && pr->n ? pr->mean_ns : c->op_ns;
        if (looked >= LOOKAHEAD && queued >= LOOKAHEAD)
            continue; /* the time still counts; the shapes only of the next ones */
        double d = op_demand(v, op);
        int released = (op->state & POS_SCHED_OP_RELEASED) != 0;
        if (released)
            p->mine += d;
        else if (queued++ < LOOKAHEAD && d > p->next_max)
            p->next_max = d;
        if (looked++ < LOOKAHEAD) {
            p->demand = d > p->demand ? d : p->demand;
            if (pr && pr->co_n >= CORUN_EVIDENCE && pr->co_ratio > s->corun_budget)
                p->contended = 1;
            if (v->profiles && (!pr || (pr->n < CORUN_EVIDENCE && pr->tries < 4 * CORUN_EVIDENCE)))
                p->unlearnt = 1;
        }
    }
    if (p->demand > t->max_demand)
        t->max_demand = p->demand;
    if (looked)
        t->contended = p->contended;
    p->was_contended = t->contended;
    p->max_demand = t->max_demand > 0 ? t->max_demand : 1;
    if (looked == 0) /* between launches: its largest kernel may come next */
        p->demand = p->max_demand;
    if (t->ops_avg > (double)c->request.ops)
        remaining += (t->ops_avg - (double)c->request.ops) * c->op_ns;
    p->rt = c->slo_ms > 0 && c->request.active
                ? (double)c->request.start_ns + SLO_FRACTION * c->slo_ms * 1e6 - remaining
                : INFINITY;
}

/* Whether O outranks C: its class; within a class, between SLO clients with requests under
 * way, the earlier latest start time; on a time-sliced device, between clients of a class
 * that both have a request under way, the one whose request started first (whole requests
 * back to back: fewer context switches). */
static int outranks(const struct pos_sched_client *o, const struct pos_pre *po,
                    const struct pos_sched_client *c, const struct pos_pre *pc, int concurrent)
{
    if (o->priority != c->priority)
        return o->priority < c->priority;
    if (isfinite(po->rt) && isfinite(pc->rt))
        return po->rt < pc->rt;
    if (!concurrent && o->request.active && c->request.active && po->work && pc->work &&
        isinf(po->rt) && isinf(pc->rt))
        return o->request.start_ns < c->request.start_ns ||
               (o->request.start_ns == c->request.start_ns && o->id < c->id);
    return 0;
}

/* The window of C beside clients above occupying ABOVE of ROOM (the device's SMs, 1, or
 * corun_room times them beside busy clients above): as many of its operators as fit in the
 * rest (what it has in flight counts), at most CAP; 0 when none fits. */
static uint64_t fit_beside(const struct pos_sched_client *c, const struct pos_pre *p, double room,
                           double above, uint64_t cap)
{
    room -= above + p->mine;
    double unit = p->next_max > 0 ? p->next_max : 1e-3;
    if (room < unit)
        return 0;
    double n = floor(room / unit) + (double)pos_sched_inflight(c);
    return n < (double)cap ? (uint64_t)n : cap;
}

static uint64_t umax(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

int64_t pos_decide_with(struct pos_state *s, struct pos_sched_view *v, pos_choose_fn choose,
                        void *arg)
{
    /* exactly the mix of a searched schedule: follow it (sched/schedule.c) */
    if (s->schedule && pos_schedule_decide(&s->st, s->schedule, v))
        return s->st.next_ns;
    int64_t next = INT64_MAX;
    size_t n = v->nclients < SCHED_MAX_VIEW ? v->nclients : SCHED_MAX_VIEW;
    for (size_t i = 0; i < n; i++)
        prepare(s, v, &v->clients[i], track(s, &v->clients[i]), &s->pre[i]);
    int concurrent = v->device && v->device->concurrent;
    for (size_t i = 0; i < n; i++) {
        struct pos_sched_client *c = &v->clients[i];
        const struct pos_pre *pc = &s->pre[i];
        int outranked = 0, busy_above = 0, contended = 0, rivals = 0, plain = 0, above_n = 0;
        double above = 0, above_max = 0, beside = 0, slack = INFINITY, runq_ms = 0;
        for (size_t k = 0; k < n; k++) {
            const struct pos_sched_client *o = &v->clients[k];
            const struct pos_pre *po = &s->pre[k];
            if (k == i || o->device != c->device)
                continue;
            rivals |= o->priority == c->priority && o->slo_ms > 0;
            if (!outranks(o, po, c, pc, concurrent)) {
                beside += po->mine; /* SMs its peers and the clients below it hold already */
                continue;
            }
            outranked = 1;
            above_n++;
            above_max += po->max_demand;
            if (choose && (double)o->runq_delay_ns / 1e6 > runq_ms) /* for learned's state */
                runq_ms = (double)o->runq_delay_ns / 1e6;
            plain |= po->guarded || po->was_contended; /* the plain window below it */
            if (po->work) {
                busy_above = 1;
                above += po->demand;
                /* a kernel above that slows down beside others, or one not yet measured
                 * alone (so that its solo profile can be learnt first), runs alone */
                contended |= po->contended || po->unlearnt || po->guarded;
                double sl = choose && isfinite(po->rt)
                                ? (po->rt - (double)v->now) / (o->slo_ms * 1e6)
                                : INFINITY; /* learned's state */
                if (sl < slack)
                    slack = sl;
            }
            next = pos_sched_grace_next(o, v, next);
        }
        c->held = 0;
        c->window = 0;
        c->mode = POS_GRANT_WINDOW;
        uint64_t cap =
            c->max_inflight ? c->max_inflight : pos_sched_ops_in(c, v->window_ns, v->credits);
        if (!outranked && !(rivals && c->slo_ms > 0)) {
            c->mode = POS_GRANT_FREE;
            c->new_granted = umax(c->granted, c->submitted);
            continue;
        }
        if (!outranked) {
            /* first now, but a client of its class with an SLO may need to go first at its
             * next request: a window, so that its request does not queue behind all of this
             * one's kernels */
            c->new_granted = pos_sched_window_grant(c, cap);
            c->window = (uint32_t)cap;
            continue;
        }
        if (!busy_above) {
            /* the clients above are idle: about window_us of work, so that a request arriving
             * above finds little ahead of it; under MPS, more where it fits beside the
             * largest kernels they run */
            if (concurrent && !c->max_inflight && !plain) {
                uint64_t fit = fit_beside(c, pc, 1.0, above_max + beside, v->credits);
                cap = fit > cap ? fit : cap;
            }
        }
        uint64_t fit = 0;
        if (busy_above) {
            fit = concurrent && !contended ? fit_beside(c, pc, s->corun_room, above + beside, cap)
                                           : 0;
            /* its own kernels not yet learnt (a client that just came): nothing says how they
             * slow the kernels above, so beside busy clients above it runs one operator at a
             * time where that one fits, and learns (its tries count) rather than waiting for
             * the clients above to be idle, which a closed loop never is */
            if (pc->unlearnt && fit > 1)
                fit = 1;
        }
        if (choose && pos_sched_queued(c) > 0) {
            /* another policy's choice where pos made its own (learned) */
            struct pos_choice ch = {
                .c = c,
                .busy_above = busy_above,
                .concurrent = concurrent,
                .contended = contended,
                .plain = plain,
                .unlearnt = pc->unlearnt,
                .has_slo = c->slo_ms > 0,
                .above_n = above_n,
                .above = above,
                .above_max = above_max,
                .beside = beside,
                .mine = pc->mine,
                .next_max = pc->next_max,
                .slack = slack,
                .above_runq_ms = runq_ms,
                .inflight = pos_sched_inflight(c),
                .queued = pos_sched_queued(c),
                .limit = busy_above ? (fit > pos_sched_inflight(c) ? fit : 0) : cap,
                .most = c->max_inflight ? c->max_inflight : v->credits,
            };
            uint64_t want = choose(arg, v, &ch);
            if (want > ch.most)
                want = ch.most;
            if (busy_above)
                fit = want;
            else /* nothing above has work: at least one more operator (work conserved) */
                cap = want > ch.inflight ? want : ch.inflight + 1;
        }
        if (!busy_above) {
            c->new_granted = pos_sched_window_grant(c, cap);
            c->window = (uint32_t)cap;
            continue;
        }
        if (fit > pos_sched_inflight(c)) {
            c->new_granted = pos_sched_window_grant(c, fit);
            continue;
        }
        next = pos_sched_hold(c, v, next); /* held, but for the starvation guard */
    }
    return next;
}

static int64_t pos_decide(void *state, struct pos_sched_view *v)
{
    return pos_decide_with(state, v, NULL, NULL);
}

/* Operators are forgotten once complete: the schedule follower sees each one before. */
void pos_state_complete(struct pos_state *s, const struct pos_sched_client *c)
{
    pos_schedule_observe(&s->st, s->st.s, c);
}

const char *pos_state_note(struct pos_state *s, const char *name)
{
    return pos_schedule_note(&s->st, name, "online", s->note, sizeof s->note);
}

static void pos_on_complete(void *state, const struct pos_sched_client *c,
                            const struct pos_sched_op *op)
{
    (void)op;
    pos_state_complete(state, c);
}

static const char *pos_note(void *state)
{
    return pos_state_note(state, "pos");
}

const struct pos_policy_ops pos_policy_pos = {
    .name = "pos",
    .summary = "co-locates lower classes beside busy higher ones where their kernels fit in the "
               "SMs left (MPS), orders SLO clients by latest start time, work-conserving, with "
               "the starvation guard",
    .params = pos_params,
    .init = pos_init,
    .fini = pos_fini,
    .decide = pos_decide,
    .on_complete = pos_on_complete,
    .note = pos_note,
};
