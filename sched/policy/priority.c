/* priority: clients belong to classes with numeric priorities (lower = more important).
 * While a more important client of the same device has work queued, waiting or in flight,
 * less important ones get no new grants (they are held); a held client that, in the last
 * min_share of a guard period, has still had less than min_share of it with work in flight
 * gets grants anyway until it has (starvation guard). Clients of the most important class present
 * launch freely unless their class caps their operators in flight; the others always launch in a
 * window, at most max_inflight operators in flight (or the credit window when the class sets no
 * cap). */
#include "pos/client_shm.h"
#include "sched/policy/policy.h"

static int busy(const struct pos_sched_client *c)
{
    return pos_sched_queued(c) > 0 || pos_sched_inflight(c) > 0 || c->waiting > 0;
}

static uint64_t umax(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* The grant that lets C have at most LIMIT operators in flight. */
static uint64_t window_grant(const struct pos_sched_client *c, uint64_t limit)
{
    return umax(c->granted, c->completed + limit);
}

static void priority_decide(struct pos_sched_view *v)
{
    int64_t elapsed = v->now - v->period_start;
    for (size_t i = 0; i < v->nclients; i++) {
        struct pos_sched_client *c = &v->clients[i];
        int best_present = 1, outranked_busy = 0;
        for (size_t k = 0; k < v->nclients; k++) {
            const struct pos_sched_client *o = &v->clients[k];
            if (k == i || o->device != c->device || o->priority >= c->priority)
                continue;
            best_present = 0;
            outranked_busy |= busy(o);
        }
        uint64_t limit = c->max_inflight ? c->max_inflight : v->credits;
        c->held = 0;
        if (outranked_busy) {
            /* starving: late in the guard period and still short of its share */
            double period = (double)v->guard_period_ns;
            int starving = pos_sched_queued(c) > 0 &&
                           (double)elapsed >= (1.0 - c->min_share) * period &&
                           (double)c->served_ns < c->min_share * period;
            c->mode = POS_GRANT_WINDOW;
            if (starving) {
                /* the guard: one client-sized step, then held again */
                c->new_granted = window_grant(c, c->max_inflight ? c->max_inflight : 1);
            } else {
                c->new_granted = c->granted;
                c->held = 1;
            }
        } else if (best_present && c->max_inflight == 0) {
            c->mode = POS_GRANT_FREE;
            c->new_granted = umax(c->granted, c->submitted + v->credits);
        } else {
            c->mode = POS_GRANT_WINDOW;
            c->new_granted = window_grant(c, limit);
        }
    }
}

const struct pos_policy_ops pos_policy_priority = {
    .name = "priority",
    .summary = "hold less important classes while a more important one has work; "
               "starvation guard; per-class in-flight limits",
    .decide = priority_decide,
};
