// posapp --real: the synthetic kernels posapp launches on a real NVIDIA GPU in place of the
// simulated driver's text-module kernels. Built by nvcc into posapp_real.fatbin
// (tests/gpu/build.sh) and loaded with cuModuleLoadData, so posapp needs no nvcc at run time.
//
// pos_synth stands for one model op: launched with the op's grid, block and shared memory, each
// thread does N_FMA fused multiply-adds (four independent chains, so the FMA pipes stay busy)
// and N_LOAD coalesced 16-byte loads from BUF (a grid-strided walk from float4 OFF4, wrapping
// at MASK4 + 1 float4s), interleaved so that compute and memory overlap as in a real layer.
// posapp gives consecutive ops consecutive regions of a buffer several times the L2 cache, so
// an op's bytes come from DRAM as a real layer's weights and activations mostly do. posapp sizes
// N_FMA = FLOPs / (2 * threads) and N_LOAD = bytes / (16 * threads) from the model file.
// The result is written only when it equals an impossible value, so the compiler keeps the work
// and the kernel writes nothing. posapp launches it with the op's shared memory as dynamic
// shared memory (reserved at launch whether used or not), so occupancy follows the op's.
// pos_tiny is --microbench's empty kernel.
#include <stdint.h>

extern "C" __global__ void pos_synth(const float4 *__restrict__ buf, unsigned long long mask4,
                                     unsigned long long off4, unsigned n_fma, unsigned n_load,
                                     float *out)
{
    const unsigned long long threads_per_block = (unsigned long long)blockDim.x * blockDim.y * blockDim.z;
    const unsigned long long block =
        blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    const unsigned long long lane = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned long long tid = block * threads_per_block + lane;
    const unsigned long long total =
        (unsigned long long)gridDim.x * gridDim.y * gridDim.z * threads_per_block;
    float a0 = (float)(tid & 1023) * 1e-7f, a1 = a0 + 1e-7f, a2 = a0 + 2e-7f, a3 = a0 + 3e-7f;
    const float m = 0.999999f, c = 1e-7f;
    unsigned n4 = n_fma / 4, steps = n4 > n_load ? n4 : n_load;
    unsigned long long at = off4 + tid;
    for (unsigned i = 0; i < steps; i++) {
        if (i < n_load) {
            float4 v = buf[at & mask4];
            a0 += v.x;
            a1 += v.y;
            a2 += v.z;
            a3 += v.w;
            at += total;
        }
        if (i < n4) {
            a0 = fmaf(a0, m, c);
            a1 = fmaf(a1, m, c);
            a2 = fmaf(a2, m, c);
            a3 = fmaf(a3, m, c);
        }
    }
    for (unsigned i = n4 * 4; i < n_fma; i++)
        a0 = fmaf(a0, m, c);
    float s = a0 + a1 + a2 + a3;
    if (s == -12345.678f)
        out[0] = s;
}

extern "C" __global__ void pos_tiny(void) {}
