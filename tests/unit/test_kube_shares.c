/* kube/shares.c: share IDs written and parsed strictly, and GetPreferredAllocation's packing
 * onto the fewest GPUs. */
#include <CUnit/CUnit.h>
#include <errno.h>
#include <string.h>

#include "kube/shares.h"
#include "tests/cunit_main.h"

static void test_ids_round_trip(void)
{
    char id[KUBE_SHARE_ID_MAX];
    for (int g = 0; g < KUBE_GPUS_MAX; g += 7)
        for (int k = 0; k < KUBE_SHARES_MAX; k += 31) {
            kube_share_id(id, g, k);
            int g2 = -1, k2 = -1;
            CU_ASSERT_EQUAL(kube_share_parse(id, &g2, &k2), 0);
            CU_ASSERT(g2 == g && k2 == k);
        }
    kube_share_id(id, 63, 255);
    CU_ASSERT_STRING_EQUAL(id, "gpu63-255");
}

static void test_anything_else_is_no_share_id(void)
{
    static const char *const bad[] = {"",        "gpu",     "gpu0",     "gpu0-",   "gpu-1",
                                      "gpu00-1", "gpu0-01", "gpu0-1x",  "gpu64-0", "gpu0-256",
                                      "GPU0-1",  "gpu+1-0", "gpu1--1",  " gpu0-1", "gpu1000-0",
                                      "nvidia0", "gpu0-1 ", "gpu0-9999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int g, k;
        CU_ASSERT_EQUAL(kube_share_parse(bad[i], &g, &k), -EINVAL);
    }
}

static size_t prefer(const char *const *avail, size_t na, const char *const *must, size_t nm,
                     size_t size, const char **out)
{
    return kube_shares_prefer(avail, na, must, nm, size, out);
}

static void test_the_fullest_gpu_first(void)
{
    const char *const avail[] = {"gpu0-0", "gpu0-1", "gpu1-0", "gpu1-1", "gpu1-2", "gpu2-0"};
    const char *out[6];
    CU_ASSERT_EQUAL_FATAL(prefer(avail, 6, NULL, 0, 3, out), 3);
    CU_ASSERT_STRING_EQUAL(out[0], "gpu1-0");
    CU_ASSERT_STRING_EQUAL(out[1], "gpu1-1");
    CU_ASSERT_STRING_EQUAL(out[2], "gpu1-2");
    /* four: GPU 1's three and one more from the next fullest (GPU 0), not GPU 2 */
    CU_ASSERT_EQUAL_FATAL(prefer(avail, 6, NULL, 0, 4, out), 4);
    CU_ASSERT_STRING_EQUAL(out[3], "gpu0-0");
    /* two fit on GPU 0 or GPU 1: GPU 1 has more */
    CU_ASSERT_EQUAL_FATAL(prefer(avail, 6, NULL, 0, 2, out), 2);
    CU_ASSERT_STRING_EQUAL(out[0], "gpu1-0");
    CU_ASSERT_STRING_EQUAL(out[1], "gpu1-1");
}

static void test_must_include_comes_first_and_its_gpu_is_filled(void)
{
    const char *const avail[] = {"gpu1-0", "gpu1-1", "gpu1-2", "gpu0-0", "gpu0-1", "gpu0-2"};
    const char *const must[] = {"gpu0-3"};
    const char *out[6];
    CU_ASSERT_EQUAL_FATAL(prefer(avail, 6, must, 1, 3, out), 3);
    CU_ASSERT_STRING_EQUAL(out[0], "gpu0-3");
    CU_ASSERT_STRING_EQUAL(out[1], "gpu0-0");
    CU_ASSERT_STRING_EQUAL(out[2], "gpu0-1");
}

static void test_too_few_and_foreign_ids(void)
{
    const char *const avail[] = {"gpu0-0", "other-device", "gpu0-0", "gpu2-1"};
    const char *out[8];
    /* the duplicate counts once, the foreign ID not at all */
    CU_ASSERT_EQUAL(prefer(avail, 4, NULL, 0, 8, out), 2);
    CU_ASSERT_EQUAL(prefer(avail, 4, NULL, 0, 0, out), 0);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("kube_shares", NULL, NULL);
    POS_ADD_TEST(s, test_ids_round_trip);
    POS_ADD_TEST(s, test_anything_else_is_no_share_id);
    POS_ADD_TEST(s, test_the_fullest_gpu_first);
    POS_ADD_TEST(s, test_must_include_comes_first_and_its_gpu_is_filled);
    POS_ADD_TEST(s, test_too_few_and_foreign_ids);
}
