/* Streams and events: creation, priorities, queries and synchronisation, event records and
 * cross-stream waits, stream memory operations (write/wait value) and host functions. */
#include "sim/driver/drv.h"

#include <stdlib.h>
#include <string.h>

/* ---- streams ----------------------------------------------------------------------------- */

static CUresult stream_create(CUstream *ph, unsigned flags, int prio)
{
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* out-of-range priorities are clamped, as CUDA documents */
    if (prio > 0)
        prio = 0;
    if (prio < -5)
        prio = -5;
    struct drv_stream *s;
    rc = drv_stream_create(c, STREAM_USER, flags, prio, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    *ph = s->handle;
    return CUDA_SUCCESS;
}

API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return stream_create(phStream, Flags, 0);
}

API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return stream_create(phStream, flags, priority);
}

API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUresult rc;
    struct drv_stream *s = drv_enter_destroy(H_STREAM, hStream, &rc);
    if (!s)
        return rc;
    /* queued work completes; the stream goes once it has drained */
    pthread_mutex_lock(&drv.lock); /* launches count s->submitted under it */
    uint64_t submitted = s->submitted;
    s->destroyed = 1;
    if (atomic_load(&s->completed) >= submitted)
        drv_stream_release(s);
    pthread_mutex_unlock(&drv.lock);
    return CUDA_SUCCESS;
}

/* Defines NAME and NAME_ptsz over NAME_impl(ptsz, ...). */
#define PTSZ_PAIR(ret, name, params, ...)                                                          \
    API ret name params                                                                            \
    {                                                                                              \
        return name##_impl(0, __VA_ARGS__);                                                        \
    }                                                                                              \
    API ret name##_ptsz params                                                                     \
    {                                                                                              \
        return name##_impl(1, __VA_ARGS__);                                                        \
    }

/* What the getters read of a stream, into OUT. */
enum stream_field { FIELD_PRIO, FIELD_FLAGS, FIELD_CTX };

static CUresult stream_get(int ptsz, CUstream h, void *out, enum stream_field field)
{
    struct drv_stream *s;
    CUresult rc = drv_enter_stream(out != NULL, h, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (field == FIELD_PRIO)
        *(int *)out = s->prio;
    else if (field == FIELD_FLAGS)
        *(unsigned int *)out = s->flags;
    else
        *(CUcontext *)out = s->ctx->handle;
    return CUDA_SUCCESS;
}

static CUresult cuStreamGetPriority_impl(int ptsz, CUstream h, int *priority)
{
    return stream_get(ptsz, h, priority, FIELD_PRIO);
}
PTSZ_PAIR(CUresult, cuStreamGetPriority, (CUstream h, int *priority), h, priority)

static CUresult cuStreamGetFlags_impl(int ptsz, CUstream h, unsigned int *flags)
{
    return stream_get(ptsz, h, flags, FIELD_FLAGS);
}
PTSZ_PAIR(CUresult, cuStreamGetFlags, (CUstream h, unsigned int *flags), h, flags)

static CUresult cuStreamGetCtx_impl(int ptsz, CUstream h, CUcontext *pctx)
{
    return stream_get(ptsz, h, pctx, FIELD_CTX);
}
PTSZ_PAIR(CUresult, cuStreamGetCtx, (CUstream h, CUcontext *pctx), h, pctx)

/* A synchronising call on a capturing stream is not allowed, and ends the capture. */
static CUresult refuse_if_capturing(struct drv_stream *s)
{
    if (!s->capture)
        return CUDA_SUCCESS;
    s->capture_invalid = 1;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

/* The prologue of cuStreamSynchronize and cuStreamQuery: the stream, not capturing, and the
 * ops submitted to it so far into *TARGET. */
static CUresult sync_target(int ptsz, CUstream h, struct drv_stream **s, uint64_t *target)
{
    CUresult rc = drv_enter_stream(1, h, ptsz, s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = refuse_if_capturing(*s)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&drv.lock);
    *target = (*s)->submitted;
    pthread_mutex_unlock(&drv.lock);
    return CUDA_SUCCESS;
}

static CUresult cuStreamSynchronize_impl(int ptsz, CUstream h)
{
    struct drv_stream *s;
    uint64_t target;
    CUresult rc = sync_target(ptsz, h, &s, &target);
    return rc != CUDA_SUCCESS ? rc : drv_wait_counter(&s->completed, target, s->ctx);
}
PTSZ_PAIR(CUresult, cuStreamSynchronize, (CUstream h), h)

static CUresult cuStreamQuery_impl(int ptsz, CUstream h)
{
    struct drv_stream *s;
    uint64_t target;
    CUresult rc = sync_target(ptsz, h, &s, &target);
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = (CUresult)atomic_load(&s->ctx->sticky)) != CUDA_SUCCESS)
        return rc;
    return atomic_load(&s->completed) >= target ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
PTSZ_PAIR(CUresult, cuStreamQuery, (CUstream h), h)

/* ---- events ------------------------------------------------------------------------------ */

/* Fault injection for tests, POS_SIM_FAULT_TIMING_EVENTS (read once): "flags" refuses every
 * event with timing (CUDA_ERROR_INVALID_VALUE, as a driver that does not support the flags);
 * a number N lets the process create N of them, the next ones CUDA_ERROR_OUT_OF_MEMORY;
 * "elapsed" fails every cuEventElapsedTime (CUDA_ERROR_UNKNOWN). Events created with
 * CU_EVENT_DISABLE_TIMING are never refused. */
enum timing_fault { TF_NONE, TF_FLAGS, TF_COUNT, TF_ELAPSED };

static enum timing_fault timing_fault(long *count)
{
    static int read;
    static enum timing_fault f;
    static long n;
    if (!__atomic_load_n(&read, __ATOMIC_ACQUIRE)) {
        const char *v = getenv("POS_SIM_FAULT_TIMING_EVENTS");
        char *end;
        if (!v || !*v)
            f = TF_NONE;
        else if (strcmp(v, "flags") == 0)
            f = TF_FLAGS;
        else if (strcmp(v, "elapsed") == 0)
            f = TF_ELAPSED;
        else if ((n = strtol(v, &end, 10)) >= 0 && !*end)
            f = TF_COUNT;
        __atomic_store_n(&read, 1, __ATOMIC_RELEASE);
    }
    if (count)
        *count = n;
    return f;
}

/* Whether a timing event may be created now (the injected faults). */
static CUresult timing_event_allowed(void)
{
    static _Atomic long created;
    long n;
    switch (timing_fault(&n)) {
    case TF_FLAGS:
        return CUDA_ERROR_INVALID_VALUE;
    case TF_COUNT:
        return atomic_fetch_add(&created, 1) < n ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    default:
        return CUDA_SUCCESS;
    }
}

API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    if (!phEvent || (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                         CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!(Flags & CU_EVENT_DISABLE_TIMING) && (rc = timing_event_allowed()) != CUDA_SUCCESS)
        return rc;
    struct drv_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->flags = Flags;
    e->op = SIM_NONE;
    e->capture_node = -1;
    e->handle = drv_handle_new(H_EVENT, e);
    if (!e->handle) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phEvent = e->handle;
    return CUDA_SUCCESS;
}

API CUresult cuEventDestroy_v2(CUevent hEvent)
{
    CUresult rc;
    struct drv_event *e = drv_enter_destroy(H_EVENT, hEvent, &rc);
    if (!e)
        return rc;
    /* a pending record still refers to it: the agent frees it once that completes */
    pthread_mutex_lock(&drv.lock);
    e->handle = NULL;
    int now = atomic_load(&e->done_rec) >= e->records;
    pthread_mutex_unlock(&drv.lock);
    if (now)
        free(e);
    return CUDA_SUCCESS;
}

/* The prologue of a stream's event calls: OK (else CUDA_ERROR_INVALID_VALUE), the stream,
 * then the event (CUDA_ERROR_INVALID_HANDLE). */
static CUresult stream_event(int ok, int ptsz, CUstream h, CUevent hEvent, struct drv_stream **s,
                             struct drv_event **e)
{
    CUresult rc = drv_enter_stream(ok, h, ptsz, s);
    if (rc != CUDA_SUCCESS)
        return rc;
    *e = drv_handle_get(H_EVENT, hEvent);
    return *e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult event_record(int ptsz, CUevent hEvent, CUstream h, unsigned flags)
{
    struct drv_stream *s;
    struct drv_event *e;
    int ok = !(flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL);
    CUresult rc = stream_event(ok, ptsz, h, hEvent, &s, &e);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_op_desc d;
    memset(&d, 0, sizeof d);
    d.kind = SIM_OP_MARKER;
    d.effect = EFF_EVENT;
    d.u.event.ev = e;
    if (s->capture) {
        if (drv_capture_node(s, &d, &rc) && rc == CUDA_SUCCESS) {
            e->capture = s->capture;
            e->capture_node = s->capture_last;
        }
        return rc;
    }
    pthread_mutex_lock(&drv.lock);
    d.u.event.record = ++e->records;
    e->capture = NULL;
    pthread_mutex_unlock(&drv.lock);
    struct drv_ticket t;
    rc = drv_submit(s, &d, &t);
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_lock(&drv.lock);
        e->records--;
        pthread_mutex_unlock(&drv.lock);
        return rc;
    }
    e->op = t.op;
    e->gen = t.gen;
    e->ctx = s->ctx;
    return CUDA_SUCCESS;
}

API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return event_record(0, hEvent, hStream, 0);
}
API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return event_record(1, hEvent, hStream, 0);
}
API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return event_record(0, hEvent, hStream, flags);
}
API CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return event_record(1, hEvent, hStream, flags);
}

API CUresult cuEventQuery(CUevent hEvent)
{
    CUresult rc;
    struct drv_event *e = drv_enter_handle(1, H_EVENT, hEvent, &rc);
    if (!e)
        return rc;
    return atomic_load(&e->done_rec) >= e->records ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuEventSynchronize(CUevent hEvent)
{
    CUresult rc;
    struct drv_event *e = drv_enter_handle(1, H_EVENT, hEvent, &rc);
    if (!e)
        return rc;
    return drv_wait_counter(&e->done_rec, e->records, e->ctx);
}

API CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    CUresult rc = drv_enter(pMilliseconds != NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_event *a = drv_handle_get(H_EVENT, hStart);
    struct drv_event *b = drv_handle_get(H_EVENT, hEnd);
    if (!a || !b)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    if (a->records == 0 || b->records == 0)
        return CUDA_ERROR_INVALID_HANDLE;
    if (timing_fault(NULL) == TF_ELAPSED)
        return CUDA_ERROR_UNKNOWN;
    if (atomic_load(&a->done_rec) < a->records || atomic_load(&b->done_rec) < b->records)
        return CUDA_ERROR_NOT_READY;
    *pMilliseconds = (float)((double)(b->time_ns - a->time_ns) / 1e6);
    return CUDA_SUCCESS;
}

API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

static CUresult cuStreamWaitEvent_impl(int ptsz, CUstream h, CUevent hEvent, unsigned int Flags)
{
    struct drv_stream *s;
    struct drv_event *e;
    int ok = !(Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL);
    CUresult rc = stream_event(ok, ptsz, h, hEvent, &s, &e);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (e->capture) {
        /* an event recorded during a capture: this stream joins that capture */
        if (s->capture && s->capture != e->capture)
            return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        struct drv_op_desc d;
        memset(&d, 0, sizeof d);
        d.kind = SIM_OP_MARKER;
        if (!s->capture) {
            s->capture = e->capture;
            s->capture_mode = CU_STREAM_CAPTURE_MODE_RELAXED;
            s->capture_id = e->capture->capture_id;
            s->capture_last = -1;
            s->capture_branch = e->capture->nbranches++;
        }
        d.ndeps = 1;
        d.deps[0] = e->capture_node;
        drv_capture_node(s, &d, &rc);
        return rc;
    }
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    if (e->records == 0 || atomic_load(&e->done_rec) >= e->records)
        return CUDA_SUCCESS;
    struct drv_op_desc d;
    memset(&d, 0, sizeof d);
    d.kind = SIM_OP_MARKER;
    d.ndeps = 1;
    d.deps[0] = e->op;
    d.dep_gens[0] = e->gen;
    return drv_submit(s, &d, NULL);
}
PTSZ_PAIR(CUresult, cuStreamWaitEvent, (CUstream h, CUevent hEvent, unsigned int Flags), h, hEvent,
          Flags)

/* ---- stream memory operations --------------------------------------------------------- */

static CUresult value_op(int ptsz, CUstream h, CUdeviceptr addr, uint64_t value, unsigned flags,
                         int effect)
{
    int wide = effect == EFF_WRITE64 || effect == EFF_WAIT64;
    size_t n = wide ? 8 : 4;
    struct drv_stream *s;
    CUresult rc = drv_enter_stream(1, h, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (addr % n || drv_mem_lookup((void *)(uintptr_t)addr, n) == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int is_wait = effect == EFF_WAIT32 || effect == EFF_WAIT64;
    if (is_wait && (flags & 0xf) > CU_STREAM_WAIT_VALUE_NOR)
        return CUDA_ERROR_INVALID_VALUE;
    if (!is_wait && (flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER))
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_op_desc d;
    memset(&d, 0, sizeof d);
    d.kind = is_wait ? SIM_OP_HOST : SIM_OP_MARKER;
    d.effect = effect;
    d.u.val.addr = (void *)(uintptr_t)addr;
    d.u.val.value = value;
    d.u.val.flags = flags;
    if (drv_capture_node(s, &d, &rc))
        return rc;
    return drv_submit(s, &d, NULL);
}

#define VALUE_API(name, vt, effect)                                                                \
    API CUresult name(CUstream s, CUdeviceptr addr, vt value, unsigned int flags)                  \
    {                                                                                              \
        return value_op(0, s, addr, value, flags, effect);                                         \
    }                                                                                              \
    API CUresult name##_ptsz(CUstream s, CUdeviceptr addr, vt value, unsigned int flags)           \
    {                                                                                              \
        return value_op(1, s, addr, value, flags, effect);                                         \
    }

VALUE_API(cuStreamWriteValue32, cuuint32_t, EFF_WRITE32)
VALUE_API(cuStreamWriteValue32_v2, cuuint32_t, EFF_WRITE32)
VALUE_API(cuStreamWaitValue32, cuuint32_t, EFF_WAIT32)
VALUE_API(cuStreamWaitValue32_v2, cuuint32_t, EFF_WAIT32)
VALUE_API(cuStreamWriteValue64, cuuint64_t, EFF_WRITE64)
VALUE_API(cuStreamWriteValue64_v2, cuuint64_t, EFF_WRITE64)
VALUE_API(cuStreamWaitValue64, cuuint64_t, EFF_WAIT64)
VALUE_API(cuStreamWaitValue64_v2, cuuint64_t, EFF_WAIT64)

/* ---- host functions --------------------------------------------------------------------- */

static CUresult host_func(int ptsz, CUstream h, CUhostFn fn, void *userData)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_stream *s;
    CUresult rc = drv_enter_stream(1, h, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_op_desc d;
    drv_host_fn_desc(&d, fn, userData);
    if (drv_capture_node(s, &d, &rc))
        return rc;
    return drv_submit(s, &d, NULL);
}

API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    return host_func(0, hStream, fn, userData);
}

API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    return host_func(1, hStream, fn, userData);
}

struct callback_closure {
    CUstreamCallback cb;
    CUstream stream;
    void *data;
};

static void callback_trampoline(void *arg)
{
    struct callback_closure *cl = arg;
    cl->cb(cl->stream, CUDA_SUCCESS, cl->data);
    free(cl);
}

static CUresult add_callback(int ptsz, CUstream h, CUstreamCallback cb, void *data, unsigned flags)
{
    if (!cb || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct callback_closure *cl = malloc(sizeof *cl);
    if (!cl)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *cl = (struct callback_closure){cb, h, data};
    CUresult rc = host_func(ptsz, h, callback_trampoline, cl);
    if (rc != CUDA_SUCCESS)
        free(cl);
    return rc;
}

API CUresult cuStreamAddCallback(CUstream h, CUstreamCallback cb, void *data, unsigned int flags)
{
    return add_callback(0, h, cb, data, flags);
}

API CUresult cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void *data,
                                      unsigned int flags)
{
    return add_callback(1, h, cb, data, flags);
}
