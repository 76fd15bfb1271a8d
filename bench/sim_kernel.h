/* What the simulated GPU's benchmark clients (bench/simstop.c, bench/simisolation.c) launch:
 * one kernel of a given duration on the current device. */
#ifndef POS_BENCH_SIM_KERNEL_H
#define POS_BENCH_SIM_KERNEL_H

#include <cuda.h>
#include <stdio.h>

/* Loads a module with one kernel "k" whose FLOPs take KERNEL_US on the current device's FP32
 * peak, read back from the device (FMA lanes x 2 x clock: close to the presets), into *M and
 * *K. Returns CUDA_SUCCESS or the first error. */
static inline CUresult bench_kernel_of_us(double kernel_us, CUmodule *m, CUfunction *k)
{
    int sms, khz;
    CUresult rc = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
    if (rc == CUDA_SUCCESS)
        rc = cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    double peak = 128.0 * sms * khz * 1e3;
    char text[128];
    snprintf(text, sizeof text, ".pos_sim_module 1\n.kernel k flops=%.0f\n",
             peak * kernel_us * 1e-6);
    rc = cuModuleLoadData(m, text);
    return rc == CUDA_SUCCESS ? cuModuleGetFunction(k, *m, "k") : rc;
}

#endif
