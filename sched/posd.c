/* posd: the central scheduler daemon. `posd [-c CONFIG] [-s SOCKET] [-p POLICY] [-f]`:
 * loads the configuration (a bad one at start is fatal, with file:line), listens on the Unix
 * socket, and runs the event loop until SIGTERM/SIGINT, removing its socket on the way out. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sched/clients.h"
#include "sched/conf_watch.h"
#include "sched/cpu.h"
#include "sched/device.h"
#include "sched/engine.h"
#include "sched/files.h"
#include "sched/listen.h"
#include "sched/loop.h"
#include "sched/metrics.h"
#include "sched/pod.h"
#include "sched/profile_store.h"
#include "sched/saver.h"
#include "sched/sm_share.h"
#include "sched/telemetry.h"
#include "sched/watch.h"

#define DEFAULT_CONFIG  "/etc/posd/posd.conf"
#define DEFAULT_DROPINS "/etc/posd/policy.d"

static struct posd D;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: posd [-c CONFIG] [-s SOCKET] [-p POLICY] [-f] [--metrics [ADDR:]PORT]\n"
            "  -c CONFIG  configuration file (default %s; drop-ins from policy.d/ beside it)\n"
            "  -s SOCKET  Unix socket (default: $POS_SOCKET, else the config's, else %s)\n"
            "  -p POLICY  scheduling policy, overriding the config:",
            DEFAULT_CONFIG, POS_DEFAULT_SOCKET);
    for (int i = 0; pos_policies[i]; i++)
        fprintf(f, " %s", pos_policies[i]->name);
    fprintf(f, "\n  -f         stay in the foreground (default: detach)\n"
               "  --metrics [ADDR:]PORT  serve Prometheus metrics on http://ADDR:PORT/metrics\n"
               "             (default off; 127.0.0.1 when only a port is given; docs/metrics.md)\n"
               "  -h, --help this text\n");
}

/* The policy.d directory beside CONFIG. */
static void dropins_of(const char *config, char *out, size_t len)
{
    const char *slash = strrchr(config, '/');
    if (!slash)
        snprintf(out, len, "policy.d");
    else
        snprintf(out, len, "%.*s/policy.d", (int)(slash - config), config);
}

/* PATH made absolute in OUT (LEN bytes) against the working directory: a detached posd
 * chdirs to /, and rereads its configuration and removes its socket by these paths later.
 * Returns 0, or -ENAMETOOLONG when it does not fit (getcwd's error when it fails). */
static int absolute(const char *path, char *out, size_t len)
{
    if (path[0] == '/')
        return snprintf(out, len, "%s", path) < (int)len ? 0 : -ENAMETOOLONG;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return -errno;
    return snprintf(out, len, "%s/%s", cwd, path) < (int)len ? 0 : -ENAMETOOLONG;
}

/* posd's own descriptors (socket, signalfd, io_uring, stdio) and room for a tool's connection;
 * each client then holds two (its connection and its kick eventfd) and a third while it
 * registers. Below POSD_MIN_NOFILE posd could serve no one (with 4 it exited without a word,
 * with 6 it ran and refused every connection): it says so and does not start. */
#define POSD_MIN_NOFILE 16

/* METRICS: the endpoint is on, and its connections count too. */
static int check_fd_limit(int metrics)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) < 0)
        return 0;
    rlim_t full = POSD_MIN_NOFILE + 2 * POSD_MAX_CLIENTS +
                  (rlim_t)(metrics ? posd_metrics_descriptors() : 0);
    if (r.rlim_cur < POSD_MIN_NOFILE) {
        fprintf(stderr,
                "posd: its open-file limit (%llu) is too low to serve any client: it needs at "
                "least %d, and %llu for a full table of %d clients (LimitNOFILE=, ulimit -n)\n",
                (unsigned long long)r.rlim_cur, POSD_MIN_NOFILE, (unsigned long long)full,
                POSD_MAX_CLIENTS);
        return -EMFILE;
    }
    if (r.rlim_cur < full)
        posd_log(POSD_LOG_WARN,
                 "open-file limit %llu: room for about %llu clients of %d%s (LimitNOFILE=%llu "
                 "for all)",
                 (unsigned long long)r.rlim_cur,
                 (unsigned long long)(r.rlim_cur - POSD_MIN_NOFILE / 2) / 2, POSD_MAX_CLIENTS,
                 metrics ? " and the metrics endpoint's connections" : "",
                 (unsigned long long)full);
    return 0;
}

static int detach(void)
{
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid > 0)
        _exit(0);
    setsid();
    if (chdir("/") < 0)
        return -errno;
    int fd = open("/dev/null", O_RDWR);
    if (fd >= 0) {
        dup2(fd, 0);
        dup2(fd, 1);
        if (fd > 2)
            close(fd);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *config = NULL, *sock = NULL, *policy = NULL, *metrics = NULL;
    int foreground = 0, opt;
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'}, {"metrics", required_argument, NULL, 'm'}, {0}};
    opterr = 0; /* one line of our own, not getopt's and the whole usage */
    while ((opt = getopt_long(argc, argv, ":c:s:p:fh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            config = optarg;
            break;
        case 's':
            sock = optarg;
            break;
        case 'p':
            policy = optarg;
            break;
        case 'f':
            foreground = 1;
            break;
        case 'm':
            metrics = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            fprintf(stderr, "posd: option '%s' needs a value (see --help)\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "posd: bad option '%s' (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "posd: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    struct posd *d = &D;
    d->listen_fd = -1;
    d->metrics_fd = -1;
    d->config_optional = config == NULL;
    if (absolute(config ? config : DEFAULT_CONFIG, d->config_path, sizeof d->config_path) < 0) {
        fprintf(stderr, "posd: configuration path too long (max %zu): %s\n",
                sizeof d->config_path - 1, config);
        return 1;
    }
    dropins_of(d->config_path, d->dropin_dir, sizeof d->dropin_dir);
    char err[512];
    posd_config_defaults(&d->cfg);
    if (posd_config_load(d->config_path, d->config_optional, d->dropin_dir, &d->cfg, err,
                         sizeof err) < 0) {
        fprintf(stderr, "posd: %s\n", err);
        return 1;
    }
    posd_set_log_level(d->cfg.log_level);
    /* $POSD_STATE_DIR over the configuration's state_dir (tests and benchmarks keep their
     * kernel profiles apart with it); like every path, absolute */
    const char *state = getenv("POSD_STATE_DIR");
    if (state && *state) {
        if (state[0] != '/' || strlen(state) >= sizeof d->cfg.state_dir) {
            fprintf(stderr, "posd: POSD_STATE_DIR must be an absolute path of at most %zu "
                            "characters: %s\n",
                    sizeof d->cfg.state_dir - 1, state);
            return 1;
        }
    }
    const char *sd = state && *state ? state : d->cfg.state_dir;
    memcpy(d->state_dir, sd, strlen(sd) + 1); /* both fit: checked above, or the config's */
    /* before anything is there for clients: a state directory posd may not trust ends the
     * start with one line; what a killed posd's saves left is removed */
    d->state_fd = posd_state_open(d->state_dir, err, sizeof err);
    if (d->state_fd < 0) {
        fprintf(stderr, "posd: %s\n", err);
        return 1;
    }
    int stale = posd_state_remove_stale(d->state_fd, POSD_PROFILES_NAME);
    posd_cpu_start(d);
    posd_cpu_recover(d); /* threads a killed posd left lowered: before any client registers */
    posd_lookup_stats_group(d);
    if (policy) {
        snprintf(d->policy_override, sizeof d->policy_override, "%s", policy);
        snprintf(d->cfg.policy, sizeof d->cfg.policy, "%s", policy);
    }
    d->policy = pos_policy_find(d->cfg.policy);
    if (!d->policy) {
        fprintf(stderr, "posd: unknown policy '%s' (", d->cfg.policy);
        for (int i = 0; pos_policies[i]; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", pos_policies[i]->name);
        fprintf(stderr, ")\n");
        return 1;
    }
    /* -s, then $POS_SOCKET (as the shim and the tools read it), then the configuration */
    const char *env_sock = getenv("POS_SOCKET");
    const char *path = sock ? sock : env_sock && *env_sock ? env_sock : d->cfg.socket;
    if (absolute(path, d->socket_path, sizeof d->socket_path) < 0) {
        fprintf(stderr, "posd: socket path too long (max %zu): %s\n", sizeof d->socket_path - 1,
                path);
        return 1;
    }
    /* --metrics, then [metrics] listen */
    const char *metrics_origin = metrics ? "--metrics" : "[metrics] listen";
    if (!metrics && d->cfg.metrics_listen[0])
        metrics = d->cfg.metrics_listen;
    if (check_fd_limit(metrics != NULL) < 0)
        return 1;
    /* before the socket exists: no client's cuInit meets the probe's (the simulated driver
     * lets only alike settings share a device) */
    posd_device_probe(&d->device);
    posd_shares_check(d);
    /* before the socket: once it exists, whatever telemetry sees is seen */
    if (posd_telemetry_start(d) < 0)
        return 1;
    posd_block_signals(); /* a reload or stop sent once the socket is there waits for the loop */
    if (posd_listen(d) < 0)
        return 1;
    /* before detaching, so that a port in use is said on the terminal; no threads, so the
     * fork keeps it whole */
    if (metrics && posd_metrics_start(d, metrics, metrics_origin) < 0) {
        posd_unlink_socket(d);
        return 1;
    }
    if (!foreground && detach() < 0) {
        posd_unlink_socket(d);
        return 1;
    }
    d->started_at = posd_now();
    if (posd_engine_init(d) < 0) {
        posd_log(POSD_LOG_ERROR, "out of memory");
        posd_unlink_socket(d);
        return 1;
    }
    if (stale)
        posd_log(POSD_LOG_INFO, "removed %d temporary file%s a killed posd left in %s", stale,
                 stale == 1 ? "" : "s", d->state_dir);
    /* after detaching: the pod resolver is a thread */
    if (posd_pod_start(&d->cfg) == 0 && posd_pod_news_fd() >= 0 &&
        posd_loop_watch(d, posd_pod_news_fd(), posd_clients_pod_news, NULL) < 0)
        posd_log(POSD_LOG_WARN, "pod identity: no room in the loop for its news: names are "
                                "those found at registration");
    posd_conf_watch_start(d, d->cfg.policy_dir);
    posd_log(POSD_LOG_INFO, "listening on %s, policy %s, %zu rules%s%s", d->socket_path,
             d->policy->name, d->cfg.nrules, d->metrics ? ", metrics on " : "",
             d->metrics ? d->metrics_addr : "");
    int rc = posd_loop(d);
    posd_conf_watch_stop();
    posd_pod_stop();
    posd_cpu_restore_all(d);
    posd_metrics_stop(d);
    posd_saver_finish(d); /* a running save ended, the last one written here */
    posd_telemetry_stop(d);
    posd_unlink_socket(d);
    posd_config_free(&d->cfg);
    return rc < 0 ? 1 : 0;
}
