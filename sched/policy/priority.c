/* priority: clients belong to classes with numeric priorities (lower = more important). It is
 * work-conserving:
 *   - a client with no more important client on its device launches freely (FREE), whatever
 *     its class's in-flight cap: nobody needs protecting from it;
 *   - while a more important client of the same device has work (queued, or in flight and not
 *     stalled, or, with idle_grace_us set, completed less than that ago), it is held: no new
 *     grants, except that one that has had less than min_share of the guard period with work
 *     in flight gets one step in the period's last min_share (starvation guard);
 *   - while more important clients are present but idle, it runs in a window: at most its
 *     class's max_inflight operators in flight or, when the class sets none, about window_us
 *     of device time by the core's estimate of its operators, so that a request arriving at a
 *     more important client finds little ahead of it. */
#include "pos/client_shm.h"
#include "sched/policy/policy.h"

static uint64_t umax(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static int64_t priority_decide(void *state, struct pos_sched_view *v)
{
    (void)state;
    int64_t next = INT64_MAX;
    for (size_t i = 0; i < v->nclients; i++) {
        struct pos_sched_client *c = &v->clients[i];
        int outranked = 0, outranked_busy = 0;
        for (size_t k = 0; k < v->nclients; k++) {
            const struct pos_sched_client *o = &v->clients[k];
            if (k == i || o->device != c->device || o->priority >= c->priority)
                continue;
            outranked = 1;
            outranked_busy |= pos_sched_has_work(o, v);
            next = pos_sched_grace_next(o, v, next); /* decide again when its grace ends */
        }
        c->held = 0;
        c->window = 0;
        if (!outranked) {
            c->mode = POS_GRANT_FREE;
            c->new_granted = umax(c->granted, c->submitted);
        } else if (outranked_busy) {
            next = pos_sched_hold(c, v, next);
        } else {
            c->mode = POS_GRANT_WINDOW;
            uint64_t limit =
                c->max_inflight ? c->max_inflight : pos_sched_ops_in(c, v->window_ns, v->credits);
            c->new_granted = pos_sched_window_grant(c, limit);
            c->window = (uint32_t)limit; /* the shim steps the window itself */
        }
    }
    return next;
}

const struct pos_policy_ops pos_policy_priority = {
    .name = "priority",
    .summary = "work-conserving priority classes: hold less important clients only while a "
               "more important one has work; starvation guard; per-class in-flight caps",
    .decide = priority_decide,
};
