/* Integration tests of posctl and posd's CONTROL requests, and of the tools' one-line errors:
 * a class or priority set at run time changes who is held and lasts until a reload; a drained
 * device gets no new grants until it is undrained; changes need root or the posd group (the
 * unprivileged part forks and setuid()s to 65534, so it runs only as root and says so when
 * skipped); a missing socket, a file that is not a socket, another protocol version, a
 * socket this user may not reach and bad options each give one line and a non-zero exit. Real processes: posd, posapp under the shim, the simulated driver. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pos/proto.h"
#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX 16384
#define NOBODY  65534

static struct suite suite;

static int suite_init(void)
{
    const char *conf = "[rule batch-jobs]\nmatch_app = batch*\nclass = batch\n";
    return suite_open(&suite, "posctl", conf) == 0 && access("build/posctl", X_OK) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    return suite_close(&suite);
}

static void posd_start(const char *policy)
{
    CU_ASSERT_FATAL(suite_posd_start(&suite, policy) > 0);
    CU_ASSERT_FATAL(access(suite.sock, F_OK) == 0);
}

static int posctl(const char *args, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "build/posctl -s %s %s", suite.sock, args);
    return util_run(cmd, out, cap);
}

static int posctl_load(const char *file, char *out, size_t cap)
{
    char args[300];
    snprintf(args, sizeof args, "profiles load %s", file);
    return posctl(args, out, cap);
}

static void posapp_stop(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Client APP in a STATS reply, waiting up to 5 s for it to register; 0 when it is there. */
static int find_client(const char *app, struct pos_client_stats *out)
{
    for (int k = 0; k < 100; k++) {
        struct pos_device_stats dev;
        struct pos_client_stats cs[8];
        int n = util_stats(suite.sock, &dev, cs, 8);
        for (int i = 0; i < n && i < 8; i++)
            if (strcmp(cs[i].app, app) == 0) {
                *out = cs[i];
                return 0;
            }
        usleep(50000);
    }
    return -1;
}

/* Whether APP is seen held (POS_CLIENT_HELD) within about 1 s. */
static int seen_held(const char *app)
{
    for (int k = 0; k < 20; k++) {
        struct pos_client_stats c;
        if (find_client(app, &c) == 0 && (c.flags & POS_CLIENT_HELD))
            return 1;
        usleep(50000);
    }
    return 0;
}

/* A batch client is held beside a latency client; posctl gives it priority 0 and the other
 * one is held instead, until a reload puts both back under the configuration's rules. */
static void test_set_priority_moves_the_hold_until_reload(void)
{
    posd_start("priority");
    pid_t lat = util_posapp_until_killed("lat1", "resnet50");
    pid_t bat = util_posapp_until_killed("batch1", "resnet18");
    struct pos_client_stats b, l;
    CU_ASSERT_FATAL(find_client("batch1", &b) == 0 && find_client("lat1", &l) == 0);
    CU_ASSERT_STRING_EQUAL(b.class_name, "batch");
    CU_ASSERT(seen_held("batch1"));
    char out[OUT_MAX], args[128];
    snprintf(args, sizeof args, "set %u --class realtime --priority 0", b.client_id);
    CU_ASSERT_EQUAL(posctl(args, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "class realtime priority 0 until it exits"));
    CU_ASSERT(find_client("batch1", &b) == 0);
    CU_ASSERT_STRING_EQUAL(b.class_name, "realtime");
    CU_ASSERT_EQUAL(b.priority, 0);
    CU_ASSERT(b.flags & POS_CLIENT_OVERRIDE);
    CU_ASSERT(seen_held("lat1")); /* the core was told, not only the statistics */
    CU_ASSERT_EQUAL(posctl("list", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "realtime"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "override"));
    /* a reload drops the override */
    CU_ASSERT_EQUAL(posctl("reload", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "configuration reloaded"));
    CU_ASSERT(find_client("batch1", &b) == 0);
    CU_ASSERT_STRING_EQUAL(b.class_name, "batch");
    CU_ASSERT(!(b.flags & POS_CLIENT_OVERRIDE));
    CU_ASSERT(seen_held("batch1"));
    /* what posd refuses, in one line, exit 1 */
    snprintf(args, sizeof args, "set %u --class nosuch", b.client_id);
    CU_ASSERT_EQUAL(posctl(args, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "no class 'nosuch'"));
    CU_ASSERT_EQUAL(posctl("set 9999 --priority 1", out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "no client 9999"));
    CU_ASSERT_EQUAL(posctl("show 9999", out, sizeof out), 1);
    snprintf(args, sizeof args, "show %u", b.client_id);
    CU_ASSERT_EQUAL(posctl(args, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "app batch1\n"));
    posapp_stop(lat);
    posapp_stop(bat);
    util_posd_stop(&suite.posd, SIGTERM);
}

/* Operators posd released to APP so far. */
static uint64_t released(const char *app)
{
    struct pos_client_stats c;
    return find_client(app, &c) == 0 ? c.released : 0;
}

/* A drained device's client gets no new grants (it keeps running what it had) and is
 * scheduled again once undrained. */
static void test_drain_stops_new_grants_until_undrain(void)
{
    posd_start("fifo");
    pid_t app = util_posapp_until_killed("app1", "resnet18");
    struct pos_client_stats c;
    CU_ASSERT_FATAL(find_client("app1", &c) == 0);
    char out[OUT_MAX];
    CU_ASSERT_EQUAL(posctl("drain 0", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "device 0 drained"));
    CU_ASSERT_EQUAL(posctl("status", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "drained: 0\n"));
    usleep(100000); /* what was granted before completes */
    uint64_t g0 = released("app1");
    usleep(400000);
    uint64_t g1 = released("app1");
    CU_ASSERT_EQUAL(g1, g0);
    CU_ASSERT(find_client("app1", &c) == 0 && (c.flags & POS_CLIENT_HELD));
    CU_ASSERT_EQUAL(posctl("undrain 0", out, sizeof out), 0);
    usleep(300000);
    uint64_t g2 = released("app1");
    CU_ASSERT(g2 > g1 + 10);
    if (g1 != g0 || g2 <= g1 + 10)
        fprintf(stderr, "released: %llu drained, %llu 0.4 s later, %llu undrained\n",
                (unsigned long long)g0, (unsigned long long)g1, (unsigned long long)g2);
    CU_ASSERT_EQUAL(posctl("status", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "drained: none"));
    CU_ASSERT_EQUAL(posctl("drain 64", out, sizeof out), 2); /* no such device: usage */
    posapp_stop(app);
    util_posd_stop(&suite.posd, SIGTERM);
}

/* Runs posctl ARGS as uid NOBODY with supplementary group GID (-1: none); its output in
 * OUT. Returns its exit status. */
static int posctl_as(gid_t gid, const char *args, char *out, size_t cap)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    chmod(suite.dir, 0711);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 1);
        dup2(p[1], 2);
        gid_t groups[1] = {gid};
        if (setgroups(gid == (gid_t)-1 ? 0 : 1, groups) < 0 || setgid(NOBODY) < 0 ||
            setuid(NOBODY) < 0)
            _exit(99);
        char cmd[512];
        snprintf(cmd, sizeof cmd, "exec build/posctl -s %s %s", suite.sock, args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    return util_child_output(pid, p[0], out, cap);
}

/* Changing posd needs root or the posd group: anyone else gets one line and exit 1, and
 * nothing changes; status is open to all. */
static void test_changes_need_root_or_the_posd_group(void)
{
    if (geteuid() != 0) {
        fprintf(stderr,
                "test_changes_need_root_or_the_posd_group: needs root (a posctl of uid "
                "%d beside root's): skipped\n",
                NOBODY);
        return;
    }
    posd_start("priority");
    char out[OUT_MAX];
    static const char *const changes[] = {"drain 0",        "undrain 0",      "reload",
                                          "set 1 --priority 0", "profiles save", "profiles reset",
                                          "profiles load /etc/hostname"};
    for (size_t i = 0; i < sizeof changes / sizeof changes[0]; i++) {
        CU_ASSERT_EQUAL(posctl_as((gid_t)-1, changes[i], out, sizeof out), 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "permission denied"));
        CU_ASSERT_EQUAL(util_count(out, "\n"), 1);
    }
    CU_ASSERT_EQUAL(posctl_as((gid_t)-1, "status", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "drained: none")); /* the drain was refused */
    /* and root may */
    CU_ASSERT_EQUAL(posctl("drain 0", out, sizeof out), 0);
    CU_ASSERT_EQUAL(posctl("undrain 0", out, sizeof out), 0);
    struct group *g = getgrnam("posd");
    if (!g) {
        fprintf(stderr, "test_changes_need_root_or_the_posd_group: no group 'posd' on this "
                        "machine: the member's part skipped\n");
    } else {
        CU_ASSERT_EQUAL(posctl_as(g->gr_gid, "drain 0", out, sizeof out), 0);
        CU_ASSERT_EQUAL(posctl_as(g->gr_gid, "undrain 0", out, sizeof out), 0);
    }
    util_posd_stop(&suite.posd, SIGTERM);
}

/* Kernel profiles through posctl: a client's run leaves profiles that `profiles save` writes
 * to posd's state file; `reset` forgets them and removes it; `load` imports a saved copy (and
 * refuses a broken file whole, with its FILE:LINE). */
static void test_profiles_save_reset_load(void)
{
    char state[200], file[240], copy[240], bad[240], out[OUT_MAX], cmd[1024];
    snprintf(state, sizeof state, "%s/state", suite.dir);
    snprintf(file, sizeof file, "%s/profiles", state);
    snprintf(copy, sizeof copy, "%s/profiles.copy", suite.dir);
    snprintf(bad, sizeof bad, "%s/profiles.bad", suite.dir);
    char *was = getenv("POSD_STATE_DIR") ? strdup(getenv("POSD_STATE_DIR")) : NULL;
    setenv("POSD_STATE_DIR", state, 1);
    posd_start("pos");
    pid_t app = fork();
    if (app == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        setenv("LD_PRELOAD", util_shim_preload(), 1);
        execl("build/posapp", "posapp", "--model", "resnet18", "--requests", "30", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(app, &st, 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT_EQUAL(posctl("profiles save", out, sizeof out), 0);
    unsigned n = 0;
    CU_ASSERT_EQUAL(sscanf(out, "%u kernel profiles saved to", &n), 1);
    CU_ASSERT(n > 5); /* resnet18 has 23 kernels; most are sampled in 30 requests */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, file));
    snprintf(cmd, sizeof cmd, "grep -c '^k ' %s && cp %s %s", file, file, copy);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT_EQUAL((unsigned)atoi(out), n);
    CU_ASSERT_EQUAL(posctl("profiles reset", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "forgotten"));
    CU_ASSERT_NOT_EQUAL(access(file, F_OK), 0);
    CU_ASSERT_EQUAL(posctl("profiles save", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "0 kernel profiles saved"));
    /* a broken file: refused whole */
    snprintf(cmd, sizeof cmd, "head -n 3 %s > %s", copy, bad);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT_EQUAL(posctl_load(bad, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "refused, nothing loaded"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "truncated"));
    CU_ASSERT_EQUAL(util_count(out, "\n"), 1);
    CU_ASSERT_EQUAL(posctl("profiles save", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "0 kernel profiles saved"));
    /* the copy: every profile back */
    CU_ASSERT_EQUAL(posctl_load(copy, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "new)"));
    CU_ASSERT_EQUAL(posctl("profiles save", out, sizeof out), 0);
    unsigned m = 0;
    CU_ASSERT_EQUAL(sscanf(out, "%u kernel profiles saved to", &m), 1);
    CU_ASSERT_EQUAL(m, n);
    CU_ASSERT_EQUAL(posctl("profiles bogus", out, sizeof out), 2);
    util_posd_stop(&suite.posd, SIGTERM);
    if (was) {
        setenv("POSD_STATE_DIR", was, 1);
        free(was);
    } else {
        unsetenv("POSD_STATE_DIR");
    }
}

/* A listening socket that answers every request with a REJECT of protocol VERSION (a posd
 * of another version), in a child; returns its pid. */
static pid_t other_version_posd(const char *path, uint16_t version)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%.*s", (int)sizeof a.sun_path - 1, path);
    unlink(path);
    int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 8) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        for (;;) {
            int c = accept(s, NULL, NULL);
            char buf[4096];
            if (c < 0 || recv(c, buf, sizeof buf, 0) < 0)
                _exit(1);
            struct {
                struct pos_msg_hdr h;
                char why[32];
            } m = {{POS_PROTO_MAGIC, version, POS_MSG_REJECT, 32, 0}, "other version"};
            send(c, &m, sizeof m, 0);
            close(c);
        }
    }
    close(s);
    return pid;
}

/* Every tool: a missing socket, a posd of another protocol version (posctl, posstat), an
 * unknown option and an unknown command each give one line saying what to do and a non-zero
 * exit; --help prints the usage (posd, possim, postrace and posapp too). */
static void test_tools_say_what_to_do_in_one_line(void)
{
    static const char *const tools[] = {"build/posctl", "build/posstat"};
    char out[OUT_MAX], cmd[512], other[192];
    snprintf(other, sizeof other, "%s/other.sock", suite.dir);
    pid_t fake = other_version_posd(other, POS_PROTO_VERSION + 1);
    CU_ASSERT_FATAL(fake > 0);
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
        const char *list = strstr(tools[i], "posctl") ? " list" : "";
        snprintf(cmd, sizeof cmd, "%s -s %s/nosuch.sock%s", tools[i], suite.dir, list);
        CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "no posd socket there: is posd running?"));
        CU_ASSERT_EQUAL(util_count(out, "\n"), 1);
        snprintf(cmd, sizeof cmd, "%s -s %s%s", tools[i], other, list);
        CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "speaks protocol version"));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "that came with this posd"));
        CU_ASSERT_EQUAL(util_count(out, "\n"), 1);
        snprintf(cmd, sizeof cmd, "%s -s %s%s", tools[i], suite.conf, list); /* not a socket */
        CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "that is not a socket"));
        CU_ASSERT_EQUAL(util_count(out, "\n"), 1);
        snprintf(cmd, sizeof cmd, "%s --no-such-option", tools[i]);
        CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 2);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "see --help"));
        CU_ASSERT_EQUAL(util_count(out, "\n"), 1);
        snprintf(cmd, sizeof cmd, "%s --help", tools[i]);
        CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "usage:"));
    }
    /* the other tools: an unknown option is one line, exit 2; --help is usage, exit 0 */
    static const char *const others[] = {"build/posd", "build/possim", "build/postrace",
                                         "build/posapp"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s --no-such-option", others[i]);
        CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 2);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "see --help"));
        CU_ASSERT_EQUAL(util_count(out, "\n"), 1);
        if (util_count(out, "\n") != 1)
            fprintf(stderr, "\n  %s: %s", others[i], out);
        snprintf(cmd, sizeof cmd, "%s --help", others[i]);
        CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "usage:"));
    }
    /* -h is --help on every tool */
    static const char *const all[] = {"build/posctl", "build/posstat", "build/posd",
                                      "build/possim", "build/postrace", "build/posapp"};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s -h", all[i]);
        CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "usage:"));
    }
    CU_ASSERT_EQUAL(util_run("build/posctl frobnicate", out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "unknown command 'frobnicate'"));
    CU_ASSERT_EQUAL(util_run("build/posctl", out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "no command given"));
    kill(fake, SIGKILL);
    waitpid(fake, NULL, 0);
}

/* Runs the shell line CMD as uid and gid 65534 with no groups, its output joined in OUT;
 * returns its exit status. */
static int run_as_nobody(const char *cmd, char *out, size_t cap)
{
    char line[1280];
    snprintf(line, sizeof line, "setpriv --reuid=%d --regid=%d --clear-groups sh -c '%s'",
             NOBODY, NOBODY, cmd);
    return util_run(line, out, cap);
}

/* Permission denied, as a user other than root: posstat and posctl on a socket whose
 * directory the user may not enter say so and whom to ask; posd told to put its socket there
 * says, in its one error line, where a user's posd can put it. */
static void test_permission_denied_says_what_to_do(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_permission_denied_says_what_to_do: needs root (runs the tools as "
                        "uid 65534): skipped\n");
        return;
    }
    char priv[192], cmd[1024], out[OUT_MAX];
    snprintf(priv, sizeof priv, "%s/private", suite.dir);
    mkdir(priv, 0700);
    chmod(suite.dir, 0711);
    static const char *const tools[] = {"build/posstat -s %s/posd.sock",
                                        "build/posctl -s %s/posd.sock list"};
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
        snprintf(cmd, sizeof cmd, tools[i], priv);
        CU_ASSERT_EQUAL(run_as_nobody(cmd, out, sizeof out), 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "permission denied"));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "ask the admin"));
        CU_ASSERT_EQUAL(util_count(out, "\n"), 1);
    }
    /* a state directory of its own (one of root's it refuses first: test_state_dir.c) */
    char own[200];
    snprintf(own, sizeof own, "%s/nobody-state", suite.dir);
    mkdir(own, 0700);
    CU_ASSERT_EQUAL(chown(own, NOBODY, NOBODY), 0);
    snprintf(cmd, sizeof cmd, "POSD_STATE_DIR=%s exec build/posd -f -c %s -s %s/posd.sock", own,
             suite.conf, priv);
    CU_ASSERT_EQUAL(run_as_nobody(cmd, out, sizeof out), 1);
    CU_ASSERT_EQUAL(util_count(out, "error:"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "give posd a socket in a directory this user can write"));
    if (!strstr(out, "this user can write"))
        fprintf(stderr, "\n  posd as uid %d said:\n%s", NOBODY, out);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("posctl", suite_init, suite_clean);
    POS_ADD_TEST(s, test_set_priority_moves_the_hold_until_reload);
    POS_ADD_TEST(s, test_drain_stops_new_grants_until_undrain);
    POS_ADD_TEST(s, test_changes_need_root_or_the_posd_group);
    POS_ADD_TEST(s, test_tools_say_what_to_do_in_one_line);
    POS_ADD_TEST(s, test_permission_denied_says_what_to_do);
    POS_ADD_TEST(s, test_profiles_save_reset_load);
}
