/* The fault suite's short forms (make soak runs the long one, bench/soak.sh): posd killed with
 * SIGKILL 20 times under 8 verifying clients of every shape (streams, threads, the per-thread
 * default stream, a capped class) while other clients are stopped and killed holding grants:
 * every launch made and checked, none lost; posd stopped (SIGSTOP) under clients that wait for
 * its grants: they go on without it and finish, and posd serves again once continued; and the
 * start-up faults the posd suite does not cover: a missing socket directory (made, and the
 * socket in it open to every local user), a socket
 * path posd cannot create (its parent a file, or on a read-only file system), and a descriptor
 * limit too low to start. (test_posd covers a live posd, a stale socket, a full backlog and
 * running out of descriptors while running.) */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sim/driver/drv.h"
#include "tests/cunit_main.h"
#include "tests/integration/sim_lock.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX         16384
#define STORM_CLIENTS   8
#define STORM_KILLS     20
#define LAUNCHES_PER_RQ 31 /* resnet18 with --verify's four twin kernels */

static struct suite suite;

static int suite_init(void)
{
    const char *conf = "[rule batch-jobs]\nmatch_app = batch*\nclass = batch\n"
                       "[rule capped]\nmatch_app = capped*\nclass = batch\nmax_inflight = 1\n";
    return suite_open(&suite, "faults", conf) == 0 && access("build/posd", X_OK) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    return suite_close(&suite); /* its virtual GPU's segment too: killed clients leave it */
}

static void posd_start(void)
{
    CU_ASSERT_FATAL(suite_posd_start(&suite, "priority") > 0);
}

/* Whether posd answers a STATS request (posstat). */
static int posd_answers(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "build/posstat -s %s -o json >/dev/null 2>&1", suite.sock);
    return system(cmd) == 0;
}

static int wait_answers(double secs)
{
    double t0 = util_now();
    while (util_now() - t0 < secs) {
        if (posd_answers())
            return 1;
        usleep(20000);
    }
    return 0;
}

struct job {
    pid_t pid;
    char out[192];
    const char *what;
};

/* posapp under the shim as APP with ARGS (NULL-terminated, after the program). */
static void client_start(struct job *c, const char *app, const char *const *args)
{
    static int n;
    snprintf(c->out, sizeof c->out, "%s/client.%d.out", suite.dir, n++);
    c->what = app;
    c->pid = util_posapp_start(c->out, app, args);
    CU_ASSERT_FATAL(c->pid >= 0);
}

/* Waits up to LIMIT_S for C; returns its exit status (128 + signal; 137 when it had to be
 * killed) and its output in OUT. */
static int client_wait(struct job *c, double limit_s, char *out, size_t cap)
{
    int st = 0;
    double t0 = util_now();
    while (waitpid(c->pid, &st, WNOHANG) == 0) {
        if (util_now() - t0 > limit_s) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &st, 0);
            break;
        }
        usleep(10000);
    }
    util_read_file(c->out, out, cap);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Checks that C verified and made exactly its requests' launches; returns its launches. */
static long long client_verified(struct job *c, double limit_s)
{
    char out[OUT_MAX] = "";
    int rc = client_wait(c, limit_s, out, sizeof out);
    long long requests = util_number(out, "requests"), launches = util_number(out, "launches");
    int ok = rc == 0 && strstr(out, "\"verified\":true") && requests > 0 &&
             launches == requests * LAUNCHES_PER_RQ;
    CU_ASSERT(ok);
    if (!ok)
        fprintf(stderr, "client %s: status %d, %lld requests, %lld launches: %s\n", c->what, rc,
                requests, launches, out);
    return ok ? launches : -1;
}

/* ---- kill -9 storm --------------------------------------------------------------------- */

/* Eight verifying clients of every shape run while posd is killed with SIGKILL 20 times and
 * restarted at once; meanwhile two more clients are stopped and continued, and killed, while
 * they hold grants. Every verifying client finishes with every launch made and checked (the
 * launches are the application's own: nothing waits in posd to be lost), and the last posd
 * has them all back. */
static void test_kill_storm_loses_no_launch(void)
{
    posd_start();
    CU_ASSERT_FATAL(wait_answers(3));
    static const char *const shapes[STORM_CLIENTS][12] = {
        {"--model", "resnet18", "--verify", "--duration", "6", "--requests", "100000", NULL},
        {"--model", "resnet18", "--verify", "--duration", "6", "--requests", "100000", "--streams",
         "4", NULL},
        {"--model", "resnet18", "--verify", "--duration", "6", "--requests", "100000", "--threads",
         "4", NULL},
        {"--model", "resnet18", "--verify", "--duration", "6", "--requests", "100000", "--ptds",
         NULL},
        {"--model", "resnet18", "--verify", "--duration", "6", "--requests", "100000", "--threads",
         "2", "--streams", "2", NULL},
        {"--model", "resnet18", "--verify", "--duration", "6", "--requests", "100000", "--threads",
         "3", "--ptds", NULL},
        {"--model", "resnet18", "--verify", "--duration", "6", "--requests", "100000", NULL},
        {"--model", "resnet18", "--verify", "--duration", "6", "--requests", "100000", "--threads",
         "2", NULL},
    };
    static const char *const apps[STORM_CLIENTS] = {"app",      "app-streams", "batch-threads",
                                                    "app-ptds", "batch-mixed", "capped-ptds",
                                                    "capped",   "batch"};
    struct job c[STORM_CLIENTS], stopped, victim;
    for (int i = 0; i < STORM_CLIENTS; i++)
        client_start(&c[i], apps[i], shapes[i]);
    const char *const forever[] = {"--model", "resnet50", "--requests", "1000000", NULL};
    client_start(&stopped, "app-stopped", forever);
    client_start(&victim, "app-victim", forever);
    usleep(300000);
    unsigned seed = (unsigned)getpid();
    int restarted = 0;
    for (int k = 0; k < STORM_KILLS; k++) {
        usleep(100000 + (useconds_t)(rand_r(&seed) % 150000));
        if (k == 3)
            stop_outside_sim_lock(stopped.pid); /* holding its grants, mid-launch */
        if (k == 9)
            kill(stopped.pid, SIGCONT);
        if (k == 12)
            kill(victim.pid, SIGKILL);
        util_posd_stop(&suite.posd, SIGKILL);
        posd_start();
        int up = wait_answers(3 * util_time_scale());
        restarted += up;
        if (!up) {
            char log[OUT_MAX * 4];
            int n = util_read_file(suite.log, log, sizeof log);
            fprintf(stderr, "restart %d: posd does not answer; log ends:\n%s\n", k,
                    n == 0 && strlen(log) > 2000 ? log + strlen(log) - 2000 : log);
        }
    }
    CU_ASSERT_EQUAL(restarted, STORM_KILLS); /* every restart took over the dead one's socket */
    long long total = 0;
    int verified = 0;
    for (int i = 0; i < STORM_CLIENTS; i++) {
        long long n = client_verified(&c[i], 30);
        verified += n > 0;
        total += n > 0 ? n : 0;
    }
    CU_ASSERT_EQUAL(verified, STORM_CLIENTS);
    /* the stopped one came back to life and still runs, attached again */
    long long attached = -1;
    char cmd[512], js[OUT_MAX];
    for (int i = 0; i < 100 && attached != 1; i++) {
        snprintf(cmd, sizeof cmd, "build/posstat -s %s -o json 2>/dev/null", suite.sock);
        util_run_stdout(cmd, js, sizeof js);
        attached = util_number(js, "clients");
        if (attached != 1)
            usleep(50000);
    }
    CU_ASSERT_EQUAL(attached, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(js, "\"app\":\"app-stopped\""));
    fprintf(stderr, "\nkill storm: %d kills, %d clients verified, %lld launches checked\n",
            STORM_KILLS, verified, total);
    char out[OUT_MAX];
    kill(stopped.pid, SIGKILL);
    client_wait(&stopped, 10, out, sizeof out);
    client_wait(&victim, 10, out, sizeof out);
    util_posd_stop(&suite.posd, SIGTERM);
}

/* ---- posd stopped ---------------------------------------------------------------------- */

/* Clients that need posd's grants (a capped one, and a batch client held behind a latency
 * client) go on without posd while it is stopped (SIGSTOP): each treats a posd that decides
 * nothing for 1 s as gone, finishes its work verified while posd is still stopped, and posd,
 * once continued, serves a new client. */
static void test_stopped_posd_stalls_nobody(void)
{
    posd_start();
    CU_ASSERT_FATAL(wait_answers(3));
    const char *const some[] = {"--model", "resnet18", "--verify", "--requests", "150", NULL};
    const char *const lat[] = {"--model", "resnet18", "--verify", "--requests", "400", NULL};
    struct job c[3];
    client_start(&c[0], "capped", some);
    client_start(&c[1], "app", lat);
    client_start(&c[2], "batch", some);
    usleep(300000);
    kill(suite.posd, SIGSTOP);
    double t0 = util_now();
    int done_while_stopped = 0;
    for (int i = 0; i < 3; i++)
        done_while_stopped += client_verified(&c[i], 20) > 0;
    double took = util_now() - t0;
    int still_stopped = 1;
    char stat[512];
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)suite.posd);
    if (util_read_file(path, stat, sizeof stat) == 0) {
        const char *p = strrchr(stat, ')');
        still_stopped = p && p[2] == 'T';
    }
    CU_ASSERT_EQUAL(done_while_stopped, 3);
    CU_ASSERT(still_stopped); /* they finished without posd */
    fprintf(stderr, "\nposd stopped: 3 clients finished verified in %.1f s without it\n", took);
    kill(suite.posd, SIGCONT);
    CU_ASSERT(wait_answers(5));
    struct job after;
    client_start(&after, "app", some);
    CU_ASSERT(client_verified(&after, 20) > 0);
    util_posd_stop(&suite.posd, SIGTERM);
    char log[OUT_MAX * 8];
    util_read_file(suite.log, log, sizeof log);
    CU_ASSERT(util_count(log, "app 'app'") >= 2); /* the last one registered */
}

/* ---- start-up faults ------------------------------------------------------------------- */

/* Runs posd in the foreground on socket SOCK for at most LIMIT_S, its descriptor limit NOFILE
 * (0: unchanged); returns its exit status and its output in OUT. */
static int posd_run(const char *sock, int nofile, int limit_s, char *out, size_t cap)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        struct rlimit r = {nofile, nofile};
        if (nofile && setrlimit(RLIMIT_NOFILE, &r) < 0)
            _exit(125);
        char secs[16];
        snprintf(secs, sizeof secs, "%d", limit_s);
        execlp("timeout", "timeout", secs, "build/posd", "-f", "-c", suite.conf, "-s", sock,
               (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    return util_child_output(pid, p[0], out, cap);
}

/* A socket directory that does not exist is made (systemd's RuntimeDirectory may be absent);
 * one posd cannot make or write says which path and why and exits at once. */
static void test_socket_directory_faults_are_said(void)
{
    char sock[256], out[4096];
    /* missing: made, and posd serves there */
    snprintf(sock, sizeof sock, "%s/run-missing/posd.sock", suite.dir);
    pid_t pid = util_posd_start(suite.conf, sock, suite.log, "priority");
    CU_ASSERT_FATAL(pid > 0);
    CU_ASSERT_EQUAL(access(sock, F_OK), 0);
    /* any local user may connect (the socket 0666, its new directory 0755) */
    struct stat st;
    CU_ASSERT(stat(sock, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 0777) == 0666);
    *strrchr(sock, '/') = '\0';
    CU_ASSERT(stat(sock, &st) == 0 && (st.st_mode & 0777) == 0755);
    strcat(sock, "/posd.sock");
    util_posd_stop(&pid, SIGTERM);
    CU_ASSERT_NOT_EQUAL(access(sock, F_OK), 0); /* and removed at exit */
    /* its parent is a regular file */
    char file[200];
    snprintf(file, sizeof file, "%s/not-a-dir", suite.dir);
    FILE *f = fopen(file, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
    snprintf(sock, sizeof sock, "%s/not-a-dir/posd.sock", suite.dir);
    int rc = posd_run(sock, 0, (int)(5 * util_time_scale()), out, sizeof out);
    CU_ASSERT(rc != 0 && rc != 124);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, sock));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "Not a directory"));
    /* unwritable: a read-only file system for root, a directory without write permission for
     * anyone else */
    char ro[200];
    if (geteuid() == 0) {
        snprintf(sock, sizeof sock, "/proc/posd-test-%d.sock", (int)getpid());
    } else {
        snprintf(ro, sizeof ro, "%s/read-only", suite.dir);
        mkdir(ro, 0500);
        snprintf(sock, sizeof sock, "%s/posd.sock", ro);
    }
    rc = posd_run(sock, 0, (int)(5 * util_time_scale()), out, sizeof out);
    CU_ASSERT(rc != 0 && rc != 124);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, sock));
    CU_ASSERT(strstr(out, "ermission denied") || strstr(out, "Read-only file system") ||
              strstr(out, "Operation not permitted") || strstr(out, "No such file"));
    if (!strstr(out, sock))
        fprintf(stderr, "posd on an unwritable path said: %s\n", out);
}

/* A descriptor limit too low to serve anyone is said and posd does not start (with 4 it exited
 * 1 without a word; with 6 it ran and refused every connection for want of descriptors); one
 * too low for a full table starts with a warning that says for how many clients. */
static void test_low_descriptor_limit_at_start_is_said(void)
{
    char out[4096];
    for (int n = 4; n <= 12; n += 8) {
        int rc = posd_run(suite.sock, n, (int)(5 * util_time_scale()), out, sizeof out);
        CU_ASSERT(rc != 0 && rc != 124);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "too low to serve any client"));
        if (!strstr(out, "too low to serve any client"))
            fprintf(stderr, "posd with %d descriptors: status %d: %s\n", n, rc, out);
        CU_ASSERT_NOT_EQUAL(access(suite.sock, F_OK), 0); /* left nothing behind */
    }
    /* 1 s in the plain build: a sanitized posd takes longer to start */
    int rc = posd_run(suite.sock, 40, (int)(1 * util_time_scale()), out, sizeof out);
    CU_ASSERT_EQUAL(rc, 124); /* served until timeout stopped it */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "room for about"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "listening on"));
}


void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("faults", suite_init, suite_clean);
    POS_ADD_TEST(s, test_kill_storm_loses_no_launch);
    POS_ADD_TEST(s, test_stopped_posd_stalls_nobody);
    POS_ADD_TEST(s, test_socket_directory_faults_are_said);
    POS_ADD_TEST(s, test_low_descriptor_limit_at_start_is_said);
}
