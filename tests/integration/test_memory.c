/* End-to-end tests of the memory ledger (docs/memory.md): real posd, the shim and
 * tests/shim/prog_memload.c on the simulated driver. Every allocation path under, at and over
 * a limit, by one thread, racing threads and two processes, with the simulated device itself
 * as the judge (this process samples its cuMemGetInfo while the clients hold their memory);
 * and the failure patterns of other memory limiters: a caching allocator's retries, vLLM's
 * profiling run, NCCL's host-memory cuMemCreate under a lock, a kill -9 with 1 GiB held, a posd
 * restart under clients that hold memory, a limit lowered and raised live. */
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pos/client_shm.h"
#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX    16384
#define MIB        (1024ull * 1024)
#define LIMIT      (256 * MIB) /* the "cap" clients' limit: the context's 86 MiB and room */
#define BLOCK      (4 * MIB)
#define RACE_ROUNDS 4 /* two processes' contexts made at once, so many times */

static struct suite suite;
static CUcontext ctx;

static const char conf_text[] = "[class capped]\n"
                                "priority = 10\n"
                                "[rule cap]\n"
                                "match_app = cap*\n"
                                "class = capped\n"
                                "mem_limit = 256M\n"
                                "[rule big]\n"
                                "match_app = big*\n"
                                "mem_limit = 1536M\n";

static const char *const paths[] = {"linear", "pitched", "managed", "async", "pool",
                                    "vmm",    "array",   "array3d", "mipmap"};
#define NPATHS (sizeof paths / sizeof *paths)

/* ---- the device as this process sees it ---------------------------------------------------- */

/* Device memory in use on the suite's virtual GPU (every process's), -1 if not known. */
static long long device_used(void)
{
    size_t free_b, total;
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuMemGetInfo(&free_b, &total) != CUDA_SUCCESS)
        return -1;
    return (long long)(total - free_b);
}

/* ---- clients ------------------------------------------------------------------------------- */

struct proc {
    pid_t pid;
    int in;  /* its stdin: closing it lets a holding client free and exit */
    int out; /* its stdout */
    char text[OUT_MAX];
    size_t len;
};

/* Starts build/tests/shim_memload with ARGS (NULL-terminated) under the shim as app APP, with
 * MEMLOAD_HOLD set when HOLD. */
static void proc_start(struct proc *p, const char *app, int hold, const char *const *args)
{
    int in[2], out[2];
    /* close-on-exec: a client started later must not hold this one's stdin open */
    CU_ASSERT_FATAL(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
    memset(p, 0, sizeof *p);
    p->pid = fork();
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        setenv("LD_PRELOAD", util_shim_preload(), 1);
        setenv("POS_APP", app, 1);
        if (hold)
            setenv("MEMLOAD_HOLD", "1", 1);
        const char *argv[16] = {"build/tests/shim_memload"};
        for (int i = 0; args[i] && i < 14; i++)
            argv[i + 1] = args[i];
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->in = in[1];
    p->out = out[0];
}

/* Reads P's output until its part from offset FROM on contains WHAT, or it ends (or TIMEOUT_S
 * pass): whether it came. */
static int proc_wait_from(struct proc *p, size_t from, const char *what, int timeout_s)
{
    double end = util_now() + timeout_s * util_time_scale();
    while (!strstr(p->text + from, what)) {
        double left = end - util_now();
        struct pollfd pfd = {.fd = p->out, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)(left * 1000) + 1) <= 0)
            return 0;
        ssize_t n = read(p->out, p->text + p->len, sizeof p->text - 1 - p->len);
        if (n <= 0)
            return strstr(p->text + from, what) != NULL;
        p->len += (size_t)n;
        p->text[p->len] = '\0';
    }
    return 1;
}

static int proc_wait_for(struct proc *p, const char *what, int timeout_s)
{
    return proc_wait_from(p, 0, what, timeout_s);
}

/* Lets P go (closes its stdin), reads the rest of its output and reaps it: its exit status
 * (128 + signal when killed; 255 when it did not end within 30 s and was killed). */
static int proc_finish(struct proc *p)
{
    if (p->in >= 0)
        close(p->in);
    p->in = -1;
    proc_wait_for(p, "\nlaunches 0\n", 30);
    close(p->out);
    int st;
    for (int i = 0; i < 3000; i++) {
        if (waitpid(p->pid, &st, WNOHANG) == p->pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
    return 255;
}

/* proc_finish, and P's output on stderr when it did not end well. */
static int proc_done(struct proc *p)
{
    int rc = proc_finish(p);
    if (rc != 0)
        fprintf(stderr, "pid %d ended with %d:\n%s\n", (int)p->pid, rc, p->text);
    return rc;
}

/* The stats posd has of the client with pid PID, in *OUT: 1, or 0 when it has none. */
static int client_of(pid_t pid, struct pos_client_stats *out)
{
    static struct pos_client_stats cs[64];
    struct pos_device_stats dev;
    int n = util_stats(suite.sock, &dev, cs, 64);
    for (int i = 0; i < n && i < 64; i++)
        if (cs[i].pid == pid) {
            *out = cs[i];
            return 1;
        }
    return 0;
}

static void posd_start(void)
{
    CU_ASSERT_FATAL(suite_posd_start(&suite, "priority") > 0);
    CU_ASSERT_FATAL(access(suite.sock, F_OK) == 0);
}

static int suite_init(void)
{
    if (suite_open(&suite, "memory", conf_text) < 0 || access("build/posd", X_OK) != 0 ||
        access("build/tests/shim_memload", X_OK) != 0)
        return -1;
    /* the fake NVML of the simulated device: the shim measures a device's first context by it */
    setenv("LD_LIBRARY_PATH", "build/sim:build/tests/fakes/sim", 1);
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS)
        return -1;
    return suite_posd_start(&suite, "priority") > 0 && access(suite.sock, F_OK) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    cuDevicePrimaryCtxRelease(0);
    return suite_close(&suite);
}

/* ---- the matrix ---------------------------------------------------------------------------- */

/* One client of app APP holding what "fill PATH SIZE MAX THREADS" got, judged while it holds:
 * the device's use beyond BASE (what this process sampled before it started) and posd's ledger
 * both stay within LIMIT, and agree with what the client says it holds. Returns the bytes it
 * holds by its own account. */
static long long fill_within(const char *app, const char *path, unsigned long long size, long max,
                             int threads, unsigned long long limit, long long base)
{
    char s_size[32], s_max[32], s_thr[16];
    snprintf(s_size, sizeof s_size, "%llu", size);
    snprintf(s_max, sizeof s_max, "%ld", max);
    snprintf(s_thr, sizeof s_thr, "%d", threads);
    const char *const args[] = {"fill", path, s_size, s_max, s_thr, NULL};
    struct proc p;
    proc_start(&p, app, 1, args);
    int held = proc_wait_for(&p, "holding", 60);
    CU_ASSERT(held);
    long long dev = device_used() - base;
    struct pos_client_stats st;
    int known = client_of(p.pid, &st);
    CU_ASSERT(known);
    long long bytes = util_number(p.text, "held_bytes");
    CU_ASSERT(dev <= (long long)limit);
    CU_ASSERT(bytes <= (long long)limit);
    if (known) {
        CU_ASSERT(st.mem_used <= limit);
        CU_ASSERT(st.mem_peak <= limit);
        CU_ASSERT_EQUAL(st.mem_limit, limit);
        /* the ledger holds what the client got beside its context and module */
        CU_ASSERT(st.mem_used >= (unsigned long long)bytes);
    }
    if (!held || dev > (long long)limit || (known && st.mem_peak > limit))
        fprintf(stderr, "%s %s size %llu max %ld threads %d: device +%lld, ledger used %llu peak "
                        "%llu limit %llu\n%s\n",
                app, path, size, max, threads, dev, known ? (unsigned long long)st.mem_used : 0,
                known ? (unsigned long long)st.mem_peak : 0, limit, p.text);
    CU_ASSERT_EQUAL(proc_done(&p), 0);
    return bytes;
}

/* Every path: under the limit everything asked for is given; at it, the client fills the room
 * its limit leaves and is refused with CUDA_ERROR_OUT_OF_MEMORY; over it, a single block
 * larger than the limit is refused. Neither the device nor the ledger ever holds more. */
static void test_no_path_passes_its_limit(void)
{
    for (size_t i = 0; i < NPATHS; i++) {
        long long base = device_used();
        /* under: 4 blocks of 4 MiB fit beside the context */
        long long got = fill_within("cap-under", paths[i], BLOCK, 4, 1, LIMIT, base);
        CU_ASSERT(got >= (long long)(4 * BLOCK));
        /* at: as many as fit */
        got = fill_within("cap-at", paths[i], BLOCK, 1000, 1, LIMIT, base);
        CU_ASSERT(got > (long long)(LIMIT / 2));
        /* over: one block bigger than the limit */
        got = fill_within("cap-over", paths[i], LIMIT + BLOCK, 1, 1, LIMIT, base);
        CU_ASSERT_EQUAL(got, 0);
        CU_ASSERT(device_used() - base < (long long)BLOCK);
    }
}

/* Eight threads of one process racing for the last room under its limit never pass it
 * together; two processes racing at once each stay within their own. */
static void test_racing_allocations_stay_within_the_limit(void)
{
    for (size_t i = 0; i < NPATHS; i++) {
        long long base = device_used();
        fill_within("cap-threads", paths[i], BLOCK, 1000, 8, LIMIT, base);
    }
    char s_block[32];
    snprintf(s_block, sizeof s_block, "%llu", BLOCK);
    const char *const args[] = {"fill", "linear", s_block, "1000", "4", NULL};
    /* their contexts and modules made at once too (both wait, the driver initialised, for one
     * "go"; a few rounds, as the window is short): each is measured as its own process's usage
     * (NVML per process), so neither is charged the other's (docs/memory.md) */
    for (int round = 0; round < RACE_ROUNDS; round++) {
        long long base = device_used();
        struct proc a, b;
        setenv("MEMLOAD_START_GATE", "1", 1);
        proc_start(&a, "cap-race-a", 1, args);
        proc_start(&b, "cap-race-b", 1, args);
        unsetenv("MEMLOAD_START_GATE");
        CU_ASSERT(proc_wait_for(&a, "ready", 60));
        CU_ASSERT(proc_wait_for(&b, "ready", 60));
        CU_ASSERT(write(a.in, "go\n", 3) == 3 && write(b.in, "go\n", 3) == 3);
        CU_ASSERT(proc_wait_for(&a, "holding", 60));
        CU_ASSERT(proc_wait_for(&b, "holding", 60));
        long long dev = device_used() - base;
        CU_ASSERT(dev <= (long long)(2 * LIMIT));
        struct pos_client_stats sa, sb;
        int known = client_of(a.pid, &sa) && client_of(b.pid, &sb);
        CU_ASSERT(known && sa.mem_peak <= LIMIT && sb.mem_peak <= LIMIT);
        /* the ledgers together are what the two hold on the device: one charged the other's
         * context or module would be refused that far below its limit */
        long long charged = known ? (long long)(sa.mem_used + sb.mem_used) : 0;
        CU_ASSERT(charged <= dev + (long long)BLOCK);
        if (charged > dev + (long long)BLOCK)
            fprintf(stderr, "race round %d: charged %lld, held on the device %lld\n"
                    "a:\n%s\nb:\n%s\n", round, charged, dev, a.text, b.text);
        CU_ASSERT_EQUAL(proc_done(&a), 0);
        CU_ASSERT_EQUAL(proc_done(&b), 0);
    }
}

/* ---- failure patterns of other limiters ---------------------------------------------------- */

/* A caching allocator that retries smaller after an out-of-memory ends with what fits under
 * its limit, and its process keeps running. */
static void test_a_caching_allocator_retrying_smaller_fills_its_room(void)
{
    const char *const args[] = {"retry", "33554432", "1048576", NULL};
    struct proc p;
    proc_start(&p, "cap-retry", 0, args);
    CU_ASSERT_EQUAL(proc_done(&p), 0);
    long long held = util_number(p.text, "held_bytes");
    CU_ASSERT(held > (long long)(LIMIT / 2) && held <= (long long)LIMIT);
    CU_ASSERT(util_number(p.text, "refusals") >= 1);
    CU_ASSERT(util_number(p.text, "info_total") == (long long)LIMIT);
    if (held <= (long long)(LIMIT / 2) || held > (long long)LIMIT)
        fprintf(stderr, "retry:\n%s\n", p.text);
}

/* vLLM's profiling run: the free memory cuMemGetInfo reports before and after it are equal, and
 * the total is the limit. */
static void test_free_memory_is_equal_before_and_after_a_profiling_run(void)
{
    const char *const args[] = {"profile", "16777216", NULL};
    struct proc p;
    proc_start(&p, "cap-vllm", 0, args);
    CU_ASSERT_EQUAL(proc_done(&p), 0);
    long long before = util_number(p.text, "free_before"), after = util_number(p.text, "free_after");
    CU_ASSERT(before > 0);
    CU_ASSERT_EQUAL(before, after);
    CU_ASSERT_EQUAL(util_number(p.text, "free_during"), before - 16777216);
    CU_ASSERT_EQUAL(util_number(p.text, "total_before"), (long long)LIMIT);
    CU_ASSERT_EQUAL(util_number(p.text, "total_after"), (long long)LIMIT);
    if (before != after)
        fprintf(stderr, "profile:\n%s\n", p.text);
}

/* NCCL's host-memory path: cuMemCreate at each host location, while the program's own lock is
 * held and another of its threads allocates device memory, passes, takes none of its limit and
 * hangs nothing. */
static void test_host_cumemcreate_under_a_held_lock_passes_untouched(void)
{
    const char *const args[] = {"hostvmm", "2097152", NULL};
    struct proc p;
    proc_start(&p, "cap-nccl", 0, args);
    CU_ASSERT_EQUAL(proc_done(&p), 0);
    CU_ASSERT_EQUAL(util_number(p.text, "made"), 3);
    long long before = util_number(p.text, "free_before");
    CU_ASSERT_EQUAL(util_number(p.text, "free_while_held"), before);
    CU_ASSERT_EQUAL(util_number(p.text, "free_after"), before);
}

/* IPC: the memory another process exported is read by the opener and not charged to it. */
static void test_opened_ipc_memory_is_its_exporters(void)
{
    const char *const exp_args[] = {"ipc-export", "8388608", NULL};
    const char *const open_args[] = {"ipc-open", NULL};
    struct proc e, o;
    proc_start(&e, "cap-exporter", 0, exp_args);
    CU_ASSERT_FATAL(proc_wait_for(&e, "\n", 30));
    proc_start(&o, "cap-opener", 0, open_args);
    CU_ASSERT(write(o.in, e.text, strlen(e.text)) == (ssize_t)strlen(e.text));
    CU_ASSERT_EQUAL(proc_done(&o), 0);
    CU_ASSERT_EQUAL(util_number(o.text, "open_rc"), 0);
    CU_ASSERT_EQUAL(util_number(o.text, "byte"), 0x5a);
    CU_ASSERT_EQUAL(util_number(o.text, "open_info_free"), util_number(o.text, "before_info_free"));
    CU_ASSERT_EQUAL(proc_done(&e), 0);
    if (util_number(o.text, "byte") != 0x5a)
        fprintf(stderr, "exporter:\n%s\nopener:\n%s\n", e.text, o.text);
}

/* A client killed with SIGKILL while it holds 1 GiB gives all of it back within 1 s: gone from
 * posd's ledger, and from the simulated device. */
static void test_a_killed_client_gives_its_memory_back_within_a_second(void)
{
    long long base = device_used();
    const char *const args[] = {"fill", "linear", "1073741824", "1", NULL};
    struct proc p;
    proc_start(&p, "big-killed", 1, args);
    CU_ASSERT_FATAL(proc_wait_for(&p, "holding", 60));
    CU_ASSERT_EQUAL(util_number(p.text, "held_bytes"), 1073741824);
    struct pos_client_stats st;
    CU_ASSERT(client_of(p.pid, &st) && st.mem_used >= 1073741824);
    CU_ASSERT(device_used() - base >= 1073741824);
    double t0 = util_now();
    kill(p.pid, SIGKILL);
    int ledger_gone = 0, device_back = 0;
    while (util_now() - t0 < 1.0 && !(ledger_gone && device_back)) {
        ledger_gone = !client_of(p.pid, &st);
        device_back = device_used() - base < (long long)(64 * MIB);
        usleep(5000);
    }
    CU_ASSERT(ledger_gone);
    CU_ASSERT(device_back);
    if (!ledger_gone || !device_back)
        fprintf(stderr, "after 1 s: ledger %s, device +%lld\n", ledger_gone ? "gone" : "kept",
                device_used() - base);
    proc_finish(&p);
}

/* posd restarted under two clients that hold memory rebuilds their accounts as they were. */
static void test_a_restarted_posd_rebuilds_the_ledger(void)
{
    const char *const args[] = {"fill", "pitched", "8388608", "3", NULL};
    const char *const args2[] = {"fill", "vmm", "4194304", "5", NULL};
    struct proc a, b;
    proc_start(&a, "cap-keep-a", 1, args);
    proc_start(&b, "cap-keep-b", 1, args2);
    CU_ASSERT_FATAL(proc_wait_for(&a, "holding", 60) && proc_wait_for(&b, "holding", 60));
    struct pos_client_stats a0, b0, a1, b1;
    CU_ASSERT_FATAL(client_of(a.pid, &a0) && client_of(b.pid, &b0));
    util_posd_stop(&suite.posd, SIGTERM);
    posd_start();
    int back = 0;
    for (int i = 0; i < 500 && !back; i++) {
        back = client_of(a.pid, &a1) && client_of(b.pid, &b1) && a1.mem_used && b1.mem_used;
        if (!back)
            usleep(10000);
    }
    CU_ASSERT_FATAL(back);
    CU_ASSERT_EQUAL(a1.mem_used, a0.mem_used);
    CU_ASSERT_EQUAL(b1.mem_used, b0.mem_used);
    CU_ASSERT_EQUAL(memcmp(a1.mem_bytes, a0.mem_bytes, sizeof a0.mem_bytes), 0);
    CU_ASSERT_EQUAL(memcmp(b1.mem_bytes, b0.mem_bytes, sizeof b0.mem_bytes), 0);
    CU_ASSERT_EQUAL(proc_done(&a), 0);
    CU_ASSERT_EQUAL(proc_done(&b), 0);
}

/* P's answer to one more block ("more" on its stdin): its CUresult, -1 if none came. */
static long long proc_more(struct proc *p)
{
    size_t from = p->len;
    if (write(p->in, "more\n", 5) != 5 || !proc_wait_from(p, from, "\n", 30))
        return -1;
    const char *r = strstr(p->text + from, "more_rc ");
    return r ? strtoll(r + strlen("more_rc "), NULL, 10) : -1;
}

/* SET the client's limit to LIMIT: posd's status, its message in MSG. */
static int set_limit(uint32_t client_id, uint64_t limit, char *msg, size_t cap)
{
    struct pos_control req = {.op = POS_CTL_SET, .flags = POS_CTL_HAS_MEM_LIMIT,
                              .client_id = client_id, .mem_limit = limit};
    struct pos_control_reply rep;
    int rc = util_control(suite.sock, &req, &rep, msg, cap);
    snprintf(msg, cap, "%s", rep.message);
    return rc;
}

/* posctl set --mem-limit on a running client: lowered below what it holds, its next allocation
 * is refused and posd says so; raised, the next one is given at once. */
static void test_a_limit_changes_live(void)
{
    const char *const args[] = {"fill", "linear", "16777216", "2", NULL};
    struct proc p;
    proc_start(&p, "cap-live", 1, args);
    CU_ASSERT_FATAL(proc_wait_for(&p, "holding", 60));
    struct pos_client_stats st;
    CU_ASSERT_FATAL(client_of(p.pid, &st));
    CU_ASSERT_EQUAL(proc_more(&p), 0); /* under its rule's 256 MiB */
    char msg[512];
    CU_ASSERT_EQUAL(set_limit(st.client_id, 64 * MIB, msg, sizeof msg), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "new allocations fail"));
    CU_ASSERT(client_of(p.pid, &st) && st.mem_limit == 64 * MIB);
    CU_ASSERT_EQUAL(proc_more(&p), CUDA_ERROR_OUT_OF_MEMORY);
    CU_ASSERT_EQUAL(set_limit(st.client_id, 512 * MIB, msg, sizeof msg), 0);
    CU_ASSERT_EQUAL(proc_more(&p), 0);
    CU_ASSERT(client_of(p.pid, &st) && st.mem_limit == 512 * MIB && st.mem_refused >= 1);
    CU_ASSERT_EQUAL(proc_done(&p), 0);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("memory", suite_init, suite_clean);
    POS_ADD_TEST(s, test_no_path_passes_its_limit);
    POS_ADD_TEST(s, test_racing_allocations_stay_within_the_limit);
    POS_ADD_TEST(s, test_a_caching_allocator_retrying_smaller_fills_its_room);
    POS_ADD_TEST(s, test_free_memory_is_equal_before_and_after_a_profiling_run);
    POS_ADD_TEST(s, test_host_cumemcreate_under_a_held_lock_passes_untouched);
    POS_ADD_TEST(s, test_opened_ipc_memory_is_its_exporters);
    POS_ADD_TEST(s, test_a_killed_client_gives_its_memory_back_within_a_second);
    POS_ADD_TEST(s, test_a_restarted_posd_rebuilds_the_ledger);
    POS_ADD_TEST(s, test_a_limit_changes_live);
}
