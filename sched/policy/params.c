/* The values of policies' parameters (policy.h): how an adapter records what it was given for
 * a key, and how a policy's init reads a value, or the default its own table declares. */
#include <string.h>

#include "sched/policy/policy.h"

const struct pos_policy_arg *pos_policy_arg(const struct pos_policy_args *args, const char *name)
{
    for (size_t i = 0; args && i < args->n; i++)
        if (strcmp(args->v[i].param->name, name) == 0)
            return &args->v[i];
    return NULL;
}

struct pos_policy_arg *pos_policy_arg_set(struct pos_policy_args *args,
                                          const struct pos_policy_param *p)
{
    struct pos_policy_arg *a = (struct pos_policy_arg *)pos_policy_arg(args, p->name);
    if (a)
        return a;
    if (args->n == POS_POLICY_ARGS_MAX)
        return NULL;
    a = &args->v[args->n++];
    memset(a, 0, sizeof *a);
    a->param = p;
    return a;
}

double pos_policy_number(const struct pos_policy_args *args, const struct pos_policy_param *p)
{
    const struct pos_policy_arg *a = pos_policy_arg(args, p->name);
    return a ? a->number : p->def;
}

const struct pos_schedule *pos_policy_schedule(const struct pos_policy_args *args,
                                               const struct pos_policy_param *p)
{
    const struct pos_policy_arg *a = pos_policy_arg(args, p->name);
    return a ? a->schedule : NULL;
}

const struct pos_weights *pos_policy_weights(const struct pos_policy_args *args,
                                             const struct pos_policy_param *p)
{
    const struct pos_policy_arg *a = pos_policy_arg(args, p->name);
    return a ? a->weights : NULL;
}
