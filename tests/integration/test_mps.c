/* Integration tests of SM shares through MPS and of what posd learns of its device: posd fills
 * its device (SMs, per-SM limits, MPS) from the simulated driver the clients use; a rule's
 * sm_share reaches the shim in the WELCOME and is in CUDA_MPS_ACTIVE_THREAD_PERCENTAGE before
 * the driver creates the client's first context, which the simulated driver's mps mode then
 * confines to its SMs; a user's smaller share is kept, a larger one lowered, one inherited from
 * a parent's shim dropped; a reload does not change a running client's share; on a time-sliced
 * device a share is ignored with one log line. Real processes: posd, the shim, posapp and
 * tests/shim/prog_mps.c on the simulated driver. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/device_presets.h"
#include "sim/gpu_model.h"
#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX 16384
#define SHARE   25 /* the rule's share in these tests */

static struct suite suite;
static int ninstance;

/* A fresh virtual GPU of PRESET in MODE for the next posd and its clients. */
static void use_device(const char *preset, const char *mode)
{
    char inst[96];
    snprintf(inst, sizeof inst, "%s-%d", suite.instance, ++ninstance);
    setenv("POS_SIM_INSTANCE", inst, 1);
    setenv("POS_SIM_DEVICE", preset, 1);
    setenv("POS_SIM_MODE", mode, 1);
}

static void write_conf(const char *text)
{
    FILE *f = fopen(suite.conf, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* Starts posd; returns how far its log was before it (what this posd writes comes after). */
static size_t posd_start(void)
{
    static char log[OUT_MAX * 4];
    log[0] = '\0';
    util_read_file(suite.log, log, sizeof log);
    size_t before = strlen(log);
    CU_ASSERT_FATAL(suite_posd_start(&suite, "priority") > 0);
    CU_ASSERT_EQUAL(access(suite.sock, F_OK), 0);
    return before;
}

/* posd's log from offset BEFORE on, in BUF. */
static const char *posd_log_since(size_t before, char *buf, size_t cap)
{
    util_read_file(suite.log, buf, cap);
    return strlen(buf) >= before ? buf + before : buf;
}

/* Runs prog_mps under the shim as app APP with extra environment EXTRA ("NAME=VALUE" or NULL;
 * a second one in EXTRA2), its output in OUT. Returns its exit status. */
static int run_prog(const char *app, const char *extra, const char *extra2, char *out, size_t cap)
{
    char out_path[192];
    snprintf(out_path, sizeof out_path, "%s/%s.out", suite.dir, app);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        setenv("POS_SIM_DEBUG", "1", 1); /* the driver says what it found at cuInit */
        setenv("LD_PRELOAD", util_shim_preload(), 1);
        setenv("POS_APP", app, 1);
        setenv("POS_MODE", "scheduled", 1);
        unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
        unsetenv("POS_SHIM_SM_SHARE");
        if (extra)
            putenv((char *)extra);
        if (extra2)
            putenv((char *)extra2);
        execl("build/tests/shim_mps", "shim_mps", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    for (int i = 0; i < 3000 && waitpid(pid, &st, WNOHANG) != pid; i++)
        usleep(10000);
    if (kill(pid, 0) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    util_read_file(out_path, out, cap);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The word after "KEY " in TEXT, in BUF ("" if absent). */
static const char *word(const char *text, const char *key, char *buf, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "%s ", key);
    const char *p = strstr(text, pat);
    buf[0] = '\0';
    if (p)
        sscanf(p + strlen(pat), "%31s", buf);
    (void)cap;
    return buf;
}

static uint32_t preset_sms(const char *preset)
{
    struct sim_dev_params p;
    CU_ASSERT_FATAL(sim_preset_get(preset, &p) == 0);
    return p.num_sms;
}

static int suite_init(void)
{
    unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    return suite_open(&suite, "mps", NULL) == 0 && access("build/posd", X_OK) == 0 &&
                   access("build/tests/shim_mps", X_OK) == 0 && access("build/posapp", X_OK) == 0
               ? 0
               : -1;
}

static int suite_clean(void)
{
    /* a client killed with SIGKILL leaves its virtual GPU's segment when it was the last user */
    for (int i = 1; i <= ninstance; i++) {
        char inst[96];
        snprintf(inst, sizeof inst, "%s-%d", suite.instance, i);
        util_sim_segment_remove(inst);
    }
    return suite_close(&suite);
}

/* posd's device is the simulated driver's: its SM count and per-SM limits are the preset's
 * (two presets, so no figure is posd's own), and its mode decides whether processes run at
 * once. */
static void test_posd_learns_its_device_from_the_driver(void)
{
    static const char *const presets[] = {"rtx3080", "h200"};
    static const char *const modes[] = {"mps", "timeslice"};
    write_conf("");
    for (int i = 0; i < 2; i++) {
        use_device(presets[i], modes[i]);
        struct sim_dev_params p;
        CU_ASSERT_FATAL(sim_preset_get(presets[i], &p) == 0);
        size_t before = posd_start();
        util_posd_stop(&suite.posd, SIGTERM);
        char log[OUT_MAX * 4], want[256];
        const char *mine = posd_log_since(before, log, sizeof log);
        snprintf(want, sizeof want,
                 "device 0: %s, %u SMs, %u threads/SM, %u blocks/SM, %u KiB shared "
                 "memory/SM; simulated driver in %s mode",
                 p.name, p.num_sms, p.max_threads_per_sm, p.max_blocks_per_sm, p.smem_per_sm / 1024,
                 modes[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(mine, want));
        if (!strstr(mine, want))
            fprintf(stderr, "want: %s\nposd log:\n%s\n", want, mine);
    }
}

/* Without a driver (libcuda.so.1 not found) posd says so once and assumes its defaults. */
static void test_posd_without_a_driver_assumes_defaults(void)
{
    write_conf("");
    setenv("LD_LIBRARY_PATH", "/nonexistent", 1);
    size_t before = posd_start();
    util_posd_stop(&suite.posd, SIGTERM);
    setenv("LD_LIBRARY_PATH", "build/sim", 1);
    char log[OUT_MAX * 4];
    const char *mine = posd_log_since(before, log, sizeof log);
    CU_ASSERT_EQUAL(util_count(mine, "device 0: no CUDA driver"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(mine, "assuming the defaults 6 SMs"));
}

/* On NVIDIA's driver (here: no simulated one, so posd takes the real path) processes run at
 * once only under MPS: posd finds a control daemon by a live socket named control in
 * CUDA_MPS_PIPE_DIRECTORY; a socket nobody listens on any more (a daemon that died) is none.
 * With a daemon, shares apply; without one, they are ignored with one line. */
static void test_posd_finds_an_mps_control_daemon(void)
{
    char pipe_dir[96], want[320];
    /* the suite's directory is short: /tmp/... */
    snprintf(pipe_dir, sizeof pipe_dir, "%.80s/mps-pipe", suite.dir);
    mkdir(pipe_dir, 0700);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/control", pipe_dir);
    unlink(a.sun_path);
    CU_ASSERT_FATAL(bind(s, (struct sockaddr *)&a, sizeof a) == 0 && listen(s, 4) == 0);
    write_conf("[rule capped]\nmatch_app = capped\nsm_share = 25\n");
    setenv("LD_LIBRARY_PATH", "/nonexistent", 1);
    setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir, 1);
    char log[OUT_MAX * 4];
    size_t before = posd_start();
    util_posd_stop(&suite.posd, SIGTERM);
    const char *mine = posd_log_since(before, log, sizeof log);
    snprintf(want, sizeof want, "; MPS control daemon at %s: processes run at once", pipe_dir);
    CU_ASSERT_EQUAL(util_count(mine, want), 1);
    CU_ASSERT_EQUAL(util_count(mine, "sm_share ignored"), 0);
    close(s); /* the socket file stays, as a dead daemon's does */
    before = posd_start();
    util_posd_stop(&suite.posd, SIGTERM);
    mine = posd_log_since(before, log, sizeof log);
    snprintf(want, sizeof want, "; no MPS control daemon at %s: processes are time-sliced",
             pipe_dir);
    CU_ASSERT_EQUAL(util_count(mine, want), 1);
    CU_ASSERT_EQUAL(util_count(mine, "sm_share ignored (rule capped)"), 1);
    unsetenv("CUDA_MPS_PIPE_DIRECTORY");
    setenv("LD_LIBRARY_PATH", "build/sim", 1);
}

/* mps mode, rule sm_share = 25: the share is in the environment when the driver's cuInit runs
 * (the simulated driver says what it saw there), before any context; the primary context is limited
 * to ceil(25% of 68) = 17 SMs, and a kernel over the whole device takes 68/17 = 4x as long as in a
 * process no rule limits. */
static void test_share_is_in_place_before_the_first_context(void)
{
    use_device("rtx3080", "mps");
    write_conf("[rule capped]\nmatch_app = capped\nsm_share = 25\n");
    size_t before = posd_start();
    char out[OUT_MAX], w[32];
    CU_ASSERT_EQUAL(run_prog("capped", NULL, NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(word(out, "env_before_init", w, sizeof w), "-");
    CU_ASSERT_STRING_EQUAL(word(out, "env_after_init", w, sizeof w), "25");
    CU_ASSERT_EQUAL(util_count(out, "cuInit in mps mode: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\n"),
                    1);
    uint32_t cap = sim_gpu_sms_of_share(preset_sms("rtx3080"), SHARE);
    CU_ASSERT_EQUAL(util_number(out, "sm_limit"), cap);
    long long capped_us = util_number(out, "kernel_us");
    char free_out[OUT_MAX];
    CU_ASSERT_EQUAL(run_prog("free", NULL, NULL, free_out, sizeof free_out), 0);
    CU_ASSERT_STRING_EQUAL(word(free_out, "env_after_init", w, sizeof w), "-");
    CU_ASSERT_EQUAL(util_number(free_out, "sm_limit"), preset_sms("rtx3080"));
    long long free_us = util_number(free_out, "kernel_us");
    double ratio = free_us > 0 ? (double)capped_us / free_us : 0;
    CU_ASSERT(ratio > 0.9 * 68 / cap && ratio < 1.1 * 68 / cap);
    util_posd_stop(&suite.posd, SIGTERM);
    char log[OUT_MAX * 4];
    const char *mine = posd_log_since(before, log, sizeof log);
    CU_ASSERT_EQUAL(util_count(mine, "app 'capped' class latency priority 10 sm_share 25%"), 1);
    if (ratio <= 0.9 * 68 / cap || ratio >= 1.1 * 68 / cap)
        fprintf(stderr, "capped %lld us, free %lld us\n%s\n%s\nposd log:\n%s\n", capped_us, free_us,
                out, free_out, mine);
}

/* The admin's share is a ceiling: a user's smaller CUDA_MPS_ACTIVE_THREAD_PERCENTAGE stays, a
 * larger one is lowered to the share; one the parent's shim set (POS_SHIM_SM_SHARE says so) is
 * not the user's: a process no rule gives a share runs without it. */
static void test_user_share_smaller_kept_larger_lowered_inherited_dropped(void)
{
    use_device("rtx3080", "mps");
    write_conf("[rule capped]\nmatch_app = capped\nsm_share = 25\n");
    posd_start();
    uint32_t sms = preset_sms("rtx3080");
    char out[OUT_MAX], w[32];
    CU_ASSERT_EQUAL(
        run_prog("capped", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=10", NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(word(out, "env_after_init", w, sizeof w), "10");
    CU_ASSERT_EQUAL(util_number(out, "sm_limit"), sim_gpu_sms_of_share(sms, 10));
    CU_ASSERT_EQUAL(
        run_prog("capped", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=80", NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(word(out, "env_after_init", w, sizeof w), "25");
    CU_ASSERT_EQUAL(util_number(out, "sm_limit"), sim_gpu_sms_of_share(sms, SHARE));
    CU_ASSERT_EQUAL(run_prog("free", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "POS_SHIM_SM_SHARE=25",
                             out, sizeof out),
                    0);
    CU_ASSERT_STRING_EQUAL(word(out, "env_after_init", w, sizeof w), "-");
    CU_ASSERT_EQUAL(util_number(out, "sm_limit"), sms);
    /* the user's own 25 for a process without a rule is the user's business */
    CU_ASSERT_EQUAL(run_prog("free", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", NULL, out, sizeof out),
                    0);
    CU_ASSERT_STRING_EQUAL(word(out, "env_after_init", w, sizeof w), "25");
    util_posd_stop(&suite.posd, SIGTERM);
}

/* A reload that changes a running client's share says the client keeps the share it has (its
 * contexts exist): posd never hands a running process a new one. */
static void test_reload_keeps_a_running_clients_share(void)
{
    use_device("rtx3080", "mps");
    write_conf("[rule capped]\nmatch_app = capped\nsm_share = 25\n");
    size_t before = posd_start();
    pid_t app = fork();
    CU_ASSERT_FATAL(app >= 0);
    if (app == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        setenv("LD_PRELOAD", util_shim_preload(), 1);
        setenv("POS_APP", "capped", 1);
        execl("build/posapp", "posapp", "--model", "resnet18", "--requests", "1000000",
              (char *)NULL);
        _exit(127);
    }
    char log[OUT_MAX * 4];
    int seen = 0;
    for (int i = 0; i < 500 && !seen; i++, usleep(10000))
        seen = strstr(posd_log_since(before, log, sizeof log), "sm_share 25%") != NULL;
    CU_ASSERT_FATAL(seen);
    write_conf("[rule capped]\nmatch_app = capped\nsm_share = 50\n");
    kill(suite.posd, SIGHUP);
    int reloaded = 0;
    for (int i = 0; i < 500 && !reloaded; i++, usleep(10000))
        reloaded =
            strstr(posd_log_since(before, log, sizeof log), "configuration reloaded") != NULL;
    kill(app, SIGKILL);
    waitpid(app, NULL, 0);
    util_posd_stop(&suite.posd, SIGTERM);
    const char *mine = posd_log_since(before, log, sizeof log);
    CU_ASSERT(reloaded);
    CU_ASSERT_EQUAL(util_count(mine, "sm_share is now 50% but it keeps 25%"), 1);
}

/* Time-sliced device: a configuration with shares says once that they are ignored, however
 * many clients come, and no client's environment gets one. */
static void test_share_ignored_with_one_line_when_time_sliced(void)
{
    use_device("rtx3080", "timeslice");
    write_conf("[rule capped]\nmatch_app = capped\nsm_share = 25\n");
    size_t before = posd_start();
    char out[OUT_MAX], w[32];
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(run_prog("capped", NULL, NULL, out, sizeof out), 0);
        CU_ASSERT_STRING_EQUAL(word(out, "env_after_init", w, sizeof w), "-");
        CU_ASSERT_EQUAL(util_number(out, "sm_limit"), preset_sms("rtx3080"));
    }
    util_posd_stop(&suite.posd, SIGTERM);
    char log[OUT_MAX * 4];
    const char *mine = posd_log_since(before, log, sizeof log);
    CU_ASSERT_EQUAL(util_count(mine, "sm_share ignored (rule capped)"), 1);
    CU_ASSERT_EQUAL(util_count(mine, "sm_share"), 1);
    CU_ASSERT_EQUAL(util_count(mine, "app 'capped'"), 2);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("mps", suite_init, suite_clean);
    POS_ADD_TEST(s, test_posd_learns_its_device_from_the_driver);
    POS_ADD_TEST(s, test_posd_without_a_driver_assumes_defaults);
    POS_ADD_TEST(s, test_posd_finds_an_mps_control_daemon);
    POS_ADD_TEST(s, test_share_is_in_place_before_the_first_context);
    POS_ADD_TEST(s, test_user_share_smaller_kept_larger_lowered_inherited_dropped);
    POS_ADD_TEST(s, test_reload_keeps_a_running_clients_share);
    POS_ADD_TEST(s, test_share_ignored_with_one_line_when_time_sliced);
}
