/* The other intercepted entry points: cuInit (registers with posd, then starts the collector),
 * the calls that reveal kernel names, the synchronisation calls (counted and timed), and
 * stream capture (so that launches into a capturing stream are told apart); cuGetProcAddress
 * is shim/interpose.c's. Errors from the driver always come back unchanged. */
#include "shim/shim.h"

#include "pos/client_shm.h"

SHIM_API CUresult cuInit(unsigned int Flags)
{
    /* posd first: its SM share must be in the environment before the driver looks */
    if (shim_active)
        shim_session_before_init();
    CUresult rc = SHIM_REAL(cuInit)(Flags);
    if (rc == CUDA_SUCCESS) {
        shim_cuda_inited = 1;
        if (shim_active) {
            shim_session_after_init(); /* before any context: MPS reads its memory limit then */
            shim_collector_start();
        }
    } else if (shim_active) {
        shim_session_init_failed();
    }
    return rc;
}

/* ---- kernel names ------------------------------------------------------------------------ */

SHIM_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    CUresult rc = SHIM_REAL(cuModuleGetFunction)(hfunc, hmod, name);
    if (rc == CUDA_SUCCESS && hfunc)
        shim_ident_register((uint64_t)(uintptr_t)*hfunc, name);
    return rc;
}

SHIM_API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    CUresult rc = SHIM_REAL(cuLibraryGetKernel)(pKernel, library, name);
    if (rc == CUDA_SUCCESS && pKernel)
        shim_ident_register((uint64_t)(uintptr_t)*pKernel, name);
    return rc;
}

SHIM_API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    CUresult rc = SHIM_REAL(cuKernelGetFunction)(pFunc, kernel);
    if (rc != CUDA_SUCCESS || !pFunc)
        return rc;
    uint32_t id = shim_ident_lookup((uint64_t)(uintptr_t)kernel);
    const char *name = id ? shim_ident_name(id) : NULL;
    if (!name && shim_real_cuKernelGetName)
        shim_real_cuKernelGetName(&name, kernel);
    if (name)
        shim_ident_register((uint64_t)(uintptr_t)*pFunc, name);
    return rc;
}

/* ---- synchronisation --------------------------------------------------------------------- */

/* What a synchronisation covers, taken just before the call: the launch order of the current
 * posd session up to here. */
struct sync_start {
    struct shim_thread *t; /* the calling thread's ring (NULL: none free) */
    uint64_t start_ns;
    uint64_t covers;
    uint32_t gen;
};

static void sync_begin(struct sync_start *s)
{
    s->t = shim_self();
    s->covers = shim_session_covers(s->t, &s->gen);
    s->start_ns = shim_now_ns();
}

/* Counts and times a synchronisation, leaves it for the collector (the trace's bounds), and,
 * when it succeeded and covers scheduled operators, tells posd at once. */
static void note_sync(uint16_t kind, int ptsz, uint64_t stream, uint64_t ctx,
                      const struct sync_start *st, CUresult rc, const struct shim_event_mark *ev)
{
    struct shim_thread *t = st->t;
    if (!t)
        return;
    uint64_t end = shim_now_ns();
    shim_count(&t->syncs, 1);
    shim_count(&t->sync_ns, end - st->start_ns);
    shim_session_note_sync(t, end - st->start_ns);
    if (rc != CUDA_SUCCESS)
        return;
    /* an event stands for its stream as it was when the event was recorded */
    uint16_t scope_kind = ev ? SHIM_SYNC_STREAM : kind;
    uint64_t since = ev ? ev->at_ns : st->start_ns;
    if (ev) {
        ptsz = ev->ptsz;
        stream = ev->stream;
        ctx = ev->ctx;
        shim_session_report_sync(t, ev->gen, POS_SYNC_STREAM, ptsz, ev->tid, stream, ctx,
                                 ev->covers, end);
    } else if (kind != SHIM_SYNC_EVENT && st->covers) {
        shim_session_report_sync(t, st->gen,
                                 kind == SHIM_SYNC_CTX ? POS_SYNC_CTX : POS_SYNC_STREAM, ptsz,
                                 t->tid, stream, ctx, st->covers, end);
    }
    if (scope_kind == SHIM_SYNC_EVENT)
        return; /* an event we know nothing of bounds nothing */
    uint64_t tail = atomic_load_explicit(&t->sync_tail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&t->sync_head, memory_order_acquire) >= SHIM_SYNC_RING)
        return;
    struct shim_sync_event *e = &t->sync_ring[tail % SHIM_SYNC_RING];
    e->kind = scope_kind;
    e->ptsz = (uint16_t)ptsz;
    e->result = rc;
    e->stream = stream;
    e->ctx = ctx;
    e->tid = ev ? ev->tid : t->tid;
    e->start_ns = since;
    e->end_ns = end;
    atomic_store_explicit(&t->sync_tail, tail + 1, memory_order_release);
}

static uint64_t current_ctx(void)
{
    return shim_current_ctx();
}

#define STREAM_SYNC_WRAPPER(sym, ptsz)                                                             \
    SHIM_API CUresult sym(CUstream h)                                                              \
    {                                                                                              \
        __typeof__(&sym) real = SHIM_REAL(sym);                                                    \
        if (!shim_active)                                                                          \
            return real(h);                                                                        \
        struct sync_start st;                                                                      \
        sync_begin(&st);                                                                           \
        CUresult rc = real(h);                                                                     \
        note_sync(SHIM_SYNC_STREAM, ptsz, (uint64_t)(uintptr_t)h, current_ctx(), &st, rc, NULL);   \
        return rc;                                                                                 \
    }

STREAM_SYNC_WRAPPER(cuStreamSynchronize, 0)
STREAM_SYNC_WRAPPER(cuStreamSynchronize_ptsz, 1)

/* A stream query that answers "all done" is a synchronisation that did not wait. Not counted
 * as a sync (it is a poll); reported to posd. */
#define STREAM_QUERY_WRAPPER(sym, ptsz)                                                            \
    SHIM_API CUresult sym(CUstream h)                                                              \
    {                                                                                              \
        __typeof__(&sym) real = SHIM_REAL(sym);                                                    \
        if (!shim_active)                                                                          \
            return real(h);                                                                        \
        uint32_t gen;                                                                              \
        struct shim_thread *t = shim_self();                                                       \
        uint64_t covers = shim_session_covers(t, &gen);                                            \
        CUresult rc = real(h);                                                                     \
        if (rc == CUDA_SUCCESS && covers)                                                          \
            shim_session_report_sync(t, gen, POS_SYNC_STREAM, ptsz, t->tid,                        \
                                     (uint64_t)(uintptr_t)h, current_ctx(), covers,                \
                                     shim_now_ns());                                               \
        return rc;                                                                                 \
    }

STREAM_QUERY_WRAPPER(cuStreamQuery, 0)
STREAM_QUERY_WRAPPER(cuStreamQuery_ptsz, 1)

SHIM_API CUresult cuCtxSynchronize(void)
{
    __typeof__(&cuCtxSynchronize) real = SHIM_REAL(cuCtxSynchronize);
    if (!shim_active)
        return real();
    struct sync_start st;
    sync_begin(&st);
    CUresult rc = real();
    note_sync(SHIM_SYNC_CTX, 0, 0, current_ctx(), &st, rc, NULL);
    return rc;
}

SHIM_API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    __typeof__(&cuCtxSynchronize_v2) real = SHIM_REAL(cuCtxSynchronize_v2);
    if (!shim_active)
        return real(ctx);
    struct sync_start st;
    sync_begin(&st);
    CUresult rc = real(ctx);
    note_sync(SHIM_SYNC_CTX, 0, 0, ctx ? (uint64_t)(uintptr_t)ctx : current_ctx(), &st, rc, NULL);
    return rc;
}

/* ---- events ------------------------------------------------------------------------------- */

/* After a successful record outside a capture: the event stands for everything launched on
 * STREAM so far. */
static void event_recorded(CUevent ev, CUstream h, int ptsz, CUresult rc)
{
    if (rc != CUDA_SUCCESS || !shim_active)
        return;
    struct shim_thread *t = shim_self();
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (atomic_load_explicit(&shim_captures, memory_order_relaxed) > 0) {
        __typeof__(shim_real_cuStreamIsCapturing) fn =
            ptsz ? shim_real_cuStreamIsCapturing_ptsz : shim_real_cuStreamIsCapturing;
        if (!fn || fn(h, &cs) != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE) {
            shim_event_forget((uint64_t)(uintptr_t)ev);
            return; /* a node of a graph, not a point of this stream */
        }
    }
    struct shim_event_mark m = {
        .stream = (uint64_t)(uintptr_t)h,
        .ctx = current_ctx(),
        .tid = t ? t->tid : 0,
        .ptsz = ptsz,
        .at_ns = shim_now_ns(),
    };
    m.covers = shim_session_covers(t, &m.gen);
    if (m.covers)
        shim_event_recorded((uint64_t)(uintptr_t)ev, &m);
    else
        shim_event_forget((uint64_t)(uintptr_t)ev);
}

#define EVENT_RECORD_WRAPPER(sym, ptsz)                                                            \
    SHIM_API CUresult sym(CUevent ev, CUstream h)                                                  \
    {                                                                                              \
        CUresult rc = SHIM_REAL(sym)(ev, h);                                                       \
        event_recorded(ev, h, ptsz, rc);                                                           \
        return rc;                                                                                 \
    }
EVENT_RECORD_WRAPPER(cuEventRecord, 0)
EVENT_RECORD_WRAPPER(cuEventRecord_ptsz, 1)

#define EVENT_RECORD_FLAGS_WRAPPER(sym, ptsz)                                                      \
    SHIM_API CUresult sym(CUevent ev, CUstream h, unsigned int flags)                              \
    {                                                                                              \
        CUresult rc = SHIM_REAL(sym)(ev, h, flags);                                                \
        event_recorded(ev, h, ptsz, rc);                                                           \
        return rc;                                                                                 \
    }
EVENT_RECORD_FLAGS_WRAPPER(cuEventRecordWithFlags, 0)
EVENT_RECORD_FLAGS_WRAPPER(cuEventRecordWithFlags_ptsz, 1)

SHIM_API CUresult cuEventDestroy_v2(CUevent ev)
{
    shim_event_forget((uint64_t)(uintptr_t)ev);
    return SHIM_REAL(cuEventDestroy_v2)(ev);
}

/* the first ABI (before CUDA 4.0), still exported by NVIDIA's driver */
SHIM_API CUresult cuEventDestroy(CUevent ev)
{
    shim_event_forget((uint64_t)(uintptr_t)ev);
    return SHIM_REAL(cuEventDestroy)(ev);
}

SHIM_API CUresult cuEventSynchronize(CUevent ev)
{
    __typeof__(&cuEventSynchronize) real = SHIM_REAL(cuEventSynchronize);
    if (!shim_active)
        return real(ev);
    struct sync_start st;
    sync_begin(&st);
    CUresult rc = real(ev);
    struct shim_event_mark m;
    int known = shim_event_lookup((uint64_t)(uintptr_t)ev, &m);
    note_sync(SHIM_SYNC_EVENT, 0, 0, 0, &st, rc, known ? &m : NULL);
    return rc;
}

/* An event query that answers "done" is an event synchronisation that did not wait. */
SHIM_API CUresult cuEventQuery(CUevent ev)
{
    CUresult rc = SHIM_REAL(cuEventQuery)(ev);
    struct shim_event_mark m;
    if (rc == CUDA_SUCCESS && shim_active && shim_event_lookup((uint64_t)(uintptr_t)ev, &m))
        shim_session_report_sync(shim_self(), m.gen, POS_SYNC_STREAM, m.ptsz, m.tid, m.stream,
                                 m.ctx, m.covers, shim_now_ns());
    return rc;
}

/* ---- stream capture ---------------------------------------------------------------------- */

static CUresult capture_began(CUresult rc)
{
    if (rc == CUDA_SUCCESS)
        atomic_fetch_add_explicit(&shim_captures, 1, memory_order_relaxed);
    return rc;
}

/* A capture is over after cuStreamEndCapture unless the call was refused outright. */
static CUresult capture_ended(CUresult rc)
{
    if (rc == CUDA_SUCCESS || rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
        rc == CUDA_ERROR_STREAM_CAPTURE_UNJOINED || rc == CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) {
        int n = atomic_load(&shim_captures);
        while (n > 0 && !atomic_compare_exchange_weak(&shim_captures, &n, n - 1))
            ;
    }
    return rc;
}

SHIM_API CUresult cuStreamBeginCapture(CUstream h)
{
    return capture_began(SHIM_REAL(cuStreamBeginCapture)(h));
}
SHIM_API CUresult cuStreamBeginCapture_ptsz(CUstream h)
{
    return capture_began(SHIM_REAL(cuStreamBeginCapture_ptsz)(h));
}
SHIM_API CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode)
{
    return capture_began(SHIM_REAL(cuStreamBeginCapture_v2)(h, mode));
}
SHIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode)
{
    return capture_began(SHIM_REAL(cuStreamBeginCapture_v2_ptsz)(h, mode));
}
SHIM_API CUresult cuStreamBeginCaptureToGraph(CUstream h, CUgraph g, const CUgraphNode *deps,
                                              const CUgraphEdgeData *edges, size_t n,
                                              CUstreamCaptureMode mode)
{
    return capture_began(SHIM_REAL(cuStreamBeginCaptureToGraph)(h, g, deps, edges, n, mode));
}
SHIM_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream h, CUgraph g, const CUgraphNode *deps,
                                                   const CUgraphEdgeData *edges, size_t n,
                                                   CUstreamCaptureMode mode)
{
    return capture_began(SHIM_REAL(cuStreamBeginCaptureToGraph_ptsz)(h, g, deps, edges, n, mode));
}
SHIM_API CUresult cuStreamEndCapture(CUstream h, CUgraph *g)
{
    return capture_ended(SHIM_REAL(cuStreamEndCapture)(h, g));
}
SHIM_API CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph *g)
{
    return capture_ended(SHIM_REAL(cuStreamEndCapture_ptsz)(h, g));
}
