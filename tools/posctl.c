/* posctl: posd's admin tool. Lists and shows clients (a STATS request), sets a client's class,
 * priority or GPU memory limit at run time, reloads the configuration, drains and undrains a device
 * (CONTROL requests, include/pos/proto.h). One table of commands; the protocol is
 * tools/posclient.c. */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kube/cdi.h"
#include "sched/mem_limit.h"
#include "tools/posclient.h"
#include "tools/posstat_format.h"

static const char usage_text[] =
    "usage: posctl [-s SOCKET] COMMAND [ARGS]\n"
    "Controls posd at run time (docs/posctl.md).\n"
    "  list                       the clients: id, pid, uid, app, class, priority, state\n"
    "  show ID                    everything posd knows of client ID\n"
    "  set ID [--class NAME] [--priority N] [--mem-limit SIZE|PCT%|none]\n"
    "                             change a client's class, priority and/or GPU memory limit\n"
    "                             (512M, 4GiB, 1.5T: binary units; 50%: of its device) until\n"
    "                             it exits or the configuration reloads\n"
    "  reload                     reload the configuration (as SIGHUP does)\n"
    "  drain [DEVICE]             grant no new work on DEVICE (default 0), for maintenance\n"
    "  undrain [DEVICE]           schedule DEVICE's clients again\n"
    "  status                     the policy and the drained devices\n"
    "  profiles save              write posd's kernel profiles to its state file now\n"
    "  profiles load FILE         import a kernel profile file (one you may read)\n"
    "  profiles reset             forget every kernel profile (and the state file)\n"
    "  cdi [--output FILE|-] [--shim PATH] [--socket PATH] [--gpus LIST|auto]\n"
    "      [--dev-dir DIR|none] [--driver-dir DIR] [--cdi-version 0.6.0|0.5.0]\n"
    "                             write the CDI spec of kind " KUBE_CDI_KIND " (devices gpu0,\n"
    "                             gpu1, ... and all) to FILE (default " KUBE_CDI_DEFAULT_OUTPUT
    ")\n"
    "Changing anything needs root or membership of the group posd; list and show show other\n"
    "users' clients to root and that group only. cdi does not talk to posd.\n"
    "  -s, --socket SOCKET  posd's socket (default $POS_SOCKET, else " POS_DEFAULT_SOCKET ")\n"
    "  -h, --help           this text\n";

static void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

static void die(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("posctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(status);
}

static const char *socket_path;
#define POSCTL_SAVE_TIMEOUT_S 120

static void connect_posd_waiting(struct posclient *c, int timeout_s)
{
    char err[512];
    if (posclient_connect(c, socket_path, timeout_s, err, sizeof err) < 0)
        die(1, "%s", err);
}

static void connect_posd(struct posclient *c)
{
    connect_posd_waiting(c, 0);
}

/* ---- reading: list, show ------------------------------------------------------------------ */

static void snapshot(struct posstat_snapshot *snap)
{
    static _Alignas(8) unsigned char reply[POS_MSG_MAX];
    struct posclient c;
    char err[512];
    size_t got;
    connect_posd(&c);
    int rc = posclient_stats(&c, reply, sizeof reply, &got, err, sizeof err);
    posclient_close(&c);
    if (rc < 0 || posstat_parse_reply(reply, got, snap, err, sizeof err) < 0)
        die(1, "%s", err);
}

/* Whether this user is root or in the posd group, as posd will judge (for a note only). */
static int sees_everyone(void)
{
    if (geteuid() == 0)
        return 1;
    struct group *g = getgrnam("posd");
    if (!g)
        return 0;
    gid_t groups[NGROUPS_MAX];
    int n = getgroups(NGROUPS_MAX, groups);
    for (int i = 0; i < n; i++)
        if (groups[i] == g->gr_gid)
            return 1;
    return getegid() == g->gr_gid;
}

/* held, override and the CPU lever's cpu-idle or cpu-nice, as they apply, in BUF; "-" for none */
static const char *state_of(const struct pos_client_stats *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s%s", s->flags & POS_CLIENT_HELD ? ",held" : "",
             s->flags & POS_CLIENT_OVERRIDE ? ",override" : "",
             s->flags & POS_CLIENT_CPU_IDLE ? ",cpu-idle" : "",
             s->flags & POS_CLIENT_CPU_NICE ? ",cpu-nice" : "");
    if (!buf[0])
        return "-";
    return buf + 1;
}

static int cmd_list(int argc, char **argv)
{
    if (argc != 1)
        die(2, "list takes no arguments (see --help)");
    struct posstat_snapshot snap;
    snapshot(&snap);
    printf("# %-6s %8s %8s  %-20s %-12s %8s  %s\n", "id", "pid", "uid", "app", "class", "priority",
           "state");
    for (uint32_t i = 0; i < snap.nclients; i++) {
        const struct pos_client_stats *s = &snap.clients[i];
        char state[48];
        printf("  %-6u %8d %8u  %-20s %-12s %8d  %s\n", s->client_id, s->pid, s->uid, s->app,
               s->class_name, s->priority, state_of(s, state, sizeof state));
    }
    if (snap.dev.clients > snap.nclients)
        fprintf(stderr, "posctl: %u more clients than posd's reply carries\n",
                snap.dev.clients - snap.nclients);
    if (!sees_everyone())
        fprintf(stderr, "posctl: only your own clients are shown (root and the group posd see "
                        "all)\n");
    posstat_snapshot_free(&snap);
    return 0;
}

static uint32_t parse_id(const char *s)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || errno || v == 0 || v > UINT32_MAX || s[0] == '-')
        die(2, "bad client id '%s' (posctl list shows them)", s);
    return (uint32_t)v;
}

/* The client's device memory: bytes, the limit as posd.conf writes it too ("none", "50%") */
static void show_memory(const struct pos_client_stats *s)
{
    struct sched_mem_limit l = {.bytes = s->mem_limit, .ppm = 0};
    if (s->mem_limit_ppm)
        l = (struct sched_mem_limit){.bytes = POS_MEM_UNLIMITED, .ppm = s->mem_limit_ppm};
    char text[24];
    sched_mem_limit_format(l, text, sizeof text);
    printf("mem_used %llu\nmem_peak %llu\nmem_refused %llu\nmem_total %llu\n",
           (unsigned long long)s->mem_used, (unsigned long long)s->mem_peak,
           (unsigned long long)s->mem_refused, (unsigned long long)s->mem_total);
    if (s->mem_limit == POS_MEM_UNLIMITED)
        printf("mem_limit %s\n", text);
    else
        printf("mem_limit %llu (%s)\n", (unsigned long long)s->mem_limit, text);
    for (int k = 0; k < POS_MEM_KINDS; k++)
        printf("mem_%s %llu\n", sched_mem_kind_name(k), (unsigned long long)s->mem_bytes[k]);
}

static int cmd_show(int argc, char **argv)
{
    if (argc != 2)
        die(2, "show takes one client id (see --help)");
    uint32_t id = parse_id(argv[1]);
    struct posstat_snapshot snap;
    snapshot(&snap);
    const struct pos_client_stats *s = NULL;
    for (uint32_t i = 0; i < snap.nclients; i++)
        if (snap.clients[i].client_id == id)
            s = &snap.clients[i];
    if (!s)
        die(1, "no client %u%s (posctl list shows the clients)", id,
            sees_everyone() ? "" : " of yours");
    const struct {
        const char *name;
        unsigned long long v;
    } counters[] = {
        {"submitted", s->submitted},
        {"released", s->released},
        {"completed", s->completed},
        {"in_flight", s->in_flight},
        {"queued", s->queued},
        {"busy_ns", s->busy_ns},
        {"waits", s->waits},
        {"syncs", s->syncs},
        {"sync_ns", s->sync_ns},
        {"requests", s->requests},
        {"req_p50_ns", s->req_p50_ns},
        {"req_p99_ns", s->req_p99_ns},
        {"stalls", s->stalls},
        {"op_ns", s->op_ns},
        {"connected_ns", s->connected_ns},
    };
    char state[48];
    printf("id %u\npid %d\nuid %u\ngid %u\napp %s\nclass %s\npriority %d\nstate %s\n", s->client_id,
           s->pid, s->uid, s->gid, s->app, s->class_name, s->priority,
           state_of(s, state, sizeof state));
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        printf("%s %llu\n", counters[i].name, counters[i].v);
    show_memory(s);
    posstat_snapshot_free(&snap);
    return 0;
}

/* ---- changing: set, reload, drain, undrain; status ---------------------------------------- */

static int control(struct pos_control *q)
{
    struct posclient c;
    struct pos_control_reply r;
    char msg[512];
    /* a save is answered when it has been written (by a child of posd's, under SCHED_IDLE:
     * seconds on a busy machine with a large table) */
    connect_posd_waiting(&c, q->op == POS_CTL_PROFILES_SAVE ? POSCTL_SAVE_TIMEOUT_S : 0);
    int rc = posclient_control(&c, q, &r, msg, sizeof msg);
    posclient_close(&c);
    if (rc < 0)
        die(1, "%s", msg);
    printf("%s\n", msg);
    if (q->op == POS_CTL_STATUS) {
        printf("drained:");
        for (int dev = 0; dev < POS_CTL_MAX_DEVICES; dev++)
            if (r.drained >> dev & 1)
                printf(" %d", dev);
        printf("%s\n", r.drained ? "" : " none");
    }
    return 0;
}

static int cmd_set(int argc, char **argv)
{
    if (argc < 2)
        die(2, "set needs a client id, then --class NAME, --priority N and/or --mem-limit SIZE "
               "(see --help)");
    struct pos_control q = {.op = POS_CTL_SET, .client_id = parse_id(argv[1])};
    static const struct option opts[] = {
        {"class", required_argument, NULL, 'c'},
        {"priority", required_argument, NULL, 'p'},
        {"mem-limit", required_argument, NULL, 'm'},
        {NULL, 0, NULL, 0},
    };
    struct sched_mem_limit mem;
    char why[192];
    /* its options after the id: argv + 1 starts with the id, and getopt starts after it */
    argc--;
    argv++;
    optind = 0;
    int o;
    while ((o = getopt_long(argc, argv, "+:", opts, NULL)) != -1) {
        char *end;
        long v;
        switch (o) {
        case 'c':
            if (!*optarg || strlen(optarg) >= sizeof q.class_name)
                die(2, "bad class name '%s' (1 to %zu characters)", optarg,
                    sizeof q.class_name - 1);
            snprintf(q.class_name, sizeof q.class_name, "%s", optarg);
            q.flags |= POS_CTL_HAS_CLASS;
            break;
        case 'p':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (!*optarg || *end || errno || v < -1000000 || v > 1000000)
                die(2, "bad priority '%s' (a whole number; lower is more important)", optarg);
            q.priority = (int32_t)v;
            q.flags |= POS_CTL_HAS_PRIORITY;
            break;
        case 'm':
            if (sched_mem_limit_parse(optarg, &mem, why, sizeof why) < 0)
                die(2, "bad memory limit '%s': %s", optarg, why);
            q.mem_limit = mem.bytes;
            q.mem_limit_ppm = mem.ppm;
            q.flags |= POS_CTL_HAS_MEM_LIMIT;
            break;
        case ':':
            die(2, "option '%s' needs a value (see --help)", argv[optind - 1]);
        default:
            die(2, "bad option '%s' for set (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        die(2, "unexpected argument '%s' (see --help)", argv[optind]);
    if (!q.flags)
        die(2, "set needs --class NAME, --priority N and/or --mem-limit SIZE (see --help)");
    return control(&q);
}

static int cmd_reload(int argc, char **argv)
{
    if (argc != 1)
        die(2, "reload takes no arguments (see --help)");
    struct pos_control q = {.op = POS_CTL_RELOAD};
    return control(&q);
}

static int parse_device(int argc, char **argv)
{
    if (argc > 2)
        die(2, "%s takes at most a device number (see --help)", argv[0]);
    if (argc < 2)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(argv[1], &end, 10);
    if (!*argv[1] || *end || errno || v < 0 || v >= POS_CTL_MAX_DEVICES)
        die(2, "bad device '%s' (want 0 to %d)", argv[1], POS_CTL_MAX_DEVICES - 1);
    return (int)v;
}

static int cmd_drain(int argc, char **argv)
{
    struct pos_control q = {.op = POS_CTL_DRAIN, .device = parse_device(argc, argv)};
    return control(&q);
}

static int cmd_undrain(int argc, char **argv)
{
    struct pos_control q = {.op = POS_CTL_UNDRAIN, .device = parse_device(argc, argv)};
    return control(&q);
}

static int cmd_status(int argc, char **argv)
{
    if (argc != 1)
        die(2, "status takes no arguments (see --help)");
    struct pos_control q = {.op = POS_CTL_STATUS};
    return control(&q);
}

static int cmd_profiles(int argc, char **argv)
{
    struct pos_control q = {0};
    if (argc == 2 && strcmp(argv[1], "save") == 0) {
        q.op = POS_CTL_PROFILES_SAVE;
    } else if (argc == 2 && strcmp(argv[1], "reset") == 0) {
        q.op = POS_CTL_PROFILES_RESET;
    } else if (argc == 3 && strcmp(argv[1], "load") == 0) {
        q.op = POS_CTL_PROFILES_LOAD;
        /* the path as given (made absolute, not resolved): posd opens it without following a
         * symbolic link anywhere on it, and says so when there is one */
        char cwd[4096] = "";
        if (argv[2][0] != '/' && !getcwd(cwd, sizeof cwd))
            die(1, "%s: %s", argv[2], strerror(errno));
        int n = snprintf(q.path, sizeof q.path, "%s%s%s", cwd, cwd[0] ? "/" : "", argv[2]);
        if (n < 0 || (size_t)n >= sizeof q.path)
            die(2, "%s: path too long (at most %zu characters)", argv[2], sizeof q.path - 1);
    } else {
        die(2, "profiles needs save, reset or load FILE (see --help)");
    }
    return control(&q);
}

/* ---- cdi: the CDI spec (kube/cdi.c) -------------------------------------------------------- */

static int cmd_cdi(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},      {"shim", required_argument, NULL, 'S'},
        {"socket", required_argument, NULL, 's'},      {"gpus", required_argument, NULL, 'g'},
        {"dev-dir", required_argument, NULL, 'd'},     {"driver-dir", required_argument, NULL, 'D'},
        {"cdi-version", required_argument, NULL, 'V'}, {NULL, 0, NULL, 0},
    };
    const char *output = KUBE_CDI_DEFAULT_OUTPUT, *gpu_list = "auto", *version = KUBE_CDI_VERSION;
    struct kube_edits_opts eo = {.shim = KUBE_HOST_SHIM, .socket = socket_path, .dev_dir = "/dev"};
    optind = 0;
    int o;
    while ((o = getopt_long(argc, argv, "+:", opts, NULL)) != -1) {
        switch (o) {
        case 'o':
            output = optarg;
            break;
        case 'S':
            eo.shim = optarg;
            break;
        case 's':
            eo.socket = optarg;
            break;
        case 'g':
            gpu_list = optarg;
            break;
        case 'd':
            eo.dev_dir = strcmp(optarg, "none") == 0 ? NULL : optarg;
            break;
        case 'D':
            eo.driver_dir = optarg;
            break;
        case 'V':
            version = optarg;
            break;
        case ':':
            die(2, "option '%s' needs a value (see --help)", argv[optind - 1]);
        default:
            die(2, "bad option '%s' for cdi (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        die(2, "unexpected argument '%s' (see --help)", argv[optind]);
    if (strcmp(version, KUBE_CDI_VERSION) != 0 && strcmp(version, KUBE_CDI_VERSION_OLD) != 0)
        die(2, "bad --cdi-version '%s' (%s, or %s for runtimes whose CDI is older)", version,
            KUBE_CDI_VERSION, KUBE_CDI_VERSION_OLD);
    int gpus[KUBE_CDI_MAX_GPUS];
    size_t n;
    char err[768];
    if (kube_cdi_parse_gpus(gpu_list, eo.dev_dir, gpus, &n, err, sizeof err) < 0)
        die(2, "%s", err);
    int rc = strcmp(output, "-") == 0
                 ? kube_cdi_write(stdout, &eo, gpus, n, version, err, sizeof err)
                 : kube_cdi_write_file(output, &eo, gpus, n, version, err, sizeof err);
    if (rc < 0)
        die(1, "cdi: %s", err);
    if (strcmp(output, "-") != 0) {
        fprintf(stderr, "posctl: wrote %s: %s devices", output, KUBE_CDI_KIND);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " gpu%d", gpus[i]);
        fprintf(stderr, " all\n");
    }
    return 0;
}

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"list", cmd_list},     {"show", cmd_show},         {"set", cmd_set},
    {"reload", cmd_reload}, {"drain", cmd_drain},       {"undrain", cmd_undrain},
    {"status", cmd_status}, {"profiles", cmd_profiles}, {"cdi", cmd_cdi},
};

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    socket_path = posclient_default_socket();
    opterr = 0;
    int o;
    /* '+': options end at the command; its own options are its own */
    while ((o = getopt_long(argc, argv, "+:s:h", opts, NULL)) != -1) {
        switch (o) {
        case 's':
            socket_path = optarg;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case ':':
            die(2, "option '%s' needs a value (see --help)", argv[optind - 1]);
        default:
            die(2, "bad option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        die(2, "no command given (list, show, set, reload, drain, undrain, status, profiles, cdi; "
               "see --help)");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, argv[optind]) == 0)
            return commands[i].run(argc - optind, argv + optind);
    die(2, "unknown command '%s' (see --help)", argv[optind]);
}
