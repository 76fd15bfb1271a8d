/* learned: pos's decisions with one of them made by a trained network (learned.h,
 * docs/learned.md). Each outranked client with work queued gets the operators in flight that
 * the actor's most likely action gives; everything else (the ranks, free clients, the SLO
 * guard, the starvation guard, schedules, never taking a grant back) is pos's. Without usable
 * weights (none given, or refused by the adapter, which says why once) it decides exactly as
 * pos, and its note says so. Pure code: the same object in posd and possim. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/nn.h"
#include "sched/policy/learned.h"
#include "sched/weights.h"

enum { P_WEIGHTS, P_CORUN_BUDGET, P_CORUN_ROOM, P_SCHEDULE };
static const struct pos_policy_param learned_params[] = {
    [P_WEIGHTS] = {.name = "weights",
                   .type = POS_PARAM_WEIGHTS,
                   .help = "the trained network (possim train -o): without it, pos"},
    [P_CORUN_BUDGET] = POS_PARAM_CORUN_BUDGET,
    [P_CORUN_ROOM] = POS_PARAM_CORUN_ROOM,
    [P_SCHEDULE] = POS_PARAM_SCHEDULE_FILE,
    {.name = NULL},
};

struct learned_state {
    struct pos_state *pos;
    const struct pos_learned_learner *learner; /* possim train's (NULL: the actor below) */
    int have_actor;
    struct nn_mlp actor; /* a copy of the weights' "actor" */
    float *act;          /* its activations */
    char note[192];
};

static float clip(double x, double lo, double hi)
{
    return (float)(x < lo ? lo : x > hi ? hi : x);
}

static float log_count(uint64_t n)
{
    return clip(log2(1.0 + (double)n) / 6, 0, 2);
}

void pos_learned_features(const struct pos_sched_view *v, const struct pos_choice *ch, float *x,
                          uint8_t *mask)
{
    (void)v;
    int i = 0;
    x[i++] = 1;                             /* 0 a bias */
    x[i++] = (float)ch->busy_above;         /* 1 */
    x[i++] = (float)ch->concurrent;         /* 2 */
    x[i++] = (float)ch->contended;          /* 3 */
    x[i++] = (float)ch->plain;              /* 4 */
    x[i++] = (float)ch->unlearnt;           /* 5 */
    x[i++] = (float)ch->has_slo;            /* 6 */
    x[i++] = clip(ch->above_n / 4.0, 0, 2); /* 7 */
    x[i++] = clip(ch->above, 0, 4);         /* 8 SM demands, in devices */
    x[i++] = clip(ch->above_max, 0, 4);     /* 9 */
    x[i++] = clip(ch->beside, 0, 4);        /* 10 */
    x[i++] = clip(ch->mine, 0, 4);          /* 11 */
    x[i++] = clip(ch->next_max, 0, 4);      /* 12 */
    int slack = isfinite(ch->slack);
    x[i++] = slack ? clip(ch->slack, -1, 2) : 2;              /* 13 in SLOs */
    x[i++] = (float)slack;                                    /* 14 */
    x[i++] = log_count(ch->inflight);                         /* 15 */
    x[i++] = log_count(ch->queued);                           /* 16 */
    x[i++] = log_count(ch->limit);                            /* 17 pos's choice */
    x[i++] = clip(log10(1.0 + ch->c->op_ns / 1e3) / 3, 0, 2); /* 18 its operators, in us */
    x[i++] = clip(ch->above_runq_ms / 10, 0, 1);              /* 19 the host's CPU */
    for (int a = 0; a < POS_LEARNED_ACTIONS; a++)
        mask[a] = 1;
    mask[0] = (uint8_t)ch->busy_above; /* with nobody above busy, work is conserved */
}

uint64_t pos_learned_limit(const struct pos_choice *ch, int a)
{
    uint64_t f = ch->inflight, p = ch->limit, l;
    switch (a) {
    case 0:
        l = f;
        break;
    case 1:
        l = f + 1;
        break;
    case 2:
        l = p > 1 ? (p + 1) / 2 : 1;
        break;
    case 3:
        l = p;
        break;
    case 4:
        l = p + 1 > f + 1 ? p + 1 : f + 1;
        break;
    default:
        l = p + 2 > f + 2 ? p + 2 : f + 2;
        break;
    }
    return l < ch->most ? l : ch->most;
}

int pos_learned_check(const struct pos_weights *w, char *err, size_t errlen)
{
    if (w->features != POS_LEARNED_FEATURES || w->actions != POS_LEARNED_ACTIONS) {
        snprintf(err, errlen,
                 "made for %u features and %u actions, policy learned has %d and %d (trained "
                 "by another version of pos?)",
                 w->features, w->actions, POS_LEARNED_FEATURES, POS_LEARNED_ACTIONS);
        return -EINVAL;
    }
    const struct nn_mlp *a = pos_weights_net(w, "actor");
    if (!a) {
        snprintf(err, errlen, "has no network 'actor'");
        return -EINVAL;
    }
    if (a->dims[0] != POS_LEARNED_FEATURES || a->dims[a->nlayers] != POS_LEARNED_ACTIONS) {
        snprintf(err, errlen, "network 'actor' has %d inputs and %d outputs, not %d and %d",
                 a->dims[0], a->dims[a->nlayers], POS_LEARNED_FEATURES, POS_LEARNED_ACTIONS);
        return -EINVAL;
    }
    return 0;
}

int pos_learned_greedy(const struct nn_mlp *net, const float *x, const uint8_t *mask, float *act)
{
    const float *z = nn_mlp_forward(net, x, act);
    int best = -1;
    for (int a = 0; a < POS_LEARNED_ACTIONS; a++)
        if (mask[a] && (best < 0 || z[a] > z[best]))
            best = a;
    return best < 0 ? POS_LEARNED_POS : best;
}

static uint64_t choose(void *arg, const struct pos_sched_view *v, const struct pos_choice *ch)
{
    struct learned_state *s = arg;
    float x[POS_LEARNED_FEATURES];
    uint8_t mask[POS_LEARNED_ACTIONS];
    pos_learned_features(v, ch, x, mask);
    int a = s->learner ? s->learner->act(s->learner->arg, v, ch->c, x, mask)
                       : pos_learned_greedy(&s->actor, x, mask, s->act);
    if (a < 0 || a >= POS_LEARNED_ACTIONS || !mask[a])
        a = POS_LEARNED_POS;
    return pos_learned_limit(ch, a);
}

static void learned_fini(void *state)
{
    struct learned_state *s = state;
    if (!s)
        return;
    pos_state_free(s->pos);
    nn_mlp_free(&s->actor);
    free(s->act);
    free(s);
}

static int learned_init(void **state, const struct pos_sched_device *dev,
                        const struct pos_policy_args *args)
{
    (void)dev;
    struct learned_state *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    int rc = pos_state_new(&s->pos, args);
    if (rc < 0) {
        free(s);
        return rc;
    }
    s->learner = args ? args->ext : NULL;
    const struct pos_weights *w = pos_policy_weights(args, &learned_params[P_WEIGHTS]);
    char why[160];
    if (!s->learner && w && pos_learned_check(w, why, sizeof why) == 0) {
        if (nn_mlp_copy(&s->actor, pos_weights_net(w, "actor")) < 0 ||
            !(s->act = calloc(nn_mlp_acts(&s->actor), sizeof *s->act))) {
            learned_fini(s);
            return -ENOMEM;
        }
        s->have_actor = 1;
    }
    *state = s;
    return 0;
}

static int64_t learned_decide(void *state, struct pos_sched_view *v)
{
    struct learned_state *s = state;
    if (s->learner)
        s->learner->observe(s->learner->arg, v);
    if (!s->learner && !s->have_actor)
        return pos_decide_with(s->pos, v, NULL, NULL);
    return pos_decide_with(s->pos, v, choose, s);
}

static void learned_on_complete(void *state, const struct pos_sched_client *c,
                                const struct pos_sched_op *op)
{
    struct learned_state *s = state;
    (void)op;
    pos_state_complete(s->pos, c);
}

static const char *learned_note(void *state)
{
    struct learned_state *s = state;
    if (!s->learner && !s->have_actor)
        return "learned: no usable weights: deciding as pos";
    const char *pos = pos_state_note(s->pos, "learned");
    /* the share of its choices that differ from pos's is not in the note: a note that changes
     * with every decision would be logged at every one */
    const char *how = s->learner ? "training" : "the network chooses";
    if (pos)
        snprintf(s->note, sizeof s->note, "%s; %s", pos, how);
    else
        snprintf(s->note, sizeof s->note, "learned: %s", how);
    return s->note;
}

const struct pos_policy_ops pos_policy_learned = {
    .name = "learned",
    .summary = "pos, with how far an outranked client is released chosen by a network trained "
               "in possim (possim train; without weights, pos)",
    .params = learned_params,
    .init = learned_init,
    .fini = learned_fini,
    .decide = learned_decide,
    .on_complete = learned_on_complete,
    .note = learned_note,
};
