/* One process of a virtual GPU that the host does not run (stopped with SIGSTOP, even in the
 * middle of a driver call) delays only its own work, as on a real GPU: every other process of
 * the same virtual GPU keeps attaching, launching, completing and synchronising, and its
 * results stay right (issue 18). The tests know the driver only through the CUDA API and its
 * documented fault-injection entry point, so they judge any driver that keeps that contract.
 *
 * A process that the host runs last (SCHED_IDLE beside busy loops) delays no other either, even
 * when the host takes the CPU from it inside the device lock: the lock lends it the device
 * process's real-time priority while that waits (priority inheritance). Its launches' share
 * of a normal client's progress is measured by bench/simisolation.sh.
 *
 * The clients count their completed loops in shared memory: a loop copies two vectors in,
 * launches four 100 us (device time) kernels and the built-in vector_add twin, waits
 * (cuCtxSynchronize, or by polling cuStreamQuery as a spin-waiting runtime does, which keeps
 * the process inside driver calls most of the time), copies the sum out and checks it. */
#include <cuda.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

int pos_sim_fault_stop_in_launch(void);

#define MAX_CLIENTS 8
#define VEC_N       1024

static struct suite suite; /* no posd: the simulated driver alone */

/* What the clients tell the test, in memory shared across fork. */
struct board {
    _Atomic int quit;
    _Atomic int ready[MAX_CLIENTS]; /* set up */
    _Atomic unsigned long long loops[MAX_CLIENTS];
    _Atomic unsigned long long wrong[MAX_CLIENTS]; /* loops whose sum was not a + b */
    _Atomic long long gap_max_ns[MAX_CLIENTS];     /* the longest time between two loops' ends */
    _Atomic unsigned long long lock_rounds;        /* the locker's stream creations */
};

static struct board *board;

/* Every child the test forked, so that none outlives it whatever an assertion did. */
static pid_t children[64];
static int nchildren;

static int suite_init(void)
{
    board = mmap(NULL, sizeof *board, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (board == MAP_FAILED)
        return -1;
    return suite_open(&suite, "sim-isolation", NULL);
}

static void end_children(void);

static int suite_clean(void)
{
    end_children();
    munmap(board, sizeof *board);
    return suite_close(&suite);
}

static void board_reset(void)
{
    memset(board, 0, sizeof *board);
}

static pid_t fork_child(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid > 0 && nchildren < (int)(sizeof children / sizeof children[0]))
        children[nchildren++] = pid;
    return pid;
}

/* Ends every child still there (continued first, so that a stopped one can die) and reaps
 * it. */
static void end_children(void)
{
    for (int i = 0; i < nchildren; i++) {
        if (waitpid(children[i], NULL, WNOHANG) != 0)
            continue; /* reaped already, here or by the test */
        kill(children[i], SIGKILL);
        kill(children[i], SIGCONT);
        waitpid(children[i], NULL, 0);
    }
    nchildren = 0;
}

/* Exit status of PID within MS milliseconds (128 + N for a signal N), -1 if it is still
 * running (it is then left). */
static int exited_within(pid_t pid, double ms)
{
    double end = util_now() + ms / 1e3;
    do {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid && (WIFEXITED(st) || WIFSIGNALED(st)))
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0)
            return -2; /* not our child, or reaped already */
        usleep(5000);
    } while (util_now() < end);
    return -1;
}

/* Waits up to MS milliseconds until client ID has completed WANT loops; 1 if it has. */
static int loops_reach(int id, unsigned long long want, double ms)
{
    double end = util_now() + ms / 1e3;
    while (atomic_load(&board->loops[id]) < want) {
        if (util_now() >= end)
            return 0;
        usleep(1000);
    }
    return 1;
}

/* Stops child PID with SIGSTOP and waits until it is stopped; 0, or -1 when it did not stop
 * (it ended). */
static int stop_child(pid_t pid)
{
    int st;
    kill(pid, SIGSTOP);
    return waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st) ? 0 : -1;
}

/* ---- the clients ------------------------------------------------------------------------ */

#define CK(id, x)                                                                                  \
    do {                                                                                           \
        CUresult rc_ = (x);                                                                        \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            const char *name_ = "?";                                                               \
            cuGetErrorName(rc_, &name_);                                                           \
            fprintf(stderr, "client %d: %s failed: %s\n", (id), #x, name_);                        \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

enum wait_kind {
    WAIT_SYNC, /* cuCtxSynchronize */
    WAIT_POLL, /* cuStreamQuery until it is done: inside the driver nearly all the time */
};

struct client {
    int id;
    CUfunction work, add;
    CUdeviceptr a, b, sum;
    float ha[VEC_N], hb[VEC_N], hsum[VEC_N];
};

/* 100 us of the xavier-nx's FP32 peak (0.845 TFLOP/s) on a grid that fills its 6 SMs */
static const char module_text[] = ".pos_sim_module 1\n"
                                  ".kernel work flops=8.45e7\n"
                                  ".kernel add twin=vector_add\n";

static void client_setup(struct client *cl, int id)
{
    CUcontext ctx;
    CUmodule m;
    cl->id = id;
    CK(id, cuInit(0));
    CK(id, cuDevicePrimaryCtxRetain(&ctx, 0));
    CK(id, cuCtxSetCurrent(ctx));
    CK(id, cuModuleLoadData(&m, module_text));
    CK(id, cuModuleGetFunction(&cl->work, m, "work"));
    CK(id, cuModuleGetFunction(&cl->add, m, "add"));
    CK(id, cuMemAlloc(&cl->a, sizeof cl->ha));
    CK(id, cuMemAlloc(&cl->b, sizeof cl->hb));
    CK(id, cuMemAlloc(&cl->sum, sizeof cl->hsum));
}

/* Loop R: returns 1 when the device's sum is exactly a + b (the inputs are binary fractions,
 * so the sum is exact on both sides), 0 when not. */
static int client_loop(struct client *cl, unsigned long long r, enum wait_kind wait)
{
    int id = cl->id;
    for (int i = 0; i < VEC_N; i++) {
        cl->ha[i] = (float)((i + r) % 64) * 0.5f;
        cl->hb[i] = (float)(r % 16) * 0.25f + 1.0f;
    }
    CK(id, cuMemcpyHtoD(cl->a, cl->ha, sizeof cl->ha));
    CK(id, cuMemcpyHtoD(cl->b, cl->hb, sizeof cl->hb));
    for (int k = 0; k < 4; k++)
        CK(id, cuLaunchKernel(cl->work, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
    unsigned n = VEC_N;
    void *args[] = {&cl->a, &cl->b, &cl->sum, &n};
    CK(id, cuLaunchKernel(cl->add, VEC_N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    if (wait == WAIT_SYNC) {
        CK(id, cuCtxSynchronize());
    } else {
        CUresult rc;
        while ((rc = cuStreamQuery(NULL)) == CUDA_ERROR_NOT_READY)
            ;
        CK(id, rc);
    }
    memset(cl->hsum, 0, sizeof cl->hsum);
    CK(id, cuMemcpyDtoH(cl->hsum, cl->sum, sizeof cl->hsum));
    for (int i = 0; i < VEC_N; i++)
        if (cl->hsum[i] != cl->ha[i] + cl->hb[i])
            return 0;
    return 1;
}

/* A child that runs loops until the board says quit, counting them as client ID. Exits 0,
 * or 2 when a result was wrong. */
static pid_t start_client(int id, enum wait_kind wait)
{
    pid_t pid = fork_child();
    if (pid != 0)
        return pid;
    static struct client cl;
    client_setup(&cl, id);
    atomic_store(&board->ready[id], 1);
    double last = util_now();
    for (unsigned long long r = 0; !atomic_load(&board->quit); r++) {
        if (!client_loop(&cl, r, wait))
            atomic_fetch_add(&board->wrong[id], 1);
        atomic_fetch_add(&board->loops[id], 1);
        double now = util_now();
        long long gap = (long long)((now - last) * 1e9);
        if (gap > atomic_load(&board->gap_max_ns[id]))
            atomic_store(&board->gap_max_ns[id], gap); /* the test may reset it: no CAS */
        last = now;
    }
    exit(atomic_load(&board->wrong[id]) ? 2 : 0); /* the driver leaves the device at exit */
}

/* A child that attaches to the virtual GPU, runs three loops and exits: 0 when all three
 * were right. */
static pid_t start_newcomer(int id)
{
    pid_t pid = fork_child();
    if (pid != 0)
        return pid;
    static struct client cl;
    client_setup(&cl, id);
    int right = 0;
    for (unsigned long long r = 0; r < 3; r++)
        right += client_loop(&cl, r, WAIT_SYNC);
    exit(right == 3 ? 0 : 2);
}

/* A child that attaches and then stops itself in the middle of the driver (the driver's
 * fault-injection entry point); returns once it is stopped, -1 when it did not stop. Once
 * continued it exits 0. */
static pid_t start_stopped_in_driver(void)
{
    pid_t pid = fork_child();
    if (pid == 0) {
        if (cuInit(0) != CUDA_SUCCESS || pos_sim_fault_stop_in_launch() != 0)
            _exit(1);
        exit(0);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st)) {
        fprintf(stderr, "the child did not stop in the driver\n");
        return -1;
    }
    return pid;
}

/* Waits up to MS for client ID to be set up and to have completed LOOPS loops; 1 if it
 * has. */
static int client_ready(int id, unsigned long long loops, double ms)
{
    double end = util_now() + ms / 1e3;
    while (!atomic_load(&board->ready[id]) && util_now() < end)
        usleep(5000);
    return atomic_load(&board->ready[id]) && loops_reach(id, loops, (end - util_now()) * 1e3);
}

/* Asks the clients to quit and checks each of the first N exits 0 (results right) within
 * 10 s. */
static void quit_clients(const pid_t *pids, int n)
{
    atomic_store(&board->quit, 1);
    for (int i = 0; i < n; i++) {
        int rc = exited_within(pids[i], 10000 * util_time_scale());
        CU_ASSERT_EQUAL(rc, 0);
        if (rc != 0)
            fprintf(stderr, "client %d: exit %d after %llu loops, %llu wrong\n", i, rc,
                    atomic_load(&board->loops[i]), atomic_load(&board->wrong[i]));
    }
}

/* ---- stopped inside the driver ----------------------------------------------------------- */

/* A client runs; another process stops in the middle of the driver; while it is stopped a
 * newcomer attaches, launches, synchronises and exits, and the running client keeps
 * completing loops. Then the stopped one is continued (exits 0) or, when KILL, killed, and
 * both kinds of client still work after. */
static void check_stopped_inside_the_driver(int kill_it)
{
    double scale = util_time_scale();
    pid_t runner = start_client(0, WAIT_SYNC);
    CU_ASSERT_FATAL(runner > 0);
    CU_ASSERT_FATAL(client_ready(0, 2, 10000 * scale));
    pid_t held = start_stopped_in_driver();
    CU_ASSERT_FATAL(held > 0);
    unsigned long long before = atomic_load(&board->loops[0]);
    double t0 = util_now();

    pid_t newcomer = start_newcomer(1);
    CU_ASSERT_FATAL(newcomer > 0);
    int rc = exited_within(newcomer, 5000 * scale);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc != 0)
        fprintf(stderr, "a newcomer %s %.1f s after another process stopped in the driver\n",
                rc == -1 ? "had not finished" : "failed", util_now() - t0);
    /* two loops: at least one begun and ended wholly inside the stop */
    int moved = loops_reach(0, before + 2, 3000 * scale);
    CU_ASSERT(moved);
    if (!moved)
        fprintf(stderr,
                "the running client completed %llu loops in the %.1f s after another "
                "process stopped in the driver\n",
                atomic_load(&board->loops[0]) - before, util_now() - t0);
    CU_ASSERT_EQUAL(exited_within(held, 0), -1); /* the stop held all along */

    if (kill_it) {
        kill(held, SIGKILL);
        CU_ASSERT_EQUAL(exited_within(held, 10000 * scale), 128 + SIGKILL);
    } else {
        kill(held, SIGCONT);
        rc = exited_within(held, 10000 * scale);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc != 0)
            fprintf(stderr, "the continued process: exit %d\n", rc);
    }
    /* and after it: the runner goes on, a newcomer works */
    before = atomic_load(&board->loops[0]);
    CU_ASSERT(loops_reach(0, before + 2, 10000 * scale));
    pid_t later = start_newcomer(2);
    CU_ASSERT_FATAL(later > 0);
    CU_ASSERT_EQUAL(exited_within(later, 10000 * scale), 0);
    quit_clients(&runner, 1);
}

static void test_a_process_stopped_inside_the_driver_stalls_no_other_process(void)
{
    check_stopped_inside_the_driver(0);
}

static void test_a_process_killed_while_stopped_inside_the_driver_stalls_no_other_process(void)
{
    check_stopped_inside_the_driver(1);
}

/* ---- stopped at random moments --------------------------------------------------------- */

#define RANDOM_CLIENTS 3
#define RANDOM_STOPS   60

/* Three clients that poll for completion (so a stop lands in the middle of a driver call
 * most of the time, whatever the driver locks); one chosen at random is stopped 60 times at
 * a random moment for about 100 ms, and during each stop each of the other two completes
 * loops. A client is held stopped past its 100 ms until the others have moved, up to 2 s:
 * the bound is for a device that moves nothing at all, not for how fast it moves. */
static void test_stops_at_random_moments_stall_no_other_process(void)
{
    double scale = util_time_scale();
    pid_t pids[RANDOM_CLIENTS];
    for (int i = 0; i < RANDOM_CLIENTS; i++) {
        pids[i] = start_client(i, WAIT_POLL);
        CU_ASSERT_FATAL(pids[i] > 0);
    }
    for (int i = 0; i < RANDOM_CLIENTS; i++)
        CU_ASSERT_FATAL(client_ready(i, 2, 10000 * scale));
    unsigned seed = (unsigned)getpid();
    srand(seed);
    int stalls = 0, stops = 0;
    for (int k = 0; k < RANDOM_STOPS; k++) {
        usleep((useconds_t)(2000 + rand() % 30000)); /* a random moment of the loops */
        int victim = rand() % RANDOM_CLIENTS;
        if (stop_child(pids[victim]) != 0) {
            CU_FAIL("a client ended while it was being stopped");
            break;
        }
        /* counted from the stop, not from the signal: loops the others complete from here on
         * were all done while the victim could not run */
        unsigned long long before[RANDOM_CLIENTS];
        for (int i = 0; i < RANDOM_CLIENTS; i++)
            before[i] = atomic_load(&board->loops[i]);
        double t0 = util_now();
        usleep(100000);
        int all = 1;
        for (int i = 0; i < RANDOM_CLIENTS; i++)
            if (i != victim)
                all &= loops_reach(i, before[i] + 2, 2000 * scale - (util_now() - t0) * 1e3);
        double held = util_now() - t0;
        if (!all) {
            stalls++;
            fprintf(stderr, "stop %d (client %d):", k, victim);
            for (int i = 0; i < RANDOM_CLIENTS; i++)
                if (i != victim)
                    fprintf(stderr, " client %d completed %llu loops", i,
                            atomic_load(&board->loops[i]) - before[i]);
            fprintf(stderr, " in %.2f s\n", held);
        }
        kill(pids[victim], SIGCONT);
        stops++;
    }
    CU_ASSERT_EQUAL(stalls, 0);
    if (stalls)
        fprintf(stderr, "%d of %d stops at random moments stalled the other clients (seed %u)\n",
                stalls, stops, seed);
    quit_clients(pids, RANDOM_CLIENTS);
    for (int i = 0; i < RANDOM_CLIENTS; i++)
        CU_ASSERT_EQUAL(atomic_load(&board->wrong[i]), 0);
}

/* The pid of the device process of the suite's virtual GPU (its argument names the segment),
 * 0 when none runs. */
static pid_t device_process(void)
{
    char cmd[256], out[64];
    snprintf(cmd, sizeof cmd, "pgrep -f -x 'pos-sim-device /pos-sim.%u.%s' | head -1",
             (unsigned)getuid(), suite.instance);
    if (util_run_stdout(cmd, out, sizeof out) < 0)
        return 0;
    return (pid_t)atoi(out);
}

#define DEVICE_KILLS 5

/* The device process killed at random moments of the clients' loops (inside the device lock
 * or not): each time another takes its place, the clients go on, and every result stays
 * right. */
static void test_a_killed_device_process_is_replaced_and_loses_nothing(void)
{
    double scale = util_time_scale();
    pid_t pids[RANDOM_CLIENTS];
    for (int i = 0; i < RANDOM_CLIENTS; i++) {
        pids[i] = start_client(i, i % 2 ? WAIT_POLL : WAIT_SYNC);
        CU_ASSERT_FATAL(pids[i] > 0);
    }
    for (int i = 0; i < RANDOM_CLIENTS; i++)
        CU_ASSERT_FATAL(client_ready(i, 2, 10000 * scale));
    srand((unsigned)getpid());
    pid_t last = 0;
    for (int k = 0; k < DEVICE_KILLS; k++) {
        usleep((useconds_t)(2000 + rand() % 30000));
        pid_t dev = device_process();
        CU_ASSERT_FATAL(dev > 0);
        CU_ASSERT(dev != last); /* a new one each time */
        last = dev;
        kill(dev, SIGKILL);
        unsigned long long before[RANDOM_CLIENTS];
        for (int i = 0; i < RANDOM_CLIENTS; i++)
            before[i] = atomic_load(&board->loops[i]);
        for (int i = 0; i < RANDOM_CLIENTS; i++) {
            int went_on = loops_reach(i, before[i] + 2, 5000 * scale);
            CU_ASSERT(went_on);
            if (!went_on)
                fprintf(stderr, "kill %d of the device process: client %d completed %llu loops\n",
                        k, i, atomic_load(&board->loops[i]) - before[i]);
        }
    }
    quit_clients(pids, RANDOM_CLIENTS);
    for (int i = 0; i < RANDOM_CLIENTS; i++)
        CU_ASSERT_EQUAL(atomic_load(&board->wrong[i]), 0);
}

/* ---- a process the host runs last, inside the device lock --------------------------------- */

#ifndef SCHED_IDLE
#define SCHED_IDLE 5
#endif

/* A child at SCHED_IDLE that creates and destroys streams until the board says quit: each
 * creation and destruction takes the device lock. */
static pid_t start_locker(void)
{
    pid_t pid = fork_child();
    if (pid != 0)
        return pid;
    struct sched_param sp = {0};
    if (sched_setscheduler(0, SCHED_IDLE, &sp) != 0)
        _exit(1);
    CUcontext ctx;
    CK(9, cuInit(0));
    CK(9, cuDevicePrimaryCtxRetain(&ctx, 0));
    CK(9, cuCtxSetCurrent(ctx));
    while (!atomic_load(&board->quit)) {
        CUstream st;
        CK(9, cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
        CK(9, cuStreamDestroy(st));
        atomic_fetch_add(&board->lock_rounds, 1);
    }
    exit(0);
}

static pid_t start_spinner(void)
{
    pid_t pid = fork_child();
    if (pid == 0) {
        while (!atomic_load(&board->quit))
            ;
        _exit(0);
    }
    return pid;
}

#define LOCKER_SECONDS 4.0
#define GAP_LIMIT_MS   150.0 /* a loop is about 0.5 ms of device time */

/* A normal client's loops beside a SCHED_IDLE process that takes the device lock thousands of
 * times a second and a busy loop on every core: the host gives the low process a core now
 * and then and takes it back at its slice's end, often inside the lock, for the better part
 * of a second. Without priority inheritance the device process, and with it every process of
 * the virtual GPU, waits that long; with it, the holder runs at the device process's
 * priority until it lets go, and the client's loops go on with no gap of more than
 * GAP_LIMIT_MS. Needs the device process real-time (root or CAP_SYS_NICE). */
static void test_a_process_the_host_runs_last_stalls_no_other_inside_the_device_lock(void)
{
    double scale = util_time_scale();
    pid_t runner = start_client(0, WAIT_SYNC);
    CU_ASSERT_FATAL(runner > 0);
    CU_ASSERT_FATAL(client_ready(0, 2, 10000 * scale));
    pid_t dev = device_process();
    CU_ASSERT_FATAL(dev > 0);
    if ((sched_getscheduler(dev) & ~SCHED_RESET_ON_FORK) != SCHED_FIFO) {
        fprintf(stderr,
                "%s: skipped: the device process is not real-time (it needs root or "
                "CAP_SYS_NICE; running as uid %u)\n",
                __func__, (unsigned)geteuid());
        quit_clients(&runner, 1);
        return;
    }
    pid_t locker = start_locker();
    CU_ASSERT_FATAL(locker > 0);
    /* it attaches before the busy loops start: at SCHED_IDLE beside them that could take
     * seconds */
    double end = util_now() + 10 * scale;
    while (atomic_load(&board->lock_rounds) < 100 && util_now() < end)
        usleep(2000);
    CU_ASSERT_FATAL(atomic_load(&board->lock_rounds) >= 100);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < (cpus > 0 ? cpus : 1) && i < 16; i++)
        CU_ASSERT_FATAL(start_spinner() > 0);
    atomic_store(&board->gap_max_ns[0], 0);
    unsigned long long loops0 = atomic_load(&board->loops[0]);
    unsigned long long rounds0 = atomic_load(&board->lock_rounds);
    usleep((useconds_t)(LOCKER_SECONDS * 1e6));
    double gap_ms = (double)atomic_load(&board->gap_max_ns[0]) / 1e6;
    unsigned long long loops = atomic_load(&board->loops[0]) - loops0;
    unsigned long long rounds = atomic_load(&board->lock_rounds) - rounds0;
    fprintf(stderr,
            "%s: %llu loops in %.0f s, the longest gap %.1f ms; the low process took the lock "
            "%llu times\n",
            __func__, loops, LOCKER_SECONDS, gap_ms, 2 * rounds);
    CU_ASSERT(rounds > 0); /* it did run beside the busy loops */
    CU_ASSERT(gap_ms < GAP_LIMIT_MS * scale);
    CU_ASSERT(loops > 0);
    pid_t runners[] = {runner, locker};
    quit_clients(runners, 2);
}

void pos_test_register(void)
{
    /* each test starts from a clear board and ends every child it forked, even when a fatal
     * assertion left the test early */
    CU_pSuite s = CU_add_suite_with_setup_and_teardown("sim_isolation", suite_init, suite_clean,
                                                       board_reset, end_children);
    POS_ADD_TEST(s, test_a_process_stopped_inside_the_driver_stalls_no_other_process);
    POS_ADD_TEST(s, test_a_process_killed_while_stopped_inside_the_driver_stalls_no_other_process);
    POS_ADD_TEST(s, test_stops_at_random_moments_stall_no_other_process);
    POS_ADD_TEST(s, test_a_killed_device_process_is_replaced_and_loses_nothing);
    POS_ADD_TEST(s, test_a_process_the_host_runs_last_stalls_no_other_inside_the_device_lock);
}
