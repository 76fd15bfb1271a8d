/* A token bucket (struct posd_bucket, posd.h): the rate limits of registrations per uid
 * (clients.c) and of a client's kicks (loop.c). Pure: the caller gives the time. */
#include "sched/bucket.h"

/* Refills B (one token per PERIOD, up to BURST) and takes one. Returns 0 when there is none. */
int posd_bucket_take(struct posd_bucket *b, int64_t now, int burst, int64_t period)
{
    if (!b->refilled_at) {
        b->tokens = burst;
        b->refilled_at = now;
    }
    int64_t periods = (now - b->refilled_at) / period;
    if (periods > 0) {
        b->tokens = periods >= burst - b->tokens ? burst : b->tokens + (int)periods;
        b->refilled_at += periods * period;
    }
    if (!b->tokens)
        return 0;
    b->tokens--;
    return 1;
}
