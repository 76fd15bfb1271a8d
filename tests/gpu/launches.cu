// Real-GPU check program for the shim (CUDA runtime API, as frameworks use it): N launches of
// a small kernel plus a captured graph launched G times; prints a checksum of the results
// and "launches L" (kernel launches outside the capture + graph launches).
// Build: nvcc -O2 launches.cu -o launches  [--default-stream per-thread]
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void axpy(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

#define CHECK(call)                                                                              \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));                   \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

int main(int argc, char **argv)
{
    int launches = argc > 1 ? atoi(argv[1]) : 1000;
    int graphs = argc > 2 ? atoi(argv[2]) : 10;
    const int n = 1 << 16;
    float *x, *y;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMemset(x, 0, n * sizeof(float)));
    CHECK(cudaMemset(y, 0, n * sizeof(float)));
    float one = 1.0f;
    CHECK(cudaMemcpy(x, &one, sizeof one, cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < launches; i++)
        axpy<<<n / 256, 256, 0, i % 2 ? s : 0>>>(y, x, 0.5f, n);
    CHECK(cudaDeviceSynchronize());
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 8; i++)
        axpy<<<n / 256, 256, 0, s>>>(y, x, 0.25f, n);
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < graphs; i++)
        CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaStreamSynchronize(s));
    float y0;
    CHECK(cudaMemcpy(&y0, y, sizeof y0, cudaMemcpyDeviceToHost));
    printf("y0 %.6f\nlaunches %d\n", y0, launches + graphs);
    return 0;
}
