/* Stage schedules (see schedule.h and docs/schedule.md): the file's parser, and the follower
 * that grants each client of a matched mix up to the end of its run in the current stage. */
#include "sched/schedule.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pos/client_shm.h"

/* ---- the parser ----------------------------------------------------------------------------- */

#define MAX_FIELDS (3 + POS_SCHEDULE_MAX_MODELS)

/* Where the parser is: each directive comes in this order (docs/schedule.md). */
enum expect {
    X_HEADER,
    X_DEVICE,
    X_PREDICTED,
    X_MODELS,
    X_MODEL,
    X_KEY,
    X_STAGES,
    X_STAGE,
    X_END,
    X_DONE
};

struct parser {
    const char *path;
    int line;
    char *err;
    size_t errlen;
    struct pos_schedule *s;
    enum expect want;
    size_t model, key, stage;
    uint32_t *left; /* operators each model has not run yet */
};

static int fail(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *p, const char *fmt, ...)
{
    int n = snprintf(p->err, p->errlen, "%s:%d: ", p->path, p->line);
    if (n >= 0 && (size_t)n < p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

/* A decimal integer in LO..HI and nothing else. */
static int read_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

static int read_us(const char *s, double *out)
{
    if (!*s || strspn(s, "0123456789.eE+-") != strlen(s))
        return -EINVAL;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno || *end || !isfinite(d) || d < 0 || d > 1e12)
        return -EINVAL;
    *out = d;
    return 0;
}

static int read_key(const char *s, uint64_t *out)
{
    size_t n = strlen(s);
    if (n == 0 || n > 16 || strspn(s, "0123456789abcdefABCDEF") != n)
        return -EINVAL;
    *out = strtoull(s, NULL, 16);
    return 0;
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n < POS_SCHEDULE_NAME_MAX &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-") == n;
}

static const char *const expect_words[] = {
    [X_HEADER] = "pos-schedule", [X_DEVICE] = "device", [X_PREDICTED] = "predicted_us",
    [X_MODELS] = "models",       [X_MODEL] = "model",   [X_KEY] = "key",
    [X_STAGES] = "stages",       [X_STAGE] = "stage",   [X_END] = "end",
};

static int want_fields(struct parser *p, int nf, int want, const char *form)
{
    if (nf != want)
        return fail(p, "expected '%s' (%d fields), got %d fields", form, want, nf);
    return 0;
}

static int directive(struct parser *p, char **f, int nf)
{
    struct pos_schedule *s = p->s;
    uint64_t v = 0;
    if (p->want == X_DONE)
        return fail(p, "'%s' after 'end'", f[0]);
    if (p->want == X_KEY && strcmp(f[0], "key") != 0)
        return fail(p, "model %s declares %u operators but has %zu key lines",
                    s->models[p->model].name, s->models[p->model].nops, p->key);
    if (p->want == X_STAGE && strcmp(f[0], "stage") != 0)
        return fail(p, "'stages %zu' but only %zu stage lines", s->nstages, p->stage);
    if (strcmp(f[0], expect_words[p->want]) != 0)
        return fail(p, "expected '%s', got '%s'", expect_words[p->want], f[0]);
    switch (p->want) {
    case X_HEADER:
        if (want_fields(p, nf, 2, "pos-schedule VERSION") < 0)
            return -EINVAL;
        if (read_uint(f[1], 0, UINT32_MAX, &v) < 0)
            return fail(p, "bad version '%s'", f[1]);
        if (v != POS_SCHEDULE_VERSION)
            return fail(p, "version %llu is not supported (this one reads version %d)",
                        (unsigned long long)v, POS_SCHEDULE_VERSION);
        p->want = X_DEVICE;
        return 0;
    case X_DEVICE:
        if (want_fields(p, nf, 4, "device NAME MODE SMS") < 0)
            return -EINVAL;
        if (!valid_name(f[1]))
            return fail(p, "bad device name '%s'", f[1]);
        snprintf(s->device, sizeof s->device, "%s", f[1]);
        if (strcmp(f[2], "mps") == 0)
            s->concurrent = 1;
        else if (strcmp(f[2], "timeslice") == 0)
            s->concurrent = 0;
        else
            return fail(p, "bad mode '%s' (expected mps or timeslice)", f[2]);
        if (read_uint(f[3], 1, 100000, &v) < 0)
            return fail(p, "bad SM count '%s' (expected 1..100000)", f[3]);
        s->sm_count = (uint32_t)v;
        p->want = X_PREDICTED;
        return 0;
    case X_PREDICTED:
        if (want_fields(p, nf, 2, "predicted_us US") < 0)
            return -EINVAL;
        if (read_us(f[1], &s->predicted_us) < 0)
            return fail(p, "bad time '%s' (expected microseconds, >= 0)", f[1]);
        p->want = X_MODELS;
        return 0;
    case X_MODELS:
        if (want_fields(p, nf, 2, "models N") < 0)
            return -EINVAL;
        if (read_uint(f[1], 1, POS_SCHEDULE_MAX_MODELS, &v) < 0)
            return fail(p, "bad model count '%s' (expected 1..%d)", f[1], POS_SCHEDULE_MAX_MODELS);
        s->nmodels = (size_t)v;
        p->model = 0;
        p->want = X_MODEL;
        return 0;
    case X_MODEL: {
        if (want_fields(p, nf, 3, "model NAME OPS") < 0)
            return -EINVAL;
        struct pos_schedule_model *m = &s->models[p->model];
        if (!valid_name(f[1]))
            return fail(p, "bad model name '%s'", f[1]);
        if (read_uint(f[2], 1, POS_SCHEDULE_MAX_OPS, &v) < 0)
            return fail(p, "bad operator count '%s' (expected 1..%d)", f[2], POS_SCHEDULE_MAX_OPS);
        snprintf(m->name, sizeof m->name, "%s", f[1]);
        m->nops = (uint32_t)v;
        if (!(m->keys = calloc(m->nops, sizeof *m->keys)))
            return -ENOMEM;
        p->key = 0;
        p->want = X_KEY;
        return 0;
    }
    case X_KEY: {
        if (want_fields(p, nf, 3, "key INDEX HEX") < 0)
            return -EINVAL;
        struct pos_schedule_model *m = &s->models[p->model];
        if (read_uint(f[1], 0, UINT32_MAX, &v) < 0 || v != p->key)
            return fail(p, "key index '%s' out of order (expected %zu)", f[1], p->key);
        if (read_key(f[2], &m->keys[p->key]) < 0)
            return fail(p, "bad key '%s' (expected 1..16 hex digits)", f[2]);
        if (++p->key == m->nops)
            p->want = ++p->model == s->nmodels ? X_STAGES : X_MODEL;
        return 0;
    }
    case X_STAGES:
        if (want_fields(p, nf, 2, "stages N") < 0)
            return -EINVAL;
        if (read_uint(f[1], 1, POS_SCHEDULE_MAX_STAGES, &v) < 0)
            return fail(p, "bad stage count '%s' (expected 1..%d)", f[1], POS_SCHEDULE_MAX_STAGES);
        s->nstages = (size_t)v;
        s->runs = calloc(s->nstages * s->nmodels, sizeof *s->runs);
        s->stage_us = calloc(s->nstages, sizeof *s->stage_us);
        p->left = calloc(s->nmodels, sizeof *p->left);
        if (!s->runs || !s->stage_us || !p->left)
            return -ENOMEM;
        for (size_t m = 0; m < s->nmodels; m++)
            p->left[m] = s->models[m].nops;
        p->want = X_STAGE;
        return 0;
    case X_STAGE: {
        if (nf != 3 + (int)s->nmodels)
            return fail(p, "expected 'stage INDEX US' and %zu runs, got %d fields", s->nmodels, nf);
        if (read_uint(f[1], 0, UINT32_MAX, &v) < 0 || v != p->stage)
            return fail(p, "stage index '%s' out of order (expected %zu)", f[1], p->stage);
        if (read_us(f[2], &s->stage_us[p->stage]) < 0)
            return fail(p, "bad time '%s' (expected microseconds, >= 0)", f[2]);
        uint64_t total = 0;
        for (size_t m = 0; m < s->nmodels; m++) {
            if (read_uint(f[3 + m], 0, POS_SCHEDULE_MAX_OPS, &v) < 0)
                return fail(p, "bad run '%s' for model %s", f[3 + m], s->models[m].name);
            if (v > p->left[m])
                return fail(p, "model %s runs past its %u operators", s->models[m].name,
                            s->models[m].nops);
            p->left[m] -= (uint32_t)v;
            s->runs[p->stage * s->nmodels + m] = (uint32_t)v;
            total += v;
        }
        if (!total)
            return fail(p, "stage %zu runs nothing", p->stage);
        if (++p->stage == s->nstages)
            p->want = X_END;
        return 0;
    }
    case X_END:
        if (want_fields(p, nf, 1, "end") < 0)
            return -EINVAL;
        for (size_t m = 0; m < s->nmodels; m++)
            if (p->left[m])
                return fail(p, "model %s runs %u of its %u operators", s->models[m].name,
                            s->models[m].nops - p->left[m], s->models[m].nops);
        p->want = X_DONE;
        return 0;
    default:
        return -EINVAL;
    }
}

/* Splits LINE (NUL-terminated, changed in place) into fields at blanks. */
static int split(char *line, char **f)
{
    int n = 0;
    for (char *t = strtok(line, " \t\r"); t; t = strtok(NULL, " \t\r")) {
        if (n == MAX_FIELDS)
            return n + 1;
        f[n++] = t;
    }
    return n;
}

static const char *truncated_what(const struct parser *p)
{
    switch (p->want) {
    case X_HEADER:
        return "empty: no 'pos-schedule' line";
    case X_KEY:
        return "truncated in the key lines of a model";
    case X_STAGE:
        return "truncated in the stage lines";
    default:
        return "truncated: no 'end' line";
    }
}

int pos_schedule_parse(const char *path, const char *text, size_t len, struct pos_schedule *out,
                       char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    struct parser p = {.path = path, .err = err, .errlen = errlen, .s = out};
    char buf[4096];
    int rc = 0;
    size_t at = 0;
    while (!rc && at < len) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        p.line++;
        if (memchr(text + at, '\0', n)) {
            rc = fail(&p, "NUL byte in the line");
            break;
        }
        if (n >= sizeof buf) {
            rc = fail(&p, "line longer than %zu characters", sizeof buf - 1);
            break;
        }
        memcpy(buf, text + at, n);
        buf[n] = '\0';
        at += n + (nl != NULL);
        char *s = buf + strspn(buf, " \t\r");
        if (!*s || *s == '#')
            continue;
        char *f[MAX_FIELDS + 1];
        int nf = split(s, f);
        if (nf > MAX_FIELDS)
            rc = fail(&p, "too many fields");
        else
            rc = directive(&p, f, nf);
    }
    if (!rc && p.want != X_DONE) {
        p.line = p.line ? p.line : 1;
        rc = fail(&p, "%s", truncated_what(&p));
    }
    free(p.left);
    if (!rc)
        rc = pos_schedule_finish(out);
    if (rc == -ENOMEM)
        snprintf(err, errlen, "%s: out of memory", path);
    if (rc)
        pos_schedule_free(out);
    return rc;
}

void pos_schedule_free(struct pos_schedule *s)
{
    for (size_t m = 0; m < POS_SCHEDULE_MAX_MODELS; m++)
        free(s->models[m].keys);
    free(s->runs);
    free(s->stage_us);
    free(s->run_end);
    memset(s, 0, sizeof *s);
}

int pos_schedule_finish(struct pos_schedule *s)
{
    free(s->run_end);
    s->run_end = calloc(s->nstages * s->nmodels + 1, sizeof *s->run_end);
    if (!s->run_end)
        return -ENOMEM;
    for (size_t m = 0; m < s->nmodels; m++) {
        uint32_t end = 0;
        for (size_t k = 0; k < s->nstages; k++) {
            end += s->runs[k * s->nmodels + m];
            s->run_end[k * s->nmodels + m] = end;
        }
        if (end != s->models[m].nops)
            return -EINVAL;
        const struct pos_schedule_model *a = &s->models[m];
        s->models[m].rep = (int)m;
        for (size_t o = 0; o < m; o++) {
            const struct pos_schedule_model *b = &s->models[o];
            if (a->nops == b->nops && memcmp(a->keys, b->keys, a->nops * sizeof *a->keys) == 0) {
                s->models[m].rep = (int)o;
                break;
            }
        }
    }
    return 0;
}

/* ---- the follower: what each client is running ------------------------------------------- */

void pos_schedule_state_init(struct pos_schedule_state *st, const struct pos_schedule *s)
{
    memset(st, 0, sizeof *st);
    st->s = s;
    st->idle_ns = 5000000;
    st->next_ns = INT64_MAX;
    st->why = s ? "no complete request of every client seen yet" : "no schedule";
    for (size_t i = 0; i < POS_SCHEDULE_MAX_SLOTS; i++) {
        st->track[i].last_model = -1;
        st->track[i].model = -1;
    }
}

static uint32_t all_models(const struct pos_schedule *s)
{
    return s->nmodels >= 32 ? UINT32_MAX : (1u << s->nmodels) - 1;
}

/* The request the track watched ended with its operator LAST: it was a model's request when
 * every operator of it was seen and they are exactly that model's keys. */
static void track_end(const struct pos_schedule *s, struct pos_schedule_track *t, uint64_t last)
{
    if (t->ended || !t->req)
        return;
    t->ended = 1;
    t->last_end = last;
    t->last_model = -1;
    uint64_t n = last + 1 - t->req_start;
    for (size_t m = 0; !t->gap && m < s->nmodels; m++)
        if ((t->cand >> m & 1) && s->models[m].nops == n) {
            t->last_model = s->models[m].rep;
            break;
        }
}

static void track_op(const struct pos_schedule *s, struct pos_schedule_track *t,
                     const struct pos_sched_op *op)
{
    if (op->request != t->req) {
        track_end(s, t, op->seq - 1);
        t->req = op->request;
        t->req_start = op->seq;
        t->cand = all_models(s);
        t->gap = 0;
        t->ended = 0;
    }
    uint64_t pos = op->seq - t->req_start;
    for (size_t m = 0; m < s->nmodels; m++)
        if ((t->cand >> m & 1) && (pos >= s->models[m].nops || s->models[m].keys[pos] != op->key))
            t->cand &= ~(1u << m);
    /* while following, every operator from the round's start must be its model's, request
     * after request, however the requests were told apart */
    if (t->model >= 0 && op->seq >= t->anchor) {
        const struct pos_schedule_model *md = &s->models[t->model];
        if (md->keys[(op->seq - t->anchor) % md->nops] != op->key)
            t->off = 1;
    }
}

void pos_schedule_observe(struct pos_schedule_state *st, const struct pos_schedule *s,
                          const struct pos_sched_client *c)
{
    if (!s || c->slot < 0 || c->slot >= POS_SCHEDULE_MAX_SLOTS)
        return;
    struct pos_schedule_track *t = &st->track[c->slot];
    if (t->id != c->id) {
        /* a new client in the slot: what it ran before now is unseen */
        memset(t, 0, sizeof *t);
        t->id = c->id;
        t->last_model = -1;
        t->cursor = c->completed_upto;
        t->gap = 1;
        t->req = UINT64_MAX;
        t->model = -1;
    }
    for (uint64_t seq = t->cursor + 1; seq <= c->submitted; seq++) {
        const struct pos_sched_op *op = pos_sched_op_at(c, seq);
        if (!op) {
            /* forgotten unseen (presumed complete): the request it was in is unknown */
            t->gap = 1;
            t->off |= t->model >= 0 && seq >= t->anchor;
            t->cursor = seq;
            continue;
        }
        track_op(s, t, op);
        t->cursor = seq;
    }
    /* a request ends when a synchronisation covered all of it */
    if (t->req == c->request.id && !c->request.active && t->cursor == c->submitted)
        track_end(s, t, c->submitted);
}

/* ---- the follower: decisions ----------------------------------------------------------------- */

static uint64_t umax(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static struct pos_sched_client *client_by_id(struct pos_sched_view *v, uint32_t id)
{
    for (size_t i = 0; i < v->nclients; i++)
        if (v->clients[i].id == id)
            return &v->clients[i];
    return NULL;
}

static int unmatch(struct pos_schedule_state *st, const char *why)
{
    if (st->phase != POS_SCHEDULE_UNMATCHED)
        st->unmatches++;
    st->phase = POS_SCHEDULE_UNMATCHED;
    st->why = why;
    st->next_ns = INT64_MAX;
    for (size_t i = 0; i < POS_SCHEDULE_MAX_SLOTS; i++) {
        st->track[i].model = -1;
        st->track[i].off = 0;
    }
    return 0;
}

/* Binds every client to a model of S by the model its last whole request was. Returns 0 when
 * the clients are exactly S's mix. */
static int bind_mix(struct pos_schedule_state *st, const struct pos_schedule *s,
                    struct pos_sched_view *v)
{
    if (v->nclients != s->nmodels) {
        st->why = v->nclients < s->nmodels ? "fewer clients than the schedule's models"
                                           : "more clients than the schedule's models";
        return -1;
    }
    uint32_t bound = 0;
    for (size_t i = 0; i < v->nclients; i++) {
        const struct pos_sched_client *c = &v->clients[i];
        const struct pos_schedule_track *t = &st->track[c->slot];
        if (t->last_model < 0) {
            st->why = "a client's last request is not one of the schedule's models (or unseen)";
            return -1;
        }
        size_t m = 0;
        while (m < s->nmodels && ((bound >> m & 1) || s->models[m].rep != t->last_model))
            m++;
        if (m == s->nmodels) {
            st->why = "the clients' models are not the schedule's mix";
            return -1;
        }
        bound |= 1u << m;
        st->bind[m] = c->id;
    }
    return 0;
}

/* The last seq of the request C is in (or ended) on the way to the round's start: its model's
 * requests are N operators each. */
static int client_boundary(const struct pos_schedule_track *t, const struct pos_sched_client *c,
                           uint32_t n, int model_bit, uint64_t *out)
{
    uint64_t b;
    if (t->ended) {
        b = t->last_end;
    } else {
        if (!(t->cand >> model_bit & 1))
            return -1; /* its current request is not its model's */
        b = t->req_start + n - 1;
    }
    /* a grant given earlier may reach into later requests: the round starts after it */
    while (b < c->granted)
        b += n;
    *out = b;
    return 0;
}

static void grant(struct pos_sched_client *c, uint64_t upto)
{
    c->mode = POS_GRANT_WINDOW;
    c->window = 0;
    c->new_granted = umax(c->granted, upto);
    c->held = c->submitted > c->new_granted;
}

static int start_align(struct pos_schedule_state *st, const struct pos_schedule *s,
                       struct pos_sched_view *v)
{
    for (size_t m = 0; m < s->nmodels; m++) {
        struct pos_sched_client *c = client_by_id(v, st->bind[m]);
        uint64_t b;
        if (client_boundary(&st->track[c->slot], c, s->models[m].nops, (int)m, &b) < 0) {
            st->why = "a client's current request is not its model's";
            return -1;
        }
        st->base[m] = b + 1;
        st->changed_ns[m] = v->now;
        struct pos_schedule_track *t = &st->track[c->slot];
        t->model = (int)m;
        t->anchor = st->base[m];
        t->off = 0;
    }
    st->phase = POS_SCHEDULE_ALIGN;
    st->matches++;
    st->why = NULL;
    return 0;
}

/* Is model M's client where the schedule expects it? Every operator of it from the first
 * round's start was seen, and each is its model's at its place in the model's requests. */
static int on_position(const struct pos_schedule_state *st, const struct pos_sched_client *c)
{
    return !st->track[c->slot].off;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

int pos_schedule_decide(struct pos_schedule_state *st, const struct pos_schedule *s,
                        struct pos_sched_view *v)
{
    if (st->s != s)
        pos_schedule_state_init(st, s);
    if (!s)
        return 0;
    for (size_t i = 0; i < v->nclients; i++)
        pos_schedule_observe(st, s, &v->clients[i]);
    if (st->phase == POS_SCHEDULE_UNMATCHED) {
        if (bind_mix(st, s, v) < 0 || start_align(st, s, v) < 0)
            return 0;
    } else {
        if (v->nclients > s->nmodels)
            return unmatch(st, "a client joined the mix");
        for (size_t m = 0; m < s->nmodels; m++)
            if (!client_by_id(v, st->bind[m]))
                return unmatch(st, "a client of the mix left");
    }
    for (size_t m = 0; m < s->nmodels; m++) {
        const struct pos_sched_client *c = client_by_id(v, st->bind[m]);
        if (!on_position(st, c))
            return unmatch(st, "a client is not at the schedule's position");
        /* busy, or it launched since the last decision */
        if (c->submitted != c->completed_upto || c->submitted != st->seen_sub[m]) {
            st->seen_sub[m] = c->submitted;
            st->changed_ns[m] = v->now;
        }
    }
    if (st->phase == POS_SCHEDULE_ALIGN) {
        int aligned = 1;
        for (size_t m = 0; m < s->nmodels; m++)
            aligned &= client_by_id(v, st->bind[m])->completed_upto + 1 >= st->base[m];
        if (aligned) {
            st->phase = POS_SCHEDULE_RUN;
            st->stage = 0;
        }
    }
    /* stages whose every run completed are behind us */
    while (st->phase == POS_SCHEDULE_RUN) {
        int done = 1;
        for (size_t m = 0; m < s->nmodels && done; m++)
            done = client_by_id(v, st->bind[m])->completed_upto + 1 >=
                   st->base[m] + s->run_end[st->stage * s->nmodels + m];
        if (!done)
            break;
        if (++st->stage == s->nstages) {
            st->stage = 0;
            st->rounds++;
            for (size_t m = 0; m < s->nmodels; m++)
                st->base[m] += s->models[m].nops;
        }
    }
    st->next_ns = INT64_MAX;
    for (size_t m = 0; m < s->nmodels; m++) {
        struct pos_sched_client *c = client_by_id(v, st->bind[m]);
        uint64_t end = st->phase == POS_SCHEDULE_ALIGN
                           ? st->base[m] - 1
                           : st->base[m] + s->run_end[st->stage * s->nmodels + m] - 1;
        int waiting_on = c->completed_upto < end;
        /* a model that keeps the stage waiting with nothing to run is not coming: the mix is
         * not running as the schedule assumes (closed loops), so let the caller decide */
        if (waiting_on && c->submitted == c->completed_upto) {
            if (v->now - st->changed_ns[m] >= st->idle_ns)
                return unmatch(st, "a client of the mix went idle inside a stage");
            st->next_ns = min64(st->next_ns, st->changed_ns[m] + st->idle_ns);
        }
    }
    for (size_t m = 0; m < s->nmodels; m++) {
        struct pos_sched_client *c = client_by_id(v, st->bind[m]);
        uint64_t end = st->phase == POS_SCHEDULE_ALIGN
                           ? st->base[m] - 1
                           : st->base[m] + s->run_end[st->stage * s->nmodels + m] - 1;
        grant(c, end);
    }
    return 1;
}

const char *pos_schedule_note(const struct pos_schedule_state *st, const char *policy,
                              const char *otherwise, char *buf, size_t len)
{
    if (!st->s)
        return NULL;
    if (!st->why)
        snprintf(buf, len, "%s: following the schedule (%zu models, %zu stages)", policy,
                 st->s->nmodels, st->s->nstages);
    else
        snprintf(buf, len, "%s: schedule not followed (%s decides): %s; %llu rounds followed",
                 policy, otherwise, st->why, (unsigned long long)st->rounds);
    return buf;
}
