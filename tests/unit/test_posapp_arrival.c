/* Unit tests of posapp's arrival processes and PRNG (tools/posapp_arrival.c): seeded
 * determinism, the mean of Poisson gaps, the mean and CV of Gamma gaps, the schedule, and
 * --arrival spec parsing. */
#include "tests/cunit_main.h"
#include "tools/posapp_arrival.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void gap_moments(const struct posapp_arrival *a, uint64_t seed, size_t n, double *mean,
                        double *cv)
{
    struct posapp_rng r;
    posapp_rng_seed(&r, seed);
    double sum = 0.0, sum2 = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double g = posapp_arrival_gap(a, &r);
        bad += !(g >= 0.0 && isfinite(g));
        sum += g;
        sum2 += g * g;
    }
    CU_ASSERT_EQUAL(bad, 0);
    *mean = sum / (double)n;
    double var = sum2 / (double)n - *mean * *mean;
    *cv = sqrt(var) / *mean;
}

static void test_rng_deterministic(void)
{
    struct posapp_rng a, b, c;
    posapp_rng_seed(&a, 42);
    posapp_rng_seed(&b, 42);
    posapp_rng_seed(&c, 43);
    int differs = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = posapp_rng_u64(&a), y = posapp_rng_u64(&b), z = posapp_rng_u64(&c);
        CU_ASSERT_EQUAL(x, y);
        differs += x != z;
    }
    CU_ASSERT(differs > 990);
}

static void test_uniform_range(void)
{
    struct posapp_rng r;
    posapp_rng_seed(&r, 7);
    double sum = 0.0;
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        double u = posapp_rng_uniform(&r);
        bad += !(u > 0.0 && u <= 1.0);
        sum += u;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_DOUBLE_EQUAL(sum / 100000.0, 0.5, 0.01);
}

static void test_hash3(void)
{
    CU_ASSERT_EQUAL(posapp_hash3(1, 2, 3), posapp_hash3(1, 2, 3));
    CU_ASSERT_NOT_EQUAL(posapp_hash3(1, 2, 3), posapp_hash3(1, 3, 2));
    CU_ASSERT_NOT_EQUAL(posapp_hash3(1, 2, 3), posapp_hash3(2, 2, 3));
    CU_ASSERT_NOT_EQUAL(posapp_mix64(0), 0);
}

static void test_poisson_mean(void)
{
    struct posapp_arrival a;
    char err[128];
    CU_ASSERT_EQUAL_FATAL(posapp_arrival_parse("poisson:100", &a, err, sizeof err), 0);
    double mean, cv;
    gap_moments(&a, 1, 20000, &mean, &cv);
    CU_ASSERT(fabs(mean - 0.01) <= 0.05 * 0.01);
    /* exponential: CV 1 */
    CU_ASSERT(fabs(cv - 1.0) <= 0.1);
}

static void check_gamma(const char *spec, double rate, double shape)
{
    struct posapp_arrival a;
    char err[128];
    CU_ASSERT_EQUAL_FATAL(posapp_arrival_parse(spec, &a, err, sizeof err), 0);
    CU_ASSERT_EQUAL(a.kind, POSAPP_ARRIVAL_GAMMA);
    CU_ASSERT_DOUBLE_EQUAL(a.rate, rate, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(a.shape, shape, 1e-12);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double mean, cv;
        gap_moments(&a, seed, 200000, &mean, &cv);
        CU_ASSERT(fabs(mean - 1.0 / rate) <= 0.1 / rate);
        CU_ASSERT(fabs(cv - 1.0 / sqrt(shape)) <= 0.1 / sqrt(shape));
    }
}

static void test_gamma_bursty(void)
{
    check_gamma("gamma:0.25:50", 50.0, 0.25);
}

static void test_gamma_smooth(void)
{
    check_gamma("gamma:4:200", 200.0, 4.0);
}

static void test_gamma_shape_one_is_exponential(void)
{
    check_gamma("gamma:1:10", 10.0, 1.0);
}

static void test_schedule(void)
{
    struct posapp_arrival a;
    char err[128];
    CU_ASSERT_EQUAL_FATAL(posapp_arrival_parse("gamma:0.5:50", &a, err, sizeof err), 0);
    double t1[1000], t2[1000], t3[1000];
    posapp_arrival_schedule(&a, 9, t1, 1000);
    posapp_arrival_schedule(&a, 9, t2, 1000);
    posapp_arrival_schedule(&a, 10, t3, 1000);
    CU_ASSERT_EQUAL(memcmp(t1, t2, sizeof t1), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(t1, t3, sizeof t1), 0);
    CU_ASSERT_EQUAL(t1[0], 0.0);
    for (int i = 1; i < 1000; i++)
        CU_ASSERT_FATAL(t1[i] >= t1[i - 1]);
    /* 999 gaps of mean 20 ms */
    CU_ASSERT(fabs(t1[999] - 999 * 0.02) < 0.2 * 999 * 0.02);

    CU_ASSERT_EQUAL_FATAL(posapp_arrival_parse("closed", &a, err, sizeof err), 0);
    posapp_arrival_schedule(&a, 9, t1, 10);
    for (int i = 0; i < 10; i++)
        CU_ASSERT_EQUAL(t1[i], 0.0);
}

static void test_parse_accepts(void)
{
    struct posapp_arrival a;
    char err[128];
    CU_ASSERT_EQUAL(posapp_arrival_parse("closed", &a, err, sizeof err), 0);
    CU_ASSERT_EQUAL(a.kind, POSAPP_ARRIVAL_CLOSED);
    CU_ASSERT_EQUAL(posapp_arrival_parse("poisson:100", &a, err, sizeof err), 0);
    CU_ASSERT_EQUAL(a.kind, POSAPP_ARRIVAL_POISSON);
    CU_ASSERT_DOUBLE_EQUAL(a.rate, 100.0, 1e-12);
    CU_ASSERT_EQUAL(posapp_arrival_parse("poisson:2.5e3", &a, err, sizeof err), 0);
    CU_ASSERT_DOUBLE_EQUAL(a.rate, 2500.0, 1e-9);
    CU_ASSERT_EQUAL(posapp_arrival_parse("gamma:0.5:50", &a, err, sizeof err), 0);
    CU_ASSERT_EQUAL(a.kind, POSAPP_ARRIVAL_GAMMA);
    CU_ASSERT_DOUBLE_EQUAL(a.shape, 0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(a.rate, 50.0, 1e-12);
}

static void test_parse_rejects(void)
{
    static const char *const bad[] = {
        "poisson:", "poisson:-1", "poisson:0",   "poisson:abc", "poisson:5x",
        "poisson",  "poisson: 5", "poisson:inf", "poisson:nan", "gamma:1",
        "gamma:1:", "gamma::5",   "gamma:0:5",   "gamma:1:-5",  "gamma:1:2:3",
        "closed:5", "",           "garbage",     "Closed",      "poisson:1e999",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct posapp_arrival a;
        char err[128] = "";
        int rc = posapp_arrival_parse(bad[i], &a, err, sizeof err);
        CU_ASSERT_EQUAL(rc, -1);
        if (rc != -1)
            fprintf(stderr, "accepted bad spec '%s'\n", bad[i]);
        CU_ASSERT(strstr(err, "--arrival") != NULL);
    }
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("posapp_arrival", NULL, NULL);
    POS_ADD_TEST(s, test_rng_deterministic);
    POS_ADD_TEST(s, test_uniform_range);
    POS_ADD_TEST(s, test_hash3);
    POS_ADD_TEST(s, test_poisson_mean);
    POS_ADD_TEST(s, test_gamma_bursty);
    POS_ADD_TEST(s, test_gamma_smooth);
    POS_ADD_TEST(s, test_gamma_shape_one_is_exponential);
    POS_ADD_TEST(s, test_schedule);
    POS_ADD_TEST(s, test_parse_accepts);
    POS_ADD_TEST(s, test_parse_rejects);
}
