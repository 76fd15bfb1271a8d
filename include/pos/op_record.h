/* The operator record: what the shim knows about one launch (a kernel, a graph, a host
 * function). Written by libposshim.so on the launch path, read by its collector and by posd.
 * A contract between parts: fixed layout, versioned, no pointers into a process. */
#ifndef POS_OP_RECORD_H
#define POS_OP_RECORD_H

#include <stdint.h>

#define POS_OP_RECORD_VERSION 1

enum pos_op_kind {
    POS_OP_KERNEL = 1,  /* cuLaunchKernel */
    POS_OP_KERNEL_EX,   /* cuLaunchKernelEx */
    POS_OP_COOPERATIVE, /* cuLaunchCooperativeKernel */
    POS_OP_GRAPH,       /* cuGraphLaunch: one opaque operator */
    POS_OP_HOSTFN,      /* cuLaunchHostFunc */
};

/* Stream handles with a meaning of their own, as op records and submissions carry them: the
 * legacy default stream (NULL; a context's) and CU_STREAM_PER_THREAD (the launching thread's
 * default stream). Launches through a per-thread entry point (POS_OPF_PTSZ) on stream 0 are on
 * the thread's default stream too. */
#define POS_STREAM_DEFAULT    0
#define POS_STREAM_PER_THREAD 2 /* CU_STREAM_PER_THREAD's handle value (cuda.h) */

/* flags */
#define POS_OPF_PTSZ     0x0001 /* launched through a per-thread-default-stream entry point */
#define POS_OPF_CAPTURED 0x0002 /* into a capturing stream: part of a graph, not an operator */
#define POS_OPF_MARKED   0x0004 /* followed by a completion marker (marker field) */
#define POS_OPF_FAILED   0x0008 /* the driver refused the launch (result field) */

/* How complete_ns was learnt. */
enum pos_completion {
    POS_DONE_UNKNOWN = 0,
    POS_DONE_MARKER, /* its own GPU-side completion write was seen: exact to the poll interval */
    POS_DONE_BOUND,  /* a later marker on its stream, or a synchronisation covering it, was
                        seen: an upper bound */
    POS_DONE_DEVICE, /* its own marker landed, and complete_ns is the device's time of its end
                        (a timing event behind it, on the host's clock): exact */
};

struct pos_op_record {
    uint16_t version;   /* POS_OP_RECORD_VERSION */
    uint16_t kind;      /* enum pos_op_kind */
    uint16_t flags;     /* POS_OPF_* */
    uint16_t done_how;  /* enum pos_completion */
    uint32_t kernel_id; /* interned kernel name; 0 while unknown */
    uint32_t tid;       /* submitting thread (kernel thread id) */
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t smem;        /* dynamic shared memory bytes */
    int32_t result;       /* CUresult of the launch */
    uint64_t seq;         /* per-process launch number, from 1 */
    uint64_t function;    /* CUfunction / CUkernel / CUgraphExec handle value */
    uint64_t stream;      /* CUstream handle value as passed (0 = default stream) */
    uint64_t ctx;         /* current CUcontext at launch */
    uint64_t marker;      /* completion marker: its value (low 32 bits, never 0) and the shim's
                           * timing event behind it (high 32 bits, shim/devtime.c; 0 if none);
                           * 0 if none */
    uint64_t submit_ns;   /* CLOCK_MONOTONIC when the launch was called; under posd, when it
                           * went to the driver (after any wait for its grant) */
    uint64_t complete_ns; /* CLOCK_MONOTONIC of completion (see done_how), 0 if unknown */
    uint64_t sched_seq;   /* the client's sequence number at posd, 0 if not submitted to one */
    uint32_t session;     /* which posd session sched_seq belongs to */
    uint32_t reserved;
};

#endif
