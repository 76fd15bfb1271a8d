/* posd's side of stage schedules: loading [policy] schedule for the core (a file that cannot
 * be used is logged and ignored: posd runs without it), and logging the policy's note when it
 * changes (e.g. the staged policy stops following its schedule because the mix changed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/posd.h"
#include "sched/schedule_file.h"

struct pos_schedule *posd_schedule_open(const struct posd_config *cfg,
                                        const struct pos_sched_device *dev)
{
    if (!cfg->schedule[0])
        return NULL;
    struct pos_schedule *s = calloc(1, sizeof *s);
    char err[512];
    if (!s) {
        posd_log(POSD_LOG_ERROR, "schedule %s: out of memory: no schedule followed", cfg->schedule);
        return NULL;
    }
    if (pos_schedule_load(cfg->schedule, s, err, sizeof err) < 0) {
        posd_log(POSD_LOG_ERROR, "%s: no schedule followed", err);
        free(s);
        return NULL;
    }
    if (dev->sm_count && dev->sm_count != s->sm_count) {
        posd_log(POSD_LOG_WARN,
                 "schedule %s is for %s with %u SMs, this device has %u: ignored (search one "
                 "for this device: possim search)",
                 cfg->schedule, s->device, s->sm_count, dev->sm_count);
        posd_schedule_close(s);
        return NULL;
    }
    posd_log(POSD_LOG_INFO,
             "schedule %s: %zu models, %zu stages, %.1f us per round predicted on %s %s; "
             "policy staged follows it while exactly its mix runs",
             cfg->schedule, s->nmodels, s->nstages, s->predicted_us, s->device,
             s->concurrent ? "mps" : "timeslice");
    return s;
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
