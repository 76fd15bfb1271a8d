/* NVML through dlopen (see posstat_nvml.h). The few entry points posstat uses are declared
 * here as NVML's documented C API has them (all return nvmlReturn_t, 0 = NVML_SUCCESS), so no
 * NVML header or library is needed to build. */
#include "tools/posstat_nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>

typedef void *nvml_device;
struct nvml_utilization {
    unsigned gpu, memory; /* percent over the driver's last sample period */
};
struct nvml_memory {
    unsigned long long total, free, used; /* bytes */
};
#define NVML_CLOCK_SM 1

static struct {
    int tried, ok;
    int (*get_handle)(unsigned, nvml_device *);
    int (*get_utilization)(nvml_device, struct nvml_utilization *);
    int (*get_memory)(nvml_device, struct nvml_memory *);
    int (*get_power)(nvml_device, unsigned *); /* milliwatts */
    int (*get_clock)(nvml_device, int, unsigned *);
} nvml;

static int nvml_open(void)
{
    if (nvml.tried)
        return nvml.ok;
    nvml.tried = 1;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 0;
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    *(void **)&nvml.get_handle = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&nvml.get_utilization = dlsym(h, "nvmlDeviceGetUtilizationRates");
    *(void **)&nvml.get_memory = dlsym(h, "nvmlDeviceGetMemoryInfo");
    *(void **)&nvml.get_power = dlsym(h, "nvmlDeviceGetPowerUsage");
    *(void **)&nvml.get_clock = dlsym(h, "nvmlDeviceGetClockInfo");
    nvml.ok = init && nvml.get_handle && init() == 0;
    return nvml.ok;
}

int posstat_nvml_read(unsigned index, struct posstat_gpu *g)
{
    *g = (struct posstat_gpu){.valid = 0, .index = index};
    g->util_pct = g->mem_used_mib = g->mem_total_mib = g->power_w = g->sm_clock_mhz = NAN;
    nvml_device dev;
    if (!nvml_open() || nvml.get_handle(index, &dev) != 0)
        return -ENOENT;
    g->valid = 1;
    struct nvml_utilization u;
    if (nvml.get_utilization && nvml.get_utilization(dev, &u) == 0)
        g->util_pct = u.gpu;
    struct nvml_memory m;
    if (nvml.get_memory && nvml.get_memory(dev, &m) == 0) {
        g->mem_used_mib = (double)m.used / 1048576.0;
        g->mem_total_mib = (double)m.total / 1048576.0;
    }
    unsigned mw, mhz;
    if (nvml.get_power && nvml.get_power(dev, &mw) == 0)
        g->power_w = mw / 1000.0;
    if (nvml.get_clock && nvml.get_clock(dev, NVML_CLOCK_SM, &mhz) == 0)
        g->sm_clock_mhz = mhz;
    return 0;
}
