/* Tests the text module parser (sim/module_text.c): headers, keys, errors that name the
 * line, twin signatures, and the cost of one launch per launch, block, thread and args. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sim/module_text.h"
#include "tests/cunit_main.h"

static int parse(const char *text, struct sim_kernel_decl **d, size_t *n, char *err)
{
    return sim_module_parse(text, strlen(text), d, n, err, 256);
}

static void test_parses_kernels_and_keys(void)
{
    const char *m = "# leading comment\n\n  .pos_sim_module 1   # trailing comment\n"
                    ".kernel conv1 flops=2.5e9 bytes=4096 dtype=fp16 smem=1024 regs=64\n"
                    ".kernel ew\tflops=2 bytes=12 per=thread maxthreads=256\n"
                    ".kernel any cost=args\n"
                    ".kernel v twin=vector_add\n";
    struct sim_kernel_decl *d;
    size_t n;
    char err[256] = "";
    CU_ASSERT_TRUE(sim_module_is_text(m, strlen(m)));
    CU_ASSERT_EQUAL_FATAL(parse(m, &d, &n, err), 0);
    CU_ASSERT_EQUAL_FATAL(n, 4);
    CU_ASSERT_STRING_EQUAL(d[0].name, "conv1");
    CU_ASSERT_DOUBLE_EQUAL(d[0].flops, 2.5e9, 1);
    CU_ASSERT_EQUAL(d[0].fp16, 1);
    CU_ASSERT_EQUAL(d[0].smem, 1024);
    CU_ASSERT_EQUAL(d[0].regs, 64);
    CU_ASSERT_EQUAL(d[1].per, SIM_PER_THREAD);
    CU_ASSERT_EQUAL(d[1].maxthreads, 256);
    CU_ASSERT_EQUAL(d[2].cost_args, 1);
    CU_ASSERT_EQUAL(d[3].twin, SIM_TWIN_VECTOR_ADD);
    CU_ASSERT_EQUAL(d[3].regs, 32); /* defaults */
    CU_ASSERT_EQUAL(d[3].maxthreads, 1024);
    free(d);
}

static void test_errors_name_the_line(void)
{
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {".kernel k flops=1\n", "line 1: expected '.pos_sim_module 1' header"},
        {"\n.pos_sim_module 2\n", "line 2: expected '.pos_sim_module 1' header"},
        {".pos_sim_module 1\n.kernel k flop=1\n", "line 2: unknown key: flop=1"},
        {".pos_sim_module 1\n.kernel k flops=abc\n", "line 2: bad number for flops: flops=abc"},
        {".pos_sim_module 1\n.kernel k flops=-1\n", "line 2: bad number for flops: flops=-1"},
        {".pos_sim_module 1\n.kernel a\n.kernel a\n", "line 3: duplicate kernel 'a'"},
        {".pos_sim_module 1\n.kernel\n", "line 2: missing kernel name"},
        {".pos_sim_module 1\n.kernel k twin=foo\n",
         "line 2: unknown twin (vector_add, fill, scale, checksum): twin=foo"},
        {".pos_sim_module 1\n.kernel k cost=args twin=fill\n",
         "line 2: cost=args and twin= exclude each other"},
        {".pos_sim_module 1\n.func k\n", "line 2: expected '.kernel NAME key=value...'"},
        {".pos_sim_module 1\n.kernel k per=warp\n",
         "line 2: per must be launch, block or thread: per=warp"},
        {".pos_sim_module 1\n.kernel bad!name\n", "line 2: bad character in kernel name"},
        {"", "line 0: no '.pos_sim_module 1' header"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sim_kernel_decl *d = NULL;
        size_t n = 0;
        char err[256] = "";
        CU_ASSERT_EQUAL(parse(bad[i].text, &d, &n, err), -EINVAL);
        CU_ASSERT_STRING_EQUAL(err, bad[i].msg);
    }
    CU_ASSERT_FALSE(sim_module_is_text("\x7f"
                                       "ELF",
                                       4));
    CU_ASSERT_FALSE(sim_module_is_text("// PTX\n.version 8.0\n", 20));
}

static void test_cost_of_one_launch(void)
{
    struct sim_kernel_decl d;
    memset(&d, 0, sizeof d);
    double f, b;
    d.flops = 10;
    d.bytes = 4;
    sim_kernel_cost(&d, 8, 256, 0, 0, 0, &f, &b);
    CU_ASSERT_DOUBLE_EQUAL(f, 10, 0);
    d.per = SIM_PER_BLOCK;
    sim_kernel_cost(&d, 8, 256, 0, 0, 0, &f, &b);
    CU_ASSERT_DOUBLE_EQUAL(f, 80, 0);
    CU_ASSERT_DOUBLE_EQUAL(b, 32, 0);
    d.per = SIM_PER_THREAD;
    sim_kernel_cost(&d, 8, 256, 0, 0, 0, &f, &b);
    CU_ASSERT_DOUBLE_EQUAL(f, 20480, 0);
    d.cost_args = 1;
    sim_kernel_cost(&d, 8, 256, 777, 999, 0, &f, &b);
    CU_ASSERT_DOUBLE_EQUAL(f, 777, 0);
    CU_ASSERT_DOUBLE_EQUAL(b, 999, 0);
    memset(&d, 0, sizeof d);
    d.twin = SIM_TWIN_VECTOR_ADD;
    sim_kernel_cost(&d, 4, 256, 0, 0, 1000, &f, &b);
    CU_ASSERT_DOUBLE_EQUAL(f, 1000, 0);
    CU_ASSERT_DOUBLE_EQUAL(b, 12000, 0);
    d.twin = SIM_TWIN_CHECKSUM;
    sim_kernel_cost(&d, 4, 256, 0, 0, 1000, &f, &b);
    CU_ASSERT_DOUBLE_EQUAL(b, 4008, 0);
    d.cost_given = 1; /* explicit flops/bytes win over the twin's own cost */
    d.flops = 5;
    sim_kernel_cost(&d, 4, 256, 0, 0, 1000, &f, &b);
    CU_ASSERT_DOUBLE_EQUAL(f, 5, 0);
}

static void test_twin_signatures(void)
{
    const struct sim_twin_sig *s = sim_twin_signature(SIM_TWIN_VECTOR_ADD);
    CU_ASSERT_EQUAL(s->nparams, 4);
    CU_ASSERT_EQUAL(s->size[3], 4);
    s = sim_twin_signature(SIM_TWIN_CHECKSUM);
    CU_ASSERT_EQUAL(s->nparams, 3);
    CU_ASSERT_EQUAL(s->size[2], 8);
    CU_ASSERT_PTR_NULL(sim_twin_signature(SIM_TWIN_NONE));
    CU_ASSERT_PTR_NULL(sim_twin_signature(99));
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("module_text", NULL, NULL);
    POS_ADD_TEST(s, test_parses_kernels_and_keys);
    POS_ADD_TEST(s, test_errors_name_the_line);
    POS_ADD_TEST(s, test_cost_of_one_launch);
    POS_ADD_TEST(s, test_twin_signatures);
}
