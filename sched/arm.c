/* Arming posd's io_uring from any part: a submission entry, and the two timeouts (the
 * scheduling tick, housekeeping) brought forward when a part wants them sooner. Below every
 * part that asks (clients, control, telemetry, metrics, the watches) and the loop that reads
 * the completions: they all call down to it. */
#include "sched/arm.h"

static struct __kernel_timespec tick_ts, housekeeping_ts;

struct io_uring_sqe *posd_sqe(struct posd *d)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
    if (!sqe) {
        io_uring_submit(&d->ring);
        sqe = io_uring_get_sqe(&d->ring);
    }
    return sqe;
}

/* Arms the timeout KIND at AT (absolute CLOCK_MONOTONIC), or brings an armed one forward. */
static void arm_timeout(struct posd *d, int kind, struct __kernel_timespec *ts, int *armed,
                        int64_t *armed_at, int64_t at)
{
    if (*armed && at >= *armed_at)
        return;
    ts->tv_sec = at / 1000000000LL;
    ts->tv_nsec = at % 1000000000LL;
    struct io_uring_sqe *sqe = posd_sqe(d);
    if (*armed) {
        io_uring_prep_timeout_update(sqe, ts, (uint64_t)kind, IORING_TIMEOUT_ABS);
        io_uring_sqe_set_data64(sqe, EV_CANCEL);
    } else {
        io_uring_prep_timeout(sqe, ts, 0, IORING_TIMEOUT_ABS);
        io_uring_sqe_set_data64(sqe, (uint64_t)kind);
    }
    *armed = 1;
    *armed_at = at;
}

/* Arms the tick DELAY_NS from now, or brings an armed one forward when the core wants to
 * decide sooner than it would fire. */
void posd_arm_tick(struct posd *d, int64_t delay_ns)
{
    if (delay_ns >= 0)
        arm_timeout(d, EV_TICK, &tick_ts, &d->tick_armed, &d->tick_at, posd_now() + delay_ns);
}

void posd_arm_housekeeping(struct posd *d, int64_t at)
{
    if (at > 0)
        arm_timeout(d, EV_HOUSEKEEPING, &housekeeping_ts, &d->housekeeping_armed,
                    &d->housekeeping_at, at);
}
