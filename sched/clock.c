/* posd's clock, on its own so that the ring fuzzer (tests/fuzz/fuzz_ring.c) can link the
 * engine with a clock it moves itself: the stall paths need 100 ms to pass. */
#include <time.h>

#include "sched/posd.h"

int64_t posd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
