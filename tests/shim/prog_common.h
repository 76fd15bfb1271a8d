/* Shared by the shim's test programs: the kernels they declare to the simulated driver, a
 * fatal-error check and the start of a -lcuda program. Each program prints "launches N" (kernel
 * and graph launches it made that the driver accepted, outside any capture) as its last line. */
#ifndef POS_TESTS_SHIM_PROG_COMMON_H
#define POS_TESTS_SHIM_PROG_COMMON_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stores a void * from dlsym/cuGetProcAddress into a function pointer variable. */
#define SET_FN(var, ptr)                                                                           \
    do {                                                                                           \
        void *p_ = (ptr);                                                                          \
        memcpy(&(var), &p_, sizeof p_);                                                            \
    } while (0)

static const char prog_module[] = ".pos_sim_module 1\n"
                                  ".kernel work flops=2e7 bytes=1e5\n"
                                  ".kernel tiny flops=0 bytes=0\n"
                                  ".kernel fill twin=fill\n"
                                  ".kernel sum twin=checksum\n";

#define PROG_CHECK(call)                                                                           \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, (int)rc_);        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* How a -lcuda program starts: cuInit, device 0's primary context (in *CTX) made current, and
 * prog_module loaded. Returns the module. (The programs that find the driver with dlopen never
 * call it, so nothing of theirs links against -lcuda.) */
static inline CUmodule prog_start(CUcontext *ctx)
{
    CUmodule m;
    PROG_CHECK(cuInit(0));
    PROG_CHECK(cuDevicePrimaryCtxRetain(ctx, 0));
    PROG_CHECK(cuCtxSetCurrent(*ctx));
    PROG_CHECK(cuModuleLoadData(&m, prog_module));
    return m;
}

/* Kernel NAME of module M. */
static inline CUfunction prog_kernel(CUmodule m, const char *name)
{
    CUfunction f;
    PROG_CHECK(cuModuleGetFunction(&f, m, name));
    return f;
}

#endif
