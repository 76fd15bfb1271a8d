/* Virtual memory management: physical allocations (cuMemCreate at every location type: only a
 * device location takes device memory), address reservations, mappings and their access,
 * allocation handles (retain, properties) and their export to other processes as POSIX file
 * descriptors. An allocation is a range of the process's arena (devmem.c), mapped with
 * MAP_FIXED into reserved (PROT_NONE) address space; its memory goes when the last of its
 * handle references and mappings goes, as with NVIDIA's driver. The device reaches a mapping
 * once its access is set. Granularity is 2 MiB everywhere. */
#include "sim/driver/drv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define VMM_GRANULARITY (UINT64_C(2) << 20)

struct vmm_alloc {
    CUmemGenericAllocationHandle handle;
    CUmemAllocationProp prop;
    size_t size;
    uint64_t off;   /* in the arena FD */
    int fd;         /* -1: this process's arena; else an imported one's (owned) */
    int charged;    /* its size is charged as device memory */
    uint64_t id;    /* this process's numbering, named in exports */
    int refs, maps; /* handle references (create, import, retain) and mappings */
    struct vmm_alloc *next;
};

struct vmm_range {
    uintptr_t base;
    size_t size;
    struct vmm_alloc *a; /* mappings: the allocation, at OFFSET into it */
    size_t offset;
    int access; /* CUmemAccess_flags of the device */
};

/* Guards everything below; taken before the device lock, never the other way. */
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_alloc *allocs;
static uint64_t next_alloc_id = 1;
static struct vmm_range *reserves, *maps;
static size_t nreserves, nmaps, capreserves, capmaps;

static int range_push(struct vmm_range **v, size_t *n, size_t *cap, struct vmm_range r)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        struct vmm_range *nv = realloc(*v, nc * sizeof *nv);
        if (!nv)
            return -1;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = r;
    return 0;
}

static struct vmm_alloc *alloc_get(CUmemGenericAllocationHandle h)
{
    struct vmm_alloc *a = drv_handle_get(H_MEMALLOC, (void *)(uintptr_t)h);
    return a && (a->refs > 0 || a->maps > 0) ? a : NULL;
}

/* The allocation goes once neither a handle reference nor a mapping holds it (caller holds
 * vmm_lock). */
static void alloc_maybe_free(struct vmm_alloc *a)
{
    if (a->refs > 0 || a->maps > 0)
        return;
    for (struct vmm_alloc **pp = &allocs; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    drv_handle_free(H_MEMALLOC, (void *)(uintptr_t)a->handle);
    if (a->fd >= 0)
        close(a->fd);
    else
        drv_arena_release(a->off, a->size);
    if (a->charged)
        drv_mem_uncharge(a->size, CHARGE_ALLOC);
    free(a);
}

static struct vmm_alloc *alloc_new(const CUmemAllocationProp *prop, size_t size, uint64_t off,
                                   int fd)
{
    struct vmm_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->handle = (CUmemGenericAllocationHandle)(uintptr_t)drv_handle_new(H_MEMALLOC, a);
    if (!a->handle) {
        free(a);
        return NULL;
    }
    a->prop = *prop;
    a->size = size;
    a->off = off;
    a->fd = fd;
    a->refs = 1;
    pthread_mutex_lock(&vmm_lock);
    a->id = next_alloc_id++;
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&vmm_lock);
    return a;
}

/* The location kind of a valid PROP (1 device, 2 host), or the error to return. */
static CUresult prop_check(const CUmemAllocationProp *prop, int *kind)
{
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    return drv_mem_props_check(prop->type, prop->requestedHandleTypes, &prop->location, kind);
}

static int aligned(uint64_t v)
{
    return v % VMM_GRANULARITY == 0;
}

API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                           CUmemAllocationGranularity_flags option)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    int kind;
    if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    rc = prop_check(prop, &kind);
    if (rc == CUDA_SUCCESS)
        *granularity = VMM_GRANULARITY;
    return rc;
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                         const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    int kind;
    if (!handle || flags)
        return CUDA_ERROR_INVALID_VALUE;
    rc = prop_check(prop, &kind);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (size == 0 || !aligned(size))
        return CUDA_ERROR_INVALID_VALUE;
    /* only memory on the device is device memory; host locations take none */
    if (kind == 1 && (rc = drv_mem_charge(size, CHARGE_ALLOC)) != CUDA_SUCCESS)
        return rc;
    uint64_t off;
    struct vmm_alloc *a = drv_arena_take(size, &off) == 0 ? alloc_new(prop, size, off, -1) : NULL;
    if (!a) {
        if (kind == 1)
            drv_mem_uncharge(size, CHARGE_ALLOC);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->charged = kind == 1;
    *handle = a->handle;
    return CUDA_SUCCESS;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_alloc *a = alloc_get(handle);
    int ok = a && a->refs > 0;
    if (ok) {
        a->refs--;
        alloc_maybe_free(a);
    }
    pthread_mutex_unlock(&vmm_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                    CUmemGenericAllocationHandle handle)
{
    CUresult rc = drv_check_init_out(prop);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_alloc *a = alloc_get(handle);
    if (a)
        *prop = a->prop;
    pthread_mutex_unlock(&vmm_lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- address space ---------------------------------------------------------------------- */

API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr || flags || size == 0 || !aligned(size) || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment < VMM_GRANULARITY)
        alignment = VMM_GRANULARITY;
    if (size > SIZE_MAX - alignment)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* ADDR is a hint: tried as it is, else anywhere */
    void *p = MAP_FAILED;
    if (addr && addr % alignment == 0)
        p = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    uintptr_t base = (uintptr_t)p;
    if (p == MAP_FAILED) {
        p = mmap(NULL, size + alignment, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
        if (p == MAP_FAILED)
            return CUDA_ERROR_OUT_OF_MEMORY;
        base = ((uintptr_t)p + alignment - 1) & ~(uintptr_t)(alignment - 1);
        if (base > (uintptr_t)p)
            munmap(p, base - (uintptr_t)p);
        munmap((void *)(base + size), (uintptr_t)p + size + alignment - (base + size));
    }
    pthread_mutex_lock(&vmm_lock);
    int bad = range_push(&reserves, &nreserves, &capreserves,
                         (struct vmm_range){base, size, NULL, 0, 0});
    pthread_mutex_unlock(&vmm_lock);
    if (bad) {
        munmap((void *)base, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

/* [BASE, BASE + SIZE) of a reservation made a reservation again after a mapping there: fresh
 * anonymous PROT_NONE pages over the arena's, or, where the kernel cannot map them (out of
 * mappings), at least the arena's pages made inaccessible. Returns 0, or -1 when neither. */
static int reserve_again(uintptr_t base, size_t size)
{
    void *p = mmap((void *)base, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p != MAP_FAILED)
        return 0;
    return mprotect((void *)base, size, PROT_NONE) == 0 ? 0 : -1;
}

/* Index of the mapping that holds P, or -1 (caller holds vmm_lock). */
static long map_at(uintptr_t p)
{
    for (size_t i = 0; i < nmaps; i++)
        if (p >= maps[i].base && p - maps[i].base < maps[i].size)
            return (long)i;
    return -1;
}

API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&vmm_lock);
    rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < nreserves; i++) {
        if (reserves[i].base != (uintptr_t)ptr || reserves[i].size != size)
            continue;
        int mapped = 0;
        for (size_t m = 0; m < nmaps; m++)
            mapped |= maps[m].base >= ptr && maps[m].base - ptr < size;
        if (!mapped) { /* its mappings must be unmapped first */
            munmap((void *)(uintptr_t)ptr, size);
            reserves[i] = reserves[--nreserves];
            rc = CUDA_SUCCESS;
        }
        break;
    }
    pthread_mutex_unlock(&vmm_lock);
    return rc;
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                      CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags || size == 0 || !aligned(size) || !aligned(offset) || !aligned(ptr))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_alloc *a = alloc_get(handle);
    int inside = 0;
    for (size_t i = 0; i < nreserves && !inside; i++)
        inside = ptr >= reserves[i].base && ptr - reserves[i].base <= reserves[i].size &&
                 size <= reserves[i].size - (ptr - reserves[i].base);
    int overlap = 0;
    for (size_t i = 0; i < nmaps; i++)
        overlap |= maps[i].base < ptr + size && ptr < maps[i].base + maps[i].size;
    rc = CUDA_ERROR_INVALID_VALUE;
    if (a && inside && !overlap && offset <= a->size && size <= a->size - offset &&
        drv_arena_map(a->fd, a->off + offset, size, (void *)(uintptr_t)ptr, PROT_NONE)) {
        if (range_push(&maps, &nmaps, &capmaps,
                       (struct vmm_range){ptr, size, a, offset, CU_MEM_ACCESS_FLAGS_PROT_NONE}) == 0) {
            a->maps++;
            rc = CUDA_SUCCESS;
        } else {
            rc = reserve_again((uintptr_t)ptr, size) == 0 ? CUDA_ERROR_OUT_OF_MEMORY
                                                          : CUDA_ERROR_UNKNOWN;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return rc;
}

/* Whether [PTR, PTR + SIZE) is made of whole mappings, side by side (caller holds vmm_lock). */
static int whole_mappings(uintptr_t ptr, size_t size)
{
    uintptr_t p = ptr, end = ptr + size;
    while (p < end) {
        long i = map_at(p);
        if (i < 0 || maps[i].base != p || maps[i].size > end - p)
            return 0;
        p += maps[i].size;
    }
    return size > 0 && end > ptr;
}

API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&vmm_lock);
    int ok = whole_mappings(ptr, size);
    pthread_mutex_unlock(&vmm_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    drv_sync_all(); /* queued work may still touch it */
    pthread_mutex_lock(&vmm_lock);
    int lost = 0; /* a range the kernel could make no reservation again */
    for (size_t i = 0; i < nmaps;) {
        if (maps[i].base < ptr || maps[i].base - ptr >= size) {
            i++;
            continue;
        }
        struct vmm_range m = maps[i];
        maps[i] = maps[--nmaps];
        drv_region_take(m.base, MEM_DEVICE, ALLOC_VMM, NULL);
        lost |= reserve_again(m.base, m.size) < 0;
        m.a->maps--;
        alloc_maybe_free(m.a);
    }
    pthread_mutex_unlock(&vmm_lock);
    return lost ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
}

static int prot_of(CUmemAccess_flags f)
{
    return f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
           : f == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                   : PROT_NONE;
}

API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                            size_t count)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* the device's access decides what the device (and here the host, the same memory)
     * may do; host locations are accepted as they are for host allocations */
    int access = -1;
    for (size_t i = 0; i < count; i++) {
        int kind = drv_location_kind(&desc[i].location);
        if (!kind || desc[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE ||
            desc[i].flags == 2 /* no write-only */)
            return CUDA_ERROR_INVALID_VALUE;
        if (kind == 1 || access < 0)
            access = desc[i].flags;
    }
    pthread_mutex_lock(&vmm_lock);
    int ok = whole_mappings(ptr, size);
    for (size_t i = 0; ok && i < nmaps; i++) {
        struct vmm_range *m = &maps[i];
        if (m->base < ptr || m->base - ptr >= size)
            continue;
        mprotect((void *)m->base, m->size, prot_of(access));
        drv_region_take(m->base, MEM_DEVICE, ALLOC_VMM, NULL);
        m->access = access;
        if (access != CU_MEM_ACCESS_FLAGS_PROT_NONE)
            drv_region_add(&(struct drv_region){.base = m->base,
                                                .size = m->size,
                                                .kind = MEM_DEVICE,
                                                .how = ALLOC_VMM,
                                                .off = m->a->off + m->offset,
                                                .obj = m->a});
    }
    pthread_mutex_unlock(&vmm_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                            CUdeviceptr ptr)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags || !drv_location_kind(location))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    long i = map_at(ptr);
    if (i >= 0)
        *flags = (unsigned long long)maps[i].access;
    pthread_mutex_unlock(&vmm_lock);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult rc = drv_check_init_out(handle);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&vmm_lock);
    long i = map_at((uintptr_t)addr);
    if (i >= 0) {
        maps[i].a->refs++;
        *handle = maps[i].a->handle;
    }
    pthread_mutex_unlock(&vmm_lock);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- between processes ------------------------------------------------------------------ */

API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                          CUmemAllocationHandleType handleType,
                                          unsigned long long flags)
{
    CUresult rc = drv_share_call_check(shareableHandle, handleType, flags);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_alloc *a = alloc_get(handle);
    int ok = a && a->fd < 0 &&
             (a->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    struct drv_share s;
    CUmemAllocationProp prop;
    if (ok) {
        ok = drv_share_fill(&s, SHARE_VMM, a->off, a->size, a->id) == 0;
        prop = a->prop;
    }
    pthread_mutex_unlock(&vmm_lock);
    return ok ? drv_share_export(&s, &prop, sizeof prop, shareableHandle) : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                            CUmemAllocationHandleType shHandleType)
{
    CUresult rc = drv_share_call_check(handle, shHandleType, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_share s;
    CUmemAllocationProp prop;
    if (drv_share_fd_read((int)(intptr_t)osHandle, &s, &prop, sizeof prop) < 0 ||
        s.kind != SHARE_VMM)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = drv_share_open(&s, SHARE_VMM);
    if (fd == -2) { /* this process's own: the same allocation, one more reference */
        pthread_mutex_lock(&vmm_lock);
        struct vmm_alloc *a = allocs;
        while (a && a->id != s.id)
            a = a->next;
        if (a) {
            a->refs++;
            *handle = a->handle;
        }
        pthread_mutex_unlock(&vmm_lock);
        return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* the exporter's memory: charged to it, none to this process */
    struct vmm_alloc *a = alloc_new(&prop, s.size, s.off, fd);
    if (!a) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *handle = a->handle;
    return CUDA_SUCCESS;
}
