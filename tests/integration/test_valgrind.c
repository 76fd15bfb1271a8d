/* A program on the simulated driver under valgrind (docs/sim.md, "Valgrind, gdb and other
 * tools beside posd's telemetry"). It runs beside other virtual GPUs of every state the
 * driver's start-up looks at (live, stale, locked by a stopped holder). What made such runs
 * die of SIGTRAP in cuInit was a posd with eBPF telemetry probing the same libcuda.so.1:
 * its uprobes write a breakpoint into the driver's code in every process that maps the file,
 * valgrind translates that breakpoint as the program's own and delivers SIGTRAP. A private
 * copy of the driver is another file, which no uprobe covers: the second test checks that it
 * runs beside a probing posd, and (where telemetry can run) that the probed file does die, so
 * the documented cause stays true. */
#include <cuda.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

int pos_sim_fault_stop_in_lock(void);

static struct suite suite;
static char neighbour[3][96]; /* instances: live, stale, locked */
static pid_t live = -1, holder = -1;

static int have_valgrind(void)
{
    return system("valgrind --version >/dev/null 2>&1") == 0;
}

static int suite_init(void)
{
    if (suite_open(&suite, "valgrind", "[daemon]\n") < 0)
        return -1;
    static const char *const what[] = {"live", "stale", "locked"};
    for (int i = 0; i < 3; i++)
        snprintf(neighbour[i], sizeof neighbour[i], "%s-%s", suite.instance, what[i]);
    return 0;
}

static int suite_clean(void)
{
    if (live > 0) {
        kill(live, SIGKILL);
        waitpid(live, NULL, 0);
    }
    if (holder > 0) {
        kill(holder, SIGKILL);
        kill(holder, SIGCONT);
        waitpid(holder, NULL, 0);
    }
    for (int i = 0; i < 3; i++) {
        char name[128];
        snprintf(name, sizeof name, "/pos-sim.%u.%.80s", (unsigned)getuid(), neighbour[i]);
        shm_unlink(name); /* the stale and the locked ones have no process to do it */
    }
    return suite_close(&suite);
}

/* A child of instance INST that attaches and then launches and synchronises until killed
 * (LIVE), is killed by SIGKILL once attached, leaving its segment with no process (STALE),
 * or stops itself inside the device lock (LOCKED). Returns its pid once it is in that state;
 * the stale one is reaped already (returns 0). */
static pid_t neighbour_start(const char *inst, int kind)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        setenv("POS_SIM_INSTANCE", inst, 1);
        CUcontext c;
        CUmodule m;
        CUfunction f;
        if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
            cuCtxSetCurrent(c) != CUDA_SUCCESS ||
            cuModuleLoadData(&m, ".pos_sim_module 1\n.kernel k flops=1e7\n") != CUDA_SUCCESS ||
            cuModuleGetFunction(&f, m, "k") != CUDA_SUCCESS)
            _exit(1);
        if (kind == 2) {
            if (write(fds[1], "k", 1) != 1)
                _exit(1);
            pos_sim_fault_stop_in_lock(); /* stops here, holding the lock */
            _exit(0);
        }
        if (write(fds[1], "k", 1) != 1)
            _exit(1);
        for (;;) {
            for (int i = 0; i < 4; i++)
                cuLaunchKernel(f, 8, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL);
            cuCtxSynchronize();
        }
    }
    if (util_child_ready(pid, fds) < 0)
        return -1;
    if (kind == 1) {
        usleep(50000); /* a few launches into its device */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 0;
    }
    if (kind == 2) {
        int st;
        if (waitpid(pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st))
            return -1;
    }
    return pid;
}

/* Runs posapp's microbenchmark under valgrind --tool=none with the driver of LIBDIR; returns
 * its wait status, its output (valgrind's lines and posapp's JSON) in OUT. */
static int run_under_valgrind(const char *libdir, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "LD_LIBRARY_PATH=%s timeout %d valgrind --tool=none -q build/posapp --microbench 100 "
             "2>&1",
             libdir, (int)(120 * util_time_scale()));
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    return pclose(p);
}

/* A private copy of the simulated driver in the suite's directory; its folder in DIR. */
static int driver_copy(char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/driver-copy", suite.dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp build/sim/libcuda.so.1 %s/", dir, dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_a_program_runs_under_valgrind_beside_live_stale_and_locked_gpus(void)
{
    if (!have_valgrind()) {
        fprintf(stderr, "%s: skipped: valgrind is not installed (scripts/deps.sh installs it)\n",
                __func__);
        return;
    }
    live = neighbour_start(neighbour[0], 0);
    CU_ASSERT_FATAL(live > 0);
    CU_ASSERT_FATAL(neighbour_start(neighbour[1], 1) == 0);
    holder = neighbour_start(neighbour[2], 2);
    CU_ASSERT_FATAL(holder > 0);
    static char out[16384];
    for (int round = 0; round < 3; round++) {
        int st = run_under_valgrind("build/sim", out, sizeof out);
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "\"launches\":100");
        CU_ASSERT(ok);
        if (!ok) {
            fprintf(stderr, "round %d: status 0x%x, output:\n%s\n", round, st, out);
            break;
        }
    }
    /* the stopped holder's device is left alone (a stopped process may continue) */
    char path[192];
    struct stat sb;
    snprintf(path, sizeof path, "/dev/shm/pos-sim.%u.%s", (unsigned)getuid(), neighbour[2]);
    CU_ASSERT_EQUAL(stat(path, &sb), 0);
}

/* posd with telemetry on build/sim/libcuda.so.1: the started posd, or -1 with WHY set when
 * telemetry cannot run here (no root, no eBPF in this build, a kernel that refuses). */
static pid_t probing_posd(char *why, size_t cap)
{
    char conf[4600], cwd[4096];
    if (!getcwd(cwd, sizeof cwd))
        return -1;
    snprintf(conf, sizeof conf, "[daemon]\ntelemetry = on\ntelemetry_driver = %s/build/sim/libcuda.so.1\n",
             cwd);
    FILE *f = fopen(suite.conf, "w");
    fputs(conf, f);
    fclose(f);
    if (truncate(suite.log, 0) < 0 && errno != ENOENT)
        return -1;
    if (suite_posd_start(&suite, "fifo") <= 0 || access(suite.sock, F_OK) != 0) {
        snprintf(why, cap, "posd did not start (log %s)", suite.log);
        return -1;
    }
    char log[8192];
    for (int i = 0; i < 100; i++) {
        util_read_file(suite.log, log, sizeof log);
        if (strstr(log, "telemetry on:"))
            return suite.posd;
        if (strstr(log, "telemetry off") || strstr(log, "no GPU process discovery"))
            break;
        usleep(20000);
    }
    const char *line = strstr(log, "telemetry");
    snprintf(why, cap, "posd runs without GPU process discovery here: %.*s",
             line ? (int)strcspn(line, "\n") : 0, line ? line : "");
    util_posd_stop(&suite.posd, SIGTERM);
    return -1;
}

static void test_a_private_driver_copy_runs_under_valgrind_beside_a_probing_posd(void)
{
    if (!have_valgrind()) {
        fprintf(stderr, "%s: skipped: valgrind is not installed (scripts/deps.sh installs it)\n",
                __func__);
        return;
    }
    char why[512], copy[256];
    if (probing_posd(why, sizeof why) < 0) {
        fprintf(stderr, "%s: skipped: %s\n", __func__, why);
        return;
    }
    CU_ASSERT_FATAL(driver_copy(copy, sizeof copy) == 0);
    static char out[16384];
    /* the cause: the probed file's cuInit traps under valgrind */
    int st = run_under_valgrind("build/sim", out, sizeof out);
    int trapped = strstr(out, "signal 5 (SIGTRAP)") && strstr(out, "cuInit");
    CU_ASSERT(trapped);
    if (!trapped)
        fprintf(stderr, "the probed driver under valgrind: status 0x%x, output:\n%s\n", st, out);
    /* the remedy: a copy of it is another file, probed by nobody */
    st = run_under_valgrind(copy, out, sizeof out);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "\"launches\":100");
    CU_ASSERT(ok);
    if (!ok)
        fprintf(stderr, "the private copy under valgrind: status 0x%x, output:\n%s\n", st, out);
    util_posd_stop(&suite.posd, SIGTERM);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("valgrind", suite_init, suite_clean);
    POS_ADD_TEST(s, test_a_program_runs_under_valgrind_beside_live_stale_and_locked_gpus);
    POS_ADD_TEST(s, test_a_private_driver_copy_runs_under_valgrind_beside_a_probing_posd);
}
