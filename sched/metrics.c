/* posd's Prometheus endpoint (--metrics [ADDR:]PORT): libmicrohttpd in its external-polling
 * epoll mode, so that it runs on posd's own thread: posd's loop polls libmicrohttpd's epoll
 * descriptor through io_uring and calls MHD_run when it is ready (or when its timeout is due),
 * and a scrape reads the same statistics a STATS request does, rendered by metrics_text.c. */
#include <errno.h>

#include "sched/posd.h"

#ifdef POS_NO_METRICS
/* A posd built without libmicrohttpd (the carried real-GPU build, tests/gpu/build.sh, links
 * only libc): --metrics says so. */
int posd_metrics_start(struct posd *d, const char *spec)
{
    posd_log(POSD_LOG_ERROR, "this posd was built without libmicrohttpd (POS_NO_METRICS): "
                             "--metrics is not available; use posstat -o prom");
    return -ENOTSUP;
}

int64_t posd_metrics_run(struct posd *d)
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/metrics_text.h"

#define METRICS_CONN_LIMIT 16
#define METRICS_TIMEOUT_S  5 /* an idle or slow scraper is dropped after this */

static const char not_found[] = "posd serves /metrics only\n";

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
    size_t got = posd_engine_stats(d, buf, sizeof buf, 1, 0);
    const struct pos_stats_reply *r = (const struct pos_stats_reply *)buf;
    if (got < sizeof *r)
        return NULL;
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f)
        return NULL;
    int rc = posd_metrics_text(f, &r->dev, (const struct pos_client_stats *)(r + 1), r->nclients);
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

/* "PORT" (loopback), "ADDR:PORT" or "[ADDR6]:PORT" into *SA. Returns its size, or 0. */
static socklen_t parse_listen(const char *spec, struct sockaddr_storage *sa)
{
    char host[64] = "127.0.0.1";
    const char *port = spec, *colon = strrchr(spec, ':');
    if (colon) {
        const char *h = spec;
        size_t n = (size_t)(colon - spec);
        if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
            h++;
            n -= 2;
        }
        if (n == 0 || n >= sizeof host)
            return 0;
        memcpy(host, h, n);
        host[n] = '\0';
        port = colon + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (!*port || *end || p < 1 || p > 65535)
        return 0;
    memset(sa, 0, sizeof *sa);
    struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
        return sizeof *v4;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
        return sizeof *v6;
    }
    return 0;
}

int posd_metrics_start(struct posd *d, const char *spec)
{
    struct sockaddr_storage sa;
    if (!parse_listen(spec, &sa)) {
        posd_log(POSD_LOG_ERROR,
                 "bad --metrics '%s': want PORT (on 127.0.0.1), ADDR:PORT or [ADDR6]:PORT", spec);
        return -EINVAL;
    }
    unsigned flags =
        MHD_USE_EPOLL | MHD_USE_ERROR_LOG | (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    struct MHD_Daemon *m = MHD_start_daemon(
        flags, 0, NULL, NULL, serve, d, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_CONN_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)METRICS_TIMEOUT_S, MHD_OPTION_END);
    if (!m) {
        int e = errno ? errno : EADDRINUSE;
        posd_log(POSD_LOG_ERROR, "cannot serve metrics on %s: %s", spec, strerror(e));
        return -e;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info) {
        MHD_stop_daemon(m);
        posd_log(POSD_LOG_ERROR, "cannot serve metrics: libmicrohttpd has no epoll descriptor");
        return -ENOTSUP;
    }
    d->metrics = m;
    d->metrics_fd = info->epoll_fd;
    snprintf(d->metrics_addr, sizeof d->metrics_addr, "%s", spec);
    return 0;
}

int64_t posd_metrics_run(struct posd *d)
{
    if (!d->metrics)
        return 0;
    MHD_run(d->metrics);
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(d->metrics, &ms) != MHD_YES)
        return 0;
    return posd_now() + (int64_t)ms * 1000000LL + 1000000LL;
}

void posd_metrics_stop(struct posd *d)
{
    if (d->metrics)
        MHD_stop_daemon(d->metrics);
    d->metrics = NULL;
    d->metrics_fd = -1;
}
#endif
