/* posd's Prometheus endpoint ([metrics] listen, --metrics [ADDR:]PORT): libmicrohttpd in its
 * external-polling epoll mode, so that it runs on posd's own thread (posd's loop polls its
 * epoll descriptor and calls MHD_run when it is ready or its timeout is due), behind a listener
 * of posd's own, so that no one user can lock the endpoint up:
 * - posd accepts each connection itself (a watch of the loop), learns whose it is (the owner
 *   uid of a local peer's socket, sock_owner.c, since every local peer is 127.0.0.1; the
 *   address of a remote one), and closes it at once when that peer already holds
 *   POSD_METRICS_PEER_MAX connections or the endpoint POSD_METRICS_CONNECTIONS; the rest go to
 *   libmicrohttpd (MHD_add_connection). Left in the listen queue, as libmicrohttpd leaves them
 *   at its limit, one user's connections made every scrape wait behind them.
 * - each connection has a deadline: its whole request METRICS_REQUEST_NS after it came or
 *   after its last answer, its answer taken METRICS_ANSWER_NS after it asked; one past it is
 *   shut down, which libmicrohttpd sees as the peer's close. libmicrohttpd's own timeout
 *   (METRICS_IDLE_S) counts only silence, and a byte now and then reset it for ever.
 * A scrape reads the same statistics a STATS request does, rendered by metrics_text.c, with
 * the labels [metrics] labels asks for. */
#include <errno.h>

#include "sched/arm.h"
#include "sched/metrics.h"
#include "sched/metrics_text.h"
#include "sched/sock_owner.h"
#include "sched/stats.h"
#include "sched/watch.h"

#ifdef POS_NO_METRICS
/* A posd built without libmicrohttpd (the carried real-GPU build, tests/gpu/build.sh, links
 * only libc): --metrics says so. */
int posd_metrics_start(struct posd *d, const char *spec, const char *origin)
{
    posd_log(POSD_LOG_ERROR,
             "this posd was built without libmicrohttpd (POS_NO_METRICS): %s is not available; "
             "use posstat -o prom",
             origin);
    return -ENOTSUP;
}

int64_t posd_metrics_run(struct posd *d)
{
    return 0;
}

int posd_metrics_descriptors(void)
{
    return 0;
}

void posd_metrics_stop(struct posd *d)
{
}
#else
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>


#define METRICS_IDLE_S     2             /* silent this long: closed (libmicrohttpd's timeout) */
#define METRICS_REQUEST_NS 3000000000LL  /* a whole request within this (after the silence rule) */
#define METRICS_ANSWER_NS  10000000000LL /* an answer taken within this of its request */
#define METRICS_ACCEPTS    64 /* connections accepted per wake before posd's other work */
/* posd's own descriptors for the endpoint: the listener, libmicrohttpd's epoll, sock_diag's */
#define METRICS_OWN_FDS    3

static const char not_found[] = "posd serves /metrics only\n";

/* Whose a connection is: a local user (its socket's owner), or a remote address. */
struct peer {
    int is_uid;
    uid_t uid;
    unsigned char addr[16]; /* IPv4 in the first 4 bytes */
};

/* One connection of the endpoint, from its accept until libmicrohttpd has closed it. */
struct metrics_conn {
    int used;
    int fd;
    struct peer peer;
    int64_t deadline;        /* shut down then (CLOCK_MONOTONIC ns); 0 once shut down */
    const char *waiting_for; /* what the deadline is for, as the log says it */
};

static struct {
    struct MHD_Daemon *mhd;
    int listen_fd;
    int diag_fd; /* NETLINK_SOCK_DIAG, -1 without: local peers are then told apart by address */
    struct metrics_conn conns[POSD_METRICS_CONNECTIONS];
    struct metrics_conn *adding; /* the slot of the connection MHD_add_connection is adding */
} M = {.listen_fd = -1, .diag_fd = -1};

int posd_metrics_descriptors(void)
{
    return POSD_METRICS_CONNECTIONS + METRICS_OWN_FDS;
}

/* ---- peers -------------------------------------------------------------------------------- */

static int same_peer(const struct peer *a, const struct peer *b)
{
    return a->is_uid == b->is_uid &&
           (a->is_uid ? a->uid == b->uid : memcmp(a->addr, b->addr, sizeof a->addr) == 0);
}

static void describe(const struct peer *p, char *buf, size_t cap)
{
    if (p->is_uid) {
        snprintf(buf, cap, "uid %u", (unsigned)p->uid);
        return;
    }
    int v4 = memcmp(p->addr + 4, (const unsigned char[12]){0}, 12) == 0;
    char text[INET6_ADDRSTRLEN] = "?";
    inet_ntop(v4 ? AF_INET : AF_INET6, p->addr, text, sizeof text);
    snprintf(buf, cap, "address %s", text);
}

/* Who is at the other end of FD (accepted from SA). Returns 0, or -ECONNRESET when the peer
 * has closed its socket already (the kernel then keeps no owner, and it has nothing to say). */
static int identify(int fd, const struct sockaddr_storage *sa, struct peer *p)
{
    memset(p, 0, sizeof *p);
    if (M.diag_fd >= 0) {
        int rc = posd_sock_owner_of_peer(M.diag_fd, fd, &p->uid);
        if (rc == 0) {
            p->is_uid = 1;
            return 0;
        }
        if (rc == -ECONNRESET)
            return rc;
        if (rc != -ENOENT) /* a remote peer is ENOENT; anything else is worth a line */
            posd_log(POSD_LOG_WARN,
                     "metrics: cannot learn whose a local connection is (%s): counting it by "
                     "its address",
                     strerror(-rc));
    }
    if (sa->ss_family == AF_INET)
        memcpy(p->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    else
        memcpy(p->addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    return 0;
}

static int connections_of(const struct peer *p)
{
    int n = 0;
    for (int i = 0; i < POSD_METRICS_CONNECTIONS; i++)
        n += M.conns[i].used && same_peer(&M.conns[i].peer, p);
    return n;
}

static struct metrics_conn *free_slot(void)
{
    for (int i = 0; i < POSD_METRICS_CONNECTIONS; i++)
        if (!M.conns[i].used)
            return &M.conns[i];
    return NULL;
}

/* ---- connections -------------------------------------------------------------------------- */

/* Closes a connection posd refuses with a reset: no goodbye to wait for, and no TIME_WAIT
 * socket left on posd's side for each one a peer makes (thousands a second in a loop). */
static void refuse(int fd)
{
    struct linger now = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
    close(fd);
}

/* Takes FD (accepted from SA) into the endpoint, or closes it: its peer holds its limit (root's
 * are not counted, as on posd's socket), or the endpoint holds all it may. */
static void admit(struct posd *d, int fd, const struct sockaddr_storage *sa, socklen_t len)
{
    struct peer p;
    if (identify(fd, sa, &p) < 0) {
        refuse(fd);
        return;
    }
    char who[64];
    struct metrics_conn *c = free_slot();
    if (!c || (!(p.is_uid && p.uid == 0) && connections_of(&p) >= POSD_METRICS_PEER_MAX)) {
        describe(&p, who, sizeof who);
        if (c)
            posd_log(POSD_LOG_INFO,
                     "metrics: %s already holds %d connections, its limit: closing a new one", who,
                     POSD_METRICS_PEER_MAX);
        else
            posd_log(POSD_LOG_WARN,
                     "metrics: all %d connections are taken: closing a new one of %s",
                     POSD_METRICS_CONNECTIONS, who);
        refuse(fd);
        return;
    }
    *c = (struct metrics_conn){.used = 1,
                               .fd = fd,
                               .peer = p,
                               .deadline = posd_now() + METRICS_REQUEST_NS,
                               .waiting_for = "send its whole request"};
    M.adding = c;
    int added = MHD_add_connection(M.mhd, fd, (const struct sockaddr *)sa, len) == MHD_YES;
    /* on failure libmicrohttpd has closed FD, and freed the slot if it had taken it */
    if (!added && M.adding)
        c->used = 0;
    M.adding = NULL;
    if (added)
        posd_arm_housekeeping(d, c->deadline);
}

/* The listener is readable: accepts what is pending, METRICS_ACCEPTS at most before posd's
 * other work; out of descriptors or memory, it rests as posd's socket does. */
static int64_t accept_pending(struct posd *d, int fd, void *arg)
{
    for (int i = 0; i < METRICS_ACCEPTS; i++) {
        struct sockaddr_storage sa = {0}; /* filled by accept4 (zeroed for the analyzer) */
        socklen_t len = sizeof sa;
        int c = accept4(fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c >= 0) {
            admit(d, c, &sa, len);
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        if (errno == ECONNABORTED || errno == EINTR)
            continue;
        posd_log(POSD_LOG_WARN, "metrics: accept: %s: not accepting for %lld ms%s", strerror(errno),
                 POSD_ACCEPT_PAUSE_NS / 1000000,
                 errno == EMFILE ? " (raise posd's open-file limit, LimitNOFILE=)" : "");
        return posd_now() + POSD_ACCEPT_PAUSE_NS;
    }
    return 0;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = M.adding;
        M.adding = NULL;
    } else if (*socket_context) {
        ((struct metrics_conn *)*socket_context)->used = 0;
        *socket_context = NULL;
    }
}

static struct metrics_conn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

static void set_deadline(struct MHD_Connection *conn, int64_t in, const char *what)
{
    struct metrics_conn *c = conn_of(conn);
    if (c && c->deadline) {
        c->deadline = posd_now() + in;
        c->waiting_for = what;
    }
}

/* An answer was sent (or the request ended otherwise): the next request has its own time. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    set_deadline(conn, METRICS_REQUEST_NS, "send its next request");
}

/* Shuts down the connections past their deadline; returns the next deadline, or 0. */
static int64_t cut_overdue(int64_t now)
{
    int64_t next = 0;
    for (int i = 0; i < POSD_METRICS_CONNECTIONS; i++) {
        struct metrics_conn *c = &M.conns[i];
        if (!c->used || !c->deadline)
            continue;
        if (c->deadline > now) {
            next = !next || c->deadline < next ? c->deadline : next;
            continue;
        }
        char who[64];
        describe(&c->peer, who, sizeof who);
        posd_log(POSD_LOG_INFO, "metrics: a connection of %s did not %s in time: closing it", who,
                 c->waiting_for);
        shutdown(c->fd, SHUT_RDWR);
        c->deadline = 0;
    }
    return next;
}

/* ---- serving ------------------------------------------------------------------------------ */

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, char *text,
                                  size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, mode);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* The exposition of every client (the endpoint is the admin's to open: off by default,
 * loopback when only a port is given), or NULL when out of memory. */
static char *render(struct posd *d, size_t *len)
{
    static _Alignas(8) uint8_t buf[POS_MSG_MAX];
    size_t got = posd_stats_clients(d, buf, sizeof buf, 1, 0);
    const struct pos_stats_reply *r = (const struct pos_stats_reply *)buf;
    if (got < sizeof *r)
        return NULL;
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f)
        return NULL;
    int rc = posd_metrics_text(f, &r->dev, (const struct pos_client_stats *)(r + 1), r->nclients,
                               (enum pos_metrics_labels)d->cfg.metrics_labels);
    if (fclose(f) != 0 || rc < 0) {
        free(text);
        return NULL;
    }
    return text;
}

static enum MHD_Result serve(void *cls, struct MHD_Connection *conn, const char *url,
                             const char *method, const char *version, const char *upload,
                             size_t *upload_len, void **state)
{
    struct posd *d = cls;
    set_deadline(conn, METRICS_ANSWER_NS, "take its answer");
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, (char *)not_found,
                          sizeof not_found - 1, MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/metrics") != 0)
        return reply_text(conn, MHD_HTTP_NOT_FOUND, (char *)not_found, sizeof not_found - 1,
                          MHD_RESPMEM_PERSISTENT);
    size_t len = 0;
    char *text = render(d, &len);
    if (!text)
        return MHD_NO;
    return reply_text(conn, MHD_HTTP_OK, text, len, MHD_RESPMEM_MUST_FREE);
}

/* ---- the endpoint ------------------------------------------------------------------------- */

/* libmicrohttpd's messages go through posd's log, rate-limited like every line posd writes,
 * at debug: they are about single connections ("closed by remote side with incomplete
 * request", one per connection a peer or a deadline cut), which a peer makes as many of as it
 * likes, and posd's own lines say what it refused or cut and whose. */
static void log_mhd(void *cls, const char *fmt, va_list ap)
{
    char msg[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    posd_log(POSD_LOG_DEBUG, "metrics: libmicrohttpd: %s", msg);
}

/* A non-blocking TCP listener on SA, or -errno. */
static int listen_on(const struct sockaddr_storage *sa, socklen_t len)
{
    int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (sa->ss_family == AF_INET6) /* [::] is IPv6 only, as libmicrohttpd made it */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)sa, len) < 0 || listen(fd, SOMAXCONN) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

static void close_endpoint(void)
{
    if (M.mhd)
        MHD_stop_daemon(M.mhd);
    if (M.listen_fd >= 0)
        close(M.listen_fd);
    if (M.diag_fd >= 0)
        close(M.diag_fd);
    M.mhd = NULL;
    M.listen_fd = M.diag_fd = -1;
}

int posd_metrics_start(struct posd *d, const char *spec, const char *origin)
{
    struct sockaddr_storage sa;
    socklen_t len = posd_parse_listen(spec, &sa);
    if (!len) {
        posd_log(POSD_LOG_ERROR, "bad %s '%s': want PORT (on 127.0.0.1), ADDR:PORT or [ADDR6]:PORT",
                 origin, spec);
        return -EINVAL;
    }
    M.listen_fd = listen_on(&sa, len);
    if (M.listen_fd < 0) {
        int e = -M.listen_fd;
        posd_log(POSD_LOG_ERROR, "cannot serve metrics on %s: %s", spec, strerror(e));
        return -e;
    }
    M.diag_fd = posd_sock_owner_open();
    if (M.diag_fd < 0)
        posd_log(POSD_LOG_WARN,
                 "metrics: no sock_diag (%s): local users are told apart by address only, so "
                 "they share one limit of %d connections",
                 strerror(-M.diag_fd), POSD_METRICS_PEER_MAX);
    M.mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET, 0, NULL,
                             NULL, serve, d, MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)POSD_METRICS_CONNECTIONS,
                             MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_IDLE_S,
                             MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
                             MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    const union MHD_DaemonInfo *info =
        M.mhd ? MHD_get_daemon_info(M.mhd, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
    if (!info || posd_loop_watch(d, M.listen_fd, accept_pending, NULL) < 0) {
        close_endpoint();
        posd_log(POSD_LOG_ERROR, "cannot serve metrics on %s: libmicrohttpd did not start", spec);
        return -ENOTSUP;
    }
    d->metrics = M.mhd;
    d->metrics_fd = info->epoll_fd;
    snprintf(d->metrics_addr, sizeof d->metrics_addr, "%s", spec);
    return 0;
}

int64_t posd_metrics_run(struct posd *d)
{
    if (!d->metrics)
        return 0;
    MHD_run(d->metrics);
    int64_t now = posd_now(), next = cut_overdue(now);
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(d->metrics, &ms) == MHD_YES) {
        int64_t at = now + (int64_t)ms * 1000000LL + 1000000LL;
        next = !next || at < next ? at : next;
    }
    return next;
}

void posd_metrics_stop(struct posd *d)
{
    close_endpoint();
    d->metrics = NULL;
    d->metrics_fd = -1;
}
#endif
