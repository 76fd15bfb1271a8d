/* posd's single event loop (liburing): accepts, client messages and hang-ups, kicks from
 * clients that wait for a grant, signals (signalfd: SIGHUP reloads, SIGTERM/SIGINT stop), the
 * scheduling tick, which is armed only while some client has work (an idle posd sleeps in
 * io_uring_wait_cqe and uses no CPU), and the descriptors other parts watch
 * (posd_loop_watch). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sched/posd.h"

static struct signalfd_siginfo sig_buf;
static struct __kernel_timespec tick_ts, house_ts;

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

static uint64_t ud(int kind, int slot, uint32_t gen)
{
    return (uint64_t)kind | ((uint64_t)slot << 8) | ((uint64_t)gen << 32);
}

static struct io_uring_sqe *sqe_get(struct posd *d)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
    if (!sqe) {
        io_uring_submit(&d->ring);
        sqe = io_uring_get_sqe(&d->ring);
    }
    return sqe;
}

static void arm_accept(struct posd *d)
{
    struct io_uring_sqe *sqe = sqe_get(d);
    io_uring_prep_accept(sqe, d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, EV_ACCEPT);
}

static void arm_metrics(struct posd *d)
{
    struct io_uring_sqe *sqe = sqe_get(d);
    io_uring_prep_poll_add(sqe, d->metrics_fd, POLLIN);
    io_uring_sqe_set_data64(sqe, EV_METRICS);
}

static void arm_signal(struct posd *d)
{
    struct io_uring_sqe *sqe = sqe_get(d);
    io_uring_prep_read(sqe, d->signal_fd, &sig_buf, sizeof sig_buf, 0);
    io_uring_sqe_set_data64(sqe, EV_SIGNAL);
}

static void arm_watch(struct posd *d, int i)
{
    struct io_uring_sqe *sqe = sqe_get(d);
    io_uring_prep_poll_add(sqe, watches[i].fd, POLLIN);
    io_uring_sqe_set_data64(sqe, ud(EV_WATCH, i, 0));
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

/* A watched descriptor is readable (or failed): its part handles it, and the poll is armed
 * again, at once or when the rest its part asked for is over. */
static void on_watch(struct posd *d, uint64_t data)
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
        posd_arm_house(d, rest);
    } else if (!d->stop) {
        arm_watch(d, i);
    }
}

/* Arms the watches whose rest is over; returns when the next one's is, or 0. */
static int64_t wake_watches(struct posd *d, int64_t now)
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

static void arm_recv(struct posd *d, struct posd_client *c)
{
    struct io_uring_sqe *sqe = sqe_get(d);
    /* MSG_TRUNC: the result is the message's real length, so oversized ones are seen */
    io_uring_prep_recv(sqe, c->sock, c->rx, sizeof c->rx, MSG_TRUNC);
    io_uring_sqe_set_data64(sqe, ud(EV_CLIENT_RECV, (int)(c - d->clients), c->gen));
    c->pending++;
}

static void arm_kick(struct posd *d, struct posd_client *c)
{
    struct io_uring_sqe *sqe = sqe_get(d);
    io_uring_prep_read(sqe, c->kick_fd, &c->kick_buf, sizeof c->kick_buf, 0);
    io_uring_sqe_set_data64(sqe, ud(EV_CLIENT_KICK, (int)(c - d->clients), c->gen));
    c->pending++;
}

/* Arms the timeout KIND at AT (absolute CLOCK_MONOTONIC), or brings an armed one forward. */
static void arm_timeout(struct posd *d, int kind, struct __kernel_timespec *ts, int *armed,
                        int64_t *armed_at, int64_t at)
{
    if (*armed && at >= *armed_at)
        return;
    ts->tv_sec = at / 1000000000LL;
    ts->tv_nsec = at % 1000000000LL;
    struct io_uring_sqe *sqe = sqe_get(d);
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

void posd_arm_house(struct posd *d, int64_t at)
{
    if (at > 0)
        arm_timeout(d, EV_HOUSE, &house_ts, &d->house_armed, &d->house_at, at);
}

static int64_t earliest(int64_t a, int64_t b)
{
    return !a ? b : !b ? a : a < b ? a : b;
}

/* Connection deadlines, a paused accept, the log's summaries: what is due is done, and the
 * timeout is armed for what is next. */
static void housekeeping(struct posd *d)
{
    int64_t now = posd_now();
    int64_t next = posd_clients_expire(d, now);
    if (d->accept_paused_until && d->accept_paused_until <= now) {
        d->accept_paused_until = 0;
        if (!d->stop)
            arm_accept(d);
    }
    next = earliest(next, d->accept_paused_until);
    next = earliest(next, wake_watches(d, now));
    next = earliest(next, posd_log_flush());
    next = earliest(next, posd_saver_periodic(d));
    next = earliest(next, posd_metrics_run(d)); /* its connections' timeouts */
    posd_arm_house(d, next);
}

static void on_accept(struct posd *d, int res)
{
    if (res >= 0) {
        struct posd_client *c = posd_client_new(d, res);
        if (c) {
            arm_recv(d, c);
            posd_arm_house(d, c->deadline);
        }
    } else if (res != -EINTR && res != -ECONNABORTED) {
        /* out of descriptors (EMFILE, ENFILE) or memory: the pending connection stays, and
         * an accept retried at once fails again at once */
        posd_log(POSD_LOG_WARN, "accept: %s: not accepting for %lld ms%s", strerror(-res),
                 POSD_ACCEPT_PAUSE_NS / 1000000,
                 res == -EMFILE ? " (raise posd's open-file limit, LimitNOFILE=)" : "");
        d->accept_paused_until = posd_now() + POSD_ACCEPT_PAUSE_NS;
        posd_arm_house(d, d->accept_paused_until);
        return;
    }
    if (!d->stop)
        arm_accept(d);
}

/* Moves whenever posd reads something of C's: a launch, a synchronisation, a completion. */
static uint64_t news_mark(const struct posd_client *c)
{
    return c->sub_head + c->sync_head + c->done_head;
}

/* C's kicks wait WAIT: its kick read is not armed again until then. */
static void park_kicks(struct posd *d, struct posd_client *c, int64_t now, int64_t wait)
{
    c->kick_unpark_at = now + wait;
    c->kick_parked = 1;
    d->kicks_parked++;
    posd_arm_tick(d, wait);
}

/* Clients whose kicks waited, once they are due: this tick is their kick's decision. Their
 * eventfd is cleared before the decision reads their rings (the kicks so far are news it
 * hears), and the read armed again hears any kick after. Returns when the first client still
 * waiting is due, or 0 when none is. */
static int64_t unpark_kicks(struct posd *d, int64_t now)
{
    int64_t next = 0;
    for (int i = 0; i < POSD_MAX_CLIENTS && d->kicks_parked; i++) {
        struct posd_client *c = &d->clients[i];
        if (!c->kick_parked)
            continue;
        if (c->used && c->kick_fd >= 0 && now < c->kick_unpark_at) {
            next = earliest(next, c->kick_unpark_at);
            continue;
        }
        c->kick_parked = 0;
        d->kicks_parked--;
        if (!c->used || c->kick_fd < 0)
            continue;
        posd_bucket_take(&c->kick_any, now, POSD_KICK_BURST, POSD_KICK_PERIOD_NS);
        posd_bucket_take(&c->kick_idle, now, POSD_IDLE_KICK_BURST, POSD_IDLE_KICK_PERIOD_NS);
        uint64_t kicks;
        if (read(c->kick_fd, &kicks, sizeof kicks) < 0 && errno != EAGAIN)
            continue; /* its socket's hang-up closes it */
        c->kick_armed = 1;
        arm_kick(d, c);
    }
    return next;
}

static void tick(struct posd *d)
{
    int64_t now = posd_now();
    int64_t parked_due = d->kicks_parked ? unpark_kicks(d, now) : 0;
    posd_arm_tick(d, posd_engine_tick(d));
    /* a tick that came before a waiting client was due must not leave it waiting for good */
    if (parked_due)
        posd_arm_tick(d, parked_due > now ? parked_due - now : 0);
}

static void on_kick(struct posd *d, struct posd_client *c, int res)
{
    c->kick_armed = 0;
    if (res <= 0 || !c->used || c->kick_fd < 0) {
        tick(d);
        return;
    }
    int64_t now = posd_now();
    if (!posd_bucket_take(&c->kick_any, now, POSD_KICK_BURST, POSD_KICK_PERIOD_NS)) {
        park_kicks(d, c, now, c->kick_any.refilled_at + POSD_KICK_PERIOD_NS - now);
        return;
    }
    tick(d);
    if (!c->used || c->kick_fd < 0)
        return;
    /* news since its last kick, whichever wake-up read it (a tick for another client may have
     * read this client's rings before its kick was handled: that kick was not empty) */
    uint64_t mark = news_mark(c);
    if (mark != c->kick_mark) {
        c->kick_mark = mark;
        c->kick_park_ns = 0; /* it had news: not a flood of empty kicks */
    } else if (!posd_bucket_take(&c->kick_idle, now, POSD_IDLE_KICK_BURST, POSD_IDLE_KICK_PERIOD_NS)) {
        /* empty kicks over their rate: the next one waits, longer while they go on */
        int64_t wait = c->kick_park_ns ? c->kick_park_ns : POSD_IDLE_KICK_PERIOD_NS;
        c->kick_park_ns = 2 * wait < POSD_KICK_PARK_MAX_NS ? 2 * wait : POSD_KICK_PARK_MAX_NS;
        park_kicks(d, c, now, wait);
        return;
    } else if (c->kick_idle.tokens == POSD_IDLE_KICK_BURST - 1) {
        c->kick_park_ns = 0; /* quiet long enough to refill: no longer a flood */
    }
    c->kick_armed = 1;
    arm_kick(d, c);
}

int posd_reload(struct posd *d, char *err, size_t errlen)
{
    struct posd_config fresh;
    char why[512];
    posd_config_defaults(&fresh);
    if (posd_config_load(d->config_path, d->config_optional, d->dropin_dir, &fresh, why,
                         sizeof why) < 0) {
        snprintf(err, errlen, "reload refused, keeping the running configuration: %s", why);
        posd_log(POSD_LOG_ERROR, "%s", err);
        posd_config_free(&fresh);
        return -EINVAL;
    }
    if (d->policy_override[0])
        snprintf(fresh.policy, sizeof fresh.policy, "%s", d->policy_override);
    const struct pos_policy_ops *p = pos_policy_find(fresh.policy);
    if (!p) {
        snprintf(err, errlen, "reload refused: unknown policy '%s'", fresh.policy);
        posd_log(POSD_LOG_ERROR, "%s", err);
        posd_config_free(&fresh);
        return -EINVAL;
    }
    struct sched_params params;
    posd_engine_params(&fresh, &params);
    struct pos_policy_args args;
    struct pos_schedule *sched = posd_policy_args(&fresh, &d->device, p, &args);
    if (sched_core_set_policy(d->core, p, &args, &params) < 0) {
        snprintf(err, errlen, "reload refused: policy %s could not start", p->name);
        posd_log(POSD_LOG_ERROR, "%s", err);
        posd_schedule_close(sched);
        posd_config_free(&fresh);
        return -ENOMEM;
    }
    posd_schedule_close(d->schedule); /* the core follows the new one */
    d->schedule = sched;
    posd_config_free(&d->cfg);
    d->cfg = fresh;
    d->policy = p;
    posd_set_log_level(d->cfg.log_level);
    posd_lookup_stats_group(d);
    posd_clients_reconfigure(d);
    snprintf(err, errlen, "configuration reloaded: policy %s, %zu rules", p->name, d->cfg.nrules);
    posd_log(POSD_LOG_INFO, "%s", err);
    posd_shares_check(d);
    tick(d);
    return 0;
}

static void on_signal(struct posd *d)
{
    char msg[600];
    switch (sig_buf.ssi_signo) {
    case SIGHUP:
        posd_reload(d, msg, sizeof msg);
        break;
    case SIGTERM:
    case SIGINT:
        posd_log(POSD_LOG_INFO, "signal %u: exiting", sig_buf.ssi_signo);
        d->stop = 1;
        break;
    default:
        break;
    }
}

static struct posd_client *client_of(struct posd *d, uint64_t data)
{
    unsigned slot = (unsigned)((data >> 8) & 0xffffff);
    uint32_t gen = (uint32_t)(data >> 32);
    if (slot >= POSD_MAX_CLIENTS)
        return NULL;
    struct posd_client *c = &d->clients[slot];
    c->pending--;
    return c->used && c->gen == gen ? c : NULL;
}

static void handle(struct posd *d, uint64_t data, int res)
{
    struct posd_client *c;
    switch (data & 0xff) {
    case EV_ACCEPT:
        on_accept(d, res);
        break;
    case EV_SIGNAL:
        if (res == (int)sizeof sig_buf)
            on_signal(d);
        if (!d->stop)
            arm_signal(d);
        break;
    case EV_TICK:
        d->tick_armed = 0;
        tick(d);
        break;
    case EV_HOUSE:
        d->house_armed = 0;
        housekeeping(d);
        break;
    case EV_METRICS:
        posd_arm_house(d, posd_metrics_run(d));
        if (!d->stop)
            arm_metrics(d);
        break;
    case EV_CLIENT_RECV:
        c = client_of(d, data);
        if (!c)
            break;
        if (res <= 0) {
            posd_client_close(d, c, res == 0 ? NULL : "socket error");
            tick(d); /* its share is free at once */
            break;
        }
        if (posd_client_message(d, c, (size_t)res) < 0) {
            posd_client_close(d, c, c->registered ? "broke the protocol" : NULL);
            tick(d);
            break;
        }
        if (c->registered && c->kick_fd >= 0 && !c->kick_armed && !c->kick_parked) {
            c->kick_armed = 1;
            arm_kick(d, c);
        }
        arm_recv(d, c);
        tick(d); /* a new client starts the clock */
        break;
    case EV_CLIENT_KICK:
        c = client_of(d, data);
        if (c)
            on_kick(d, c, res);
        break;
    case EV_WATCH:
        on_watch(d, data);
        break;
    default:
        break;
    }
}

static void loop_signals(sigset_t *mask)
{
    sigemptyset(mask);
    sigaddset(mask, SIGHUP);
    sigaddset(mask, SIGTERM);
    sigaddset(mask, SIGINT);
}

void posd_block_signals(void)
{
    sigset_t mask;
    loop_signals(&mask);
    sigprocmask(SIG_BLOCK, &mask, NULL);
}

int posd_loop(struct posd *d)
{
    sigset_t mask;
    loop_signals(&mask);
    posd_block_signals();
    signal(SIGPIPE, SIG_IGN);
    d->signal_fd = signalfd(-1, &mask, SFD_CLOEXEC);
    if (d->signal_fd < 0) {
        int e = errno;
        posd_log(POSD_LOG_ERROR, "signalfd: %s", strerror(e));
        return -e;
    }
    int rc = io_uring_queue_init(256, &d->ring, 0);
    if (rc < 0) {
        posd_log(POSD_LOG_ERROR, "io_uring: %s", strerror(-rc));
        return rc;
    }
    arm_accept(d);
    posd_arm_house(d, d->prof_save_at); /* the periodic save of kernel profiles */
    arm_signal(d);
    if (d->metrics)
        arm_metrics(d);
    loop_running = 1;
    for (int i = 0; i < nwatches; i++)
        if (watches[i].fn)
            arm_watch(d, i);
    while (!d->stop) {
        io_uring_submit(&d->ring);
        struct io_uring_cqe *cqe;
        rc = io_uring_wait_cqe(&d->ring, &cqe);
        if (rc == -EINTR)
            continue;
        if (rc < 0) {
            posd_log(POSD_LOG_ERROR, "io_uring_wait_cqe: %s", strerror(-rc));
            break;
        }
        unsigned head, n = 0;
        io_uring_for_each_cqe(&d->ring, head, cqe)
        {
            handle(d, cqe->user_data, cqe->res);
            n++;
        }
        io_uring_cq_advance(&d->ring, n);
        posd_arm_house(d, posd_log_due()); /* suppressed lines get their summary in time */
    }
    for (int i = 0; i < POSD_MAX_CLIENTS; i++)
        if (d->clients[i].used)
            posd_engine_release(&d->clients[i]);
    loop_running = 0;
    io_uring_queue_exit(&d->ring);
    return 0;
}
