/* The device lock: a robust process-shared mutex in the shared segment, repaired when a
 * process dies holding it; a waiter names a holder that is stopped (which cannot be repaired:
 * docs/sim.md). Taking it drains the submission rings (ring.c); under it, the liveness scan
 * reclaims dead processes and a process takes ops for its pool. Also the lock's figures
 * (POS_SIM_STATS) and the fault injection that stops a process holding it (tests). */
#include "sim/driver/drv.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#endif

/* The process recorded in owner slot O lives (its pid and start time). */
int drv_owner_alive(const struct sim_owner *o)
{
    pid_t pid = (pid_t)o->ident[0];
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return 0;
    uint64_t st = drv_proc_start_time(pid);
    /* zombie or reused pid: the start time no longer matches */
    return st != 0 && st == o->ident[1];
}

int drv_pool_alloc(int32_t *out, int n)
{
    int k = 0;
    while (k < n) {
        int op = sim_gpu_op_alloc(drv.g, drv.owner);
        if (op < 0)
            break;
        out[k++] = op;
    }
    return k;
}

void drv_pool_put(const int32_t *ops, int n)
{
    int k = 0;
    while (k < n && drv.npool < DRV_POOL_CAP)
        drv.pool[drv.npool++] = ops[k++];
    if (k < n) {
        drv_lock();
        for (; k < n; k++)
            sim_gpu_op_free(drv.g, ops[k]);
        drv_unlock();
    }
}

void drv_liveness_scan(int64_t now_mono)
{
    struct sim_shm *shm = drv.shm;
    struct sim_gpu *g = &shm->gpu;
    shm->last_liveness_ns = now_mono;
    int64_t now = drv_device_now();
    for (int i = 0; i < SIM_MAX_OWNERS; i++) {
        if (!g->owners[i].used || i == drv.owner)
            continue;
        if (!drv_owner_alive(&g->owners[i])) {
            drv_debug("reclaiming owner %d (pid %llu): process is gone", i,
                      (unsigned long long)g->owners[i].ident[0]);
            sim_gpu_owner_remove(g, i, now);
            drv_ring_reset(i);
        }
    }
}

/* ---- the device lock ------------------------------------------------------------------- */

/* The thread holding the device lock, 0 if none: a robust mutex's futex word is its owner's
 * TID (the kernel's robust-futex ABI), glibc's pthread_mutex_t.__data.__lock. */
static pid_t lock_holder(void)
{
    unsigned w = (unsigned)atomic_load((_Atomic int *)&drv.shm->lock.__data.__lock);
    return (pid_t)(w & 0x3fffffffu); /* FUTEX_TID_MASK */
}

/* State letter of thread TID (/proc/TID/status) and its process in *PID; 0 if it is gone. */
static char thread_state(pid_t tid, pid_t *pid)
{
    char path[64], buf[1024];
    *pid = tid;
    snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char state = 0;
    while (fgets(buf, sizeof buf, f)) {
        if (strncmp(buf, "State:", 6) == 0)
            sscanf(buf + 6, " %c", &state);
        else if (strncmp(buf, "Tgid:", 5) == 0)
            *pid = (pid_t)atoi(buf + 5);
    }
    fclose(f);
    return state;
}

/* A waiter that has waited WAITED_NS looks at the holder: one that is stopped (SIGSTOP,
 * Ctrl-Z: 'T'; a debugger: 't') holds every process of this virtual GPU until it continues or
 * ends, and nothing else can safely take the lock from a live process in the middle of its
 * update (docs/sim.md). Says so once per wait, naming it. Returns 1 once it has said so. */
static int report_stopped_holder(int64_t waited_ns)
{
    pid_t pid, tid = lock_holder();
    char st = tid ? thread_state(tid, &pid) : 0;
    if (st != 'T' && st != 't')
        return 0;
    fprintf(stderr,
            "pos-sim[%d]: waited %.1f s for the virtual GPU %s: its lock is held by pid %d "
            "(thread %d), which is %s; every process of this virtual GPU waits until it "
            "continues (kill -CONT %d) or ends\n",
            (int)getpid(), (double)waited_ns / 1e9, drv.shm_name, (int)pid, (int)tid,
            st == 'T' ? "stopped (SIGSTOP, Ctrl-Z)" : "stopped by a debugger", (int)pid);
    return 1;
}

#define LOCK_CHECK_NS 1000000000LL /* how long a waiter waits before it looks at the holder */

/* The contended path: wait in steps of LOCK_CHECK_NS, looking at the holder after each. */
static int lock_slow(void)
{
    int64_t start = drv_mono_ns();
    int reported = 0;
    for (;;) {
        /* timedlock's deadline is on CLOCK_REALTIME: a clock step only moves the moment the
         * holder is looked at (the report checks that it is really stopped). Not clocklock:
         * ThreadSanitizer (gcc 12) does not intercept it, so it never saw this thread take the
         * lock and reported every access under it as a race. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += LOCK_CHECK_NS / 1000000000LL;
        int rc = pthread_mutex_timedlock(&drv.shm->lock, &ts);
        if (rc != ETIMEDOUT) {
#ifdef __SANITIZE_THREAD__
            /* ThreadSanitizer's timedlock (gcc 12) records the lock only when it returns 0:
             * told of an owner-dead one here, or the repair's accesses read as races */
            if (rc == EOWNERDEAD) {
                __tsan_mutex_pre_lock(&drv.shm->lock, __tsan_mutex_try_lock);
                __tsan_mutex_post_lock(&drv.shm->lock, __tsan_mutex_try_lock, 0);
            }
#endif
            if (reported)
                fprintf(stderr, "pos-sim[%d]: the virtual GPU %s is free again after %.1f s\n",
                        (int)getpid(), drv.shm_name, (double)(drv_mono_ns() - start) / 1e9);
            return rc;
        }
        if (!reported)
            reported = report_stopped_holder(drv_mono_ns() - start);
    }
}

__thread int drv_role;
static __thread int64_t lock_taken_ns; /* when this thread took the lock (POS_SIM_STATS) */

static void stat_max(_Atomic uint64_t *m, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(m, memory_order_relaxed);
    while (v > cur &&
           !atomic_compare_exchange_weak_explicit(m, &cur, v, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* A wait of NS for the lock by this thread's role (POS_SIM_STATS). */
static void stat_wait(int64_t ns)
{
    struct drv_lock_stats *st = &drv.lstats[drv_role];
    uint64_t v = ns > 0 ? (uint64_t)ns : 0;
    atomic_fetch_add_explicit(&st->contended, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->wait_ns, v, memory_order_relaxed);
    stat_max(&st->wait_max_ns, v);
    int b = v ? 63 - __builtin_clzll(v) : 0;
    atomic_fetch_add_explicit(&st->wait_hist[b < DRV_LOCK_HIST ? b : DRV_LOCK_HIST - 1], 1,
                              memory_order_relaxed);
}

void drv_lock(void)
{
    int rc = pthread_mutex_trylock(&drv.shm->lock);
    if (rc == EBUSY) {
        /* only a contended lock reads the clock, unless POS_SIM_STATS also times holds */
        int64_t t0 = drv.lock_stats ? drv_mono_ns() : 0;
        rc = lock_slow();
        if (drv.lock_stats)
            stat_wait(drv_mono_ns() - t0);
    }
    if (drv.lock_stats) {
        atomic_fetch_add_explicit(&drv.lstats[drv_role].locks, 1, memory_order_relaxed);
        lock_taken_ns = drv_mono_ns();
    }
    if (rc == EOWNERDEAD) {
        /* A process died inside the critical section: rebuild what it may have torn, then
         * drop it (and any other dead process) from the device. */
        drv_debug("a process died holding the device lock: repairing the device state");
        sim_gpu_rebuild(&drv.shm->gpu);
        drv_liveness_scan(drv_mono_ns());
        pthread_mutex_consistent(&drv.shm->lock);
    }
    if (drv.g)
        drv_drain_submissions();
}

void drv_unlock(void)
{
    if (drv.lock_stats && lock_taken_ns) {
        struct drv_lock_stats *st = &drv.lstats[drv_role];
        uint64_t held = (uint64_t)(drv_mono_ns() - lock_taken_ns);
        lock_taken_ns = 0;
        atomic_fetch_add_explicit(&st->hold_ns, held, memory_order_relaxed);
        stat_max(&st->hold_max_ns, held);
    }
    pthread_mutex_unlock(&drv.shm->lock);
}

/* The wait below which a fraction Q of ROLE's contended waits fell (the upper end of the log2
 * bucket), in ns; 0 without contended waits. */
static uint64_t wait_quantile(const struct drv_lock_stats *st, double q)
{
    uint64_t n = atomic_load(&st->contended), seen = 0;
    if (!n)
        return 0;
    for (int b = 0; b < DRV_LOCK_HIST; b++) {
        seen += atomic_load(&st->wait_hist[b]);
        if ((double)seen >= q * (double)n)
            return 2ULL << b;
    }
    return atomic_load(&st->wait_max_ns);
}

/* POS_SIM_STATS=FILE: at exit, one JSON line on the device lock (docs/sim.md). */
void drv_write_lock_stats(void)
{
    const char *v = getenv("POS_SIM_STATS");
    if (!drv.lock_stats || !v || !*v)
        return;
    char path[4096];
    drv_path_expand(v, path, sizeof path);
    FILE *f = fopen(path, "a");
    if (!f) {
        drv_debug("cannot write POS_SIM_STATS=%s: %s", path, strerror(errno));
        return;
    }
    /* named as the shim names the client (POS_APP), else by its command */
    char name[64] = "";
    const char *app = getenv("POS_APP");
    FILE *c = app && *app ? NULL : fopen("/proc/self/comm", "r");
    if (c) {
        if (fgets(name, sizeof name, c))
            name[strcspn(name, "\n")] = 0;
        fclose(c);
    } else if (app) {
        snprintf(name, sizeof name, "%s", app);
    }
    for (char *q = name; *q; q++)
        if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
            *q = '_';
    fprintf(f, "{\"pid\":%d,\"name\":\"%s\",\"instance\":\"%s\",\"life_ns\":%lld",
            (int)getpid(), name, drv.shm_name + 1,
            (long long)(drv_mono_ns() - drv.attach_mono_ns));
    static const char *const role[] = {"app", "agent"};
    for (int r = 0; r < 2; r++) {
        const struct drv_lock_stats *st = &drv.lstats[r];
        fprintf(f,
                ",\"%s\":{\"locks\":%llu,\"contended\":%llu,\"wait_ns\":%llu,"
                "\"wait_p50_ns\":%llu,\"wait_p99_ns\":%llu,\"wait_max_ns\":%llu,"
                "\"hold_ns\":%llu,\"hold_max_ns\":%llu}",
                role[r], (unsigned long long)atomic_load(&st->locks),
                (unsigned long long)atomic_load(&st->contended),
                (unsigned long long)atomic_load(&st->wait_ns),
                (unsigned long long)wait_quantile(st, 0.5),
                (unsigned long long)wait_quantile(st, 0.99),
                (unsigned long long)atomic_load(&st->wait_max_ns),
                (unsigned long long)atomic_load(&st->hold_ns),
                (unsigned long long)atomic_load(&st->hold_max_ns));
    }
    fprintf(f, "}\n");
    fclose(f);
}

/* Fault injection for tests: this process stops itself (SIGSTOP) in the middle of a launch,
 * holding what a launch holds (its own drv.lock), and lets it go once continued. */
API int pos_sim_fault_stop_in_launch(void)
{
    if (drv_check_init() != CUDA_SUCCESS)
        return -1;
    pthread_mutex_lock(&drv.lock);
    kill(getpid(), SIGSTOP);
    pthread_mutex_unlock(&drv.lock);
    return 0;
}

/* Fault injection for tests: this process stops itself (SIGSTOP) while it holds the device
 * lock, and lets it go once continued. */
API int pos_sim_fault_stop_in_lock(void)
{
    if (drv_check_init() != CUDA_SUCCESS)
        return -1;
    drv_lock();
    kill(getpid(), SIGSTOP); /* the whole process stops, every thread with it */
    drv_unlock();
    return 0;
}
