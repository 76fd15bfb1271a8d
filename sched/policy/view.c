/* Helpers every policy uses over its view of a client: walking the queued operators in launch
 * order, and the window grant that bounds a client's operators in flight. */
#include "sched/policy/policy.h"

const struct pos_sched_op *pos_sched_queued_op(const struct pos_sched_client *c, uint64_t i)
{
    for (uint64_t seq = c->released_upto + 1; seq <= c->submitted; seq++) {
        const struct pos_sched_op *op = pos_sched_op_at(c, seq);
        if (!op || (op->state & POS_SCHED_OP_RELEASED))
            continue;
        if (i-- == 0)
            return op;
    }
    return NULL;
}

uint64_t pos_sched_ops_in(const struct pos_sched_client *c, int64_t window_ns, uint64_t cap)
{
    /* two at least: one runs while the next is released, so the device does not wait for
     * posd between them (and back-to-back completions keep the estimate learning) */
    double n = c->op_ns > 0 ? (double)window_ns / c->op_ns : 2;
    if (n < 2)
        n = 2;
    return n > (double)cap ? cap : (uint64_t)n;
}

uint64_t pos_sched_window_grant(const struct pos_sched_client *c, uint64_t limit)
{
    uint64_t inflight = pos_sched_inflight(c);
    uint64_t room = limit > inflight ? limit - inflight : 0;
    uint64_t g = c->released_upto + room;
    return g > c->granted ? g : c->granted;
}
