/* Tests the simulated driver's device memory (linked -lcuda against build/sim/libcuda.so.1):
 * every allocation path of cuda.h shows in cuMemGetInfo and gives its memory back, the
 * device's capacity is never exceeded (also by two processes racing), sizes near 2^64 and
 * unknown pointers are refused, pools keep what their release threshold says, VMM host
 * locations take no device memory, contexts and modules cost what cuMemGetInfo measures, IPC,
 * pool and VMM exports reach a second process, a killed process's memory comes back within a
 * second, and MPS's pinned memory limit holds. Second processes are this binary again
 * (POS_TEST_MEM_CHILD names their part), as a child forked after cuInit cannot use the driver. */
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/cunit_main.h"

CUresult pos_sim_mem_used(CUdevice, unsigned long long *, unsigned long long *);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);

#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define CK(x) CU_ASSERT_EQUAL_FATAL((x), CUDA_SUCCESS)

static CUcontext ctx;

static const char *module_text = ".pos_sim_module 1\n"
                                 ".kernel long_k flops=4.2e10 bytes=0\n"; /* 50 ms on xavier */

/* Device memory this process holds (pos_sim_mem_used), and every process together (~0 when
 * it cannot be read; second processes, which have no CUnit, use these too). */
static unsigned long long mine(void)
{
    unsigned long long all = 0, me = 0;
    return pos_sim_mem_used(0, &all, &me) == CUDA_SUCCESS ? me : ~0ull;
}

static unsigned long long all_used(void)
{
    unsigned long long all = 0, me = 0;
    return pos_sim_mem_used(0, &all, &me) == CUDA_SUCCESS ? all : ~0ull;
}

static size_t free_now(void)
{
    size_t f = 0, t = 0;
    CU_ASSERT_EQUAL(cuMemGetInfo(&f, &t), CUDA_SUCCESS);
    return f;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- second processes -------------------------------------------------------------------- */

static void hex_put(char *out, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", ((const unsigned char *)p)[i]);
}

static void hex_get(const char *in, void *p, size_t n)
{
    for (size_t i = 0; i < n && in[2 * i] && in[2 * i + 1]; i++) {
        unsigned v;
        sscanf(in + 2 * i, "%2x", &v);
        ((unsigned char *)p)[i] = (unsigned char)v;
    }
}

/* Starts this binary as a second process of part ROLE with ARG (POS_TEST_MEM_ARG), its stdout
 * on *OUT_FD when not NULL. Returns its pid. */
static pid_t child_start(const char *role, const char *arg, int *out_fd)
{
    int p[2] = {-1, -1};
    if (out_fd && pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        if (out_fd) {
            dup2(p[1], 1);
            close(p[0]);
            close(p[1]);
        }
        setenv("POS_TEST_MEM_CHILD", role, 1);
        setenv("POS_TEST_MEM_ARG", arg ? arg : "", 1);
        execl("/proc/self/exe", "test_sim_memory", (char *)NULL);
        _exit(127);
    }
    if (out_fd) {
        close(p[1]);
        *out_fd = p[0];
    }
    return pid;
}

/* Waits for PID; its exit status, or -1 when it did not exit normally. */
static int child_wait(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Reads one line from FD (up to N-1 bytes). */
static int read_line(int fd, char *buf, size_t n)
{
    size_t k = 0;
    while (k + 1 < n) {
        ssize_t r = read(fd, buf + k, 1);
        if (r <= 0)
            break;
        if (buf[k] == '\n')
            break;
        k++;
    }
    buf[k] = '\0';
    return (int)k;
}

static int child_setup(void)
{
    CUcontext c;
    return cuInit(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&c, 0) == CUDA_SUCCESS &&
                   cuCtxSetCurrent(c) == CUDA_SUCCESS
               ? 0
               : 1;
}

/* Opens the IPC handle, checks the exporter's bytes and that opening took no memory, writes
 * its own, closes. */
static int child_ipc(const char *arg)
{
    CUipcMemHandle h;
    hex_get(arg, h.reserved, sizeof h.reserved);
    unsigned long long before = mine();
    CUdeviceptr p, p2;
    if (cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS)
        return 2;
    if (cuIpcOpenMemHandle(&p2, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS || p2 != p)
        return 3;
    if (mine() != before)
        return 4;
    unsigned char buf[4096];
    if (cuMemcpyDtoH(buf, p, sizeof buf) != CUDA_SUCCESS)
        return 5;
    for (size_t i = 0; i < sizeof buf; i++)
        if (buf[i] != (unsigned char)(i * 7))
            return 6;
    memset(buf, 0x5a, sizeof buf);
    if (cuMemcpyHtoD(p, buf, sizeof buf) != CUDA_SUCCESS)
        return 7;
    if (cuIpcCloseMemHandle(p) != CUDA_SUCCESS || cuIpcCloseMemHandle(p) != CUDA_SUCCESS)
        return 8;
    return cuIpcCloseMemHandle(p) == CUDA_ERROR_INVALID_VALUE ? 0 : 9;
}

/* ARG: "POOLFD HEX(export data)": imports the pool and the pointer, checks the bytes. */
static int child_pool(const char *arg)
{
    int fd = atoi(arg);
    const char *hex = strchr(arg, ' ');
    if (!hex)
        return 2;
    CUmemPoolPtrExportData data;
    hex_get(hex + 1, data.reserved, sizeof data.reserved);
    CUmemoryPool pool;
    if (cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                           0) != CUDA_SUCCESS)
        return 3;
    unsigned long long before = mine();
    CUdeviceptr p;
    if (cuMemPoolImportPointer(&p, pool, &data) != CUDA_SUCCESS)
        return 4;
    CUdeviceptr q;
    if (cuMemAllocFromPoolAsync(&q, 4096, pool, NULL) != CUDA_ERROR_INVALID_VALUE)
        return 5;
    unsigned char buf[4096];
    if (mine() != before || cuMemcpyDtoH(buf, p, sizeof buf) != CUDA_SUCCESS)
        return 6;
    for (size_t i = 0; i < sizeof buf; i++)
        if (buf[i] != (unsigned char)(i * 3))
            return 7;
    if (cuMemFreeAsync(p, NULL) != CUDA_SUCCESS || cuCtxSynchronize() != CUDA_SUCCESS)
        return 8;
    return cuMemPoolDestroy(pool) == CUDA_SUCCESS ? 0 : 9;
}

/* ARG: the exported VMM file descriptor: imports, maps, checks the bytes, takes no memory. */
static int child_vmm(const char *arg)
{
    int fd = atoi(arg);
    unsigned long long before = mine();
    CUmemGenericAllocationHandle h;
    if (cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS)
        return 2;
    CUmemAllocationProp prop;
    if (cuMemGetAllocationPropertiesFromHandle(&prop, h) != CUDA_SUCCESS ||
        prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return 3;
    CUdeviceptr va;
    if (cuMemAddressReserve(&va, 2 * MIB, 0, 0, 0) != CUDA_SUCCESS ||
        cuMemMap(va, 2 * MIB, 0, h, 0) != CUDA_SUCCESS)
        return 4;
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    unsigned char buf[4096];
    if (cuMemSetAccess(va, 2 * MIB, &acc, 1) != CUDA_SUCCESS ||
        cuMemcpyDtoH(buf, va + MIB, sizeof buf) != CUDA_SUCCESS)
        return 5;
    for (size_t i = 0; i < sizeof buf; i++)
        if (buf[i] != (unsigned char)(i * 5))
            return 6;
    if (mine() != before)
        return 7;
    if (cuMemUnmap(va, 2 * MIB) != CUDA_SUCCESS || cuMemRelease(h) != CUDA_SUCCESS ||
        cuMemAddressFree(va, 2 * MIB) != CUDA_SUCCESS)
        return 8;
    return 0;
}

/* Allocates and frees chunks of 2.5 GiB as fast as it can for ARG seconds, checking after
 * every allocation that the device holds no more than its capacity; prints how many it got. */
static int child_hammer(const char *arg)
{
    double end = now_s() + atof(arg);
    size_t total = 0, f = 0;
    cuMemGetInfo(&f, &total);
    unsigned long got = 0, refused = 0;
    const size_t chunk = 5 * GIB / 2;
    while (now_s() < end) {
        CUdeviceptr p[2] = {0, 0};
        for (int i = 0; i < 2; i++) {
            CUresult rc = cuMemAlloc(&p[i], chunk);
            if (rc == CUDA_SUCCESS)
                got++;
            else if (rc == CUDA_ERROR_OUT_OF_MEMORY)
                refused++;
            else
                return 2;
            if (all_used() > total)
                return 3;
        }
        for (int i = 0; i < 2; i++)
            if (p[i] && cuMemFree(p[i]) != CUDA_SUCCESS)
                return 4;
    }
    printf("%lu %lu\n", got, refused);
    fflush(stdout);
    return 0;
}

/* Takes 1 GiB and a pool's 256 MiB, says so, and waits to be killed. */
static int child_hold(const char *arg)
{
    CUdeviceptr p, q;
    if (cuMemAlloc(&p, GIB) != CUDA_SUCCESS || cuMemAllocAsync(&q, 256 * MIB, NULL) != CUDA_SUCCESS)
        return 2;
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}

/* Under CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (set by the parent): ARG is the limit in MiB. */
static int child_mps(const char *arg)
{
    size_t limit = (size_t)atol(arg) * MIB;
    CUdeviceptr a, b;
    if (cuMemAlloc(&a, limit - 64 * MIB) != CUDA_SUCCESS)
        return 2;
    if (cuMemAlloc(&b, 128 * MIB) != CUDA_ERROR_OUT_OF_MEMORY)
        return 3;
    if (cuMemAllocAsync(&b, 128 * MIB, NULL) != CUDA_ERROR_OUT_OF_MEMORY)
        return 4;
    if (cuMemAlloc(&b, 32 * MIB) != CUDA_SUCCESS || cuMemFree(b) != CUDA_SUCCESS)
        return 5;
    if (cuMemFree(a) != CUDA_SUCCESS || cuMemAlloc(&a, limit) != CUDA_SUCCESS)
        return 6;
    return 0;
}

static const struct {
    const char *role;
    int (*fn)(const char *arg);
} roles[] = {{"ipc", child_ipc},       {"pool", child_pool}, {"vmm", child_vmm},
             {"hammer", child_hammer}, {"hold", child_hold}, {"mps", child_mps}};

/* A second process runs its part instead of the tests. */
__attribute__((constructor)) static void child_main(void)
{
    const char *role = getenv("POS_TEST_MEM_CHILD");
    if (!role || !*role)
        return;
    const char *arg = getenv("POS_TEST_MEM_ARG");
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(roles[i].role, role) == 0) {
            /* exit, not _exit: the driver leaves the device at exit */
            exit(child_setup() != 0 ? 100 : roles[i].fn(arg ? arg : ""));
        }
    _exit(101);
}

/* ---- the suite --------------------------------------------------------------------------- */

static int suite_init(void)
{
    char inst[64];
    snprintf(inst, sizeof inst, "test-memory-%d", (int)getpid());
    setenv("POS_SIM_INSTANCE", inst, 1);
    setenv("POS_SIM_DEVICE", "xavier-nx", 1); /* 8 GiB */
    setenv("POS_SIM_MODE", "mps", 1);
    unsetenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    return 0;
}

/* An allocation made by ALLOC of about BYTES shows in cuMemGetInfo, and FREE gives it back. */
#define EXPECT_TAKES(bytes, alloc, release)                                                        \
    do {                                                                                           \
        size_t f0_ = free_now();                                                                   \
        CK(alloc);                                                                                 \
        CU_ASSERT_EQUAL(f0_ - free_now(), (size_t)(bytes));                                        \
        CK(release);                                                                               \
        CU_ASSERT_EQUAL(free_now(), f0_);                                                          \
    } while (0)

static void test_every_path_takes_device_memory_and_gives_it_back(void)
{
    CUdeviceptr p;
    size_t pitch;
    EXPECT_TAKES(64 * MIB, cuMemAlloc(&p, 64 * MIB), cuMemFree(p));
    EXPECT_TAKES(100 * 1024, cuMemAllocPitch(&p, &pitch, 1000, 100, 4), cuMemFree(p));
    EXPECT_TAKES(3 * MIB, cuMemAllocManaged(&p, 3 * MIB, CU_MEM_ATTACH_GLOBAL), cuMemFree(p));
    EXPECT_TAKES(5 * MIB, cuMemAllocManaged(&p, 5 * MIB, CU_MEM_ATTACH_HOST), cuMemFree(p));
    /* stream-ordered: the default pool (threshold 0) gives back at the free's completion */
    EXPECT_TAKES(7 * MIB, cuMemAllocAsync(&p, 7 * MIB, NULL),
                 (cuMemFreeAsync(p, NULL), cuCtxSynchronize()));
    EXPECT_TAKES(7 * MIB, cuMemAllocAsync_ptsz(&p, 7 * MIB, NULL),
                 (cuMemFreeAsync_ptsz(p, NULL), cuCtxSynchronize()));
    EXPECT_TAKES(9 * MIB, cuMemAllocAsync(&p, 9 * MIB, NULL), cuMemFree(p));
    CUmemoryPool pool;
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CK(cuMemPoolCreate(&pool, &props));
    EXPECT_TAKES(11 * MIB, cuMemAllocFromPoolAsync(&p, 11 * MIB, pool, NULL),
                 (cuMemFreeAsync(p, NULL), cuStreamSynchronize(NULL)));
    CK(cuMemPoolDestroy(pool));
    /* VMM on the device */
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemGenericAllocationHandle h;
    EXPECT_TAKES(4 * MIB, cuMemCreate(&h, 4 * MIB, &prop, 0), cuMemRelease(h));
    /* arrays: format x channels x extents; a mipmap's levels summed */
    CUarray a;
    CUDA_ARRAY_DESCRIPTOR d2 = {1024, 512, CU_AD_FORMAT_FLOAT, 4};
    EXPECT_TAKES(1024 * 512 * 16, cuArrayCreate(&a, &d2), cuArrayDestroy(a));
    CUDA_ARRAY3D_DESCRIPTOR d3 = {256, 128, 64, CU_AD_FORMAT_HALF, 2, 0};
    EXPECT_TAKES(256 * 128 * 64 * 4, cuArray3DCreate(&a, &d3), cuArrayDestroy(a));
    CUDA_ARRAY3D_DESCRIPTOR bc = {64, 64, 0, CU_AD_FORMAT_BC1_UNORM, 4, 0};
    EXPECT_TAKES(16 * 16 * 8, cuArray3DCreate(&a, &bc), cuArrayDestroy(a));
    CUmipmappedArray m;
    CUDA_ARRAY3D_DESCRIPTOR dm = {64, 16, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
    /* 64x16 + 32x8 + 16x4 + 8x2 + 4x1 + 2x1 + 1x1 */
    EXPECT_TAKES(1024 + 256 + 64 + 16 + 4 + 2 + 1, cuMipmappedArrayCreate(&m, &dm, 7),
                 cuMipmappedArrayDestroy(m));
}

static void test_pitch_rounds_rows_and_checks_element_size(void)
{
    CUdeviceptr p;
    size_t pitch = 0;
    CK(cuMemAllocPitch(&p, &pitch, 1000, 3, 8));
    CU_ASSERT_EQUAL(pitch, 1024);
    CUdeviceptr base;
    size_t size;
    CK(cuMemGetAddressRange(&base, &size, p + 100));
    CU_ASSERT_EQUAL(base, p);
    CU_ASSERT_EQUAL(size, 3 * 1024);
    CK(cuMemsetD8(p + 3 * 1024 - 1, 1, 1)); /* the last byte of the last row is device memory */
    CK(cuMemFree(p));
    CK(cuMemAllocPitch(&p, &pitch, 512, 1, 16));
    CU_ASSERT_EQUAL(pitch, 512);
    CK(cuMemFree(p));
    CU_ASSERT_EQUAL(cuMemAllocPitch(&p, &pitch, 1000, 3, 2), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemAllocPitch(&p, &pitch, 1000, 3, 12), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemAllocPitch(&p, &pitch, 0, 3, 4), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemAllocPitch(&p, &pitch, 1000, 0, 4), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemAllocPitch(&p, NULL, 1000, 3, 4), CUDA_ERROR_INVALID_VALUE);
}

static void test_sizes_near_2_64_and_zero_are_refused_never_wrapped(void)
{
    size_t f0 = free_now();
    CUdeviceptr p;
    size_t pitch;
    const size_t huge[] = {SIZE_MAX, SIZE_MAX - 4095, (size_t)1 << 63, 9 * GIB};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        CU_ASSERT_EQUAL(cuMemAlloc(&p, huge[i]), CUDA_ERROR_OUT_OF_MEMORY);
        CU_ASSERT_EQUAL(cuMemAllocManaged(&p, huge[i], CU_MEM_ATTACH_GLOBAL),
                        CUDA_ERROR_OUT_OF_MEMORY);
        CU_ASSERT_EQUAL(cuMemAllocAsync(&p, huge[i], NULL), CUDA_ERROR_OUT_OF_MEMORY);
    }
    CU_ASSERT_EQUAL(cuMemAllocPitch(&p, &pitch, SIZE_MAX, 1, 4), CUDA_ERROR_OUT_OF_MEMORY);
    CU_ASSERT_EQUAL(cuMemAllocPitch(&p, &pitch, 4096, SIZE_MAX / 2048, 4),
                    CUDA_ERROR_OUT_OF_MEMORY);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemGenericAllocationHandle h;
    CU_ASSERT_EQUAL(cuMemCreate(&h, (SIZE_MAX / (2 * MIB)) * 2 * MIB, &prop, 0),
                    CUDA_ERROR_OUT_OF_MEMORY);
    CUarray a;
    CUDA_ARRAY3D_DESCRIPTOR d = {SIZE_MAX / 2, SIZE_MAX / 2, 4, CU_AD_FORMAT_FLOAT, 4, 0};
    CU_ASSERT_EQUAL(cuArray3DCreate(&a, &d), CUDA_ERROR_OUT_OF_MEMORY);
    /* 2^64 - 1 MiB: what the device holds plus it would wrap to a little */
    CUDA_ARRAY3D_DESCRIPTOR near = {(1ull << 62) - (1ull << 18), 0, 0, CU_AD_FORMAT_UNSIGNED_INT8,
                                    4, 0};
    CU_ASSERT_EQUAL(cuArray3DCreate(&a, &near), CUDA_ERROR_OUT_OF_MEMORY);
    /* zero bytes: invalid, as NVIDIA's driver answers */
    CU_ASSERT_EQUAL(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemAllocManaged(&p, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemAllocAsync(&p, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemCreate(&h, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemCreate(&h, MIB, &prop, 0), CUDA_ERROR_INVALID_VALUE); /* not 2 MiB */
    CU_ASSERT_EQUAL(cuMemAllocManaged(&p, MIB, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(free_now(), f0);
}

static void test_over_capacity_is_out_of_memory_until_memory_is_freed(void)
{
    size_t f0 = free_now();
    CUdeviceptr big;
    CK(cuMemAlloc(&big, f0 - 16 * MIB));
    CUdeviceptr p;
    size_t pitch;
    CU_ASSERT_EQUAL(cuMemAlloc(&p, 32 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
    CU_ASSERT_EQUAL(cuMemAllocPitch(&p, &pitch, 32 * MIB, 1, 4), CUDA_ERROR_OUT_OF_MEMORY);
    CU_ASSERT_EQUAL(cuMemAllocManaged(&p, 32 * MIB, CU_MEM_ATTACH_GLOBAL),
                    CUDA_ERROR_OUT_OF_MEMORY);
    CU_ASSERT_EQUAL(cuMemAllocAsync(&p, 32 * MIB, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemGenericAllocationHandle h;
    CU_ASSERT_EQUAL(cuMemCreate(&h, 32 * MIB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CUarray a;
    CUDA_ARRAY_DESCRIPTOR d = {8192, 1024, CU_AD_FORMAT_FLOAT, 1};
    CU_ASSERT_EQUAL(cuArrayCreate(&a, &d), CUDA_ERROR_OUT_OF_MEMORY);
    CUmodule mod;
    CU_ASSERT_EQUAL(cuModuleLoadData(&mod, module_text), CUDA_SUCCESS); /* 2 MiB fits */
    CK(cuModuleUnload(mod));
    CUcontext c2;
    CU_ASSERT_EQUAL(cuCtxCreate_v2(&c2, 0, 0), CUDA_ERROR_OUT_OF_MEMORY); /* 86 MiB does not */
    /* VMM host memory needs no device memory */
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CK(cuMemCreate(&h, 32 * MIB, &prop, 0));
    CK(cuMemRelease(h));
    CK(cuMemFree(big));
    CK(cuMemAlloc(&p, 32 * MIB));
    CK(cuMemFree(p));
    CU_ASSERT_EQUAL(free_now(), f0);
}

static void test_frees_of_unknown_pointers_are_refused(void)
{
    CUdeviceptr p;
    char host[64];
    CU_ASSERT_EQUAL(cuMemFree((CUdeviceptr)(uintptr_t)host), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemFree(0x12345000), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemFreeAsync(0x12345000, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuIpcCloseMemHandle(0x12345000), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemAlloc(&p, MIB));
    CU_ASSERT_EQUAL(cuMemFree(p + 16), CUDA_ERROR_INVALID_VALUE); /* not its start */
    CU_ASSERT_EQUAL(cuMemFreeAsync(p, NULL), CUDA_ERROR_INVALID_VALUE); /* not a pool's */
    CK(cuMemFree(p));
    CU_ASSERT_EQUAL(cuMemFree(p), CUDA_ERROR_INVALID_VALUE); /* twice */
    CK(cuMemAllocAsync(&p, MIB, NULL));
    CK(cuMemFreeAsync(p, NULL));
    CU_ASSERT_EQUAL(cuMemFreeAsync(p, NULL), CUDA_ERROR_INVALID_VALUE);
    CK(cuCtxSynchronize());
    CU_ASSERT_EQUAL(cuMemRelease(0), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuArrayDestroy((CUarray)host), CUDA_ERROR_INVALID_HANDLE);
    CU_ASSERT_EQUAL(cuMemPoolDestroy((CUmemoryPool)host), CUDA_ERROR_INVALID_VALUE);
    CUmemoryPool def;
    CK(cuDeviceGetDefaultMemPool(&def, 0));
    CU_ASSERT_EQUAL(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
}

static cuuint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute attr)
{
    cuuint64_t v = 0;
    CU_ASSERT_EQUAL(cuMemPoolGetAttribute(pool, attr, &v), CUDA_SUCCESS);
    return v;
}

static void test_pool_keeps_up_to_its_release_threshold_and_trims(void)
{
    CUmemoryPool pool;
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CK(cuMemPoolCreate(&pool, &props));
    cuuint64_t thr = 48 * MIB;
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    CU_ASSERT_EQUAL(pool_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 48 * MIB);
    size_t f0 = free_now();
    CUdeviceptr a, b;
    CK(cuMemAllocFromPoolAsync(&a, 40 * MIB, pool, NULL));
    CK(cuMemAllocFromPoolAsync(&b, 24 * MIB, pool, NULL));
    CU_ASSERT_EQUAL(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 64 * MIB);
    CU_ASSERT_EQUAL(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 64 * MIB);
    CU_ASSERT_EQUAL(f0 - free_now(), 64 * MIB);
    CK(cuMemFreeAsync(a, NULL));
    CK(cuMemFreeAsync(b, NULL));
    CK(cuCtxSynchronize());
    /* the pool keeps its threshold's 48 MiB, the device sees it held */
    CU_ASSERT_EQUAL(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0);
    CU_ASSERT_EQUAL(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 48 * MIB);
    CU_ASSERT_EQUAL(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 64 * MIB);
    CU_ASSERT_EQUAL(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 64 * MIB);
    CU_ASSERT_EQUAL(f0 - free_now(), 48 * MIB);
    /* an allocation that fits in the cache takes nothing more from the device */
    CK(cuMemAllocFromPoolAsync(&a, 32 * MIB, pool, NULL));
    CU_ASSERT_EQUAL(f0 - free_now(), 48 * MIB);
    CK(cuMemFreeAsync(a, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemPoolTrimTo(pool, 16 * MIB));
    CU_ASSERT_EQUAL(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 16 * MIB);
    CU_ASSERT_EQUAL(f0 - free_now(), 16 * MIB);
    cuuint64_t zero = 0, one = 1;
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    CU_ASSERT_EQUAL(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 0);
    CU_ASSERT_EQUAL(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &one),
                    CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &zero),
                    CUDA_ERROR_INVALID_VALUE);
    /* the pool's maximum size bounds what it reserves */
    CK(cuMemPoolTrimTo(pool, 0));
    CU_ASSERT_EQUAL(free_now(), f0);
    CK(cuMemPoolDestroy(pool));
    props.maxSize = 8 * MIB;
    CK(cuMemPoolCreate(&pool, &props));
    CU_ASSERT_EQUAL(cuMemAllocFromPoolAsync(&a, 9 * MIB, pool, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    /* destroyed with an allocation out: the pool's memory goes when it is freed */
    CK(cuMemAllocFromPoolAsync(&a, 8 * MIB, pool, NULL));
    CK(cuMemPoolDestroy(pool));
    CU_ASSERT_EQUAL(f0 - free_now(), 8 * MIB);
    CK(cuMemFree(a));
    CU_ASSERT_EQUAL(free_now(), f0);
}

static void test_current_pool_serves_cuMemAllocAsync(void)
{
    CUmemoryPool def, cur, pool;
    CK(cuDeviceGetDefaultMemPool(&def, 0));
    CK(cuDeviceGetMemPool(&cur, 0));
    CU_ASSERT_EQUAL(cur, def);
    CUmemLocation dev = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CK(cuMemGetDefaultMemPool(&cur, &dev, CU_MEM_ALLOCATION_TYPE_PINNED));
    CU_ASSERT_EQUAL(cur, def);
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = dev};
    CK(cuMemPoolCreate(&pool, &props));
    CK(cuDeviceSetMemPool(0, pool));
    CK(cuMemGetMemPool(&cur, &dev, CU_MEM_ALLOCATION_TYPE_PINNED));
    CU_ASSERT_EQUAL(cur, pool);
    CUdeviceptr p;
    CK(cuMemAllocAsync(&p, 3 * MIB, NULL));
    CU_ASSERT_EQUAL(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 3 * MIB);
    CK(cuMemFreeAsync(p, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemPoolDestroy(pool)); /* the device's current pool is its default again */
    CK(cuDeviceGetMemPool(&cur, 0));
    CU_ASSERT_EQUAL(cur, def);
    /* a host pool takes no device memory */
    CUmemPoolProps hp = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                         .location = {CU_MEM_LOCATION_TYPE_HOST, 0}};
    CK(cuMemPoolCreate(&pool, &hp));
    unsigned long long before = mine();
    CK(cuMemAllocFromPoolAsync(&p, 8 * MIB, pool, NULL));
    CU_ASSERT_EQUAL(mine(), before);
    CK(cuMemFreeAsync(p, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemPoolDestroy(pool));
    CU_ASSERT_EQUAL(cuDeviceSetMemPool(0, def), CUDA_SUCCESS);
}

static void test_free_async_gives_memory_back_in_stream_order(void)
{
    CUmodule mod;
    CUfunction f;
    CK(cuModuleLoadData(&mod, module_text));
    CK(cuModuleGetFunction(&f, mod, "long_k"));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    size_t f0 = free_now();
    CUdeviceptr p;
    CK(cuMemAllocAsync(&p, 64 * MIB, s));
    CK(cuLaunchKernel(f, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuMemFreeAsync(p, s));
    /* the kernel before the free still runs: the memory is still the pool's */
    CU_ASSERT_EQUAL(f0 - free_now(), 64 * MIB);
    CK(cuStreamSynchronize(s));
    CU_ASSERT_EQUAL(free_now(), f0);
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
}

static void test_vmm_host_locations_take_no_device_memory(void)
{
    const CUmemLocationType hosts[] = {CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA,
                                       CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT};
    unsigned long long before = mine();
    for (size_t i = 0; i < 3; i++) {
        CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                    .location = {hosts[i], 0}};
        size_t gran = 0;
        CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        CU_ASSERT_EQUAL(gran, 2 * MIB);
        CUmemGenericAllocationHandle h;
        CK(cuMemCreate(&h, 64 * MIB, &prop, 0));
        CU_ASSERT_EQUAL(mine(), before);
        CUdeviceptr va;
        CK(cuMemAddressReserve(&va, 64 * MIB, 0, 0, 0));
        CK(cuMemMap(va, 64 * MIB, 0, h, 0));
        CUmemAccessDesc acc = {{hosts[i], 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        CK(cuMemSetAccess(va, 64 * MIB, &acc, 1));
        CK(cuMemsetD32(va, 0xabcd, 1024));
        unsigned v = 0;
        CK(cuMemcpyDtoH(&v, va + 4092, 4));
        CU_ASSERT_EQUAL(v, 0xabcd);
        CU_ASSERT_EQUAL(mine(), before);
        CK(cuMemUnmap(va, 64 * MIB));
        CK(cuMemAddressFree(va, 64 * MIB));
        CK(cuMemRelease(h));
    }
    CUmemAllocationProp bad = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                               .location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 9999}};
    CUmemGenericAllocationHandle h;
    CU_ASSERT_EQUAL(cuMemCreate(&h, 2 * MIB, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad.location = (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, 1};
    CU_ASSERT_EQUAL(cuMemCreate(&h, 2 * MIB, &bad, 0), CUDA_ERROR_INVALID_VALUE);
}

static void test_vmm_memory_goes_with_the_last_handle_or_mapping(void)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    size_t f0 = free_now();
    CUmemGenericAllocationHandle h, h2;
    CK(cuMemCreate(&h, 4 * MIB, &prop, 0));
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, 8 * MIB, 0, 0, 0));
    CK(cuMemMap(va, 4 * MIB, 0, h, 0));
    CK(cuMemMap(va + 4 * MIB, 2 * MIB, 2 * MIB, h, 0)); /* the same memory twice */
    CU_ASSERT_EQUAL(cuMemMap(va, 2 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* mapped */
    CU_ASSERT_EQUAL(cuMemMap(va + 6 * MIB, 2 * MIB, 4 * MIB, h, 0), CUDA_ERROR_INVALID_VALUE);
    /* no access yet: the device cannot reach it */
    CU_ASSERT_EQUAL(cuMemsetD8(va, 1, 16), CUDA_ERROR_INVALID_VALUE);
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CK(cuMemSetAccess(va, 6 * MIB, &acc, 1));
    unsigned long long fl = 0;
    CK(cuMemGetAccess(&fl, &acc.location, va + 5 * MIB));
    CU_ASSERT_EQUAL(fl, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    /* a copy across the two mappings sees one range; the alias shows the same bytes */
    unsigned char pat[4096], back[4096];
    for (size_t i = 0; i < sizeof pat; i++)
        pat[i] = (unsigned char)(i * 13);
    CK(cuMemcpyHtoD(va + 4 * MIB - 2048, pat, sizeof pat));
    CK(cuMemcpyDtoH(back, va + 2 * MIB, 2048));
    CU_ASSERT_EQUAL(memcmp(back, pat + 2048, 2048), 0);
    CK(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)(va + MIB)));
    CU_ASSERT_EQUAL(h2, h);
    CUmemAllocationProp got;
    CK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    CU_ASSERT_EQUAL(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
    CU_ASSERT_EQUAL(f0 - free_now(), 4 * MIB);
    CK(cuMemRelease(h));
    CK(cuMemRelease(h2));
    CU_ASSERT_EQUAL(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    /* released, still mapped: still held */
    CU_ASSERT_EQUAL(f0 - free_now(), 4 * MIB);
    CU_ASSERT_EQUAL(cuMemAddressFree(va, 8 * MIB), CUDA_ERROR_INVALID_VALUE); /* mapped */
    CU_ASSERT_EQUAL(cuMemUnmap(va, 2 * MIB), CUDA_ERROR_INVALID_VALUE);      /* part of one */
    CK(cuMemUnmap(va, 4 * MIB));
    CU_ASSERT_EQUAL(f0 - free_now(), 4 * MIB);
    CK(cuMemUnmap(va + 4 * MIB, 2 * MIB));
    CU_ASSERT_EQUAL(free_now(), f0);
    CK(cuMemAddressFree(va, 8 * MIB));
}

static void test_context_and_module_overhead_is_measured_by_meminfo(void)
{
    size_t f0 = free_now();
    CUcontext c2;
    CK(cuCtxCreate_v2(&c2, 0, 0));
    size_t f1 = free_now();
    CU_ASSERT_EQUAL(f0 - f1, 86 * MIB); /* xavier-nx's ctx_mem_bytes */
    CUmodule mod;
    CK(cuModuleLoadData(&mod, module_text));
    CU_ASSERT_EQUAL(f1 - free_now(), 2 * MIB);
    CUlibrary lib;
    CK(cuLibraryLoadData(&lib, module_text, NULL, NULL, 0, NULL, NULL, 0));
    CU_ASSERT_EQUAL(f1 - free_now(), 4 * MIB);
    CK(cuLibraryUnload(lib));
    CK(cuModuleUnload(mod));
    CU_ASSERT_EQUAL(free_now(), f1);
    CK(cuCtxDestroy(c2));
    CK(cuCtxSetCurrent(ctx));
    CU_ASSERT_EQUAL(free_now(), f0);
    /* the primary context: charged at its first retain, back at its last release */
    CK(cuDevicePrimaryCtxRelease(0));
    CUcontext c3;
    CK(cuCtxCreate_v2(&c3, 0, 0)); /* cuMemGetInfo needs a context */
    size_t g0 = free_now();
    CK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CU_ASSERT_EQUAL(g0 - free_now(), 86 * MIB);
    CK(cuCtxDestroy(c3));
    CK(cuCtxSetCurrent(ctx));
}

static void test_destroying_a_context_frees_what_it_allocated(void)
{
    size_t f0 = free_now();
    CUcontext c2;
    CK(cuCtxCreate_v2(&c2, 0, 0));
    CUdeviceptr lin, man, pooled, kept;
    size_t pitch;
    CK(cuMemAlloc(&lin, 16 * MIB));
    CK(cuMemAllocPitch(&kept, &pitch, 4096, 256, 4));
    CK(cuMemAllocManaged(&man, 4 * MIB, CU_MEM_ATTACH_GLOBAL));
    CUarray a;
    CUDA_ARRAY_DESCRIPTOR d = {1024, 1024, CU_AD_FORMAT_FLOAT, 1};
    CK(cuArrayCreate(&a, &d));
    CUmipmappedArray m;
    CUDA_ARRAY3D_DESCRIPTOR dm = {256, 256, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
    CK(cuMipmappedArrayCreate(&m, &dm, 3));
    CUmodule mod;
    CK(cuModuleLoadData(&mod, module_text));
    /* stream-ordered memory belongs to the device's pool, not to the context */
    CK(cuMemAllocAsync(&pooled, 8 * MIB, NULL));
    CK(cuCtxSynchronize());
    CK(cuCtxDestroy(c2));
    CK(cuCtxSetCurrent(ctx));
    CU_ASSERT_EQUAL(f0 - free_now(), 8 * MIB);
    CU_ASSERT_EQUAL(cuMemFree(lin), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemFree(kept), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE);
    CU_ASSERT_EQUAL(cuMipmappedArrayDestroy(m), CUDA_ERROR_INVALID_HANDLE);
    CK(cuModuleUnload(mod)); /* a stale module's handle: its memory went with the context */
    CK(cuMemFree(pooled));
    CU_ASSERT_EQUAL(free_now(), f0);
}

static void test_procaddr_resolves_the_memory_entry_points(void)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CK(cuGetProcAddress("cuMemAllocAsync", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CU_ASSERT_PTR_EQUAL(fn, (void *)cuMemAllocAsync);
    CK(cuGetProcAddress("cuMemAllocAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                        &st));
    CU_ASSERT_PTR_EQUAL(fn, (void *)cuMemAllocAsync_ptsz);
    const char *names[] = {"cuMemCreate", "cuMemPoolCreate", "cuArray3DCreate", "cuIpcOpenMemHandle",
                           "cuMemAllocPitch", "cuMipmappedArrayCreate", "cuMemPoolImportPointer"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        CK(cuGetProcAddress(names[i], &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
        CU_ASSERT_PTR_NOT_NULL(fn);
    }
    CK(cuGetProcAddress("cuMemGetInfo", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CU_ASSERT_PTR_EQUAL(fn, (void *)cuMemGetInfo_v2);
    /* the 32-bit ABIs of CUDA 3.1 clamp the 8 GiB device */
    CK(cuGetProcAddress("cuMemGetInfo", &fn, 3000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    unsigned f32 = 0, t32 = 0;
    CK(((CUresult(*)(unsigned *, unsigned *))fn)(&f32, &t32));
    CU_ASSERT_EQUAL(t32, 0xffffffffu);
    CK(cuGetProcAddress("cuDeviceTotalMem", &fn, 3000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CK(((CUresult(*)(unsigned *, CUdevice))fn)(&t32, 0));
    CU_ASSERT_EQUAL(t32, 0xffffffffu);
}

/* ---- between processes ------------------------------------------------------------------- */

static void test_ipc_memory_is_shared_with_a_second_process(void)
{
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 4 * MIB));
    unsigned char buf[4096];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 7);
    CK(cuMemcpyHtoD(p, buf, sizeof buf));
    CUipcMemHandle h;
    CK(cuIpcGetMemHandle(&h, p));
    CUdeviceptr q;
    CU_ASSERT_EQUAL(cuIpcOpenMemHandle(&q, h, 0), CUDA_ERROR_INVALID_CONTEXT); /* our own */
    CU_ASSERT_EQUAL(cuIpcOpenMemHandle(&q, h, 2), CUDA_ERROR_INVALID_VALUE);   /* bad flags */
    /* garbage handles are refused, never mapped */
    CUipcMemHandle junk;
    memset(&junk, 0, sizeof junk);
    CU_ASSERT_EQUAL(cuIpcOpenMemHandle(&q, junk, 0), CUDA_ERROR_INVALID_VALUE);
    memcpy(&junk, &h, sizeof h);
    int32_t init_pid = 1; /* another process's name: its start time is not the exporter's */
    memcpy(junk.reserved + 8, &init_pid, sizeof init_pid);
    CU_ASSERT_EQUAL(cuIpcOpenMemHandle(&q, junk, 0), CUDA_ERROR_INVALID_VALUE);
    int devnull = open("/dev/null", O_RDONLY);
    CUmemoryPool ip;
    CUmemGenericAllocationHandle ih;
    CU_ASSERT_EQUAL(cuMemPoolImportFromShareableHandle(&ip, (void *)(intptr_t)devnull,
                                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                    CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemImportFromShareableHandle(&ih, (void *)(intptr_t)-1,
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                    CUDA_ERROR_INVALID_VALUE);
    close(devnull);
    char hex[2 * sizeof h.reserved + 1];
    hex_put(hex, h.reserved, sizeof h.reserved);
    unsigned long long before = all_used();
    CU_ASSERT_EQUAL(child_wait(child_start("ipc", hex, NULL)), 0);
    CU_ASSERT_EQUAL(all_used(), before);
    CK(cuMemcpyDtoH(buf, p, sizeof buf));
    CU_ASSERT_EQUAL(buf[0], 0x5a);
    CU_ASSERT_EQUAL(buf[4095], 0x5a);
    CUdeviceptr m;
    CK(cuMemAllocManaged(&m, MIB, CU_MEM_ATTACH_GLOBAL));
    CU_ASSERT_EQUAL(cuIpcGetMemHandle(&h, m), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFree(m));
    CK(cuMemFree(p));
}

static void test_pool_and_vmm_exports_reach_a_second_process(void)
{
    CUmemoryPool pool;
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                            .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CK(cuMemPoolCreate(&pool, &props));
    CUdeviceptr p;
    CK(cuMemAllocFromPoolAsync(&p, 4 * MIB, pool, NULL));
    unsigned char buf[4096];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 3);
    CK(cuMemcpyHtoD(p, buf, sizeof buf));
    int fd = -1;
    CK(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CUmemPoolPtrExportData data;
    CK(cuMemPoolExportPointer(&data, p));
    char arg[32 + 2 * sizeof data.reserved];
    int n = snprintf(arg, sizeof arg, "%d ", fd);
    hex_put(arg + n, data.reserved, sizeof data.reserved);
    CU_ASSERT_EQUAL(child_wait(child_start("pool", arg, NULL)), 0);
    close(fd);
    CK(cuMemFree(p));
    CK(cuMemPoolDestroy(pool));
    /* a pool without a handle type cannot be exported */
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    CK(cuMemPoolCreate(&pool, &props));
    CU_ASSERT_EQUAL(
        cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        CUDA_ERROR_INVALID_VALUE);
    CK(cuMemPoolDestroy(pool));

    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, 2 * MIB, &prop, 0));
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, 2 * MIB, 0, 0, 0));
    CK(cuMemMap(va, 2 * MIB, 0, h, 0));
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CK(cuMemSetAccess(va, 2 * MIB, &acc, 1));
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 5);
    CK(cuMemcpyHtoD(va + MIB, buf, sizeof buf));
    CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    char fds[16];
    snprintf(fds, sizeof fds, "%d", fd);
    CU_ASSERT_EQUAL(child_wait(child_start("vmm", fds, NULL)), 0);
    /* imported in this very process: the same allocation */
    CUmemGenericAllocationHandle h2;
    CK(cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CU_ASSERT_EQUAL(h2, h);
    close(fd);
    CK(cuMemRelease(h2));
    CK(cuMemUnmap(va, 2 * MIB));
    CK(cuMemRelease(h));
    CK(cuMemAddressFree(va, 2 * MIB));
}

static void test_two_processes_racing_never_exceed_the_capacity(void)
{
    int fd[2];
    pid_t pid[2];
    for (int i = 0; i < 2; i++)
        pid[i] = child_start("hammer", "1.5", &fd[i]);
    unsigned long got = 0, refused = 0;
    for (int i = 0; i < 2; i++) {
        char line[64];
        read_line(fd[i], line, sizeof line);
        close(fd[i]);
        unsigned long g = 0, r = 0;
        sscanf(line, "%lu %lu", &g, &r);
        got += g;
        refused += r;
        CU_ASSERT_EQUAL(child_wait(pid[i]), 0);
    }
    /* both got memory and both were refused some: they did race to the capacity */
    CU_ASSERT(got > 10);
    CU_ASSERT(refused > 0);
}

static void test_killed_process_memory_is_back_within_a_second(void)
{
    size_t f0 = free_now();
    int fd;
    pid_t pid = child_start("hold", NULL, &fd);
    char line[16];
    read_line(fd, line, sizeof line);
    close(fd);
    CU_ASSERT_STRING_EQUAL(line, "ready");
    CU_ASSERT(f0 - free_now() >= GIB + 256 * MIB);
    kill(pid, SIGKILL);
    double t0 = now_s();
    child_wait(pid);
    while (free_now() != f0 && now_s() - t0 < 2)
        usleep(5000);
    double waited = now_s() - t0;
    CU_ASSERT_EQUAL(free_now(), f0);
    CU_ASSERT(waited < 1.0);
}

static void test_mps_pinned_limit_holds_per_process(void)
{
    setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=512M,1=2G", 1);
    CU_ASSERT_EQUAL(child_wait(child_start("mps", "512", NULL)), 0);
    setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "1G", 1);
    CU_ASSERT_EQUAL(child_wait(child_start("mps", "1024", NULL)), 0);
    /* another device's limit, or a malformed one, leaves device 0 unlimited */
    setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "1=256M", 1);
    CU_ASSERT_NOT_EQUAL(child_wait(child_start("mps", "512", NULL)), 0);
    unsetenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("sim_memory", suite_init, NULL);
    POS_ADD_TEST(s, test_every_path_takes_device_memory_and_gives_it_back);
    POS_ADD_TEST(s, test_pitch_rounds_rows_and_checks_element_size);
    POS_ADD_TEST(s, test_sizes_near_2_64_and_zero_are_refused_never_wrapped);
    POS_ADD_TEST(s, test_over_capacity_is_out_of_memory_until_memory_is_freed);
    POS_ADD_TEST(s, test_frees_of_unknown_pointers_are_refused);
    POS_ADD_TEST(s, test_pool_keeps_up_to_its_release_threshold_and_trims);
    POS_ADD_TEST(s, test_current_pool_serves_cuMemAllocAsync);
    POS_ADD_TEST(s, test_free_async_gives_memory_back_in_stream_order);
    POS_ADD_TEST(s, test_vmm_host_locations_take_no_device_memory);
    POS_ADD_TEST(s, test_vmm_memory_goes_with_the_last_handle_or_mapping);
    POS_ADD_TEST(s, test_context_and_module_overhead_is_measured_by_meminfo);
    POS_ADD_TEST(s, test_destroying_a_context_frees_what_it_allocated);
    POS_ADD_TEST(s, test_procaddr_resolves_the_memory_entry_points);
    POS_ADD_TEST(s, test_ipc_memory_is_shared_with_a_second_process);
    POS_ADD_TEST(s, test_pool_and_vmm_exports_reach_a_second_process);
    POS_ADD_TEST(s, test_two_processes_racing_never_exceed_the_capacity);
    POS_ADD_TEST(s, test_killed_process_memory_is_back_within_a_second);
    POS_ADD_TEST(s, test_mps_pinned_limit_holds_per_process);
}
