/* Tests the simulated driver as third-party programs meet it at start-up: it exports every
 * function NVIDIA's libcuda.so.1 exports (the toolkit's link stub lists them), answers what it
 * does not model with CUDA_ERROR_NOT_SUPPORTED and one line under POS_SIM_DEBUG, and keeps the
 * settings programs make before their first launch: cache and shared-memory configuration,
 * limits, the linker API over text modules, globals, the profiler, export tables and device
 * attributes. Linked -lcuda against build/sim/libcuda.so.1; its own virtual GPU. */
/* the shared-memory bank calls are deprecated, and programs still make them */
#define CUDA_ENABLE_DEPRECATED 1
#include <cuda.h>
#include <cudaProfiler.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/twin_math.h"
#include "tests/cunit_main.h"
#include "tests/integration/util.h"
#include "tests/unit/elf_symbols.h"

size_t pos_sim_export_count(void);
const char *pos_sim_export_name(size_t i);

#define CK(x) CU_ASSERT_EQUAL_FATAL((x), CUDA_SUCCESS)

static CUcontext ctx;
static void *self_driver;

/* Child modes, run by re-executing this binary (the driver reads POS_SIM_DEBUG once). */
__attribute__((constructor)) static void child_modes(void)
{
    const char *mode = getenv("POS_TEST_STARTUP_CHILD");
    if (!mode)
        return;
    if (strcmp(mode, "unmodelled") == 0) {
        /* two calls of one unmodelled function, one of another: one line each */
        int ok = cuInit(0) == CUDA_SUCCESS &&
                 cuSurfObjectDestroy(0x10) == CUDA_ERROR_NOT_SUPPORTED &&
                 cuSurfObjectDestroy(0x10) == CUDA_ERROR_NOT_SUPPORTED &&
                 cuTexObjectDestroy(1) == CUDA_ERROR_NOT_SUPPORTED;
        _exit(ok ? 0 : 1);
    }
    if (strcmp(mode, "runtime") == 0) {
        /* the CUDA runtime on the simulated driver: prints what cudaGetDeviceCount returns */
        char path[4096];
        const char *home = getenv("CUDA_HOME");
        snprintf(path, sizeof path, "%s/lib64/libcudart.so.13",
                 home && *home ? home : "/usr/local/cuda");
        void *rt = dlopen(path, RTLD_NOW);
        int (*count)(int *) = rt ? (int (*)(int *))dlsym(rt, "cudaGetDeviceCount") : NULL;
        if (!count)
            _exit(77);
        int n = -1;
        printf("cudaGetDeviceCount %d\n", count(&n));
        fflush(stdout);
        _exit(0);
    }
    _exit(2);
}

/* Runs this binary in child MODE with POS_SIM_DEBUG=1; its stdout and stderr in OUT. Returns
 * its exit status. */
static int run_child(const char *mode, char *out, size_t cap)
{
    char self[512], path[128];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return -1;
    self[len] = '\0';
    snprintf(path, sizeof path, "/tmp/pos-test-startup-%d.out", (int)getpid());
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        setenv("POS_TEST_STARTUP_CHILD", mode, 1);
        setenv("POS_SIM_DEBUG", "1", 1);
        execl(self, self, (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    util_read_file(path, out, cap);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_unmodelled_calls_need_cuInit_first(void)
{
    CU_ASSERT_EQUAL(cuSurfObjectDestroy(0x10), CUDA_ERROR_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(cuCtxGetCacheConfig(&(CUfunc_cache){0}), CUDA_ERROR_NOT_INITIALIZED);
    /* the runtime asks for export tables before cuInit */
    const void *t = (void *)1;
    CUuuid id = {{0}};
    CU_ASSERT_EQUAL(cuGetExportTable(&t, &id), CUDA_ERROR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(t);
}

static int suite_init(void)
{
    char inst[64];
    snprintf(inst, sizeof inst, "test-startup-%d", (int)getpid());
    setenv("POS_SIM_INSTANCE", inst, 1);
    setenv("POS_SIM_DEVICE", "xavier-nx", 1);
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return -1;
    self_driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return self_driver ? 0 : -1;
}

/* ---- exports -------------------------------------------------------------------------------- */

static int exported_missing;

static void check_exported(const char *name, void *arg)
{
    (void)arg;
    if (!dlsym(self_driver, name)) {
        fprintf(stderr, "NVIDIA's libcuda exports %s; the simulated driver does not\n", name);
        exported_missing++;
    }
}

/* The toolkit's link stub exports exactly the functions of NVIDIA's driver: each is in ours,
 * and each name the generated table holds resolves. */
static void test_exports_every_function_nvidia_exports(void)
{
    char stub[4096];
    const char *home = getenv("CUDA_HOME");
    snprintf(stub, sizeof stub, "%s/lib64/stubs/libcuda.so",
             home && *home ? home : "/usr/local/cuda");
    exported_missing = 0;
    int n = elf_each_function(stub, "cu", check_exported, NULL);
    CU_ASSERT(n > 600);
    CU_ASSERT_EQUAL(exported_missing, 0);
    CU_ASSERT((long)pos_sim_export_count() >= n);
    for (size_t i = 0; i < pos_sim_export_count(); i++)
        CU_ASSERT_PTR_NOT_NULL(dlsym(self_driver, pos_sim_export_name(i)));
    CU_ASSERT_PTR_NULL(pos_sim_export_name(pos_sim_export_count()));
}

/* Unmodelled functions exist under every name and ABI, through dlsym and cuGetProcAddress,
 * and answer CUDA_ERROR_NOT_SUPPORTED. */
static void test_unmodelled_calls_are_not_supported(void)
{
    CU_ASSERT_EQUAL(cuSurfObjectDestroy(0x10), CUDA_ERROR_NOT_SUPPORTED);
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CK(cuGetProcAddress_v2("cuGraphicsResourceGetMappedPointer", &fn, 13000, 0, &st));
    CU_ASSERT_PTR_EQUAL(fn, dlsym(self_driver, "cuGraphicsResourceGetMappedPointer_v2"));
    CUdeviceptr p;
    size_t n;
    CU_ASSERT_EQUAL(
        ((CUresult(*)(CUdeviceptr *, size_t *, CUgraphicsResource))fn)(&p, &n, NULL),
        CUDA_ERROR_NOT_SUPPORTED);
    CK(cuGetProcAddress_v2("cuMemcpy2DAsync", &fn, 13000,
                           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    CU_ASSERT_PTR_EQUAL(fn, dlsym(self_driver, "cuMemcpy2DAsync_v2_ptsz"));
    CK(cuGetProcAddress_v2("cuProfilerStart", &fn, 13000, 0, &st));
    CU_ASSERT_PTR_EQUAL(fn, (void *)cuProfilerStart);
}

static void test_unmodelled_call_says_so_once(void)
{
    char out[8192];
    CU_ASSERT_EQUAL(run_child("unmodelled", out, sizeof out), 0);
    CU_ASSERT_EQUAL(util_count(out, "cuSurfObjectDestroy is not modelled"), 1);
    CU_ASSERT_EQUAL(util_count(out, "cuTexObjectDestroy is not modelled"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "CUDA_ERROR_NOT_SUPPORTED"));
}

/* ---- configuration ------------------------------------------------------------------------- */

static void test_cache_and_shared_memory_config_per_context(void)
{
    CUfunc_cache c = (CUfunc_cache)-1;
    CK(cuCtxGetCacheConfig(&c));
    CU_ASSERT_EQUAL(c, CU_FUNC_CACHE_PREFER_NONE);
    CK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1));
    CU_ASSERT_EQUAL(cuCtxSetCacheConfig((CUfunc_cache)7), CUDA_ERROR_INVALID_VALUE);
    CK(cuCtxGetCacheConfig(&c));
    CU_ASSERT_EQUAL(c, CU_FUNC_CACHE_PREFER_L1);
    CU_ASSERT_EQUAL(cuCtxGetCacheConfig(NULL), CUDA_ERROR_INVALID_VALUE);
    /* another context keeps its own */
    CUcontext c2;
    CK(cuCtxCreate(&c2, NULL, 0, 0));
    CK(cuCtxGetCacheConfig(&c));
    CU_ASSERT_EQUAL(c, CU_FUNC_CACHE_PREFER_NONE);
    CK(cuCtxDestroy(c2));
    CK(cuCtxSetCurrent(ctx));
    CK(cuCtxGetCacheConfig(&c));
    CU_ASSERT_EQUAL(c, CU_FUNC_CACHE_PREFER_L1);
    CK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_NONE));

    /* compute capability 7+: the bank size is four bytes whatever is asked */
    CUsharedconfig sc = (CUsharedconfig)-1;
    CK(cuCtxGetSharedMemConfig(&sc));
    CU_ASSERT_EQUAL(sc, CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE);
    CK(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE));
    CK(cuCtxGetSharedMemConfig(&sc));
    CU_ASSERT_EQUAL(sc, CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE);
    CU_ASSERT_EQUAL(cuCtxSetSharedMemConfig((CUsharedconfig)3), CUDA_ERROR_INVALID_VALUE);

    /* without a current context */
    CUcontext popped;
    CK(cuCtxPopCurrent(&popped));
    CUcontext none = (CUcontext)1;
    CK(cuCtxGetCurrent(&none));
    if (!none) {
        CU_ASSERT_EQUAL(cuCtxGetCacheConfig(&c), CUDA_ERROR_INVALID_CONTEXT);
        CU_ASSERT_EQUAL(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1), CUDA_ERROR_INVALID_CONTEXT);
        CU_ASSERT_EQUAL(cuCtxGetSharedMemConfig(&sc), CUDA_ERROR_INVALID_CONTEXT);
    }
    CK(cuCtxSetCurrent(ctx));
}

static void test_function_cache_and_shared_memory_config(void)
{
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoadData(&m, ".pos_sim_module 1\n.kernel k flops=1\n"));
    CK(cuModuleGetFunction(&f, m, "k"));
    CK(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED));
    CU_ASSERT_EQUAL(cuFuncSetCacheConfig(f, (CUfunc_cache)9), CUDA_ERROR_INVALID_VALUE);
    CK(cuFuncSetSharedMemConfig(f, CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE));
    CU_ASSERT_EQUAL(cuFuncSetSharedMemConfig(f, (CUsharedconfig)5), CUDA_ERROR_INVALID_VALUE);
    CK(cuModuleUnload(m));
    CU_ASSERT_EQUAL(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_L1), CUDA_ERROR_INVALID_HANDLE);
    CU_ASSERT_EQUAL(cuFuncSetSharedMemConfig(f, CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE),
                    CUDA_ERROR_INVALID_HANDLE);
}

static void test_limits_start_at_the_defaults_and_read_back(void)
{
    size_t v = 0;
    CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
    CU_ASSERT_EQUAL(v, 1024);
    CK(cuCtxGetLimit(&v, CU_LIMIT_PRINTF_FIFO_SIZE));
    CU_ASSERT_EQUAL(v, 1u << 20);
    CK(cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE));
    CU_ASSERT_EQUAL(v, 8u << 20);
    CK(cuCtxGetLimit(&v, CU_LIMIT_CIG_ENABLED));
    CU_ASSERT_EQUAL(v, 0);
    CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));
    CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
    CU_ASSERT_EQUAL(v, 4096);
    CK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 64u << 20));
    CK(cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE));
    CU_ASSERT_EQUAL(v, 64u << 20);
    CU_ASSERT_EQUAL(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 256),
                    CUDA_ERROR_INVALID_VALUE);
    /* xavier-nx is compute capability 7.2: no persisting L2 */
    CU_ASSERT_EQUAL(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 4096),
                    CUDA_ERROR_UNSUPPORTED_LIMIT);
    CU_ASSERT_EQUAL(cuCtxSetLimit(CU_LIMIT_CIG_ENABLED, 1), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuCtxSetLimit(CU_LIMIT_MAX, 1), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuCtxGetLimit(&v, CU_LIMIT_MAX), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuCtxGetLimit(NULL, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_VALUE);
    /* a new context starts from the defaults */
    CUcontext c2;
    CK(cuCtxCreate(&c2, NULL, 0, 0));
    CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
    CU_ASSERT_EQUAL(v, 1024);
    CK(cuCtxDestroy(c2));
    CK(cuCtxSetCurrent(ctx));
    CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1024));
}

/* ---- modules: globals and the linker -------------------------------------------------------- */

static void test_module_has_no_globals(void)
{
    CUmodule m;
    CUdeviceptr p;
    size_t bytes;
    CK(cuModuleLoadData(&m, ".pos_sim_module 1\n.kernel k flops=1\n"));
    CU_ASSERT_EQUAL(cuModuleGetGlobal(&p, &bytes, m, "k"), CUDA_ERROR_NOT_FOUND);
    CU_ASSERT_EQUAL(cuModuleGetGlobal(&p, &bytes, m, "counter"), CUDA_ERROR_NOT_FOUND);
    CU_ASSERT_EQUAL(cuModuleGetGlobal(&p, &bytes, m, NULL), CUDA_ERROR_INVALID_VALUE);
    CK(cuModuleUnload(m));
    CU_ASSERT_EQUAL(cuModuleGetGlobal(&p, &bytes, m, "counter"), CUDA_ERROR_INVALID_HANDLE);
}

static const char part_a[] = "# first input\n"
                             ".pos_sim_module 1\n"
                             ".kernel fill_a twin=fill\n";
static const char part_b[] = ".pos_sim_module 1\n"
                             ".kernel scale_b twin=scale\n";

/* Two inputs, one as data and one as a file, link into one image whose kernels both load and
 * compute. */
static void test_link_joins_text_modules(void)
{
    char err[256] = "x", info[256] = "x";
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_TARGET_FROM_CUCONTEXT};
    void *vals[] = {err, (void *)(uintptr_t)sizeof err, info, (void *)(uintptr_t)sizeof info, 0};
    CUlinkState ls;
    CK(cuLinkCreate(5, opts, vals, &ls));
    char path[] = "/tmp/pos-test-link-XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(write(fd, part_b, strlen(part_b)) == (ssize_t)strlen(part_b));
    close(fd);
    /* data without a terminating NUL: its size bounds it */
    CK(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)part_a, strlen(part_a), "a", 0, NULL, NULL));
    CK(cuLinkAddFile(ls, CU_JIT_INPUT_PTX, path, 0, NULL, NULL));
    unlink(path);
    void *image;
    size_t size;
    CK(cuLinkComplete(ls, &image, &size));
    CU_ASSERT_EQUAL(size, strlen(image) + 1);
    CU_ASSERT_STRING_EQUAL(err, "");
    CU_ASSERT_STRING_EQUAL(info, "");
    CUmodule m;
    CUfunction fill, scale;
    CK(cuModuleLoadData(&m, image));
    CK(cuLinkDestroy(ls));
    CK(cuModuleGetFunction(&fill, m, "fill_a"));
    CK(cuModuleGetFunction(&scale, m, "scale_b"));
    enum { N = 256 };
    CUdeviceptr x;
    CK(cuMemAlloc(&x, N * 4));
    float v = 1.5f, alpha = 2.0f, host[N];
    unsigned n = N;
    void *pf[] = {&x, &v, &n}, *ps[] = {&x, &alpha, &n};
    CK(cuLaunchKernel(fill, 1, 1, 1, N, 1, 1, 0, NULL, pf, NULL));
    CK(cuLaunchKernel(scale, 1, 1, 1, N, 1, 1, 0, NULL, ps, NULL));
    CK(cuMemcpyDtoH(host, x, sizeof host));
    CU_ASSERT_EQUAL(host[0], 3.0f);
    CU_ASSERT_EQUAL(host[N - 1], 3.0f);
    CK(cuMemFree(x));
    CK(cuModuleUnload(m));
    CU_ASSERT_EQUAL(cuLinkDestroy(ls), CUDA_ERROR_INVALID_HANDLE);
}

/* What does not link: PTX (the simulated GPU runs no device code), a broken module, one kernel
 * defined twice; each says why in the error log. */
static void test_link_refuses_what_it_cannot_link(void)
{
    char err[256];
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {err, (void *)(uintptr_t)sizeof err};
    CUlinkState ls;
    CK(cuLinkCreate(2, opts, vals, &ls));
    static const char ptx[] = ".version 8.0\n.target sm_80\n.address_size 64\n";
    CU_ASSERT_EQUAL(
        cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)ptx, sizeof ptx, "k.ptx", 0, NULL, NULL),
        CUDA_ERROR_INVALID_IMAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "k.ptx is not a text module"));
    static const char broken[] = ".pos_sim_module 1\n.kernel k flop=1\n";
    CU_ASSERT_EQUAL(
        cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)broken, sizeof broken, "b", 0, NULL, NULL),
        CUDA_ERROR_INVALID_IMAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "line 2"));
    CU_ASSERT_EQUAL(cuLinkAddFile(ls, CU_JIT_INPUT_PTX, "/nonexistent/k.mod", 0, NULL, NULL),
                    CUDA_ERROR_FILE_NOT_FOUND);
    CK(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)part_a, sizeof part_a, "a", 0, NULL, NULL));
    CK(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)part_a, sizeof part_a, "a2", 0, NULL, NULL));
    void *image;
    size_t size;
    CU_ASSERT_EQUAL(cuLinkComplete(ls, &image, &size), CUDA_ERROR_INVALID_IMAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "fill_a"));
    CK(cuLinkDestroy(ls));
    CU_ASSERT_EQUAL(cuLinkCreate(1, NULL, NULL, &ls), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuLinkComplete((CUlinkState)0x1234, &image, &size), CUDA_ERROR_INVALID_HANDLE);
}

/* ---- profiler, export tables, attributes ------------------------------------------------------
 */

static void test_profiler_start_stop_need_a_context(void)
{
    CK(cuProfilerStart());
    CK(cuProfilerStop());
    CUcontext popped, none = (CUcontext)1;
    CK(cuCtxPopCurrent(&popped));
    CK(cuCtxGetCurrent(&none));
    if (!none) {
        CU_ASSERT_EQUAL(cuProfilerStart(), CUDA_ERROR_INVALID_CONTEXT);
        CU_ASSERT_EQUAL(cuProfilerStop(), CUDA_ERROR_INVALID_CONTEXT);
    }
    CK(cuCtxSetCurrent(ctx));
}

static void test_no_export_tables(void)
{
    const void *t = (void *)1;
    CUuuid id = {{0}};
    CU_ASSERT_EQUAL(cuGetExportTable(&t, &id), CUDA_ERROR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_EQUAL(cuGetExportTable(NULL, &id), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuGetExportTable(&t, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* The CUDA runtime needs NVIDIA's private export tables at its start; without them every
 * runtime call fails with cudaErrorNotSupported (801), as docs/sim.md says. Skipped where the
 * toolkit has no libcudart.so.13. */
static void test_cuda_runtime_fails_cleanly_without_export_tables(void)
{
    char out[8192];
    int rc = run_child("runtime", out, sizeof out);
    if (rc == 77) {
        fprintf(stderr, "\n  no libcudart.so.13 under CUDA_HOME/lib64: skipped\n");
        return;
    }
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(util_number(out, "cudaGetDeviceCount"), 801);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "no private export tables"));
}

/* The attributes hashcat reads before it lists a device, and one the model has no figure for. */
static void test_device_attributes_programs_ask_for(void)
{
    static const CUdevice_attribute asked[] = {
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
        CU_DEVICE_ATTRIBUTE_WARP_SIZE,
        CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT,
        CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
        CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
        CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
    };
    for (size_t i = 0; i < sizeof asked / sizeof asked[0]; i++) {
        int v = -1;
        CU_ASSERT_EQUAL(cuDeviceGetAttribute(&v, asked[i], 0), CUDA_SUCCESS);
        CU_ASSERT(v >= 0);
    }
    int v = -1;
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 0));
    CU_ASSERT_EQUAL(v, 1100000);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, 0));
    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0), CUDA_ERROR_INVALID_VALUE);
}

void pos_test_register(void)
{
    CU_pSuite pre = POS_ADD_SUITE("sim_startup_uninitialised", NULL, NULL);
    POS_ADD_TEST(pre, test_unmodelled_calls_need_cuInit_first);
    CU_pSuite s = POS_ADD_SUITE("sim_startup", suite_init, NULL);
    POS_ADD_TEST(s, test_exports_every_function_nvidia_exports);
    POS_ADD_TEST(s, test_unmodelled_calls_are_not_supported);
    POS_ADD_TEST(s, test_unmodelled_call_says_so_once);
    POS_ADD_TEST(s, test_cache_and_shared_memory_config_per_context);
    POS_ADD_TEST(s, test_function_cache_and_shared_memory_config);
    POS_ADD_TEST(s, test_limits_start_at_the_defaults_and_read_back);
    POS_ADD_TEST(s, test_module_has_no_globals);
    POS_ADD_TEST(s, test_link_joins_text_modules);
    POS_ADD_TEST(s, test_link_refuses_what_it_cannot_link);
    POS_ADD_TEST(s, test_profiler_start_stop_need_a_context);
    POS_ADD_TEST(s, test_no_export_tables);
    POS_ADD_TEST(s, test_cuda_runtime_fails_cleanly_without_export_tables);
    POS_ADD_TEST(s, test_device_attributes_programs_ask_for);
}
