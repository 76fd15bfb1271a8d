/* The real driver: where the shim keeps the driver's own entry points (shim_real_*), finding
 * the driver (lazily: a process that never touches CUDA never loads it) and resolving them
 * once, and the C library's real dlsym, which the shim's own dlsym (shim/interpose.c) must
 * never be. Every other file of the shim calls the driver through these, downward. */
#include "shim/shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#define SHIM_DEFINE_REAL(sym, ...) __typeof__(&sym) shim_real_##sym;
SHIM_INTERCEPTED(SHIM_DEFINE_REAL)
SHIM_HELPERS(SHIM_DEFINE_REAL)
#undef SHIM_DEFINE_REAL

/* Where each intercepted symbol's real function is kept (shim_table in shim/interpose.c names
 * the same slots beside their wrappers). */
#define SHIM_SLOT(sym, ...) {#sym, (void **)&shim_real_##sym},
static const struct {
    const char *symbol;
    void **real;
} slots[] = {SHIM_INTERCEPTED(SHIM_SLOT)};
#undef SHIM_SLOT

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym_fn;
static void *driver_handle;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

SHIM_UNSANITIZED static void find_real_dlsym(void)
{
    /* dlvsym, not dlsym: our own dlsym must never be the one that finds dlsym */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.0", NULL};
    for (int i = 0; versions[i] && !real_dlsym_fn; i++)
        real_dlsym_fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
}

void shim_real_start(void)
{
    find_real_dlsym();
}

void *shim_real_dlsym(void *handle, const char *name)
{
    if (unlikely(!real_dlsym_fn))
        find_real_dlsym();
    return real_dlsym_fn ? real_dlsym_fn(handle, name) : NULL;
}

#ifdef SHIM_DLSYM_JUMP
/* What the dlsym entry point (shim/interpose.c) jumps to for every other name. */
SHIM_UNSANITIZED __attribute__((visibility("hidden"), used)) void *shim_dlsym_libc(void)
{
    if (unlikely(!real_dlsym_fn))
        find_real_dlsym();
    return (void *)real_dlsym_fn;
}
#endif

/* Remembers the library an application looked a driver symbol up in. */
void shim_real_note_handle(void *handle)
{
    if (handle == RTLD_DEFAULT || handle == RTLD_NEXT)
        return;
    void *expected = NULL;
    __atomic_compare_exchange_n(&driver_handle, &expected, handle, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
}

/* Whether FN is in the object that holds OURS: one of this library's wrappers. */
static int same_object(const void *fn, const Dl_info *ours)
{
    Dl_info info;
    return fn && dladdr(fn, &info) && info.dli_fbase == ours->dli_fbase;
}

static void do_resolve(void)
{
    void *h = __atomic_load_n(&driver_handle, __ATOMIC_ACQUIRE);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        if (shim_cfg.debug)
            shim_log("no CUDA driver (libcuda.so.1) to forward to: %s", dlerror());
        return;
    }
    driver_handle = h;
    Dl_info ours;
    int know_ours = dladdr((const void *)shim_resolve, &ours) != 0;
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        void *fn = shim_real_dlsym(h, slots[i].symbol);
        /* never ourselves (a symbol found in this library is its wrapper): a symbol the driver
         * lacks must stay missing */
        if (!know_ours || !same_object(fn, &ours))
            __atomic_store_n(slots[i].real, fn, __ATOMIC_RELEASE);
    }
#define SHIM_RESOLVE_HELPER(sym)                                                                   \
    __atomic_store_n((void **)&shim_real_##sym, shim_real_dlsym(h, #sym), __ATOMIC_RELEASE);
    SHIM_HELPERS(SHIM_RESOLVE_HELPER)
#undef SHIM_RESOLVE_HELPER
    struct shim_devtime_driver dt;
#define SHIM_DEVTIME_GIVE(sym) dt.sym = shim_real_##sym;
    SHIM_DEVTIME_FNS(SHIM_DEVTIME_GIVE)
#undef SHIM_DEVTIME_GIVE
    shim_devtime_configure(&dt, shim_cfg.devtime, shim_cfg.debug, shim_log);
}

void shim_resolve(void)
{
    pthread_once(&resolve_once, do_resolve);
}

void shim_missing(const char *symbol)
{
    /* what ld.so would have said had the application called into a driver without it */
    char exe[512] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0)
        exe[n] = '\0';
    fprintf(stderr, "%s: symbol lookup error: %s: undefined symbol: %s\n", exe, exe, symbol);
    _exit(127);
}
