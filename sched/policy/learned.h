/* Policy learned (docs/learned.md): pos's ranks and rules, with the choice pos makes by hand
 * for an outranked client with work queued (how many of its operators may be in flight beside,
 * or below, the clients that outrank it) made by a small network trained in possim by a
 * discrete soft actor-critic (possim train, tools/possim_sac.c). What the network sees of a
 * choice (its state), what it may choose (its actions) and how an action becomes a grant are
 * here, shared by the policy and the trainer. Pure code. */
#ifndef POS_SCHED_POLICY_LEARNED_H
#define POS_SCHED_POLICY_LEARNED_H

#include <stddef.h>
#include <stdint.h>

#include "sched/policy/pos.h"

struct pos_weights;

/* The state of one choice: POS_LEARNED_FEATURES numbers, each about 0..1 (pos_learned_features
 * says which). */
#define POS_LEARNED_FEATURES 20
/* The actions: operators the client may have in flight, against pos's choice P (struct
 * pos_choice's limit) and its operators in flight F:
 *   0 hold (F: nothing more while a client above is busy; not allowed while none is: work is
 *     conserved), 1 one more (F + 1), 2 half of pos's (max(1, ceil(P / 2))), 3 pos's (P),
 *   4 one more than pos's (max(P, F) + 1), 5 two more (max(P, F) + 2);
 * never more than the client may have (its class cap, else the view's credits). Every action
 * stays near pos's: a grant is never taken back, so one far larger release (all the credits,
 * as a first version allowed) let a batch client fill the device for many decisions, and in
 * training a few such choices in a hundred took the SLO attainment of the mixes from 0.84 to
 * 0.40. */
#define POS_LEARNED_ACTIONS 6
#define POS_LEARNED_POS     3 /* the action that is pos's own choice */

/* The state of choice CH in V into X (POS_LEARNED_FEATURES floats), the actions allowed into
 * MASK (POS_LEARNED_ACTIONS bytes, 1 allowed). */
void pos_learned_features(const struct pos_sched_view *v, const struct pos_choice *ch, float *x,
                          uint8_t *mask);
/* The operators action A lets CH's client have in flight. */
uint64_t pos_learned_limit(const struct pos_choice *ch, int a);

/* Whether W can drive the policy: an "actor" network of POS_LEARNED_FEATURES inputs and
 * POS_LEARNED_ACTIONS outputs. 0, or -EINVAL with what is wrong in ERR (no file name). */
int pos_learned_check(const struct pos_weights *w, char *err, size_t errlen);

/* possim train's learner, handed to the policy through pos_policy_args.ext: it sees every
 * decision's view (for its reward) and makes every choice (exploring, or as its actor), and
 * the policy keeps no weights of its own. */
struct pos_learned_learner {
    void *arg;
    /* at each decision, before its choices */
    void (*observe)(void *arg, const struct pos_sched_view *v);
    /* the action for the choice of client C with state X and allowed actions MASK */
    int (*act)(void *arg, const struct pos_sched_view *v, const struct pos_sched_client *c,
               const float *x, const uint8_t *mask);
    /* possim's own truth for the reward, never the policy's (NULL: not wanted): before each
     * decision at NOW_NS, for each client CLIENT (possim's index) with an SLO of SLO_MS, its
     * requests arrived and not yet complete, and its requests late so far (complete after
     * their SLO, or still running past it). posd's view starts a request at its first
     * launch, blind to the time it queued in its process. */
    void (*slo_state)(void *arg, int client, double slo_ms, uint64_t outstanding, uint64_t late,
                      int64_t now_ns);
};

/* The action of network NET (the actor) for state X among those MASK allows: its most likely.
 * ACT holds nn_mlp_acts(NET) floats. */
struct nn_mlp;
int pos_learned_greedy(const struct nn_mlp *net, const float *x, const uint8_t *mask, float *act);

#endif
