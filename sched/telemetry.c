/* posd's eBPF telemetry, the user side of bpf/telemetry.bpf.c: loads it as [daemon] telemetry
 * says, probing what the machine allows (BTF, the BPF ring buffer, raw tracepoints, uprobes)
 * and logging once why a part is missing; keeps the kernel's map of client tgids; frees a
 * client the moment its process exits; turns the kernel's counters into each client's
 * run-queue delay and off-CPU time (given to the policy and to STATS); and lists the processes
 * that use the GPU driver without being clients. libbpf's messages go to posd's log. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "sched/arm.h"
#include "sched/telemetry.h"
#include "sched/watch.h"

#define REFRESH_NS 1000000000LL /* the interval of each client's figures */

#ifndef POS_NO_BPF

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/types.h>

#include "bpf/telemetry.h"
#include "telemetry.skel.h"

/* The driver's entry points posd probes: where each names its device. */
static const struct {
    const char *name;
    enum pos_tele_call call;
} driver_calls[] = {
    {"cuInit", POS_TELE_CALL_INIT},
    {"cuCtxCreate", POS_TELE_CALL_CTX_ARG3},
    {"cuCtxCreate_v2", POS_TELE_CALL_CTX_ARG3},
    {"cuCtxCreate_v3", POS_TELE_CALL_CTX_ARG5},
    {"cuCtxCreate_v4", POS_TELE_CALL_CTX_ARG4},
    {"cuDevicePrimaryCtxRetain", POS_TELE_CALL_PRIMARY_ARG2},
};
#define NCALLS (sizeof driver_calls / sizeof driver_calls[0])

/* The launch entry points a sampling window probes, in one process only. */
static const char *const launch_calls[] = {
    "cuLaunchKernel",
    "cuLaunchKernel_ptsz",
    "cuLaunchKernelEx",
    "cuLaunchKernelEx_ptsz",
    "cuGraphLaunch",
    "cuGraphLaunch_ptsz",
    "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel_ptsz",
};
#define NLAUNCH (sizeof launch_calls / sizeof launch_calls[0])

/* Launch-rate sampling of unmanaged processes ([daemon] telemetry_sample_ms): at most
 * SAMPLE_SLOTS windows open at once, each process sampled again SAMPLE_EVERY_NS after its last
 * window; RATES remembers the last rate of SAMPLE_RATES processes. */
#define SAMPLE_SLOTS    2
#define SAMPLE_EVERY_NS 10000000000LL
#define SAMPLE_RATES    64

struct sample {
    uint32_t pid; /* 0: slot free */
    int64_t since;
    uint64_t launches; /* the map's count when the window opened */
    struct bpf_link *links[NLAUNCH];
    int nlinks;
};

struct rate {
    uint32_t pid;
    uint64_t per_s;
    int64_t at; /* when its window closed */
};

static struct {
    struct telemetry_bpf *skel;
    struct ring_buffer *rb;
    struct bpf_link *links[6 + NCALLS];
    int nlinks;
    uint32_t parts; /* POS_TELE_* */
    int timer_fd;
    int clients; /* registered clients followed (the timer runs while there are some) */
    int quiet;   /* libbpf's messages go to debug: an entry point a driver lacks is no news */
    char driver[PATH_MAX];
    int64_t sample_ns; /* telemetry_sample_ms; 0: no sampling */
    struct sample samples[SAMPLE_SLOTS];
    struct rate rates[SAMPLE_RATES];
} T = {.timer_fd = -1};

static int libbpf_to_log(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    int lvl = level == LIBBPF_WARN && !T.quiet ? POSD_LOG_WARN : POSD_LOG_DEBUG;
    const char *text = strncmp(msg, "libbpf: ", 8) == 0 ? msg + 8 : msg;
    posd_log(lvl, "libbpf: %s", text);
    return 0;
}

/* ---- the driver -------------------------------------------------------------------------- */

static int driver_in(const char *dir, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/libcuda.so.1", dir);
    return *dir && n > 0 && (size_t)n < len && access(out, R_OK) == 0;
}

/* Directories listed in one ld.so.conf-style file (include lines are not followed). */
static int driver_in_conf(const char *conf, char *out, size_t len)
{
    FILE *f = fopen(conf, "re");
    if (!f)
        return 0;
    char line[PATH_MAX];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "#\n")] = '\0';
        found = line[0] == '/' && driver_in(line, out, len);
    }
    fclose(f);
    return found;
}

/* libcuda.so.1 as the dynamic loader would find it for a process with posd's environment:
 * LD_LIBRARY_PATH, the directories of /etc/ld.so.conf.d, then the default ones. */
static int find_driver(const struct posd_config *cfg, char *out, size_t len)
{
    if (cfg->telemetry_driver[0]) {
        snprintf(out, len, "%s", cfg->telemetry_driver);
        return access(out, R_OK) == 0;
    }
    const char *env = getenv("LD_LIBRARY_PATH");
    if (env) {
        char dirs[PATH_MAX], *save = NULL;
        snprintf(dirs, sizeof dirs, "%s", env);
        for (char *dir = strtok_r(dirs, ":;", &save); dir; dir = strtok_r(NULL, ":;", &save))
            if (dir[0] == '/' && driver_in(dir, out, len))
                return 1;
    }
    DIR *dd = opendir("/etc/ld.so.conf.d");
    struct dirent *e;
    int found = 0;
    while (dd && !found && (e = readdir(dd))) {
        size_t n = strlen(e->d_name);
        char conf[PATH_MAX];
        if (n < 5 || strcmp(e->d_name + n - 5, ".conf") != 0)
            continue;
        snprintf(conf, sizeof conf, "/etc/ld.so.conf.d/%s", e->d_name);
        found = driver_in_conf(conf, out, len);
    }
    if (dd)
        closedir(dd);
    if (found || driver_in_conf("/etc/ld.so.conf", out, len))
        return 1;
    static const char *const defaults[] = {"/lib/x86_64-linux-gnu",
                                           "/usr/lib/x86_64-linux-gnu",
                                           "/lib/aarch64-linux-gnu",
                                           "/usr/lib/aarch64-linux-gnu",
                                           "/lib64",
                                           "/usr/lib64",
                                           "/lib",
                                           "/usr/lib"};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        if (driver_in(defaults[i], out, len))
            return 1;
    return 0;
}

/* Uprobes on every driver entry point present, for every process. Returns how many; *ERR
 * is the errno of the last that failed. */
static int attach_driver(int *err)
{
    int n = 0;
    *err = 0;
    T.quiet = 1;
    for (size_t i = 0; i < NCALLS; i++) {
        LIBBPF_OPTS(bpf_uprobe_opts, o, .func_name = driver_calls[i].name,
                    .bpf_cookie = driver_calls[i].call);
        struct bpf_link *l =
            bpf_program__attach_uprobe_opts(T.skel->progs.handle_driver_call, -1, T.driver, 0, &o);
        if (!l) {
            *err = errno;
            posd_log(POSD_LOG_DEBUG, "telemetry: no uprobe on %s in %s: %s", driver_calls[i].name,
                     T.driver, strerror(errno));
            continue;
        }
        T.links[T.nlinks++] = l;
        n++;
    }
    T.quiet = 0;
    return n;
}

/* Processes that mapped the driver before posd's uprobes were there: listed as if seen now
 * (their contexts unknown), so an unmanaged process already running is not missed. */
static void scan_driver_users(void)
{
    char real[PATH_MAX];
    if (!realpath(T.driver, real))
        return;
    DIR *proc = opendir("/proc");
    struct dirent *e;
    int64_t now = posd_now();
    while (proc && (e = readdir(proc))) {
        char *end;
        unsigned long pid = strtoul(e->d_name, &end, 10);
        if (*end || !pid || pid == (unsigned long)getpid())
            continue;
        char path[64], line[PATH_MAX + 128];
        snprintf(path, sizeof path, "/proc/%lu/maps", pid);
        FILE *f = fopen(path, "re");
        int found = 0;
        while (f && !found && fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = '\0';
            const char *p = strchr(line, '/');
            found = p && strcmp(p, real) == 0;
        }
        if (f)
            fclose(f);
        if (!found)
            continue;
        struct pos_tele_gpu g = {.first_ns = (uint64_t)now};
        snprintf(path, sizeof path, "/proc/%lu/comm", pid);
        f = fopen(path, "re");
        if (f && fgets(g.comm, sizeof g.comm, f))
            g.comm[strcspn(g.comm, "\n")] = '\0';
        if (f)
            fclose(f);
        __u32 key = (__u32)pid;
        bpf_map__update_elem(T.skel->maps.gpu, &key, sizeof key, &g, sizeof g, BPF_NOEXIST);
    }
    if (proc)
        closedir(proc);
}

/* ---- events -------------------------------------------------------------------------------- */

static void client_exited(struct posd *d, uint32_t tgid, uint64_t ns)
{
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (!c->used || !c->registered || (uint32_t)c->ident.pid != tgid)
            continue;
        int64_t late = posd_now() - (int64_t)ns;
        posd_log(POSD_LOG_INFO, "client %u (pid %d, %s) exited: freed %lld us after its exit",
                 c->id, (int)c->ident.pid, c->ident.app, (long long)(late / 1000));
        posd_client_ask_close(d, c, NULL); /* the loop closes it when this watch returns */
        posd_arm_tick(d, 0);               /* its share is free at once */
    }
}

static int is_client(const struct posd *d, uint32_t tgid)
{
    for (int i = 0; i < POSD_MAX_CLIENTS; i++)
        if (d->clients[i].used && d->clients[i].registered &&
            (uint32_t)d->clients[i].ident.pid == tgid)
            return 1;
    return 0;
}

/* Whether TGID has the shim mapped: its first driver call comes before it registers, so it
 * is about to become a client rather than an unmanaged process worth a line in the log. */
static int has_shim(uint32_t tgid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%u/maps", tgid);
    FILE *f = fopen(path, "re");
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, "/libposshim.so") != NULL;
    if (f)
        fclose(f);
    return found;
}

static int on_event(void *ctx, void *data, size_t len)
{
    struct posd *d = ctx;
    struct pos_tele_event e;
    if (len < sizeof e)
        return 0;
    memcpy(&e, data, sizeof e);
    e.comm[sizeof e.comm - 1] = '\0';
    switch (e.kind) {
    case POS_TELE_EV_CLIENT_EXIT:
        client_exited(d, e.tgid, e.ns);
        break;
    case POS_TELE_EV_GPU_SEEN:
        /* a client's own first driver call comes before it registers */
        if (is_client(d, e.tgid))
            bpf_map__delete_elem(T.skel->maps.gpu, &e.tgid, sizeof e.tgid, 0);
        else
            posd_log(has_shim(e.tgid) ? POSD_LOG_DEBUG : POSD_LOG_INFO,
                     "unmanaged GPU process: pid %u (%s) calls the driver without being a client",
                     e.tgid, e.comm);
        break;
    case POS_TELE_EV_GPU_EXIT:
        posd_log(POSD_LOG_INFO, "unmanaged GPU process pid %u (%s) exited", e.tgid, e.comm);
        break;
    default:
        break;
    }
    return 0;
}

static int64_t ring_ready(struct posd *d, int fd, void *arg)
{
    int n = ring_buffer__consume(T.rb);
    if (n < 0)
        posd_log(POSD_LOG_WARN, "telemetry: reading the ring buffer: %s", strerror(-n));
    return 0;
}

/* ---- each client's figures ----------------------------------------------------------------- */

/* The kernel's counters of C's process (shared by the clients of one process). */
static int counters_of(const struct posd_client *c, struct pos_tele_cpu *k)
{
    __u32 tgid = (__u32)c->ident.pid;
    return bpf_map__lookup_elem(T.skel->maps.clients, &tgid, sizeof tgid, k, sizeof *k, 0);
}

static void take_counters(struct posd_client *c, const struct pos_tele_cpu *k, int64_t now)
{
    c->tele.runq_ns = k->runq_ns;
    c->tele.runq_n = k->runq_n;
    c->tele.offcpu_ns = k->offcpu_ns;
    c->tele.ioctl_ns = k->ioctl_ns;
    c->tele.ioctl_n = k->ioctl_n;
    c->tele.read_at = now;
}

void posd_telemetry_follow(struct posd_client *c, uint32_t tid)
{
    c->tele.launch_tid = tid;
    if (!T.skel || !tid)
        return;
    for (int i = 0; i < c->tele.ntids; i++)
        if (c->tele.tids[i] == tid)
            return;
    if (c->tele.ntids == POSD_TELE_TIDS)
        return;
    __u32 tgid = (__u32)c->ident.pid;
    if (bpf_map__update_elem(T.skel->maps.launchers, &tid, sizeof tid, &tgid, sizeof tgid,
                             BPF_ANY) != 0)
        return;
    c->tele.tids[c->tele.ntids++] = tid;
    /* its first interval starts now, when the kernel side starts counting for it (it used to
     * start at the next refresh and be shown at the one after: up to 2 s of zeros) */
    struct pos_tele_cpu k;
    if (c->tele.ntids == 1 && counters_of(c, &k) == 0)
        take_counters(c, &k, posd_now());
}

/* Devices of the unmanaged processes, counted for the policy's device. */
static uint32_t unmanaged_on(int device)
{
    __u32 key, *prev = NULL;
    uint32_t n = 0;
    while (bpf_map__get_next_key(T.skel->maps.gpu, prev, &key, sizeof key) == 0) {
        struct pos_tele_gpu g;
        if (bpf_map__lookup_elem(T.skel->maps.gpu, &key, sizeof key, &g, sizeof g, 0) == 0 &&
            device >= 0 && device < 32 && (g.devices >> device & 1))
            n++;
        prev = &key;
    }
    return n;
}

static void refresh_client(struct posd *d, struct posd_client *c, int64_t now)
{
    struct pos_tele_cpu k;
    if (!c->tele.read_at || counters_of(c, &k) < 0)
        return; /* no launching thread followed yet: nothing counted */
    if (now > c->tele.read_at) {
        uint64_t n = k.runq_n - c->tele.runq_n;
        double span = (double)(now - c->tele.read_at);
        c->tele.runq_delay_ns = n ? (k.runq_ns - c->tele.runq_ns) / n : 0;
        c->tele.runq_ns_per_s = (uint64_t)((double)(k.runq_ns - c->tele.runq_ns) * 1e9 / span);
        posd_log(POSD_LOG_DEBUG, "telemetry: client %u: %llu waits of %llu ns in %.0f ms", c->id,
                 (unsigned long long)n, (unsigned long long)(k.runq_ns - c->tele.runq_ns),
                 span / 1e6);
        c->tele.offcpu_ns_per_s =
            (uint64_t)((double)(k.offcpu_ns - c->tele.offcpu_ns) * 1e9 / span);
        uint64_t ni = k.ioctl_n - c->tele.ioctl_n;
        c->tele.ioctls_per_s = (uint64_t)((double)ni * 1e9 / span);
        c->tele.ioctl_mean_ns = ni ? (k.ioctl_ns - c->tele.ioctl_ns) / ni : 0;
        c->tele.windows++;
    }
    take_counters(c, &k, now);
    sched_core_client_telemetry(d->core, (int)(c - d->clients), (int64_t)c->tele.runq_delay_ns,
                                (int64_t)c->tele.runq_ns_per_s, (int64_t)c->tele.offcpu_ns_per_s);
}

/* Shorter than this, a first interval says more about the moment than about the client. */
#define FIRST_WINDOW_MIN_NS 50000000LL

void posd_telemetry_client_current(struct posd *d, struct posd_client *c, int64_t now)
{
    if (T.skel && !c->tele.windows && c->tele.read_at &&
        now - c->tele.read_at >= FIRST_WINDOW_MIN_NS)
        refresh_client(d, c, now);
}

/* ---- launch-rate sampling ------------------------------------------------------------------ */

static struct rate *rate_of(uint32_t pid, int create)
{
    struct rate *oldest = &T.rates[0];
    for (int i = 0; i < SAMPLE_RATES; i++) {
        if (T.rates[i].pid == pid)
            return &T.rates[i];
        if (T.rates[i].at < oldest->at)
            oldest = &T.rates[i];
    }
    if (!create)
        return NULL;
    *oldest = (struct rate){.pid = pid};
    return oldest;
}

static uint64_t launches_of(uint32_t pid)
{
    struct pos_tele_gpu g;
    return bpf_map__lookup_elem(T.skel->maps.gpu, &pid, sizeof pid, &g, sizeof g, 0) == 0
               ? g.launches
               : 0;
}

static void close_window(struct sample *w, int64_t now)
{
    uint64_t n = launches_of(w->pid) - w->launches;
    struct rate *r = rate_of(w->pid, 1);
    r->per_s = now > w->since ? (uint64_t)((double)n * 1e9 / (double)(now - w->since)) : 0;
    r->at = now;
    for (int i = 0; i < w->nlinks; i++)
        bpf_link__destroy(w->links[i]);
    *w = (struct sample){0};
}

/* Opens a window on PID: uprobes on the launch entry points in that process alone (the
 * kernel installs them in its address space only), counted in its gpu map entry. */
static void open_window(struct sample *w, uint32_t pid, int64_t now)
{
    *w = (struct sample){.pid = pid, .since = now, .launches = launches_of(pid)};
    T.quiet = 1;
    for (size_t i = 0; i < NLAUNCH; i++) {
        LIBBPF_OPTS(bpf_uprobe_opts, o, .func_name = launch_calls[i],
                    .bpf_cookie = POS_TELE_CALL_LAUNCH);
        struct bpf_link *l = bpf_program__attach_uprobe_opts(T.skel->progs.handle_driver_call,
                                                             (pid_t)pid, T.driver, 0, &o);
        if (l)
            w->links[w->nlinks++] = l;
    }
    T.quiet = 0;
}

static int sampling(uint32_t pid)
{
    for (int i = 0; i < SAMPLE_SLOTS; i++)
        if (T.samples[i].pid == pid)
            return 1;
    return 0;
}

/* Closes the windows that are due and opens one on each free slot for the unmanaged process
 * sampled longest ago (or never). */
static void sample_launches(int64_t now)
{
    for (int i = 0; i < SAMPLE_SLOTS; i++) {
        struct sample *w = &T.samples[i];
        if (w->pid && (now - w->since >= T.sample_ns || kill((pid_t)w->pid, 0) < 0))
            close_window(w, now);
    }
    for (int i = 0; i < SAMPLE_SLOTS; i++) {
        if (T.samples[i].pid)
            continue;
        __u32 key, *prev = NULL, best = 0;
        int64_t best_at = now - SAMPLE_EVERY_NS;
        while (bpf_map__get_next_key(T.skel->maps.gpu, prev, &key, sizeof key) == 0) {
            prev = &key;
            struct rate *r = rate_of(key, 0);
            int64_t at = r ? r->at : 0;
            if (!sampling(key) && at <= best_at) {
                best = key;
                best_at = at;
            }
        }
        if (!best)
            return;
        open_window(&T.samples[i], best, now);
    }
}

static int64_t refresh(struct posd *d, int fd, void *arg)
{
    uint64_t ticks;
    if (read(fd, &ticks, sizeof ticks) < 0 && errno != EAGAIN)
        return 0;
    int64_t now = posd_now();
    for (int i = 0; i < POSD_MAX_CLIENTS; i++)
        if (d->clients[i].used && d->clients[i].registered)
            refresh_client(d, &d->clients[i], now);
    sched_core_set_unmanaged(d->core,
                             T.parts & POS_TELE_DISCOVERY ? unmanaged_on(d->device.index) : 0);
    if (T.sample_ns)
        sample_launches(now);
    return 0;
}

static void set_timer(int64_t period_ns)
{
    struct itimerspec its = {
        .it_interval = {period_ns / 1000000000LL, period_ns % 1000000000LL},
        .it_value = {period_ns / 1000000000LL, period_ns % 1000000000LL},
    };
    timerfd_settime(T.timer_fd, 0, &its, NULL);
}

/* ---- loading ------------------------------------------------------------------------------- */

static const char *privilege_hint(int err)
{
    return err == EPERM || err == EACCES ? " (loading eBPF needs root, or CAP_BPF and CAP_PERFMON)"
                                         : "";
}

static void unload(void)
{
    for (int i = 0; i < SAMPLE_SLOTS; i++)
        if (T.samples[i].pid)
            close_window(&T.samples[i], 0);
    for (int i = 0; i < T.nlinks; i++)
        bpf_link__destroy(T.links[i]);
    T.nlinks = 0;
    ring_buffer__free(T.rb);
    T.rb = NULL;
    telemetry_bpf__destroy(T.skel);
    T.skel = NULL;
    T.parts = 0;
    if (T.timer_fd >= 0)
        close(T.timer_fd);
    T.timer_fd = -1;
}

static struct bpf_link *attach_tp(struct bpf_program *p, const char *what)
{
    struct bpf_link *l = bpf_program__attach(p);
    if (!l)
        posd_log(POSD_LOG_WARN, "telemetry: cannot attach %s: %s%s", what, strerror(errno),
                 privilege_hint(errno));
    else
        T.links[T.nlinks++] = l;
    return l;
}

/* Loads the programs and attaches what the machine allows. Returns 0, or a negative errno
 * value with WHY (-ENOTSUP: the kernel lacks a feature, or no probe could be attached). */
static int load(struct posd *d, char *why, size_t len)
{
    libbpf_set_print(libbpf_to_log);
    if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
        snprintf(why, len, "the kernel has no BTF (/sys/kernel/btf/vmlinux)");
        return -ENOTSUP;
    }
    /* the smallest map says whether bpf() is allowed at all (the feature probes below
     * answer "not supported" for "not permitted") */
    int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, NULL, 4, 4, 1, NULL);
    if (fd < 0) {
        int e = errno;
        snprintf(why, len, "bpf(): %s%s", strerror(e), privilege_hint(e));
        return e ? -e : -EPERM;
    }
    close(fd);
    if (libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, NULL) <= 0) {
        snprintf(why, len, "the kernel has no BPF ring buffer (5.8+)");
        return -ENOTSUP;
    }
    T.quiet = 1; /* a failed load is said once below */
    T.skel = telemetry_bpf__open_and_load();
    T.quiet = 0;
    if (!T.skel) {
        /* bpf() itself is permitted (the map above): EACCES here is the verifier's refusal,
         * EPERM a missing CAP_PERFMON */
        int e = errno;
        snprintf(why, len, "cannot load bpf/telemetry.bpf.c: %s%s", strerror(e),
                 e == EACCES  ? " (the kernel's verifier refused it: log_level = debug shows why)"
                 : e == EPERM ? privilege_hint(e)
                              : "");
        return e ? -e : -EINVAL;
    }
    if (attach_tp(T.skel->progs.handle_exit, "raw tracepoint sched_process_exit"))
        T.parts |= POS_TELE_EXITS;
    if (attach_tp(T.skel->progs.handle_switch, "raw tracepoint sched_switch") &&
        attach_tp(T.skel->progs.handle_wakeup, "raw tracepoint sched_wakeup") &&
        attach_tp(T.skel->progs.handle_wakeup_new, "raw tracepoint sched_wakeup_new"))
        T.parts |= POS_TELE_CPU;
    /* every system call of the machine runs these: only when asked for */
    if (d->cfg.telemetry_ioctl &&
        attach_tp(T.skel->progs.handle_sys_enter, "raw tracepoint sys_enter") &&
        attach_tp(T.skel->progs.handle_sys_exit, "raw tracepoint sys_exit"))
        T.parts |= POS_TELE_IOCTL;
    int err;
    if (!find_driver(&d->cfg, T.driver, sizeof T.driver))
        posd_log(POSD_LOG_INFO, "telemetry: no GPU process discovery: %s",
                 d->cfg.telemetry_driver[0] ? "telemetry_driver is not readable"
                                            : "no libcuda.so.1 found where the loader looks");
    else if (attach_driver(&err) == 0)
        posd_log(
            POSD_LOG_INFO, "telemetry: no GPU process discovery: no uprobe attached to %s: %s%s",
            T.driver, strerror(err),
            err == EACCES || err == EPERM ? " (uprobes need CAP_SYS_ADMIN on this kernel)" : "");
    else
        T.parts |= POS_TELE_DISCOVERY;
    if (T.parts & POS_TELE_DISCOVERY)
        scan_driver_users(); /* after the uprobes: nothing falls between the two */
    if (!T.parts) {
        snprintf(why, len, "no probe could be attached");
        return -ENOTSUP;
    }
    T.rb = ring_buffer__new(bpf_map__fd(T.skel->maps.events), on_event, d, NULL);
    T.timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (!T.rb || T.timer_fd < 0 ||
        posd_loop_watch(d, ring_buffer__epoll_fd(T.rb), ring_ready, NULL) < 0 ||
        posd_loop_watch(d, T.timer_fd, refresh, NULL) < 0) {
        int e = errno;
        snprintf(why, len, "cannot watch its ring buffer: %s", strerror(e));
        return e ? -e : -ENOMEM;
    }
    /* sampling wakes posd every second, clients or not: the admin asked for it */
    T.sample_ns = T.parts & POS_TELE_DISCOVERY ? (int64_t)d->cfg.telemetry_sample_ms * 1000000 : 0;
    if (T.sample_ns)
        set_timer(REFRESH_NS);
    return 0;
}

int posd_telemetry_start(struct posd *d)
{
    if (d->cfg.telemetry == POSD_TELEMETRY_OFF) {
        posd_log(POSD_LOG_INFO, "telemetry off (telemetry = off)");
        return 0;
    }
    char why[256];
    int rc = load(d, why, sizeof why);
    if (rc < 0) {
        unload();
        if (d->cfg.telemetry == POSD_TELEMETRY_ON) {
            posd_log(POSD_LOG_ERROR, "telemetry = on, but it cannot run: %s", why);
            return rc;
        }
        posd_log(POSD_LOG_INFO, "telemetry off: %s", why);
        return 0;
    }
    posd_log(POSD_LOG_INFO, "telemetry on:%s%s%s%s%s%s", T.parts & POS_TELE_EXITS ? " exits" : "",
             T.parts & POS_TELE_CPU ? ", run-queue and off-CPU time of clients" : "",
             T.parts & POS_TELE_IOCTL ? ", their ioctl calls" : "",
             T.parts & POS_TELE_DISCOVERY ? ", GPU processes using " : "",
             T.parts & POS_TELE_DISCOVERY ? T.driver : "",
             T.sample_ns ? ", launch-rate sampling of unmanaged processes" : "");
    return 0;
}

void posd_telemetry_stop(struct posd *d)
{
    unload();
}

uint32_t posd_telemetry_parts(void)
{
    return T.parts;
}

void posd_telemetry_client_add(struct posd *d, struct posd_client *c)
{
    if (!T.skel)
        return;
    __u32 tgid = (__u32)c->ident.pid;
    struct pos_tele_cpu zero = {0};
    memset(&c->tele, 0, sizeof c->tele);
    /* BPF_NOEXIST: a second client of the same process shares the counters */
    bpf_map__update_elem(T.skel->maps.clients, &tgid, sizeof tgid, &zero, sizeof zero, BPF_NOEXIST);
    bpf_map__delete_elem(T.skel->maps.gpu, &tgid, sizeof tgid, 0); /* managed from now */
    if (T.clients++ == 0 && !T.sample_ns)
        set_timer(REFRESH_NS);
}

void posd_telemetry_client_remove(struct posd *d, struct posd_client *c)
{
    if (!T.skel)
        return;
    for (int i = 0; i < c->tele.ntids; i++)
        bpf_map__delete_elem(T.skel->maps.launchers, &c->tele.tids[i], sizeof c->tele.tids[i], 0);
    c->tele.ntids = 0;
    __u32 tgid = (__u32)c->ident.pid;
    int others = 0;
    for (int i = 0; i < POSD_MAX_CLIENTS; i++)
        others += &d->clients[i] != c && d->clients[i].used && d->clients[i].registered &&
                  d->clients[i].ident.pid == c->ident.pid;
    if (!others)
        bpf_map__delete_elem(T.skel->maps.clients, &tgid, sizeof tgid, 0);
    if (--T.clients == 0 && !T.sample_ns)
        set_timer(0); /* an idle posd wakes for nothing */
}

size_t posd_telemetry_unmanaged(struct posd *d, struct pos_unmanaged_stats *out, size_t cap)
{
    if (!(T.parts & POS_TELE_DISCOVERY))
        return 0;
    __u32 key, *prev = NULL;
    size_t n = 0;
    int64_t now = posd_now();
    while (bpf_map__get_next_key(T.skel->maps.gpu, prev, &key, sizeof key) == 0) {
        prev = &key;
        struct pos_tele_gpu g;
        if (bpf_map__lookup_elem(T.skel->maps.gpu, &key, sizeof key, &g, sizeof g, 0) < 0 ||
            is_client(d, key))
            continue;
        if (n < cap) {
            struct pos_unmanaged_stats *u = &out[n];
            memset(u, 0, sizeof *u);
            u->pid = (int32_t)key;
            u->contexts = g.contexts;
            u->devices = g.devices;
            u->seen_ns = now > (int64_t)g.first_ns ? (uint64_t)(now - (int64_t)g.first_ns) : 0;
            struct rate *r = rate_of(key, 0);
            if (r && r->at) {
                u->launches_per_s = r->per_s;
                u->flags |= POS_UNMANAGED_SAMPLED;
            }
            memcpy(u->comm, g.comm, sizeof u->comm);
            u->comm[sizeof u->comm - 1] = '\0';
        }
        n++;
    }
    return n;
}

uint64_t posd_telemetry_untracked(void)
{
    return T.parts & POS_TELE_DISCOVERY && T.skel->bss ? T.skel->bss->gpu_untracked : 0;
}

#else /* POS_NO_BPF: make said why this posd has no telemetry */

int posd_telemetry_start(struct posd *d)
{
    const char *why = "posd was built without eBPF (make printed why: no BTF, no BPF-targeting "
                      "clang or bpftool, or POS_NO_BPF=1)";
    if (d->cfg.telemetry == POSD_TELEMETRY_ON) {
        posd_log(POSD_LOG_ERROR, "telemetry = on, but it cannot run: %s", why);
        return -ENOTSUP;
    }
    posd_log(POSD_LOG_INFO, "telemetry off: %s",
             d->cfg.telemetry == POSD_TELEMETRY_OFF ? "telemetry = off" : why);
    return 0;
}

void posd_telemetry_stop(struct posd *d)
{
}

uint32_t posd_telemetry_parts(void)
{
    return 0;
}

void posd_telemetry_client_add(struct posd *d, struct posd_client *c)
{
}

void posd_telemetry_client_remove(struct posd *d, struct posd_client *c)
{
}

void posd_telemetry_follow(struct posd_client *c, uint32_t tid)
{
    c->tele.launch_tid = tid;
}

void posd_telemetry_client_current(struct posd *d, struct posd_client *c, int64_t now)
{
}

size_t posd_telemetry_unmanaged(struct posd *d, struct pos_unmanaged_stats *out, size_t cap)
{
    return 0;
}

uint64_t posd_telemetry_untracked(void)
{
    return 0;
}

#endif
