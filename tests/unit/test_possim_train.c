/* Tests of possim train (tools/possim_train.c, build/possim): a malformed curriculum is refused
 * with FILE:LINE: what; a good one gets its values and defaults, its scenarios resolved beside
 * it and run under policy learned; training is reproducible from its seed (the same weights
 * byte for byte, another seed others), writes a weights file policy learned takes, a curve and
 * checkpoints, and resumes from a checkpoint; possim refuses a run whose weights file is bad.
 * Run from the repository root. */
#include "tests/cunit_main.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sched/policy/learned.h"
#include "sched/weights.h"
#include "sched/weights_file.h"
#include "tools/possim_sim.h"
#include "tools/possim_train.h"

static char dir[64];
static struct train_curriculum cu;

static const char mix_text[] = "[device]\npreset = rtx3080\nmode = mps\n[sched]\npolicy = pos\n"
                               "[client latency]\nmodel = resnet18\nrequests = 40\n"
                               "arrival = poisson:400\nclass_priority = 10\nslo_ms = 4\n"
                               "[client batch]\nmodel = resnet50\nrequests = 1000\n"
                               "class_priority = 20\nstop_with = latency\n";

static int write_file(const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

static void put(const char *name, const char *text)
{
    CU_ASSERT_EQUAL_FATAL(write_file(name, text), 0);
}

static int suite_init(void)
{
    setenv("POS_MODELS_DIR", "sim/models", 1);
    snprintf(dir, sizeof dir, "/tmp/pos-test-train-%d", (int)getpid());
    if (mkdir(dir, 0700) < 0)
        return -1;
    return write_file("mix.ini", mix_text) == 0 &&
                   write_file("bad.ini",
                              "[device]\npreset = rtx9090\n[client a]\nmodel = resnet18\n") == 0 &&
                   write_file("none.ini",
                              "[sched]\npolicy = none\n[client a]\nmodel = resnet18\n") == 0
               ? 0
               : -1;
}

static int suite_clean(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void expect_error(const char *text, const char *want)
{
    put("c.curriculum", text);
    char path[128], err[2048] = "", full[2300];
    snprintf(path, sizeof path, "%s/c.curriculum", dir);
    CU_ASSERT(train_curriculum_load(path, &cu, err, sizeof err) < 0);
    snprintf(full, sizeof full, "%s:%s", path, want);
    CU_ASSERT_STRING_EQUAL(err, full);
    if (strcmp(err, full) != 0)
        fprintf(stderr, "\n  got  %s\n  want %s\n", err, full);
}

static void test_a_malformed_curriculum_names_the_file_and_line(void)
{
    expect_error("[train]\nepoch = 3\n",
                 "2: unknown key 'epoch' in [train] (epochs, hidden, lr, polyak, alpha, "
                 "target_entropy, prior, prior_p, batch, update_every, replay, horizon_ms, "
                 "miss_penalty, latency_weight, reward_scale, eval_seeds)");
    expect_error("[train]\n\nepochs = 0\n",
                 "3: bad value '0' for 'epochs' in [train]: expected an integer in 1..100000");
    expect_error("[train]\nlr = fast\n",
                 "2: bad value 'fast' for 'lr' in [train]: expected a number in 1e-07..1");
    expect_error("[train]\nhidden = 64,0\n",
                 "2: bad value '64,0' for 'hidden' in [train]: expected 1 to 3 layer sizes of "
                 "1..256 units, comma-separated (e.g. 64,32)");
    expect_error("[train]\nhidden = 8,8,8,8\n",
                 "2: bad value '8,8,8,8' for 'hidden' in [train]: expected 1 to 3 layer sizes "
                 "of 1..256 units, comma-separated (e.g. 64,32)");
    expect_error("[train]\nepochs = 2\nepochs = 3\n",
                 "3: duplicate key 'epochs' (first set on line 2)");
    expect_error("epochs = 2\n",
                 "1: key 'epochs' is outside any section: put it under [train] or [mix NAME]");
    expect_error("[trian]\n", "1: unknown section [trian] (use [train] or [mix NAME])");
    expect_error("[mix]\n", "1: [mix] needs a name: [mix NAME]");
    expect_error("[mix a]\nscenario = mix.ini\n[mix a]\n",
                 "3: duplicate section [mix a] (first on line 1)");
    expect_error("[train]\n[mix a]\nepisodes = 2\n[train]\n",
                 "2: [mix a] has no scenario: add 'scenario = FILE'");
    expect_error("[mix a]\nepisodes = 2\n", "1: [mix a] has no scenario: add 'scenario = FILE'");
    expect_error("[mix a]\nscenario = mix.ini\nepisodes = 0\n",
                 "3: bad value '0' for 'episodes' in [mix a]: expected an integer in 1..1000");
    expect_error("[mix a]\nscenario = mix.ini\nweight = 2\n",
                 "3: unknown key 'weight' in [mix a] (scenario, episodes)");
    char want[512];
    snprintf(want, sizeof want,
             "2: scenario of [mix a]: %s/bad.ini:2: bad value 'rtx9090' for 'preset' in "
             "[device]",
             dir);
    put("c.curriculum", "[mix a]\nscenario = bad.ini\n");
    char path[128], err[2048] = "";
    snprintf(path, sizeof path, "%s/c.curriculum", dir);
    CU_ASSERT(train_curriculum_load(path, &cu, err, sizeof err) < 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want)); /* the scenario's own FILE:LINE inside */
    if (!strstr(err, want))
        fprintf(stderr, "\n  got %s\n", err);
    expect_error("[mix a]\nscenario = none.ini\n",
                 "1: scenario of [mix a] has policy none: nothing to learn");
    expect_error("[train]\nepochs = 2\n", "2: no mixes: add a [mix NAME] section with "
                                          "'scenario = FILE'");
    expect_error("[train]\nbatch = 512\nreplay = 100\n[mix a]\nscenario = mix.ini\n",
                 "1: batch 512 is larger than replay 100");
    expect_error("[train]\nepochs 2\n", "2: syntax error: expected 'key = value'");
    /* a file that is not there: FILE: what */
    char missing[160];
    snprintf(missing, sizeof missing, "%s/nothing.curriculum", dir);
    CU_ASSERT(train_curriculum_load(missing, &cu, err, sizeof err) < 0);
    snprintf(want, sizeof want, "%s: No such file or directory", missing);
    CU_ASSERT_STRING_EQUAL(err, want);
}

static void test_a_curriculum_gets_its_values_and_defaults(void)
{
    put("c.curriculum", "; a comment\n[train]\nepochs = 7\nhidden = 16, 8\nmiss_penalty = 50\n"
                        "[mix one]\nscenario = mix.ini\nepisodes = 3\n[mix two]\n"
                        "scenario = mix.ini\n");
    char path[128], err[2048] = "";
    snprintf(path, sizeof path, "%s/c.curriculum", dir);
    CU_ASSERT_EQUAL_FATAL(train_curriculum_load(path, &cu, err, sizeof err), 0);
    CU_ASSERT_EQUAL(cu.epochs, 7);
    CU_ASSERT_EQUAL(cu.nhidden, 2);
    CU_ASSERT(cu.hidden[0] == 16 && cu.hidden[1] == 8);
    CU_ASSERT(cu.miss_penalty == 50);
    CU_ASSERT(cu.batch == 64 && cu.horizon_ms == 100 && cu.prior_p > 0.8);
    CU_ASSERT_EQUAL(cu.nmixes, 2);
    CU_ASSERT_EQUAL(cu.mixes[0].episodes, 3);
    CU_ASSERT_EQUAL(cu.mixes[1].episodes, 1);
    char want[160];
    snprintf(want, sizeof want, "%s/mix.ini", dir);
    CU_ASSERT_STRING_EQUAL(cu.mixes[0].path, want);
    CU_ASSERT_STRING_EQUAL(cu.mixes[0].sc->policy, "learned"); /* pos in the file */
    CU_ASSERT_EQUAL(cu.mixes[0].sc->nclients, 2);
    train_curriculum_free(&cu);
}

/* DIR/NAME into BUF (CAP bytes, NUL-terminated). */
static void slurp(const char *name, char *buf, size_t cap)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static int run(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "build/possim %s >%s/out 2>%s/err", args, dir, dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int same_file(const char *a, const char *b)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cmp -s %s/%s %s/%s", dir, a, dir, b);
    return system(cmd) == 0;
}

static void test_training_is_reproducible_from_its_seed_and_policy_learned_takes_it(void)
{
    put("t.curriculum", "[train]\nepochs = 2\nhidden = 16,8\nbatch = 16\nupdate_every = 2\n"
                        "[mix one]\nscenario = mix.ini\n");
    char args[768];
    snprintf(args, sizeof args,
             "train -q --seed 3 -o %s/a.weights --curve %s/a.csv --checkpoints %s/ck "
             "%s/t.curriculum",
             dir, dir, dir, dir);
    CU_ASSERT_EQUAL_FATAL(run(args), 0);
    snprintf(args, sizeof args, "train -q --seed 3 -o %s/b.weights %s/t.curriculum", dir, dir);
    CU_ASSERT_EQUAL_FATAL(run(args), 0);
    snprintf(args, sizeof args, "train -q --seed 4 -o %s/c.weights %s/t.curriculum", dir, dir);
    CU_ASSERT_EQUAL_FATAL(run(args), 0);
    CU_ASSERT(same_file("a.weights", "b.weights"));
    /* another seed, other networks (not only another seed= line in the file) */
    char path[160], err[512];
    struct pos_weights w, w2;
    snprintf(path, sizeof path, "%s/c.weights", dir);
    CU_ASSERT_EQUAL_FATAL(pos_weights_load(path, &w2, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/a.weights", dir);
    CU_ASSERT_EQUAL_FATAL(pos_weights_load(path, &w, err, sizeof err), 0);
    CU_ASSERT_EQUAL(pos_learned_check(&w, err, sizeof err), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(w.meta, "trainer=possim-sac\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w.meta, "seed=3\n"));
    CU_ASSERT_PTR_NOT_NULL(pos_weights_net(&w, "q1"));
    CU_ASSERT_PTR_NOT_NULL(pos_weights_net(&w, "q2_target"));
    const struct nn_mlp *a = pos_weights_net(&w, "actor"), *c = pos_weights_net(&w2, "actor");
    CU_ASSERT_FATAL(a && c && a->nparams == c->nparams);
    CU_ASSERT(memcmp(a->p, c->p, a->nparams * sizeof *a->p) != 0);
    pos_weights_free(&w);
    pos_weights_free(&w2);
    /* a curve line per epoch, a checkpoint per epoch */
    char csv[4096] = "";
    slurp("a.csv", csv, sizeof csv);
    int lines = 0;
    for (char *p = csv; (p = strchr(p, '\n')); p++)
        lines++;
    CU_ASSERT_EQUAL(lines, 4); /* the command, the header, two epochs */
    CU_ASSERT_PTR_NOT_NULL(strstr(csv, "\n1,"));
    CU_ASSERT_PTR_NOT_NULL(strstr(csv, "\n2,"));
    snprintf(path, sizeof path, "%s/ck/epoch-2.weights", dir);
    CU_ASSERT_EQUAL(access(path, R_OK), 0);
    /* resumed from epoch 1: epochs 2 and 3 */
    snprintf(args, sizeof args,
             "train -q --seed 3 --resume %s/ck/epoch-1.weights -o %s/r.weights --curve "
             "%s/r.csv %s/t.curriculum",
             dir, dir, dir, dir);
    CU_ASSERT_EQUAL(run(args), 0);
    slurp("r.csv", csv, sizeof csv);
    CU_ASSERT_PTR_NOT_NULL(strstr(csv, "\n3,"));
    CU_ASSERT_PTR_NULL(strstr(csv, "\n1,"));

    /* possim runs policy learned with them; and refuses a bad file with FILE: what */
    char scen[2048];
    snprintf(scen, sizeof scen, "%s", mix_text);
    char *pol = strstr(scen, "policy = pos\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(pol);
    char text[4096];
    snprintf(text, sizeof text, "%.*spolicy = learned\nweights = %s/a.weights\n%s",
             (int)(pol - scen), scen, dir, pol + strlen("policy = pos\n"));
    put("run.ini", text);
    snprintf(args, sizeof args, "-o json %s/run.ini", dir);
    CU_ASSERT_EQUAL(run(args), 0);
    char out[65536] = "";
    slurp("out", out, sizeof out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"policy\":\"learned\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "the network chooses"));
    put("a.weights", "POSWGT1\n");
    CU_ASSERT_EQUAL(run(args), 1);
    slurp("err", out, sizeof out);
    char want[256];
    snprintf(want, sizeof want, "%s/a.weights: truncated", dir);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    if (!strstr(out, want))
        fprintf(stderr, "\n  possim said: %s", out);
}

/* possim's truth for the reward: what slo_state reports of the SLO client. */
struct truth {
    int calls, other_client, went_back;
    uint64_t late, most_out;
    int64_t t;
};

static void t_observe(void *arg, const struct pos_sched_view *v)
{
    (void)arg;
    (void)v;
}

static int t_act(void *arg, const struct pos_sched_view *v, const struct pos_sched_client *c,
                 const float *x, const uint8_t *mask)
{
    (void)arg, (void)v, (void)c, (void)x, (void)mask;
    return POS_LEARNED_POS;
}

static void t_slo(void *arg, int client, double slo_ms, uint64_t outstanding, uint64_t late,
                  int64_t now)
{
    struct truth *t = arg;
    t->calls++;
    t->other_client |= client != 0 || slo_ms != 4;
    t->went_back |= late < t->late || now < t->t;
    t->late = late;
    t->t = now;
    if (outstanding > t->most_out)
        t->most_out = outstanding;
}

/* Before each decision possim tells the trainer, for the SLO client only, its requests waiting
 * and its late ones: never going back, never more late than the run's misses (an SLO of 4 ms
 * at 90% load of the device beside a batch client misses some), none with an SLO it always
 * meets. */
static void test_possim_tells_the_trainer_the_slo_clients_waiting_and_late_requests(void)
{
    char path[160], err[512];
    snprintf(path, sizeof path, "%s/mix.ini", dir);
    static struct possim_scenario sc;
    static struct possim_result r;
    CU_ASSERT_EQUAL_FATAL(possim_scenario_load(path, &sc, err, sizeof err), 0);
    snprintf(sc.policy, sizeof sc.policy, "learned");
    for (int generous = 0; generous < 2; generous++) {
        sc.clients[0].slo_ms = generous ? 1000 : 4;
        struct truth t = {0};
        struct pos_learned_learner l = {
            .arg = &t, .observe = t_observe, .act = t_act, .slo_state = t_slo};
        CU_ASSERT_EQUAL_FATAL(possim_run_learning(&sc, 1, &r, NULL, &l, err, sizeof err), 0);
        uint64_t misses =
            (uint64_t)llround((1 - r.clients[0].slo_attainment) * (double)r.clients[0].requests);
        CU_ASSERT(t.calls > 10);
        CU_ASSERT(!t.went_back);
        CU_ASSERT(t.most_out >= 1);
        if (generous) {
            CU_ASSERT_EQUAL(t.late, 0);
        } else {
            CU_ASSERT(misses > 0);
            CU_ASSERT(t.late > 0 && t.late <= misses);
        }
        /* only client 0 (the SLO client) is told of, with its SLO (4 ms, or the generous 1 s) */
        CU_ASSERT_EQUAL(t.other_client, generous);
        possim_result_free(&r);
    }
}

void pos_test_register(void)
{
    CU_pSuite s = CU_add_suite("possim_train", suite_init, suite_clean);
    POS_ADD_TEST(s, test_a_malformed_curriculum_names_the_file_and_line);
    POS_ADD_TEST(s, test_a_curriculum_gets_its_values_and_defaults);
    POS_ADD_TEST(s, test_training_is_reproducible_from_its_seed_and_policy_learned_takes_it);
    POS_ADD_TEST(s, test_possim_tells_the_trainer_the_slo_clients_waiting_and_late_requests);
}
