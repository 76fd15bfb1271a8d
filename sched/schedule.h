/* Static stage schedules for a known mix of models (docs/schedule.md), shared by posd and
 * possim: the parsed file, its parser, and the follower a policy calls to run the schedule
 * while exactly its mix is running.
 *
 * A schedule is for one round of the mix: each model runs one request, stage after stage with
 * a barrier between stages; in a stage each model runs a contiguous run of its next operators
 * (possibly none). A model is identified by what posd sees itself, never by what a client
 * says: the kernel keys (64-bit FNV-1a of the mangled names) of one request, in launch order.
 *
 * Pure code: the parser takes text, the follower takes the policy's view. No I/O, no clock. */
#ifndef POS_SCHED_SCHEDULE_H
#define POS_SCHED_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "sched/policy/policy.h"

#define POS_SCHEDULE_VERSION    1
#define POS_SCHEDULE_MAX_MODELS 16
#define POS_SCHEDULE_MAX_OPS    16384 /* per model: the core's window (SCHED_WINDOW) */
#define POS_SCHEDULE_MAX_STAGES 65536
#define POS_SCHEDULE_NAME_MAX   64
#define POS_SCHEDULE_MAX_SLOTS  256 /* client slots a follower tracks (SCHED_MAX_CLIENTS) */

struct pos_schedule_model {
    char name[POS_SCHEDULE_NAME_MAX]; /* for people; identity is nops and keys */
    uint32_t nops;
    uint64_t *keys; /* [nops]: the kernel keys of one request, in launch order */
    int rep;        /* lowest model index with the same nops and keys (interchangeable) */
};

struct pos_schedule {
    char device[POS_SCHEDULE_NAME_MAX]; /* what it was searched for: preset name */
    int concurrent;                     /* mode: mps (1) or timeslice (0) */
    uint32_t sm_count;
    double predicted_us; /* one round, as the search predicted */
    size_t nmodels;
    struct pos_schedule_model models[POS_SCHEDULE_MAX_MODELS];
    size_t nstages;
    uint32_t *runs;    /* [nstages * nmodels]: operators model m runs in stage k */
    double *stage_us;  /* [nstages]: each stage's predicted cost */
    uint32_t *run_end; /* [nstages * nmodels]: model m's operators through stage k */
};

/* Parses TEXT (LEN bytes), the contents of the schedule file PATH. Returns 0, or -EINVAL with
 * "PATH:LINE: what" in ERR (-ENOMEM: "PATH: out of memory"); on failure *OUT is zeroed. */
int pos_schedule_parse(const char *path, const char *text, size_t len, struct pos_schedule *out,
                       char *err, size_t errlen);
void pos_schedule_free(struct pos_schedule *s);

/* Sets s->run_end and each model's rep from runs and keys (the parser does; a program that
 * builds a schedule in memory calls it). Returns 0, or -EINVAL when a model's runs do not add
 * up to its operators. */
int pos_schedule_finish(struct pos_schedule *s);

/* ---- the follower --------------------------------------------------------------------------- */

/* What the follower knows of one client slot: the request it is watching and the models whose
 * keys agree with every operator of it seen so far. */
struct pos_schedule_track {
    uint32_t id;        /* client id (0: none) */
    uint64_t cursor;    /* every seq <= cursor was seen (or is lost: gap) */
    uint64_t req;       /* request number of the request being watched */
    uint64_t req_start; /* its first seq */
    uint32_t cand;      /* models (bit m) whose keys match it so far */
    int gap;            /* an operator of it was never seen */
    int ended;          /* it ended (a synchronisation covered it all) */
    int last_model;     /* rep of the model its last whole request was; -1: unknown */
    uint64_t last_end;  /* last seq of that request */
    int model;          /* the model it is bound to while following; -1: none */
    uint64_t anchor;    /* ... from this seq on, op k must be keys[(k - anchor) % nops] */
    int off;            /* ... and one was not (or was never seen) */
};

enum pos_schedule_phase {
    POS_SCHEDULE_UNMATCHED = 0, /* the mix is not the schedule's: the caller decides */
    POS_SCHEDULE_ALIGN,         /* matched: every client finishes its current request */
    POS_SCHEDULE_RUN,           /* following the stages */
};

struct pos_schedule_state {
    const struct pos_schedule *s; /* what the state was built for; a new one resets it */
    int phase;                    /* enum pos_schedule_phase */
    size_t stage;
    uint32_t bind[POS_SCHEDULE_MAX_MODELS];      /* model -> client id */
    uint64_t base[POS_SCHEDULE_MAX_MODELS];      /* seq of op 0 of its round's request */
    uint64_t seen_sub[POS_SCHEDULE_MAX_MODELS];  /* its launches at the last decision */
    int64_t changed_ns[POS_SCHEDULE_MAX_MODELS]; /* last decision that saw it busy or launch */
    int64_t idle_ns; /* a model idle this long with its run unfinished unmatches */
    int64_t next_ns; /* when the follower wants to decide again (INT64_MAX: none) */
    uint64_t rounds, matches, unmatches;
    const char *why; /* why it is not following (a static string), NULL while it follows */
    struct pos_schedule_track track[POS_SCHEDULE_MAX_SLOTS];
};

/* Resets ST for S (NULL: none). idle_ns gets its default, 5 ms. */
void pos_schedule_state_init(struct pos_schedule_state *st, const struct pos_schedule *s);

/* Sees C's operators that the follower has not seen yet. Call from the policy's on_complete
 * (an operator is forgotten once complete) and decide calls it for every client. */
void pos_schedule_observe(struct pos_schedule_state *st, const struct pos_schedule *s,
                          const struct pos_sched_client *c);

/* Decides V by schedule S when exactly S's mix is running and every client is where S expects
 * it: sets mode, new_granted, window and held of every client (each grant ends where its run in
 * the current stage ends; a stage begins when every run of the previous one completed) and
 * returns 1. Returns 0 and leaves V alone otherwise (not the mix, a client off its position, a
 * client idle in a stage): the caller decides. A grant is never taken back and launch order
 * holds (grants are prefixes). */
int pos_schedule_decide(struct pos_schedule_state *st, const struct pos_schedule *s,
                        struct pos_sched_view *v);

/* The follower's state in words, for a policy's note: "POLICY: following the schedule (...)"
 * or "POLICY: schedule not followed (OTHERWISE decides): why; N rounds followed", into BUF.
 * NULL while no schedule was ever matched. */
const char *pos_schedule_note(const struct pos_schedule_state *st, const char *policy,
                              const char *otherwise, char *buf, size_t len);

#endif
