/* A -lcuda program that shows which SM share its context got: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
 * before and after cuInit ("-" when unset), the SM limit of its primary context
 * (cuCtxGetExecAffinity), and the device time of one kernel over every SM of the device (the
 * simulated driver's mps mode confines it to the context's SMs). Prints "launches 1" last. */
#include "prog_common.h"

static const char *env_or_dash(void)
{
    const char *v = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    return v ? v : "-";
}

int main(void)
{
    printf("env_before_init %s\n", env_or_dash());
    PROG_CHECK(cuInit(0));
    printf("env_after_init %s\n", env_or_dash());
    CUcontext ctx;
    PROG_CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    PROG_CHECK(cuCtxSetCurrent(ctx));
    int sms = 0;
    PROG_CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    CUexecAffinityParam aff;
    PROG_CHECK(cuCtxGetExecAffinity(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
    printf("sms %d\nsm_limit %u\n", sms, aff.param.smCount.val);
    /* 20 ms on a whole rtx3080 (29.77 TFLOP/s): long beside the host's jitter */
    static const char module[] = ".pos_sim_module 1\n.kernel wide flops=5.954e11 bytes=0\n";
    CUmodule m;
    CUfunction f;
    PROG_CHECK(cuModuleLoadData(&m, module));
    PROG_CHECK(cuModuleGetFunction(&f, m, "wide"));
    CUevent a, b;
    PROG_CHECK(cuEventCreate(&a, 0));
    PROG_CHECK(cuEventCreate(&b, 0));
    PROG_CHECK(cuEventRecord(a, NULL));
    PROG_CHECK(cuLaunchKernel(f, 10 * (unsigned)sms, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
    PROG_CHECK(cuEventRecord(b, NULL));
    PROG_CHECK(cuEventSynchronize(b));
    float ms = 0;
    PROG_CHECK(cuEventElapsedTime(&ms, a, b));
    printf("kernel_us %.0f\n", ms * 1e3);
    printf("launches %d\n", 1);
    return 0;
}
