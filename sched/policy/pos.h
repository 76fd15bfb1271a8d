/* The pos policy's decisions with one of them left to another policy: learned
 * (sched/policy/learned.c) keeps pos's ranks and rules and chooses, where pos would, how far an
 * outranked client's prefix goes. Pure code, as pos.c. */
#ifndef POS_SCHED_POLICY_POS_H
#define POS_SCHED_POLICY_POS_H

#include <stdint.h>

#include "sched/policy/policy.h"

struct pos_state;

/* pos's parameters, declared alike by the policies that take them (pos, learned) */
#define POS_PARAM_CORUN_BUDGET                                                                     \
    {                                                                                              \
        .name = "corun_budget", .type = POS_PARAM_NUMBER, .def = 1.2, .lo = 1, .hi = 100,          \
        .help = "co-run slowdown a more important kernel may show"                                 \
    }
#define POS_PARAM_CORUN_ROOM                                                                       \
    {                                                                                              \
        .name = "corun_room", .type = POS_PARAM_NUMBER, .def = 1, .lo = 1, .hi = 16,               \
        .help = "SMs filled beside a busy more important client, x the device's"                   \
    }
#define POS_PARAM_SCHEDULE_FILE                                                                    \
    {                                                                                              \
        .name = "schedule", .type = POS_PARAM_SCHEDULE,                                            \
        .help = "a stage schedule (possim search -w) to follow"                                    \
    }

/* What pos worked out for an outranked client C with operators queued, as it chose how many of
 * C's operators may be in flight. */
struct pos_choice {
    struct pos_sched_client *c;
    int busy_above;       /* a client that outranks C has work */
    int concurrent;       /* the device runs processes at once (MPS) */
    int contended;        /* a kernel of a busy client above slows beside others, is unlearnt, or
                           * its client is guarded: pos runs nothing beside it */
    int plain;            /* a client above is guarded or was contended: pos's plain window */
    int unlearnt;         /* C's own kernels in flight or next are not learnt yet */
    int has_slo;          /* C has an SLO */
    int above_n;          /* clients that outrank C */
    double above;         /* SM demand (fraction of the device) of the busy clients above */
    double above_max;     /* the largest demands of every client above, summed */
    double beside;        /* SM demand in flight of the clients that do not outrank C */
    double mine;          /* ... of C's operators in flight */
    double next_max;      /* the largest demand of C's next queued operators */
    double slack;         /* the least latest-start slack of a busy SLO client above, in its SLOs
                           * ((rt - now) / SLO); +inf: none */
    double above_runq_ms; /* the largest run-queue delay of a client above (telemetry; 0 without) */
    uint64_t inflight;    /* C's operators in flight */
    uint64_t queued;      /* ... queued */
    uint64_t limit;       /* pos's choice: operators C may have in flight (0: held) */
    uint64_t most;        /* the most the view allows: C's class cap, else the view's credits */
};

/* Chooses the operators C may have in flight, given what pos chose (CH->limit). A result
 * that is not above C's operators in flight holds C (but for the starvation guard) while a
 * client above is busy; with none busy, C gets a window of at least one more operator (work
 * is conserved: nothing more important has work). */
typedef uint64_t (*pos_choose_fn)(void *arg, const struct pos_sched_view *v,
                                  const struct pos_choice *ch);

/* pos's state, with its parameters (corun_budget, schedule) from ARGS. 0, -ENOMEM. */
int pos_state_new(struct pos_state **s, const struct pos_policy_args *args);
void pos_state_free(struct pos_state *s);
/* pos's decision over V, CHOOSE (NULL: pos's own choice) asked for every outranked client
 * with operators queued, unless a searched schedule is followed. */
int64_t pos_decide_with(struct pos_state *s, struct pos_sched_view *v, pos_choose_fn choose,
                        void *arg);
void pos_state_complete(struct pos_state *s, const struct pos_sched_client *c);
const char *pos_state_note(struct pos_state *s, const char *name);

#endif
