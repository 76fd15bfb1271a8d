/* A process stopped inside the simulated GPU's device lock (docs/sim.md, "A process stopped
 * inside the device lock"): the others wait until it continues, and a waiter names it on
 * stderr after a second; once it continues, everyone goes on; killed while stopped, the next
 * locker repairs the device. And a segment whose processes were all killed (none left to
 * unlink it) is reused afresh by the next start of its instance, or unlinked by the next
 * start of any other. A child stops itself holding the lock through the driver's
 * fault-injection entry point, so the case is hit every time rather than in 3% of random
 * stops (bench/simstop.sh measures how often). */
#include <cuda.h>
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

int pos_sim_fault_stop_in_lock(void);
CUresult pos_sim_mem_used(CUdevice, unsigned long long *, unsigned long long *);

static struct suite suite; /* no posd: the simulated driver alone */

static int suite_init(void)
{
    return suite_open(&suite, "sim-stop", NULL);
}

static int suite_clean(void)
{
    return suite_close(&suite);
}

/* A child that initialises the driver and stops itself holding the device lock; returns
 * once it is stopped. */
static pid_t start_holder(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (cuInit(0) != CUDA_SUCCESS || pos_sim_fault_stop_in_lock() != 0)
            _exit(1);
        exit(0); /* the driver leaves the device at exit */
    }
    int st;
    if (waitpid(pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st)) {
        fprintf(stderr, "holder did not stop\n");
        return -1;
    }
    return pid;
}

/* A child that needs the lock (cuInit attaches to the device under it) and then launches and
 * synchronises; its stderr goes to ERR_PATH. */
static pid_t start_waiter(const char *err_path)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        CUcontext c;
        CUmodule m;
        CUfunction f;
        if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
            cuCtxSetCurrent(c) != CUDA_SUCCESS ||
            cuModuleLoadData(&m, ".pos_sim_module 1\n.kernel k flops=1e6\n") != CUDA_SUCCESS ||
            cuModuleGetFunction(&f, m, "k") != CUDA_SUCCESS ||
            cuLaunchKernel(f, 8, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS ||
            cuCtxSynchronize() != CUDA_SUCCESS)
            _exit(1);
        exit(0);
    }
    return pid;
}

/* Exit status of PID within MS milliseconds, -1 if it is still running (it is then left). */
static int exited_within(pid_t pid, int ms)
{
    for (int i = 0; i <= ms / 10; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    return -1;
}

static void test_a_stopped_lock_holder_stalls_the_device_and_is_named(void)
{
    char err_path[192], err[4096], want[64];
    snprintf(err_path, sizeof err_path, "%s/waiter.err", suite.dir);
    pid_t holder = start_holder();
    CU_ASSERT_FATAL(holder > 0);
    pid_t waiter = start_waiter(err_path);
    /* the documented limit: nothing moves while the holder is stopped */
    CU_ASSERT_EQUAL(exited_within(waiter, 1500), -1);
    util_read_file(err_path, err, sizeof err);
    snprintf(want, sizeof want, "held by pid %d", (int)holder);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "stopped (SIGSTOP, Ctrl-Z)"));
    snprintf(want, sizeof want, "kill -CONT %d", (int)holder);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    if (!strstr(err, "held by pid"))
        fprintf(stderr, "waiter's stderr:\n%s\n", err);
    /* once it continues, both go on */
    kill(holder, SIGCONT);
    CU_ASSERT_EQUAL(exited_within(waiter, 10000), 0);
    CU_ASSERT_EQUAL(exited_within(holder, 10000), 0);
    util_read_file(err_path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is free again after"));
    kill(waiter, SIGKILL);
    kill(holder, SIGKILL);
    waitpid(waiter, NULL, WNOHANG);
    waitpid(holder, NULL, WNOHANG);
}

/* POS_SIM_STATS counts what a process waited for the device lock: a process held 1.2 s behind
 * a stopped holder writes, at its exit, a contended acquisition by its application's threads
 * that waited about that long. */
static void test_lock_stats_count_a_wait(void)
{
    char err_path[192], pattern[200], path[220], text[4096];
    snprintf(err_path, sizeof err_path, "%s/waiter3.err", suite.dir);
    snprintf(pattern, sizeof pattern, "%s/stats.%%p", suite.dir);
    pid_t holder = start_holder();
    CU_ASSERT_FATAL(holder > 0);
    setenv("POS_SIM_STATS", pattern, 1);
    pid_t waiter = start_waiter(err_path);
    unsetenv("POS_SIM_STATS");
    usleep(1200000);
    kill(holder, SIGCONT);
    CU_ASSERT_EQUAL(exited_within(waiter, 10000), 0);
    CU_ASSERT_EQUAL(exited_within(holder, 10000), 0);
    snprintf(path, sizeof path, "%s/stats.%d", suite.dir, (int)waiter);
    CU_ASSERT_EQUAL_FATAL(util_read_file(path, text, sizeof text), 0);
    const char *app = strstr(text, "\"app\":");
    CU_ASSERT_PTR_NOT_NULL_FATAL(app);
    long long contended = util_number(app, "contended");
    long long wait_max = util_number(app, "wait_max_ns");
    CU_ASSERT(contended >= 1);
    CU_ASSERT(wait_max >= 1000000000LL && wait_max < 60000000000LL);
    if (contended < 1 || wait_max < 1000000000LL)
        fprintf(stderr, "the waiter's figures: %s\n", text);
    kill(waiter, SIGKILL);
    kill(holder, SIGKILL);
    waitpid(waiter, NULL, WNOHANG);
    waitpid(holder, NULL, WNOHANG);
}

static void test_a_holder_killed_while_stopped_is_repaired(void)
{
    char err_path[192];
    snprintf(err_path, sizeof err_path, "%s/waiter2.err", suite.dir);
    pid_t holder = start_holder();
    CU_ASSERT_FATAL(holder > 0);
    pid_t waiter = start_waiter(err_path);
    usleep(200000);
    kill(holder, SIGKILL);
    int st;
    waitpid(holder, &st, 0);
    int rc = exited_within(waiter, 10000);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc != 0) {
        char err[4096];
        util_read_file(err_path, err, sizeof err);
        fprintf(stderr, "waiter: status %d, its stderr:\n%s\n", rc, err);
    }
    kill(waiter, SIGKILL);
    waitpid(waiter, NULL, WNOHANG);
}

/* The segment of instance INST of this uid exists. */
static int segment_exists(const char *inst)
{
    char path[192];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm/pos-sim.%u.%s", (unsigned)getuid(), inst);
    return stat(path, &st) == 0;
}

/* A child attached to instance INST with 1 MiB allocated, waiting (pause) once it is;
 * returns once it is attached. */
static pid_t start_attached(const char *inst)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("POS_SIM_INSTANCE", inst, 1);
        CUcontext c;
        CUdeviceptr p;
        if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
            cuCtxSetCurrent(c) != CUDA_SUCCESS || cuMemAlloc(&p, 1 << 20) != CUDA_SUCCESS)
            _exit(1);
        if (write(fds[1], "k", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    if (util_child_ready(pid, fds) < 0)
        return -1;
    return pid;
}

/* A process of instance INST that attaches, finds no memory held but its own, and exits:
 * its exit status (0 when the device was clean). */
static int run_fresh(const char *inst)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("POS_SIM_INSTANCE", inst, 1);
        CUcontext c;
        unsigned long long all, mine;
        if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
            cuCtxSetCurrent(c) != CUDA_SUCCESS || pos_sim_mem_used(0, &all, &mine) != CUDA_SUCCESS)
            _exit(1);
        exit(all == mine ? 0 : 2); /* its own context's memory is all the device holds */
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Kills PID with SIGKILL (after SIGSTOP when STOP_FIRST) and reaps it. */
static void kill_hard(pid_t pid, int stop_first)
{
    if (stop_first) {
        int st;
        kill(pid, SIGSTOP);
        waitpid(pid, &st, WUNTRACED);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void test_a_killed_only_process_leaves_a_segment_the_next_start_reuses_clean(void)
{
    char inst[96];
    for (int stop_first = 0; stop_first <= 1; stop_first++) {
        snprintf(inst, sizeof inst, "test-sim-reuse-%d-%d", (int)getpid(), stop_first);
        pid_t a = start_attached(inst);
        CU_ASSERT_FATAL(a > 0);
        kill_hard(a, stop_first);
        CU_ASSERT(segment_exists(inst)); /* nobody was left to unlink it */
        /* the next process of the instance finds none of the dead one's memory, and as its
         * last process unlinks the segment at exit */
        CU_ASSERT_EQUAL(run_fresh(inst), 0);
        CU_ASSERT(!segment_exists(inst));
    }
}

static void test_a_killed_instance_segment_is_unlinked_by_the_next_start_of_another(void)
{
    char dead_inst[96], live_inst[96], other[96];
    snprintf(dead_inst, sizeof dead_inst, "test-sim-dead-%d", (int)getpid());
    snprintf(live_inst, sizeof live_inst, "test-sim-live-%d", (int)getpid());
    snprintf(other, sizeof other, "test-sim-other-%d", (int)getpid());
    pid_t dead = start_attached(dead_inst);
    CU_ASSERT_FATAL(dead > 0);
    pid_t live = start_attached(live_inst);
    CU_ASSERT_FATAL(live > 0);
    kill_hard(dead, 1);
    CU_ASSERT(segment_exists(dead_inst));
    /* any process of this uid that starts reclaims the dead instance, not the live one */
    CU_ASSERT_EQUAL(run_fresh(other), 0);
    CU_ASSERT(!segment_exists(dead_inst));
    CU_ASSERT(segment_exists(live_inst));
    CU_ASSERT(!segment_exists(other));
    /* the live one killed too: the next start reclaims it as well */
    kill_hard(live, 0);
    CU_ASSERT_EQUAL(run_fresh(other), 0);
    CU_ASSERT(!segment_exists(live_inst));
}

/* A creator slow to initialise its segment (starved, or at SCHED_IDLE: here 3 s between creating
 * it and marking it ready, by the driver's fault injection) is waited for, not taken for dead
 * and replaced: a process that starts meanwhile joins the same virtual GPU, so the segment
 * under the instance's name is still the creator's after that process has come and gone. */
static void test_a_slow_creator_is_waited_for_not_replaced(void)
{
    char inst[96], path[192];
    snprintf(inst, sizeof inst, "%s-slow", suite.instance);
    snprintf(path, sizeof path, "/dev/shm/pos-sim.%u.%s", (unsigned)getuid(), inst);
    util_sim_segment_remove(inst);
    fflush(NULL);
    pid_t creator = fork();
    if (creator == 0) {
        setenv("POS_SIM_INSTANCE", inst, 1);
        setenv("POS_SIM_FAULT_SLOW_CREATE_MS", "3000", 1);
        if (cuInit(0) != CUDA_SUCCESS)
            _exit(1);
        for (;;)
            pause();
    }
    struct stat first;
    int seen = 0;
    for (int i = 0; i < 200 && !seen; i++) {
        seen = stat(path, &first) == 0;
        usleep(10000);
    }
    CU_ASSERT_FATAL(seen);
    int rc = run_fresh(inst); /* attaches (after the creator is done), finds it, leaves */
    CU_ASSERT_EQUAL(rc, 0);
    struct stat now;
    CU_ASSERT_EQUAL(stat(path, &now), 0);
    CU_ASSERT(now.st_ino == first.st_ino); /* the creator's segment, not a replacement */
    kill(creator, SIGKILL);
    waitpid(creator, NULL, 0);
    util_sim_segment_remove(inst);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("sim_stop", suite_init, suite_clean);
    POS_ADD_TEST(s, test_a_stopped_lock_holder_stalls_the_device_and_is_named);
    POS_ADD_TEST(s, test_a_holder_killed_while_stopped_is_repaired);
    POS_ADD_TEST(s, test_lock_stats_count_a_wait);
    POS_ADD_TEST(s, test_a_killed_only_process_leaves_a_segment_the_next_start_reuses_clean);
    POS_ADD_TEST(s, test_a_killed_instance_segment_is_unlinked_by_the_next_start_of_another);
    POS_ADD_TEST(s, test_a_slow_creator_is_waited_for_not_replaced);
}
