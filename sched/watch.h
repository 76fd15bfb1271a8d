/* watch.c: descriptors watched for other parts */
#ifndef POS_SCHED_WATCH_H
#define POS_SCHED_WATCH_H

#include "sched/posd.h"

/* Calls FN(D, FD, ARG) whenever FD is readable (POLLIN), from the loop, until posd stops; a
 * part with a descriptor of its own (telemetry's ring buffer and timer, the metrics listener)
 * needs no case in the loop. FN returns 0, or when to look at FD again (CLOCK_MONOTONIC ns)
 * when it must rest (an accept out of descriptors would fail again at once). May be called
 * before posd_loop starts. Returns 0 or -ENOSPC (POSD_MAX_WATCHES). */
#define POSD_MAX_WATCHES 12
typedef int64_t (*posd_watch_fn)(struct posd *d, int fd, void *arg);
int posd_loop_watch(struct posd *d, int fd, posd_watch_fn fn, void *arg);
/* The same, once: FN is called the first time FD is readable, and the watch is gone (FN closes
 * FD when it is done with it). */
int posd_loop_watch_once(struct posd *d, int fd, posd_watch_fn fn, void *arg);
/* The loop's side: its ring exists, every watch is armed (start), and no longer (stop); a
 * watch's completion (its user_data) handled; the watches whose rest is over armed again,
 * returning when the next one's is (0: none). */
void posd_watch_start(struct posd *d);
void posd_watch_stop(void);
void posd_watch_fire(struct posd *d, uint64_t data);
int64_t posd_watch_wake(struct posd *d, int64_t now);

#endif
