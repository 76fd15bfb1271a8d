/* A discrete soft actor-critic (Haarnoja et al.; the discrete form of Christodoulou, 2019), the
 * learner of possim train (tools/possim_train.c) and, in the POS paper, of MEOS: an actor
 * (a softmax over the allowed actions), two Q-networks with Polyak-averaged targets, an
 * entropy temperature tuned to a target entropy, and a replay buffer. Pure code (no I/O, no
 * clock), on sched/nn.h. Actions not allowed in a state (its mask) have probability 0 and are
 * never a target's.
 *
 * For a minibatch of transitions (s, mask, a, r, d, s', mask') with d the discount to s'
 * (0: s' ends the episode):
 *   target   y  = r + d * sum_a' pi(a'|s') (min_j Qtarg_j(s', a') - alpha log pi(a'|s'))
 *   critics  L_Q = mean over the batch of (Q_j(s, a) - y)^2 / 2, j = 1, 2
 *   actor    L_pi = mean of sum_a pi(a|s) (alpha log pi(a|s) - min_j Q_j(s, a))
 *   alpha    L_alpha = mean of -log(alpha) (sum_a pi(a|s) log pi(a|s) + H(s)), with H(s) the
 *            target entropy: TARGET_ENTROPY x log(actions allowed in s)
 * each minimised by one Adam step; then Qtarg_j += tau (Q_j - Qtarg_j). */
#ifndef POS_TOOLS_POSSIM_SAC_H
#define POS_TOOLS_POSSIM_SAC_H

#include <stddef.h>
#include <stdint.h>

#include "sched/nn.h"

#define SAC_MAX_FEATURES 64
#define SAC_MAX_ACTIONS  16

struct sac_config {
    int features, actions;     /* 1..SAC_MAX_FEATURES, 1..SAC_MAX_ACTIONS */
    int nhidden;               /* hidden layers, 1..NN_MAX_LAYERS - 1 */
    int hidden[NN_MAX_LAYERS]; /* their units */
    float lr;                  /* Adam's step for all three (e.g. 3e-4) */
    float tau;                 /* Polyak factor of the targets (e.g. 0.005) */
    float alpha0;              /* the starting temperature (e.g. 0.2) */
    float target_entropy;      /* the share of the largest entropy aimed at (e.g. 0.5) */
    int batch;                 /* minibatch (e.g. 64), 1..4096 */
    size_t replay;             /* transitions kept (the oldest replaced) */
    int prior_action;          /* an action the untrained actor prefers (-1: none) */
    float prior_logit;         /* its output bias at the start */
    float prior_p;             /* 0: maximum entropy as above; in (0, 1): relative entropy to a
                                * reference policy pi0 that gives the prior action PRIOR_P and
                                * the others the rest alike (over those allowed): every
                                * "log pi" above becomes log pi - log pi0, the "entropy"
                                * -KL(pi || pi0), and alpha aims at a KL of TARGET_ENTROPY nats
                                * (so the optimum is pi0 exp(Q / alpha), normalised: the prior
                                * action unless another is worth alpha log(pi0 ratio) more) */
    uint64_t seed;
};

struct sac_transition {
    float s[SAC_MAX_FEATURES];
    float s2[SAC_MAX_FEATURES];
    uint8_t mask[SAC_MAX_ACTIONS];
    uint8_t mask2[SAC_MAX_ACTIONS];
    int a;
    float r;
    float d; /* discount to s2: 0 ends the episode */
};

/* What an update did: the losses before its steps, the batch's mean entropy and alpha after. */
struct sac_stats {
    double q_loss, actor_loss, alpha_loss, entropy, alpha;
};

struct sac {
    struct sac_config cfg;
    struct nn_mlp actor, q1, q2, q1t, q2t;
    struct nn_adam adam_actor, adam_q1, adam_q2;
    float log_alpha;
    struct nn_adam adam_alpha; /* over log_alpha */
    struct sac_transition *buf;
    size_t n, next; /* transitions held, where the next goes */
    uint64_t rng;
    uint64_t updates;
    /* scratch: activations, gradients, the batch's indices */
    float *act, *act2, *scratch, *g_actor, *g_q1, *g_q2;
    int *idx;
};

/* Makes S from CFG: random networks (He-uniform, the actor's last layer small, the prior
 * action's bias PRIOR_LOGIT), targets equal to the critics, an empty buffer. 0, -EINVAL (a
 * configuration out of range), -ENOMEM. */
int sac_init(struct sac *s, const struct sac_config *cfg);
void sac_free(struct sac *s);

/* pi(.|x) over the allowed actions into P (actions floats; 0 for those MASK forbids). */
void sac_policy(struct sac *s, const float *x, const uint8_t *mask, float *p);
/* An action for X: drawn from pi (EXPLORE) or its most likely. -1 when MASK allows none. */
int sac_act(struct sac *s, const float *x, const uint8_t *mask, int explore);

/* Keeps T in the replay buffer (the oldest goes when it is full). */
void sac_store(struct sac *s, const struct sac_transition *t);
/* One update on a minibatch drawn from the buffer (nothing while it holds fewer than batch
 * transitions: returns 0 then, 1 after an update). ST (may be NULL) gets what it did. */
int sac_update(struct sac *s, struct sac_stats *st);

/* The losses of one update over the N transitions T (their critics, actor and alpha terms, as
 * above), with their gradients added into G_Q1, G_Q2 (the critics' nparams), G_ACTOR and
 * *G_LOG_ALPHA (any may be NULL): what sac_update steps on, for the tests' numeric checks. */
void sac_losses(struct sac *s, const struct sac_transition *t, int n, struct sac_stats *st,
                float *g_q1, float *g_q2, float *g_actor, float *g_log_alpha);

#endif
