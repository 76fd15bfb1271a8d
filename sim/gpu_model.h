/* The virtual-GPU device model: pure code over one flat state struct (no pointers, so it can
 * live in shared memory), driven by a clock the caller passes in. It never sleeps, locks or
 * does I/O: the simulated driver wraps it in real time, and a simulator can run it in virtual
 * time. Times are device nanoseconds (int64); the caller maps them to wall time.
 *
 * Work flows op by op: an op is submitted into a stream's queue (QUEUED), becomes the head of
 * its stream with every dependency done, waits out its launch latency (LATENT), waits for
 * room on the device (READY), runs (RUNNING) and completes (DONE). DONE ops wait in their
 * owner's completion ring until the owner reaps and frees them. */
#ifndef POS_SIM_GPU_MODEL_H
#define POS_SIM_GPU_MODEL_H

#include <stdint.h>

#include "sim/device_presets.h"

#define SIM_MAX_OPS        32768
#define SIM_MAX_STREAMS    4096
#define SIM_MAX_CTXS       256
#define SIM_MAX_OWNERS     128
#define SIM_MAX_SMS        160
#define SIM_MAX_RES_PER_SM 32 /* kernels resident on one SM: at most one block each */
#define SIM_MAX_DEPS       4
#define SIM_OWNER_MAX_OPS  8192 /* per-owner quota; also the completion ring size */
#define SIM_MAX_RUNNING    512  /* kernels resident at once */

#define SIM_NONE (-1)

/* An owner's completion ring holds op indices, some tagged: an op that reached its stream's
 * head and waits for its owner (SIM_OP_HOST), or one the device grants the owner for its
 * pool (allocated, not yet filled). Untagged: an op that completed. Written at ring_tail by
 * the model (a release store), read at ring_head by the owner, who may read it without the
 * device lock. */
#define SIM_RING_HOST  0x40000000
#define SIM_RING_GRANT 0x20000000
#define SIM_RING_OP    0x0000ffff

enum sim_op_kind {
    SIM_OP_KERNEL = 1, /* runs on the SMs; memsets and device-to-device copies too */
    SIM_OP_COPY_H2D,   /* host-to-device copy engine */
    SIM_OP_COPY_D2H,   /* device-to-host copy engine */
    SIM_OP_MARKER,     /* completes when reached: event records, waits, value writes */
    SIM_OP_HOST,       /* blocks its stream until the owner calls sim_gpu_host_done */
};

enum sim_op_state {
    SIM_OP_FREE = 0,
    SIM_OP_ALLOC,    /* allocated by its owner, being filled in */
    SIM_OP_QUEUED,   /* in its stream's queue, not yet startable */
    SIM_OP_LATENT,   /* startable; launch latency runs until ready_ns */
    SIM_OP_READY,    /* waiting for room, its context's time slice or a copy engine */
    SIM_OP_RUNNING,  /* resident; work_left shrinks at speed */
    SIM_OP_HOSTWAIT, /* SIM_OP_HOST reached: waiting for its owner */
    SIM_OP_DONE,     /* complete, in its owner's completion ring */
};

/* op flags */
#define SIM_OPF_GRAPH_NODE 0x01 /* launched as part of a graph: graph node latency */
#define SIM_OPF_FP16       0x02 /* tensor-core FP16 peak applies */
#define SIM_OPF_NOTIFY     0x04 /* its owner wants to know promptly when it completes */

struct sim_op {
    uint32_t gen; /* bumped when the op is freed: (index, gen) names one use */
    uint8_t kind;
    uint8_t state;
    uint8_t flags;
    uint8_t ndeps;
    int16_t owner;
    int16_t ctx;
    int32_t stream;
    int32_t next; /* stream queue (in use) or free list (free) */
    int32_t deps[SIM_MAX_DEPS];
    uint32_t dep_gens[SIM_MAX_DEPS];
    int32_t prio; /* stream priority: lower number = higher priority, as in CUDA */
    uint64_t seq; /* position in its stream */
    uint64_t tag; /* the owner's cookie */
    /* kernel shape and cost */
    uint32_t blocks;
    uint32_t threads; /* per block */
    uint32_t smem;    /* per block, static + dynamic */
    double flops;
    double bytes;
    /* derived at submit */
    double exec_ns;  /* solo execution time: the roofline, without latency */
    double sm_units; /* SMs of issue needed at full speed */
    double mem_rate; /* bytes per ns at full speed */
    uint32_t want_sms;
    uint32_t want_per_sm;
    /* progress */
    double work_left; /* ns of solo execution left */
    double speed;     /* fraction of solo speed now */
    uint32_t res_sms; /* SMs holding at least one block */
    uint32_t res_blocks;
    int64_t submit_ns, ready_ns, start_ns, end_ns;
};

struct sim_stream {
    uint8_t used;
    int16_t owner;
    int16_t ctx;
    int32_t prio;
    int32_t head, tail; /* queue of ops not yet done */
    uint64_t next_seq;
};

struct sim_ctx {
    uint8_t used;
    int16_t owner;
    uint16_t max_sms; /* its kernels together hold blocks on at most this many SMs; 0 = all */
};

struct sim_owner {
    uint8_t used;
    uint64_t ident[2];  /* for the driver: pid and process start time */
    uint32_t nops;      /* ops allocated and not yet freed */
    uint64_t mem_used;  /* device memory held (maintained by the driver) */
    uint32_t ring_head; /* completion ring: written at tail by the model, */
    uint32_t ring_tail; /* read at head by the owner */
    int32_t ring[SIM_OWNER_MAX_OPS];
    uint32_t wake_word;      /* for the driver: futex its agent sleeps on */
    int64_t planned_wake_ns; /* for the driver: when its agent plans to look next */
};

struct sim_sm_slot {
    int32_t op;
    uint16_t blocks;
};

/* What one SM holds. */
struct sim_sm {
    uint32_t threads_used;
    uint32_t smem_used;
    uint32_t blocks_used;
    uint32_t nres;
    struct sim_sm_slot res[SIM_MAX_RES_PER_SM];
};

/* SMs first .. first + count - 1, each holding SM (the same blocks in the same order). The
 * model keeps the SMs as the fewest such runs, in order (neighbours that come to hold the
 * same merge): kernels are placed, released and shared run by run, not SM by SM. */
struct sim_sm_run {
    uint32_t first;
    uint32_t count;
    struct sim_sm sm;
};

struct sim_stats {
    uint64_t kernels_done;
    uint64_t ctx_switches;
    uint64_t preemptions;
    double busy_ns; /* time with at least one kernel running */
};

/* Scratch for the sharing computation (kept here, not on the caller's stack). */
struct sim_run_entry {
    int32_t op;
    double target; /* speed it asks for in this round */
    double got;    /* SM-units of issue it received */
    double speed;
};

struct sim_gpu {
    struct sim_dev_params p;
    int64_t now;   /* device time the state describes */
    int32_t dirty; /* something changed outside the event loop: step at now */
    int32_t free_head;
    uint32_t nfree;
    /* timeslice state */
    int32_t active_ctx;
    int32_t switch_to;
    int64_t switch_until; /* a switch is in progress while switch_to != SIM_NONE */
    int64_t slice_end;
    int32_t rr_next;
    /* copy engines: index 0 = H2D, 1 = D2H */
    int32_t copy_running[2];
    /* op index lists (unordered) */
    uint32_t nlive; /* ops LATENT/READY/RUNNING/HOSTWAIT */
    int32_t live[SIM_MAX_STREAMS];
    uint32_t nactive_streams; /* streams with a non-empty queue */
    int32_t active_streams[SIM_MAX_STREAMS];
    struct sim_stats stats;
    struct sim_run_entry run[SIM_MAX_RUNNING];
    int32_t cand[SIM_MAX_STREAMS];
    int32_t order[SIM_MAX_OPS];
    uint32_t nruns;
    struct sim_sm_run runs[SIM_MAX_SMS]; /* covering SMs 0 .. p.num_sms - 1 */
    struct sim_ctx ctxs[SIM_MAX_CTXS];
    struct sim_owner owners[SIM_MAX_OWNERS];
    struct sim_stream streams[SIM_MAX_STREAMS];
    struct sim_op ops[SIM_MAX_OPS];
};

/* Resets G to an idle device with parameters P at device time NOW. */
void sim_gpu_init(struct sim_gpu *g, const struct sim_dev_params *p, int64_t now);

/* Owners (processes), contexts and streams. Return an index, or -ENOSPC when full. */
int sim_gpu_owner_add(struct sim_gpu *g);
int sim_gpu_ctx_add(struct sim_gpu *g, int owner);
int sim_gpu_stream_add(struct sim_gpu *g, int owner, int ctx, int prio);

/* Limits context CTX to MAX_SMS SMs (0 or the device's count: no limit): at any moment its
 * kernels together hold blocks on at most that many SMs, which SMs being the block
 * scheduler's choice, as MPS's active thread percentage limits a client context (other
 * contexts' kernels may share those SMs). Set it before the context's first kernel: a limit
 * is fixed for the context's life, as MPS reads it at context creation. */
void sim_gpu_ctx_limit_sms(struct sim_gpu *g, int ctx, uint32_t max_sms);

/* The SMs a share of PERCENT (MPS's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) gives on a device of
 * NUM_SMS: ceil(PERCENT% of them), at least 1, at most all. */
uint32_t sim_gpu_sms_of_share(uint32_t num_sms, double percent);

/* Removes a stream or context; its queued and running ops are dropped (their owner is told
 * nothing: use only when the owner is gone or has synchronised). */
void sim_gpu_stream_remove(struct sim_gpu *g, int stream, int64_t now);
void sim_gpu_ctx_remove(struct sim_gpu *g, int ctx, int64_t now);

/* Drops everything OWNER has on the device (it exited or died) and frees its slot. */
void sim_gpu_owner_remove(struct sim_gpu *g, int owner, int64_t now);

/* Allocates an op for OWNER: zeroed, state ALLOC. Returns its index, -EAGAIN when the owner
 * has SIM_OWNER_MAX_OPS ops in use, or -ENOSPC when the device has none left. */
int sim_gpu_op_alloc(struct sim_gpu *g, int owner);

/* Makes an ALLOC op wait for the use (DEP, GEN) of another op; nothing if that use is over
 * already. Returns 0 or -E2BIG when the op has SIM_MAX_DEPS dependencies. */
/* Makes op I, DONE and reaped by its owner, an allocated op of the same owner again (as
 * sim_gpu_op_free then sim_gpu_op_alloc would, without the free list): a driver keeps such
 * ops in a pool of its own and fills and submits them without the shared free list.
 * Returns 0, or -EINVAL when I is not DONE. */
int sim_gpu_op_recycle(struct sim_gpu *g, int i);
/* Derives op's costs from its fields (as sim_gpu_submit will) and returns the least time it
 * can take once startable: its launch latency and solo execution time (ns). */
double sim_gpu_op_solo_ns(const struct sim_gpu *g, struct sim_op *op);
int sim_gpu_op_add_dep(struct sim_gpu *g, int op, int dep, uint32_t gen);

/* Submits an ALLOC op whose kind, stream, ctx and cost fields are filled in: derives its
 * roofline and appends it to its stream at device time NOW (>= g->now is not required:
 * submission is O(1) and does not advance the model). */
void sim_gpu_submit(struct sim_gpu *g, int op, int64_t now);

/* Moves the model forward to NOW, processing every event on the way in time order. */
void sim_gpu_advance(struct sim_gpu *g, int64_t now);

/* Earliest future time at which the state changes by itself, or INT64_MAX. */
int64_t sim_gpu_next_event(const struct sim_gpu *g);

/* A lower bound on when OWNER next has something to observe: the completion of an op it
 * asked to be told about (SIM_OPF_NOTIFY), of the last op of one of its streams, or the
 * arrival of a SIM_OP_HOST op at the head of its stream. INT64_MAX when nothing is pending.
 * Ops in between need no attention: the model runs them whenever anyone advances it. */
int64_t sim_gpu_owner_next_event(const struct sim_gpu *g, int owner);

/* Completes a HOSTWAIT op at NOW (call sim_gpu_advance(g, now) first). */
void sim_gpu_host_done(struct sim_gpu *g, int op, int64_t now);

/* Pops the oldest DONE op from OWNER's completion ring; SIM_NONE when empty. */
int sim_gpu_reap(struct sim_gpu *g, int owner);
/* Appends ENTRY (an op index, maybe tagged SIM_RING_*) to OWNER's completion ring. */
void sim_gpu_ring_push(struct sim_gpu *g, int owner, int32_t entry);

/* Frees a reaped op. */
void sim_gpu_op_free(struct sim_gpu *g, int op);

/* True when the op named by (OP, GEN) is done (or already freed). */
int sim_gpu_op_is_done(const struct sim_gpu *g, int op, uint32_t gen);

/* Rebuilds every derived structure (free list, stream queues, lists, residency, completion
 * rings) from the ops themselves: for recovery after a process died while changing G. */
void sim_gpu_rebuild(struct sim_gpu *g);

/* Solo duration of one kernel (roofline + launch latency), in ns: for tests and tools. */
double sim_gpu_kernel_solo_ns(const struct sim_dev_params *p, double flops, double bytes,
                              uint32_t blocks, int fp16);

/* Largest number of blocks of THREADS threads and SMEM shared bytes one SM holds. */
uint32_t sim_gpu_blocks_per_sm(const struct sim_dev_params *p, uint32_t threads, uint32_t smem);

#endif
