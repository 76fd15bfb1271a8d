/* metrics.c: the Prometheus endpoint */
#ifndef POS_SCHED_METRICS_H
#define POS_SCHED_METRICS_H

#include "sched/posd.h"

struct MHD_Daemon;
/* Connections the endpoint holds at once, and that one peer may hold of them (a local user,
 * told by its socket's owner, or a remote address; root's are not counted per peer): one user
 * cannot take the room scrapers need (docs/metrics.md). */
#define POSD_METRICS_CONNECTIONS 256
#define POSD_METRICS_PEER_MAX    8
/* Serves /metrics on SPEC ("PORT" on loopback, "ADDR:PORT", "[ADDR6]:PORT"), which came from
 * ORIGIN ("--metrics", "[metrics] listen": for messages). Returns 0 or a negative errno
 * (logged). */
int posd_metrics_start(struct posd *d, const char *spec, const char *origin);
/* The descriptors the endpoint may hold at most (0 in a posd without it). */
int posd_metrics_descriptors(void);
/* Does what the endpoint has to do. Returns when it wants to run again at the latest
 * (CLOCK_MONOTONIC ns), 0 for no deadline. */
int64_t posd_metrics_run(struct posd *d);
void posd_metrics_stop(struct posd *d);

#endif
