// Real-GPU launch cost: times each of N launches of an empty kernel with the runtime API and
// prints the median in ns. Run with and without the shim to get what it adds.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>
#include <cuda_runtime.h>

__global__ void empty() {}

static double now_ns()
{
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    std::vector<double> d(n);
    empty<<<1, 32>>>();
    cudaDeviceSynchronize();
    for (int i = 0; i < n; i++) {
        double a = now_ns();
        empty<<<1, 32>>>();
        d[i] = now_ns() - a;
        if (i % 1000 == 999)
            cudaDeviceSynchronize(); /* stay below the launch queue's depth */
    }
    cudaDeviceSynchronize();
    std::sort(d.begin(), d.end());
    printf("launch_ns_p50 %.0f\nlaunches %d\n", d[n / 2], n + 1);
    return 0;
}
