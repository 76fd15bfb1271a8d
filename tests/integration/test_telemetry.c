/* posd's eBPF telemetry (sched/telemetry.c, bpf/telemetry.bpf.c) against real processes: a
 * client's exit frees it although its socket stays open, a program that uses the simulated
 * driver without the shim is listed as unmanaged while it lives, a client that shares its CPU
 * with busy loops shows run-queue delay, and posd runs without telemetry when it is off or
 * lacks the privilege. Loading eBPF needs root: as another user, or where the kernel refuses,
 * the tests that need it say skipped and why. */
#include <errno.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#include "pos/proto.h"
#include "tests/cunit_main.h"
#include "tests/integration/util.h"
#include "tools/posstat_format.h"

#define NOBODY 65534

static char dir[64], sock[96], log_path[128], conf[128], driver[4200];
static pid_t posd = -1;
static char skip_why[512]; /* why telemetry cannot run here ("" when it can) */

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static unsigned sample_ms;           /* telemetry_sample_ms of the next posd */
static const char *ioctl_on = "off"; /* telemetry_ioctl of the next posd */

static void write_conf(const char *telemetry)
{
    FILE *f = fopen(conf, "w");
    fprintf(f,
            "[daemon]\ntelemetry = %s\ntelemetry_driver = %s\ntelemetry_sample_ms = %u\n"
            "telemetry_ioctl = %s\n",
            telemetry, driver, sample_ms, ioctl_on);
    fclose(f);
}

static void posd_start(const char *telemetry)
{
    write_conf(telemetry);
    unlink(sock);
    posd = util_posd_start(conf, sock, log_path, "priority");
    CU_ASSERT_FATAL(posd > 0 && access(sock, F_OK) == 0);
}

static void posd_stop(void)
{
    util_posd_stop(&posd, SIGTERM);
}

/* One STATS reply of the test's posd into SNAP. Returns 0 or -1. */
static int stats(struct posstat_snapshot *snap)
{
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    static _Alignas(8) char buf[POS_MSG_MAX];
    struct pos_msg_hdr h = {POS_PROTO_MAGIC, POS_PROTO_VERSION, POS_MSG_STATS_REQ, 0, 0};
    ssize_t n = -1;
    if (connect(s, (struct sockaddr *)&a, sizeof a) == 0 && send(s, &h, sizeof h, 0) > 0)
        n = recv(s, buf, sizeof buf, 0);
    close(s);
    char err[256];
    return n > 0 && posstat_parse_reply(buf, (size_t)n, snap, err, sizeof err) == 0 ? 0 : -1;
}

static int clients_of_pid(pid_t pid)
{
    struct posstat_snapshot s;
    if (stats(&s) < 0)
        return -1;
    int n = 0;
    for (uint32_t i = 0; i < s.nclients; i++)
        n += s.clients[i].pid == pid;
    posstat_snapshot_free(&s);
    return n;
}

/* PID's entry in the unmanaged list into *OUT; returns 1 when it is there, 0 if not, -1. */
static int unmanaged_entry(pid_t pid, struct pos_unmanaged_stats *out)
{
    struct posstat_snapshot s;
    if (stats(&s) < 0)
        return -1;
    int found = 0;
    for (uint32_t i = 0; i < s.nunmanaged; i++)
        if (s.unmanaged[i].pid == pid) {
            *out = s.unmanaged[i];
            found = 1;
        }
    posstat_snapshot_free(&s);
    return found;
}

/* Starts ARGV on the simulated driver (with the shim when SHIM), pinned to CPU when >= 0,
 * stdout to OUT (or /dev/null). */
static pid_t spawn(const char *const argv[], int shim, int cpu, const char *out)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        setenv("LD_LIBRARY_PATH", "build/sim", 1);
        setenv("POS_SOCKET", sock, 1);
        if (shim)
            setenv("LD_PRELOAD", util_shim_preload(), 1);
        if (cpu >= 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpu, &set);
            sched_setaffinity(0, sizeof set, &set);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static void reap(pid_t pid, int sig)
{
    if (pid <= 0)
        return;
    if (sig)
        kill(pid, sig);
    int st;
    waitpid(pid, &st, 0);
}

/* Whether the tests that need telemetry can run; prints why not. */
static int telemetry_here(const char *test)
{
    if (skip_why[0])
        fprintf(stderr, "%s: skipped: %s\n", test, skip_why);
    return !skip_why[0];
}

static int suite_init(void)
{
    snprintf(dir, sizeof dir, "/tmp/pos-test-tele-%d", (int)getpid());
    snprintf(sock, sizeof sock, "%s/posd.sock", dir);
    snprintf(log_path, sizeof log_path, "%s/posd.log", dir);
    snprintf(conf, sizeof conf, "%s/posd.conf", dir);
    char cwd[4096];
    if (mkdir(dir, 0777) < 0 || chmod(dir, 0777) < 0 || !getcwd(cwd, sizeof cwd))
        return -1;
    snprintf(driver, sizeof driver, "%s/build/sim/libcuda.so.1", cwd);
    if (geteuid() != 0) {
        snprintf(skip_why, sizeof skip_why, "loading eBPF needs root (running as uid %u)",
                 (unsigned)geteuid());
        return 0;
    }
    /* telemetry = on refuses to start where it cannot run: its log says why */
    write_conf("on");
    pid_t p = util_posd_start(conf, sock, log_path, "priority");
    int up = p > 0 && access(sock, F_OK) == 0;
    util_posd_stop(&p, SIGTERM);
    if (!up) {
        static char text[65536];
        util_read_file(log_path, text, sizeof text);
        const char *why = strstr(text, "cannot run: ");
        snprintf(skip_why, sizeof skip_why, "%.*s", (int)strcspn(why ? why : text, "\n"),
                 why ? why : text);
    }
    return 0;
}

static int suite_clean(void)
{
    posd_stop();
    /* the virtual GPU's segment: the processes these tests kill with SIGKILL leave it */
    const char *inst = getenv("POS_SIM_INSTANCE");
    char cmd[256];
    if (inst && *inst && !strpbrk(inst, "/ '\"")) {
        snprintf(cmd, sizeof cmd, "/dev/shm/pos-sim.%u.%s", (unsigned)getuid(), inst);
        unlink(cmd);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs prog_holdsock under the shim: it registers, forks a child that keeps its socket to
 * posd, and exits. Returns the child's pid (the caller kills it), -1 on failure. */
static pid_t run_holdsock(pid_t *parent)
{
    char out[160], text[256];
    snprintf(out, sizeof out, "%s/holdsock.out", dir);
    const char *const argv[] = {"build/tests/shim_holdsock", "20", NULL};
    *parent = spawn(argv, 1, -1, out);
    int st;
    waitpid(*parent, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || util_read_file(out, text, sizeof text) < 0)
        return -1;
    long long child = util_number(text, "child");
    return child > 0 ? (pid_t)child : -1;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_exit_frees_a_client_whose_socket_outlives_it(void)
{
    if (!telemetry_here(__func__))
        return;
    posd_start("on");
    pid_t parent, child = run_holdsock(&parent);
    CU_ASSERT_FATAL(child > 0);
    int left = -1;
    for (int i = 0; i < 200 && (left = clients_of_pid(parent)) != 0; i++)
        usleep(10000);
    CU_ASSERT_EQUAL(left, 0);
    CU_ASSERT_EQUAL(kill(child, 0), 0); /* the socket was still open: the exit freed it */
    kill(child, SIGKILL);
    posd_stop();
}

/* The other half of the one above: without telemetry only the socket's close frees a client,
 * so a child holding it keeps the client registered (the case the exit probe is for). */
static void test_without_telemetry_a_held_socket_keeps_the_client(void)
{
    posd_start("off");
    pid_t parent, child = run_holdsock(&parent);
    CU_ASSERT_FATAL(child > 0);
    usleep(500000);
    CU_ASSERT_EQUAL(clients_of_pid(parent), 1);
    kill(child, SIGKILL);
    int left = -1;
    for (int i = 0; i < 200 && (left = clients_of_pid(parent)) != 0; i++)
        usleep(10000);
    CU_ASSERT_EQUAL(left, 0);
    posd_stop();
}

static void test_a_program_without_the_shim_is_listed_unmanaged_while_it_lives(void)
{
    if (!telemetry_here(__func__))
        return;
    posd_start("on");
    const char *const argv[] = {"build/posapp", "--model",    "resnet18", "--duration",
                                "10",           "--requests", "1000000",  NULL};
    int64_t t0 = now_ns();
    pid_t app = spawn(argv, 0, -1, NULL);
    struct pos_unmanaged_stats u = {0};
    int seen = 0;
    /* listed at its cuInit, its contexts counted as it creates them */
    while (!(seen = unmanaged_entry(app, &u) == 1 && u.contexts >= 1) &&
           now_ns() - t0 < 3000000000LL)
        usleep(5000);
    int64_t appeared = now_ns() - t0, since_first_call = (int64_t)u.seen_ns;
    CU_ASSERT(seen);
    if (!seen) {
        static char text[65536];
        util_read_file(log_path, text, sizeof text);
        fprintf(stderr, "posd's log:\n%s", text);
    }
    CU_ASSERT(appeared < 1000000000LL); /* from its fork: exec and start-up included */
    CU_ASSERT(u.contexts >= 1);
    CU_ASSERT(u.devices & 1);
    CU_ASSERT_STRING_EQUAL(u.comm, "posapp");
    CU_ASSERT_FALSE(u.flags & POS_UNMANAGED_SAMPLED); /* sampling is off by default */
    /* the metrics count it (posstat -o prom prints what the endpoint serves) */
    char cmd[256], prom[65536];
    snprintf(cmd, sizeof cmd, "build/posstat -s %s -o prom", sock);
    CU_ASSERT_EQUAL(util_run(cmd, prom, sizeof prom), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(prom, "\nposd_unmanaged_processes{device=\"0\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(prom, "\nposd_unmanaged_untracked_total{device=\"0\"} 0\n"));
    kill(app, SIGKILL);
    int64_t t1 = now_ns();
    reap(app, 0);
    while (unmanaged_entry(app, &u) == 1 && now_ns() - t1 < 3000000000LL)
        usleep(5000);
    CU_ASSERT(now_ns() - t1 < 1000000000LL);
    CU_ASSERT_EQUAL(unmanaged_entry(app, &u), 0);
    fprintf(stderr,
            "unmanaged: listed %.1f ms after its fork (with a context, %.1f ms after its first "
            "driver call), gone %.1f ms after kill -9\n",
            (double)appeared / 1e6, (double)since_first_call / 1e6, (double)(now_ns() - t1) / 1e6);
    posd_stop();
}

static void test_a_program_running_before_posd_is_listed_unmanaged(void)
{
    if (!telemetry_here(__func__))
        return;
    const char *const argv[] = {"build/posapp", "--model", "resnet18", "--duration", "10",
                                "--requests",   "1000000", NULL};
    pid_t app = spawn(argv, 0, -1, NULL);
    usleep(500000); /* its cuInit and contexts are behind it when posd starts */
    posd_start("on");
    struct pos_unmanaged_stats u = {0};
    CU_ASSERT_EQUAL(unmanaged_entry(app, &u), 1);
    CU_ASSERT_STRING_EQUAL(u.comm, "posapp");
    reap(app, SIGKILL);
    posd_stop();
}

static void test_a_sampling_window_measures_an_unmanaged_launch_rate(void)
{
    if (!telemetry_here(__func__))
        return;
    sample_ms = 500;
    posd_start("on");
    sample_ms = 0;
    char out[160], text[4096];
    snprintf(out, sizeof out, "%s/posapp.json", dir);
    /* 4 s and 3 s in the plain build; a sanitized posapp takes longer to reach its cuInit */
    char dur[16];
    snprintf(dur, sizeof dur, "%d", (int)(4 * util_time_scale()));
    const char *const argv[] = {"build/posapp", "--model", "resnet18", "--duration", dur,
                                "--requests",   "1000000", NULL};
    pid_t app = spawn(argv, 0, -1, out);
    /* a window opens at the first refresh after its cuInit and closes 0.5 s on */
    usleep((useconds_t)(3e6 * util_time_scale()));
    struct pos_unmanaged_stats u = {0};
    CU_ASSERT_EQUAL(unmanaged_entry(app, &u), 1);
    CU_ASSERT(u.flags & POS_UNMANAGED_SAMPLED);
    reap(app, 0);
    CU_ASSERT_FATAL(util_read_file(out, text, sizeof text) == 0);
    const char *makespan = strstr(text, "\"makespan_s\":");
    CU_ASSERT_PTR_NOT_NULL_FATAL(makespan);
    double own = (double)util_number(text, "launches") / strtod(makespan + 13, NULL);
    fprintf(stderr, "sampled %llu launches/s, posapp's own mean %.0f/s\n",
            (unsigned long long)u.launches_per_s, own);
    CU_ASSERT((double)u.launches_per_s > 0.5 * own && (double)u.launches_per_s < 1.5 * own);
    posd_stop();
}

static void test_a_client_is_not_listed_unmanaged(void)
{
    if (!telemetry_here(__func__))
        return;
    posd_start("on");
    const char *const argv[] = {"build/posapp", "--model",    "resnet18", "--duration",
                                "10",           "--requests", "1000000",  NULL};
    pid_t app = spawn(argv, 1, -1, NULL);
    int registered = 0;
    for (int i = 0; i < 300 && !(registered = clients_of_pid(app) == 1); i++)
        usleep(10000);
    CU_ASSERT_FATAL(registered);
    struct pos_unmanaged_stats u;
    CU_ASSERT_EQUAL(unmanaged_entry(app, &u), 0);
    reap(app, SIGKILL);
    posd_stop();
}

static pid_t spinner(int cpu)
{
    pid_t pid = fork();
    if (pid == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
        /* heavier than the other processes of a shared machine, whose load comes and goes:
         * the contrast with "alone" must be the busy loops' */
        setpriority(PRIO_PROCESS, 0, -10);
        for (;;)
            __asm__ volatile("" ::: "memory");
    }
    return pid;
}

/* PID's run-queue wait per second and mean wait in posd's latest complete window, read after
 * a whole window has passed since now. Returns 0 or -1. */
static int next_window_runq(pid_t pid, double *ms_per_s, double *us_per_wait)
{
    usleep(2100000); /* a one-second window of posd's lies wholly in it */
    struct posstat_snapshot s;
    if (stats(&s) < 0)
        return -1;
    int found = -1;
    for (uint32_t i = 0; i < s.nclients; i++)
        if (s.clients[i].pid == pid) {
            *ms_per_s = (double)s.clients[i].runq_ns_per_s / 1e6;
            *us_per_wait = (double)s.clients[i].runq_delay_ns / 1e3;
            found = 0;
        }
    posstat_snapshot_free(&s);
    return found;
}

/* The last CPU this process may run on: the tests pin a client and busy loops there. */
static int last_cpu(void)
{
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    int cpu = -1;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set))
            cpu = i;
    return cpu;
}

static void test_runq_delay_shows_a_cpu_shared_with_busy_loops(void)
{
    if (!telemetry_here(__func__))
        return;
    int cpu = last_cpu();
    posd_start("on");
    /* a framework's host time per operator: its launching thread needs the CPU */
    const char *const argv[] = {"build/posapp", "--model", "resnet18",  "--duration", "30",
                                "--requests",   "1000000", "--host-us", "20",         NULL};
    pid_t app = spawn(argv, 1, cpu, NULL);
    for (int i = 0; i < 500 && clients_of_pid(app) != 1; i++)
        usleep(10000);
    usleep(1100000); /* past its first interval */
    /* alone and with two busy loops on its CPU, in turn: what else the machine runs changes
     * both alike */
    double alone = 0, shared = 0, ms, us;
    for (int round = 0; round < 2; round++) {
        CU_ASSERT_EQUAL(next_window_runq(app, &ms, &us), 0);
        fprintf(stderr, "runq on cpu %d alone: %.1f ms/s, %.1f us a wait\n", cpu, ms, us);
        alone += ms;
        pid_t spin[2] = {spinner(cpu), spinner(cpu)};
        CU_ASSERT_EQUAL(next_window_runq(app, &ms, &us), 0);
        fprintf(stderr, "runq on cpu %d with 2 busy loops: %.1f ms/s, %.1f us a wait\n", cpu, ms,
                us);
        shared += ms;
        reap(spin[0], SIGKILL);
        reap(spin[1], SIGKILL);
    }
    CU_ASSERT(shared > 2 * alone);
    reap(app, SIGKILL);
    posd_stop();
}

/* A client's waits for a CPU show in its first second, not after two refreshes: posstat
 * asked one second after a client started beside busy loops on its CPU read zero run-queue
 * and off-CPU time in 4 of 6 runs, because posd followed its launching thread only at its
 * next refresh and gave its first figures at the one after. */
static void test_a_client_s_cpu_waits_show_in_its_first_second(void)
{
    if (!telemetry_here(__func__))
        return;
    int cpu = last_cpu();
    posd_start("on");
    pid_t spin[2] = {spinner(cpu), spinner(cpu)};
    const char *const argv[] = {"build/posapp", "--model", "resnet18",  "--duration", "30",
                                "--requests",   "1000000", "--host-us", "20",         NULL};
    /* each round starts at another phase of posd's one-second refresh */
    for (int round = 0; round < 4; round++) {
        int64_t t0 = now_ns();
        pid_t app = spawn(argv, 1, cpu, NULL);
        for (int i = 0; i < 500 && clients_of_pid(app) != 1; i++)
            usleep(10000);
        int64_t left = 1000000000LL - (now_ns() - t0);
        if (left > 0)
            usleep((useconds_t)(left / 1000));
        struct posstat_snapshot s;
        double ms = -1, off = -1;
        if (stats(&s) == 0) {
            for (uint32_t i = 0; i < s.nclients; i++)
                if (s.clients[i].pid == app) {
                    ms = (double)s.clients[i].runq_ns_per_s / 1e6;
                    off = (double)s.clients[i].offcpu_ns_per_s / 1e6;
                }
            posstat_snapshot_free(&s);
        }
        fprintf(stderr, "round %d: %.2f s after its start: runq %.1f ms/s, off-CPU %.1f ms/s\n",
                round, (double)(now_ns() - t0) / 1e9, ms, off);
        CU_ASSERT(ms > 0);
        CU_ASSERT(off > 0);
        reap(app, SIGKILL);
        usleep(130000 * (unsigned)(round + 1)); /* another phase */
    }
    reap(spin[0], SIGKILL);
    reap(spin[1], SIGKILL);
    posd_stop();
}

static void test_telemetry_off_runs_without_it_and_says_so(void)
{
    posd_start("off");
    const char *const argv[] = {"build/posapp", "--model", "resnet18", "--requests", "200", NULL};
    pid_t app = spawn(argv, 0, -1, NULL);
    usleep(300000);
    struct posstat_snapshot s;
    CU_ASSERT_FATAL(stats(&s) == 0);
    CU_ASSERT_EQUAL(s.dev.telemetry, 0);
    CU_ASSERT_EQUAL(s.nunmanaged, 0);
    posstat_snapshot_free(&s);
    reap(app, SIGKILL);
    posd_stop();
    static char text[65536];
    util_read_file(log_path, text, sizeof text);
    CU_ASSERT(strstr(text, "telemetry off (telemetry = off)") != NULL);
}

/* A state directory of NOBODY's for a posd that runs as NOBODY (it refuses one of root's);
 * the child that becomes that posd puts it in its environment. */
static const char *nobody_state_dir(void)
{
    static char state[96];
    snprintf(state, sizeof state, "%s/nobody-state", dir);
    mkdir(state, 0700);
    if (chown(state, NOBODY, NOBODY) < 0)
        fprintf(stderr, "chown %s: %s\n", state, strerror(errno));
    return state;
}

/* posd started as uid NOBODY with TELEMETRY; returns its pid (the caller stops it). */
static pid_t posd_as_nobody(const char *telemetry)
{
    const char *state = nobody_state_dir();
    write_conf(telemetry);
    unlink(sock);
    truncate(log_path, 0);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 2);
        setenv("POSD_STATE_DIR", state, 1);
        if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
            _exit(126);
        execl("build/posd", "posd", "-f", "-c", conf, "-s", sock, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200 && access(sock, F_OK) != 0; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return -(WIFEXITED(st) ? WEXITSTATUS(st) : 128);
        usleep(10000);
    }
    return pid;
}

static void test_a_posd_without_privilege_runs_without_telemetry_and_says_why(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "%s: skipped: needs root to become uid %d\n", __func__, NOBODY);
        return;
    }
    static char text[65536];
    pid_t p = posd_as_nobody("auto");
    CU_ASSERT_FATAL(p > 0);
    struct posstat_snapshot s;
    CU_ASSERT(stats(&s) == 0);
    CU_ASSERT_EQUAL(s.dev.telemetry, 0);
    posstat_snapshot_free(&s);
    util_posd_stop(&p, SIGTERM);
    util_read_file(log_path, text, sizeof text);
    CU_ASSERT(strstr(text, "telemetry off: ") != NULL);
    CU_ASSERT(strstr(text, "needs root, or CAP_BPF and CAP_PERFMON") != NULL);
    /* telemetry = on: posd refuses to start, saying why */
    p = posd_as_nobody("on");
    CU_ASSERT_EQUAL(p, -1);
    if (p > 0)
        util_posd_stop(&p, SIGTERM);
    util_read_file(log_path, text, sizeof text);
    CU_ASSERT(strstr(text, "telemetry = on, but it cannot run: ") != NULL);
}

static void test_the_ioctl_calls_of_a_client_are_counted(void)
{
    if (!telemetry_here(__func__))
        return;
    ioctl_on = "on";
    posd_start("on");
    ioctl_on = "off";
    char out[160], text[512];
    snprintf(out, sizeof out, "%s/ioctls.out", dir);
    const char *const argv[] = {"build/tests/shim_ioctls", "500", "4", NULL};
    pid_t app = spawn(argv, 1, -1, out);
    for (int i = 0; i < 300 && clients_of_pid(app) != 1; i++)
        usleep(10000);
    usleep(2100000); /* one whole window of posd's */
    struct posstat_snapshot s;
    long long per_s = -1, mean_ns = -1;
    CU_ASSERT_FATAL(stats(&s) == 0);
    CU_ASSERT(s.dev.telemetry & POS_TELE_IOCTL);
    for (uint32_t i = 0; i < s.nclients; i++)
        if (s.clients[i].pid == app) {
            per_s = (long long)s.clients[i].ioctls_per_s;
            mean_ns = (long long)s.clients[i].ioctl_ns;
        }
    posstat_snapshot_free(&s);
    reap(app, 0);
    CU_ASSERT_FATAL(util_read_file(out, text, sizeof text) == 0);
    double own =
        (double)util_number(text, "ioctls") * 1000.0 / (double)util_number(text, "elapsed_ms");
    fprintf(stderr, "ioctls: posd counted %lld/s (mean %lld ns), the program made %.0f/s\n", per_s,
            mean_ns, own);
    CU_ASSERT(per_s > 0.7 * own && per_s < 1.3 * own);
    CU_ASSERT(mean_ns > 0);
    posd_stop();
}

/* The telemetry parts a posd as uid NOBODY with only the capabilities CAPS (setpriv's
 * "+bpf,+perfmon" form) runs: STATS's telemetry word, or -1 when it did not come up. */
static int parts_with_caps(const char *caps)
{
    const char *state = nobody_state_dir();
    write_conf("on");
    unlink(sock);
    truncate(log_path, 0);
    char inh[64], amb[64], nobody[32];
    snprintf(inh, sizeof inh, "--inh-caps=%s", caps);
    snprintf(amb, sizeof amb, "--ambient-caps=%s", caps);
    snprintf(nobody, sizeof nobody, "%d", NOBODY);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 2);
        setenv("POSD_STATE_DIR", state, 1);
        execl("/usr/bin/setpriv", "setpriv", "--reuid", nobody, "--regid", nobody, "--clear-groups",
              inh, amb, "build/posd", "-f", "-c", conf, "-s", sock, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 300 && access(sock, F_OK) != 0; i++)
        usleep(10000);
    struct posstat_snapshot s;
    int parts = stats(&s) == 0 ? (int)s.dev.telemetry : -1;
    if (parts >= 0)
        posstat_snapshot_free(&s);
    util_posd_stop(&pid, SIGTERM);
    return parts;
}

/* What etc/posd.service grants (docs/telemetry.md): CAP_BPF and CAP_PERFMON run the exits and
 * the CPU side; the uprobes of discovery need CAP_SYS_ADMIN as well on this kernel. */
static void test_the_documented_capabilities_run_each_part(void)
{
    if (!telemetry_here(__func__))
        return;
    if (access("/usr/bin/setpriv", X_OK) != 0) {
        fprintf(stderr, "%s: skipped: needs /usr/bin/setpriv (util-linux)\n", __func__);
        return;
    }
    CU_ASSERT_EQUAL(parts_with_caps("+bpf,+perfmon"), POS_TELE_EXITS | POS_TELE_CPU);
    static char text[65536];
    util_read_file(log_path, text, sizeof text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "no GPU process discovery"));
    CU_ASSERT_EQUAL(parts_with_caps("+bpf,+perfmon,+sys_admin"),
                    POS_TELE_EXITS | POS_TELE_CPU | POS_TELE_DISCOVERY);
    CU_ASSERT_EQUAL(parts_with_caps("+perfmon"), -1); /* telemetry = on refuses to start */
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("telemetry", suite_init, suite_clean);
    POS_ADD_TEST(s, test_exit_frees_a_client_whose_socket_outlives_it);
    POS_ADD_TEST(s, test_without_telemetry_a_held_socket_keeps_the_client);
    POS_ADD_TEST(s, test_a_program_without_the_shim_is_listed_unmanaged_while_it_lives);
    POS_ADD_TEST(s, test_a_program_running_before_posd_is_listed_unmanaged);
    POS_ADD_TEST(s, test_a_sampling_window_measures_an_unmanaged_launch_rate);
    POS_ADD_TEST(s, test_a_client_is_not_listed_unmanaged);
    POS_ADD_TEST(s, test_runq_delay_shows_a_cpu_shared_with_busy_loops);
    POS_ADD_TEST(s, test_a_client_s_cpu_waits_show_in_its_first_second);
    POS_ADD_TEST(s, test_the_ioctl_calls_of_a_client_are_counted);
    POS_ADD_TEST(s, test_telemetry_off_runs_without_it_and_says_so);
    POS_ADD_TEST(s, test_a_posd_without_privilege_runs_without_telemetry_and_says_why);
    POS_ADD_TEST(s, test_the_documented_capabilities_run_each_part);
}
