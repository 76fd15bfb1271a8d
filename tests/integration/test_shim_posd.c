/* Integration tests of the shim's side of posd over a process's life: children forked
 * before CUDA is initialised register as clients of their own (and one forked after it does
 * not), and a client that outlives several posd restarts keeps a bounded number of session
 * mappings. Real processes (posd, the shim, posapp and tests/shim programs on the simulated
 * driver), in a temporary directory (POS_SOCKET). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX 16384

static struct suite suite;

static void posd_start(void)
{
    CU_ASSERT_FATAL(suite_posd_start(&suite, "priority") > 0);
    CU_ASSERT_EQUAL(access(suite.sock, F_OK), 0);
}

static void posd_stop(int sig)
{
    util_posd_stop(&suite.posd, sig);
}

/* Starts ARGV under the shim as app APP, its stdout in OUT_PATH. */
static pid_t start(const char *app, const char *out_path, const char *const *argv)
{
    pid_t pid = util_shim_start(out_path, app, argv);
    CU_ASSERT_FATAL(pid >= 0);
    return pid;
}

static int finish(pid_t pid, int timeout_s)
{
    int st;
    for (int i = 0; i < timeout_s * 100; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return 128 + SIGKILL;
}

/* Clients posd has now (posstat), -1 if it does not answer. */
static long long clients(void)
{
    char cmd[512], out[OUT_MAX];
    snprintf(cmd, sizeof cmd, "build/posstat -s %s -o json", suite.sock);
    return util_run(cmd, out, sizeof out) == 0 ? util_number(out, "clients") : -1;
}

static int suite_init(void)
{
    return suite_open(&suite, "shim-posd", "") == 0 && access("build/posd", X_OK) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    return suite_close(&suite); /* its virtual GPU's segment too: its last client was killed */
}

/* Two children forked before cuInit each register when they initialise CUDA (as workers of
 * Python's multiprocessing with the fork start method); the parent registers when it does;
 * a child forked after the parent's cuInit is refused by the driver and does not register. */
static void test_children_forked_before_cuinit_register(void)
{
    char log[OUT_MAX * 4], out[OUT_MAX], out_path[192];
    util_read_file(suite.log, log, sizeof log);
    size_t before = strlen(log);
    posd_start();
    snprintf(out_path, sizeof out_path, "%s/prefork.out", suite.dir);
    const char *const argv[] = {"build/tests/shim_prefork", "2", "200", NULL};
    int rc = finish(start("prefork", out_path, argv), 60);
    CU_ASSERT_EQUAL(rc, 0);
    util_read_file(out_path, out, sizeof out);
    CU_ASSERT_EQUAL(util_number(out, "launches"), 200);
    posd_stop(SIGTERM);
    util_read_file(suite.log, log, sizeof log);
    int registered = util_count(log + before, "app 'prefork'");
    CU_ASSERT_EQUAL(registered, 3);
    if (registered != 3)
        fprintf(stderr, "prefork: %d registrations (want 3)\nposd log:\n%s\n", registered,
                log + before);
}

/* Lines of /proc/PID/maps that map posd's client memory (a memfd named pos-client). */
static int session_mappings(pid_t pid)
{
    static char maps[1 << 20];
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    if (util_read_file(path, maps, sizeof maps) < 0)
        return -1;
    return util_count(maps, "/memfd:pos-client");
}

/* A client that outlives five posd restarts re-attaches each time and releases the memory of
 * the sessions before: it keeps at most two mappings (the current one and one being let go),
 * not one per restart. */
static void test_posd_restarts_do_not_pile_up_mappings(void)
{
    char out_path[192];
    snprintf(out_path, sizeof out_path, "%s/survivor.out", suite.dir);
    const char *const argv[] = {"build/posapp", "--model", "resnet18", "--requests", "1000000",
                                NULL};
    posd_start();
    pid_t pid = start("survivor", out_path, argv);
    long long n = 0;
    for (int i = 0; i < 200 && (n = clients()) != 1; i++)
        usleep(20000);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    int most = 0;
    for (int r = 0; r < 5; r++) {
        posd_stop(SIGKILL);
        usleep(200000); /* its io_uring lets go of the listening socket a little later */
        posd_start();
        for (int i = 0; i < 200 && (n = clients()) != 1; i++)
            usleep(20000);
        CU_ASSERT_EQUAL(n, 1); /* re-attached */
        if (n != 1)
            fprintf(stderr, "restart %d: posd has %lld clients\n", r, n);
        usleep(100000);        /* some launches in the new session */
        int m = session_mappings(pid);
        if (m > most)
            most = m;
    }
    CU_ASSERT(most >= 1 && most <= 2);
    if (most < 1 || most > 2)
        fprintf(stderr, "client kept %d posd mappings after 5 restarts\n", most);
    kill(pid, SIGKILL);
    finish(pid, 10);
    posd_stop(SIGTERM);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("shim_posd", suite_init, suite_clean);
    POS_ADD_TEST(s, test_children_forked_before_cuinit_register);
    POS_ADD_TEST(s, test_posd_restarts_do_not_pile_up_mappings);
}
