/* Integration tests of the timelines (docs/timeline.md): possim --timeline and postrace's merge
 * of shim traces write Chrome trace-event JSON that a strict parser accepts, with the fields
 * the format needs on every event, times that only go forward on each track, slices that
 * nest (never overlap partly), one op slice per launch (possim) or per traced operator with a
 * completion (postrace), every possim op inside its request's slice, and a process per traced
 * process. Real processes: possim; posapp under the shim on the simulated driver. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

static struct suite suite; /* no posd: possim, and posapp under the shim on its own */

static int suite_init(void)
{
    return suite_open(&suite, "timeline", NULL);
}

static int suite_clean(void)
{
    return suite_close(&suite);
}

/* ---- a strict JSON reader, enough for the trace format ------------------------------------- */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
    enum jtype t;
    double num;
    char *str;          /* J_STR */
    struct jval *items; /* J_ARR, J_OBJ (values) */
    char **keys;        /* J_OBJ */
    size_t n;
};

struct jparser {
    const char *p;
    int err;
};

static void ws(struct jparser *j)
{
    while (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t')
        j->p++;
}

static char *jstring(struct jparser *j)
{
    if (*j->p != '"') {
        j->err = 1;
        return NULL;
    }
    j->p++;
    size_t cap = 64, n = 0;
    char *s = malloc(cap);
    while (*j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (!c || c < 0x20) {
            j->err = 1; /* unterminated, or a raw control character */
            free(s);
            return NULL;
        }
        if (c == '\\') {
            j->p++;
            if (*j->p == 'u') {
                for (int k = 1; k <= 4; k++)
                    if (!isxdigit((unsigned char)j->p[k]))
                        j->err = 1;
                j->p += 4;
                c = '?';
            } else if (strchr("\"\\/bfnrt", *j->p) && *j->p) {
                c = (unsigned char)*j->p;
            } else {
                j->err = 1;
            }
        }
        if (j->err) {
            free(s);
            return NULL;
        }
        if (n + 2 > cap)
            s = realloc(s, cap *= 2);
        s[n++] = (char)c;
        j->p++;
    }
    j->p++;
    s[n] = '\0';
    return s;
}

static void jvalue(struct jparser *j, struct jval *v);

static void jlist(struct jparser *j, struct jval *v, int obj)
{
    char close = obj ? '}' : ']';
    j->p++;
    ws(j);
    size_t cap = 0;
    if (*j->p == close) {
        j->p++;
        return;
    }
    for (;;) {
        if (v->n == cap) {
            cap = cap ? cap * 2 : 8;
            v->items = realloc(v->items, cap * sizeof *v->items);
            if (obj)
                v->keys = realloc(v->keys, cap * sizeof *v->keys);
        }
        ws(j);
        if (obj) {
            v->keys[v->n] = jstring(j);
            ws(j);
            if (j->err || *j->p++ != ':') {
                j->err = 1;
                return;
            }
        }
        jvalue(j, &v->items[v->n++]);
        if (j->err)
            return;
        ws(j);
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p++ != close)
            j->err = 1;
        return;
    }
}

static void jvalue(struct jparser *j, struct jval *v)
{
    memset(v, 0, sizeof *v);
    ws(j);
    if (*j->p == '{') {
        v->t = J_OBJ;
        jlist(j, v, 1);
    } else if (*j->p == '[') {
        v->t = J_ARR;
        jlist(j, v, 0);
    } else if (*j->p == '"') {
        v->t = J_STR;
        v->str = jstring(j);
    } else if (strncmp(j->p, "true", 4) == 0 || strncmp(j->p, "false", 5) == 0) {
        v->t = J_BOOL;
        j->p += *j->p == 't' ? 4 : 5;
    } else if (strncmp(j->p, "null", 4) == 0) {
        j->p += 4;
    } else if (*j->p == '-' || isdigit((unsigned char)*j->p)) {
        char *end;
        v->t = J_NUM;
        v->num = strtod(j->p, &end);
        j->p = end;
    } else {
        j->err = 1;
    }
}

static const struct jval *jget(const struct jval *o, const char *key)
{
    for (size_t i = 0; o && o->t == J_OBJ && i < o->n; i++)
        if (o->keys[i] && strcmp(o->keys[i], key) == 0)
            return &o->items[i];
    return NULL;
}

static void jfree(struct jval *v)
{
    for (size_t i = 0; i < v->n; i++) {
        jfree(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
}

/* ---- the trace-event checks ---------------------------------------------------------------- */

struct slice {
    double pid, tid, ts, dur;
    const char *name, *cat;
};

struct summary {
    int errors;
    size_t slices, processes, tracks;
    size_t ops, requests, ops_outside_requests;
    struct slice *s;
};

static void trace_error(struct summary *sm, const char *what, size_t i)
{
    sm->errors++;
    if (sm->errors <= 10)
        fprintf(stderr, "\n  event %zu: %s", i, what);
}

/* Reads the trace at PATH and checks it; the counts in *SM. Returns 0 when it parsed. */
static int check_trace(const char *path, struct summary *sm)
{
    memset(sm, 0, sizeof *sm);
    struct stat st;
    if (stat(path, &st) < 0)
        return -1;
    char *text = malloc((size_t)st.st_size + 1);
    if (util_read_file(path, text, (size_t)st.st_size + 1) < 0) {
        free(text);
        return -1;
    }
    struct jparser j = {text, 0};
    struct jval root;
    jvalue(&j, &root);
    ws(&j);
    if (j.err || *j.p) {
        fprintf(stderr, "\n  %s: not JSON near byte %td", path, j.p - text);
        free(text);
        jfree(&root);
        return -1;
    }
    const struct jval *ev = jget(&root, "traceEvents");
    if (!ev || ev->t != J_ARR) {
        sm->errors++;
        fprintf(stderr, "\n  %s: no traceEvents array", path);
    }
    sm->s = calloc(ev ? ev->n + 1 : 1, sizeof *sm->s);
    for (size_t i = 0; ev && i < ev->n; i++) {
        const struct jval *e = &ev->items[i], *ph = jget(e, "ph"), *pid = jget(e, "pid"),
                          *tid = jget(e, "tid"), *name = jget(e, "name");
        if (!ph || ph->t != J_STR || !pid || pid->t != J_NUM || !tid || tid->t != J_NUM || !name ||
            name->t != J_STR) {
            trace_error(sm, "an event without ph, pid, tid and name", i);
            continue;
        }
        if (strcmp(ph->str, "M") == 0) {
            const struct jval *a = jget(jget(e, "args"), "name");
            if (!a || a->t != J_STR)
                trace_error(sm, "metadata without args.name", i);
            if (strcmp(name->str, "process_name") == 0)
                sm->processes++;
            else if (strcmp(name->str, "thread_name") == 0)
                sm->tracks++;
            else
                trace_error(sm, "unknown metadata", i);
            continue;
        }
        const struct jval *ts = jget(e, "ts"), *dur = jget(e, "dur"), *cat = jget(e, "cat");
        if (strcmp(ph->str, "X") != 0 || !ts || ts->t != J_NUM || !dur || dur->t != J_NUM ||
            dur->num < 0 || ts->num < 0) {
            trace_error(sm, "not a complete event with ts >= 0 and dur >= 0", i);
            continue;
        }
        sm->s[sm->slices++] = (struct slice){
            pid->num, tid->num,          ts->num,
            dur->num, strdup(name->str), cat && cat->t == J_STR ? strdup(cat->str) : NULL};
    }
    /* per track: times go forward in file order, slices nest */
    struct slice *stack[16];
    int depth = 0;
    for (size_t i = 0; i < sm->slices; i++) {
        struct slice *s = &sm->s[i];
        int same = i > 0 && s->pid == sm->s[i - 1].pid && s->tid == sm->s[i - 1].tid;
        if (!same)
            depth = 0;
        else if (s->ts < sm->s[i - 1].ts)
            trace_error(sm, "time went back on a track", i);
        const double eps = 1e-6;
        while (depth && stack[depth - 1]->ts + stack[depth - 1]->dur <= s->ts + eps)
            depth--; /* it ended before this one starts */
        if (depth && s->ts + s->dur > stack[depth - 1]->ts + stack[depth - 1]->dur + eps)
            trace_error(sm, "a slice overlaps the end of the one it starts in", i);
        int in_request = 0;
        for (int k = 0; k < depth; k++)
            in_request |= stack[k]->cat && strcmp(stack[k]->cat, "request") == 0;
        if (s->cat && strcmp(s->cat, "request") == 0)
            sm->requests++;
        else {
            sm->ops++;
            sm->ops_outside_requests += !in_request;
        }
        if (depth < 16)
            stack[depth++] = s;
    }
    free(text);
    jfree(&root);
    return 0;
}

static void summary_free(struct summary *sm)
{
    for (size_t i = 0; i < sm->slices; i++) {
        free((char *)sm->s[i].name);
        free((char *)sm->s[i].cat);
    }
    free(sm->s);
}

/* possim's timeline: a process and a track per client, one op slice per launch, one request
 * slice per request, each op inside its request. */
static void test_possim_timeline_is_valid_and_complete(void)
{
    char ini[192], json[192], cmd[512], out[16384];
    snprintf(ini, sizeof ini, "%s/two.ini", suite.dir);
    snprintf(json, sizeof json, "%s/possim.json", suite.dir);
    FILE *f = fopen(ini, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("[device]\npreset = xavier-nx\nmode = timeslice\n[sched]\npolicy = priority\n"
          "[client detector]\nmodel = resnet18\nrequests = 6\narrival = poisson:50\n"
          "class_priority = 10\n[client batch]\nmodel = mobilenet_v2\nrequests = 9\n"
          "class_priority = 20\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "build/possim -o json --timeline %s %s", json, ini);
    CU_ASSERT_EQUAL_FATAL(util_run_stdout(cmd, out, sizeof out), 0);
    struct summary sm;
    CU_ASSERT_EQUAL_FATAL(check_trace(json, &sm), 0);
    CU_ASSERT_EQUAL(sm.errors, 0);
    CU_ASSERT_EQUAL(sm.processes, 2);
    CU_ASSERT_EQUAL(sm.tracks, 2);
    CU_ASSERT_EQUAL(sm.requests, 15);
    CU_ASSERT_EQUAL((long long)sm.ops, util_number(out, "launches"));
    CU_ASSERT_EQUAL(sm.ops_outside_requests, 0);
    summary_free(&sm);
}

/* Operator lines of a trace file with a completion time. */
static int completed_ops(const char *path)
{
    static char text[1 << 20];
    if (util_read_file(path, text, sizeof text) < 0)
        return -1;
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        int fields = 0;
        char *last = NULL, *prev = NULL;
        for (char *p = line; *p;) {
            while (*p == ' ')
                p++;
            if (!*p)
                break;
            prev = last;
            last = p;
            fields++;
            while (*p && *p != ' ')
                p++;
        }
        n += fields >= 12 && prev && prev[0] != '-';
    }
    return n;
}

/* Two traced processes merge into one timeline: a process each, a slice per operator with a
 * completion, each stream's slices one after another; a file that is not a trace is named
 * with its line. */
static void test_postrace_merges_shim_traces(void)
{
    char cmd[2048], out[4096], json[192], traces[2][192];
    const char *models[2] = {"resnet18", "mobilenet_v2"};
    for (int i = 0; i < 2; i++) {
        snprintf(traces[i], sizeof traces[i], "%s/app%d.trace", suite.dir, i);
        snprintf(cmd, sizeof cmd,
                 "POS_SOCKET=%s/nosuch.sock POS_TRACE=%s %s build/posapp --model %s --requests 3 "
                 ">/dev/null 2>&1",
                 suite.dir, traces[i], util_shim_preload_env(), models[i]);
        CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    }
    snprintf(json, sizeof json, "%s/shim.json", suite.dir);
    snprintf(cmd, sizeof cmd, "build/postrace -o %s %s %s 2>&1", json, traces[0], traces[1]);
    CU_ASSERT_EQUAL_FATAL(util_run_stdout(cmd, out, sizeof out), 0);
    struct summary sm;
    CU_ASSERT_EQUAL_FATAL(check_trace(json, &sm), 0);
    CU_ASSERT_EQUAL(sm.errors, 0);
    CU_ASSERT_EQUAL(sm.processes, 2);
    CU_ASSERT(sm.tracks >= 2);
    int want = completed_ops(traces[0]) + completed_ops(traces[1]);
    CU_ASSERT(want > 100);
    CU_ASSERT_EQUAL((int)sm.ops, want);
    CU_ASSERT_EQUAL(sm.requests, 0); /* a shim trace has no request boundaries */
    /* one stream runs one operator at a time: no slice starts inside another */
    for (size_t i = 1; i < sm.slices; i++)
        if (sm.s[i].pid == sm.s[i - 1].pid && sm.s[i].tid == sm.s[i - 1].tid)
            CU_ASSERT(sm.s[i].ts >= sm.s[i - 1].ts + sm.s[i - 1].dur - 1e-6);
    summary_free(&sm);
    /* not a trace: FILE:LINE, exit 2 */
    snprintf(cmd, sizeof cmd, "build/postrace %s/two.ini 2>&1 >/dev/null", suite.dir);
    snprintf(out, sizeof out, "%s/two.ini:1: not a pos trace", suite.dir);
    char got[4096];
    CU_ASSERT_EQUAL(util_run_stdout(cmd, got, sizeof got), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(got, out));
    CU_ASSERT_EQUAL(util_run_stdout("build/postrace --bogus 2>&1", got, sizeof got), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(got, "see --help"));
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("timeline", suite_init, suite_clean);
    POS_ADD_TEST(s, test_possim_timeline_is_valid_and_complete);
    POS_ADD_TEST(s, test_postrace_merges_shim_traces);
}
