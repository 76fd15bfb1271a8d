/* A -lcuda program that forks before it initialises CUDA, as Python's multiprocessing does
 * with the fork start method: NCHILD children each initialise CUDA on their own and launch N
 * kernels; then the parent does the same, and forks one more child after its cuInit, which
 * tries CUDA in the parent's state (the driver refuses it). Exits 0 when every child did
 * what it should. Prints the parent's launches. Usage: prog_prefork NCHILD N */
#include <sys/wait.h>
#include <unistd.h>

#include "prog_common.h"

static void launches(int n)
{
    CUcontext ctx;
    CUmodule m = prog_start(&ctx);
    CUfunction work = prog_kernel(m, "work");
    for (int i = 0; i < n; i++) {
        PROG_CHECK(cuLaunchKernel(work, 4, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
        if (i % 10 == 9)
            PROG_CHECK(cuCtxSynchronize());
    }
    PROG_CHECK(cuCtxSynchronize());
    PROG_CHECK(cuModuleUnload(m));
    PROG_CHECK(cuDevicePrimaryCtxRelease(0));
}

int main(int argc, char **argv)
{
    int nchild = argc > 1 ? atoi(argv[1]) : 2, n = argc > 2 ? atoi(argv[2]) : 100;
    pid_t kids[16];
    if (nchild > 16)
        nchild = 16;
    for (int i = 0; i < nchild; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            launches(n);
            exit(0);
        }
    }
    int bad = 0, st;
    for (int i = 0; i < nchild; i++)
        if (waitpid(kids[i], &st, 0) != kids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad++;
    launches(n);
    /* after cuInit: the child cannot use CUDA */
    pid_t late = fork();
    if (late == 0)
        _exit(cuInit(0) == CUDA_SUCCESS ? 3 : 0);
    if (waitpid(late, &st, 0) != late || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bad++;
    if (bad) {
        fprintf(stderr, "prefork: %d children failed\n", bad);
        return 1;
    }
    printf("launches %d\n", n);
    return 0;
}
