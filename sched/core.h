/* The scheduling core: posd's whole account of its clients and every rule that decides
 * behaviour, as pure code. The clock is an argument; there is no I/O, no liburing, no global
 * state. posd's engine feeds it what clients wrote in shared memory; possim feeds it what its
 * virtual clients do. Both run the same object files.
 *
 * What the core owns:
 *   - each client's operators, one by one, from submission to completion, in a window of
 *     SCHED_WINDOW sequence numbers (an operator older than that is presumed complete);
 *   - completions: exact ones (markers), and synchronisations that bound everything on a
 *     stream or a context up to a sequence number;
 *   - requests, inferred from synchronisations: the first launch after an idle point starts
 *     one; the synchronisation after which nothing is queued or in flight ends it;
 *   - guard periods (the starvation guard's clock), stalls (work in flight with no completion
 *     for stall_ns: it no longer counts as work that outranks anybody), the rule that a grant
 *     is never taken back, when the next decision is due, and how often each client must
 *     report completions (sample) and whether it must kick posd when it does.
 * What a policy decides: each client's grant mode and how far its prefix of launches goes. */
#ifndef POS_SCHED_CORE_H
#define POS_SCHED_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "pos/op_record.h"
#include "sched/policy/policy.h"

/* clients one core serves (posd's slots); fuzz_ring builds with fewer to spend its time on
 * the engine's logic rather than on scans of empty slots */
#ifndef SCHED_MAX_CLIENTS
#define SCHED_MAX_CLIENTS 256
#endif
#define SCHED_WINDOW      16384 /* operators tracked per client (power of two) */

/* Tunables of the core's own rules (set from posd.conf's [daemon]/[policy], or by possim). */
struct sched_params {
    int64_t tick_ns;         /* decision period while a client waits or is windowed */
    int64_t slow_tick_ns;    /* accounting period while work is in flight, nobody waits */
    int64_t guard_period_ns; /* starvation-guard period */
    int64_t stall_ns;        /* in flight this long with no completion: stalled */
    uint32_t credits;        /* most operators a window may grant ahead */
    int64_t window_ns;       /* work a windowed client may have in flight (no class cap) */
    int64_t idle_grace_ns;   /* a client idle this briefly still holds lower classes */
    uint32_t sample_free;    /* completion marker every N launches for an unconstrained client */
    uint32_t profile_min;    /* kernel profiles: a client launching a kernel shape with fewer
                              * solo samples than this puts a marker behind every launch for a
                              * while (0: profiles learn only from the markers there are) */
    int64_t cpu_hold_ns; /* the CPU lever: a client stays lowered this long after the last
                          * request of one that outranks it ended */
};

/* Every scheduling default, written once: sched_params_defaults, posd's configuration
 * (posd_config_defaults, sched/config.c) and possim's scenarios (tools/possim_scenario.c)
 * take them from here, each in the units of its own keys. */
#define SCHED_DEFAULT_POLICY          "pos"
#define SCHED_DEFAULT_TICK_US         200   /* tick_ns */
#define SCHED_DEFAULT_SLOW_TICK_MS    10    /* slow_tick_ns (no configuration key) */
#define SCHED_DEFAULT_GUARD_PERIOD_MS 200   /* guard_period_ns */
#define SCHED_DEFAULT_STALL_MS        50    /* stall_ns */
#define SCHED_DEFAULT_CREDITS         1024  /* credits */
#define SCHED_DEFAULT_WINDOW_US       500   /* window_ns */
#define SCHED_DEFAULT_IDLE_GRACE_US   0     /* idle_grace_ns */
#define SCHED_DEFAULT_SAMPLE_FREE     32    /* sample_free (no configuration key) */
#define SCHED_DEFAULT_PROFILE_MIN     32    /* profile_min */
#define SCHED_DEFAULT_CPU_HOLD_MS     1000  /* cpu_hold_ns */
#define SCHED_DEFAULT_MIN_SHARE       0.01  /* each client's starvation-guard share */
#define SCHED_DEFAULT_CPU             POS_CPU_OFF /* the CPU lever */
#define SCHED_DEFAULT_CPU_NICE        19    /* its nice value for POS_CPU_NICE */

/* Sets the defaults above: tick 200 us, slow tick 10 ms, guard 200 ms, stall 50 ms, credits
 * 1024, window 500 us, no idle grace, sample 32, profile_min 32, cpu_hold 1 s. (A policy's
 * own parameters are its own: pos_policy_ops.params.) */
void sched_params_defaults(struct sched_params *p);

/* How an operator's completion was learnt (the numbering of enum pos_completion). */
enum sched_done_how {
    SCHED_DONE_NONE = 0,
    SCHED_DONE_EXACT,    /* its own completion marker */
    SCHED_DONE_BOUND,    /* a later marker on its stream or a synchronisation covered it */
    SCHED_DONE_PRESUMED, /* never heard of: a hole, a failed launch, or out of the window */
    SCHED_DONE_DEVICE,   /* its own marker, with the device's time of its end: exact */
};

/* How the core counts a completion a client reported as HOW (enum pos_completion): its own
 * marker is exact (with the device's end time when the client had one), a bound a bound; one
 * it never learnt (a failed launch, one that timed out) is presumed. */
static inline int sched_done_of(uint32_t how)
{
    return how == POS_DONE_MARKER   ? SCHED_DONE_EXACT
           : how == POS_DONE_DEVICE ? SCHED_DONE_DEVICE
           : how == POS_DONE_BOUND  ? SCHED_DONE_BOUND
                                    : SCHED_DONE_PRESUMED;
}

/* A synchronisation the client reports: every operator with seq <= covers on SCOPE (a stream
 * of one thread or context, or the whole context) was complete at end_ns. */
enum sched_sync_scope { SCHED_SYNC_STREAM = 1, SCHED_SYNC_CTX };

struct sched_sync {
    uint32_t scope; /* enum sched_sync_scope */
    uint32_t tid;
    int ptsz;
    uint64_t stream, ctx;
    uint64_t covers;
    int64_t end_ns;
};

/* Per-client configuration, from the admin's rules. */
struct sched_client_conf {
    uint32_t id;
    uint32_t uid; /* its user (SO_PEERCRED): profiles are kept per user */
    int priority;
    uint32_t max_inflight;
    double min_share;
    double weight;
    double slo_ms;
    int device;
    int cpu; /* enum pos_cpu_lever: how its threads are lowered when it is outranked */
};

/* What the adapter must publish for a client after a decision. */
struct sched_grant {
    uint32_t mode;    /* enum pos_grant_mode */
    uint64_t granted; /* seqs <= granted may launch (WINDOW mode) */
    uint32_t window;  /* and seqs <= the client's completed prefix + window */
    int changed;      /* mode or granted differ from the last publication */
    uint32_t sample;  /* completion marker every N launches */
    int kick_on_done; /* the client must kick posd on completions and synchronisations */
    int cpu_low;      /* enum pos_cpu_lever: its threads are to be lowered so; 0: not lowered */
};

/* Request latency histogram: 8 sub-buckets per power of two of microseconds. */
#define SCHED_LAT_BUCKETS 256
/* The same folded into powers of two: [0, 2) us, then [2^i, 2^(i+1)) us, the last bucket
 * everything from 2^(SCHED_REQ_POW_BUCKETS-1) us on (the buckets of the shim's grant waits) */
#define SCHED_REQ_POW_BUCKETS 24

struct sched_client_stats {
    uint64_t submitted, released, completed, presumed;
    uint64_t in_flight, queued;
    uint64_t busy_ns;
    uint64_t requests;    /* ended */
    uint64_t request_ops; /* operators of ended requests */
    uint64_t req_p50_ns, req_p99_ns, req_max_ns;
    uint64_t stalls;                                       /* times it was found stalled */
    uint64_t sync_lag_n, sync_lag_p50_ns, sync_lag_p99_ns; /* report lag of syncs (adapter) */
    uint64_t op_ns;                          /* estimate of one operator's device time */
    uint64_t req_pow[SCHED_REQ_POW_BUCKETS]; /* ended requests' latencies, powers of two */
    uint64_t req_sum_ns;                     /* and their sum */
};

struct sched_core;

/* A core for DEVICE (the adapter owns DEVICE; it must outlive the core) running POLICY, whose
 * init gets ARGS (its parameters' values; NULL: none given). NULL when out of memory. */
struct sched_core *sched_core_new(const struct sched_params *p, const struct pos_sched_device *dev,
                                  const struct pos_policy_ops *policy,
                                  const struct pos_policy_args *args, int64_t now);
void sched_core_free(struct sched_core *core);

/* The kernel profiles the core learns into and policies read (owned by the adapter, which
 * persists them; NULL: none). */
struct pos_profiles;
void sched_core_set_profiles(struct sched_core *core, struct pos_profiles *prof);

/* Replaces the policy (its state is rebuilt by its init, with ARGS) and the tunables, e.g.
 * after a reload. */
int sched_core_set_policy(struct sched_core *core, const struct pos_policy_ops *policy,
                          const struct pos_policy_args *args, const struct sched_params *p);
const struct pos_policy_ops *sched_core_policy(const struct sched_core *core);
/* The policy's note (pos_policy_ops.note), or NULL. */
const char *sched_core_policy_note(const struct sched_core *core);

/* Clients. A slot is any index below SCHED_MAX_CLIENTS; add resets it completely. */
int sched_core_client_add(struct sched_core *core, int slot, const struct sched_client_conf *conf,
                          int64_t now);
void sched_core_client_conf(struct sched_core *core, int slot,
                            const struct sched_client_conf *conf);
/* The client left: everything it had is forgotten; device totals keep its counts. */
void sched_core_client_remove(struct sched_core *core, int slot, int64_t now);

/* Events, as the adapter reads them. Each returns 0, or -EPROTO when the client broke the
 * protocol (the adapter disconnects it): out-of-order seqs, completions of operators it never
 * submitted, coverage beyond what it submitted. */
int sched_core_submit(struct sched_core *core, int slot, const struct pos_sched_op *op,
                      int released, int64_t now);
/* A submission slot that was reserved but never written (its thread died mid-launch). */
int sched_core_skip(struct sched_core *core, int slot, uint64_t seq, int64_t now);
/* Operator SEQ completed at DONE_NS, learnt as HOW (enum sched_done_how): a time in the future,
 * or none (0), counts as NOW. CALL_NS: when the client's launch called the driver, as it says
 * (0: not known): a device time (SCHED_DONE_DEVICE) did not begin before it. */
int sched_core_complete(struct sched_core *core, int slot, uint64_t seq, int64_t done_ns, int how,
                        int64_t call_ns, int64_t now);
/* A synchronisation that returned at S->end_ns: it also counts in the client's report lag
 * (NOW minus its end). */
int sched_core_sync(struct sched_core *core, int slot, const struct sched_sync *s, int64_t now);
/* Threads of the client blocked on a grant, as the client says (believed only while it has
 * operators that are not released). */
void sched_core_waiters(struct sched_core *core, int slot, uint32_t waiters);

/* Runs the policy at NOW. Fills GRANTS[slot] for every client present (a grant never goes
 * back) and returns the absolute time of the next decision wanted, INT64_MAX for none. */
int64_t sched_core_decide(struct sched_core *core, int64_t now, struct sched_grant *grants);

/* Devices drained by the admin (bit D: device D): their clients get no new grants until
 * undrained (what they were granted before stays granted). */
void sched_core_set_drained(struct sched_core *core, uint64_t mask);

/* Statistics. */
void sched_core_client_stats(struct sched_core *core, int slot, int64_t now,
                             struct sched_client_stats *s);
struct sched_device_stats {
    uint64_t submitted, released, completed; /* departed clients too */
    uint64_t busy_ns;
    uint64_t decisions;
};
void sched_core_device_stats(struct sched_core *core, int64_t now, struct sched_device_stats *s);

/* Held at the last decision? (for stats) */
int sched_core_client_held(const struct sched_core *core, int slot);

/* Read-only telemetry the adapter measured (posd's eBPF programs; possim gives none): the
 * policy sees it in the client's view and in the view's unmanaged count until it changes. */
void sched_core_client_telemetry(struct sched_core *core, int slot, int64_t runq_delay_ns,
                                 int64_t runq_ns_per_s, int64_t offcpu_ns_per_s);
void sched_core_set_unmanaged(struct sched_core *core, uint32_t n);
/* The client's device memory on its device, as the adapter read its account (posd: the shim's
 * ledger in shared memory; possim gives none): USED bytes, under LIMIT (UINT64_MAX: none).
 * The policy sees them in the client's view. */
void sched_core_client_mem(struct sched_core *core, int slot, uint64_t used, uint64_t limit);

#endif
