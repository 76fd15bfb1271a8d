/* fifo: grant everything as it comes. Every client launches freely; posd only counts. The
 * no-scheduler baseline, with the accounting of a scheduler. */
#include "pos/client_shm.h"
#include "sched/policy/policy.h"

static int64_t fifo_decide(void *state, struct pos_sched_view *v)
{
    (void)state;
    for (size_t i = 0; i < v->nclients; i++) {
        struct pos_sched_client *c = &v->clients[i];
        c->mode = POS_GRANT_FREE;
        c->new_granted = c->submitted > c->granted ? c->submitted : c->granted;
        c->held = 0;
    }
    return INT64_MAX;
}

const struct pos_policy_ops pos_policy_fifo = {
    .name = "fifo",
    .summary = "grant every launch as it comes (no scheduling)",
    .decide = fifo_decide,
};
