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

static void pool_free_region(const struct drv_region *r)
{
    struct drv_pool *p = r->obj;
    if (r->how == ALLOC_POOL)
        drv_devmem_drop(r);
    else
        munmap((void *)r->base, r->size);
    pthread_mutex_lock(&pool_lock);
    pool_put(p, r->size);
    pthread_mutex_unlock(&pool_lock);
}

/* ---- allocation and free in stream order ------------------------------------------------- */

static CUresult pool_alloc(struct drv_pool *p, CUdeviceptr *dptr, size_t size, CUstream h,
                           int ptsz)
{
    struct drv_stream *s;
    CUresult rc = drv_enter_stream(dptr && size != 0, h, ptsz, &s);
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
    struct drv_region r;
    rc = drv_devmem_new(size, ALLOC_POOL, p, &r);
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
    CUresult rc;
    struct drv_pool *p = drv_enter_handle(1, H_MEMPOOL, pool, &rc);
    if (!p)
        return rc;
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
    pool_free_region(r);
    free(r);
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, int ptsz)
{
    struct drv_stream *s;
    CUresult rc = drv_enter_stream(1, h, ptsz, &s);
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
    drv_host_fn_desc(&d, free_when_reached, r);
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
    return drv_mem_props_check(props->allocType, props->handleTypes, &props->location, kind);
}

API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    CUresult rc = drv_enter(pool != NULL);
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

/* The prologue of calls on one pool: initialised, then the pool of handle H with pool_lock
 * held (CUDA_SUCCESS), or the error with the lock released. */
static CUresult pool_enter(CUmemoryPool h, struct drv_pool **out)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&pool_lock);
    *out = drv_handle_get(H_MEMPOOL, h);
    if (*out)
        return CUDA_SUCCESS;
    pthread_mutex_unlock(&pool_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

/* Ends a call that pool_enter began, with RC. */
static CUresult pool_leave(CUresult rc)
{
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    struct drv_pool *p;
    CUresult rc = pool_enter(pool, &p);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (p->is_default)
        return pool_leave(CUDA_ERROR_INVALID_VALUE);
    for (int i = 0; i < 2; i++)
        if (current_pool[i] == p)
            current_pool[i] = NULL;
    drv_handle_free(H_MEMPOOL, pool);
    /* what is still allocated from it stays until freed; the rest goes now */
    p->destroyed = 1;
    pool_shrink(p, 0);
    pool_maybe_free(p);
    return pool_leave(CUDA_SUCCESS);
}

API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    struct drv_pool *p;
    CUresult rc = pool_enter(pool, &p);
    if (rc != CUDA_SUCCESS)
        return rc;
    pool_shrink(p, minBytesToKeep);
    return pool_leave(CUDA_SUCCESS);
}

static int is_u64_attr(CUmemPool_attribute attr)
{
    return attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD && attr <= CU_MEMPOOL_ATTR_USED_MEM_HIGH;
}

static int is_reuse_attr(CUmemPool_attribute attr)
{
    return attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
           attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct drv_pool *p;
    CUresult rc = value ? pool_enter(pool, &p) : CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    cuuint64_t v64 = 0;
    if (is_u64_attr(attr))
        memcpy(&v64, value, sizeof v64);
    if (is_reuse_attr(attr))
        p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value != 0;
    else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
        p->threshold = v64;
    else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH && !v64) /* may only be reset, to 0 */
        p->reserved_high = p->reserved;
    else if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH && !v64)
        p->used_high = p->used;
    else /* the current figures are read-only */
        rc = CUDA_ERROR_INVALID_VALUE;
    return pool_leave(rc);
}

API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct drv_pool *p;
    CUresult rc = value ? pool_enter(pool, &p) : CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    const cuuint64_t figures[] = {p->threshold, p->reserved, p->reserved_high, p->used,
                                  p->used_high};
    if (is_reuse_attr(attr))
        *(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
    else if (is_u64_attr(attr))
        memcpy(value, &figures[attr - CU_MEMPOOL_ATTR_RELEASE_THRESHOLD], sizeof figures[0]);
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    return pool_leave(rc);
}

API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    struct drv_pool *p;
    CUresult rc = map || !count ? pool_enter(pool, &p) : CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    for (size_t i = 0; i < count; i++)
        if (!drv_location_kind(&map[i].location) ||
            map[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return pool_leave(CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < count; i++)
        if (drv_location_kind(&map[i].location) == 1)
            p->access = map[i].flags;
    return pool_leave(CUDA_SUCCESS);
}

API CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
                                CUmemLocation *location)
{
    struct drv_pool *p;
    int kind = drv_location_kind(location);
    CUresult rc = flags && kind ? pool_enter(memPool, &p) : CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    *flags = kind == 1 ? p->access : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return pool_leave(CUDA_SUCCESS);
}

/* ---- the device's default and current pools ---------------------------------------------- */

/* The default (CURRENT 0) or current (1) pool of location kind KIND into *OUT. */
static CUresult get_pool(CUmemoryPool *out, int kind, int current)
{
    CUresult rc = drv_enter(out != NULL);
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
    struct drv_pool *p;
    CUresult rc = drv_share_call_check(handle_out, handleType, flags);
    if (rc == CUDA_SUCCESS)
        rc = pool_enter(pool, &p);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_share s;
    int ok = !p->imported && (p->props.handleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) &&
             drv_share_fill(&s, SHARE_POOL, 0, 0, p->id) == 0;
    CUmemPoolProps props = p->props;
    pool_leave(CUDA_SUCCESS);
    return ok ? drv_share_export(&s, &props, sizeof props, handle_out) : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                CUmemAllocationHandleType handleType,
                                                unsigned long long flags)
{
    CUresult rc = drv_share_call_check(pool_out, handleType, flags);
    if (rc != CUDA_SUCCESS)
        return rc;
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

static void __attribute__((constructor)) pool_free_register(void)
{
    drv_pool_free_region = pool_free_region;
}
