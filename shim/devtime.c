/* Device times of sampled operators: a timing event recorded behind each marked launch (before
 * its marker write), read by the collector once the marker has landed against a reference
 * event of the same context whose host time (CLOCK_MONOTONIC) is known, so that posd learns
 * when the device ended the operator, not when the collector saw its marker. Each context has
 * a bounded pool of events, a stream of the shim's own (empty, non-blocking: an event recorded
 * there completes as soon as the device takes it) and two references that take turns as the
 * anchor is taken again every second (device and host clocks drift). The collector sets a
 * context up the first time it sees one of its markers, a step per pass so that it never waits
 * on the device (events in chunks; each anchor's probes looked at with cuEventQuery); the
 * launch path only takes an event from the pool and records it. The shim's events never pass
 * through its own wrappers (the driver's own functions, given by real.c), so shim/events.c never
 * mistakes them for the
 * application's. Whatever fails (events refused, the pool empty, a record or a reading
 * refused) leaves that operator with its poll time, and is said once. */
#include "shim/shim.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DT_CTXS            8    /* contexts with a pool */
#define DT_EVENTS          1024 /* events per context: sampled operators in flight with one */
#define DT_TRIES           4    /* busy events the launch path steps over before giving up */
#define DT_CHUNK           64   /* events the collector creates in one pass */
#define DT_ANCHOR_NS       1000000000ull /* take the anchor again after this long */
#define DT_ANCHOR_TRIES    8             /* the reference and its probes */
#define DT_RECORD_SLACK_NS 2000          /* an event's time this soon after its record: its own */

/* a token: generation (18 bits), reference (1), context slot (3), event (10); never 0 */
#define TOK_EVENT_BITS 10
#define TOK_SLOT_BITS  3
#define TOK_GEN_SHIFT  (TOK_EVENT_BITS + TOK_SLOT_BITS + 1)
#define TOK_GEN_MASK   ((1u << (32 - TOK_GEN_SHIFT)) - 1)

_Static_assert(DT_EVENTS == 1u << TOK_EVENT_BITS, "a token holds an event index");
_Static_assert(DT_CTXS == 1u << TOK_SLOT_BITS, "a token holds a context slot");

enum dt_state { DT_FREE = 0, DT_SETTING_UP, DT_READY, DT_FAILED };

struct dt_ctx {
    _Atomic uint64_t ctx;     /* the context; 0: the slot is free */
    _Atomic uint32_t state;   /* enum dt_state */
    _Atomic uint32_t gen;     /* bumped when the pool goes: tokens of before are stale */
    _Atomic uint32_t ref_cur; /* the reference new records are read against */
    _Atomic uint32_t next;    /* where the launch path looks for a free event */
    _Atomic uint32_t nev;     /* events created so far (published before READY) */
    _Atomic uint8_t busy[DT_EVENTS];
    CUevent ev[DT_EVENTS];
    uint64_t rec_ns[DT_EVENTS]; /* when each was recorded (the launch path, published by its
                                 * record: the ring's tail store) */
    CUevent ref[2];
    CUevent probe;     /* for taking an anchor */
    int64_t ref_ns[2]; /* host time of each reference's device time (under dt_lock) */
    uint64_t anchored_ns;
    CUstream stream;
    int full; /* no more events will be created (all there, or the driver refused more) */
    /* an anchor under way (under dt_lock): the step (0: none; 1: the reference recorded; k > 1:
     * probe k - 1 recorded), its reference, when the record call began, the bounds so far */
    int a_step;
    uint32_t a_ref;
    uint64_t a_t0;
    int64_t a_best, a_upper;
};

static struct dt_ctx dt[DT_CTXS];
/* what real.c gives (shim_devtime_configure): the driver's functions, the settings, the log;
 * this file uses nothing of the rest of the shim itself, so it stays at the bottom of its files */
static struct shim_devtime_driver drv;
static int dt_enabled, dt_debug;
static void (*dt_log)(const char *fmt, ...);
/* the collector's setting up, readings and re-anchoring against a context's teardown */
static pthread_mutex_t dt_lock = PTHREAD_MUTEX_INITIALIZER;

/* What to say once, noted where saying is not allowed (the launch path) */
enum { SAY_EMPTY = 1, SAY_RECORD = 2, SAY_CREATE = 4, SAY_READ = 8 };
static _Atomic uint32_t dt_note, dt_said;
static _Atomic int dt_record_rc;
static _Atomic uint32_t dt_empty_nev; /* the pool's size when a launch found it all busy */
static _Atomic uint64_t dt_read_ok, dt_fallbacks, dt_late;

static uint32_t token_of(uint32_t gen, uint32_t ref, uint32_t slot, uint32_t ev)
{
    return (gen & TOK_GEN_MASK) << TOK_GEN_SHIFT | ref << (TOK_EVENT_BITS + TOK_SLOT_BITS) |
           slot << TOK_EVENT_BITS | ev;
}

void shim_devtime_configure(const struct shim_devtime_driver *d, int enabled, int debug,
                            void (*log)(const char *fmt, ...))
{
    drv = *d;
    dt_enabled = enabled;
    dt_debug = debug;
    dt_log = log;
}

static int functions_there(void)
{
    return drv.cuEventCreate && drv.cuEventDestroy_v2 && drv.cuEventRecord &&
           drv.cuEventRecord_ptsz && drv.cuEventQuery && drv.cuStreamCreate &&
           drv.cuStreamDestroy_v2 && drv.cuCtxPushCurrent_v2 && drv.cuCtxPopCurrent_v2 &&
           (drv.cuEventElapsedTime_v2 || drv.cuEventElapsedTime);
}

static void say_once(uint32_t what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say_once(uint32_t what, const char *fmt, ...)
{
    if (atomic_fetch_or(&dt_said, what) & what)
        return;
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (dt_log)
        dt_log("%s", buf);
}

/* ---- the launch path (sampled launches only) --------------------------------------------- */

uint32_t shim_devtime_record(uint64_t ctx, uint64_t stream, int ptsz)
{
    for (uint32_t i = 0; i < DT_CTXS; i++) {
        struct dt_ctx *d = &dt[i];
        if (atomic_load_explicit(&d->ctx, memory_order_relaxed) != ctx)
            continue;
        /* READY publishes the pool's events */
        if (atomic_load_explicit(&d->state, memory_order_acquire) != DT_READY)
            return 0;
        uint32_t gen = atomic_load_explicit(&d->gen, memory_order_relaxed);
        uint32_t ref = atomic_load_explicit(&d->ref_cur, memory_order_relaxed);
        uint32_t nev = atomic_load_explicit(&d->nev, memory_order_acquire);
        for (int k = 0; nev && k < DT_TRIES; k++) {
            uint32_t e = atomic_fetch_add_explicit(&d->next, 1, memory_order_relaxed) % nev;
            uint8_t free_ = 0;
            if (!atomic_compare_exchange_strong_explicit(
                    &d->busy[e], &free_, 1, memory_order_acquire, memory_order_relaxed))
                continue;
            CUstream s = (CUstream)(uintptr_t)stream;
            CUresult rc =
                ptsz ? drv.cuEventRecord_ptsz(d->ev[e], s) : drv.cuEventRecord(d->ev[e], s);
            if (rc != CUDA_SUCCESS) {
                atomic_store_explicit(&d->busy[e], 0, memory_order_release);
                atomic_store_explicit(&dt_record_rc, (int)rc, memory_order_relaxed);
                atomic_fetch_or_explicit(&dt_note, SAY_RECORD, memory_order_relaxed);
                return 0;
            }
            d->rec_ns[e] = shim_now_ns();
            return token_of(gen, ref, i, e);
        }
        atomic_store_explicit(&dt_empty_nev, nev, memory_order_relaxed);
        atomic_fetch_or_explicit(&dt_note, SAY_EMPTY, memory_order_relaxed);
        return 0;
    }
    return 0; /* no pool yet: the collector makes one when it sees this context's marker */
}

/* ---- the collector -------------------------------------------------------------------------- */

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
    return drv.cuEventElapsedTime_v2 ? drv.cuEventElapsedTime_v2(ms, a, b)
                                     : drv.cuEventElapsedTime(ms, a, b);
}

static void destroy_pool(struct dt_ctx *d)
{
    uint32_t nev = atomic_load(&d->nev);
    for (uint32_t e = 0; e < nev; e++)
        drv.cuEventDestroy_v2(d->ev[e]);
    for (int r = 0; r < 2; r++)
        if (d->ref[r])
            drv.cuEventDestroy_v2(d->ref[r]);
    if (d->probe)
        drv.cuEventDestroy_v2(d->probe);
    if (d->stream)
        drv.cuStreamDestroy_v2(d->stream);
    d->ref[0] = d->ref[1] = d->probe = NULL;
    d->stream = NULL;
    atomic_store(&d->nev, 0);
    d->full = 0;
    d->a_step = 0;
}

/* Empties slot D (under dt_lock): its tokens go stale. */
static void free_slot(struct dt_ctx *d)
{
    atomic_fetch_add(&d->gen, 1);
    atomic_store(&d->state, DT_FREE);
    atomic_store(&d->ctx, 0);
}

/* Starts an anchor of reference REF: records it on the shim's own stream. (Anchors, below.) */
static CUresult anchor_start(struct dt_ctx *d, uint32_t ref)
{
    d->a_ref = ref;
    d->a_t0 = shim_now_ns();
    CUresult rc = drv.cuEventRecord(d->ref[ref], d->stream);
    d->a_step = rc == CUDA_SUCCESS ? 1 : 0;
    return rc;
}

/* Moves the anchor under way one step if its last record has completed (never waits).
 * An event's device time comes after its record call began (the device takes it within
 * microseconds on a real GPU; the simulated one stamps it during the call), so the start of
 * each call, less the device's time from the reference to that event, is a lower bound of the
 * reference's host time. The reference is followed by probes and the highest bound wins (the
 * call least delayed before the device took it); none may be later than a probe was seen
 * complete. Returns CUDA_SUCCESS (*DONE set once it is taken), CUDA_ERROR_NOT_READY (still
 * under way), or the driver's error. */
static CUresult anchor_step(struct dt_ctx *d, int *done)
{
    *done = 0;
    CUevent last = d->a_step == 1 ? d->ref[d->a_ref] : d->probe;
    CUresult rc = drv.cuEventQuery(last);
    if (rc != CUDA_SUCCESS)
        return rc;
    int64_t seen = (int64_t)shim_now_ns(), e = 0;
    if (d->a_step > 1) {
        float ms;
        if ((rc = elapsed(&ms, d->ref[d->a_ref], d->probe)) != CUDA_SUCCESS)
            return rc;
        e = (int64_t)((double)ms * 1e6);
    }
    int64_t low = (int64_t)d->a_t0 - e, up = seen - e;
    if (d->a_step == 1 || low > d->a_best)
        d->a_best = low;
    if (d->a_step == 1 || up < d->a_upper)
        d->a_upper = up;
    if (d->a_step < DT_ANCHOR_TRIES) {
        d->a_t0 = shim_now_ns();
        if ((rc = drv.cuEventRecord(d->probe, d->stream)) != CUDA_SUCCESS)
            return rc;
        d->a_step++;
        return CUDA_ERROR_NOT_READY;
    }
    d->ref_ns[d->a_ref] = d->a_best < d->a_upper ? d->a_best : d->a_upper;
    d->anchored_ns = shim_now_ns();
    d->a_step = 0;
    *done = 1;
    return CUDA_SUCCESS;
}

/* Creates up to DT_CHUNK more of D's events. A refusal after the first chunk only ends the
 * pool's growth; before it, it is the context's failure. */
static CUresult grow_pool(struct dt_ctx *d)
{
    uint32_t nev = atomic_load(&d->nev), end = nev + DT_CHUNK;
    CUresult rc = CUDA_SUCCESS;
    for (; nev < end && nev < DT_EVENTS; nev++)
        if ((rc = drv.cuEventCreate(&d->ev[nev], CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
            break;
    /* the handles are written before the count that shows them */
    atomic_store_explicit(&d->nev, nev, memory_order_release);
    if (nev == DT_EVENTS || (rc != CUDA_SUCCESS && nev >= DT_CHUNK))
        d->full = 1;
    return nev >= DT_CHUNK ? CUDA_SUCCESS : rc;
}

/* The context's set-up failed at WHAT with RC: its pool goes, it keeps poll times (listed, so
 * it is not tried again), said once. In its context (pushed), under dt_lock. */
static void setup_failed(struct dt_ctx *d, const char *what, CUresult rc)
{
    destroy_pool(d);
    atomic_store(&d->state, DT_FAILED);
    say_once(SAY_CREATE,
             "timing events unavailable in context %p (%s: driver error %d): its "
             "completion times are the collector's poll times",
             (void *)(uintptr_t)atomic_load(&d->ctx), what, (int)rc);
}

void shim_devtime_setup(uint64_t ctx)
{
    if (!ctx || !dt_enabled)
        return;
    struct dt_ctx *d = NULL;
    for (uint32_t i = 0; i < DT_CTXS; i++) {
        uint64_t c = atomic_load_explicit(&dt[i].ctx, memory_order_relaxed);
        if (c == ctx)
            return; /* set up, failed, or being set up */
        if (!c && !d)
            d = &dt[i];
    }
    if (!functions_there()) {
        say_once(SAY_CREATE, "the driver has no timing events: completion times are the "
                             "collector's poll times");
        return;
    }
    if (!d) {
        say_once(SAY_EMPTY,
                 "timing events in more than %d contexts: completions in context %p "
                 "keep the collector's poll times",
                 DT_CTXS, (void *)(uintptr_t)ctx);
        return;
    }
    pthread_mutex_lock(&dt_lock);
    uint64_t none = 0;
    if (!atomic_compare_exchange_strong(&d->ctx, &none, ctx)) {
        pthread_mutex_unlock(&dt_lock);
        return; /* taken meanwhile: the next marker tries again */
    }
    atomic_store(&d->state, DT_SETTING_UP);
    memset((void *)d->busy, 0, sizeof d->busy);
    d->anchored_ns = 0;
    if (drv.cuCtxPushCurrent_v2((CUcontext)(uintptr_t)ctx) != CUDA_SUCCESS) {
        /* the context is gone (destroyed after its launches): nothing to say, nothing kept */
        free_slot(d);
        pthread_mutex_unlock(&dt_lock);
        return;
    }
    CUresult rc;
    const char *what = "its stream";
    if ((rc = drv.cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
        d->stream = NULL;
    if (rc == CUDA_SUCCESS)
        what = "a timing event";
    for (int r = 0; r < 2 && rc == CUDA_SUCCESS; r++)
        if ((rc = drv.cuEventCreate(&d->ref[r], CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
            d->ref[r] = NULL;
    if (rc == CUDA_SUCCESS && (rc = drv.cuEventCreate(&d->probe, CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
        d->probe = NULL;
    if (rc == CUDA_SUCCESS) {
        what = "the reference event";
        rc = anchor_start(d, 0);
    }
    if (rc != CUDA_SUCCESS)
        setup_failed(d, what, rc);
    CUcontext popped;
    drv.cuCtxPopCurrent_v2(&popped);
    pthread_mutex_unlock(&dt_lock);
}

/* One step of slot D (under dt_lock, its context pushed): more events, the anchor under way,
 * a new anchor when the last is a second old. */
static void step_slot(struct dt_ctx *d, uint64_t now)
{
    int setting_up = atomic_load(&d->state) == DT_SETTING_UP;
    CUresult rc;
    if (!d->full && (rc = grow_pool(d)) != CUDA_SUCCESS) {
        setup_failed(d, "a timing event", rc);
        return;
    }
    int done = 0;
    if (d->a_step) {
        rc = anchor_step(d, &done);
        if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_NOT_READY) {
            if (setting_up) {
                setup_failed(d, "the reference event", rc);
                return;
            }
            d->a_step = 0;
            d->anchored_ns = now; /* the last anchor stays; try again in a second */
        }
    } else if (!setting_up && now - d->anchored_ns >= DT_ANCHOR_NS) {
        /* the other reference: records already made keep the one they were made with */
        if (anchor_start(d, atomic_load(&d->ref_cur) ^ 1) != CUDA_SUCCESS)
            d->anchored_ns = now;
    }
    if (done && !setting_up)
        atomic_store_explicit(&d->ref_cur, d->a_ref, memory_order_relaxed);
    if (setting_up && !d->a_step && d->anchored_ns && atomic_load(&d->nev) >= DT_CHUNK) {
        atomic_store(&d->ref_cur, 0);
        /* READY publishes the pool's events and the reference's time */
        atomic_store_explicit(&d->state, DT_READY, memory_order_release);
        if (dt_debug && dt_log)
            dt_log("device times in context %p", (void *)(uintptr_t)atomic_load(&d->ctx));
    }
}

int shim_devtime_read(uint32_t token, uint64_t *end_ns)
{
    uint32_t e = token & (DT_EVENTS - 1), slot = (token >> TOK_EVENT_BITS) & (DT_CTXS - 1);
    uint32_t ref = (token >> (TOK_EVENT_BITS + TOK_SLOT_BITS)) & 1, gen = token >> TOK_GEN_SHIFT;
    struct dt_ctx *d = &dt[slot];
    int ok = -1;
    pthread_mutex_lock(&dt_lock);
    /* a reference being anchored again (its event recorded anew, its host time not yet) reads
     * nothing: only an operator pending for a second meets it */
    if (atomic_load(&d->state) == DT_READY && (atomic_load(&d->gen) & TOK_GEN_MASK) == gen &&
        !(d->a_step && d->a_ref == ref)) {
        float ms;
        /* the marker behind the event has landed: the event is complete, this never waits */
        CUresult rc = elapsed(&ms, d->ref[ref], d->ev[e]);
        if (rc == CUDA_SUCCESS) {
            int64_t t = d->ref_ns[ref] + (int64_t)((double)ms * 1e6);
            *end_ns = t > 0 ? (uint64_t)t : 0;
            /* An event recorded after its operator had ended carries its own time, not the
             * operator's: one that ended no later than its record call returned (and a
             * little after, what taking it costs the device) says nothing exact. */
            ok = t > 0 && (uint64_t)t > d->rec_ns[e] + DT_RECORD_SLACK_NS ? 0 : -1;
            if (ok < 0)
                atomic_fetch_add_explicit(&dt_late, 1, memory_order_relaxed);
        } else {
            say_once(SAY_READ,
                     "reading a timing event failed (driver error %d): completion times are "
                     "the collector's poll times where it fails",
                     (int)rc);
        }
    }
    if ((atomic_load(&d->gen) & TOK_GEN_MASK) == gen)
        atomic_store_explicit(&d->busy[e], 0, memory_order_release);
    pthread_mutex_unlock(&dt_lock);
    atomic_fetch_add_explicit(ok == 0 ? &dt_read_ok : &dt_fallbacks, 1, memory_order_relaxed);
    return ok;
}

void shim_devtime_release(uint32_t token)
{
    uint32_t e = token & (DT_EVENTS - 1), slot = (token >> TOK_EVENT_BITS) & (DT_CTXS - 1);
    struct dt_ctx *d = &dt[slot];
    /* no lock: the launch path calls it when its marker write fails */
    if ((atomic_load(&d->gen) & TOK_GEN_MASK) == token >> TOK_GEN_SHIFT)
        atomic_store_explicit(&d->busy[e], 0, memory_order_release);
    atomic_fetch_add_explicit(&dt_fallbacks, 1, memory_order_relaxed);
}

void shim_devtime_tick(void)
{
    uint32_t note = atomic_exchange_explicit(&dt_note, 0, memory_order_relaxed);
    if (note & SAY_EMPTY)
        say_once(SAY_EMPTY,
                 "out of timing events (%u of a context's in flight, at most %d): some "
                 "completion times are the collector's poll times",
                 atomic_load(&dt_empty_nev), DT_EVENTS);
    if (note & SAY_RECORD)
        say_once(SAY_RECORD,
                 "recording a timing event failed (driver error %d): completion "
                 "times are the collector's poll times where it fails",
                 atomic_load(&dt_record_rc));
    uint64_t now = shim_now_ns();
    for (uint32_t i = 0; i < DT_CTXS; i++) {
        struct dt_ctx *d = &dt[i];
        uint32_t st = atomic_load_explicit(&d->state, memory_order_acquire);
        if ((st != DT_READY && st != DT_SETTING_UP) ||
            (st == DT_READY && d->full && !d->a_step && now - d->anchored_ns < DT_ANCHOR_NS))
            continue; /* nothing to do: no lock, no driver call */
        pthread_mutex_lock(&dt_lock);
        st = atomic_load(&d->state);
        if ((st == DT_READY || st == DT_SETTING_UP) &&
            drv.cuCtxPushCurrent_v2((CUcontext)(uintptr_t)atomic_load(&d->ctx)) == CUDA_SUCCESS) {
            step_slot(d, now);
            CUcontext popped;
            drv.cuCtxPopCurrent_v2(&popped);
        }
        pthread_mutex_unlock(&dt_lock);
    }
}

void shim_devtime_forget(uint64_t ctx)
{
    pthread_mutex_lock(&dt_lock);
    for (uint32_t i = 0; i < DT_CTXS; i++) {
        struct dt_ctx *d = &dt[i];
        uint64_t c = atomic_load(&d->ctx);
        if (!c || (ctx && c != ctx))
            continue;
        if (atomic_load(&d->state) != DT_FAILED &&
            drv.cuCtxPushCurrent_v2((CUcontext)(uintptr_t)c) == CUDA_SUCCESS) {
            destroy_pool(d);
            CUcontext popped;
            drv.cuCtxPopCurrent_v2(&popped);
        }
        free_slot(d);
    }
    pthread_mutex_unlock(&dt_lock);
}

void shim_devtime_forked(void)
{
    /* the child has no CUDA of the parent's: its pools are gone with it */
    pthread_mutex_init(&dt_lock, NULL);
    for (uint32_t i = 0; i < DT_CTXS; i++) {
        atomic_fetch_add(&dt[i].gen, 1);
        atomic_store(&dt[i].state, DT_FREE);
        atomic_store(&dt[i].ctx, 0);
    }
}

void shim_devtime_counts(uint64_t *read, uint64_t *fallbacks, uint64_t *late)
{
    *read = atomic_load(&dt_read_ok);
    *fallbacks = atomic_load(&dt_fallbacks);
    *late = atomic_load(&dt_late);
}
