/* Small helpers shared by the integration tests: reading a whole file, running a command for
 * its output, reading a number out of a program's output, counting a string, the shim's
 * preload, posapp under it, the clock, a posd of the test's own, its CPU time and descriptor
 * limit, and talking to it through the tools' client library (tools/posclient.c). A suite's
 * directory, virtual GPU and posd are suite.h's. */
#ifndef POS_TESTS_INTEGRATION_UTIL_H
#define POS_TESTS_INTEGRATION_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/posclient.h"
/* Seconds on CLOCK_MONOTONIC. */
static inline double util_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* How many times slower than the plain build this one runs: make test SANITIZE=... sets
 * POS_TEST_TIME_SCALE (10 under ThreadSanitizer, 3 under the others; tests/run.sh keeps it),
 * and a test multiplies by it the times it waits for something to happen (a start-up, a
 * reply) and the windows it measures in. 1 when unset, so the plain build checks what it did. */
static inline double util_time_scale(void)
{
    const char *v = getenv("POS_TEST_TIME_SCALE");
    double x = v && *v ? strtod(v, NULL) : 1.0;
    return x >= 1.0 && x <= 100.0 ? x : 1.0;
}

/* Reads PATH into BUF (NUL-terminated, at most CAP-1 bytes). Returns 0 or -1. */
static inline int util_read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return 0;
}

/* Runs CMD (a shell line, as it is); its standard output in OUT (CAP bytes, cut there);
 * returns its exit status, 128 + N for a signal N, -1 when it could not run. */
static inline int util_run_stdout(const char *cmd, char *out, size_t cap)
{
    out[0] = '\0';
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The same with CMD's stderr joined to its stdout. */
static inline int util_run(const char *cmd, char *out, size_t cap)
{
    char line[2048];
    snprintf(line, sizeof line, "%s 2>&1", cmd);
    return util_run_stdout(line, out, cap);
}

/* Reads what child PID writes to FD (a pipe's read end, closed here) into OUT (CAP bytes, cut
 * there) until the pipe closes, then reaps the child. Returns its exit status, 128 + N for a
 * signal N. */
static inline int util_child_output(pid_t pid, int fd, char *out, size_t cap)
{
    size_t n = 0;
    ssize_t k;
    while (n < cap - 1 && (k = read(fd, out + n, cap - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(fd);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The number after "KEY": (JSON) or after "KEY " (a program's "key N" line), -1 if absent. */
static inline long long util_number(const char *text, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(text, pat);
    if (!p) {
        snprintf(pat, sizeof pat, "%s ", key);
        p = strstr(text, pat);
    }
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* The LD_PRELOAD value that puts the shim into a process. In a sanitized build (make
 * SANITIZE=...) the sanitizer's runtime comes first: it must be the first object of the
 * process, and the preloaded shim would otherwise be (make test passes its path in
 * POS_TEST_SAN_RUNTIME). */
static inline const char *util_shim_preload(void)
{
    static char buf[1024];
    const char *rt = getenv("POS_TEST_SAN_RUNTIME");
    snprintf(buf, sizeof buf, "%s%sbuild/libposshim.so", rt && *rt ? rt : "", rt && *rt ? ":" : "");
    return buf;
}

/* The same as a "LD_PRELOAD=..." environment entry. */
static inline const char *util_shim_preload_env(void)
{
    static char buf[1100];
    snprintf(buf, sizeof buf, "LD_PRELOAD=%s", util_shim_preload());
    return buf;
}

/* Program ARGV[0] with ARGV (NULL-terminated) under the shim (util_shim_preload) as app APP,
 * its standard output into OUT. Returns its pid, -1 if fork failed. */
static inline pid_t util_shim_start(const char *out, const char *app, const char *const *argv)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        setenv("LD_PRELOAD", util_shim_preload(), 1);
        setenv("POS_APP", app, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* build/posapp with ARGS (NULL-terminated) under the shim as app APP, its standard output
 * into OUT. Returns its pid, -1 if fork failed. */
static inline pid_t util_posapp_start(const char *out, const char *app, const char *const *args)
{
    const char *argv[32] = {"build/posapp"};
    int k = 1;
    for (int i = 0; args[i] && k < 31; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    return util_shim_start(out, app, argv);
}

/* posapp under the shim as app APP running MODEL until it is killed (a million requests), its
 * output discarded. Returns its pid, -1 if fork failed. */
static inline pid_t util_posapp_until_killed(const char *app, const char *model)
{
    const char *const args[] = {"--model", model, "--requests", "1000000", NULL};
    return util_posapp_start("/dev/null", app, args);
}

/* In the parent after fork: waits for the byte child PID writes on its end of the pipe FDS once
 * it is ready, and closes the parent's ends. Returns 0, or -1 (the child reaped) when the child
 * ended without writing it. */
static inline int util_child_ready(pid_t pid, int fds[2])
{
    close(fds[1]);
    char b;
    ssize_t n = read(fds[0], &b, 1);
    close(fds[0]);
    if (n != 1) {
        waitpid(pid, NULL, 0);
        return -1;
    }
    return 0;
}

/* How often WHAT occurs in TEXT. */
static inline int util_count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

/* Starts build/posd in the foreground with configuration CONF on socket SOCK and ARGS after
 * (NULL-terminated), its stderr appended to LOG, and waits up to 2 s (times util_time_scale)
 * for the socket. Returns its pid, -1 if fork failed; the caller checks that SOCK is there. */
static inline pid_t util_posd_start_args(const char *conf, const char *sock, const char *log,
                                         const char *const *args)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 2);
        const char *argv[32] = {"posd", "-f", "-c", conf, "-s", sock};
        int k = 6;
        for (int i = 0; args[i] && k < 31; i++)
            argv[k++] = args[i];
        argv[k] = NULL;
        execv("build/posd", (char *const *)argv);
        _exit(127);
    }
    int tries = (int)(200 * util_time_scale());
    for (int i = 0; pid > 0 && i < tries && access(sock, F_OK) != 0; i++)
        usleep(10000);
    return pid;
}

/* The same under scheduling policy POLICY. */
static inline pid_t util_posd_start(const char *conf, const char *sock, const char *log,
                                    const char *policy)
{
    const char *const args[] = {"-p", policy, NULL};
    return util_posd_start_args(conf, sock, log, args);
}

/* Sends posd *PID signal SIG and reaps it (nothing if there is none). */
static inline void util_posd_stop(pid_t *pid, int sig)
{
    if (*pid <= 0)
        return;
    kill(*pid, sig);
    int st;
    waitpid(*pid, &st, 0);
    *pid = -1;
}

/* PID's CPU time (user and system) in clock ticks, -1 when it cannot be read. */
static inline long util_cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (util_read_file(path, buf, sizeof buf) < 0)
        return -1;
    char *p = strrchr(buf, ')');
    long utime = 0, stime = 0;
    /* fields 14 and 15 after the command */
    int field = 2;
    for (; p && *p && field < 14; p++)
        if (*p == ' ')
            field++;
    if (p && sscanf(p, "%ld %ld", &utime, &stime) == 2)
        return utime + stime;
    return -1;
}

/* The descriptor limit that leaves PID exactly FREE descriptors (the lowest free numbers),
 * or 0 when its descriptors cannot be listed. A descriptor counts as used only if it is open
 * in each of three looks 50 ms apart: one posd holds for a moment (a /proc file it reads)
 * would otherwise leave it a descriptor more once closed. */
static inline rlim_t util_fd_limit_leaving(pid_t pid, int free)
{
    static char used[4096], before[4096];
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    /* a process that has just started may still be opening (or closing) descriptors: its set
     * is taken once two scans a few tens of milliseconds apart agree (up to 20 scans) */
    for (int scan = 0; scan < 20; scan++) {
        memcpy(before, used, sizeof used);
        memset(used, 0, sizeof used);
        for (int look = 0; look < 3; look++) {
            if (look || scan)
                usleep(50000);
            DIR *d = opendir(path);
            if (!d)
                return 0;
            for (struct dirent *e; (e = readdir(d)) != NULL;) {
                int fd = atoi(e->d_name);
                if (e->d_name[0] != '.' && fd >= 0 && fd < (int)sizeof used && used[fd] == look)
                    used[fd] = (char)(look + 1);
            }
            closedir(d);
        }
        for (size_t fd = 0; fd < sizeof used; fd++)
            used[fd] = used[fd] == 3;
        if (scan && memcmp(before, used, sizeof used) == 0)
            break;
    }
    rlim_t limit = 0;
    for (; free > 0 && limit < sizeof used; limit++)
        free -= !used[limit];
    return limit;
}

/* Lowers PID's soft descriptor limit to leave it FREE descriptors; OLD gets the limit before.
 * (Only the soft limit: raising a hard limit again may need a capability we lack.) */
static inline int util_lower_fd_limit(pid_t pid, int free, struct rlimit *old)
{
    struct rlimit now;
    if (prlimit(pid, RLIMIT_NOFILE, NULL, &now) < 0)
        return -1;
    *old = now;
    now.rlim_cur = util_fd_limit_leaving(pid, free);
    return now.rlim_cur ? prlimit(pid, RLIMIT_NOFILE, &now, NULL) : -1;
}

/* Removes the simulated driver's shared segment of POS_SIM_INSTANCE INSTANCE: its last
 * process unlinks it at exit, but a test's clients killed by a signal do not. */
static inline void util_sim_segment_remove(const char *instance)
{
    char name[128];
    snprintf(name, sizeof name, "/pos-sim.%u.%s", (unsigned)getuid(), instance);
    shm_unlink(name);
}

/* A connection to posd at SOCK (replies wait up to 10 s: CI machines can be loaded), or -1. */
static inline int util_connect(const char *sock)
{
    struct posclient c;
    char err[256];
    return posclient_connect(&c, sock, 10, err, sizeof err) == 0 ? c.fd : -1;
}

/* Asks posd at SOCK for its statistics: the device part in DEV, up to MAX clients in CS.
 * Returns the number of clients the reply carries, -1 on failure. */
static inline int util_stats(const char *sock, struct pos_device_stats *dev,
                             struct pos_client_stats *cs, int max)
{
    static _Alignas(8) char buf[POS_MSG_MAX];
    struct posclient c;
    char err[256];
    size_t got = 0, blen = 0;
    const void *body = NULL;
    if (posclient_connect(&c, sock, 10, err, sizeof err) < 0)
        return -1;
    int rc = posclient_stats(&c, buf, sizeof buf, &got, err, sizeof err);
    posclient_close(&c);
    if (rc < 0 || posclient_check_msg(buf, got, POS_MSG_STATS, &body, &blen, err, sizeof err) < 0)
        return -1;
    struct pos_stats_reply r;
    if (blen < sizeof r)
        return -1;
    memcpy(&r, body, sizeof r);
    if (blen != sizeof r + r.nclients * sizeof *cs + r.nunmanaged * sizeof(struct pos_unmanaged_stats))
        return -1;
    *dev = r.dev;
    for (uint32_t i = 0; i < r.nclients && (int)i < max; i++)
        memcpy(&cs[i], (const char *)body + sizeof r + i * sizeof *cs, sizeof *cs);
    return (int)r.nclients;
}

/* One CONTROL request to posd at SOCK; posd's answer in MSG. Returns its status (0 or a
 * negative errno), or -EIO when no answer came. */
static inline int util_control(const char *sock, const struct pos_control *req,
                               struct pos_control_reply *rep, char *msg, size_t cap)
{
    struct posclient c;
    if (posclient_connect(&c, sock, 10, msg, cap) < 0)
        return -EIO;
    int rc = posclient_control(&c, req, rep, msg, cap);
    posclient_close(&c);
    return rc;
}

#endif
