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
#include "sched/policy/policy.h"

#define POSD_MAX_CLIENTS  256
#define POSD_SLOW_TICK_NS 10000000LL  /* accounting only: clients that launch freely */
#define POSD_STALL_NS     100000000LL /* an unpublished submission slot is skipped after this */

/* What an io_uring completion is about (user_data = kind | slot << 8 | gen << 32). */
enum posd_event {
    EV_ACCEPT = 1,
    EV_SIGNAL,
    EV_TICK,
    EV_CLIENT_RECV,
    EV_CLIENT_KICK,
    EV_CANCEL,
};

struct posd_client {
    int used;
    uint32_t gen; /* bumped when the slot is reused: stale completions are ignored */
    uint32_t id;
    int sock;
    int kick_fd; /* eventfd the client writes to wake posd */
    int is_tool; /* a tool connection (posstat), not a GPU client */
    int registered;
    struct pos_client_shm *shm;
    size_t shm_size;
    struct posd_identity ident;
    struct posd_client_policy pol;
    /* posd's own accounting: never read back from shared memory */
    uint64_t sub_head; /* next seq to read is sub_head + 1 */
    uint64_t done_head;
    uint64_t submitted, launched, completed, granted;
    uint32_t mode;
    int held;
    uint64_t stall_seq;
    int64_t stall_since;
    int64_t last_update;
    uint64_t busy_ns;
    int64_t served_ns; /* guard period */
    int64_t connected_at;
    uint64_t skipped; /* submission slots never published (a thread died mid-launch) */
    /* I/O buffers of the pending recv and kick read */
    uint8_t rx[POS_REQ_MAX];
    uint64_t kick_buf;
    int kick_armed;
    int pending; /* SQEs in flight for this slot */
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
    int stop;
    int64_t started_at;
    int64_t period_start;
    int64_t last_update;
    uint64_t dev_busy_ns;
    uint64_t retired_submitted, retired_granted, retired_completed; /* of departed clients */
    uint64_t next_client_id;
    struct posd_client clients[POSD_MAX_CLIENTS];
    struct pos_sched_client view[POSD_MAX_CLIENTS]; /* scratch for the policy */
};

int64_t posd_now(void);

/* log.c */
void posd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void posd_set_log_level(int level);

/* clients.c: registration and teardown */
int posd_listen(struct posd *d);
void posd_unlink_socket(struct posd *d);
struct posd_client *posd_client_new(struct posd *d, int sock);
void posd_client_close(struct posd *d, struct posd_client *c, const char *why);
/* A message arrived on C's socket (LEN bytes in c->rx). Returns 0 or -1 to drop C. */
int posd_client_message(struct posd *d, struct posd_client *c, size_t len);
/* Re-applies the configuration to every client (after SIGHUP). */
void posd_clients_reconfigure(struct posd *d);

/* engine.c: accounting, decisions, grants */
/* Reads every client's rings, runs the policy, publishes grants. Returns the delay in ns
 * until the next tick is wanted, or -1 when nothing needs one (idle). */
int64_t posd_engine_tick(struct posd *d);
/* Reads what C left in its rings (it is leaving: its last completions count). */
void posd_engine_drain(struct posd_client *c);
/* Tells C's waiting threads that posd is going away (they launch freely from now on). */
void posd_engine_release(struct posd_client *c);
/* Fills a stats reply (header excluded) into BUF; returns its length. */
size_t posd_engine_stats(struct posd *d, void *buf, size_t cap);

/* loop.c */
int posd_loop(struct posd *d);
void posd_arm_tick(struct posd *d, int64_t delay_ns);

#endif
