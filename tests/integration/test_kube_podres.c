/* kube_podres_list (kube/podres.c, over kube/grpc.c's client) against a pod-resources server on
 * grpcio (tests/kube/fake_podres.py): a good list, unknown fields as the real kubelet sends
 * them, no socket, garbage, an error status, a server that never answers, names at and over
 * their limits. */
#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "kube/podres.h"
#include "tests/cunit_main.h"
#include "tests/integration/kube.h"

static char dir[128], sock[192], json[192], logp[192];
static const char *missing;

static int suite_init(void)
{
    missing = kube_fakes_missing();
    snprintf(dir, sizeof dir, "/tmp/pos-test-kube-podres-%d", (int)getpid());
    snprintf(sock, sizeof sock, "%s/kubelet.sock", dir);
    snprintf(json, sizeof json, "%s/pods.json", dir);
    snprintf(logp, sizeof logp, "%s/fake.log", dir);
    return mkdir(dir, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

static int suite_clean(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int skipped(void)
{
    if (!missing)
        return 0;
    fprintf(stderr, "\n  %s: skipped\n", missing);
    return 1;
}

static void write_json(const char *text)
{
    FILE *f = fopen(json, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
}

/* Starts the fake in MODE and waits for it to serve. */
static int fake_start(struct kube_fake *f, const char *mode)
{
    unlink(sock);
    const char *const argv[] = {"tests/kube/fake_podres.py", sock, json, "--mode", mode, NULL};
    char line[256];
    if (kube_fake_start(f, argv, logp) < 0 || kube_fake_wait(f, "ready", line, sizeof line, 20) < 0)
        return -1;
    return 0;
}

static const char GOOD[] =
    "{\"podResources\": ["
    " {\"name\": \"infer-0\", \"namespace\": \"ml\", \"containers\": ["
    "   {\"name\": \"model\", \"devices\": ["
    "     {\"resourceName\": \"pos.dev/gpu\", \"deviceIds\": [\"gpu0-3\", \"gpu0-4\"]},"
    "     {\"resourceName\": \"example.com/nic\", \"deviceIds\": [\"nic1\"]}]},"
    "   {\"name\": \"sidecar\"}]},"
    " {\"name\": \"web\", \"namespace\": \"default\", \"containers\": [{\"name\": \"app\"}]}]}";

static void check_good(const struct kube_pod_list *l)
{
    CU_ASSERT_EQUAL_FATAL(l->n_pods, 2);
    const struct kube_pod *p = &l->pods[0];
    CU_ASSERT_STRING_EQUAL(p->name, "infer-0");
    CU_ASSERT_STRING_EQUAL(p->namespace_, "ml");
    CU_ASSERT_EQUAL_FATAL(p->n_containers, 2);
    CU_ASSERT_STRING_EQUAL(p->containers[0].name, "model");
    CU_ASSERT_EQUAL_FATAL(p->containers[0].n_devices, 3);
    CU_ASSERT_STRING_EQUAL(p->containers[0].devices[0].resource, "pos.dev/gpu");
    CU_ASSERT_STRING_EQUAL(p->containers[0].devices[0].id, "gpu0-3");
    CU_ASSERT_STRING_EQUAL(p->containers[0].devices[1].id, "gpu0-4");
    CU_ASSERT_STRING_EQUAL(p->containers[0].devices[2].resource, "example.com/nic");
    CU_ASSERT_STRING_EQUAL(p->containers[0].devices[2].id, "nic1");
    CU_ASSERT_STRING_EQUAL(p->containers[1].name, "sidecar");
    CU_ASSERT_EQUAL(p->containers[1].n_devices, 0);
    CU_ASSERT_STRING_EQUAL(l->pods[1].name, "web");
    CU_ASSERT_STRING_EQUAL(l->pods[1].namespace_, "default");
    CU_ASSERT_EQUAL(l->pods[1].n_containers, 1);
}

static void test_a_good_list(void)
{
    if (skipped())
        return;
    write_json(GOOD);
    struct kube_fake f;
    CU_ASSERT_EQUAL_FATAL(fake_start(&f, "good"), 0);
    struct kube_pod_list l;
    char err[256] = "";
    int rc = kube_podres_list(sock, 5000, &l, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  kube_podres_list: %s\n", err);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0) {
        check_good(&l);
        kube_pod_list_free(&l);
        CU_ASSERT_EQUAL(l.n_pods, 0);
    }
    kube_fake_stop(&f);
}

/* The kubelet's List carries what our .proto leaves out (cpu_ids, memory, dynamic resources):
 * the fake's mode "upstream" adds those fields to each pod and container. */
static void test_unknown_fields_are_skipped(void)
{
    if (skipped())
        return;
    write_json(GOOD);
    struct kube_fake f;
    CU_ASSERT_EQUAL_FATAL(fake_start(&f, "upstream"), 0);
    struct kube_pod_list l;
    char err[256] = "";
    int rc = kube_podres_list(sock, 5000, &l, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  kube_podres_list: %s\n", err);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0) {
        check_good(&l);
        kube_pod_list_free(&l);
    }
    kube_fake_stop(&f);
}

static void test_no_socket_is_enoent(void)
{
    unlink(sock);
    struct kube_pod_list l;
    char err[256] = "";
    CU_ASSERT_EQUAL(kube_podres_list(sock, 1000, &l, err, sizeof err), -ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, sock));
    CU_ASSERT_EQUAL(l.n_pods, 0);
}

static void test_a_dead_socket_is_refused(void)
{
    /* a socket file nobody listens on: what a killed kubelet leaves */
    char cmd[300];
    snprintf(cmd, sizeof cmd,
             KUBE_PYTHON " -c 'import socket; s = socket.socket(socket.AF_UNIX); s.bind(\"%s\")'",
             sock);
    unlink(sock);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    struct kube_pod_list l;
    char err[256] = "";
    CU_ASSERT_EQUAL(kube_podres_list(sock, 1000, &l, err, sizeof err), -ECONNREFUSED);
    unlink(sock);
}

static void test_garbage_is_eproto(void)
{
    if (skipped())
        return;
    write_json(GOOD);
    struct kube_fake f;
    CU_ASSERT_EQUAL_FATAL(fake_start(&f, "garbage"), 0);
    struct kube_pod_list l;
    char err[256] = "";
    CU_ASSERT_EQUAL(kube_podres_list(sock, 5000, &l, err, sizeof err), -EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a valid"));
    CU_ASSERT_EQUAL(l.n_pods, 0);
    kube_fake_stop(&f);
}

static void test_an_error_status_is_eproto(void)
{
    if (skipped())
        return;
    write_json(GOOD);
    struct kube_fake f;
    CU_ASSERT_EQUAL_FATAL(fake_start(&f, "error"), 0);
    struct kube_pod_list l;
    char err[256] = "";
    CU_ASSERT_EQUAL(kube_podres_list(sock, 5000, &l, err, sizeof err), -EPROTO);
    /* the status and the server's message, percent-decoded, reach the caller */
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "status 14"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "the fake is told to fail"));
    kube_fake_stop(&f);
}

/* Within TIMEOUT_MS a fake in MODE gives -ETIMEDOUT. */
static void times_out(const char *mode)
{
    write_json(GOOD);
    struct kube_fake f;
    CU_ASSERT_EQUAL_FATAL(fake_start(&f, mode), 0);
    struct kube_pod_list l;
    char err[256] = "";
    double t0 = util_now();
    int rc = kube_podres_list(sock, 500, &l, err, sizeof err);
    double took = util_now() - t0;
    if (rc != -ETIMEDOUT)
        fprintf(stderr, "\n  kube_podres_list (%s): %d %s\n", mode, rc, err);
    CU_ASSERT_EQUAL(rc, -ETIMEDOUT);
    CU_ASSERT(took >= 0.3 && took < 1.5 * util_time_scale());
    kube_fake_stop(&f);
}

/* grpcio keeps the request's grpc-timeout (4/5 of the call's): it answers DEADLINE_EXCEEDED,
 * which is a timeout too */
static void test_a_server_that_never_answers_times_out(void)
{
    if (skipped())
        return;
    times_out("hang");
}

/* a socket that says nothing at all: the client's own deadline */
static void test_a_silent_socket_times_out(void)
{
    if (skipped())
        return;
    times_out("silent");
}

/* A name of LEN bytes as pod name (FIELD "name"), namespace or container name. */
static int list_with(const char *field, size_t len)
{
    char name[600];
    memset(name, 'a', len);
    name[len] = '\0';
    char text[2048];
    if (strcmp(field, "namespace") == 0)
        snprintf(text, sizeof text,
                 "{\"podResources\": [{\"name\": \"p\", \"namespace\": \"%s\"}]}", name);
    else if (strcmp(field, "container") == 0)
        snprintf(text, sizeof text,
                 "{\"podResources\": [{\"name\": \"p\", \"namespace\": \"n\", \"containers\": "
                 "[{\"name\": \"%s\"}]}]}",
                 name);
    else if (strcmp(field, "device") == 0)
        snprintf(text, sizeof text,
                 "{\"podResources\": [{\"name\": \"p\", \"namespace\": \"n\", \"containers\": "
                 "[{\"name\": \"c\", \"devices\": [{\"resourceName\": \"r\", \"deviceIds\": "
                 "[\"%s\"]}]}]}]}",
                 name);
    else
        snprintf(text, sizeof text, "{\"podResources\": [{\"name\": \"%s\", \"namespace\": \"n\"}]}",
                 name);
    write_json(text);
    struct kube_pod_list l;
    char err[256] = "";
    int rc = kube_podres_list(sock, 5000, &l, err, sizeof err);
    if (rc == 0)
        kube_pod_list_free(&l);
    return rc;
}

static void test_names_over_their_limits_are_refused(void)
{
    if (skipped())
        return;
    write_json(GOOD);
    struct kube_fake f;
    CU_ASSERT_EQUAL_FATAL(fake_start(&f, "good"), 0);
    /* each limit's largest name passes, one byte more is refused (not cut) */
    CU_ASSERT_EQUAL(list_with("pod", KUBE_POD_MAX - 1), 0);
    CU_ASSERT_EQUAL(list_with("pod", KUBE_POD_MAX), -EMSGSIZE);
    CU_ASSERT_EQUAL(list_with("namespace", KUBE_NAMESPACE_MAX - 1), 0);
    CU_ASSERT_EQUAL(list_with("namespace", KUBE_NAMESPACE_MAX), -EMSGSIZE);
    CU_ASSERT_EQUAL(list_with("container", KUBE_CONTAINER_MAX - 1), 0);
    CU_ASSERT_EQUAL(list_with("container", KUBE_CONTAINER_MAX), -EMSGSIZE);
    CU_ASSERT_EQUAL(list_with("device", KUBE_DEVICE_ID_MAX - 1), 0);
    CU_ASSERT_EQUAL(list_with("device", KUBE_DEVICE_ID_MAX), -EMSGSIZE);
    kube_fake_stop(&f);
}

/* A reply over 16 MiB is refused, not read into memory: the fake's mode "huge" pads its list. */
static void test_a_reply_over_16_mib_is_refused(void)
{
    if (skipped())
        return;
    write_json(GOOD);
    struct kube_fake f;
    CU_ASSERT_EQUAL_FATAL(fake_start(&f, "huge"), 0);
    struct kube_pod_list l;
    char err[256] = "";
    CU_ASSERT_EQUAL(kube_podres_list(sock, 10000, &l, err, sizeof err), -EMSGSIZE);
    kube_fake_stop(&f);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("kube_podres", suite_init, suite_clean);
    POS_ADD_TEST(s, test_a_good_list);
    POS_ADD_TEST(s, test_unknown_fields_are_skipped);
    POS_ADD_TEST(s, test_no_socket_is_enoent);
    POS_ADD_TEST(s, test_a_dead_socket_is_refused);
    POS_ADD_TEST(s, test_garbage_is_eproto);
    POS_ADD_TEST(s, test_an_error_status_is_eproto);
    POS_ADD_TEST(s, test_a_server_that_never_answers_times_out);
    POS_ADD_TEST(s, test_a_silent_socket_times_out);
    POS_ADD_TEST(s, test_names_over_their_limits_are_refused);
    POS_ADD_TEST(s, test_a_reply_over_16_mib_is_refused);
}
