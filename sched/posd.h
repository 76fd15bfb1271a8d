/* posd's internal contracts: the daemon state, its clients, and the parts that work on them
 * (event loop, registration, the scheduling engine, control replies, logging). */
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
#define POSD_STALL_NS    100000000LL /* an unpublished submission slot is skipped after this */
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
    EV_HOUSE,   /* housekeeping: connection deadlines, paused accepts, log summaries */
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
/* Refills B (one token per PERIOD ns, up to BURST) and takes one. Returns 0 when there is
 * none. (bucket.c) */
int posd_bucket_take(struct posd_bucket *b, int64_t now, int burst, int64_t period);

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
    uint64_t sync_stall_idx;
    int64_t sync_stall_since;
    uint64_t stall_seq;
    int64_t stall_since;
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
    int house_armed;
    int64_t house_at;            /* when the armed housekeeping timeout fires */
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
    struct pos_schedule *schedule; /* [policy] schedule, loaded (NULL: none) */
    char policy_note[160];         /* the policy's note last logged */
    struct sched_grant grants[POSD_MAX_CLIENTS];
    struct posd_client clients[POSD_MAX_CLIENTS];
};

int64_t posd_now(void);

/* schedule_posd.c: [policy] schedule, loaded for the core (NULL: none set, or it cannot be
 * used: logged), and the policy's note logged when it changes. */
struct pos_schedule *posd_schedule_open(const struct posd_config *cfg,
                                        const struct pos_sched_device *dev);
void posd_schedule_close(struct pos_schedule *s);
void posd_log_policy_note(struct posd *d);

/* log.c */
void posd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void posd_set_log_level(int level);
/* Prints the summaries of suppressed lines that are due. Returns when the next one is due
 * (CLOCK_MONOTONIC ns), or 0 when none is pending. */
int64_t posd_log_flush(void);
/* When posd_log_flush has something to print, or 0. */
int64_t posd_log_due(void);

/* wire.c: decoding a peer's message */
enum posd_msg_verdict {
    POSD_MSG_OK,
    POSD_MSG_OVERSIZED, /* longer than POS_REQ_MAX */
    POSD_MSG_SHORT,     /* shorter than a header */
    POSD_MSG_FOREIGN,   /* another magic or version */
    POSD_MSG_LENGTH,    /* the header's length is not the message's */
    POSD_MSG_BAD_BODY,  /* a body of the wrong size for its type */
    POSD_MSG_UNKNOWN,   /* a type posd does not take */
};
struct posd_msg {
    struct pos_msg_hdr hdr; /* a copy: valid unless SHORT or OVERSIZED */
    const uint8_t *body;    /* into the buffer decoded; NULL unless the length is right */
    size_t body_len;
    struct pos_hello hello; /* HELLO's body, copied */
};
/* Decodes the LEN bytes at BUF into M. Returns an enum posd_msg_verdict. A NAMES body is
 * checked by posd_engine_names, which keeps the client's keys. */
int posd_msg_decode(const uint8_t *buf, size_t len, struct posd_msg *m);

/* clients.c: registration and teardown */
int posd_listen(struct posd *d);
void posd_unlink_socket(struct posd *d);
/* A new peer on SOCK, or NULL when it was refused (table full, its uid over its cap; SOCK is
 * then closed). */
struct posd_client *posd_client_new(struct posd *d, int sock);
void posd_client_close(struct posd *d, struct posd_client *c, const char *why);
/* Closes the connections past their deadline (POSD_REGISTER_NS). Returns the earliest deadline
 * left, or 0 when none is. */
int64_t posd_clients_expire(struct posd *d, int64_t now);
/* C said HELLO: who it is read from /proc, its rules matched, its shared memory and kick
 * eventfd made and sent (WELCOME), or a REJECT it can read. Returns 0, or a negative errno
 * value to drop C (a refused or failed registration's reason). */
int posd_client_register(struct posd *d, struct posd_client *c, const struct pos_hello *h);
/* Sends C a REJECT with REASON (the shim prints it). */
void posd_client_reject(struct posd_client *c, const char *reason);
/* posd's decision: every client's rings read (posd_engine_read), a client that broke the
 * protocol closed, the core's decision published (posd_engine_decide). Returns the delay in
 * ns until the next tick is wanted, or -1 when nothing needs one (idle). */
int64_t posd_clients_tick(struct posd *d);
/* Closes the clients a part below this file asked to close (posd_client_ask_close): called by
 * the loop once that part has returned. */
void posd_clients_close_asked(struct posd *d);
/* Looks up the group whose members see every client in STATS (POSD_STATS_GROUP), at start
 * and at every reload. */
void posd_lookup_stats_group(struct posd *d);
/* Re-applies the configuration to every client (after SIGHUP). */
void posd_clients_reconfigure(struct posd *d);
/* The pod resolver has a new table (sched/pod.h; a posd_loop_watch function on its eventfd):
 * clients whose pod names changed are matched against the rules again, as on a reload (one
 * posctl changed keeps its settings), and logged. */
int64_t posd_clients_pod_news(struct posd *d, int fd, void *arg);
/* Root, or a member of POSD_STATS_GROUP (its groups as the kernel recorded them at connect):
 * sees every client in STATS and may change posd (CONTROL). */
int posd_peer_privileged(const struct posd *d, const struct posd_client *c);
/* Sends C one message of TYPE with BODY (LEN bytes). Returns 0 or -1. */
int posd_client_send(struct posd_client *c, int type, const void *body, size_t len);
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

/* handlers.c: a peer's message to its handler */
/* A message arrived on C's socket (LEN bytes in c->rx). Returns 0, or a negative errno value
 * to drop C (-EPROTO: it broke the protocol; a refused or failed registration's reason). */
int posd_client_message(struct posd *d, struct posd_client *c, size_t len);

/* control_reply.c: the answer to posctl's requests */
/* What a handler returns when its answer comes later (posd_control_answer). */
#define POSD_CONTROL_LATER 1
/* Answers C's request with STATUS (0 or -errno) and MSG; a change (OP, its name; NULL for a
 * question) is logged with who asked. Returns 0, or -1 when it could not be sent (the caller
 * drops C). */
int posd_control_answer(struct posd *d, struct posd_client *c, const char *op, int status,
                        const char *msg);

/* control.c: posctl's requests (POS_MSG_CONTROL) */
/* Handles one CONTROL request (body of LEN bytes) from C and answers it. Returns 0, or -1
 * to drop C (it could not be answered). */
int posd_control(struct posd *d, struct posd_client *c, const void *body, size_t len);

/* engine.c: the adapter between the clients' shared memory and the scheduling core */
/* The core's tunables from the configuration. */
void posd_engine_params(const struct posd_config *cfg, struct sched_params *p);
/* Creates the core (policy from d->policy). Returns 0 or a negative errno. */
int posd_engine_init(struct posd *d);
/* Reads every client's rings into the core (at NOW). Returns how many clients wrote
 * out-of-range values into their shared memory, their pointers in BAD (POSD_MAX_CLIENTS
 * room): the caller closes them before the decision (posd_clients_tick). */
int posd_engine_read(struct posd *d, int64_t now, struct posd_client **bad);
/* Runs the core's decision and publishes the grants. Returns the delay in ns until the next
 * tick is wanted, or -1 when nothing needs one (idle). */
int64_t posd_engine_decide(struct posd *d, int64_t now);
/* A client registered / left. */
int posd_engine_add(struct posd *d, struct posd_client *c);
void posd_engine_remove(struct posd *d, struct posd_client *c);
/* The client's policy settings changed (reload). */
void posd_engine_reconf(struct posd *d, struct posd_client *c);
/* Tells C's waiting threads that posd is going away (they launch freely from now on). */
void posd_engine_release(struct posd_client *c);

/* names.c: kernel names */
/* A NAMES message (body of LEN bytes) from C: its ids' keys kept, the names learnt. Returns 0,
 * -EPROTO when it is malformed (C's keys as they were), or -ENOMEM. */
int posd_names_message(struct posd_client *c, const uint8_t *body, size_t len);
/* C leaves: its keys freed. */
void posd_names_forget(struct posd_client *c);
/* The name posd learnt for KEY (its first 63 bytes), or "". */
const char *posd_name_of(uint64_t key);

/* stats.c: the replies to posd's tools */
/* Fills a STATS reply (header excluded) into BUF (CAP bytes); returns its length. It lists
 * every client when ALL, else only those of uid UID. */
size_t posd_stats_clients(struct posd *d, void *buf, size_t cap, int all, uid_t uid);
/* The KERNELS reply body into BUF (CAP bytes): every user's profiles when ALL, else UID's. */
size_t posd_stats_kernels(struct posd *d, void *buf, size_t cap, int all, uid_t uid);

/* profile_store.c: the kernel profiles in the state directory */
/* At start: STATE_DIR/profiles loaded, and [policy] profiles imported over it (a file
 * refused is logged and left out). */
void posd_profiles_load(struct posd *d);
/* Writes the kernel profiles to STATE_DIR/profiles now (in this thread: saver.c calls it in
 * its child); forgets them all and removes the file.
 * Each returns 0 or a negative errno, with a line for a person in MSG. */
int posd_profiles_write(struct posd *d, char *msg, size_t cap);
int posd_profiles_reset(struct posd *d, char *msg, size_t cap);

/* saver.c: kernel profile saves in a child process (the loop never waits for one) */
#define POSD_PROFILES_NAME   "profiles" /* in the state directory */
#define POSD_PROFILE_SAVE_NS (60 * 1000000000ll)
/* A save asked by ASKER (posctl; NULL: the periodic one). Returns POSD_CONTROL_LATER when
 * ASKER is answered at the end of a save that begins after now (one is started, or follows
 * the running one), 0 when the periodic one was started or is not needed (one runs), or the
 * result of a save written in this thread when no child could be made (0 or -errno, MSG). */
int posd_saver_request(struct posd *d, struct posd_client *asker, char *msg, size_t cap);
/* Ends a running save (its child killed and reaped, its temporary removed): before a reset,
 * so that no older table is renamed over the removal. Its askers get the next save. */
void posd_saver_abort(struct posd *d);
/* The periodic save, when due (and the count of profiles refused at profile_user_max logged).
 * Returns when the next one is due. */
int64_t posd_saver_periodic(struct posd *d);
/* At exit: a running save ended, the profiles written in this thread, its askers answered. */
void posd_saver_finish(struct posd *d);

/* cpu.c: the CPU lever's hands (the core decides, sched_grant.cpu_low) */
/* At start: the fatal signals' handler that restores lowered threads is installed, and what a
 * posd killed before left lowered (STATE_DIR/cpu-lowered) is put back. */
void posd_cpu_start(struct posd *d);
void posd_cpu_recover(struct posd *d);
/* After a decision: C's threads lowered as LOW (enum pos_cpu_lever) says, new ones found every
 * POSD_CPU_RESCAN_NS, or put back when LOW is POS_CPU_OFF. Failures are logged once per client. */
void posd_cpu_apply(struct posd *d, struct posd_client *c, int low, int64_t now);
/* C leaves: its threads are put back. */
void posd_cpu_client_remove(struct posd *d, struct posd_client *c);
/* Whether some client is lowered now. */
int posd_cpu_any_lowered(const struct posd *d);
/* At exit: every lowered thread put back, the record removed. */
void posd_cpu_restore_all(struct posd *d);

/* device.c: what posd knows of the GPU */
/* Fills DEV for device 0 from the CUDA driver the clients use (asked by a child process) and
 * whether processes run at once on it (MPS); the documented defaults when no driver answers.
 * Logs what it found. Returns 0, or -1 when the defaults were used. */
int posd_device_probe(struct pos_sched_device *dev);
/* Where posd looks for an MPS control daemon: $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps. */
const char *posd_mps_pipe_dir(void);

/* sm_share.c: SM shares through MPS */
/* Logs once, for the configuration just loaded, the rules and classes whose sm_share cannot
 * apply because the device runs processes one at a time (no MPS). */
void posd_shares_check(const struct posd *d);
/* The share C's WELCOME carries: its policy's sm_share where the device has MPS, else 0. */
uint32_t posd_share_for(const struct posd *d, const struct posd_client *c);
/* After a reload: says when a running client's share changed (it applies to its next start). */
void posd_share_reconf(const struct posd *d, const struct posd_client *c);

/* mem_ledger.c: posd's side of the memory ledger (docs/memory.md) */
/* Every figure of a client's account is read clamped to this (and to the device's memory as
 * the client gave it): more than any device has, and small enough that the sums over devices
 * and clients cannot wrap. */
#define POSD_MEM_DEVICE_MAX (UINT64_C(1) << 48) /* 256 TiB */
/* A client's account as posd reports it: summed over its devices, each value read once. */
struct posd_mem_figures {
    uint64_t used, peak, refused;  /* used: reserved and committed, IPC imports aside */
    uint64_t bytes[POS_MEM_KINDS]; /* committed, by kind */
    uint64_t total; /* the memory of the device its rules put it on, as its shim saw it (0: not
                     * known yet) */
    uint64_t limit; /* its limit there (POS_MEM_UNLIMITED: none, or a share of a device whose
                     * size is not known yet) */
};
/* Writes L into C's shared memory (its limit from now on) and bumps mem_word. */
void posd_mem_limit_publish(struct posd_client *c, struct sched_mem_limit l);
/* C's limit in bytes on a device of TOTAL bytes (0: not known), from posd's own copy. */
uint64_t posd_mem_limit_bytes(const struct posd_client *c, uint64_t total);
/* C's account, in F. */
void posd_mem_read(const struct posd_client *c, struct posd_mem_figures *f);
/* Only what C uses on its rules' device and its limit there: two values read, for each tick. */
void posd_mem_read_device(const struct posd_client *c, uint64_t *used, uint64_t *limit);
/* After a reload: C's limit written and logged when its rules' changed. */
void posd_mem_reconf(struct posd_client *c);
/* "; it uses 3GiB on device 0, above 2GiB: ..." into BUF when C uses more than
 * its limit on its rules' device (its account read once), else "". */
#define POSD_MEM_OVER_MAX 128
void posd_mem_over(const struct posd_client *c, char *buf, size_t cap);

/* metrics.c: the Prometheus endpoint */
struct MHD_Daemon;
/* Connections the endpoint holds at once, and that one peer may hold of them (a local user,
 * told by its socket's owner, or a remote address; root's are not counted per peer): one user
 * cannot take the room scrapers need (docs/metrics.md). */
#define POSD_METRICS_CONNECTIONS 256
#define POSD_METRICS_PEER_MAX    8
/* Serves /metrics on SPEC ("PORT" on loopback, "ADDR:PORT", "[ADDR6]:PORT"), which came from
 * ORIGIN ("--metrics", "[metrics] listen": for messages). Returns 0 or a negative errno
 * (logged). */
int posd_metrics_start(struct posd *d, const char *spec, const char *origin);
/* The descriptors the endpoint may hold at most (0 in a posd without it). */
int posd_metrics_descriptors(void);
/* Does what the endpoint has to do. Returns when it wants to run again at the latest
 * (CLOCK_MONOTONIC ns), 0 for no deadline. */
int64_t posd_metrics_run(struct posd *d);
void posd_metrics_stop(struct posd *d);

/* loop.c: the event loop */
/* Blocks the signals the loop reads from its signalfd (SIGHUP, SIGTERM, SIGINT): called before
 * the socket exists, so that one sent as soon as it does waits for the loop (their default
 * action killed posd, its socket left behind). */
void posd_block_signals(void);
int posd_loop(struct posd *d);

/* reload.c: the configuration reloaded */
/* Reloads the configuration (SIGHUP, posctl reload, conf_watch.c): on error the running one
 * stays. Returns 0 or a negative errno; ERR says what was done or why not. */
int posd_reload(struct posd *d, char *err, size_t errlen);

/* arm.c: the loop's io_uring, armed by any part */
/* A submission entry (the queue submitted first when it is full). */
struct io_uring_sqe *posd_sqe(struct posd *d);
/* Arms the tick DELAY_NS from now (a negative delay: none), or brings an armed one forward. */
void posd_arm_tick(struct posd *d, int64_t delay_ns);
/* Makes sure housekeeping runs at AT (CLOCK_MONOTONIC ns) at the latest. */
void posd_arm_house(struct posd *d, int64_t at);

/* watch.c: descriptors watched for other parts */
/* Calls FN(D, FD, ARG) whenever FD is readable (POLLIN), from the loop, until posd stops; a
 * part with a descriptor of its own (telemetry's ring buffer and timer, the metrics listener)
 * needs no case in the loop. FN returns 0, or when to look at FD again (CLOCK_MONOTONIC ns)
 * when it must rest (an accept out of descriptors would fail again at once). May be called
 * before posd_loop starts. Returns 0 or -ENOSPC (POSD_MAX_WATCHES). */
#define POSD_MAX_WATCHES 12
typedef int64_t (*posd_watch_fn)(struct posd *d, int fd, void *arg);
int posd_loop_watch(struct posd *d, int fd, posd_watch_fn fn, void *arg);
/* The same, once: FN is called the first time FD is readable, and the watch is gone (FN closes
 * FD when it is done with it). */
int posd_loop_watch_once(struct posd *d, int fd, posd_watch_fn fn, void *arg);
/* The loop's side: its ring exists, every watch is armed (start), and no longer (stop); a
 * watch's completion (its user_data) handled; the watches whose rest is over armed again,
 * returning when the next one's is (0: none). */
void posd_watch_start(struct posd *d);
void posd_watch_stop(void);
void posd_watch_fire(struct posd *d, uint64_t data);
int64_t posd_watch_wake(struct posd *d, int64_t now);

/* conf_watch.c: the drop-in directory watched (inotify): a change reloads the configuration
 * as SIGHUP does, once a burst of changes has settled. Returns 0, or -errno when DIR cannot be
 * watched (logged; SIGHUP still reloads). */
int posd_conf_watch_start(struct posd *d, const char *dir);
void posd_conf_watch_stop(void);

/* telemetry.c: eBPF telemetry (bpf/telemetry.bpf.c), as [daemon] telemetry says. Without it
 * (telemetry = off, a build without eBPF, no privilege, a kernel without the features) every
 * call does nothing and every figure stays 0. */
/* Loads and attaches what the machine allows. Returns 0, or a negative errno value when
 * telemetry = on and it could not load (posd then refuses to start); otherwise it logs once
 * why not. */
int posd_telemetry_start(struct posd *d);
void posd_telemetry_stop(struct posd *d);
/* C registered / is about to leave: the kernel side starts / stops following its tgid. */
void posd_telemetry_client_add(struct posd *d, struct posd_client *c);
void posd_telemetry_client_remove(struct posd *d, struct posd_client *c);
/* A launch of C's thread TID was read: the kernel side follows that thread from now on. */
void posd_telemetry_follow(struct posd_client *c, uint32_t tid);
/* C's figures for STATS: a client that has no whole interval yet (it registered less than
 * one refresh ago) is measured from when it was first followed to NOW, so that its first
 * second is not shown as zero. */
void posd_telemetry_client_current(struct posd *d, struct posd_client *c, int64_t now);
/* Which parts are running (POS_TELE_* of include/pos/proto.h). */
uint32_t posd_telemetry_parts(void);
/* How many processes initialised the driver while the kernel side's table of GPU processes
 * was full (they are not tracked). */
uint64_t posd_telemetry_untracked(void);
/* Fills at most CAP unmanaged processes into OUT; returns how many there are (may be > CAP). */
size_t posd_telemetry_unmanaged(struct posd *d, struct pos_unmanaged_stats *out, size_t cap);

#endif
