/* Legacy CUDA IPC of device memory: cuIpcGetMemHandle names a range of the exporter's arena
 * (devmem.c) in the 64-byte handle; cuIpcOpenMemHandle in another process opens that arena
 * through /proc/PID/fd/FD and maps the range, so both see the same bytes. Opened memory takes
 * no device memory of the importer's: it is the exporter's, charged to it alone (and given
 * back when the exporter frees it or dies, whatever the importer still maps). Opening a handle
 * twice gives the same pointer and needs as many closes, as NVIDIA's driver does. */
#include "sim/driver/drv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct ipc_import {
    struct drv_share share;
    uintptr_t base;
    int refs;
    struct drv_ctx *ctx; /* the context that opened it: closed with it */
    struct ipc_import *next;
};

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ipc_import *imports;

API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(pHandle != NULL, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_region r;
    /* memory of cuMemAlloc / cuMemAllocPitch only (pools, VMM and managed memory have their
     * own ways or none); the handle names the whole allocation that holds DPTR */
    if (!drv_region_find((uintptr_t)dptr, &r) || r.kind != MEM_DEVICE || r.how != ALLOC_LINEAR)
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_share s;
    if (drv_share_fill(&s, SHARE_IPC, r.off, r.size, 0) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle->reserved, &s, sizeof s);
    return CUDA_SUCCESS;
}

static int same_range(const struct drv_share *a, const struct drv_share *b)
{
    return a->pid == b->pid && a->start == b->start && a->off == b->off && a->size == b->size;
}

API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_share s;
    memcpy(&s, handle.reserved, sizeof s);
    pthread_mutex_lock(&ipc_lock);
    for (struct ipc_import *im = imports; im; im = im->next)
        if (same_range(&im->share, &s)) {
            im->refs++;
            *pdptr = (CUdeviceptr)im->base;
            pthread_mutex_unlock(&ipc_lock);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&ipc_lock);
    int fd = drv_share_open(&s, SHARE_IPC);
    if (fd < 0) /* a handle of this very process cannot be opened in it */
        return fd == -2 ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_VALUE;
    void *at = drv_arena_map(fd, s.off, s.size, NULL, PROT_READ | PROT_WRITE);
    close(fd); /* the mapping keeps the exporter's arena */
    struct ipc_import *im = malloc(sizeof *im);
    struct drv_region r = {(uintptr_t)at, s.size, MEM_DEVICE, ALLOC_IPC_IMPORT, 0, im};
    if (!at || !im || drv_region_add(&r) < 0) {
        if (at)
            munmap(at, s.size);
        free(im);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *im = (struct ipc_import){s, (uintptr_t)at, 1, c, NULL};
    pthread_mutex_lock(&ipc_lock);
    im->next = imports;
    imports = im;
    pthread_mutex_unlock(&ipc_lock);
    *pdptr = (CUdeviceptr)r.base;
    return CUDA_SUCCESS;
}

API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

/* Unmaps an import taken off the list. */
static void import_free(struct ipc_import *im)
{
    drv_region_take(im->base, MEM_DEVICE, ALLOC_IPC_IMPORT, NULL);
    munmap((void *)im->base, im->share.size);
    free(im);
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ipc_lock);
    struct ipc_import **pp = &imports;
    while (*pp && (*pp)->base != (uintptr_t)dptr)
        pp = &(*pp)->next;
    struct ipc_import *im = *pp;
    if (!im) {
        pthread_mutex_unlock(&ipc_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    int last = --im->refs == 0;
    if (last)
        *pp = im->next;
    pthread_mutex_unlock(&ipc_lock);
    if (last) {
        drv_sync_all(); /* queued work may still read or write it */
        import_free(im);
    }
    return CUDA_SUCCESS;
}

void drv_ipc_ctx_gone(struct drv_ctx *ctx)
{
    pthread_mutex_lock(&ipc_lock);
    for (struct ipc_import **pp = &imports; *pp;) {
        struct ipc_import *im = *pp;
        if (im->ctx != ctx) {
            pp = &im->next;
            continue;
        }
        *pp = im->next;
        import_free(im);
    }
    pthread_mutex_unlock(&ipc_lock);
}

static void __attribute__((constructor)) ctx_gone_register(void)
{
    drv_ctx_on_gone(0, drv_ipc_ctx_gone);
}
