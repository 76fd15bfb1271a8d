/* The process bench/simisolation.sh disturbs (stops at random moments, or runs at
 * SCHED_IDLE): a client of the virtual GPU that spends most of its time inside driver calls,
 * as a runtime that spin-waits does, so that a stop or a preemption lands in the middle of
 * one as often as a client can make it. At Poisson arrivals (RATE a second, seeded) it
 * launches one kernel of KERNEL_US device time and polls cuStreamQuery until it is done;
 * arrivals it missed while it did not run are issued at once when it runs again, so that
 * its work on the device over a run is the same whether it was stopped or not. Runs for
 * SECONDS, or until SIGTERM or SIGINT, and prints one JSON line.
 *
 *   simisolation [-r RATE] [-d KERNEL_US] [-t SECONDS] [-s SEED]
 */
#include <cuda.h>
#include "bench/sim_kernel.h"
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t quit;

static void on_signal(int sig)
{
    (void)sig;
    quit = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_until(double t)
{
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - (double)(time_t)t) * 1e9)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

#define CK(x)                                                                                      \
    do {                                                                                           \
        CUresult rc_ = (x);                                                                        \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            const char *name_ = "?";                                                               \
            cuGetErrorName(rc_, &name_);                                                           \
            fprintf(stderr, "simisolation: %s failed: %s\n", #x, name_);                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    double rate = 100, kernel_us = 200, seconds = 10;
    unsigned seed = 1;
    int opt;
    while ((opt = getopt(argc, argv, "r:d:t:s:")) != -1) {
        switch (opt) {
        case 'r':
            rate = atof(optarg);
            break;
        case 'd':
            kernel_us = atof(optarg);
            break;
        case 't':
            seconds = atof(optarg);
            break;
        case 's':
            seed = (unsigned)strtoul(optarg, NULL, 10);
            break;
        default:
            fprintf(stderr,
                    "usage: simisolation [-r RATE] [-d KERNEL_US] [-t SECONDS] [-s SEED]\n");
            return 2;
        }
    }
    if (!(rate > 0) || !(kernel_us >= 0) || !(seconds > 0)) {
        fprintf(stderr, "simisolation: want RATE > 0, KERNEL_US >= 0, SECONDS > 0\n");
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    CUcontext ctx;
    CUmodule m;
    CUfunction k;
    CK(cuInit(0));
    CK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CK(cuCtxSetCurrent(ctx));
    CK(bench_kernel_of_us(kernel_us, &m, &k));
    int sms; /* its grid fills the device four times over */
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));

    srand(seed);
    double t0 = now_s(), next = t0, end = t0 + seconds, worst_late = 0;
    unsigned long long kernels = 0, polls = 0;
    while (!quit && next < end) {
        sleep_until(next);
        double late = now_s() - next;
        worst_late = late > worst_late ? late : worst_late;
        CK(cuLaunchKernel(k, 4 * sms, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
        CUresult rc;
        while ((rc = cuStreamQuery(NULL)) == CUDA_ERROR_NOT_READY)
            polls++;
        CK(rc);
        kernels++;
        /* exponential gaps: -ln(U) / RATE, U in (0, 1] */
        next += -log(((double)rand() + 1.0) / ((double)RAND_MAX + 1.0)) / rate;
    }
    CK(cuCtxSynchronize());
    printf("{\"kernels\":%llu,\"polls\":%llu,\"rate\":%g,\"kernel_us\":%g,\"seconds\":%.3f,"
           "\"worst_late_ms\":%.1f}\n",
           kernels, polls, rate, kernel_us, now_s() - t0, worst_late * 1e3);
    return 0;
}
