/* A -lcuda program that runs the device-memory paths its arguments name, in order, and prints
 * one line for each: "OP rc=R used=U" (U: the shim's own account of device 0, "-" without the
 * shim), plus what the step measured. Every allocation is pushed on a stack that "free" pops.
 *   alloc:N pitch:W:H managed:N async:N pool:N poolhost:N vmm:N vmmhost:N map unmap release
 *   retain array:W:H array3d:W:H:D mipmap:W:H:L hostalloc:N hostreg:N allochost:N
 *   ipcget ipcopen (the handle in the file POS_TEST_IPC_FILE) inctx (the context "ctx" made)
 *   primaryrelease free freeall freebogus info nvml ctx ctxdestroy module unload
 *   threads:T:S (T threads allocate S bytes each until refused; prints the most ever used)
 *   env (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) kinds (the account by kind) hold:MS
 *   simused (what the simulated driver says this process holds on device 0)
 * Sizes take K, M, G (binary). Prints "launches 0" last. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "pos/client_shm.h"
#include "prog_common.h"

typedef const struct pos_mem_account *(*account_fn)(int);
static account_fn account;

static unsigned long long size_of(const char *s)
{
    char *end;
    unsigned long long x = strtoull(s, &end, 0);
    switch (*end) {
    case 'G': x <<= 10; /* fall through */
    case 'M': x <<= 10; /* fall through */
    case 'K': x <<= 10;
    default: break;
    }
    return x;
}

static void used(char *buf, size_t cap)
{
    const struct pos_mem_account *a = account ? account(0) : NULL;
    if (a)
        snprintf(buf, cap, "%llu", (unsigned long long)atomic_load(&a->used));
    else
        snprintf(buf, cap, "-");
}

static void say(const char *op, CUresult rc, const char *extra)
{
    char u[32];
    used(u, sizeof u);
    printf("%s rc=%d used=%s%s%s\n", op, (int)rc, u, extra ? " " : "", extra ? extra : "");
    fflush(stdout);
}

enum what { W_DPTR, W_HOSTALLOC, W_HOSTREG, W_ARRAY, W_MIPMAP, W_VMM, W_ASYNC, W_IPC };

static struct item {
    enum what what;
    CUdeviceptr dptr;
    void *host;
    CUarray arr;
    CUmipmappedArray mip;
    CUmemGenericAllocationHandle handle;
    size_t size;
} stack[4096];
static int depth;
static CUdeviceptr mapped, reserved_va;
static size_t mapped_size;
static CUmemoryPool pool, hostpool;
static CUcontext extra_ctx;
static CUmodule module;

static void push(struct item it)
{
    if (depth < (int)(sizeof stack / sizeof stack[0]))
        stack[depth++] = it;
}

static CUresult free_item(struct item *it)
{
    switch (it->what) {
    case W_DPTR: return cuMemFree(it->dptr);
    case W_ASYNC: {
        CUresult rc = cuMemFreeAsync(it->dptr, NULL);
        cuStreamSynchronize(NULL);
        return rc;
    }
    case W_HOSTALLOC: return cuMemFreeHost(it->host);
    case W_HOSTREG: {
        CUresult rc = cuMemHostUnregister(it->host);
        free(it->host);
        return rc;
    }
    case W_ARRAY: return cuArrayDestroy(it->arr);
    case W_MIPMAP: return cuMipmappedArrayDestroy(it->mip);
    case W_VMM: return cuMemRelease(it->handle);
    case W_IPC: return cuIpcCloseMemHandle(it->dptr);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUmemAllocationProp vmm_prop(int host)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
}

static CUmemoryPool make_pool(int host)
{
    CUmemPoolProps p;
    memset(&p, 0, sizeof p);
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    CUmemoryPool pl = NULL;
    CUresult rc = cuMemPoolCreate(&pl, &p);
    if (rc != CUDA_SUCCESS)
        say("poolcreate", rc, NULL);
    return pl;
}

/* ---- threads racing to the limit --------------------------------------------------------- */

static size_t race_size;
static _Atomic unsigned long long race_max, race_ok;
static _Atomic int race_go;

static void *racer(void *arg)
{
    CUcontext ctx = arg;
    cuCtxSetCurrent(ctx);
    while (!atomic_load(&race_go))
        ;
    for (;;) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, race_size) != CUDA_SUCCESS)
            break;
        atomic_fetch_add(&race_ok, 1);
        const struct pos_mem_account *a = account ? account(0) : NULL;
        unsigned long long u = a ? atomic_load(&a->used) : 0, m = atomic_load(&race_max);
        while (u > m && !atomic_compare_exchange_weak(&race_max, &m, u))
            ;
    }
    return NULL;
}

/* ---- NVML ---------------------------------------------------------------------------------- */

struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_memory_v2 {
    unsigned int version;
    unsigned long long total, reserved, free, used;
};

static void nvml(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) {
        printf("nvml none\n");
        return;
    }
    int (*init)(void), (*get)(unsigned, void **), (*mem)(void *, struct nvml_memory *),
        (*mem2)(void *, struct nvml_memory_v2 *);
    SET_FN(init, dlsym(h, "nvmlInit_v2"));
    SET_FN(get, dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
    SET_FN(mem, dlsym(h, "nvmlDeviceGetMemoryInfo"));
    SET_FN(mem2, dlsym(h, "nvmlDeviceGetMemoryInfo_v2"));
    void *dev = NULL;
    struct nvml_memory m = {0};
    struct nvml_memory_v2 m2 = {.version = (unsigned)(sizeof m2 | 2u << 24)};
    if (!init || !get || !mem || !mem2 || init() || get(0, &dev) || mem(dev, &m) ||
        mem2(dev, &m2)) {
        printf("nvml failed\n");
        return;
    }
    printf("nvml free=%llu total=%llu used=%llu v2free=%llu v2total=%llu v2used=%llu\n", m.free,
           m.total, m.used, m2.free, m2.total, m2.used);
}

int main(int argc, char **argv)
{
    SET_FN(account, dlsym(RTLD_DEFAULT, "pos_shim_mem_account"));
    CUcontext ctx;
    PROG_CHECK(cuInit(0));
    const char *env = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    printf("env %s\n", env ? env : "-");
    PROG_CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    PROG_CHECK(cuCtxSetCurrent(ctx));
    char extra[256];
    for (int i = 1; i < argc; i++) {
        char op[64] = "";
        unsigned long long a = 0, b = 0, c = 0;
        const char *colon = strchr(argv[i], ':');
        size_t oplen = colon ? (size_t)(colon - argv[i]) : strlen(argv[i]);
        snprintf(op, sizeof op, "%.*s", (int)oplen, argv[i]);
        if (colon) {
            char *rest = strdup(colon + 1), *save = NULL;
            char *t = strtok_r(rest, ":", &save);
            if (t)
                a = size_of(t), t = strtok_r(NULL, ":", &save);
            if (t)
                b = size_of(t), t = strtok_r(NULL, ":", &save);
            if (t)
                c = size_of(t);
            free(rest);
        }
        struct item it = {0};
        CUresult rc = CUDA_SUCCESS;
        extra[0] = '\0';
        if (!strcmp(op, "alloc")) {
            rc = cuMemAlloc(&it.dptr, a);
            it.what = W_DPTR;
        } else if (!strcmp(op, "pitch")) {
            size_t pitch = 0;
            rc = cuMemAllocPitch(&it.dptr, &pitch, a, b, 4);
            it.what = W_DPTR;
            snprintf(extra, sizeof extra, "pitch=%zu", pitch);
        } else if (!strcmp(op, "managed")) {
            rc = cuMemAllocManaged(&it.dptr, a, CU_MEM_ATTACH_GLOBAL);
            it.what = W_DPTR;
        } else if (!strcmp(op, "async")) {
            rc = cuMemAllocAsync(&it.dptr, a, NULL);
            it.what = W_ASYNC;
        } else if (!strcmp(op, "pool") || !strcmp(op, "poolhost")) {
            int host = !strcmp(op, "poolhost");
            CUmemoryPool *pl = host ? &hostpool : &pool;
            if (!*pl)
                *pl = make_pool(host);
            rc = cuMemAllocFromPoolAsync(&it.dptr, a, *pl, NULL);
            it.what = W_ASYNC;
        } else if (!strcmp(op, "vmm") || !strcmp(op, "vmmhost")) {
            CUmemAllocationProp p = vmm_prop(!strcmp(op, "vmmhost"));
            rc = cuMemCreate(&it.handle, a, &p, 0);
            it.what = W_VMM;
            it.size = a;
        } else if (!strcmp(op, "map") || !strcmp(op, "release") || !strcmp(op, "retain")) {
            struct item *top = depth ? &stack[depth - 1] : NULL;
            if (!top || top->what != W_VMM) {
                printf("%s none\n", op);
                continue;
            }
            if (!strcmp(op, "map")) {
                rc = cuMemAddressReserve(&reserved_va, top->size, 0, 0, 0);
                if (rc == CUDA_SUCCESS)
                    rc = cuMemMap(reserved_va, top->size, 0, top->handle, 0);
                mapped = reserved_va;
                mapped_size = top->size;
            } else if (!strcmp(op, "retain")) {
                CUmemGenericAllocationHandle h2;
                rc = cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)mapped);
            } else {
                rc = cuMemRelease(top->handle);
                depth--;
            }
            say(op, rc, NULL);
            continue;
        } else if (!strcmp(op, "unmap")) {
            rc = cuMemUnmap(mapped, mapped_size);
            cuMemAddressFree(reserved_va, mapped_size);
            say(op, rc, NULL);
            continue;
        } else if (!strcmp(op, "ipcget") || !strcmp(op, "ipcopen")) {
            const char *file = getenv("POS_TEST_IPC_FILE");
            CUipcMemHandle h;
            if (!file || (!strcmp(op, "ipcget") && (!depth || stack[depth - 1].what != W_DPTR))) {
                printf("%s none\n", op);
                continue;
            }
            if (!strcmp(op, "ipcget")) {
                rc = cuIpcGetMemHandle(&h, stack[depth - 1].dptr);
                FILE *f = fopen(file, "w");
                if (f) {
                    fwrite(&h, sizeof h, 1, f);
                    fclose(f);
                }
                say(op, rc, NULL);
                continue;
            }
            FILE *f = fopen(file, "r");
            size_t got = f ? fread(&h, sizeof h, 1, f) : 0;
            if (f)
                fclose(f);
            rc = got == 1 ? cuIpcOpenMemHandle(&it.dptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
                          : CUDA_ERROR_INVALID_VALUE;
            it.what = W_IPC;
        } else if (!strcmp(op, "inctx")) {
            rc = cuCtxSetCurrent(extra_ctx);
            say(op, rc, NULL);
            continue;
        } else if (!strcmp(op, "primaryrelease")) {
            rc = cuDevicePrimaryCtxRelease(0);
            depth = 0; /* its allocations went with it */
            say(op, rc, NULL);
            continue;
        } else if (!strcmp(op, "array")) {
            CUDA_ARRAY_DESCRIPTOR d = {.Width = a, .Height = b, .Format = CU_AD_FORMAT_FLOAT,
                                       .NumChannels = 1};
            rc = cuArrayCreate(&it.arr, &d);
            it.what = W_ARRAY;
        } else if (!strcmp(op, "array3d") || !strcmp(op, "mipmap")) {
            CUDA_ARRAY3D_DESCRIPTOR d = {.Width = a, .Height = b, .Depth = 0,
                                         .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 4};
            if (!strcmp(op, "array3d")) {
                d.Depth = c;
                rc = cuArray3DCreate(&it.arr, &d);
                it.what = W_ARRAY;
            } else {
                rc = cuMipmappedArrayCreate(&it.mip, &d, (unsigned)c);
                it.what = W_MIPMAP;
            }
        } else if (!strcmp(op, "hostalloc")) {
            rc = cuMemHostAlloc(&it.host, a, CU_MEMHOSTALLOC_PORTABLE);
            it.what = W_HOSTALLOC;
            if (rc == CUDA_SUCCESS)
                memset(it.host, 1, a);
        } else if (!strcmp(op, "allochost")) {
            rc = cuMemAllocHost(&it.host, a);
            it.what = W_HOSTALLOC;
        } else if (!strcmp(op, "hostreg")) {
            it.host = aligned_alloc(4096, (a + 4095) / 4096 * 4096);
            rc = cuMemHostRegister(it.host, a, 0);
            it.what = W_HOSTREG;
        } else if (!strcmp(op, "free")) {
            if (!depth) {
                printf("free none\n");
                continue;
            }
            rc = free_item(&stack[--depth]);
            say(op, rc, NULL);
            continue;
        } else if (!strcmp(op, "freeall")) {
            while (depth && rc == CUDA_SUCCESS)
                rc = free_item(&stack[--depth]);
            say(op, rc, NULL);
            continue;
        } else if (!strcmp(op, "freebogus")) {
            rc = cuMemFree((CUdeviceptr)0x1000);
            say(op, rc, NULL);
            continue;
        } else if (!strcmp(op, "info")) {
            size_t f = 0, t = 0;
            rc = cuMemGetInfo(&f, &t);
            snprintf(extra, sizeof extra, "free=%zu total=%zu", f, t);
            say(op, rc, extra);
            continue;
        } else if (!strcmp(op, "nvml")) {
            nvml();
            continue;
        } else if (!strcmp(op, "ctx")) {
            rc = cuCtxCreate(&extra_ctx, NULL, 0, 0);
            if (rc == CUDA_SUCCESS)
                cuCtxSetCurrent(ctx);
            say(op, rc, NULL);
            continue;
        } else if (!strcmp(op, "ctxdestroy")) {
            rc = cuCtxDestroy(extra_ctx);
            cuCtxSetCurrent(ctx);
            say(op, rc, NULL);
            continue;
        } else if (!strcmp(op, "module")) {
            rc = cuModuleLoadData(&module, prog_module);
            say(op, rc, NULL);
            continue;
        } else if (!strcmp(op, "unload")) {
            rc = cuModuleUnload(module);
            say(op, rc, NULL);
            continue;
        } else if (!strcmp(op, "threads")) {
            pthread_t th[64];
            int n = a > 64 ? 64 : (int)a;
            race_size = b;
            for (int k = 0; k < n; k++)
                pthread_create(&th[k], NULL, racer, ctx);
            atomic_store(&race_go, 1);
            for (int k = 0; k < n; k++)
                pthread_join(th[k], NULL);
            snprintf(extra, sizeof extra, "ok=%llu max=%llu", atomic_load(&race_ok),
                     atomic_load(&race_max));
            say(op, CUDA_SUCCESS, extra);
            continue;
        } else if (!strcmp(op, "kinds")) {
            const struct pos_mem_account *ac = account ? account(0) : NULL;
            int len = 0;
            for (int k = 0; ac && k < POS_MEM_KINDS; k++)
                len += snprintf(extra + len, sizeof extra - (size_t)len, "%sk%d=%llu",
                                k ? " " : "", k, (unsigned long long)atomic_load(&ac->bytes[k]));
            say(op, CUDA_SUCCESS, extra);
            continue;
        } else if (!strcmp(op, "simused")) {
            CUresult (*sim_used)(CUdevice, unsigned long long *, unsigned long long *);
            SET_FN(sim_used, dlsym(RTLD_DEFAULT, "pos_sim_mem_used"));
            unsigned long long all = 0, mine = 0;
            rc = sim_used ? sim_used(0, &all, &mine) : CUDA_ERROR_NOT_FOUND;
            snprintf(extra, sizeof extra, "mine=%llu", mine);
            say(op, rc, extra);
            continue;
        } else if (!strcmp(op, "hold")) {
            usleep((useconds_t)a * 1000);
            say(op, CUDA_SUCCESS, NULL);
            continue;
        } else {
            fprintf(stderr, "prog_mem: unknown step %s\n", argv[i]);
            return 2;
        }
        if (rc == CUDA_SUCCESS)
            push(it);
        say(op, rc, extra[0] ? extra : NULL);
    }
    printf("launches 0\n");
    return 0;
}
