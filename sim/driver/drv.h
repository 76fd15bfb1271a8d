/* Internal contracts of the simulated CUDA driver (build/sim/libcuda.so.1): the process-local
 * objects behind CUDA handles, the shared virtual GPU, and the helpers every API file uses.
 * Its files call downward only (scripts/circles.py): the entry points (api_*.c) above the
 * submission path (submit.c) and the segment's attach and detach (shm.c), above the agent
 * (agent.c), above device memory, streams and the device process (devmem.c, stream.c,
 * device.c), above the device lock (lock.c) and the submission rings (ring.c); at the bottom
 * the entry preambles (enter.c), the handle table (handles.c) and the state (state.c). A
 * lower file that must reach a higher one is given a callback (drv_ctx_on_gone,
 * drv_pool_free_region). */
#ifndef POS_SIM_DRV_H
#define POS_SIM_DRV_H

/* Declares every versioned entry point (_v2, _ptsz, _ptds) as the real driver does. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaProfiler.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/gpu_model.h"
#include "sim/module_text.h"

#define API                __attribute__((visibility("default")))
#define SIM_DRIVER_VERSION 13000

/* ---- shared segment -------------------------------------------------------------------- */

#define SIM_SHM_MAGIC   UINT64_C(0x706f732d73696d31) /* "pos-sim1" */
#define SIM_SHM_VERSION 7

/* Each process's launches reach the model through a ring of its own: it fills an op it
 * allocated earlier (its pool) and publishes it here without the device lock; whoever takes
 * the lock next puts every process's published ops into the model in the order of their
 * times, before the model moves on (drv_lock). A process stopped or descheduled in a launch
 * so holds nothing another process needs. Written at tail by its process alone (under its
 * drv.lock), read at head by the lock holder. */
#define DRV_SUBMIT_RING 2048

enum drv_submission_type {
    SUB_LAUNCH,    /* op (filled, allocated earlier) enters its stream */
    SUB_HOST_DONE, /* op, a host function or a stream wait on memory, is done */
    SUB_WANT_OPS,  /* the process's pool wants PRIO more ops (granted into its ring) */
};

struct drv_submission {
    int32_t op;
    uint32_t gen;
    int64_t t; /* device time of the launch */
    int32_t prio;
    uint16_t prio_override;
    uint16_t type; /* enum drv_submission_type */
};

/* The device process (pos-sim-device, sim/driver/device.c): the one process that advances
 * the model and shows each process its completions, as NVIDIA's MPS server owns the GPU.
 * Processes wake it through WORD; PLANNED is the device time it means to look next; PID and
 * START name it (under the lock). */
struct drv_server {
    _Atomic uint32_t word;
    int64_t planned_ns;
    int32_t pid;
    uint64_t start;
    int64_t spawned_ns; /* CLOCK_MONOTONIC of the last start asked for, 0 if none */
};

struct drv_submit_ring {
    _Atomic uint32_t head;
    _Atomic uint32_t tail;
    struct drv_submission e[DRV_SUBMIT_RING];
};

struct sim_shm {
    uint64_t magic;
    uint32_t version;
    _Atomic uint32_t ready; /* set by the creator once initialised */
    uint32_t dead;          /* unlinked by its last user: attach again */
    pthread_mutex_t lock;   /* robust, process-shared: guards everything below */
    int64_t origin_ns;      /* CLOCK_MONOTONIC at device time 0 */
    int64_t last_liveness_ns;
    struct drv_server server;
    struct drv_submit_ring rings[SIM_MAX_OWNERS];
    struct sim_gpu gpu;
};

/* ---- process-local objects ------------------------------------------------------------- */

enum drv_stream_kind { STREAM_USER, STREAM_LEGACY, STREAM_PER_THREAD, STREAM_HIDDEN };

struct drv_graph;
struct drv_ctx;

struct drv_stream {
    CUstream handle;
    struct drv_ctx *ctx;
    int slot; /* model stream */
    int kind; /* enum drv_stream_kind */
    unsigned flags;
    int prio;
    uint64_t submitted;         /* ops submitted (under the shm lock) */
    _Atomic uint64_t completed; /* ops completed and applied (agent) */
    int last_op;                /* last submitted op and its gen, for dependencies */
    uint32_t last_gen;
    int destroyed; /* cuStreamDestroy called: freed when drained */
    /* stream capture */
    struct drv_graph *capture;
    int capture_mode;
    int capture_invalid;
    int capture_last;   /* last captured node, -1 at the start */
    int capture_branch; /* 0 for the stream that began the capture */
    uint64_t capture_id;
    struct drv_stream *next_in_ctx;
};

struct drv_ctx {
    CUcontext handle;
    int slot; /* model context */
    CUdevice dev;
    unsigned flags;
    int primary;
    int primary_refs;
    uint32_t max_sms; /* SMs its kernels may use (MPS share, fixed at creation); 0 = all */
    struct drv_stream *legacy;
    struct drv_stream *streams; /* every stream of the context, legacy included */
    uint64_t submitted;
    _Atomic uint64_t completed;
    _Atomic int sticky; /* CUresult that poisons the context, 0 if none */
    int destroyed;
    _Atomic int nmodules;         /* modules loaded in it, charged (api_module.c) */
    struct drv_ctx *retired_next; /* in drv.retired, once destroyed */
    /* start-up settings the model ignores, read back as set (api_config.c) */
    int cache_config;    /* CUfunc_cache */
    unsigned limits_set; /* bit per CUlimit set with cuCtxSetLimit */
    size_t limits[CU_LIMIT_MAX];
};

struct drv_func {
    CUfunction handle;
    struct sim_kernel_decl decl;
    struct drv_module *module;
    int max_dyn_smem;
};

struct drv_module {
    CUmodule handle;
    struct drv_ctx *ctx; /* NULL for a library */
    size_t nfuncs;
    struct drv_func *funcs;
};

struct drv_library {
    CUlibrary handle;
    struct drv_module mod;
    CUkernel *kernels; /* one handle per function */
};

struct drv_event {
    CUevent handle;
    unsigned flags;
    uint64_t records;          /* records submitted */
    _Atomic uint64_t done_rec; /* the record number that last completed */
    int op;                    /* op of the latest record */
    uint32_t gen;
    struct drv_ctx *ctx; /* context of the latest record (contexts are never freed; streams
                          * are, so an event keeps no stream pointer) */
    int64_t time_ns;     /* wall time of the completed record */
    /* captured record: node in the capturing graph */
    struct drv_graph *capture;
    int capture_node;
};

/* ---- ops: what the agent does when the device completes one ---------------------------- */

enum drv_effect {
    EFF_NONE = 0,
    EFF_TWIN,        /* built-in kernel */
    EFF_COPY,        /* memmove(dst, src, n) at completion */
    EFF_COPY_STAGED, /* memcpy(dst, staged, n), then free(staged) */
    EFF_MEMSET8,
    EFF_MEMSET16,
    EFF_MEMSET32,
    EFF_WRITE32,
    EFF_WRITE64,
    EFF_WAIT32, /* SIM_OP_HOST: the agent checks the condition */
    EFF_WAIT64,
    EFF_HOSTFN, /* SIM_OP_HOST: the agent calls fn(data) */
    EFF_EVENT,
};

struct drv_op_desc {
    int kind;   /* enum sim_op_kind */
    int effect; /* enum drv_effect */
    int flags;  /* SIM_OPF_* */
    uint32_t blocks, threads, smem;
    double flops, bytes;
    int prio_override; /* 0: the stream's priority */
    int prio;
    int ndeps;
    int deps[SIM_MAX_DEPS];
    uint32_t dep_gens[SIM_MAX_DEPS];
    union {
        struct {
            int twin;
            uint64_t args[4];
        } twin;
        struct {
            void *dst;
            const void *src;
            size_t n;
        } copy;
        struct {
            void *dst;
            uint64_t value;
            size_t n;
        } set;
        struct {
            void *addr;
            uint64_t value;
            unsigned flags;
        } val;
        struct {
            CUhostFn fn;
            void *data;
        } host;
        struct {
            struct drv_event *ev;
            uint64_t record;
        } event;
    } u;
};

/* Per-op record kept by the process that submitted it (indexed by model op). */
struct drv_local_op {
    struct drv_op_desc d;
    struct drv_stream *stream;
    int started; /* host function handed to the agent */
};

/* ---- the process ----------------------------------------------------------------------- */

#define DRV_LOCK_HIST 40 /* log2 buckets of lock waits: 1 ns .. 2^39 ns */
#define DRV_POOL_CAP  512 /* allocated ops a process keeps ready */
#define DRV_POOL_FILL 128 /* what the agent keeps it at, while the device has ops to spare */

struct drv_proc {
    _Atomic int initialized;
    int init_result; /* CUresult of the first cuInit */
    int forked;      /* this is a fork child: the driver is unusable */
    struct sim_shm *shm;
    size_t shm_size;
    char shm_name[128];
    struct sim_gpu *g;
    int owner;
    double scale;
    int64_t origin_ns;
    pthread_mutex_t lock; /* process-local: object lists, waits */
    pthread_cond_t cond;  /* broadcast when ops complete */
    pthread_t agent;
    _Atomic int agent_stop;
    _Atomic int agent_exited;
    _Atomic int agent_in_host; /* the agent is running a host function of the application */
    struct drv_local_op *local; /* [SIM_MAX_OPS] */
    /* allocated ops ready to fill (under drv.lock): refilled by the agent as it recycles its
     * reaped ops, so that a launch needs neither the device lock nor the shared free list */
    int32_t pool[DRV_POOL_CAP];
    uint32_t npool;
    int want_ops; /* a SUB_WANT_OPS is out, not yet granted (agent) */
    struct drv_ctx *primary;    /* the primary context, created on first retain */
    struct drv_ctx *retired;    /* destroyed contexts, kept for the process's life (api_ctx.c) */
    uint64_t mem_alloc;         /* device memory of allocations (no overheads; device lock) */
    uint64_t mem_limit;         /* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for device 0; 0 = none */
    uint64_t submitted_all;     /* ops submitted by the process (under the shm lock) */
    _Atomic uint64_t completed_all;
    uint64_t agent_cycles; /* statistics, reported with POS_SIM_DEBUG */
    uint64_t early_wakes;
    uint64_t agent_lock_ns; /* time the agent held the device lock */
    /* POS_SIM_STATS: how long and how often this process's threads waited for and held the
     * device lock, the agent's apart from the application's ([DRV_ROLE_*]) */
    int lock_stats;
    int64_t attach_mono_ns;
    struct drv_lock_stats {
        _Atomic uint64_t locks, contended, wait_ns, wait_max_ns, hold_ns, hold_max_ns;
        _Atomic uint64_t wait_hist[DRV_LOCK_HIST]; /* waits by log2 of ns */
    } lstats[2];
};

/* ---- the state (state.c): at the bottom, it calls nothing of sim/driver ---------------- */

extern struct drv_proc drv;

/* Common prologue: not initialised, forked child. */
CUresult drv_check_init(void);
/* The same, then CUDA_ERROR_INVALID_VALUE when OUT (where the answer goes) is NULL. */
CUresult drv_check_init_out(const void *out);
int64_t drv_mono_ns(void);
int64_t drv_device_now(void);               /* device time of now */
int64_t drv_wall_of_device(int64_t dev_ns); /* CLOCK_MONOTONIC of a device time */
void drv_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t drv_proc_start_time(pid_t pid);
/* PATTERN with each %p replaced by the pid into OUT (POS_SIM_TRACE, POS_SIM_STATS). */
void drv_path_expand(const char *pattern, char *out, size_t len);

/* ---- the submission rings (ring.c) ----------------------------------------------------- */

/* Owner slot O's submissions are forgotten (under the lock). */
void drv_ring_reset(int o);
/* Under the lock, first thing: every process's published submissions into the model. */
void drv_drain_submissions(void);
/* Publishes a submission of TYPE for OP with ARG in this process's ring (caller holds
 * drv.lock; the caller wakes the device process). Returns 0, or -ENOSPC when the ring is
 * full. */
int drv_publish(int type, int op, int32_t arg);

/* ---- the device lock (lock.c) ---------------------------------------------------------- */

enum { DRV_ROLE_APP, DRV_ROLE_AGENT };
extern __thread int drv_role; /* DRV_ROLE_AGENT in the agent thread */

void drv_lock(void); /* shm lock; repairs after a dead holder */
void drv_unlock(void);
void drv_liveness_scan(int64_t now_mono); /* under the lock */
/* The process recorded in owner slot O lives (its pid and start time). */
int drv_owner_alive(const struct sim_owner *o);
/* Under the lock: takes up to N ops from the device for this process's pool into OUT;
 * returns how many (fewer when its quota or the device's ops run short). */
int drv_pool_alloc(int32_t *out, int n);
/* Adds N allocated ops to this process's pool (caller holds drv.lock); those that do not fit
 * are given back to the device (takes the device lock). */
void drv_pool_put(const int32_t *ops, int n);
/* POS_SIM_STATS: appends this process's device-lock figures (at exit). */
void drv_write_lock_stats(void);

/* ---- the segment (shm.c), the device process (device.c) -------------------------------- */

CUresult drv_attach(void); /* cuInit's work: join the virtual GPU */
/* Under the lock: the device process runs, or one is being started (sim/driver/device.c).
 * Returns 0, or -1 when none can be started (said on stderr). */
int drv_server_ensure(void);
/* Wakes the device process. */
void drv_server_kick(void);
/* The device process is alive (pid and start time). */
int drv_server_alive(void);

/* ---- handles.c ------------------------------------------------------------------------- */

enum drv_handle_type {
    H_CTX = 1,
    H_STREAM,
    H_EVENT,
    H_MODULE,
    H_FUNC,
    H_LIBRARY,
    H_KERNEL,
    H_GRAPH,
    H_EXEC,
    H_LINK,
    H_ARRAY,
    H_MIPMAP,
    H_MEMPOOL,
    H_MEMALLOC, /* CUmemGenericAllocationHandle */
    H_NTYPES
};

void *drv_handle_new(int type, void *obj); /* NULL when the table is full */
void *drv_handle_get(int type, const void *handle);
void drv_handle_free(int type, const void *handle);

/* ---- entry (enter.c): the current context and the preambles of entry points ------------ */

/* The calling thread's current context: CUDA_SUCCESS and *OUT, or the error to return. */
CUresult drv_current_ctx(struct drv_ctx **out);
/* The thread's current-context stack: push (-1 when full), pop (-1 when empty), replace the
 * top (NULL: pop, if any), the top (NULL if none), and every entry of H removed. */
int drv_ctx_push(CUcontext h);
int drv_ctx_pop(CUcontext *top);
void drv_ctx_set_top(CUcontext h);
CUcontext drv_ctx_top(void);
void drv_ctx_forget(CUcontext h);

/* The preambles of entry points, in NVIDIA's order of checks: OK (the pointers for the
 * answer are given, else CUDA_ERROR_INVALID_VALUE), then initialised. Inline, so that the
 * compiler and the analyzer see that a caller goes on only with its pointers given. */
static inline CUresult drv_enter(int ok)
{
    return ok ? drv_check_init() : CUDA_ERROR_INVALID_VALUE;
}

/* The same, then device DEV, the only one (CUDA_ERROR_INVALID_DEVICE). */
static inline CUresult drv_enter_dev(int ok, CUdevice dev)
{
    CUresult rc = drv_enter(ok);
    if (rc != CUDA_SUCCESS)
        return rc;
    return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* The same as drv_enter, then the current context into *C. */
static inline CUresult drv_enter_ctx(int ok, struct drv_ctx **c)
{
    return ok ? drv_current_ctx(c) : CUDA_ERROR_INVALID_VALUE;
}

/* What NVIDIA's driver answers for a handle of TYPE that names nothing: an invalid context;
 * an invalid value for graphs, executable graphs and memory pools (arguments, not resources,
 * in its errors); an invalid handle for the rest. */
static inline CUresult drv_bad_handle(int type)
{
    switch (type) {
    case H_CTX:
        return CUDA_ERROR_INVALID_CONTEXT;
    case H_GRAPH:
    case H_EXEC:
    case H_MEMPOOL:
        return CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_INVALID_HANDLE;
    }
}

/* The same as drv_enter, then the object of handle H of TYPE, or NULL with *RC set
 * (drv_bad_handle). */
static inline void *drv_enter_handle(int ok, int type, const void *h, CUresult *rc)
{
    *rc = drv_enter(ok);
    if (*rc != CUDA_SUCCESS)
        return NULL;
    void *obj = drv_handle_get(type, h);
    if (!obj)
        *rc = drv_bad_handle(type);
    return obj;
}

/* The prologue of the destroy calls: drv_enter_handle, then the handle freed (the object is
 * the caller's to release). */
static inline void *drv_enter_destroy(int type, const void *h, CUresult *rc)
{
    void *obj = drv_enter_handle(1, type, h, rc);
    if (obj)
        drv_handle_free(type, h);
    return obj;
}

/* ---- streams (stream.c) ---------------------------------------------------------------- */

/* Resolves a stream handle as the API entry point sees it (PTSZ: a _ptsz/_ptds entry point,
 * where NULL is the per-thread stream; CTX: the current context, or NULL to look it up when
 * a special handle needs it). Fills *OUT; returns CUDA_SUCCESS or an error. */
CUresult drv_stream_resolve(CUstream h, int ptsz, struct drv_ctx *ctx, struct drv_stream **out);

/* The prologue of stream entry points: drv_enter, then drv_stream_resolve. */
static inline CUresult drv_enter_stream(int ok, CUstream h, int ptsz, struct drv_stream **out)
{
    CUresult rc = drv_enter(ok);
    return rc != CUDA_SUCCESS ? rc : drv_stream_resolve(h, ptsz, NULL, out);
}

/* Creates the model stream and the process-local stream object. */
CUresult drv_stream_create(struct drv_ctx *ctx, int kind, unsigned flags, int prio,
                           struct drv_stream **out);
/* Frees a drained, destroyed stream (agent or destroy path; caller holds drv.lock). */
void drv_stream_release(struct drv_stream *s);

/* ---- agent.c --------------------------------------------------------------------------- */

CUresult drv_agent_start(void);
void drv_agent_stop(void);
void drv_agent_kick(void); /* wake the agent: something it must look at changed */
uint64_t drv_device_checks(void); /* times the agent found its work silent and looked */
/* Waits (process-local condition) until *COUNTER >= TARGET; returns the sticky error of
 * CTX if it turns up meanwhile, else CUDA_SUCCESS. */
CUresult drv_wait_counter(_Atomic uint64_t *counter, uint64_t target, struct drv_ctx *ctx);
void drv_wait_for_room(void); /* after the owner's op quota ran out */

/* ---- submit.c -------------------------------------------------------------------------- */

/* What drv_submit hands back: the model op (for dependencies) and its place in its stream
 * (wait for s->completed >= seq). */
struct drv_ticket {
    int op;
    uint32_t gen;
    uint64_t seq;
};

/* Fills D as a host op that calls FN(DATA) (in the agent) when its stream reaches it. */
void drv_host_fn_desc(struct drv_op_desc *d, CUhostFn fn, void *data);

/* Submits one op on S (the caller resolved everything). Returns CUDA_SUCCESS or an error;
 * fills *T when T is not NULL. */
CUresult drv_submit(struct drv_stream *s, struct drv_op_desc *d, struct drv_ticket *t);

/* Waits until every op this process submitted so far has completed. */
CUresult drv_sync_all(void);


/* ---- ctx (api_ctx.c) ------------------------------------------------------------------- */

CUresult drv_ctx_sync(struct drv_ctx *ctx);

/* ---- modules (api_module.c) ------------------------------------------------------------ */

/* Reads a whole file as a malloc'd NUL-terminated string (CUDA_ERROR_FILE_NOT_FOUND if it
 * cannot be read). */
CUresult drv_read_file(const char *fname, char **out);

/* ---- memory (api_mem.c) ---------------------------------------------------------------- */

enum drv_mem_kind { MEM_DEVICE = 1, MEM_HOST_PINNED, MEM_HOST_REGISTERED };

/* Kind of the allocation that holds [p, p+n), or 0 if none does. */
int drv_mem_lookup(const void *p, size_t n);

/* ---- device memory (devmem.c): the registry, the arena, the charge --------------------- */

/* The path that made a device-memory region, which says what may free it. */
enum drv_alloc_how {
    ALLOC_LINEAR = 1,  /* cuMemAlloc, cuMemAllocPitch: cuMemFree */
    ALLOC_MANAGED,     /* cuMemAllocManaged: cuMemFree */
    ALLOC_POOL,        /* from a pool of this process: cuMemFree(Async) */
    ALLOC_POOL_IMPORT, /* cuMemPoolImportPointer: cuMemFree(Async), takes no memory */
    ALLOC_IPC_IMPORT,  /* cuIpcOpenMemHandle: cuIpcCloseMemHandle, takes no memory */
    ALLOC_VMM,         /* a mapping with access set: cuMemUnmap */
};

/* One allocation in the process's address space: [base, base + size). */
struct drv_region {
    uintptr_t base;
    size_t size;
    int kind;     /* enum drv_mem_kind */
    int how;      /* enum drv_alloc_how (device memory) */
    uint64_t off; /* where it lies in this process's arena (own device memory) */
    void *obj;    /* the context (linear, managed), the pool (ALLOC_POOL*), the import
                   * (ALLOC_IPC_IMPORT), the allocation (VMM) */
};

/* Adds R; 0, -EEXIST when it overlaps another, -ENOMEM. */
int drv_region_add(const struct drv_region *r);
/* Copies the region that holds P into *OUT: 1, or 0 when none does. */
int drv_region_find(uintptr_t p, struct drv_region *out);
/* Removes the region that starts exactly at BASE with KIND and, unless 0, HOW, into *OUT (may
 * be NULL): 1, or 0 when there is none. */
int drv_region_take(uintptr_t base, int kind, int how, struct drv_region *out);

/* Removes every device region made by HOW for OBJ into a malloc'd *OUT: how many. */
size_t drv_region_take_all(int how, const void *obj, struct drv_region **out);

/* What a charge is for: an allocation counts against CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, the
 * overhead of a context or module only against the device. */
enum drv_charge_kind { CHARGE_ALLOC, CHARGE_OVERHEAD };

/* Charges BYTES of device memory to this process under the device lock: CUDA_SUCCESS, or
 * CUDA_ERROR_OUT_OF_MEMORY when the device (all processes together, dead ones reclaimed
 * first) or the process's MPS limit has no room. Never wraps. */
CUresult drv_mem_charge(uint64_t bytes, int what);
/* Gives back what drv_mem_charge charged. */
void drv_mem_uncharge(uint64_t bytes, int what);
/* Device memory held by every process (caller holds the device lock). */
uint64_t drv_device_mem_used(void);
/* At context creation: reads CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (mps mode). */
void drv_mem_limit_read(void);

/* Device memory is backed by one memfd per process, the arena, carved into ranges (offsets
 * are never reused; a freed range's pages are punched out), so that another process can map
 * a range through /proc/PID/fd/FD (IPC, pools, VMM handles). */
/* Takes a range of SIZE bytes of the arena, unmapped: 0 and *OFF, or -1. */
int drv_arena_take(size_t size, uint64_t *off);
/* Maps a new range of SIZE bytes read-write: fills R's base, size and off. */
CUresult drv_arena_map_new(size_t size, struct drv_region *r);
/* A new device allocation of SIZE bytes made by HOW for OBJ: mapped and registered (*R). */
CUresult drv_devmem_new(size_t size, int how, void *obj, struct drv_region *r);
/* Unmaps what R maps of this process's arena and gives its pages back (R is no longer
 * registered). */
void drv_devmem_drop(const struct drv_region *r);
/* Maps [OFF, OFF + SIZE) of arena FD (-1: this process's) at AT (NULL: anywhere; else
 * MAP_FIXED) with PROT. Returns the address or NULL. */
void *drv_arena_map(int fd, uint64_t off, size_t size, void *at, int prot);
/* Gives back the pages of this process's range [OFF, OFF + SIZE). */
void drv_arena_release(uint64_t off, size_t size);

/* What one process tells another about a range of its arena (in a CUipcMemHandle, a
 * CUmemPoolPtrExportData, or a shareable file descriptor's contents). */
#define DRV_SHARE_MAGIC 0x53736f70u /* "posS" */
enum drv_share_kind { SHARE_IPC = 1, SHARE_POOL, SHARE_POOL_PTR, SHARE_VMM };
struct drv_share {
    uint32_t magic, kind;
    int32_t pid, fd;  /* the exporter and its arena's descriptor */
    uint64_t start;   /* the exporter's start time (pid reuse) */
    uint64_t ino;     /* the arena's inode */
    uint64_t off, size;
    uint64_t id;      /* the pool or allocation it belongs to (exporter's numbering) */
};
/* Fills S for this process's range [OFF, OFF + SIZE); -1 when it has no arena. */
int drv_share_fill(struct drv_share *s, int kind, uint64_t off, uint64_t size, uint64_t id);
/* Opens the arena S names, checked (magic, KIND, the process alive, the same file): a file
 * descriptor, or -1 (not ours, gone, or this very process: -2). */
int drv_share_open(const struct drv_share *s, int kind);
/* A shareable handle: a new memfd holding S and EXTRA (N bytes). Returns it or -1. */
int drv_share_fd_make(const struct drv_share *s, const void *extra, size_t n);
/* The same into the int at FD_OUT (a POSIX shareable handle): CUDA_SUCCESS, or
 * CUDA_ERROR_OUT_OF_MEMORY. */
CUresult drv_share_export(const struct drv_share *s, const void *extra, size_t n, void *fd_out);
/* The prologue of the shareable-handle calls: initialised, OUT not NULL, no FLAGS, a POSIX
 * file descriptor's TYPE (the only one on Linux here). */
CUresult drv_share_call_check(const void *out, CUmemAllocationHandleType type,
                              unsigned long long flags);
/* Reads what drv_share_fd_make wrote into S and EXTRA: 0, or -1 when FD is not one. */
int drv_share_fd_read(int fd, struct drv_share *s, void *extra, size_t n);

/* Frees a linear or managed allocation taken from the registry (api_mem.c). */
void drv_linear_free(const struct drv_region *r);

/* Context CTX is being destroyed (its work done): what it allocated goes with it, as NVIDIA's
 * driver frees a context's memory: linear and managed memory (api_mem.c), arrays
 * (api_array.c), opened IPC memory (api_ipc.c), its modules' memory (api_module.c). Pools and
 * VMM allocations belong to the device and stay. */
void drv_linear_ctx_gone(struct drv_ctx *ctx);
void drv_array_ctx_gone(struct drv_ctx *ctx);
void drv_ipc_ctx_gone(struct drv_ctx *ctx);
void drv_module_ctx_gone(struct drv_ctx *ctx);
/* Registers FN to run for each context destroyed (api_ctx.c): before it is retired (LATE 0:
 * arrays, opened IPC memory) or once its streams are gone (LATE 1: modules). The files above
 * api_ctx.c register theirs from a constructor, so that api_ctx.c calls none of them (no
 * circle of files, scripts/circles.py). */
void drv_ctx_on_gone(int late, void (*fn)(struct drv_ctx *ctx));
/* Frees a pool allocation (own or imported) taken from the registry, now: api_pool.c's, set
 * from its constructor, so that cuMemFree (api_mem.c) does not call up into api_pool.c. */
extern void (*drv_pool_free_region)(const struct drv_region *r);

/* A memory location: 1 for the device, 2 for the host (HOST, HOST_NUMA on a node that exists,
 * HOST_NUMA_CURRENT), 0 when invalid. */
int drv_location_kind(const CUmemLocation *l);
/* The properties a pool or a VMM allocation is made with: CUDA_SUCCESS and the location's
 * *KIND, or the error to return. */
CUresult drv_mem_props_check(CUmemAllocationType type, unsigned handle_types,
                             const CUmemLocation *location, int *kind);

/* ---- launch (api_launch.c), graphs (api_graph.c) --------------------------------------- */

/* A recorded launch or other stream op, as kept in a captured graph. */
struct drv_node {
    struct drv_op_desc d;
    int branch; /* capture stream index: 0 = the origin stream */
    int ndeps;
    int deps[SIM_MAX_DEPS]; /* node indices */
};

struct drv_graph {
    CUgraph handle;
    struct drv_ctx *ctx;
    size_t n, cap;
    struct drv_node *nodes;
    int nbranches;
    uint64_t capture_id;
};

/* If S is capturing, records D as a node and returns 1 (*RC set); else returns 0. */
int drv_capture_node(struct drv_stream *s, struct drv_op_desc *d, CUresult *rc);

/* Fills D for a kernel launch after validation. */
CUresult drv_kernel_desc(struct drv_func *f, const unsigned grid[3], const unsigned block[3],
                         unsigned dyn_smem, void **params, void **extra, struct drv_op_desc *d);
struct drv_func *drv_func_lookup(CUfunction f);

/* Applies the data effect of a completed op (agent). Returns 0 or the CUresult to make
 * sticky. */
CUresult drv_apply_effect(struct drv_op_desc *d);

#endif
