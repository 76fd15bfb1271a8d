/* Integration tests of posstat's views against a real posd with two clients (posapp under the
 * shim on the simulated driver): -d shows the device block only, -a the clients only, -p the
 * named processes only, -H puts epoch seconds in the time column, intervals end with an
 * Average: block, '#' lines carry names and units, -t redraws in place, -o json follows the
 * same views. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX 65536

static struct suite suite;
static pid_t apps[2] = {-1, -1};

static int suite_init(void)
{
    if (suite_open(&suite, "posstat", "") < 0 || suite_posd_start(&suite, "fifo") < 0 ||
        access(suite.sock, F_OK) != 0)
        return -1;
    apps[0] = util_posapp_until_killed("first", "resnet18");
    apps[1] = util_posapp_until_killed("second", "resnet18");
    for (int i = 0; i < 100; i++) { /* both registered */
        struct pos_device_stats dev;
        struct pos_client_stats cs[4];
        if (util_stats(suite.sock, &dev, cs, 4) == 2)
            return 0;
        usleep(50000);
    }
    return -1;
}

static int suite_clean(void)
{
    for (int i = 0; i < 2; i++)
        if (apps[i] > 0) {
            kill(apps[i], SIGKILL);
            waitpid(apps[i], NULL, 0);
        }
    util_posd_stop(&suite.posd, SIGTERM);
    return suite_close(&suite);
}

static int posstat(const char *args, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "build/posstat -s %s %s", suite.sock, args);
    return util_run(cmd, out, cap);
}

/* Data lines (not '#', not blank) of TEXT. */
static int data_lines(const char *text)
{
    int n = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        if (*p != '#' && *p != '\n')
            n++;
        if (!nl)
            break;
        p = nl + 1;
    }
    return n;
}

static void test_device_and_app_views(void)
{
    static char out[OUT_MAX];
    CU_ASSERT_EQUAL(posstat("-d", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "policy"));
    CU_ASSERT_PTR_NULL(strstr(out, "pid"));
    CU_ASSERT_EQUAL(data_lines(out), 2); /* the device and its GPU's NVML figures */
    CU_ASSERT_EQUAL(posstat("-a", out, sizeof out), 0);
    CU_ASSERT_PTR_NULL(strstr(out, "policy"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "pid"));
    CU_ASSERT_EQUAL(data_lines(out), 2);
    CU_ASSERT_EQUAL(posstat("", out, sizeof out), 0); /* both */
    CU_ASSERT_EQUAL(data_lines(out), 4);
    CU_ASSERT_EQUAL(posstat("-o json -d", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"device\":"));
    CU_ASSERT_PTR_NULL(strstr(out, "\"clients\":["));
    CU_ASSERT_EQUAL(posstat("-o json -a", out, sizeof out), 0);
    CU_ASSERT_PTR_NULL(strstr(out, "\"device\":"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"clients\":["));
}

/* The GPU line: '-' for every figure without NVML; NVML's figures when libnvidia-ml.so.1 is
 * there (a stand-in, tests/fakes/nvml.c, found through LD_LIBRARY_PATH). */
static void test_gpu_figures_from_nvml_or_dashes(void)
{
    static char out[OUT_MAX];
    CU_ASSERT_EQUAL(posstat("-d", out, sizeof out), 0);
    const char *gpu = strstr(out, "sm_clk\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(gpu);
    const char *line = strchr(strchr(gpu, '\n') + 1, '\n') + 1; /* after the units line */
    char time[16];
    double index = -1;
    char f[5][16];
    CU_ASSERT_EQUAL(sscanf(line, "%15s %lf %15s %15s %15s %15s %15s", time, &index, f[0], f[1],
                           f[2], f[3], f[4]),
                    7);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_STRING_EQUAL(f[i], "-");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH=build/tests/fakes build/posstat -s %s -d -o json",
             suite.sock);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"gpu\":{\"index\":0,\"util_pct\":42.000,"
                                       "\"mem_used_mib\":1536.000,\"mem_total_mib\":81920.000,"
                                       "\"power_w\":123.456,\"sm_clock_mhz\":1980.000}"));
    if (!strstr(out, "\"util_pct\":42.000"))
        fprintf(stderr, "\n  %s", out);
}

static void test_pid_filter_and_epoch_time(void)
{
    static char out[OUT_MAX];
    char args[64];
    snprintf(args, sizeof args, "-a -H -p %d", (int)apps[1]);
    CU_ASSERT_EQUAL(posstat(args, out, sizeof out), 0);
    CU_ASSERT_EQUAL(data_lines(out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, " second "));
    CU_ASSERT_PTR_NULL(strstr(out, " first "));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\n# s "));
    /* the data line starts with the epoch second of the reply */
    const char *line = strstr(out, " second ");
    while (line > out && line[-1] != '\n')
        line--;
    double t = strtod(line, NULL);
    CU_ASSERT(t > (double)time(NULL) - 5 && t <= (double)time(NULL) + 1);
    snprintf(args, sizeof args, "-p %d,%d -a", (int)apps[0], (int)apps[1]);
    CU_ASSERT_EQUAL(posstat(args, out, sizeof out), 0);
    CU_ASSERT_EQUAL(data_lines(out), 2);
    CU_ASSERT_EQUAL(posstat("-p 0", out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "bad -p '0'"));
}

static void test_intervals_average_and_live_redraw(void)
{
    static char out[OUT_MAX];
    CU_ASSERT_EQUAL(posstat("-a 0.2 2", out, sizeof out), 0);
    CU_ASSERT_EQUAL(util_count(out, "Average:"), 2); /* a line per client */
    CU_ASSERT_EQUAL(util_count(out, "# time"), 3);   /* two reports and the Average block */
    CU_ASSERT_EQUAL(util_count(out, "op/s"), 3);     /* each with its units line */
    /* held has no mean: '-' (the last column, or before telemetry's where posd runs it) */
    CU_ASSERT(strstr(out, "  -\n") != NULL || strstr(out, "  -  ") != NULL);
    CU_ASSERT_EQUAL(posstat("-t -d 0.2 3", out, sizeof out), 0);
    CU_ASSERT_EQUAL(util_count(out, "\033[H\033[2J"), 3);
    CU_ASSERT_EQUAL(util_count(out, "Average:"), 2); /* the device and the GPU lines */
    CU_ASSERT_EQUAL(posstat("-t -o prom", out, sizeof out), 2);
}

/* -k: the kernel profiles posd learnt of the two clients' kernels, most GPU time first, with
 * launch rates (since posd started, or over each interval), as text and JSON. */
static void test_kernel_profiles_view(void)
{
    static char out[OUT_MAX];
    CU_ASSERT_EQUAL(posstat("-k", out, sizeof out), 0);
    CU_ASSERT(data_lines(out) >= 10); /* resnet18 has 23 kernels */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "layer1.0.conv1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "launches"));
    CU_ASSERT_EQUAL(posstat("-k -o json", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"kernels\":[{\"name\":"));
    /* the first (most GPU time) is one of the running clients' kernels: it launches now
     * (profiles loaded from the state directory have no launches since posd started) */
    const char *rate = strstr(out, "\"launches_per_s\":");
    CU_ASSERT(rate && strtod(rate + strlen("\"launches_per_s\":"), NULL) > 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"mean_us\":"));
    CU_ASSERT_PTR_NULL(strstr(out, "\"samples\":0,\"mean_us\":1")); /* no mean without samples */
    CU_ASSERT_EQUAL(posstat("-k -o json 0.3 2", out, sizeof out), 0);
    CU_ASSERT_EQUAL(util_count(out, "\"uptime_s\""), 2);
    CU_ASSERT_EQUAL(posstat("-k -t", out, sizeof out), 2);
    CU_ASSERT_EQUAL(util_count(out, "\n"), 1);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("posstat", suite_init, suite_clean);
    POS_ADD_TEST(s, test_device_and_app_views);
    POS_ADD_TEST(s, test_gpu_figures_from_nvml_or_dashes);
    POS_ADD_TEST(s, test_pid_filter_and_epoch_time);
    POS_ADD_TEST(s, test_intervals_average_and_live_redraw);
    POS_ADD_TEST(s, test_kernel_profiles_view);
}
