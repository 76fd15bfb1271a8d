/* cuGetProcAddress: the table of every entry point of cuda.h, by base name and the CUDA
 * version that introduced each ABI (as cudaTypedefs.h numbers them), with the
 * per-thread-default-stream twin where one exists. The CUDA runtime resolves all of its
 * driver calls through here. */
#include "sim/driver/drv.h"

#include <string.h>

#include "cu_procaddr.h"

struct proc_entry {
    const char *name; /* base name, as the runtime asks for it */
    int version;      /* first CUDA version with this ABI */
    void *fn;         /* legacy-stream entry point */
    void *fn_ptsz;    /* per-thread-stream entry point, or NULL */
};

/* Every ABI of every entry point of cuda.h, whether modelled or a CUDA_ERROR_NOT_SUPPORTED
 * stub (unsupported.c): build/gen/cu_procaddr.h, generated from the toolkit's cudaTypedefs.h
 * by scripts/gen_cu_exports.sh. */
#define R(base, ver, fn, ptsz) {#base, ver, (void *)fn, (void *)ptsz},

static const struct proc_entry table[] = {SIM_CU_PROCADDR(R)};

#undef R

#define NTABLE (sizeof table / sizeof table[0])

/* Exposed for the shim's and the tests' consistency checks: the number of entries and each
 * entry's fields. */
API size_t pos_sim_procaddr_count(void)
{
    return NTABLE;
}

API int pos_sim_procaddr_entry(size_t i, const char **name, int *version, void **fn, void **fn_ptsz)
{
    if (i >= NTABLE)
        return -1;
    *name = table[i].name;
    *version = table[i].version;
    *fn = table[i].fn;
    *fn_ptsz = table[i].fn_ptsz;
    return 0;
}

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (cudaVersion > SIM_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    const struct proc_entry *best = NULL;
    int found = 0;
    for (size_t i = 0; i < NTABLE; i++) {
        if (strcmp(table[i].name, symbol) != 0)
            continue;
        found = 1;
        if (table[i].version <= cudaVersion && (!best || table[i].version > best->version))
            best = &table[i];
    }
    if (!best) {
        if (status)
            *status = found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    int ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    *pfn = ptsz && best->fn_ptsz ? best->fn_ptsz : best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
