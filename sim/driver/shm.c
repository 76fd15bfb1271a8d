/* The shared virtual GPU: one POSIX shared-memory segment per POS_SIM_INSTANCE, created by
 * its first user, guarded by a robust process-shared mutex, repaired when a process dies
 * holding it, and unlinked by its last user; a waiter names a holder that is stopped (which
 * cannot be repaired: docs/sim.md). Also the clocks: device time is
 * (CLOCK_MONOTONIC - origin) / POS_SIM_SCALE. */
#include "sim/driver/drv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#endif

#define LIVENESS_PERIOD_NS 200000000LL

int64_t drv_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t drv_device_now(void)
{
    return (int64_t)((double)(drv_mono_ns() - drv.origin_ns) / drv.scale);
}

int64_t drv_wall_of_device(int64_t dev_ns)
{
    if (dev_ns == INT64_MAX)
        return INT64_MAX;
    return drv.origin_ns + (int64_t)((double)dev_ns * drv.scale);
}

void drv_debug(const char *fmt, ...)
{
    static int enabled = -1;
    if (enabled < 0) {
        const char *v = getenv("POS_SIM_DEBUG");
        enabled = v && *v && strcmp(v, "0") != 0;
    }
    if (!enabled)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "pos-sim[%d]: %s\n", (int)getpid(), buf);
}

/* Start time of PID in clock ticks since boot (field 22 of /proc/PID/stat), 0 if gone. A zombie
 * (state Z or X) is gone: it has exited, and its parent has only not reaped it yet; a real
 * driver has its memory back at the exit, when its files close. */
uint64_t drv_proc_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
        return 0;
    /* after ") " come fields 3.. ; starttime is field 22 */
    int field = 2;
    for (; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    return strtoull(p, NULL, 10);
}

static int owner_alive(const struct sim_owner *o)
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

/* Owner slot O's submissions are forgotten (a new process takes the slot, or its process is
 * gone and its ops with it). Under the lock. */
static void ring_reset(int o)
{
    struct drv_submit_ring *r = &drv.shm->rings[o];
    atomic_store_explicit(&r->head, atomic_load_explicit(&r->tail, memory_order_acquire),
                          memory_order_release);
}

/* One published submission of owner O, checked: the process may have written anything into
 * its ring, so the op must be one of its own, allocated and not yet submitted, on a stream of
 * its own. */
static int submission_ok(const struct sim_gpu *g, int o, const struct drv_submission *e)
{
    if (e->op < 0 || e->op >= SIM_MAX_OPS)
        return 0;
    const struct sim_op *op = &g->ops[e->op];
    return op->state == SIM_OP_ALLOC && op->owner == o && op->gen == e->gen &&
           op->stream >= 0 && op->stream < SIM_MAX_STREAMS && g->streams[op->stream].used &&
           g->streams[op->stream].owner == o && op->ctx >= 0 && op->ctx < SIM_MAX_CTXS &&
           g->ctxs[op->ctx].used && g->ctxs[op->ctx].owner == o;
}

/* Under the lock, first thing: every process's published launches go into the model in the
 * order of their times (each ring is in order already: a merge), the model advanced to each
 * time first, so an op enters the device when it was launched however late its ring is
 * drained; an op published after the model passed its time enters at the model's time (its
 * process was descheduled between the two: only its own launch is late). */
static void drain_submissions(void)
{
    struct sim_shm *shm = drv.shm;
    struct sim_gpu *g = &shm->gpu;
    uint32_t tail[SIM_MAX_OWNERS];
    int live[SIM_MAX_OWNERS], n = 0;
    for (int o = 0; o < SIM_MAX_OWNERS; o++) {
        if (!g->owners[o].used)
            continue;
        struct drv_submit_ring *r = &shm->rings[o];
        uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
        uint32_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (t - h > DRV_SUBMIT_RING) /* a tail no process of ours wrote: forget it */
            h = t, atomic_store_explicit(&r->head, t, memory_order_release);
        if (t != h) {
            tail[o] = t;
            live[n++] = o;
        }
    }
    while (n > 0) {
        int best = -1;
        int64_t bt = INT64_MAX;
        for (int k = 0; k < n; k++) {
            struct drv_submit_ring *r = &shm->rings[live[k]];
            const struct drv_submission *e =
                &r->e[atomic_load_explicit(&r->head, memory_order_relaxed) % DRV_SUBMIT_RING];
            if (e->t < bt) {
                bt = e->t;
                best = k;
            }
        }
        int o = live[best];
        struct drv_submit_ring *r = &shm->rings[o];
        uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
        struct drv_submission e = r->e[h % DRV_SUBMIT_RING]; /* read once */
        if (e.t > g->now && e.type <= SUB_HOST_DONE)
            sim_gpu_advance(g, e.t);
        int64_t at = e.t > g->now ? e.t : g->now;
        if (e.type == SUB_LAUNCH && submission_ok(g, o, &e)) {
            sim_gpu_submit(g, e.op, at);
            if (e.prio_override)
                g->ops[e.op].prio = e.prio;
        } else if (e.type == SUB_HOST_DONE && e.op >= 0 && e.op < SIM_MAX_OPS &&
                   g->ops[e.op].owner == o && g->ops[e.op].gen == e.gen) {
            sim_gpu_host_done(g, e.op, at); /* nothing unless it waits for its owner */
        } else if (e.type == SUB_WANT_OPS) {
            /* ops for its pool, shown in its ring (what its quota allows, an eighth of the
             * device's ops kept for the others) */
            for (int k = 0; k < e.prio && k < DRV_POOL_FILL && g->nfree > SIM_MAX_OPS / 8; k++) {
                int op = sim_gpu_op_alloc(g, o);
                if (op < 0)
                    break;
                sim_gpu_ring_push(g, o, op | SIM_RING_GRANT);
            }
        }
        atomic_store_explicit(&r->head, h + 1, memory_order_release);
        if (h + 1 == tail[o])
            live[best] = live[--n];
    }
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
        if (!owner_alive(&g->owners[i])) {
            drv_debug("reclaiming owner %d (pid %llu): process is gone", i,
                      (unsigned long long)g->owners[i].ident[0]);
            sim_gpu_owner_remove(g, i, now);
            ring_reset(i);
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
        drain_submissions();
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

void drv_path_expand(const char *pattern, char *out, size_t len)
{
    size_t k = 0;
    for (const char *p = pattern; *p && k + 16 < len; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            k += (size_t)snprintf(out + k, len - k, "%d", (int)getpid());
            p++;
        } else {
            out[k++] = *p;
        }
    }
    out[k] = '\0';
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

static void instance_name(char *out, size_t len)
{
    const char *inst = getenv("POS_SIM_INSTANCE");
    char clean[65];
    size_t k = 0;
    if (!inst || !*inst)
        inst = "default";
    for (size_t i = 0; inst[i] && k < sizeof clean - 1; i++) {
        char c = inst[i];
        clean[k++] = (char)((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                    (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'
                                ? c
                                : '_');
    }
    clean[k] = '\0';
    snprintf(out, len, "/pos-sim.%u.%s", (unsigned)getuid(), clean);
}

static void shm_init_header(struct sim_shm *shm, const struct sim_dev_params *p)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&shm->lock, &a);
    pthread_mutexattr_destroy(&a);
    shm->magic = SIM_SHM_MAGIC;
    shm->version = SIM_SHM_VERSION;
    shm->dead = 0;
    shm->origin_ns = drv_mono_ns();
    shm->last_liveness_ns = 0;
    sim_gpu_init(&shm->gpu, p, 0);
}

static int same_device(const struct sim_dev_params *a, const struct sim_dev_params *b)
{
    return strcmp(a->preset, b->preset) == 0 && strcmp(a->name, b->name) == 0 &&
           a->num_sms == b->num_sms && a->mode == b->mode && a->timeslice_us == b->timeslice_us &&
           a->scale == b->scale && a->fp32_flops == b->fp32_flops && a->dram_bw == b->dram_bw;
}

static int any_owner(const struct sim_gpu *g)
{
    for (int i = 0; i < SIM_MAX_OWNERS; i++)
        if (g->owners[i].used)
            return 1;
    return 0;
}

static size_t segment_size(void)
{
    return (sizeof(struct sim_shm) + 4095) & ~(size_t)4095;
}

/* The segment's creator still holds its advisory lock on FD: it is alive and initialising. */
static int creator_busy(int fd)
{
    if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
        flock(fd, LOCK_UN);
        return 0;
    }
    return errno == EWOULDBLOCK;
}

/* Maps the segment NAME, creating it if needed. Returns 0, or -EAGAIN to retry. */
static int map_segment(const struct sim_dev_params *p, struct sim_shm **out)
{
    size_t size = segment_size();
    int created = 1;
    int fd = shm_open(drv.shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        created = 0;
        fd = shm_open(drv.shm_name, O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0 && errno == ENOENT)
            return -EAGAIN; /* unlinked meanwhile */
    }
    if (fd < 0)
        return -errno;
    /* The creator holds an advisory lock on the segment until it is initialised (a dead
     * creator's goes with it), so that a waiter tells a slow creator (starved, at SCHED_IDLE)
     * from a dead one: only a dead one's segment is replaced. */
    if (created)
        flock(fd, LOCK_EX);
    if (created && ftruncate(fd, (off_t)size) < 0) {
        int e = errno;
        close(fd);
        shm_unlink(drv.shm_name);
        return -e;
    }
    if (!created) {
        /* the creator may not have sized it yet: wait while it lives (after 2 s, a creator
         * that holds no lock on it is dead) */
        struct stat st;
        for (int i = 0;; i++) {
            if (fstat(fd, &st) == 0 && (size_t)st.st_size >= size)
                break;
            if (i >= 2000 && !creator_busy(fd))
                break;
            usleep(1000);
        }
        if (fstat(fd, &st) < 0 || (size_t)st.st_size != size) {
            close(fd);
            drv_debug("segment %s has the wrong size: replacing it", drv.shm_name);
            shm_unlink(drv.shm_name);
            return -EAGAIN;
        }
    }
    struct sim_shm *shm = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shm == MAP_FAILED) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (created) {
        shm_init_header(shm, p);
        /* fault injection for tests: a creator that is slow to initialise (starved) */
        const char *slow = getenv("POS_SIM_FAULT_SLOW_CREATE_MS");
        if (slow && *slow)
            usleep((useconds_t)atoi(slow) * 1000u);
        atomic_store_explicit(&shm->ready, 1, memory_order_release);
    } else {
        for (int i = 0; !atomic_load_explicit(&shm->ready, memory_order_acquire); i++) {
            if (i >= 2000 && !creator_busy(fd))
                break;
            usleep(1000);
        }
        if (!atomic_load(&shm->ready) || shm->magic != SIM_SHM_MAGIC ||
            shm->version != SIM_SHM_VERSION) {
            /* its creator died before finishing, or an older build made it */
            drv_debug("segment %s is unusable: replacing it", drv.shm_name);
            munmap(shm, size);
            close(fd);
            shm_unlink(drv.shm_name);
            return -EAGAIN;
        }
    }
    close(fd); /* the creator's advisory lock goes with it */
    drv.shm_size = size;
    *out = shm;
    return 0;
}

/* Every process recorded in the segment SHM is gone (pid and start time), or it has none. A
 * read without the lock: a caller that acts on it checks again under the lock. */
static int all_owners_dead(const struct sim_shm *shm)
{
    for (int i = 0; i < SIM_MAX_OWNERS; i++)
        if (shm->gpu.owners[i].used && owner_alive(&shm->gpu.owners[i]))
            return 0;
    return 1;
}

/* One segment of another instance of this uid: unlinks it if it is initialised, of this
 * layout, and every process it records is gone (its last process was killed, so none
 * unlinked it). Under its lock, with the protocol of drv_detach (dead = 1, then unlink), so
 * a process attaching to it meanwhile sees it dead and makes a new one; a lock that is held
 * (a live user, or a stopped one) leaves it alone. */
static void reclaim_segment(const char *name, size_t size)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_uid != getuid() || !S_ISREG(st.st_mode) ||
        (size_t)st.st_size != size) {
        close(fd);
        return;
    }
    struct sim_shm *shm = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (shm == MAP_FAILED)
        return;
    if (atomic_load_explicit(&shm->ready, memory_order_acquire) && shm->magic == SIM_SHM_MAGIC &&
        shm->version == SIM_SHM_VERSION && !shm->dead && all_owners_dead(shm)) {
        int rc = pthread_mutex_trylock(&shm->lock);
        if (rc == 0 || rc == EOWNERDEAD) {
            char path[320];
            struct stat now;
            snprintf(path, sizeof path, "/dev/shm%s", name);
            /* still the same segment under that name, and still unused */
            if (!shm->dead && all_owners_dead(shm) && stat(path, &now) == 0 &&
                now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
                shm->dead = 1;
                shm_unlink(name);
                drv_debug("unlinked %s: every process of that virtual GPU is gone", name);
            }
            if (rc == EOWNERDEAD)
                pthread_mutex_consistent(&shm->lock);
            pthread_mutex_unlock(&shm->lock);
        }
    }
    munmap(shm, size);
}

/* At attach: the segments of this uid's other instances whose processes are all gone (killed,
 * so none unlinked it) are unlinked, so that instances named per run (tests, scripts) leave
 * nothing behind for long in /dev/shm (docs/sim.md). This instance's own segment is reused
 * afresh by drv_attach instead. */
static void reclaim_dead_segments(size_t size)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    char prefix[48];
    snprintf(prefix, sizeof prefix, "pos-sim.%u.", (unsigned)getuid());
    struct dirent *e;
    while ((e = readdir(d))) {
        char name[300];
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        snprintf(name, sizeof name, "/%s", e->d_name);
        if (strcmp(name, drv.shm_name) != 0)
            reclaim_segment(name, size);
    }
    closedir(d);
}

CUresult drv_attach(void)
{
    struct sim_dev_params p;
    char err[512];
    if (sim_params_from_env(&p, err, sizeof err) < 0) {
        fprintf(stderr, "pos-sim: %s\n", err);
        return CUDA_ERROR_NO_DEVICE;
    }
    instance_name(drv.shm_name, sizeof drv.shm_name);
    const char *stats = getenv("POS_SIM_STATS");
    drv.lock_stats = stats && *stats;
    drv.attach_mono_ns = drv_mono_ns();
    reclaim_dead_segments(segment_size());
    for (int attempt = 0; attempt < 50; attempt++) {
        struct sim_shm *shm = NULL;
        int rc = map_segment(&p, &shm);
        if (rc == -EAGAIN)
            continue;
        if (rc < 0 || !shm) { /* no segment without an error: only if a call left errno 0 */
            fprintf(stderr, "pos-sim: cannot map the virtual GPU %s: %s\n", drv.shm_name,
                    strerror(rc < 0 ? -rc : EIO));
            return CUDA_ERROR_NO_DEVICE;
        }
        drv.shm = shm;
        drv.owner = -1;
        drv_lock();
        if (shm->dead) {
            drv_unlock();
            munmap(shm, drv.shm_size);
            continue;
        }
        drv_liveness_scan(drv_mono_ns());
        struct sim_gpu *g = &shm->gpu;
        if (!any_owner(g)) {
            /* nobody uses it: it becomes a fresh device of the kind this process asked for */
            shm->origin_ns = drv_mono_ns();
            sim_gpu_init(g, &p, 0);
            for (int i = 0; i < SIM_MAX_OWNERS; i++)
                ring_reset(i);
        } else if (!same_device(&g->p, &p)) {
            fprintf(stderr,
                    "pos-sim: virtual GPU '%s' is in use as %s (%s, scale %g); this process "
                    "asked for %s (%s, scale %g). Use the same POS_SIM_* settings, or another "
                    "POS_SIM_INSTANCE.\n",
                    drv.shm_name, g->p.preset, g->p.mode == SIM_MODE_MPS ? "mps" : "timeslice",
                    g->p.scale, p.preset, p.mode == SIM_MODE_MPS ? "mps" : "timeslice", p.scale);
            drv_unlock();
            munmap(shm, drv.shm_size);
            drv.shm = NULL;
            return CUDA_ERROR_NO_DEVICE;
        }
        int o = sim_gpu_owner_add(g);
        if (o < 0) {
            drv_unlock();
            fprintf(stderr, "pos-sim: virtual GPU %s has %d processes already\n", drv.shm_name,
                    SIM_MAX_OWNERS);
            munmap(shm, drv.shm_size);
            drv.shm = NULL;
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        ring_reset(o);
        g->owners[o].ident[0] = (uint64_t)getpid();
        g->owners[o].ident[1] = drv_proc_start_time(getpid());
        drv.owner = o;
        drv.g = g;
        drv.origin_ns = shm->origin_ns;
        drv.scale = g->p.scale;
        drv.npool = (uint32_t)drv_pool_alloc(drv.pool, DRV_POOL_FILL); /* the first launches' */
        if (drv_server_ensure() < 0) {
            sim_gpu_owner_remove(g, o, drv_device_now());
            ring_reset(o);
            drv.owner = -1;
            drv.g = NULL;
            if (!any_owner(g)) {
                shm->dead = 1;
                shm_unlink(drv.shm_name);
            }
            drv_unlock();
            munmap(shm, drv.shm_size);
            drv.shm = NULL;
            return CUDA_ERROR_NO_DEVICE;
        }
        drv_unlock();
        drv_debug("attached to %s as owner %d (%s, %s)", drv.shm_name, o, g->p.preset,
                  g->p.mode == SIM_MODE_MPS ? "mps" : "timeslice");
        return CUDA_SUCCESS;
    }
    fprintf(stderr, "pos-sim: could not attach to the virtual GPU %s\n", drv.shm_name);
    return CUDA_ERROR_NO_DEVICE;
}

/* At exit: leave the device; the last user unlinks it. */
__attribute__((destructor)) static void drv_detach(void)
{
    if (!drv.shm || drv.forked || drv.owner < 0)
        return;
    drv_agent_stop();
    drv_debug("agent: %llu cycles, %llu woke before anything completed, %llu times its work "
              "was silent for 200 ms",
              (unsigned long long)drv.agent_cycles, (unsigned long long)drv.early_wakes,
              (unsigned long long)drv_device_checks());
    drv_write_lock_stats();
    drv.lock_stats = 0;
    drv_lock();
    struct sim_gpu *g = &drv.shm->gpu;
    sim_gpu_owner_remove(g, drv.owner, drv_device_now());
    ring_reset(drv.owner);
    drv.owner = -1;
    drv_liveness_scan(drv_mono_ns());
    if (!any_owner(g)) {
        drv.shm->dead = 1;
        shm_unlink(drv.shm_name);
    }
    drv_unlock();
    drv_server_kick(); /* it leaves with the last process */
}
