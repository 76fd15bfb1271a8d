/* What every entry point does first: each thread's current-context stack (CUDA's
 * cuCtxPushCurrent/cuCtxPopCurrent stack) and the current context (drv_current_ctx), under
 * the shared preambles (drv_enter*, static inline in drv.h so that a caller's checks stay
 * visible to the compiler and the analyzer). Calls only the state and the handle table, so
 * that every file above may use it. */
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
