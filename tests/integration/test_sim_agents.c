/* The device agents of processes sharing one virtual GPU wake each other: when one process's
 * kernel ends, a kernel of another process that shared the SMs with it speeds up and ends
 * sooner than its own agent planned to look, and the first agent wakes it (after it has let
 * the device lock go). Without that wake the second process would see its completion only at
 * the time it planned with the slower speed. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/util.h"

/* wall = device time x 40 (times util_time_scale in a sanitized build, whose slower agents
 * and start-up would otherwise be what is measured): jitter of a loaded machine stays small */
static int sim_scale = 40;

static int suite_init(void)
{
    char inst[96], scale[16];
    snprintf(inst, sizeof inst, "test-sim-agents-%d", (int)getpid());
    sim_scale = (int)(40 * util_time_scale());
    snprintf(scale, sizeof scale, "%d", sim_scale);
    setenv("POS_SIM_INSTANCE", inst, 1);
    setenv("POS_SIM_DEVICE", "xavier-nx", 1);
    setenv("POS_SIM_MODE", "mps", 1);
    setenv("POS_SIM_SCALE", scale, 1);
    return 0;
}

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A child that launches one 10 ms (device time) kernel on all 6 SMs of the xavier-nx at
 * wall time AT_MS and writes how long its synchronisation took into *SYNC_MS. */
static pid_t launcher(double at_ms, double *sync_ms)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    CUcontext c;
    CUmodule m;
    CUfunction f;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(c) != CUDA_SUCCESS ||
        cuModuleLoadData(&m, ".pos_sim_module 1\n.kernel k flops=8.45e9\n") != CUDA_SUCCESS ||
        cuModuleGetFunction(&f, m, "k") != CUDA_SUCCESS)
        _exit(1);
    struct timespec ts = {.tv_sec = (time_t)(at_ms / 1e3),
                          .tv_nsec = (long)((at_ms - (double)(time_t)(at_ms / 1e3) * 1e3) * 1e6)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    double t0 = mono_ms();
    /* one block of 256 threads per SM: two such kernels are resident together and share
     * each SM's issue, each at half speed */
    if (cuLaunchKernel(f, 6, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS ||
        cuCtxSynchronize() != CUDA_SUCCESS)
        _exit(1);
    *sync_ms = mono_ms() - t0;
    exit(0); /* the driver leaves the device at exit */
}

/* B starts at 0, A 4 ms (device) later, both 10 ms of work alone. From 4 ms both run at half
 * speed; A's agent, which planned at A's launch to look when A could end at full speed (14
 * ms), then plans A's end with half speed (24 ms). B ends at 16 ms, A runs alone and ends at
 * 20: 16 ms after its launch, and 20 (at 24) unless B's agent wakes A's when B's kernel ends. */
static void test_a_completion_brought_forward_by_another_process_is_seen_on_time(void)
{
    double *res = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CU_ASSERT_FATAL(res != MAP_FAILED);
    for (int rep = 0; rep < 3; rep++) {
        double start = mono_ms() + 500 * util_time_scale(); /* both initialised by then */
        res[0] = res[1] = -1;
        pid_t b = launcher(start, &res[0]);
        pid_t a = launcher(start + 4.0 * sim_scale, &res[1]);
        int sa, sb;
        waitpid(a, &sa, 0);
        waitpid(b, &sb, 0);
        CU_ASSERT(WIFEXITED(sa) && WEXITSTATUS(sa) == 0 && WIFEXITED(sb) && WEXITSTATUS(sb) == 0);
        /* both 16 ms; A 20 if nobody woke it */
        CU_ASSERT(res[0] > 15.0 * sim_scale && res[0] < 18.0 * sim_scale);
        CU_ASSERT(res[1] > 15.0 * sim_scale && res[1] < 18.0 * sim_scale);
        if (!(res[1] > 15.0 * sim_scale && res[1] < 18.0 * sim_scale))
            fprintf(stderr, "run %d: B synchronised after %.1f ms, A after %.1f ms (want %d)\n",
                    rep, res[0], res[1], 16 * sim_scale);
    }
    munmap(res, 4096);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("sim_agents", suite_init, NULL);
    POS_ADD_TEST(s, test_a_completion_brought_forward_by_another_process_is_seen_on_time);
}
