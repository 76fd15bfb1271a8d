/* Policy learned in posd with real processes (posd, the shim, posapp, the simulated driver):
 * the weights file named in posd.conf ([policy] weights) is read at start and at every reload;
 * one that is missing, truncated, of another version, of other dimensions or with a non-finite
 * value is refused whole with one line "FILE: what" and posd decides as pos (its note says
 * so), and clients run to the end either way; good weights are taken (a line with what trained
 * them) and the network decides. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sched/nn.h"
#include "sched/policy/learned.h"
#include "sched/weights.h"
#include "sched/weights_file.h"
#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX 65536

static struct suite suite;

static int suite_init(void)
{
    return suite_open(&suite, "learned", NULL) == 0 && access("build/posd", X_OK) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    return suite_close(&suite);
}

/* posd.conf naming WEIGHTS for policy learned; a batch class for app batch*. */
static void write_conf(const char *weights)
{
    FILE *f = fopen(suite.conf, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f,
            "[daemon]\nlog_level = info\npolicy = learned\n[policy]\nweights = %s\n"
            "[rule batch-jobs]\nmatch_app = batch*\nclass = batch\n",
            weights);
    fclose(f);
}

/* Weights that policy learned takes: an actor of FEATURES inputs (a hidden layer of 8) that
 * prefers action A. */
static void good_weights(struct pos_weights *w, uint32_t features, int a)
{
    memset(w, 0, sizeof *w);
    w->features = features;
    w->actions = POS_LEARNED_ACTIONS;
    snprintf(w->meta, sizeof w->meta, "trainer=test\nseed=7\n");
    struct nn_mlp m = {0};
    int dims[3] = {(int)features, 8, POS_LEARNED_ACTIONS};
    CU_ASSERT_EQUAL_FATAL(nn_mlp_init(&m, 2, dims), 0);
    uint64_t rng = 7;
    nn_mlp_randomize(&m, &rng, 0.01f);
    m.p[m.nparams - POS_LEARNED_ACTIONS + (size_t)a] = 3;
    CU_ASSERT_EQUAL_FATAL(pos_weights_add(w, "actor", &m), 0);
    nn_mlp_free(&m);
}

static void write_bytes(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* Runs a latency client and a batch client to the end under posd with the weights file PATH;
 * posd's log into LOG. Both must end well. */
static void run_clients(char *log, size_t cap)
{
    util_posd_stop(&suite.posd, SIGKILL);
    truncate(suite.log, 0);
    const char *const none[] = {NULL};
    suite.posd = util_posd_start_args(suite.conf, suite.sock, suite.log, none);
    CU_ASSERT_FATAL(suite.posd > 0);
    CU_ASSERT_EQUAL_FATAL(access(suite.sock, F_OK), 0);
    char lat_out[256], bat_out[256];
    snprintf(lat_out, sizeof lat_out, "%s/latency.out", suite.dir);
    snprintf(bat_out, sizeof bat_out, "%s/batch.out", suite.dir);
    const char *const lat[] = {"--model", "resnet18", "--requests", "20", "--verify", NULL};
    const char *const bat[] = {"--model", "resnet50", "--requests", "10", "--verify", NULL};
    pid_t b = util_posapp_start(bat_out, "batch1", bat);
    pid_t l = util_posapp_start(lat_out, "latency1", lat);
    CU_ASSERT_FATAL(b > 0 && l > 0);
    int st;
    CU_ASSERT_EQUAL(waitpid(l, &st, 0), l);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT_EQUAL(waitpid(b, &st, 0), b);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char out[OUT_MAX];
    util_read_file(lat_out, out, sizeof out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"verified\":true"));
    util_read_file(bat_out, out, sizeof out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"verified\":true"));
    util_posd_stop(&suite.posd, SIGTERM);
    util_read_file(suite.log, log, cap);
}

static void test_bad_weights_are_refused_whole_with_one_line_and_posd_decides_as_pos(void)
{
    struct pos_weights w;
    good_weights(&w, POS_LEARNED_FEATURES, 1);
    void *buf;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(pos_weights_encode(&w, &buf, &len), 0);
    pos_weights_free(&w);
    uint8_t *b = buf;
    char path[256];
    snprintf(path, sizeof path, "%s/bad.weights", suite.dir);
    struct {
        const char *what;
        const char *says;
    } cases[] = {{"missing", "No such file"},          {"truncated", "truncated"},
                 {"another version", "version"},       {"other dimensions", "features"},
                 {"a non-finite value", "not finite"}, {"a flipped byte", "checksum"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unlink(path);
        if (i == 1) {
            write_bytes(path, b, len / 2);
        } else if (i == 2) {
            uint8_t *c = malloc(len);
            memcpy(c, b, len);
            c[8] = 2; /* the version, little-endian */
            write_bytes(path, c, len);
            free(c);
        } else if (i == 3) {
            struct pos_weights o;
            good_weights(&o, POS_LEARNED_FEATURES - 1, 1);
            o.features = POS_LEARNED_FEATURES - 1;
            char err[256];
            CU_ASSERT_EQUAL(pos_weights_save(path, &o, err, sizeof err), 0);
            pos_weights_free(&o);
        } else if (i == 4) {
            /* the encoder writes no NaN: one put in by hand, the checksum made to match */
            uint8_t *c = malloc(len);
            memcpy(c, b, len);
            uint32_t meta;
            memcpy(&meta, c + 20, 4);
            size_t at = 24 + meta + 4 + 16 + 4 + 3 * 4 + 4 * 3; /* the actor's fourth float */
            float nan = NAN;
            memcpy(c + at, &nan, 4);
            uint64_t h = 0xcbf29ce484222325ull;
            for (size_t k = 0; k < len - 8; k++)
                h = (h ^ c[k]) * 0x100000001b3ull;
            memcpy(c + len - 8, &h, 8);
            write_bytes(path, c, len);
            free(c);
        } else if (i == 5) {
            uint8_t *c = malloc(len);
            memcpy(c, b, len);
            c[len / 2] ^= 0x40;
            write_bytes(path, c, len);
            free(c);
        }
        write_conf(path);
        char log[OUT_MAX];
        run_clients(log, sizeof log);
        char want[400];
        snprintf(want, sizeof want, "%s: ", path);
        CU_ASSERT_EQUAL(util_count(log, want), 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(log, cases[i].says));
        CU_ASSERT_PTR_NOT_NULL(strstr(log, "policy learned runs without it (as pos)"));
        CU_ASSERT_PTR_NOT_NULL(strstr(log, "learned: no usable weights: deciding as pos"));
        if (util_count(log, want) != 1 || !strstr(log, cases[i].says))
            fprintf(stderr, "\n  %s: posd said:\n%s", cases[i].what, log);
    }
    free(buf);
}

/* Good weights: one line with what trained them, the network decides; a reload re-reads the
 * file (replaced by a bad one: refused, pos again). */
static void test_good_weights_are_taken_and_reread_at_reload(void)
{
    struct pos_weights w;
    good_weights(&w, POS_LEARNED_FEATURES, 1);
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/good.weights", suite.dir);
    CU_ASSERT_EQUAL_FATAL(pos_weights_save(path, &w, err, sizeof err), 0);
    pos_weights_free(&w);
    write_conf(path);
    char log[OUT_MAX];
    run_clients(log, sizeof log);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(log, "good.weights: trainer=test seed=7; policy learned uses them"));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "learned: the network chooses"));
    CU_ASSERT_PTR_NULL(strstr(log, "no usable weights"));
    if (!strstr(log, "policy learned uses them"))
        fprintf(stderr, "\n  posd said:\n%s", log);

    /* reload: the file is read again */
    truncate(suite.log, 0);
    const char *const none[] = {NULL};
    suite.posd = util_posd_start_args(suite.conf, suite.sock, suite.log, none);
    CU_ASSERT_FATAL(suite.posd > 0);
    write_bytes(path, "POSWGT1\n", 8);
    kill(suite.posd, SIGHUP);
    int seen = 0;
    for (int i = 0; i < 200 && !seen; i++) {
        usleep(10000);
        util_read_file(suite.log, log, sizeof log);
        seen = strstr(log, "configuration reloaded") != NULL;
    }
    util_posd_stop(&suite.posd, SIGTERM);
    util_read_file(suite.log, log, sizeof log);
    CU_ASSERT(seen);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "good.weights: truncated"));
    CU_ASSERT_EQUAL(util_count(log, "policy learned runs without it (as pos)"), 1);
}

void pos_test_register(void)
{
    CU_pSuite s = CU_add_suite("learned", suite_init, suite_clean);
    POS_ADD_TEST(s, test_bad_weights_are_refused_whole_with_one_line_and_posd_decides_as_pos);
    POS_ADD_TEST(s, test_good_weights_are_taken_and_reread_at_reload);
}
