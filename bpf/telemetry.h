/* The records posd's eBPF programs (bpf/telemetry.bpf.c) share with posd (sched/telemetry.c):
 * the ring buffer's events and the values of the maps posd reads. Nothing else. */
#ifndef POS_BPF_TELEMETRY_H
#define POS_BPF_TELEMETRY_H

#define POS_TELE_COMM_LEN    16
#define POS_TELE_MAX_CLIENTS 1024  /* tgids of registered clients */
#define POS_TELE_MAX_THREADS 16384 /* threads of clients followed between switches */
#define POS_TELE_MAX_GPU     4096  /* processes seen using the GPU without being clients */

/* What a uprobe on the driver was attached to (its BPF cookie). */
enum pos_tele_call {
    POS_TELE_CALL_INIT = 1,     /* cuInit(flags) */
    POS_TELE_CALL_CTX_ARG3,     /* cuCtxCreate(_v2)(pctx, flags, dev) */
    POS_TELE_CALL_CTX_ARG4,     /* cuCtxCreate_v4(pctx, params, flags, dev) */
    POS_TELE_CALL_CTX_ARG5,     /* cuCtxCreate_v3(pctx, params, n, flags, dev) */
    POS_TELE_CALL_PRIMARY_ARG2, /* cuDevicePrimaryCtxRetain(pctx, dev) */
    POS_TELE_CALL_LAUNCH,       /* a launch entry point (sampling window only) */
};

enum pos_tele_event_kind {
    POS_TELE_EV_CLIENT_EXIT = 1, /* the last thread of a registered client exited */
    POS_TELE_EV_GPU_SEEN,        /* a process that is not a client called the driver first */
    POS_TELE_EV_GPU_EXIT,        /* ... and exited */
};

struct pos_tele_event {
    __u32 kind; /* enum pos_tele_event_kind */
    __u32 tgid;
    __u64 ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
    char comm[POS_TELE_COMM_LEN];
};

/* clients map value: what the kernel side counts for one registered client (cumulative; posd
 * takes differences). */
struct pos_tele_cpu {
    __u64 runq_ns;     /* wake-up (or preemption) to running, summed over its launching threads */
    __u64 runq_n;      /* such waits */
    __u64 runq_max_ns; /* the longest since it registered */
    __u64 offcpu_ns;   /* switched out to switched in, of its launching threads */
    __u64 offcpu_n;
    __u64 ioctl_ns; /* ioctl() calls of any of its threads (the driver's calls), summed */
    __u64 ioctl_n;
};

/* gpu map value: a process that called the driver without being a client. */
struct pos_tele_gpu {
    __u64 first_ns;
    __u32 contexts; /* context creations and primary-context retains */
    __u32 devices;  /* bit D: a context on device D (D < 32) */
    __u64 launches; /* launch calls counted while the sampling window was open */
    char comm[POS_TELE_COMM_LEN];
};

/* threads map value: where one thread of a client stands. */
struct pos_tele_thread {
    __u64 runnable_since; /* woken or preempted, not yet running (0: not waiting) */
    __u64 off_since;      /* switched out (0: running) */
};

#endif
