/* Tests the simulated CUDA driver through its public API (linked -lcuda against
 * build/sim/libcuda.so.1): initialisation, cuGetProcAddress, bad input, streams and events,
 * legacy and per-thread default streams, memory and copies, stream memory operations, host
 * functions, modules and libraries, graphs, sticky errors and fork. Each run uses its own
 * virtual GPU (POS_SIM_INSTANCE). */
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/twin_math.h"
#include "tests/unit/elf_symbols.h"
#include "tests/cunit_main.h"

/* cuda.h (without CUDA_API_PER_THREAD_DEFAULT_STREAM) does not declare the _ptsz forms. */
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
CUresult cuEventRecord_ptsz(CUevent, CUstream);
size_t pos_sim_procaddr_count(void);
int pos_sim_procaddr_entry(size_t, const char **, int *, void **, void **);
CUresult pos_sim_device_mps(CUdevice, int *);

static CUcontext ctx;
static CUmodule mod;
static CUfunction f_vadd, f_fill, f_scale, f_sum, f_long, f_short, f_args;

static const char *module_text = "# test module\n"
                                 ".pos_sim_module 1\n"
                                 ".kernel vadd twin=vector_add\n"
                                 ".kernel fill twin=fill\n"
                                 ".kernel scale twin=scale\n"
                                 ".kernel sum twin=checksum\n"
                                 ".kernel long_k flops=8.45e9 bytes=0\n"  /* 10 ms on xavier */
                                 ".kernel short_k flops=8.45e7 bytes=0\n" /* 0.1 ms */
                                 ".kernel args_k cost=args\n";

#define CK(x) CU_ASSERT_EQUAL_FATAL((x), CUDA_SUCCESS)

static void test_not_initialized_before_cuInit(void)
{
    int n = -1;
    CUdevice d;
    CU_ASSERT_EQUAL(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(cuCtxSynchronize(), CUDA_ERROR_NOT_INITIALIZED);
    int v = 0;
    CU_ASSERT_EQUAL(cuDriverGetVersion(&v), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(v, 13000);
    CU_ASSERT_EQUAL(cuInit(1), CUDA_ERROR_INVALID_VALUE);
}

static int suite_init(void)
{
    char inst[64];
    snprintf(inst, sizeof inst, "test-driver-%d", (int)getpid());
    setenv("POS_SIM_INSTANCE", inst, 1);
    setenv("POS_SIM_DEVICE", "xavier-nx", 1);
    setenv("POS_SIM_MODE", "mps", 1);
    return 0;
}

static void test_init_and_device(void)
{
    CK(cuInit(0));
    CK(cuInit(0));
    int n = 0;
    CK(cuDeviceGetCount(&n));
    CU_ASSERT_EQUAL(n, 1);
    CUdevice d;
    CK(cuDeviceGet(&d, 0));
    CU_ASSERT_EQUAL(cuDeviceGet(&d, 1), CUDA_ERROR_INVALID_DEVICE);
    char name[128];
    CK(cuDeviceGetName(name, sizeof name, 0));
    CU_ASSERT_PTR_NOT_NULL(strstr(name, "Xavier NX"));
    int sms = 0, major = 0;
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    CU_ASSERT_EQUAL(sms, 6);
    CU_ASSERT_EQUAL(major, 7);
    CU_ASSERT_EQUAL(cuDeviceGetAttribute(&sms, (CUdevice_attribute)9999, 0),
                    CUDA_ERROR_INVALID_VALUE);
    size_t total = 0;
    CK(cuDeviceTotalMem(&total, 0));
    CU_ASSERT_EQUAL(total, 8ull << 30);
    CU_ASSERT_EQUAL(cuDeviceGetName(NULL, 10, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoadData(&mod, module_text));
    CK(cuModuleGetFunction(&f_vadd, mod, "vadd"));
    CK(cuModuleGetFunction(&f_fill, mod, "fill"));
    CK(cuModuleGetFunction(&f_scale, mod, "scale"));
    CK(cuModuleGetFunction(&f_sum, mod, "sum"));
    CK(cuModuleGetFunction(&f_long, mod, "long_k"));
    CK(cuModuleGetFunction(&f_short, mod, "short_k"));
    CK(cuModuleGetFunction(&f_args, mod, "args_k"));
}

static void test_error_names(void)
{
    const char *s;
    CK(cuGetErrorName(CUDA_ERROR_INVALID_HANDLE, &s));
    CU_ASSERT_STRING_EQUAL(s, "CUDA_ERROR_INVALID_HANDLE");
    CK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
    CU_ASSERT_STRING_EQUAL(s, "invalid argument");
    CK(cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, &s));
    CU_ASSERT_STRING_EQUAL(s, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED");
    CU_ASSERT_EQUAL(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
}

/* ---- cuGetProcAddress ---------------------------------------------------------------------- */

static void test_procaddr_versions_and_ptsz(void)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CK(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, 0, &st));
    CU_ASSERT_EQUAL(st, CU_GET_PROC_ADDRESS_SUCCESS);
    CU_ASSERT_PTR_EQUAL(fn, (void *)cuMemAlloc_v2);
    CK(cuGetProcAddress_v2("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
    CU_ASSERT_PTR_EQUAL(fn, (void *)cuLaunchKernel);
    CK(cuGetProcAddress_v2("cuLaunchKernel", &fn, 12000,
                           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    CU_ASSERT_PTR_EQUAL(fn, (void *)cuLaunchKernel_ptsz);
    /* functions with no per-thread form come back as they are */
    CK(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                           &st));
    CU_ASSERT_PTR_EQUAL(fn, (void *)cuMemAlloc_v2);
    /* the version picks the ABI */
    CK(cuGetProcAddress_v2("cuCtxCreate", &fn, 11000, 0, &st));
    CU_ASSERT_PTR_EQUAL(fn, dlsym(RTLD_DEFAULT, "cuCtxCreate_v2"));
    CK(cuGetProcAddress_v2("cuCtxCreate", &fn, 12000, 0, &st));
    CU_ASSERT_PTR_EQUAL(fn, dlsym(RTLD_DEFAULT, "cuCtxCreate_v3"));
    CK(cuGetProcAddress_v2("cuCtxCreate", &fn, 12080, 0, &st));
    CU_ASSERT_PTR_EQUAL(fn, dlsym(RTLD_DEFAULT, "cuCtxCreate_v4"));
    CK(cuGetProcAddress_v2("cuGetProcAddress", &fn, 12000, 0, &st));
    CU_ASSERT_PTR_EQUAL(fn, (void *)cuGetProcAddress_v2);
    CK(cuGetProcAddress_v2("cuGetProcAddress", &fn, 11080, 0, &st));
    CU_ASSERT_PTR_EQUAL(fn, dlsym(RTLD_DEFAULT, "cuGetProcAddress"));
    /* failures */
    CU_ASSERT_EQUAL(cuGetProcAddress_v2("cuNoSuchThing", &fn, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CU_ASSERT_EQUAL(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CU_ASSERT_PTR_NULL(fn);
    CU_ASSERT_EQUAL(cuGetProcAddress_v2("cuLibraryLoadData", &fn, 11000, 0, &st),
                    CUDA_ERROR_NOT_FOUND);
    CU_ASSERT_EQUAL(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CU_ASSERT_EQUAL(cuGetProcAddress_v2("cuInit", &fn, 14000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuGetProcAddress_v2(NULL, &fn, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuGetProcAddress_v2("cuInit", &fn, 12000, 0x80, &st), CUDA_ERROR_INVALID_VALUE);
}

/* Every table entry resolves to an exported symbol whose name is the base name with a
 * version suffix, and whose per-thread twin is the _ptsz/_ptds form of the same symbol. */
static void test_procaddr_table_matches_exports(void)
{
    size_t n = pos_sim_procaddr_count();
    CU_ASSERT(n > 100);
    for (size_t i = 0; i < n; i++) {
        const char *name;
        int ver;
        void *fn, *pt;
        CU_ASSERT_FATAL(pos_sim_procaddr_entry(i, &name, &ver, &fn, &pt) == 0);
        Dl_info info;
        CU_ASSERT_FATAL(dladdr(fn, &info) != 0 && info.dli_sname != NULL);
        const char *rest = info.dli_sname + strlen(name);
        /* cuda.h maps cuGraphInstantiate to cuGraphInstantiateWithFlags */
        int alias = strcmp(name, "cuGraphInstantiate") == 0 &&
                    strcmp(info.dli_sname, "cuGraphInstantiateWithFlags") == 0;
        CU_ASSERT(alias || strncmp(info.dli_sname, name, strlen(name)) == 0);
        if (strlen(info.dli_sname) < strlen(name))
            continue;
        CU_ASSERT(alias || *rest == '\0' || (rest[0] == '_' && rest[1] == 'v'));
        if (pt) {
            Dl_info pinfo;
            CU_ASSERT_FATAL(dladdr(pt, &pinfo) != 0 && pinfo.dli_sname != NULL);
            char want1[128], want2[128];
            snprintf(want1, sizeof want1, "%s_ptsz", info.dli_sname);
            snprintf(want2, sizeof want2, "%s_ptds", info.dli_sname);
            CU_ASSERT(strcmp(pinfo.dli_sname, want1) == 0 || strcmp(pinfo.dli_sname, want2) == 0);
        }
        void *got = NULL;
        CU_ASSERT_EQUAL(cuGetProcAddress_v2(name, &got, 13000, 0, NULL), CUDA_SUCCESS);
    }
}

static int table_has_symbol(const char *sym)
{
    for (size_t i = 0; i < pos_sim_procaddr_count(); i++) {
        const char *name;
        int ver;
        void *fn, *pt;
        Dl_info info;
        pos_sim_procaddr_entry(i, &name, &ver, &fn, &pt);
        if (dladdr(fn, &info) && info.dli_sname && strcmp(info.dli_sname, sym) == 0)
            return 1;
        if (pt && dladdr(pt, &info) && info.dli_sname && strcmp(info.dli_sname, sym) == 0)
            return 1;
    }
    return 0;
}

static void check_in_table(const char *name, void *arg)
{
    (void)arg;
    if (!table_has_symbol(name)) {
        fprintf(stderr, "exported but not in the cuGetProcAddress table: %s\n", name);
        CU_FAIL("export missing from the table");
    }
}

/* Every cu* function the library exports can be had through cuGetProcAddress (read from the
 * library's own dynamic symbol table with libelf). */
static void test_every_export_is_in_the_table(void)
{
    int checked = elf_each_function("build/sim/libcuda.so.1", "cu", check_in_table, NULL);
    CU_ASSERT(checked > 600);
}

/* ---- bad input ---------------------------------------------------------------------------- */

static void test_bad_handles_and_arguments(void)
{
    CUstream bogus_stream = (CUstream)(uintptr_t)0xdeadbeef0ull;
    CUevent bogus_event = (CUevent)(uintptr_t)0x1234;
    CU_ASSERT_EQUAL(cuStreamSynchronize(bogus_stream), CUDA_ERROR_INVALID_HANDLE);
    CU_ASSERT_EQUAL(cuEventQuery(bogus_event), CUDA_ERROR_INVALID_HANDLE);
    CU_ASSERT_EQUAL(
        cuLaunchKernel((CUfunction)(uintptr_t)77, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
        CUDA_ERROR_INVALID_HANDLE);
    CUstream s;
    CK(cuStreamCreate(&s, 0));
    CK(cuStreamDestroy(s));
    CU_ASSERT_EQUAL(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
    CU_ASSERT_EQUAL(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
    CUevent e;
    CK(cuEventCreate(&e, 0));
    CK(cuEventDestroy(e));
    CU_ASSERT_EQUAL(cuEventRecord(e, NULL), CUDA_ERROR_INVALID_HANDLE);
    CU_ASSERT_EQUAL(cuCtxSetCurrent((CUcontext)(uintptr_t)0x99), CUDA_ERROR_INVALID_CONTEXT);
    CU_ASSERT_EQUAL(cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuStreamCreate(&s, 0x40), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuMemFree((CUdeviceptr)0x1000), CUDA_ERROR_INVALID_VALUE);
    /* launch shapes */
    CU_ASSERT_EQUAL(cuLaunchKernel(f_short, 1, 1, 1, 2048, 1, 1, 0, NULL, NULL, NULL),
                    CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuLaunchKernel(f_short, 0, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL),
                    CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuLaunchKernel(f_short, 1, 1, 1, 32, 1, 1, 1 << 20, NULL, NULL, NULL),
                    CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuLaunchKernel(f_fill, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL),
                    CUDA_ERROR_INVALID_VALUE); /* a twin needs its parameters */
}

static void test_bad_modules(void)
{
    CUmodule m;
    CUfunction f;
    CU_ASSERT_EQUAL(cuModuleLoadData(&m, "garbage"), CUDA_ERROR_INVALID_IMAGE);
    CU_ASSERT_EQUAL(cuModuleLoadData(&m, "\x7f"
                                         "ELF\2\1\1"),
                    CUDA_ERROR_INVALID_IMAGE);
    CU_ASSERT_EQUAL(cuModuleLoadData(&m, ".pos_sim_module 1\n.kernel k flop=3\n"),
                    CUDA_ERROR_INVALID_IMAGE);
    CU_ASSERT_EQUAL(cuModuleLoadData(&m, ".pos_sim_module 1\n.kernel k\n.kernel k\n"),
                    CUDA_ERROR_INVALID_IMAGE);
    CU_ASSERT_EQUAL(cuModuleLoadData(&m, ".pos_sim_module 1\n.kernel k twin=nope\n"),
                    CUDA_ERROR_INVALID_IMAGE);
    CU_ASSERT_EQUAL(cuModuleLoadData(&m, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuModuleLoad(&m, "/nonexistent/module.txt"), CUDA_ERROR_FILE_NOT_FOUND);
    CU_ASSERT_EQUAL(cuModuleGetFunction(&f, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    CK(cuModuleLoadData(&m, ".pos_sim_module 1\n.kernel k flops=1\n"));
    CK(cuModuleGetFunction(&f, m, "k"));
    CK(cuModuleUnload(m));
    CU_ASSERT_EQUAL(cuModuleGetFunction(&f, m, "k"), CUDA_ERROR_INVALID_HANDLE);
    CU_ASSERT_EQUAL(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL),
                    CUDA_ERROR_INVALID_HANDLE);
    CU_ASSERT_EQUAL(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
}

static void test_module_from_file_and_library(void)
{
    char path[] = "/tmp/pos-sim-module-XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(write(fd, module_text, strlen(module_text)) == (ssize_t)strlen(module_text));
    close(fd);
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoad(&m, path));
    CK(cuModuleGetFunction(&f, m, "short_k"));
    unlink(path);
    const char *name;
    CK(cuFuncGetName(&name, f));
    CU_ASSERT_STRING_EQUAL(name, "short_k");
    int v;
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    CU_ASSERT_EQUAL(v, 1024);
    CK(cuModuleUnload(m));

    CUlibrary lib;
    CUkernel k;
    CK(cuLibraryLoadData(&lib, module_text, NULL, NULL, 0, NULL, NULL, 0));
    CK(cuLibraryGetKernel(&k, lib, "short_k"));
    CU_ASSERT_EQUAL(cuLibraryGetKernel(&k, lib, "missing"), CUDA_ERROR_NOT_FOUND);
    CK(cuLibraryGetKernel(&k, lib, "short_k"));
    CK(cuKernelGetFunction(&f, k));
    CK(cuFuncGetName(&name, f));
    CU_ASSERT_STRING_EQUAL(name, "short_k");
    CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CK(cuCtxSynchronize());
    CK(cuLibraryUnload(lib));
    CU_ASSERT_EQUAL(cuKernelGetFunction(&f, k), CUDA_ERROR_INVALID_HANDLE);
}

/* ---- data path --------------------------------------------------------------------------- */

enum { N = 4096 };

static void test_twins_copies_and_checksum(void)
{
    CUdeviceptr x, y, z, out;
    CK(cuMemAlloc(&x, N * 4));
    CK(cuMemAlloc(&y, N * 4));
    CK(cuMemAlloc(&z, N * 4));
    CK(cuMemAlloc(&out, 8));
    float host[N], expect[N], back[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)i * 0.5f;
    CK(cuMemcpyHtoD(x, host, sizeof host));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned n = N;
    float v = 3.0f, a = 0.25f;
    void *pf[] = {&y, &v, &n}, *pa[] = {&x, &y, &z, &n}, *ps[] = {&z, &a, &n},
         *pc[] = {&z, &n, &out};
    CK(cuLaunchKernel(f_fill, N / 256, 1, 1, 256, 1, 1, 0, s, pf, NULL));
    CK(cuLaunchKernel(f_long, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuLaunchKernel(f_vadd, N / 256, 1, 1, 256, 1, 1, 0, s, pa, NULL));
    CK(cuLaunchKernel(f_scale, N / 256, 1, 1, 256, 1, 1, 0, s, ps, NULL));
    CK(cuLaunchKernel(f_sum, 1, 1, 1, 256, 1, 1, 0, s, pc, NULL));
    uint64_t sum = 0;
    CK(cuMemcpyDtoHAsync(&sum, out, 8, s));
    CK(cuMemcpyDtoHAsync(back, z, sizeof back, s));
    /* the copies are queued behind a 10 ms kernel: nothing has arrived yet */
    CU_ASSERT_EQUAL(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CU_ASSERT_EQUAL(sum, 0);
    CK(cuStreamSynchronize(s));
    CK(cuStreamQuery(s));
    for (int i = 0; i < N; i++)
        expect[i] = (host[i] + 3.0f) * 0.25f;
    CU_ASSERT_EQUAL(memcmp(back, expect, sizeof back), 0);
    CU_ASSERT_EQUAL(sum, pos_sim_checksum_f32(expect, N));
    /* memsets and device-to-device copies */
    CK(cuMemsetD32(y, 0x3f800000u, N)); /* 1.0f */
    CK(cuMemcpyDtoD(z, y, N * 4));
    CK(cuMemcpyDtoH(back, z, sizeof back));
    CU_ASSERT_EQUAL(back[0], 1.0f);
    CU_ASSERT_EQUAL(back[N - 1], 1.0f);
    CK(cuMemsetD8Async(z, 0, N * 4, s));
    CK(cuMemcpyDtoHAsync(back, z, sizeof back, s));
    CK(cuStreamSynchronize(s));
    CU_ASSERT_EQUAL(back[7], 0.0f);
    /* pageable async source is staged: overwriting it after the call changes nothing */
    for (int i = 0; i < N; i++)
        host[i] = 7.0f;
    CK(cuLaunchKernel(f_long, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuMemcpyHtoDAsync(x, host, sizeof host, s));
    for (int i = 0; i < N; i++)
        host[i] = -1.0f;
    CK(cuMemcpyDtoHAsync(back, x, sizeof back, s));
    CK(cuStreamSynchronize(s));
    CU_ASSERT_EQUAL(back[100], 7.0f);
    CU_ASSERT_EQUAL(cuMemcpyHtoD(x + N * 4 - 4, host, 8), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamDestroy(s));
    CK(cuMemFree(x));
    CK(cuMemFree(y));
    CK(cuMemFree(z));
    CK(cuMemFree(out));
    CU_ASSERT_EQUAL(cuMemFree(x), CUDA_ERROR_INVALID_VALUE);
}

static void test_memory_accounting(void)
{
    size_t free0, total, free1;
    CK(cuMemGetInfo(&free0, &total));
    CU_ASSERT_EQUAL(total, 8ull << 30);
    CUdeviceptr big;
    CK(cuMemAlloc(&big, 1ull << 30));
    CK(cuMemGetInfo(&free1, &total));
    CU_ASSERT_EQUAL(free0 - free1, 1ull << 30);
    CUdeviceptr huge;
    CU_ASSERT_EQUAL(cuMemAlloc(&huge, 8ull << 30), CUDA_ERROR_OUT_OF_MEMORY);
    CUdeviceptr base;
    size_t size;
    CK(cuMemGetAddressRange(&base, &size, big + 12345));
    CU_ASSERT_EQUAL(base, big);
    CU_ASSERT_EQUAL(size, 1ull << 30);
    CK(cuMemFree(big));
    CK(cuMemGetInfo(&free1, &total));
    CU_ASSERT_EQUAL(free1, free0);
}

static void test_pinned_and_stream_values(void)
{
    uint32_t *flag;
    CK(cuMemAllocHost((void **)&flag, 64));
    CUdeviceptr dflag;
    CK(cuMemHostGetDevicePointer(&dflag, flag, 0));
    CU_ASSERT_EQUAL(dflag, (CUdeviceptr)(uintptr_t)flag);
    *flag = 0;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* a GPU-side write after a kernel: visible to the host without syncing */
    CK(cuLaunchKernel(f_short, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuStreamWriteValue32(s, dflag, 42, 0));
    for (int i = 0; i < 2000 && __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 42; i++)
        usleep(500);
    CU_ASSERT_EQUAL(__atomic_load_n(flag, __ATOMIC_ACQUIRE), 42);
    /* a stream wait on host memory holds the stream until the host writes */
    CK(cuStreamWaitValue32(s, dflag + 4, 5, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cuStreamWriteValue32(s, dflag + 8, 9, 0));
    usleep(20000);
    CU_ASSERT_EQUAL(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CU_ASSERT_EQUAL(flag[2], 0);
    __atomic_store_n(&flag[1], 7, __ATOMIC_RELEASE);
    CK(cuStreamSynchronize(s));
    CU_ASSERT_EQUAL(flag[2], 9);
    /* registered pageable memory */
    static uint32_t reg[1024];
    CK(cuMemHostRegister(reg, sizeof reg, 0));
    CU_ASSERT_EQUAL(cuMemHostRegister(reg, sizeof reg, 0),
                    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CUdeviceptr dreg;
    CK(cuMemHostGetDevicePointer(&dreg, reg, 0));
    CK(cuStreamWriteValue32(s, dreg + 40, 77, 0));
    CK(cuStreamSynchronize(s));
    CU_ASSERT_EQUAL(reg[10], 77);
    CK(cuMemHostUnregister(reg));
    CU_ASSERT_EQUAL(cuMemHostUnregister(reg), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    CU_ASSERT_EQUAL(cuStreamWriteValue32(s, (CUdeviceptr)(uintptr_t)reg, 1, 0),
                    CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamDestroy(s));
    CK(cuMemFreeHost(flag));
}

static int host_order[8], host_n;

static void host_fn(void *arg)
{
    host_order[host_n++] = (int)(intptr_t)arg;
}

static void test_host_functions_in_order(void)
{
    CUstream s;
    CK(cuStreamCreate(&s, 0));
    host_n = 0;
    CK(cuLaunchHostFunc(s, host_fn, (void *)1));
    CK(cuLaunchKernel(f_short, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuLaunchHostFunc(s, host_fn, (void *)2));
    CK(cuLaunchHostFunc(s, host_fn, (void *)3));
    CK(cuStreamSynchronize(s));
    CU_ASSERT_EQUAL(host_n, 3);
    CU_ASSERT_EQUAL(host_order[0], 1);
    CU_ASSERT_EQUAL(host_order[1], 2);
    CU_ASSERT_EQUAL(host_order[2], 3);
    CK(cuStreamDestroy(s));
}

/* ---- ordering: events, legacy and per-thread streams ------------------------------------- */

/* 1 when FIRST completed (in device time) before SECOND: compares the events' timestamps,
 * so the answer does not depend on when this thread happens to look. */
static int event_done_before(CUevent first, CUevent second)
{
    float ms = 0;
    if (cuEventSynchronize(first) != CUDA_SUCCESS || cuEventSynchronize(second) != CUDA_SUCCESS ||
        cuEventElapsedTime(&ms, first, second) != CUDA_SUCCESS)
        return 0;
    return ms > 0;
}

static void test_events_and_elapsed_time(void)
{
    CUstream s;
    CK(cuStreamCreate(&s, 0));
    CUevent a, b, nt;
    CK(cuEventCreate(&a, 0));
    CK(cuEventCreate(&b, 0));
    CK(cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
    float ms;
    CU_ASSERT_EQUAL(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE); /* not recorded */
    CK(cuEventQuery(a)); /* never recorded counts as complete */
    /* behind a kernel already, as long_kernel_ms measures: the measured one is launched
     * before A completes, so a thread descheduled between the record and the launch adds
     * nothing (a clean-clone CI run read more than 10.3 ms once without it) */
    CK(cuLaunchKernel(f_long, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuEventRecord(a, s));
    CK(cuLaunchKernel(f_long, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuEventRecord(b, s));
    CK(cuEventRecord(nt, s));
    CU_ASSERT_EQUAL(cuEventQuery(b), CUDA_ERROR_NOT_READY);
    CU_ASSERT_EQUAL(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_NOT_READY);
    CK(cuEventSynchronize(b));
    CK(cuEventElapsedTime(&ms, a, b));
    /* 10 ms of device time plus 6 us launch latency: the model's number, not the host's
     * sleep */
    CU_ASSERT(ms >= 10.006f && ms < 10.3f);
    CK(cuEventSynchronize(nt));
    CU_ASSERT_EQUAL(cuEventElapsedTime(&ms, a, nt), CUDA_ERROR_INVALID_HANDLE);
    /* cross-stream wait */
    CUstream s2;
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUevent after_long, after_wait;
    CK(cuEventCreate(&after_long, 0));
    CK(cuEventCreate(&after_wait, 0));
    CK(cuLaunchKernel(f_long, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuEventRecord(after_long, s));
    CK(cuStreamWaitEvent(s2, after_long, 0));
    CK(cuLaunchKernel(f_short, 1, 1, 1, 32, 1, 1, 0, s2, NULL, NULL));
    CK(cuEventRecord(after_wait, s2));
    CU_ASSERT(event_done_before(after_long, after_wait));
    CK(cuCtxSynchronize());
    CK(cuEventDestroy(a));
    CK(cuEventDestroy(b));
    CK(cuEventDestroy(nt));
    CK(cuEventDestroy(after_long));
    CK(cuEventDestroy(after_wait));
    CK(cuStreamDestroy(s));
    CK(cuStreamDestroy(s2));
}

static void test_legacy_stream_orders_blocking_streams(void)
{
    CUstream blocking, nonblocking;
    CK(cuStreamCreate(&blocking, 0));
    CK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
    CUevent long_done, legacy_done, nb_done;
    CK(cuEventCreate(&long_done, 0));
    CK(cuEventCreate(&legacy_done, 0));
    CK(cuEventCreate(&nb_done, 0));
    /* work on the legacy stream waits for earlier work on a blocking stream */
    CK(cuLaunchKernel(f_long, 1, 1, 1, 32, 1, 1, 0, blocking, NULL, NULL));
    CK(cuEventRecord(long_done, blocking));
    CK(cuLaunchKernel(f_short, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CK(cuEventRecord(legacy_done, NULL));
    CU_ASSERT(event_done_before(long_done, legacy_done));
    CK(cuCtxSynchronize());
    /* ...but not for a non-blocking stream */
    CK(cuLaunchKernel(f_long, 1, 1, 1, 32, 1, 1, 0, nonblocking, NULL, NULL));
    CK(cuEventRecord(long_done, nonblocking));
    CK(cuLaunchKernel(f_short, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CK(cuEventRecord(legacy_done, NULL));
    CU_ASSERT(event_done_before(legacy_done, long_done));
    CK(cuCtxSynchronize());
    /* and a blocking stream waits for earlier legacy work */
    CK(cuLaunchKernel(f_long, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CK(cuEventRecord(legacy_done, NULL));
    CK(cuLaunchKernel(f_short, 1, 1, 1, 32, 1, 1, 0, blocking, NULL, NULL));
    CK(cuEventRecord(nb_done, blocking));
    CU_ASSERT(event_done_before(legacy_done, nb_done));
    CK(cuCtxSynchronize());
    CK(cuStreamDestroy(blocking));
    CK(cuStreamDestroy(nonblocking));
    CK(cuEventDestroy(long_done));
    CK(cuEventDestroy(legacy_done));
    CK(cuEventDestroy(nb_done));
}

struct pt_arg {
    CUfunction f;
    CUevent ev;
    int ptsz;
};

static void *pt_thread(void *p)
{
    struct pt_arg *a = p;
    cuCtxSetCurrent(ctx);
    if (a->ptsz) {
        cuLaunchKernel_ptsz(a->f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
        cuEventRecord_ptsz(a->ev, NULL);
    } else {
        cuLaunchKernel(a->f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
        cuEventRecord(a->ev, NULL);
    }
    return NULL;
}

/* Two threads launch a long then a short kernel on "stream 0": with the per-thread default
 * stream they run side by side (the short one finishes first); on the legacy stream the
 * short one waits for the long one. */
static void test_per_thread_default_stream(void)
{
    for (int ptsz = 1; ptsz >= 0; ptsz--) {
        CUevent ev_long, ev_short;
        CK(cuEventCreate(&ev_long, 0));
        CK(cuEventCreate(&ev_short, 0));
        struct pt_arg al = {f_long, ev_long, ptsz}, as = {f_short, ev_short, ptsz};
        pthread_t tl, ts;
        pthread_create(&tl, NULL, pt_thread, &al);
        pthread_join(tl, NULL);
        pthread_create(&ts, NULL, pt_thread, &as);
        pthread_join(ts, NULL);
        if (ptsz) {
            CU_ASSERT(event_done_before(ev_short, ev_long));
        } else {
            CU_ASSERT(event_done_before(ev_long, ev_short));
        }
        CK(cuCtxSynchronize());
        CK(cuEventDestroy(ev_long));
        CK(cuEventDestroy(ev_short));
    }
}

static void test_priorities_and_launch_ex(void)
{
    int least, greatest, p;
    CK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CU_ASSERT(greatest < least);
    CUstream s;
    CK(cuStreamCreateWithPriority(&s, 0, -100));
    CK(cuStreamGetPriority(s, &p));
    CU_ASSERT_EQUAL(p, greatest);
    unsigned long long flops = 845000000ull, bytes = 0;
    void *params[] = {&flops, &bytes};
    CUlaunchAttribute attr[2];
    attr[0].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    attr[0].value.priority = -1;
    attr[1].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attr[1].value.cooperative = 1;
    CUlaunchConfig cfg = {.gridDimX = 6,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 256,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .sharedMemBytes = 0,
                          .hStream = s,
                          .attrs = attr,
                          .numAttrs = 2};
    CK(cuLaunchKernelEx(&cfg, f_args, params, NULL));
    cfg.gridDimX = 100000; /* more blocks than can be resident at once */
    CU_ASSERT_EQUAL(cuLaunchKernelEx(&cfg, f_args, params, NULL),
                    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    CU_ASSERT_EQUAL(cuLaunchKernelEx(NULL, f_args, params, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuLaunchCooperativeKernel(f_args, 100000, 1, 1, 256, 1, 1, 0, s, params),
                    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    CK(cuStreamSynchronize(s));
    CK(cuStreamDestroy(s));
}

/* ---- graphs ------------------------------------------------------------------------------ */

static void test_graph_capture_and_replay(void)
{
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr x, out;
    CK(cuMemAlloc(&x, N * 4));
    CK(cuMemAlloc(&out, 8));
    unsigned n = N;
    float v = 2.0f, a = 3.0f;
    void *pf[] = {&x, &v, &n}, *ps[] = {&x, &a, &n}, *pc[] = {&x, &n, &out};
    CUstreamCaptureStatus st;
    CK(cuStreamIsCapturing(s, &st));
    CU_ASSERT_EQUAL(st, CU_STREAM_CAPTURE_STATUS_NONE);
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuStreamIsCapturing(s, &st));
    CU_ASSERT_EQUAL(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CK(cuLaunchKernel(f_fill, N / 256, 1, 1, 256, 1, 1, 0, s, pf, NULL));
    CK(cuLaunchKernel(f_long, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuLaunchKernel(f_scale, N / 256, 1, 1, 256, 1, 1, 0, s, ps, NULL));
    CK(cuLaunchKernel(f_sum, 1, 1, 1, 256, 1, 1, 0, s, pc, NULL));
    /* captured, not executed: the stream has nothing to do */
    CU_ASSERT_EQUAL(cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUgraph g;
    CU_ASSERT_EQUAL(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CU_ASSERT_PTR_NULL(g);
    /* again, this time without the illegal query */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuLaunchKernel(f_fill, N / 256, 1, 1, 256, 1, 1, 0, s, pf, NULL));
    CK(cuLaunchKernel(f_long, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuLaunchKernel(f_scale, N / 256, 1, 1, 256, 1, 1, 0, s, ps, NULL));
    CK(cuLaunchKernel(f_sum, 1, 1, 1, 256, 1, 1, 0, s, pc, NULL));
    CK(cuStreamEndCapture(s, &g));
    CU_ASSERT_PTR_NOT_NULL(g);
    CUgraphExec exec;
    CK(cuGraphInstantiate(&exec, g, 0));
    uint64_t sum = 0;
    float expect[N];
    for (int i = 0; i < N; i++)
        expect[i] = 6.0f;
    for (int rep = 0; rep < 2; rep++) {
        sum = 0;
        CK(cuGraphLaunch(exec, s));
        CK(cuMemcpyDtoHAsync(&sum, out, 8, s));
        CU_ASSERT_EQUAL(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
        CK(cuStreamSynchronize(s));
        CU_ASSERT_EQUAL(sum, pos_sim_checksum_f32(expect, N));
    }
    CK(cuGraphExecDestroy(exec));
    CK(cuGraphDestroy(g));
    CU_ASSERT_EQUAL(cuGraphLaunch(exec, s), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFree(x));
    CK(cuMemFree(out));
    CK(cuStreamDestroy(s));
}

static void test_graph_fork_join(void)
{
    CUstream s, s2;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUevent fork, join;
    CK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(cuEventRecord(fork, s));
    CK(cuStreamWaitEvent(s2, fork, 0));
    CUstreamCaptureStatus st;
    CK(cuStreamIsCapturing(s2, &st));
    CU_ASSERT_EQUAL(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    /* two 10 ms kernels on two branches run side by side on the 6-SM device (3 SMs each) */
    CK(cuLaunchKernel(f_long, 3, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuLaunchKernel(f_long, 3, 1, 1, 256, 1, 1, 0, s2, NULL, NULL));
    CK(cuEventRecord(join, s2));
    CK(cuStreamWaitEvent(s, join, 0));
    CUgraph g;
    CK(cuStreamEndCapture(s, &g));
    CK(cuStreamIsCapturing(s2, &st));
    CU_ASSERT_EQUAL(st, CU_STREAM_CAPTURE_STATUS_NONE);
    CUgraphExec exec;
    CK(cuGraphInstantiate(&exec, g, 0));
    CUevent t0, t1;
    CK(cuEventCreate(&t0, 0));
    CK(cuEventCreate(&t1, 0));
    /* behind a kernel, so that the graph is launched before t0 completes (long_kernel_ms) */
    CK(cuLaunchKernel(f_long, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuEventRecord(t0, s));
    CK(cuGraphLaunch(exec, s));
    CK(cuEventRecord(t1, s));
    CK(cuStreamSynchronize(s));
    float ms;
    CK(cuEventElapsedTime(&ms, t0, t1));
    /* the kernels use 3 SMs each, i.e. half the device: 20 ms each alone-on-3-SMs, and
     * in parallel the whole graph takes ~20 ms, not 40 */
    CU_ASSERT(ms > 19.0 && ms < 21.0);
    CK(cuGraphExecDestroy(exec));
    CK(cuGraphDestroy(g));
    CK(cuStreamDestroy(s));
    CK(cuStreamDestroy(s2));
}

/* ---- MPS shares ------------------------------------------------------------------------------ */

/* Device time of one long_k (6 blocks: the whole xavier-nx) in the current context, in ms. */
static float long_kernel_ms(CUfunction f)
{
    CUstream s;
    CUevent a, b;
    float ms = -1;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&a, 0));
    CK(cuEventCreate(&b, 0));
    /* behind one kernel already: the measured one is launched before the first event
     * completes, so a host thread descheduled between the calls adds nothing to the device
     * time measured */
    CK(cuLaunchKernel(f, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuEventRecord(a, s));
    CK(cuLaunchKernel(f, 6, 1, 1, 256, 1, 1, 0, s, NULL, NULL));
    CK(cuEventRecord(b, s));
    CK(cuEventSynchronize(b));
    CK(cuEventElapsedTime(&ms, a, b));
    CK(cuEventDestroy(a));
    CK(cuEventDestroy(b));
    CK(cuStreamDestroy(s));
    return ms;
}

static unsigned ctx_sm_limit(void)
{
    CUexecAffinityParam p;
    memset(&p, 0, sizeof p);
    CK(cuCtxGetExecAffinity(&p, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
    return p.param.smCount.val;
}

/* In mps mode a context takes CUDA_MPS_ACTIVE_THREAD_PERCENTAGE as the environment has it when
 * the context is created, and keeps it: the primary context made before the variable was set
 * keeps all 6 SMs; a context created with 50% gets 3 (cuCtxGetExecAffinity) and runs a
 * whole-device kernel in twice the device time; unsetting the variable later changes neither. */
static void test_mps_share_is_read_at_context_creation(void)
{
    int mps = -1;
    CK(pos_sim_device_mps(0, &mps));
    CU_ASSERT_EQUAL(mps, 1);
    CU_ASSERT_EQUAL(pos_sim_device_mps(1, &mps), CUDA_ERROR_INVALID_DEVICE);
    CU_ASSERT_EQUAL(ctx_sm_limit(), 6);
    float full = long_kernel_ms(f_long);
    setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50", 1);
    CU_ASSERT_EQUAL(ctx_sm_limit(), 6); /* the running context keeps what it had */
    CUcontext half;
    CK(cuCtxCreate(&half, NULL, 0, 0));
    unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    CU_ASSERT_EQUAL(ctx_sm_limit(), 3);
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoadData(&m, module_text));
    CK(cuModuleGetFunction(&f, m, "long_k"));
    float halved = long_kernel_ms(f);
    CU_ASSERT_DOUBLE_EQUAL(halved / full, 2.0, 0.05);
    CUexecAffinityParam p;
    CU_ASSERT_EQUAL(cuCtxGetExecAffinity(&p, (CUexecAffinityType)7),
                    CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
    CU_ASSERT_EQUAL(cuCtxGetExecAffinity(NULL, CU_EXEC_AFFINITY_TYPE_SM_COUNT),
                    CUDA_ERROR_INVALID_VALUE);
    CK(cuCtxDestroy(half));
    CK(cuCtxSetCurrent(ctx));
    CU_ASSERT_EQUAL(ctx_sm_limit(), 6);
}

/* ---- errors that stick, fork --------------------------------------------------------------- */

static void test_fork_child_cannot_use_driver(void)
{
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int n;
        _exit(cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED &&
                      cuInit(0) == CUDA_ERROR_NOT_INITIALIZED
                  ? 0
                  : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the parent still works */
    CK(cuLaunchKernel(f_short, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CK(cuCtxSynchronize());
}

static void test_illegal_address_is_sticky(void)
{
    CUcontext c2;
    CK(cuCtxCreate(&c2, NULL, 0, 0));
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoadData(&m, module_text));
    CK(cuModuleGetFunction(&f, m, "fill"));
    CUdeviceptr bad = 0x10;
    float v = 1;
    unsigned n = 16;
    void *p[] = {&bad, &v, &n};
    CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, p, NULL));
    CU_ASSERT_EQUAL(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    CU_ASSERT_EQUAL(cuLaunchKernel(f_short, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) ==
                            CUDA_ERROR_ILLEGAL_ADDRESS ||
                        cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, p, NULL) ==
                            CUDA_ERROR_ILLEGAL_ADDRESS,
                    1);
    CK(cuCtxDestroy(c2));
    /* the primary context is unaffected */
    CK(cuCtxSetCurrent(ctx));
    CK(cuLaunchKernel(f_short, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CK(cuCtxSynchronize());
    CU_ASSERT_EQUAL(cuCtxDestroy(c2), CUDA_ERROR_INVALID_CONTEXT);
}

void pos_test_register(void)
{
    CU_pSuite pre = POS_ADD_SUITE("sim_driver_uninitialised", NULL, NULL);
    POS_ADD_TEST(pre, test_not_initialized_before_cuInit);
    CU_pSuite s = POS_ADD_SUITE("sim_driver", suite_init, NULL);
    POS_ADD_TEST(s, test_init_and_device);
    POS_ADD_TEST(s, test_error_names);
    POS_ADD_TEST(s, test_procaddr_versions_and_ptsz);
    POS_ADD_TEST(s, test_procaddr_table_matches_exports);
    POS_ADD_TEST(s, test_every_export_is_in_the_table);
    POS_ADD_TEST(s, test_bad_handles_and_arguments);
    POS_ADD_TEST(s, test_bad_modules);
    POS_ADD_TEST(s, test_module_from_file_and_library);
    POS_ADD_TEST(s, test_twins_copies_and_checksum);
    POS_ADD_TEST(s, test_memory_accounting);
    POS_ADD_TEST(s, test_pinned_and_stream_values);
    POS_ADD_TEST(s, test_host_functions_in_order);
    POS_ADD_TEST(s, test_events_and_elapsed_time);
    POS_ADD_TEST(s, test_legacy_stream_orders_blocking_streams);
    POS_ADD_TEST(s, test_per_thread_default_stream);
    POS_ADD_TEST(s, test_priorities_and_launch_ex);
    POS_ADD_TEST(s, test_graph_capture_and_replay);
    POS_ADD_TEST(s, test_graph_fork_join);
    POS_ADD_TEST(s, test_mps_share_is_read_at_context_creation);
    POS_ADD_TEST(s, test_fork_child_cannot_use_driver);
    POS_ADD_TEST(s, test_illegal_address_is_sticky);
}
