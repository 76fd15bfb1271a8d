/* A -lcuda program that registers with posd (through the shim) and then makes ioctl() calls
 * of its own, N a second for S seconds, as a GPU driver's calls would be: posd's telemetry
 * counts them. Prints "ioctls N", "elapsed_ms N" and "launches N".
 * Usage: prog_ioctls RATE SECONDS */
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "prog_common.h"

int main(int argc, char **argv)
{
    int rate = argc > 1 ? atoi(argv[1]) : 1000;
    int secs = argc > 2 ? atoi(argv[2]) : 3;
    CUcontext ctx;
    CUfunction work = prog_kernel(prog_start(&ctx), "work");
    PROG_CHECK(cuLaunchKernel(work, 4, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
    PROG_CHECK(cuCtxSynchronize());
    int p[2];
    if (pipe(p) < 0)
        return 1;
    long n = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct timespec gap = {0, 1000000000L / rate};
    for (long i = 0; i < (long)rate * secs; i++) {
        int queued;
        if (ioctl(p[0], FIONREAD, &queued) == 0)
            n++;
        nanosleep(&gap, NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    printf("ioctls %ld\nelapsed_ms %ld\nlaunches 1\n", n, ms);
    return 0;
}
