/* Helpers every policy uses over its view of a client: how many operators fit a window, whether
 * it has work, holding it back, and the window grant that bounds its operators in flight. */
#include "pos/client_shm.h"
#include "sched/policy/policy.h"

uint64_t pos_sched_ops_in(const struct pos_sched_client *c, int64_t window_ns, uint64_t cap)
{
    /* two at least: one runs while the next is released, so the device does not wait for
     * posd between them (and back-to-back completions keep the estimate learning) */
    double n = c->op_ns > 0 ? (double)window_ns / c->op_ns : 2;
    if (n < 2)
        n = 2;
    return n > (double)cap ? cap : (uint64_t)n;
}

int pos_sched_has_work(const struct pos_sched_client *c, const struct pos_sched_view *v)
{
    return pos_sched_queued(c) > 0 || (pos_sched_inflight(c) > 0 && !c->stalled) ||
           (c->last_done_ns && v->now - c->last_done_ns < v->idle_grace_ns);
}

int64_t pos_sched_grace_next(const struct pos_sched_client *o, const struct pos_sched_view *v,
                             int64_t next)
{
    int64_t grace_end = o->last_done_ns + v->idle_grace_ns;
    if (o->last_done_ns && !pos_sched_queued(o) && !pos_sched_inflight(o) && grace_end > v->now &&
        grace_end < next)
        return grace_end;
    return next;
}

int64_t pos_sched_hold(struct pos_sched_client *c, const struct pos_sched_view *v, int64_t next)
{
    double period = (double)v->guard_period_ns;
    int64_t guard_at = v->period_start + (int64_t)((1.0 - c->min_share) * period);
    int starving = pos_sched_queued(c) > 0 && c->min_share > 0 && v->now >= guard_at &&
                   (double)c->served_ns < c->min_share * period;
    c->mode = POS_GRANT_WINDOW;
    if (starving) {
        c->new_granted = pos_sched_window_grant(c, c->max_inflight ? c->max_inflight : 1);
        return next;
    }
    c->new_granted = c->granted;
    c->held = 1;
    if (pos_sched_queued(c) > 0 && c->min_share > 0 && guard_at > v->now && guard_at < next)
        next = guard_at;
    return next;
}

uint64_t pos_sched_window_grant(const struct pos_sched_client *c, uint64_t limit)
{
    uint64_t inflight = pos_sched_inflight(c);
    uint64_t room = limit > inflight ? limit - inflight : 0;
    uint64_t g = c->released_upto + room;
    return g > c->granted ? g : c->granted;
}
