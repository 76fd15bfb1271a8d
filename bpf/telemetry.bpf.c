// SPDX-License-Identifier: GPL-2.0
/* posd's kernel side (CO-RE; loaded by sched/telemetry.c): the exits of registered clients,
 * the run-queue delay and off-CPU time of their launching threads (raw tracepoints filtered in
 * the kernel to the threads posd keeps in the launchers map), their ioctl() calls (raw_syscalls,
 * filtered by tgid), and the processes that call the GPU
 * driver without being clients (uprobes on libcuda.so.1's initialisation and context entry points).
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/telemetry.h"

char LICENSE[] SEC("license") = "GPL";

extern int LINUX_KERNEL_VERSION __kconfig;

/* tgid -> counters; posd adds a client at registration and removes it when it leaves */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, POS_TELE_MAX_CLIENTS);
    __type(key, __u32);
    __type(value, struct pos_tele_cpu);
} clients SEC(".maps");

/* tid -> tgid: the threads of clients that launched (posd adds them as it reads launches) */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, POS_TELE_MAX_THREADS);
    __type(key, __u32);
    __type(value, __u32);
} launchers SEC(".maps");

/* tid -> where a client's thread stands between switches (LRU: a lost entry costs one sample) */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, POS_TELE_MAX_THREADS);
    __type(key, __u32);
    __type(value, struct pos_tele_thread);
} threads SEC(".maps");

/* tgid -> a process that uses the GPU without being a client */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, POS_TELE_MAX_GPU);
    __type(key, __u32);
    __type(value, struct pos_tele_gpu);
} gpu SEC(".maps");

/* tid -> when a client's thread entered ioctl() */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, POS_TELE_MAX_THREADS);
    __type(key, __u32);
    __type(value, __u64);
} ioctl_since SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 256 * 1024);
} events SEC(".maps");

static void send_event(__u32 kind, __u32 tgid, __u64 now)
{
    struct pos_tele_event *e = bpf_ringbuf_reserve(&events, sizeof *e, 0);
    if (!e)
        return;
    e->kind = kind;
    e->tgid = tgid;
    e->ns = now;
    bpf_get_current_comm(e->comm, sizeof e->comm);
    bpf_ringbuf_submit(e, 0);
}

/* sched_process_exit(task[, group_dead]): runs for every thread; the process is gone when the
 * last one leaves (signal->live reaches 0 before the tracepoint fires, on every kernel). */
SEC("raw_tp/sched_process_exit")
int handle_exit(struct bpf_raw_tracepoint_args *ctx)
{
    struct task_struct *task = (struct task_struct *)ctx->args[0];
    __u32 tgid = BPF_CORE_READ(task, tgid);
    __u32 tid = BPF_CORE_READ(task, pid);
    int live = BPF_CORE_READ(task, signal, live.counter);
    if (bpf_map_lookup_elem(&clients, &tgid)) {
        bpf_map_delete_elem(&threads, &tid);
        bpf_map_delete_elem(&launchers, &tid);
        if (live == 0)
            send_event(POS_TELE_EV_CLIENT_EXIT, tgid, bpf_ktime_get_ns());
        return 0;
    }
    if (live == 0 && bpf_map_lookup_elem(&gpu, &tgid)) {
        bpf_map_delete_elem(&gpu, &tgid);
        send_event(POS_TELE_EV_GPU_EXIT, tgid, bpf_ktime_get_ns());
    }
    return 0;
}

/* Whether P is a launching thread of a client (posd adds them to launchers; the tgid check
 * keeps a recycled tid of another process out). */
static int is_launcher(struct task_struct *p, __u32 *tid, __u32 *tgid)
{
    *tid = BPF_CORE_READ(p, pid);
    __u32 *owner = bpf_map_lookup_elem(&launchers, tid);
    if (!owner)
        return 0;
    *tgid = BPF_CORE_READ(p, tgid);
    return *owner == *tgid;
}

/* A launching thread becomes runnable: its run-queue wait starts. */
static int mark_runnable(struct task_struct *p)
{
    __u32 tid, tgid;
    if (!is_launcher(p, &tid, &tgid))
        return 0;
    __u64 now = bpf_ktime_get_ns();
    struct pos_tele_thread *t = bpf_map_lookup_elem(&threads, &tid);
    if (t) {
        t->runnable_since = now;
        return 0;
    }
    struct pos_tele_thread fresh = {.runnable_since = now};
    bpf_map_update_elem(&threads, &tid, &fresh, BPF_ANY);
    return 0;
}

SEC("raw_tp/sched_wakeup")
int handle_wakeup(struct bpf_raw_tracepoint_args *ctx)
{
    return mark_runnable((struct task_struct *)ctx->args[0]);
}

SEC("raw_tp/sched_wakeup_new")
int handle_wakeup_new(struct bpf_raw_tracepoint_args *ctx)
{
    return mark_runnable((struct task_struct *)ctx->args[0]);
}

/* The thread leaving the CPU: off-CPU from now; still runnable if it was preempted. */
static void switched_out(struct task_struct *prev, __u64 now, int preempt, long prev_state)
{
    __u32 tid, tgid;
    if (!is_launcher(prev, &tid, &tgid))
        return;
    /* a wake-up seen while it was still on the CPU must not count as a wait */
    struct pos_tele_thread t = {
        .runnable_since = preempt || prev_state == 0 ? now : 0,
        .off_since = now,
    };
    bpf_map_update_elem(&threads, &tid, &t, BPF_ANY);
}

static void switched_in(struct task_struct *next, __u64 now)
{
    __u32 tid, tgid;
    if (!is_launcher(next, &tid, &tgid))
        return;
    struct pos_tele_cpu *cpu = bpf_map_lookup_elem(&clients, &tgid);
    struct pos_tele_thread *t = bpf_map_lookup_elem(&threads, &tid);
    if (!cpu || !t)
        return;
    if (t->runnable_since && now > t->runnable_since) {
        __u64 d = now - t->runnable_since;
        __sync_fetch_and_add(&cpu->runq_ns, d);
        __sync_fetch_and_add(&cpu->runq_n, 1);
        if (d > cpu->runq_max_ns)
            cpu->runq_max_ns = d; /* a lost race loses one maximum, not a sum */
    }
    if (t->off_since && now > t->off_since) {
        __sync_fetch_and_add(&cpu->offcpu_ns, now - t->off_since);
        __sync_fetch_and_add(&cpu->offcpu_n, 1);
    }
    t->runnable_since = 0;
    t->off_since = 0;
}

/* sched_switch(preempt, prev, next[, prev_state]) */
SEC("raw_tp/sched_switch")
int handle_switch(struct bpf_raw_tracepoint_args *ctx)
{
    struct task_struct *prev = (struct task_struct *)ctx->args[1];
    struct task_struct *next = (struct task_struct *)ctx->args[2];
    int preempt = ctx->args[0] != 0;
    long prev_state;
    /* prev_state is an argument since 5.18; before that the task's state is what it was */
    if (LINUX_KERNEL_VERSION >= KERNEL_VERSION(5, 18, 0))
        prev_state = (long)ctx->args[3];
    else if (bpf_core_field_exists(prev->__state))
        prev_state = BPF_CORE_READ(prev, __state);
    else
        prev_state = 1;
    __u64 now = bpf_ktime_get_ns();
    switched_out(prev, now, preempt, prev_state);
    switched_in(next, now);
    return 0;
}

#if defined(__TARGET_ARCH_arm64)
#define NR_IOCTL 29
#else
#define NR_IOCTL 16 /* x86_64 */
#endif

/* sys_enter(regs, id): every system call of the machine; an ioctl of a client's thread (the
 * GPU driver's calls are ioctls) starts a timing. */
SEC("raw_tp/sys_enter")
int handle_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
    if (ctx->args[1] != NR_IOCTL)
        return 0;
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tgid = id >> 32, tid = (__u32)id;
    if (!bpf_map_lookup_elem(&clients, &tgid))
        return 0;
    __u64 now = bpf_ktime_get_ns();
    bpf_map_update_elem(&ioctl_since, &tid, &now, BPF_ANY);
    return 0;
}

/* sys_exit(regs, ret): only a thread with a timing started has an entry. */
SEC("raw_tp/sys_exit")
int handle_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tgid = id >> 32, tid = (__u32)id;
    __u64 *since = bpf_map_lookup_elem(&ioctl_since, &tid);
    if (!since)
        return 0;
    __u64 d = bpf_ktime_get_ns() - *since;
    bpf_map_delete_elem(&ioctl_since, &tid);
    struct pos_tele_cpu *cpu = bpf_map_lookup_elem(&clients, &tgid);
    if (!cpu)
        return 0;
    __sync_fetch_and_add(&cpu->ioctl_ns, d);
    __sync_fetch_and_add(&cpu->ioctl_n, 1);
    return 0;
}

/* The device a context call names, by the entry point's signature (its cookie). */
static int device_arg(struct pt_regs *ctx, __u64 call)
{
    switch (call) {
    case POS_TELE_CALL_CTX_ARG3:
        return (int)PT_REGS_PARM3_CORE(ctx);
    case POS_TELE_CALL_CTX_ARG4:
        return (int)PT_REGS_PARM4_CORE(ctx);
    case POS_TELE_CALL_CTX_ARG5:
        return (int)PT_REGS_PARM5_CORE(ctx);
    case POS_TELE_CALL_PRIMARY_ARG2:
        return (int)PT_REGS_PARM2_CORE(ctx);
    default:
        return -1;
    }
}

#define POS_E2BIG 7 /* what a full hash map's update returns (no errno.h for BPF) */

/* Processes whose cuInit found the gpu map full: not tracked, counted (posstat -u, metrics). */
__u64 gpu_untracked = 0;

/* Every process's calls of cuInit, cuCtxCreate* and cuDevicePrimaryCtxRetain (and, while
 * posd samples, the launch entry points): clients are skipped at once. */
SEC("uprobe")
int handle_driver_call(struct pt_regs *ctx)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (bpf_map_lookup_elem(&clients, &tgid))
        return 0;
    __u64 call = bpf_get_attach_cookie(ctx);
    struct pos_tele_gpu *g = bpf_map_lookup_elem(&gpu, &tgid);
    if (call == POS_TELE_CALL_LAUNCH) {
        if (g)
            __sync_fetch_and_add(&g->launches, 1);
        return 0;
    }
    __u64 now = bpf_ktime_get_ns();
    if (!g) {
        struct pos_tele_gpu fresh = {.first_ns = now};
        bpf_get_current_comm(fresh.comm, sizeof fresh.comm);
        long rc = bpf_map_update_elem(&gpu, &tgid, &fresh, BPF_NOEXIST);
        if (rc == 0)
            send_event(POS_TELE_EV_GPU_SEEN, tgid, now);
        else if (rc == -POS_E2BIG && call == POS_TELE_CALL_INIT)
            __sync_fetch_and_add(&gpu_untracked, 1); /* full: once a process, at its cuInit */
        g = bpf_map_lookup_elem(&gpu, &tgid);
        if (!g)
            return 0;
    }
    int dev = device_arg(ctx, call);
    if (call != POS_TELE_CALL_INIT)
        __sync_fetch_and_add(&g->contexts, 1);
    if (dev >= 0 && dev < 32)
        g->devices |= 1u << dev; /* threads of one process racing lose a bit for one call */
    return 0;
}
