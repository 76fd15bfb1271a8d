/* Tests the device parameters (sim/device_presets.c): the built-in presets, device files
 * (libinih) with errors that name file:line, and the POS_SIM_* environment. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/device_presets.h"
#include "tests/cunit_main.h"

static void test_presets_are_valid_and_distinct(void)
{
    char err[256];
    int n = 0;
    for (const char *const *name = sim_preset_names; *name; name++, n++) {
        struct sim_dev_params p;
        CU_ASSERT_EQUAL_FATAL(sim_preset_get(*name, &p), 0);
        CU_ASSERT_STRING_EQUAL(p.preset, *name);
        CU_ASSERT_EQUAL(sim_params_validate(&p, err, sizeof err), 0);
        CU_ASSERT(p.fp16_flops > p.fp32_flops);
        CU_ASSERT_EQUAL(p.timeslice_us, 2000.0);
        CU_ASSERT_EQUAL(p.mode, SIM_MODE_TIMESLICE);
    }
    CU_ASSERT_EQUAL(n, 4);
    struct sim_dev_params h;
    CU_ASSERT_EQUAL(sim_preset_get("h200", &h), 0);
    CU_ASSERT_EQUAL(h.num_sms, 132);
    CU_ASSERT_DOUBLE_EQUAL(h.dram_bw, 4.8e12, 1);
    CU_ASSERT_EQUAL(sim_preset_get("gtx480", &h), -ENOENT);
}

static const char *write_tmp(const char *text)
{
    static char path[64];
    strcpy(path, "/tmp/pos-sim-dev-XXXXXX");
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void test_device_file(void)
{
    char err[256] = "";
    struct sim_dev_params p;
    const char *path = write_tmp("# my board\n[device]\nbase = orin-agx\nnum_sms = 8\n"
                                 "name = Half Orin\nmode = mps\nfp32_flops = 2.66e12\n");
    CU_ASSERT_EQUAL(sim_params_load_file(path, &p, err, sizeof err), 0);
    CU_ASSERT_EQUAL(p.num_sms, 8);
    CU_ASSERT_STRING_EQUAL(p.name, "Half Orin");
    CU_ASSERT_STRING_EQUAL(p.preset, "file");
    CU_ASSERT_EQUAL(p.mode, SIM_MODE_MPS);
    CU_ASSERT_EQUAL(p.max_threads_per_sm, 1536); /* from the base */
    unlink(path);
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"num_sms = 8\nbogus = 1\n", ":2: unknown key 'bogus'"},
        {"num_sms = eight\n", ":1: bad value 'eight' for num_sms"},
        {"[gpu]\nnum_sms = 8\n", ":2: unknown section [gpu] (use [device] or none)"},
        {"num_sms = 8\nbase = h200\n", ":2: 'base' must come before any other key"},
        {"base = tpu\n", ":1: unknown base preset 'tpu' (xavier-nx, orin-agx, rtx3080, h200)"},
        {"num_sms = 999\n", ": num_sms must be 1..160"},
        {"mode = fast\n", ":1: bad value 'fast' for mode"},
        {"this is not ini\n", ":1: syntax error"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path = write_tmp(bad[i].text);
        CU_ASSERT_EQUAL(sim_params_load_file(path, &p, err, sizeof err), -EINVAL);
        CU_ASSERT_EQUAL(strncmp(err, path, strlen(path)), 0);
        CU_ASSERT_STRING_EQUAL(err + strlen(path), bad[i].msg);
        unlink(path);
    }
    CU_ASSERT_EQUAL(sim_params_load_file("/nonexistent/dev.ini", &p, err, sizeof err), -ENOENT);
}

static void test_environment(void)
{
    char err[256] = "";
    struct sim_dev_params p;
    unsetenv("POS_SIM_DEVICE");
    unsetenv("POS_SIM_MODE");
    unsetenv("POS_SIM_SCALE");
    unsetenv("POS_SIM_TIMESLICE_US");
    CU_ASSERT_EQUAL(sim_params_from_env(&p, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(p.preset, "xavier-nx");
    setenv("POS_SIM_DEVICE", "rtx3080", 1);
    setenv("POS_SIM_MODE", "mps", 1);
    setenv("POS_SIM_SCALE", "10", 1);
    setenv("POS_SIM_TIMESLICE_US", "500", 1);
    CU_ASSERT_EQUAL(sim_params_from_env(&p, err, sizeof err), 0);
    CU_ASSERT_EQUAL(p.num_sms, 68);
    CU_ASSERT_EQUAL(p.mode, SIM_MODE_MPS);
    CU_ASSERT_EQUAL(p.scale, 10.0);
    CU_ASSERT_EQUAL(p.timeslice_us, 500.0);
    setenv("POS_SIM_MODE", "exclusive", 1);
    CU_ASSERT_EQUAL(sim_params_from_env(&p, err, sizeof err), -EINVAL);
    CU_ASSERT_STRING_EQUAL(err, "POS_SIM_MODE='exclusive' must be timeslice or mps");
    setenv("POS_SIM_MODE", "mps", 1);
    setenv("POS_SIM_SCALE", "0", 1);
    CU_ASSERT_EQUAL(sim_params_from_env(&p, err, sizeof err), -EINVAL);
    CU_ASSERT_STRING_EQUAL(err, "scale must be 0.01..10000");
    unsetenv("POS_SIM_SCALE");
    setenv("POS_SIM_DEVICE", "voodoo2", 1);
    CU_ASSERT_EQUAL(sim_params_from_env(&p, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "POS_SIM_DEVICE='voodoo2'"));
    unsetenv("POS_SIM_DEVICE");
    unsetenv("POS_SIM_MODE");
    unsetenv("POS_SIM_TIMESLICE_US");
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("device_presets", NULL, NULL);
    POS_ADD_TEST(s, test_presets_are_valid_and_distinct);
    POS_ADD_TEST(s, test_device_file);
    POS_ADD_TEST(s, test_environment);
}
