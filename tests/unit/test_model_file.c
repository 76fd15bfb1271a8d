/* Unit tests of the model workload files: the parser and lookup (sim/model_file.c) and the
 * committed files sim/models/NAME.model checked against the published FLOP and parameter
 * counts of each architecture (docs/models.md). Run from the repository root. */
#include "sim/model_file.h"
#include "tests/cunit_main.h"

#include <CUnit/Basic.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GIGA      1e9
#define MEGA      1e6
#define TOLERANCE 0.15 /* published figures are matched to +-15% */

/* The published figures (docs/models.md cites where each comes from). MACS in G
 * multiply-adds at batch 1, PARAMS in M; 0 = no published figure to compare with. */
static const struct published {
    const char *name;
    double gmacs;
    double mparams;
    int all_params_read; /* every declared parameter is read by one inference */
    const char *input;   /* the input size its 'source' line must state */
} models[] = {
    {"resnet18", 1.8, 11.7, 1, "224x224"},
    {"resnet34", 3.6, 21.8, 1, "224x224"},
    {"resnet50", 4.1, 25.6, 1, "224x224"},
    {"inception_v1", 1.5, 6.8, 1, "224x224"},
    {"inception_v2", 2.0, 0, 1, "224x224"},
    {"inception_v3", 5.7, 23.8, 1, "299x299"},
    {"mobilenet_v1", 0.569, 4.2, 1, "224x224"},
    {"mobilenet_v2", 0.300, 3.5, 1, "224x224"},
    {"mobilenet_v3", 0.219, 5.4, 1, "224x224"},
    {"yolop", 0, 7.9, 1, "640x384"},
    {"bert_base", 11.2, 110, 0, "sequence length 128"},
};
#define NMODELS (sizeof models / sizeof *models)

static char models_dir[PATH_MAX];
static char tmp_dir[] = "/tmp/pos-test-model-file.XXXXXX";

/* --- helpers ------------------------------------------------------------------------------ */

static int load_named(const char *name, uint32_t batch, struct sim_model *m)
{
    char path[PATH_MAX], err[512];
    int rc = sim_model_find(name, path, sizeof path);
    if (rc < 0) {
        fprintf(stderr, "\n  %s: not found (%d)\n", name, rc);
        return rc;
    }
    rc = sim_model_load(path, batch, m, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "\n  %s\n", err);
    return rc;
}

/* Splits each op's bytes into weight and activation bytes from its loads at batch 1 and
 * 2 (bytes = W + B x A), and sums them. */
static void split_bytes(const struct sim_model *b1, const struct sim_model *b2, double *w,
                        double *a)
{
    *w = *a = 0;
    for (size_t i = 0; i < b1->nops; i++) {
        *w += 2 * b1->ops[i].bytes - b2->ops[i].bytes;
        *a += b2->ops[i].bytes - b1->ops[i].bytes;
    }
}

static double total_flops(const struct sim_model *m, const char *prefix)
{
    double f = 0;
    for (size_t i = 0; i < m->nops; i++)
        if (!prefix || strncmp(m->ops[i].name, prefix, strlen(prefix)) == 0)
            f += m->ops[i].flops;
    return f;
}

static size_t count_ops(const struct sim_model *m, const char *needle)
{
    size_t n = 0;
    for (size_t i = 0; i < m->nops; i++)
        n += strstr(m->ops[i].name, needle) != NULL;
    return n;
}

static int within(double value, double ref, double tol)
{
    return fabs(value - ref) <= tol * ref;
}

/* Writes TEXT to a file NAME in the temporary folder; returns its path (static buffer). */
static const char *write_tmp(const char *name, const char *text)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* --- suite set-up: POS_MODELS_DIR = <repo>/sim/models, a scratch folder ------------------ */

static int has_models(const char *dir)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/resnet50.model", dir);
    return access(p, R_OK) == 0;
}

static int suite_init(void)
{
    /* The binary is build/tests/test_model_file: the repository is two folders up. */
    char exe[PATH_MAX], guess[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    models_dir[0] = '\0';
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(guess, sizeof guess, "%s/../../sim/models", exe);
            if (has_models(guess) && !realpath(guess, models_dir))
                models_dir[0] = '\0';
        }
    }
    if (!models_dir[0]) {
        if (!getcwd(exe, sizeof exe))
            return -1;
        snprintf(guess, sizeof guess, "%s/sim/models", exe);
        if (!has_models(guess) || !realpath(guess, models_dir))
            return -1;
    }
    setenv("POS_MODELS_DIR", models_dir, 1);
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int suite_clean(void)
{
    DIR *d = opendir(tmp_dir);
    if (d) {
        struct dirent *e;
        char p[PATH_MAX + 300];
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') {
                snprintf(p, sizeof p, "%s/%s", tmp_dir, e->d_name);
                unlink(p);
            }
        closedir(d);
        rmdir(tmp_dir);
    }
    return 0;
}

/* --- 1. every model parses and its launches are well formed ------------------------------ */

static void test_models_well_formed(void)
{
    for (size_t k = 0; k < NMODELS; k++) {
        struct sim_model m = {0};
        CU_ASSERT_EQUAL_FATAL(load_named(models[k].name, 1, &m), 0);
        CU_ASSERT_STRING_EQUAL(m.name, models[k].name);
        CU_ASSERT(m.nops > 10);
        CU_ASSERT_EQUAL(m.batch, 1);
        CU_ASSERT_FALSE(m.fp16);
        CU_ASSERT_PTR_NOT_NULL(strstr(m.source, models[k].input));
        for (size_t i = 0; i < m.nops; i++) {
            const struct sim_model_op *op = &m.ops[i];
            int ok = op->grid[0] >= 1 && op->grid[1] >= 1 && op->grid[2] >= 1 &&
                     op->block[0] >= 1 && op->block[1] >= 1 && op->block[2] >= 1 &&
                     op->block[0] * op->block[1] * op->block[2] <= 1024 && op->smem <= 48 * 1024 &&
                     op->flops >= 0 && op->bytes > 0;
            if (!ok)
                fprintf(stderr, "\n  %s: op %s is malformed\n", m.name, op->name);
            CU_ASSERT(ok);
        }
        sim_model_free(&m);
    }
}

/* Every committed .model file is one of the models checked here. */
static void test_models_all_listed(void)
{
    DIR *d = opendir(models_dir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    struct dirent *e;
    size_t found = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 7 || strcmp(e->d_name + len - 6, ".model") != 0)
            continue;
        int listed = 0;
        for (size_t k = 0; k < NMODELS; k++)
            listed |= strlen(models[k].name) == len - 6 &&
                      strncmp(models[k].name, e->d_name, len - 6) == 0;
        if (!listed)
            fprintf(stderr, "\n  %s/%s has no published figures in this test\n", models_dir,
                    e->d_name);
        CU_ASSERT(listed);
        found++;
    }
    closedir(d);
    CU_ASSERT_EQUAL(found, NMODELS);
}

/* --- 2. total FLOPs against the published multiply-add counts ---------------------------- */

static void test_models_flops(void)
{
    for (size_t k = 0; k < NMODELS; k++) {
        if (models[k].gmacs == 0)
            continue;
        struct sim_model m = {0};
        CU_ASSERT_EQUAL_FATAL(load_named(models[k].name, 1, &m), 0);
        double gmacs = total_flops(&m, NULL) / 2 / GIGA;
        if (!within(gmacs, models[k].gmacs, TOLERANCE))
            fprintf(stderr, "\n  %s: %.3f GMACs, published %.3f\n", m.name, gmacs, models[k].gmacs);
        CU_ASSERT(within(gmacs, models[k].gmacs, TOLERANCE));
        sim_model_free(&m);
    }
}

/* YOLOP: the paper gives no FLOP count. Its encoder and detection head have the layout of
 * YOLOv5s (v4.0/v5.0: 17.0 GFLOPs at 640x640), so at 640x384 they should come to about
 * 17.0 x 384/640 = 10.2 GFLOPs; the two segmentation heads are identical. */
static void test_yolop_plausible(void)
{
    struct sim_model m = {0};
    CU_ASSERT_EQUAL_FATAL(load_named("yolop", 1, &m), 0);
    double det =
        total_flops(&m, "backbone.") + total_flops(&m, "neck.") + total_flops(&m, "det_head.");
    double da = total_flops(&m, "da_seg_head."), ll = total_flops(&m, "ll_seg_head.");
    CU_ASSERT(within(det / GIGA, 17.0 * 384 / 640, TOLERANCE));
    CU_ASSERT(da > 0 && da == ll);
    CU_ASSERT_DOUBLE_EQUAL(det + da + ll, total_flops(&m, NULL), 1);
    double total = total_flops(&m, NULL) / GIGA;
    CU_ASSERT(total > 12 && total < 30);
    CU_ASSERT(count_ops(&m, "det_head.24.detect.") == 6);
    CU_ASSERT(count_ops(&m, ".sigmoid") == 2);
    sim_model_free(&m);
}

static void test_bert_structure(void)
{
    struct sim_model m = {0};
    CU_ASSERT_EQUAL_FATAL(load_named("bert_base", 1, &m), 0);
    CU_ASSERT_EQUAL(count_ops(&m, ".attn.qkv_gemm"), 12);
    CU_ASSERT_EQUAL(count_ops(&m, ".attn.softmax"), 12);
    CU_ASSERT_EQUAL(count_ops(&m, ".attn.add_layernorm"), 12);
    CU_ASSERT_EQUAL(count_ops(&m, ".ffn.add_layernorm"), 12);
    CU_ASSERT_EQUAL(count_ops(&m, "embeddings."), 1);
    CU_ASSERT_EQUAL(count_ops(&m, ".ffn.up_gemm_gelu"), 12);
    CU_ASSERT_EQUAL(count_ops(&m, "pooler."), 1);
    CU_ASSERT_EQUAL(m.nops, 1 + 12 * 9 + 1);
    sim_model_free(&m);
}

/* --- 3. parameters against the published counts ------------------------------------------- */

static void test_models_params(void)
{
    for (size_t k = 0; k < NMODELS; k++) {
        struct sim_model b1 = {0}, b2 = {0};
        CU_ASSERT_EQUAL_FATAL(load_named(models[k].name, 1, &b1), 0);
        CU_ASSERT_EQUAL_FATAL(load_named(models[k].name, 2, &b2), 0);
        double w, a;
        split_bytes(&b1, &b2, &w, &a);
        double read = w / 4;
        CU_ASSERT(w > 0 && a > 0);
        CU_ASSERT(b1.params > 0);
        if (models[k].all_params_read) {
            CU_ASSERT_DOUBLE_EQUAL(read, (double)b1.params, 0.5);
        } else {
            CU_ASSERT(read < (double)b1.params);
        }
        if (models[k].mparams > 0) {
            double mp = (models[k].all_params_read ? read : (double)b1.params) / MEGA;
            if (!within(mp, models[k].mparams, TOLERANCE))
                fprintf(stderr, "\n  %s: %.3f M params, published %.3f M\n", b1.name, mp,
                        models[k].mparams);
            CU_ASSERT(within(mp, models[k].mparams, TOLERANCE));
        }
        sim_model_free(&b1);
        sim_model_free(&b2);
    }
}

/* --- 4. batch scaling ---------------------------------------------------------------------- */

static void test_batch_scaling(void)
{
    struct sim_model b1 = {0}, b2 = {0}, b4 = {0};
    CU_ASSERT_EQUAL_FATAL(load_named("resnet50", 1, &b1), 0);
    CU_ASSERT_EQUAL_FATAL(load_named("resnet50", 2, &b2), 0);
    CU_ASSERT_EQUAL_FATAL(load_named("resnet50", 4, &b4), 0);
    CU_ASSERT_EQUAL_FATAL(b4.nops, b1.nops);
    CU_ASSERT_EQUAL(b4.batch, 4);
    CU_ASSERT_DOUBLE_EQUAL(total_flops(&b4, NULL), 4 * total_flops(&b1, NULL), 0.5);
    for (size_t i = 0; i < b1.nops; i++) {
        const struct sim_model_op *o1 = &b1.ops[i], *o2 = &b2.ops[i], *o4 = &b4.ops[i];
        double w = 2 * o1->bytes - o2->bytes, a = o2->bytes - o1->bytes;
        CU_ASSERT_STRING_EQUAL(o4->name, o1->name);
        CU_ASSERT_EQUAL(o4->grid[0], 4 * o1->grid[0]);
        CU_ASSERT_EQUAL(o4->grid[1], o1->grid[1]);
        CU_ASSERT_EQUAL(o4->grid[2], o1->grid[2]);
        CU_ASSERT(memcmp(o4->block, o1->block, sizeof o1->block) == 0);
        CU_ASSERT_EQUAL(o4->smem, o1->smem);
        CU_ASSERT_DOUBLE_EQUAL(o4->flops, 4 * o1->flops, 0.5);
        CU_ASSERT_DOUBLE_EQUAL(o4->bytes, w + 4 * a, 0.5); /* weights once, activations x4 */
    }
    double w, a, total4 = 0;
    split_bytes(&b1, &b2, &w, &a);
    for (size_t i = 0; i < b4.nops; i++)
        total4 += b4.ops[i].bytes;
    CU_ASSERT(w > 0 && a > 0);
    CU_ASSERT_DOUBLE_EQUAL(total4, w + 4 * a, 1);
    sim_model_free(&b1);
    sim_model_free(&b2);
    sim_model_free(&b4);
}

/* --- 5. parser errors ----------------------------------------------------------------------- */

static const char good_header[] = "# pos-sim model v1\n"
                                  "model tiny_net\n"
                                  "source hand-written for the unit test # not a comment\n"
                                  "dtype fp16\n"
                                  "params 1234\n";

static void test_parse_valid(void)
{
    char text[1024];
    snprintf(text, sizeof text,
             "%s\n   # indented comment\n"
             "op a.conv1 10,2,3 256,1,1 32768 1.5e3 400 100\n"
             "\top b:gemm<1> 1,1,1 32,2,1 0 7 0 0   \n",
             good_header);
    const char *path = write_tmp("valid.model", text);
    struct sim_model m = {0};
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(sim_model_load(path, 3, &m, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(m.name, "tiny_net");
    CU_ASSERT_STRING_EQUAL(m.source, "hand-written for the unit test # not a comment");
    CU_ASSERT_EQUAL(m.fp16, 1);
    CU_ASSERT_EQUAL(m.params, 1234);
    CU_ASSERT_EQUAL(m.batch, 3);
    CU_ASSERT_EQUAL_FATAL(m.nops, 2);
    CU_ASSERT_STRING_EQUAL(m.ops[0].name, "a.conv1");
    CU_ASSERT_EQUAL(m.ops[0].grid[0], 30);
    CU_ASSERT_EQUAL(m.ops[0].grid[1], 2);
    CU_ASSERT_EQUAL(m.ops[0].grid[2], 3);
    CU_ASSERT_EQUAL(m.ops[0].block[0], 256);
    CU_ASSERT_EQUAL(m.ops[0].smem, 32768);
    CU_ASSERT_DOUBLE_EQUAL(m.ops[0].flops, 4500, 0);
    CU_ASSERT_DOUBLE_EQUAL(m.ops[0].bytes, 400 + 3 * 100, 0);
    CU_ASSERT_STRING_EQUAL(m.ops[1].name, "b:gemm<1>");
    CU_ASSERT_EQUAL(m.ops[1].block[1], 2);
    sim_model_free(&m);
    CU_ASSERT_PTR_NULL(m.ops);
}

/* Expects the file TEXT to be refused with RC and a message naming PATH:LINE. */
static void expect_error(const char *text, int rc, unsigned line)
{
    const char *path = write_tmp("bad.model", text);
    struct sim_model m = {.nops = 99};
    char err[256] = "", where[PATH_MAX + 32];
    int got = sim_model_load(path, 1, &m, err, sizeof err);
    if (line)
        snprintf(where, sizeof where, "%s:%u: ", path, line);
    else
        snprintf(where, sizeof where, "%s: ", path);
    if (got != rc || strncmp(err, where, strlen(where)) != 0)
        fprintf(stderr, "\n  expected %d at '%s', got %d: %s\n", rc, where, got, err);
    CU_ASSERT_EQUAL(got, rc);
    CU_ASSERT(strncmp(err, where, strlen(where)) == 0);
    CU_ASSERT(strlen(err) > strlen(where) + 5); /* says what is wrong */
    CU_ASSERT_EQUAL(m.nops, 0);                 /* left zeroed */
    CU_ASSERT_PTR_NULL(m.ops);
}

static void test_parse_errors(void)
{
    char text[1024];
#define WITH(op) (snprintf(text, sizeof text, "%s%s", good_header, op), text)
    /* The op line is line 6 of these files. */
    expect_error(WITH("op a 1,1,1 32,1,1 0 1 2\n"), -EINVAL, 6);     /* too few */
    expect_error(WITH("op a 1,1,1 32,1,1 0 1 2 3 4\n"), -EINVAL, 6); /* too many */
    expect_error(WITH("op a 1,1,1 32,1,1 0 12x 2 3\n"), -EINVAL, 6); /* non-number */
    expect_error(WITH("op a 1,1,1 32,1,1 0 nan 2 3\n"), -EINVAL, 6);
    expect_error(WITH("op a 1,1,1 32,1,1 0 -1 2 3\n"), -EINVAL, 6);  /* negative */
    expect_error(WITH("op a 0,1,1 32,1,1 0 1 2 3\n"), -EINVAL, 6);   /* zero grid */
    expect_error(WITH("op a 1,1 32,1,1 0 1 2 3\n"), -EINVAL, 6);     /* two dims */
    expect_error(WITH("op a 1,1,1,1 32,1,1 0 1 2 3\n"), -EINVAL, 6); /* four dims */
    expect_error(WITH("op a 1,1,1 -32,1,1 0 1 2 3\n"), -EINVAL, 6);
    expect_error(WITH("op a 1,1,1 1024,2,1 0 1 2 3\n"), -EINVAL, 6);   /* 2048 threads */
    expect_error(WITH("op a 1,70000,1 32,1,1 0 1 2 3\n"), -EINVAL, 6); /* grid Y limit */
    expect_error(WITH("op a 1,1,1 32,1,1 1.5 1 2 3\n"), -EINVAL, 6);   /* smem */
    expect_error(WITH("op a b 1,1,1 32,1,1 0 1 2 3\n"), -EINVAL, 6);   /* name + extra */
    expect_error(WITH("op a 1,1,1 32,1,1 0 1 2 3\nop a 1,1,1 32,1,1 0 1 2 3\n"), -EINVAL, 7);
    expect_error(WITH("ops a 1,1,1 32,1,1 0 1 2 3\n"), -EINVAL, 6); /* directive */
    expect_error(WITH("dtype fp64\n"), -EINVAL, 6);
    expect_error(WITH("model again\n"), -EINVAL, 6);
    expect_error(WITH("params -5\n"), -EINVAL, 6);
    expect_error(WITH(""), -EINVAL, 0);                               /* no op lines */
    expect_error("# only a comment\n", -EINVAL, 0);                   /* no model */
    expect_error("op a 1,1,1 32,1,1 0 1 2 3\nmodel x\n", -EINVAL, 1); /* model first */
#undef WITH

    /* Grid X x batch over the CUDA limit. */
    snprintf(text, sizeof text, "%sop a 2000000000,1,1 32,1,1 0 1 2 3\n", good_header);
    const char *path = write_tmp("big.model", text);
    struct sim_model m = {0};
    char err[256];
    CU_ASSERT_EQUAL(sim_model_load(path, 1, &m, err, sizeof err), 0);
    sim_model_free(&m);
    CU_ASSERT_EQUAL(sim_model_load(path, 2, &m, err, sizeof err), -EOVERFLOW);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, ":6: "));
}

static void test_parse_missing_and_batch0(void)
{
    char path[PATH_MAX + 32], err[256] = "";
    struct sim_model m = {0};
    snprintf(path, sizeof path, "%s/does-not-exist.model", tmp_dir);
    CU_ASSERT_EQUAL(sim_model_load(path, 1, &m, err, sizeof err), -ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path));

    char resnet[PATH_MAX];
    CU_ASSERT_EQUAL_FATAL(sim_model_find("resnet50", resnet, sizeof resnet), 0);
    err[0] = '\0';
    CU_ASSERT_EQUAL(sim_model_load(resnet, 0, &m, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "batch"));
    CU_ASSERT_EQUAL(m.nops, 0);
    /* A NULL or empty error buffer is allowed. */
    CU_ASSERT_EQUAL(sim_model_load(path, 1, &m, NULL, 0), -ENOENT);
}

/* --- 6. lookup by name ------------------------------------------------------------------------ */

static void test_find(void)
{
    char path[PATH_MAX], want[PATH_MAX + 32];
    CU_ASSERT_EQUAL_FATAL(sim_model_find("resnet50", path, sizeof path), 0);
    snprintf(want, sizeof want, "%s/resnet50.model", models_dir);
    CU_ASSERT_STRING_EQUAL(path, want);
    CU_ASSERT_EQUAL(sim_model_find("no_such_model", path, sizeof path), -ENOENT);
    CU_ASSERT_EQUAL(sim_model_find("", path, sizeof path), -ENOENT);

    /* A path is taken as it is, if it exists. */
    CU_ASSERT_EQUAL(sim_model_find(want, path, sizeof path), 0);
    CU_ASSERT_STRING_EQUAL(path, want);
    CU_ASSERT_EQUAL(sim_model_find("sim/models/no_such_model.model", path, sizeof path), -ENOENT);
    char small[8];
    CU_ASSERT_EQUAL(sim_model_find("resnet50", small, sizeof small), -ENAMETOOLONG);
}

/* --- the committed files are what the generator writes ------------------------------------ */

static void test_generator_check(void)
{
    char cmd[PATH_MAX * 2 + 64];
    if (system("command -v python3 >/dev/null 2>&1") != 0) {
        fprintf(stderr, "\n  python3 not found: generator check skipped\n");
        return;
    }
    snprintf(cmd, sizeof cmd, "python3 '%s/gen_models.py' --check --dir '%s'", models_dir,
             models_dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("model_file", suite_init, suite_clean);
    POS_ADD_TEST(s, test_models_well_formed);
    POS_ADD_TEST(s, test_models_all_listed);
    POS_ADD_TEST(s, test_models_flops);
    POS_ADD_TEST(s, test_yolop_plausible);
    POS_ADD_TEST(s, test_bert_structure);
    POS_ADD_TEST(s, test_models_params);
    POS_ADD_TEST(s, test_batch_scaling);
    POS_ADD_TEST(s, test_parse_valid);
    POS_ADD_TEST(s, test_parse_errors);
    POS_ADD_TEST(s, test_parse_missing_and_batch0);
    POS_ADD_TEST(s, test_find);
    POS_ADD_TEST(s, test_generator_check);
}
