/* Integration tests of the test bed with real processes: several posapp processes at once on
 * one shared virtual GPU (all modes of posapp, results verified), processes killed with
 * SIGKILL at random moments while another keeps working, independent and conflicting
 * instances, and posapp's handling of bad input. Needs build/posapp and build/sim/. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/cunit_main.h"

#define OUT_MAX 8192

struct proc {
    pid_t pid;
    int out_fd, err_fd;
    char out[OUT_MAX], err[OUT_MAX];
    int status;
};

static char instance[64];

/* Starts build/posapp with ARGV (NULL-terminated, without the program name) on virtual GPU
 * INST with extra environment ENV ("K=V" strings, NULL-terminated). */
static void posapp_start(struct proc *p, const char *inst, const char *const *env,
                         const char *const *argv)
{
    int out[2], err[2];
    CU_ASSERT_FATAL(pipe(out) == 0 && pipe(err) == 0);
    memset(p, 0, sizeof *p);
    p->pid = fork();
    CU_ASSERT_FATAL(p->pid >= 0);
    if (p->pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]);
        close(err[0]);
        setenv("LD_LIBRARY_PATH", "build/sim", 1);
        setenv("POS_SIM_INSTANCE", inst, 1);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        const char *args[64] = {"build/posapp"};
        int n = 1;
        for (int i = 0; argv[i] && n < 63; i++)
            args[n++] = argv[i];
        args[n] = NULL;
        execv("build/posapp", (char *const *)args);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    p->out_fd = out[0];
    p->err_fd = err[0];
}

static void drain(int fd, char *buf)
{
    size_t len = strlen(buf);
    ssize_t n;
    while (len < OUT_MAX - 1 && (n = read(fd, buf + len, OUT_MAX - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
}

/* Waits for P (at most TIMEOUT_S seconds, then kills it) and collects its output. */
static int posapp_wait(struct proc *p, int timeout_s)
{
    for (int i = 0; i < timeout_s * 100; i++) {
        if (waitpid(p->pid, &p->status, WNOHANG) == p->pid)
            goto done;
        usleep(10000);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &p->status, 0);
    fprintf(stderr, "posapp %d timed out\n", (int)p->pid);
done:
    drain(p->out_fd, p->out);
    drain(p->err_fd, p->err);
    close(p->out_fd);
    close(p->err_fd);
    return WIFEXITED(p->status) ? WEXITSTATUS(p->status) : 128 + WTERMSIG(p->status);
}

/* The raw text of KEY's value in a one-line JSON object, or "" if absent. */
static const char *json_value(const char *json, const char *key, char *buf, size_t len)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    buf[0] = '\0';
    if (!p)
        return buf;
    p += strlen(pat);
    size_t n = strcspn(p, ",}");
    if (n >= len)
        n = len - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

static int suite_init(void)
{
    snprintf(instance, sizeof instance, "test-testbed-%d", (int)getpid());
    return access("build/posapp", X_OK) == 0 ? 0 : -1;
}

static void test_four_verifying_processes_share_the_gpu(void)
{
    const char *const a0[] = {"--model", "resnet18", "--requests", "6", "--verify", NULL};
    const char *const a1[] = {"--model",  "mobilenet_v2", "--requests", "6",
                              "--verify", "--streams",    "2",          NULL};
    const char *const a2[] = {"--model",  "inception_v1", "--requests", "6",
                              "--verify", "--threads",    "2",          NULL};
    const char *const a3[] = {"--model", "resnet34",  "--requests", "4", "--verify",
                              "--ptds",  "--threads", "2",          NULL};
    const char *const *args[4] = {a0, a1, a2, a3};
    struct proc p[4];
    for (int i = 0; i < 4; i++)
        posapp_start(&p[i], instance, NULL, args[i]);
    for (int i = 0; i < 4; i++) {
        char v[64];
        int rc = posapp_wait(&p[i], 120);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_STRING_EQUAL(json_value(p[i].out, "verified", v, sizeof v), "true");
        if (rc != 0 || strcmp(v, "true") != 0)
            fprintf(stderr, "posapp %d: %s %s\n", i, p[i].out, p[i].err);
        CU_ASSERT(atoi(json_value(p[i].out, "launches", v, sizeof v)) > 0);
    }
}

static void test_open_loop_arrivals_and_slo(void)
{
    const char *const a[] = {
        "--model", "mobilenet_v1", "--requests", "30", "--arrival", "gamma:0.5:200",
        "--slo",   "1000",         "--seed",     "7",  NULL};
    const char *const env[] = {"POS_SIM_DEVICE=h200", "POS_SIM_MODE=mps", NULL};
    struct proc p;
    char inst[80], v[64];
    snprintf(inst, sizeof inst, "%s-mps", instance);
    posapp_start(&p, inst, env, a);
    CU_ASSERT_EQUAL(posapp_wait(&p, 60), 0);
    CU_ASSERT_STRING_EQUAL(json_value(p.out, "requests", v, sizeof v), "30");
    CU_ASSERT_DOUBLE_EQUAL(atof(json_value(p.out, "slo_attainment", v, sizeof v)), 1.0, 1e-9);
}

/* POS_SIM_TRACE: one line per kernel the process ran, with end times that rise on its stream
 * and span the run. */
static void test_device_trace_has_every_kernel(void)
{
    char path[128], env_trace[160], v[64];
    snprintf(path, sizeof path, "/tmp/pos-test-simtrace-%d", (int)getpid());
    snprintf(env_trace, sizeof env_trace, "POS_SIM_TRACE=%s", path);
    const char *const a[] = {"--model", "resnet18", "--requests", "3", NULL};
    const char *const env[] = {env_trace, NULL};
    struct proc p;
    char inst[80];
    snprintf(inst, sizeof inst, "%s-trace", instance);
    posapp_start(&p, inst, env, a);
    CU_ASSERT_EQUAL(posapp_wait(&p, 60), 0);
    long launches = atol(json_value(p.out, "launches", v, sizeof v));
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[256];
    long n = 0, rising = 1;
    long long prev = 0;
    while (fgets(line, sizeof line, f)) {
        char stream[64];
        long long end;
        if (sscanf(line, "kernel %63s %lld", stream, &end) != 2)
            continue;
        rising &= end >= prev;
        prev = end;
        n++;
    }
    fclose(f);
    unlink(path);
    CU_ASSERT(launches > 0);
    CU_ASSERT_EQUAL(n, launches);
    CU_ASSERT(rising);
}

/* Victims launch without pause and are killed with SIGKILL at random moments, some of them
 * likely inside the device lock; the survivor must finish and verify, and a new process
 * afterwards must work too. */
static void test_kill9_never_wedges_the_device(void)
{
    const char *const survivor_args[] = {"--model", "resnet18", "--requests",
                                         "400",     "--verify", NULL};
    const char *const victim_args[] = {
        "--model", "mobilenet_v2", "--requests", "100000", "--streams", "3", NULL};
    const char *const burst_args[] = {"--microbench", "10000000", NULL};
    struct proc survivor;
    posapp_start(&survivor, instance, NULL, survivor_args);
    srand((unsigned)time(NULL));
    for (int round = 0; round < 16; round++) {
        struct proc victim;
        posapp_start(&victim, instance, NULL, round % 2 ? victim_args : burst_args);
        usleep(20000 + (useconds_t)(rand() % 80000));
        kill(victim.pid, SIGKILL);
        posapp_wait(&victim, 10);
        CU_ASSERT(WIFSIGNALED(victim.status) && WTERMSIG(victim.status) == SIGKILL);
    }
    char v[64];
    int rc = posapp_wait(&survivor, 180);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(json_value(survivor.out, "verified", v, sizeof v), "true");
    if (rc)
        fprintf(stderr, "survivor: %s %s\n", survivor.out, survivor.err);
    struct proc after;
    const char *const after_args[] = {"--model", "resnet18", "--requests", "3", "--verify", NULL};
    posapp_start(&after, instance, NULL, after_args);
    CU_ASSERT_EQUAL(posapp_wait(&after, 60), 0);
    CU_ASSERT_STRING_EQUAL(json_value(after.out, "verified", v, sizeof v), "true");
}

static void test_conflicting_instance_is_refused(void)
{
    char inst[80];
    snprintf(inst, sizeof inst, "%s-conflict", instance);
    const char *const env_a[] = {"POS_SIM_DEVICE=h200", NULL};
    const char *const env_b[] = {"POS_SIM_DEVICE=rtx3080", NULL};
    const char *const a_args[] = {"--model", "resnet50", "--requests", "400", NULL};
    const char *const b_args[] = {"--model", "resnet18", "--requests", "1", NULL};
    struct proc a, b;
    posapp_start(&a, inst, env_a, a_args);
    usleep(300000);
    posapp_start(&b, inst, env_b, b_args);
    int rc = posapp_wait(&b, 30);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.err, "in use as h200"));
    kill(a.pid, SIGKILL);
    posapp_wait(&a, 10);
    /* once its only user is gone, the instance takes the next process's settings */
    struct proc c;
    posapp_start(&c, inst, env_b, b_args);
    CU_ASSERT_EQUAL(posapp_wait(&c, 30), 0);
}

static void test_bad_input_gives_one_line_errors(void)
{
    const char *const cases[][7] = {
        {"--model", "no_such_model", NULL},
        {"--model", "resnet18", "--arrival", "poisson:-1", NULL},
        {"--model", "resnet18", "--batch", "0", NULL},
        {"--bogus-option", NULL},
        {"--model", "resnet18", "--ptds", "--streams", "2", NULL},
        {"--model", "resnet18", "--real", "--verify", NULL},
        {"--model", "resnet18", "--real-module", "x.fatbin", NULL},
        {"--model", "resnet18", "--duration", "1", "--arrival", "poisson:10", NULL},
        {"--model", "resnet18", "--duration", "0", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct proc p;
        posapp_start(&p, instance, NULL, cases[i]);
        CU_ASSERT_NOT_EQUAL(posapp_wait(&p, 30), 0);
        CU_ASSERT_STRING_EQUAL(p.out, "");
        CU_ASSERT_EQUAL(strncmp(p.err, "posapp: ", 8), 0);
        char *nl = strchr(p.err, '\n');
        CU_ASSERT(nl != NULL && nl[1] == '\0');
    }
    /* a bad device setting is the driver's error, reported by posapp as a driver failure */
    const char *const env[] = {"POS_SIM_DEVICE=gtx9999", NULL};
    const char *const args[] = {"--model", "resnet18", "--requests", "1", NULL};
    struct proc p;
    posapp_start(&p, instance, env, args);
    CU_ASSERT_NOT_EQUAL(posapp_wait(&p, 30), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.err, "POS_SIM_DEVICE='gtx9999'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.err, "posapp: cuInit failed"));
}

/* The simulated driver loses no memory: posapp in its modes (streams, threads, the per-thread
 * default stream) ends with nothing a leak checker cannot reach. Under LeakSanitizer's
 * runtime, which make test names in POS_TEST_LSAN_RUNTIME (a sanitized build checks every
 * process itself and names none). */
static void test_driver_leaks_nothing(void)
{
    const char *lsan = getenv("POS_TEST_LSAN_RUNTIME");
    if (!lsan || !*lsan || access(lsan, R_OK) != 0) {
        fprintf(stderr, "(no LeakSanitizer runtime: not checked) ");
        return;
    }
    static char preload[600];
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", lsan);
    /* a lost object must not pass for reachable through a stale copy on a stack */
    const char *const env[] = {preload, "LSAN_OPTIONS=use_stacks=0:use_registers=0:exitcode=23",
                               NULL};
    static const char *const cases[][12] = {
        {"--model", "resnet18", "--requests", "3", "--verify", NULL},
        {"--model", "mobilenet_v2", "--requests", "3", "--streams", "2", "--threads", "2", NULL},
        {"--model", "resnet34", "--requests", "2", "--ptds", "--threads", "2", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct proc p;
        posapp_start(&p, instance, env, cases[i]);
        int rc = posapp_wait(&p, 60);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_PTR_NULL(strstr(p.err, "LeakSanitizer"));
        if (rc != 0 || strstr(p.err, "LeakSanitizer"))
            fprintf(stderr, "posapp %s: exit %d\n%s\n", cases[i][1], rc, p.err);
    }
}

/* --duration ends a closed loop after S seconds, --requests capping it; --real is refused by
 * the simulated driver with a line that says why. */
static void test_duration_and_real_on_the_simulator(void)
{
    const char *const a[] = {"--model",    "resnet50", "--duration", "0.3",
                             "--requests", "100000",   NULL};
    struct proc p;
    char v[64];
    posapp_start(&p, instance, NULL, a);
    CU_ASSERT_EQUAL(posapp_wait(&p, 60), 0);
    long n = atol(json_value(p.out, "requests", v, sizeof v));
    CU_ASSERT(n > 0 && n < 100000);
    double span = atof(json_value(p.out, "makespan_s", v, sizeof v));
    CU_ASSERT(span >= 0.25 && span < 1.5);

    const char *const cap[] = {"--model", "resnet18", "--duration", "30", "--requests", "7", NULL};
    posapp_start(&p, instance, NULL, cap);
    CU_ASSERT_EQUAL(posapp_wait(&p, 60), 0);
    CU_ASSERT_STRING_EQUAL(json_value(p.out, "requests", v, sizeof v), "7");

    /* any file that is not a CUDA image stands in for the fatbin */
    const char *const real[] = {
        "--model", "resnet18", "--real", "--real-module", "sim/models/resnet18.model", NULL};
    posapp_start(&p, instance, NULL, real);
    CU_ASSERT_EQUAL(posapp_wait(&p, 30), 1);
    CU_ASSERT_STRING_EQUAL(p.out, "");
    CU_ASSERT_PTR_NOT_NULL(strstr(p.err, "--real needs an NVIDIA GPU"));
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("testbed", suite_init, NULL);
    POS_ADD_TEST(s, test_four_verifying_processes_share_the_gpu);
    POS_ADD_TEST(s, test_open_loop_arrivals_and_slo);
    POS_ADD_TEST(s, test_device_trace_has_every_kernel);
    POS_ADD_TEST(s, test_kill9_never_wedges_the_device);
    POS_ADD_TEST(s, test_conflicting_instance_is_refused);
    POS_ADD_TEST(s, test_bad_input_gives_one_line_errors);
    POS_ADD_TEST(s, test_driver_leaks_nothing);
    POS_ADD_TEST(s, test_duration_and_real_on_the_simulator);
}
