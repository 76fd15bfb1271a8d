/* The linker API (cuLinkCreate, cuLinkAddData, cuLinkAddFile, cuLinkComplete, cuLinkDestroy)
 * over the simulated driver's text modules: each input must be a text module (what the driver
 * loads instead of PTX and cubin); linking joins their kernels into one module image, which
 * cuModuleLoadData loads. Two inputs declaring the same kernel do not link, as two definitions
 * of one symbol do not. The error and info logs the caller passes as JIT options are
 * written. */
#include "sim/driver/drv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct drv_link {
    CUlinkState handle;
    char *err_log, *info_log; /* the caller's buffers (CU_JIT_*_LOG_BUFFER), or NULL */
    size_t err_size, info_size;
    char *image; /* joined text module: ".pos_sim_module 1" and every input's body */
    size_t len, cap;
    int complete;
};

static void log_to(char *buf, size_t size, const char *fmt, const char *what)
{
    if (buf && size)
        snprintf(buf, size, fmt, what);
}

static CUresult append(struct drv_link *l, const char *s, size_t n)
{
    if (l->len + n + 1 > l->cap) {
        size_t cap = (l->len + n + 1) * 2;
        char *nb = realloc(l->image, cap);
        if (!nb)
            return CUDA_ERROR_OUT_OF_MEMORY;
        l->image = nb;
        l->cap = cap;
    }
    memcpy(l->image + l->len, s, n);
    l->len += n;
    l->image[l->len] = '\0';
    return CUDA_SUCCESS;
}

API CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
                             CUlinkState *stateOut)
{
    if (!stateOut || (numOptions && (!options || !optionValues)))
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_ctx *c;
    CUresult rc = drv_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_link *l = calloc(1, sizeof *l);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < numOptions; i++) {
        switch (options[i]) {
        case CU_JIT_ERROR_LOG_BUFFER:
            l->err_log = optionValues[i];
            break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            l->err_size = (size_t)(uintptr_t)optionValues[i];
            break;
        case CU_JIT_INFO_LOG_BUFFER:
            l->info_log = optionValues[i];
            break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
            l->info_size = (size_t)(uintptr_t)optionValues[i];
            break;
        default: /* the rest steer a compiler the simulated driver does not have */
            break;
        }
    }
    log_to(l->err_log, l->err_size, "%s", "");
    log_to(l->info_log, l->info_size, "%s", "");
    rc = append(l, SIM_MODULE_MAGIC " 1\n", strlen(SIM_MODULE_MAGIC " 1\n"));
    if (rc == CUDA_SUCCESS && !(l->handle = drv_handle_new(H_LINK, l)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS) {
        free(l->image);
        free(l);
        return rc;
    }
    *stateOut = l->handle;
    return CUDA_SUCCESS;
}

/* The lines of a text module after its header line (the first that is neither blank nor a
 * comment). */
static const char *module_body(const char *text)
{
    const char *p = text;
    while (*p) {
        const char *q = p + strspn(p, " \t\r");
        const char *nl = strchr(q, '\n');
        if (*q != '\n' && *q != '#' && *q != '\0')
            return nl ? nl + 1 : "";
        if (!nl)
            break;
        p = nl + 1;
    }
    return "";
}

static CUresult link_add(struct drv_link *l, const char *data, size_t size, const char *name)
{
    char *text = strndup(data, size); /* the caller's data need not end in a NUL */
    if (!text)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t len = strlen(text);
    char err[256];
    struct sim_kernel_decl *decls;
    size_t n;
    CUresult rc = CUDA_SUCCESS;
    int prc;
    if (!sim_module_is_text(text, len)) {
        log_to(l->err_log, l->err_size,
               "pos-sim: %s is not a text module (the simulated driver links no PTX, cubin or "
               "fatbin; see docs/sim-formats.md)",
               name);
        rc = CUDA_ERROR_INVALID_IMAGE;
    } else if ((prc = sim_module_parse(text, len, &decls, &n, err, sizeof err)) < 0) {
        if (prc != -ENOMEM) {
            log_to(l->err_log, l->err_size, "pos-sim: %s", err);
            drv_debug("link input %s: %s", name, err);
        }
        rc = prc == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_IMAGE;
    } else {
        free(decls);
        const char *body = module_body(text);
        rc = append(l, body, strlen(body));
        if (rc == CUDA_SUCCESS)
            rc = append(l, "\n", 1);
    }
    free(text);
    return rc;
}

static CUresult link_get(CUlinkState state, struct drv_link **out)
{
    CUresult rc;
    *out = drv_enter_handle(1, H_LINK, state, &rc);
    return rc;
}

API CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
                              const char *name, unsigned int numOptions, CUjit_option *options,
                              void **optionValues)
{
    struct drv_link *l;
    CUresult rc = link_get(state, &l);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!data || !size || type >= CU_JIT_NUM_INPUT_TYPES || l->complete)
        return CUDA_ERROR_INVALID_VALUE;
    (void)numOptions, (void)options, (void)optionValues;
    return link_add(l, data, size, name ? name : "(data)");
}

API CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
                              unsigned int numOptions, CUjit_option *options, void **optionValues)
{
    struct drv_link *l;
    CUresult rc = link_get(state, &l);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!path || type >= CU_JIT_NUM_INPUT_TYPES || l->complete)
        return CUDA_ERROR_INVALID_VALUE;
    (void)numOptions, (void)options, (void)optionValues;
    char *text;
    rc = drv_read_file(path, &text);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = link_add(l, text, strlen(text) + 1, path);
    free(text);
    return rc;
}

/* The joined image stays the state's until cuLinkDestroy, as the driver documents. */
API CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
    struct drv_link *l;
    CUresult rc = link_get(state, &l);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!cubinOut || !sizeOut)
        return CUDA_ERROR_INVALID_VALUE;
    char err[256];
    struct sim_kernel_decl *decls;
    size_t n;
    int prc = sim_module_parse(l->image, l->len, &decls, &n, err, sizeof err);
    if (prc == -ENOMEM)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (prc < 0) {
        log_to(l->err_log, l->err_size, "pos-sim: linked image %s", err);
        drv_debug("linked image %s", err);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    free(decls);
    l->complete = 1;
    *cubinOut = l->image;
    *sizeOut = l->len + 1;
    return CUDA_SUCCESS;
}

API CUresult cuLinkDestroy(CUlinkState state)
{
    struct drv_link *l;
    CUresult rc = link_get(state, &l);
    if (rc != CUDA_SUCCESS)
        return rc;
    drv_handle_free(H_LINK, state);
    free(l->image);
    free(l);
    return CUDA_SUCCESS;
}
