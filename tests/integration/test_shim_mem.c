/* Integration tests of the shim's memory ledger (docs/memory.md): posd's mem_limit reaches the
 * shim, every allocation path is refused over it with CUDA_ERROR_OUT_OF_MEMORY and allowed up to
 * it exactly, threads racing to it never pass it, cuMemGetInfo and NVML show the limit's view,
 * host memory and other locations pass untouched, unknown frees and odd sizes are the driver's to
 * answer, the account reaches posd and survives its restart, and the limit goes into
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT. Real processes: posd, the shim and tests/shim/prog_mem.c on
 * the simulated driver (paths it does not model yet answer CUDA_ERROR_NOT_SUPPORTED, and only
 * their refusal over the limit is checked). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pos/client_shm.h"
#include "sim/device_presets.h"
#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX  65536
#define ROOM     (64ull << 20) /* what the limit leaves for allocations beside the context */
#define PRESET   "xavier-nx"
#define OOM      2   /* CUDA_ERROR_OUT_OF_MEMORY */
#define NOT_SUPP  801 /* CUDA_ERROR_NOT_SUPPORTED: the simulated driver does not model it yet */

static struct suite suite;
static char out[OUT_MAX];
static unsigned long long ctx_bytes; /* what the preset's context holds on the device */
static unsigned long long limit;     /* the rule's mem_limit: the primary context and ROOM */

/* Starts prog_mem with STEPS (NULL-terminated) as app APP (under the shim unless SHIM is 0),
 * with extra environment EXTRA ("NAME=VALUE" or NULL), its stdout and stderr into PATH. */
static pid_t start_steps(const char *app, int shim, const char *extra, const char *const *steps,
                         const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        if (shim)
            setenv("LD_PRELOAD", util_shim_preload(), 1);
        setenv("POS_APP", app, 1);
        setenv("LD_LIBRARY_PATH", "build/sim:build/tests/fakes/sim", 1);
        unsetenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
        unsetenv("POS_SHIM_MEM_LIMIT");
        if (extra)
            putenv((char *)extra);
        const char *argv[64] = {"build/tests/shim_mem"};
        int n = 1;
        for (; steps[n - 1] && n < 63; n++)
            argv[n] = steps[n - 1];
        argv[n] = NULL;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Waits up to 30 s for PID (killed after), its output from PATH in OUT; its exit status. */
static int wait_steps(pid_t pid, const char *path)
{
    int st = 0;
    for (int i = 0; i < 3000 && waitpid(pid, &st, WNOHANG) != pid; i++)
        usleep(10000);
    if (kill(pid, 0) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    util_read_file(path, out, sizeof out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs prog_mem with STEPS to its end (start_steps); its output in OUT, its exit status. */
static int run_steps(const char *app, int shim, const char *extra, const char *const *steps)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.out", suite.dir, app);
    pid_t pid = start_steps(app, shim, extra, steps, path);
    CU_ASSERT_FATAL(pid >= 0);
    return wait_steps(pid, path);
}

/* The N-th (0-based) output line of step OP in OUT, NULL if there is none. */
static const char *step_line(const char *op, int n)
{
    char pat[64];
    snprintf(pat, sizeof pat, "%s rc=", op);
    const char *p = out;
    for (;;) {
        p = strstr(p, pat);
        if (!p)
            return NULL;
        if (p == out || p[-1] == '\n') {
            if (n-- == 0)
                return p;
        }
        p++;
    }
}

/* FIELD's number ("FIELD=N") in the N-th line of OP; -1 if absent. */
static long long step_field(const char *op, int n, const char *field)
{
    const char *l = step_line(op, n);
    if (!l)
        return -1;
    char pat[32];
    snprintf(pat, sizeof pat, " %s=", field);
    const char *end = strchr(l, '\n');
    const char *f = strstr(l, pat);
    if (!f || (end && f > end)) {
        if (strcmp(field, "rc") == 0)
            return strtoll(l + strlen(op) + 4, NULL, 10);
        return -1;
    }
    return strtoll(f + strlen(pat), NULL, 10);
}

static long long rc_of(const char *op, int n)
{
    return step_field(op, n, "rc");
}

static int suite_init(void)
{
    struct sim_dev_params p;
    if (sim_preset_get(PRESET, &p) != 0 || p.ctx_mem_bytes % 1024)
        return -1;
    ctx_bytes = p.ctx_mem_bytes;
    limit = ctx_bytes + ROOM;
    char conf[256];
    snprintf(conf, sizeof conf, "[rule capped]\nmatch_app = capped\nmem_limit = %lluK\n",
             limit >> 10);
    setenv("POS_SIM_DEVICE", PRESET, 1);
    if (suite_open(&suite, "shim-mem", conf) != 0 || access("build/posd", X_OK) != 0 ||
        access("build/tests/shim_mem", X_OK) != 0)
        return -1;
    if (suite_posd_start(&suite, "fifo") <= 0 || access(suite.sock, F_OK) != 0)
        return -1;
    return 0;
}

static int suite_clean(void)
{
    return suite_close(&suite);
}

/* ---- every path under, at and over the limit ------------------------------------------------ */

struct path {
    const char *name;      /* the prog_mem step */
    const char *half;      /* the step for half the limit */
    const char *one_over;  /* the step for a little more than what is left at the limit */
    const char *too_much;  /* a step larger than the whole limit */
};

/* Half of 64 MiB in each path's own terms (arrays: width x height x depth x channels x size). */
static const struct path paths[] = {
    {"alloc", "alloc:32M", "alloc:1", "alloc:65M"},
    {"pitch", "pitch:4096:8192", "pitch:1:1", "pitch:4096:16641"},
    {"managed", "managed:32M", "managed:1", "managed:65M"},
    {"async", "async:32M", "async:1", "async:65M"},
    {"pool", "pool:32M", "pool:1", "pool:65M"},
    {"vmm", "vmm:32M", "vmm:2M", "vmm:66M"},
    {"array", "array:4096:2048", "array:1:1", "array:4096:4161"},
    {"array3d", "array3d:1024:1024:8", "array3d:1:1:1", "array3d:1024:1024:17"},
    {"mipmap", "mipmap:4096:2048:1", "mipmap:1:1:1", "mipmap:4096:4161:1"},
};

/* Each path, beside the primary context (measured, through NVML: charged to the limit): half
 * the room and half again fit (the second exactly at the limit, and cuMemGetInfo then says 0
 * free), a little more is refused as out of memory, and after the frees all is given back; a
 * request larger than the room is refused without the driver. */
static void test_every_path_under_at_and_over_the_limit(void)
{
    int modelled = 0;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        const struct path *p = &paths[i];
        const char *steps[] = {p->too_much, p->half, p->half, "info", p->one_over, "free",
                               "free",      "info",  NULL};
        CU_ASSERT_EQUAL(run_steps("capped", 1, NULL, steps), 0);
        CU_ASSERT_EQUAL(rc_of(p->name, 0), OOM);
        CU_ASSERT_EQUAL((unsigned long long)step_field(p->name, 0, "used"), ctx_bytes);
        if (rc_of(p->name, 1) == NOT_SUPP)
            continue; /* the simulated driver does not model it yet */
        modelled++;
        if (rc_of(p->name, 1) != 0 || rc_of(p->name, 2) != 0 || rc_of(p->name, 3) != OOM)
            fprintf(stderr, "%s: %s\n", p->name, out);
        CU_ASSERT_EQUAL(rc_of(p->name, 1), 0);
        CU_ASSERT_EQUAL(rc_of(p->name, 2), 0);
        CU_ASSERT_EQUAL((unsigned long long)step_field(p->name, 2, "used"), limit);
        CU_ASSERT_EQUAL(step_field("info", 0, "free"), 0);
        CU_ASSERT_EQUAL(rc_of(p->name, 3), OOM);
        CU_ASSERT_EQUAL(rc_of("free", 1), 0);
        CU_ASSERT_EQUAL((unsigned long long)step_field("free", 1, "used"), ctx_bytes);
        CU_ASSERT_EQUAL((unsigned long long)step_field("info", 1, "free"), ROOM);
    }
    /* the simulated driver models every one of them */
    CU_ASSERT_EQUAL(modelled, (int)(sizeof paths / sizeof paths[0]));
}

/* Threads of one process racing to the limit: together they get exactly the room's worth, and
 * the account never shows more than the limit. */
static void test_racing_threads_never_pass_the_limit(void)
{
    const char *steps[] = {"threads:8:1M", "info", NULL};
    CU_ASSERT_EQUAL(run_steps("capped", 1, NULL, steps), 0);
    CU_ASSERT_EQUAL(step_field("threads", 0, "ok"), 64);
    CU_ASSERT((unsigned long long)step_field("threads", 0, "max") <= limit);
    CU_ASSERT_EQUAL((unsigned long long)step_field("threads", 0, "used"), limit);
    CU_ASSERT_EQUAL(step_field("info", 0, "free"), 0);
}

/* The shim's account equals what the simulated device holds for the process after every path
 * (its primary context included) and after the frees: nothing escapes it, nothing is counted
 * twice. */
static void test_account_equals_the_devices_count(void)
{
    const char *steps[] = {"simused",  "alloc:3M",      "pitch:1000:100",     "managed:1M",
                           "async:1M", "pool:1M",       "vmm:2M",             "map",
                           "array:100:100", "array3d:10:10:10", "mipmap:64:64:3", "module",
                           "simused",  "unmap",         "freeall",            "unload",
                           "simused",  NULL};
    CU_ASSERT_EQUAL(run_steps("capped", 1, NULL, steps), 0);
    for (int i = 0; i < 3; i++) {
        long long mine = step_field("simused", i, "mine"), used = step_field("simused", i, "used");
        if (mine != used)
            fprintf(stderr, "step %d: the device says %lld, the shim %lld\n%s", i, mine, used, out);
        CU_ASSERT_EQUAL(mine, used);
    }
    CU_ASSERT((unsigned long long)step_field("simused", 0, "mine") == ctx_bytes);
    CU_ASSERT(step_field("simused", 1, "mine") > step_field("simused", 0, "mine"));
}

/* ---- what the process is shown ---------------------------------------------------------------- */

/* Under a limit cuMemGetInfo says total = the limit and free = the limit less what the process
 * holds, the same twice with nothing in between; without one, what the driver says. */
static void test_mem_get_info_shows_the_limit(void)
{
    const char *steps[] = {"info", "info", "alloc:16M", "info", "info", NULL};
    CU_ASSERT_EQUAL(run_steps("capped", 1, NULL, steps), 0);
    CU_ASSERT_EQUAL((unsigned long long)step_field("info", 0, "total"), limit);
    CU_ASSERT_EQUAL((unsigned long long)step_field("info", 0, "free"), ROOM);
    CU_ASSERT_EQUAL(step_field("info", 1, "free"), step_field("info", 0, "free"));
    CU_ASSERT_EQUAL((unsigned long long)step_field("info", 2, "free"), ROOM - (16ull << 20));
    CU_ASSERT_EQUAL(step_field("info", 3, "free"), step_field("info", 2, "free"));
    CU_ASSERT_EQUAL((unsigned long long)step_field("info", 3, "total"), limit);

    const char *plain[] = {"info", "alloc:16M", "info", NULL};
    CU_ASSERT_EQUAL(run_steps("uncapped", 0, NULL, plain), 0);
    long long t0 = step_field("info", 0, "total"), f0 = step_field("info", 1, "free");
    CU_ASSERT_EQUAL(run_steps("uncapped", 1, NULL, plain), 0);
    CU_ASSERT(t0 > (long long)limit);
    CU_ASSERT_EQUAL(step_field("info", 0, "total"), t0);
    CU_ASSERT_EQUAL(step_field("info", 1, "free"), f0);
}

/* NVML, loaded by dlopen and dlsym, agrees with cuMemGetInfo under the limit (v1 and v2), and
 * says what it says without one. */
static void test_nvml_agrees_with_mem_get_info(void)
{
    const char *steps[] = {"alloc:16M", "info", "nvml", NULL};
    CU_ASSERT_EQUAL(run_steps("capped", 1, NULL, steps), 0);
    long long f = step_field("info", 0, "free"), t = step_field("info", 0, "total");
    const char *n = strstr(out, "nvml free=");
    CU_ASSERT_PTR_NOT_NULL_FATAL(n);
    unsigned long long nf, nt, nu, f2, t2, u2;
    CU_ASSERT_EQUAL(sscanf(n, "nvml free=%llu total=%llu used=%llu v2free=%llu v2total=%llu "
                              "v2used=%llu",
                           &nf, &nt, &nu, &f2, &t2, &u2),
                    6);
    CU_ASSERT_EQUAL((long long)nf, f);
    CU_ASSERT_EQUAL((long long)nt, t);
    CU_ASSERT_EQUAL(nu, ctx_bytes + (16ull << 20));
    CU_ASSERT_EQUAL((long long)f2, f);
    CU_ASSERT_EQUAL((long long)t2, t);
    CU_ASSERT_EQUAL(u2, ctx_bytes + (16ull << 20));

    CU_ASSERT_EQUAL(run_steps("uncapped", 1, NULL, steps), 0);
    n = strstr(out, "nvml free=");
    CU_ASSERT_PTR_NOT_NULL_FATAL(n);
    CU_ASSERT_EQUAL(sscanf(n, "nvml free=%llu total=%llu used=%llu", &nf, &nt, &nu), 3);
    /* the fake's own figures: the whole device, its total and what every process holds */
    CU_ASSERT_EQUAL((long long)nt, step_field("info", 0, "total"));
    CU_ASSERT(nu >= ctx_bytes + (16ull << 20));
}

/* ---- what passes untouched -------------------------------------------------------------------- */

/* Host memory (cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister) and host locations (a VMM
 * allocation, a pool) are neither counted nor refused, even far over the limit. */
static void test_host_memory_passes_untouched(void)
{
    const char *steps[] = {"hostalloc:100M", "allochost:100M", "hostreg:100M", "vmmhost:100M",
                           "poolhost:100M",  "freeall",        NULL};
    CU_ASSERT_EQUAL(run_steps("capped", 1, NULL, steps), 0);
    const char *ops[] = {"hostalloc", "allochost", "hostreg"};
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(rc_of(ops[i], 0), 0);
        CU_ASSERT_EQUAL((unsigned long long)step_field(ops[i], 0, "used"), ctx_bytes);
    }
    CU_ASSERT_EQUAL(rc_of("vmmhost", 0), 0);
    CU_ASSERT_EQUAL((unsigned long long)step_field("vmmhost", 0, "used"), ctx_bytes);
    CU_ASSERT_PTR_NULL(step_line("poolcreate", 0)); /* the host pool was made */
    CU_ASSERT_EQUAL(rc_of("poolhost", 0), 0);
    CU_ASSERT_EQUAL((unsigned long long)step_field("poolhost", 0, "used"), ctx_bytes);
    CU_ASSERT_EQUAL(rc_of("freeall", 0), 0);
}

/* A free of a pointer the shim never saw, a zero-byte request and one near 2^64 get the
 * driver's own answers (without a limit: the same as without the shim); under the limit the
 * one near 2^64 is out of memory, and nothing is charged. */
static void test_unknown_frees_and_odd_sizes_get_the_drivers_answers(void)
{
    const char *steps[] = {"freebogus", "alloc:0", "alloc:0xffffffffffffffff", NULL};
    CU_ASSERT_EQUAL(run_steps("uncapped", 0, NULL, steps), 0);
    long long bogus = rc_of("freebogus", 0), zero = rc_of("alloc", 0), huge = rc_of("alloc", 1);
    CU_ASSERT_NOT_EQUAL(bogus, 0);
    CU_ASSERT_EQUAL(run_steps("uncapped", 1, NULL, steps), 0);
    CU_ASSERT_EQUAL(rc_of("freebogus", 0), bogus);
    CU_ASSERT_EQUAL(rc_of("alloc", 0), zero);
    CU_ASSERT_EQUAL(rc_of("alloc", 1), huge);
    CU_ASSERT_EQUAL(step_field("alloc", 1, "used"), 0);
    CU_ASSERT_EQUAL(run_steps("capped", 1, NULL, steps), 0);
    CU_ASSERT_EQUAL(rc_of("freebogus", 0), bogus);
    CU_ASSERT_EQUAL(rc_of("alloc", 0), zero);
    CU_ASSERT_EQUAL(rc_of("alloc", 1), OOM);
    CU_ASSERT_EQUAL((unsigned long long)step_field("alloc", 1, "used"), ctx_bytes);
}

/* Refusals are said on stderr at most once a second, however many there are. */
static void test_refusals_are_said_once_a_second(void)
{
    const char *steps[64] = {"alloc:64M"}; /* the room, whole */
    for (int i = 1; i < 40; i++)
        steps[i] = "alloc:1";
    CU_ASSERT_EQUAL(run_steps("capped", 1, NULL, steps), 0);
    CU_ASSERT_EQUAL(rc_of("alloc", 39), OOM);
    CU_ASSERT_EQUAL(util_count(out, "refused (CUDA_ERROR_OUT_OF_MEMORY)"), 1);
}

/* ---- lifetimes ------------------------------------------------------------------------------ */

/* The k-th kind's committed bytes in the N-th "kinds" line. */
static long long kind_bytes(int n, int kind)
{
    char f[8];
    snprintf(f, sizeof f, "k%d", kind);
    return step_field("kinds", n, f);
}

/* A VMM allocation stays charged while it is mapped or referenced: released and still mapped,
 * it is; unmapped too, it is not; retained once more, one release leaves it charged. */
static void test_vmm_charge_lasts_until_released_and_unmapped(void)
{
    const char *steps[] = {"vmm:2M", "map",    "release", "kinds", "unmap", "kinds", "vmm:2M",
                           "map",    "retain", "release", "unmap", "kinds", NULL};
    CU_ASSERT_EQUAL(run_steps("uncapped", 1, NULL, steps), 0);
    CU_ASSERT_EQUAL(rc_of("vmm", 0), 0);
    CU_ASSERT_EQUAL(kind_bytes(0, POS_MEM_VMM), 2ll << 20);
    CU_ASSERT_EQUAL(kind_bytes(1, POS_MEM_VMM), 0);
    CU_ASSERT_EQUAL(step_field("unmap", 0, "used"), 0);
    CU_ASSERT_EQUAL(rc_of("retain", 0), 0);
    CU_ASSERT_EQUAL(kind_bytes(2, POS_MEM_VMM), 2ll << 20);
}

/* Memory imported from another process is shown as IPC but not counted in the importer's use
 * (its exporter holds it), and goes at its close. */
static void test_ipc_import_is_shown_not_counted(void)
{
    char path[256], file[256], env[300];
    snprintf(path, sizeof path, "%s/exporter.out", suite.dir);
    snprintf(file, sizeof file, "%s/ipc.handle", suite.dir);
    snprintf(env, sizeof env, "POS_TEST_IPC_FILE=%s", file);
    unlink(file);
    const char *exp[] = {"alloc:8M", "ipcget", "hold:4000", NULL};
    pid_t pid = start_steps("uncapped", 1, env, exp, path);
    CU_ASSERT_FATAL(pid >= 0);
    for (int i = 0; i < 300 && access(file, F_OK) != 0; i++)
        usleep(10000);
    usleep(100000); /* its handle written whole */
    const char *imp[] = {"ipcopen", "kinds", "free", "kinds", NULL};
    CU_ASSERT_EQUAL(run_steps("capped", 1, env, imp), 0);
    CU_ASSERT_EQUAL(rc_of("ipcopen", 0), 0);
    CU_ASSERT_EQUAL((unsigned long long)step_field("ipcopen", 0, "used"), ctx_bytes);
    CU_ASSERT_EQUAL(kind_bytes(0, POS_MEM_IPC), 8ll << 20);
    CU_ASSERT_EQUAL(rc_of("free", 0), 0);
    CU_ASSERT_EQUAL(kind_bytes(1, POS_MEM_IPC), 0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* A second context and a module are charged what the driver's free memory fell by when they
 * were made (the simulated driver's per-context and per-module overheads), and give it back at
 * their destroy and unload. */
static void test_context_and_module_memory_are_measured(void)
{
    const char *steps[] = {"info",  "ctx",   "kinds", "info",   "ctxdestroy", "kinds",
                           "module", "kinds", "info",  "unload", "kinds",      NULL};
    CU_ASSERT_EQUAL(run_steps("uncapped", 1, NULL, steps), 0);
    long long f0 = step_field("info", 0, "free"), f1 = step_field("info", 1, "free"),
              f2 = step_field("info", 2, "free");
    CU_ASSERT(kind_bytes(0, POS_MEM_CONTEXT) > 0);
    CU_ASSERT_EQUAL(kind_bytes(0, POS_MEM_CONTEXT), f0 - f1);
    CU_ASSERT_EQUAL(kind_bytes(1, POS_MEM_CONTEXT), 0);
    CU_ASSERT(kind_bytes(2, POS_MEM_MODULE) > 0);
    CU_ASSERT_EQUAL(kind_bytes(2, POS_MEM_MODULE), f0 - f2);
    CU_ASSERT_EQUAL(kind_bytes(3, POS_MEM_MODULE), 0);
    CU_ASSERT_EQUAL(step_field("unload", 0, "used"), 0);
}

/* A context that goes takes what was allocated in it: a destroyed context, and the primary
 * context at its last release. */
static void test_a_context_takes_its_allocations_with_it(void)
{
    const char *steps[] = {"ctx", "inctx", "alloc:8M", "ctxdestroy", "alloc:4M", "primaryrelease",
                           NULL};
    CU_ASSERT_EQUAL(run_steps("uncapped", 1, NULL, steps), 0);
    CU_ASSERT_EQUAL(rc_of("alloc", 0), 0);
    CU_ASSERT_EQUAL(step_field("ctxdestroy", 0, "used"), 0);
    CU_ASSERT_EQUAL(step_field("alloc", 1, "used"), 4ll << 20);
    CU_ASSERT_EQUAL(step_field("primaryrelease", 0, "used"), 0);
}

/* ---- posd's side ---------------------------------------------------------------------------- */

/* The account of a client (app APP) as posd's STATS gives it: used bytes, -1 if not found. */
static long long posd_used(const char *app, int *found)
{
    struct pos_device_stats dev;
    static struct pos_client_stats cs[64];
    int n = util_stats(suite.sock, &dev, cs, 64);
    *found = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(cs[i].app, app) == 0) {
            *found = 1;
            return (long long)cs[i].mem_used;
        }
    return -1;
}

/* posd sees what the client holds; a restarted posd sees it again from the re-registration. */
static void test_account_reaches_posd_and_survives_its_restart(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s/held.out", suite.dir);
    const char *held[] = {"alloc:16M", "alloc:8M", "hold:6000", NULL};
    pid_t pid = start_steps("capped", 1, NULL, held, path);
    CU_ASSERT_FATAL(pid >= 0);
    int found = 0;
    long long used = -1;
    long long held_bytes = (long long)ctx_bytes + (24ll << 20);
    for (int i = 0; i < 300 && used != held_bytes; i++) {
        usleep(10000);
        used = posd_used("capped", &found);
    }
    CU_ASSERT_EQUAL(used, held_bytes);
    util_posd_stop(&suite.posd, SIGKILL);
    CU_ASSERT_FATAL(suite_posd_start(&suite, "fifo") > 0);
    used = -1;
    for (int i = 0; i < 300 && used != held_bytes; i++) {
        usleep(10000);
        used = posd_used("capped", &found);
    }
    CU_ASSERT_EQUAL(used, held_bytes);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ---- MPS ------------------------------------------------------------------------------------ */

/* posd's limit is in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT when the first context is made; a smaller
 * one of the user's is kept, a larger one lowered. */
static void test_mps_memory_limit_is_set_before_the_first_context(void)
{
    const char *steps[] = {NULL};
    CU_ASSERT_EQUAL(run_steps("capped", 1, NULL, steps), 0);
    char want[64];
    snprintf(want, sizeof want, "env 0=%lluM\n", limit >> 20);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    CU_ASSERT_EQUAL(run_steps("capped", 1, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=16M", steps), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "env 0=16M\n"));
    CU_ASSERT_EQUAL(run_steps("capped", 1, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G", steps), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    CU_ASSERT_EQUAL(run_steps("uncapped", 1, NULL, steps), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "env -\n"));
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("shim_mem", suite_init, suite_clean);
    POS_ADD_TEST(s, test_every_path_under_at_and_over_the_limit);
    POS_ADD_TEST(s, test_racing_threads_never_pass_the_limit);
    POS_ADD_TEST(s, test_account_equals_the_devices_count);
    POS_ADD_TEST(s, test_mem_get_info_shows_the_limit);
    POS_ADD_TEST(s, test_nvml_agrees_with_mem_get_info);
    POS_ADD_TEST(s, test_host_memory_passes_untouched);
    POS_ADD_TEST(s, test_unknown_frees_and_odd_sizes_get_the_drivers_answers);
    POS_ADD_TEST(s, test_refusals_are_said_once_a_second);
    POS_ADD_TEST(s, test_vmm_charge_lasts_until_released_and_unmapped);
    POS_ADD_TEST(s, test_ipc_import_is_shown_not_counted);
    POS_ADD_TEST(s, test_context_and_module_memory_are_measured);
    POS_ADD_TEST(s, test_a_context_takes_its_allocations_with_it);
    POS_ADD_TEST(s, test_account_reaches_posd_and_survives_its_restart);
    POS_ADD_TEST(s, test_mps_memory_limit_is_set_before_the_first_context);
}
