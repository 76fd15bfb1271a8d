/* SM shares through MPS: which share of the device's SMs a client's WELCOME carries (its
 * rule's or class's sm_share, where processes run at once on the device), the one line that
 * says a configuration's shares cannot apply on a time-sliced device, and what a reload means
 * for running clients (nothing: a context keeps the share it was created with). */
#include <stdio.h>
#include <string.h>

#include "sched/sm_share.h"

/* Appends NAME to the list in BUF (LEN bytes), "..." once it is full. */
static void list_add(char *buf, size_t len, const char *kind, const char *name)
{
    size_t n = strlen(buf);
    if (n + 4 >= len)
        return;
    int w = snprintf(buf + n, len - n, "%s%s %s", n ? ", " : "", kind, name);
    if (w < 0 || (size_t)w >= len - n)
        snprintf(buf + (len > 4 ? len - 4 : 0), 4, "...");
}

void posd_shares_check(const struct posd *d)
{
    if (d->device.concurrent)
        return;
    char who[512] = "";
    for (int i = 0; i < d->cfg.nclasses; i++)
        if (d->cfg.classes[i].sm_share)
            list_add(who, sizeof who, "class", d->cfg.classes[i].name);
    for (size_t i = 0; i < d->cfg.nrules; i++)
        if (d->cfg.rules[i].has_sm_share)
            list_add(who, sizeof who, "rule", d->cfg.rules[i].name);
    if (who[0])
        posd_log(POSD_LOG_WARN,
                 "sm_share ignored (%s): device 0 runs one process at a time (no MPS), so a "
                 "share of its SMs cannot be enforced; see docs/policy.md",
                 who);
}

uint32_t posd_share_for(const struct posd *d, const struct posd_client *c)
{
    return d->device.concurrent ? c->pol.sm_share : 0;
}

void posd_share_reconf(const struct posd *d, const struct posd_client *c)
{
    uint32_t now = posd_share_for(d, c);
    if (now != c->sm_share)
        posd_log(POSD_LOG_INFO,
                 "client %u (pid %d, app '%s'): sm_share is now %u%% but it keeps %u%% (0: none) "
                 "until it restarts: a running context's share cannot change",
                 c->id, (int)c->ident.pid, c->ident.app, now, c->sm_share);
}
