/* Pod identity end to end (docs/posd.md, "Pod identity"): real posd, posapp under the shim on
 * the simulated driver, each child moved into a kubepods-like cgroup before it registers
 * (cgroup v2 with the systemd driver's names, cgroup v1 or v2 with the cgroupfs driver's), a
 * fake kubelet log directory and device-manager checkpoint giving the names and devices; the
 * rules' classes checked in posd's STATS, posstat's JSON and its Prometheus text. Also: names
 * that arrive after registration re-match the client; what the environment says is never
 * believed; a cgroup that names no pod and a missing pod-resources socket are one log line
 * each; a ConfigMap-like drop-in directory whose "..data" link is swapped reloads posd, and a
 * bad file in it keeps the running rules. The pod-resources API from a fake kubelet on grpcio
 * (tests/kube/fake_podres.py): a pod with no log directory named by the List pod that holds its
 * checkpoint devices; the socket missing, appearing and going (a line each way); a kubelet that
 * answers garbage or hangs holds no part of posd's loop. Needs root (it makes cgroups); skipped otherwise,
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
#include "tests/integration/kube.h"
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
/* pods with no log directory, named by the pod-resources List only */
#define UID4_ "cccccccc_2222_3333_4444_555555555555"
#define UID4  "cccccccc-2222-3333-4444-555555555555"
#define UID5_ "dddddddd_2222_3333_4444_555555555555"
#define UID5  "dddddddd-2222-3333-4444-555555555555"
#define UID6_ "eeeeeeee_2222_3333_4444_555555555555"
#define CID4  "4444444444444444444444444444444444444444444444444444444444444444"
#define CID5  "5555555555555555555555555555555555555555555555555555555555555555"
#define CID6  "6666666666666666666666666666666666666666666666666666666666666666"
/* posd in a cgroup namespace of its own */
#define UID7  "ffffffff-2222-3333-4444-555555555555"
#define UID7_ "ffffffff_2222_3333_4444_555555555555"
#define CID7  "7777777777777777777777777777777777777777777777777777777777777777"

static struct suite suite;
static double scale;
static char logs[256], links[256], cm[256];
static char proc_links[512]; /* when set, start_in links PROC_LINKS/PID to /proc/PID first */
static char podres_sock[256], podres_json[256], podres_log[256];
static const char *kube_missing; /* why the pod-resources fake cannot run here, or NULL */

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

/* ---- the pod-resources API (tests/kube/fake_podres.py) ------------------------------------------ */

/* What the fake's List answers: a decoy first, in another namespace, whose container holds one
 * of listed-0's devices only (the join wants exactly the checkpoint's); listed-0, whose
 * container "serve" holds what the checkpoint gives UID4's "serve"; appear-0 for UID5. */
static const char podres_list[] =
    "{\"podResources\": ["
    " {\"name\": \"decoy-0\", \"namespace\": \"other\", \"containers\": ["
    "   {\"name\": \"serve\", \"devices\": [{\"resourceName\": \"pos.dev/gpu\", \"deviceIds\": [\"gpu0-5\"]}]}]},"
    " {\"name\": \"listed-0\", \"namespace\": \"ml\", \"containers\": ["
    "   {\"name\": \"sidecar\"},"
    "   {\"name\": \"serve\", \"devices\": ["
    "     {\"resourceName\": \"pos.dev/gpu\", \"deviceIds\": [\"gpu0-6\", \"gpu0-5\"]},"
    "     {\"resourceName\": \"example.com/nic\", \"deviceIds\": [\"nic0\"]}]}]},"
    " {\"name\": \"appear-0\", \"namespace\": \"ml\", \"containers\": ["
    "   {\"name\": \"late\", \"devices\": [{\"resourceName\": \"pos.dev/gpu\", \"deviceIds\": [\"gpu0-7\"]}]}]}]}";

static int kube_skipped(const char *test)
{
    if (!kube_missing)
        return 0;
    fprintf(stderr, "%s: skipped: %s\n", test, kube_missing);
    return 1;
}

/* The fake kubelet serving List on posd's pod_resources_socket in MODE. */
static int podres_start(struct kube_fake *f, const char *mode)
{
    unlink(podres_sock);
    write_text(podres_json, podres_list);
    const char *const argv[] = {"tests/kube/fake_podres.py", podres_sock, podres_json, "--mode",
                                mode, NULL};
    char line[256];
    if (kube_fake_start(f, argv, podres_log) < 0 ||
        kube_fake_wait(f, "ready", line, sizeof line, 20) < 0) {
        kube_fake_stop(f);
        return -1;
    }
    return 0;
}

/* The fake ended and its socket gone: the kubelet not there. */
/* The socket goes first, as a kubelet's goes with it: stopped first, it would leave a socket
 * that refuses (one reason) before there is none (another). */
static void podres_stop(struct kube_fake *f)
{
    unlink(podres_sock);
    kube_fake_stop(f);
}

/* How many times WHAT is in posd's log from FROM on. */
static int log_count_from(long from, const char *what)
{
    static char log[1 << 18];
    suite_log_from(&suite, from, log, sizeof log);
    return util_count(log, what);
}

/* Waits up to 5 s (scaled) for WHAT in posd's log from FROM on. */
static int log_wait_from(long from, const char *what)
{
    for (int t = 0; t < (int)(500 * scale); t++) {
        if (log_count_from(from, what) > 0)
            return 0;
        usleep(10000);
    }
    return -1;
}

/* The pod-resources socket is missing when posd starts (the suite's posd has never had one),
 * then appears: one line when List answers again, and the client of a pod no log directory
 * names, registered before, gets the List's names, its class and devices. The kubelet gone
 * again: one line however many refreshes, and the client keeps what was known. */
static void test_pod_resources_appearing_and_going_is_a_line_each_way(void)
{
    char root[512], procs[1024];
    if (skipped(__func__, 1, root, sizeof root) || kube_skipped(__func__))
        return;
    const char *rel = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID5_
                      ".slice/cri-containerd-" CID5 ".scope";
    CU_ASSERT_FATAL(make_cgroup(root, rel, procs, sizeof procs) == 0);
    long from = suite_log_size(&suite);
    pid_t pid = start_in(procs, "appear", NULL);
    CU_ASSERT_FATAL(pid > 0);
    struct pos_client_stats r;
    CU_ASSERT_EQUAL_FATAL(row_of(pid, NULL, &r), 0);
    usleep((useconds_t)(500000 * scale)); /* refreshes without the socket */
    CU_ASSERT_EQUAL(row_of(pid, NULL, &r), 0);
    CU_ASSERT_STRING_EQUAL(r.class_name, "latency");
    CU_ASSERT_STRING_EQUAL(r.pod, "");
    CU_ASSERT_EQUAL(log_count_from(from, "pod identity: pod-resources: "), 0); /* said before */

    struct kube_fake f;
    CU_ASSERT_EQUAL_FATAL(podres_start(&f, "good"), 0);
    CU_ASSERT_EQUAL(row_of(pid, "batch", &r), 0);
    CU_ASSERT_STRING_EQUAL(r.k8s_namespace, "ml");
    CU_ASSERT_STRING_EQUAL(r.pod, "appear-0");
    CU_ASSERT_STRING_EQUAL(r.container, "late");
    CU_ASSERT_STRING_EQUAL(r.pod_devices, "gpu0-7");
    CU_ASSERT_EQUAL(log_wait_from(from, "pod-resources answers again"), 0);
    /* the re-match is logged, with the names and the new class */
    CU_ASSERT_EQUAL(log_wait_from(from, "pod ml/appear-0 container late devices gpu0-7: class "
                                        "batch"), 0);
    usleep((useconds_t)(1000000 * scale)); /* five refreshes that it answers */
    CU_ASSERT_EQUAL(log_count_from(from, "pod identity: pod-resources: "), 0);
    CU_ASSERT_EQUAL(log_count_from(from, "pod-resources answers again"), 1);

    long gone = suite_log_size(&suite);
    podres_stop(&f);
    CU_ASSERT_EQUAL(log_wait_from(gone, "pod identity: pod-resources: "), 0);
    usleep((useconds_t)(1000000 * scale)); /* five refreshes without it */
    /* one line; two where a List was under way as the fake went (reset, then no socket): a
     * line per refresh would be five */
    int lines = log_count_from(gone, "pod identity: pod-resources: ");
    CU_ASSERT(lines >= 1 && lines <= 2);
    CU_ASSERT_EQUAL(log_count_from(gone, "pod-resources answers again"), 0);
    CU_ASSERT_EQUAL(row_of(pid, NULL, &r), 0);
    CU_ASSERT_STRING_EQUAL(r.class_name, "batch");
    CU_ASSERT_STRING_EQUAL(r.pod, "appear-0");
    stop(pid);
    remove_cgroup(root, rel);
}

/* A pod with no log directory is named by the List pod whose container holds exactly the
 * devices the checkpoint gives its UID (not the decoy holding one of them): its namespace's
 * rule gives its class, and STATS and posstat's JSON carry its names and devices. */
static void test_a_pod_without_logs_is_named_by_list_through_its_devices(void)
{
    char root[512], procs[1024];
    if (skipped(__func__, 1, root, sizeof root) || kube_skipped(__func__))
        return;
    struct kube_fake f;
    CU_ASSERT_EQUAL_FATAL(podres_start(&f, "good"), 0);
    const char *rel = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID4_
                      ".slice/cri-containerd-" CID4 ".scope";
    CU_ASSERT_FATAL(make_cgroup(root, rel, procs, sizeof procs) == 0);
    pid_t pid = start_in(procs, "listed", NULL);
    CU_ASSERT_FATAL(pid > 0);
    struct pos_client_stats r;
    CU_ASSERT_EQUAL(row_of(pid, "batch", &r), 0);
    for (int t = 0; t < (int)(300 * scale) && !r.pod_devices[0]; t++) {
        usleep(10000);
        row_of(pid, NULL, &r);
    }
    CU_ASSERT_STRING_EQUAL(r.class_name, "batch");
    CU_ASSERT_STRING_EQUAL(r.k8s_namespace, "ml");
    CU_ASSERT_STRING_EQUAL(r.pod, "listed-0");
    CU_ASSERT_STRING_EQUAL(r.container, "serve");
    CU_ASSERT_STRING_EQUAL(r.pod_devices, "gpu0-5,gpu0-6"); /* the checkpoint's, in its order */
    static char out[1 << 16];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "build/posstat -o json -p %d", (int)pid);
    CU_ASSERT_EQUAL(util_run_stdout(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"namespace\":\"ml\",\"pod\":\"listed-0\","
                                       "\"container\":\"serve\",\"pod_devices\":\"gpu0-5,gpu0-6\""));
    stop(pid);
    remove_cgroup(root, rel);
    podres_stop(&f);
}

/* The largest time one STATS round trip took over SECONDS (scaled) of asking every 20 ms, and
 * in *DONE how many operators client PID completed meanwhile. */
static double stats_latency_over(double seconds, pid_t pid, uint64_t *done)
{
    struct pos_client_stats r0, r1;
    double worst = 0, end = util_now() + seconds * scale;
    if (row_of(pid, NULL, &r0) < 0)
        return 1e9;
    while (util_now() < end) {
        static struct pos_client_stats cs[64];
        struct pos_device_stats dev;
        double t0 = util_now();
        int n = util_stats(suite.sock, &dev, cs, 64);
        double took = util_now() - t0;
        if (n < 0)
            took = 1e9;
        if (took > worst)
            worst = took;
        usleep(20000);
    }
    *done = row_of(pid, NULL, &r1) == 0 ? r1.completed - r0.completed : 0;
    return worst;
}

/* A kubelet that answers garbage, or never answers (List waits 1 s each refresh): posd's loop
 * keeps scheduling (another client's operators complete, STATS answers at once, a new pod's
 * client registers at once) and says it once. */
static void test_a_kubelet_answering_garbage_or_hanging_holds_no_loop(void)
{
    char root[512], procs[1024];
    if (skipped(__func__, 1, root, sizeof root) || kube_skipped(__func__))
        return;
    pid_t steady = start_in(NULL, "steady", NULL);
    CU_ASSERT_FATAL(steady > 0);
    struct pos_client_stats r;
    CU_ASSERT_EQUAL_FATAL(row_of(steady, NULL, &r), 0);
    const char *rel = "/kubepods.slice/kubepods-pod" UID6_ ".slice/crio-" CID6 ".scope";
    CU_ASSERT_FATAL(make_cgroup(root, rel, procs, sizeof procs) == 0);
    static const struct {
        const char *mode, *line;
    } cases[] = {{"garbage", "is not a valid"}, {"hang", "in time"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long from = suite_log_size(&suite);
        struct kube_fake f;
        CU_ASSERT_EQUAL_FATAL(podres_start(&f, cases[i].mode), 0);
        CU_ASSERT_EQUAL(log_wait_from(from, cases[i].line), 0);
        /* a pod the table does not have: registration asks the thread for a round */
        double t0 = util_now();
        pid_t newcomer = start_in(procs, "newcomer", NULL);
        CU_ASSERT_EQUAL(row_of(newcomer, NULL, &r), 0);
        double joined = util_now() - t0;
        uint64_t done = 0;
        double worst = stats_latency_over(2.5, steady, &done);
        fprintf(stderr, "\n  %s: newcomer's row after %.3f s, STATS at worst %.4f s, %llu "
                        "operators done in 2.5 s\n",
                cases[i].mode, joined, worst, (unsigned long long)done);
        CU_ASSERT(joined < 0.8 * scale);
        CU_ASSERT(worst < 0.25 * scale);
        CU_ASSERT(done > 100);
        CU_ASSERT_EQUAL(log_count_from(from, cases[i].line), 1);
        stop(newcomer);
        podres_stop(&f);
    }
    stop(steady);
    remove_cgroup(root, rel);
}

/* ---- suite ------------------------------------------------------------------------------------- */

static const char checkpoint[] =
    "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"" UID1 "\",\"ContainerName\":\"infer\","
    "\"ResourceName\":\"pos.dev/gpu\",\"DeviceIDs\":{\"0\":[\"gpu0-1\",\"gpu0-2\"]},"
    "\"AllocResp\":\"\"},"
    "{\"PodUID\":\"" UID4 "\",\"ContainerName\":\"serve\",\"ResourceName\":\"pos.dev/gpu\","
    "\"DeviceIDs\":{\"0\":[\"gpu0-5\",\"gpu0-6\"]},\"AllocResp\":\"\"},"
    "{\"PodUID\":\"" UID5 "\",\"ContainerName\":\"late\",\"ResourceName\":\"pos.dev/gpu\","
    "\"DeviceIDs\":[\"gpu0-7\"],\"AllocResp\":\"\"}],\"RegisteredDevices\":{}},\"Checksum\":1}";

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

    const char *rel = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID7_
                      ".slice/cri-containerd-" CID7 ".scope";
    kubelet_logs("ml", "joiner-5c8b", UID7, "infer", CID7);
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
    snprintf(podres_sock, sizeof podres_sock, "%s/kubelet.sock", suite.dir);
    snprintf(podres_json, sizeof podres_json, "%s/pods.json", suite.dir);
    snprintf(podres_log, sizeof podres_log, "%s/fake_podres.log", suite.dir);
    kube_missing = kube_fakes_missing();
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
             "pod_resources_socket = %s\ncheckpoint = %s\nrefresh_s = 0.2\n"
             "[rule ml]\nmatch_namespace = ml\nclass = batch\n"
             "[rule trainers]\nmatch_pod = trainer-*\nclass = realtime\n",
             cm, logs, links, podres_sock, ck);
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
    POS_ADD_TEST(s, test_pod_resources_appearing_and_going_is_a_line_each_way);
    POS_ADD_TEST(s, test_a_pod_without_logs_is_named_by_list_through_its_devices);
    POS_ADD_TEST(s, test_a_kubelet_answering_garbage_or_hanging_holds_no_loop);
}
