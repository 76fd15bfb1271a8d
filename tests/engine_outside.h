/* What the engine (sched/engine.c) and its replies (stats.c) call outside themselves beyond
 * the core, the profiles and the log, for test and fuzz programs that link the engine alone: no
 * telemetry (no eBPF parts, no unmanaged processes), no stage schedule, no policy note. Include
 * it in one file of a program. */
#ifndef POS_TESTS_ENGINE_OUTSIDE_H
#define POS_TESTS_ENGINE_OUTSIDE_H

#include "sched/telemetry.h"

uint32_t posd_telemetry_parts(void)
{
    return 0;
}

size_t posd_telemetry_unmanaged(struct posd *d, struct pos_unmanaged_stats *out, size_t cap)
{
    (void)d, (void)out, (void)cap;
    return 0;
}

uint64_t posd_telemetry_untracked(void)
{
    return 0;
}

void posd_telemetry_follow(struct posd_client *c, uint32_t tid)
{
    c->tele.launch_tid = tid;
}

void posd_telemetry_client_current(struct posd *d, struct posd_client *c, int64_t now)
{
    (void)d, (void)c, (void)now;
}

struct posd_policy_files *posd_policy_args(const struct posd_config *cfg,
                                           const struct pos_sched_device *dev,
                                           const struct pos_policy_ops *policy,
                                           struct pos_policy_args *args)
{
    (void)dev, (void)policy;
    *args = cfg->policy_args;
    return NULL;
}

void posd_policy_files_close(struct posd_policy_files *f)
{
    (void)f;
}

void posd_log_policy_note(struct posd *d)
{
    (void)d;
}

#endif
