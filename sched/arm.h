/* arm.c: the loop's io_uring, armed by any part */
#ifndef POS_SCHED_ARM_H
#define POS_SCHED_ARM_H

#include "sched/posd.h"

/* A submission entry (the queue submitted first when it is full). */
struct io_uring_sqe *posd_sqe(struct posd *d);
/* Arms the tick DELAY_NS from now (a negative delay: none), or brings an armed one forward. */
void posd_arm_tick(struct posd *d, int64_t delay_ns);
/* Makes sure housekeeping runs at AT (CLOCK_MONOTONIC ns) at the latest. */
void posd_arm_housekeeping(struct posd *d, int64_t at);

#endif
