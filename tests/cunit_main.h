/* The main() of every CUnit test binary: runs the suites that the file registered in
 * pos_test_register() (or, with POS_TEST=NAME in the environment, only the tests of that
 * name) and exits non-zero when any assertion, test or suite failed (CU_basic_run_tests
 * itself returns success even when tests fail). */
#ifndef POS_TESTS_CUNIT_MAIN_H
#define POS_TESTS_CUNIT_MAIN_H

#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>

/* Defined by each test file: adds its suites and tests to the registry. */
void pos_test_register(void);

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    pos_test_register();
    if (CU_get_error() != CUE_SUCCESS) {
        fprintf(stderr, "CUnit registration failed: %s\n", CU_get_error_msg());
        CU_cleanup_registry();
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    const char *only = getenv("POS_TEST");
    if (only && *only) {
        unsigned ran = 0;
        for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext) {
            CU_pTest t = CU_get_test_by_name(only, s);
            if (t && CU_basic_run_test(s, t) == CUE_SUCCESS)
                ran++;
        }
        if (!ran) {
            fprintf(stderr, "POS_TEST=%s: no such test\n", only);
            CU_cleanup_registry();
            return 2;
        }
    } else {
        CU_basic_run_tests();
    }
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
                      CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}

#define POS_ADD_SUITE(name, init, clean) CU_add_suite((name), (init), (clean))
#define POS_ADD_TEST(suite, fn)          CU_add_test((suite), #fn, (fn))

#endif
