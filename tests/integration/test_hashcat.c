/* A real third-party program on the simulated driver: Debian's hashcat loads libcuda.so.1 with
 * dlopen and resolves about 70 driver entry points by dlsym before it lists its devices
 * (`hashcat -I`). It must list the simulated device on the simulated driver alone, and under
 * the shim with a posd of the test's own, where the shim sees the context hashcat creates and
 * posd registers hashcat as a client. Skipped where hashcat is not installed (make
 * deps-hashcat installs it). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/util.h"

#define OUT_MAX (64 * 1024)

static char dir[128], sock_path[192], conf_path[192], log_path[192], instance[96];
static char hashcat[PATH_MAX], sim_dir[PATH_MAX], shim_path[PATH_MAX];

/* hashcat's path from PATH, or "" */
static void find_hashcat(void)
{
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(hashcat, sizeof hashcat, "%s/hashcat", d);
        if (access(hashcat, X_OK) == 0)
            return;
    }
    hashcat[0] = '\0';
}

static int skipped(void)
{
    if (hashcat[0])
        return 0;
    fprintf(stderr, "\n  hashcat is not installed (make deps-hashcat installs it): skipped\n");
    return 1;
}

/* Runs `hashcat -I` in the test's directory (its HOME, where it keeps its session files) with
 * the simulated driver, and PRELOAD if not NULL; its stdout and stderr go to OUT. Returns its
 * exit status, or -1 if it had to be killed after 60 s. */
static int run_hashcat(const char *preload, char *out, size_t cap)
{
    char out_path[256];
    snprintf(out_path, sizeof out_path, "%s/hashcat.out", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        if (chdir(dir) != 0)
            _exit(126);
        setenv("HOME", dir, 1);
        setenv("LD_LIBRARY_PATH", sim_dir, 1);
        if (preload)
            setenv("LD_PRELOAD", preload, 1);
        /* under AddressSanitizer's runtime LeakSanitizer would judge hashcat's own memory at
         * its exit (it leaks by design); the simulated driver's leaks are test_testbed's */
        setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
        execl(hashcat, "hashcat", "-I", "--backend-ignore-opencl", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    for (int i = 0; i < 6000; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            break;
        if (i == 5999) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            st = -1;
        }
        usleep(10000);
    }
    util_read_file(out_path, out, cap);
    return st < 0 ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

/* The rtx3080 preset, so the listing's SM count (68) can only come from the simulated
 * device's attributes. */
static void assert_lists_simulated_device(const char *out)
{
    CU_ASSERT_PTR_NULL(strstr(out, "is missing from CUDA shared library"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "CUDA Info"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "CUDA.Version.: 13.0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "RTX 3080"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "(pos-sim)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "Processor(s)...: 68"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "Memory.Total...: 10240 MB"));
}

static int suite_init(void)
{
    find_hashcat();
    snprintf(dir, sizeof dir, "/tmp/pos-test-hashcat-%d", (int)getpid());
    mkdir(dir, 0700);
    snprintf(sock_path, sizeof sock_path, "%s/posd.sock", dir);
    snprintf(conf_path, sizeof conf_path, "%s/posd.conf", dir);
    snprintf(log_path, sizeof log_path, "%s/posd.log", dir);
    snprintf(instance, sizeof instance, "test-hashcat-%d", (int)getpid());
    FILE *f = fopen(conf_path, "w");
    if (!f)
        return -1;
    fclose(f);
    if (!realpath("build/sim", sim_dir) || !realpath("build/libposshim.so", shim_path))
        return -1;
    setenv("POS_SIM_INSTANCE", instance, 1);
    setenv("POS_SIM_DEVICE", "rtx3080", 1);
    return 0;
}

static int suite_clean(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_hashcat_lists_the_simulated_device(void)
{
    if (skipped())
        return;
    static char out[OUT_MAX];
    /* in a sanitized build the simulated driver needs its sanitizer's runtime, which the
     * uninstrumented hashcat does not load: it comes first, as under the shim */
    const char *rt = getenv("POS_TEST_SAN_RUNTIME");
    int rc = run_hashcat(rt && *rt ? rt : NULL, out, sizeof out);
    CU_ASSERT_EQUAL(rc, 0);
    assert_lists_simulated_device(out);
    if (rc != 0 || !strstr(out, "(pos-sim)"))
        fprintf(stderr, "hashcat -I (exit %d):\n%s\n", rc, out);
}

/* Under the shim with posd: the same listing, the shim attached to posd from hashcat's cuInit
 * and saw the context hashcat created through dlsym'd cuCtxCreate_v2, posd registered it. */
static void test_hashcat_under_the_shim_with_posd(void)
{
    if (skipped())
        return;
    pid_t posd = util_posd_start(conf_path, sock_path, log_path, "fifo");
    CU_ASSERT_FATAL(posd > 0 && access(sock_path, F_OK) == 0);
    setenv("POS_SOCKET", sock_path, 1);
    setenv("POS_DEBUG", "1", 1);
    static char out[OUT_MAX], log[OUT_MAX];
    char preload[PATH_MAX + 64];
    const char *rt = getenv("POS_TEST_SAN_RUNTIME");
    snprintf(preload, sizeof preload, "%s%s%s", rt && *rt ? rt : "", rt && *rt ? ":" : "",
             shim_path);
    int rc = run_hashcat(preload, out, sizeof out);
    unsetenv("POS_DEBUG");
    unsetenv("POS_SOCKET");
    util_posd_stop(&posd, SIGTERM);
    util_read_file(log_path, log, sizeof log);
    CU_ASSERT_EQUAL(rc, 0);
    assert_lists_simulated_device(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "attached to posd at"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "cuCtxCreate_v2 created context 0x"));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "app 'hashcat'"));
    if (rc != 0 || !strstr(out, "created context") || !strstr(log, "app 'hashcat'"))
        fprintf(stderr, "hashcat -I under the shim (exit %d):\n%s\nposd log:\n%s\n", rc, out, log);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("hashcat", suite_init, suite_clean);
    POS_ADD_TEST(s, test_hashcat_lists_the_simulated_device);
    POS_ADD_TEST(s, test_hashcat_under_the_shim_with_posd);
}
