/* staged: follows a static stage schedule (sched/schedule.h, found by `possim search`) while
 * exactly its mix is running, and decides as priority does otherwise (another mix, a client off
 * the schedule's position, no schedule loaded). The schedule is its parameter schedule
 * (posd.conf's [policy] schedule, possim's [sched] schedule), which the adapter reads and init
 * hands it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "sched/policy/policy.h"
#include "sched/schedule.h"

extern const struct pos_policy_ops pos_policy_priority;

static const struct pos_policy_param staged_params[] = {
    {.name = "schedule", .type = POS_PARAM_SCHEDULE}, /* the schedule to follow, as pos's */
    {.name = NULL},
};

struct staged {
    const struct pos_schedule *schedule; /* staged_params' (NULL: none) */
    struct pos_schedule_state st;
    char note[160];
};

static int staged_init(void **state, const struct pos_sched_device *dev,
                       const struct pos_policy_args *args)
{
    (void)dev;
    struct staged *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->schedule = pos_policy_schedule(args, &staged_params[0]);
    pos_schedule_state_init(&s->st, NULL);
    *state = s;
    return 0;
}

static void staged_fini(void *state)
{
    free(state);
}

static int64_t staged_decide(void *state, struct pos_sched_view *v)
{
    struct staged *s = state;
    if (s->schedule && pos_schedule_decide(&s->st, s->schedule, v))
        return s->st.next_ns;
    return pos_policy_priority.decide(NULL, v);
}

/* Operators are forgotten once complete: the follower sees each one before. */
static void staged_on_complete(void *state, const struct pos_sched_client *c,
                               const struct pos_sched_op *op)
{
    struct staged *s = state;
    (void)op;
    pos_schedule_observe(&s->st, s->st.s, c);
}

static const char *staged_note(void *state)
{
    struct staged *s = state;
    if (!pos_schedule_note(&s->st, "staged", "priority", s->note, sizeof s->note))
        snprintf(s->note, sizeof s->note, "staged: no schedule followed yet (priority decides)");
    return s->note;
}

const struct pos_policy_ops pos_policy_staged = {
    .name = "staged",
    .summary = "follow a searched stage schedule while exactly its mix runs ([policy] schedule); "
               "priority otherwise",
    .params = staged_params,
    .init = staged_init,
    .fini = staged_fini,
    .decide = staged_decide,
    .on_complete = staged_on_complete,
    .note = staged_note,
};
