/* The launch path: wrappers of every way work is launched (kernels, Ex, cooperative, graphs,
 * host functions, each with its per-thread-stream form). Each takes its submit time, calls the
 * one submit point (which returns at once in passthrough), calls the driver, and leaves an
 * operator record in its thread's ring, with a completion marker every POS_SAMPLE launches (and
 * a timing event before it, shim/devtime.c).
 * No lock, syscall, allocation, getenv or formatting here once a thread has its ring. */
#include "shim/shim.h"

#include <pthread.h>
#include <sys/mman.h>

_Atomic uint64_t shim_marker_dptr;
_Atomic uint32_t *shim_marker_slots;
_Atomic uint64_t shim_marker_next = 1;

static pthread_mutex_t markers_lock = PTHREAD_MUTEX_INITIALIZER;
static int markers_failed;

/* Registers the host memory completion markers land in (once per process). In CTX, or in the
 * calling thread's current context when CTX is NULL. Slow path: the collector calls it, and
 * so does the first launch of a process that posd schedules (it needs its completions from
 * the very first operator). */
void shim_markers_setup(CUcontext ctx)
{
    if (atomic_load(&shim_marker_dptr) || markers_failed || !shim_cfg.sample)
        return;
    pthread_mutex_lock(&markers_lock);
    if (atomic_load(&shim_marker_dptr) || markers_failed) {
        pthread_mutex_unlock(&markers_lock);
        return;
    }
    size_t size = SHIM_MARKER_SLOTS * sizeof(uint32_t);
    void *buf = MAP_FAILED;
    CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
    CUdeviceptr d = 0;
    if (shim_real_cuStreamWriteValue32_v2 && shim_real_cuMemHostRegister_v2 &&
        shim_real_cuCtxPushCurrent_v2 && shim_real_cuMemHostGetDevicePointer_v2)
        buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf != MAP_FAILED && (!ctx || (rc = shim_real_cuCtxPushCurrent_v2(ctx)) == CUDA_SUCCESS)) {
        rc = shim_real_cuMemHostRegister_v2(
            buf, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
        if (rc == CUDA_SUCCESS)
            rc = shim_real_cuMemHostGetDevicePointer_v2(&d, buf, 0);
        CUcontext popped;
        if (ctx)
            shim_real_cuCtxPopCurrent_v2(&popped);
    }
    if (rc != CUDA_SUCCESS) {
        if (shim_cfg.debug)
            shim_log("completion markers unavailable (driver error %d); completions come from "
                     "synchronisations only",
                     (int)rc);
        if (buf != MAP_FAILED)
            munmap(buf, size);
        markers_failed = 1;
    } else {
        shim_marker_slots = buf;
        atomic_store_explicit(&shim_marker_dptr, (uint64_t)d, memory_order_release);
    }
    pthread_mutex_unlock(&markers_lock);
}

struct launch {
    struct shim_thread *t;
    uint64_t submit_ns;
    uint16_t kind;
    uint16_t flags;
    uint64_t function;
    uint64_t stream;
    uint64_t ctx;
    uint32_t grid[3], block[3], smem;
    int captured; /* -1 not asked yet, 0 no, 1 yes */
    uint64_t sched_seq;
    uint32_t session;
    int windowed; /* the last launch its grant or window cap allows: it needs its own marker */
};

static int stream_capturing(struct launch *L);

/* Submits L to posd's session and waits for its grant when posd holds it (submit_point).
 * Out of line: the passthrough path never meets it. */
static __attribute__((noinline)) void submit_scheduled(struct launch *L)
{
    struct shim_session *s = shim_session_enter(L->t);
    if (!s)
        return;
    struct shim_submit sub = {
        .kernel_id = L->kind == POS_OP_GRAPH || L->kind == POS_OP_HOSTFN
                         ? 0
                         : shim_ident_lookup(L->function),
        .kind = L->kind,
        .ptsz = (L->flags & POS_OPF_PTSZ) != 0,
        .grid = {L->grid[0], L->grid[1], L->grid[2]},
        .block = {L->block[0], L->block[1], L->block[2]},
        .smem = L->smem,
        .tid = L->t->tid,
        .stream = L->stream,
        .ctx = L->ctx,
        .submit_ns = L->submit_ns,
    };
    L->sched_seq = shim_session_submit(s, &sub, &L->windowed);
    L->session = s->gen;
    shim_session_leave(L->t);
    /* from here the record's submit time is when the launch goes to the driver, after any
     * wait for its grant: where its device time may begin (posd's profiles) */
    L->submit_ns = shim_now_ns();
}

/* The submit/wait point of the scheduler. In passthrough it lets every launch go at once;
 * attached to posd it submits the launch and waits for its grant when posd holds it. A launch
 * into a capturing stream is never submitted, so never held. */
static inline void submit_point(struct launch *L)
{
    L->sched_seq = 0;
    L->session = 0; /* copied into the record even when nothing was submitted */
    L->windowed = 0;
    if (likely(atomic_load_explicit(&shim_session, memory_order_relaxed) == NULL) ||
        stream_capturing(L))
        return;
    submit_scheduled(L);
}

static inline int launch_begin(struct launch *L, uint16_t kind, int ptsz, uint64_t function,
                               CUstream stream)
{
    if (!shim_active)
        return 0;
    L->t = shim_self();
    if (unlikely(!L->t)) {
        atomic_fetch_add_explicit(&shim_unrecorded, 1, memory_order_relaxed); /* no ring free */
        return 0;
    }
    L->submit_ns = shim_now_ns();
    L->kind = kind;
    L->flags = ptsz ? POS_OPF_PTSZ : 0;
    L->function = function;
    L->stream = (uint64_t)(uintptr_t)stream;
    L->ctx = shim_current_ctx();
    L->captured = -1;
    return 1;
}

/* A stream being captured only records: its launches are part of a graph, not operators.
 * Only asked while some capture is under way in the process. */
static int stream_capturing(struct launch *L)
{
    if (L->captured >= 0)
        return L->captured;
    if (likely(atomic_load_explicit(&shim_captures, memory_order_relaxed) == 0))
        return L->captured = 0;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUstream s = (CUstream)(uintptr_t)L->stream;
    __typeof__(shim_real_cuStreamIsCapturing) fn = (L->flags & POS_OPF_PTSZ)
                                                       ? shim_real_cuStreamIsCapturing_ptsz
                                                       : shim_real_cuStreamIsCapturing;
    L->captured = fn && fn(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
    return L->captured;
}

/* Puts a GPU-side write of a fresh value behind the op; the collector sees it land. Before
 * it, a timing event of the shim's, which gives the op's end on the device: complete once the
 * marker has landed, since the stream runs them in order. Returns the record's marker (the
 * value, and the event's token in the high half: no field of its own, so that an unsampled
 * launch writes nothing more), 0 if none. */
static uint64_t place_marker(const struct launch *L)
{
    uint64_t dptr = atomic_load_explicit(&shim_marker_dptr, memory_order_acquire);
    if (unlikely(!dptr) && L->sched_seq) {
        shim_markers_setup(NULL); /* scheduled: completions from the first operator on */
        dptr = atomic_load_explicit(&shim_marker_dptr, memory_order_acquire);
    }
    if (!dptr)
        return 0;
    uint64_t token = atomic_fetch_add_explicit(&shim_marker_next, 1, memory_order_relaxed);
    uint32_t value = (uint32_t)token ? (uint32_t)token : 1;
    CUdeviceptr slot = dptr + (value % SHIM_MARKER_SLOTS) * sizeof(uint32_t);
    CUstream s = (CUstream)(uintptr_t)L->stream;
    int ptsz = (L->flags & POS_OPF_PTSZ) != 0;
    uint32_t devtime = shim_cfg.devtime ? shim_devtime_record(L->ctx, L->stream, ptsz) : 0;
    CUresult rc = ptsz ? shim_real_cuStreamWriteValue32_v2_ptsz(s, slot, value, 0)
                       : shim_real_cuStreamWriteValue32_v2(s, slot, value, 0);
    if (rc != CUDA_SUCCESS) {
        shim_count(&L->t->marker_failures, 1);
        if (devtime)
            shim_devtime_release(devtime);
        return 0;
    }
    shim_count(&L->t->markers, 1);
    return (uint64_t)devtime << 32 | value;
}

static void launch_end(struct launch *L, CUresult rc)
{
    struct shim_thread *t = L->t;
    uint16_t flags = L->flags;
    uint64_t marker = 0;
    if (unlikely(rc != CUDA_SUCCESS)) {
        flags |= POS_OPF_FAILED;
        shim_count(&t->failed, 1);
    } else if (unlikely(stream_capturing(L))) {
        flags |= POS_OPF_CAPTURED;
        shim_count(&t->captured, 1);
    } else {
        shim_count(&t->launches, 1);
        uint32_t sample = atomic_load_explicit(&shim_sample, memory_order_relaxed);
        if (pos_marker_due(&t->until_marker, sample) || unlikely(L->windowed)) {
            marker = place_marker(L);
            if (marker)
                flags |= POS_OPF_MARKED;
        }
    }
    uint64_t tail = atomic_load_explicit(&t->tail, memory_order_relaxed);
    if (unlikely(tail - atomic_load_explicit(&t->head, memory_order_acquire) >= SHIM_RING)) {
        /* the collector is behind: lose the record, never the launch */
        shim_count(&t->dropped, 1);
        return;
    }
    struct pos_op_record *r = &t->ring[tail % SHIM_RING];
    r->version = POS_OP_RECORD_VERSION;
    r->kind = L->kind;
    r->flags = flags;
    r->done_how = POS_DONE_UNKNOWN;
    r->kernel_id = 0; /* the collector maps the function to its name's id */
    r->tid = t->tid;
    r->grid[0] = L->grid[0], r->grid[1] = L->grid[1], r->grid[2] = L->grid[2];
    r->block[0] = L->block[0], r->block[1] = L->block[1], r->block[2] = L->block[2];
    r->smem = L->smem;
    r->result = rc;
    r->seq = 0; /* numbered by the collector, in the order it drains */
    r->function = L->function;
    r->stream = L->stream;
    r->ctx = L->ctx;
    r->marker = marker;
    r->submit_ns = L->submit_ns;
    r->complete_ns = 0;
    r->sched_seq = L->sched_seq;
    r->session = L->session;
    /* the record is complete before the collector may see it */
    atomic_store_explicit(&t->tail, tail + 1, memory_order_release);
}

static inline void set_dims(struct launch *L, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned smem)
{
    L->grid[0] = gx, L->grid[1] = gy, L->grid[2] = gz;
    L->block[0] = bx, L->block[1] = by, L->block[2] = bz;
    L->smem = smem;
}

/* ---- wrappers ------------------------------------------------------------------------------ */

#define KERNEL_ARGS                                                                                \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,              \
        unsigned int by, unsigned int bz, unsigned int smem, CUstream h

#define KERNEL_WRAPPER(sym, kind, ptsz, extra_decl, extra_args)                                    \
    SHIM_API CUresult sym(KERNEL_ARGS, void **kernelParams extra_decl)                             \
    {                                                                                              \
        __typeof__(&sym) real = SHIM_REAL(sym);                                                    \
        struct launch L;                                                                           \
        if (!launch_begin(&L, kind, ptsz, (uint64_t)(uintptr_t)f, h))                              \
            return real(f, gx, gy, gz, bx, by, bz, smem, h, kernelParams extra_args);              \
        set_dims(&L, gx, gy, gz, bx, by, bz, smem);                                                \
        submit_point(&L);                                                                          \
        CUresult rc = real(f, gx, gy, gz, bx, by, bz, smem, h, kernelParams extra_args);           \
        launch_end(&L, rc);                                                                        \
        return rc;                                                                                 \
    }

#define COMMA ,
KERNEL_WRAPPER(cuLaunchKernel, POS_OP_KERNEL, 0, COMMA void **extra, COMMA extra)
KERNEL_WRAPPER(cuLaunchKernel_ptsz, POS_OP_KERNEL, 1, COMMA void **extra, COMMA extra)
KERNEL_WRAPPER(cuLaunchCooperativeKernel, POS_OP_COOPERATIVE, 0, , )
KERNEL_WRAPPER(cuLaunchCooperativeKernel_ptsz, POS_OP_COOPERATIVE, 1, , )

#define KERNEL_EX_WRAPPER(sym, ptsz)                                                               \
    SHIM_API CUresult sym(const CUlaunchConfig *config, CUfunction f, void **kernelParams,         \
                          void **extra)                                                            \
    {                                                                                              \
        __typeof__(&sym) real = SHIM_REAL(sym);                                                    \
        struct launch L;                                                                           \
        if (!config ||                                                                             \
            !launch_begin(&L, POS_OP_KERNEL_EX, ptsz, (uint64_t)(uintptr_t)f, config->hStream))    \
            return real(config, f, kernelParams, extra);                                           \
        set_dims(&L, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,      \
                 config->blockDimY, config->blockDimZ, config->sharedMemBytes);                    \
        submit_point(&L);                                                                          \
        CUresult rc = real(config, f, kernelParams, extra);                                        \
        launch_end(&L, rc);                                                                        \
        return rc;                                                                                 \
    }

KERNEL_EX_WRAPPER(cuLaunchKernelEx, 0)
KERNEL_EX_WRAPPER(cuLaunchKernelEx_ptsz, 1)

#define GRAPH_WRAPPER(sym, ptsz)                                                                   \
    SHIM_API CUresult sym(CUgraphExec g, CUstream h)                                               \
    {                                                                                              \
        __typeof__(&sym) real = SHIM_REAL(sym);                                                    \
        struct launch L;                                                                           \
        if (!launch_begin(&L, POS_OP_GRAPH, ptsz, (uint64_t)(uintptr_t)g, h))                      \
            return real(g, h);                                                                     \
        set_dims(&L, 0, 0, 0, 0, 0, 0, 0);                                                         \
        submit_point(&L);                                                                          \
        CUresult rc = real(g, h);                                                                  \
        launch_end(&L, rc);                                                                        \
        return rc;                                                                                 \
    }

GRAPH_WRAPPER(cuGraphLaunch, 0)
GRAPH_WRAPPER(cuGraphLaunch_ptsz, 1)

#define HOSTFN_WRAPPER(sym, ptsz)                                                                  \
    SHIM_API CUresult sym(CUstream h, CUhostFn fn, void *data)                                     \
    {                                                                                              \
        __typeof__(&sym) real = SHIM_REAL(sym);                                                    \
        struct launch L;                                                                           \
        if (!launch_begin(&L, POS_OP_HOSTFN, ptsz, (uint64_t)(uintptr_t)fn, h))                    \
            return real(h, fn, data);                                                              \
        set_dims(&L, 0, 0, 0, 0, 0, 0, 0);                                                         \
        submit_point(&L);                                                                          \
        CUresult rc = real(h, fn, data);                                                           \
        launch_end(&L, rc);                                                                        \
        return rc;                                                                                 \
    }

HOSTFN_WRAPPER(cuLaunchHostFunc, 0)
HOSTFN_WRAPPER(cuLaunchHostFunc_ptsz, 1)
