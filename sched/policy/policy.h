/* The scheduling policies' one interface. A policy sees every client of a device: its class
 * and limits, its operators one by one (queued ones in launch order with kernel key, shape,
 * stream and request; what is in flight), its current request, and the device itself; it
 * decides how far each client's prefix of launches is granted, and when it next wants to
 * decide. Pure code: no I/O, no clock of its own, so the same policy runs in posd (real time)
 * and in possim (virtual time). The rules every policy shares (a grant is never taken back,
 * stalls, guard periods, when to tick, how often clients report) are the core's
 * (sched/core.h). */
#ifndef POS_SCHED_POLICY_H
#define POS_SCHED_POLICY_H

#include <stddef.h>
#include <stdint.h>

struct pos_schedule;
struct pos_weights;

/* One operator. */
struct pos_sched_op {
    uint64_t seq;       /* the client's launch number, from 1 */
    uint64_t key;       /* kernel key: 64-bit FNV-1a of the mangled name; 0 while unknown */
    uint32_t kernel_id; /* the client's own id of the kernel (per process) */
    uint16_t kind;      /* enum pos_op_kind */
    uint16_t state;     /* POS_SCHED_OP_* */
    uint32_t grid[3], block[3];
    uint32_t smem;
    uint32_t tid; /* launching thread */
    uint64_t stream, ctx;
    int ptsz;
    int64_t submit_ns, release_ns, done_ns;
    uint64_t request; /* the client's request number it belongs to */
};

#define POS_SCHED_OP_RELEASED 0x1 /* granted (or launched freely) */
#define POS_SCHED_OP_DONE     0x2 /* known complete */
#define POS_SCHED_OP_AT_CALL  0x4 /* released when it was submitted: launched at submit_ns */
#define POS_SCHED_OP_DEVICE_END 0x8 /* done_ns is the device's time of its end (a timing event) */

/* The device the clients share. */
struct pos_sched_device {
    int index;
    uint32_t sm_count;
    uint32_t max_threads_per_sm, max_blocks_per_sm, smem_per_sm;
    int concurrent; /* contexts of different processes run at once (MPS); else time-sliced */
};

/* The CPU lever ([policy] cpu, docs/policy.md): how the threads of a client outranked by one
 * with a request under way are lowered on the host's CPU (posd applies it; possim's host model
 * weighs them so). */
enum pos_cpu_lever {
    POS_CPU_OFF = 0, /* left as they are */
    POS_CPU_IDLE,    /* SCHED_IDLE */
    POS_CPU_NICE,    /* a nice value (posd's [policy] cpu_nice) */
};

/* A client's current request, inferred from its synchronisations. */
struct pos_sched_request {
    int active;
    uint64_t id;
    int64_t start_ns; /* its first launch */
    uint64_t ops;     /* operators launched so far */
    uint64_t ended;   /* requests of the client ended so far */
    int64_t last_ns;  /* the latency of the last one, its first launch to its completion */
};

/* One client as a policy sees it. Inputs are filled by the core; a policy sets the outputs. */
struct pos_sched_client {
    /* identity and configuration */
    uint32_t id;
    int slot;
    int priority;          /* lower = more important */
    uint32_t max_inflight; /* 0 = no limit */
    double min_share;      /* starvation guard share, 0..1 */
    double weight;
    double slo_ms;
    int device;
    /* state (counts of operators) */
    uint64_t submitted;     /* seq of the last operator submitted */
    uint64_t released;      /* operators released (granted, or launched freely) */
    uint64_t completed;     /* operators known complete */
    uint64_t granted;       /* the current grant: seqs <= granted may launch */
    uint64_t released_upto; /* every seq <= this is released */
    int waiting;            /* threads blocked on a grant (believed only with work queued) */
    int stalled;            /* in flight with no completion for the core's stall time */
    int64_t served_ns;      /* time with operators in flight in the current guard period */
    int64_t last_done_ns;   /* last completion heard of */
    double op_ns;           /* estimate of one of its operators' device time (0: none yet) */
    struct pos_sched_request request;
    /* operators: seqs (completed_upto, submitted] are in OPS[seq & ops_mask] */
    const struct pos_sched_op *ops;
    uint64_t ops_mask;
    uint64_t completed_upto; /* every seq <= this is complete */
    /* outputs */
    uint32_t mode; /* enum pos_grant_mode */
    uint64_t new_granted;
    uint32_t window; /* WINDOW mode: operators it may keep in flight beyond its completed prefix
                      * on its own, as the shim learns completions (0 = only new_granted) */
    int held;        /* held back by the policy at this decision */
    uint32_t uid;    /* its user, as posd established it: the key of its kernel profiles */
    /* read-only telemetry of posd's eBPF programs over their last second (0 without them,
     * and in possim): the CPU side of its launching */
    int64_t runq_delay_ns;   /* mean wake-up to running delay of its launching threads */
    int64_t runq_ns_per_s;   /* time its launching threads waited to run, per second */
    int64_t offcpu_ns_per_s; /* off-CPU time of its launching threads per second */
    /* read-only device memory on its device, as its shim accounts it (docs/memory.md; 0 and
     * UINT64_MAX in possim): what it holds, and the limit posd gives it (UINT64_MAX: none).
     * No policy uses them yet. */
    uint64_t mem_used;
    uint64_t mem_limit;
    /* the host's CPU: its lever (enum pos_cpu_lever, from its class or [policy] cpu), and
     * whether its threads are lowered, an output the core fills before decide by its rule (a
     * client of a more important class has a request under way, or ended one less than
     * cpu_hold_ns ago) and a policy may change */
    int cpu;
    int cpu_low;
};

struct pos_profiles; /* sched/profile.h: read with pos_sched_profile() */

struct pos_sched_view {
    int64_t now;          /* ns */
    int64_t period_start; /* start of the current guard period */
    int64_t guard_period_ns;
    uint32_t credits;  /* most operators a window grants ahead */
    int64_t window_ns;     /* work a windowed client without a class cap may have in flight */
    int64_t idle_grace_ns; /* a client idle this briefly still counts as busy */
    const struct pos_sched_device *device;
    struct pos_sched_client *clients;
    size_t nclients;
    const struct pos_profiles *profiles; /* kernel profiles (NULL: none) */
    uint32_t unmanaged; /* processes using this device without being clients (telemetry) */
    int64_t cpu_hold_ns; /* the CPU lever holds a client lowered this long after the last
                          * request of a client that outranks it ended */
};

static inline uint64_t pos_sched_inflight(const struct pos_sched_client *c)
{
    return c->released > c->completed ? c->released - c->completed : 0;
}

static inline uint64_t pos_sched_queued(const struct pos_sched_client *c)
{
    return c->submitted > c->released ? c->submitted - c->released : 0;
}

/* Operator SEQ of C, or NULL when it is complete and forgotten or not submitted yet. */
static inline const struct pos_sched_op *pos_sched_op_at(const struct pos_sched_client *c,
                                                         uint64_t seq)
{
    if (seq <= c->completed_upto || seq > c->submitted)
        return NULL;
    return &c->ops[seq & c->ops_mask];
}

/* The grant that lets C have at most LIMIT operators in flight (never below its grant). */
uint64_t pos_sched_window_grant(const struct pos_sched_client *c, uint64_t limit);

/* Whether C has work that outranks: queued, or in flight and not stalled, or completed less
 * than idle_grace ago (a closed-loop client launches its next request microseconds after its
 * last one ended: a window handed out in that gap would be in the GPU's queue ahead of it). */
int pos_sched_has_work(const struct pos_sched_client *c, const struct pos_sched_view *v);

/* NEXT, brought forward to when O's idle grace ends if that is still to come. */
int64_t pos_sched_grace_next(const struct pos_sched_client *o, const struct pos_sched_view *v,
                             int64_t next);

/* Holds C (WINDOW mode, no new grant) but for the starvation guard: a client with work queued
 * that has had less than min_share of the guard period gets one step (its class's cap, or one
 * operator) in the period's last min_share. Returns NEXT, brought forward to when the guard
 * would let it go. */
int64_t pos_sched_hold(struct pos_sched_client *c, const struct pos_sched_view *v, int64_t next);

/* How many operators of C make about WINDOW_NS of device time by its estimate (2 at least,
 * CAP at most; 2 while nothing is known yet). */
uint64_t pos_sched_ops_in(const struct pos_sched_client *c, int64_t window_ns, uint64_t cap);

/* A policy's own parameters, kept with the policy as the sched_ext schedulers keep their
 * tunables: each policy declares its keys (name, type, default, bounds) in its file, and init
 * gets the values an adapter was given for them into the policy's private state. posd.conf's
 * [policy] and possim's [sched] accept the keys every policy declares (a reload may switch
 * policy: a key of another policy than the one running is ignored). */
enum pos_param_type {
    POS_PARAM_NUMBER,   /* a finite number in lo..hi */
    POS_PARAM_SCHEDULE, /* a stage schedule file (docs/schedule.md): the adapter reads it (the
                         * I/O is its), the policy gets it parsed */
    POS_PARAM_WEIGHTS,  /* a weights file (sched/weights.h, docs/learned.md): the adapter reads
                         * and checks it, the policy gets it parsed */
};

struct pos_policy_param {
    const char *name;   /* its key; NULL ends a policy's table */
    int type;           /* enum pos_param_type */
    double def, lo, hi; /* NUMBER: the default and the accepted range */
    const char *help;   /* one line on what it sets (possim --help) */
};

#define POS_POLICY_ARGS_MAX 8    /* distinct keys over every policy (test_policy checks) */
#define POS_POLICY_FILE_MAX 1024 /* a SCHEDULE value, with its NUL */

/* The values an adapter was given for policies' parameters, handed to init. */
struct pos_policy_args {
    size_t n;
    struct pos_policy_arg {
        const struct pos_policy_param *param; /* its declaration (pos_policy_param_find) */
        double number;                        /* NUMBER */
        char file[POS_POLICY_FILE_MAX];       /* SCHEDULE: the file, as given */
        const struct pos_schedule *schedule;  /* SCHEDULE: the file read by the adapter before
                                               * init (NULL: not read, or refused); it must
                                               * outlive the policy's state */
        const struct pos_weights *weights;   /* WEIGHTS: the file read and checked by the
                                               * adapter (NULL: not read, or refused); the
                                               * policy copies what it keeps */
    } v[POS_POLICY_ARGS_MAX];
    /* an adapter's own extension, for the policy that knows it (possim train's learner for
     * policy learned, sched/policy/learned.h); NULL in posd */
    const void *ext;
};

struct pos_policy_ops {
    const char *name;
    const char *summary;
    /* Optional: its parameters, ended by a NULL name (none: NULL). */
    const struct pos_policy_param *params;
    /* Optional private state: init returns 0 or a negative errno. ARGS: the values given for
     * parameters (NULL: none given); a policy keeps what it needs of them in its state. */
    int (*init)(void **state, const struct pos_sched_device *dev,
                const struct pos_policy_args *args);
    void (*fini)(void *state);
    /* Decides mode, new_granted and held for every client of V. Returns the absolute time at
     * which it wants to decide again, INT64_MAX if only events matter. */
    int64_t (*decide)(void *state, struct pos_sched_view *v);
    /* Optional: operator OP of C completed (exactly, or bounded by a synchronisation). */
    void (*on_complete)(void *state, const struct pos_sched_client *c,
                        const struct pos_sched_op *op);
    /* Optional: one line on what the policy is doing, which the adapter logs when it changes
     * (e.g. whether a schedule is followed); NULL: nothing to say. */
    const char *(*note)(void *state);
};

/* The policy named NAME, or NULL. */
const struct pos_policy_ops *pos_policy_find(const char *name);

/* Every policy, NULL-terminated. */
extern const struct pos_policy_ops *const pos_policies[];

/* Parameters. Found over the table (registry.c): the parameter NAME of any policy (the first
 * one that declares it: policies that declare the same key declare it alike), or NULL. */
const struct pos_policy_param *pos_policy_param_find(const char *name);
/* Whether POLICY declares NAME. */
int pos_policy_takes(const struct pos_policy_ops *policy, const char *name);
/* Their values (params.c): the value of NAME in ARGS, or NULL when it was not given (ARGS
 * may be NULL). */
const struct pos_policy_arg *pos_policy_arg(const struct pos_policy_args *args, const char *name);
/* ARGS's entry for P, added (zeroed) when P was not given before: a later value replaces an
 * earlier one. NULL when ARGS is full (more than POS_POLICY_ARGS_MAX keys). */
struct pos_policy_arg *pos_policy_arg_set(struct pos_policy_args *args,
                                          const struct pos_policy_param *p);
/* For a policy's init: the number given for P in ARGS, else P's default. */
double pos_policy_number(const struct pos_policy_args *args, const struct pos_policy_param *p);
/* ... the schedule given for P, read (NULL: none). */
const struct pos_schedule *pos_policy_schedule(const struct pos_policy_args *args,
                                               const struct pos_policy_param *p);
/* ... the weights given for P, read and checked (NULL: none). */
const struct pos_weights *pos_policy_weights(const struct pos_policy_args *args,
                                             const struct pos_policy_param *p);

#endif
