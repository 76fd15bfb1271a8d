/* Tests tools/possim_sac.c: the critics', actor's and temperature's gradients that sac_losses
 * returns match central differences of its losses (masks forbidding actions, a terminal
 * transition, a next state with no action allowed); the losses equal a hand computation on a
 * one-feature, two-action network set by hand (so dropping the entropy from the target or the
 * actor, or taking the critics' max, fails); forbidden actions have probability 0, are never
 * acted and never a target's, whatever their values; a contextual bandit is learned; the same
 * seed and data give bit-identical networks, another seed others; configurations out of range
 * are refused; an update waits for a batch, reports the losses of its drawn batch before its
 * steps, steps every network and averages the targets; the losses stay finite when the policy's
 * other probabilities underflow; the temperature falls while the policy's entropy is above its
 * target and rises below it. */
#include "tests/cunit_main.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "tools/possim_sac.h"

static struct sac_config base_config(void)
{
    struct sac_config c = {
        .features = 3,
        .actions = 4,
        .nhidden = 2,
        .hidden = {7, 5},
        .lr = 1e-3f,
        .tau = 0.05f,
        .alpha0 = 0.2f,
        .target_entropy = 0.5f,
        .batch = 4,
        .replay = 16,
        .prior_action = -1,
        .prior_logit = 0,
        .seed = 1,
    };
    return c;
}

static float uniform(uint64_t *rng, float lo, float hi)
{
    return lo + (hi - lo) * (float)nn_rng_uniform(rng);
}

/* Every parameter of N drawn from [-1, 1): biases too, so that hidden units are on and off. */
static void scramble(struct nn_mlp *n, uint64_t *rng)
{
    for (size_t k = 0; k < n->nparams; k++)
        n->p[k] = uniform(rng, -1, 1);
}

static void scramble_all(struct sac *s, uint64_t seed)
{
    scramble(&s->actor, &seed);
    scramble(&s->q1, &seed);
    scramble(&s->q2, &seed);
    scramble(&s->q1t, &seed);
    scramble(&s->q2t, &seed);
}

/* N random transitions over FEATURES and ACTIONS: masks allowing a random nonempty subset
 * (T[0]'s forbids at least one action), the action an allowed one; T[1] terminal (d 0), T[2]'s
 * next state with no action allowed. */
static void random_transitions(struct sac_transition *t, int n, int features, int actions,
                               uint64_t seed)
{
    memset(t, 0, (size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) {
        for (int f = 0; f < features; f++) {
            t[i].s[f] = uniform(&seed, -1, 1);
            t[i].s2[f] = uniform(&seed, -1, 1);
        }
        int any = 0;
        for (int a = 0; a < actions; a++) {
            t[i].mask[a] = nn_rng_uniform(&seed) < 0.7;
            t[i].mask2[a] = nn_rng_uniform(&seed) < 0.7;
            any |= t[i].mask[a];
        }
        if (!any)
            t[i].mask[(int)(nn_rng_uniform(&seed) * actions)] = 1;
        if (i == 0) {
            t[i].mask[actions - 1] = 0;
            t[i].mask[0] = 1;
        }
        do
            t[i].a = (int)(nn_rng_uniform(&seed) * actions);
        while (!t[i].mask[t[i].a]);
        t[i].r = uniform(&seed, -1, 1);
        t[i].d = 0.9f;
    }
    if (n > 1)
        t[1].d = 0;
    if (n > 2)
        memset(t[2].mask2, 0, sizeof t[2].mask2);
}

/* ---- gradients against central differences ------------------------------------------------- */

enum which_loss { Q_LOSS, ACTOR_LOSS, ALPHA_LOSS };

static double loss_of(struct sac *s, const struct sac_transition *t, int n, enum which_loss w)
{
    struct sac_stats st;
    sac_losses(s, t, n, &st, NULL, NULL, NULL, NULL);
    return w == Q_LOSS ? st.q_loss : w == ACTOR_LOSS ? st.actor_loss : st.alpha_loss;
}

/* Checks G (NP floats) against FACTOR x the central differences of loss W in P's entries. */
static void check_gradient(struct sac *s, const struct sac_transition *t, int n, float *p,
                           size_t np, const float *g, double factor, enum which_loss w)
{
    const float eps = 1e-3f;
    int bad = 0;
    double gmax = 0;
    for (size_t k = 0; k < np; k++) {
        float saved = p[k], hi = saved + eps, lo = saved - eps;
        p[k] = hi;
        double lhi = loss_of(s, t, n, w);
        p[k] = lo;
        double llo = loss_of(s, t, n, w);
        p[k] = saved;
        double fd = factor * (lhi - llo) / ((double)hi - (double)lo);
        if (fabs(g[k] - fd) > 1e-3 + 2e-2 * fabs(fd)) {
            if (bad++ < 5)
                fprintf(stderr, "\n  parameter %zu: gradient %g, central difference %g", k,
                        (double)g[k], fd);
        }
        gmax = fmax(gmax, fabs(g[k]));
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(gmax > 0.02); /* not trivially 0 */
}

enum { NT = 6 };

static void setup_gradient_case(struct sac *s, struct sac_transition *t)
{
    struct sac_config c = base_config();
    CU_ASSERT_EQUAL_FATAL(sac_init(s, &c), 0);
    scramble_all(s, 42);
    s->log_alpha = logf(0.3f);
    random_transitions(t, NT, c.features, c.actions, 17);
}

static void test_critic_gradients_match_central_differences(void)
{
    struct sac s;
    struct sac_transition t[NT];
    setup_gradient_case(&s, t);
    float g1[s.q1.nparams], g2[s.q2.nparams];
    memset(g1, 0, sizeof g1);
    memset(g2, 0, sizeof g2);
    sac_losses(&s, t, NT, NULL, g1, g2, NULL, NULL);
    /* q_loss is the mean of the two critics' losses: its derivative is half of each's. */
    check_gradient(&s, t, NT, s.q1.p, s.q1.nparams, g1, 2.0, Q_LOSS);
    check_gradient(&s, t, NT, s.q2.p, s.q2.nparams, g2, 2.0, Q_LOSS);
    sac_free(&s);
}

static void test_actor_gradient_matches_central_differences(void)
{
    struct sac s;
    struct sac_transition t[NT];
    setup_gradient_case(&s, t);
    float g[s.actor.nparams];
    memset(g, 0, sizeof g);
    sac_losses(&s, t, NT, NULL, NULL, NULL, g, NULL);
    check_gradient(&s, t, NT, s.actor.p, s.actor.nparams, g, 1.0, ACTOR_LOSS);
    sac_free(&s);
}

static void test_gradients_are_added_into_the_buffers(void)
{
    struct sac s;
    struct sac_transition t[NT];
    setup_gradient_case(&s, t);
    size_t na = s.actor.nparams, nq = s.q1.nparams;
    float ga[na], ga2[na], gq[nq], gq2[nq], gl = 0, gl2 = 0.5f;
    memset(ga, 0, sizeof ga);
    memset(gq, 0, sizeof gq);
    for (size_t k = 0; k < na; k++)
        ga2[k] = 1.0f;
    for (size_t k = 0; k < nq; k++)
        gq2[k] = -1.0f;
    sac_losses(&s, t, NT, NULL, gq, NULL, ga, &gl);
    sac_losses(&s, t, NT, NULL, gq2, NULL, ga2, &gl2);
    for (size_t k = 0; k < na; k++)
        CU_ASSERT_DOUBLE_EQUAL(ga2[k], 1.0f + ga[k], 1e-6);
    for (size_t k = 0; k < nq; k++)
        CU_ASSERT_DOUBLE_EQUAL(gq2[k], -1.0f + gq[k], 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(gl2, 0.5f + gl, 1e-6);
    sac_free(&s);
}

static void test_alpha_gradient_matches_central_differences(void)
{
    struct sac s;
    struct sac_transition t[NT];
    setup_gradient_case(&s, t);
    float g = 0;
    sac_losses(&s, t, NT, NULL, NULL, NULL, NULL, &g);
    float saved = s.log_alpha, hi = saved + 1e-3f, lo = saved - 1e-3f;
    s.log_alpha = hi;
    double lhi = loss_of(&s, t, NT, ALPHA_LOSS);
    s.log_alpha = lo;
    double llo = loss_of(&s, t, NT, ALPHA_LOSS);
    s.log_alpha = saved;
    double fd = (lhi - llo) / ((double)hi - (double)lo);
    CU_ASSERT(fabs(g) > 1e-3);
    CU_ASSERT_DOUBLE_EQUAL(g, fd, 1e-3 + 1e-2 * fabs(fd));
    sac_free(&s);
}

/* ---- the losses by hand -------------------------------------------------------------------- */

/* One feature, one hidden unit, two actions: each network is W0, b0, W1 (2), b1 (2). The actor
 * is h = relu(x), z = (h, 0); the critics ignore the state (W 0) and output their biases. */
static void setup_hand_case(struct sac *s, const float *q1, const float *q2, const float *q1t,
                            const float *q2t)
{
    struct sac_config c = base_config();
    c.features = 1;
    c.actions = 2;
    c.nhidden = 1;
    c.hidden[0] = 1;
    c.alpha0 = 0.5f;
    c.target_entropy = 0.5f;
    CU_ASSERT_EQUAL_FATAL(sac_init(s, &c), 0);
    CU_ASSERT_EQUAL_FATAL(s->actor.nparams, 6);
    const float pa[6] = {1, 0, 1, 0, 0, 0};
    memcpy(s->actor.p, pa, sizeof pa);
    struct nn_mlp *q[4] = {&s->q1, &s->q2, &s->q1t, &s->q2t};
    const float *b[4] = {q1, q2, q1t, q2t};
    for (int j = 0; j < 4; j++) {
        memset(q[j]->p, 0, 6 * sizeof(float));
        q[j]->p[4] = b[j][0];
        q[j]->p[5] = b[j][1];
    }
    CU_ASSERT_DOUBLE_EQUAL(s->log_alpha, log(0.5), 1e-7);
}

static struct sac_transition hand_transition(void)
{
    struct sac_transition t;
    memset(&t, 0, sizeof t);
    t.s[0] = 1;  /* actor logits (1, 0) */
    t.s2[0] = 2; /* actor logits (2, 0) */
    t.mask[0] = t.mask[1] = 1;
    t.mask2[0] = t.mask2[1] = 1;
    t.a = 0;
    t.r = 0.5f;
    t.d = 0.9f;
    return t;
}

static void test_losses_match_a_hand_computation(void)
{
    struct sac s;
    setup_hand_case(&s, (const float[]){1, 3}, (const float[]){2, -1}, (const float[]){4, 0},
                    (const float[]){3, 5});
    struct sac_transition t = hand_transition();
    const double alpha = 0.5;

    /* s': pi = softmax(2, 0) (0.8808, 0.1192), log pi = (2, 0) - log(1 + e^2); min Qtarg =
     * (3, 0): V = 0.8808 (3 + 0.0635) + 0.1192 (0 + 1.0635) = 2.8250, y = 0.5 + 0.9 V =
     * 3.0425 (2.878 without the entropy term, 4.37 with the critics' max). */
    double l2 = log(1 + exp(2.0));
    double lp2[2] = {2 - l2, -l2}, p2[2] = {exp(lp2[0]), exp(lp2[1])};
    double v = p2[0] * (3 - alpha * lp2[0]) + p2[1] * (0 - alpha * lp2[1]);
    double y = 0.5 + 0.9 * v;
    CU_ASSERT_DOUBLE_EQUAL(y, 3.0425, 1e-3);
    double lq1 = 0.5 * (1 - y) * (1 - y), lq2 = 0.5 * (2 - y) * (2 - y);

    /* s: pi = softmax(1, 0) (0.7311, 0.2689), min Q = (1, -1): L_pi = sum pi (alpha log pi -
     * min Q) = 0.7311 (-0.1566 - 1) + 0.2689 (-0.6566 + 1) = -0.7533 (-0.4622 without the
     * entropy, -2.5600 with the max). */
    double l1 = log(1 + exp(1.0));
    double lp[2] = {1 - l1, -l1}, p[2] = {exp(lp[0]), exp(lp[1])};
    double lpi = p[0] * (alpha * lp[0] - 1) + p[1] * (alpha * lp[1] + 1);
    CU_ASSERT_DOUBLE_EQUAL(lpi, -0.7533, 1e-3);
    double plogp = p[0] * lp[0] + p[1] * lp[1];
    double h = 0.5 * log(2.0);

    struct sac_stats st;
    float gq1[6] = {0}, gq2[6] = {0}, ga[6] = {0}, gl = 0;
    sac_losses(&s, &t, 1, &st, gq1, gq2, ga, &gl);
    CU_ASSERT_DOUBLE_EQUAL(st.q_loss, 0.5 * (lq1 + lq2), 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(st.actor_loss, lpi, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(st.entropy, -plogp, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(st.alpha_loss, -log(alpha) * (plogp + h), 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(st.alpha, alpha, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(gl, -(plogp + h), 1e-5);
    /* The critics' output gradients: Q_j(s, a) - y at the action taken, 0 at the other. */
    CU_ASSERT_DOUBLE_EQUAL(gq1[4], 1 - y, 1e-4);
    CU_ASSERT_DOUBLE_EQUAL(gq1[5], 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(gq2[4], 2 - y, 1e-4);
    CU_ASSERT_DOUBLE_EQUAL(gq2[5], 0, 0);
    /* The actor's logit gradients: p_k (f_k - sum_a p_a f_a). */
    double f[2] = {alpha * lp[0] - 1, alpha * lp[1] + 1};
    CU_ASSERT_DOUBLE_EQUAL(ga[4], p[0] * (f[0] - lpi), 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(ga[5], p[1] * (f[1] - lpi), 1e-5);

    /* A terminal transition: y = r alone, its next state never evaluated. */
    t.d = 0;
    t.s2[0] = NAN;
    sac_losses(&s, &t, 1, &st, NULL, NULL, NULL, NULL);
    CU_ASSERT_DOUBLE_EQUAL(st.q_loss, 0.5 * (0.5 * 0.5 * 0.5 + 0.5 * 1.5 * 1.5), 1e-5);
    sac_free(&s);
}

/* ---- forbidden actions --------------------------------------------------------------------- */

static void test_forbidden_actions_have_probability_zero(void)
{
    struct sac_config c = base_config();
    c.prior_action = 2;
    c.prior_logit = 30; /* the forbidden action is by far the likeliest */
    struct sac s;
    CU_ASSERT_EQUAL_FATAL(sac_init(&s, &c), 0);
    const float x[3] = {0.3f, -0.2f, 0.9f};
    const uint8_t mask[4] = {1, 0, 0, 1};
    float p[4];
    sac_policy(&s, x, mask, p);
    CU_ASSERT_EQUAL(p[1], 0);
    CU_ASSERT_EQUAL(p[2], 0);
    CU_ASSERT(p[0] > 0 && p[3] > 0);
    CU_ASSERT_DOUBLE_EQUAL(p[0] + p[3], 1, 1e-6);
    sac_policy(&s, x, NULL, p); /* all allowed: the prior dominates */
    CU_ASSERT(p[2] > 0.99f);
    sac_free(&s);
}

static void test_act_never_picks_a_forbidden_action(void)
{
    struct sac_config c = base_config();
    c.prior_action = 1;
    c.prior_logit = 25;
    struct sac s;
    CU_ASSERT_EQUAL_FATAL(sac_init(&s, &c), 0);
    uint64_t rng = 3;
    int counts[4] = {0}, bad = 0;
    for (int i = 0; i < 4000; i++) {
        float x[3];
        uint8_t mask[4];
        int any = 0;
        for (int f = 0; f < 3; f++)
            x[f] = uniform(&rng, -2, 2);
        for (int a = 0; a < 4; a++)
            any |= mask[a] = nn_rng_uniform(&rng) < 0.5;
        int a = sac_act(&s, x, mask, i & 1);
        if (!any) {
            CU_ASSERT_EQUAL(a, -1);
            continue;
        }
        if (a < 0 || a >= 4 || !mask[a])
            bad++;
        else
            counts[a]++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    for (int a = 0; a < 4; a++)
        CU_ASSERT(counts[a] > 0);
    const uint8_t none[4] = {0};
    CU_ASSERT_EQUAL(sac_act(&s, (const float[]){0, 0, 0}, none, 1), -1);
    CU_ASSERT_EQUAL(sac_act(&s, (const float[]){0, 0, 0}, none, 0), -1);
    /* allowed, the prior wins greedily */
    CU_ASSERT_EQUAL(sac_act(&s, (const float[]){0, 0, 0}, NULL, 0), 1);
    sac_free(&s);
}

static void test_explore_samples_the_policy(void)
{
    struct sac_config c = base_config();
    struct sac s;
    CU_ASSERT_EQUAL_FATAL(sac_init(&s, &c), 0);
    scramble(&s.actor, &(uint64_t){9});
    const float x[3] = {0.5f, -0.5f, 0.25f};
    const uint8_t mask[4] = {1, 1, 0, 1};
    float p[4];
    sac_policy(&s, x, mask, p);
    enum { N = 20000 };
    int counts[4] = {0};
    for (int i = 0; i < N; i++)
        counts[sac_act(&s, x, mask, 1)]++;
    CU_ASSERT_EQUAL(counts[2], 0);
    for (int a = 0; a < 4; a++)
        CU_ASSERT_DOUBLE_EQUAL((double)counts[a] / N, p[a], 0.015);
    sac_free(&s);
}

static void test_target_and_actor_ignore_a_forbidden_action_of_huge_value(void)
{
    struct sac s;
    setup_hand_case(&s, (const float[]){1, -1e6f}, (const float[]){2, -1e6f},
                    (const float[]){4, 1e6f}, (const float[]){3, 1e6f});
    struct sac_transition t = hand_transition();
    t.mask2[1] = 0; /* at s' only action 0: V = min(4, 3) - alpha log 1 = 3, y = 3.2 */
    t.mask[1] = 0;  /* at s only action 0: L_pi = 1 (0 - min(1, 2)) = -1 */
    struct sac_stats st;
    float ga[6] = {0}, gl = 0;
    sac_losses(&s, &t, 1, &st, NULL, NULL, ga, &gl);
    double y = 0.5 + 0.9 * 3;
    CU_ASSERT_DOUBLE_EQUAL(st.q_loss, 0.5 * (0.5 * (1 - y) * (1 - y) + 0.5 * (2 - y) * (2 - y)),
                           1e-4);
    CU_ASSERT_DOUBLE_EQUAL(st.actor_loss, -1, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(st.entropy, 0, 1e-7);
    /* one action allowed: nothing to learn for the actor or the temperature */
    for (int k = 0; k < 6; k++)
        CU_ASSERT_EQUAL(ga[k], 0);
    CU_ASSERT_EQUAL(gl, 0);
    sac_free(&s);
}

/* ---- learning ------------------------------------------------------------------------------ */

/* Eight contexts (the corners of the cube, jittered by 0.1), four actions: the best action of
 * each pays 1, the others under 0.6; in odd contexts one other action is forbidden. The
 * learner collects its own data (sac_act exploring). With a low temperature (alpha0 0.1,
 * target entropy 0.2) about one seed in twenty settles in some context on a worse action while
 * the best one's Q is still far below its reward (a random start), never to try it again: alpha0
 * 0.3 and a target of 0.5 learned every context for 150 seeds out of 150. */
enum { CTX = 8, ACT = 4 };

static void bandit_state(uint64_t *rng, int *ctx, float *x, uint8_t *mask, const int *best)
{
    *ctx = (int)(nn_rng_uniform(rng) * CTX);
    for (int f = 0; f < 3; f++)
        x[f] = ((*ctx >> f) & 1 ? 1.0f : -1.0f) + uniform(rng, -0.1f, 0.1f);
    for (int a = 0; a < ACT; a++)
        mask[a] = 1;
    if (*ctx & 1)
        mask[(best[*ctx] + 1) % ACT] = 0;
}

static void test_a_contextual_bandit_is_learned(void)
{
    struct sac_config c = base_config();
    c.nhidden = 1;
    c.hidden[0] = 32;
    c.lr = 3e-3f;
    c.alpha0 = 0.3f;
    c.target_entropy = 0.5f;
    c.batch = 32;
    c.replay = 4096;
    c.seed = 11;
    struct sac s;
    CU_ASSERT_EQUAL_FATAL(sac_init(&s, &c), 0);
    uint64_t rng = 1234;
    float reward[CTX][ACT];
    int best[CTX];
    for (int k = 0; k < CTX; k++) {
        best[k] = (int)(nn_rng_uniform(&rng) * ACT);
        for (int a = 0; a < ACT; a++)
            reward[k][a] = a == best[k] ? 1.0f : uniform(&rng, 0, 0.6f);
    }
    struct sac_stats st = {0};
    for (int step = 0; step < 3000; step++) {
        struct sac_transition t;
        memset(&t, 0, sizeof t);
        int k;
        bandit_state(&rng, &k, t.s, t.mask, best);
        t.a = sac_act(&s, t.s, t.mask, 1);
        CU_ASSERT_FATAL(t.a >= 0 && t.mask[t.a]);
        t.r = reward[k][t.a];
        t.d = 0;
        sac_store(&s, &t);
        sac_update(&s, &st);
    }
    CU_ASSERT(isfinite(st.q_loss) && st.q_loss < 0.05);
    int right = 0;
    enum { EVAL = 1000 };
    for (int i = 0; i < EVAL; i++) {
        float x[3];
        uint8_t mask[ACT];
        int k;
        bandit_state(&rng, &k, x, mask, best);
        right += sac_act(&s, x, mask, 0) == best[k];
    }
    CU_ASSERT(right >= EVAL * 95 / 100);
    sac_free(&s);
}

static void test_same_seed_gives_identical_networks(void)
{
    struct sac_config c = base_config();
    c.seed = 5;
    struct sac a, b, o;
    CU_ASSERT_EQUAL_FATAL(sac_init(&a, &c), 0);
    CU_ASSERT_EQUAL_FATAL(sac_init(&b, &c), 0);
    c.seed = 6;
    CU_ASSERT_EQUAL_FATAL(sac_init(&o, &c), 0);
    struct sac_transition t[20];
    random_transitions(t, 20, c.features, c.actions, 77);
    for (int i = 0; i < 20; i++) {
        sac_store(&a, &t[i]);
        sac_store(&b, &t[i]);
        sac_store(&o, &t[i]);
    }
    int same_acts = 1;
    for (int u = 0; u < 40; u++) {
        CU_ASSERT_EQUAL(sac_update(&a, NULL), 1);
        CU_ASSERT_EQUAL(sac_update(&b, NULL), 1);
        CU_ASSERT_EQUAL(sac_update(&o, NULL), 1);
        same_acts &= sac_act(&a, t[u % 20].s, t[u % 20].mask, 1) ==
                     sac_act(&b, t[u % 20].s, t[u % 20].mask, 1);
    }
    CU_ASSERT(same_acts);
    size_t bytes = a.actor.nparams * sizeof(float);
    CU_ASSERT_EQUAL(memcmp(a.actor.p, b.actor.p, bytes), 0);
    CU_ASSERT_EQUAL(memcmp(a.q1.p, b.q1.p, a.q1.nparams * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(a.q2t.p, b.q2t.p, a.q2t.nparams * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(&a.log_alpha, &b.log_alpha, sizeof a.log_alpha), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a.actor.p, o.actor.p, bytes), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a.q1.p, o.q1.p, a.q1.nparams * sizeof(float)), 0);
    sac_free(&a);
    sac_free(&b);
    sac_free(&o);
}

/* ---- set-up, the buffer and the update ----------------------------------------------------- */

static void test_init_sets_prior_targets_and_temperature(void)
{
    struct sac_config c = base_config();
    c.prior_action = 3;
    c.prior_logit = 2.5f;
    c.alpha0 = 0.3f;
    struct sac s;
    CU_ASSERT_EQUAL_FATAL(sac_init(&s, &c), 0);
    /* dims features, hidden..., actions for every network */
    CU_ASSERT_EQUAL(s.actor.nlayers, 3);
    CU_ASSERT_EQUAL(s.actor.dims[0], 3);
    CU_ASSERT_EQUAL(s.actor.dims[1], 7);
    CU_ASSERT_EQUAL(s.actor.dims[2], 5);
    CU_ASSERT_EQUAL(s.actor.dims[3], 4);
    CU_ASSERT_EQUAL(s.q1.nparams, s.actor.nparams);
    CU_ASSERT_EQUAL(s.actor.p[s.actor.nparams - 1], 2.5f);
    for (int a = 0; a < 3; a++)
        CU_ASSERT_EQUAL(s.actor.p[s.actor.nparams - 4 + (size_t)a], 0);
    CU_ASSERT_EQUAL(memcmp(s.q1t.p, s.q1.p, s.q1.nparams * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(s.q2t.p, s.q2.p, s.q2.nparams * sizeof(float)), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(s.q1.p, s.q2.p, s.q1.nparams * sizeof(float)), 0);
    CU_ASSERT_DOUBLE_EQUAL(s.log_alpha, log(0.3), 1e-6);
    CU_ASSERT_EQUAL(s.n, 0);
    /* the untrained actor is near uniform but for the prior */
    float p[4];
    sac_policy(&s, (const float[]){0.5f, 0.5f, -0.5f}, NULL, p);
    CU_ASSERT(p[3] > p[0] && p[3] > p[1] && p[3] > p[2]);
    CU_ASSERT(fabsf(p[0] - p[1]) < 0.05f && fabsf(p[1] - p[2]) < 0.05f);
    sac_free(&s);
}

static void test_bad_configs_are_refused(void)
{
    struct sac s;
    struct sac_config c;
#define REFUSED(field, value)                                                                      \
    do {                                                                                           \
        c = base_config();                                                                         \
        c.field = (value);                                                                         \
        memset(&s, 0xa5, sizeof s);                                                                \
        CU_ASSERT_EQUAL(sac_init(&s, &c), -EINVAL);                                                \
        CU_ASSERT_PTR_NULL(s.actor.p);                                                             \
        CU_ASSERT_PTR_NULL(s.buf);                                                                 \
        sac_free(&s);                                                                              \
    } while (0)
    REFUSED(features, 0);
    REFUSED(features, SAC_MAX_FEATURES + 1);
    REFUSED(actions, 0);
    REFUSED(actions, SAC_MAX_ACTIONS + 1);
    REFUSED(nhidden, 0);
    REFUSED(nhidden, NN_MAX_LAYERS);
    REFUSED(hidden[0], 0);
    REFUSED(hidden[1], NN_MAX_DIM + 1);
    REFUSED(batch, 0);
    REFUSED(batch, 4097);
    REFUSED(replay, 3); /* under the batch of 4 */
    REFUSED(lr, 0);
    REFUSED(lr, -1e-3f);
    REFUSED(lr, NAN);
    REFUSED(lr, INFINITY);
    REFUSED(tau, 0);
    REFUSED(tau, 1.01f);
    REFUSED(tau, NAN);
    REFUSED(alpha0, 0);
    REFUSED(alpha0, -0.2f);
    REFUSED(alpha0, INFINITY);
    REFUSED(target_entropy, -0.01f);
    REFUSED(target_entropy, 1.01f);
    REFUSED(target_entropy, NAN);
    REFUSED(prior_action, -2);
    REFUSED(prior_action, 4);
#undef REFUSED
    CU_ASSERT_EQUAL(sac_init(&s, NULL), -EINVAL);

    /* the bounds themselves are accepted */
    c = base_config();
    c.features = SAC_MAX_FEATURES;
    c.actions = SAC_MAX_ACTIONS;
    c.nhidden = NN_MAX_LAYERS - 1;
    c.hidden[0] = 1;
    c.hidden[1] = NN_MAX_DIM;
    c.hidden[2] = 2;
    c.batch = 4096;
    c.replay = 4096;
    c.tau = 1;
    c.target_entropy = 1;
    c.prior_action = SAC_MAX_ACTIONS - 1;
    CU_ASSERT_EQUAL(sac_init(&s, &c), 0);
    sac_free(&s);
    c = base_config();
    c.features = 1;
    c.actions = 1;
    c.nhidden = 1;
    c.batch = 1;
    c.replay = 1;
    c.target_entropy = 0;
    c.prior_action = 0;
    CU_ASSERT_EQUAL(sac_init(&s, &c), 0);
    sac_free(&s);
    sac_free(&s); /* idempotent */
    struct sac zero;
    memset(&zero, 0, sizeof zero);
    sac_free(&zero); /* safe on a zeroed struct */
}

static void test_store_keeps_the_newest_transitions(void)
{
    struct sac_config c = base_config();
    c.replay = 4;
    struct sac s;
    CU_ASSERT_EQUAL_FATAL(sac_init(&s, &c), 0);
    struct sac_transition t;
    memset(&t, 0, sizeof t);
    for (int i = 0; i < 6; i++) {
        t.r = (float)i;
        sac_store(&s, &t);
        CU_ASSERT_EQUAL(s.n, (size_t)(i < 4 ? i + 1 : 4));
    }
    CU_ASSERT_EQUAL(s.next, 2);
    const float want[4] = {4, 5, 2, 3};
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(s.buf[i].r, want[i]);
    sac_free(&s);
}

static void test_update_waits_for_a_batch(void)
{
    struct sac_config c = base_config();
    struct sac s;
    CU_ASSERT_EQUAL_FATAL(sac_init(&s, &c), 0);
    struct sac_transition t[4];
    random_transitions(t, 4, c.features, c.actions, 8);
    float before[s.actor.nparams];
    memcpy(before, s.actor.p, sizeof before);
    float q1_before[s.q1.nparams], q2_before[s.q2.nparams];
    memcpy(q1_before, s.q1.p, sizeof q1_before);
    memcpy(q2_before, s.q2.p, sizeof q2_before);
    struct sac_stats st;
    CU_ASSERT_EQUAL(sac_update(&s, &st), 0); /* empty */
    for (int i = 0; i < 3; i++) {
        sac_store(&s, &t[i]);
        CU_ASSERT_EQUAL(sac_update(&s, &st), 0);
    }
    CU_ASSERT_EQUAL(memcmp(before, s.actor.p, sizeof before), 0);
    CU_ASSERT_EQUAL(s.updates, 0);
    sac_store(&s, &t[3]);
    CU_ASSERT_EQUAL(sac_update(&s, &st), 1);
    CU_ASSERT_EQUAL(s.updates, 1);
    CU_ASSERT_NOT_EQUAL(memcmp(before, s.actor.p, sizeof before), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(q1_before, s.q1.p, sizeof q1_before), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(q2_before, s.q2.p, sizeof q2_before), 0);
    CU_ASSERT(isfinite(st.q_loss) && isfinite(st.actor_loss) && isfinite(st.alpha_loss));
    CU_ASSERT(st.entropy > 0 && st.entropy <= log(4.0) + 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(st.alpha, exp(s.log_alpha), 1e-7);
    CU_ASSERT_EQUAL(sac_update(&s, NULL), 1);
    sac_free(&s);
}

/* A buffer of BATCH copies of one transition: whatever the draw, the batch is known. */
static void test_update_reports_the_losses_before_its_steps_and_averages_the_targets(void)
{
    struct sac_config c = base_config();
    c.tau = 0.25f;
    c.replay = (size_t)c.batch;
    struct sac s;
    CU_ASSERT_EQUAL_FATAL(sac_init(&s, &c), 0);
    scramble(&s.q1, &(uint64_t){4}); /* the critics away from their targets */
    scramble(&s.q2, &(uint64_t){5});
    struct sac_transition t[NT], batch[4];
    random_transitions(t, NT, c.features, c.actions, 21);
    for (int i = 0; i < 4; i++) {
        batch[i] = t[0];
        sac_store(&s, &t[0]);
    }
    struct sac_stats want, got;
    sac_losses(&s, batch, 4, &want, NULL, NULL, NULL, NULL);
    size_t nq = s.q1.nparams;
    float q1t_old[nq], q2t_old[nq];
    memcpy(q1t_old, s.q1t.p, sizeof q1t_old);
    memcpy(q2t_old, s.q2t.p, sizeof q2t_old);
    float la = s.log_alpha;
    CU_ASSERT_EQUAL_FATAL(sac_update(&s, &got), 1);
    CU_ASSERT_EQUAL(got.q_loss, want.q_loss);
    CU_ASSERT_EQUAL(got.actor_loss, want.actor_loss);
    CU_ASSERT_EQUAL(got.alpha_loss, want.alpha_loss);
    CU_ASSERT_EQUAL(got.entropy, want.entropy);
    CU_ASSERT_NOT_EQUAL(s.log_alpha, la);
    CU_ASSERT_DOUBLE_EQUAL(got.alpha, expf(s.log_alpha), 1e-7);
    int off = 0;
    for (size_t k = 0; k < nq; k++) {
        off += fabsf(s.q1t.p[k] - (0.75f * q1t_old[k] + 0.25f * s.q1.p[k])) > 1e-6f;
        off += fabsf(s.q2t.p[k] - (0.75f * q2t_old[k] + 0.25f * s.q2.p[k])) > 1e-6f;
    }
    CU_ASSERT_EQUAL(off, 0);
    sac_free(&s);
}

/* Two identical learners: the one updated leaves its batch's indices in idx; the other's
 * sac_losses over that batch are what the update reported. */
static void test_update_reports_the_losses_of_its_drawn_batch(void)
{
    struct sac_config c = base_config();
    c.batch = 8;
    c.replay = 32;
    struct sac a, b;
    CU_ASSERT_EQUAL_FATAL(sac_init(&a, &c), 0);
    CU_ASSERT_EQUAL_FATAL(sac_init(&b, &c), 0);
    struct sac_transition t[24], batch[8];
    random_transitions(t, 24, c.features, c.actions, 55);
    for (int i = 0; i < 24; i++) {
        sac_store(&a, &t[i]);
        sac_store(&b, &t[i]);
    }
    struct sac_stats got, want;
    CU_ASSERT_EQUAL_FATAL(sac_update(&a, &got), 1);
    int distinct = 0;
    for (int i = 0; i < 8; i++) {
        CU_ASSERT_FATAL(a.idx[i] >= 0 && a.idx[i] < 24);
        batch[i] = t[a.idx[i]];
        distinct += a.idx[i] != a.idx[0];
    }
    CU_ASSERT(distinct > 0);
    sac_losses(&b, batch, 8, &want, NULL, NULL, NULL, NULL);
    CU_ASSERT_DOUBLE_EQUAL(got.q_loss, want.q_loss, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(got.actor_loss, want.actor_loss, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(got.alpha_loss, want.alpha_loss, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(got.entropy, want.entropy, 1e-9);
    sac_free(&a);
    sac_free(&b);
}

/* A prior logit of 200: the other actions' probabilities underflow to 0 in single precision,
 * their log-probabilities do not. */
static void test_losses_stay_finite_for_a_near_deterministic_policy(void)
{
    struct sac_config c = base_config();
    c.prior_action = 1;
    c.prior_logit = 200;
    struct sac s;
    CU_ASSERT_EQUAL_FATAL(sac_init(&s, &c), 0);
    struct sac_transition t[NT];
    random_transitions(t, NT, c.features, c.actions, 61);
    for (int i = 0; i < NT; i++) { /* action 1 allowed with another everywhere */
        t[i].mask[1] = t[i].mask2[1] = 1;
        t[i].mask[(i % 3 == 0) ? 0 : 2 + i % 2] = 1;
    }
    float p[4];
    sac_policy(&s, t[0].s, t[0].mask, p);
    CU_ASSERT_EQUAL(p[1], 1.0f);
    struct sac_stats st;
    float ga[s.actor.nparams], gq[s.q1.nparams], gl = 0;
    memset(ga, 0, sizeof ga);
    memset(gq, 0, sizeof gq);
    sac_losses(&s, t, NT, &st, gq, NULL, ga, &gl);
    CU_ASSERT(isfinite(st.q_loss) && isfinite(st.actor_loss) && isfinite(st.alpha_loss));
    CU_ASSERT(isfinite(st.entropy) && st.entropy >= 0 && st.entropy < 1e-6);
    CU_ASSERT(isfinite(gl));
    int finite = 1;
    for (size_t k = 0; k < s.actor.nparams; k++)
        finite &= isfinite(ga[k]);
    for (size_t k = 0; k < s.q1.nparams; k++)
        finite &= isfinite(gq[k]);
    CU_ASSERT(finite);
    for (int u = 0; u < 4; u++)
        sac_store(&s, &t[u]);
    CU_ASSERT_EQUAL(sac_update(&s, &st), 1);
    CU_ASSERT(isfinite(st.q_loss) && isfinite(st.actor_loss) && isfinite(s.log_alpha));
    sac_free(&s);
}

/* ---- the temperature ----------------------------------------------------------------------- */

/* Updates on zero-reward terminal transitions with every action allowed, from an actor whose
 * entropy is near log 4 (no prior) or near 0 (a strong prior), against a target of half log 4. */
static void run_temperature(int prior, float *g_out, float *alpha_out)
{
    struct sac_config c = base_config();
    c.prior_action = prior;
    c.prior_logit = 20;
    c.lr = 1e-2f;
    struct sac s;
    CU_ASSERT_EQUAL_FATAL(sac_init(&s, &c), 0);
    struct sac_transition t[8];
    random_transitions(t, 8, c.features, c.actions, 31);
    for (int i = 0; i < 8; i++) {
        memset(t[i].mask, 1, (size_t)c.actions);
        t[i].a = i % c.actions;
        t[i].r = 0;
        t[i].d = 0;
        sac_store(&s, &t[i]);
    }
    float g = 0;
    sac_losses(&s, t, 8, NULL, NULL, NULL, NULL, &g);
    *g_out = g;
    for (int u = 0; u < 20; u++)
        sac_update(&s, NULL);
    *alpha_out = expf(s.log_alpha);
    sac_free(&s);
}

static void test_alpha_falls_above_the_target_entropy_and_rises_below(void)
{
    float g, alpha;
    run_temperature(-1, &g, &alpha); /* near uniform: entropy ~ log 4 > 0.5 log 4 */
    CU_ASSERT(g > 0);
    CU_ASSERT(alpha < 0.2f * 0.9f);
    run_temperature(2, &g, &alpha); /* near certain: entropy ~ 0 < 0.5 log 4 */
    CU_ASSERT(g < 0);
    CU_ASSERT(alpha > 0.2f * 1.1f);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("sac", NULL, NULL);
    POS_ADD_TEST(s, test_critic_gradients_match_central_differences);
    POS_ADD_TEST(s, test_actor_gradient_matches_central_differences);
    POS_ADD_TEST(s, test_alpha_gradient_matches_central_differences);
    POS_ADD_TEST(s, test_gradients_are_added_into_the_buffers);
    POS_ADD_TEST(s, test_losses_match_a_hand_computation);
    POS_ADD_TEST(s, test_forbidden_actions_have_probability_zero);
    POS_ADD_TEST(s, test_act_never_picks_a_forbidden_action);
    POS_ADD_TEST(s, test_explore_samples_the_policy);
    POS_ADD_TEST(s, test_target_and_actor_ignore_a_forbidden_action_of_huge_value);
    POS_ADD_TEST(s, test_a_contextual_bandit_is_learned);
    POS_ADD_TEST(s, test_same_seed_gives_identical_networks);
    POS_ADD_TEST(s, test_init_sets_prior_targets_and_temperature);
    POS_ADD_TEST(s, test_bad_configs_are_refused);
    POS_ADD_TEST(s, test_store_keeps_the_newest_transitions);
    POS_ADD_TEST(s, test_update_waits_for_a_batch);
    POS_ADD_TEST(s, test_update_reports_the_losses_before_its_steps_and_averages_the_targets);
    POS_ADD_TEST(s, test_update_reports_the_losses_of_its_drawn_batch);
    POS_ADD_TEST(s, test_losses_stay_finite_for_a_near_deterministic_policy);
    POS_ADD_TEST(s, test_alpha_falls_above_the_target_entropy_and_rises_below);
}
