/* A stand-in libnvidia-ml.so.1 for posstat's tests: one GPU with fixed figures, so that the
 * dlopen path of tools/posstat_nvml.c is exercised on a machine without NVIDIA's driver.
 * The entry points have NVML's documented C signatures; 0 is NVML_SUCCESS. */
struct nvml_utilization {
    unsigned gpu, memory;
};
struct nvml_memory {
    unsigned long long total, free, used;
};

int nvmlInit_v2(void)
{
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **dev)
{
    *dev = (void *)0x1;
    return index == 0 ? 0 : 2; /* NVML_ERROR_INVALID_ARGUMENT */
}

int nvmlDeviceGetUtilizationRates(void *dev, struct nvml_utilization *u)
{
    u->gpu = 42;
    u->memory = 7;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *dev, struct nvml_memory *m)
{
    m->total = 80ull << 30;
    m->used = 1536ull << 20;
    m->free = m->total - m->used;
    return 0;
}

int nvmlDeviceGetPowerUsage(void *dev, unsigned *mw)
{
    *mw = 123456;
    return 0;
}

int nvmlDeviceGetClockInfo(void *dev, int type, unsigned *mhz)
{
    *mhz = type == 1 ? 1980 : 0;
    return 0;
}
