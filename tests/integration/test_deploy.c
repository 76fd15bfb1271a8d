/* deploy/kubernetes/ as far as it can be checked without a cluster (tests/kube/check_deploy.py
 * does the reading): the manifests parse and refer to what exists; every pos container runs the
 * image the Dockerfile builds; every program and file they name is in what make install
 * installs, and the node paths they hand each other agree; the plugin's arguments are options
 * pos-device-plugin accepts (its --help once it is built, else its documented CLI); and the
 * ConfigMaps' posd.conf and policy files are accepted by a real posd, which starts on them with
 * every rule. A posd that does not know the pod keys yet (policy_dir, [kubernetes],
 * match_namespace: the kident branch) says so and that check is skipped. */
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/suite.h"

static struct suite s;
static char sanitize[128];

static int init(void)
{
    if (util_read_file("build/.sanitize", sanitize, sizeof sanitize) < 0)
        sanitize[0] = '\0';
    return suite_open(&s, "deploy", NULL);
}

static int clean(void)
{
    return suite_close(&s);
}

/* tests/kube/check_deploy.py ARGS...; its output in OUT; its exit status */
static int check(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int check(char *out, size_t cap, const char *fmt, ...)
{
    char args[1024], cmd[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/kube/check_deploy.py %s", args);
    int rc = util_run(cmd, out, cap);
    if (rc != 0)
        fprintf(stderr, "\n  check_deploy.py %s: %s", args, out);
    return rc;
}

static void test_the_manifests_parse_and_refer_to_what_exists(void)
{
    char out[8192];
    CU_ASSERT_EQUAL(check(out, sizeof out, "parse"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "ok\n"));
}

static void test_every_pos_container_runs_the_dockerfiles_image(void)
{
    char out[8192];
    CU_ASSERT_EQUAL(check(out, sizeof out, "images"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "ok\n"));
}

static void test_every_path_is_installed_and_the_node_paths_agree(void)
{
    static char out[65536];
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory install "
             "PREFIX=/usr/local DESTDIR=%s/root SANITIZE='%s'",
             s.dir, sanitize);
    CU_ASSERT_EQUAL_FATAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT_EQUAL(check(out, sizeof out, "paths %s/root", s.dir), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "ok\n"));
}

static void test_the_plugin_args_are_the_plugins(void)
{
    char out[8192], help[256], cmd[512];
    if (access("build/pos-device-plugin", X_OK) == 0) {
        snprintf(help, sizeof help, "%s/plugin-help", s.dir);
        snprintf(cmd, sizeof cmd, "build/pos-device-plugin --help > %s 2>&1", help);
        CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
        CU_ASSERT_EQUAL(check(out, sizeof out, "plugin-args %s", help), 0);
    } else {
        fprintf(stderr, "\ntest_deploy: no build/pos-device-plugin on this branch: its arguments "
                        "are checked against its documented CLI\n");
        CU_ASSERT_EQUAL(check(out, sizeof out, "plugin-args"), 0);
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "ok\n"));
}

/* A TCP port on 127.0.0.1 that nobody holds now */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void test_the_policy_configmap_loads_in_posd(void)
{
    static char out[65536];
    char dir[256], conf[300], sock[300];
    snprintf(dir, sizeof dir, "%s/node", s.dir);
    CU_ASSERT_EQUAL_FATAL(check(out, sizeof out, "extract %s %d", dir, free_port()), 0);
    int rules = atoi(out);
    CU_ASSERT(rules >= 3);
    snprintf(conf, sizeof conf, "%s/posd.conf", dir);
    snprintf(sock, sizeof sock, "%s/posd.sock", dir);
    const char *const args[] = {NULL};
    long from = suite_log_size(&s);
    s.posd = util_posd_start_args(conf, sock, s.log, args);
    CU_ASSERT_FATAL(s.posd > 0);
    int listening = access(sock, F_OK) == 0;
    util_posd_stop(&s.posd, SIGTERM);
    suite_log_from(&s, from, out, sizeof out);
    static const char *const unknown[] = {
        "unknown key 'policy_dir'", "unknown section [kubernetes]", "unknown key 'match_namespace'",
        "unknown key 'match_pod'", "unknown key 'match_container'"};
    for (size_t i = 0; !listening && i < sizeof unknown / sizeof unknown[0]; i++)
        if (strstr(out, unknown[i])) {
            fprintf(stderr,
                    "\ntest_deploy: this posd does not know the pod keys yet (%s: the "
                    "kident branch adds them): the ConfigMap's load is skipped\n",
                    unknown[i]);
            return;
        }
    CU_ASSERT(listening);
    char want[64];
    snprintf(want, sizeof want, "%d rules", rules);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    if (!listening || !strstr(out, want))
        fprintf(stderr, "\n  posd on the ConfigMaps:\n%s", out);
}

void pos_test_register(void)
{
    CU_pSuite p = POS_ADD_SUITE("deploy/kubernetes", init, clean);
    POS_ADD_TEST(p, test_the_manifests_parse_and_refer_to_what_exists);
    POS_ADD_TEST(p, test_every_pos_container_runs_the_dockerfiles_image);
    POS_ADD_TEST(p, test_every_path_is_installed_and_the_node_paths_agree);
    POS_ADD_TEST(p, test_the_plugin_args_are_the_plugins);
    POS_ADD_TEST(p, test_the_policy_configmap_loads_in_posd);
}
