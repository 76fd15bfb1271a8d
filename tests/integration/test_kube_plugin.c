/* pos-device-plugin (kube/plugin.c) against a kubelet on grpcio (tests/kube/fake_kubelet.py)
 * and a real posd: registration and its fields, ListAndWatch's health while posd is killed,
 * restarted, stopped and continued, Allocate's edits (device nodes made with mknod in a device
 * directory of the test's own) and CDI names, unknown share IDs refused, GetPreferredAllocation,
 * re-registration within 1 s of a kubelet restart, hostile requests (malformed, 8 MiB, unknown
 * fields, cut mid-stream and mid-frame) refused while the plugin serves on, and SIGTERM. Every
 * reply is also read on the wire against upstream's field numbers (the fake's "wire"). */
#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "tests/cunit_main.h"
#include "tests/integration/kube.h"
#include "tests/integration/suite.h"

#define SHARES 4

static struct suite S;
static const char *missing;
static char devdir[192], shim[600];

/* A kubelet directory, its fake kubelet and the plugin registered there. */
struct node {
    char dir[192], log[224], fake_log[224];
    struct kube_fake k;
    pid_t plugin;
};
static struct node main_node;

static int skipped(void)
{
    if (!missing)
        return 0;
    fprintf(stderr, "\n  %s: skipped\n", missing);
    return 1;
}

static int make_node(const char *name, unsigned major, unsigned minor)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", devdir, name);
    return mknod(p, S_IFCHR | 0600, makedev(major, minor));
}

/* Starts the fake kubelet in N's directory, then the plugin with EXTRA (NULL-terminated) after
 * the test's options, and waits for the registration, whose line goes to REG. */
static int node_start(struct node *n, const char *name, const char *const *extra, char *reg,
                      size_t cap)
{
    snprintf(n->dir, sizeof n->dir, "%s/%s", S.dir, name);
    snprintf(n->log, sizeof n->log, "%s/%s-plugin.log", S.dir, name);
    snprintf(n->fake_log, sizeof n->fake_log, "%s/%s-kubelet.log", S.dir, name);
    n->plugin = -1;
    if (mkdir(n->dir, 0700) < 0 && errno != EEXIST)
        return -1;
    const char *const fargv[] = {"tests/kube/fake_kubelet.py", n->dir, NULL};
    char line[4096];
    if (kube_fake_start(&n->k, fargv, n->fake_log) < 0 ||
        kube_fake_wait(&n->k, "\"ready\"", line, sizeof line, 20) < 0)
        return -1;
    char shares[8];
    snprintf(shares, sizeof shares, "%d", SHARES);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(n->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 2);
        const char *argv[32] = {"pos-device-plugin", "--kubelet-dir", n->dir, "--shares", shares,
                                "--socket", S.sock, "--shim", shim, "--dev-dir", devdir};
        int k = 11;
        for (int i = 0; extra && extra[i] && k < 31; i++)
            argv[k++] = extra[i];
        argv[k] = NULL;
        execv("build/pos-device-plugin", (char *const *)argv);
        _exit(127);
    }
    n->plugin = pid;
    return kube_fake_wait(&n->k, "\"event\": \"register\"", reg, cap, 10);
}

static void node_stop(struct node *n)
{
    if (n->plugin > 0) {
        kill(n->plugin, SIGKILL);
        waitpid(n->plugin, NULL, 0);
        n->plugin = -1;
    }
    kube_fake_stop(&n->k);
}

/* Sends the fake CMD and waits for its reply into LINE. */
static int ask(struct node *n, const char *cmd, char *line, size_t cap)
{
    if (kube_fake_send(&n->k, cmd) < 0)
        return -1;
    return kube_fake_wait(&n->k, "\"reply\"", line, cap, 30);
}

/* Waits up to TIMEOUT_S for a device list of the fake with all its shares in HEALTH. */
static int wait_devices(struct node *n, const char *health, double timeout_s, char *line,
                        size_t cap)
{
    char want[64];
    snprintf(want, sizeof want, "\"%s\": %d", health, 2 * SHARES);
    double end = util_now() + timeout_s * util_time_scale();
    while (util_now() < end)
        if (kube_fake_wait(&n->k, "\"event\": \"devices\"", line, cap, end - util_now()) == 0 &&
            strstr(line, want))
            return 0;
    return -1;
}

static char registration[4096];

static int suite_init(void)
{
    missing = kube_fakes_missing();
    if (suite_open(&S, "kube-plugin", "[daemon]\nlog_level = info\n") < 0)
        return -1;
    if (missing)
        return 0;
    snprintf(devdir, sizeof devdir, "%s/dev", S.dir);
    if (!realpath("build/libposshim.so", shim) || mkdir(devdir, 0700) < 0)
        return -1;
    /* the NVIDIA driver's numbers: GPUs are 195:N, the control node 195:255 */
    if (make_node("nvidia0", 195, 0) < 0 || make_node("nvidia1", 195, 1) < 0 ||
        make_node("nvidiactl", 195, 255) < 0) {
        missing = "cannot mknod the test's device nodes (not root?)";
        return 0;
    }
    if (suite_posd_start(&S, "fifo") <= 0 || access(S.sock, F_OK) != 0)
        return -1;
    return node_start(&main_node, "kubelet", NULL, registration, sizeof registration) < 0 ? -1
                                                                                         : 0;
}

static int suite_clean(void)
{
    node_stop(&main_node);
    return suite_close(&S);
}

static void test_registration_has_the_right_fields(void)
{
    if (skipped())
        return;
    const char *r = registration;
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"version\": \"v1beta1\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"endpoint\": \"pos.sock\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"resource_name\": \"pos.dev/gpu\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"options\": {\"get_preferred_allocation_available\": true}"));
    /* the kubelet's dial-back inside Register was answered (no deadlock) */
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"plugin_options\": {\"get_preferred_allocation_available\": true}"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"wire\": \"ok\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"plugin_options_wire\": \"ok\""));
    CU_ASSERT_PTR_NULL(strstr(r, "\"error\""));
    /* answered at once, not after Register's own timeout: the plugin's loop never waits on
     * the kubelet */
    const char *p = strstr(r, "\"dial_back_ms\": ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT(strtod(p + strlen("\"dial_back_ms\": "), NULL) < 1000.0 * util_time_scale());
}

static void test_list_and_watch_advertises_every_share_healthy(void)
{
    if (skipped())
        return;
    char line[8192];
    CU_ASSERT_EQUAL_FATAL(wait_devices(&main_node, "healthy", 5, line, sizeof line), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "\"wire\": \"ok\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "\"ids\": [\"gpu0-0\", \"gpu0-1\", \"gpu0-2\", \"gpu0-3\", "
                                        "\"gpu1-0\", \"gpu1-1\", \"gpu1-2\", \"gpu1-3\"]"));
}

static void test_health_follows_posd_killed_and_restarted(void)
{
    if (skipped())
        return;
    char line[8192];
    util_posd_stop(&S.posd, SIGKILL);
    double t0 = util_now();
    CU_ASSERT_EQUAL(wait_devices(&main_node, "unhealthy", 5, line, sizeof line), 0);
    CU_ASSERT(util_now() - t0 < 3.0 * util_time_scale()); /* a check each second */
    CU_ASSERT_FATAL(suite_posd_start(&S, "fifo") > 0);
    CU_ASSERT_EQUAL(wait_devices(&main_node, "healthy", 5, line, sizeof line), 0);
}

static void test_health_follows_posd_stopped_and_continued(void)
{
    if (skipped())
        return;
    char line[8192];
    /* a stopped posd still accepts connections: only an unanswered request tells */
    CU_ASSERT_EQUAL_FATAL(kill(S.posd, SIGSTOP), 0);
    double t0 = util_now();
    int rc = wait_devices(&main_node, "unhealthy", 6, line, sizeof line);
    double took = util_now() - t0;
    kill(S.posd, SIGCONT);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(took < 4.0 * util_time_scale());
    CU_ASSERT_EQUAL(wait_devices(&main_node, "healthy", 5, line, sizeof line), 0);
}

/* Whether the fake's JSON line LINE holds TEXT (as json.dumps writes it). */
static int json_has(const char *line, const char *text)
{
    return strstr(line, text) != NULL;
}

static void test_allocate_answers_the_edits_for_the_gpus_named(void)
{
    if (skipped())
        return;
    char line[16384], want[1024];
    CU_ASSERT_EQUAL_FATAL(ask(&main_node,
                              "{\"cmd\": \"allocate\", \"containers\": [[\"gpu0-1\", \"gpu0-3\"], "
                              "[\"gpu1-2\"], [\"gpu0-0\", \"gpu1-0\"]]}",
                              line, sizeof line),
                          0);
    CU_ASSERT(json_has(line, "\"code\": \"OK\""));
    CU_ASSERT(json_has(line, "\"wire\": \"ok\""));
    /* container 1: GPU 0 only; container 2: GPU 1 only; container 3: both */
    char *c1 = strstr(line, "\"container_responses\": [{");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    char *c2 = strstr(c1 + 30, "}, {\"envs\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    char *c3 = strstr(c2 + 10, "}, {\"envs\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c3);
    *c2 = *c3 = '\0';
    char *containers[] = {c1, c2 + 1, c3 + 1};
    for (size_t i = 0; i < 3; i++) {
        const char *c = containers[i];
        CU_ASSERT(json_has(c, "\"LD_PRELOAD\": \"/opt/pos/lib/libposshim.so\""));
        CU_ASSERT(json_has(c, "\"POS_SOCKET\": \"/run/posd/posd.sock\""));
        snprintf(want, sizeof want,
                 "{\"container_path\": \"/opt/pos/lib/libposshim.so\", \"host_path\": \"%s\", "
                 "\"read_only\": true}",
                 shim);
        CU_ASSERT(json_has(c, want));
        snprintf(want, sizeof want, "{\"container_path\": \"/run/posd\", \"host_path\": \"%s\"}",
                 S.dir);
        CU_ASSERT(json_has(c, want));
        snprintf(want, sizeof want,
                 "{\"container_path\": \"%s/nvidiactl\", \"host_path\": \"%s/nvidiactl\", "
                 "\"permissions\": \"rw\"}",
                 devdir, devdir);
        CU_ASSERT(json_has(c, want));
    }
    char n0[256], n1[256];
    snprintf(n0, sizeof n0, "\"host_path\": \"%s/nvidia0\"", devdir);
    snprintf(n1, sizeof n1, "\"host_path\": \"%s/nvidia1\"", devdir);
    CU_ASSERT(json_has(c1, n0) && !json_has(c1, n1));
    CU_ASSERT(!json_has(c2 + 1, n0) && json_has(c2 + 1, n1));
    CU_ASSERT(json_has(c3 + 1, n0) && json_has(c3 + 1, n1));
    CU_ASSERT(!json_has(line, "cdi_devices"));
}

static void test_unknown_share_ids_are_refused(void)
{
    if (skipped())
        return;
    static const char *const bad[] = {"gpu2-0", "gpu0-4", "gpu00-1", "gpu0-1x", "nvidia0", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[256], line[4096], want[64];
        snprintf(cmd, sizeof cmd,
                 "{\"cmd\": \"allocate\", \"containers\": [[\"gpu0-0\"], [\"%s\"]]}", bad[i]);
        CU_ASSERT_EQUAL_FATAL(ask(&main_node, cmd, line, sizeof line), 0);
        CU_ASSERT(json_has(line, "\"code\": \"INVALID_ARGUMENT\""));
        snprintf(want, sizeof want, "unknown device ID '%s'", bad[i]);
        CU_ASSERT(json_has(line, want));
    }
}

static void test_preferred_allocation_packs_shares_onto_the_fewest_gpus(void)
{
    if (skipped())
        return;
    char line[4096];
    CU_ASSERT_EQUAL_FATAL(
        ask(&main_node,
            "{\"cmd\": \"preferred\", \"requests\": ["
            "{\"available\": [\"gpu0-0\", \"gpu0-1\", \"gpu1-0\", \"gpu1-1\", \"gpu1-2\"], "
            "\"size\": 3},"
            "{\"available\": [\"gpu0-1\", \"gpu1-0\", \"gpu1-1\", \"gpu1-2\"], "
            "\"must\": [\"gpu0-0\"], \"size\": 2}]}",
            line, sizeof line),
        0);
    CU_ASSERT(json_has(line, "\"code\": \"OK\""));
    CU_ASSERT(json_has(line, "\"wire\": \"ok\""));
    CU_ASSERT(json_has(line, "{\"deviceIDs\": [\"gpu1-0\", \"gpu1-1\", \"gpu1-2\"]}"));
    CU_ASSERT(json_has(line, "{\"deviceIDs\": [\"gpu0-0\", \"gpu0-1\"]}"));
}

static void test_options_and_pre_start(void)
{
    if (skipped())
        return;
    char line[4096];
    CU_ASSERT_EQUAL_FATAL(ask(&main_node, "{\"cmd\": \"options\"}", line, sizeof line), 0);
    CU_ASSERT(json_has(line, "\"resp\": {\"get_preferred_allocation_available\": true}"));
    CU_ASSERT(json_has(line, "\"wire\": \"ok\""));
    CU_ASSERT_EQUAL_FATAL(ask(&main_node, "{\"cmd\": \"prestart\"}", line, sizeof line), 0);
    CU_ASSERT(json_has(line, "\"code\": \"OK\", \"details\": \"\", \"resp\": {}"));
}

/* The plugin still answers, and still runs. */
static void check_still_serving(void)
{
    char line[16384];
    CU_ASSERT_EQUAL_FATAL(
        ask(&main_node, "{\"cmd\": \"allocate\", \"containers\": [[\"gpu1-1\"]]}", line,
            sizeof line),
        0);
    CU_ASSERT(json_has(line, "\"code\": \"OK\""));
    CU_ASSERT(waitpid(main_node.plugin, NULL, WNOHANG) == 0);
}

/* PID's peak resident size (VmHWM) in KiB, -1 when unknown. */
static long peak_rss_kib(pid_t pid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if (util_read_file(path, buf, sizeof buf) < 0)
        return -1;
    const char *p = strstr(buf, "VmHWM:");
    return p ? strtol(p + 6, NULL, 10) : -1;
}

static void test_hostile_requests_are_refused_and_it_serves_on(void)
{
    if (skipped())
        return;
    char line[16384];
    /* bytes that are no AllocateRequest: a field 1 that says 127 bytes follow, then 2 */
    CU_ASSERT_EQUAL_FATAL(ask(&main_node, "{\"cmd\": \"raw\", \"method\": \"Allocate\", "
                                          "\"hex\": \"0a7f0102\"}",
                              line, sizeof line),
                          0);
    CU_ASSERT(json_has(line, "\"code\": \"INVALID_ARGUMENT\""));
    CU_ASSERT(json_has(line, "not a valid v1beta1.AllocateRequest"));
    check_still_serving();
    /* a method that is not there */
    CU_ASSERT_EQUAL_FATAL(ask(&main_node, "{\"cmd\": \"raw\", \"method\": \"Nothing\", \"hex\": \"\"}",
                              line, sizeof line),
                          0);
    CU_ASSERT(json_has(line, "\"code\": \"UNIMPLEMENTED\""));
    /* 8 MiB, over gRPC's 4 MiB: refused on its prefix, before any of it is held (the plugin's
     * peak resident size grows by less than the 4 MiB it would hold up to the limit) */
    long hwm = peak_rss_kib(main_node.plugin);
    CU_ASSERT_EQUAL_FATAL(ask(&main_node, "{\"cmd\": \"oversized\", \"method\": \"Allocate\", "
                                          "\"size\": 8388608}",
                              line, sizeof line),
                          0);
    CU_ASSERT(json_has(line, "\"code\": \"RESOURCE_EXHAUSTED\""));
    CU_ASSERT(json_has(line, "over the limit of 4194304"));
    CU_ASSERT(hwm > 0 && peak_rss_kib(main_node.plugin) - hwm < 2048);
    check_still_serving();
    /* fields upstream's AllocateRequest does not have are skipped */
    CU_ASSERT_EQUAL_FATAL(ask(&main_node, "{\"cmd\": \"unknown_fields\", \"containers\": "
                                          "[[\"gpu1-3\"]]}",
                              line, sizeof line),
                          0);
    CU_ASSERT(json_has(line, "\"code\": \"OK\""));
    char n1[256];
    snprintf(n1, sizeof n1, "\"host_path\": \"%s/nvidia1\"", devdir);
    CU_ASSERT(json_has(line, n1));
    /* a watcher that goes mid-stream, and a connection cut inside a frame */
    CU_ASSERT_EQUAL_FATAL(ask(&main_node, "{\"cmd\": \"watch_cancel\"}", line, sizeof line), 0);
    CU_ASSERT(json_has(line, "\"first_bytes\""));
    CU_ASSERT_EQUAL_FATAL(ask(&main_node, "{\"cmd\": \"half_frame\"}", line, sizeof line), 0);
    check_still_serving();
}

static void test_a_kubelet_restart_is_followed_by_registration_within_1s(void)
{
    if (skipped())
        return;
    char line[8192];
    for (int round = 0; round < 3; round++) {
        CU_ASSERT_EQUAL_FATAL(ask(&main_node, "{\"cmd\": \"restart\"}", line, sizeof line), 0);
        CU_ASSERT_EQUAL_FATAL(
            kube_fake_wait(&main_node.k, "\"event\": \"register\"", line, sizeof line, 5), 0);
        const char *p = strstr(line, "\"since_restart_ms\": ");
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        double ms = strtod(p + strlen("\"since_restart_ms\": "), NULL);
        fprintf(stderr, "\n  re-registered %.1f ms after kubelet.sock was made again", ms);
        CU_ASSERT(ms >= 0 && ms < 1000.0 * util_time_scale());
        CU_ASSERT(json_has(line, "\"wire\": \"ok\""));
        /* the new kubelet watches the devices on the socket made anew */
        CU_ASSERT_EQUAL(wait_devices(&main_node, "healthy", 5, line, sizeof line), 0);
    }
    check_still_serving();
}

/* Only the plugin's socket removed (the kubelet stays): it listens there again at once, and
 * registers again, so that the kubelet dials the new socket. */
static void test_a_removed_socket_is_made_again_within_1s(void)
{
    if (skipped())
        return;
    char line[8192], sock[256];
    snprintf(sock, sizeof sock, "%s/pos.sock", main_node.dir);
    CU_ASSERT_EQUAL_FATAL(ask(&main_node, "{\"cmd\": \"remove_socket\"}", line, sizeof line), 0);
    double t0 = util_now();
    while (access(sock, F_OK) != 0 && util_now() - t0 < 2.0 * util_time_scale())
        usleep(5000);
    CU_ASSERT(util_now() - t0 < 1.0 * util_time_scale());
    CU_ASSERT_EQUAL_FATAL(
        kube_fake_wait(&main_node.k, "\"event\": \"register\"", line, sizeof line, 5), 0);
    const char *p = strstr(line, "\"since_restart_ms\": ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT(strtod(p + strlen("\"since_restart_ms\": "), NULL) < 1000.0 * util_time_scale());
    CU_ASSERT_EQUAL(wait_devices(&main_node, "healthy", 5, line, sizeof line), 0);
    check_still_serving();
}

static void test_cdi_mode_answers_cdi_device_names(void)
{
    if (skipped())
        return;
    struct node n;
    char line[8192];
    const char *const extra[] = {"--cdi", NULL};
    CU_ASSERT_EQUAL_FATAL(node_start(&n, "kubelet-cdi", extra, line, sizeof line), 0);
    CU_ASSERT_EQUAL(ask(&n,
                        "{\"cmd\": \"allocate\", \"containers\": [[\"gpu1-0\", \"gpu0-2\"], "
                        "[\"gpu1-3\"]]}",
                        line, sizeof line),
                    0);
    CU_ASSERT(json_has(line, "\"code\": \"OK\""));
    CU_ASSERT(json_has(line, "\"wire\": \"ok\""));
    CU_ASSERT(json_has(line, "{\"cdi_devices\": [{\"name\": \"pos.dev/gpu=gpu0\"}, "
                             "{\"name\": \"pos.dev/gpu=gpu1\"}]}, "
                             "{\"cdi_devices\": [{\"name\": \"pos.dev/gpu=gpu1\"}]}"));
    CU_ASSERT(!json_has(line, "\"envs\"") && !json_has(line, "\"mounts\""));
    node_stop(&n);
}

static void test_sigterm_removes_the_socket_and_exits_0(void)
{
    if (skipped())
        return;
    char sock[256];
    snprintf(sock, sizeof sock, "%s/pos.sock", main_node.dir);
    CU_ASSERT_EQUAL_FATAL(access(sock, F_OK), 0);
    kill(main_node.plugin, SIGTERM);
    int st = 0;
    CU_ASSERT_EQUAL(waitpid(main_node.plugin, &st, 0), main_node.plugin);
    main_node.plugin = -1;
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT_NOT_EQUAL(access(sock, F_OK), 0);
    /* and it said so, once per event: no line per health check */
    char log[65536];
    CU_ASSERT_EQUAL(util_read_file(main_node.log, log, sizeof log), 0);
    CU_ASSERT(util_count(log, "exiting") == 1);
    CU_ASSERT(util_count(log, "Healthy") <= 8);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("kube_plugin", suite_init, suite_clean);
    POS_ADD_TEST(s, test_registration_has_the_right_fields);
    POS_ADD_TEST(s, test_list_and_watch_advertises_every_share_healthy);
    POS_ADD_TEST(s, test_allocate_answers_the_edits_for_the_gpus_named);
    POS_ADD_TEST(s, test_unknown_share_ids_are_refused);
    POS_ADD_TEST(s, test_preferred_allocation_packs_shares_onto_the_fewest_gpus);
    POS_ADD_TEST(s, test_options_and_pre_start);
    POS_ADD_TEST(s, test_health_follows_posd_killed_and_restarted);
    POS_ADD_TEST(s, test_health_follows_posd_stopped_and_continued);
    POS_ADD_TEST(s, test_hostile_requests_are_refused_and_it_serves_on);
    POS_ADD_TEST(s, test_a_kubelet_restart_is_followed_by_registration_within_1s);
    POS_ADD_TEST(s, test_a_removed_socket_is_made_again_within_1s);
    POS_ADD_TEST(s, test_cdi_mode_answers_cdi_device_names);
    POS_ADD_TEST(s, test_sigterm_removes_the_socket_and_exits_0);
}
