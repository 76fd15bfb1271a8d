/* NVML's memory figures under posd's limit: nvmlDeviceGetMemoryInfo and _v2, when the process
 * loads NVML (linked, or dlopen and dlsym: the shim's dlsym hands out these wrappers), answer
 * what cuMemGetInfo answers on the same device (docs/memory.md). The NVML device is mapped to
 * its CUDA ordinal by UUID; without CUDA initialised, a device not found, or no limit, NVML's
 * own figures come back untouched, as do its errors. NVML also measures a device's first
 * context under a limit, where no context is there to ask the driver (shim_nvml_device_free),
 * and, under a limit, every context and module as this process's own usage among the device's
 * compute processes (shim_nvml_own_used), so that another process's memory taken meanwhile is
 * not charged. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pos/client_shm.h"
#include "shim/shim.h"

#define NVML_SUCCESS                  0
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_UUID_LEN                 96
#define CACHE_SLOTS                   16

/* NVML's documented structures (nvml.h) */
struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_memory_v2 {
    unsigned int version;
    unsigned long long total, reserved, free, used;
};

typedef int (*mem_fn)(void *dev, struct nvml_memory *m);
typedef int (*mem_v2_fn)(void *dev, struct nvml_memory_v2 *m);
typedef int (*uuid_fn)(void *dev, char *uuid, unsigned int len);

static void *real_mem, *real_mem_v2; /* NVML's own, as the shim's dlsym found them */

/* NVML device -> CUDA ordinal, learnt once each */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *dev;
    int ordinal;
} cache[CACHE_SLOTS];

/* NVML's function NAME: the one the shim's dlsym found, else the next definition after the
 * shim's (a linked NVML), else the loaded library's. */
static void *real_fn(void **slot, const char *name)
{
    void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (fn)
        return fn;
    fn = shim_real_dlsym(RTLD_NEXT, name);
    if (!fn) {
        void *h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            fn = shim_real_dlsym(h, name);
            dlclose(h);
        }
    }
    if (fn)
        __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
    return fn;
}

/* nvmlDeviceGetUUID from the library that REAL came from. */
static uuid_fn uuid_of(void *real)
{
    Dl_info info;
    if (!dladdr(real, &info) || !info.dli_fname)
        return NULL;
    void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return NULL;
    uuid_fn f;
    void *p = shim_real_dlsym(h, "nvmlDeviceGetUUID");
    memcpy(&f, &p, sizeof f);
    dlclose(h);
    return f;
}

/* CUDA's UUID of ORDINAL as NVML writes one ("GPU-" and 8-4-4-4-12 hex digits). */
static int cuda_uuid(int ordinal, char *out, size_t cap)
{
    CUdevice d;
    CUuuid u;
    if (!shim_real_cuDeviceGet || !shim_real_cuDeviceGetUuid_v2 ||
        shim_real_cuDeviceGet(&d, ordinal) != CUDA_SUCCESS ||
        shim_real_cuDeviceGetUuid_v2(&u, d) != CUDA_SUCCESS)
        return -1;
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(out, cap,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    return 0;
}

/* The CUDA ordinal of NVML device DEV, -1 when CUDA does not show it (or is not initialised). */
static int ordinal_of(void *dev, void *real)
{
    if (!shim_cuda_inited)
        return -1;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache[i].dev == dev) {
            int o = cache[i].ordinal;
            pthread_mutex_unlock(&cache_lock);
            return o;
        }
    pthread_mutex_unlock(&cache_lock);
    uuid_fn get_uuid = uuid_of(real);
    char want[NVML_UUID_LEN], have[NVML_UUID_LEN];
    int n = 0, found = -1;
    if (!get_uuid || get_uuid(dev, want, sizeof want) != NVML_SUCCESS || !shim_real_cuDeviceGetCount ||
        shim_real_cuDeviceGetCount(&n) != CUDA_SUCCESS)
        return -1;
    for (int o = 0; o < n && found < 0; o++)
        if (cuda_uuid(o, have, sizeof have) == 0 && strcmp(have, want) == 0)
            found = o;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (!cache[i].dev) {
            cache[i].dev = dev;
            cache[i].ordinal = found;
            break;
        }
    pthread_mutex_unlock(&cache_lock);
    return found;
}

/* NVML's TOTAL and FREE of DEV as cuMemGetInfo gives them on its CUDA device; 0 when changed. */
static int quota_view(void *dev, void *real, unsigned long long *total, unsigned long long *freeb)
{
    if (!shim_active)
        return -1;
    int o = ordinal_of(dev, real);
    if (o < 0 || shim_mem_limit(o) == POS_MEM_UNLIMITED)
        return -1;
    uint64_t f = *freeb, t = *total;
    shim_mem_info(o, &f, &t);
    *freeb = f;
    *total = t;
    return 0;
}

SHIM_API int nvmlDeviceGetMemoryInfo(void *dev, struct nvml_memory *m)
{
    mem_fn real;
    void *p = real_fn(&real_mem, "nvmlDeviceGetMemoryInfo");
    if (!p)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    memcpy(&real, &p, sizeof real);
    int rc = real(dev, m);
    if (rc == NVML_SUCCESS && m && quota_view(dev, p, &m->total, &m->free) == 0)
        m->used = m->total - m->free;
    return rc;
}

SHIM_API int nvmlDeviceGetMemoryInfo_v2(void *dev, struct nvml_memory_v2 *m)
{
    mem_v2_fn real;
    void *p = real_fn(&real_mem_v2, "nvmlDeviceGetMemoryInfo_v2");
    if (!p)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    memcpy(&real, &p, sizeof real);
    int rc = real(dev, m);
    if (rc == NVML_SUCCESS && m && quota_view(dev, p, &m->total, &m->free) == 0) {
        m->reserved = 0; /* the driver's reservation is outside the quota's view */
        m->used = m->total - m->free;
    }
    return rc;
}

void *shim_nvml_dlsym(const char *name, void *found)
{
    void **slot = strcmp(name, "nvmlDeviceGetMemoryInfo") == 0      ? &real_mem
                  : strcmp(name, "nvmlDeviceGetMemoryInfo_v2") == 0 ? &real_mem_v2
                                                                    : NULL;
    if (!slot || !found)
        return found;
    void *wrapper = slot == &real_mem ? (void *)nvmlDeviceGetMemoryInfo
                                      : (void *)nvmlDeviceGetMemoryInfo_v2;
    if (found != wrapper)
        __atomic_store_n(slot, found, __ATOMIC_RELEASE);
    return wrapper;
}

/* ---- NVML's device-wide free memory, for the first context of a device ------------------- */

static pthread_once_t own_once = PTHREAD_ONCE_INIT;
static void own_procs_find(void *h);
static mem_fn own_mem;                       /* NVML's own nvmlDeviceGetMemoryInfo */
static int (*own_by_uuid)(const char *, void **); /* nvmlDeviceGetHandleByUUID */

/* NVML for the shim's own use (once): loaded if the machine has it, and initialised (NVML counts
 * its initialisations: the process's own use of it is not disturbed). */
static void own_nvml(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    int (*init)(void);
    void *p = shim_real_dlsym(h, "nvmlInit_v2");
    memcpy(&init, &p, sizeof init);
    if (!init || init() != NVML_SUCCESS)
        return;
    p = shim_real_dlsym(h, "nvmlDeviceGetHandleByUUID");
    memcpy(&own_by_uuid, &p, sizeof own_by_uuid);
    p = shim_real_dlsym(h, "nvmlDeviceGetMemoryInfo");
    memcpy(&own_mem, &p, sizeof own_mem);
    own_procs_find(h);
}

int shim_nvml_device_free(int ordinal, uint64_t *free_bytes)
{
    pthread_once(&own_once, own_nvml);
    char uuid[NVML_UUID_LEN];
    void *dev = NULL;
    struct nvml_memory m;
    if (!own_mem || !own_by_uuid || cuda_uuid(ordinal, uuid, sizeof uuid) != 0 ||
        own_by_uuid(uuid, &dev) != NVML_SUCCESS || own_mem(dev, &m) != NVML_SUCCESS)
        return -1;
    *free_bytes = m.free;
    return 0;
}

/* ---- this process's own usage, for measuring a context or a module ------------------------ */

#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE     (~0ULL)
#define OWN_PROCS                    64

/* nvml.h's nvmlProcessInfo_v1_t (nvmlDeviceGetComputeRunningProcesses) and nvmlProcessInfo_t
 * (_v2 and _v3, the same layout) */
struct nvml_proc_v1 {
    unsigned int pid;
    unsigned long long used;
};
struct nvml_proc_v2 {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
};

typedef int (*procs_fn)(void *dev, unsigned int *count, void *infos);
static procs_fn own_procs; /* the newest of _v3, _v2 and the plain one NVML has */
static size_t own_proc_size;

static void own_procs_find(void *h)
{
    static const char *const names[] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                                        "nvmlDeviceGetComputeRunningProcesses_v2",
                                        "nvmlDeviceGetComputeRunningProcesses"};
    for (int i = 0; i < 3 && !own_procs; i++) {
        void *p = shim_real_dlsym(h, names[i]);
        memcpy(&own_procs, &p, sizeof own_procs);
        own_proc_size = i < 2 ? sizeof(struct nvml_proc_v2) : sizeof(struct nvml_proc_v1);
    }
}

int shim_nvml_own_used(int ordinal, uint64_t *used)
{
    pthread_once(&own_once, own_nvml);
    char uuid[NVML_UUID_LEN];
    void *dev = NULL;
    if (!own_mem || !own_by_uuid || !own_procs || cuda_uuid(ordinal, uuid, sizeof uuid) != 0 ||
        own_by_uuid(uuid, &dev) != NVML_SUCCESS)
        return -1;
    /* both layouts begin with pid and usedGpuMemory: read through the larger, stepped by the
     * size NVML writes */
    _Alignas(struct nvml_proc_v2) unsigned char buf[OWN_PROCS * sizeof(struct nvml_proc_v2)];
    unsigned int n = OWN_PROCS;
    int rc = own_procs(dev, &n, buf);
    if (rc != NVML_SUCCESS || n > OWN_PROCS)
        return -1; /* NVML_ERROR_INSUFFICIENT_SIZE included: more processes than we look at */
    unsigned int me = (unsigned int)getpid();
    for (unsigned int i = 0; i < n; i++) {
        struct nvml_proc_v1 e;
        memcpy(&e, buf + i * own_proc_size, sizeof e);
        if (e.pid != me)
            continue;
        if (e.used == NVML_VALUE_NOT_AVAILABLE)
            return -1;
        *used = e.used;
        return 1;
    }
    return 0;
}

const char *shim_own_charge(const struct shim_own *o, int dev, uint64_t wide, uint64_t *taken)
{
    uint64_t after = 0;
    *taken = wide;
    if (o->have < 0)
        return NULL;
    if (shim_nvml_own_used(dev, &after) != 1)
        return NULL; /* no figure for this process after: the device-wide one */
    uint64_t own = after > o->before ? after - o->before : 0;
    *taken = own < wide ? own : wide;
    return o->have ? "this process's NVML usage before and after"
                   : "this process's NVML usage after (none before)";
}

void shim_own_begin(struct shim_own *o, int dev)
{
    o->before = 0;
    o->have = -1;
    if (dev < 0 || shim_mem_limit(dev) == POS_MEM_UNLIMITED)
        return;
    o->have = shim_nvml_own_used(dev, &o->before);
    if (o->have == 0)
        o->before = 0;
}
