/* Every entry point of cuda.h the simulated driver does not model: a weak definition for each
 * function the toolkit's header declares (build/gen/cu_exports.h, scripts/gen_cu_exports.sh),
 * so the library exports all of NVIDIA's names and a program that looks one up finds it. A
 * modelled function's own (strong) definition in another file replaces its stub at link time.
 * A stub returns CUDA_ERROR_NOT_SUPPORTED (CUDA_ERROR_NOT_INITIALIZED before cuInit, as
 * every call does) and says so once under POS_SIM_DEBUG. */
#include "sim/driver/drv.h"

#include "cu_exports.h"

#define NAME(sym, params) #sym,
static const char *const names[] = {SIM_CU_EXPORTS(NAME)};
#undef NAME

#define INDEX(sym, params) SIM_EXPORT_##sym,
enum { SIM_CU_EXPORTS(INDEX) SIM_NEXPORTS };
#undef INDEX

static _Atomic unsigned char said[SIM_NEXPORTS];

static CUresult not_modelled(int i)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!atomic_exchange(&said[i], 1))
        drv_debug("%s is not modelled by the simulated driver: CUDA_ERROR_NOT_SUPPORTED", names[i]);
    return CUDA_ERROR_NOT_SUPPORTED;
}

#define STUB(sym, params)                                                                          \
    API __attribute__((weak)) CUresult sym params                                                  \
    {                                                                                              \
        return not_modelled(SIM_EXPORT_##sym);                                                     \
    }
SIM_CU_EXPORTS(STUB)
#undef STUB

/* The names of every entry point, for the tests: the number of them and the I-th. */
API size_t pos_sim_export_count(void)
{
    return SIM_NEXPORTS;
}

API const char *pos_sim_export_name(size_t i)
{
    return i < SIM_NEXPORTS ? names[i] : NULL;
}
