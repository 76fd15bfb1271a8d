/* reload.c: the configuration reloaded */
#ifndef POS_SCHED_RELOAD_H
#define POS_SCHED_RELOAD_H

#include "sched/posd.h"

/* Reloads the configuration (SIGHUP, posctl reload, conf_watch.c): on error the running one
 * stays. Returns 0 or a negative errno; ERR says what was done or why not. */
int posd_reload(struct posd *d, char *err, size_t errlen);

#endif
