/* Tests kernel profiles (sched/profile.c, sched/profile_file.c): running means and spread,
 * outliers rejected, profiles kept apart per user and shape (an imported any-user profile
 * answers for users without their own), the SM demand of a shape, the file written and read
 * back exactly, and every kind of bad file refused with FILE:LINE and the table untouched. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/profile.h"
#include "tests/cunit_main.h"

static const uint32_t G1[3] = {49, 1, 1}, G2[3] = {7, 1, 1}, B[3] = {128, 1, 1};
static const struct pos_sched_device DEV = {.sm_count = 6,
                                            .max_threads_per_sm = 2048,
                                            .max_blocks_per_sm = 32,
                                            .smem_per_sm = 98304,
                                            .concurrent = 0};
static char dir[] = "/tmp/pos-test-profile-XXXXXX";

static void test_mean_and_spread(void)
{
    struct pos_profiles p;
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&p, 0), 0);
    struct pos_kprof *k = pos_prof_get(&p, 1000, 0xabc, G1, B, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    static const double xs[] = {100, 120, 80, 110, 90};
    for (size_t i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(pos_prof_add_solo(&p, k, xs[i]), 1);
    CU_ASSERT_EQUAL(k->n, 5);
    CU_ASSERT_DOUBLE_EQUAL(k->mean_ns, 100, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(pos_kprof_sd(k), sqrt(1000.0 / 4), 1e-9);
    pos_prof_add_corun(k, 150);
    pos_prof_add_corun(k, 130);
    CU_ASSERT_EQUAL(k->co_n, 2);
    CU_ASSERT_DOUBLE_EQUAL(k->co_ratio, 1.4, 1e-9);
    pos_prof_free(&p);
}

static void test_outliers_rejected_once_known(void)
{
    struct pos_profiles p;
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&p, 0), 0);
    struct pos_kprof *k = pos_prof_get(&p, 0, 1, G1, B, 1);
    CU_ASSERT_EQUAL(pos_prof_add_solo(&p, k, 1000), 1); /* early: everything counts */
    for (int i = 0; i < 20; i++)
        pos_prof_add_solo(&p, k, 100);
    double mean = k->mean_ns;
    CU_ASSERT_EQUAL(pos_prof_add_solo(&p, k, 100000), 0); /* an idle gap, not the kernel */
    CU_ASSERT_EQUAL(p.rejected, 1);
    CU_ASSERT_DOUBLE_EQUAL(k->mean_ns, mean, 1e-9);
    CU_ASSERT_EQUAL(pos_prof_add_solo(&p, k, NAN), 0);
    CU_ASSERT_EQUAL(pos_prof_add_solo(&p, k, -5), 0);
    pos_prof_free(&p);
}

/* One user's samples never move another's profile; shapes are apart; the table grows. */
static void test_keyed_by_user_and_shape(void)
{
    struct pos_profiles p;
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&p, 0), 0);
    struct pos_kprof *a = pos_prof_get(&p, 1000, 7, G1, B, 1);
    pos_prof_add_solo(&p, a, 100);
    struct pos_kprof *b = pos_prof_get(&p, 1001, 7, G1, B, 1);
    pos_prof_add_solo(&p, b, 900);
    struct pos_kprof *c = pos_prof_get(&p, 1000, 7, G2, B, 1);
    pos_prof_add_solo(&p, c, 50);
    CU_ASSERT_DOUBLE_EQUAL(pos_prof_find(&p, 1000, 7, G1, B)->mean_ns, 100, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(pos_prof_find(&p, 1001, 7, G1, B)->mean_ns, 900, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(pos_prof_find(&p, 1000, 7, G2, B)->mean_ns, 50, 1e-9);
    CU_ASSERT_PTR_NULL(pos_prof_find(&p, 1002, 7, G1, B));
    struct pos_kprof *any = pos_prof_get(&p, POS_PROF_ANY_UID, 7, G1, B, 1);
    pos_prof_add_solo(&p, any, 300);
    CU_ASSERT_DOUBLE_EQUAL(pos_prof_find(&p, 1002, 7, G1, B)->mean_ns, 300, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(pos_prof_find(&p, 1000, 7, G1, B)->mean_ns, 100, 1e-9);
    for (uint64_t key = 100; key < 5100; key++)
        CU_ASSERT_PTR_NOT_NULL_FATAL(pos_prof_get(&p, 0, key, G1, B, 1));
    CU_ASSERT_EQUAL(p.count, 5004);
    CU_ASSERT_DOUBLE_EQUAL(pos_prof_find(&p, 1001, 7, G1, B)->mean_ns, 900, 1e-9);
    pos_prof_free(&p);
    /* a bounded table counts what it could not keep */
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&p, 2), 0);
    CU_ASSERT_PTR_NOT_NULL(pos_prof_get(&p, 0, 1, G1, B, 1));
    CU_ASSERT_PTR_NOT_NULL(pos_prof_get(&p, 0, 2, G1, B, 1));
    CU_ASSERT_PTR_NULL(pos_prof_get(&p, 0, 3, G1, B, 1));
    CU_ASSERT_EQUAL(p.dropped, 1);
    pos_prof_free(&p);
}

static void test_sm_demand(void)
{
    /* 128 threads: 16 blocks fit an SM by threads, 32 by the block limit: 16 */
    CU_ASSERT_DOUBLE_EQUAL(pos_kprof_sm_demand(&DEV, G1, B, 0), 49.0 / 96, 1e-9);
    /* 32 KiB of shared memory a block: 3 an SM */
    CU_ASSERT_DOUBLE_EQUAL(pos_kprof_sm_demand(&DEV, G2, B, 32768), 7.0 / 18, 1e-9);
    static const uint32_t big[3] = {1000, 1, 1};
    CU_ASSERT_DOUBLE_EQUAL(pos_kprof_sm_demand(&DEV, big, B, 0), 1, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(pos_kprof_sm_demand(NULL, G1, B, 0), 0, 1e-9);
}

static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static void test_file_round_trip(void)
{
    struct pos_profiles p, q;
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&p, 0), 0);
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&q, 0), 0);
    struct pos_kprof *a = pos_prof_get(&p, 1000, 0xfeedbeef12345678ull, G1, B, 1);
    for (int i = 0; i < 40; i++)
        pos_prof_add_solo(&p, a, 1000 + 10 * (i % 5));
    pos_prof_add_corun(a, 1500);
    struct pos_kprof *b = pos_prof_get(&p, POS_PROF_ANY_UID, 42, G2, B, 1);
    pos_prof_add_solo(&p, b, 250);
    a->tries = b->tries = 50;
    pos_prof_get(&p, 5, 43, G2, B, 1); /* no samples: not written */
    char path[256], err[512];
    path_of(path, sizeof path, "rt");
    CU_ASSERT_EQUAL_FATAL(pos_prof_save(&p, &DEV, path, err, sizeof err), 2);
    CU_ASSERT_EQUAL_FATAL(pos_prof_load(&q, &DEV, path, err, sizeof err), 0);
    CU_ASSERT_EQUAL(q.count, 2);
    const struct pos_kprof *qa = pos_prof_find(&q, 1000, 0xfeedbeef12345678ull, G1, B);
    CU_ASSERT_PTR_NOT_NULL_FATAL(qa);
    CU_ASSERT_EQUAL(qa->n, 40);
    CU_ASSERT_EQUAL(qa->tries, 50);
    CU_ASSERT_DOUBLE_EQUAL(qa->mean_ns, a->mean_ns, 0.05);
    CU_ASSERT_DOUBLE_EQUAL(pos_kprof_sd(qa), pos_kprof_sd(a), 0.05);
    CU_ASSERT_EQUAL(qa->co_n, 1);
    CU_ASSERT_DOUBLE_EQUAL(qa->co_ratio, a->co_ratio, 1e-4);
    CU_ASSERT_PTR_NOT_NULL(pos_prof_find(&q, 77, 42, G2, B)); /* any user */
    /* no temporary file is left beside it */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    CU_ASSERT_EQUAL(fscanf(f, "%d", &n), 1);
    pclose(f);
    CU_ASSERT_EQUAL(n, 0);
    pos_prof_free(&p);
    pos_prof_free(&q);
}

static const char *const GOOD_LINE = "k 1000 00000000000000ab 49,1,1 128,1,1 10 1000.0 5.0 12 0 1.0\n";

/* Writes TEXT to a file, loads it into a table holding one profile, and returns the
 * message; the table must come out untouched. */
static int load_text(const char *text, char *err, size_t errlen)
{
    char path[256];
    path_of(path, sizeof path, "bad");
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    struct pos_profiles p;
    pos_prof_init(&p, 0);
    struct pos_kprof *k = pos_prof_get(&p, 9, 9, G1, B, 1);
    pos_prof_add_solo(&p, k, 5);
    int rc = pos_prof_load(&p, &DEV, path, err, errlen);
    if (rc < 0) {
        CU_ASSERT_EQUAL(p.count, 1);
        CU_ASSERT_DOUBLE_EQUAL(pos_prof_find(&p, 9, 9, G1, B)->mean_ns, 5, 1e-9);
    }
    pos_prof_free(&p);
    return rc;
}

static void expect_refused(const char *text, const char *where, const char *what)
{
    char err[512] = "", want[300];
    CU_ASSERT(load_text(text, err, sizeof err) < 0);
    snprintf(want, sizeof want, "%s/bad:%s", dir, where);
    if (!strstr(err, want) || !strstr(err, what)) {
        fprintf(stderr, "\n  got '%s', want '%s' and '%s'\n", err, want, what);
        CU_FAIL("message");
    }
}

static void test_bad_files_refused(void)
{
    char ok[1024], err[512];
    snprintf(ok, sizeof ok, "pos-profiles 1\ndevice sms 6\n%send 1\n", GOOD_LINE);
    CU_ASSERT_EQUAL(load_text(ok, err, sizeof err), 0);
    expect_refused("", "1:", "empty");
    expect_refused("pos-profiles 2\n", "1:", "version 2");
    expect_refused("hello\n", "1:", "not a pos profile file");
    snprintf(ok, sizeof ok, "pos-profiles 1\n%s", GOOD_LINE);
    expect_refused(ok, "2:", "truncated (no end line)");
    snprintf(ok, sizeof ok, "pos-profiles 1\n%s", "k 1000 00000000000000ab 49,1,1 128");
    expect_refused(ok, "2:", "truncated line");
    snprintf(ok, sizeof ok, "pos-profiles 1\n%send 2\n", GOOD_LINE);
    expect_refused(ok, "3:", "end line counts 2");
    expect_refused("pos-profiles 1\ndevice sms 132\nend 0\n", "2:", "132 SMs");
    expect_refused("pos-profiles 1\nk 1000 00000000000000ab 49,1,1 128,1,1 10 -1 5 12 0 1\nend 1\n",
                   "2:", "impossible duration");
    expect_refused("pos-profiles 1\nk 1000 00000000000000ab 49,1,1 128,1,1 10 1000 5 12 3 0\nend 1\n",
                   "2:", "impossible co-run ratio");
    expect_refused("pos-profiles 1\nk 1000 00000000000000ab 0,1,1 128,1,1 10 1000 5 12 0 1\nend 1\n",
                   "2:", "bad grid");
    expect_refused("pos-profiles 1\nk 1000 xyz 49,1,1 128,1,1 10 1000 5 12 0 1\nend 1\n", "2:",
                   "bad kernel key");
    expect_refused("pos-profiles 1\nk -1 00000000000000ab 49,1,1 128,1,1 10 1000 5 12 0 1\nend 1\n",
                   "2:", "bad uid");
    expect_refused("pos-profiles 1\nk 1 00000000000000ab 49,1,1 128,1,1 10 1000 5 2 0 1\nend 1\n",
                   "2:", "fewer tries");
    expect_refused("pos-profiles 1\nk 1 00000000000000ab 49,1,1 128,1,1 0 0 0 2 0 1\nend 1\n", "2:",
                   "without samples");
    snprintf(ok, sizeof ok, "pos-profiles 1\n%send 1\nk\n", GOOD_LINE);
    expect_refused(ok, "4:", "after the end line");
    char path[256];
    path_of(path, sizeof path, "missing");
    struct pos_profiles p;
    pos_prof_init(&p, 0);
    CU_ASSERT(pos_prof_load(&p, &DEV, path, err, sizeof err) < 0);
    pos_prof_free(&p);
}

static int setup(void)
{
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* With user_max set, one user's kernels take at most that many profiles: the next shape of
 * theirs is not learnt (counted in user_refused, the table untouched), another user's still
 * is, profiles for every user (imports) are not counted, an existing profile of the capped
 * user is still found and fed, a file that would exceed the cap is refused saying whose, and
 * a reset starts the counts afresh. */
static void test_one_user_cannot_take_the_table(void)
{
    struct pos_profiles p;
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&p, 0), 0);
    p.user_max = 10;
    for (uint64_t key = 1; key <= 10; key++)
        CU_ASSERT_PTR_NOT_NULL(pos_prof_get(&p, 1000, key, G1, B, 1));
    CU_ASSERT_EQUAL(pos_prof_user_count(&p, 1000), 10);
    CU_ASSERT_PTR_NULL(pos_prof_get(&p, 1000, 11, G1, B, 1));
    CU_ASSERT_PTR_NULL(pos_prof_get(&p, 1000, 12, G2, B, 1));
    CU_ASSERT_EQUAL(p.user_refused, 2);
    CU_ASSERT_EQUAL(p.count, 10);
    CU_ASSERT_PTR_NOT_NULL(pos_prof_get(&p, 1000, 3, G1, B, 1)); /* known: still there */
    for (uint64_t key = 1; key <= 10; key++)
        CU_ASSERT_PTR_NOT_NULL(pos_prof_get(&p, 2000, key, G1, B, 1));
    for (uint64_t key = 1; key <= 30; key++)
        CU_ASSERT_PTR_NOT_NULL(pos_prof_get(&p, POS_PROF_ANY_UID, key, G2, B, 1));
    CU_ASSERT_EQUAL(pos_prof_user_count(&p, 2000), 10);
    CU_ASSERT_EQUAL(p.count, 50);
    /* many users: the counts stay right as their table grows */
    for (uint32_t uid = 1; uid <= 300; uid++)
        CU_ASSERT_PTR_NOT_NULL(pos_prof_get(&p, uid, 99, G1, B, 1));
    CU_ASSERT_EQUAL(pos_prof_user_count(&p, 1000), 10);
    CU_ASSERT_EQUAL(pos_prof_user_count(&p, 150), 1);
    /* a file of 11 profiles of one user: refused, saying whose */
    char path[] = "/tmp/pos-test-profcap-XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "pos-profiles %d\ndevice sms 6\n", POS_PROF_VERSION);
    for (int i = 0; i < 11; i++)
        fprintf(f, "k 3000 %016x 1,1,1 32,1,1 10 1000.0 10.0 10 0 1.0000\n", 0x100 + i);
    fprintf(f, "end 11\n");
    fclose(f);
    char err[512] = "";
    CU_ASSERT(pos_prof_load(&p, &DEV, path, err, sizeof err) < 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "uid 3000 has 10 profiles"));
    unlink(path);
    pos_prof_reset(&p);
    CU_ASSERT_EQUAL(pos_prof_user_count(&p, 1000), 0);
    CU_ASSERT_EQUAL(p.user_refused, 0);
    CU_ASSERT_PTR_NOT_NULL(pos_prof_get(&p, 1000, 11, G1, B, 1));
    pos_prof_free(&p);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("profile", setup, teardown);
    POS_ADD_TEST(s, test_mean_and_spread);
    POS_ADD_TEST(s, test_outliers_rejected_once_known);
    POS_ADD_TEST(s, test_keyed_by_user_and_shape);
    POS_ADD_TEST(s, test_sm_demand);
    POS_ADD_TEST(s, test_file_round_trip);
    POS_ADD_TEST(s, test_bad_files_refused);
    POS_ADD_TEST(s, test_one_user_cannot_take_the_table);
}
