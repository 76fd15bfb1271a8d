/* Pod identity end to end (docs/posd.md, "Pod identity"): real posd, posapp under the shim on
 * the simulated driver, each child moved into a kubepods-like cgroup before it registers
 * (cgroup v2 with the systemd driver's names, cgroup v1 or v2 with the cgroupfs driver's), a
 * fake kubelet log directory and device-manager checkpoint giving the names and devices; the
 * rules' classes checked in posd's STATS, posstat's JSON and its Prometheus text. Also: names
 * that arrive after registration re-match the client; what the environment says is never
 * believed; a cgroup that names no pod and a missing pod-resources socket are one log line
 * each; a ConfigMap-like drop-in directory whose "..data" link is swapped reloads posd, and a
 * bad file in it keeps the running rules. Needs root (it makes cgroups); skipped otherwise,
 * with the reason, as is each cgroup version this machine does not mount. */
#include <CUnit/Basic.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pos/proto.h"
#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tools/posclient.h"

#define UID1  "11111111-2222-3333-4444-555555555555"
#define UID1_ "11111111_2222_3333_4444_555555555555"
#define UID2  "aaaaaaaa-2222-3333-4444-555555555555"
#define UID3  "bbbbbbbb-2222-3333-4444-555555555555"
#define UID3_ "bbbbbbbb_2222_3333_4444_555555555555"
#define CID1  "1111111111111111111111111111111111111111111111111111111111111111"
#define CID2  "2222222222222222222222222222222222222222222222222222222222222222"
#define CID3  "3333333333333333333333333333333333333333333333333333333333333333"
#define UID4  "cccccccc-2222-3333-4444-555555555555"
#define UID4_ "cccccccc_2222_3333_4444_555555555555"
#define CID4  "4444444444444444444444444444444444444444444444444444444444444444"

static struct suite suite;
static double scale;
static char logs[256], links[256], cm[256];
static char proc_links[512]; /* when set, start_in links PROC_LINKS/PID to /proc/PID first */

/* ---- cgroups ------------------------------------------------------------------------------- */

/* Where this machine mounts cgroup v2 (V2) or a v1 hierarchy (else) into OUT, or 0. */
static int cgroup_mount(int v2, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[1024];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) {
        char mnt[512], fstype[64];
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %*s %511s", mnt) != 1 ||
            sscanf(dash + 3, "%63s", fstype) != 1)
            continue;
        if (strcmp(fstype, v2 ? "cgroup2" : "cgroup") == 0 && access(mnt, W_OK) == 0) {
            snprintf(out, cap, "%s", mnt);
            found = 1;
        }
    }
    if (f)
        fclose(f);
    return found;
}

static int skipped(const char *test, int v2, char *root, size_t cap)
{
    if (geteuid() != 0) {
        fprintf(stderr, "%s: skipped: making cgroups needs root (running as uid %u)\n", test,
                (unsigned)geteuid());
        return 1;
    }
    if (!cgroup_mount(v2, root, cap)) {
        fprintf(stderr, "%s: skipped: this machine mounts no writable cgroup %s hierarchy\n",
                test, v2 ? "v2" : "v1");
        return 1;
    }
    return 0;
}

/* ROOT/REL made (every level); its cgroup.procs in PROCS. */
static int make_cgroup(const char *root, const char *rel, char *procs, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s%s'", root, rel);
    if (system(cmd) != 0)
        return -1;
    snprintf(procs, cap, "%s%s/cgroup.procs", root, rel);
    return 0;
}

/* ROOT/REL and its parents up to ROOT removed, deepest first (a cgroup empties a moment after
 * its last process is reaped). */
static void remove_cgroup(const char *root, const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s%s", root, rel);
    size_t rl = strlen(root);
    while (strlen(path) > rl) {
        for (int i = 0; i < 100 && rmdir(path) < 0 && errno == EBUSY; i++)
            usleep(10000);
        char *slash = strrchr(path, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
}

/* ---- clients ------------------------------------------------------------------------------- */

/* posapp under the shim as app APP, moved into the cgroup of PROCS (NULL: left where it is)
 * before it starts, with ENV (NAME=VALUE, may be NULL) in its environment. Returns its pid, or
 * -1. */
static pid_t start_in(const char *procs, const char *app, const char *env)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[1]);
        char b;
        if (read(p[0], &b, 1) != 1)
            _exit(126);
        setenv("LD_PRELOAD", util_shim_preload(), 1);
        setenv("POS_APP", app, 1);
        if (env)
            putenv((char *)env);
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        execl("build/posapp", "posapp", "--model", "resnet18", "--requests", "1000000",
              (char *)NULL);
        _exit(127);
    }
    close(p[0]);
    int ok = pid > 0;
    if (ok && proc_links[0]) {
        char link[600], target[64];
        snprintf(link, sizeof link, "%s/%d", proc_links, (int)pid);
        snprintf(target, sizeof target, "/proc/%d", (int)pid);
        ok = symlink(target, link) == 0;
    }
    if (ok && procs) {
        FILE *f = fopen(procs, "w");
        ok = f && fprintf(f, "%d\n", (int)pid) > 0;
        if (f && fclose(f) != 0)
            ok = 0;
    }
    if (write(p[1], "go", 1) != 1)
        ok = 0;
    close(p[1]);
    if (!ok && pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

static void stop(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}

/* PID's row in posd's STATS into OUT, waiting up to 5 s (scaled) for it to be there and, when
 * CLASS is not NULL, to be in that class. Returns 0, or -1. */
static int row_of(pid_t pid, const char *class_name, struct pos_client_stats *out)
{
    static struct pos_client_stats cs[64];
    struct pos_device_stats dev;
    for (int t = 0; t < (int)(500 * scale); t++) {
        int n = util_stats(suite.sock, &dev, cs, 64);
        for (int i = 0; i < n && i < 64; i++) {
            if (cs[i].pid != pid)
                continue;
            *out = cs[i];
            if (!class_name || strcmp(cs[i].class_name, class_name) == 0)
                return 0;
        }
        usleep(10000);
    }
    return -1;
}

/* ---- the kubelet's files ------------------------------------------------------------------------ */

/* What the kubelet makes for container CONTAINER (ID CID) of pod NS/POD (UID). */
static void kubelet_logs(const char *ns, const char *pod, const char *uid, const char *container,
                         const char *cid)
{
    char dir[512], cmd[2048];
    snprintf(dir, sizeof dir, "%s/%s_%s_%s/%s", logs, ns, pod, uid, container);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && touch '%s/0.log' && ln -sf '%s/0.log' '%s/%s_%s_%s-%s.log'",
             dir, dir, dir, links, pod, ns, container, cid);
    CU_ASSERT_FATAL(system(cmd) == 0);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(text, f);
    CU_ASSERT_FATAL(fclose(f) == 0);
}

/* The ConfigMap volume's swap: a new timestamped directory with FILE's TEXT, "..data" moved
 * to it in one rename, as the kubelet's atomic writer does. */
static void configmap_update(int version, const char *file, const char *text)
{
    char dir[512], path[600], cmd[2048];
    snprintf(dir, sizeof dir, "%s/..2026_01_01_00_00_0%d.000", cm, version);
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    write_text(path, text);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && ln -sfn '..2026_01_01_00_00_0%d.000' ..data_tmp && mv -T ..data_tmp ..data "
             "&& ln -sfn '..data/%s' '%s'",
             cm, version, file, file);
    CU_ASSERT_FATAL(system(cmd) == 0);
}

/* ---- tests ----------------------------------------------------------------------------------- */

/* cgroup v2, the systemd driver's names, containerd: the pod's namespace gives its class, and
 * STATS, posstat's JSON and its Prometheus text carry its namespace, pod, container and the
 * devices the checkpoint gives it. */
static void test_v2_systemd_pod_gets_its_namespaces_class(void)
{
    char root[512], procs[1024];
    if (skipped(__func__, 1, root, sizeof root))
        return;
    const char *rel = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID1_
                      ".slice/cri-containerd-" CID1 ".scope";
    kubelet_logs("ml", "detector-7d9f", UID1, "infer", CID1);
    CU_ASSERT_FATAL(make_cgroup(root, rel, procs, sizeof procs) == 0);
    pid_t pid = start_in(procs, "detector", NULL);
    CU_ASSERT_FATAL(pid > 0);
    struct pos_client_stats r;
    CU_ASSERT_EQUAL(row_of(pid, "batch", &r), 0);
    /* the devices come with the resolver's next table (the names may come first, from the
     * log directory read at registration) */
    for (int t = 0; t < (int)(300 * scale) && !r.pod_devices[0]; t++) {
        usleep(10000);
        row_of(pid, NULL, &r);
    }
    CU_ASSERT_STRING_EQUAL(r.class_name, "batch");
    CU_ASSERT_STRING_EQUAL(r.k8s_namespace, "ml");
    CU_ASSERT_STRING_EQUAL(r.pod, "detector-7d9f");
    CU_ASSERT_STRING_EQUAL(r.container, "infer");
    CU_ASSERT_STRING_EQUAL(r.pod_devices, "gpu0-1,gpu0-2");
    static char out[1 << 16];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "build/posstat -o json -p %d", (int)pid);
    CU_ASSERT_EQUAL(util_run_stdout(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"namespace\":\"ml\",\"pod\":\"detector-7d9f\","
                                       "\"container\":\"infer\",\"pod_devices\":\"gpu0-1,gpu0-2\""));
    CU_ASSERT_EQUAL(util_run_stdout("build/posstat -o prom", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, ",class=\"batch\",namespace=\"ml\",pod=\"detector-7d9f\","
                                       "container=\"infer\",pid="));
    stop(pid);
    remove_cgroup(root, rel);
}

/* The cgroupfs driver's names (/kubepods/QOS/podUID/ID), in a cgroup v1 hierarchy: the v2 line
 * names no pod there, the v1 line does. */
static void test_v1_cgroupfs_pod_gets_its_pods_class(void)
{
    char root[512], procs[1024];
    if (skipped(__func__, 0, root, sizeof root))
        return;
    const char *rel = "/kubepods/besteffort/pod" UID2 "/" CID2;
    kubelet_logs("train", "trainer-0", UID2, "train", CID2);
    CU_ASSERT_FATAL(make_cgroup(root, rel, procs, sizeof procs) == 0);
    pid_t pid = start_in(procs, "trainer", NULL);
    CU_ASSERT_FATAL(pid > 0);
    struct pos_client_stats r;
    CU_ASSERT_EQUAL(row_of(pid, "realtime", &r), 0);
    CU_ASSERT_STRING_EQUAL(r.class_name, "realtime");
    CU_ASSERT_STRING_EQUAL(r.pod, "trainer-0");
    CU_ASSERT_STRING_EQUAL(r.container, "train");
    stop(pid);
    remove_cgroup(root, rel);
}

/* The cgroupfs driver's names under cgroup v2 too (a node with cgroupDriver: cgroupfs). */
static void test_v2_cgroupfs_pod_gets_its_pods_class(void)
{
    char root[512], procs[1024];
    if (skipped(__func__, 1, root, sizeof root))
        return;
    const char *rel = "/kubepods/pod" UID2 "/" CID2;
    kubelet_logs("train", "trainer-0", UID2, "train", CID2);
    CU_ASSERT_FATAL(make_cgroup(root, rel, procs, sizeof procs) == 0);
    pid_t pid = start_in(procs, "trainer", NULL);
    CU_ASSERT_FATAL(pid > 0);
    struct pos_client_stats r;
    CU_ASSERT_EQUAL(row_of(pid, "realtime", &r), 0);
    CU_ASSERT_STRING_EQUAL(r.k8s_namespace, "train");
    stop(pid);
    remove_cgroup(root, rel);
}

/* A pod whose log directory appears after its client registered: it starts in the default
 * class, and is matched again when the resolver's next table names it. */
static void test_names_that_arrive_later_rematch_the_client(void)
{
    char root[512], procs[1024];
    if (skipped(__func__, 1, root, sizeof root))
        return;
    const char *rel = "/kubepods.slice/kubepods-pod" UID3_ ".slice/crio-" CID3 ".scope";
    CU_ASSERT_FATAL(make_cgroup(root, rel, procs, sizeof procs) == 0);
    pid_t pid = start_in(procs, "late", NULL);
    CU_ASSERT_FATAL(pid > 0);
    struct pos_client_stats r;
    CU_ASSERT_EQUAL_FATAL(row_of(pid, NULL, &r), 0);
    CU_ASSERT_STRING_EQUAL(r.class_name, "latency");
    CU_ASSERT_STRING_EQUAL(r.k8s_namespace, "");
    kubelet_logs("ml", "late-0", UID3, "serve", CID3);
    CU_ASSERT_EQUAL(row_of(pid, "batch", &r), 0);
    CU_ASSERT_STRING_EQUAL(r.class_name, "batch");
    CU_ASSERT_STRING_EQUAL(r.container, "serve");
    stop(pid);
    remove_cgroup(root, rel);
}

/* Outside a pod, an environment that claims one is not believed; a kubepods cgroup that names
 * no pod is a client without a pod, said once in posd's log however many come; and the missing
 * pod-resources socket is one line, not one per refresh. */
static void test_no_pod_and_bad_input_are_one_line_and_the_default(void)
{
    char root[512], procs[1024];
    if (skipped(__func__, 1, root, sizeof root))
        return;
    pid_t liar = start_in(NULL, "liar", "POD_NAMESPACE=ml");
    CU_ASSERT_FATAL(liar > 0);
    struct pos_client_stats r;
    CU_ASSERT_EQUAL_FATAL(row_of(liar, NULL, &r), 0);
    CU_ASSERT_STRING_EQUAL(r.class_name, "latency");
    CU_ASSERT_STRING_EQUAL(r.k8s_namespace, "");
    const char *rel = "/kubepods.slice/kubepods-burstable.slice";
    CU_ASSERT_FATAL(make_cgroup(root, rel, procs, sizeof procs) == 0);
    pid_t a = start_in(procs, "qos-a", NULL), b = start_in(procs, "qos-b", NULL);
    CU_ASSERT_EQUAL(row_of(a, NULL, &r), 0);
    CU_ASSERT_STRING_EQUAL(r.class_name, "latency");
    CU_ASSERT_STRING_EQUAL(r.pod, "");
    CU_ASSERT_EQUAL(row_of(b, NULL, &r), 0);
    usleep((useconds_t)(1000000 * scale)); /* five refreshes */
    static char log[1 << 18];
    util_read_file(suite.log, log, sizeof log);
    CU_ASSERT_EQUAL(util_count(log, "is under kubepods but names no pod"), 1);
    CU_ASSERT_EQUAL(util_count(log, "pod identity: pod-resources"), 1);
    stop(liar);
    stop(a);
    stop(b);
    remove_cgroup(root, rel);
}

/* The drop-in directory as a ConfigMap volume: a swap of its "..data" link reloads posd (the
 * running client gets the new class); a bad file in the next swap is logged with FILE:LINE and
 * the running rules stay. */
static void test_configmap_swap_reloads_and_a_bad_file_keeps_the_rules(void)
{
    char root[512], procs[1024];
    if (skipped(__func__, 1, root, sizeof root))
        return;
    const char *rel = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID1_
                      ".slice/docker-" CID1 ".scope";
    kubelet_logs("ml", "detector-7d9f", UID1, "infer", CID1);
    CU_ASSERT_FATAL(make_cgroup(root, rel, procs, sizeof procs) == 0);
    pid_t pid = start_in(procs, "cm", NULL);
    CU_ASSERT_FATAL(pid > 0);
    struct pos_client_stats r;
    CU_ASSERT_EQUAL(row_of(pid, "batch", &r), 0);
    configmap_update(2, "20-cm.conf",
                     "[rule cm-ml]\nmatch_namespace = ml\nmatch_container = infer\n"
                     "class = realtime\n");
    CU_ASSERT_EQUAL(row_of(pid, "realtime", &r), 0);
    CU_ASSERT_STRING_EQUAL(r.class_name, "realtime");
    configmap_update(3, "20-cm.conf", "[rule cm-ml]\nmatch_namespace = ML\n");
    usleep((useconds_t)(1500000 * scale));
    static char log[1 << 18];
    util_read_file(suite.log, log, sizeof log);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "20-cm.conf:2: bad value 'ML' for 'match_namespace'"));
    CU_ASSERT_EQUAL(row_of(pid, "realtime", &r), 0);
    stop(pid);
    remove_cgroup(root, rel);
}

/* ---- suite ------------------------------------------------------------------------------------- */

static const char checkpoint[] =
    "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"" UID1 "\",\"ContainerName\":\"infer\","
    "\"ResourceName\":\"pos.dev/gpu\",\"DeviceIDs\":{\"0\":[\"gpu0-1\",\"gpu0-2\"]},"
    "\"AllocResp\":\"\"}],\"RegisteredDevices\":{}},\"Checksum\":1}";

/* posd in a cgroup namespace of its own, as in a container on cgroup v2 (where containerd and
 * CRI-O give every container one), reads a pod's cgroup as "/../kubepods.slice/...": it joins
 * the host's namespace (PID 1's) at start, and tells its pods as before. PID 1 is this test,
 * through posd's proc_root (PROC/1 links to the test's /proc entry; this machine's own PID 1
 * cannot be read), and posd starts in a cgroup of its own, then unshares its namespace there. */
static void test_posd_in_a_cgroup_namespace_of_its_own_joins_the_hosts(void)
{
    char root[512], procs[1024], own[1024], dir[300], conf[320], sock[320], log[320];
    if (skipped(__func__, 1, root, sizeof root))
        return;
    snprintf(dir, sizeof dir, "%s/cgns", suite.dir);
    snprintf(proc_links, sizeof proc_links, "%s/proc", dir);
    snprintf(conf, sizeof conf, "%s/posd.conf", dir);
    snprintf(sock, sizeof sock, "%s/posd.sock", dir);
    snprintf(log, sizeof log, "%s/posd.log", dir);
    CU_ASSERT_FATAL(mkdir(dir, 0700) == 0 && mkdir(proc_links, 0700) == 0);
    char link[600], target[64], text[2048];
    snprintf(link, sizeof link, "%s/1", proc_links);
    snprintf(target, sizeof target, "/proc/%d", (int)getpid());
    CU_ASSERT_FATAL(symlink(target, link) == 0);
    snprintf(text, sizeof text,
             "[kubernetes]\nenable = yes\nproc_root = %s\nlog_dir = %s\ncontainers_log_dir = %s\n"
             "pod_resources_socket = %s/no-kubelet.sock\nrefresh_s = 0.2\n"
             "[rule ml]\nmatch_namespace = ml\nclass = batch\n",
             proc_links, logs, links, dir);
    write_text(conf, text);
    const char *posd_rel = "/pos-test-cgns";
    CU_ASSERT_FATAL(make_cgroup(root, posd_rel, own, sizeof own) == 0);

    pid_t posd = fork();
    if (posd == 0) {
        FILE *f = fopen(own, "w");
        if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0)
            _exit(125);
        if (unshare(CLONE_NEWCGROUP) != 0)
            _exit(124);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 2);
        execl("build/posd", "posd", "-f", "-c", conf, "-s", sock, "-p", "priority", (char *)NULL);
        _exit(127);
    }
    CU_ASSERT_FATAL(posd > 0);
    for (int t = 0; t < (int)(200 * scale) && access(sock, F_OK) != 0; t++)
        usleep(10000);
    CU_ASSERT_FATAL(access(sock, F_OK) == 0);

    const char *rel = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID4_
                      ".slice/cri-containerd-" CID4 ".scope";
    kubelet_logs("ml", "joiner-5c8b", UID4, "infer", CID4);
    CU_ASSERT_FATAL(make_cgroup(root, rel, procs, sizeof procs) == 0);
    static char sockenv[400];
    snprintf(sockenv, sizeof sockenv, "POS_SOCKET=%s", sock);
    pid_t pid = start_in(procs, "joiner", sockenv);
    CU_ASSERT_FATAL(pid > 0);
    static struct pos_client_stats cs[64];
    struct pos_device_stats dev;
    int found = 0;
    for (int t = 0; t < (int)(500 * scale) && !found; t++) {
        int n = util_stats(sock, &dev, cs, 64);
        for (int i = 0; i < n && i < 64 && !found; i++)
            found = cs[i].pid == pid && strcmp(cs[i].class_name, "batch") == 0 &&
                    strcmp(cs[i].pod, "joiner-5c8b") == 0;
        if (!found)
            usleep(10000);
    }
    CU_ASSERT(found);
    static char text_log[1 << 16];
    util_read_file(log, text_log, sizeof text_log);
    CU_ASSERT_PTR_NOT_NULL(strstr(text_log, "joined the host's cgroup namespace"));
    if (!found)
        fputs(text_log, stderr);
    stop(pid);
    util_posd_stop(&posd, SIGKILL);
    proc_links[0] = '\0';
    remove_cgroup(root, rel);
    remove_cgroup(root, posd_rel);
}

static int suite_init(void)
{
    scale = util_time_scale();
    if (suite_open(&suite, "pods", NULL) < 0)
        return -1;
    snprintf(logs, sizeof logs, "%s/pods", suite.dir);
    snprintf(links, sizeof links, "%s/containers", suite.dir);
    snprintf(cm, sizeof cm, "%s/policy.d", suite.dir);
    char ck[256], conf[2048], cmd[2048];
    snprintf(ck, sizeof ck, "%s/kubelet_internal_checkpoint", suite.dir);
    char state[256];
    snprintf(state, sizeof state, "%s/state", suite.dir);
    setenv("POSD_STATE_DIR", state, 1); /* posd's kernel profiles apart from the machine's */
    snprintf(cmd, sizeof cmd, "mkdir -p %s %s %s/..2026_01_01_00_00_01.000 && ln -s "
                              "..2026_01_01_00_00_01.000 %s/..data",
             logs, links, cm, cm);
    if (system(cmd) != 0)
        return -1;
    FILE *f = fopen(ck, "w");
    if (!f)
        return -1;
    fputs(checkpoint, f);
    fclose(f);
    snprintf(conf, sizeof conf,
             "[daemon]\npolicy_dir = %s\n"
             "[kubernetes]\nenable = yes\nlog_dir = %s\ncontainers_log_dir = %s\n"
             "pod_resources_socket = %s/no-kubelet.sock\ncheckpoint = %s\nrefresh_s = 0.2\n"
             "[rule ml]\nmatch_namespace = ml\nclass = batch\n"
             "[rule trainers]\nmatch_pod = trainer-*\nclass = realtime\n",
             cm, logs, links, suite.dir, ck);
    f = fopen(suite.conf, "w");
    if (!f)
        return -1;
    fputs(conf, f);
    fclose(f);
    suite_posd_start(&suite, "priority");
    return access(suite.sock, F_OK);
}

static int suite_clean(void)
{
    if (getenv("POS_TEST_SHOW_LOG")) {
        static char log[1 << 18];
        util_read_file(suite.log, log, sizeof log);
        fputs(log, stderr);
    }
    return suite_close(&suite);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("pods", suite_init, suite_clean);
    POS_ADD_TEST(s, test_v2_systemd_pod_gets_its_namespaces_class);
    POS_ADD_TEST(s, test_v1_cgroupfs_pod_gets_its_pods_class);
    POS_ADD_TEST(s, test_v2_cgroupfs_pod_gets_its_pods_class);
    POS_ADD_TEST(s, test_names_that_arrive_later_rematch_the_client);
    POS_ADD_TEST(s, test_no_pod_and_bad_input_are_one_line_and_the_default);
    POS_ADD_TEST(s, test_configmap_swap_reloads_and_a_bad_file_keeps_the_rules);
    POS_ADD_TEST(s, test_posd_in_a_cgroup_namespace_of_its_own_joins_the_hosts);
}
