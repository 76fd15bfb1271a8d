/* Integration tests of libposshim.so with real processes on the simulated driver: every launch
 * of a -lcuda program (posapp in all its modes), a dlopen+dlsym program and a runtime-style
 * program (cuGetProcAddress_v2, per-thread default stream, 4 threads) is seen exactly once
 * (trace operator lines = the program's launches); results with and without the shim are the
 * same; graph capture + launch; 2,000 short-lived threads, rings reused; fork + exec;
 * processes that never touch CUDA or find no driver see what they would without the shim;
 * POS_MODE=off; marked completions carry the device's end time, and timing events that fail
 * leave poll times, said once. */
#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/util.h"

#define OUT_MAX 16384

static char instance[64];
static char tmpdir[128];

struct result {
    int status;
    char out[OUT_MAX];
    char err[OUT_MAX];
};

static void read_all(int fd, char *buf)
{
    size_t len = 0;
    ssize_t n;
    while (len < OUT_MAX - 1 && (n = read(fd, buf + len, OUT_MAX - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
}

/* Runs ARGV with ENV ("K=V" list, applied after the defaults) and collects its output. */
static void run(const char *const *env, const char *const *argv, struct result *r)
{
    int out[2], err[2];
    CU_ASSERT_FATAL(pipe(out) == 0 && pipe(err) == 0);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]);
        close(err[0]);
        setenv("LD_LIBRARY_PATH", "build/sim", 1);
        setenv("POS_SIM_INSTANCE", instance, 1);
        unsetenv("LD_PRELOAD");
        unsetenv("POS_TRACE");
        unsetenv("POS_MODE");
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    /* read both pipes without deadlock: outputs here are small */
    read_all(out[0], r->out);
    read_all(err[0], r->err);
    close(out[0]);
    close(err[0]);
    waitpid(pid, &r->status, 0);
}

static int exit_code(const struct result *r)
{
    return WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status);
}

struct trace_stats {
    long operators; /* non-comment lines */
    long well_formed;
    long with_completion;
    long summary_captured;
    long summary_dropped;
    long summary_launches;
    long summary_syncs;
    long summary_unrecorded;
    char first_names[512];
};

static void read_trace(const char *path, struct trace_stats *t)
{
    memset(t, 0, sizeof *t);
    t->summary_captured = t->summary_dropped = t->summary_launches = -1;
    t->summary_syncs = t->summary_unrecorded = -1;
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            if (strncmp(line, "# summary", 9) == 0) {
                t->summary_captured = util_number(line, "captured");
                t->summary_dropped = util_number(line, "dropped");
                t->summary_launches = util_number(line, "launches");
                t->summary_syncs = util_number(line, "syncs");
                t->summary_unrecorded = util_number(line, "unrecorded");
            }
            continue;
        }
        t->operators++;
        char kind[32], name[256], grid[64], block[64], complete[32], done[16];
        unsigned long long seq, submit;
        unsigned tid, smem;
        if (sscanf(line, "%llu %u %31s %255s %63s %63s %u %*s %*s %llu %31s %15s", &seq, &tid, kind,
                   name, grid, block, &smem, &submit, complete, done) == 10)
            t->well_formed++;
        if (strcmp(complete, "-") != 0)
            t->with_completion++;
        if (strlen(t->first_names) + strlen(name) + 2 < sizeof t->first_names) {
            strcat(t->first_names, name);
            strcat(t->first_names, " ");
        }
    }
    fclose(f);
}

/* The kernel end times of a POS_SIM_TRACE file, in the order its stream completed them. */
static size_t read_sim_ends(const char *path, long long *ends, size_t max)
{
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[256];
    size_t n = 0;
    long long end, seen;
    while (n < max && fgets(line, sizeof line, f))
        if (sscanf(line, "kernel %*s %lld %lld", &end, &seen) == 2)
            ends[n++] = end;
    fclose(f);
    return n;
}

/* Counts the trace's operators completed as DONE ("device", "marker") and, of the device ones,
 * those within 2 us of the simulated device's own end of the same kernel (one stream: the two
 * files list the kernels in the same order). */
static void device_time_errors(const char *trace, const char *sim, long *device, long *marker,
                               long *exact)
{
    static long long ends[8192];
    size_t nend = read_sim_ends(sim, ends, 8192);
    FILE *f = fopen(trace, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[1024], done[16];
    unsigned long long seq, complete;
    *device = *marker = *exact = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || sscanf(line, "%llu %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %15s",
                                     &seq, &complete, done) != 3)
            continue;
        if (strcmp(done, "marker") == 0)
            (*marker)++;
        if (strcmp(done, "device") != 0)
            continue;
        (*device)++;
        long long err = seq >= 1 && seq <= nend ? (long long)complete - ends[seq - 1] : 1000000;
        if (err >= -2000 && err <= 2000)
            (*exact)++;
    }
    fclose(f);
}

/* A completion marker carries the device's end of its operator (the shim's timing event, read
 * against a reference whose host time is known), not the time the collector saw it: within
 * 2 us of the simulated device's own end time (POS_SIM_TRACE), where a poll time is tens of us
 * late or more. Also where the host is slower than the device (mobilenet_v2 on an H200), whose
 * events are often recorded after their kernel ended and then give no device time. POS_DEVTIME=0
 * turns it off. */
static void test_marked_completions_carry_the_devices_end_time(void)
{
    static const char *const cases[][3] = {
        {"POS_DEVTIME=1", "POS_SIM_DEVICE=xavier-nx", "resnet50"},
        {"POS_DEVTIME=1", "POS_SIM_DEVICE=h200", "mobilenet_v2"},
        {"POS_DEVTIME=0", "POS_SIM_DEVICE=xavier-nx", "resnet50"},
    };
    static char trace_env[300], sim_env[300], path[256], simpath[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[] = {"build/posapp", "--model", cases[i][2], "--requests", "60", NULL};
        snprintf(path, sizeof path, "%s/devtime%zu.trace", tmpdir, i);
        snprintf(simpath, sizeof simpath, "%s/devtime%zu.sim", tmpdir, i);
        snprintf(trace_env, sizeof trace_env, "POS_TRACE=%s", path);
        snprintf(sim_env, sizeof sim_env, "POS_SIM_TRACE=%s", simpath);
        char inst[128];
        snprintf(inst, sizeof inst, "POS_SIM_INSTANCE=%s-dt%zu", instance, i);
        const char *env[] = {
            util_shim_preload_env(), trace_env, sim_env, cases[i][0], cases[i][1], inst, NULL};
        struct result r;
        run(env, argv, &r);
        CU_ASSERT_EQUAL(exit_code(&r), 0);
        /* silent; where the host is slower than the device, the collector can fall a whole
         * pool of events behind the launches (seen once in a make test run), which the shim
         * says in one line and meets with poll times */
        const char *nl = strchr(r.err, '\n');
        int quiet = !r.err[0] || (i == 1 && strstr(r.err, "out of timing events") && nl &&
                                  !nl[1]);
        CU_ASSERT(quiet);
        if (!quiet)
            fprintf(stderr, "\n  %s %s: %s", cases[i][1], cases[i][2], r.err);
        long device, marker, exact;
        device_time_errors(path, simpath, &device, &marker, &exact);
        long ops = util_number(r.out, "launches");
        if (i == 2) {
            CU_ASSERT_EQUAL(device, 0);
            CU_ASSERT(marker > ops / 2);
            continue;
        }
        /* not all: the first marker of a context sets its timing events up (earlier ones come
         * before), and an event recorded after its kernel had ended has no device time to give.
         * Where the host is slower than the device that can be every one (a loaded clean-clone
         * CI run: 0 of 3240): what is asked there is that each time given is exact and that
         * the others keep their markers' poll times */
        int enough = i == 0 ? device >= ops / 4 : device + marker > ops / 2;
        CU_ASSERT(enough);
        CU_ASSERT(exact >= device * 99 / 100);
        if (!enough || exact < device * 99 / 100)
            fprintf(stderr, "\n  %s %s: %ld operators, %ld device times, %ld within 2 us\n",
                    cases[i][1], cases[i][2], ops, device, exact);
    }
}

/* Timing events that fail (refused at creation as unsupported flags or out of events, or their
 * reading refused by the driver, which the reference's anchor meets first:
 * POS_SIM_FAULT_TIMING_EVENTS) leave the program running with
 * poll times (every launch still seen, completions still known), and the shim says so once. */
static void test_failing_timing_events_keep_poll_times_and_say_so_once(void)
{
    static const char *const faults[][2] = {
        {"POS_SIM_FAULT_TIMING_EVENTS=flags", "timing events unavailable"},
        {"POS_SIM_FAULT_TIMING_EVENTS=20", "timing events unavailable"},
        {"POS_SIM_FAULT_TIMING_EVENTS=elapsed", "timing events unavailable"},
    };
    const char *const argv[] = {"build/posapp", "--model", "resnet18", "--requests", "6", NULL};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        static char trace_env[300], path[256];
        snprintf(path, sizeof path, "%s/devfault%zu.trace", tmpdir, i);
        snprintf(trace_env, sizeof trace_env, "POS_TRACE=%s", path);
        const char *env[] = {util_shim_preload_env(), trace_env, faults[i][0], NULL};
        struct result r;
        run(env, argv, &r);
        CU_ASSERT_EQUAL(exit_code(&r), 0);
        const char *said = strstr(r.err, faults[i][1]);
        CU_ASSERT_PTR_NOT_NULL(said);
        CU_ASSERT(said && !strstr(said + 1, faults[i][1])); /* once */
        struct trace_stats t;
        read_trace(path, &t);
        CU_ASSERT_EQUAL(t.operators, util_number(r.out, "launches"));
        CU_ASSERT(t.with_completion > t.operators / 2);
        /* no operator has a device time */
        long device = 0;
        FILE *f = fopen(path, "r");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        char line[1024];
        while (fgets(line, sizeof line, f))
            device += line[0] != '#' && strstr(line, " device\n") != NULL;
        fclose(f);
        CU_ASSERT_EQUAL(device, 0);
        if (!said || device)
            fprintf(stderr, "\n  %s: %ld device times; stderr: %s\n", faults[i][0], device, r.err);
    }
}

static int suite_init(void)
{
    snprintf(instance, sizeof instance, "test-shim-%d", (int)getpid());
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pos-test-shim-%d", (int)getpid());
    mkdir(tmpdir, 0700);
    return access("build/libposshim.so", R_OK) == 0 && access("build/posapp", X_OK) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs ARGV under the shim with a trace; checks every launch the program reports is one
 * trace line and returns the trace's figures. */
static void traced_run(const char *tag, const char *const *argv, const char *launch_key,
                       struct result *r, struct trace_stats *t)
{
    static char trace_env[300], path[256];
    snprintf(path, sizeof path, "%s/%s.trace", tmpdir, tag);
    snprintf(trace_env, sizeof trace_env, "POS_TRACE=%s", path);
    const char *env[] = {util_shim_preload_env(), trace_env, NULL};
    run(env, argv, r);
    CU_ASSERT_EQUAL(exit_code(r), 0);
    if (exit_code(r) != 0)
        fprintf(stderr, "%s: %s %s\n", tag, r->out, r->err);
    read_trace(path, t);
    long launches = util_number(r->out, launch_key);
    CU_ASSERT(launches > 0);
    CU_ASSERT_EQUAL(t->operators, launches);
    CU_ASSERT_EQUAL(t->well_formed, t->operators);
    CU_ASSERT_EQUAL(t->summary_dropped, 0);
    if (t->operators != launches)
        fprintf(stderr, "%s: %ld trace lines for %ld launches\n", tag, t->operators, launches);
}

static void test_posapp_every_launch_seen_once(void)
{
    static const char *const cases[][12] = {
        {"build/posapp", "--model", "resnet18", "--requests", "8", NULL},
        {"build/posapp", "--model", "mobilenet_v2", "--requests", "8", "--streams", "3", NULL},
        {"build/posapp", "--model", "inception_v1", "--requests", "8", "--threads", "3", NULL},
        {"build/posapp", "--model", "resnet34", "--requests", "8", "--ptds", "--threads", "4",
         NULL},
        {"build/posapp", "--microbench", "3000", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct result r;
        struct trace_stats t;
        char tag[32];
        snprintf(tag, sizeof tag, "posapp%zu", i);
        traced_run(tag, cases[i], "launches", &r, &t);
        CU_ASSERT(t.with_completion > 0);
    }
    /* kernel names learnt from cuModuleGetFunction */
    struct result r;
    struct trace_stats t;
    const char *const argv[] = {"build/posapp", "--model", "resnet18", "--requests", "1", NULL};
    traced_run("names", argv, "launches", &r, &t);
    CU_ASSERT_PTR_NOT_NULL(strstr(t.first_names, "conv1 "));
    CU_ASSERT_PTR_NULL(strstr(t.first_names, "? "));
}

static void test_results_same_with_and_without_shim(void)
{
    static const char *const cases[][12] = {
        {"build/posapp", "--model", "resnet50", "--requests", "6", "--verify", NULL},
        {"build/posapp", "--model", "yolop", "--requests", "4", "--verify", "--streams", "2", NULL},
        {"build/posapp", "--model", "bert_base", "--requests", "3", "--verify", "--ptds",
         "--threads", "3", NULL},
    };
    const char *const shim_env[] = {util_shim_preload_env(), NULL};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct result plain, shimmed;
        run(NULL, cases[i], &plain);
        run(shim_env, cases[i], &shimmed);
        CU_ASSERT_EQUAL(exit_code(&plain), 0);
        CU_ASSERT_EQUAL(exit_code(&shimmed), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(plain.out, "\"verified\":true"));
        CU_ASSERT_PTR_NOT_NULL(strstr(shimmed.out, "\"verified\":true"));
        CU_ASSERT_EQUAL(util_number(plain.out, "launches"), util_number(shimmed.out, "launches"));
        CU_ASSERT_EQUAL(util_number(plain.out, "requests"), util_number(shimmed.out, "requests"));
        CU_ASSERT_STRING_EQUAL(shimmed.err, "");
    }
}

static void test_dlopen_and_runtime_style_programs(void)
{
    struct result r;
    struct trace_stats t;
    const char *const dl[] = {"build/tests/shim_dlopen", "500", NULL};
    traced_run("dlopen", dl, "launches", &r, &t);
    const char *const rt[] = {"build/tests/shim_runtime", "300", NULL};
    traced_run("runtime", rt, "launches", &r, &t);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "verified true"));
    /* the same program without the shim prints the same */
    struct result plain;
    run(NULL, rt, &plain);
    CU_ASSERT_STRING_EQUAL(plain.out, r.out);
}

static void test_graph_launch_is_one_operator(void)
{
    struct result r;
    struct trace_stats t;
    const char *const argv[] = {"build/tests/shim_graph", "7", NULL};
    traced_run("graph", argv, "launches", &r, &t);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "verified true"));
    CU_ASSERT_EQUAL(t.summary_captured, 22); /* recorded into the graph, not operators */
    CU_ASSERT_PTR_NOT_NULL(strstr(t.first_names, "graph "));
}

/* Far more threads than the shim has rings (SHIM_MAX_THREADS) launch over the process's life,
 * a few at a time: each ring is reused once its thread has exited and been drained, and the
 * summary still counts every thread's launches and syncs, also of launches made after the
 * shim's thread-exit destructor ran. */
static void test_thousands_of_short_threads_all_traced(void)
{
    struct result r;
    struct trace_stats t;
    const char *const argv[] = {"build/tests/shim_threads", "2000", "64", "3", NULL};
    traced_run("threads", argv, "launches", &r, &t);
    CU_ASSERT_EQUAL(util_number(r.out, "launches"), 6000);
    CU_ASSERT_EQUAL(t.operators, 6000);
    CU_ASSERT_EQUAL(t.summary_launches, 6000);
    CU_ASSERT_EQUAL(t.summary_syncs, 2000);
    CU_ASSERT_EQUAL(t.summary_dropped, 0);
    CU_ASSERT_EQUAL(t.summary_unrecorded, 0);
    if (t.operators != 6000 || t.summary_unrecorded != 0)
        fprintf(stderr, "threads: %ld operators, summary launches %ld unrecorded %ld\n",
                t.operators, t.summary_launches, t.summary_unrecorded);
    /* and a last launch from a thread-exit destructor that runs after the shim's takes a ring
     * of its own, never the one just handed back */
    const char *const late[] = {"build/tests/shim_threads", "500", "16", "2", "1", NULL};
    traced_run("threads-late", late, "launches", &r, &t);
    CU_ASSERT_EQUAL(t.operators, 1500);
    CU_ASSERT_EQUAL(t.summary_launches, 1500);
    CU_ASSERT_EQUAL(t.summary_syncs, 1000);
    CU_ASSERT_EQUAL(t.summary_unrecorded, 0);
}

static void test_fork_and_exec(void)
{
    char trace_env[256];
    snprintf(trace_env, sizeof trace_env, "POS_TRACE=%s/fork.%%p.trace", tmpdir);
    const char *const env[] = {util_shim_preload_env(), trace_env, NULL};
    const char *const argv[] = {"build/tests/shim_fork", "400", "build/tests/shim_dlopen", "123",
                                NULL};
    struct result r;
    run(env, argv, &r);
    CU_ASSERT_EQUAL(exit_code(&r), 0);
    if (exit_code(&r))
        fprintf(stderr, "fork: %s %s\n", r.out, r.err);
    /* two traces: the parent's 400 launches, the exec'd child's 123; the child that stayed
     * and failed to use CUDA wrote none and did not disturb the parent's */
    char pattern[256];
    snprintf(pattern, sizeof pattern, "%s/fork.*.trace", tmpdir);
    glob_t g;
    CU_ASSERT_EQUAL_FATAL(glob(pattern, 0, NULL, &g), 0);
    CU_ASSERT_EQUAL(g.gl_pathc, 2);
    long total = 0, found400 = 0, found123 = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        struct trace_stats t;
        read_trace(g.gl_pathv[i], &t);
        total += t.operators;
        found400 += t.operators == 400;
        found123 += t.operators == 123;
    }
    globfree(&g);
    CU_ASSERT_EQUAL(found400, 1);
    CU_ASSERT_EQUAL(found123, 1);
    CU_ASSERT_EQUAL(total, 523);
}

static void test_processes_without_cuda_or_driver(void)
{
    const char *const shim_env[] = {util_shim_preload_env(), NULL};
    struct result r;
    const char *const nocuda[] = {"build/tests/shim_nocuda", NULL};
    run(shim_env, nocuda, &r);
    CU_ASSERT_EQUAL(exit_code(&r), 0);
    CU_ASSERT_STRING_EQUAL(r.out, "ok\n");
    CU_ASSERT_STRING_EQUAL(r.err, "");
    const char *const t[] = {"/bin/true", NULL};
    run(shim_env, t, &r);
    CU_ASSERT_EQUAL(exit_code(&r), 0);
    /* no driver at all: the program fails exactly as it does without the shim */
    const char *const no_driver[] = {"LD_LIBRARY_PATH=/nonexistent", NULL};
    const char *const no_driver_shim[] = {"LD_LIBRARY_PATH=/nonexistent",
                                          util_shim_preload_env(), NULL};
    const char *const dl[] = {"build/tests/shim_dlopen", "10", NULL};
    struct result a, b;
    run(no_driver, dl, &a);
    run(no_driver_shim, dl, &b);
    CU_ASSERT_NOT_EQUAL(exit_code(&a), 0);
    CU_ASSERT_EQUAL(exit_code(&a), exit_code(&b));
    CU_ASSERT_STRING_EQUAL(a.out, b.out);
    CU_ASSERT_STRING_EQUAL(a.err, b.err);
}

static void test_mode_off_records_nothing(void)
{
    char trace_env[300], path[256];
    snprintf(path, sizeof path, "%s/off.trace", tmpdir);
    snprintf(trace_env, sizeof trace_env, "POS_TRACE=%s", path);
    const char *const env[] = {util_shim_preload_env(), trace_env, "POS_MODE=off", NULL};
    const char *const argv[] = {"build/posapp", "--model", "resnet18", "--requests", "2",
                                "--verify",     NULL};
    struct result r;
    run(env, argv, &r);
    CU_ASSERT_EQUAL(exit_code(&r), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"verified\":true"));
    CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
    /* and a bad mode is reported once and ignored */
    const char *const bad[] = {util_shim_preload_env(), "POS_MODE=fast", NULL};
    run(bad, argv, &r);
    CU_ASSERT_EQUAL(exit_code(&r), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "ignoring POS_MODE='fast'"));
}

/* Another interposer preloaded after the shim (or before it) wraps puts with
 * dlsym(RTLD_NEXT): it finds the C library's puts, not its own (no recursion), and RTLD_NEXT
 * and RTLD_DEFAULT agree on a driver function, as without the shim. */
static void test_interposer_loaded_after_the_shim(void)
{
    static const char want[] = "interposed (cuInit same): hello\n"
                               "interposed (cuInit same): again\n"
                               "launches 0\n";
    char after[1200], before[1200], alone[300];
    snprintf(after, sizeof after, "%s:build/tests/libinterpose.so", util_shim_preload_env());
    snprintf(before, sizeof before, "%s", util_shim_preload_env());
    const char *rt = getenv("POS_TEST_SAN_RUNTIME");
    snprintf(alone, sizeof alone, "LD_PRELOAD=%s%sbuild/tests/libinterpose.so",
             rt && *rt ? rt : "", rt && *rt ? ":" : "");
    /* the interposer first, then the shim: LD_PRELOAD=[runtime:]interposer:shim */
    char *shim = strstr(before, "build/libposshim.so");
    snprintf(shim, sizeof before - (size_t)(shim - before),
             "build/tests/libinterpose.so:build/libposshim.so");
    const char *const argv[] = {"build/tests/shim_puts", NULL};
    const char *const *envs[] = {(const char *const[]){after, NULL},
                                 (const char *const[]){before, NULL},
                                 (const char *const[]){alone, NULL}};
    for (size_t i = 0; i < 3; i++) {
        struct result r;
        run(envs[i], argv, &r);
        CU_ASSERT_EQUAL(exit_code(&r), 0);
        CU_ASSERT_STRING_EQUAL(r.out, want);
        if (exit_code(&r) != 0 || strcmp(r.out, want) != 0)
            fprintf(stderr, "%s: exit %d\n%s%s\n", envs[i][0], exit_code(&r), r.out, r.err);
    }
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("shim", suite_init, suite_clean);
    POS_ADD_TEST(s, test_posapp_every_launch_seen_once);
    POS_ADD_TEST(s, test_results_same_with_and_without_shim);
    POS_ADD_TEST(s, test_dlopen_and_runtime_style_programs);
    POS_ADD_TEST(s, test_graph_launch_is_one_operator);
    POS_ADD_TEST(s, test_fork_and_exec);
    POS_ADD_TEST(s, test_processes_without_cuda_or_driver);
    POS_ADD_TEST(s, test_mode_off_records_nothing);
    POS_ADD_TEST(s, test_thousands_of_short_threads_all_traced);
    POS_ADD_TEST(s, test_interposer_loaded_after_the_shim);
    POS_ADD_TEST(s, test_marked_completions_carry_the_devices_end_time);
    POS_ADD_TEST(s, test_failing_timing_events_keep_poll_times_and_say_so_once);
}
