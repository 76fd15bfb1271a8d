/* Unit tests of pod identity (sched/pod_cgroup.c, sched/pod_names.c): the cgroup parser over
 * every form the kubelet makes (v1 and v2 lines, systemd and cgroupfs drivers, containerd, CRI-O
 * and docker), what names no pod, the log directories read from a temporary directory, the
 * device manager's checkpoint, and the join with a constructed pod-resources List. */
#include "sched/pod.h"
#include "tests/cunit_main.h"

#include <CUnit/Basic.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define UID   "1234abcd-5678-90ab-cdef-0123456789ab"
#define UID_  "1234abcd_5678_90ab_cdef_0123456789ab"
#define CID   "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define CID2  "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define SUID  "0123456789abcdef0123456789abcdef" /* a static pod's: its manifest's hash */

static char tmp_root[] = "/tmp/pos-test-pod.XXXXXX";

/* --- the cgroup parser ----------------------------------------------------------------------- */

static int parse(const char *path, struct posd_pod_ref *ref)
{
    return posd_pod_from_path(path, ref);
}

static void expect_pod(const char *path, const char *uid, const char *cid)
{
    struct posd_pod_ref ref;
    int rc = parse(path, &ref);
    if (rc != 1)
        fprintf(stderr, "\n  %s: %d\n", path, rc);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_STRING_EQUAL(ref.uid, uid);
    CU_ASSERT_STRING_EQUAL(ref.container_id, cid);
}

static void test_systemd_driver_paths(void)
{
    expect_pod("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
               ".slice/cri-containerd-" CID ".scope",
               UID, CID);
    expect_pod("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_
               ".slice/crio-" CID ".scope",
               UID, CID);
    /* a guaranteed pod has no QoS slice */
    expect_pod("/kubepods.slice/kubepods-pod" UID_ ".slice/docker-" CID ".scope", UID, CID);
    /* a cgroup the container made inside its own */
    expect_pod("/kubepods.slice/kubepods-pod" UID_ ".slice/cri-containerd-" CID ".scope/sub/x",
               UID, CID);
    /* in the pod but in no container's cgroup: conmon, the pod slice itself */
    expect_pod("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
               ".slice/crio-conmon-" CID ".scope",
               UID, "");
    expect_pod("/kubepods.slice/kubepods-pod" UID_ ".slice", UID, "");
    expect_pod("/kubepods.slice/kubepods-pod" SUID ".slice/cri-containerd-" CID ".scope", SUID,
               CID);
}

static void test_cgroupfs_driver_paths(void)
{
    expect_pod("/kubepods/burstable/pod" UID "/" CID, UID, CID);
    expect_pod("/kubepods/besteffort/pod" UID "/" CID, UID, CID);
    expect_pod("/kubepods/pod" UID "/" CID, UID, CID);
    expect_pod("/kubepods/burstable/pod" UID "/crio-" CID, UID, CID);
    expect_pod("/kubepods/pod" UID, UID, "");
}

static void test_paths_that_name_no_pod(void)
{
    struct posd_pod_ref ref;
    static const char *const none[] = {
        "/", "", "/system.slice/containerd.service", "/user.slice/user-1000.slice",
        "/docker/" CID,
        /* a user's delegated subtree cannot pass for a pod: kubepods must be at the root */
        "/user.slice/user-1000.slice/user@1000.service/kubepods.slice/kubepods-pod" UID_
        ".slice/cri-containerd-" CID ".scope",
        "/mykubepods/pod" UID "/" CID};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        CU_ASSERT_EQUAL(parse(none[i], &ref), 0);
        CU_ASSERT_STRING_EQUAL(ref.uid, "");
    }
    static const char *const bad[] = {
        "/kubepods.slice", "/kubepods.slice/kubepods-burstable.slice",
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podnot-a-uid.slice",
        /* the QoS in the pod's slice must be its parent's */
        "/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod" UID_ ".slice",
        "/kubepods.slice/kubepods-pod" UID ".slice/x", /* a slice's UID is written with '_' */
        "/kubepods/burstable", "/kubepods/burstable/pod1234", "/kubepods/burstable/" UID,
        "/kubepods/pod" "1234ABCD-5678-90AB-CDEF-0123456789AB" "/" CID};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(bad[i], &ref);
        if (rc != -EINVAL)
            fprintf(stderr, "\n  %s: %d\n", bad[i], rc);
        CU_ASSERT_EQUAL(rc, -EINVAL);
        CU_ASSERT_STRING_EQUAL(ref.uid, "");
    }
    /* relative to posd's cgroup namespace: where it is anchored is not known */
    CU_ASSERT_EQUAL(parse("/../../kubepods-besteffort-pod" UID_ ".slice/cri-containerd-" CID
                          ".scope",
                          &ref),
                    -EXDEV);
    CU_ASSERT_EQUAL(parse("/../system.slice", &ref), 0);
}

static void test_proc_cgroup_files_v1_and_v2(void)
{
    struct posd_pod_ref ref;
    char bad[256];
    /* cgroup v2 */
    CU_ASSERT_EQUAL(posd_pod_from_cgroup("0::/kubepods.slice/kubepods-pod" UID_
                                         ".slice/cri-containerd-" CID ".scope\n",
                                         &ref, bad, sizeof bad),
                    1);
    CU_ASSERT_STRING_EQUAL(ref.container_id, CID);
    /* cgroup v1: the same path under every controller, "cpu,cpuacct" among them */
    const char *v1 = "12:pids:/kubepods/burstable/pod" UID "/" CID "\n"
                     "11:cpu,cpuacct:/kubepods/burstable/pod" UID "/" CID "\n"
                     "1:name=systemd:/kubepods/burstable/pod" UID "/" CID "\n";
    CU_ASSERT_EQUAL(posd_pod_from_cgroup(v1, &ref, bad, sizeof bad), 1);
    CU_ASSERT_STRING_EQUAL(ref.uid, UID);
    /* hybrid: the v2 line at the root, one v1 controller in the pod */
    const char *hybrid = "9:name=systemd:/\n8:pids:/kubepods/pod" UID "/" CID2 "\n0::/\n";
    CU_ASSERT_EQUAL(posd_pod_from_cgroup(hybrid, &ref, bad, sizeof bad), 1);
    CU_ASSERT_STRING_EQUAL(ref.container_id, CID2);
    /* the v2 line wins over the v1 lines */
    char both[1024];
    snprintf(both, sizeof both, "4:memory:/kubepods/pod%s/%s\n0::/kubepods/pod%s/%s\n", SUID,
             CID2, UID, CID);
    CU_ASSERT_EQUAL(posd_pod_from_cgroup(both, &ref, bad, sizeof bad), 1);
    CU_ASSERT_STRING_EQUAL(ref.uid, UID);
    /* no pod anywhere; a malformed one is said with its path */
    CU_ASSERT_EQUAL(posd_pod_from_cgroup("0::/user.slice\n", &ref, bad, sizeof bad), 0);
    CU_ASSERT_EQUAL(posd_pod_from_cgroup("0::/kubepods.slice/kubepods-burstable.slice\n", &ref,
                                         bad, sizeof bad),
                    -EINVAL);
    CU_ASSERT_STRING_EQUAL(bad, "/kubepods.slice/kubepods-burstable.slice");
    CU_ASSERT_EQUAL(posd_pod_from_cgroup("", &ref, bad, sizeof bad), 0);
    CU_ASSERT_EQUAL(posd_pod_from_cgroup("garbage\n::\n0:\n", &ref, bad, sizeof bad), 0);
}

/* --- the log directories ---------------------------------------------------------------------- */

static void mkdirs(const char *fmt, const char *a, const char *b)
{
    char path[1024], cmd[1100];
    snprintf(path, sizeof path, fmt, tmp_root, a, b);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    CU_ASSERT_FATAL(system(cmd) == 0);
}

/* DIR/pods and DIR/containers as the kubelet makes them for pod NS/POD (UIDV) with container
 * CONTAINER of ID CIDV. */
static void kubelet_logs(const char *dir, const char *ns, const char *pod, const char *uidv,
                         const char *container, const char *cidv)
{
    char p[512], link[1024], target[1024];
    snprintf(p, sizeof p, "%s/%s/pods/%s_%s_%s/%s", tmp_root, dir, ns, pod, uidv, container);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s/%s/containers' && touch '%s/0.log'", p, tmp_root,
             dir, p);
    CU_ASSERT_FATAL(system(cmd) == 0);
    snprintf(target, sizeof target, "%s/0.log", p);
    snprintf(link, sizeof link, "%s/%s/containers/%s_%s_%s-%s.log", tmp_root, dir, pod, ns,
             container, cidv);
    CU_ASSERT_FATAL(symlink(target, link) == 0);
}

static void dirs(const char *dir, char *pods, char *containers)
{
    sprintf(pods, "%s/%s/pods", tmp_root, dir);
    sprintf(containers, "%s/%s/containers", tmp_root, dir);
}

static void test_log_directories_give_names_by_uid_and_id(void)
{
    kubelet_logs("a", "ml", "detector-7d9f", UID, "infer", CID);
    kubelet_logs("a", "ml", "detector-7d9f", UID, "sidecar", CID2);
    kubelet_logs("a", "batch", "trainer-0", SUID, "train", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                                                             "aaaaaaaaaaaaaaaaaaaaaaaa");
    mkdirs("%s/a/pods/%s%s", "not-a-pod-dir", ""); /* skipped */
    char pods[512], containers[512];
    dirs("a", pods, containers);
    struct posd_pod_table t = {0};
    CU_ASSERT_EQUAL_FATAL(posd_pod_logs_read(pods, containers, &t), 0);
    CU_ASSERT_EQUAL(t.npods, 2);
    const struct posd_pod_entry *p = posd_pod_table_find(&t, UID);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_STRING_EQUAL(p->namespace_, "ml");
    CU_ASSERT_STRING_EQUAL(p->name, "detector-7d9f");
    const struct posd_pod_container *c = posd_pod_entry_container(p, CID2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_STRING_EQUAL(c->name, "sidecar");
    CU_ASSERT_PTR_NULL(posd_pod_entry_container(p, "bbbbbbbbbbbbbbbbbbbbbbbb"));
    posd_pod_table_free(&t);

    /* one pod at registration, without reading everything */
    struct posd_pod_entry e;
    CU_ASSERT_EQUAL(posd_pod_logs_find(pods, containers, UID, CID, &e), 1);
    CU_ASSERT_STRING_EQUAL(e.name, "detector-7d9f");
    c = posd_pod_entry_container(&e, CID);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_STRING_EQUAL(c->name, "infer");
    posd_pod_entry_free(&e);
    CU_ASSERT_EQUAL(posd_pod_logs_find(pods, containers, SUID, "", &e), 1);
    CU_ASSERT_STRING_EQUAL(e.namespace_, "batch");
    posd_pod_entry_free(&e);
    CU_ASSERT_EQUAL(posd_pod_logs_find(pods, containers, "ffffffff-5678-90ab-cdef-0123456789ab",
                                       CID, &e),
                    0);
    CU_ASSERT_EQUAL(posd_pod_logs_find("/nonexistent/pods", containers, UID, CID, &e), -ENOENT);
}

/* A pod deleted and made again under its name: the old UID's link must not name the new
 * UID's container. */
static void test_a_link_into_another_uid_names_nothing(void)
{
    const char *old = "00000000-5678-90ab-cdef-0123456789ab";
    kubelet_logs("b", "ml", "db-0", old, "db", CID);
    mkdirs("%s/b/pods/ml_db-0_%s%s", UID, "/db");
    char pods[512], containers[512];
    dirs("b", pods, containers);
    struct posd_pod_entry e;
    CU_ASSERT_EQUAL(posd_pod_logs_find(pods, containers, UID, CID, &e), 1);
    CU_ASSERT_PTR_NULL(posd_pod_entry_container(&e, CID));
    posd_pod_entry_free(&e);
}

/* --- the checkpoint and the join ---------------------------------------------------------------- */

static const char checkpoint[] =
    "{\"Data\":{\"PodDeviceEntries\":["
    "{\"PodUID\":\"" UID "\",\"ContainerName\":\"infer\",\"ResourceName\":\"pos.dev/gpu\","
    "\"DeviceIDs\":{\"0\":[\"gpu0-1\",\"gpu0-2\"]},\"AllocResp\":\"CgQKAkZPEgA=\"},"
    "{\"PodUID\":\"" SUID "\",\"ContainerName\":\"train\",\"ResourceName\":\"pos.dev/gpu\","
    "\"DeviceIDs\":[\"gpu0-3\"]},"
    "{\"PodUID\":\"" SUID "\",\"ContainerName\":\"train\",\"ResourceName\":\"nvidia.com/gpu\","
    "\"DeviceIDs\":{\"-1\":[\"GPU-abc\"]}}],"
    "\"RegisteredDevices\":{\"pos.dev/gpu\":[\"gpu0-1\",\"gpu0-2\",\"gpu0-3\"]}},"
    "\"Checksum\":1234567890}";

static void test_checkpoint_parses_and_refuses_garbage(void)
{
    struct posd_pod_checkpoint ck;
    CU_ASSERT_EQUAL_FATAL(posd_pod_checkpoint_parse(checkpoint, strlen(checkpoint), &ck), 0);
    CU_ASSERT_EQUAL_FATAL(ck.n, 3);
    CU_ASSERT_STRING_EQUAL(ck.e[0].uid, UID);
    CU_ASSERT_EQUAL(ck.e[0].nids, 2);
    CU_ASSERT_STRING_EQUAL(ck.e[0].ids[1], "gpu0-2");
    CU_ASSERT_STRING_EQUAL(ck.e[1].ids[0], "gpu0-3");
    CU_ASSERT_STRING_EQUAL(ck.e[2].resource, "nvidia.com/gpu");
    posd_pod_checkpoint_free(&ck);
    static const char *const bad[] = {
        "", "null", "[]", "{", "{\"Data\":", "{\"Data\":{\"PodDeviceEntries\":[{]}}",
        "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"x\",\"ContainerName\":\"c\","
        "\"ResourceName\":\"r\",\"DeviceIDs\":[]}]}}",
        "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"" UID "\",\"ContainerName\":\"c\","
        "\"ResourceName\":\"r\",\"DeviceIDs\":[1]}]}}",
        "{\"Data\":{}} trailing", "{\"a\":\"\\u0000\"}",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = posd_pod_checkpoint_parse(bad[i], strlen(bad[i]), &ck);
        if (rc != -EPROTO)
            fprintf(stderr, "\n  '%s': %d\n", bad[i], rc);
        CU_ASSERT_EQUAL(rc, -EPROTO);
    }
    /* deep nesting inside a member posd skips */
    char deep[200];
    snprintf(deep, sizeof deep, "{\"x\":%.*s%.*s}", 40, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
             40, "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
    CU_ASSERT_EQUAL(posd_pod_checkpoint_parse(deep, strlen(deep), &ck), -EPROTO);
    CU_ASSERT_EQUAL(posd_pod_checkpoint_parse("{\"Data\":{\"PodDeviceEntries\":null}}", 34, &ck),
                    0);
    CU_ASSERT_EQUAL(ck.n, 0);
}

static struct kube_device devs_a[] = {{"pos.dev/gpu", "gpu0-1"}, {"pos.dev/gpu", "gpu0-2"},
                                      {"example.com/nic", "nic0"}};
static struct kube_device devs_b[] = {{"pos.dev/gpu", "gpu0-3"}, {"nvidia.com/gpu", "GPU-abc"}};

static void test_join_names_devices_and_pods_without_logs(void)
{
    struct kube_container ca[] = {{"infer", 3, devs_a}, {"sidecar", 0, NULL}};
    struct kube_container cb[] = {{"train", 2, devs_b}};
    struct kube_pod pods[] = {{"ml", "detector-7d9f", 2, ca}, {"batch", "trainer-0", 1, cb}};
    struct kube_pod_list list = {2, pods};
    struct posd_pod_checkpoint ck;
    CU_ASSERT_EQUAL_FATAL(posd_pod_checkpoint_parse(checkpoint, strlen(checkpoint), &ck), 0);

    /* the log directories know the detector only */
    struct posd_pod_table t = {0};
    CU_ASSERT_EQUAL_FATAL(posd_pod_logs_read("/nonexistent", NULL, &t), -ENOENT);
    struct posd_pod_entry *p = calloc(1, sizeof *p);
    snprintf(p->uid, sizeof p->uid, UID);
    snprintf(p->namespace_, sizeof p->namespace_, "ml");
    snprintf(p->name, sizeof p->name, "detector-7d9f");
    p->containers = calloc(2, sizeof *p->containers);
    p->ncontainers = 2;
    snprintf(p->containers[0].name, sizeof p->containers[0].name, "infer");
    snprintf(p->containers[0].id, sizeof p->containers[0].id, CID);
    snprintf(p->containers[1].name, sizeof p->containers[1].name, "sidecar");
    t.pods = p;
    t.npods = 1;
    CU_ASSERT_EQUAL_FATAL(posd_pod_join(&t, &ck, &list, "pos.dev/gpu"), 0);
    p = (struct posd_pod_entry *)posd_pod_table_find(&t, UID);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_TRUE(p->listed);
    const struct posd_pod_container *c = posd_pod_entry_container(p, CID);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_STRING_EQUAL(c->devices, "gpu0-1,gpu0-2"); /* the nic is another resource */
    CU_ASSERT_TRUE(c->has_devices);
    CU_ASSERT_STRING_EQUAL(p->containers[1].devices, "");
    CU_ASSERT_TRUE(p->containers[1].has_devices); /* the List says: none */
    /* the trainer has no log directory: its UID's devices in the checkpoint are the List's
     * trainer-0/train's, so that is its name; its container ID stays unknown */
    const struct posd_pod_entry *q = posd_pod_table_find(&t, SUID);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    CU_ASSERT_STRING_EQUAL(q->namespace_, "batch");
    CU_ASSERT_STRING_EQUAL(q->name, "trainer-0");
    CU_ASSERT_TRUE(q->listed);
    CU_ASSERT_EQUAL(q->ncontainers, 1);
    CU_ASSERT_STRING_EQUAL(q->containers[0].id, "");
    CU_ASSERT_STRING_EQUAL(q->containers[0].devices, "gpu0-3");
    /* a client in a container of the trainer is in its only container with devices; in the
     * detector, whose IDs the links give, an unknown ID is no container, and a client in no
     * container's cgroup is in none */
    CU_ASSERT_PTR_EQUAL(posd_pod_client_container(q, CID), &q->containers[0]);
    CU_ASSERT_PTR_NULL(posd_pod_client_container(q, ""));
    CU_ASSERT_PTR_EQUAL(posd_pod_client_container(p, CID), c);
    CU_ASSERT_PTR_NULL(posd_pod_client_container(p, "4444444444444444444444444444444444444444444444444444444444444444"));
    posd_pod_table_free(&t);

    /* without the List: names from the logs only, not listed, devices from the checkpoint */
    struct posd_pod_table t2 = {0};
    posd_pod_logs_read("/nonexistent", NULL, &t2);
    CU_ASSERT_EQUAL(posd_pod_join(&t2, &ck, NULL, "pos.dev/gpu"), 0);
    CU_ASSERT_EQUAL(t2.npods, 0); /* a UID no log and no List names stays nameless */
    posd_pod_table_free(&t2);
    posd_pod_checkpoint_free(&ck);
}

/* Devices that do not match exactly name no pod: a List pod holding more, or other, devices is
 * another pod. */
static void test_join_needs_the_same_devices(void)
{
    struct kube_device more[] = {{"pos.dev/gpu", "gpu0-3"}, {"pos.dev/gpu", "gpu0-4"}};
    struct kube_container cb[] = {{"train", 2, more}};
    struct kube_pod pods[] = {{"batch", "trainer-1", 1, cb}};
    struct kube_pod_list list = {1, pods};
    struct posd_pod_checkpoint ck;
    CU_ASSERT_EQUAL_FATAL(posd_pod_checkpoint_parse(checkpoint, strlen(checkpoint), &ck), 0);
    struct posd_pod_table t = {0};
    CU_ASSERT_EQUAL(posd_pod_join(&t, &ck, &list, "pos.dev/gpu"), 0);
    CU_ASSERT_PTR_NULL(posd_pod_table_find(&t, SUID));
    posd_pod_table_free(&t);
    posd_pod_checkpoint_free(&ck);
}

/* In a pod without container IDs, two containers with devices: a client's is not known. */
static void test_client_container_of_two_with_devices_is_unknown(void)
{
    struct posd_pod_container cs[2] = {{.name = "a", .devices = "gpu0-1"},
                                       {.name = "b", .devices = "gpu0-2"}};
    struct posd_pod_entry p = {.ncontainers = 2, .containers = cs};
    CU_ASSERT_PTR_NULL(posd_pod_client_container(&p, CID));
    cs[1].devices[0] = '\0';
    CU_ASSERT_PTR_EQUAL(posd_pod_client_container(&p, CID), &cs[0]);
}

static void test_names_set_and_cleared(void)
{
    struct posd_identity id;
    memset(&id, 'x', sizeof id);
    posd_pod_names_set(&id, NULL, NULL);
    CU_ASSERT_STRING_EQUAL(id.k8s_namespace, "");
    CU_ASSERT_STRING_EQUAL(id.pod, "");
    CU_ASSERT_STRING_EQUAL(id.container, "");
    CU_ASSERT_STRING_EQUAL(id.devices, "");
}

/* --- suite ------------------------------------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int suite_init(void)
{
    return mkdtemp(tmp_root) ? 0 : -1;
}

static int suite_clean(void)
{
    return nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("pod", suite_init, suite_clean);
    POS_ADD_TEST(s, test_systemd_driver_paths);
    POS_ADD_TEST(s, test_cgroupfs_driver_paths);
    POS_ADD_TEST(s, test_paths_that_name_no_pod);
    POS_ADD_TEST(s, test_proc_cgroup_files_v1_and_v2);
    POS_ADD_TEST(s, test_log_directories_give_names_by_uid_and_id);
    POS_ADD_TEST(s, test_a_link_into_another_uid_names_nothing);
    POS_ADD_TEST(s, test_checkpoint_parses_and_refuses_garbage);
    POS_ADD_TEST(s, test_join_names_devices_and_pods_without_logs);
    POS_ADD_TEST(s, test_join_needs_the_same_devices);
    POS_ADD_TEST(s, test_client_container_of_two_with_devices_is_unknown);
    POS_ADD_TEST(s, test_names_set_and_cleared);
}
