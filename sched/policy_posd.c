/* posd's side of its policy (sched/policy/policy.h): the parameters it hands the policy's init,
 * from posd.conf's [policy] keys, with a stage schedule file and a weights file read for it (a
 * file that cannot be used is logged once and left out: posd runs without it, policy learned
 * as pos), and the policy's note, logged when it changes (e.g. staged stops following its
 * schedule because the mix changed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/policy/learned.h"
#include "sched/posd.h"
#include "sched/schedule_file.h"
#include "sched/weights.h"
#include "sched/weights_file.h"

/* Reads and checks the weights file PATH for POLICY: NULL when it cannot be used (logged once:
 * posd goes on, policy learned deciding as pos). */
static struct pos_weights *weights_open(const char *path, const struct pos_policy_ops *policy)
{
    struct pos_weights *w = calloc(1, sizeof *w);
    char err[256] = "";
    int rc = w ? pos_weights_load(path, w, err, sizeof err) : -ENOMEM;
    if (!w)
        snprintf(err, sizeof err, "%s: out of memory", path);
    char why[200];
    if (rc == 0 && (rc = pos_learned_check(w, why, sizeof why)) < 0) {
        snprintf(err, sizeof err, "%s: %s", path, why);
        pos_weights_free(w);
    }
    if (rc < 0) {
        posd_log(POSD_LOG_ERROR, "%s: policy %s runs without it%s", err, policy->name,
                 strcmp(policy->name, "learned") == 0 ? " (as pos)" : "");
        free(w);
        return NULL;
    }
    /* what trained them, on one line */
    char meta[160];
    size_t k = 0;
    for (const char *m = w->meta; *m && k + 1 < sizeof meta; m++)
        if (*m != '\n' || (m[1] && k > 0))
            meta[k++] = *m == '\n' || (unsigned char)*m < 0x20 ? ' ' : *m;
    meta[k] = '\0';
    posd_log(POSD_LOG_INFO, "weights %s: %s; policy %s %s", path, k ? meta : "no description",
             policy->name,
             pos_policy_takes(policy, "weights") ? "uses them" : "takes no weights: not used");
    return w;
}

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
        pos_schedule_free(s);
        free(s);
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

struct posd_policy_files *posd_policy_args(const struct posd_config *cfg,
                                           const struct pos_sched_device *dev,
                                           const struct pos_policy_ops *policy,
                                           struct pos_policy_args *args)
{
    *args = cfg->policy_args;
    struct posd_policy_files *f = calloc(1, sizeof *f);
    if (!f) {
        posd_log(POSD_LOG_ERROR, "policy files: out of memory: none read");
        return NULL;
    }
    for (size_t i = 0; i < args->n; i++) {
        struct pos_policy_arg *a = &args->v[i];
        if (a->param->type == POS_PARAM_SCHEDULE && !f->schedule)
            a->schedule = f->schedule = schedule_open(a->file, dev, policy);
        if (a->param->type == POS_PARAM_WEIGHTS && !f->weights)
            a->weights = f->weights = weights_open(a->file, policy);
    }
    return f;
}

void posd_policy_files_close(struct posd_policy_files *f)
{
    if (!f)
        return;
    if (f->schedule) {
        pos_schedule_free(f->schedule);
        free(f->schedule);
    }
    if (f->weights) {
        pos_weights_free(f->weights);
        free(f->weights);
    }
    free(f);
}

void posd_log_policy_note(struct posd *d)
{
    const char *note = sched_core_policy_note(d->core);
    if (!note || strcmp(note, d->policy_note) == 0)
        return;
    snprintf(d->policy_note, sizeof d->policy_note, "%s", note);
    posd_log(POSD_LOG_INFO, "%s", note);
}
