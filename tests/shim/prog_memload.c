/* Device memory by every allocation path, for the memory ledger's end-to-end tests
 * (tests/integration/test_memory.c) and its benchmark (bench/memory.sh). Runs under the shim
 * or without it, on any driver.
 *
 *   shim_memload fill PATH SIZE MAX [THREADS]  allocate SIZE bytes at a time by PATH until the
 *                                            driver refuses or MAX are held (by each of THREADS
 *                                            threads, racing), then free them all
 *   shim_memload retry SIZE MIN              a caching allocator: SIZE, and after an
 *                                            out-of-memory half as much, down to MIN, until
 *                                            even MIN is refused
 *   shim_memload profile SIZE                a vLLM-like profiling run: free memory before and
 *                                            after allocating, using and freeing SIZE
 *   shim_memload hostvmm SIZE                NCCL-like: cuMemCreate at a host location under a
 *                                            lock another thread holds and waits on
 *   shim_memload cost PATH SIZE N            N allocate/free pairs by PATH: the median pair's ns
 *   shim_memload ipc-export SIZE / ipc-open  one process exports linear memory (its handle on
 *                                            stdout, then waits for stdin to close), another
 *                                            opens it (the handle on stdin) and reads it
 *
 * PATH: linear, pitched, managed, async, pool, vmm, array, array3d, mipmap.
 * With MEMLOAD_HOLD=1, fill prints "holding" once it holds what it got and reads its stdin until
 * it closes, then frees: each line "more" asks for one more block of SIZE by PATH and prints
 * "more_rc RC". Output: "key value" lines; exit 0 unless a call the mode needs
 * failed unexpectedly. */
#include <cuda.h>
#include <sched.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/shim/prog_common.h"

enum path { LINEAR, PITCHED, MANAGED, ASYNC, POOL, VMM, ARRAY, ARRAY3D, MIPMAP, NPATHS };
static const char *const path_names[NPATHS] = {"linear", "pitched", "managed", "async", "pool",
                                               "vmm",    "array",   "array3d", "mipmap"};

struct block {
    CUdeviceptr ptr;
    CUarray array;
    CUmipmappedArray mipmap;
    CUmemGenericAllocationHandle handle;
    size_t size;
};

static CUcontext ctx;
static CUmemoryPool pool;
static size_t vmm_granularity;

static CUmemAllocationProp device_prop(void)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
}

static void path_setup(enum path p)
{
    if (p == POOL) {
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = 0;
        PROG_CHECK(cuMemPoolCreate(&pool, &props));
    } else if (p == VMM) {
        CUmemAllocationProp prop = device_prop();
        PROG_CHECK(cuMemGetAllocationGranularity(&vmm_granularity, &prop,
                                                 CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    }
}

static void path_teardown(enum path p)
{
    if (p == POOL)
        PROG_CHECK(cuMemPoolDestroy(pool));
}

static CUDA_ARRAY3D_DESCRIPTOR array_desc(size_t size, int depth)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    memset(&d, 0, sizeof d);
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 1;
    d.Width = 1024;
    if (depth) {
        d.Height = 1;
        d.Depth = size / 4096 ? size / 4096 : 1;
    } else {
        d.Height = size / 4096 ? size / 4096 : 1;
    }
    return d;
}

/* One allocation of SIZE bytes by P into B: the driver's (or the shim's) answer. */
static CUresult path_alloc(enum path p, size_t size, struct block *b)
{
    memset(b, 0, sizeof *b);
    b->size = size;
    switch (p) {
    case LINEAR:
        return cuMemAlloc(&b->ptr, size);
    case PITCHED: {
        size_t pitch;
        /* rows of 4 KiB: the pitch is the width, so SIZE bytes are asked for */
        return cuMemAllocPitch(&b->ptr, &pitch, 4096, size / 4096 ? size / 4096 : 1, 4);
    }
    case MANAGED:
        return cuMemAllocManaged(&b->ptr, size, CU_MEM_ATTACH_GLOBAL);
    case ASYNC:
    case POOL: {
        CUresult rc = p == ASYNC ? cuMemAllocAsync(&b->ptr, size, NULL)
                                 : cuMemAllocFromPoolAsync(&b->ptr, size, pool, NULL);
        return rc == CUDA_SUCCESS ? cuStreamSynchronize(NULL) : rc;
    }
    case VMM: {
        CUmemAllocationProp prop = device_prop();
        size_t n = (size + vmm_granularity - 1) / vmm_granularity * vmm_granularity;
        b->size = n;
        CUresult rc = cuMemCreate(&b->handle, n, &prop, 0);
        if (rc != CUDA_SUCCESS)
            return rc;
        PROG_CHECK(cuMemAddressReserve(&b->ptr, n, 0, 0, 0));
        PROG_CHECK(cuMemMap(b->ptr, n, 0, b->handle, 0));
        CUmemAccessDesc acc = {.location = prop.location,
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        PROG_CHECK(cuMemSetAccess(b->ptr, n, &acc, 1));
        return CUDA_SUCCESS;
    }
    case ARRAY: {
        CUDA_ARRAY3D_DESCRIPTOR d3 = array_desc(size, 0);
        CUDA_ARRAY_DESCRIPTOR d = {.Width = d3.Width, .Height = d3.Height, .Format = d3.Format,
                                   .NumChannels = d3.NumChannels};
        return cuArrayCreate(&b->array, &d);
    }
    case ARRAY3D: {
        CUDA_ARRAY3D_DESCRIPTOR d = array_desc(size, 1);
        return cuArray3DCreate(&b->array, &d);
    }
    case MIPMAP: {
        CUDA_ARRAY3D_DESCRIPTOR d = array_desc(size, 0);
        return cuMipmappedArrayCreate(&b->mipmap, &d, 1);
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static void path_free(enum path p, struct block *b)
{
    switch (p) {
    case ASYNC:
    case POOL:
        PROG_CHECK(cuMemFreeAsync(b->ptr, NULL));
        PROG_CHECK(cuStreamSynchronize(NULL));
        break;
    case VMM:
        PROG_CHECK(cuMemUnmap(b->ptr, b->size));
        PROG_CHECK(cuMemAddressFree(b->ptr, b->size));
        PROG_CHECK(cuMemRelease(b->handle));
        break;
    case ARRAY:
    case ARRAY3D:
        PROG_CHECK(cuArrayDestroy(b->array));
        break;
    case MIPMAP:
        PROG_CHECK(cuMipmappedArrayDestroy(b->mipmap));
        break;
    default:
        PROG_CHECK(cuMemFree(b->ptr));
    }
}

static enum path path_of(const char *name)
{
    for (int i = 0; i < NPATHS; i++)
        if (strcmp(name, path_names[i]) == 0)
            return (enum path)i;
    fprintf(stderr, "shim_memload: no path '%s'\n", name);
    exit(2);
}

static void print_info(const char *prefix)
{
    size_t free_b = 0, total = 0;
    CUresult rc = cuMemGetInfo(&free_b, &total);
    printf("%sinfo_rc %d\n%sinfo_free %zu\n%sinfo_total %zu\n", prefix, (int)rc, prefix, free_b,
           prefix, total);
}

/* ---- fill ---------------------------------------------------------------------------------- */

struct filler {
    enum path path;
    size_t size;
    long max;
    struct block *blocks;
    long held;
    int refused; /* CUresult that stopped it, 0 if it reached max */
};

static void *fill_thread(void *arg)
{
    struct filler *f = arg;
    PROG_CHECK(cuCtxSetCurrent(ctx));
    while (f->held < f->max) {
        CUresult rc = path_alloc(f->path, f->size, &f->blocks[f->held]);
        if (rc != CUDA_SUCCESS) {
            f->refused = (int)rc;
            break;
        }
        f->held++;
    }
    return NULL;
}

static int fill(enum path p, size_t size, long max, int threads)
{
    path_setup(p);
    struct filler f[64];
    pthread_t t[64];
    if (threads < 1 || threads > 64)
        threads = 1;
    for (int i = 0; i < threads; i++) {
        f[i] = (struct filler){.path = p, .size = size, .max = max};
        f[i].blocks = calloc((size_t)max + 1, sizeof *f[i].blocks);
        pthread_create(&t[i], NULL, fill_thread, &f[i]);
    }
    long held = 0;
    int refused = 0;
    size_t bytes = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        held += f[i].held;
        for (long k = 0; k < f[i].held; k++)
            bytes += f[i].blocks[k].size;
        if (f[i].refused)
            refused = f[i].refused;
    }
    printf("path %s\nheld %ld\nheld_bytes %zu\nrefused %d\n", path_names[p], held, bytes, refused);
    print_info("");
    fflush(stdout);
    struct block more[64];
    int nmore = 0;
    if (getenv("MEMLOAD_HOLD")) {
        printf("holding\n");
        fflush(stdout);
        char line[64];
        while (fgets(line, sizeof line, stdin)) {
            if (strncmp(line, "more", 4) != 0 || nmore == 64)
                continue;
            CUresult rc = path_alloc(p, size, &more[nmore]);
            if (rc == CUDA_SUCCESS)
                nmore++;
            printf("more_rc %d\n", (int)rc);
            fflush(stdout);
        }
    }
    for (int i = 0; i < nmore; i++)
        path_free(p, &more[i]);
    for (int i = 0; i < threads; i++) {
        for (long k = 0; k < f[i].held; k++)
            path_free(p, &f[i].blocks[k]);
        free(f[i].blocks);
    }
    path_teardown(p);
    print_info("after_");
    printf("freed %ld\n", held);
    return 0;
}

/* ---- known failure patterns ---------------------------------------------------------------- */

/* A caching allocator (PyTorch's, on an out-of-memory, frees its cache and retries): asks for
 * SIZE, halves after each refusal, and keeps what it gets, until MIN is refused. */
static int retry(size_t size, size_t min)
{
    size_t held = 0, want = size;
    int attempts = 0, refusals = 0;
    CUdeviceptr *ptrs = calloc(4096, sizeof *ptrs);
    int n = 0;
    while (want >= min && n < 4096) {
        attempts++;
        CUresult rc = cuMemAlloc(&ptrs[n], want);
        if (rc == CUDA_SUCCESS) {
            held += want;
            n++;
        } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
            refusals++;
            want /= 2;
        } else {
            fprintf(stderr, "shim_memload: cuMemAlloc(%zu) = %d\n", want, (int)rc);
            return 1;
        }
    }
    printf("attempts %d\nrefusals %d\nheld_bytes %zu\n", attempts, refusals, held);
    print_info("");
    for (int i = 0; i < n; i++)
        PROG_CHECK(cuMemFree(ptrs[i]));
    free(ptrs);
    return 0;
}

/* vLLM's profiling run: free memory before, a peak of SIZE used by kernels, all freed, free
 * memory after; vLLM asserts the two frees are equal ("initial free == current free"). */
static int profile(size_t size, CUmodule m)
{
    size_t free0, free1, total0, total1, free_mid, total_mid;
    PROG_CHECK(cuMemGetInfo(&free0, &total0));
    CUdeviceptr p;
    PROG_CHECK(cuMemAlloc(&p, size));
    CUfunction k = prog_kernel(m, "work");
    for (int i = 0; i < 8; i++)
        PROG_CHECK(cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    PROG_CHECK(cuCtxSynchronize());
    PROG_CHECK(cuMemGetInfo(&free_mid, &total_mid));
    PROG_CHECK(cuMemFree(p));
    PROG_CHECK(cuMemGetInfo(&free1, &total1));
    printf("free_before %zu\nfree_during %zu\nfree_after %zu\ntotal_before %zu\ntotal_after %zu\n",
           free0, free_mid, free1, total0, total1);
    return 0;
}

struct lock_pair {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int state; /* 0: taking, 1: held by the main thread, 2: the other thread got it */
    int allocs_done; /* atomic: the other thread's allocations are all freed */
};

static void *contender(void *arg)
{
    struct lock_pair *l = arg;
    PROG_CHECK(cuCtxSetCurrent(ctx));
    /* allocations of its own while the main thread is inside cuMemCreate */
    for (int i = 0; i < 50; i++) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 1 << 20) == CUDA_SUCCESS)
            cuMemFree(p);
    }
    __atomic_store_n(&l->allocs_done, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&l->lock);
    l->state = 2;
    pthread_cond_signal(&l->cond);
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

/* NCCL's host-memory path: cuMemCreate with a host location while its own lock is held and
 * another thread allocates and then waits on that lock. Every host location must pass, take
 * no device memory from the ledger, and nothing may hang. */
static int hostvmm(size_t size)
{
    static const CUmemLocationType types[] = {CU_MEM_LOCATION_TYPE_HOST,
                                              CU_MEM_LOCATION_TYPE_HOST_NUMA,
                                              CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT};
    size_t free0, total0, free1, total1;
    PROG_CHECK(cuMemGetInfo(&free0, &total0));
    int made = 0;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        struct lock_pair l = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
        pthread_mutex_lock(&l.lock);
        pthread_t t;
        pthread_create(&t, NULL, contender, &l);
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = types[i];
        prop.location.id = 0;
        size_t gran = 0;
        PROG_CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        size_t n = (size + gran - 1) / gran * gran;
        CUmemGenericAllocationHandle h;
        CUresult rc = cuMemCreate(&h, n, &prop, 0);
        printf("host_type %d rc %d\n", (int)types[i], (int)rc);
        if (rc == CUDA_SUCCESS) {
            made++;
            /* the free memory is read once the other thread's own allocations are back (it
             * then waits on the lock still held here), or one of its 1 MiB would be counted */
            while (!__atomic_load_n(&l.allocs_done, __ATOMIC_ACQUIRE))
                sched_yield();
            PROG_CHECK(cuMemGetInfo(&free1, &total1));
            printf("free_while_held %zu\n", free1);
            PROG_CHECK(cuMemRelease(h));
        }
        l.state = 1;
        pthread_mutex_unlock(&l.lock);
        pthread_join(t, NULL);
    }
    PROG_CHECK(cuMemGetInfo(&free1, &total1));
    printf("made %d\nfree_before %zu\nfree_after %zu\n", made, free0, free1);
    return 0;
}

/* ---- cost ---------------------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int cost(enum path p, size_t size, int n)
{
    path_setup(p);
    uint64_t *ns = calloc((size_t)n, sizeof *ns);
    struct block b;
    for (int i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        PROG_CHECK(path_alloc(p, size, &b));
        path_free(p, &b);
        ns[i] = now_ns() - t0;
    }
    qsort(ns, (size_t)n, sizeof *ns, cmp_u64);
    printf("path %s\npairs %d\nmedian_ns %llu\np10_ns %llu\n", path_names[p], n,
           (unsigned long long)ns[n / 2], (unsigned long long)ns[n / 10]);
    free(ns);
    path_teardown(p);
    return 0;
}

/* ---- IPC ----------------------------------------------------------------------------------- */

static int ipc_export(size_t size)
{
    CUdeviceptr p;
    PROG_CHECK(cuMemAlloc(&p, size));
    PROG_CHECK(cuMemsetD8(p, 0x5a, size));
    CUipcMemHandle h;
    PROG_CHECK(cuIpcGetMemHandle(&h, p));
    for (size_t i = 0; i < sizeof h.reserved; i++)
        printf("%02x", (unsigned char)h.reserved[i]);
    printf("\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    PROG_CHECK(cuMemFree(p));
    return 0;
}

static int ipc_open(void)
{
    char hex[2 * CU_IPC_HANDLE_SIZE + 2];
    if (!fgets(hex, sizeof hex, stdin))
        return 1;
    CUipcMemHandle h;
    for (size_t i = 0; i < sizeof h.reserved; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return 1;
        h.reserved[i] = (char)v;
    }
    print_info("before_");
    CUdeviceptr p;
    CUresult rc = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("open_rc %d\n", (int)rc);
    if (rc != CUDA_SUCCESS)
        return 1;
    unsigned char byte = 0;
    PROG_CHECK(cuMemcpyDtoH(&byte, p, 1));
    printf("byte %u\n", byte);
    print_info("open_");
    PROG_CHECK(cuIpcCloseMemHandle(p));
    print_info("closed_");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: shim_memload fill|retry|profile|hostvmm|cost|ipc-export|ipc-open"
                        " ...\n");
        return 2;
    }
    if (getenv("MEMLOAD_START_GATE")) {
        /* the driver initialised (and posd's session made): says so and waits for "go" before
         * its context and module, so that a test can start two processes' contexts at once */
        PROG_CHECK(cuInit(0));
        printf("ready\n");
        fflush(stdout);
        char go[16];
        if (!fgets(go, sizeof go, stdin) || strncmp(go, "go", 2) != 0)
            return 1;
    }
    CUmodule m = prog_start(&ctx);
    const char *mode = argv[1];
    int rc;
    if (strcmp(mode, "fill") == 0 && argc >= 5)
        rc = fill(path_of(argv[2]), strtoull(argv[3], NULL, 0), atol(argv[4]),
                  argc > 5 ? atoi(argv[5]) : 1);
    else if (strcmp(mode, "retry") == 0 && argc >= 4)
        rc = retry(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
    else if (strcmp(mode, "profile") == 0 && argc >= 3)
        rc = profile(strtoull(argv[2], NULL, 0), m);
    else if (strcmp(mode, "hostvmm") == 0 && argc >= 3)
        rc = hostvmm(strtoull(argv[2], NULL, 0));
    else if (strcmp(mode, "cost") == 0 && argc >= 5)
        rc = cost(path_of(argv[2]), strtoull(argv[3], NULL, 0), atoi(argv[4]));
    else if (strcmp(mode, "ipc-export") == 0 && argc >= 3)
        rc = ipc_export(strtoull(argv[2], NULL, 0));
    else if (strcmp(mode, "ipc-open") == 0)
        rc = ipc_open();
    else {
        fprintf(stderr, "shim_memload: bad arguments for '%s'\n", mode);
        return 2;
    }
    printf("launches 0\n");
    return rc;
}
