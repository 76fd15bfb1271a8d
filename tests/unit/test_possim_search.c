/* Tests possim search (tools/possim_search.c): the DP finds the optimum that brute force over
 * every stage sequence finds, on a hand-sized abstract instance and on a tiny mix on the
 * virtual-GPU model, with and without bound pruning; sequential and greedy plans cover every
 * operator once and add up; a stage's cost does not depend on what ran before it; in
 * timeslice mode a stage of two models only serialises them; a written schedule parses back to
 * the mix's keys and runs; and possim's staged policy follows a searched schedule end to end.
 * Run from the repository root. */
#include "tests/cunit_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/schedule.h"
#include "tools/possim_scenario.h"
#include "tools/possim_search.h"
#include "tools/possim_sim.h"

static char dir[] = "/tmp/pos-test-search.XXXXXX";

/* Writes DIR/NAME.model: the header and first NOPS operators of sim/models/FROM.model. */
static int tiny_model(const char *name, const char *from, int nops)
{
    char src[256], dst[256], line[512];
    snprintf(src, sizeof src, "sim/models/%s.model", from);
    snprintf(dst, sizeof dst, "%s/%s.model", dir, name);
    FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
    if (!in || !out) {
        if (in)
            fclose(in);
        if (out)
            fclose(out);
        return -1;
    }
    int ops = 0;
    while (fgets(line, sizeof line, in)) {
        if (strncmp(line, "model ", 6) == 0)
            fprintf(out, "model %s\n", name);
        else if (strncmp(line, "op ", 3) == 0 ? ops++ < nops : 1)
            fputs(line, out);
    }
    fclose(in);
    return fclose(out);
}

static int suite_init(void)
{
    if (!mkdtemp(dir))
        return 1;
    setenv("POS_MODELS_DIR", dir, 1);
    return tiny_model("ta", "resnet18", 3) || tiny_model("tb", "mobilenet_v2", 3) ||
           tiny_model("tc", "inception_v1", 2);
}

static int suite_clean(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : 1;
}

static struct possim_scenario sc;

/* The host model's cores for load_scenario: the search and its schedule assume every client
 * launches on time, so the tests give them cores of their own (possim.md, "The host"). */
static const char *host_cores = "unlimited";

static void load_scenario(const char *mode, const char *extra)
{
    char text[2048], err[512] = "";
    snprintf(text, sizeof text,
             "[device]\npreset = rtx3080\nmode = %s\n[sched]\npolicy = fifo\n%s"
             "[host]\ncores = %s\n"
             "[client a]\nmodel = ta\nrequests = 30\n[client b]\nmodel = tb\nrequests = 30\n"
             "[client c]\nmodel = tc\nrequests = 30\n",
             mode, extra, host_cores);
    int rc = possim_scenario_parse("t.ini", text, &sc, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "%s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

/* ---- brute force ------------------------------------------------------------------------------
 */

/* The least cost of every stage sequence from progress U, trying every vector of runs. */
static int64_t brute(const struct search_problem *p, uint32_t *u, uint64_t *paths)
{
    int done = 1;
    for (size_t m = 0; m < p->n; m++)
        done &= u[m] == p->units[m];
    if (done) {
        ++*paths;
        return 0;
    }
    int64_t best = INT64_MAX;
    uint32_t r[SEARCH_MAX_MODELS] = {0};
    for (;;) {
        size_t m = 0;
        while (m < p->n && ++r[m] > p->units[m] - u[m])
            r[m++] = 0;
        if (m == p->n)
            break;
        int64_t c = p->cost(p->arg, u, r) + p->barrier_ns;
        for (size_t k = 0; k < p->n; k++)
            u[k] += r[k];
        int64_t rest = brute(p, u, paths);
        for (size_t k = 0; k < p->n; k++)
            u[k] -= r[k];
        if (rest != INT64_MAX && c + rest < best)
            best = c + rest;
    }
    return best;
}

static void check_plan(const struct search_problem *p, const struct search_plan *pl)
{
    uint32_t sum[SEARCH_MAX_MODELS] = {0};
    int64_t total = 0;
    for (size_t k = 0; k < pl->nstages; k++) {
        uint32_t any = 0;
        for (size_t m = 0; m < p->n; m++) {
            sum[m] += pl->runs[k * p->n + m];
            any += pl->runs[k * p->n + m];
        }
        CU_ASSERT(any > 0); /* no empty stage */
        total += pl->cost_ns[k] + p->barrier_ns;
    }
    for (size_t m = 0; m < p->n; m++)
        CU_ASSERT_EQUAL(sum[m], p->units[m]); /* every unit once */
    CU_ASSERT_EQUAL(total, pl->total_ns);
}

/* ---- an abstract instance ----------------------------------------------------------------------
 */

/* Unit times of two models. A stage costs its longest run plus 1, plus its shortest run when
 * that is longer than 2 (two long runs contend; a short one hides beside a long one). */
static const int64_t hand_a[] = {5, 1, 4}, hand_b[] = {1, 5, 4};

static int64_t hand_cost(void *arg, const uint32_t *u, const uint32_t *r)
{
    (void)arg;
    int64_t s[2] = {0, 0};
    for (uint32_t k = 0; k < r[0]; k++)
        s[0] += hand_a[u[0] + k];
    for (uint32_t k = 0; k < r[1]; k++)
        s[1] += hand_b[u[1] + k];
    int64_t hi = s[0] > s[1] ? s[0] : s[1], lo = s[0] > s[1] ? s[1] : s[0];
    return hi + (lo > 2 ? lo : 0) + 1;
}

static void test_dp_matches_brute_force_on_a_hand_instance(void)
{
    /* two units each, by hand: sequential (5+1)+1 + (1+5)+1 = 14; all at once 6 + 6 + 1 = 13;
     * a5 beside b1, then a1 beside b5: (5+1) + (5+1) = 12, the optimum */
    struct search_problem p = {.n = 2, .units = {2, 2}, .cost = hand_cost};
    p.solo[0] = hand_a;
    p.solo[1] = hand_b;
    struct search_limits lim = {.max_run = 0, .bound = 0};
    struct search_plan pl;
    CU_ASSERT_EQUAL_FATAL(search_dp(&p, &lim, &pl), 0);
    CU_ASSERT_EQUAL(pl.total_ns, 12);
    CU_ASSERT_EQUAL_FATAL(pl.nstages, 2);
    CU_ASSERT(pl.runs[0] == 1 && pl.runs[1] == 1 && pl.runs[2] == 1 && pl.runs[3] == 1);
    search_plan_free(&pl);
    /* three units each: brute force over every stage sequence settles it */
    p.units[0] = p.units[1] = 3;
    uint32_t u[SEARCH_MAX_MODELS] = {0};
    uint64_t paths = 0;
    int64_t best = brute(&p, u, &paths);
    CU_ASSERT(paths > 100); /* it did try every sequence */
    CU_ASSERT_EQUAL_FATAL(search_dp(&p, &lim, &pl), 0);
    CU_ASSERT_EQUAL(pl.total_ns, best);
    check_plan(&p, &pl);
    search_plan_free(&pl);
    lim.bound = 1; /* the bounds hold here (a stage costs at least its longest run) */
    CU_ASSERT_EQUAL_FATAL(search_dp(&p, &lim, &pl), 0);
    CU_ASSERT_EQUAL(pl.total_ns, best);
    CU_ASSERT(pl.pruned > 0);
    search_plan_free(&pl);
    p.barrier_ns = 10; /* a costly barrier: fewer stages win */
    best = brute(&p, u, &paths);
    CU_ASSERT_EQUAL_FATAL(search_dp(&p, &lim, &pl), 0);
    CU_ASSERT_EQUAL(pl.total_ns, best);
    CU_ASSERT_EQUAL(pl.nstages, 1);
    search_plan_free(&pl);
}

/* ---- the mix on the device model
 * ------------------------------------------------------------------ */

static void test_dp_matches_brute_force_on_the_device_model(void)
{
    load_scenario("mps", "");
    char err[512];
    struct search_mix *x = search_mix_new(&sc, 0, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    struct search_problem p;
    search_mix_problem(x, 0, &p);
    CU_ASSERT_EQUAL(p.units[0], 3);
    CU_ASSERT_EQUAL(p.units[2], 2);
    uint32_t u[SEARCH_MAX_MODELS] = {0};
    uint64_t paths = 0;
    int64_t best = brute(&p, u, &paths);
    struct search_limits lim = {.max_run = 0, .bound = 0};
    struct search_plan dp, dpb, gr, seq;
    CU_ASSERT_EQUAL_FATAL(search_dp(&p, &lim, &dp), 0);
    CU_ASSERT_EQUAL(dp.total_ns, best);
    check_plan(&p, &dp);
    lim.bound = 1;
    CU_ASSERT_EQUAL_FATAL(search_dp(&p, &lim, &dpb), 0);
    CU_ASSERT_EQUAL(dpb.total_ns, best);
    /* sequential: each model alone, whole, one after another */
    CU_ASSERT_EQUAL_FATAL(search_sequential(&p, &seq), 0);
    CU_ASSERT_EQUAL(seq.nstages, 3);
    int64_t alone = 0;
    for (size_t m = 0; m < 3; m++) {
        uint32_t st[SEARCH_MAX_MODELS] = {0}, ln[SEARCH_MAX_MODELS] = {0};
        ln[m] = (uint32_t)search_mix_model(x, m)->req.nops;
        alone += search_mix_stage_ns(x, st, ln);
    }
    CU_ASSERT_EQUAL(seq.total_ns, alone);
    check_plan(&p, &seq);
    /* greedy is a plan of the same stages: no better than the optimum */
    lim.max_run = 2;
    lim.solo_any = 1;
    CU_ASSERT_EQUAL_FATAL(search_greedy(&p, &lim, &gr), 0);
    check_plan(&p, &gr);
    CU_ASSERT(gr.total_ns >= best);
    CU_ASSERT(best < seq.total_ns); /* co-running pays on this mix under MPS */
    search_plan_free(&dp);
    search_plan_free(&dpb);
    search_plan_free(&gr);
    search_plan_free(&seq);
    search_mix_free(x);
}

static void test_stage_cost_does_not_depend_on_history(void)
{
    const char *modes[] = {"mps", "timeslice"};
    int64_t solo[2];
    for (int i = 0; i < 2; i++) {
        load_scenario(modes[i], "");
        char err[512];
        struct search_mix *x = search_mix_new(&sc, 0, err, sizeof err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(x);
        uint32_t st[SEARCH_MAX_MODELS] = {1, 0, 0}, ln[SEARCH_MAX_MODELS] = {2, 3, 1};
        int64_t first = search_mix_stage_ns(x, st, ln);
        uint32_t st2[SEARCH_MAX_MODELS] = {0, 1, 1}, ln2[SEARCH_MAX_MODELS] = {1, 2, 1};
        search_mix_stage_ns(x, st2, ln2);
        search_mix_stage_ns(x, st2, ln2);
        CU_ASSERT_EQUAL(search_mix_stage_ns(x, st, ln), first);
        /* one model alone: one context, which never switches, in either mode, however many
         * stages of several contexts ran before */
        uint32_t one[SEARCH_MAX_MODELS] = {0, 3, 0}, zero[SEARCH_MAX_MODELS] = {0};
        solo[i] = search_mix_stage_ns(x, zero, one);
        search_mix_free(x);
    }
    CU_ASSERT_EQUAL(solo[0], solo[1]);
}

static void test_timeslice_stage_only_serialises(void)
{
    load_scenario("timeslice", "");
    char err[512];
    struct search_mix *x = search_mix_new(&sc, 0, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    uint32_t st[SEARCH_MAX_MODELS] = {0}, a[SEARCH_MAX_MODELS] = {3}, b[SEARCH_MAX_MODELS] = {0, 3},
             ab[SEARCH_MAX_MODELS] = {3, 3};
    int64_t ta = search_mix_stage_ns(x, st, a), tb = search_mix_stage_ns(x, st, b);
    CU_ASSERT(search_mix_stage_ns(x, st, ab) >= ta + tb);
    search_mix_free(x);
}

static void test_written_schedule_parses_back(void)
{
    load_scenario("mps", "");
    char err[512];
    struct search_mix *x = search_mix_new(&sc, 2, err, sizeof err); /* coarsened */
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    struct search_problem p;
    search_mix_problem(x, 0, &p);
    struct search_limits lim = {.max_run = 1, .bound = 1, .solo_any = 1};
    struct search_plan pl;
    CU_ASSERT_EQUAL_FATAL(search_dp(&p, &lim, &pl), 0);
    struct pos_schedule s, back;
    CU_ASSERT_EQUAL_FATAL(search_plan_schedule(x, &pl, &s), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CU_ASSERT_EQUAL(search_write_schedule(f, &s, "test"), 0);
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(pos_schedule_parse("w.sched", text, len, &back, err, sizeof err), 0);
    CU_ASSERT_EQUAL(back.nmodels, 3);
    CU_ASSERT_EQUAL(back.nstages, pl.nstages);
    CU_ASSERT_EQUAL(back.sm_count, 68);
    for (size_t m = 0; m < 3; m++) {
        const struct search_model *sm = search_mix_model(x, m);
        CU_ASSERT_EQUAL(back.models[m].nops, sm->req.nops);
        CU_ASSERT(memcmp(back.models[m].keys, sm->keys, sm->req.nops * sizeof *sm->keys) == 0);
        CU_ASSERT_EQUAL(back.run_end[(back.nstages - 1) * 3 + m], sm->req.nops);
    }
    CU_ASSERT(memcmp(back.runs, s.runs, back.nstages * 3 * sizeof *back.runs) == 0);
    free(text);
    pos_schedule_free(&s);
    pos_schedule_free(&back);
    search_plan_free(&pl);
    search_mix_free(x);
}

/* ---- end to end in possim
 * -------------------------------------------------------------------------- */

/* The highest request rate of R's clients over the lowest. */
static double rate_spread(const struct possim_result *r)
{
    double lo = r->clients[0].throughput_rps, hi = lo;
    for (size_t i = 1; i < r->nclients; i++) {
        double t = r->clients[i].throughput_rps;
        lo = t < lo ? t : lo;
        hi = t > hi ? t : hi;
    }
    return hi / lo;
}

static void test_possim_staged_follows_a_searched_schedule(void)
{
    load_scenario("mps", "");
    char err[512], path[300], extra[400];
    struct search_mix *x = search_mix_new(&sc, 0, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    struct search_problem p;
    search_mix_problem(x, 0, &p);
    struct search_limits lim = {.max_run = 0, .bound = 1};
    struct search_plan pl;
    CU_ASSERT_EQUAL_FATAL(search_dp(&p, &lim, &pl), 0);
    struct pos_schedule s;
    CU_ASSERT_EQUAL_FATAL(search_plan_schedule(x, &pl, &s), 0);
    snprintf(path, sizeof path, "%s/mix.sched", dir);
    FILE *f = fopen(path, "w");
    CU_ASSERT_EQUAL(search_write_schedule(f, &s, NULL), 0);
    fclose(f);
    snprintf(extra, sizeof extra, "schedule = %s\n", path);
    load_scenario("mps", extra);
    snprintf(sc.policy, sizeof sc.policy, "staged");
    struct possim_result r;
    CU_ASSERT_EQUAL_FATAL(possim_run(&sc, 1, &r, err, sizeof err), 0);
    /* it was following the schedule at the end, and the clients ran in lock step: one
     * request each per round, so at one rate, where without it (fifo) they do not */
    CU_ASSERT_PTR_NOT_NULL(strstr(r.policy_note, "staged: following the schedule"));
    CU_ASSERT(rate_spread(&r) < 1.02);
    for (size_t i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(r.clients[i].requests, 30);
    possim_result_free(&r);
    snprintf(sc.policy, sizeof sc.policy, "fifo");
    CU_ASSERT_EQUAL_FATAL(possim_run(&sc, 1, &r, err, sizeof err), 0);
    CU_ASSERT(rate_spread(&r) > 1.2);
    snprintf(sc.policy, sizeof sc.policy, "staged");
    possim_result_free(&r);
    /* a schedule that cannot be read fails the run, naming the file */
    struct pos_policy_arg *a =
        pos_policy_arg_set(&sc.policy_args, pos_policy_param_find("schedule"));
    snprintf(a->file, sizeof a->file, "%s/missing.sched", dir);
    CU_ASSERT(possim_run(&sc, 1, &r, err, sizeof err) < 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "missing.sched: cannot open"));
    pos_schedule_free(&s);
    search_plan_free(&pl);
    search_mix_free(x);
}

void pos_test_register(void)
{
    CU_pSuite s = CU_add_suite("possim_search", suite_init, suite_clean);
    CU_add_test(s, "test_dp_matches_brute_force_on_a_hand_instance",
                test_dp_matches_brute_force_on_a_hand_instance);
    CU_add_test(s, "test_dp_matches_brute_force_on_the_device_model",
                test_dp_matches_brute_force_on_the_device_model);
    CU_add_test(s, "test_stage_cost_does_not_depend_on_history",
                test_stage_cost_does_not_depend_on_history);
    CU_add_test(s, "test_timeslice_stage_only_serialises", test_timeslice_stage_only_serialises);
    CU_add_test(s, "test_written_schedule_parses_back", test_written_schedule_parses_back);
    CU_add_test(s, "test_possim_staged_follows_a_searched_schedule",
                test_possim_staged_follows_a_searched_schedule);
}
