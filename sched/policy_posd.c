/* posd's side of its policy (sched/policy/policy.h): the parameters it hands the policy's init,
 * from posd.conf's [policy] keys, with a stage schedule file read for it (a file that cannot be
 * used is logged and left out: posd runs without it), and the policy's note, logged when it
 * changes (e.g. staged stops following its schedule because the mix changed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/posd.h"
#include "sched/schedule_file.h"

/* Reads the schedule file PATH for POLICY on DEV: NULL when it cannot be used (logged). */
static struct pos_schedule *schedule_open(const char *path, const struct pos_sched_device *dev,
                                          const struct pos_policy_ops *policy)
{
    struct pos_schedule *s = calloc(1, sizeof *s);
    char err[512];
    if (!s) {
        posd_log(POSD_LOG_ERROR, "schedule %s: out of memory: no schedule followed", path);
        return NULL;
    }
    if (pos_schedule_load(path, s, err, sizeof err) < 0) {
        posd_log(POSD_LOG_ERROR, "%s: no schedule followed", err);
        free(s);
        return NULL;
    }
    if (dev->sm_count && dev->sm_count != s->sm_count) {
        posd_log(POSD_LOG_WARN,
                 "schedule %s is for %s with %u SMs, this device has %u: ignored (search one "
                 "for this device: possim search)",
                 path, s->device, s->sm_count, dev->sm_count);
        posd_schedule_close(s);
        return NULL;
    }
    posd_log(POSD_LOG_INFO,
             "schedule %s: %zu models, %zu stages, %.1f us per round predicted on %s %s; "
             "policy %s %s",
             path, s->nmodels, s->nstages, s->predicted_us, s->device,
             s->concurrent ? "mps" : "timeslice", policy->name,
             pos_policy_takes(policy, "schedule") ? "follows it while exactly its mix runs"
                                                  : "takes no schedule: not followed");
    return s;
}

struct pos_schedule *posd_policy_args(const struct posd_config *cfg,
                                      const struct pos_sched_device *dev,
                                      const struct pos_policy_ops *policy,
                                      struct pos_policy_args *args)
{
    *args = cfg->policy_args;
    struct pos_schedule *sched = NULL;
    for (size_t i = 0; i < args->n; i++) {
        struct pos_policy_arg *a = &args->v[i];
        if (a->param->type == POS_PARAM_SCHEDULE && !sched)
            a->schedule = sched = schedule_open(a->file, dev, policy);
    }
    return sched;
}

void posd_schedule_close(struct pos_schedule *s)
{
    if (!s)
        return;
    pos_schedule_free(s);
    free(s);
}

void posd_log_policy_note(struct posd *d)
{
    const char *note = sched_core_policy_note(d->core);
    if (!note || strcmp(note, d->policy_note) == 0)
        return;
    snprintf(d->policy_note, sizeof d->policy_note, "%s", note);
    posd_log(POSD_LOG_INFO, "%s", note);
}
