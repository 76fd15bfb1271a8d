/* posstat: posd's monitoring tool, in the manner of pidstat and nvidia-smi dmon. This file owns
 * the command line, the STATS request on posd's socket and the interval loop with its
 * Average: block; what a report says and how it looks is tools/posstat_format.c. */
#include "tools/posstat_format.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define REPLY_TIMEOUT_S 5 /* a posd that takes longer is wedged; say so rather than hang */
#define INTERVAL_MIN_S  0.001
#define INTERVAL_MAX_S  86400.0

static void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

static void die(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("posstat: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(status);
}

/* --- options ----------------------------------------------------------------------------- */

struct output_format {
    const char *name;
    const char *separator; /* printed between two reports */
    int (*render)(FILE *out, const struct posstat_report *r);
    int (*render_unmanaged)(FILE *out, const struct posstat_report *r); /* -u */
};

static const struct output_format output_formats[] = {
    {"text", "\n", posstat_render_text, posstat_render_unmanaged_text},
    {"json", "", posstat_render_json, posstat_render_json},
};

struct options {
    const char *socket;
    const struct output_format *format;
    double interval_s;   /* 0: one report of totals */
    unsigned long count; /* reports; 0: until interrupted */
    int unmanaged;       /* -u: the processes using the GPU without the shim */
};

static const char usage_text[] =
    "usage: posstat [-s SOCKET] [-o text|json] [-u] [interval [count]]\n"
    "Shows what posd is scheduling: the device, then one line per client (docs/posstat.md).\n"
    "Without an interval it prints totals since each client registered and exits. With one,\n"
    "it prints rates over each interval (seconds, fractional allowed), COUNT times or until\n"
    "interrupted, then an Average: block over all intervals.\n"
    "  -s, --socket SOCKET  posd's socket (default $POS_SOCKET, else " POS_DEFAULT_SOCKET ")\n"
    "  -o, --output FORMAT  text (default) or json: one JSON object per line\n"
    "  -u, --unmanaged      processes using the GPU without the shim (eBPF telemetry)\n"
    "  -h, --help           this text\n";

static const struct option long_options[] = {
    {"socket", required_argument, NULL, 's'},
    {"output", required_argument, NULL, 'o'},
    {"unmanaged", no_argument, NULL, 'u'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static const struct output_format *find_format(const char *name)
{
    for (size_t i = 0; i < sizeof output_formats / sizeof output_formats[0]; i++)
        if (strcasecmp(output_formats[i].name, name) == 0)
            return &output_formats[i];
    die(2, "unknown output format '%s' (want text or json)", name);
}

static double parse_interval(const char *s)
{
    /* A digit or '.' first: no sign, blank, "inf" or "nan". */
    int number = isdigit((unsigned char)s[0]) || s[0] == '.';
    char *end = NULL;
    errno = 0;
    double v = number ? strtod(s, &end) : 0.0;
    if (!end || errno || *end || !(v >= INTERVAL_MIN_S && v <= INTERVAL_MAX_S))
        die(2, "bad interval '%s' (want seconds from %g to %g; see --help)", s, INTERVAL_MIN_S,
            INTERVAL_MAX_S);
    return v;
}

static unsigned long parse_count(const char *s)
{
    char *end = NULL;
    errno = 0;
    unsigned long v = isdigit((unsigned char)s[0]) ? strtoul(s, &end, 10) : 0;
    if (!end || errno || *end || v == 0)
        die(2, "bad count '%s' (want a whole number of reports >= 1; see --help)", s);
    return v;
}

static void parse_options(int argc, char **argv, struct options *o)
{
    const char *env = getenv("POS_SOCKET");
    *o = (struct options){.socket = env && *env ? env : POS_DEFAULT_SOCKET,
                          .format = &output_formats[0]};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":s:o:uh", long_options, NULL)) != -1) {
        switch (c) {
        case 's':
            o->socket = optarg;
            break;
        case 'o':
            o->format = find_format(optarg);
            break;
        case 'u':
            o->unmanaged = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            exit(0);
        case ':':
            die(2, "option '%s' needs a value (see --help)", argv[optind - 1]);
        default:
            die(2, "bad option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        o->interval_s = parse_interval(argv[optind++]);
    if (optind < argc)
        o->count = parse_count(argv[optind++]);
    if (optind < argc)
        die(2, "unexpected argument '%s' (see --help)", argv[optind]);
    if (!*o->socket || strlen(o->socket) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        die(2, "bad socket path '%s' (want 1 to %zu bytes)", o->socket,
            sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
}

/* --- asking posd -------------------------------------------------------------------------- */

static const struct {
    int err;
    const char *hint;
} connect_hints[] = {
    {EACCES, "may this user use it? see posd's socket group"},
    {EPERM, "may this user use it? see posd's socket group"},
    {EAGAIN, "posd is not accepting connections; is it wedged?"},
};

static const char *connect_hint(int err)
{
    for (size_t i = 0; i < sizeof connect_hints / sizeof connect_hints[0]; i++)
        if (connect_hints[i].err == err)
            return connect_hints[i].hint;
    return "is posd running?";
}

static double wall_time(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One STATS request on a connection of its own. Returns 0, or -1 with ERR filled. */
static int ask_posd(int fd, const char *path, struct posstat_snapshot *snap, char *err,
                    size_t errlen)
{
    static _Alignas(8) unsigned char reply[POS_MSG_MAX];
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    struct timeval timeout = {.tv_sec = REPLY_TIMEOUT_S};

    memcpy(addr.sun_path, path, strlen(path) + 1);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot connect to %s: %s (%s)", path, strerror(e), connect_hint(e));
        return -1;
    }
    const struct pos_msg_hdr req = {.magic = POS_PROTO_MAGIC,
                                    .version = POS_PROTO_VERSION,
                                    .type = POS_MSG_STATS_REQ,
                                    .len = 0};
    ssize_t n;
    do
        n = send(fd, &req, sizeof req, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof req) {
        snprintf(err, errlen, "cannot send the request to posd at %s: %s", path,
                 n < 0 ? strerror(errno) : "short send");
        return -1;
    }
    /* MSG_TRUNC: the whole message's length, so that an oversized one is not taken cut. */
    do
        n = recv(fd, reply, sizeof reply, MSG_TRUNC);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        snprintf(err, errlen, "no reply from posd at %s within %d s", path, REPLY_TIMEOUT_S);
    else if (n < 0)
        snprintf(err, errlen, "cannot read posd's reply on %s: %s", path, strerror(errno));
    else if (n == 0)
        snprintf(err, errlen, "posd at %s closed the connection without a reply", path);
    else if ((size_t)n > sizeof reply)
        snprintf(err, errlen, "bad reply from posd: %zd bytes, more than the %d a message may have",
                 n, POS_MSG_MAX);
    else if (posstat_parse_reply(reply, (size_t)n, snap, err, errlen) == 0) {
        snap->time = wall_time();
        return 0;
    }
    return -1;
}

static int take_snapshot(const char *path, struct posstat_snapshot *snap)
{
    char err[512];
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "posstat: cannot create a socket: %s\n", strerror(errno));
        return -1;
    }
    int rc = ask_posd(fd, path, snap, err, sizeof err);
    close(fd);
    if (rc < 0)
        fprintf(stderr, "posstat: %s\n", err);
    return rc;
}

/* --- reports ------------------------------------------------------------------------------ */

static int emit(const struct options *o, const struct posstat_report *r, int first)
{
    if (!first)
        fputs(o->format->separator, stdout);
    int (*render)(FILE *, const struct posstat_report *) =
        o->unmanaged ? o->format->render_unmanaged : o->format->render;
    if (render(stdout, r) < 0 || fflush(stdout) != 0) {
        fprintf(stderr, "posstat: cannot write the report: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

static int report_once(const struct options *o)
{
    struct posstat_snapshot snap;
    struct posstat_report r;
    if (take_snapshot(o->socket, &snap) < 0)
        return 1;
    int rc = posstat_report_build(&r, NULL, &snap, POSSTAT_TOTAL);
    posstat_snapshot_free(&snap);
    if (rc < 0)
        die(1, "out of memory");
    rc = emit(o, &r, 1);
    posstat_report_free(&r);
    return rc < 0;
}

static int64_t monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Sleeps until DEADLINE (CLOCK_MONOTONIC ns). Returns 1 when one of STOP (blocked signals)
 * came first. Waiting in sigtimedwait leaves no gap for a signal to slip through. */
static int stopped_before(const sigset_t *stop, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - monotonic_ns();
        if (left < 0)
            left = 0;
        struct timespec t = {.tv_sec = left / 1000000000, .tv_nsec = left % 1000000000};
        if (sigtimedwait(stop, NULL, &t) > 0)
            return 1;
        if (errno != EINTR)
            return 0;
    }
}

static int report_every(const struct options *o)
{
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, NULL);

    struct posstat_snapshot first, last, cur;
    struct posstat_average avg = {0};
    struct posstat_report r;
    int have_last = 0, status = 0;
    if (take_snapshot(o->socket, &first) < 0)
        return 1;
    const int64_t interval_ns = (int64_t)(o->interval_s * 1e9);
    int64_t next = monotonic_ns();
    for (unsigned long k = 0; !o->count || k < o->count; k++) {
        next += interval_ns;
        if (stopped_before(&stop, next))
            break;
        /* Late (a slow posd, a stopped posstat): the next interval starts now, no burst. */
        int64_t now = monotonic_ns();
        if (now > next)
            next = now;
        if (take_snapshot(o->socket, &cur) < 0) {
            status = 1;
            break;
        }
        if (posstat_report_build(&r, have_last ? &last : &first, &cur, POSSTAT_INTERVAL) < 0 ||
            posstat_average_add(&avg, &r) < 0)
            die(1, "out of memory");
        if (have_last)
            posstat_snapshot_free(&last);
        last = cur;
        have_last = 1;
        int rc = emit(o, &r, k == 0);
        posstat_report_free(&r);
        if (rc < 0)
            return 1;
    }
    if (have_last) {
        if (posstat_average_report(&r, &avg, &first, &last) < 0)
            die(1, "out of memory");
        if (emit(o, &r, 0) < 0)
            status = 1;
        posstat_report_free(&r);
        posstat_snapshot_free(&last);
    }
    posstat_snapshot_free(&first);
    posstat_average_free(&avg);
    return status;
}

int main(int argc, char **argv)
{
    struct options o;
    parse_options(argc, argv, &o);
    return o.interval_s > 0 ? report_every(&o) : report_once(&o);
}
