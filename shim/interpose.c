/* Interposition: how an application that looks the driver up finds the shim's wrappers. The
 * table of intercepted symbols (shim_table, from shim/symbols.h, beside their real functions),
 * the dlsym interposer, cuGetProcAddress (hands out our wrappers for what the driver
 * resolves), and the table's introspection for tests and tools. Above every wrapper: it names
 * them all. */
#include "shim/shim.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

#define SHIM_ROW(sym, base, ver, ptsz)                                                             \
    {#sym, #base, ver, ptsz, (void **)&shim_real_##sym, (void *)sym},
const struct shim_entry shim_table[] = {SHIM_INTERCEPTED(SHIM_ROW)};
#undef SHIM_ROW
const size_t shim_ntable = sizeof shim_table / sizeof shim_table[0];

static const struct shim_entry *entry_by_symbol(const char *name)
{
    for (size_t i = 0; i < shim_ntable; i++)
        if (strcmp(shim_table[i].symbol, name) == 0)
            return &shim_table[i];
    return NULL;
}

/* RTLD_NEXT as CALLER means it: the first definition of NAME in an object loaded after the
 * caller's, in load order. Each object is asked through a handle of its own (dlopen of what is
 * loaded already; its link map is no handle before that). Only for names the shim intercepts,
 * and on machines without the jump below; dlerror says what the last object said. */
static void *next_after(const void *caller, const char *name)
{
    Dl_info info;
    struct link_map *self = NULL, *in = NULL;
    if (!dladdr1(caller, &info, (void **)&self, RTLD_DL_LINKMAP) || !self)
        return NULL;
    for (struct link_map *l = self->l_next; l; l = l->l_next) {
        void *h = l->l_name && l->l_name[0] ? dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
        if (!h)
            continue; /* the vdso */
        void *p = shim_real_dlsym(h, name);
        dlclose(h);
        if (p && dladdr1(p, &info, (void **)&in, RTLD_DL_LINKMAP) && in == l)
            return p;
    }
    return NULL;
}

/* dlsym for a driver function ("cu..."), asked by code at CALLER: a symbol we intercept
 * resolves to our wrapper, but only where the caller would have found the driver's own;
 * everything else is the real answer. */
static void *dlsym_from(void *handle, const char *name, const void *caller)
{
    void *found = handle == RTLD_NEXT ? next_after(caller, name) : shim_real_dlsym(handle, name);
    if (found && name && name[0] == 'n' && name[1] == 'v')
        return shim_nvml_dlsym(name, found);
    if (!found || !name || name[0] != 'c' || name[1] != 'u')
        return found;
    const struct shim_entry *e = entry_by_symbol(name);
    if (!e)
        return found;
    if (found == e->wrapper) {
        /* the search reached this library first (RTLD_DEFAULT and the like): answer what it
         * would have found without us, which is the driver's symbol if the driver is loaded */
        void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        void *real = drv ? shim_real_dlsym(drv, name) : NULL;
        if (drv)
            dlclose(drv);
        return real && real != e->wrapper ? e->wrapper : NULL;
    }
    shim_real_note_handle(handle);
    shim_resolve();
    return e->wrapper;
}

/* dlsym, interposed. A name that is not a driver function's is none of the shim's business:
 * the exported entry point jumps straight into the C library's dlsym, which then sees its
 * caller's own return address, and RTLD_NEXT (an interposer or a sanitizer runtime loaded
 * after the shim) and RTLD_DEFAULT (from a library with a scope of its own) mean what they
 * mean without the shim. Only "cu..." and "nv..." (NVML's memory figures) names reach
 * shim_dlsym, by a jump too: its return address is the caller's; the C library's dlsym for the
 * rest comes from shim_dlsym_libc (shim/real.c). Elsewhere (no SHIM_DLSYM_JUMP, shim.h) dlsym
 * is C, and RTLD_NEXT goes through next_after. */
#ifdef SHIM_DLSYM_JUMP
__attribute__((visibility("hidden"), used, noinline)) void *shim_dlsym(void *handle,
                                                                        const char *name)
{
    return dlsym_from(handle, name, __builtin_return_address(0));
}
#endif

#if defined(SHIM_DLSYM_JUMP) && defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        ".p2align 4\n"
        "dlsym:\n"
        ".cfi_startproc\n"
        "    endbr64\n"
        "    testq %rsi, %rsi\n"
        "    je 1f\n"
        "    cmpb $0x63, (%rsi)\n" /* 'c' */
        "    jne 2f\n"
        "    cmpb $0x75, 1(%rsi)\n" /* 'u' */
        "    je shim_dlsym\n"
        "    jmp 1f\n"
        "2:  cmpb $0x6e, (%rsi)\n" /* 'n' */
        "    jne 1f\n"
        "    cmpb $0x76, 1(%rsi)\n" /* 'v' */
        "    je shim_dlsym\n"
        "1:  pushq %rdi\n"
        ".cfi_adjust_cfa_offset 8\n"
        "    pushq %rsi\n"
        ".cfi_adjust_cfa_offset 8\n"
        "    subq $8, %rsp\n"
        ".cfi_adjust_cfa_offset 8\n"
        "    call shim_dlsym_libc\n"
        "    addq $8, %rsp\n"
        ".cfi_adjust_cfa_offset -8\n"
        "    popq %rsi\n"
        ".cfi_adjust_cfa_offset -8\n"
        "    popq %rdi\n"
        ".cfi_adjust_cfa_offset -8\n"
        "    testq %rax, %rax\n"
        "    je shim_dlsym\n"
        "    jmp *%rax\n"
        ".cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#elif defined(SHIM_DLSYM_JUMP) && defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        ".p2align 2\n"
        "dlsym:\n"
        ".cfi_startproc\n"
        "    hint #34\n" /* bti c */
        "    cbz x1, 1f\n"
        "    ldrb w16, [x1]\n"
        "    ldrb w17, [x1, #1]\n"
        "    cmp w16, #0x63\n" /* "cu" */
        "    ccmp w17, #0x75, #0, eq\n"
        "    b.eq shim_dlsym\n"
        "    cmp w16, #0x6e\n" /* "nv" */
        "    ccmp w17, #0x76, #0, eq\n"
        "    b.eq shim_dlsym\n"
        "1:  stp x29, x30, [sp, #-32]!\n"
        ".cfi_def_cfa_offset 32\n"
        ".cfi_offset 29, -32\n"
        ".cfi_offset 30, -24\n"
        "    mov x29, sp\n"
        "    stp x0, x1, [sp, #16]\n"
        "    bl shim_dlsym_libc\n"
        "    mov x16, x0\n"
        "    ldp x0, x1, [sp, #16]\n"
        "    ldp x29, x30, [sp], #32\n"
        ".cfi_def_cfa_offset 0\n"
        ".cfi_restore 29\n"
        ".cfi_restore 30\n"
        "    cbz x16, 2f\n"
        "    br x16\n"
        "2:  b shim_dlsym\n"
        ".cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#else
SHIM_API void *dlsym(void *handle, const char *name)
{
    const void *caller = __builtin_return_address(0);
    if ((name[0] == 'c' && name[1] == 'u') || (name[0] == 'n' && name[1] == 'v'))
        return dlsym_from(handle, name, caller);
    return handle == RTLD_NEXT ? next_after(caller, name) : shim_real_dlsym(handle, name);
}
#endif

/* ---- cuGetProcAddress ---------------------------------------------------------------------- */

/* Swaps the driver's function for our wrapper when the driver handed out one we intercept. */
static void substitute(const char *symbol, void **pfn)
{
    if (!pfn || !*pfn)
        return;
    for (size_t i = 0; i < shim_ntable; i++) {
        if (shim_table[i].wrapper == *pfn)
            return;
        if (*shim_table[i].real == *pfn) {
            *pfn = shim_table[i].wrapper;
            return;
        }
    }
    if (shim_cfg.debug) {
        for (size_t i = 0; i < shim_ntable; i++)
            if (symbol && strcmp(shim_table[i].base, symbol) == 0) {
                shim_log("cuGetProcAddress(%s) gave a function the shim does not know: "
                         "not intercepted",
                         symbol);
                return;
            }
    }
}

SHIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    CUresult rc = SHIM_REAL(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, status);
    if (rc == CUDA_SUCCESS)
        substitute(symbol, pfn);
    return rc;
}

SHIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                   cuuint64_t flags)
{
    CUresult rc = SHIM_REAL(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS)
        substitute(symbol, pfn);
    return rc;
}

/* ---- introspection, for tests and tools ------------------------------------------------------ */

SHIM_API size_t pos_shim_table_count(void)
{
    return shim_ntable;
}

SHIM_API int pos_shim_table_entry(size_t i, const char **symbol, const char **base, int *version,
                                  int *ptsz, void **real, void **wrapper)
{
    if (i >= shim_ntable)
        return -1;
    shim_resolve();
    *symbol = shim_table[i].symbol;
    *base = shim_table[i].base;
    *version = shim_table[i].version;
    *ptsz = shim_table[i].ptsz;
    *real = *shim_table[i].real;
    *wrapper = shim_table[i].wrapper;
    return 0;
}
