/* Internal contracts of libposshim.so: configuration, the real driver entry points, the
 * per-thread record rings that the launch path fills and the collector drains, and the
 * kernel-name interning. The launch path's inline helpers live here. */
#ifndef POS_SHIM_H
#define POS_SHIM_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "pos/op_record.h"
#include "pos/rules.h"
#include "shim/symbols.h"

/* The driver functions shim/devtime.c calls. */
#define SHIM_DEVTIME_FNS(X)                                                                        \
    X(cuEventCreate)                                                                               \
    X(cuEventDestroy_v2)                                                                           \
    X(cuEventRecord)                                                                               \
    X(cuEventRecord_ptsz)                                                                          \
    X(cuEventQuery)                                                                                \
    X(cuEventElapsedTime)                                                                          \
    X(cuEventElapsedTime_v2)                                                                       \
    X(cuStreamCreate)                                                                              \
    X(cuStreamDestroy_v2)                                                                          \
    X(cuCtxPushCurrent_v2)                                                                         \
    X(cuCtxPopCurrent_v2)

#define SHIM_API    __attribute__((visibility("default")))
#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* ---- configuration (config.c: read once, at load) --------------------------------------- */

enum shim_mode { SHIM_MODE_OFF = 0, SHIM_MODE_PASSTHROUGH, SHIM_MODE_SCHEDULED };

struct shim_config {
    int mode;                /* what runs: POS_MODE */
    int mode_requested;      /* what POS_MODE asked for (-1: not set) */
    char trace_path[4096];   /* POS_TRACE, "" = no trace */
    uint32_t sample;         /* POS_SAMPLE: a completion marker every N launches; 0 = none */
    uint32_t poll_us;        /* POS_POLL_US: collector poll interval while work is pending */
    uint32_t prompt_poll_us; /* POS_PROMPT_POLL_US: the same while posd waits on completions */
    uint32_t help_when_us;   /* POS_HELP_WHEN_US: a window-step wait helps below this average */
    int devtime;             /* POS_DEVTIME: sampled markers carry the device's end time (1) */
    int debug;               /* POS_DEBUG */
};

extern struct shim_config shim_cfg;
/* Reads the configuration from the environment (at load, before anything else). */
void shim_config_read(void);

/* ---- the process's state (state.c) ------------------------------------------------------ */

extern int shim_active;           /* records are kept: mode != off, not a fork child */
extern int shim_cuda_inited;      /* cuInit succeeded in this process (a fork child: see fork.c) */
extern _Atomic int shim_captures; /* stream captures under way in the process */

/* ---- the log (log.c) -------------------------------------------------------------------- */

void shim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- the real driver (real.c) ----------------------------------------------------------- */

/* Not instrumented (the real dlsym's look-up, shim_dlsym_libc): a sanitizer's runtime looks its
 * functions up with dlsym while it starts, before it can check anything and before our
 * constructor ran. */
#define SHIM_UNSANITIZED __attribute__((no_sanitize("address", "thread", "undefined")))

/* The exported dlsym is a jump into shim_dlsym or the C library's (shim/interpose.c) where the
 * machine allows it. */
#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(SHIM_DLSYM_PORTABLE)
#define SHIM_DLSYM_JUMP 1
#endif

#define SHIM_DECLARE_REAL(sym, ...) extern __typeof__(&sym) shim_real_##sym;
SHIM_INTERCEPTED(SHIM_DECLARE_REAL)
SHIM_HELPERS(SHIM_DECLARE_REAL)
#undef SHIM_DECLARE_REAL

struct shim_entry {
    const char *symbol; /* exported, versioned name */
    const char *base;   /* name cuGetProcAddress is asked for */
    int version;
    int ptsz;
    void **real; /* where the driver's function is kept */
    void *wrapper;
};

/* The table of intercepted symbols, their real functions and wrappers (interpose.c). */
extern const struct shim_entry shim_table[];
extern const size_t shim_ntable;

/* Finds the C library's dlsym (at load; shim_real_dlsym finds it too if asked before). */
void shim_real_start(void);
/* Resolves every real entry point (once; any thread). */
void shim_resolve(void);
/* The application looked a driver symbol up in HANDLE: the driver is resolved from it. */
void shim_real_note_handle(void *handle);

/* For an exported wrapper whose real function is missing after resolution: reports it as the
 * dynamic linker would, and exits 127. */
__attribute__((noreturn)) void shim_missing(const char *symbol);

/* The real function behind wrapper SYM, resolving the driver on first use. */
#define SHIM_REAL(sym)                                                                             \
    (likely(shim_real_##sym != NULL)                                                               \
         ? shim_real_##sym                                                                         \
         : (shim_resolve(),                                                                        \
            shim_real_##sym ? shim_real_##sym : (shim_missing(#sym), shim_real_##sym)))

/* The real dlsym (never the shim's own). */
void *shim_real_dlsym(void *handle, const char *name);

/* ---- per-thread rings (threads.c) ------------------------------------------------------- */

#define SHIM_RING        16384 /* records per thread: ~1.7 MB, backed as it is used */
#define SHIM_SYNC_RING   256
#define SHIM_MAX_THREADS 256

enum shim_sync_kind { SHIM_SYNC_STREAM = 1, SHIM_SYNC_CTX, SHIM_SYNC_EVENT };

struct shim_sync_event {
    uint16_t kind;
    uint16_t ptsz;
    int32_t result;
    uint32_t tid; /* whose per-thread default stream, for a per-thread one */
    uint64_t stream;
    uint64_t ctx;
    uint64_t start_ns, end_ns;
};

/* A ring's life: free -> owned at its thread's first launch or sync -> exited when the thread
 * ends -> free again once the collector has drained it and kept its counts. */
enum shim_ring_state {
    SHIM_RING_FREE = 0,
    SHIM_RING_OWNED,  /* by a live thread */
    SHIM_RING_EXITED, /* its thread exited; drained and reclaimed by the collector */
};
struct shim_session;

struct shim_thread {
    _Atomic int state; /* enum shim_ring_state */
    uint32_t tid;
    /* the posd session the thread is using now, NULL when none (shim_session_enter) */
    _Atomic(struct shim_session *) using;
    uint32_t until_marker;
    /* single producer (the thread), single consumer (the collector) */
    _Atomic uint64_t head, tail;
    _Atomic uint64_t sync_head, sync_tail;
    /* counters, written by the thread only */
    _Atomic uint64_t launches, captured, failed, dropped, markers, marker_failures;
    _Atomic uint64_t syncs, sync_ns;
    struct pos_op_record ring[SHIM_RING];
    struct shim_sync_event sync_ring[SHIM_SYNC_RING];
};

extern struct shim_thread *shim_threads; /* [SHIM_MAX_THREADS], lazily backed */
extern __thread struct shim_thread *shim_self_tls __attribute__((tls_model("initial-exec")));

/* Reserves the rings (at load): 0, or -1 (said) when there is no memory for them. ON_ATTACH is
 * called whenever a thread has claimed one (the collector's: shim_collector_attached). */
int shim_threads_start(void (*on_attach)(void));
/* Claims a ring for the calling thread (first launch of a thread; slow path). NULL if all
 * are taken. */
struct shim_thread *shim_thread_attach(void);
/* A child forked before cuInit: every ring is free again (no other thread exists in it). */
void shim_threads_forked(void);

/* Frees the ring of an exited thread (SHIM_RING_EXITED) for another thread. Collector only,
 * once it has drained the ring after seeing it exited and has kept its counters. */
void shim_thread_reclaim(struct shim_thread *t);

/* Launches that went to the driver unrecorded: every ring was owned by a live thread. */
extern _Atomic uint64_t shim_unrecorded;

static inline struct shim_thread *shim_self(void)
{
    struct shim_thread *t = shim_self_tls;
    return likely(t != NULL) ? t : shim_thread_attach();
}

/* Adds to a counter only its own thread writes: no locked instruction needed. */
static inline void shim_count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static inline uint64_t shim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the current context (context.c) ------------------------------------------------------ */

extern __thread uint64_t shim_ctx_cache __attribute__((tls_model("initial-exec")));
extern __thread int shim_ctx_known __attribute__((tls_model("initial-exec")));
uint64_t shim_current_ctx_slow(void);

/* The calling thread's current context, without a driver call in the steady state. */
static inline uint64_t shim_current_ctx(void)
{
    return likely(shim_ctx_known) ? shim_ctx_cache : shim_current_ctx_slow();
}

/* ---- kernel identity -------------------------------------------------------------------- */

/* Interns NAME and maps HANDLE (a CUfunction or CUkernel value) to its id. Slow path. */
uint32_t shim_ident_register(uint64_t handle, const char *name);
/* The id of HANDLE, 0 if unknown. Lock-free; the launch path calls it. */
uint32_t shim_ident_lookup(uint64_t handle);
/* Name of an id ("?" if none). */
const char *shim_ident_name(uint32_t id);
/* Ids handed out so far (1..count). */
uint32_t shim_ident_count(void);

/* ---- completion markers ---------------------------------------------------------------- */

#define SHIM_MARKER_SLOTS 65536
extern _Atomic uint64_t shim_marker_dptr; /* device address of the marker slots, 0 = not yet */
extern _Atomic uint32_t *shim_marker_slots; /* written by the device (atomically, in the simulator) */
extern _Atomic uint64_t shim_marker_next;

/* Registers the marker memory in CTX (NULL: the caller's current context). */
void shim_markers_setup(CUcontext ctx);

/* ---- device times of sampled operators (devtime.c) ------------------------------------------ */

/* The driver's functions devtime.c calls (never the shim's wrappers), given by real.c once
 * they are resolved, with POS_DEVTIME, POS_DEBUG and the shim's log. */
struct shim_devtime_driver {
#define SHIM_DEVTIME_FN(sym) __typeof__(&sym) sym;
    SHIM_DEVTIME_FNS(SHIM_DEVTIME_FN)
#undef SHIM_DEVTIME_FN
};
void shim_devtime_configure(const struct shim_devtime_driver *drv, int enabled, int debug,
                            void (*log)(const char *fmt, ...));

/* Records a timing event of CTX's pool on STREAM behind a sampled launch (before its marker);
 * returns its token for the record, 0 when there is none (no pool yet, the pool empty, the
 * record refused: noted, said once by shim_devtime_tick). Sampled launches only. */
uint32_t shim_devtime_record(uint64_t ctx, uint64_t stream, int ptsz);
/* The collector, for a marker of CTX: creates CTX's pool and reference if it has none (once;
 * a refusal is said once, and CTX keeps poll times). */
void shim_devtime_setup(uint64_t ctx);
/* The collector, once TOKEN's marker has landed: *END_NS, the device's end of the operator on
 * CLOCK_MONOTONIC. 0, or -1 (the poll time stands). Gives the event back either way. */
int shim_devtime_read(uint32_t token, uint64_t *end_ns);
/* Gives back TOKEN's event unread (its marker never landed). */
void shim_devtime_release(uint32_t token);
/* The collector, every pass: says what the launch path noted; takes anchors again. */
void shim_devtime_tick(void);
/* CTX (0: every context) is about to be destroyed or released: its pool goes first. */
void shim_devtime_forget(uint64_t ctx);
void shim_devtime_forked(void); /* a child: no pools */
/* Operators whose device time was read, sampled ones that kept their poll time, and of those
 * the ones whose event was recorded after they had ended (no device time to have). */
void shim_devtime_counts(uint64_t *read, uint64_t *fallbacks, uint64_t *late);

/* ---- posd (session.c) -------------------------------------------------------------------- */

struct pos_client_shm;
#define POS_SUB_RING_WORDS (8192 / 64) /* POS_SUB_RING bits */

struct shim_session {
    struct pos_client_shm *shm;
    uint32_t sm_share; /* posd's SM share for this process (WELCOME), 0 = none */
    uint32_t mem_limit_ppm; /* posd's memory limit when it welcomed us (WELCOME) */
    uint64_t mem_limit;
    size_t shm_size;
    struct shim_session *retired_next; /* ended, not yet released (collector only) */
    int sock;
    int kick_fd;
    uint32_t gen; /* which session: completions of an older one are not reported */
    uint32_t client_id;
    uint32_t names_sent; /* kernel ids 1..names_sent are known to posd (collector only) */
    _Atomic int idle;    /* a sync covered every launch: the next one starts a request */
    _Atomic uint64_t wait_avg_ns; /* recent helped waits for a window step (moving average) */
    _Atomic uint32_t step_waits;  /* window-step waits so far */
    /* the completion prefix of this session's seqs (the collector's work lock holds it) */
    uint64_t local_done;
    uint64_t done_bits[POS_SUB_RING_WORDS];
};

/* What a launch tells posd when it submits. */
struct shim_submit {
    uint32_t kernel_id;
    uint16_t kind;
    int ptsz;
    uint32_t grid[3], block[3], smem;
    uint32_t tid;
    uint64_t stream, ctx;
    uint64_t submit_ns;
};

extern _Atomic(struct shim_session *) shim_session; /* NULL: passthrough (threads.c) */
extern int shim_sched_allowed;                      /* POS_MODE lets us talk to posd */
extern _Atomic uint32_t shim_sample;                /* markers every N launches, now */

/* The current session, for thread T to use until shim_session_leave; NULL: passthrough. A
 * session that ends (posd went away) is released by the collector once no thread announces
 * it in its ring: a hazard pointer, so the launch path pays one store and one load of its
 * own, no shared counter. The announced session is checked to be still the current one: an
 * ended session is never used afresh. */
static inline struct shim_session *shim_session_enter(struct shim_thread *t)
{
    struct shim_session *s = atomic_load_explicit(&shim_session, memory_order_acquire);
    while (s) {
        atomic_store_explicit(&t->using, s, memory_order_seq_cst);
        struct shim_session *now = atomic_load_explicit(&shim_session, memory_order_seq_cst);
        if (likely(now == s))
            return s;
        s = now;
    }
    atomic_store_explicit(&t->using, NULL, memory_order_release);
    return NULL;
}

static inline void shim_session_leave(struct shim_thread *t)
{
    atomic_store_explicit(&t->using, NULL, memory_order_release);
}

/* Releases the ended sessions no thread uses any more (the collector, under its work lock:
 * a thread that helps the collector uses the current session without announcing it). */
void shim_session_reclaim(void);

/* Submits one launch and waits for its grant if posd holds it; returns its seq (0: none).
 * *WINDOWED tells whether it is the last launch of a window (it needs its own marker). */
uint64_t shim_session_submit(struct shim_session *s, const struct shim_submit *sub, int *windowed);

/* Where a synchronisation by thread T starts: the last seq submitted in the current session
 * (0 if none, or T is NULL) and that session's GEN. */
uint64_t shim_session_covers(struct shim_thread *t, uint32_t *gen);
/* Reports a synchronisation (by thread T) that returned successfully: operators of session
 * GEN with seq <= COVERS on its scope (enum pos_sync_scope) are complete. Kicks posd when
 * posd asked. */
void shim_session_report_sync(struct shim_thread *t, uint32_t gen, uint32_t scope, int ptsz,
                              uint32_t tid, uint64_t stream, uint64_t ctx, uint64_t covers,
                              uint64_t end_ns);
/* Whether posd wants to hear of this client's completions at once. */
int shim_session_prompt(void);
/* Kicks posd if it wants to hear of completions at once (the collector, after reporting). */
void shim_session_kick_if_wanted(void);
/* Sends posd the kernel names it has not heard yet (the collector, every cycle). */
void shim_session_send_names(void);

/* ---- SM shares (mps.c) ---------------------------------------------------------------- */

/* Puts posd's SM share SHARE (percent, 0 = none) in CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, keeping
 * a smaller value of the user's. Before the driver starts only: it changes the environment. */
void shim_mps_apply(uint32_t share);

/* ---- device memory (memory.c: the ledger; memwrap.c: the allocation entry points) ------------
 * The shim's own exact account of the process's device memory, by device and kind
 * (docs/memory.md), reserved against posd's limit before each allocation and mirrored into the
 * session's shared memory. No lock of these is held across a driver call. */

/* What an allocation's key names (the shim keeps one map of them all). */
enum shim_mem_space {
    SHIM_MEM_DPTR = 1, /* a device pointer: linear, pitched, managed, stream-ordered, IPC */
    SHIM_MEM_ARRAY,    /* a CUarray */
    SHIM_MEM_MIPMAP,   /* a CUmipmappedArray */
    SHIM_MEM_VMM,      /* a CUmemGenericAllocationHandle of device memory */
    SHIM_MEM_VMM_MAP,  /* a mapping of one (its address) */
    SHIM_MEM_POOL,     /* a CUmemoryPool the process created (no charge of its own) */
    SHIM_MEM_CTX,      /* a context's measured memory */
    SHIM_MEM_MODULE,   /* a CUmodule's measured memory */
    SHIM_MEM_LIBRARY,  /* a CUlibrary's measured memory */
};

/* The current context's device, -1 when there is none. */
int shim_mem_current_device(void);
/* An allocation on its way to the driver. */
struct shim_mem_hold {
    int dev;      /* -1: not accounted (no device, or beyond POS_MEM_MAX_DEVICES) */
    int reserved; /* N was reserved against a limit */
    uint64_t n;
};

/* Reserves N bytes on DEV for an allocation about to be asked of the driver: CUDA_SUCCESS, or
 * CUDA_ERROR_OUT_OF_MEMORY when it would pass posd's limit (said at most once a second).
 * Nothing is reserved without a limit (the charge comes at shim_mem_settle). Zero bytes are
 * not accounted: the driver answers them. */
CUresult shim_mem_reserve(struct shim_mem_hold *h, int dev, uint64_t n, const char *what);
/* The driver answered RC to H: on success its bytes are committed as KIND under KEY of SPACE
 * (in context CTX, 0: none), else given back. Returns RC. */
CUresult shim_mem_settle(CUresult rc, const struct shim_mem_hold *h, int kind, int space,
                         uint64_t key, uint64_t ctx);
/* The driver made H bigger than asked (a pitch's padding): EXTRA more, past any limit. */
void shim_mem_grow(struct shim_mem_hold *h, uint64_t extra);
/* Charges N bytes of KIND the driver already took (measured, imported), past any limit. */
void shim_mem_charge(int dev, uint64_t n, int kind, int space, uint64_t key, uint64_t ctx);

/* One entry of the map, as taken out of it. */
struct shim_mem_entry {
    uint64_t key, bytes, ctx;
    uint64_t ref;      /* SHIM_MEM_VMM_MAP: its handle; SHIM_MEM_POOL: its device + 1 */
    uint32_t refs;     /* SHIM_MEM_VMM: references (create, retain), SHIM_MEM_CTX: retains */
    uint32_t maps;     /* SHIM_MEM_VMM: mappings */
    int16_t dev;
    uint8_t space, kind;
    struct shim_mem_entry *next;
};

/* Takes KEY of SPACE out of the map before the driver frees it: 1 and *OUT if it was there. */
int shim_mem_take(int space, uint64_t key, struct shim_mem_entry *out);
/* The driver freed what shim_mem_take took (RC success): its charge is released; else it goes
 * back into the map as it was. Returns RC. */
CUresult shim_mem_untake(CUresult rc, const struct shim_mem_entry *e);
/* Puts E back into the map as it is (its free failed, or it is still referenced). */
void shim_mem_restore(const struct shim_mem_entry *e);
/* Notes KEY of SPACE with REF and no charge (a pool's location, a mapping's handle). */
void shim_mem_note(int space, uint64_t key, uint64_t ref);
/* Looks KEY of SPACE up: 1 and *OUT (a copy) when known. */
int shim_mem_lookup(int space, uint64_t key, struct shim_mem_entry *out);
/* Adds DREFS to KEY's refs and DMAPS to its maps (SHIM_MEM_VMM, SHIM_MEM_CTX); when both reach
 * zero the entry goes and its charge is released. Returns 1 if KEY was known. */
int shim_mem_adjust(int space, uint64_t key, int drefs, int dmaps);
/* Context CTX is gone: everything charged in it is released. */
void shim_mem_ctx_gone(uint64_t ctx);

/* Free device memory now on the current context's device (the driver's figure): 0, or -1. */
int shim_mem_driver_free(int dev, uint64_t *free_bytes);

/* cuMemGetInfo's answer under posd's limit on DEV, from the driver's FREE and TOTAL. */
void shim_mem_info(int dev, uint64_t *free_bytes, uint64_t *total);

/* A new session: the account goes into its shared memory before it is published. */
void shim_mem_attached(struct shim_session *s);
/* The collector, every pass: the account again into the current session's shared memory. */
void shim_mem_publish(void);
/* The byte limit on DEV now (POS_MEM_UNLIMITED: none). */
uint64_t shim_mem_limit(int dev);

/* The shim's dlsym found FOUND for NAME (an "nv..." name): NVML's memory functions are
 * remembered and answered with the shim's (nvml.c); everything else is FOUND. */
void *shim_nvml_dlsym(const char *name, void *found);

/* NVML's free memory on CUDA device ORDINAL, the whole device's (NVML loaded and initialised for
 * the shim on first use, if the machine has it): 0, or -1. */
int shim_nvml_device_free(int ordinal, uint64_t *free_bytes);

/* This process's own device memory on CUDA device ORDINAL as NVML lists it among the device's
 * compute processes (nvmlDeviceGetComputeRunningProcesses _v3, _v2 or the plain one), the entry
 * whose pid is getpid(): 1 with *USED; 0 when NVML answered without such an entry (no context
 * yet, or pids of another namespace); -1 when NVML cannot tell (not there, an error, no figure). */
int shim_nvml_own_used(int ordinal, uint64_t *used);

/* A context's or module's measure by this process's own usage (NVML, under a limit only), so
 * that another process's memory taken meanwhile is not counted (docs/memory.md). */
struct shim_own {
    int have; /* shim_nvml_own_used's answer before; -1: no per-process measure */
    uint64_t before;
};
/* Before the context is made (the module loaded) on DEV. */
void shim_own_begin(struct shim_own *o, int dev);
/* After it: *TAKEN is the growth of this process's own usage, bounded by WIDE (the device-wide
 * fall of free memory), and the way it was measured returned; or *TAKEN is WIDE and NULL is
 * returned where NVML gave no per-process figure before or after. */
const char *shim_own_charge(const struct shim_own *o, int dev, uint64_t wide, uint64_t *taken);

/* Puts posd's memory limit (bytes, or millionths of each device's memory) into
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for devices 0..NDEV-1 of TOTALS bytes, keeping a user's
 * smaller value per device. After cuInit, before any context. */
void shim_mps_apply_mem(uint64_t limit, uint32_t ppm, int ndev, const uint64_t *totals);

/* ---- events (events.c): what a recorded event covers ---------------------------------- */

struct shim_event_mark {
    uint64_t stream, ctx, covers;
    uint64_t at_ns; /* when it was recorded */
    uint32_t tid, gen;
    int ptsz;
};

/* Remembers that EVENT was recorded with what M says (lock-free; may forget under races). */
void shim_event_recorded(uint64_t event, const struct shim_event_mark *m);
/* Forgets EVENT (recorded into a capture, or destroyed). */
void shim_event_forget(uint64_t event);
/* What EVENT's last record covers; 0 when unknown. */
int shim_event_lookup(uint64_t event, struct shim_event_mark *m);
/* Reports a completion to the session GEN (CALL_NS: when the launch called the driver, for a
 * device time; 0 otherwise); -1 when the channel is full (retry later). */
int shim_session_complete(uint32_t gen, uint64_t seq, uint64_t complete_ns, uint64_t call_ns,
                          uint16_t how, int32_t result);
void shim_session_poll(void); /* collector: liveness and re-attaching */
/* HELP does one collector pass for a thread that waits for its grant (shim_collector_help,
 * given at load): 1 when it reported completions. */
void shim_session_helper(int (*help)(void));
/* The first cuInit, before the driver's: registers with posd and puts its SM share in place
 * (the driver reads CUDA_MPS_ACTIVE_THREAD_PERCENTAGE when it creates a context). */
void shim_session_before_init(void);
/* The driver's cuInit failed: the session registered before it ends (a later cuInit attaches
 * again through the collector). */
void shim_session_init_failed(void);
/* The first cuInit succeeded: posd's memory limit goes into CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
 * before any context is made (shim_mps_apply_mem). */
void shim_session_after_init(void);
/* A child forked before cuInit: it registers as a client of its own at its own cuInit. */
void shim_session_fresh_child(void);
void shim_session_note_sync(struct shim_thread *t, uint64_t ns);
void shim_session_forked(void);
const char *shim_socket_path(void);

/* ---- the collector ---------------------------------------------------------------------- */

void shim_collector_start(void);        /* after a successful cuInit */
void shim_collector_kick(void);         /* something new to look at (slow paths only) */
int shim_collector_help(void); /* a waiting thread does one collector pass, if it is free */
extern _Atomic uint64_t shim_first_ctx; /* a context seen launching: markers register in it */
void shim_collector_stop(void);         /* at exit: drain, flush the trace */
void shim_collector_forked(void); /* a child forked before cuInit: its locks start afresh */
void shim_collector_attached(void); /* a thread claimed a ring (shim_threads_start's hook) */

/* ---- fork handling (fork.c) ------------------------------------------------------------- */

void shim_fork_start(void); /* at load: the child's handler */

#endif
