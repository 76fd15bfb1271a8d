/* The device-memory entry points (docs/memory.md has the table): each allocation is reserved
 * against posd's limit before the driver is asked, committed or given back after its answer,
 * and released at its free; module and library loads are measured (this process's own usage
 * by NVML under a limit, else the driver's free memory, before and after). Host memory, and
 * every other location of cuMemCreate or of a pool, goes to the driver untouched, as do frees
 * of what the shim never saw. Errors come back unchanged; a refusal is
 * CUDA_ERROR_OUT_OF_MEMORY, as from a full device. */
#include "pos/client_shm.h"
#include "shim/shim.h"

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    unsigned __int128 p = (unsigned __int128)a * b;
    return p > UINT64_MAX ? UINT64_MAX : (uint64_t)p;
}

static uint64_t ctx_now(void)
{
    return shim_current_ctx();
}

/* ---- linear, pitched and managed memory ---------------------------------------------------- */

/* Reserves BYTES on the current device, calls CALL (which sets *KEYP), settles as KIND. */
#define ALLOC_ON(dev, bytes, kind, space, keyp, what, call)                                        \
    ({                                                                                             \
        struct shim_mem_hold h_;                                                                   \
        CUresult rc_ = shim_mem_reserve(&h_, (dev), (bytes), (what));                              \
        if (rc_ == CUDA_SUCCESS) {                                                                 \
            rc_ = (call);                                                                          \
            rc_ = shim_mem_settle(rc_, &h_, (kind), (space),                                       \
                                  rc_ == CUDA_SUCCESS ? (uint64_t)*(keyp) : 0, ctx_now());        \
        }                                                                                          \
        rc_;                                                                                       \
    })

SHIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n)
{
    __typeof__(&cuMemAlloc_v2) real = SHIM_REAL(cuMemAlloc_v2);
    if (!shim_active || !dptr)
        return real(dptr, n);
    return ALLOC_ON(shim_mem_current_device(), n, POS_MEM_LINEAR, SHIM_MEM_DPTR, dptr, "cuMemAlloc",
                    real(dptr, n));
}

/* the 32-bit ABI, still exported by NVIDIA's driver */
SHIM_API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int n)
{
    __typeof__(&cuMemAlloc) real = SHIM_REAL(cuMemAlloc);
    if (!shim_active || !dptr)
        return real(dptr, n);
    return ALLOC_ON(shim_mem_current_device(), n, POS_MEM_LINEAR, SHIM_MEM_DPTR, dptr, "cuMemAlloc",
                    real(dptr, n));
}

SHIM_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned int flags)
{
    __typeof__(&cuMemAllocManaged) real = SHIM_REAL(cuMemAllocManaged);
    if (!shim_active || !dptr)
        return real(dptr, n, flags);
    return ALLOC_ON(shim_mem_current_device(), n, POS_MEM_MANAGED, SHIM_MEM_DPTR, dptr,
                    "cuMemAllocManaged", real(dptr, n, flags));
}

/* A pitched allocation is reserved as WIDTH x HEIGHT; the pitch's padding, known only after,
 * is charged on top (docs/memory.md). */
#define PITCH_WRAPPER(sym, ptr_t, size_t_)                                                         \
    SHIM_API CUresult sym(ptr_t *dptr, size_t_ *pitch, size_t_ w, size_t_ hgt, unsigned int elem)  \
    {                                                                                              \
        __typeof__(&sym) real = SHIM_REAL(sym);                                                    \
        if (!shim_active || !dptr || !pitch)                                                       \
            return real(dptr, pitch, w, hgt, elem);                                                \
        struct shim_mem_hold h;                                                                    \
        if (shim_mem_reserve(&h, shim_mem_current_device(), mul_sat(w, hgt), "cuMemAllocPitch") != \
            CUDA_SUCCESS)                                                                          \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                       \
        CUresult rc = real(dptr, pitch, w, hgt, elem);                                             \
        if (rc == CUDA_SUCCESS && *pitch > w)                                                      \
            shim_mem_grow(&h, mul_sat(*pitch - w, hgt));                                           \
        return shim_mem_settle(rc, &h, POS_MEM_PITCHED, SHIM_MEM_DPTR,                             \
                               rc == CUDA_SUCCESS ? (uint64_t)*dptr : 0, ctx_now());               \
    }
PITCH_WRAPPER(cuMemAllocPitch_v2, CUdeviceptr, size_t)
PITCH_WRAPPER(cuMemAllocPitch, CUdeviceptr_v1, unsigned int)

/* Any free of KEY of SPACE: what the shim charged for it is released once the driver has
 * freed it (taken out of the map before, so that an address the driver hands out again at once
 * is never confused with it). */
#define FREE_KEY(space, key, call)                                                                  \
    ({                                                                                             \
        struct shim_mem_entry e_;                                                                  \
        int known_ = shim_active && (key) && shim_mem_take((space), (key), &e_);                   \
        CUresult rc_ = (call);                                                                     \
        known_ ? shim_mem_untake(rc_, &e_) : rc_;                                                  \
    })

SHIM_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    __typeof__(&cuMemFree_v2) real = SHIM_REAL(cuMemFree_v2);
    return FREE_KEY(SHIM_MEM_DPTR, (uint64_t)dptr, real(dptr));
}

SHIM_API CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    __typeof__(&cuMemFree) real = SHIM_REAL(cuMemFree);
    return FREE_KEY(SHIM_MEM_DPTR, (uint64_t)dptr, real(dptr));
}

/* ---- stream-ordered allocation and pools ---------------------------------------------------
 * A pool charges its live allocations, each from its cuMemAlloc*Async to its free, not the
 * memory the pool keeps reserved (docs/memory.md): trimming changes nothing, and a pool the
 * process created is remembered only for its location (a host pool is not counted). */

#define ASYNC_WRAPPER(sym)                                                                         \
    SHIM_API CUresult sym(CUdeviceptr *dptr, size_t n, CUstream stream)                            \
    {                                                                                              \
        __typeof__(&sym) real = SHIM_REAL(sym);                                                    \
        if (!shim_active || !dptr)                                                                 \
            return real(dptr, n, stream);                                                          \
        return ALLOC_ON(shim_mem_current_device(), n, POS_MEM_POOL, SHIM_MEM_DPTR, dptr,           \
                        "cuMemAllocAsync", real(dptr, n, stream));                                 \
    }
ASYNC_WRAPPER(cuMemAllocAsync)
ASYNC_WRAPPER(cuMemAllocAsync_ptsz)

/* The device a pool allocates on: its location when the process created it (-1: a host
 * location, not counted), else the current device (a device's default or current pool). */
static int pool_device(CUmemoryPool pool)
{
    struct shim_mem_entry e;
    if (shim_mem_lookup(SHIM_MEM_POOL, (uint64_t)(uintptr_t)pool, &e))
        return e.ref ? (int)e.ref - 1 : -1;
    return shim_mem_current_device();
}

#define POOL_ASYNC_WRAPPER(sym)                                                                    \
    SHIM_API CUresult sym(CUdeviceptr *dptr, size_t n, CUmemoryPool pool, CUstream stream)         \
    {                                                                                              \
        __typeof__(&sym) real = SHIM_REAL(sym);                                                    \
        if (!shim_active || !dptr)                                                                 \
            return real(dptr, n, pool, stream);                                                    \
        return ALLOC_ON(pool_device(pool), n, POS_MEM_POOL, SHIM_MEM_DPTR, dptr,                   \
                        "cuMemAllocFromPoolAsync", real(dptr, n, pool, stream));                   \
    }
POOL_ASYNC_WRAPPER(cuMemAllocFromPoolAsync)
POOL_ASYNC_WRAPPER(cuMemAllocFromPoolAsync_ptsz)

/* released when the free is queued: the pool may keep the memory, the process no longer has it */
SHIM_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    __typeof__(&cuMemFreeAsync) real = SHIM_REAL(cuMemFreeAsync);
    return FREE_KEY(SHIM_MEM_DPTR, (uint64_t)dptr, real(dptr, stream));
}

SHIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    __typeof__(&cuMemFreeAsync_ptsz) real = SHIM_REAL(cuMemFreeAsync_ptsz);
    return FREE_KEY(SHIM_MEM_DPTR, (uint64_t)dptr, real(dptr, stream));
}

SHIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    CUresult rc = SHIM_REAL(cuMemPoolCreate)(pool, props);
    if (rc == CUDA_SUCCESS && shim_active && pool && props) {
        /* the ref is the pool's device + 1, 0 for a pool on no device */
        int dev = props->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? props->location.id : -1;
        shim_mem_note(SHIM_MEM_POOL, (uint64_t)(uintptr_t)*pool,
                      dev < 0 ? 0 : (uint64_t)dev + 1);
    }
    return rc;
}

SHIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    return FREE_KEY(SHIM_MEM_POOL, (uint64_t)(uintptr_t)pool, SHIM_REAL(cuMemPoolDestroy)(pool));
}

/* The size of the allocation at DPTR, as the driver gives it; 0 if it does not. */
static uint64_t range_size(CUdeviceptr dptr)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    if (!shim_real_cuMemGetAddressRange_v2 ||
        shim_real_cuMemGetAddressRange_v2(&base, &size, dptr) != CUDA_SUCCESS)
        return 0;
    return size;
}

/* Imported memory (another process's allocation): shown as IPC, held against its exporter. */
static CUresult imported(CUresult rc, CUdeviceptr *dptr)
{
    if (rc == CUDA_SUCCESS && shim_active && dptr && *dptr)
        shim_mem_charge(shim_mem_current_device(), range_size(*dptr), POS_MEM_IPC, SHIM_MEM_DPTR,
                        (uint64_t)*dptr, ctx_now());
    return rc;
}

SHIM_API CUresult cuMemPoolImportPointer(CUdeviceptr *dptr, CUmemoryPool pool,
                                         CUmemPoolPtrExportData *data)
{
    return imported(SHIM_REAL(cuMemPoolImportPointer)(dptr, pool, data), dptr);
}

/* ---- IPC ------------------------------------------------------------------------------------ */

SHIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle,
                                        unsigned int flags)
{
    return imported(SHIM_REAL(cuIpcOpenMemHandle_v2)(dptr, handle, flags), dptr);
}

SHIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
    return imported(SHIM_REAL(cuIpcOpenMemHandle)(dptr, handle, flags), dptr);
}

SHIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    __typeof__(&cuIpcCloseMemHandle) real = SHIM_REAL(cuIpcCloseMemHandle);
    return FREE_KEY(SHIM_MEM_DPTR, (uint64_t)dptr, real(dptr));
}

/* ---- virtual memory management --------------------------------------------------------------
 * cuMemCreate of device memory charges its size to that device; every other location (host,
 * host NUMA) goes to the driver with no lock taken and nothing noted. A handle's charge lasts
 * until it is released (every reference: create, retain) and unmapped (every mapping):
 * cuMemMap and cuMemUnmap only count mappings, the physical memory is charged once. */

SHIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                              const CUmemAllocationProp *prop, unsigned long long flags)
{
    __typeof__(&cuMemCreate) real = SHIM_REAL(cuMemCreate);
    if (!shim_active || !handle || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return real(handle, size, prop, flags);
    struct shim_mem_hold h;
    if (shim_mem_reserve(&h, prop->location.id, size, "cuMemCreate") != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(handle, size, prop, flags);
    return shim_mem_settle(rc, &h, POS_MEM_VMM, SHIM_MEM_VMM,
                           rc == CUDA_SUCCESS ? (uint64_t)*handle : 0, 0);
}

SHIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    __typeof__(&cuMemRelease) real = SHIM_REAL(cuMemRelease);
    struct shim_mem_entry e;
    if (!shim_active || !shim_mem_take(SHIM_MEM_VMM, (uint64_t)handle, &e))
        return real(handle);
    CUresult rc = real(handle);
    if (rc == CUDA_SUCCESS && (e.refs > 1 || e.maps > 0)) {
        /* still referenced or mapped: it stays charged */
        e.refs--;
        shim_mem_restore(&e);
        return rc;
    }
    return shim_mem_untake(rc, &e);
}

SHIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult rc = SHIM_REAL(cuMemRetainAllocationHandle)(handle, addr);
    if (rc == CUDA_SUCCESS && shim_active && handle)
        shim_mem_adjust(SHIM_MEM_VMM, (uint64_t)*handle, 1, 0);
    return rc;
}

SHIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                           CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult rc = SHIM_REAL(cuMemMap)(ptr, size, offset, handle, flags);
    if (rc == CUDA_SUCCESS && shim_active && shim_mem_adjust(SHIM_MEM_VMM, (uint64_t)handle, 0, 1))
        shim_mem_note(SHIM_MEM_VMM_MAP, (uint64_t)ptr, (uint64_t)handle);
    return rc;
}

SHIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    __typeof__(&cuMemUnmap) real = SHIM_REAL(cuMemUnmap);
    struct shim_mem_entry e;
    if (!shim_active || !shim_mem_take(SHIM_MEM_VMM_MAP, (uint64_t)ptr, &e))
        return real(ptr, size);
    CUresult rc = real(ptr, size);
    shim_mem_untake(rc, &e);
    if (rc == CUDA_SUCCESS)
        shim_mem_adjust(SHIM_MEM_VMM, e.ref, 0, -1);
    return rc;
}

/* ---- arrays --------------------------------------------------------------------------------
 * Charged as their descriptor's bytes (width x height x depth x channels x element size, every
 * level of a mipmapped array); the driver's alignment padding is not known to the shim. */

static uint64_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4; /* 32-bit formats, and those the shim does not size */
    }
}

static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned ch)
{
    return mul_sat(mul_sat(mul_sat(w, h ? h : 1), d ? d : 1), mul_sat(ch ? ch : 1, format_bytes(f)));
}

#define ARRAY_WRAPPER(sym, desc_t, bytes_expr)                                                     \
    SHIM_API CUresult sym(CUarray *arr, const desc_t *d)                                           \
    {                                                                                              \
        __typeof__(&sym) real = SHIM_REAL(sym);                                                    \
        if (!shim_active || !arr || !d)                                                            \
            return real(arr, d);                                                                   \
        return ALLOC_ON(shim_mem_current_device(), (bytes_expr), POS_MEM_ARRAY, SHIM_MEM_ARRAY,    \
                        arr, #sym, real(arr, d));                                                  \
    }
ARRAY_WRAPPER(cuArrayCreate_v2, CUDA_ARRAY_DESCRIPTOR,
              array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels))
ARRAY_WRAPPER(cuArrayCreate, CUDA_ARRAY_DESCRIPTOR_v1,
              array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels))
ARRAY_WRAPPER(cuArray3DCreate_v2, CUDA_ARRAY3D_DESCRIPTOR,
              array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels))
ARRAY_WRAPPER(cuArray3DCreate, CUDA_ARRAY3D_DESCRIPTOR_v1,
              array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels))

SHIM_API CUresult cuArrayDestroy(CUarray arr)
{
    return FREE_KEY(SHIM_MEM_ARRAY, (uint64_t)(uintptr_t)arr, SHIM_REAL(cuArrayDestroy)(arr));
}

static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    uint64_t w = d->Width, h = d->Height, depth = d->Depth, sum = 0;
    int layered = (d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
    for (unsigned l = 0; l < (levels ? levels : 1); l++) {
        uint64_t b = array_bytes(w, h, depth, d->Format, d->NumChannels);
        sum = sum > UINT64_MAX - b ? UINT64_MAX : sum + b;
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        if (!layered)
            depth = depth > 1 ? depth / 2 : depth;
    }
    return sum;
}

SHIM_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                         unsigned int levels)
{
    __typeof__(&cuMipmappedArrayCreate) real = SHIM_REAL(cuMipmappedArrayCreate);
    if (!shim_active || !arr || !d)
        return real(arr, d, levels);
    return ALLOC_ON(shim_mem_current_device(), mipmap_bytes(d, levels), POS_MEM_ARRAY,
                    SHIM_MEM_MIPMAP, arr, "cuMipmappedArrayCreate",
                    real(arr, d, levels));
}

SHIM_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr)
{
    return FREE_KEY(SHIM_MEM_MIPMAP, (uint64_t)(uintptr_t)arr, SHIM_REAL(cuMipmappedArrayDestroy)(arr));
}

/* ---- cuMemGetInfo ------------------------------------------------------------------------- */

SHIM_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    CUresult rc = SHIM_REAL(cuMemGetInfo_v2)(free_bytes, total);
    if (rc == CUDA_SUCCESS && shim_active && free_bytes && total) {
        uint64_t f = *free_bytes, t = *total;
        shim_mem_info(shim_mem_current_device(), &f, &t);
        *free_bytes = f;
        *total = t;
    }
    return rc;
}

SHIM_API CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total)
{
    CUresult rc = SHIM_REAL(cuMemGetInfo)(free_bytes, total);
    if (rc == CUDA_SUCCESS && shim_active && free_bytes && total) {
        uint64_t f = *free_bytes, t = *total;
        shim_mem_info(shim_mem_current_device(), &f, &t);
        *free_bytes = (unsigned int)f;
        *total = (unsigned int)t;
    }
    return rc;
}

/* ---- modules and libraries: measured -------------------------------------------------------
 * Under a limit, where NVML lists this process on the current device with its usage, the
 * growth of that usage over the load; else the driver's free memory on the device before and
 * after it. The difference, when the load succeeded and it is positive, is the module's, and
 * never more than the driver says was taken from the device in that window. The device-wide
 * figure alone counts another process that allocates (or frees) in between too (larger,
 * smaller; docs/memory.md). */

struct measure {
    int dev, ok;
    uint64_t before;
    struct shim_own own;
};

static void measure_begin(struct measure *m)
{
    m->dev = shim_active ? shim_mem_current_device() : -1;
    m->ok = m->dev >= 0 && shim_mem_driver_free(m->dev, &m->before) == 0;
    m->own.have = -1;
    if (m->ok)
        shim_own_begin(&m->own, m->dev);
}

static CUresult measure_end(const struct measure *m, CUresult rc, int space, uint64_t key,
                            uint64_t ctx)
{
    uint64_t after, taken;
    if (rc == CUDA_SUCCESS && m->ok && shim_mem_driver_free(m->dev, &after) == 0 &&
        m->before > after) {
        const char *own = shim_own_charge(&m->own, m->dev, m->before - after, &taken);
        if (shim_cfg.debug)
            shim_log("%s %#llx on device %d: %llu bytes (%s)",
                     space == SHIM_MEM_MODULE ? "module" : "library", (unsigned long long)key,
                     m->dev, (unsigned long long)taken,
                     own ? own : "the driver's free memory before and after");
        if (taken)
            shim_mem_charge(m->dev, taken, POS_MEM_MODULE, space, key, ctx);
    }
    return rc;
}

#define MODULE_LOAD(sym, params, args)                                                             \
    SHIM_API CUresult sym params                                                                   \
    {                                                                                              \
        struct measure m;                                                                          \
        measure_begin(&m);                                                                         \
        CUresult rc = SHIM_REAL(sym) args;                                                         \
        return measure_end(&m, rc, SHIM_MEM_MODULE, rc == CUDA_SUCCESS ? (uintptr_t)*module : 0,   \
                           ctx_now());                                                             \
    }
MODULE_LOAD(cuModuleLoad, (CUmodule * module, const char *fname), (module, fname))
MODULE_LOAD(cuModuleLoadData, (CUmodule * module, const void *image), (module, image))
MODULE_LOAD(cuModuleLoadDataEx,
            (CUmodule * module, const void *image, unsigned int n, CUjit_option *opts, void **vals),
            (module, image, n, opts, vals))
MODULE_LOAD(cuModuleLoadFatBinary, (CUmodule * module, const void *fatbin), (module, fatbin))

SHIM_API CUresult cuModuleUnload(CUmodule module)
{
    return FREE_KEY(SHIM_MEM_MODULE, (uint64_t)(uintptr_t)module, SHIM_REAL(cuModuleUnload)(module));
}

/* a library is no context's: charged to the device current at its load, with no context */
#define LIBRARY_LOAD(sym, what_t)                                                                  \
    SHIM_API CUresult sym(CUlibrary *library, what_t code, CUjit_option *jo, void **jv,           \
                          unsigned int njo, CUlibraryOption *lo, void **lv, unsigned int nlo)      \
    {                                                                                              \
        struct measure m;                                                                          \
        measure_begin(&m);                                                                         \
        CUresult rc = SHIM_REAL(sym)(library, code, jo, jv, njo, lo, lv, nlo);                     \
        return measure_end(&m, rc, SHIM_MEM_LIBRARY,                                               \
                           rc == CUDA_SUCCESS && library ? (uintptr_t)*library : 0, 0);            \
    }
LIBRARY_LOAD(cuLibraryLoadData, const void *)
LIBRARY_LOAD(cuLibraryLoadFromFile, const char *)

SHIM_API CUresult cuLibraryUnload(CUlibrary library)
{
    return FREE_KEY(SHIM_MEM_LIBRARY, (uint64_t)(uintptr_t)library, SHIM_REAL(cuLibraryUnload)(library));
}
