/* The discrete soft actor-critic of possim train (see possim_sac.h for the losses): an actor
 * and two critics on sched/nn.h, Polyak targets, a tuned temperature and a replay ring. Pure:
 * no I/O, no clock; memory and maths from libc only, all of it allocated by sac_init (an
 * update allocates nothing).
 *
 * Conventions beyond the header:
 *   - sac_losses adds into the gradient arguments the gradients of the MEAN losses over its N
 *     transitions (so sac_update steps Adam with scale 1 on freshly zeroed buffers); G_Q1 is
 *     the gradient of L_Q1 alone, G_Q2 of L_Q2 alone.
 *   - sac_stats.q_loss is the MEAN of the two critic losses, (L_Q1 + L_Q2) / 2 (so its
 *     derivative with respect to Q1's parameters is half of G_Q1).
 *   - entropy is the batch's mean of -sum_a pi(a|s) log pi(a|s); alpha in sac_losses' stats is
 *     the temperature the losses used, in sac_update's the one after the step.
 *   - log pi is taken as z - logsumexp(z) over the allowed actions (never log of a float p,
 *     which may have underflowed to 0).
 *   - a transition whose action is out of range has no critic term, one whose mask allows no
 *     action no actor or alpha term (each such term counts 0 in the batch mean); a next state
 *     whose mask allows none, or a discount of 0, has value 0 (its networks are not run).
 *   - a NULL mask allows every action (as in nn_softmax_masked). */
#include "tools/possim_sac.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- set-up -------------------------------------------------------------------------------- */

static int config_valid(const struct sac_config *c)
{
    if (c->features < 1 || c->features > SAC_MAX_FEATURES)
        return 0;
    if (c->actions < 1 || c->actions > SAC_MAX_ACTIONS)
        return 0;
    if (c->nhidden < 1 || c->nhidden > NN_MAX_LAYERS - 1)
        return 0;
    for (int l = 0; l < c->nhidden; l++)
        if (c->hidden[l] < 1 || c->hidden[l] > NN_MAX_DIM)
            return 0;
    if (c->batch < 1 || c->batch > 4096)
        return 0;
    /* The batch's indices are ints. */
    if (c->replay < (size_t)c->batch || c->replay > (size_t)INT_MAX ||
        c->replay > SIZE_MAX / sizeof(struct sac_transition))
        return 0;
    if (!(c->lr > 0.0f) || !isfinite(c->lr))
        return 0;
    if (!(c->tau > 0.0f && c->tau <= 1.0f))
        return 0;
    if (!(c->alpha0 > 0.0f) || !isfinite(c->alpha0))
        return 0;
    if (!(c->prior_p >= 0.0f && c->prior_p < 1.0f) || (c->prior_p > 0 && c->prior_action < 0))
        return -EINVAL;
    if (!(c->target_entropy >= 0.0f && c->target_entropy <= (c->prior_p > 0 ? 10.0f : 1.0f)))
        return 0;
    if (c->prior_action < -1 || c->prior_action >= c->actions)
        return 0;
    if (c->prior_action >= 0 && !isfinite(c->prior_logit))
        return 0;
    return 1;
}

int sac_init(struct sac *s, const struct sac_config *cfg)
{
    memset(s, 0, sizeof *s);
    if (!cfg || !config_valid(cfg))
        return -EINVAL;
    s->cfg = *cfg;
    int dims[NN_MAX_LAYERS + 1], nl = cfg->nhidden + 1;
    dims[0] = cfg->features;
    for (int l = 0; l < cfg->nhidden; l++)
        dims[l + 1] = cfg->hidden[l];
    dims[nl] = cfg->actions;

    int rc;
    if ((rc = nn_mlp_init(&s->actor, nl, dims)) || (rc = nn_mlp_init(&s->q1, nl, dims)) ||
        (rc = nn_mlp_init(&s->q2, nl, dims)))
        goto fail;
    s->rng = cfg->seed;
    nn_mlp_randomize(&s->actor, &s->rng, 0.01f); /* a near-uniform policy to start */
    nn_mlp_randomize(&s->q1, &s->rng, 1.0f);
    nn_mlp_randomize(&s->q2, &s->rng, 1.0f);
    if (cfg->prior_action >= 0) /* the last layer's biases are the last ACTIONS floats */
        s->actor.p[s->actor.nparams - (size_t)cfg->actions + (size_t)cfg->prior_action] =
            cfg->prior_logit;
    if ((rc = nn_mlp_copy(&s->q1t, &s->q1)) || (rc = nn_mlp_copy(&s->q2t, &s->q2)))
        goto fail;

    if ((rc = nn_adam_init(&s->adam_actor, s->actor.nparams, cfg->lr)) ||
        (rc = nn_adam_init(&s->adam_q1, s->q1.nparams, cfg->lr)) ||
        (rc = nn_adam_init(&s->adam_q2, s->q2.nparams, cfg->lr)) ||
        (rc = nn_adam_init(&s->adam_alpha, 1, cfg->lr)))
        goto fail;
    s->log_alpha = logf(cfg->alpha0);

    rc = -ENOMEM;
    size_t nacts = nn_mlp_acts(&s->actor); /* every network has the same shape */
    s->buf = malloc(cfg->replay * sizeof *s->buf);
    s->act = malloc(3 * nacts * sizeof *s->act); /* q1, q2 and the actor at s */
    s->act2 = malloc(nacts * sizeof *s->act2);   /* the networks at s', sac_act, sac_policy */
    s->scratch = malloc(nn_mlp_scratch(&s->actor) * sizeof *s->scratch);
    s->g_actor = malloc(s->actor.nparams * sizeof *s->g_actor);
    s->g_q1 = malloc(s->q1.nparams * sizeof *s->g_q1);
    s->g_q2 = malloc(s->q2.nparams * sizeof *s->g_q2);
    s->idx = malloc((size_t)cfg->batch * sizeof *s->idx);
    if (!s->buf || !s->act || !s->act2 || !s->scratch || !s->g_actor || !s->g_q1 || !s->g_q2 ||
        !s->idx)
        goto fail;
    return 0;
fail:
    sac_free(s);
    return rc;
}

void sac_free(struct sac *s)
{
    nn_mlp_free(&s->actor);
    nn_mlp_free(&s->q1);
    nn_mlp_free(&s->q2);
    nn_mlp_free(&s->q1t);
    nn_mlp_free(&s->q2t);
    nn_adam_free(&s->adam_actor);
    nn_adam_free(&s->adam_q1);
    nn_adam_free(&s->adam_q2);
    nn_adam_free(&s->adam_alpha);
    free(s->buf);
    free(s->act);
    free(s->act2);
    free(s->scratch);
    free(s->g_actor);
    free(s->g_q1);
    free(s->g_q2);
    free(s->idx);
    memset(s, 0, sizeof *s);
}

/* ---- acting -------------------------------------------------------------------------------- */

static int allowed(const uint8_t *mask, int a)
{
    return !mask || mask[a];
}

void sac_policy(struct sac *s, const float *x, const uint8_t *mask, float *p)
{
    const float *z = nn_mlp_forward(&s->actor, x, s->act2);
    nn_softmax_masked(z, mask, s->cfg.actions, p);
}

int sac_act(struct sac *s, const float *x, const uint8_t *mask, int explore)
{
    int na = s->cfg.actions;
    const float *z = nn_mlp_forward(&s->actor, x, s->act2);
    float p[SAC_MAX_ACTIONS];
    if (nn_softmax_masked(z, mask, na, p) == -INFINITY)
        return -1;
    if (!explore) {
        int best = -1; /* by the logits: probabilities may tie at 0 or 1 */
        for (int a = 0; a < na; a++)
            if (allowed(mask, a) && (best < 0 || z[a] > z[best]))
                best = a;
        return best;
    }
    double u = nn_rng_uniform(&s->rng), c = 0;
    int last = -1; /* the last allowed action of some probability: rounding's fallback */
    for (int a = 0; a < na; a++) {
        if (!allowed(mask, a) || !(p[a] > 0.0f))
            continue;
        last = a;
        c += p[a];
        if (u < c)
            return a;
    }
    if (last < 0) /* no probability above 0 (a NaN network): any allowed action */
        for (int a = 0; a < na; a++)
            if (allowed(mask, a))
                return a;
    return last;
}

/* ---- learning ------------------------------------------------------------------------------ */

void sac_store(struct sac *s, const struct sac_transition *t)
{
    s->buf[s->next] = *t;
    s->next = (s->next + 1) % s->cfg.replay;
    if (s->n < s->cfg.replay)
        s->n++;
}

/* log pi0(A | MASK): the reference policy (cfg.prior_p to the prior action, the rest alike,
 * over the actions MASK allows); 0 without one (plain entropy). */
static double ref_logp(const struct sac *s, const uint8_t *mask, int a)
{
    const struct sac_config *c = &s->cfg;
    if (!(c->prior_p > 0) || c->prior_action < 0)
        return 0;
    int na = c->actions, others = 0, has_prior = 0;
    for (int k = 0; k < na; k++) {
        if (!mask[k])
            continue;
        if (k == c->prior_action)
            has_prior = 1;
        else
            others++;
    }
    double rest = others ? (1.0 - c->prior_p) / (na - 1) : 0;
    double total = (has_prior ? c->prior_p : 0) + rest * others;
    double pa = a == c->prior_action ? c->prior_p : rest;
    return total > 0 && pa > 0 ? log(pa / total) : 0;
}

/* The value of S' under the current actor and the targets: sum over MASK2's actions of
 * pi(a'|s') (min_j Qtarg_j(s', a') - alpha log pi(a'|s')); 0 with none allowed. */
static double next_value(struct sac *s, const struct sac_transition *t, float alpha)
{
    int na = s->cfg.actions;
    float z[SAC_MAX_ACTIONS], p[SAC_MAX_ACTIONS], qa[SAC_MAX_ACTIONS];
    memcpy(z, nn_mlp_forward(&s->actor, t->s2, s->act2), (size_t)na * sizeof *z);
    float lse = nn_softmax_masked(z, t->mask2, na, p);
    if (lse == -INFINITY)
        return 0;
    memcpy(qa, nn_mlp_forward(&s->q1t, t->s2, s->act2), (size_t)na * sizeof *qa);
    const float *qb = nn_mlp_forward(&s->q2t, t->s2, s->act2);
    double v = 0;
    for (int a = 0; a < na; a++) {
        if (!t->mask2[a])
            continue;
        double q = fmin(qa[a], qb[a]);
        v += p[a] * (q - (double)alpha * ((double)z[a] - lse - ref_logp(s, t->mask2, a)));
    }
    return v;
}

/* sac_losses over the transitions BASE[IDX[i]] (IDX NULL: BASE[i]), i < N. */
static void losses(struct sac *s, const struct sac_transition *base, const int *idx, int n,
                   struct sac_stats *st, float *g_q1, float *g_q2, float *g_actor,
                   float *g_log_alpha)
{
    int na = s->cfg.actions;
    size_t nacts = nn_mlp_acts(&s->actor);
    float *act_q1 = s->act, *act_q2 = s->act + nacts, *act_pi = s->act + 2 * nacts;
    float alpha = expf(s->log_alpha);
    double lq1 = 0, lq2 = 0, lpi = 0, lal = 0, ent = 0, g_la = 0;
    double inv = n > 0 ? 1.0 / n : 0;

    for (int i = 0; i < n; i++) {
        const struct sac_transition *t = &base[idx ? idx[i] : i];
        const float *q1 = nn_mlp_forward(&s->q1, t->s, act_q1);
        const float *q2 = nn_mlp_forward(&s->q2, t->s, act_q2);
        const float *z = nn_mlp_forward(&s->actor, t->s, act_pi);

        /* The critics, against a target through which no gradient flows. */
        if (t->a >= 0 && t->a < na) {
            double y = t->r;
            if (t->d != 0.0f)
                y += (double)t->d * next_value(s, t, alpha);
            double e1 = q1[t->a] - y, e2 = q2[t->a] - y;
            lq1 += 0.5 * e1 * e1;
            lq2 += 0.5 * e2 * e2;
            float gout[SAC_MAX_ACTIONS] = {0};
            if (g_q1) {
                gout[t->a] = (float)(e1 * inv);
                nn_mlp_backward(&s->q1, act_q1, gout, g_q1, NULL, s->scratch);
            }
            if (g_q2) {
                gout[t->a] = (float)(e2 * inv);
                nn_mlp_backward(&s->q2, act_q2, gout, g_q2, NULL, s->scratch);
            }
        }

        /* The actor and the temperature, the critics' values taken as constants. */
        float p[SAC_MAX_ACTIONS];
        float lse = nn_softmax_masked(z, t->mask, na, p);
        if (lse == -INFINITY)
            continue;
        double f[SAC_MAX_ACTIONS], pf = 0, plogp = 0;
        int allowed_n = 0;
        for (int a = 0; a < na; a++) {
            if (!t->mask[a])
                continue;
            allowed_n++;
            double logp = (double)z[a] - lse - ref_logp(s, t->mask, a);
            f[a] = alpha * logp - fmin(q1[a], q2[a]);
            pf += p[a] * f[a];
            plogp += p[a] * logp;
        }
        lpi += pf;
        ent -= plogp;
        /* with a reference policy plogp is KL(pi || pi0), aimed at target_entropy nats */
        double h = s->cfg.prior_p > 0 ? -(double)s->cfg.target_entropy
                                      : (double)s->cfg.target_entropy * log((double)allowed_n);
        lal += -(double)s->log_alpha * (plogp + h);
        g_la += -(plogp + h);
        if (g_actor) {
            /* dL/dz_k = p_k (f_k - sum_a p_a f_a); the forbidden get 0. */
            float gout[SAC_MAX_ACTIONS];
            for (int a = 0; a < na; a++)
                gout[a] = t->mask[a] ? (float)(p[a] * (f[a] - pf) * inv) : 0.0f;
            nn_mlp_backward(&s->actor, act_pi, gout, g_actor, NULL, s->scratch);
        }
    }
    if (g_log_alpha)
        *g_log_alpha += (float)(g_la * inv);
    if (st) {
        st->q_loss = 0.5 * (lq1 + lq2) * inv; /* the mean of the two critics' losses */
        st->actor_loss = lpi * inv;
        st->alpha_loss = lal * inv;
        st->entropy = ent * inv;
        st->alpha = alpha;
    }
}

void sac_losses(struct sac *s, const struct sac_transition *t, int n, struct sac_stats *st,
                float *g_q1, float *g_q2, float *g_actor, float *g_log_alpha)
{
    losses(s, t, NULL, n, st, g_q1, g_q2, g_actor, g_log_alpha);
}

int sac_update(struct sac *s, struct sac_stats *st)
{
    int batch = s->cfg.batch;
    if (s->n < (size_t)batch)
        return 0;
    for (int i = 0; i < batch; i++) {
        size_t k = (size_t)(nn_rng_uniform(&s->rng) * (double)s->n);
        s->idx[i] = (int)(k < s->n ? k : s->n - 1);
    }
    memset(s->g_q1, 0, s->q1.nparams * sizeof *s->g_q1);
    memset(s->g_q2, 0, s->q2.nparams * sizeof *s->g_q2);
    memset(s->g_actor, 0, s->actor.nparams * sizeof *s->g_actor);
    float g_la = 0;
    struct sac_stats tmp;
    /* Every loss and gradient from the parameters before any step. */
    losses(s, s->buf, s->idx, batch, &tmp, s->g_q1, s->g_q2, s->g_actor, &g_la);
    /* The gradients are of the mean losses already: scale 1. */
    nn_adam_step(&s->adam_q1, s->q1.p, s->g_q1, 1.0f);
    nn_adam_step(&s->adam_q2, s->q2.p, s->g_q2, 1.0f);
    nn_adam_step(&s->adam_actor, s->actor.p, s->g_actor, 1.0f);
    nn_adam_step(&s->adam_alpha, &s->log_alpha, &g_la, 1.0f);
    nn_polyak(s->q1t.p, s->q1.p, s->q1.nparams, s->cfg.tau);
    nn_polyak(s->q2t.p, s->q2.p, s->q2.nparams, s->cfg.tau);
    s->updates++;
    if (st) {
        *st = tmp;
        st->alpha = expf(s->log_alpha);
    }
    return 1;
}
