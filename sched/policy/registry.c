/* The table of scheduling policies: one ops table per file of sched/policy/, found by name,
 * with the parameters they declare. */
#include <string.h>

#include "sched/policy/policy.h"

extern const struct pos_policy_ops pos_policy_fifo;
extern const struct pos_policy_ops pos_policy_priority;
extern const struct pos_policy_ops pos_policy_pos;
extern const struct pos_policy_ops pos_policy_staged;
extern const struct pos_policy_ops pos_policy_learned;

const struct pos_policy_ops *const pos_policies[] = {&pos_policy_fifo, &pos_policy_priority,
                                                     &pos_policy_pos, &pos_policy_staged,
                                                     &pos_policy_learned, NULL};

const struct pos_policy_ops *pos_policy_find(const char *name)
{
    for (int i = 0; pos_policies[i]; i++)
        if (strcmp(pos_policies[i]->name, name) == 0)
            return pos_policies[i];
    return NULL;
}

const struct pos_policy_param *pos_policy_param_find(const char *name)
{
    for (int i = 0; pos_policies[i]; i++)
        for (const struct pos_policy_param *p = pos_policies[i]->params; p && p->name; p++)
            if (strcmp(p->name, name) == 0)
                return p;
    return NULL;
}

int pos_policy_takes(const struct pos_policy_ops *policy, const char *name)
{
    for (const struct pos_policy_param *p = policy->params; p && p->name; p++)
        if (strcmp(p->name, name) == 0)
            return 1;
    return 0;
}
