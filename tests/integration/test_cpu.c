/* The CPU lever ([policy] cpu; sched/cpu.c) against real processes: posd, the shim and posapp
 * on the simulated driver. A batch client's threads run at SCHED_IDLE (or cpu_nice) while a
 * latency client has requests under way and are put back after, the threads it made meanwhile
 * too; a thread is never set above what it had; a posd killed with SIGKILL leaves a record the
 * next posd restores from; a posd stopped by another signal restores them itself; a posd that
 * may not change a priority says so once per client and goes on. Changing other processes'
 * priorities back needs root (or CAP_SYS_NICE): as another user the tests say skipped and
 * why. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "pos/proto.h"
#include "tests/cunit_main.h"
#include "tests/integration/suite.h"

#ifndef SCHED_IDLE
#define SCHED_IDLE 5
#endif

static struct suite suite;
static double scale;
static char state_dir[200];

static int skipped(const char *test)
{
    if (geteuid() == 0)
        return 0;
    fprintf(stderr,
            "%s: skipped: putting another process's thread back from SCHED_IDLE needs "
            "root or CAP_SYS_NICE (running as uid %u)\n",
            test, (unsigned)geteuid());
    return 1;
}

static void write_conf(const char *policy_lines)
{
    FILE *f = fopen(suite.conf, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f,
            "[policy]\n%s\n"
            "[rule latency]\nmatch_app = latency*\nclass = latency\n"
            "[rule batch]\nmatch_app = batch*\nclass = batch\n",
            policy_lines);
    fclose(f);
}

static void posd_under(const char *policy, const char *policy_lines)
{
    write_conf(policy_lines);
    unlink(suite.sock);
    suite_posd_start(&suite, policy);
    CU_ASSERT_FATAL(suite.posd > 0 && access(suite.sock, F_OK) == 0);
}

static void posd_up(const char *policy_lines)
{
    posd_under("priority", policy_lines);
}

/* posapp under the shim as APP (a batch closed loop until killed when REQUESTS is 0, else a
 * latency client of REQUESTS Poisson requests at 200/s), at nice NICE. */
static pid_t client_start(const char *app, int requests, int nice)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        setpriority(PRIO_PROCESS, 0, nice);
        setenv("LD_PRELOAD", util_shim_preload(), 1);
        setenv("POS_APP", app, 1);
        char n[16];
        snprintf(n, sizeof n, "%d", requests ? requests : 1000000);
        if (requests)
            execl("build/posapp", "posapp", "--model", "resnet18", "--requests", n, "--arrival",
                  "poisson:200", (char *)NULL);
        else
            execl("build/posapp", "posapp", "--model", "resnet18", "--batch", "4", "--requests", n,
                  (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void client_stop(pid_t *pid)
{
    if (*pid <= 0)
        return;
    kill(*pid, SIGKILL);
    waitpid(*pid, NULL, 0);
    *pid = -1;
}

struct cpu_attr {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t prio;
    uint64_t runtime, deadline, period;
};

/* Whether every thread of PID runs as POLICY (and, for SCHED_OTHER, at NICE); 0 when PID has
 * no thread to look at. */
static int all_threads(pid_t pid, uint32_t policy, int nice)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0, ok = 1;
    for (struct dirent *e; (e = readdir(d));) {
        int tid = atoi(e->d_name);
        if (tid <= 0)
            continue;
        struct cpu_attr a = {0};
        if (syscall(SYS_sched_getattr, tid, &a, (unsigned)sizeof a, 0U) < 0)
            continue;
        n++;
        if (a.policy != policy || (policy == SCHED_OTHER && a.nice != nice))
            ok = 0;
    }
    closedir(d);
    return n > 0 && ok;
}

/* Whether thread TID of PID runs as POLICY. */
static int thread_is(pid_t pid, pid_t tid, uint32_t policy)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d", (int)pid, (int)tid);
    struct cpu_attr a = {0};
    return access(path, F_OK) == 0 &&
           syscall(SYS_sched_getattr, tid, &a, (unsigned)sizeof a, 0U) == 0 && a.policy == policy;
}

/* Waits up to SECONDS (scaled) for all_threads(PID, POLICY, NICE). */
static int wait_threads(pid_t pid, uint32_t policy, int nice, double seconds)
{
    double until = util_now() + seconds * scale;
    while (util_now() < until) {
        if (all_threads(pid, policy, nice))
            return 1;
        usleep(20000);
    }
    return all_threads(pid, policy, nice);
}

/* The STATS flags and lowered threads of the client of PID (-1 flags: not found). */
static uint32_t client_flags(pid_t pid, uint32_t *threads)
{
    static struct pos_client_stats cs[16];
    struct pos_device_stats dev;
    int n = util_stats(suite.sock, &dev, cs, 16);
    for (int i = 0; i < n && i < 16; i++)
        if (cs[i].pid == pid) {
            if (threads)
                *threads = cs[i].cpu_threads;
            return cs[i].flags;
        }
    return (uint32_t)-1;
}

/* ---- tests -------------------------------------------------------------------------------- */

/* While the latency client has requests under way, every thread of the batch client (its
 * CUDA and collector threads too) runs at SCHED_IDLE, and STATS says so; the latency client's
 * own threads are left alone; after its last request and cpu_hold, all are put back. */
static void test_outranked_threads_run_idle_while_a_request_is_under_way_and_come_back(void)
{
    if (skipped(__func__))
        return;
    posd_up("cpu = idle\ncpu_hold_ms = 100");
    pid_t batch = client_start("batch", 0, 0);
    usleep((useconds_t)(500000 * scale));
    CU_ASSERT(all_threads(batch, SCHED_OTHER, 0)); /* nobody outranks it yet */
    pid_t lat = client_start("latency", 500, 0);
    CU_ASSERT(wait_threads(batch, SCHED_IDLE, 0, 2));
    uint32_t threads = 0;
    uint32_t flags = client_flags(batch, &threads);
    CU_ASSERT(flags != (uint32_t)-1 && (flags & POS_CLIENT_CPU_IDLE));
    CU_ASSERT(threads >= 2); /* its launching thread and the shim's collector at least */
    char out[4096];
    util_run("build/posctl list", out, sizeof out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "cpu-idle"));
    CU_ASSERT(all_threads(lat, SCHED_OTHER, 0));
    int st = -1;
    waitpid(lat, &st, 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT(wait_threads(batch, SCHED_OTHER, 0, 2));
    flags = client_flags(batch, NULL);
    CU_ASSERT(flags != (uint32_t)-1 && !(flags & (POS_CLIENT_CPU_IDLE | POS_CLIENT_CPU_NICE)));
    client_stop(&batch);
    util_posd_stop(&suite.posd, SIGTERM);
}

/* A client that makes threads while it is lowered (a thread pool: tests/shim/prog_threads,
 * 48 workers at a time, each replaced as it ends; under fifo, which holds nobody, so that the
 * pool keeps turning over whatever the lever does): the new threads inherit SCHED_IDLE
 * from the lowered thread that made them; posd counts them as lowered, and when the latency
 * client leaves every thread comes back, before the workers made while lowered have ended. */
static void test_threads_made_while_lowered_come_back_too(void)
{
    if (skipped(__func__))
        return;
    posd_under("fifo", "cpu = idle\ncpu_hold_ms = 100");
    pid_t lat = client_start("latency", 100000, 0);
    usleep((useconds_t)(300000 * scale));
    const char *const argv[] = {"build/tests/shim_threads", "10000000", "48", "1500", NULL};
    pid_t pool = util_shim_start("/dev/null", "batch-pool", argv);
    CU_ASSERT_FATAL(pool > 0);
    usleep((useconds_t)(1500000 * scale)); /* workers are made and end meanwhile */
    CU_ASSERT(wait_threads(pool, SCHED_IDLE, 0, 2));
    client_stop(&lat);
    /* once its main thread is back, every thread is, in the same pass: a worker made since
     * posd last looked, still at SCHED_IDLE, would otherwise stay so until it ends */
    double until = util_now() + 2 * scale;
    while (util_now() < until && !thread_is(pool, pool, SCHED_OTHER))
        usleep(1000);
    CU_ASSERT(thread_is(pool, pool, SCHED_OTHER));
    CU_ASSERT(wait_threads(pool, SCHED_OTHER, 0, 0.02));
    client_stop(&pool);
    util_posd_stop(&suite.posd, SIGTERM);
}

/* cpu = nice with cpu_nice 10: a batch client started at nice 5 runs at 10 and comes back to
 * 5, not 0; one started at nice 15 is never touched (10 would raise it). */
static void test_a_thread_is_never_set_above_its_own_priority(void)
{
    if (skipped(__func__))
        return;
    posd_up("cpu = nice\ncpu_nice = 10\ncpu_hold_ms = 100");
    pid_t b5 = client_start("batch-5", 0, 5), b15 = client_start("batch-15", 0, 15);
    usleep((useconds_t)(500000 * scale));
    pid_t lat = client_start("latency", 500, 0);
    CU_ASSERT(wait_threads(b5, SCHED_OTHER, 10, 2));
    CU_ASSERT(all_threads(b15, SCHED_OTHER, 15));
    uint32_t threads = 99;
    client_flags(b15, &threads);
    CU_ASSERT_EQUAL(threads, 0);
    waitpid(lat, NULL, 0);
    CU_ASSERT(wait_threads(b5, SCHED_OTHER, 5, 2));
    CU_ASSERT(all_threads(b15, SCHED_OTHER, 15));
    client_stop(&b5);
    client_stop(&b15);
    util_posd_stop(&suite.posd, SIGTERM);
}

/* posd killed with SIGKILL while the batch client is lowered: the threads stay idle (the shim
 * runs on in passthrough), and the next posd, even with the lever off, puts them back at its
 * start from STATE_DIR/cpu-lowered, before any client registers. */
static void test_threads_a_killed_posd_left_lowered_are_restored_by_the_next(void)
{
    if (skipped(__func__))
        return;
    posd_up("cpu = idle");
    pid_t batch = client_start("batch", 0, 0);
    usleep((useconds_t)(300000 * scale));
    pid_t lat = client_start("latency", 100000, 0);
    CU_ASSERT(wait_threads(batch, SCHED_IDLE, 0, 2));
    util_posd_stop(&suite.posd, SIGKILL);
    usleep((useconds_t)(300000 * scale));
    CU_ASSERT(all_threads(batch, SCHED_IDLE, 0)); /* nobody put them back */
    client_stop(&lat);
    long from = suite_log_size(&suite);
    posd_up("cpu = off");
    CU_ASSERT(wait_threads(batch, SCHED_OTHER, 0, 1));
    static char text[16384];
    suite_log_from(&suite, from, text, sizeof text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "left lowered"));
    client_stop(&batch);
    util_posd_stop(&suite.posd, SIGTERM);
}

/* posd stopped by SIGTERM, and ended by a signal whose default action kills it (SIGUSR1):
 * either way it puts the lowered threads back before it goes. */
static void test_a_posd_ended_by_a_signal_restores_the_threads_it_lowered(void)
{
    if (skipped(__func__))
        return;
    const int sigs[] = {SIGTERM, SIGUSR1};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        posd_up("cpu = idle");
        pid_t batch = client_start("batch", 0, 0);
        usleep((useconds_t)(300000 * scale));
        pid_t lat = client_start("latency", 100000, 0); /* outranks it until posd is gone */
        CU_ASSERT(wait_threads(batch, SCHED_IDLE, 0, 2));
        util_posd_stop(&suite.posd, sigs[i]);
        client_stop(&lat);
        if (!all_threads(batch, SCHED_OTHER, 0))
            fprintf(stderr, "%s: signal %d left the threads lowered\n", __func__, sigs[i]);
        CU_ASSERT(all_threads(batch, SCHED_OTHER, 0));
        client_stop(&batch);
    }
}

/* A posd without CAP_SYS_NICE (setpriv) may not change the threads of a root client that has
 * capabilities posd lacks (the kernel's cap_safe_nice): it says so once for the client,
 * whatever the number of its threads and of the times it tries, and goes on scheduling; the
 * client's threads run at their own priority. */
static void test_a_posd_that_cannot_change_a_priority_says_so_once_per_client_and_goes_on(void)
{
    if (skipped(__func__))
        return;
    if (access("/usr/bin/setpriv", X_OK) != 0) {
        fprintf(stderr, "%s: skipped: needs /usr/bin/setpriv (util-linux)\n", __func__);
        return;
    }
    write_conf("cpu = idle\ncpu_hold_ms = 50");
    unlink(suite.sock);
    long from = suite_log_size(&suite);
    pid_t p = fork();
    if (p == 0) {
        int fd = open(suite.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 2);
        execl("/usr/bin/setpriv", "setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice",
              "build/posd", "-f", "-c", suite.conf, "-s", suite.sock, "-p", "priority",
              (char *)NULL);
        _exit(127);
    }
    suite.posd = p;
    for (int i = 0; i < (int)(200 * scale) && access(suite.sock, F_OK) != 0; i++)
        usleep(10000);
    CU_ASSERT_FATAL(access(suite.sock, F_OK) == 0);
    pid_t batch = client_start("batch", 0, 0);
    usleep((useconds_t)(300000 * scale));
    for (int round = 0; round < 2; round++) {
        pid_t lat = client_start("latency", 60, 0);
        int st = -1;
        waitpid(lat, &st, 0);
        CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0); /* scheduled all the same */
        usleep((useconds_t)(300000 * scale));
    }
    CU_ASSERT(client_flags(batch, NULL) != (uint32_t)-1); /* posd answers */
    static char text[65536];
    suite_log_from(&suite, from, text, sizeof text);
    CU_ASSERT_EQUAL(util_count(text, "cpu lever: client"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "Operation not permitted"));
    CU_ASSERT(all_threads(batch, SCHED_OTHER, 0));
    client_stop(&batch);
    util_posd_stop(&suite.posd, SIGTERM);
}

static int suite_init(void)
{
    scale = util_time_scale();
    if (suite_open(&suite, "cpu", NULL) < 0 || access("build/posd", X_OK) != 0)
        return -1;
    snprintf(state_dir, sizeof state_dir, "%s/state", suite.dir);
    setenv("POSD_STATE_DIR", state_dir, 1); /* every posd of the suite: one state directory */
    return 0;
}

static int suite_clean(void)
{
    return suite_close(&suite);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("cpu", suite_init, suite_clean);
    POS_ADD_TEST(s, test_outranked_threads_run_idle_while_a_request_is_under_way_and_come_back);
    POS_ADD_TEST(s, test_threads_made_while_lowered_come_back_too);
    POS_ADD_TEST(s, test_a_thread_is_never_set_above_its_own_priority);
    POS_ADD_TEST(s, test_threads_a_killed_posd_left_lowered_are_restored_by_the_next);
    POS_ADD_TEST(s, test_a_posd_ended_by_a_signal_restores_the_threads_it_lowered);
    POS_ADD_TEST(s, test_a_posd_that_cannot_change_a_priority_says_so_once_per_client_and_goes_on);
}
