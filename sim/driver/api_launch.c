/* Kernel launches: cuLaunchKernel, cuLaunchKernelEx and cuLaunchCooperativeKernel (with their
 * per-thread-stream forms). Validates the launch as the driver does, works out the kernel's
 * cost from its declaration, and only enqueues: the virtual GPU runs it later. */
#include "sim/driver/drv.h"

#include <string.h>

static uint64_t read_param(const void *p, int size)
{
    uint64_t v = 0;
    memcpy(&v, p, (size_t)size);
    return v;
}

/* Reads the first N parameters (sizes SIZES) from kernelParams or from an `extra` buffer. */
static CUresult read_params(void **params, void **extra, int n, const uint8_t *sizes, uint64_t *out)
{
    if (params) {
        for (int i = 0; i < n; i++) {
            if (!params[i])
                return CUDA_ERROR_INVALID_VALUE;
            out[i] = read_param(params[i], sizes[i]);
        }
        return CUDA_SUCCESS;
    }
    const char *buf = NULL;
    size_t len = 0;
    for (int i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
            len = *(size_t *)extra[i + 1];
        else
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (!buf)
        return CUDA_ERROR_INVALID_VALUE;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        off = (off + sizes[i] - 1) / sizes[i] * sizes[i]; /* natural alignment */
        if (off + sizes[i] > len)
            return CUDA_ERROR_INVALID_VALUE;
        out[i] = read_param(buf + off, sizes[i]);
        off += sizes[i];
    }
    return CUDA_SUCCESS;
}

CUresult drv_kernel_desc(struct drv_func *f, const unsigned grid[3], const unsigned block[3],
                         unsigned dyn_smem, void **params, void **extra, struct drv_op_desc *d)
{
    const struct sim_kernel_decl *k = &f->decl;
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    uint64_t blocks = (uint64_t)grid[0] * grid[1] * grid[2];
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2])
        return CUDA_ERROR_INVALID_VALUE;
    if (block[0] > 1024 || block[1] > 1024 || block[2] > 64 || grid[1] > 65535 || grid[2] > 65535 ||
        grid[0] > 2147483647u)
        return CUDA_ERROR_INVALID_VALUE;
    if (threads > k->maxthreads || threads > drv.g->p.max_threads_per_block)
        return CUDA_ERROR_INVALID_VALUE;
    if (dyn_smem > (unsigned)f->max_dyn_smem || k->smem + dyn_smem > drv.g->p.smem_per_block)
        return CUDA_ERROR_INVALID_VALUE;
    if (params && extra)
        return CUDA_ERROR_INVALID_VALUE;
    memset(d, 0, sizeof *d);
    d->kind = SIM_OP_KERNEL;
    d->flags = k->fp16 ? SIM_OPF_FP16 : 0;
    d->blocks = blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks;
    d->threads = (uint32_t)threads;
    d->smem = k->smem + dyn_smem;
    uint64_t args[4] = {0, 0, 0, 0};
    uint32_t twin_n = 0;
    if (k->twin) {
        const struct sim_twin_sig *sig = sim_twin_signature(k->twin);
        CUresult rc = read_params(params, extra, sig->nparams, sig->size, args);
        if (rc != CUDA_SUCCESS)
            return rc;
        d->effect = EFF_TWIN;
        d->u.twin.twin = k->twin;
        memcpy(d->u.twin.args, args, sizeof args);
        twin_n = (uint32_t)(k->twin == SIM_TWIN_VECTOR_ADD ? args[3]
                            : k->twin == SIM_TWIN_CHECKSUM ? args[1]
                                                           : args[2]);
    } else if (k->cost_args) {
        static const uint8_t sizes[2] = {8, 8};
        CUresult rc = read_params(params, extra, 2, sizes, args);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    sim_kernel_cost(k, blocks, threads, args[0], args[1], twin_n, &d->flops, &d->bytes);
    return CUDA_SUCCESS;
}

struct launch {
    CUfunction f;
    unsigned grid[3], block[3];
    unsigned smem;
    CUstream stream;
    void **params, **extra;
    int cooperative;
    int prio_override, prio;
};

static CUresult launch(int ptsz, const struct launch *L)
{
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_func *f = drv_func_lookup(L->f);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (f->module->ctx && f->module->ctx != c)
        return CUDA_ERROR_INVALID_HANDLE;
    struct drv_stream *s;
    rc = drv_stream_resolve(L->stream, ptsz, c, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_op_desc d;
    rc = drv_kernel_desc(f, L->grid, L->block, L->smem, L->params, L->extra, &d);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (L->cooperative) {
        uint64_t fit =
            (uint64_t)sim_gpu_blocks_per_sm(&drv.g->p, d.threads, d.smem) * drv.g->p.num_sms;
        if (d.blocks > fit)
            return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    }
    d.prio_override = L->prio_override;
    d.prio = L->prio;
    if (drv_capture_node(s, &d, &rc))
        return rc;
    return drv_submit(s, &d, NULL);
}

#define LAUNCH_ARGS                                                                                \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,              \
        unsigned int by, unsigned int bz, unsigned int smem, CUstream h

API CUresult cuLaunchKernel(LAUNCH_ARGS, void **kernelParams, void **extra)
{
    struct launch L = {f, {gx, gy, gz}, {bx, by, bz}, smem, h, kernelParams, extra, 0, 0, 0};
    return launch(0, &L);
}

API CUresult cuLaunchKernel_ptsz(LAUNCH_ARGS, void **kernelParams, void **extra)
{
    struct launch L = {f, {gx, gy, gz}, {bx, by, bz}, smem, h, kernelParams, extra, 0, 0, 0};
    return launch(1, &L);
}

API CUresult cuLaunchCooperativeKernel(LAUNCH_ARGS, void **kernelParams)
{
    struct launch L = {f, {gx, gy, gz}, {bx, by, bz}, smem, h, kernelParams, NULL, 1, 0, 0};
    return launch(0, &L);
}

API CUresult cuLaunchCooperativeKernel_ptsz(LAUNCH_ARGS, void **kernelParams)
{
    struct launch L = {f, {gx, gy, gz}, {bx, by, bz}, smem, h, kernelParams, NULL, 1, 0, 0};
    return launch(1, &L);
}

static CUresult launch_ex(int ptsz, const CUlaunchConfig *config, CUfunction f, void **params,
                          void **extra)
{
    if (!config || (config->numAttrs && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    struct launch L = {f,
                       {config->gridDimX, config->gridDimY, config->gridDimZ},
                       {config->blockDimX, config->blockDimY, config->blockDimZ},
                       config->sharedMemBytes,
                       config->hStream,
                       params,
                       extra,
                       0,
                       0,
                       0};
    for (unsigned i = 0; i < config->numAttrs; i++) {
        const CUlaunchAttribute *a = &config->attrs[i];
        switch (a->id) {
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
            L.cooperative = a->value.cooperative != 0;
            break;
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
            L.prio_override = 1;
            L.prio = a->value.priority > 0 ? 0 : a->value.priority < -5 ? -5 : a->value.priority;
            break;
        default:
            /* cluster shape, access policy, programmatic serialisation...: accepted, they
             * have no effect on the simulated GPU */
            break;
        }
    }
    return launch(ptsz, &L);
}

API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                              void **extra)
{
    return launch_ex(0, config, f, kernelParams, extra);
}

API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                   void **extra)
{
    return launch_ex(1, config, f, kernelParams, extra);
}
