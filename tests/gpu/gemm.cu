// Real-GPU check program for the shim: a cuBLAS SGEMM loop (cuBLAS launches its own kernels,
// through the runtime's cuGetProcAddress table). Prints a checksum of the result and the
// number of GEMMs; the shim's trace must hold at least that many kernels.
// Build: nvcc -O2 gemm.cu -o gemm -lcublas
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CHECK(call)                                                                              \
    do {                                                                                         \
        int e_ = (int)(call);                                                                    \
        if (e_ != 0) {                                                                           \
            fprintf(stderr, "%s failed: %d\n", #call, e_);                                       \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    const int n = 512;
    std::vector<float> h(n * n);
    for (int i = 0; i < n * n; i++)
        h[i] = (float)((i * 7919) % 17) / 16.0f - 0.5f;
    float *a, *b, *c;
    CHECK(cudaMalloc(&a, n * n * sizeof(float)));
    CHECK(cudaMalloc(&b, n * n * sizeof(float)));
    CHECK(cudaMalloc(&c, n * n * sizeof(float)));
    CHECK(cudaMemcpy(a, h.data(), n * n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, h.data(), n * n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(c, 0, n * n * sizeof(float)));
    cublasHandle_t hd;
    CHECK(cublasCreate(&hd));
    CHECK(cublasSetMathMode(hd, CUBLAS_PEDANTIC_MATH)); // no TF32: bit-identical reruns
    const float alpha = 1.0f / n, beta = 0.5f;
    for (int i = 0; i < iters; i++)
        CHECK(cublasSgemm(hd, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, n, b, n, &beta, c, n));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h.data(), c, n * n * sizeof(float), cudaMemcpyDeviceToHost));
    double s = 0;
    for (int i = 0; i < n * n; i++)
        s += h[i];
    printf("checksum %.17g\ngemms %d\n", s, iters);
    CHECK(cublasDestroy(hd));
    return 0;
}
