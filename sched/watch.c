/* The descriptors other parts ask posd to watch (posd_loop_watch): telemetry's ring buffer and
 * timer, the metrics listener, the pod resolver's news, a profile save's end. Each has a poll
 * in the io_uring; the loop hands the completion back here (posd_watch_fire), and a part that
 * asked for a rest is armed again by housekeeping (posd_watch_wake). Below every part that
 * registers a watch, so that none calls up into the loop. */
#include <errno.h>
#include <poll.h>

#include "sched/arm.h"
#include "sched/watch.h"

struct watch {
    int fd;
    posd_watch_fn fn; /* NULL: a free slot (a watch once that fired) */
    void *arg;
    int once;
    int64_t resting_until; /* its part asked for a rest: armed again then (0: armed) */
};
static struct watch watches[POSD_MAX_WATCHES];
static int nwatches;
static int loop_running; /* the ring exists: a new watch is armed at once */

static void arm_watch(struct posd *d, int i)
{
    struct io_uring_sqe *sqe = posd_sqe(d);
    io_uring_prep_poll_add(sqe, watches[i].fd, POLLIN);
    io_uring_sqe_set_data64(sqe, posd_event_data(EV_WATCH, i, 0));
}

static int add_watch(struct posd *d, int fd, posd_watch_fn fn, void *arg, int once)
{
    int i = 0;
    while (i < nwatches && watches[i].fn)
        i++;
    if (i == POSD_MAX_WATCHES)
        return -ENOSPC;
    watches[i] = (struct watch){.fd = fd, .fn = fn, .arg = arg, .once = once};
    if (loop_running)
        arm_watch(d, i);
    if (i == nwatches)
        nwatches++;
    return 0;
}

int posd_loop_watch(struct posd *d, int fd, posd_watch_fn fn, void *arg)
{
    return add_watch(d, fd, fn, arg, 0);
}

int posd_loop_watch_once(struct posd *d, int fd, posd_watch_fn fn, void *arg)
{
    return add_watch(d, fd, fn, arg, 1);
}

void posd_watch_start(struct posd *d)
{
    loop_running = 1;
    for (int i = 0; i < nwatches; i++)
        if (watches[i].fn)
            arm_watch(d, i);
}

void posd_watch_stop(void)
{
    loop_running = 0;
}

/* A watched descriptor is readable (or failed): its part handles it, and the poll is armed
 * again, at once or when the rest its part asked for is over. */
void posd_watch_fire(struct posd *d, uint64_t data)
{
    int i = (int)((data >> 8) & 0xffffff);
    if (i >= nwatches || !watches[i].fn)
        return;
    struct watch w = watches[i];
    if (w.once)
        watches[i].fn = NULL; /* free before FN runs: it may watch something new */
    int64_t rest = w.fn(d, w.fd, w.arg);
    if (w.once) {
        /* gone */
    } else if (rest > 0) {
        watches[i].resting_until = rest;
        posd_arm_housekeeping(d, rest);
    } else if (!d->stop) {
        arm_watch(d, i);
    }
}

int64_t posd_watch_wake(struct posd *d, int64_t now)
{
    int64_t next = 0;
    for (int i = 0; i < nwatches; i++) {
        struct watch *w = &watches[i];
        if (!w->resting_until)
            continue;
        if (w->resting_until <= now) {
            w->resting_until = 0;
            if (!d->stop)
                arm_watch(d, i);
        } else if (!next || w->resting_until < next) {
            next = w->resting_until;
        }
    }
    return next;
}
