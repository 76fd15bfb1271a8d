/* Tests sched/schedule.c and the staged policy: the schedule file parser reads a good file and
 * refuses truncated files, other versions and impossible values with "FILE:LINE: what"; the
 * follower matches clients to the schedule's models by their kernel keys, grants each exactly
 * to the end of its run in the current stage, moves to the next stage only when every run of
 * the stage completed, never takes a grant back, and lets the caller decide (returns 0) on a
 * mix change, a client off the schedule's position or a wrong kernel; staged without a
 * schedule decides as priority. The follower is driven by a small model of the core here: each
 * client launches its requests one operator at a time as its grant allows, the device completes
 * what is released, and a synchronisation ends each request. */
#include "tests/cunit_main.h"

#include <string.h>

#include "pos/client_shm.h"
#include "sched/policy/policy.h"
#include "sched/schedule.h"

/* ---- the parser ----------------------------------------------------------------------------- */

/* Two models: "a" of 3 operators (keys 1, 2, 3) and "b" of 2 (keys 1, 9); three stages. */
static const char good[] = "pos-schedule 1\n"
                           "# comment\n"
                           "device rtx3080 mps 68\n"
                           "predicted_us 30.5\n"
                           "models 2\n"
                           "model a 3\n"
                           "key 0 1\n"
                           "key 1 2\n"
                           "key 2 3\n"
                           "model b 2\n"
                           "key 0 1\n"
                           "key 1 9\n"
                           "stages 3\n"
                           "stage 0 10 1 0\n"
                           "stage 1 12.5 2 1\n"
                           "\n"
                           "stage 2 8 0 1\n"
                           "end\n";

static void test_parse_good_file(void)
{
    struct pos_schedule s;
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(pos_schedule_parse("t.sched", good, strlen(good), &s, err, sizeof err),
                          0);
    CU_ASSERT_STRING_EQUAL(s.device, "rtx3080");
    CU_ASSERT_EQUAL(s.concurrent, 1);
    CU_ASSERT_EQUAL(s.sm_count, 68);
    CU_ASSERT_EQUAL(s.nmodels, 2);
    CU_ASSERT_EQUAL(s.models[0].nops, 3);
    CU_ASSERT_EQUAL(s.models[1].keys[1], 9);
    CU_ASSERT_EQUAL(s.nstages, 3);
    CU_ASSERT_EQUAL(s.runs[1 * 2 + 0], 2);
    CU_ASSERT_EQUAL(s.run_end[1 * 2 + 0], 3); /* model a through stage 1 */
    CU_ASSERT_EQUAL(s.run_end[2 * 2 + 1], 2);
    CU_ASSERT_DOUBLE_EQUAL(s.stage_us[1], 12.5, 1e-9);
    pos_schedule_free(&s);
}

/* GOOD with line LINE (1-based) replaced by REPL ("" drops it), cut after CUT lines (0: all). */
static void edited(char *out, size_t len, int line, const char *repl, int cut)
{
    const char *p = good;
    size_t n = 0;
    out[0] = '\0';
    for (int l = 1; *p && (!cut || l <= cut); l++) {
        const char *nl = strchr(p, '\n');
        size_t k = (size_t)(nl - p) + 1;
        if (l == line)
            n += (size_t)snprintf(out + n, len - n, "%s%s", repl, *repl ? "\n" : "");
        else
            n += (size_t)snprintf(out + n, len - n, "%.*s", (int)k, p);
        p += k;
    }
}

static void expect_refused(const char *text, size_t len, const char *want)
{
    struct pos_schedule s;
    char err[256] = "";
    CU_ASSERT(pos_schedule_parse("t.sched", text, len, &s, err, sizeof err) < 0);
    CU_ASSERT_STRING_EQUAL(err, want);
    if (strcmp(err, want) != 0)
        fprintf(stderr, "\n  got:  %s\n  want: %s\n", err, want);
    CU_ASSERT_PTR_NULL(s.runs); /* nothing is left allocated */
}

static void expect_edit_refused(int line, const char *repl, int cut, const char *want)
{
    char text[2048];
    edited(text, sizeof text, line, repl, cut);
    expect_refused(text, strlen(text), want);
}

static void test_parse_refuses_bad_input_with_its_line(void)
{
    /* truncated */
    expect_refused("", 0, "t.sched:1: empty: no 'pos-schedule' line");
    expect_edit_refused(0, "", 17, "t.sched:17: truncated: no 'end' line");
    expect_edit_refused(0, "", 15, "t.sched:15: truncated in the stage lines");
    expect_edit_refused(0, "", 8, "t.sched:8: truncated in the key lines of a model");
    expect_edit_refused(18, "", 0, "t.sched:17: truncated: no 'end' line");
    /* another version */
    expect_edit_refused(1, "pos-schedule 2", 0,
                        "t.sched:1: version 2 is not supported (this one reads version 1)");
    expect_edit_refused(1, "pos-scheduel 1", 0,
                        "t.sched:1: expected 'pos-schedule', got 'pos-scheduel'");
    /* impossible values */
    expect_edit_refused(3, "device rtx3080 mig 68", 0,
                        "t.sched:3: bad mode 'mig' (expected mps or timeslice)");
    expect_edit_refused(3, "device rtx3080 mps 0", 0,
                        "t.sched:3: bad SM count '0' (expected 1..100000)");
    expect_edit_refused(4, "predicted_us -1", 0,
                        "t.sched:4: bad time '-1' (expected microseconds, >= 0)");
    expect_edit_refused(5, "models 0", 0, "t.sched:5: bad model count '0' (expected 1..16)");
    expect_edit_refused(6, "model a 0", 0, "t.sched:6: bad operator count '0' (expected 1..16384)");
    expect_edit_refused(8, "key 1 2g", 0, "t.sched:8: bad key '2g' (expected 1..16 hex digits)");
    expect_edit_refused(8, "key 2 2", 0, "t.sched:8: key index '2' out of order (expected 1)");
    expect_edit_refused(9, "", 0, "t.sched:9: model a declares 3 operators but has 2 key lines");
    expect_edit_refused(14, "stage 0 10 4 0", 0, "t.sched:14: model a runs past its 3 operators");
    expect_edit_refused(14, "stage 0 10 0 0", 0, "t.sched:14: stage 0 runs nothing");
    expect_edit_refused(14, "stage 0 10 1", 0,
                        "t.sched:14: expected 'stage INDEX US' and 2 runs, got 4 fields");
    expect_edit_refused(17, "stage 2 8 0 0", 0, "t.sched:17: stage 2 runs nothing");
}

static void test_parse_refuses_short_runs_and_trailing_lines(void)
{
    expect_edit_refused(15, "stage 1 12.5 1 1", 0, "t.sched:18: model a runs 2 of its 3 operators");
    char text[2048];
    edited(text, sizeof text, 0, "", 0);
    strcat(text, "stage 3 1 1 1\n");
    expect_refused(text, strlen(text), "t.sched:19: 'stage' after 'end'");
    edited(text, sizeof text, 0, "", 0);
    text[27] = '\0'; /* a NUL byte inside the device line */
    expect_refused(text, sizeof good - 1, "t.sched:3: NUL byte in the line");
}

/* ---- the follower -----------------------------------------------------------------------------
 */

#define NOPS   64
#define MAXC   4
#define WINDOW 1024

/* A small model of the core for the follower: clients, their operators, releases, completions
 * and requests, and the view a policy gets. */
struct fake_client {
    uint32_t id;
    const uint64_t *keys; /* one request's kernel keys */
    uint32_t nops;
    uint64_t submitted, released_upto, completed_upto, granted;
    uint32_t mode;
    uint64_t req_id;
    int req_active;
    struct pos_sched_op ops[WINDOW];
};

static struct fake_client fc[MAXC];
static struct pos_sched_client vc[MAXC];
static size_t nfc;
static struct pos_schedule_state st;
static struct pos_schedule sched;

static void fill(size_t i)
{
    struct fake_client *f = &fc[i];
    struct pos_sched_client *c = &vc[i];
    memset(c, 0, sizeof *c);
    c->id = f->id;
    c->slot = (int)f->id;
    c->submitted = f->submitted;
    c->released = c->released_upto = f->released_upto;
    c->completed = c->completed_upto = f->completed_upto;
    c->granted = f->granted;
    c->mode = f->mode;
    c->new_granted = f->granted;
    c->ops = f->ops;
    c->ops_mask = WINDOW - 1;
    c->request.active = f->req_active;
    c->request.id = f->req_id;
}

static void add_client(uint32_t id, const uint64_t *keys, uint32_t nops)
{
    struct fake_client *f = &fc[nfc++];
    memset(f, 0, sizeof *f);
    f->id = id;
    f->keys = keys;
    f->nops = nops;
    f->mode = POS_GRANT_FREE;
}

/* The client launches its next operator (as the shim: it goes when granted, else it waits). */
static void launch(size_t i, uint64_t key)
{
    struct fake_client *f = &fc[i];
    if (!f->req_active) {
        f->req_active = 1;
        f->req_id++;
    }
    uint64_t seq = ++f->submitted;
    struct pos_sched_op *op = &f->ops[seq & (WINDOW - 1)];
    memset(op, 0, sizeof *op);
    op->seq = seq;
    op->key = key;
    op->request = f->req_id;
}

/* Releases what the grant covers, in launch order. */
static void release(size_t i)
{
    struct fake_client *f = &fc[i];
    uint64_t upto = f->mode == POS_GRANT_FREE
                        ? f->submitted
                        : (f->granted < f->submitted ? f->granted : f->submitted);
    if (upto > f->released_upto)
        f->released_upto = upto;
}

/* The device completes what was released; the follower sees each operator before it is
 * forgotten, as the staged policy's on_complete does. A synchronisation ends a request. */
static void complete(size_t i)
{
    struct fake_client *f = &fc[i];
    fill(i);
    pos_schedule_observe(&st, &sched, &vc[i]);
    f->completed_upto = f->released_upto;
    if (f->req_active && f->completed_upto == f->submitted && (f->submitted % f->nops) == 0)
        f->req_active = 0;
}

/* One decision: the follower's, applied as the core applies it (a grant never goes back).
 * Returns what pos_schedule_decide returned. */
static int decide(int64_t now)
{
    for (size_t i = 0; i < nfc; i++)
        fill(i);
    struct pos_sched_view v = {.now = now, .clients = vc, .nclients = nfc};
    int r = pos_schedule_decide(&st, &sched, &v);
    for (size_t i = 0; i < nfc && r; i++) {
        CU_ASSERT(vc[i].new_granted >= fc[i].granted); /* never back */
        fc[i].granted = vc[i].new_granted > fc[i].granted ? vc[i].new_granted : fc[i].granted;
        fc[i].mode = vc[i].mode;
    }
    if (!r)
        for (size_t i = 0; i < nfc; i++)
            fc[i].mode = POS_GRANT_FREE; /* the caller's decision: everything goes */
    for (size_t i = 0; i < nfc; i++)
        release(i);
    return r;
}

/* Each client launches one more operator of its requests if it is not waiting on a grant. */
static void launch_step(void)
{
    for (size_t i = 0; i < nfc; i++) {
        struct fake_client *f = &fc[i];
        if (f->submitted > f->released_upto)
            continue; /* its thread waits for a grant */
        if (f->req_active && f->completed_upto < f->submitted && f->submitted % f->nops == 0)
            continue; /* it synchronises on its request */
        launch(i, f->keys[f->submitted % f->nops]);
        release(i);
    }
}

static const uint64_t keys_a[] = {11, 12, 13, 14};
static const uint64_t keys_b[] = {11, 22, 23};

/* Schedule for a (4 ops) and b (3 ops): stage 0 runs a:2 b:0, stage 1 a:1 b:2, stage 2 a:1
 * b:1. */
static void make_schedule(void)
{
    char text[1024];
    int n = snprintf(text, sizeof text,
                     "pos-schedule 1\ndevice h200 mps 132\npredicted_us 1\nmodels 2\nmodel a 4\n"
                     "key 0 b\nkey 1 c\nkey 2 d\nkey 3 e\nmodel b 3\nkey 0 b\nkey 1 16\n"
                     "key 2 17\nstages 3\nstage 0 1 2 0\nstage 1 1 1 2\nstage 2 1 1 1\nend\n");
    char err[256];
    CU_ASSERT_EQUAL_FATAL(pos_schedule_parse("t.sched", text, (size_t)n, &sched, err, sizeof err),
                          0);
    pos_schedule_state_init(&st, &sched);
    nfc = 0;
}

/* Runs the clients free for a request each (the caller decides, as at start-up), then until
 * the follower has taken over. Returns the decisions it took. */
static int run_until_following(int64_t *now)
{
    for (int k = 0; k < 200; k++) {
        launch_step();
        for (size_t i = 0; i < nfc; i++)
            complete(i);
        *now += 1000;
        if (decide(*now) && st.phase == POS_SCHEDULE_RUN)
            return k;
    }
    return -1;
}

static uint64_t run_end(size_t m)
{
    return st.base[m] + sched.run_end[st.stage * sched.nmodels + m] - 1;
}

static void test_follower_grants_to_the_end_of_each_stage_run(void)
{
    make_schedule();
    add_client(1, keys_a, 4);
    add_client(2, keys_b, 3);
    int64_t now = 0;
    CU_ASSERT_FATAL(run_until_following(&now) >= 0);
    CU_ASSERT_EQUAL(st.bind[0], 1);
    CU_ASSERT_EQUAL(st.bind[1], 2);
    uint64_t rounds = st.rounds;
    size_t last_stage = st.stage;
    for (int k = 0; k < 400; k++) {
        launch_step();
        /* every client's grant ends exactly where its run in the current stage ends */
        for (size_t m = 0; m < 2; m++)
            CU_ASSERT_EQUAL(fc[m].granted, run_end(m));
        /* nothing beyond it was released */
        for (size_t m = 0; m < 2; m++)
            CU_ASSERT(fc[m].released_upto <= run_end(m));
        /* the device completes a's work at every step and b's at every third: a stage
         * waits for both */
        complete(0);
        if (k % 3 == 2)
            complete(1);
        now += 1000;
        CU_ASSERT_EQUAL_FATAL(decide(now), 1);
        /* a stage ends only when every run of it completed */
        if (st.stage != last_stage) {
            size_t prev = last_stage;
            for (size_t m = 0; m < 2; m++) {
                uint64_t base =
                    st.stage == 0 && prev == 2 ? st.base[m] - sched.models[m].nops : st.base[m];
                CU_ASSERT(fc[m].completed_upto + 1 >= base + sched.run_end[prev * 2 + m]);
            }
            CU_ASSERT_EQUAL(st.stage, (prev + 1) % 3); /* one at a time, never back */
            last_stage = st.stage;
        }
    }
    CU_ASSERT(st.rounds >= rounds + 20); /* it went round and round */
    CU_ASSERT_EQUAL(st.unmatches, 0);
    pos_schedule_free(&sched);
}

static void test_follower_never_takes_a_grant_back(void)
{
    make_schedule();
    add_client(1, keys_a, 4);
    add_client(2, keys_b, 3);
    int64_t now = 0;
    CU_ASSERT_FATAL(run_until_following(&now) >= 0);
    /* a grant given beyond the stage's run (by an earlier decision) stays */
    fc[1].granted += 5;
    uint64_t g = fc[1].granted;
    for (size_t i = 0; i < nfc; i++)
        fill(i);
    struct pos_sched_view v = {.now = now, .clients = vc, .nclients = nfc};
    CU_ASSERT_EQUAL(pos_schedule_decide(&st, &sched, &v), 1);
    CU_ASSERT(vc[1].new_granted >= g);
    pos_schedule_free(&sched);
}

static void test_follower_unmatches_when_a_client_joins_or_leaves(void)
{
    make_schedule();
    add_client(1, keys_a, 4);
    add_client(2, keys_b, 3);
    int64_t now = 0;
    CU_ASSERT_FATAL(run_until_following(&now) >= 0);
    add_client(3, keys_b, 3); /* another client of the device */
    CU_ASSERT_EQUAL(decide(now += 1000), 0);
    CU_ASSERT_EQUAL(st.phase, POS_SCHEDULE_UNMATCHED);
    CU_ASSERT_EQUAL(st.unmatches, 1);
    nfc = 2; /* it leaves: the mix is the schedule's again, and is followed again */
    CU_ASSERT(run_until_following(&now) >= 0);
    CU_ASSERT_EQUAL(st.matches, 2);
    fc[0] = fc[1]; /* client 1 leaves; only b is left */
    nfc = 1;
    CU_ASSERT_EQUAL(decide(now += 1000), 0);
    pos_schedule_free(&sched);
}

static void test_follower_unmatches_on_a_foreign_kernel(void)
{
    static const uint64_t keys_a2[] = {11, 12, 99, 14}; /* a model the schedule does not have */
    make_schedule();
    add_client(1, keys_a, 4);
    add_client(2, keys_b, 3);
    int64_t now = 0;
    CU_ASSERT_FATAL(run_until_following(&now) >= 0);
    fc[0].keys = keys_a2; /* its next requests run another kernel */
    int unmatched = 0;
    for (int k = 0; k < 100 && !unmatched; k++) {
        launch_step();
        for (size_t i = 0; i < nfc; i++)
            complete(i);
        unmatched = decide(now += 1000) == 0;
    }
    CU_ASSERT(unmatched);
    /* and it does not follow that mix again: its requests are not the schedule's model */
    for (int k = 0; k < 100; k++) {
        launch_step();
        for (size_t i = 0; i < nfc; i++)
            complete(i);
        CU_ASSERT_EQUAL(decide(now += 1000), 0);
    }
    pos_schedule_free(&sched);
}

static void test_follower_needs_the_schedules_mix(void)
{
    make_schedule();
    add_client(1, keys_b, 3);
    add_client(2, keys_b, 3); /* two of b: not the mix of a and b */
    int64_t now = 0;
    CU_ASSERT_EQUAL(run_until_following(&now), -1);
    CU_ASSERT_EQUAL(st.matches, 0);
    pos_schedule_free(&sched);
}

static void test_follower_lets_go_of_an_idle_client(void)
{
    make_schedule();
    add_client(1, keys_a, 4);
    add_client(2, keys_b, 3);
    int64_t now = 0;
    CU_ASSERT_FATAL(run_until_following(&now) >= 0);
    st.idle_ns = 20000;
    /* client 2 stops launching while a stage waits for it; client 1 runs what it may */
    int r = 1;
    int64_t t0 = now;
    for (int k = 0; k < 100 && r; k++) {
        if (fc[0].submitted <= fc[0].released_upto)
            launch(0, keys_a[fc[0].submitted % 4]);
        release(0);
        complete(0);
        complete(1);
        r = decide(now += 1000);
    }
    CU_ASSERT_EQUAL(r, 0);
    CU_ASSERT(now - t0 >= st.idle_ns); /* not before it was idle that long */
    CU_ASSERT_PTR_NOT_NULL_FATAL(st.why);
    CU_ASSERT_STRING_EQUAL(st.why, "a client of the mix went idle inside a stage");
    pos_schedule_free(&sched);
}

/* ---- the staged policy --------------------------------------------------------------------------
 */

static void test_staged_without_schedule_decides_as_priority(void)
{
    const struct pos_policy_ops *staged = pos_policy_find("staged");
    const struct pos_policy_ops *prio = pos_policy_find("priority");
    CU_ASSERT_PTR_NOT_NULL_FATAL(staged);
    void *state = NULL;
    CU_ASSERT_EQUAL_FATAL(staged->init(&state, NULL, NULL), 0);
    struct pos_sched_client a[2], b[2];
    memset(a, 0, sizeof a);
    for (int i = 0; i < 2; i++) {
        a[i].id = (uint32_t)i + 1;
        a[i].slot = i;
        a[i].priority = i ? 20 : 10;
        a[i].submitted = 10;
        a[i].released = a[i].released_upto = 2;
        a[i].completed = a[i].completed_upto = 1;
        a[i].granted = 2;
    }
    memcpy(b, a, sizeof a);
    struct pos_sched_view va = {.now = 5,
                                .guard_period_ns = 200000000,
                                .credits = 1024,
                                .window_ns = 500000,
                                .clients = a,
                                .nclients = 2};
    struct pos_sched_view vb = va;
    vb.clients = b;
    CU_ASSERT_EQUAL(staged->decide(state, &va), prio->decide(NULL, &vb));
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(a[i].mode, b[i].mode);
        CU_ASSERT_EQUAL(a[i].new_granted, b[i].new_granted);
        CU_ASSERT_EQUAL(a[i].held, b[i].held);
    }
    CU_ASSERT_EQUAL(a[1].held, 1); /* the lower class is held: priority's rule did decide */
    CU_ASSERT_PTR_NOT_NULL(strstr(staged->note(state), "no schedule"));
    staged->fini(state);
}

void pos_test_register(void)
{
    CU_pSuite s = CU_add_suite("schedule", NULL, NULL);
    CU_add_test(s, "test_parse_good_file", test_parse_good_file);
    CU_add_test(s, "test_parse_refuses_bad_input_with_its_line",
                test_parse_refuses_bad_input_with_its_line);
    CU_add_test(s, "test_parse_refuses_short_runs_and_trailing_lines",
                test_parse_refuses_short_runs_and_trailing_lines);
    CU_add_test(s, "test_follower_grants_to_the_end_of_each_stage_run",
                test_follower_grants_to_the_end_of_each_stage_run);
    CU_add_test(s, "test_follower_never_takes_a_grant_back",
                test_follower_never_takes_a_grant_back);
    CU_add_test(s, "test_follower_unmatches_when_a_client_joins_or_leaves",
                test_follower_unmatches_when_a_client_joins_or_leaves);
    CU_add_test(s, "test_follower_unmatches_on_a_foreign_kernel",
                test_follower_unmatches_on_a_foreign_kernel);
    CU_add_test(s, "test_follower_needs_the_schedules_mix", test_follower_needs_the_schedules_mix);
    CU_add_test(s, "test_follower_lets_go_of_an_idle_client",
                test_follower_lets_go_of_an_idle_client);
    CU_add_test(s, "test_staged_without_schedule_decides_as_priority",
                test_staged_without_schedule_decides_as_priority);
}
