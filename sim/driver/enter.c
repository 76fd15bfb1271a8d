/* What every entry point does first: each thread's current-context stack (CUDA's
 * cuCtxPushCurrent/cuCtxPopCurrent stack, drv_current_ctx), and the shared preambles built on
 * it and on the handle table: initialised, the answer's pointer given, the current context or
 * a handle resolved, each with the CUresult NVIDIA's driver returns when it fails. Calls only
 * the state and the handle table, so that every file above may use it. */
#include "sim/driver/drv.h"

#include <string.h>

#define CTX_STACK_MAX 32

static __thread CUcontext ctx_stack[CTX_STACK_MAX];
static __thread int ctx_depth;

CUresult drv_current_ctx(struct drv_ctx **out)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct drv_ctx *c = drv_handle_get(H_CTX, ctx_stack[ctx_depth - 1]);
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

int drv_ctx_push(CUcontext h)
{
    if (ctx_depth == CTX_STACK_MAX)
        return -1;
    ctx_stack[ctx_depth++] = h;
    return 0;
}

int drv_ctx_pop(CUcontext *top)
{
    if (ctx_depth == 0)
        return -1;
    *top = ctx_stack[--ctx_depth];
    return 0;
}

void drv_ctx_set_top(CUcontext h)
{
    if (h == NULL) {
        if (ctx_depth > 0)
            ctx_depth--;
        return;
    }
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = h;
}

CUcontext drv_ctx_top(void)
{
    return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
}

void drv_ctx_forget(CUcontext h)
{
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == h) {
            /* the stack holds CUcontext handles, which are pointers */
            memmove(&ctx_stack[i], &ctx_stack[i + 1],
                    (size_t)(ctx_depth - i - 1) *
                        sizeof ctx_stack[0]); // NOLINT(bugprone-sizeof-expression)
            ctx_depth--;
            i--;
        }
}

/* ---- preambles ----------------------------------------------------------------------------- */

CUresult drv_enter(int ok)
{
    return ok ? drv_check_init() : CUDA_ERROR_INVALID_VALUE;
}

CUresult drv_enter_dev(int ok, CUdevice dev)
{
    CUresult rc = drv_enter(ok);
    if (rc != CUDA_SUCCESS)
        return rc;
    return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult drv_enter_ctx(int ok, struct drv_ctx **c)
{
    return ok ? drv_current_ctx(c) : CUDA_ERROR_INVALID_VALUE;
}

/* What NVIDIA's driver answers for a handle of TYPE that names nothing: an invalid context;
 * an invalid value for graphs, executable graphs and memory pools (they are arguments, not
 * resources, in its errors); an invalid handle for the rest. */
static CUresult bad_handle(int type)
{
    switch (type) {
    case H_CTX:
        return CUDA_ERROR_INVALID_CONTEXT;
    case H_GRAPH:
    case H_EXEC:
    case H_MEMPOOL:
        return CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_INVALID_HANDLE;
    }
}

void *drv_enter_handle(int ok, int type, const void *h, CUresult *rc)
{
    *rc = drv_enter(ok);
    if (*rc != CUDA_SUCCESS)
        return NULL;
    void *obj = drv_handle_get(type, h);
    if (!obj)
        *rc = bad_handle(type);
    return obj;
}
