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
    EV_HOUSE, /* housekeeping: connection deadlines, paused accepts, log summaries */
};

/* A token bucket: TOKENS left, refilled one per period since REFILLED_AT (0: full). */
struct posd_bucket {
    int tokens;
    int64_t refilled_at;
};

struct posd_client {
    int used;
    uint32_t gen; /* bumped when the slot is reused: stale completions are ignored */
    uint32_t id;
    int sock;
    int kick_fd; /* eventfd the client writes to wake posd */
    int is_tool; /* a tool connection (posstat), not a GPU client */
    int registered;
    int64_t deadline; /* closed at this time unless registered by then (0: registered) */
    struct pos_client_shm *shm;
    size_t shm_size;
    struct posd_identity ident;
    struct posd_client_policy pol;
    /* where posd's reading of the rings stands (its own copies, never read back) */
    uint64_t sub_head; /* next seq to read is sub_head + 1 */
    uint64_t done_head;
    uint64_t sync_head;
    uint64_t sync_stall_idx;
    int64_t sync_stall_since;
    uint64_t stall_seq;
    int64_t stall_since;
    int64_t connected_at;
    uint64_t skipped; /* submission slots never published (a thread died mid-launch) */
    uint32_t sample_published, kick_published;
    /* kernel keys by the client's kernel id (NAMES messages) */
    uint64_t *keys;
    uint32_t nkeys;    /* ids 1..nkeys known */
    uint64_t *key_set; /* the same keys as a hash set (0 marks a free slot) */
    uint32_t key_set_cap;
    int key_set_zero; /* key 0 is in the set */
    /* I/O buffers of the pending recv and kick read */
    uint8_t rx[POS_REQ_MAX];
    uint64_t kick_buf;
    int kick_armed;
    int kick_parked; /* its kicks wait (the read is not armed) until kick_unpark_at */
    int64_t kick_unpark_at;
    struct posd_bucket kick_any, kick_idle; /* every kick; kicks that brought no news */
    int64_t kick_park_ns; /* how long its next empty kick over the rate waits; 0 = a period */
    uint64_t kick_mark;   /* news_mark after its last kick: a kick is empty if it has not moved */
    int pending;          /* SQEs in flight for this slot */
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
    int has_stats_group;
    gid_t stats_gid; /* POSD_STATS_GROUP */
    int stop;
    int64_t started_at;
    uint64_t next_client_id;
    struct pos_sched_device device;
    struct sched_core *core;
    struct sched_grant grants[POSD_MAX_CLIENTS];
    struct posd_client clients[POSD_MAX_CLIENTS];
};

int64_t posd_now(void);

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
/* A message arrived on C's socket (LEN bytes in c->rx). Returns 0 or -1 to drop C. */
int posd_client_message(struct posd *d, struct posd_client *c, size_t len);
/* Looks up the group whose members see every client in STATS (POSD_STATS_GROUP), at start
 * and at every reload. */
void posd_lookup_stats_group(struct posd *d);
/* Re-applies the configuration to every client (after SIGHUP). */
void posd_clients_reconfigure(struct posd *d);

/* engine.c: the adapter between the clients' shared memory and the scheduling core */
/* The core's tunables from the configuration. */
void posd_engine_params(const struct posd_config *cfg, struct sched_params *p);
/* Creates the core (policy from d->policy). Returns 0 or a negative errno. */
int posd_engine_init(struct posd *d);
/* Reads every client's rings into the core, decides, publishes grants. Returns the delay in
 * ns until the next tick is wanted, or -1 when nothing needs one (idle). */
int64_t posd_engine_tick(struct posd *d);
/* A client registered / left. */
int posd_engine_add(struct posd *d, struct posd_client *c);
void posd_engine_remove(struct posd *d, struct posd_client *c);
/* The client's policy settings changed (reload). */
void posd_engine_reconf(struct posd *d, struct posd_client *c);
/* A NAMES message (body of LEN bytes). Returns 0 or -1 when it is malformed. */
int posd_engine_names(struct posd_client *c, const uint8_t *body, size_t len);
/* Tells C's waiting threads that posd is going away (they launch freely from now on). */
void posd_engine_release(struct posd_client *c);
/* Fills a stats reply (header excluded) into BUF; returns its length. It lists every client
 * when ALL, else only those of uid UID. */
size_t posd_engine_stats(struct posd *d, void *buf, size_t cap, int all, uid_t uid);

/* loop.c */
int posd_loop(struct posd *d);
void posd_arm_tick(struct posd *d, int64_t delay_ns);
/* Makes sure housekeeping runs at AT (CLOCK_MONOTONIC ns) at the latest. */
void posd_arm_house(struct posd *d, int64_t at);

#endif
