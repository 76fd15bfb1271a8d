/* posd's state: struct posd and struct posd_client (a member for each part that keeps
 * something of a client), the constants they are sized by, and what every part uses (the
 * clock, the log; policy_posd.c: the policy's arguments and note). Each part's functions are
 * declared in its own header, sched/PART.h, which a file includes for the parts it calls. */
#ifndef POS_SCHED_POSD_H
#define POS_SCHED_POSD_H

#include <liburing.h>
#include <stdint.h>
#include <sys/types.h>

#include "pos/client_shm.h"
#include "pos/proto.h"
#include "sched/config.h"
#include "sched/core.h"
#include "sched/profile.h"
#include "sched/policy/policy.h"

#define POSD_MAX_CLIENTS SCHED_MAX_CLIENTS
/* a ring slot reserved and never published (a hole, posd_rings) is skipped after this */
#define POSD_HOLE_SKIP_NS 100000000LL
#define POSD_RECHECK_NS  50000LL     /* look again this soon at a completion posd had to leave */
/* A connection that is not a registered client (it has not said HELLO, or it is a tool) is
 * closed this long after it was accepted or made its last request: idle connections cannot
 * fill the table. */
#define POSD_REGISTER_NS 2000000000LL
/* Connections one uid may hold at once (root's are not counted): one user cannot take the
 * table (POSD_MAX_CLIENTS) from the others. */
#define POSD_PEERS_PER_UID 64
/* STATS shows every user's clients to root and to this group's members; others see their
 * own only (app names come from other users' environments) */
#define POSD_STATS_GROUP "posd"
/* Kicks only wake posd sooner: its ticks read every ring anyway. A client's kicks make posd
 * decide at most once per POSD_KICK_PERIOD_NS (after a burst of POSD_KICK_BURST), and kicks
 * after which nothing of the client was read since its previous kick at most once per
 * POSD_IDLE_KICK_PERIOD_NS (after POSD_IDLE_KICK_BURST). Beyond that its kicks wait (its
 * eventfd adds them up), which delays only its own news; while empty kicks go on, each wait
 * doubles up to POSD_KICK_PARK_MAX_NS (waking posd is what costs), and starts again from one
 * period once the client brings news or its burst has refilled. */
#define POSD_KICK_BURST          64
#define POSD_KICK_PERIOD_NS      20000LL
#define POSD_IDLE_KICK_BURST     16
#define POSD_IDLE_KICK_PERIOD_NS 100000LL
#define POSD_KICK_PARK_MAX_NS    1000000LL
/* accept() failing for want of descriptors or memory: posd stops accepting this long rather
 * than retry at once (a pending connection made it spin) */
#define POSD_ACCEPT_PAUSE_NS 100000000LL

/* What an io_uring completion is about (user_data = kind | slot << 8 | gen << 32). */
enum posd_event {
    EV_ACCEPT = 1,
    EV_SIGNAL,
    EV_TICK,
    EV_CLIENT_RECV,
    EV_CLIENT_KICK,
    EV_CANCEL,
    EV_HOUSEKEEPING,   /* housekeeping: connection deadlines, paused accepts, log summaries */
    EV_METRICS, /* the metrics endpoint has something to do (its epoll descriptor) */
    EV_WATCH,   /* a descriptor another part asked the loop to watch (posd_loop_watch) */
};
static inline uint64_t posd_event_data(int kind, int slot, uint32_t gen)
{
    return (uint64_t)kind | ((uint64_t)slot << 8) | ((uint64_t)gen << 32);
}

/* A token bucket: TOKENS left, refilled one per period since REFILLED_AT (0: full). */
struct posd_bucket {
    int tokens;
    int64_t refilled_at;
};

/* Registrations of one non-root uid: each costs posd a memfd, a mapping, /proc reads and a
 * clean slot in the core, so a register/leave loop is held to this rate (a REJECT the shim
 * reads: that process runs unscheduled). */
#define POSD_REG_UIDS      64
#define POSD_REG_BURST     128
#define POSD_REG_PERIOD_NS 10000000 /* 100 a second */
struct posd_reg_uid {
    int used;
    uid_t uid;
    int64_t last_ns;
    struct posd_bucket b;
};

/* What the eBPF telemetry (telemetry.c) knows of a client; all zero without it. */
#define POSD_TELE_TIDS 8
struct posd_tele_client {
    uint32_t launch_tid;               /* the thread of its latest launch, as the engine read it */
    uint32_t tids[POSD_TELE_TIDS];     /* its launching threads the kernel side follows */
    int ntids;
    uint64_t runq_ns, runq_n, offcpu_ns; /* the kernel's counters at the last refresh */
    int64_t read_at;                     /* when they were read (0: not followed) */
    int windows;                         /* intervals measured since it registered */
    uint64_t runq_delay_ns;              /* mean wake-up to running delay, last interval */
    uint64_t runq_ns_per_s;              /* time its launching threads waited to run, per second */
    uint64_t offcpu_ns_per_s;            /* off-CPU time of its launching threads per second */
    uint64_t ioctl_ns, ioctl_n;          /* the kernel's ioctl counters at the last refresh */
    uint64_t ioctls_per_s, ioctl_mean_ns; /* last interval */
};

/* The CPU lever's account of a client (cpu.c): its threads posd lowered, each as it was. */
#define POSD_CPU_THREADS   64
#define POSD_CPU_RESCAN_NS 100000000LL   /* a lowered client's new threads are found this soon */
#define POSD_CPU_FILE      "cpu-lowered" /* in the state directory: the threads lowered now */
struct posd_cpu_thread {
    int32_t tid;
    uint64_t start;      /* its start time (/proc stat field 22): a reused tid is not it */
    uint32_t policy;     /* what it had: SCHED_OTHER or SCHED_BATCH, */
    int32_t nice;        /* its nice value */
    uint64_t flags;      /* and its reset-on-fork flag */
    uint32_t set_policy; /* what posd set */
    int32_t set_nice;
};
struct posd_cpu_client {
    int low; /* enum pos_cpu_lever applied now (POS_CPU_OFF: none) */
    int nthreads;
    struct posd_cpu_thread t[POSD_CPU_THREADS];
    int64_t scan_at;      /* when /proc/PID/task is read again while it is lowered */
    uint64_t since_ticks; /* when this lowering began (a thread's start-time clock) */
    int said, full_said;  /* a failure, or too many threads, was logged for it */
};

/* What the loop (loop.c) keeps of a client's kicks: the pending read of its eventfd, and the
 * rate its kicks are held to. */
struct posd_kick {
    uint64_t buf; /* the pending read's buffer */
    int armed;
    int parked; /* its kicks wait (the read is not armed) until unpark_at */
    int64_t unpark_at;
    struct posd_bucket any, idle; /* every kick; kicks that brought no news */
    int64_t park_ns; /* how long its next empty kick over the rate waits; 0 = a period */
    uint64_t mark;   /* news_mark after its last kick: a kick is empty if it has not moved */
};

/* Where the engine's (engine.c) reading of a client's rings stands (its own copies, never read
 * back), and what it published to it last. */
struct posd_rings {
    uint64_t sub_head; /* next seq to read is sub_head + 1 */
    uint64_t done_head;
    uint64_t sync_head;
    /* a hole: a slot reserved and not yet published, first seen at hole_since; skipped after
     * POSD_HOLE_SKIP_NS (engine.c) */
    uint64_t hole_seq;
    int64_t hole_since;
    uint64_t sync_hole_idx; /* the same for the sync ring */
    int64_t sync_hole_since;
    uint64_t skipped; /* submission slots never published (a thread died mid-launch) */
    struct pos_published pub; /* what posd published to it last (pos/rules.h) */
};

/* A client's kernel keys by its kernel id (names.c, from its NAMES messages). */
struct posd_names {
    uint64_t *keys;
    uint32_t nkeys;    /* ids 1..nkeys known */
    uint64_t *key_set; /* the same keys as a hash set (0 marks a free slot) */
    uint32_t key_set_cap;
    int key_set_zero; /* key 0 is in the set */
};

/* A client's memory limit as the ledger (mem_ledger.c) wrote it. */
struct posd_mem_client {
    struct sched_mem_limit limit; /* what posd wrote into its shared memory last (never read
                                   * back: the client can write there) */
};

/* A peer of posd: the slot and its connection are clients.c's (it makes and closes them); each
 * part that keeps something of a client has its own member, named for it. */
struct posd_client {
    int used;
    uint32_t gen; /* bumped when the slot is reused: stale completions are ignored */
    uint32_t id;
    int sock;
    int kick_fd;    /* eventfd the client writes to wake posd */
    int is_tool;    /* a tool connection (posstat), not a GPU client */
    int registered;
    int64_t deadline; /* closed at this time unless registered by then (0: registered) */
    int64_t connected_at;
    struct pos_client_shm *shm;
    size_t shm_size;
    uint8_t rx[POS_REQ_MAX]; /* the pending recv's buffer */
    int pending;             /* SQEs in flight for this slot */
    int close_asked;         /* a part below clients.c found it gone (posd_client_ask_close) */
    const char *close_why;   /* what posd_client_close is then told */
    /* who it is and its rules' settings (config.c, pod_resolver.c) */
    struct posd_identity ident;
    struct posd_client_policy pol;
    int overridden; /* posctl (control.c) set its class, priority or memory limit (until it
                     * exits or a reload) */
    uint32_t sm_share; /* sm_share.c: what its WELCOME said (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE),
                        * 0 = none */
    struct posd_mem_client mem;
    struct posd_rings rings;
    struct posd_names names;
    struct posd_kick kick;
    struct posd_tele_client tele;
    struct posd_cpu_client cpu;
};

struct posd {
    struct posd_config cfg;
    char config_path[POSD_PATH_MAX];
    char dropin_dir[POSD_PATH_MAX];
    int config_optional;
    const struct pos_policy_ops *policy;
    char policy_override[16]; /* -p: survives reloads */
    char socket_path[108];
    int listen_fd;
    int signal_fd;
    struct io_uring ring;
    int tick_armed;
    int64_t tick_at; /* when the armed tick fires */
    int recheck;     /* a completion waits for its submission to be published */
    int housekeeping_armed;
    int64_t housekeeping_at;            /* when the armed housekeeping timeout fires */
    int64_t accept_paused_until; /* accepts resume then (0: not paused) */
    int kicks_parked;            /* clients whose kicks wait */
    int close_asked;             /* clients to close when the loop gets back (close_asked) */
    int has_stats_group;
    gid_t stats_gid;            /* POSD_STATS_GROUP */
    uint64_t drained;           /* devices drained by posctl (bit D: device D) */
    struct MHD_Daemon *metrics; /* --metrics: the HTTP endpoint, NULL when off */
    int metrics_fd;             /* its epoll descriptor, polled by the loop */
    char metrics_addr[80];
    int stop;
    int64_t started_at;
    uint64_t next_client_id;
    struct pos_sched_device device;
    struct sched_core *core;
    struct posd_reg_uid reg_uids[POSD_REG_UIDS]; /* registration rates, least recent replaced */
    struct pos_profiles prof;  /* kernel profiles: STATE_DIR/profiles, saved periodically */
    char state_dir[POSD_PATH_MAX]; /* fixed at start ($POSD_STATE_DIR, else state_dir) */
    int state_fd;                  /* state_dir, opened and checked at start (files.h) */
    int64_t prof_save_at;      /* the next periodic save */
    int prof_save_failed;      /* a failed save was logged (once until one succeeds) */
    uint64_t prof_refused_said; /* profiles refused at profile_user_max, as last logged */
    struct posd_policy_files *policy_files; /* [policy]'s files, read (NULL: none) */
    char policy_note[160];         /* the policy's note last logged */
    struct sched_grant grants[POSD_MAX_CLIENTS];
    struct posd_client clients[POSD_MAX_CLIENTS];
};

int64_t posd_now(void);

/* Asks for C to be closed (posd_client_close's WHY) by the loop, once the part that found it
 * gone (telemetry, which clients.c calls) has returned: a part below clients.c does not close
 * a client itself. */
static inline void posd_client_ask_close(struct posd *d, struct posd_client *c, const char *why)
{
    if (!c->close_asked) {
        c->close_asked = 1;
        c->close_why = why;
        d->close_asked++;
    }
}

/* policy_posd.c: ARGS for POLICY's init: CFG's policy parameters, with a schedule file read
 * for DEV and a weights file read and checked (one that cannot be used is logged and left
 * out); returns what was read (NULL: nothing), which the caller closes once the core no longer
 * uses it. And the policy's note logged when it changes. */
struct posd_policy_files {
    struct pos_schedule *schedule; /* NULL: none */
    struct pos_weights *weights;   /* NULL: none */
};
struct posd_policy_files *posd_policy_args(const struct posd_config *cfg,
                                           const struct pos_sched_device *dev,
                                           const struct pos_policy_ops *policy,
                                           struct pos_policy_args *args);
void posd_policy_files_close(struct posd_policy_files *f);
void posd_log_policy_note(struct posd *d);

/* log.c */
void posd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void posd_set_log_level(int level);
/* Prints the summaries of suppressed lines that are due. Returns when the next one is due
 * (CLOCK_MONOTONIC ns), or 0 when none is pending. */
int64_t posd_log_flush(void);
/* When posd_log_flush has something to print, or 0. */
int64_t posd_log_due(void);

#endif
