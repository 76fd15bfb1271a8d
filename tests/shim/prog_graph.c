/* A -lcuda program that captures kernels into a graph and launches the graph several times,
 * with ordinary launches around it. Captured launches are part of the graph; each graph launch
 * is one operator: it prints "launches" = plain launches + graph launches. Results are checked
 * through a twin checksum computed inside the graph. */
#include "prog_common.h"
#include "sim/twin_math.h"

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    CUcontext ctx;
    CUmodule m = prog_start(&ctx);
    CUfunction work = prog_kernel(m, "work");
    CUfunction fill = prog_kernel(m, "fill");
    CUfunction sum = prog_kernel(m, "sum");
    CUstream s;
    PROG_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr x, out;
    unsigned n = 512;
    float v = 3.25f;
    PROG_CHECK(cuMemAlloc(&x, n * 4));
    PROG_CHECK(cuMemAlloc(&out, 8));
    void *pf[] = {&x, &v, &n}, *ps[] = {&x, &n, &out};
    int launches = 0;
    PROG_CHECK(cuLaunchKernel(work, 8, 1, 1, 128, 1, 1, 0, s, NULL, NULL));
    launches++;
    PROG_CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    PROG_CHECK(cuLaunchKernel(fill, 2, 1, 1, 256, 1, 1, 0, s, pf, NULL));
    for (int i = 0; i < 20; i++)
        PROG_CHECK(cuLaunchKernel(work, 8, 1, 1, 128, 1, 1, 0, s, NULL, NULL));
    PROG_CHECK(cuLaunchKernel(sum, 1, 1, 1, 256, 1, 1, 0, s, ps, NULL));
    CUgraph g;
    CUgraphExec exec;
    PROG_CHECK(cuStreamEndCapture(s, &g));
    PROG_CHECK(cuGraphInstantiate(&exec, g, 0));
    int ok = 1;
    float host[512];
    pos_sim_fill_f32(host, v, n);
    for (int r = 0; r < reps; r++) {
        PROG_CHECK(cuGraphLaunch(exec, s));
        PROG_CHECK(cuLaunchKernel(work, 8, 1, 1, 128, 1, 1, 0, s, NULL, NULL));
        launches += 2;
        uint64_t got = 0;
        PROG_CHECK(cuStreamSynchronize(s));
        PROG_CHECK(cuMemcpyDtoH(&got, out, 8));
        ok &= got == pos_sim_checksum_f32(host, n);
    }
    printf("verified %s\nlaunches %d\n", ok ? "true" : "false", launches);
    return ok ? 0 : 1;
}
