/* The shim's one symbol table against its three ways in: for every intercepted symbol, the
 * exported wrapper, what the interposed dlsym returns (from the driver's handle and from
 * RTLD_DEFAULT) and what cuGetProcAddress returns for its base name, version and stream flag
 * must all be the same wrapper, and the real function behind it the driver's own symbol; and
 * every form of an intercepted function the driver exports is one of the table's rows; and
 * docs/memory.md's table of entry points names every allocation- and free-like function of
 * cuda.h, as intercepted exactly when the shim's table has it. Re-executes itself under LD_PRELOAD=build/libposshim.so with the simulated driver. */
#include <dlfcn.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "tests/cunit_main.h"
#include "tests/integration/util.h"

typedef size_t (*count_fn)(void);
typedef int (*entry_fn)(size_t, const char **, const char **, int *, int *, void **, void **);
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);

static count_fn table_count;
static entry_fn table_entry;
static void *driver;

static int suite_init(void)
{
    table_count = (count_fn)dlsym(RTLD_DEFAULT, "pos_shim_table_count");
    table_entry = (entry_fn)dlsym(RTLD_DEFAULT, "pos_shim_table_entry");
    driver = dlopen("libcuda.so.1", RTLD_NOW);
    return table_count && table_entry && driver ? 0 : -1;
}

static void test_table_agrees_everywhere(void)
{
    gpa_fn gpa = (gpa_fn)dlsym(driver, "cuGetProcAddress_v2");
    CU_ASSERT_PTR_NOT_NULL_FATAL(gpa);
    size_t n = table_count();
    CU_ASSERT(n >= 38);
    int missing_in_driver = 0;
    for (size_t i = 0; i < n; i++) {
        const char *sym, *base;
        int version, ptsz;
        void *real, *wrapper;
        CU_ASSERT_FATAL(table_entry(i, &sym, &base, &version, &ptsz, &real, &wrapper) == 0);
        /* the exported wrapper is the table's */
        CU_ASSERT_PTR_EQUAL(dlsym(RTLD_DEFAULT, sym), real ? wrapper : NULL);
        if (!real) {
            /* a driver that lacks it: nothing resolves */
            missing_in_driver++;
            CU_ASSERT_PTR_NULL(dlsym(driver, sym));
            continue;
        }
        /* the real function is the driver's own symbol, not ours */
        Dl_info info;
        CU_ASSERT_FATAL(dladdr(real, &info) != 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(info.dli_fname, "libcuda.so"));
        CU_ASSERT_STRING_EQUAL(info.dli_sname, sym);
        /* dlsym on the driver's handle gives the wrapper */
        CU_ASSERT_PTR_EQUAL(dlsym(driver, sym), wrapper);
        /* cuGetProcAddress for (base, version, stream flag) gives the wrapper */
        void *fn = NULL;
        cuuint64_t flags = ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
        CU_ASSERT_EQUAL(gpa(base, &fn, version, flags, NULL), CUDA_SUCCESS);
        CU_ASSERT_PTR_EQUAL(fn, wrapper);
        if (fn != wrapper)
            fprintf(stderr, "cuGetProcAddress(%s, %d, %s) != wrapper of %s\n", base, version,
                    ptsz ? "ptsz" : "legacy", sym);
    }
    /* the simulated driver exports every entry point of cuda.h */
    CU_ASSERT_EQUAL(missing_in_driver, 0);
}

typedef size_t (*sim_count_fn)(void);
typedef int (*sim_entry_fn)(size_t, const char **, int *, void **, void **);

/* Whether the shim's table has a row for SYMBOL. */
static int shim_has_row(const char *symbol)
{
    for (size_t i = 0; i < table_count(); i++) {
        const char *sym, *base;
        int version, ptsz;
        void *real, *wrapper;
        if (table_entry(i, &sym, &base, &version, &ptsz, &real, &wrapper) == 0 &&
            strcmp(sym, symbol) == 0)
            return 1;
    }
    return 0;
}

/* Whether the shim intercepts some form of BASE. */
static int shim_has_base(const char *name)
{
    for (size_t i = 0; i < table_count(); i++) {
        const char *sym, *base;
        int version, ptsz;
        void *real, *wrapper;
        if (table_entry(i, &sym, &base, &version, &ptsz, &real, &wrapper) == 0 &&
            strcmp(base, name) == 0)
            return 1;
    }
    return 0;
}

static void check_intercepted(void *fn, const char *base, int version)
{
    Dl_info info;
    if (!fn || !dladdr(fn, &info) || !info.dli_sname)
        return;
    if (!shim_has_row(info.dli_sname)) {
        fprintf(stderr, "the shim intercepts %s but not its form %s (CUDA %d)\n", base,
                info.dli_sname, version);
        CU_FAIL("a form of an intercepted function bypasses the shim");
    }
}

/* Against the driver's exports (every ABI of every entry point of cuda.h, as its
 * cuGetProcAddress table lists them): for each function the shim intercepts, every versioned
 * and per-thread form the driver has is in the shim's table, so no ABI a program or runtime
 * asks for bypasses it. */
static void test_every_form_of_an_intercepted_function_is_intercepted(void)
{
    sim_count_fn count = (sim_count_fn)dlsym(driver, "pos_sim_procaddr_count");
    sim_entry_fn entry = (sim_entry_fn)dlsym(driver, "pos_sim_procaddr_entry");
    CU_ASSERT_FATAL(count && entry);
    int forms = 0;
    for (size_t i = 0; i < count(); i++) {
        const char *name;
        int version;
        void *fn, *fn_ptsz;
        CU_ASSERT_FATAL(entry(i, &name, &version, &fn, &fn_ptsz) == 0);
        if (!shim_has_base(name))
            continue;
        forms++;
        check_intercepted(fn, name, version);
        check_intercepted(fn_ptsz, name, version);
    }
    CU_ASSERT(forms >= 40);
}

static void test_uninteresting_symbols_pass_through(void)
{
    gpa_fn gpa = (gpa_fn)dlsym(driver, "cuGetProcAddress_v2");
    void *fn = NULL;
    CU_ASSERT_EQUAL(gpa("cuMemcpyHtoD", &fn, 12000, 0, NULL), CUDA_SUCCESS);
    CU_ASSERT_PTR_EQUAL(fn, dlsym(driver, "cuMemcpyHtoD_v2"));
    Dl_info info;
    CU_ASSERT(dladdr(fn, &info) && strstr(info.dli_fname, "libcuda.so"));
    /* errors come back unchanged */
    CUdriverProcAddressQueryResult st;
    CU_ASSERT_EQUAL(gpa("cuNoSuchCall", &fn, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CU_ASSERT_EQUAL(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CU_ASSERT_PTR_NULL(dlsym(driver, "cuNoSuchCall"));
    CU_ASSERT_PTR_NOT_NULL(dlsym(RTLD_DEFAULT, "malloc"));
}

/* What is allocation- or free-like in cuda.h: every base name that matches one of these must be
 * a row of docs/memory.md's table. */
static const char *const memory_like[] = {
    "cuMem*Alloc*",       "cuMemCreate",         "cuMemFree*",          "cuArray*Create",
    "cuArray*Destroy",    "cuMipmappedArray*",   "cuIpc*MemHandle",     "cuMemPool*",
    "cuMemHost*",         "cuMemRelease",        "cuMemMap",            "cuMemUnmap",
    "cuMemMapArrayAsync", "cuMemGetInfo",        "cuMemRetainAllocationHandle",
    "cuMem*ShareableHandle", "cuMemAddress*",    "cuCtxCreate",         "cuCtxDestroy",
    "cuDevicePrimaryCtx*", "cuModuleLoad*",      "cuModuleUnload",      "cuLibraryLoad*",
    "cuLibraryUnload",    "cu*MemPool",          "cuGraphAddMemAllocNode",
    "cuGraphAddMemFreeNode", "cuDeviceGraphMemTrim",
};

static int is_memory_like(const char *base)
{
    for (size_t i = 0; i < sizeof memory_like / sizeof memory_like[0]; i++)
        if (fnmatch(memory_like[i], base, 0) == 0)
            return 1;
    return 0;
}

#define MAX_ROWS 256

struct doc_row {
    char name[96];
    int intercepted;
};

/* The rows of docs/memory.md's table: "| `NAME` | intercepted|passes | ...". */
static int read_doc_rows(struct doc_row *rows, int cap)
{
    FILE *f = fopen("docs/memory.md", "r");
    if (!f)
        return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        char name[96], shim[32];
        if (sscanf(line, "| `%95[A-Za-z0-9_]` | %31[a-z] |", name, shim) != 2)
            continue;
        snprintf(rows[n].name, sizeof rows[n].name, "%s", name);
        rows[n].intercepted = strcmp(shim, "intercepted") == 0;
        if (!rows[n].intercepted && strcmp(shim, "passes") != 0) {
            fprintf(stderr, "docs/memory.md: %s: '%s' is neither intercepted nor passes\n",
                    name, shim);
            CU_FAIL("a row of docs/memory.md says neither intercepted nor passes");
        }
        n++;
    }
    fclose(f);
    return n;
}

static const struct doc_row *doc_row_of(const struct doc_row *rows, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0)
            return &rows[i];
    return NULL;
}

/* docs/memory.md against cuda.h (the driver's cuGetProcAddress table, generated from it) and
 * the shim's symbol table: every allocation- or free-like base of cuda.h is a row, every row
 * is a base of cuda.h, and a row says "intercepted" exactly when the shim intercepts it. */
static void test_memory_table_accounts_every_path(void)
{
    static struct doc_row rows[MAX_ROWS];
    int nrows = read_doc_rows(rows, MAX_ROWS);
    CU_ASSERT_FATAL(nrows > 0);
    sim_count_fn count = (sim_count_fn)dlsym(driver, "pos_sim_procaddr_count");
    sim_entry_fn entry = (sim_entry_fn)dlsym(driver, "pos_sim_procaddr_entry");
    CU_ASSERT_FATAL(count && entry);
    int matched = 0;
    for (size_t i = 0; i < count(); i++) {
        const char *name;
        int version;
        void *fn, *fn_ptsz;
        CU_ASSERT_FATAL(entry(i, &name, &version, &fn, &fn_ptsz) == 0);
        if (!is_memory_like(name))
            continue;
        matched++;
        const struct doc_row *r = doc_row_of(rows, nrows, name);
        if (!r) {
            fprintf(stderr, "docs/memory.md has no row for %s\n", name);
            CU_FAIL("an allocation or free path of cuda.h is not in docs/memory.md");
        } else if (r->intercepted != shim_has_base(name)) {
            fprintf(stderr, "docs/memory.md says %s %s, the shim's table %s it\n", name,
                    r->intercepted ? "is intercepted" : "passes",
                    shim_has_base(name) ? "intercepts" : "does not intercept");
            CU_FAIL("docs/memory.md and shim/symbols.h disagree");
        }
    }
    CU_ASSERT(matched >= 70);
    for (int i = 0; i < nrows; i++) {
        int known = 0;
        for (size_t k = 0; k < count() && !known; k++) {
            const char *name;
            int version;
            void *fn, *fn_ptsz;
            known = entry(k, &name, &version, &fn, &fn_ptsz) == 0 && strcmp(name, rows[i].name) == 0;
        }
        if (!known) {
            fprintf(stderr, "docs/memory.md names %s, which cuda.h does not declare\n",
                    rows[i].name);
            CU_FAIL("docs/memory.md has a row for no function of cuda.h");
        }
    }
}

void pos_test_register(void);

/* Runs under the shim: re-executes itself with LD_PRELOAD when started without it. */
__attribute__((constructor)) static void reexec_under_shim(void)
{
    if (getenv("POS_TEST_UNDER_SHIM"))
        return;
    setenv("POS_TEST_UNDER_SHIM", "1", 1);
    setenv("LD_PRELOAD", util_shim_preload(), 1);
    setenv("LD_LIBRARY_PATH", "build/sim", 1);
    char self[512];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return;
    self[len] = '\0';
    execl(self, self, (char *)NULL);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("shim_table", suite_init, NULL);
    POS_ADD_TEST(s, test_table_agrees_everywhere);
    POS_ADD_TEST(s, test_uninteresting_symbols_pass_through);
    POS_ADD_TEST(s, test_every_form_of_an_intercepted_function_is_intercepted);
    POS_ADD_TEST(s, test_memory_table_accounts_every_path);
}
