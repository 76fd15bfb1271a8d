/* stats.c: the replies to posd's tools */
#ifndef POS_SCHED_STATS_H
#define POS_SCHED_STATS_H

#include "sched/posd.h"

/* Fills a STATS reply (header excluded) into BUF (CAP bytes); returns its length. It lists
 * every client when ALL, else only those of uid UID. */
size_t posd_stats_clients(struct posd *d, void *buf, size_t cap, int all, uid_t uid);
/* The KERNELS reply body into BUF (CAP bytes): every user's profiles when ALL, else UID's. */
size_t posd_stats_kernels(struct posd *d, void *buf, size_t cap, int all, uid_t uid);

#endif
