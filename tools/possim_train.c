/* possim train (possim_train.h, docs/learned.md): policy learned's actor trained by a discrete
 * soft actor-critic in possim's virtual time.
 *
 * Each training run of a mix is one episode of possim_run_learning with policy learned, whose
 * choices (how many operators an outranked client with work queued may have in flight) come
 * from the trainer. A choice of client C at time t and the next choice of C at t' make one
 * transition: the state and action at t, the reward earned by the whole mix between t and t'
 * (each decision's reward discounted by exp(-(its time - t) / horizon)), the discount
 * exp(-(t' - t) / horizon) and the state at t'. Clients share the reward: they cooperate on
 * one device. The reward of a decision: for a client without an SLO, the device time of the
 * operators it completed since the last decision (the view's estimate op_ns each), in ms; for
 * an SLO client, -(latency_weight x the time its requests waited or ran since, in SLOs) -
 * (miss_penalty for each whose deadline passed since), from the requests' arrivals as possim
 * knows them (slo_state; posd's view starts a request at its first launch, blind to the time
 * it queued in its process). After each
 * epoch the actor's most likely actions are evaluated on every mix (greedy, fixed seeds),
 * against pos's own choices (action POS_LEARNED_POS: exactly pos) on the same seeds; the best
 * epoch's networks are the output. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "sched/ini_lines.h"
#include "sched/nn.h"
#include "sched/policy/learned.h"
#include "sched/weights.h"
#include "sched/weights_file.h"
#include "tools/possim_sac.h"
#include "tools/possim_sim.h"
#include "tools/possim_train.h"

/* ---- the curriculum ----------------------------------------------------------------- */

static void curriculum_defaults(struct train_curriculum *c, const char *path)
{
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    c->epochs = 20;
    c->nhidden = 2;
    c->hidden[0] = 32; /* a decision at 8 clients within 5 us (docs/results/learned.md) */
    c->hidden[1] = 16;
    c->lr = 3e-4;
    c->polyak = 0.005;
    c->alpha = 0.05;
    c->target_entropy = 0.05;
    c->prior = 3;
    c->prior_p = 0.9;
    c->batch = 64;
    c->update_every = 8;
    c->replay = 100000;
    c->horizon_ms = 100;
    c->miss_penalty = 100;
    c->latency_weight = 2;
    c->reward_scale = 0.01;
    c->eval_seeds = 1;
}

struct cparse {
    struct train_curriculum *c;
    const char *path;
    int line;
    char *err;
    size_t errlen;
    int sect; /* 0 none, 1 [train], 2 [mix] */
    int seen_train;
    char seen[32][24]; /* [train]'s keys seen, and the current mix's */
    int seen_line[32];
    size_t nseen;
};

static int cfail(struct cparse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cfail(struct cparse *p, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "%s:%d: %s", p->path, p->line, msg);
    return -EINVAL;
}

static int num(const char *v, double lo, double hi, double *out)
{
    char *end;
    if (!*v)
        return -1;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || *end || !isfinite(d) || d < lo || d > hi)
        return -1;
    *out = d;
    return 0;
}

static int key_seen(struct cparse *p, const char *key)
{
    for (size_t i = 0; i < p->nseen; i++)
        if (strcmp(p->seen[i], key) == 0)
            return cfail(p, "duplicate key '%s' (first set on line %d)", key, p->seen_line[i]);
    if (p->nseen < 32) {
        snprintf(p->seen[p->nseen], sizeof p->seen[0], "%s", key);
        p->seen_line[p->nseen++] = p->line;
    }
    return 0;
}

/* VALUE of KEY in [train]: a number in LO..HI into *D. */
static int train_num(struct cparse *p, const char *key, const char *value, double lo, double hi,
                     double *d)
{
    if (num(value, lo, hi, d) < 0)
        return cfail(p, "bad value '%s' for '%s' in [train]: expected a number in %g..%g", value,
                     key, lo, hi);
    return 0;
}

static int train_int(struct cparse *p, const char *key, const char *value, double lo, double hi,
                     int *i)
{
    double d;
    if (num(value, lo, hi, &d) < 0 || d != floor(d))
        return cfail(p, "bad value '%s' for '%s' in [train]: expected an integer in %g..%g", value,
                     key, lo, hi);
    *i = (int)d;
    return 0;
}

static int train_key(struct cparse *p, const char *key, const char *value)
{
    struct train_curriculum *c = p->c;
    double d;
    int rc;
    if (strcmp(key, "epochs") == 0)
        return train_int(p, key, value, 1, 100000, &c->epochs);
    if (strcmp(key, "hidden") == 0) {
        /* 1..3 layers of 1..256 units, comma-separated */
        char buf[128];
        snprintf(buf, sizeof buf, "%s", value);
        int n = 0, h[3];
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            t = ini_trim(t);
            if (n == 3 || num(t, 1, NN_MAX_DIM, &d) < 0 || d != floor(d))
                return cfail(p,
                             "bad value '%s' for 'hidden' in [train]: expected 1 to 3 layer "
                             "sizes of 1..%d units, comma-separated (e.g. 64,32)",
                             value, NN_MAX_DIM);
            h[n++] = (int)d;
        }
        if (n == 0)
            return cfail(p,
                         "bad value '%s' for 'hidden' in [train]: expected 1 to 3 layer sizes "
                         "of 1..%d units, comma-separated (e.g. 64,32)",
                         value, NN_MAX_DIM);
        c->nhidden = n;
        memcpy(c->hidden, h, sizeof h);
        return 0;
    }
    struct {
        const char *name;
        double lo, hi;
        double *d;
    } nums[] = {
        {"lr", 1e-7, 1, &c->lr},
        {"polyak", 1e-5, 1, &c->polyak},
        {"alpha", 1e-6, 10, &c->alpha},
        {"target_entropy", 0, 10, &c->target_entropy},
        {"prior", -20, 20, &c->prior},
        {"prior_p", 0, 0.999, &c->prior_p},
        {"horizon_ms", 0.01, 100000, &c->horizon_ms},
        {"miss_penalty", 0, 1e6, &c->miss_penalty},
        {"latency_weight", 0, 1e6, &c->latency_weight},
        {"reward_scale", 1e-6, 1e6, &c->reward_scale},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (strcmp(key, nums[i].name) == 0)
            return train_num(p, key, value, nums[i].lo, nums[i].hi, nums[i].d);
    if (strcmp(key, "batch") == 0)
        return train_int(p, key, value, 1, 4096, &c->batch);
    if (strcmp(key, "update_every") == 0)
        return train_int(p, key, value, 1, 100000, &c->update_every);
    if (strcmp(key, "eval_seeds") == 0)
        return train_int(p, key, value, 1, 100, &c->eval_seeds);
    if (strcmp(key, "replay") == 0) {
        int r;
        if ((rc = train_int(p, key, value, 64, 10000000, &r)) < 0)
            return rc;
        c->replay = (size_t)r;
        return 0;
    }
    return cfail(
        p,
        "unknown key '%s' in [train] (epochs, hidden, lr, polyak, alpha, "
        "target_entropy, prior, prior_p, batch, update_every, replay, horizon_ms, miss_penalty, "
        "latency_weight, reward_scale, eval_seeds)",
        key);
}

static int mix_key(struct cparse *p, const char *key, const char *value)
{
    struct train_mix *m = &p->c->mixes[p->c->nmixes - 1];
    if (strcmp(key, "scenario") == 0) {
        if (!*value)
            return cfail(p, "bad value '' for 'scenario' in [mix %s]: expected a file", m->name);
        const char *slash = strrchr(p->path, '/');
        if (value[0] == '/' || !slash)
            snprintf(m->path, sizeof m->path, "%s", value);
        else
            snprintf(m->path, sizeof m->path, "%.*s/%s", (int)(slash - p->path), p->path, value);
        m->sc = calloc(1, sizeof *m->sc);
        if (!m->sc)
            return cfail(p, "out of memory");
        char e[1024];
        if (possim_scenario_load(m->path, m->sc, e, sizeof e) < 0)
            return cfail(p, "scenario of [mix %s]: %s", m->name, e);
        return 0;
    }
    if (strcmp(key, "episodes") == 0) {
        double d;
        if (num(value, 1, 1000, &d) < 0 || d != floor(d))
            return cfail(p,
                         "bad value '%s' for 'episodes' in [mix %s]: expected an integer in "
                         "1..1000",
                         value, m->name);
        m->episodes = (int)d;
        return 0;
    }
    return cfail(p, "unknown key '%s' in [mix %s] (scenario, episodes)", key, m->name);
}

static int close_mix(struct cparse *p)
{
    if (p->sect != 2)
        return 0;
    struct train_mix *m = &p->c->mixes[p->c->nmixes - 1];
    if (!m->sc) {
        p->line = m->line;
        return cfail(p, "[mix %s] has no scenario: add 'scenario = FILE'", m->name);
    }
    return 0;
}

static int open_section(struct cparse *p, const char *name)
{
    int rc = close_mix(p);
    if (rc < 0)
        return rc;
    p->nseen = 0;
    if (strcmp(name, "train") == 0) {
        if (p->seen_train)
            return cfail(p, "duplicate section [train] (first on line %d)", p->seen_train);
        p->seen_train = p->line;
        p->sect = 1;
        return 0;
    }
    if (strncmp(name, "mix", 3) == 0 && (name[3] == ' ' || name[3] == '\t' || !name[3])) {
        const char *n = name + 3;
        while (*n == ' ' || *n == '\t')
            n++;
        if (!*n)
            return cfail(p, "[mix] needs a name: [mix NAME]");
        if (strlen(n) >= POSSIM_NAME_MAX)
            return cfail(p, "mix name '%s' longer than %d characters", n, POSSIM_NAME_MAX - 1);
        for (size_t i = 0; i < p->c->nmixes; i++)
            if (strcmp(p->c->mixes[i].name, n) == 0)
                return cfail(p, "duplicate section [mix %s] (first on line %d)", n,
                             p->c->mixes[i].line);
        if (p->c->nmixes == TRAIN_MAX_MIXES)
            return cfail(p, "more than %d mixes", TRAIN_MAX_MIXES);
        struct train_mix *m = &p->c->mixes[p->c->nmixes++];
        snprintf(m->name, sizeof m->name, "%s", n);
        m->episodes = 1;
        m->line = p->line;
        p->sect = 2;
        return 0;
    }
    return cfail(p, "unknown section [%s] (use [train] or [mix NAME])", name);
}

int train_curriculum_load(const char *path, struct train_curriculum *c, char *err, size_t errlen)
{
    curriculum_defaults(c, path);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -errno;
    }
    struct cparse p = {.c = c, .path = path, .err = err, .errlen = errlen};
    char *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        const char *why = NULL;
        char *s = ini_next_line(fp, &buf, &cap, p.line + 1, 4096, &why);
        if (!s && !why)
            break;
        p.line++;
        if (!s) {
            rc = cfail(&p, "%s", why);
            break;
        }
        char name[256];
        enum ini_line_kind k = ini_classify(s, name, sizeof name, &why);
        if (k == INI_LINE_BLANK)
            continue;
        if (k == INI_LINE_ERROR) {
            rc = cfail(&p, "%s", why);
            break;
        }
        if (k == INI_LINE_SECTION) {
            if ((rc = open_section(&p, name)) < 0)
                break;
            continue;
        }
        char *eq = strpbrk(s, "=:");
        if (!eq) {
            rc = cfail(&p, "syntax error: expected 'key = value'");
            break;
        }
        *eq = '\0';
        char *key = ini_trim(s), *value = ini_trim(eq + 1);
        if (p.sect == 0) {
            rc = cfail(&p, "key '%s' is outside any section: put it under [train] or [mix NAME]",
                       key);
            break;
        }
        if ((rc = key_seen(&p, key)) < 0)
            break;
        rc = p.sect == 1 ? train_key(&p, key, value) : mix_key(&p, key, value);
        if (rc < 0)
            break;
    }
    if (rc == 0 && ferror(fp))
        rc = cfail(&p, "cannot read: %s", strerror(errno ? errno : EIO));
    if (rc == 0)
        rc = close_mix(&p);
    if (rc == 0 && c->nmixes == 0) {
        p.line = p.line > 0 ? p.line : 1;
        rc = cfail(&p, "no mixes: add a [mix NAME] section with 'scenario = FILE'");
    }
    if (rc == 0 && (size_t)c->batch > c->replay) {
        p.line = p.seen_train ? p.seen_train : 1;
        rc = cfail(&p, "batch %d is larger than replay %zu", c->batch, c->replay);
    }
    for (size_t i = 0; rc == 0 && i < c->nmixes; i++) {
        struct possim_scenario *sc = c->mixes[i].sc;
        if (sc->no_core) {
            p.line = c->mixes[i].line;
            rc = cfail(&p, "scenario of [mix %s] has policy none: nothing to learn",
                       c->mixes[i].name);
        }
        snprintf(sc->policy, sizeof sc->policy, "learned");
        /* the trainer makes the choices: a weights file given there is not read */
        struct pos_policy_args keep = {0};
        for (size_t k = 0; k < sc->policy_args.n; k++)
            if (sc->policy_args.v[k].param->type != POS_PARAM_WEIGHTS)
                keep.v[keep.n++] = sc->policy_args.v[k];
        sc->policy_args = keep;
    }
    free(buf);
    fclose(fp);
    if (rc < 0)
        train_curriculum_free(c);
    return rc;
}

void train_curriculum_free(struct train_curriculum *c)
{
    for (size_t i = 0; i < c->nmixes; i++) {
        free(c->mixes[i].sc);
        c->mixes[i].sc = NULL;
    }
    c->nmixes = 0;
}

/* ---- the reward, the learner ---------------------------------------------------------- */

#define TRACK_MAX (POSSIM_MAX_CLIENTS * 2)

enum mode { MODE_LEARN, MODE_GREEDY, MODE_POS };

struct trainer {
    const struct train_curriculum *cu;
    struct sac *sac;
    enum mode mode;
    double reward; /* of the episode */
    struct tracked {
        uint32_t id;
        uint64_t completed, ended;
        uint64_t gen;
    } t[TRACK_MAX];
    size_t nt;
    uint64_t gen;
    struct pending {
        uint32_t id;
        int64_t t0;
        double r;
        struct sac_transition tr; /* s, mask, a so far */
    } p[TRACK_MAX];
    size_t np;
    uint64_t since_update, stored, updates, choices, actions[POS_LEARNED_ACTIONS];
    struct sac_stats stats; /* summed over the epoch's updates */
    double slo_r;           /* the SLO clients' reward since the last decision (slo_state) */
    /* the learner's reward is the mix's less pos's mean rate on it (reward per virtual ns,
     * from the evaluation of pos before training): what a choice gained over pos, with the
     * common part taken out, which otherwise grows with the time to a client's next choice */
    double pos_rate[TRAIN_MAX_MIXES], rate;
    int64_t last_now;
    struct slo_track {
        int seen;
        int64_t t;
        uint64_t outstanding, late;
    } slo[POSSIM_MAX_CLIENTS];
};

/* The SLO clients' part of the reward, accrued as it happens (possim's truth): every request
 * waiting or running costs latency_weight per SLO of time it has taken so far, and
 * miss_penalty once, when its deadline passes. The sum over a request's life is what its end
 * would give (-(latency_weight x latency / SLO) - the penalty if late), but it reaches the
 * choices that caused it as the delay happens, not a request later. */
static void slo_state(void *arg, int client, double slo_ms, uint64_t outstanding, uint64_t late,
                      int64_t now_ns)
{
    struct trainer *tr = arg;
    if (client < 0 || client >= POSSIM_MAX_CLIENTS)
        return;
    struct slo_track *k = &tr->slo[client];
    if (k->seen) {
        double dt_ms = (double)(now_ns - k->t) / 1e6;
        tr->slo_r -= tr->cu->latency_weight * (double)k->outstanding * dt_ms / slo_ms;
        if (late > k->late)
            tr->slo_r -= tr->cu->miss_penalty * (double)(late - k->late);
    }
    *k = (struct slo_track){.seen = 1, .t = now_ns, .outstanding = outstanding, .late = late};
}

static double horizon_ns(const struct trainer *tr)
{
    return tr->cu->horizon_ms * 1e6;
}

static void store(struct trainer *tr, struct sac_transition *t)
{
    sac_store(tr->sac, t);
    tr->stored++;
    if (++tr->since_update >= (uint64_t)tr->cu->update_every) {
        tr->since_update = 0;
        struct sac_stats st;
        if (sac_update(tr->sac, &st)) {
            tr->updates++;
            tr->stats.q_loss += st.q_loss;
            tr->stats.actor_loss += st.actor_loss;
            tr->stats.entropy += st.entropy;
            tr->stats.alpha = st.alpha;
        }
    }
}

/* The pending choice I ends at S2 (NULL: the episode ends there) with discount D. */
static void close_pending(struct trainer *tr, size_t i, const float *s2, const uint8_t *mask2,
                          float d)
{
    struct pending *p = &tr->p[i];
    p->tr.r = (float)(p->r * tr->cu->reward_scale);
    p->tr.d = s2 ? d : 0;
    memcpy(p->tr.s2, s2 ? s2 : p->tr.s, sizeof p->tr.s2);
    memcpy(p->tr.mask2, s2 ? mask2 : p->tr.mask, sizeof p->tr.mask2);
    store(tr, &p->tr);
    tr->p[i] = tr->p[--tr->np];
}

static void observe(void *arg, const struct pos_sched_view *v)
{
    struct trainer *tr = arg;
    double r = tr->slo_r; /* the SLO clients' requests that ended since (request_done) */
    tr->slo_r = 0;
    tr->gen++;
    for (size_t i = 0; i < v->nclients; i++) {
        const struct pos_sched_client *c = &v->clients[i];
        size_t k = 0;
        while (k < tr->nt && tr->t[k].id != c->id)
            k++;
        if (k == tr->nt) {
            if (tr->nt == TRACK_MAX)
                continue;
            tr->t[tr->nt++] = (struct tracked){
                .id = c->id, .completed = c->completed, .ended = c->request.ended, .gen = tr->gen};
            continue;
        }
        struct tracked *t = &tr->t[k];
        t->gen = tr->gen;
        if (c->slo_ms <= 0 && c->completed > t->completed)
            r += (double)(c->completed - t->completed) * c->op_ns / 1e6;
        t->completed = c->completed;
        t->ended = c->request.ended;
    }
    /* clients gone */
    for (size_t k = 0; k < tr->nt;)
        if (tr->t[k].gen != tr->gen)
            tr->t[k] = tr->t[--tr->nt];
        else
            k++;
    tr->reward += r;
    if (tr->mode != MODE_LEARN)
        return;
    if (tr->last_now >= 0)
        r -= tr->rate * (double)(v->now - tr->last_now);
    tr->last_now = v->now;
    double h = horizon_ns(tr);
    for (size_t i = 0; i < tr->np;) {
        double age = (double)(v->now - tr->p[i].t0);
        tr->p[i].r += exp(-age / h) * r;
        if (age > 5 * h) /* its client chose nothing since: what follows counts for little */
            close_pending(tr, i, NULL, NULL, 0);
        else
            i++;
    }
}

static int act(void *arg, const struct pos_sched_view *v, const struct pos_sched_client *c,
               const float *x, const uint8_t *mask)
{
    struct trainer *tr = arg;
    int a;
    tr->choices++;
    if (tr->mode == MODE_POS) {
        a = POS_LEARNED_POS;
    } else if (tr->mode == MODE_GREEDY) {
        a = sac_act(tr->sac, x, mask, 0);
    } else {
        size_t i = 0;
        while (i < tr->np && tr->p[i].id != c->id)
            i++;
        if (i < tr->np)
            close_pending(tr, i, x, mask,
                          (float)exp(-(double)(v->now - tr->p[i].t0) / horizon_ns(tr)));
        a = sac_act(tr->sac, x, mask, 1);
        if (tr->np < TRACK_MAX) {
            struct pending *p = &tr->p[tr->np++];
            memset(p, 0, sizeof *p);
            p->id = c->id;
            p->t0 = v->now;
            memcpy(p->tr.s, x, sizeof(float) * POS_LEARNED_FEATURES);
            memcpy(p->tr.mask, mask, POS_LEARNED_ACTIONS);
            p->tr.a = a;
        }
    }
    if (a >= 0 && a < POS_LEARNED_ACTIONS)
        tr->actions[a]++;
    return a;
}

/* One run of MIX with SEED in TR's mode: its reward, and its result into R. */
static int episode(struct trainer *tr, const struct train_mix *mix, uint64_t seed,
                   struct possim_result *r, char *err, size_t errlen)
{
    tr->reward = tr->slo_r = 0;
    tr->nt = tr->np = 0;
    memset(tr->slo, 0, sizeof tr->slo);
    tr->rate = tr->pos_rate[mix - tr->cu->mixes] / 1e9;
    tr->last_now = -1;
    struct pos_learned_learner l = {
        .arg = tr, .observe = observe, .act = act, .slo_state = slo_state};
    int rc = possim_run_learning(mix->sc, seed, r, NULL, &l, err, errlen);
    while (tr->np)
        close_pending(tr, tr->np - 1, NULL, NULL, 0);
    return rc;
}

/* Evaluates TR's mode over every mix on the evaluation seeds (1..eval_seeds) into E (their
 * means; p99: the worst). */
static int evaluate(struct trainer *tr, struct train_eval *e, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    struct possim_result *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int runs = 0, rc = 0;
    for (size_t m = 0; m < tr->cu->nmixes && rc == 0; m++) {
        for (int k = 1; k <= tr->cu->eval_seeds && rc == 0; k++) {
            if ((rc = episode(tr, &tr->cu->mixes[m], (uint64_t)k, r, err, errlen)) < 0)
                break;
            runs++;
            double rate = tr->reward / (r->makespan_s > 0 ? r->makespan_s : 1);
            e->reward_per_s += rate;
            if (tr->mode == MODE_POS)
                tr->pos_rate[m] += rate / tr->cu->eval_seeds;
            for (size_t i = 0; i < r->nclients; i++) {
                const struct possim_client_result *c = &r->clients[i];
                if (c->slo_ms > 0) {
                    e->slo_clients++;
                    e->slo_attainment += c->slo_attainment;
                    if (c->p99_ms > e->slo_p99_ms)
                        e->slo_p99_ms = c->p99_ms;
                } else {
                    e->batch_clients++;
                    e->batch_rps += c->throughput_rps;
                }
            }
            possim_result_free(r);
        }
    }
    free(r);
    if (runs)
        e->reward_per_s /= runs;
    if (e->slo_clients)
        e->slo_attainment /= e->slo_clients;
    else
        e->slo_attainment = NAN;
    if (e->batch_clients)
        e->batch_rps /= runs;
    return rc;
}

/* ---- weights ---------------------------------------------------------------------------- */

static int save_weights(const char *path, const struct sac *s, const struct train_curriculum *cu,
                        uint64_t seed, int epoch, const struct train_eval *e, double cpu_s,
                        char *err, size_t errlen)
{
    struct pos_weights *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    w->features = POS_LEARNED_FEATURES;
    w->actions = POS_LEARNED_ACTIONS;
    char hidden[48] = "";
    for (int i = 0; i < cu->nhidden; i++)
        snprintf(hidden + strlen(hidden), sizeof hidden - strlen(hidden), "%s%d", i ? "," : "",
                 cu->hidden[i]);
    snprintf(w->meta, sizeof w->meta,
             "trainer=possim-sac\ncurriculum=%.300s\nseed=%llu\nepoch=%d\nhidden=%s\n"
             "log_alpha=%.9g\nreward_per_s=%.6g\ncpu_s=%.1f\n",
             cu->path, (unsigned long long)seed, epoch, hidden, (double)s->log_alpha,
             e->reward_per_s, cpu_s);
    static const char *const names[] = {"actor", "q1", "q2", "q1_target", "q2_target"};
    const struct nn_mlp *nets[] = {&s->actor, &s->q1, &s->q2, &s->q1t, &s->q2t};
    int rc = 0;
    for (int i = 0; i < 5 && rc == 0; i++)
        if ((rc = pos_weights_add(w, names[i], nets[i])) < 0)
            snprintf(err, errlen, "%s: cannot add network %s", path, names[i]);
    if (rc == 0)
        rc = pos_weights_save(path, w, err, errlen);
    pos_weights_free(w);
    free(w);
    return rc;
}

/* Networks of a weights file into S, for a training resumed: every network of S's shape. */
static int resume_weights(const char *path, struct sac *s, int *epoch, char *err, size_t errlen)
{
    struct pos_weights *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    int rc = pos_weights_load(path, w, err, errlen);
    static const char *const names[] = {"actor", "q1", "q2", "q1_target", "q2_target"};
    struct nn_mlp *nets[] = {&s->actor, &s->q1, &s->q2, &s->q1t, &s->q2t};
    for (int i = 0; rc == 0 && i < 5; i++) {
        const struct nn_mlp *n = pos_weights_net(w, names[i]);
        if (!n || n->nparams != nets[i]->nparams || n->nlayers != nets[i]->nlayers ||
            memcmp(n->dims, nets[i]->dims, sizeof n->dims) != 0) {
            snprintf(err, errlen, "%s: network '%s' %s the curriculum's shape", path, names[i],
                     n ? "is not of" : "missing, not");
            rc = -EINVAL;
            break;
        }
        memcpy(nets[i]->p, n->p, n->nparams * sizeof *n->p);
    }
    if (rc == 0) {
        const char *la = strstr(w->meta, "log_alpha=");
        const char *ep = strstr(w->meta, "epoch=");
        if (la)
            s->log_alpha = strtof(la + 10, NULL);
        if (ep)
            *epoch = atoi(ep + 6);
    }
    pos_weights_free(w);
    free(w);
    return rc;
}

/* ---- the command ------------------------------------------------------------------------ */

static const char train_usage[] =
    "usage: possim train [-o FILE] [--seed N] [--epochs N] [--curve FILE] [--checkpoints DIR]\n"
    "                    [--resume FILE] [-q] CURRICULUM\n"
    "Trains policy learned's network by a discrete soft actor-critic in possim's virtual time\n"
    "over the mixes of CURRICULUM (docs/learned.md), and writes the weights of the epoch that\n"
    "did best in the greedy evaluation of the curriculum's own mixes. The same curriculum and\n"
    "seed give the same weights.\n"
    "  -o, --output FILE     the weights file (default learned.weights)\n"
    "  --seed N              the training seed (default 1): networks, exploration, the\n"
    "                        training runs' seeds\n"
    "  --epochs N            epochs instead of the curriculum's\n"
    "  --curve FILE          a CSV line per epoch: reward, SLO attainment, throughput of the\n"
    "                        greedy evaluation, pos's on the same runs, losses, alpha\n"
    "  --checkpoints DIR     also keep every epoch's weights as DIR/epoch-N.weights\n"
    "  --resume FILE         start from the networks of FILE (a checkpoint of this curriculum)\n"
    "  -q, --quiet           no progress lines\n"
    "Exit status: 0, 1 when training fails, 2 for a bad option or curriculum (FILE:LINE: what).\n";

static double ratio(double a, double b)
{
    return b > 0 ? a / b : NAN;
}

/* How much better E is than pos's P: the reward per second's gain over pos's magnitude. */
static double score(const struct train_eval *e, const struct train_eval *p)
{
    return (e->reward_per_s - p->reward_per_s) / (fabs(p->reward_per_s) + 1e-9);
}

int possim_train_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"seed", required_argument, NULL, 's'},
        {"epochs", required_argument, NULL, 'e'},
        {"curve", required_argument, NULL, 'c'},
        {"checkpoints", required_argument, NULL, 'k'},
        {"resume", required_argument, NULL, 'r'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *out = "learned.weights", *curve_path = NULL, *ckpt = NULL, *resume = NULL;
    uint64_t seed = 1, epochs = 0;
    int quiet = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            out = optarg;
            break;
        case 's':
            if (possim_parse_u64(optarg, &seed) < 0) {
                fprintf(stderr, "possim train: bad --seed '%s' (want an integer >= 0)\n", optarg);
                return 2;
            }
            break;
        case 'e':
            if (possim_parse_u64(optarg, &epochs) < 0 || epochs < 1 || epochs > 100000) {
                fprintf(stderr, "possim train: bad --epochs '%s' (want 1..100000)\n", optarg);
                return 2;
            }
            break;
        case 'c':
            curve_path = optarg;
            break;
        case 'k':
            ckpt = optarg;
            break;
        case 'r':
            resume = optarg;
            break;
        case 'q':
            quiet = 1;
            break;
        case 'h':
            fputs(train_usage, stdout);
            return 0;
        case ':':
            fprintf(stderr, "possim train: option '%s' needs a value (see possim train -h)\n",
                    argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "possim train: bad option '%s' (see possim train -h)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "possim train: %s (see possim train -h)\n",
                optind < argc ? "one curriculum file, please" : "no curriculum file given");
        return 2;
    }
    struct train_curriculum *cu = calloc(1, sizeof *cu);
    struct sac *sac = calloc(1, sizeof *sac);
    struct trainer *tr = calloc(1, sizeof *tr);
    struct possim_result *res = calloc(1, sizeof *res);
    char err[1536];
    int ret = 1;
    FILE *curve = NULL;
    if (!cu || !sac || !tr || !res) {
        fprintf(stderr, "possim train: out of memory\n");
        goto done;
    }
    if (train_curriculum_load(argv[optind], cu, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        ret = 2;
        goto done;
    }
    if (epochs)
        cu->epochs = (int)epochs;
    struct sac_config cfg = {
        .features = POS_LEARNED_FEATURES,
        .actions = POS_LEARNED_ACTIONS,
        .nhidden = cu->nhidden,
        .lr = (float)cu->lr,
        .tau = (float)cu->polyak,
        .alpha0 = (float)cu->alpha,
        .target_entropy = (float)cu->target_entropy,
        .batch = cu->batch,
        .replay = cu->replay,
        .prior_action = POS_LEARNED_POS,
        .prior_logit = (float)cu->prior,
        .prior_p = (float)cu->prior_p,
        .seed = seed,
    };
    memcpy(cfg.hidden, cu->hidden, sizeof cu->hidden);
    if (sac_init(sac, &cfg) < 0) {
        fprintf(stderr, "possim train: %s: cannot make the networks (out of memory?)\n", cu->path);
        goto done;
    }
    int first = 1;
    if (resume) {
        int ep = 0;
        if (resume_weights(resume, sac, &ep, err, sizeof err) < 0) {
            fprintf(stderr, "possim train: %s\n", err);
            ret = 2;
            goto done;
        }
        first = ep + 1;
    }
    if (curve_path && !(curve = fopen(curve_path, "w"))) {
        fprintf(stderr, "possim train: cannot write %s: %s\n", curve_path, strerror(errno));
        goto done;
    }
    if (ckpt && mkdir(ckpt, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "possim train: cannot make %s: %s\n", ckpt, strerror(errno));
        goto done;
    }
    tr->cu = cu;
    tr->sac = sac;
    double t0 = possim_cpu_seconds();
    struct train_eval pos, best_e = {0}, e;
    tr->mode = MODE_POS;
    if (evaluate(tr, &pos, err, sizeof err) < 0) {
        fprintf(stderr, "possim train: %s\n", err);
        goto done;
    }
    if (!quiet)
        fprintf(stderr,
                "possim train: %zu mixes, %d epochs; pos on them: reward %.1f/s, SLO attainment "
                "%.4f, worst p99 %.2f ms, batch %.1f req/s\n",
                cu->nmixes, cu->epochs, pos.reward_per_s, pos.slo_attainment, pos.slo_p99_ms,
                pos.batch_rps);
    if (curve)
        fprintf(curve,
                "# possim train %s --seed %llu\n"
                "epoch,cpu_s,train_reward_per_s,eval_reward_per_s,eval_slo_attainment,"
                "eval_slo_p99_ms,eval_batch_rps,pos_reward_per_s,pos_slo_attainment,"
                "pos_slo_p99_ms,pos_batch_rps,q_loss,actor_loss,entropy,alpha,"
                "not_pos_share,transitions,updates\n",
                cu->path, (unsigned long long)seed);
    double best = -INFINITY;
    int best_epoch = 0;
    uint64_t rng = seed ^ 0x9e3779b97f4a7c15ull;
    for (int ep = first; ep < first + cu->epochs; ep++) {
        tr->mode = MODE_LEARN;
        memset(&tr->stats, 0, sizeof tr->stats);
        uint64_t upd0 = tr->updates, choices0 = tr->choices;
        uint64_t acts0[POS_LEARNED_ACTIONS];
        memcpy(acts0, tr->actions, sizeof acts0);
        double train_r = 0;
        int runs = 0;
        for (size_t m = 0; m < cu->nmixes; m++) {
            for (int k = 0; k < cu->mixes[m].episodes; k++) {
                /* training runs never use the evaluation's seeds (1..eval_seeds) */
                uint64_t s = 1000 + (nn_rng_next(&rng) % 1000000000ull);
                if (episode(tr, &cu->mixes[m], s, res, err, sizeof err) < 0) {
                    fprintf(stderr, "possim train: [mix %s]: %s\n", cu->mixes[m].name, err);
                    goto done;
                }
                train_r += tr->reward / (res->makespan_s > 0 ? res->makespan_s : 1);
                runs++;
                possim_result_free(res);
            }
        }
        train_r /= runs;
        uint64_t upd = tr->updates - upd0, choices = tr->choices - choices0, notpos = 0;
        for (int a = 0; a < POS_LEARNED_ACTIONS; a++)
            if (a != POS_LEARNED_POS)
                notpos += tr->actions[a] - acts0[a];
        tr->mode = MODE_GREEDY;
        if (evaluate(tr, &e, err, sizeof err) < 0) {
            fprintf(stderr, "possim train: %s\n", err);
            goto done;
        }
        double cpu = possim_cpu_seconds() - t0, sc = score(&e, &pos);
        double q = upd ? tr->stats.q_loss / upd : NAN, al = upd ? tr->stats.actor_loss / upd : NAN,
               ent = upd ? tr->stats.entropy / upd : NAN;
        if (!quiet)
            fprintf(stderr,
                    "epoch %d/%d: %.0f cpu s, train reward %.1f/s; greedy: reward %.1f/s "
                    "(%+.2f%% of pos's), SLO %.4f (pos %.4f), p99 %.2f ms (pos %.2f), batch "
                    "%.3fx pos; alpha %.3g, entropy %.3f, %.1f%% not pos's choice\n",
                    ep, first + cu->epochs - 1, cpu, train_r, e.reward_per_s, 100 * sc,
                    e.slo_attainment, pos.slo_attainment, e.slo_p99_ms, pos.slo_p99_ms,
                    ratio(e.batch_rps, pos.batch_rps), (double)tr->stats.alpha, ent,
                    choices ? 100.0 * (double)notpos / (double)choices : 0.0);
        if (curve) {
            fprintf(curve,
                    "%d,%.1f,%.4f,%.4f,%.5f,%.4f,%.3f,%.4f,%.5f,%.4f,%.3f,%.5g,%.5g,%.5g,%.5g,"
                    "%.4f,%llu,%llu\n",
                    ep, cpu, train_r, e.reward_per_s, e.slo_attainment, e.slo_p99_ms, e.batch_rps,
                    pos.reward_per_s, pos.slo_attainment, pos.slo_p99_ms, pos.batch_rps, q, al, ent,
                    (double)tr->stats.alpha, choices ? (double)notpos / (double)choices : 0.0,
                    (unsigned long long)tr->stored, (unsigned long long)tr->updates);
            fflush(curve);
        }
        if (ckpt) {
            char path[POSSIM_PATH_MAX + 32];
            snprintf(path, sizeof path, "%s/epoch-%d.weights", ckpt, ep);
            if (save_weights(path, sac, cu, seed, ep, &e, cpu, err, sizeof err) < 0) {
                fprintf(stderr, "possim train: %s\n", err);
                goto done;
            }
        }
        if (sc >= best) {
            best = sc;
            best_e = e;
            best_epoch = ep;
            if (save_weights(out, sac, cu, seed, ep, &e, cpu, err, sizeof err) < 0) {
                fprintf(stderr, "possim train: %s\n", err);
                goto done;
            }
        }
    }
    if (!quiet)
        fprintf(stderr,
                "possim train: %s: epoch %d's networks (greedy reward %+.2f%% of pos's, SLO "
                "%.4f against %.4f, batch %.3fx), %.0f cpu s\n",
                out, best_epoch, 100 * best, best_e.slo_attainment, pos.slo_attainment,
                ratio(best_e.batch_rps, pos.batch_rps), possim_cpu_seconds() - t0);
    ret = 0;
done:
    if (curve && fclose(curve) != 0 && ret == 0) {
        fprintf(stderr, "possim train: cannot write %s: %s\n", curve_path, strerror(errno));
        ret = 1;
    }
    if (cu)
        train_curriculum_free(cu);
    if (sac)
        sac_free(sac);
    free(res);
    free(tr);
    free(sac);
    free(cu);
    return ret;
}
