/* posstat: posd's monitoring tool, in the manner of pidstat and nvidia-smi dmon. This file owns
 * the command line, the STATS request on posd's socket and the interval loop with its
 * Average: block; what a report says and how it looks is tools/posstat_format.c. */
#include "tools/posclient.h"
#include "tools/posstat_format.h"
#include "tools/posstat_nvml.h"
#include "sched/metrics_text.h"

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

#define INTERVAL_MIN_S 0.001
#define INTERVAL_MAX_S 86400.0

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
    /* a format of posd's counters as they are (no rates, no interval), instead of render */
    int (*render_snapshot)(FILE *out, const struct posstat_snapshot *s);
    int (*render_unmanaged)(FILE *out, const struct posstat_report *r); /* -u */
};

/* -o prom: the text posd's --metrics endpoint serves (sched/metrics_text.c) */
static int render_prom(FILE *out, const struct posstat_snapshot *s)
{
    return posd_metrics_text(out, &s->dev, s->clients, s->nclients, POS_METRICS_LABELS_FULL);
}

static const struct output_format output_formats[] = {
    {"text", "\n", posstat_render_text, NULL, posstat_render_unmanaged_text},
    {"json", "", posstat_render_json, NULL, posstat_render_json},
    {"prom", "", NULL, render_prom, NULL},
};

#define MAX_PIDS 64

struct options {
    const char *socket;
    const struct output_format *format;
    double interval_s;   /* 0: one report of totals */
    unsigned long count; /* reports; 0: until interrupted */
    /* views: what each report shows */
    unsigned show;  /* POSSTAT_SHOW_* (-d, -a); 0: both */
    int epoch_time; /* -H */
    int live;       /* -t: redraw in place */
    int npids;      /* -p: only these clients */
    int32_t pids[MAX_PIDS];
    int unmanaged; /* -u: the processes using the GPU without the shim */
    int kernels;   /* -k: posd's kernel profiles */
};

static const char usage_text[] =
    "usage: posstat [-d] [-a] [-u] [-k] [-p PID[,PID...]] [-H] [-t] [-s SOCKET] [-o text|json|prom]\n"
    "               [interval [count]]\n"
    "Shows what posd is scheduling: the device, then one line per client (docs/posstat.md).\n"
    "Without an interval it prints totals since each client registered and exits. With one,\n"
    "it prints rates over each interval (seconds, fractional allowed), COUNT times or until\n"
    "interrupted, then an Average: block over all intervals.\n"
    "  -d, --devices        the device block only\n"
    "  -a, --apps           the clients (apps) block only (default: both blocks)\n"
    "  -p, --pid PID,...    only these client processes\n"
    "  -H, --epoch          text: the time column in seconds since the epoch\n"
    "  -t, --top            live: redraw the screen in place every interval (default 1 s)\n"
    "  -s, --socket SOCKET  posd's socket (default $POS_SOCKET, else " POS_DEFAULT_SOCKET ")\n"
    "  -o, --output FORMAT  text (default); json: one JSON object per line; prom: posd's\n"
    "                       counters in the Prometheus text format, once (docs/metrics.md)\n"
    "  -u, --unmanaged      processes using the GPU without the shim (eBPF telemetry)\n"
    "  -k, --kernels        posd's kernel profiles, most GPU time first: launches/s, solo\n"
    "                       mean and spread, samples, co-run slowdown (text or json)\n"
    "  -h, --help           this text\n";

static const struct option long_options[] = {
    {"devices", no_argument, NULL, 'd'},
    {"apps", no_argument, NULL, 'a'},
    {"pid", required_argument, NULL, 'p'},
    {"epoch", no_argument, NULL, 'H'},
    {"top", no_argument, NULL, 't'},
    {"socket", required_argument, NULL, 's'},
    {"output", required_argument, NULL, 'o'},
    {"unmanaged", no_argument, NULL, 'u'},
    {"kernels", no_argument, NULL, 'k'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static const struct output_format *find_format(const char *name)
{
    for (size_t i = 0; i < sizeof output_formats / sizeof output_formats[0]; i++)
        if (strcasecmp(output_formats[i].name, name) == 0)
            return &output_formats[i];
    die(2, "unknown output format '%s' (want text, json or prom)", name);
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

static void parse_pids(const char *s, struct options *o)
{
    for (const char *p = s;;) {
        char *end;
        errno = 0;
        long v = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : 0;
        if (errno || v <= 0 || v > INT32_MAX || (*end && *end != ','))
            die(2, "bad -p '%s' (want process ids separated by commas; see --help)", s);
        if (o->npids == MAX_PIDS)
            die(2, "-p takes at most %d process ids", MAX_PIDS);
        o->pids[o->npids++] = (int32_t)v;
        if (!*end)
            return;
        p = end + 1;
    }
}

static void parse_options(int argc, char **argv, struct options *o)
{
    *o = (struct options){.socket = posclient_default_socket(), .format = &output_formats[0]};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":dap:Hts:o:ukh", long_options, NULL)) != -1) {
        switch (c) {
        case 'd':
            o->show |= POSSTAT_SHOW_DEVICE;
            break;
        case 'a':
            o->show |= POSSTAT_SHOW_APPS;
            break;
        case 'p':
            parse_pids(optarg, o);
            break;
        case 'H':
            o->epoch_time = 1;
            break;
        case 't':
            o->live = 1;
            break;
        case 's':
            o->socket = optarg;
            break;
        case 'o':
            o->format = find_format(optarg);
            break;
        case 'k':
            o->kernels = 1;
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
    if (o->live && !o->interval_s)
        o->interval_s = 1;
    if (o->live && o->format->render_snapshot)
        die(2, "-t redraws text or JSON reports, not -o %s", o->format->name);
    if (o->format->render_snapshot && o->interval_s > 0)
        die(2,
            "-o %s prints one scrape and takes no interval (run it from a timer for "
            "node_exporter's textfile collector)",
            o->format->name);
    if (o->kernels && (o->format->render_snapshot || o->unmanaged || o->live || o->npids))
        die(2, "-k shows the kernel profiles as text or json, without -u, -t, -p or -o prom");
    if (!*o->socket || strlen(o->socket) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        die(2, "bad socket path '%s' (want 1 to %zu bytes)", o->socket,
            sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
}

/* --- asking posd -------------------------------------------------------------------------- */

static double wall_time(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One request of TYPE (no body) on a connection of its own (tools/posclient.c): the whole
 * reply in REPLY (POS_MSG_MAX bytes), its length in *GOT. */
static int ask_posd(const char *path, int type, unsigned char *reply, size_t *got, char *err,
                    size_t errlen)
{
    struct posclient c;
    int rc = posclient_connect(&c, path, 0, err, errlen);
    if (rc == 0) {
        rc = posclient_exchange(&c, type, NULL, 0, reply, POS_MSG_MAX, got, err, errlen);
        posclient_close(&c);
    }
    return rc;
}

/* One STATS request. */
static int take_snapshot(const char *path, struct posstat_snapshot *snap)
{
    static _Alignas(8) unsigned char reply[POS_MSG_MAX];
    char err[512];
    size_t got;
    int rc = ask_posd(path, POS_MSG_STATS_REQ, reply, &got, err, sizeof err);
    if (rc == 0)
        rc = posstat_parse_reply(reply, got, snap, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "posstat: %s\n", err);
        return -1;
    }
    snap->time = wall_time();
    posstat_nvml_read(0, &snap->gpu); /* posd schedules device 0 */
    return 0;
}

/* --- reports ------------------------------------------------------------------------------ */

/* Applies the views of O to R: which blocks, the time column, the clients of -p. */
static void apply_views(const struct options *o, struct posstat_report *r)
{
    r->show = o->show;
    r->epoch_time = o->epoch_time;
    r->show_gpu = 1; /* with the device block, '-' without NVML */
    if (!o->npids)
        return;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < r->nclients; i++)
        for (int k = 0; k < o->npids; k++)
            if (r->clients[i].pid == o->pids[k]) {
                r->clients[kept++] = r->clients[i];
                break;
            }
    r->nclients = kept;
}

/* -t: the next report replaces the screen (cursor home, clear), as top redraws. */
#define LIVE_REDRAW "\033[H\033[2J"

static int emit(const struct options *o, struct posstat_report *r, int first)
{
    apply_views(o, r);
    if (o->live && r->kind != POSSTAT_AVERAGE)
        fputs(LIVE_REDRAW, stdout);
    else if (!first)
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
    if (o->format->render_snapshot) {
        int bad = o->format->render_snapshot(stdout, &snap) < 0 || fflush(stdout) != 0;
        if (bad)
            fprintf(stderr, "posstat: cannot write the report: %s\n", strerror(errno));
        posstat_snapshot_free(&snap);
        return bad;
    }
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

/* -k: one KERNELS request. */
static int take_kernels(const char *path, struct posstat_kernels *ks)
{
    static _Alignas(8) unsigned char reply[POS_MSG_MAX];
    char err[512];
    size_t got;
    int rc = ask_posd(path, POS_MSG_KERNELS_REQ, reply, &got, err, sizeof err);
    if (rc == 0)
        rc = posstat_parse_kernels(reply, got, ks, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "posstat: %s\n", err);
        return -1;
    }
    return 0;
}

/* -k [interval [count]]: the profiles once (rates since posd started), or every interval
 * (rates over it). */
static int report_kernels(const struct options *o)
{
    int json = strcmp(o->format->name, "json") == 0;
    struct posstat_kernels prev, cur;
    if (take_kernels(o->socket, &prev) < 0)
        return 1;
    if (o->interval_s <= 0) {
        int bad = posstat_render_kernels(stdout, &prev, NULL, json, 0) < 0 || fflush(stdout);
        posstat_kernels_free(&prev);
        return bad;
    }
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    int status = 0;
    int64_t next = monotonic_ns();
    for (unsigned long k = 0; !o->count || k < o->count; k++) {
        next += (int64_t)(o->interval_s * 1e9);
        if (stopped_before(&stop, next))
            break;
        if (take_kernels(o->socket, &cur) < 0) {
            status = 1;
            break;
        }
        if (k)
            fputs(o->format->separator, stdout);
        int bad = posstat_render_kernels(stdout, &cur, &prev, json, 0) < 0 || fflush(stdout);
        posstat_kernels_free(&prev);
        prev = cur;
        if (bad) {
            status = 1;
            break;
        }
    }
    posstat_kernels_free(&prev);
    return status;
}

int main(int argc, char **argv)
{
    struct options o;
    parse_options(argc, argv, &o);
    if (o.kernels)
        return report_kernels(&o);
    return o.interval_s > 0 ? report_every(&o) : report_once(&o);
}
