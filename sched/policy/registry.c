/* The table of scheduling policies: one ops table per file of sched/policy/, found by name. */
#include <string.h>

#include "sched/policy/policy.h"

extern const struct pos_policy_ops pos_policy_fifo;
extern const struct pos_policy_ops pos_policy_priority;
extern const struct pos_policy_ops pos_policy_pos;
extern const struct pos_policy_ops pos_policy_staged;

const struct pos_policy_ops *const pos_policies[] = {&pos_policy_fifo, &pos_policy_priority,
                                                     &pos_policy_pos, &pos_policy_staged, NULL};

const struct pos_policy_ops *pos_policy_find(const char *name)
{
    for (int i = 0; pos_policies[i]; i++)
        if (strcmp(pos_policies[i]->name, name) == 0)
            return pos_policies[i];
    return NULL;
}
