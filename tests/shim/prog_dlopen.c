/* A program that finds the driver as the CUDA runtime does without cuGetProcAddress: dlopen
 * of libcuda.so.1 and dlsym for every function. Launches on two streams and the default. */
#include <dlfcn.h>

#include "prog_common.h"

#define LOAD(var, name)                                                                            \
    do {                                                                                           \
        SET_FN(var, dlsym(lib, name));                                                             \
        if (!var) {                                                                                \
            fprintf(stderr, "dlsym %s: %s\n", name, dlerror());                                    \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 300;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    CUresult (*init)(unsigned);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*load_data)(CUmodule *, const void *);
    CUresult (*get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*ctx_sync)(void);
    LOAD(init, "cuInit");
    LOAD(retain, "cuDevicePrimaryCtxRetain");
    LOAD(set_current, "cuCtxSetCurrent");
    LOAD(load_data, "cuModuleLoadData");
    LOAD(get_function, "cuModuleGetFunction");
    LOAD(stream_create, "cuStreamCreate");
    LOAD(launch, "cuLaunchKernel");
    LOAD(ctx_sync, "cuCtxSynchronize");
    CUcontext ctx;
    CUmodule m;
    CUfunction work, tiny;
    CUstream s[2];
    PROG_CHECK(init(0));
    PROG_CHECK(retain(&ctx, 0));
    PROG_CHECK(set_current(ctx));
    PROG_CHECK(load_data(&m, prog_module));
    PROG_CHECK(get_function(&work, m, "work"));
    PROG_CHECK(get_function(&tiny, m, "tiny"));
    PROG_CHECK(stream_create(&s[0], 0));
    PROG_CHECK(stream_create(&s[1], CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < n; i++) {
        CUstream st = i % 3 == 2 ? NULL : s[i % 3];
        PROG_CHECK(launch(i % 2 ? work : tiny, 4, 1, 1, 128, 1, 1, 0, st, NULL, NULL));
    }
    PROG_CHECK(ctx_sync());
    printf("launches %d\n", n);
    return 0;
}
