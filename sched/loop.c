/* posd's single event loop (liburing): accepts, client messages and hang-ups, kicks from
 * clients that wait for a grant, signals (signalfd: SIGHUP reloads, SIGTERM/SIGINT stop), the
 * scheduling tick, which is armed only while some client has work (an idle posd sleeps in
 * io_uring_wait_cqe and uses no CPU), the descriptors other parts watch (watch.c), and the
 * parking of kicks over their rate. It calls down only: a message to its handler
 * (handlers.c), clients and their ticks (clients.c), the reload (reload.c). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sched/arm.h"
#include "sched/bucket.h"
#include "sched/clients.h"
#include "sched/engine.h"
#include "sched/handlers.h"
#include "sched/loop.h"
#include "sched/metrics.h"
#include "sched/reload.h"
#include "sched/saver.h"
#include "sched/watch.h"

static struct signalfd_siginfo sig_buf;

static void arm_accept(struct posd *d)
{
    struct io_uring_sqe *sqe = posd_sqe(d);
    io_uring_prep_accept(sqe, d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, EV_ACCEPT);
}

static void arm_metrics(struct posd *d)
{
    struct io_uring_sqe *sqe = posd_sqe(d);
    io_uring_prep_poll_add(sqe, d->metrics_fd, POLLIN);
    io_uring_sqe_set_data64(sqe, EV_METRICS);
}

static void arm_signal(struct posd *d)
{
    struct io_uring_sqe *sqe = posd_sqe(d);
    io_uring_prep_read(sqe, d->signal_fd, &sig_buf, sizeof sig_buf, 0);
    io_uring_sqe_set_data64(sqe, EV_SIGNAL);
}

static void arm_recv(struct posd *d, struct posd_client *c)
{
    struct io_uring_sqe *sqe = posd_sqe(d);
    /* MSG_TRUNC: the result is the message's real length, so oversized ones are seen */
    io_uring_prep_recv(sqe, c->sock, c->rx, sizeof c->rx, MSG_TRUNC);
    io_uring_sqe_set_data64(sqe, posd_event_data(EV_CLIENT_RECV, (int)(c - d->clients), c->gen));
    c->pending++;
}

static void arm_kick(struct posd *d, struct posd_client *c)
{
    struct io_uring_sqe *sqe = posd_sqe(d);
    io_uring_prep_read(sqe, c->kick_fd, &c->kick.buf, sizeof c->kick.buf, 0);
    io_uring_sqe_set_data64(sqe, posd_event_data(EV_CLIENT_KICK, (int)(c - d->clients), c->gen));
    c->pending++;
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
    next = earliest(next, posd_watch_wake(d, now));
    next = earliest(next, posd_log_flush());
    next = earliest(next, posd_saver_periodic(d));
    next = earliest(next, posd_metrics_run(d)); /* its connections' timeouts */
    posd_arm_housekeeping(d, next);
}

static void on_accept(struct posd *d, int res)
{
    if (res >= 0) {
        struct posd_client *c = posd_client_new(d, res);
        if (c) {
            arm_recv(d, c);
            posd_arm_housekeeping(d, c->deadline);
        }
    } else if (res != -EINTR && res != -ECONNABORTED) {
        /* out of descriptors (EMFILE, ENFILE) or memory: the pending connection stays, and
         * an accept retried at once fails again at once */
        posd_log(POSD_LOG_WARN, "accept: %s: not accepting for %lld ms%s", strerror(-res),
                 POSD_ACCEPT_PAUSE_NS / 1000000,
                 res == -EMFILE ? " (raise posd's open-file limit, LimitNOFILE=)" : "");
        d->accept_paused_until = posd_now() + POSD_ACCEPT_PAUSE_NS;
        posd_arm_housekeeping(d, d->accept_paused_until);
        return;
    }
    if (!d->stop)
        arm_accept(d);
}

/* Moves whenever posd reads something of C's: a launch, a synchronisation, a completion. */
static uint64_t news_mark(const struct posd_client *c)
{
    return c->rings.sub_head + c->rings.sync_head + c->rings.done_head;
}

/* C's kicks wait WAIT: its kick read is not armed again until then. */
static void park_kicks(struct posd *d, struct posd_client *c, int64_t now, int64_t wait)
{
    c->kick.unpark_at = now + wait;
    c->kick.parked = 1;
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
        if (!c->kick.parked)
            continue;
        if (c->used && c->kick_fd >= 0 && now < c->kick.unpark_at) {
            next = earliest(next, c->kick.unpark_at);
            continue;
        }
        c->kick.parked = 0;
        d->kicks_parked--;
        if (!c->used || c->kick_fd < 0)
            continue;
        posd_bucket_take(&c->kick.any, now, POSD_KICK_BURST, POSD_KICK_PERIOD_NS);
        posd_bucket_take(&c->kick.idle, now, POSD_IDLE_KICK_BURST, POSD_IDLE_KICK_PERIOD_NS);
        uint64_t kicks;
        if (read(c->kick_fd, &kicks, sizeof kicks) < 0 && errno != EAGAIN)
            continue; /* its socket's hang-up closes it */
        c->kick.armed = 1;
        arm_kick(d, c);
    }
    return next;
}

static void tick(struct posd *d)
{
    int64_t now = posd_now();
    int64_t parked_due = d->kicks_parked ? unpark_kicks(d, now) : 0;
    posd_arm_tick(d, posd_clients_tick(d));
    /* a tick that came before a waiting client was due must not leave it waiting for good */
    if (parked_due)
        posd_arm_tick(d, parked_due > now ? parked_due - now : 0);
}

static void on_kick(struct posd *d, struct posd_client *c, int res)
{
    c->kick.armed = 0;
    if (res <= 0 || !c->used || c->kick_fd < 0) {
        tick(d);
        return;
    }
    int64_t now = posd_now();
    if (!posd_bucket_take(&c->kick.any, now, POSD_KICK_BURST, POSD_KICK_PERIOD_NS)) {
        park_kicks(d, c, now, c->kick.any.refilled_at + POSD_KICK_PERIOD_NS - now);
        return;
    }
    tick(d);
    if (!c->used || c->kick_fd < 0)
        return;
    /* news since its last kick, whichever wake-up read it (a tick for another client may have
     * read this client's rings before its kick was handled: that kick was not empty) */
    uint64_t mark = news_mark(c);
    if (mark != c->kick.mark) {
        c->kick.mark = mark;
        c->kick.park_ns = 0; /* it had news: not a flood of empty kicks */
    } else if (!posd_bucket_take(&c->kick.idle, now, POSD_IDLE_KICK_BURST, POSD_IDLE_KICK_PERIOD_NS)) {
        /* empty kicks over their rate: the next one waits, longer while they go on */
        int64_t wait = c->kick.park_ns ? c->kick.park_ns : POSD_IDLE_KICK_PERIOD_NS;
        c->kick.park_ns = 2 * wait < POSD_KICK_PARK_MAX_NS ? 2 * wait : POSD_KICK_PARK_MAX_NS;
        park_kicks(d, c, now, wait);
        return;
    } else if (c->kick.idle.tokens == POSD_IDLE_KICK_BURST - 1) {
        c->kick.park_ns = 0; /* quiet long enough to refill: no longer a flood */
    }
    c->kick.armed = 1;
    arm_kick(d, c);
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
    case EV_HOUSEKEEPING:
        d->housekeeping_armed = 0;
        housekeeping(d);
        break;
    case EV_METRICS:
        posd_arm_housekeeping(d, posd_metrics_run(d));
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
        if (c->registered && c->kick_fd >= 0 && !c->kick.armed && !c->kick.parked) {
            c->kick.armed = 1;
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
        posd_watch_fire(d, data);
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
    posd_arm_housekeeping(d, d->prof_save_at); /* the periodic save of kernel profiles */
    arm_signal(d);
    if (d->metrics)
        arm_metrics(d);
    posd_watch_start(d);
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
            if (d->close_asked) /* a part below the clients found some gone (telemetry) */
                posd_clients_close_asked(d);
            n++;
        }
        io_uring_cq_advance(&d->ring, n);
        posd_arm_housekeeping(d, posd_log_due()); /* suppressed lines get their summary in time */
    }
    for (int i = 0; i < POSD_MAX_CLIENTS; i++)
        if (d->clients[i].used)
            posd_engine_release(&d->clients[i]);
    posd_watch_stop();
    io_uring_queue_exit(&d->ring);
    return 0;
}
