/* The hostile-client suite: every way of speaking posd's protocol badly that
 * tests/integration/hostile.c knows (garbage, wrong magic and version, truncated and oversized
 * messages, a second HELLO, descriptors passed in, out-of-range ring values, memfd resizing,
 * replies never read, idle connections, connect/close and register/leave loops, kick and
 * NAMES floods), each for a second as uid 65534 against a root posd, twice over. Meanwhile a
 * well-behaved client of root's asks posd for grants and a verifying posapp runs. Asserted:
 * posd survives every case; the well-behaved client's median grant latency during a case
 * stays within HOSTILE_RATIO of its own median before any case (same run); posd's descriptor
 * count returns to what it was before the case, and its RSS grows in the second pass by at most
 * half what it grew in the first plus HOSTILE_RSS_SLACK_KB (a leak per case grows it alike in
 * both); the
 * posapp verifies with its exact launch count. Needs root (setuid to another user): skipped
 * with the reason otherwise. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pos/client_shm.h"
#include "pos/op_record.h"
#include "pos/proto.h"
#include "tests/cunit_main.h"
#include "tests/integration/client.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define NOBODY          65534
#define HOSTILE_SECONDS "1"
#define HOSTILE_RATIO                                                                              \
    100.0 /* generous: on a loaded 2-core machine (load 6) a case with four                        \
           * busy processes measured up to 90x once, 2-8x mostly */
#define HOSTILE_TRIES        3
#define HOSTILE_RSS_SLACK_KB 512
#define PROBES_MAX           100000
#define OUT_MAX              16384

static struct suite suite;
static char hostile_bin[192];

static int suite_init(void)
{
    if (suite_open(&suite, "hostile", "[rule batch-jobs]\nmatch_app = batch*\nclass = batch\n") < 0)
        return -1;
    chmod(suite.dir, 0711); /* the unprivileged user reaches the socket and the program */
    snprintf(hostile_bin, sizeof hostile_bin, "%s/hostile", suite.dir);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "install -m 0755 build/tests/hostile %s", hostile_bin);
    if (system(cmd) != 0)
        return -1;
    return access("build/posd", X_OK) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    return suite_close(&suite);
}

/* ---- what posd holds ------------------------------------------------------------------ */

static int posd_fds(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)suite.posd);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static long posd_rss_kb(void)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)suite.posd);
    if (util_read_file(path, buf, sizeof buf) < 0)
        return -1;
    const char *p = strstr(buf, "VmRSS:");
    return p ? atol(p + 6) : -1;
}

static int posd_alive(void)
{
    int st;
    return suite.posd > 0 && waitpid(suite.posd, &st, WNOHANG) == 0;
}

/* ---- the well-behaved client ---------------------------------------------------------- */

struct probe {
    struct client c;
    uint64_t seq, done;
    double lat[PROBES_MAX];
    int n, lost; /* grants that did not come within a second (times util_time_scale) */
};

/* One request: a kernel submitted, posd kicked, the time until posd grants it (client.h). */
static void probe_once(struct probe *p)
{
    double t = client_grant_wait(&p->c, &p->seq, &p->done, util_time_scale());
    if (t < 0)
        p->lost++;
    else if (p->n < PROBES_MAX)
        p->lat[p->n++] = t;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    if (n == 0)
        return -1;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* ---- the hostile user ------------------------------------------------------------------ */

static pid_t hostile_start(const char *name, const char *out)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
            _exit(3);
        execl(hostile_bin, "hostile", suite.sock, name, HOSTILE_SECONDS, name, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits up to 5 s (an idle connection's deadline is 2 s) for posd to hold BASE descriptors
 * again; returns the count it holds then. */
static int fds_settle(int base)
{
    int n = posd_fds();
    for (int i = 0; i < 500 && n != base && posd_alive(); i++) {
        usleep(10000);
        n = posd_fds();
    }
    return n;
}

/* A verifying posapp for about as long as a case, under the shim. */
static pid_t posapp_start(const char *out_path)
{
    static const char *const args[] = {"--model",    "resnet18", "--requests", "100000",
                                       "--duration", "0.8",      "--verify",   NULL};
    return util_posapp_start(out_path, "app", args);
}

/* Waits for the posapp at PID; returns its requests when it verified with every launch,
 * else -1. Adds its launches to *LAUNCHES. */
static long long posapp_check(pid_t pid, const char *out_path, long long *launches)
{
    int st;
    waitpid(pid, &st, 0);
    char out[OUT_MAX] = "";
    util_read_file(out_path, out, sizeof out);
    long long requests = util_number(out, "requests"), n = util_number(out, "launches");
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "\"verified\":true") &&
             requests > 0 && n == requests * 31;
    if (!ok)
        fprintf(stderr, "posapp: status %d: %s\n", st, out);
    *launches += n > 0 ? n : 0;
    return ok ? requests : -1;
}

static void test_hostile_clients_change_nothing_for_others(void)
{
    if (geteuid() != 0) {
        fprintf(stderr,
                "test_hostile_clients_change_nothing_for_others: needs root, to run the "
                "hostile client as uid %d (fork + setuid): skipped\n",
                NOBODY);
        return;
    }
    CU_ASSERT_FATAL(suite_posd_start(&suite, "priority") > 0 && access(suite.sock, F_OK) == 0);
    static struct probe p;
    memset(&p, 0, sizeof p);
    CU_ASSERT_FATAL(client_register(suite.sock, &p.c) == 0);
    char app_out[192];
    snprintf(app_out, sizeof app_out, "%s/posapp.out", suite.dir);
    long long launches = 0;
    /* posd's table of this client's operators is touched once round before the RSS counts
     * (SCHED_WINDOW of them: its pages come in as seqs advance) */
    for (int i = 0; i < 17000; i++)
        probe_once(&p);
    /* posd's descriptors with the probe alone: the neighbour's below are posd's until it
     * has read their leave, which a count just after the neighbour's exit may precede */
    int base_fds = posd_fds();
    /* the normal range: with a well-behaved neighbour, as in every case */
    p.n = 0;
    pid_t app = posapp_start(app_out);
    int st = 0;
    while (waitpid(app, &st, WNOHANG) == 0) {
        probe_once(&p);
        usleep(1000);
    }
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    double base = median(p.lat, p.n);
    CU_ASSERT_EQUAL(fds_settle(base_fds), base_fds); /* the neighbour's went with it */
    long rss0 = posd_rss_kb(), rss1 = -1;
    CU_ASSERT_FATAL(base > 0 && base_fds > 0);
    fprintf(stderr, "\nbaseline: grant median %.1f us, posd %d fds, %ld KiB RSS\n", base * 1e6,
            base_fds, rss0);
    FILE *list = popen("build/tests/hostile --list", "r");
    CU_ASSERT_FATAL(list != NULL);
    char names[32][32];
    int ncases = 0;
    while (ncases < 32 && fscanf(list, "%31s", names[ncases]) == 1)
        ncases++;
    pclose(list);
    CU_ASSERT_FATAL(ncases >= 14);
    /* HOSTILE_CASES=a,b: only those (while working on one) */
    const char *only = getenv("HOSTILE_CASES");
    if (only && *only) {
        int kept = 0;
        for (int k = 0; k < ncases; k++) {
            char want[40];
            snprintf(want, sizeof want, ",%.31s,", names[k]);
            char have[512];
            snprintf(have, sizeof have, ",%.500s,", only);
            if (strstr(have, want))
                memmove(names[kept++], names[k], sizeof names[k]);
        }
        ncases = kept;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < ncases; k++) {
            /* a case over the latency bound is tried again: on a loaded machine a second of
             * starved CPU looks like a stall once, a stall posd causes shows every time */
            for (int try = 0; try < HOSTILE_TRIES; try++) {
                char out[320], text[1024] = "";
                snprintf(out, sizeof out, "%.127s/hostile.%.31s.out", suite.dir, names[k]);
                p.n = 0;
                app = posapp_start(app_out);
                pid_t h = hostile_start(names[k], out);
                while (waitpid(h, &st, WNOHANG) == 0) {
                    probe_once(&p);
                    usleep(1000);
                }
                long long reqs = posapp_check(app, app_out, &launches);
                CU_ASSERT(reqs > 0);
                util_read_file(out, text, sizeof text);
                text[strcspn(text, "\n")] = '\0';
                double m = median(p.lat, p.n);
                int alive = posd_alive();
                int fds = fds_settle(base_fds);
                int slow = !(p.n > 0 && m <= HOSTILE_RATIO * base);
                fprintf(stderr,
                        "pass %d %-15s %s; grant median %.1f us (%.1fx%s), posd %d fds %ld KiB, "
                        "posapp %lld requests %s\n",
                        pass, names[k], text, m * 1e6, m / base, slow ? ", over the bound" : "",
                        fds, posd_rss_kb(), reqs, reqs > 0 ? "verified" : "FAILED");
                CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                CU_ASSERT_FATAL(alive);
                CU_ASSERT_EQUAL(fds, base_fds);
                if (!slow)
                    break;
                CU_ASSERT(try < HOSTILE_TRIES - 1);
            }
        }
        if (pass == 0)
            rss1 = posd_rss_kb();
    }
    long rss2 = posd_rss_kb();
    fprintf(stderr,
            "posd RSS %ld KiB at the start, %ld after pass 1, %ld after pass 2; %d grants "
            "lost\n",
            rss0, rss1, rss2, p.lost);
    /* a leak grows RSS by as much in the second pass as in the first; what the first pass
     * brings in once (pages of posd's per-slot operator tables as seqs advance, heap that malloc
     * keeps for the next NAMES table) does not come again */
    CU_ASSERT(rss2 > 0 && rss2 - rss1 <= (rss1 - rss0) / 2 + HOSTILE_RSS_SLACK_KB);
    CU_ASSERT_EQUAL(p.lost, 0);
    /* the well-behaved client is still registered: posd never took it for a hostile one */
    CU_ASSERT_EQUAL(atomic_load(&p.c.shm->posd_state), POS_POSD_ALIVE);
    char c;
    CU_ASSERT(recv(p.c.sock, &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN);
    fprintf(stderr, "posapp: %lld launches verified\n", launches);
    util_posd_stop(&suite.posd, SIGTERM);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("hostile", suite_init, suite_clean);
    POS_ADD_TEST(s, test_hostile_clients_change_nothing_for_others);
}
