/* libposshim.so set-up: the configuration read once at load, the table of intercepted
 * symbols, finding the real driver (lazily: a process that never touches CUDA never loads
 * it), the dlsym interposer, per-thread rings, and fork handling. */
#include "shim/shim.h"

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct shim_config shim_cfg;
int shim_active;
int shim_cuda_inited;
int shim_sched_allowed;
_Atomic uint32_t shim_sample;
_Atomic int shim_captures;
struct shim_thread *shim_threads;
__thread struct shim_thread *shim_self_tls __attribute__((tls_model("initial-exec")));

#define SHIM_DEFINE_REAL(sym, ...) __typeof__(&sym) shim_real_##sym;
SHIM_INTERCEPTED(SHIM_DEFINE_REAL)
SHIM_HELPERS(SHIM_DEFINE_REAL)
#undef SHIM_DEFINE_REAL

#define SHIM_ROW(sym, base, ver, ptsz)                                                             \
    {#sym, #base, ver, ptsz, (void **)&shim_real_##sym, (void *)sym},
const struct shim_entry shim_table[] = {SHIM_INTERCEPTED(SHIM_ROW)};
#undef SHIM_ROW
const size_t shim_ntable = sizeof shim_table / sizeof shim_table[0];

void shim_log(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "posshim[%d]: %s\n", (int)getpid(), buf);
}

/* ---- configuration ------------------------------------------------------------------------ */

static uint32_t env_u32(const char *name, uint32_t dflt, uint32_t max)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (errno || *end || x > max) {
        shim_log("ignoring %s='%s' (want an integer 0..%u); using %u", name, v, max, dflt);
        return dflt;
    }
    return (uint32_t)x;
}

static void read_config(void)
{
    const char *mode = getenv("POS_MODE");
    shim_cfg.debug = env_u32("POS_DEBUG", 0, 9);
    shim_cfg.mode_requested = -1;
    if (mode && *mode) {
        if (strcmp(mode, "off") == 0)
            shim_cfg.mode_requested = SHIM_MODE_OFF;
        else if (strcmp(mode, "passthrough") == 0)
            shim_cfg.mode_requested = SHIM_MODE_PASSTHROUGH;
        else if (strcmp(mode, "scheduled") == 0)
            shim_cfg.mode_requested = SHIM_MODE_SCHEDULED;
        else
            shim_log("ignoring POS_MODE='%s' (off, passthrough or scheduled)", mode);
    }
    /* Records are kept unless off; posd is asked unless passthrough was asked for. The mode
     * is scheduled while attached to posd, passthrough otherwise. */
    shim_cfg.mode =
        shim_cfg.mode_requested == SHIM_MODE_OFF ? SHIM_MODE_OFF : SHIM_MODE_PASSTHROUGH;
    shim_sched_allowed =
        shim_cfg.mode_requested == -1 || shim_cfg.mode_requested == SHIM_MODE_SCHEDULED;
    const char *trace = getenv("POS_TRACE");
    if (trace && *trace) {
        if (strlen(trace) >= sizeof shim_cfg.trace_path)
            shim_log("POS_TRACE path too long; no trace");
        else
            strcpy(shim_cfg.trace_path, trace);
    }
    /* a trace wants every operator's completion; otherwise sample */
    shim_cfg.sample =
        env_u32("POS_SAMPLE", shim_cfg.trace_path[0] ? 1 : POS_SAMPLE_DEFAULT, 1u << 20);
    shim_cfg.poll_us = env_u32("POS_POLL_US", POS_POLL_US_DEFAULT, 1000000);
    shim_cfg.prompt_poll_us = env_u32("POS_PROMPT_POLL_US", POS_PROMPT_POLL_US_DEFAULT, 1000000);
    shim_cfg.help_when_us = env_u32("POS_HELP_WHEN_US", POS_HELP_WHEN_US_DEFAULT, 1000000);
    /* 0: sampled markers keep the collector's poll times (no timing events) */
    shim_cfg.devtime = (int)env_u32("POS_DEVTIME", 1, 1);
    if (shim_cfg.prompt_poll_us == 0)
        shim_cfg.prompt_poll_us = 1;
    atomic_store(&shim_sample, shim_cfg.sample);
    if (shim_cfg.poll_us == 0)
        shim_cfg.poll_us = 1;
}

/* ---- the real dlsym and the driver ---------------------------------------------------------- */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym_fn;
static void *driver_handle;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

/* Not instrumented (nor is shim_dlsym_libc): a sanitizer's runtime looks its functions up with
 * dlsym while it starts, before it can check anything and before our constructor ran. */
#define SHIM_UNSANITIZED __attribute__((no_sanitize("address", "thread", "undefined")))

SHIM_UNSANITIZED static void find_real_dlsym(void)
{
    /* dlvsym, not dlsym: our own dlsym must never be the one that finds dlsym */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.0", NULL};
    for (int i = 0; versions[i] && !real_dlsym_fn; i++)
        real_dlsym_fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
}

void *shim_real_dlsym(void *handle, const char *name)
{
    if (unlikely(!real_dlsym_fn))
        find_real_dlsym();
    return real_dlsym_fn ? real_dlsym_fn(handle, name) : NULL;
}

/* Remembers the library an application looked a driver symbol up in. */
static void note_driver_handle(void *handle)
{
    if (handle == RTLD_DEFAULT || handle == RTLD_NEXT)
        return;
    void *expected = NULL;
    __atomic_compare_exchange_n(&driver_handle, &expected, handle, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
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
    for (size_t i = 0; i < shim_ntable; i++) {
        void *fn = shim_real_dlsym(h, shim_table[i].symbol);
        /* never ourselves: a symbol the driver lacks must stay missing */
        if (fn != shim_table[i].wrapper)
            __atomic_store_n(shim_table[i].real, fn, __ATOMIC_RELEASE);
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
    note_driver_handle(handle);
    shim_resolve();
    return e->wrapper;
}

/* dlsym, interposed. A name that is not a driver function's is none of the shim's business:
 * the exported entry point jumps straight into the C library's dlsym, which then sees its
 * caller's own return address, and RTLD_NEXT (an interposer or a sanitizer runtime loaded
 * after the shim) and RTLD_DEFAULT (from a library with a scope of its own) mean what they
 * mean without the shim. Only "cu..." and "nv..." (NVML's memory figures) names reach
 * shim_dlsym, by a jump too: its return address is the caller's. Elsewhere dlsym is C, and
 * RTLD_NEXT goes through next_after. */
#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(SHIM_DLSYM_PORTABLE)
#define SHIM_DLSYM_JUMP 1
#endif

#ifdef SHIM_DLSYM_JUMP
__attribute__((visibility("hidden"), used, noinline)) void *shim_dlsym(void *handle,
                                                                        const char *name)
{
    return dlsym_from(handle, name, __builtin_return_address(0));
}

/* What the entry point jumps to for every other name. */
SHIM_UNSANITIZED __attribute__((visibility("hidden"), used)) void *shim_dlsym_libc(void)
{
    if (unlikely(!real_dlsym_fn))
        find_real_dlsym();
    return (void *)real_dlsym_fn;
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

/* ---- per-thread rings ----------------------------------------------------------------------- */

static pthread_key_t thread_key;
_Atomic uint64_t shim_unrecorded;

/* The key's destructor, at thread exit: hands the ring to the collector, which drains what is
 * left and frees it (shim_thread_reclaim). Every record and counter the thread wrote was
 * published before this release store. Another library's thread-exit destructor may still
 * launch after this one ran: with the TLS pointer cleared, that launch attaches afresh (and
 * setting the key again brings this destructor back for the new ring). */
static void thread_exit(void *arg)
{
    struct shim_thread *t = arg;
    shim_self_tls = NULL;
    atomic_store_explicit(&t->state, 2, memory_order_release);
}

struct shim_thread *shim_thread_attach(void)
{
    if (!shim_threads)
        return NULL;
    for (int i = 0; i < SHIM_MAX_THREADS; i++) {
        struct shim_thread *t = &shim_threads[i];
        int expected = 0;
        if (atomic_load_explicit(&t->state, memory_order_relaxed) != 0 ||
            !atomic_compare_exchange_strong(&t->state, &expected, 1))
            continue;
        t->tid = (uint32_t)gettid();
        t->until_marker = shim_cfg.sample;
        shim_self_tls = t;
        /* without the key the ring is never handed back: it stays this thread's, still drained */
        if (pthread_setspecific(thread_key, t) != 0 && shim_cfg.debug)
            shim_log("thread %u: its ring will not be reused after it exits", t->tid);
        /* a context to register completion markers in, as early as possible */
        uint64_t ctx = shim_current_ctx();
        if (ctx) {
            uint64_t none = 0;
            atomic_compare_exchange_strong(&shim_first_ctx, &none, ctx);
        }
        shim_collector_kick();
        return t;
    }
    return NULL;
}

/* Gives the pages of T's record and sync slots back to the kernel; they read as zeros when
 * next touched. Only pages wholly inside them: a page shared with a neighbouring slot may be
 * being written by its thread, and the header (state above all) must never change under an
 * attaching thread's compare-exchange: it is reset by hand. Cheap: one call per exited
 * thread, off the launch path, like the C library's release of a dead thread's stack. */
static void release_pages(struct shim_thread *t)
{
    long psz = sysconf(_SC_PAGESIZE);
    if (psz <= 0)
        return;
    uintptr_t page = (uintptr_t)psz;
    uintptr_t lo = ((uintptr_t)t->ring + page - 1) & ~(page - 1);
    uintptr_t hi = (uintptr_t)(t + 1) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED); /* failing only keeps the memory */
}

void shim_thread_reclaim(struct shim_thread *t)
{
    release_pages(t);
    /* field by field, not memset: attaching threads read state concurrently. The record and
     * sync slots need no clearing: each is written whole before it is published. */
    t->tid = 0;
    t->until_marker = 0;
    atomic_store_explicit(&t->using, NULL, memory_order_relaxed);
    atomic_store_explicit(&t->head, 0, memory_order_relaxed);
    atomic_store_explicit(&t->tail, 0, memory_order_relaxed);
    atomic_store_explicit(&t->sync_head, 0, memory_order_relaxed);
    atomic_store_explicit(&t->sync_tail, 0, memory_order_relaxed);
    _Atomic uint64_t *counters[] = {&t->launches, &t->captured,        &t->failed, &t->dropped,
                                    &t->markers,  &t->marker_failures, &t->syncs,  &t->sync_ns};
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        atomic_store_explicit(counters[i], 0, memory_order_relaxed);
    /* the reset is visible to whoever claims the slot next (its compare-exchange acquires) */
    atomic_store_explicit(&t->state, 0, memory_order_release);
}

/* ---- load, fork, exit ----------------------------------------------------------------------- */

/* A child forked before CUDA was initialised here is a process of its own (workers of Python's
 * multiprocessing with the fork start method): none of the parent's other threads exists in
 * it, so every ring is free again, and nothing was started yet (collector, trace and posd
 * session come with a successful cuInit), so its own cuInit starts them as in any process. */
static void fresh_child(void)
{
    shim_self_tls = NULL;
    shim_ctx_known = 0;
    if (!shim_active)
        return;
    pthread_setspecific(thread_key, NULL);
    for (int i = 0; i < SHIM_MAX_THREADS; i++)
        if (atomic_load_explicit(&shim_threads[i].state, memory_order_relaxed) != 0)
            shim_thread_reclaim(&shim_threads[i]);
    atomic_store(&shim_unrecorded, 0);
    shim_collector_forked();
    shim_devtime_forked();
    shim_session_fresh_child();
}

static void fork_child(void)
{
    if (!shim_cuda_inited) {
        fresh_child();
        return;
    }
    /* A child of a process that initialised CUDA keeps nothing of the parent's: no
     * collector, no rings, no trace. Its CUDA calls, if any, go straight to the driver, which
     * refuses them (CUDA forbids using the parent's context in a child). */
    shim_active = 0;
    shim_self_tls = NULL;
    shim_ctx_known = 0;
    shim_session_forked();
    shim_cfg.trace_path[0] = '\0';
}

__attribute__((constructor)) static void shim_load(void)
{
    read_config();
    find_real_dlsym();
    if (shim_cfg.mode == SHIM_MODE_OFF)
        return;
    /* rings are address space only until a thread launches */
    void *p = mmap(NULL, SHIM_MAX_THREADS * sizeof(struct shim_thread), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        shim_log("cannot map record rings: %s; observing nothing", strerror(errno));
        return;
    }
    shim_threads = p;
    pthread_key_create(&thread_key, thread_exit);
    pthread_atfork(NULL, NULL, fork_child);
    shim_active = 1;
}

__attribute__((destructor)) static void shim_unload(void)
{
    if (shim_active)
        shim_collector_stop();
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
