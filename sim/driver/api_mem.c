/* Memory: linear, pitched and managed device allocations (ranges of the process's arena,
 * devmem.c, counted against the shared device's capacity), cuMemGetInfo, pinned and
 * registered host memory, and the copy and memset operations, synchronous and on streams.
 * Device pointers are unified addresses. */
#include "sim/driver/drv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- device memory ---------------------------------------------------------------------- */

/* A new allocation of BYTES made by HOW (linear or managed): charged, backed by the arena,
 * registered. */
static CUresult linear_alloc(struct drv_ctx *c, size_t bytes, int how, CUdeviceptr *out)
{
    CUresult rc = drv_mem_charge(bytes, CHARGE_ALLOC);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_region r;
    rc = drv_devmem_new(bytes, how, c, &r);
    if (rc != CUDA_SUCCESS) {
        drv_mem_uncharge(bytes, CHARGE_ALLOC);
        return rc;
    }
    *out = (CUdeviceptr)r.base;
    return CUDA_SUCCESS;
}

void drv_linear_free(const struct drv_region *r)
{
    drv_devmem_drop(r);
    drv_mem_uncharge(r->size, CHARGE_ALLOC);
}

void (*drv_pool_free_region)(const struct drv_region *r);

void drv_linear_ctx_gone(struct drv_ctx *ctx)
{
    const int hows[] = {ALLOC_LINEAR, ALLOC_MANAGED};
    for (size_t h = 0; h < 2; h++) {
        struct drv_region *taken;
        size_t n = drv_region_take_all(hows[h], ctx, &taken);
        for (size_t i = 0; i < n; i++)
            drv_linear_free(&taken[i]);
        free(taken);
    }
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(dptr && bytesize != 0, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    return linear_alloc(c, bytesize, ALLOC_LINEAR, dptr);
}

/* Rows are aligned to 512 bytes, as NVIDIA's driver pitches them on every GPU since Fermi
 * (CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT is the smaller texture requirement). */
#define PITCH_ALIGN 512

API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                size_t Height, unsigned int ElementSizeBytes)
{
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (WidthInBytes > SIZE_MAX - (PITCH_ALIGN - 1))
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t pitch = (WidthInBytes + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = linear_alloc(c, pitch * Height, ALLOC_LINEAR, dptr);
    if (rc == CUDA_SUCCESS)
        *pPitch = pitch;
    return rc;
}

/* Managed memory lives on the device here (there is no migration to model): it counts as
 * device memory, as it does on a GPU while the device touches it. */
API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (!dptr || bytesize == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    return linear_alloc(c, bytesize, ALLOC_MANAGED, dptr);
}

API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (dptr == 0)
        return CUDA_SUCCESS;
    struct drv_region r;
    if (!drv_region_find((uintptr_t)dptr, &r) || r.base != (uintptr_t)dptr || r.kind != MEM_DEVICE ||
        r.how == ALLOC_IPC_IMPORT || r.how == ALLOC_VMM)
        return CUDA_ERROR_INVALID_VALUE;
    /* like cudaFree, wait for queued work, which may still touch the memory */
    drv_sync_all();
    if (!drv_region_take((uintptr_t)dptr, MEM_DEVICE, r.how, &r))
        return CUDA_ERROR_INVALID_VALUE;
    if (r.how == ALLOC_POOL || r.how == ALLOC_POOL_IMPORT)
        drv_pool_free_region(&r);
    else
        drv_linear_free(&r);
    return CUDA_SUCCESS;
}

/* Whether a dead process's memory may still be counted: the device process looks every
 * 200 ms; a caller of cuMemGetInfo looks itself when nobody has for 100 ms. */
#define MEMINFO_LIVENESS_NS 100000000LL

/* cuMemGetInfo's figures, for the calling thread's context. */
static CUresult mem_info(const void *free_out, const void *total_out, uint64_t *free_bytes,
                         uint64_t *total)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(free_out && total_out, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    drv_lock();
    int64_t now = drv_mono_ns();
    if (now - drv.shm->last_liveness_ns > MEMINFO_LIVENESS_NS)
        drv_liveness_scan(now);
    uint64_t used = drv_device_mem_used();
    *total = drv.g->p.mem_bytes;
    *free_bytes = used < *total ? *total - used : 0;
    drv_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    uint64_t f, t;
    CUresult rc = mem_info(free_bytes, total, &f, &t);
    if (rc == CUDA_SUCCESS)
        *free_bytes = f, *total = t;
    return rc;
}

/* The 32-bit ABI of CUDA 3.1 and before: figures above 4 GiB are clamped. */
API CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total)
{
    uint64_t f, t;
    CUresult rc = mem_info(free_bytes, total, &f, &t);
    if (rc == CUDA_SUCCESS) {
        *free_bytes = f > UINT32_MAX ? UINT32_MAX : (unsigned)f;
        *total = t > UINT32_MAX ? UINT32_MAX : (unsigned)t;
    }
    return rc;
}

API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_region r;
    if (!drv_region_find((uintptr_t)dptr, &r) || r.kind != MEM_DEVICE)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = (CUdeviceptr)r.base;
    if (psize)
        *psize = r.size;
    return CUDA_SUCCESS;
}

/* ---- host memory ------------------------------------------------------------------------ */

API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (!pp || bytesize == 0 ||
        (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                             CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    void *p = mmap(NULL, bytesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (drv_region_add(&(struct drv_region){.base = (uintptr_t)p, .size = bytesize, .kind = MEM_HOST_PINNED}) < 0) {
        munmap(p, bytesize);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

API CUresult cuMemFreeHost(void *p)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (drv_mem_lookup(p, 1) != MEM_HOST_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    drv_sync_all();
    struct drv_region r;
    if (!drv_region_take((uintptr_t)p, MEM_HOST_PINNED, 0, &r))
        return CUDA_ERROR_INVALID_VALUE;
    munmap(p, r.size);
    return CUDA_SUCCESS;
}

API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    if (!p || bytesize == 0 ||
        (Flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                             CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)))
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    int r = drv_region_add(&(struct drv_region){.base = (uintptr_t)p, .size = bytesize, .kind = MEM_HOST_REGISTERED});
    if (r == -EEXIST)
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    return r < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

API CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return cuMemHostRegister_v2(p, bytesize, Flags);
}

API CUresult cuMemHostUnregister(void *p)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (drv_mem_lookup(p, 1) != MEM_HOST_REGISTERED)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    drv_sync_all();
    return drv_region_take((uintptr_t)p, MEM_HOST_REGISTERED, 0, NULL) ? CUDA_SUCCESS
                                                            : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    CUresult rc = drv_enter(pdptr && Flags == 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    int kind = drv_mem_lookup(p, 1);
    if (kind != MEM_HOST_PINNED && kind != MEM_HOST_REGISTERED)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* ---- copies and memsets ----------------------------------------------------------------- */

static int host_is_pinned(const void *p, size_t n)
{
    int k = drv_mem_lookup(p, n);
    return k == MEM_HOST_PINNED || k == MEM_HOST_REGISTERED;
}

/* Device-side operand: device memory or mapped host memory (unified addressing). */
static int device_ok(CUdeviceptr p, size_t n)
{
    return p != 0 && drv_mem_lookup((const void *)(uintptr_t)p, n) != 0;
}

/* Grid of a memory-bound helper kernel (device-to-device copy, memset). */
static void fill_mem_kernel(struct drv_op_desc *d, double bytes)
{
    uint64_t blocks = (uint64_t)(bytes / 4096) + 1;
    uint64_t cap = (uint64_t)drv.g->p.num_sms * 8;
    d->kind = SIM_OP_KERNEL;
    d->blocks = (uint32_t)(blocks < cap ? blocks : cap);
    d->threads = 256;
    d->bytes = bytes;
}

enum copy_dir { H2D, D2H, D2D };

/* One copy: validates, describes and submits it; SYNC waits for it. */
static CUresult do_copy(enum copy_dir dir, void *dst, const void *src, size_t n, CUstream h,
                        int ptsz, int sync)
{
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((dir != H2D && !device_ok((CUdeviceptr)(uintptr_t)src, n)) ||
        (dir != D2H && !device_ok((CUdeviceptr)(uintptr_t)dst, n)) || !dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_stream *s;
    rc = drv_stream_resolve(h, ptsz, c, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (n == 0)
        return CUDA_SUCCESS;
    struct drv_op_desc d;
    memset(&d, 0, sizeof d);
    d.effect = EFF_COPY;
    d.u.copy.dst = dst;
    d.u.copy.src = src;
    d.u.copy.n = n;
    if (dir == D2D) {
        fill_mem_kernel(&d, 2.0 * (double)n);
    } else {
        d.kind = dir == H2D ? SIM_OP_COPY_H2D : SIM_OP_COPY_D2H;
        d.bytes = (double)n;
    }
    if (sync && s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (drv_capture_node(s, &d, &rc))
        return rc;
    if (dir == H2D && !sync && !host_is_pinned(src, n)) {
        /* pageable source: staged now, as the driver copies it into a bounce buffer */
        void *staged = malloc(n);
        if (!staged)
            return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(staged, src, n);
        d.effect = EFF_COPY_STAGED;
        d.u.copy.src = staged;
    }
    struct drv_ticket t;
    rc = drv_submit(s, &d, &t);
    if (rc != CUDA_SUCCESS) {
        if (d.effect == EFF_COPY_STAGED)
            free((void *)d.u.copy.src);
        return rc;
    }
    return sync ? drv_wait_counter(&s->completed, t.seq, c) : CUDA_SUCCESS;
}

#define DP(x) ((void *)(uintptr_t)(x))

/* cuMemcpy<NAME>_v2 and its _ptds (synchronous), cuMemcpy<NAME>Async_v2 and its _ptsz: copies
 * in direction DIR from a SRC_T to a DST_T (a CUdeviceptr or a host pointer). */
#define COPY_ENTRY_POINTS(name, dir, dst_t, src_t)                                                 \
    API CUresult cuMemcpy##name##_v2(dst_t dst, src_t src, size_t n)                               \
    {                                                                                              \
        return do_copy(dir, DP(dst), DP(src), n, NULL, 0, 1);                                      \
    }                                                                                              \
    API CUresult cuMemcpy##name##_v2_ptds(dst_t dst, src_t src, size_t n)                          \
    {                                                                                              \
        return do_copy(dir, DP(dst), DP(src), n, NULL, 1, 1);                                      \
    }                                                                                              \
    API CUresult cuMemcpy##name##Async_v2(dst_t dst, src_t src, size_t n, CUstream h)              \
    {                                                                                              \
        return do_copy(dir, DP(dst), DP(src), n, h, 0, 0);                                         \
    }                                                                                              \
    API CUresult cuMemcpy##name##Async_v2_ptsz(dst_t dst, src_t src, size_t n, CUstream h)         \
    {                                                                                              \
        return do_copy(dir, DP(dst), DP(src), n, h, 1, 0);                                         \
    }

COPY_ENTRY_POINTS(HtoD, H2D, CUdeviceptr, const void *)
COPY_ENTRY_POINTS(DtoH, D2H, void *, CUdeviceptr)
COPY_ENTRY_POINTS(DtoD, D2D, CUdeviceptr, CUdeviceptr)

/* cuMemcpy with unified addresses: the direction follows from what the pointers are. */
static CUresult unified_copy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, int ptsz,
                             int sync)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    int dk = drv_mem_lookup(DP(dst), n), sk = drv_mem_lookup(DP(src), n);
    enum copy_dir dir = dk == MEM_DEVICE ? (sk == MEM_DEVICE ? D2D : H2D) : D2H;
    if (dk != MEM_DEVICE && sk != MEM_DEVICE) {
        /* host to host: a plain copy, ordered like a D2H copy */
        dir = D2H;
        if (!device_ok(src, n))
            return sync ? (memmove(DP(dst), DP(src), n), CUDA_SUCCESS) : CUDA_ERROR_INVALID_VALUE;
    }
    return do_copy(dir, DP(dst), DP(src), n, h, ptsz, sync);
}

API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return unified_copy(dst, src, n, NULL, 0, 1);
}
API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return unified_copy(dst, src, n, NULL, 1, 1);
}
API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h)
{
    return unified_copy(dst, src, n, h, 0, 0);
}
API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h)
{
    return unified_copy(dst, src, n, h, 1, 0);
}

static CUresult do_memset(CUdeviceptr dst, uint64_t value, size_t n, int elem, CUstream h, int ptsz,
                          int sync)
{
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((elem > 1 && dst % (uint64_t)elem) || !device_ok(dst, n * (size_t)elem))
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_stream *s;
    rc = drv_stream_resolve(h, ptsz, c, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (n == 0)
        return CUDA_SUCCESS;
    struct drv_op_desc d;
    memset(&d, 0, sizeof d);
    fill_mem_kernel(&d, (double)n * elem);
    d.effect = elem == 1 ? EFF_MEMSET8 : elem == 2 ? EFF_MEMSET16 : EFF_MEMSET32;
    d.u.set.dst = DP(dst);
    d.u.set.value = value;
    d.u.set.n = n;
    if (sync && s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (drv_capture_node(s, &d, &rc))
        return rc;
    struct drv_ticket t;
    rc = drv_submit(s, &d, &t);
    if (rc != CUDA_SUCCESS)
        return rc;
    return sync ? drv_wait_counter(&s->completed, t.seq, c) : CUDA_SUCCESS;
}

/* cuMemsetD<BITS>_v2 and its _ptds (synchronous), cuMemsetD<BITS>Async and its _ptsz, for
 * elements of TYPE. */
#define MEMSET_ENTRY_POINTS(bits, type)                                                            \
    API CUresult cuMemsetD##bits##_v2(CUdeviceptr dst, type v, size_t n)                           \
    {                                                                                              \
        return do_memset(dst, v, n, (bits) / 8, NULL, 0, 1);                                       \
    }                                                                                              \
    API CUresult cuMemsetD##bits##_v2_ptds(CUdeviceptr dst, type v, size_t n)                      \
    {                                                                                              \
        return do_memset(dst, v, n, (bits) / 8, NULL, 1, 1);                                       \
    }                                                                                              \
    API CUresult cuMemsetD##bits##Async(CUdeviceptr dst, type v, size_t n, CUstream h)             \
    {                                                                                              \
        return do_memset(dst, v, n, (bits) / 8, h, 0, 0);                                          \
    }                                                                                              \
    API CUresult cuMemsetD##bits##Async_ptsz(CUdeviceptr dst, type v, size_t n, CUstream h)        \
    {                                                                                              \
        return do_memset(dst, v, n, (bits) / 8, h, 1, 0);                                          \
    }

MEMSET_ENTRY_POINTS(8, unsigned char)
MEMSET_ENTRY_POINTS(16, unsigned short)
MEMSET_ENTRY_POINTS(32, unsigned int)
