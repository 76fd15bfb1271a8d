/* The device process of a virtual GPU (build/sim/pos-sim-device): the one process that
 * advances the shared model in real time and shows each process what completed, as NVIDIA's
 * MPS server owns the GPU for its clients. Processes only publish into their own rings and
 * read their own completion rings, so a process that is stopped (SIGSTOP, a debugger, Ctrl-Z)
 * or descheduled, even in the middle of a driver call, delays only itself; the device lock is
 * taken by this process each time it looks, and by the others only for what changes the
 * device's set-up (attach and detach, contexts, streams, memory). The first process of an
 * instance starts it (drv_server_ensure, at attach, under the lock); it leaves with the last.
 * A process whose work stops completing checks that it lives and starts another (the agent,
 * agent.c); a device process that died holding the lock is repaired like any dead holder. */
#include "sim/driver/drv.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#ifndef POS_SIM_DEVICE_FALLBACK
#define POS_SIM_DEVICE_FALLBACK ""
#endif
#define DEVICE_BIN "pos-sim-device"

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

void drv_server_kick(void)
{
    if (!drv.shm)
        return;
    _Atomic uint32_t *w = &drv.shm->server.word;
    atomic_fetch_add(w, 1);
    futex(w, FUTEX_WAKE, 1, NULL);
}

int drv_server_alive(void)
{
    const struct drv_server *sv = &drv.shm->server;
    pid_t pid = sv->pid;
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return 0;
    /* a killed one nobody reaped yet (an orphan of a reaper that does not reap) is a zombie:
     * gone, though its pid and start time remain */
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (p && (p[2] == 'Z' || p[2] == 'X'))
        return 0;
    return drv_proc_start_time(pid) == sv->start;
}

/* Where the device process's program is: beside this library (as loaded), else
 * $POS_SIM_DEVICE_PROCESS, else where the build put it (a copy of the library alone in
 * another folder, as valgrind runs use, still finds it). Returns 0 and the path in OUT. */
static int device_path(char *out, size_t len)
{
    Dl_info info;
    if (dladdr((void *)drv_server_ensure, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash) {
            snprintf(out, len, "%.*s/" DEVICE_BIN, (int)(slash - info.dli_fname),
                     info.dli_fname);
            if (access(out, X_OK) == 0)
                return 0;
        }
    }
    const char *env = getenv("POS_SIM_DEVICE_PROCESS");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        if (access(out, X_OK) == 0)
            return 0;
    }
    snprintf(out, len, "%s", POS_SIM_DEVICE_FALLBACK);
    return out[0] && access(out, X_OK) == 0 ? 0 : -1;
}

/* The environment the device process gets: the simulated driver's own settings and the
 * sanitizers' options, nothing of the application's (its LD_PRELOAD, the shim, above all). */
static char **device_env(void)
{
    static char *env[64];
    int n = 0;
    static const char *const keep[] = {"POS_SIM_", "ASAN_", "TSAN_", "UBSAN_", "LSAN_"};
    for (char **e = environ; e && *e && n < 63; e++)
        for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++)
            if (strncmp(*e, keep[k], strlen(keep[k])) == 0) {
                env[n++] = *e;
                break;
            }
    env[n] = NULL;
    return env;
}

int drv_server_ensure(void)
{
    struct drv_server *sv = &drv.shm->server;
    if (drv_server_alive())
        return 0;
    /* one start at a time: the one asked for in the last second is taken to be on its way */
    int64_t now = drv_mono_ns();
    if (sv->spawned_ns && now - sv->spawned_ns < 1000000000LL)
        return 0;
    char path[4096];
    if (device_path(path, sizeof path) < 0) {
        fprintf(stderr,
                "pos-sim: cannot start the virtual GPU's device process: no executable %s beside "
                "the driver, in POS_SIM_DEVICE_PROCESS or at '%s'\n",
                DEVICE_BIN, POS_SIM_DEVICE_FALLBACK);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (!getenv("POS_SIM_DEBUG")) /* its lines on the application's stderr only when asked */
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETSID);
    char *argv[] = {(char *)DEVICE_BIN, drv.shm_name, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, path, &fa, &at, argv, device_env());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        fprintf(stderr, "pos-sim: cannot start the virtual GPU's device process %s: %s\n", path,
                strerror(rc));
        return -1;
    }
    /* it forks the device process and exits at once: nothing of ours stays its parent, so
     * an application's wait() for its own children never meets it */
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    sv->spawned_ns = now;
    drv_debug("started the device process of %s (%s)", drv.shm_name, path);
    return 0;
}

/* ---- the device process ----------------------------------------------------------------- */

static _Atomic uint32_t *owner_word(int o)
{
    return (_Atomic uint32_t *)&drv.g->owners[o].wake_word;
}

static void sleep_until(_Atomic uint32_t *word, uint32_t seen, int64_t wall_deadline)
{
    int64_t dt = wall_deadline - drv_mono_ns();
    if (dt <= 0)
        return;
    struct timespec ts = {.tv_sec = dt / 1000000000LL, .tv_nsec = dt % 1000000000LL};
    futex(word, FUTEX_WAIT, seen, &ts);
}

static int rings_pending(void)
{
    for (int o = 0; o < SIM_MAX_OWNERS; o++) {
        struct drv_submit_ring *r = &drv.shm->rings[o];
        if (drv.g->owners[o].used && atomic_load(&r->tail) != atomic_load(&r->head))
            return 1;
    }
    return 0;
}

/* The segment NAME of this uid, mapped; NULL (said) if it is not one. */
static struct sim_shm *map_existing(const char *name, size_t *size)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_uid != getuid() || !S_ISREG(st.st_mode) ||
        (size_t)st.st_size < sizeof(struct sim_shm)) {
        close(fd);
        return NULL;
    }
    struct sim_shm *shm = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (shm == MAP_FAILED)
        return NULL;
    if (!atomic_load(&shm->ready) || shm->magic != SIM_SHM_MAGIC ||
        shm->version != SIM_SHM_VERSION) {
        munmap(shm, (size_t)st.st_size);
        return NULL;
    }
    *size = (size_t)st.st_size;
    return shm;
}

API int pos_sim_device_main(int argc, char **argv)
{
    if (argc != 2 || strncmp(argv[1], "/pos-sim.", 9) != 0) {
        fprintf(stderr, "usage: %s /pos-sim.UID.INSTANCE\n(the device process of a virtual GPU: "
                        "the simulated driver starts it; docs/sim.md)\n",
                argc ? argv[0] : DEVICE_BIN);
        return 2;
    }
    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child > 0)
        return 0; /* the driver waits for this one; the device process goes on alone */
    prctl(PR_SET_NAME, DEVICE_BIN, 0, 0, 0);
    /* A GPU makes progress whatever the host runs: where the process may (root, or
     * CAP_SYS_NICE), the device process runs before the applications' threads when it wakes
     * (real-time, the lowest priority: it runs a few us a wake-up and sleeps), else ahead of
     * them as far as it may (a nice value below theirs), else as it is (docs/sim.md). */
    struct sched_param sp = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) != 0)
        (void)setpriority(PRIO_PROCESS, 0, -10);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake on time, as the agents do */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    size_t size;
    struct sim_shm *shm = map_existing(argv[1], &size);
    if (!shm)
        return 1;
    snprintf(drv.shm_name, sizeof drv.shm_name, "%s", argv[1]);
    drv.shm = shm;
    drv.shm_size = size;
    drv.owner = -1;
    const char *stats = getenv("POS_SIM_STATS");
    drv.lock_stats = stats && *stats;
    drv.attach_mono_ns = drv_mono_ns();
    drv_lock();
    if (shm->dead || drv_server_alive()) { /* another one serves it */
        drv_unlock();
        return 0;
    }
    struct sim_gpu *g = &shm->gpu;
    drv.g = g;
    drv.origin_ns = shm->origin_ns;
    drv.scale = g->p.scale;
    shm->server.pid = getpid();
    shm->server.start = drv_proc_start_time(getpid());
    shm->server.spawned_ns = 0;
    drv_unlock();
    uint32_t shown[SIM_MAX_OWNERS] = {0};
    int64_t idle_backoff = 0;
    /* what made it look, reported at exit with POS_SIM_DEBUG: a kick, its plan's time, the
     * 200 ms look, launches published while it looked; and the owners it woke */
    unsigned long long kicked = 0, planned = 0, capped = 0, relooked = 0, wakes = 0;
    for (;;) {
        drv_lock(); /* drains every process's ring into the model first */
        int anyone = 0;
        for (int o = 0; o < SIM_MAX_OWNERS && !anyone; o++)
            anyone = g->owners[o].used;
        if (shm->dead || !anyone || shm->server.pid != getpid()) {
            if (shm->server.pid == getpid())
                shm->server.pid = 0;
            drv_unlock();
            break;
        }
        int64_t now_mono = drv_mono_ns();
        int64_t now = drv_device_now();
        sim_gpu_advance(g, now);
        if (now_mono - shm->last_liveness_ns > 200000000LL)
            drv_liveness_scan(now_mono);
        int due[SIM_MAX_OWNERS], ndue = 0;
        int64_t next = INT64_MAX;
        for (int o = 0; o < SIM_MAX_OWNERS; o++) {
            if (!g->owners[o].used)
                continue;
            uint32_t t = __atomic_load_n(&g->owners[o].ring_tail, __ATOMIC_RELAXED);
            if (t != shown[o]) {
                shown[o] = t;
                due[ndue++] = o;
            }
            int64_t e = sim_gpu_owner_next_event(g, o);
            if (e < next)
                next = e;
        }
        /* a bound at or before now that brings nothing would spin: back off instead */
        if (ndue) {
            idle_backoff = 0;
        } else if (next <= now) {
            idle_backoff =
                idle_backoff ? (idle_backoff < 5000000 ? idle_backoff * 2 : idle_backoff) : 20000;
            next = now + (int64_t)(idle_backoff / drv.scale);
        }
        shm->server.planned_ns = next;
        uint32_t seen = atomic_load(&shm->server.word);
        drv_unlock();
        wakes += (unsigned long long)ndue;
        for (int i = 0; i < ndue; i++) {
            atomic_fetch_add(owner_word(due[i]), 1);
            futex(owner_word(due[i]), FUTEX_WAKE, 1, NULL);
        }
        /* a launch published after this look may have read the plan of the one before: look
         * again (drv_submit publishes, then reads the plan; the fences pair) */
        atomic_thread_fence(memory_order_seq_cst);
        if (rings_pending()) {
            relooked++;
            continue;
        }
        /* at least every 200 ms: processes that died without leaving are found by looking */
        int64_t wall = now_mono + 200000000LL;
        int cap = 1;
        if (next != INT64_MAX && drv_wall_of_device(next) < wall) {
            wall = drv_wall_of_device(next);
            cap = 0;
        }
        sleep_until(&shm->server.word, seen, wall);
        if (atomic_load(&shm->server.word) != seen)
            kicked++;
        else if (cap)
            capped++;
        else
            planned++;
    }
    drv_debug("device process: looked %llu times on a kick, %llu at its plan, %llu at the "
              "200 ms look, %llu again for launches published meanwhile; woke owners %llu times",
              kicked, planned, capped, relooked, wakes);
    drv_write_lock_stats(); /* its own line: name pos-sim-device, its threads as "app" */
    munmap(shm, size);
    return 0;
}
