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

uint64_t pos_sched_window_grant(const struct pos_sched_client *c, uint64_t limit)
{
    uint64_t inflight = pos_sched_inflight(c);
    uint64_t room = limit > inflight ? limit - inflight : 0;
    uint64_t g = c->released_upto + room;
    return g > c->granted ? g : c->granted;
}
