/* A -lcuda program whose connection to posd outlives it: it initialises CUDA (the shim
 * registers it with posd), launches, then forks a child that keeps every descriptor, the
 * socket to posd too, and sleeps; the program itself exits at once. posd can free the client
 * only by seeing the exit (eBPF telemetry): the socket stays open while the child lives.
 * Prints "child PID" and "launches N". Usage: prog_holdsock [SLEEP_S] */
#include <unistd.h>

#include "prog_common.h"

int main(int argc, char **argv)
{
    int sleep_s = argc > 1 ? atoi(argv[1]) : 30;
    CUcontext ctx;
    CUfunction work = prog_kernel(prog_start(&ctx), "work");
    for (int i = 0; i < 10; i++)
        PROG_CHECK(cuLaunchKernel(work, 4, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
    PROG_CHECK(cuCtxSynchronize());
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        sleep((unsigned)sleep_s);
        _exit(0);
    }
    printf("child %d\nlaunches 10\n", (int)child);
    return 0;
}
