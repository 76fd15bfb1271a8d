/* A program that reaches the driver as the CUDA runtime (11.3+) does: dlopen libcuda.so.1,
 * dlsym only cuGetProcAddress_v2, and resolve everything else through it, asking for the
 * per-thread default stream (nvcc --default-stream per-thread). Four threads launch into
 * their default stream (0) with cuLaunchKernel and cuLaunchKernelEx, and verify a twin
 * computation; "cuGetProcAddress" itself is resolved through cuGetProcAddress too. */
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "prog_common.h"
#include "sim/twin_math.h"

static PFN_cuGetProcAddress_v12000 gpa;
static CUcontext ctx;
static CUfunction work, fill, sum;
static int per_thread = 200;

static void *resolve(const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    if (gpa(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st) !=
            CUDA_SUCCESS ||
        !fn) {
        fprintf(stderr, "cuGetProcAddress(%s) failed\n", name);
        exit(1);
    }
    return fn;
}

static CUresult (*p_set_current)(CUcontext);
static CUresult (*p_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void **, void **);
static CUresult (*p_launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
static CUresult (*p_stream_sync)(CUstream);
static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_dtoh)(void *, CUdeviceptr, size_t);

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    PROG_CHECK(p_set_current(ctx));
    CUdeviceptr x, out;
    unsigned n = 1024;
    float v = (float)id + 0.5f;
    PROG_CHECK(p_alloc(&x, n * 4));
    PROG_CHECK(p_alloc(&out, 8));
    void *pf[] = {&x, &v, &n}, *ps[] = {&x, &n, &out};
    PROG_CHECK(p_launch(fill, 4, 1, 1, 256, 1, 1, 0, NULL, pf, NULL));
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = 2, cfg.gridDimY = 1, cfg.gridDimZ = 1;
    cfg.blockDimX = 64, cfg.blockDimY = 1, cfg.blockDimZ = 1;
    for (int i = 0; i < per_thread - 2; i++) {
        if (i % 2)
            PROG_CHECK(p_launch_ex(&cfg, work, NULL, NULL));
        else
            PROG_CHECK(p_launch(work, 2, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
    }
    PROG_CHECK(p_launch(sum, 1, 1, 1, 256, 1, 1, 0, NULL, ps, NULL));
    PROG_CHECK(p_stream_sync(NULL));
    uint64_t got;
    PROG_CHECK(p_dtoh(&got, out, 8));
    float host[1024];
    pos_sim_fill_f32(host, v, n);
    return (void *)(intptr_t)(got == pos_sim_checksum_f32(host, n));
}

int main(int argc, char **argv)
{
    if (argc > 1)
        per_thread = atoi(argv[1]);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib)
        SET_FN(gpa, dlsym(lib, "cuGetProcAddress_v2"));
    if (!lib || !gpa) {
        fprintf(stderr, "no driver: %s\n", dlerror());
        return 1;
    }
    /* the runtime asks for cuGetProcAddress through itself as well */
    SET_FN(gpa, resolve("cuGetProcAddress"));
    CUresult (*init)(unsigned);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*load)(CUmodule *, const void *);
    CUresult (*get)(CUfunction *, CUmodule, const char *);
    SET_FN(init, resolve("cuInit"));
    SET_FN(retain, resolve("cuDevicePrimaryCtxRetain"));
    SET_FN(load, resolve("cuModuleLoadData"));
    SET_FN(get, resolve("cuModuleGetFunction"));
    SET_FN(p_set_current, resolve("cuCtxSetCurrent"));
    SET_FN(p_launch, resolve("cuLaunchKernel"));
    SET_FN(p_launch_ex, resolve("cuLaunchKernelEx"));
    SET_FN(p_stream_sync, resolve("cuStreamSynchronize"));
    SET_FN(p_alloc, resolve("cuMemAlloc"));
    SET_FN(p_dtoh, resolve("cuMemcpyDtoH"));
    CUmodule m;
    PROG_CHECK(init(0));
    PROG_CHECK(retain(&ctx, 0));
    PROG_CHECK(p_set_current(ctx));
    PROG_CHECK(load(&m, prog_module));
    PROG_CHECK(get(&work, m, "work"));
    PROG_CHECK(get(&fill, m, "fill"));
    PROG_CHECK(get(&sum, m, "sum"));
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        ok &= r != NULL;
    }
    printf("verified %s\nlaunches %d\n", ok ? "true" : "false", 4 * per_thread);
    return ok ? 0 : 1;
}
