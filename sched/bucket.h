/* bucket.c: a token bucket (struct posd_bucket, sched/posd.h) */
#ifndef POS_SCHED_BUCKET_H
#define POS_SCHED_BUCKET_H

#include "sched/posd.h"

/* Refills B (one token per PERIOD ns, up to BURST) and takes one. Returns 0 when there is
 * none. (bucket.c) */
int posd_bucket_take(struct posd_bucket *b, int64_t now, int burst, int64_t period);

#endif
