/* Modules, libraries, kernels and functions: loading text modules (docs/sim-formats.md),
 * looking kernels up by name, and function attributes. */
#include "sim/driver/drv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IMAGE (64u << 20)

/* A loaded module's device memory (module_mem_bytes), counted in its context, which gives
 * back what its modules still hold when it is destroyed (drv_module_ctx_gone). */
static CUresult module_charge(struct drv_module *m)
{
    CUresult rc = drv_mem_charge(drv.g->p.module_mem_bytes, CHARGE_OVERHEAD);
    if (rc == CUDA_SUCCESS && m->ctx)
        atomic_fetch_add(&m->ctx->nmodules, 1);
    return rc;
}

static void module_uncharge(struct drv_module *m)
{
    if (m->ctx && m->ctx->destroyed)
        return;
    if (m->ctx)
        atomic_fetch_sub(&m->ctx->nmodules, 1);
    drv_mem_uncharge(drv.g->p.module_mem_bytes, CHARGE_OVERHEAD);
}

static CUresult module_build(const void *image, struct drv_module *m)
{
    if (!image)
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned char *b = image;
    if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') {
        drv_debug("module image is a cubin (ELF): the simulated GPU runs no device code");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    size_t len = strnlen(image, MAX_IMAGE);
    if (!sim_module_is_text(image, len)) {
        drv_debug("module image is not a pos-sim text module (PTX, cubin and fatbin are not "
                  "supported; see docs/sim-formats.md)");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    char err[256];
    struct sim_kernel_decl *decls;
    size_t n;
    int rc = sim_module_parse(image, len, &decls, &n, err, sizeof err);
    if (rc == -ENOMEM)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (rc < 0) {
        drv_debug("module %s", err);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    /* the module's code, constants and globals on the device: a fixed figure per module
     * (module_mem_bytes), charged while it is loaded */
    if (module_charge(m) != CUDA_SUCCESS) {
        free(decls);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->funcs = calloc(n ? n : 1, sizeof *m->funcs);
    if (!m->funcs) {
        module_uncharge(m);
        free(decls);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->nfuncs = n;
    for (size_t i = 0; i < n; i++) {
        m->funcs[i].decl = decls[i];
        m->funcs[i].module = m;
        m->funcs[i].max_dyn_smem = 48 * 1024 - (int)decls[i].smem;
        m->funcs[i].handle = drv_handle_new(H_FUNC, &m->funcs[i]);
    }
    free(decls);
    return CUDA_SUCCESS;
}

static void module_release(struct drv_module *m)
{
    for (size_t i = 0; i < m->nfuncs; i++)
        drv_handle_free(H_FUNC, m->funcs[i].handle);
    free(m->funcs);
    module_uncharge(m);
}

void drv_module_ctx_gone(struct drv_ctx *ctx)
{
    int n = atomic_exchange(&ctx->nmodules, 0);
    drv_mem_uncharge((uint64_t)n * drv.g->p.module_mem_bytes, CHARGE_OVERHEAD);
}

static CUresult module_load_image(CUmodule *module, const void *image)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(module && image, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_module *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->ctx = c;
    rc = module_build(image, m);
    if (rc == CUDA_SUCCESS && !(m->handle = drv_handle_new(H_MODULE, m))) {
        module_release(m);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc != CUDA_SUCCESS) {
        free(m);
        return rc;
    }
    *module = m->handle;
    return CUDA_SUCCESS;
}

CUresult drv_read_file(const char *fname, char **out)
{
    FILE *f = fopen(fname, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            char *nb = cap < MAX_IMAGE ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    buf[len] = '\0';
    *out = buf;
    return CUDA_SUCCESS;
}

API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(module && fname, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    char *text;
    rc = drv_read_file(fname, &text);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = module_load_image(module, text);
    free(text);
    return rc;
}

API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    return module_load_image(module, image);
}

API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                CUjit_option *options, void **optionValues)
{
    /* JIT options steer a compiler the simulated driver does not have. */
    (void)numOptions, (void)options, (void)optionValues;
    return module_load_image(module, image);
}

API CUresult cuModuleUnload(CUmodule hmod)
{
    CUresult rc;
    struct drv_module *m = drv_enter_handle(1, H_MODULE, hmod, &rc);
    if (!m)
        return rc;
    /* work already queued with its functions must not see them vanish */
    if (m->ctx && !m->ctx->destroyed)
        drv_ctx_sync(m->ctx);
    drv_handle_free(H_MODULE, hmod);
    module_release(m);
    free(m);
    return CUDA_SUCCESS;
}

static struct drv_func *module_find(struct drv_module *m, const char *name)
{
    for (size_t i = 0; i < m->nfuncs; i++)
        if (strcmp(m->funcs[i].decl.name, name) == 0)
            return &m->funcs[i];
    return NULL;
}

API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    CUresult rc;
    struct drv_module *m = drv_enter_handle(hfunc && name, H_MODULE, hmod, &rc);
    if (!m)
        return rc;
    struct drv_func *f = module_find(m, name);
    if (!f)
        return CUDA_ERROR_NOT_FOUND;
    *hfunc = f->handle;
    return CUDA_SUCCESS;
}

/* The text module format declares kernels only, so a module has no globals: every name is
 * CUDA_ERROR_NOT_FOUND, the driver's answer for a name the module does not define. */
API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    CUresult rc = drv_enter(name != NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!drv_handle_get(H_MODULE, hmod))
        return CUDA_ERROR_INVALID_HANDLE;
    (void)dptr, (void)bytes;
    return CUDA_ERROR_NOT_FOUND;
}

API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    CUresult rc = drv_enter(mode != NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    *mode = CU_MODULE_EAGER_LOADING;
    return CUDA_SUCCESS;
}

/* ---- libraries (context-independent modules) ------------------------------------------- */

static CUresult library_load(CUlibrary *library, const void *code)
{
    CUresult rc = drv_enter(library && code);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_library *l = calloc(1, sizeof *l);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = module_build(code, &l->mod);
    if (rc != CUDA_SUCCESS) {
        free(l);
        return rc;
    }
    /* an array of CUkernel handles, which are pointers */
    l->kernels = calloc(l->mod.nfuncs ? l->mod.nfuncs : 1,
                        sizeof *l->kernels); // NOLINT(bugprone-sizeof-expression)
    l->handle = drv_handle_new(H_LIBRARY, l);
    if (!l->kernels || !l->handle) {
        module_release(&l->mod);
        free(l->kernels);
        free(l);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < l->mod.nfuncs; i++)
        l->kernels[i] = drv_handle_new(H_KERNEL, &l->mod.funcs[i]);
    *library = l->handle;
    return CUDA_SUCCESS;
}

API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                               void **jitOptionsValues, unsigned int numJitOptions,
                               CUlibraryOption *libraryOptions, void **libraryOptionValues,
                               unsigned int numLibraryOptions)
{
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
    (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
    return library_load(library, code);
}

API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
                                   CUjit_option *jitOptions, void **jitOptionsValues,
                                   unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                   void **libraryOptionValues, unsigned int numLibraryOptions)
{
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
    (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
    CUresult rc = drv_enter(library && fileName);
    if (rc != CUDA_SUCCESS)
        return rc;
    char *text;
    rc = drv_read_file(fileName, &text);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = library_load(library, text);
    free(text);
    return rc;
}

API CUresult cuLibraryUnload(CUlibrary library)
{
    CUresult rc;
    struct drv_library *l = drv_enter_handle(1, H_LIBRARY, library, &rc);
    if (!l)
        return rc;
    if (drv.primary)
        drv_ctx_sync(drv.primary);
    drv_handle_free(H_LIBRARY, library);
    for (size_t i = 0; i < l->mod.nfuncs; i++)
        drv_handle_free(H_KERNEL, l->kernels[i]);
    module_release(&l->mod);
    free(l->kernels);
    free(l);
    return CUDA_SUCCESS;
}

API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    CUresult rc;
    struct drv_library *l = drv_enter_handle(pKernel && name, H_LIBRARY, library, &rc);
    if (!l)
        return rc;
    for (size_t i = 0; i < l->mod.nfuncs; i++) {
        if (strcmp(l->mod.funcs[i].decl.name, name) == 0) {
            *pKernel = l->kernels[i];
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(pFunc != NULL, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_func *f = drv_handle_get(H_KERNEL, kernel);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = f->handle;
    return CUDA_SUCCESS;
}

API CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    CUresult rc;
    struct drv_func *f = drv_enter_handle(name != NULL, H_KERNEL, hfunc, &rc);
    if (!f)
        return rc;
    *name = f->decl.name;
    return CUDA_SUCCESS;
}

/* ---- functions -------------------------------------------------------------------------- */

struct drv_func *drv_func_lookup(CUfunction f)
{
    struct drv_func *fn = drv_handle_get(H_FUNC, f);
    if (!fn) /* a CUkernel may be passed where a CUfunction is expected */
        fn = drv_handle_get(H_KERNEL, f);
    return fn;
}

API CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    CUresult rc = drv_enter(name != NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_func *f = drv_func_lookup(hfunc);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = f->decl.name;
    return CUDA_SUCCESS;
}

API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    CUresult rc = drv_enter(pi != NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_func *f = drv_func_lookup(hfunc);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    const struct sim_dev_params *p = &drv.g->p;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: {
        uint32_t by_regs = f->decl.regs ? p->regs_per_sm / f->decl.regs / 32 * 32 : 1024;
        uint32_t v = f->decl.maxthreads;
        *pi = (int)(by_regs < v ? by_regs : v);
        return CUDA_SUCCESS;
    }
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
        *pi = (int)f->decl.smem;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
        *pi = 0;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
        *pi = (int)f->decl.regs;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *pi = p->cc_major * 10 + p->cc_minor;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        *pi = f->max_dyn_smem;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        *pi = -1;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_func *f = drv_func_lookup(hfunc);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || (uint32_t)value + f->decl.smem > drv.g->p.smem_per_block)
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dyn_smem = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        return value >= -1 && value <= 100 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static void __attribute__((constructor)) ctx_gone_register(void)
{
    drv_ctx_on_gone(1, drv_module_ctx_gone);
}
