/* conf_watch.c: the drop-in directory watched */
#ifndef POS_SCHED_CONF_WATCH_H
#define POS_SCHED_CONF_WATCH_H

#include "sched/posd.h"

/* The drop-in directory watched (inotify): a change reloads the configuration
 * as SIGHUP does, once a burst of changes has settled. Returns 0, or -errno when DIR cannot be
 * watched (logged; SIGHUP still reloads). */
int posd_conf_watch_start(struct posd *d, const char *dir);
void posd_conf_watch_stop(void);

#endif
