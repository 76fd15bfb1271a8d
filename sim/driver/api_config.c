/* What programs set and read at start-up and the device model ignores: a context's cache and
 * shared-memory preferences and its limits, a function's cache and shared-memory preferences,
 * profiler control, and the driver's private export tables (which the simulated driver does
 * not have). Each call checks its arguments and keeps what the driver documents it keeps. */
#include "sim/driver/drv.h"

#include <stdio.h>

static int valid_cache_config(CUfunc_cache c)
{
    return c == CU_FUNC_CACHE_PREFER_NONE || c == CU_FUNC_CACHE_PREFER_SHARED ||
           c == CU_FUNC_CACHE_PREFER_L1 || c == CU_FUNC_CACHE_PREFER_EQUAL;
}

static int valid_smem_config(CUsharedconfig c)
{
    return c == CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE ||
           c == CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE ||
           c == CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE;
}

/* ---- cache and shared-memory preferences -------------------------------------------------- */

API CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(pconfig != NULL, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    *pconfig = (CUfunc_cache)c->cache_config;
    return CUDA_SUCCESS;
}

/* Only a preference, as on a GPU whose L1 and shared memory share one array: kept, and read
 * back by cuCtxGetCacheConfig. */
API CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!valid_cache_config(config))
        return CUDA_ERROR_INVALID_VALUE;
    c->cache_config = (int)config;
    return CUDA_SUCCESS;
}

/* Every preset is compute capability 7 or later, whose shared-memory bank size is fixed at four
 * bytes: Get answers that, Set checks its argument and does nothing (cuda.h's documented
 * behaviour on such devices). */
API CUresult cuCtxGetSharedMemConfig(CUsharedconfig *pConfig)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(pConfig != NULL, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    *pConfig = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    return valid_smem_config(config) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!drv_func_lookup(hfunc))
        return CUDA_ERROR_INVALID_HANDLE;
    return valid_cache_config(config) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!drv_func_lookup(hfunc))
        return CUDA_ERROR_INVALID_HANDLE;
    return valid_smem_config(config) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- limits ------------------------------------------------------------------------------- */

/* What a context starts with: the NVIDIA driver's documented defaults (stack 1 KiB per thread,
 * printf FIFO 1 MiB, malloc heap 8 MiB, device-runtime depth 2 and 2048 pending launches). */
static size_t limit_default(CUlimit limit)
{
    const struct sim_dev_params *p = &drv.g->p;
    switch (limit) {
    case CU_LIMIT_STACK_SIZE:
        return 1024;
    case CU_LIMIT_PRINTF_FIFO_SIZE:
        return 1u << 20;
    case CU_LIMIT_MALLOC_HEAP_SIZE:
        return 8u << 20;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:
        return 2;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
        return 2048;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:
        return 64;
    case CU_LIMIT_SHMEM_SIZE:
        return p->smem_per_block;
    case CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED:
        return 1;
    default:
        return 0;
    }
}

static int limit_known(CUlimit limit)
{
    return (int)limit >= 0 && limit < CU_LIMIT_MAX;
}

API CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(pvalue != NULL, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!limit_known(limit))
        return CUDA_ERROR_INVALID_VALUE;
    *pvalue = (c->limits_set & (1u << limit)) ? c->limits[limit] : limit_default(limit);
    return CUDA_SUCCESS;
}

/* Kept and read back; none of them changes what the model does. The persisting-L2 size is
 * refused on devices before compute capability 8 (which have no such cache), the query-only
 * limits of CIG contexts (a simulated context is never one) cannot be set. */
API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!limit_known(limit))
        return CUDA_ERROR_INVALID_VALUE;
    switch (limit) {
    case CU_LIMIT_SHMEM_SIZE:
    case CU_LIMIT_CIG_ENABLED:
        return CUDA_ERROR_INVALID_VALUE;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:
        if (value > 128)
            return CUDA_ERROR_INVALID_VALUE;
        break;
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE:
        if (drv.g->p.cc_major < 8)
            return CUDA_ERROR_UNSUPPORTED_LIMIT;
        break;
    default:
        break;
    }
    c->limits[limit] = value;
    c->limits_set |= 1u << limit;
    return CUDA_SUCCESS;
}

/* ---- profiler ----------------------------------------------------------------------------- */

/* No profiling tool is ever attached: starting and stopping collection succeed and do
 * nothing, given a current context. */
API CUresult cuProfilerStart(void)
{
    struct drv_ctx *c;
    return drv_current_ctx(&c);
}

API CUresult cuProfilerStop(void)
{
    struct drv_ctx *c;
    return drv_current_ctx(&c);
}

/* ---- export tables ------------------------------------------------------------------------ */

/* NVIDIA's driver hands its own runtime and tools private function tables by UUID. The
 * simulated driver has none: every table is CUDA_ERROR_NOT_SUPPORTED, which the CUDA runtime
 * takes as "no such driver feature" for the tables it can do without (docs/sim.md says which
 * runtime calls still work). The UUID asked for is logged once per call site under
 * POS_SIM_DEBUG. */
API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    *ppExportTable = NULL;
    const unsigned char *u = (const unsigned char *)pExportTableId->bytes;
    drv_debug("cuGetExportTable(%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x"
              "%02x): the simulated driver has no private export tables",
              u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
              u[13], u[14], u[15]);
    return CUDA_ERROR_NOT_SUPPORTED;
}
