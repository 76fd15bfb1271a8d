/* A stand-in libnvidia-ml.so.1 for the shim's memory tests: the one device the simulated driver
 * presents, by its UUID (cuDeviceGetUuid_v2, written as NVML writes one) and its memory
 * (cuDeviceTotalMem_v2 total; free = total less what every process holds on it,
 * pos_sim_mem_used), so that the shim's NVML wrappers can map it to CUDA device 0 and be compared
 * with cuMemGetInfo, and the shim can measure a first context with it; and its compute processes
 * (nvmlDeviceGetComputeRunningProcesses _v3, _v2 and the plain one), by which the shim measures
 * a context or module as this process's own usage. The simulated driver tells the calling
 * process's usage only (pos_sim_mem_used's MINE), so only the calling process is listed, with
 * it, and only once it holds some (as NVML lists a process with a context); POS_FAKE_NVML_PROCS
 * "none" lists nobody (as NVML in a container whose pids it reports in the host's namespace
 * looks to the shim) and "na" gives NVML_VALUE_NOT_AVAILABLE as its usage. The process must have
 * loaded the driver. Entry points have NVML's documented C signatures; 0 is
 * NVML_SUCCESS. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_memory_v2 {
    unsigned int version;
    unsigned long long total, reserved, free, used;
};

#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_UNKNOWN          999
#define FAKE_DEVICE                 ((void *)0x5e1)

static void *driver_fn(const char *name)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    void *fn = h ? dlsym(h, name) : NULL;
    if (h)
        dlclose(h);
    return fn;
}

int nvmlInit_v2(void)
{
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **dev)
{
    if (index != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *dev = FAKE_DEVICE;
    return 0;
}

int nvmlDeviceGetUUID(void *dev, char *uuid, unsigned int len)
{
    CUresult (*get)(CUuuid *, CUdevice);
    void *p = driver_fn("cuDeviceGetUuid_v2");
    memcpy(&get, &p, sizeof get);
    CUuuid u;
    if (dev != FAKE_DEVICE || !get || get(&u, 0) != CUDA_SUCCESS)
        return NVML_ERROR_UNKNOWN;
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(uuid, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    return 0;
}

int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev)
{
    char mine[96];
    if (nvmlDeviceGetUUID(FAKE_DEVICE, mine, sizeof mine) != 0 || strcmp(mine, uuid) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *dev = FAKE_DEVICE;
    return 0;
}

static int figures(void *dev, unsigned long long *total, unsigned long long *freeb,
                   unsigned long long *mine_out)
{
    CUresult (*tot)(size_t *, CUdevice);
    void *p = driver_fn("cuDeviceTotalMem_v2");
    memcpy(&tot, &p, sizeof tot);
    size_t t = 0;
    if (dev != FAKE_DEVICE || !tot || tot(&t, 0) != CUDA_SUCCESS)
        return NVML_ERROR_UNKNOWN;
    CUresult (*used_fn)(CUdevice, unsigned long long *, unsigned long long *);
    p = driver_fn("pos_sim_mem_used");
    memcpy(&used_fn, &p, sizeof used_fn);
    unsigned long long used = 0, mine = 0;
    if (!used_fn || used_fn(0, &used, &mine) != CUDA_SUCCESS)
        return NVML_ERROR_UNKNOWN;
    *total = t;
    *freeb = used < t ? t - used : 0;
    if (mine_out)
        *mine_out = mine;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *dev, struct nvml_memory *m)
{
    int rc = figures(dev, &m->total, &m->free, NULL);
    m->used = m->total - m->free;
    return rc;
}

int nvmlDeviceGetMemoryInfo_v2(void *dev, struct nvml_memory_v2 *m)
{
    int rc = figures(dev, &m->total, &m->free, NULL);
    m->reserved = 0;
    m->used = m->total - m->free;
    return rc;
}

/* nvml.h's nvmlProcessInfo_v1_t and nvmlProcessInfo_t (_v2 and _v3) */
struct nvml_proc_v1 {
    unsigned int pid;
    unsigned long long usedGpuMemory;
};
struct nvml_proc_v2 {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
};

#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE     (~0ULL)

/* The calling process, when it holds memory on the device: how many are listed (0 or 1). */
static int procs(void *dev, unsigned int *count, unsigned int *pid, unsigned long long *used)
{
    unsigned long long t, f, mine = 0;
    int rc = figures(dev, &t, &f, &mine);
    if (rc != 0)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    const char *how = getenv("POS_FAKE_NVML_PROCS");
    int n = mine > 0 && !(how && strcmp(how, "none") == 0);
    if (*count < (unsigned)n) {
        *count = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = (unsigned)n;
    *pid = (unsigned)getpid();
    *used = how && strcmp(how, "na") == 0 ? NVML_VALUE_NOT_AVAILABLE : mine;
    return n;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned int *count,
                                            struct nvml_proc_v2 *infos)
{
    unsigned int pid;
    unsigned long long used;
    int n = procs(dev, count, &pid, &used);
    if (n == 1)
        infos[0] = (struct nvml_proc_v2){.pid = pid, .usedGpuMemory = used,
                                         .gpuInstanceId = ~0u, .computeInstanceId = ~0u};
    return n < 0 || n > 1 ? n : 0;
}

int nvmlDeviceGetComputeRunningProcesses_v2(void *dev, unsigned int *count,
                                            struct nvml_proc_v2 *infos)
{
    return nvmlDeviceGetComputeRunningProcesses_v3(dev, count, infos);
}

int nvmlDeviceGetComputeRunningProcesses(void *dev, unsigned int *count,
                                         struct nvml_proc_v1 *infos)
{
    unsigned int pid;
    unsigned long long used;
    int n = procs(dev, count, &pid, &used);
    if (n == 1)
        infos[0] = (struct nvml_proc_v1){.pid = pid, .usedGpuMemory = used};
    return n < 0 || n > 1 ? n : 0;
}
