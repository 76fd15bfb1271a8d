/* Unit tests of posapp's statistics and JSON report (tools/posapp_stats.c): nearest-rank
 * percentiles on known arrays, empty input, SLO attainment, JSON nulls, booleans, escaping,
 * key order and overflow. */
#include "tests/cunit_main.h"
#include "tools/posapp_stats.h"

#include <math.h>
#include <string.h>

static void test_percentile_known(void)
{
    double v[10] = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
    posapp_sort(v, 10);
    for (int i = 0; i < 10; i++)
        CU_ASSERT_EQUAL(v[i], i + 1);
    CU_ASSERT_EQUAL(posapp_percentile(v, 10, 50), 5);  /* rank ceil(5) = 5 */
    CU_ASSERT_EQUAL(posapp_percentile(v, 10, 90), 9);  /* rank 9 */
    CU_ASSERT_EQUAL(posapp_percentile(v, 10, 99), 10); /* rank ceil(9.9) = 10 */
    CU_ASSERT_EQUAL(posapp_percentile(v, 10, 100), 10);
    CU_ASSERT_EQUAL(posapp_percentile(v, 10, 0), 1);  /* rank clamped to 1 */
    CU_ASSERT_EQUAL(posapp_percentile(v, 10, 51), 6); /* rank ceil(5.1) = 6 */
}

static void test_percentile_hundred(void)
{
    double v[100];
    for (int i = 0; i < 100; i++)
        v[i] = 100 - i;
    posapp_sort(v, 100);
    CU_ASSERT_EQUAL(posapp_percentile(v, 100, 50), 50);
    CU_ASSERT_EQUAL(posapp_percentile(v, 100, 90), 90);
    CU_ASSERT_EQUAL(posapp_percentile(v, 100, 99), 99);
    CU_ASSERT_EQUAL(posapp_percentile(v, 100, 29), 29); /* 0.29 * 100 is 28.999... */
    CU_ASSERT_EQUAL(posapp_percentile(v, 100, 57), 57);
}

static void test_percentile_small(void)
{
    double one[1] = {3.5};
    CU_ASSERT_EQUAL(posapp_percentile(one, 1, 50), 3.5);
    CU_ASSERT_EQUAL(posapp_percentile(one, 1, 99), 3.5);
    double two[2] = {1, 2};
    CU_ASSERT_EQUAL(posapp_percentile(two, 2, 50), 1);
    CU_ASSERT_EQUAL(posapp_percentile(two, 2, 90), 2);
    double three[3] = {1, 2, 3};
    CU_ASSERT_EQUAL(posapp_percentile(three, 3, 50), 2); /* ceil(1.5) = 2 */
}

static void test_empty(void)
{
    CU_ASSERT(isnan(posapp_percentile(NULL, 0, 50)));
    CU_ASSERT(isnan(posapp_mean(NULL, 0)));
    CU_ASSERT(isnan(posapp_fraction_le(NULL, 0, 1.0)));
    posapp_sort(NULL, 0);

    struct posapp_report r = {.slo_ms = 10.0, .verified = -1};
    posapp_report_latencies(&r, NULL, 0, 0.0);
    CU_ASSERT(isnan(r.p50_ms) && isnan(r.p99_ms) && isnan(r.mean_ms));
    CU_ASSERT(isnan(r.throughput_rps));
    CU_ASSERT(isnan(r.slo_attainment));
}

static void test_mean_and_slo(void)
{
    double v[4] = {1, 2, 3, 10};
    CU_ASSERT_DOUBLE_EQUAL(posapp_mean(v, 4), 4.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(posapp_fraction_le(v, 4, 3.0), 0.75, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(posapp_fraction_le(v, 4, 0.5), 0.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(posapp_fraction_le(v, 4, 10.0), 1.0, 1e-12);
}

static void test_report_latencies(void)
{
    double lat[5] = {5, 4, 3, 2, 1};
    struct posapp_report r = {.slo_ms = 2.5};
    posapp_report_latencies(&r, lat, 5, 2.0);
    CU_ASSERT_EQUAL(r.p50_ms, 3);
    CU_ASSERT_EQUAL(r.p90_ms, 5);
    CU_ASSERT_EQUAL(r.p99_ms, 5);
    CU_ASSERT_DOUBLE_EQUAL(r.mean_ms, 3.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(r.throughput_rps, 2.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(r.makespan_s, 2.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(r.slo_attainment, 0.4, 1e-12);

    struct posapp_report q = {.slo_ms = NAN};
    double lat2[2] = {1, 2};
    posapp_report_latencies(&q, lat2, 2, 1.0);
    CU_ASSERT(isnan(q.slo_attainment));
}

static void test_json_values(void)
{
    char buf[256];
    struct posapp_json j;
    posapp_json_begin(&j, buf, sizeof buf);
    posapp_json_null(&j, "a");
    posapp_json_bool(&j, "t", 1);
    posapp_json_bool(&j, "f", 0);
    posapp_json_bool(&j, "n", -1);
    posapp_json_number(&j, "nan", NAN, 3);
    posapp_json_number(&j, "inf", INFINITY, -1);
    posapp_json_number(&j, "x", 1.5, 3);
    posapp_json_number(&j, "y", 50, -1);
    posapp_json_uint(&j, "u", 18446744073709551615ULL);
    posapp_json_string(&j, "s", "a\"b\\c\n");
    posapp_json_string(&j, "z", NULL);
    int len = posapp_json_end(&j);
    const char *want = "{\"a\":null,\"t\":true,\"f\":false,\"n\":null,\"nan\":null,\"inf\":null,"
                       "\"x\":1.500,\"y\":50,\"u\":18446744073709551615,"
                       "\"s\":\"a\\\"b\\\\c\\u000a\",\"z\":null}";
    CU_ASSERT_STRING_EQUAL(buf, want);
    CU_ASSERT_EQUAL(len, (int)strlen(want));
}

static void test_json_empty_and_overflow(void)
{
    char buf[64];
    struct posapp_json j;
    posapp_json_begin(&j, buf, sizeof buf);
    CU_ASSERT_EQUAL(posapp_json_end(&j), 2);
    CU_ASSERT_STRING_EQUAL(buf, "{}");

    char small[16];
    posapp_json_begin(&j, small, sizeof small);
    posapp_json_string(&j, "model", "a-rather-long-model-name");
    CU_ASSERT_EQUAL(posapp_json_end(&j), -1);
    CU_ASSERT_STRING_EQUAL(small, "{}");
}

static void test_report_json_load(void)
{
    struct posapp_report r = {
        .model = "resnet18",
        .batch = 4,
        .requests = 5,
        .launches = 110,
        .p50_ms = 1.25,
        .p90_ms = 2,
        .p99_ms = 3,
        .mean_ms = 1.5,
        .throughput_rps = 800,
        .makespan_s = 0.00625,
        .slo_ms = NAN,
        .slo_attainment = NAN,
        .verified = -1,
    };
    char buf[1024];
    CU_ASSERT(posapp_report_json(&r, buf, sizeof buf) > 0);
    CU_ASSERT_STRING_EQUAL(buf,
                           "{\"model\":\"resnet18\",\"batch\":4,\"requests\":5,\"launches\":110,"
                           "\"p50_ms\":1.250000,\"p90_ms\":2.000000,\"p99_ms\":3.000000,"
                           "\"mean_ms\":1.500000,\"throughput_rps\":800.000,"
                           "\"makespan_s\":0.006250,\"slo_ms\":null,\"slo_attainment\":null,"
                           "\"verified\":null}");
    r.slo_ms = 2.5;
    r.slo_attainment = 0.8;
    r.verified = 1;
    CU_ASSERT(posapp_report_json(&r, buf, sizeof buf) > 0);
    CU_ASSERT(strstr(buf, "\"slo_ms\":2.5,\"slo_attainment\":0.800000,\"verified\":true}") != NULL);
    r.verified = 0;
    CU_ASSERT(posapp_report_json(&r, buf, sizeof buf) > 0);
    CU_ASSERT(strstr(buf, "\"verified\":false}") != NULL);
}

static void test_report_json_microbench(void)
{
    struct posapp_report r = {
        .model = NULL,
        .batch = 1,
        .requests = 0,
        .launches = 10000,
        .p50_ms = NAN,
        .p90_ms = NAN,
        .p99_ms = NAN,
        .mean_ms = NAN,
        .throughput_rps = NAN,
        .makespan_s = 0.5,
        .slo_ms = NAN,
        .slo_attainment = NAN,
        .verified = -1,
        .microbench = 1,
        .launch_ns_p50 = 812,
        .launch_ns_p99 = 4096.5,
        .launch_ns_mean = 950.25,
    };
    char buf[1024];
    CU_ASSERT(posapp_report_json(&r, buf, sizeof buf) > 0);
    CU_ASSERT_STRING_EQUAL(buf, "{\"model\":null,\"batch\":1,\"requests\":0,\"launches\":10000,"
                                "\"p50_ms\":null,\"p90_ms\":null,\"p99_ms\":null,\"mean_ms\":null,"
                                "\"throughput_rps\":null,\"makespan_s\":0.500000,\"slo_ms\":null,"
                                "\"slo_attainment\":null,\"verified\":null,"
                                "\"launch_ns_p50\":812.0,\"launch_ns_p99\":4096.5,\"launch_ns_mean\":950.2}");
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("posapp_stats", NULL, NULL);
    POS_ADD_TEST(s, test_percentile_known);
    POS_ADD_TEST(s, test_percentile_hundred);
    POS_ADD_TEST(s, test_percentile_small);
    POS_ADD_TEST(s, test_empty);
    POS_ADD_TEST(s, test_mean_and_slo);
    POS_ADD_TEST(s, test_report_latencies);
    POS_ADD_TEST(s, test_json_values);
    POS_ADD_TEST(s, test_json_empty_and_overflow);
    POS_ADD_TEST(s, test_report_json_load);
    POS_ADD_TEST(s, test_report_json_microbench);
}
