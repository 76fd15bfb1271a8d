/* A stand-in libnvidia-ml.so.1 for the shim's memory tests: the one device the simulated driver
 * presents, by its UUID (cuDeviceGetUuid_v2, written as NVML writes one) and its memory
 * (cuDeviceTotalMem_v2 total; free = total less what every process holds on it,
 * pos_sim_mem_used), so that the shim's NVML wrappers can map it to CUDA device 0 and be compared
 * with cuMemGetInfo, and the shim can measure a first context with it. The process must have
 * loaded the driver. Entry points have NVML's documented C signatures; 0 is
 * NVML_SUCCESS. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

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

static int figures(void *dev, unsigned long long *total, unsigned long long *freeb)
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
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *dev, struct nvml_memory *m)
{
    int rc = figures(dev, &m->total, &m->free);
    m->used = m->total - m->free;
    return rc;
}

int nvmlDeviceGetMemoryInfo_v2(void *dev, struct nvml_memory_v2 *m)
{
    int rc = figures(dev, &m->total, &m->free);
    m->reserved = 0;
    m->used = m->total - m->free;
    return rc;
}
