/* The CPU lever's hands (docs/policy.md, "The host CPU"): the core decides which clients are
 * lowered (sched_grant.cpu_low); this file lowers every thread of such a client
 * (/proc/PID/task, rescanned while it is lowered) to SCHED_IDLE or a nice value with
 * sched_setattr, never above what the thread had, and puts each back as it was: when the core
 * lifts it, when the client leaves, at posd's exit (a fatal signal's handler too), and at the
 * next posd's start after a kill, from the record STATE_DIR/cpu-lowered that is written before
 * any thread is lowered. A thread that changed its own setting meanwhile is left as it chose. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sched/cpu.h"
#include "sched/files.h"

#ifndef SCHED_IDLE
#define SCHED_IDLE 5
#endif
#define CPU_FLAG_RESET_ON_FORK 0x01ull

/* The kernel's struct sched_attr, first version (SCHED_ATTR_SIZE_VER0), under a name of our
 * own: glibc 2.41 declares one in <sched.h>. */
struct cpu_attr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
};

static struct posd *cpu_posd; /* for the fatal signals' handler */
static pid_t cpu_posd_pid;    /* a child of posd (saver, probe) that crashes restores nothing */
static int cpu_file_fd = -1;  /* STATE_DIR/cpu-lowered, opened at the first lowering */
static int cpu_file_said;     /* no record can be kept: said once */

static int get_attr(pid_t tid, struct cpu_attr *a)
{
    memset(a, 0, sizeof *a);
    return syscall(SYS_sched_getattr, tid, a, (unsigned)sizeof *a, 0U) < 0 ? -errno : 0;
}

static int set_attr(pid_t tid, uint32_t policy, int32_t nice, uint64_t flags)
{
    struct cpu_attr a = {.size = sizeof a,
                         .sched_policy = policy,
                         .sched_flags = flags & CPU_FLAG_RESET_ON_FORK,
                         .sched_nice = nice};
    return syscall(SYS_sched_setattr, tid, &a, 0U) < 0 ? -errno : 0;
}

/* Is TID now as posd set it (T), so that posd may put it back? */
static int still_as_set(pid_t tid, const struct posd_cpu_thread *t)
{
    struct cpu_attr a;
    if (get_attr(tid, &a) < 0)
        return 0;
    if (a.sched_policy != t->set_policy)
        return 0;
    return t->set_policy == SCHED_IDLE || a.sched_nice == t->set_nice;
}

/* Field 22 of PATH (a /proc/.../stat): the thread's start time in clock ticks since boot; 0
 * when it cannot be read. */
static uint64_t start_time_of(const char *path)
{
    char buf[512];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
    if (!p)
        return 0;
    /* after ") " come field 3 (state) .. field 22 (starttime) */
    unsigned long long v = 0;
    for (int field = 3; field <= 22 && p; field++) {
        p = strchr(p + 1, ' ');
        if (p && field == 22)
            v = strtoull(p + 1, NULL, 10);
    }
    return v;
}

static uint64_t thread_start(pid_t pid, pid_t tid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    return start_time_of(path);
}

/* Now, in the clock ticks of a thread's start time (CLOCK_BOOTTIME). */
static uint64_t boot_ticks(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0)
        hz = 100;
    return (uint64_t)ts.tv_sec * (uint64_t)hz +
           (uint64_t)ts.tv_nsec / (1000000000ull / (uint64_t)hz);
}

/* ---- the record of lowered threads ----------------------------------------------------- */

/* One line per lowered thread: "TID START POLICY NICE FLAGS SET_POLICY SET_NICE". */
static void save(struct posd *d)
{
    if (d->state_fd < 0) {
        if (!cpu_file_said++)
            posd_log(POSD_LOG_WARN, "cpu lever: no state directory, so a posd killed while "
                                    "threads are lowered leaves them lowered");
        return;
    }
    if (cpu_file_fd < 0) {
        cpu_file_fd =
            openat(d->state_fd, POSD_CPU_FILE, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (cpu_file_fd < 0) {
            if (!cpu_file_said++)
                posd_log(POSD_LOG_WARN,
                         "cpu lever: %s/" POSD_CPU_FILE ": %s: a posd killed while threads are "
                         "lowered leaves them lowered",
                         d->state_dir, strerror(errno));
            return;
        }
    }
    static char buf[POSD_MAX_CLIENTS * 8 * 96]; /* grown into a heap buffer if needed */
    char *out = buf;
    size_t cap = sizeof buf, len = 0;
    char *heap = NULL;
    len += (size_t)snprintf(out, cap, "# posd cpu lever: threads lowered, as they were\n");
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        const struct posd_cpu_client *cc = &d->clients[i].cpu;
        for (int j = 0; d->clients[i].used && j < cc->nthreads; j++) {
            const struct posd_cpu_thread *t = &cc->t[j];
            if (cap - len < 128) {
                char *grown = realloc(heap, cap * 2);
                if (!grown)
                    goto write;
                if (!heap)
                    memcpy(grown, buf, len);
                heap = out = grown;
                cap *= 2;
            }
            len += (size_t)snprintf(out + len, cap - len, "%d %llu %u %d %llu %u %d\n", (int)t->tid,
                                    (unsigned long long)t->start, t->policy, t->nice,
                                    (unsigned long long)t->flags, t->set_policy, t->set_nice);
        }
    }
write:
    /* written over in place (the page cache outlives posd's kill): a longer old tail left by a
     * kill between the two calls names threads that are either as posd set them (to be put
     * back) or not (left alone) */
    if (pwrite(cpu_file_fd, out, len, 0) != (ssize_t)len || ftruncate(cpu_file_fd, (off_t)len) < 0)
        if (!cpu_file_said++)
            posd_log(POSD_LOG_WARN, "cpu lever: writing %s/" POSD_CPU_FILE ": %s", d->state_dir,
                     strerror(errno));
    free(heap);
}

/* ---- lowering and restoring ------------------------------------------------------------- */

static void say_once(struct posd_client *c, const char *what, pid_t tid, int err)
{
    if (c->cpu.said)
        return;
    c->cpu.said = 1;
    posd_log(POSD_LOG_WARN,
             "cpu lever: client %u (pid %d, %s): cannot %s thread %d: %s; it goes on at its own "
             "priority (said once per client)",
             c->id, (int)c->ident.pid, c->ident.app, what, (int)tid, strerror(-err));
}

static int find_thread(const struct posd_cpu_client *cc, pid_t tid)
{
    for (int j = 0; j < cc->nthreads; j++)
        if (cc->t[j].tid == tid)
            return j;
    return -1;
}

/* What lever LOW makes of a thread at A: 0 and the setting in *T, or -1 when it is left as it
 * is (real-time or deadline threads, one at SCHED_IDLE, one already as nice). */
static int lowered_setting(const struct posd *d, int low, const struct cpu_attr *a,
                           struct posd_cpu_thread *t)
{
    if (a->sched_policy != SCHED_OTHER && a->sched_policy != SCHED_BATCH)
        return -1;
    t->policy = a->sched_policy;
    t->nice = a->sched_nice;
    t->flags = a->sched_flags & CPU_FLAG_RESET_ON_FORK;
    if (low == POS_CPU_IDLE) {
        t->set_policy = SCHED_IDLE;
        t->set_nice = a->sched_nice;
        return 0;
    }
    if (a->sched_nice >= (int32_t)d->cfg.cpu_nice)
        return -1;
    t->set_policy = a->sched_policy;
    t->set_nice = (int32_t)d->cfg.cpu_nice;
    return 0;
}

/* A thread first seen while its client is lowered, that started since and is as posd lowers:
 * it inherited that from a lowered thread that made it. Its "original" is the least important
 * one of the client's lowered threads (never more than any of them had). */
static int inherited_setting(const struct posd_cpu_client *cc, const struct cpu_attr *a,
                             uint64_t start, struct posd_cpu_thread *t)
{
    if (!cc->nthreads || start < cc->since_ticks)
        return -1;
    const struct posd_cpu_thread *least = NULL;
    for (int j = 0; j < cc->nthreads; j++) {
        const struct posd_cpu_thread *o = &cc->t[j];
        if (a->sched_policy != o->set_policy ||
            (o->set_policy != SCHED_IDLE && a->sched_nice != o->set_nice))
            continue;
        if (!least || o->nice > least->nice)
            least = o;
    }
    if (!least)
        return -1;
    *t = *least;
    return 0;
}

/* Lowers C's threads not lowered yet (all of them at first, then the ones made since) as LOW
 * says; threads gone are forgotten. The record is saved when it changed. */
static void lower_client(struct posd *d, struct posd_client *c, int low)
{
    struct posd_cpu_client *cc = &c->cpu;
    char path[48];
    snprintf(path, sizeof path, "/proc/%d/task", (int)c->ident.pid);
    DIR *dir = opendir(path);
    if (!dir) {
        say_once(c, "list the threads of", c->ident.pid, -errno);
        return;
    }
    int changed = 0, seen[POSD_CPU_THREADS] = {0};
    struct posd_cpu_thread add[POSD_CPU_THREADS];
    int nadd = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end || tid <= 0)
            continue;
        int j = find_thread(cc, (pid_t)tid);
        if (j >= 0) {
            seen[j] = 1;
            continue;
        }
        if (cc->nthreads + nadd >= POSD_CPU_THREADS) {
            if (!cc->full_said++)
                posd_log(POSD_LOG_WARN,
                         "cpu lever: client %u (pid %d, %s) has more than %d threads: the rest "
                         "run at their own priority",
                         c->id, (int)c->ident.pid, c->ident.app, POSD_CPU_THREADS);
            continue;
        }
        struct cpu_attr a;
        int rc = get_attr((pid_t)tid, &a);
        if (rc < 0) {
            if (rc != -ESRCH)
                say_once(c, "read the priority of", (pid_t)tid, rc);
            continue;
        }
        uint64_t start = thread_start(c->ident.pid, (pid_t)tid);
        struct posd_cpu_thread t;
        if (!start)
            continue; /* gone meanwhile */
        if (lowered_setting(d, low, &a, &t) < 0 && inherited_setting(cc, &a, start, &t) < 0)
            continue;
        t.tid = (int32_t)tid;
        t.start = start;
        add[nadd++] = t;
    }
    closedir(dir);
    /* threads that are gone: forgotten */
    int keep = 0;
    for (int j = 0; j < cc->nthreads; j++) {
        if (seen[j])
            cc->t[keep++] = cc->t[j];
        else
            changed = 1;
    }
    cc->nthreads = keep;
    if (!nadd) {
        if (changed)
            save(d);
        return;
    }
    /* the record first: a posd killed from here on has left what the next one puts back */
    memcpy(&cc->t[cc->nthreads], add, (size_t)nadd * sizeof add[0]);
    cc->nthreads += nadd;
    save(d);
    keep = 0;
    for (int j = 0; j < cc->nthreads; j++) {
        struct posd_cpu_thread *t = &cc->t[j];
        int rc =
            still_as_set(t->tid, t) ? 0 : set_attr(t->tid, t->set_policy, t->set_nice, t->flags);
        if (rc == 0) {
            cc->t[keep++] = *t;
        } else if (rc != -ESRCH) {
            say_once(c, "lower", t->tid, rc);
        }
    }
    cc->nthreads = keep;
}

/* Puts T back as it was, if it is still the thread posd lowered and as posd set it. */
static int restore_thread(pid_t pid, const struct posd_cpu_thread *t)
{
    if (thread_start(pid, t->tid) != t->start || !still_as_set(t->tid, t))
        return 0;
    return set_attr(t->tid, t->policy, t->nice, t->flags);
}

/* Threads made since C's last scan that inherited what posd set from a lowered thread that
 * made them: taken into its table, to be put back with it. */
static void adopt_inherited(struct posd_client *c)
{
    struct posd_cpu_client *cc = &c->cpu;
    char path[48];
    snprintf(path, sizeof path, "/proc/%d/task", (int)c->ident.pid);
    DIR *dir = cc->nthreads ? opendir(path) : NULL;
    if (!dir)
        return;
    for (struct dirent *e; (e = readdir(dir)) && cc->nthreads < POSD_CPU_THREADS;) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        struct cpu_attr a;
        if (*end || tid <= 0 || find_thread(cc, (pid_t)tid) >= 0 || get_attr((pid_t)tid, &a) < 0)
            continue;
        uint64_t start = thread_start(c->ident.pid, (pid_t)tid);
        struct posd_cpu_thread t;
        if (!start || inherited_setting(cc, &a, start, &t) < 0)
            continue;
        t.tid = (int32_t)tid;
        t.start = start;
        cc->t[cc->nthreads++] = t;
    }
    closedir(dir);
}

static void restore_client(struct posd *d, struct posd_client *c, int save_after)
{
    struct posd_cpu_client *cc = &c->cpu;
    if (cc->low != POS_CPU_OFF)
        adopt_inherited(c);
    for (int j = 0; j < cc->nthreads; j++) {
        int rc = restore_thread(c->ident.pid, &cc->t[j]);
        if (rc < 0 && rc != -ESRCH)
            say_once(c, "restore", cc->t[j].tid, rc);
    }
    int had = cc->nthreads;
    cc->nthreads = 0;
    cc->low = POS_CPU_OFF;
    if (had && save_after)
        save(d);
}

void posd_cpu_apply(struct posd *d, struct posd_client *c, int low, int64_t now)
{
    struct posd_cpu_client *cc = &c->cpu;
    if (c->ident.pid <= 0)
        return;
    if (low == POS_CPU_OFF) {
        if (cc->low != POS_CPU_OFF)
            restore_client(d, c, 1);
        return;
    }
    if (cc->low != POS_CPU_OFF && cc->low != low)
        restore_client(d, c, 1); /* another lever after a reload: from the originals again */
    if (cc->low == low && now < cc->scan_at)
        return;
    if (cc->low == POS_CPU_OFF)
        cc->since_ticks = boot_ticks();
    cc->low = low;
    cc->scan_at = now + POSD_CPU_RESCAN_NS;
    lower_client(d, c, low);
}

void posd_cpu_client_remove(struct posd *d, struct posd_client *c)
{
    if (c->cpu.low != POS_CPU_OFF || c->cpu.nthreads)
        restore_client(d, c, 1);
}

int posd_cpu_any_lowered(const struct posd *d)
{
    for (int i = 0; i < POSD_MAX_CLIENTS; i++)
        if (d->clients[i].used && d->clients[i].cpu.low != POS_CPU_OFF)
            return 1;
    return 0;
}

void posd_cpu_restore_all(struct posd *d)
{
    for (int i = 0; i < POSD_MAX_CLIENTS; i++)
        if (d->clients[i].used &&
            (d->clients[i].cpu.low != POS_CPU_OFF || d->clients[i].cpu.nthreads))
            restore_client(d, &d->clients[i], 0);
    if (cpu_file_fd >= 0) {
        close(cpu_file_fd);
        cpu_file_fd = -1;
        posd_state_remove(d->state_fd, POSD_CPU_FILE);
    }
}

/* ---- a killed posd's threads, and fatal signals ------------------------------------------- */

void posd_cpu_recover(struct posd *d)
{
    if (d->state_fd < 0)
        return;
    char msg[512];
    int err = 0;
    FILE *f = posd_state_read(d->state_fd, POSD_CPU_FILE, &err, msg, sizeof msg);
    if (!f) {
        if (err != -ENOENT)
            posd_log(POSD_LOG_WARN, "cpu lever: %s", msg);
        return;
    }
    char line[160];
    int restored = 0, left = 0;
    while (fgets(line, sizeof line, f)) {
        struct posd_cpu_thread t;
        int tid, nice, set_nice;
        unsigned long long start, flags;
        unsigned policy, set_policy;
        char nl;
        if (line[0] == '#' ||
            sscanf(line, "%d %llu %u %d %llu %u %d%c", &tid, &start, &policy, &nice, &flags,
                   &set_policy, &set_nice, &nl) != 8 ||
            nl != '\n' || tid <= 0 || nice < -20 || nice > 19 ||
            (policy != SCHED_OTHER && policy != SCHED_BATCH))
            continue;
        t = (struct posd_cpu_thread){.tid = tid,
                                     .start = start,
                                     .policy = policy,
                                     .nice = nice,
                                     .flags = flags,
                                     .set_policy = set_policy,
                                     .set_nice = set_nice};
        char path[48];
        snprintf(path, sizeof path, "/proc/%d/stat", tid); /* a thread of any process */
        if (start_time_of(path) != start || !still_as_set(tid, &t)) {
            left++;
            continue;
        }
        if (set_attr(tid, t.policy, t.nice, t.flags) == 0)
            restored++;
    }
    fclose(f);
    posd_state_remove(d->state_fd, POSD_CPU_FILE);
    if (restored || left)
        posd_log(POSD_LOG_INFO,
                 "cpu lever: put back %d thread%s a posd before this one left lowered (%d gone "
                 "or changed since)",
                 restored, restored == 1 ? "" : "s", left);
}

/* A fatal signal: every lowered thread put back (system calls only), then the signal's own
 * action. */
static void on_fatal(int sig)
{
    struct posd *d = cpu_posd;
    if (d && getpid() == cpu_posd_pid) {
        for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
            const struct posd_cpu_client *cc = &d->clients[i].cpu;
            for (int j = 0; j < cc->nthreads && j < POSD_CPU_THREADS; j++)
                if (still_as_set(cc->t[j].tid, &cc->t[j]))
                    set_attr(cc->t[j].tid, cc->t[j].policy, cc->t[j].nice, cc->t[j].flags);
        }
    }
    raise(sig); /* SA_RESETHAND: the default action now */
}

void posd_cpu_start(struct posd *d)
{
    static const int fatal[] = {SIGQUIT,   SIGILL,  SIGTRAP, SIGABRT, SIGBUS,  SIGFPE,
                                SIGUSR1,   SIGSEGV, SIGUSR2, SIGALRM, SIGXCPU, SIGXFSZ,
                                SIGVTALRM, SIGPROF, SIGIO,   SIGPWR,  SIGSYS,  SIGSTKFLT};
    cpu_posd = d;
    cpu_posd_pid = getpid();
    struct sigaction sa = {.sa_handler = on_fatal, .sa_flags = SA_RESETHAND | SA_NODEFER};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        sigaction(fatal[i], &sa, NULL);
}
