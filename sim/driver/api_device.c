/* Initialisation, driver version, the device and its attributes, and error names: the
 * entry points a program calls before it has a context. */
#include "sim/driver/drv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
    /* CUDA cannot be used in a child forked after initialisation; the parent's device state
     * stays the parent's. */
    if (atomic_load(&drv.initialized))
        drv.forked = 1;
}

static void do_init(void)
{
    drv.local = calloc(SIM_MAX_OPS, sizeof *drv.local);
    if (!drv.local) {
        drv.init_result = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    CUresult rc = drv_attach();
    if (rc == CUDA_SUCCESS)
        rc = drv_agent_start();
    drv.init_result = rc;
    if (rc == CUDA_SUCCESS) {
        pthread_atfork(NULL, NULL, fork_child);
        atomic_store(&drv.initialized, 1);
        /* what a real MPS client would take as its share here (tests check the shim set it
         * before the driver started) */
        if (drv.g->p.mode == SIM_MODE_MPS) {
            const char *v = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
            drv_debug("cuInit in mps mode: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s",
                      v ? v : "(unset)");
        }
    }
}

API CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (drv.forked)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_once(&init_once, do_init);
    return (CUresult)drv.init_result;
}

API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* ---- devices ---------------------------------------------------------------------------- */

API CUresult cuDeviceGetCount(int *count)
{
    CUresult rc = drv_enter(count != NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    *count = 1;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = drv_enter(device != NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = drv_enter_dev(name && len > 0, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    snprintf(name, (size_t)len, "%s", drv.g->p.name);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = drv_enter_dev(bytes != NULL, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    *bytes = drv.g->p.mem_bytes;
    return CUDA_SUCCESS;
}

/* The 32-bit ABI of CUDA 3.1 and before: above 4 GiB, clamped. */
API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t b;
    CUresult rc = cuDeviceTotalMem_v2(bytes ? &b : NULL, dev);
    if (rc == CUDA_SUCCESS)
        *bytes = b > UINT32_MAX ? UINT32_MAX : (unsigned)b;
    return rc;
}

API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    CUresult rc = drv_enter_dev(uuid != NULL, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    memset(uuid, 0, sizeof *uuid);
    snprintf(uuid->bytes, sizeof uuid->bytes, "pos-sim-%.7s", drv.g->p.preset);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

/* Value of one attribute; returns 0 when known. */
static int device_attribute(CUdevice_attribute a, int *v)
{
    const struct sim_dev_params *p = &drv.g->p;
    int integrated = strncmp(p->preset, "xavier", 6) == 0 || strncmp(p->preset, "orin", 4) == 0;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *v = (int)p->max_threads_per_block;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        *v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        *v = 64;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        *v = 2147483647;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        *v = 65535;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        *v = 48 * 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        *v = (int)p->smem_per_block;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        *v = (int)p->smem_per_sm;
        break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
        *v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        *v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
        *v = 2147483647;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        *v = (int)p->regs_per_sm;
        break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        *v = (int)p->clock_khz;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        *v = (int)p->mem_clock_khz;
        break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        *v = (int)p->mem_bus_width;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        *v = (int)p->num_sms;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        *v = (int)p->max_threads_per_sm;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        *v = (int)p->max_blocks_per_sm;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *v = p->cc_major;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *v = p->cc_minor;
        break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
        *v = integrated;
        break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
        *v = 2;
        break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
        *v = 4 * 1024 * 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
        *v = 512;
        break;
    default:
        return -1;
    }
    return 0;
}

API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = drv_enter_dev(pi != NULL, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (device_attribute(attrib, pi) == 0)
        return CUDA_SUCCESS;
    if ((int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    /* An attribute of cuda.h the model has no figure for (textures, surfaces, interop, ...):
     * the simulated device lacks the feature, as 0 says. */
    static _Atomic unsigned char said[CU_DEVICE_ATTRIBUTE_MAX];
    if (!atomic_exchange(&said[attrib], 1))
        drv_debug("cuDeviceGetAttribute(%d): not modelled, answering 0", (int)attrib);
    *pi = 0;
    return CUDA_SUCCESS;
}

/* pos-sim's own query, which NVIDIA's driver does not have (a program finds it with dlsym):
 * whether kernels of different processes on DEV run at once (mps mode: *MPS = 1) or are
 * time-sliced (0). posd asks it to learn whether the simulated device behaves as a GPU under
 * MPS (docs/sim.md). */
API CUresult pos_sim_device_mps(CUdevice dev, int *mps)
{
    CUresult rc = drv_enter_dev(mps != NULL, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    *mps = drv.g->p.mode == SIM_MODE_MPS;
    return CUDA_SUCCESS;
}

/* ---- errors ------------------------------------------------------------------------------ */

struct err_entry {
    CUresult code;
    const char *name;
    const char *doc;
};

static const struct err_entry errors[] = {
#include "cu_errors.h"
};

/* The short strings the NVIDIA driver returns for the common codes. */
static const struct {
    CUresult code;
    const char *text;
} short_text[] = {
    {CUDA_SUCCESS, "no error"},
    {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"},
    {CUDA_ERROR_FILE_NOT_FOUND, "file not found"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"},
    {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
     "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
    {CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "context already in use"},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "primary context active"},
};

static const struct err_entry *find_error(CUresult error)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == error)
            return &errors[i];
    return NULL;
}

API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct err_entry *e = find_error(error);
    if (!e) {
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pStr = e->name;
    return CUDA_SUCCESS;
}

API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof short_text / sizeof short_text[0]; i++) {
        if (short_text[i].code == error) {
            *pStr = short_text[i].text;
            return CUDA_SUCCESS;
        }
    }
    const struct err_entry *e = find_error(error);
    if (!e) {
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pStr = e->doc;
    return CUDA_SUCCESS;
}
