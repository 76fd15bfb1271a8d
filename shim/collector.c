/* The collector: a background thread that drains the per-thread record rings, learns when
 * operators completed (completion markers landing in host memory, with the device's end from
 * the timing event behind each (shim/devtime.c); synchronisations that covered them), resolves
 * kernel names the launch path did not know, and writes the trace. Everything slow happens here,
 * never on the launch path. */
#include "shim/shim.h"
#include "pos/psi.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define COMPLETION_TIMEOUT_NS 2000000000ull /* give up waiting for a completion after 2 s */

_Atomic uint64_t shim_first_ctx;

struct pending {
    struct pos_op_record r;
};

/* A thread's counters, or the sum of several threads'. */
struct counts {
    uint64_t launches, captured, failed, dropped, markers, mfail, syncs, sync_ns;
};

static struct {
    pthread_t thread;
    pthread_once_t once;
    pthread_mutex_t work; /* the collector's state below, for the collector or a waiter */
    pthread_mutex_t mutex;
    pthread_cond_t cond; /* kicks wake the collector before its sleep ends */
    int kicked;
    _Atomic int started, stop;
    _Atomic uint64_t pass_ns; /* the collector's CPU per pass, its moving average */
    _Atomic uint32_t pressure; /* the host's CPU pressure, per mille (1001: not known) */
    struct pending *pend;
    size_t npend, cap;
    uint64_t next_seq;
    FILE *trace;
    uint64_t written, timed_out, dropped;
    struct counts exited; /* of the threads whose rings were reclaimed */
} col = {.once = PTHREAD_ONCE_INIT,
       .work = PTHREAD_MUTEX_INITIALIZER,
       .mutex = PTHREAD_MUTEX_INITIALIZER,
       .cond = PTHREAD_COND_INITIALIZER,
       .next_seq = 1};

/* ---- trace -------------------------------------------------------------------------------- */

static const char *kind_name(uint16_t kind)
{
    switch (kind) {
    case POS_OP_KERNEL:
        return "kernel";
    case POS_OP_KERNEL_EX:
        return "kernel_ex";
    case POS_OP_COOPERATIVE:
        return "cooperative";
    case POS_OP_GRAPH:
        return "graph";
    case POS_OP_HOSTFN:
        return "hostfn";
    default:
        return "?";
    }
}

/* POS_TRACE with every "%p" replaced by the process id, so that a process tree traced with
 * one setting writes one file per process. */
static void trace_path(char *out, size_t len)
{
    size_t k = 0;
    for (const char *p = shim_cfg.trace_path; *p && k + 1 < len; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            k += (size_t)snprintf(out + k, len - k, "%d", (int)getpid());
            p++;
        } else {
            out[k++] = *p;
        }
    }
    out[k < len ? k : len - 1] = '\0';
}

static void trace_open(void)
{
    if (!shim_cfg.trace_path[0])
        return;
    char path[sizeof shim_cfg.trace_path + 16];
    trace_path(path, sizeof path);
    col.trace = fopen(path, "w");
    if (!col.trace) {
        shim_log("cannot write POS_TRACE=%s: %s; no trace", path, strerror(errno));
        return;
    }
    char exe[512] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0)
        exe[n] = '\0';
    fprintf(col.trace,
            "# pos-trace %d\n# pid %d exe %s clock CLOCK_MONOTONIC sample %u poll_us %u\n"
            "# seq tid kind name grid block smem stream ctx submit_ns complete_ns done\n",
            POS_OP_RECORD_VERSION, (int)getpid(), exe, shim_cfg.sample, shim_cfg.poll_us);
}

static void trace_write(const struct pos_op_record *r)
{
    static const char *const how[] = {"-", "marker", "bound", "device"};
    const char *name = r->kind == POS_OP_GRAPH    ? "graph"
                       : r->kind == POS_OP_HOSTFN ? "hostfn"
                                                  : shim_ident_name(r->kernel_id);
    char done[32] = "-";
    if (r->complete_ns)
        snprintf(done, sizeof done, "%llu", (unsigned long long)r->complete_ns);
    fprintf(col.trace, "%llu %u %s %s %u,%u,%u %u,%u,%u %u 0x%llx 0x%llx %llu %s %s\n",
            (unsigned long long)r->seq, r->tid, kind_name(r->kind), name, r->grid[0], r->grid[1],
            r->grid[2], r->block[0], r->block[1], r->block[2], r->smem,
            (unsigned long long)r->stream, (unsigned long long)r->ctx,
            (unsigned long long)r->submit_ns, done, how[r->done_how <= 3 ? r->done_how : 0]);
}

/* ---- completion ----------------------------------------------------------------------------- */

/* Operators on the same stream complete in order. The default stream of a per-thread entry
 * point is the thread's own; the legacy default stream is the context's. */
static int same_stream(const struct pos_op_record *a, const struct pos_op_record *b)
{
    if (a->stream != b->stream)
        return 0;
    if (a->stream == POS_STREAM_DEFAULT || a->stream == POS_STREAM_PER_THREAD) {
        int pa = (a->flags & POS_OPF_PTSZ) || a->stream == POS_STREAM_PER_THREAD;
        int pb = (b->flags & POS_OPF_PTSZ) || b->stream == POS_STREAM_PER_THREAD;
        return pa == pb && a->ctx == b->ctx && (!pa || a->tid == b->tid);
    }
    return 1;
}

/* The token of R's timing event, in its marker's high half (shim/launch.c place_marker). */
static uint32_t devtime_of(const struct pos_op_record *r)
{
    return (uint32_t)(r->marker >> 32);
}

static void complete(struct pos_op_record *r, uint64_t when, uint16_t how)
{
    r->complete_ns = when;
    r->done_how = how;
}

static void poll_markers(void)
{
    if (!shim_marker_slots)
        return;
    uint64_t now = shim_now_ns();
    for (size_t i = 0; i < col.npend; i++) {
        struct pos_op_record *r = &col.pend[i].r;
        if (!r->marker || !pos_done_takes(r->done_how, POS_DONE_MARKER))
            continue;
        uint32_t want = (uint32_t)r->marker; /* the value; its timing event in the high half */
        if (atomic_load_explicit(&shim_marker_slots[want % SHIM_MARKER_SLOTS],
                                 memory_order_acquire) != want)
            continue;
        /* its timing event, if it has one, says when the device ended it */
        uint64_t end = now;
        /* (not bounded by NOW: a marker that landed while this pass ran is seen too) */
        if (devtime_of(r) && shim_devtime_read(devtime_of(r), &end) == 0)
            complete(r, end, POS_DONE_DEVICE);
        else
            complete(r, end = now, POS_DONE_MARKER);
        r->marker = want; /* its event is given back */
        /* everything earlier on its stream is done too */
        for (size_t k = 0; k < col.npend; k++) {
            struct pos_op_record *o = &col.pend[k].r;
            if (o != r && o->submit_ns <= r->submit_ns &&
                pos_done_takes(o->done_how, POS_DONE_BOUND) && same_stream(o, r))
                complete(o, end, POS_DONE_BOUND);
        }
    }
}

static void apply_sync(const struct shim_sync_event *e, uint32_t tid)
{
    if (e->result != CUDA_SUCCESS || e->kind == SHIM_SYNC_EVENT)
        return;
    struct pos_op_record probe = {.stream = e->stream,
                                  .ctx = e->ctx,
                                  .tid = e->tid ? e->tid : tid,
                                  .flags = e->ptsz ? POS_OPF_PTSZ : 0};
    for (size_t i = 0; i < col.npend; i++) {
        struct pos_op_record *r = &col.pend[i].r;
        if (!pos_done_takes(r->done_how, POS_DONE_BOUND) || r->submit_ns > e->start_ns)
            continue;
        if (e->kind == SHIM_SYNC_CTX ? r->ctx == e->ctx : same_stream(r, &probe))
            complete(r, e->end_ns, POS_DONE_BOUND);
    }
}

/* ---- draining ------------------------------------------------------------------------------- */

static int pend_push(const struct pos_op_record *r)
{
    if (col.npend == col.cap) {
        size_t cap = col.cap ? col.cap * 2 : 4096;
        struct pending *np = realloc(col.pend, cap * sizeof *np);
        if (!np)
            return -1;
        col.pend = np;
        col.cap = cap;
    }
    col.pend[col.npend++].r = *r;
    return 0;
}

static void add_counts(struct counts *c, struct shim_thread *t)
{
    c->launches += atomic_load(&t->launches);
    c->captured += atomic_load(&t->captured);
    c->failed += atomic_load(&t->failed);
    c->dropped += atomic_load(&t->dropped);
    c->markers += atomic_load(&t->markers);
    c->mfail += atomic_load(&t->marker_failures);
    c->syncs += atomic_load(&t->syncs);
    c->sync_ns += atomic_load(&t->sync_ns);
}

static size_t drain(void)
{
    size_t n = 0;
    /* seen exited before its tail was read: once drained, nothing of its thread is left */
    int exited[SHIM_MAX_THREADS];
    for (int i = 0; i < SHIM_MAX_THREADS; i++) {
        struct shim_thread *t = &shim_threads[i];
        int state = atomic_load_explicit(&t->state, memory_order_acquire);
        exited[i] = state == SHIM_RING_EXITED;
        if (state == SHIM_RING_FREE)
            continue;
        uint64_t head = atomic_load_explicit(&t->head, memory_order_relaxed);
        uint64_t tail = atomic_load_explicit(&t->tail, memory_order_acquire);
        for (; head != tail; head++, n++) {
            struct pos_op_record r = t->ring[head % SHIM_RING];
            if ((r.flags & POS_OPF_FAILED) && r.sched_seq)
                /* it never ran: posd must not count it in flight */
                shim_session_complete(r.session, r.sched_seq, 0, 0, POS_DONE_UNKNOWN, r.result);
            if (r.flags & (POS_OPF_CAPTURED | POS_OPF_FAILED))
                continue; /* not operators */
            r.seq = col.next_seq++;
            if (r.marker && !devtime_of(&r) && shim_cfg.devtime)
                shim_devtime_setup(r.ctx); /* its context's first marker: timing events */
            if (pend_push(&r) < 0)
                col.dropped++; /* out of memory here: the ring's own count is its thread's */
        }
        atomic_store_explicit(&t->head, head, memory_order_release);
    }
    /* synchronisations after the records: a sync covers launches its thread made before */
    for (int i = 0; i < SHIM_MAX_THREADS; i++) {
        struct shim_thread *t = &shim_threads[i];
        if (atomic_load_explicit(&t->state, memory_order_acquire) == SHIM_RING_FREE)
            continue;
        uint64_t head = atomic_load_explicit(&t->sync_head, memory_order_relaxed);
        uint64_t tail = atomic_load_explicit(&t->sync_tail, memory_order_acquire);
        for (; head != tail; head++)
            apply_sync(&t->sync_ring[head % SHIM_SYNC_RING], t->tid);
        atomic_store_explicit(&t->sync_head, head, memory_order_release);
        if (exited[i]) {
            add_counts(&col.exited, t);
            shim_thread_reclaim(t);
        }
    }
    return n;
}

/* Registers the marker slots, in the context of the first operator seen. */
static void setup_markers(void)
{
    CUcontext ctx = col.npend ? (CUcontext)(uintptr_t)col.pend[0].r.ctx
                            : (CUcontext)(uintptr_t)atomic_load(&shim_first_ctx);
    if (ctx && !atomic_load(&shim_marker_dptr))
        shim_markers_setup(ctx);
}

/* Kernel ids from the name map; for a handle the map does not know (a function the
 * application got some other way) the name is asked of the driver, off the launch path,
 * unless ASK_DRIVER is 0 (at exit, when the driver may be gone). */
static void resolve_names(int ask_driver)
{
    for (size_t i = 0; i < col.npend; i++) {
        struct pos_op_record *r = &col.pend[i].r;
        if (r->kernel_id || r->kind == POS_OP_GRAPH || r->kind == POS_OP_HOSTFN)
            continue;
        r->kernel_id = shim_ident_lookup(r->function);
        const char *name = NULL;
        if (!r->kernel_id && ask_driver && shim_real_cuFuncGetName &&
            shim_real_cuFuncGetName(&name, (CUfunction)(uintptr_t)r->function) == CUDA_SUCCESS)
            r->kernel_id = shim_ident_register(r->function, name);
    }
}

/* Writes out operators whose completion is known (or will not become known) and forgets
 * them. With FINAL, writes everything. Returns how many completions went to posd. */
static size_t emit(int final)
{
    size_t reported = 0;
    uint64_t now = shim_now_ns();
    size_t keep = 0;
    for (size_t i = 0; i < col.npend; i++) {
        struct pos_op_record *r = &col.pend[i].r;
        int waiting = pos_done_pending(r->done_how, r->marker != 0);
        if (waiting && !final && now - r->submit_ns < COMPLETION_TIMEOUT_NS) {
            col.pend[keep++] = col.pend[i];
            continue;
        }
        if (r->sched_seq &&
            shim_session_complete(r->session, r->sched_seq, r->complete_ns,
                                  r->done_how == POS_DONE_DEVICE ? r->submit_ns : 0, r->done_how,
                                  r->result) < 0 &&
            !final) {
            col.pend[keep++] = col.pend[i]; /* posd's channel is full: next cycle */
            continue;
        }
        reported += r->sched_seq != 0;
        if (devtime_of(r))
            shim_devtime_release(devtime_of(r)); /* its marker never landed */
        if (r->done_how == POS_DONE_UNKNOWN)
            col.timed_out++;
        if (col.trace)
            trace_write(r);
        col.written++;
    }
    col.npend = keep;
    return reported;
}

static void collect_once(int final)
{
    pthread_mutex_lock(&col.work);
    drain();
    setup_markers();
    poll_markers();
    resolve_names(!final);
    emit(final);
    pthread_mutex_unlock(&col.work);
}

/* One pass of the collector's work (drain, look at markers, report): by the collector, or by
 * a launching thread that waits for its own completions (shim_collector_help). Returns how
 * many records the rings gave; *REPORTED: how many completions went to posd. */
static size_t collect_pass(size_t *reported)
{
    size_t got = drain();
    setup_markers();
    poll_markers();
    resolve_names(1);
    *reported = emit(0);
    if (*reported)
        shim_session_kick_if_wanted(); /* posd waits on these to release others */
    return got;
}

int shim_collector_help(void)
{
    if (!atomic_load_explicit(&col.started, memory_order_acquire) ||
        atomic_load_explicit(&col.stop, memory_order_relaxed) || pthread_mutex_trylock(&col.work))
        return 0; /* the collector is at it (or gone): its pass counts as well */
    size_t reported;
    collect_pass(&reported);
    pthread_mutex_unlock(&col.work);
    return reported != 0;
}

/* Sleeps US microseconds, or less if kicked. */
static void sleep_us(unsigned us)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)us * 1000;
    while (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&col.mutex);
    while (!col.kicked && !atomic_load(&col.stop))
        if (pthread_cond_timedwait(&col.cond, &col.mutex, &ts) != 0)
            break;
    col.kicked = 0;
    pthread_mutex_unlock(&col.mutex);
}

void shim_collector_kick(void)
{
    pthread_mutex_lock(&col.mutex);
    col.kicked = 1;
    pthread_cond_signal(&col.cond);
    pthread_mutex_unlock(&col.mutex);
}

/* A thread claimed a ring (shim_thread_attach, through shim_threads_start): its context, as
 * early as possible, is one to register completion markers in; the ring is one more to drain. */
void shim_collector_attached(void)
{
    uint64_t ctx = shim_current_ctx();
    if (ctx) {
        uint64_t none = 0;
        atomic_compare_exchange_strong(&shim_first_ctx, &none, ctx);
    }
    shim_collector_kick();
}

/* This thread's CPU time in ns (0 if the clock fails). */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The host's CPU stall counter in ns (PSI's "some" total) from FD, an open /proc/pressure/cpu;
 * -1 without one. */
static int cpu_stall_ns(int fd, uint64_t *ns)
{
    char buf[256];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
    uint64_t us;
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    if (pos_psi_some_total_us(buf, &us) != 0)
        return -1;
    *ns = us * 1000;
    return 0;
}

static void *collector_main(void *arg)
{
    (void)arg;
    /* our own thread: wake on time (the default 50 us slack would triple a 20 us poll) */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    uint32_t idle_us = POS_IDLE_POLL_US;
    uint64_t last_flush = shim_now_ns();
    /* the CPU of one pass, loop to loop (its sleep's and wake-up's kernel time in it): a moving
     * average that keeps the prompt poll at a bounded share of a core */
    uint64_t cpu_last = thread_cpu_ns(), pass_ns = 0;
    /* ... on a host short of cores only (PSI; where the kernel has none, assumed short) */
    int psi = open("/proc/pressure/cpu", O_RDONLY | O_CLOEXEC);
    struct pos_cpu_pressure pressure = {0};
    while (!atomic_load(&col.stop)) {
        shim_session_poll();
        shim_devtime_tick();
        size_t reported;
        pthread_mutex_lock(&col.work);
        shim_session_reclaim();
        size_t got = collect_pass(&reported);
        int npend = col.npend != 0;
        pthread_mutex_unlock(&col.work);
        shim_session_send_names();
        uint64_t now = shim_now_ns();
        if (col.trace && now - last_flush > 100000000ull) {
            fflush(col.trace);
            last_flush = now;
        }
        /* while posd waits on this client's completions (its next operator, or a less
         * important client, is released by them) look often (pos_collector_sleep_ns) */
        uint64_t cpu = thread_cpu_ns(), pass = cpu - cpu_last;
        cpu_last = cpu;
        pass_ns = pass_ns ? pass_ns - pass_ns / 8 + pass / 8 : pass;
        uint64_t stall;
        if (psi >= 0 && pos_cpu_pressure_due(&pressure, now) && cpu_stall_ns(psi, &stall) == 0)
            pos_cpu_pressure_take(&pressure, now, stall);
        uint64_t poll_ns = (uint64_t)shim_cfg.poll_us * 1000;
        uint64_t ns = pos_collector_sleep_ns(
            shim_session_prompt(), got || npend, poll_ns,
            pos_collector_prompt_ns((uint64_t)shim_cfg.prompt_poll_us * 1000, poll_ns, pass_ns,
                                    pos_cpu_contended(&pressure)),
            &idle_us);
        atomic_store_explicit(&col.pass_ns, pass_ns, memory_order_relaxed);
        atomic_store_explicit(&col.pressure, pressure.known ? pressure.permille : 1001u,
                              memory_order_relaxed);
        sleep_us((unsigned)(ns / 1000));
    }
    if (psi >= 0)
        close(psi);
    return NULL;
}

static void start_once(void)
{
    trace_open();
    /* attach to posd before the first launch, so none goes ahead of its policy */
    shim_session_poll();
    if (shim_sched_allowed && !atomic_load(&shim_session) &&
        shim_cfg.mode_requested == SHIM_MODE_SCHEDULED)
        shim_log("POS_MODE=scheduled but no posd at %s: passthrough until one is there",
                 shim_socket_path());
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&col.thread, NULL, collector_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        shim_log("cannot start the collector: %s", strerror(rc));
        return;
    }
    atomic_store(&col.started, 1);
}

void shim_collector_forked(void)
{
    /* another thread of the parent may have held them at the fork; nothing else ran yet */
    pthread_mutex_init(&col.work, NULL);
    pthread_mutex_init(&col.mutex, NULL);
    pthread_cond_init(&col.cond, NULL);
    col.kicked = 0;
}

void shim_collector_start(void)
{
    pthread_once(&col.once, start_once);
}

static void write_summary(void)
{
    struct counts c = col.exited;
    for (int i = 0; i < SHIM_MAX_THREADS; i++) {
        struct shim_thread *t = &shim_threads[i];
        if (atomic_load(&t->state) != SHIM_RING_FREE)
            add_counts(&c, t);
    }
    uint64_t dropped = c.dropped + col.dropped, unrecorded = atomic_load(&shim_unrecorded);
    uint64_t dev_read, dev_fallbacks, dev_late;
    shim_devtime_counts(&dev_read, &dev_fallbacks, &dev_late);
    if (col.trace)
        fprintf(col.trace,
                "# summary operators %llu launches %llu captured %llu failed %llu dropped %llu "
                "markers %llu marker_failures %llu device_times %llu poll_times %llu "
                "recorded_late %llu no_completion %llu syncs %llu sync_ms %.3f unrecorded %llu\n",
                (unsigned long long)col.written, (unsigned long long)c.launches,
                (unsigned long long)c.captured, (unsigned long long)c.failed,
                (unsigned long long)dropped, (unsigned long long)c.markers,
                (unsigned long long)c.mfail, (unsigned long long)dev_read,
                (unsigned long long)dev_fallbacks, (unsigned long long)dev_late,
                (unsigned long long)col.timed_out, (unsigned long long)c.syncs, c.sync_ns / 1e6,
                (unsigned long long)unrecorded);
    if (shim_cfg.debug)
        shim_log("operators %llu launches %llu captured %llu failed %llu dropped %llu "
                 "unrecorded %llu collector_pass_us %.1f cpu_pressure %d",
                 (unsigned long long)col.written, (unsigned long long)c.launches,
                 (unsigned long long)c.captured, (unsigned long long)c.failed,
                 (unsigned long long)dropped, (unsigned long long)unrecorded,
                 (double)atomic_load(&col.pass_ns) / 1e3,
                 atomic_load(&col.pressure) > 1000 ? -1 : (int)atomic_load(&col.pressure));
}

void shim_collector_stop(void)
{
    if (!atomic_load(&col.started))
        return;
    atomic_store(&col.stop, 1);
    shim_collector_kick();
    pthread_join(col.thread, NULL);
    /* markers of the last operators may still be landing: wait a little for them */
    for (int i = 0; i < 50; i++) {
        pthread_mutex_lock(&col.work);
        drain();
        poll_markers();
        int waiting = 0;
        for (size_t k = 0; k < col.npend && !waiting; k++)
            waiting = col.pend[k].r.marker && !pos_done_exact(col.pend[k].r.done_how);
        pthread_mutex_unlock(&col.work);
        if (!waiting)
            break;
        usleep(2000);
    }
    collect_once(1);
    write_summary();
    if (col.trace) {
        fclose(col.trace);
        col.trace = NULL;
    }
}
