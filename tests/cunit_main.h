/* The main() of every CUnit test binary: runs the suites that the file registered in
 * pos_test_register() and exits non-zero when any assertion, test or suite failed
 * (CU_basic_run_tests itself returns success even when tests fail). */
#ifndef POS_TESTS_CUNIT_MAIN_H
#define POS_TESTS_CUNIT_MAIN_H

#include <CUnit/Basic.h>
#include <stdio.h>

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
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
                      CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}

#define POS_ADD_SUITE(name, init, clean) CU_add_suite((name), (init), (clean))
#define POS_ADD_TEST(suite, fn)          CU_add_test((suite), #fn, (fn))

#endif
