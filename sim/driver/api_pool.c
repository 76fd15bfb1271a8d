/* Stream-ordered memory: memory pools (the device's default and current pool, pools a program
 * creates, pools imported from another process), cuMemAllocAsync / cuMemAllocFromPoolAsync and
 * cuMemFreeAsync in stream order, the pool attributes, trimming, and the export of pools and
 * their pointers to other processes.
 *
 * What a pool holds on the device is its reserved memory: an allocation takes what the pool
 * has cached (reserved and unused) first and reserves (charges) only the rest; a free, when
 * its stream reaches it, returns the allocation to the pool, which then keeps at most
 * max(used, release threshold) reserved and gives the rest back to the device at once. (NVIDIA
 * gives it back at the next synchronisation; here it is the free's completion, which is no
 * later.) The default threshold is 0, so by default a completed free gives back everything
 * not in use. cuMemPoolTrimTo keeps max(used, minBytesToKeep). */
#include "sim/driver/drv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct drv_pool {
    CUmemoryPool handle;
    CUmemPoolProps props;
    int device;    /* its memory is device memory (charged); else host memory */
    int is_default;
    int imported;  /* from another process: only its pointers can be imported */
    int destroyed; /* cuMemPoolDestroy called: freed once nothing is in use */
    uint64_t id;   /* this process's numbering, named in exports */
    uint64_t reserved, used, reserved_high, used_high, threshold;
    int reuse[3]; /* CU_MEMPOOL_ATTR_REUSE_* */
    CUmemAccess_flags access;
    struct drv_share peer; /* imported: the exporter's pool */
    int peer_fd;           /* imported: the exporter's arena */
};

/* Guards every pool's figures and the default and current pools; taken before the device
 * lock, never the other way. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct drv_pool *default_pool[2], *current_pool[2]; /* [0] host, [1] device */
static uint64_t next_pool_id = 1;

static struct drv_pool *pool_new(const CUmemPoolProps *props, int device)
{
    struct drv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->props = *props;
    p->device = device;
    p->peer_fd = -1;
    p->access = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->handle = drv_handle_new(H_MEMPOOL, p);
    if (!p->handle) {
        free(p);
        return NULL;
    }
    p->id = next_pool_id++;
    return p;
}

/* The default pool of a location kind (1 device, 2 host), made on first use (caller holds
 * pool_lock). */
static struct drv_pool *default_of(int kind)
{
    int i = kind == 1;
    if (!default_pool[i]) {
        CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {i ? CU_MEM_LOCATION_TYPE_DEVICE
                                               : CU_MEM_LOCATION_TYPE_HOST,
                                             0}};
        default_pool[i] = pool_new(&props, i);
        if (default_pool[i])
            default_pool[i]->is_default = 1;
    }
    return default_pool[i];
}

static struct drv_pool *current_of(int kind)
{
    int i = kind == 1;
    return current_pool[i] ? current_pool[i] : default_of(kind);
}

/* Gives back what P holds beyond KEEP (and beyond its use) (caller holds pool_lock). */
static void pool_shrink(struct drv_pool *p, uint64_t keep)
{
    uint64_t floor = p->used > keep ? p->used : keep;
    if (p->reserved <= floor)
        return;
    uint64_t give = p->reserved - floor;
    p->reserved = floor;
    if (p->device && !p->imported)
        drv_mem_uncharge(give, CHARGE_ALLOC);
}

/* A destroyed pool with nothing in use goes (caller holds pool_lock). */
static void pool_maybe_free(struct drv_pool *p)
{
    if (!p->destroyed || p->used)
        return;
    pool_shrink(p, 0);
    if (p->peer_fd >= 0)
        close(p->peer_fd);
    free(p);
}

/* SIZE bytes of P back in the pool, then its release rule (caller holds pool_lock). */
static void pool_put(struct drv_pool *p, uint64_t size)
{
    p->used -= size < p->used ? size : p->used;
    pool_shrink(p, p->threshold);
    pool_maybe_free(p);
}

/* SIZE bytes of P for an allocation: from its cache, the rest reserved (charged). */
static CUresult pool_take(struct drv_pool *p, uint64_t size)
{
    pthread_mutex_lock(&pool_lock);
    CUresult rc = CUDA_SUCCESS;
    uint64_t cached = p->reserved - p->used;
    uint64_t need = size > cached ? size - cached : 0;
    uint64_t max = p->props.maxSize;
    if (max && (need > max || p->reserved > max - need))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else if (need && p->device)
        rc = drv_mem_charge(need, CHARGE_ALLOC);
    if (rc == CUDA_SUCCESS) {
        p->reserved += need;
        p->used += size;
        if (p->reserved > p->reserved_high)
            p->reserved_high = p->reserved;
        if (p->used > p->used_high)
            p->used_high = p->used;
    }
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

void drv_pool_free_region(const struct drv_region *r)
{
    struct drv_pool *p = r->obj;
    munmap((void *)r->base, r->size);
    if (r->how == ALLOC_POOL)
        drv_arena_release(r->off, r->size);
    pthread_mutex_lock(&pool_lock);
    pool_put(p, r->size);
    pthread_mutex_unlock(&pool_lock);
}

/* ---- allocation and free in stream order ------------------------------------------------- */

static CUresult pool_alloc(struct drv_pool *p, CUdeviceptr *dptr, size_t size, CUstream h,
                           int ptsz)
{
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_stream *s;
    CUresult rc = drv_api_stream(h, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (s->capture) /* allocation nodes are not modelled */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (p->imported || p->destroyed)
        return CUDA_ERROR_INVALID_VALUE;
    rc = pool_take(p, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_region r = {.kind = MEM_DEVICE, .how = ALLOC_POOL, .obj = p};
    rc = drv_arena_map_new(size, &r);
    if (rc == CUDA_SUCCESS && drv_region_add(&r) < 0) {
        munmap((void *)r.base, r.size);
        drv_arena_release(r.off, r.size);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_lock(&pool_lock);
        pool_put(p, size);
        pthread_mutex_unlock(&pool_lock);
        return rc;
    }
    *dptr = (CUdeviceptr)r.base;
    return CUDA_SUCCESS;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream h, int ptsz)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = current_of(1);
    pthread_mutex_unlock(&pool_lock);
    return pool_alloc(p, dptr, size, h, ptsz);
}

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream, 0);
}

API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream, 1);
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h,
                                int ptsz)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_pool *p = drv_handle_get(H_MEMPOOL, pool);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return pool_alloc(p, dptr, size, h, ptsz);
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                     CUstream hStream)
{
    return alloc_from_pool(dptr, bytesize, pool, hStream, 0);
}

API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                          CUstream hStream)
{
    return alloc_from_pool(dptr, bytesize, pool, hStream, 1);
}

/* The free as a host op in its stream: runs (in the agent) when the stream reaches it. */
static void free_when_reached(void *arg)
{
    struct drv_region *r = arg;
    drv_pool_free_region(r);
    free(r);
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, int ptsz)
{
    struct drv_stream *s;
    CUresult rc = drv_api_stream(h, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct drv_region *r = malloc(sizeof *r);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* taken from the registry now: a second free, or new work on the pointer, is refused */
    if (!dptr || (!drv_region_take((uintptr_t)dptr, MEM_DEVICE, ALLOC_POOL, r) &&
                  !drv_region_take((uintptr_t)dptr, MEM_DEVICE, ALLOC_POOL_IMPORT, r))) {
        free(r);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct drv_op_desc d;
    memset(&d, 0, sizeof d);
    d.kind = SIM_OP_HOST;
    d.effect = EFF_HOSTFN;
    d.u.host.fn = free_when_reached;
    d.u.host.data = r;
    if (drv_submit(s, &d, NULL) != CUDA_SUCCESS) {
        /* the stream cannot take it (a sticky error): free once its work is done */
        drv_sync_all();
        free_when_reached(r);
    }
    return CUDA_SUCCESS;
}

API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, 0);
}

API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, 1);
}

/* ---- pools ------------------------------------------------------------------------------ */

static CUresult props_check(const CUmemPoolProps *props, int *kind)
{
    if (!props || props->win32SecurityAttributes)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->allocType == CU_MEM_ALLOCATION_TYPE_MANAGED)
        return CUDA_ERROR_NOT_SUPPORTED; /* managed pools: the device has no such support */
    if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->handleTypes & CU_MEM_HANDLE_TYPE_FABRIC)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (props->handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    *kind = drv_location_kind(&props->location);
    return *kind ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    int kind;
    rc = props_check(poolProps, &kind);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = pool_new(poolProps, kind == 1);
    pthread_mutex_unlock(&pool_lock);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = p->handle;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = drv_handle_get(H_MEMPOOL, pool);
    if (!p || p->is_default) {
        pthread_mutex_unlock(&pool_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (int i = 0; i < 2; i++)
        if (current_pool[i] == p)
            current_pool[i] = NULL;
    drv_handle_free(H_MEMPOOL, pool);
    /* what is still allocated from it stays until freed; the rest goes now */
    p->destroyed = 1;
    pool_shrink(p, 0);
    pool_maybe_free(p);
    pthread_mutex_unlock(&pool_lock);
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = drv_handle_get(H_MEMPOOL, pool);
    if (p)
        pool_shrink(p, minBytesToKeep);
    pthread_mutex_unlock(&pool_lock);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = drv_handle_get(H_MEMPOOL, pool);
    rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    cuuint64_t v64 = 0;
    if (p && attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD && attr <= CU_MEMPOOL_ATTR_USED_MEM_HIGH)
        memcpy(&v64, value, sizeof v64);
    switch (p ? attr : 0) {
    case 0:
        break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->threshold = v64;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: /* may only be reset, to 0 */
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (v64)
            rc = CUDA_ERROR_INVALID_VALUE;
        else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            p->reserved_high = p->reserved;
        else
            p->used_high = p->used;
        break;
    default: /* the current figures are read-only */
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = drv_handle_get(H_MEMPOOL, pool);
    rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    cuuint64_t v64 = 0;
    switch (p ? attr : 0) {
    case 0:
        break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v64 = p->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v64 = p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v64 = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: v64 = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: v64 = p->used_high; break;
    default: rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS && attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
        memcpy(value, &v64, sizeof v64);
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!map && count)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = drv_handle_get(H_MEMPOOL, pool);
    rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; p && i < count && rc == CUDA_SUCCESS; i++)
        if (!drv_location_kind(&map[i].location) ||
            map[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; p && i < count && rc == CUDA_SUCCESS; i++)
        if (drv_location_kind(&map[i].location) == 1)
            p->access = map[i].flags;
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

API CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
                                CUmemLocation *location)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags || !drv_location_kind(location))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = drv_handle_get(H_MEMPOOL, memPool);
    if (p)
        *flags = drv_location_kind(location) == 1 ? p->access : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    pthread_mutex_unlock(&pool_lock);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- the device's default and current pools ---------------------------------------------- */

/* The default (CURRENT 0) or current (1) pool of location kind KIND into *OUT. */
static CUresult get_pool(CUmemoryPool *out, int kind, int current)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = current ? current_of(kind) : default_of(kind);
    if (p)
        *out = p->handle;
    pthread_mutex_unlock(&pool_lock);
    return p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult set_pool(int kind, CUmemoryPool pool)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = drv_handle_get(H_MEMPOOL, pool);
    int ok = p && !p->imported && p->device == (kind == 1);
    if (ok)
        current_pool[kind == 1] = p;
    pthread_mutex_unlock(&pool_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    return dev == 0 ? get_pool(pool_out, 1, 0) : CUDA_ERROR_INVALID_DEVICE;
}

API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return dev == 0 ? get_pool(pool, 1, 1) : CUDA_ERROR_INVALID_DEVICE;
}

API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    return dev == 0 ? set_pool(1, pool) : CUDA_ERROR_INVALID_DEVICE;
}

/* CUDA 13's location forms: the device's pools, or the host's (one for every host location). */
static int pinned_location(const CUmemLocation *location, CUmemAllocationType type)
{
    return type == CU_MEM_ALLOCATION_TYPE_PINNED ? drv_location_kind(location) : 0;
}

API CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location,
                                    CUmemAllocationType type)
{
    int kind = pinned_location(location, type);
    return kind ? get_pool(pool_out, kind, 0) : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type)
{
    int kind = pinned_location(location, type);
    return kind ? get_pool(pool, kind, 1) : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool)
{
    int kind = pinned_location(location, type);
    return kind ? set_pool(kind, pool) : CUDA_ERROR_INVALID_VALUE;
}

/* ---- between processes ------------------------------------------------------------------ */

API CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle_out || flags || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = drv_handle_get(H_MEMPOOL, pool);
    int ok = p && !p->imported && (p->props.handleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    struct drv_share s;
    if (ok)
        ok = drv_share_fill(&s, SHARE_POOL, 0, 0, p->id) == 0;
    CUmemPoolProps props = ok ? p->props : (CUmemPoolProps){0};
    pthread_mutex_unlock(&pool_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = drv_share_fd_make(&s, &props, sizeof props);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)handle_out = fd;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                CUmemAllocationHandleType handleType,
                                                unsigned long long flags)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pool_out || flags || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_share s;
    CUmemPoolProps props;
    if (drv_share_fd_read((int)(intptr_t)handle, &s, &props, sizeof props) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = drv_share_open(&s, SHARE_POOL);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = pool_new(&props, drv_location_kind(&props.location) == 1);
    if (p) {
        p->imported = 1;
        p->peer = s;
        p->peer_fd = fd;
    }
    pthread_mutex_unlock(&pool_lock);
    if (!p) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pool_out = p->handle;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_region r;
    if (!shareData_out || !drv_region_find((uintptr_t)ptr, &r) || r.base != (uintptr_t)ptr ||
        r.how != ALLOC_POOL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = r.obj;
    int ok = (p->props.handleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
    uint64_t id = p->id;
    pthread_mutex_unlock(&pool_lock);
    struct drv_share s;
    if (!ok || drv_share_fill(&s, SHARE_POOL_PTR, r.off, r.size, id) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    memset(shareData_out, 0, sizeof *shareData_out);
    memcpy(shareData_out->reserved, &s, sizeof s);
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                    CUmemPoolPtrExportData *shareData)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr_out || !shareData)
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_share s;
    memcpy(&s, shareData->reserved, sizeof s);
    pthread_mutex_lock(&pool_lock);
    struct drv_pool *p = drv_handle_get(H_MEMPOOL, pool);
    int ok = p && p->imported && s.magic == DRV_SHARE_MAGIC && s.kind == SHARE_POOL_PTR &&
             s.pid == p->peer.pid && s.start == p->peer.start && s.id == p->peer.id;
    int fd = ok ? p->peer_fd : -1;
    if (ok)
        p->used += s.size; /* keeps the imported pool until its pointers are freed */
    pthread_mutex_unlock(&pool_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    void *at = drv_arena_map(fd, s.off, s.size, NULL, PROT_READ | PROT_WRITE);
    struct drv_region r = {(uintptr_t)at, s.size, MEM_DEVICE, ALLOC_POOL_IMPORT, 0, p};
    if (!at || drv_region_add(&r) < 0) {
        if (at)
            munmap(at, s.size);
        pthread_mutex_lock(&pool_lock);
        pool_put(p, s.size);
        pthread_mutex_unlock(&pool_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr_out = (CUdeviceptr)r.base;
    return CUDA_SUCCESS;
}
