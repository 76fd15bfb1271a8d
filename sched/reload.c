/* Reloading posd's configuration (SIGHUP, posctl reload, a drop-in changed): the files read
 * again, the policy and its stage schedule started in the core, and every client matched
 * against the new rules. On error the running configuration stays. Called by the loop, by
 * control.c and by conf_watch.c, and calls down only (clients, the engine, the core). */
#include <errno.h>
#include <stdio.h>

#include "sched/arm.h"
#include "sched/clients.h"
#include "sched/engine.h"
#include "sched/reload.h"
#include "sched/sm_share.h"

int posd_reload(struct posd *d, char *err, size_t errlen)
{
    struct posd_config fresh;
    char why[512];
    posd_config_defaults(&fresh);
    if (posd_config_load(d->config_path, d->config_optional, d->dropin_dir, &fresh, why,
                         sizeof why) < 0) {
        snprintf(err, errlen, "reload refused, keeping the running configuration: %s", why);
        posd_log(POSD_LOG_ERROR, "%s", err);
        posd_config_free(&fresh);
        return -EINVAL;
    }
    if (d->policy_override[0])
        snprintf(fresh.policy, sizeof fresh.policy, "%s", d->policy_override);
    const struct pos_policy_ops *p = pos_policy_find(fresh.policy);
    if (!p) {
        snprintf(err, errlen, "reload refused: unknown policy '%s'", fresh.policy);
        posd_log(POSD_LOG_ERROR, "%s", err);
        posd_config_free(&fresh);
        return -EINVAL;
    }
    struct sched_params params;
    posd_engine_params(&fresh, &params);
    struct pos_policy_args args;
    struct posd_policy_files *files = posd_policy_args(&fresh, &d->device, p, &args);
    if (sched_core_set_policy(d->core, p, &args, &params) < 0) {
        snprintf(err, errlen, "reload refused: policy %s could not start", p->name);
        posd_log(POSD_LOG_ERROR, "%s", err);
        posd_policy_files_close(files);
        posd_config_free(&fresh);
        return -ENOMEM;
    }
    posd_policy_files_close(d->policy_files); /* the core follows the new ones */
    d->policy_files = files;
    posd_config_free(&d->cfg);
    d->cfg = fresh;
    d->policy = p;
    posd_set_log_level(d->cfg.log_level);
    posd_lookup_stats_group(d);
    posd_clients_reconfigure(d);
    snprintf(err, errlen, "configuration reloaded: policy %s, %zu rules", p->name, d->cfg.nrules);
    posd_log(POSD_LOG_INFO, "%s", err);
    posd_shares_check(d);
    posd_arm_tick(d, posd_clients_tick(d)); /* decide under the new configuration */
    return 0;
}
