/* A -lcuda program that forks while it launches: one child execs another program (which may
 * use CUDA and the shim afresh), one child keeps running and tries CUDA in the parent's
 * state (the driver refuses; the shim must neither record it nor touch the parent's trace).
 * Prints the parent's launches. Usage: prog_fork N EXEC_PATH [ARGS...] */
#include <sys/wait.h>
#include <unistd.h>

#include "prog_common.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200;
    CUcontext ctx;
    CUfunction work = prog_kernel(prog_start(&ctx), "work");
    for (int i = 0; i < n / 2; i++)
        PROG_CHECK(cuLaunchKernel(work, 4, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
    pid_t execer = fork();
    if (execer == 0) {
        if (argc > 2)
            execv(argv[2], argv + 2);
        _exit(126);
    }
    pid_t stayer = fork();
    if (stayer == 0) {
        CUresult rc = cuLaunchKernel(work, 4, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
        _exit(rc == CUDA_SUCCESS ? 3 : 0);
    }
    for (int i = n / 2; i < n; i++)
        PROG_CHECK(cuLaunchKernel(work, 4, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
    PROG_CHECK(cuCtxSynchronize());
    int st1, st2;
    waitpid(execer, &st1, 0);
    waitpid(stayer, &st2, 0);
    if (!WIFEXITED(st1) || WEXITSTATUS(st1) != 0 || !WIFEXITED(st2) || WEXITSTATUS(st2) != 0) {
        fprintf(stderr, "children failed: %d %d\n", st1, st2);
        return 1;
    }
    printf("launches %d\n", n);
    return 0;
}
