/* Integration tests of posd with real processes (the shim, posapp, the simulated driver):
 * grants and completions add up under fifo, the priority policy holds and releases, a client
 * that dies frees its share at once, posd killed mid-run fails open and clients re-attach,
 * bad peers are disconnected while others carry on, configuration errors at start and at
 * SIGHUP, socket removal on exit, and an idle posd that uses no CPU; and what a hostile local
 * user tries: resizing its shared memory, idle connections, floods of connections and kicks,
 * files at the socket path, a full backlog, a low descriptor limit, reading other users'
 * statistics. In a temporary directory (POS_SOCKET); the parts that need a second uid run
 * only as root (setuid to 65534) and say so when skipped. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
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
#include "tests/integration/sim_lock.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX    16384
#define POSD_TABLE 256 /* POSD_MAX_CLIENTS */

static struct suite suite;
/* util_time_scale: how much longer this build's programs take (a sanitized build's) */
static double scale = 1.0;

/* Sleeps SECONDS times the build's time scale. */
static void sleep_scaled(double seconds)
{
    usleep((useconds_t)(seconds * scale * 1e6));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
}

static void setup_env(void)
{
    setenv("LD_LIBRARY_PATH", "build/sim", 1);
    setenv("POS_SIM_INSTANCE", suite.instance, 1);
    setenv("POS_SOCKET", suite.sock, 1);
}

/* Starts posd with POLICY on the test socket; waits until it answers. */
static void posd_start(const char *policy)
{
    /* a test that stopped at a fatal assertion left its posd running on the suite's socket:
     * ended here (the next posd takes over its socket), so that one failure stays one (it
     * failed every later test once); a posd a test killed on purpose is only reaped */
    util_posd_stop(&suite.posd, SIGKILL);
    CU_ASSERT_FATAL(suite_posd_start(&suite, policy) > 0);
    CU_ASSERT_EQUAL(access(suite.sock, F_OK), 0);
}

static void posd_stop(int sig)
{
    util_posd_stop(&suite.posd, sig);
}

struct proc {
    pid_t pid;
    char out_path[192];
};

/* Starts posapp under the shim with app name APP and ARGS. */
static void posapp_start(struct proc *p, const char *app, const char *const *args)
{
    static int n;
    snprintf(p->out_path, sizeof p->out_path, "%s/posapp.%d.out", suite.dir, n++);
    setup_env();
    p->pid = util_posapp_start(p->out_path, app, args);
    CU_ASSERT_FATAL(p->pid >= 0);
}

static int posapp_wait(struct proc *p, char *out, size_t cap)
{
    int st;
    for (int i = 0; i < 12000; i++) {
        if (waitpid(p->pid, &st, WNOHANG) == p->pid)
            goto done;
        usleep(10000);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
done:
    util_read_file(p->out_path, out, cap);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs posstat -o json once; returns its output in OUT. */
static int posstat_json(char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "build/posstat -s %s -o json 2>&1", suite.sock);
    return util_run_stdout(cmd, out, cap);
}


static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (t.tv_nsec - t0->tv_nsec) / 1e9;
}

static int suite_init(void)
{
    scale = util_time_scale();
    const char *conf = "[rule batch-jobs]\nmatch_app = batch*\nclass = batch\n"
                       "[rule capped]\nmatch_app = capped*\nclass = batch\nmax_inflight = 1\n";
    return suite_open(&suite, "posd", conf) == 0 && access("build/posd", X_OK) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    return suite_close(&suite); /* its virtual GPU's segment too: killed clients leave it */
}

static int posd_stats(struct pos_device_stats *dev, struct pos_client_stats *cs, int max)
{
    return util_stats(suite.sock, dev, cs, max);
}

/* The device part alone. */
static int posd_device_stats(struct pos_device_stats *out)
{
    struct pos_client_stats none;
    return posd_stats(out, &none, 0) < 0 ? -1 : 0;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_fifo_counts_add_up(void)
{
    posd_start("fifo");
    const char *const a[] = {"--model", "resnet18", "--requests", "8", "--verify", NULL};
    const char *const b[] = {"--model",  "mobilenet_v2", "--requests", "8",
                             "--verify", "--streams",    "2",          NULL};
    const char *const c[] = {"--model",  "inception_v1", "--requests", "5",
                             "--verify", "--threads",    "2",          NULL};
    const char *const e[] = {"--model", "resnet34",  "--requests", "4", "--verify",
                             "--ptds",  "--threads", "2",          NULL};
    const char *const *args[4] = {a, b, c, e};
    struct proc p[4];
    for (int i = 0; i < 4; i++)
        posapp_start(&p[i], "app", args[i]);
    long long launches = 0;
    for (int i = 0; i < 4; i++) {
        char out[OUT_MAX];
        CU_ASSERT_EQUAL(posapp_wait(&p[i], out, sizeof out), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"verified\":true"));
        launches += util_number(out, "launches");
    }
    usleep(100000);
    struct pos_device_stats dev = {0};
    CU_ASSERT_EQUAL_FATAL(posd_device_stats(&dev), 0);
    CU_ASSERT_EQUAL(dev.clients, 0);
    CU_ASSERT_EQUAL(dev.submitted, (uint64_t)launches);
    CU_ASSERT_EQUAL(dev.released, (uint64_t)launches);
    CU_ASSERT_EQUAL(dev.completed, (uint64_t)launches);
    if (dev.submitted != (uint64_t)launches || dev.completed != (uint64_t)launches)
        fprintf(stderr, "submitted %llu released %llu completed %llu launches %lld\n",
                (unsigned long long)dev.submitted, (unsigned long long)dev.released,
                (unsigned long long)dev.completed, launches);
    posd_stop(SIGTERM);
}

/* Launches of client APP so far, from one posstat snapshot (rate x span); -1 if absent. */
static double client_launches(const char *js, const char *app)
{
    char key[96];
    snprintf(key, sizeof key, "\"app\":\"%s\"", app);
    const char *p = strstr(js, key);
    if (!p)
        return -1;
    const char *r = strstr(p, "\"launches_per_s\":"), *t = strstr(p, "\"span_s\":");
    if (!r || !t)
        return -1;
    return strtod(r + 17, NULL) * strtod(t + 9, NULL);
}

/* APP's launches per second over the next SECONDS, from two posstat snapshots. */
static double client_rate(const char *app, double seconds)
{
    char a[OUT_MAX], b[OUT_MAX];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (posstat_json(a, sizeof a) != 0)
        return -1;
    usleep((useconds_t)(seconds * 1e6));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (posstat_json(b, sizeof b) != 0)
        return -1;
    double na = client_launches(a, app), nb = client_launches(b, app);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    return na < 0 || nb < 0 ? -1 : (nb - na) / dt;
}

static void wait_clients(int n)
{
    char js[OUT_MAX];
    for (int i = 0; i < 100 * scale; i++) { /* slow on a loaded machine */
        usleep(50000);
        if (posstat_json(js, sizeof js) == 0 && util_number(js, "clients") == n)
            return;
    }
}

/* While a latency client works, a batch client gets almost nothing (it is held); once the
 * latency client is stopped by a signal with work in flight, the batch client runs again
 * within the stall bound; once it dies, at once. Under fifo the batch rate would not move. */
static void test_priority_holds_and_stall_and_death_release(void)
{
    posd_start("priority");
    const char *const lat[] = {"--model", "resnet50", "--requests", "100000", NULL};
    const char *const bat[] = {"--model", "resnet18", "--requests", "100000", NULL};
    struct proc l, b;
    posapp_start(&l, "latency1", lat);
    sleep_scaled(0.3);
    posapp_start(&b, "batch1", bat);
    wait_clients(2);
    double held = client_rate("batch1", 0.5 * scale);
    char js[OUT_MAX] = "";
    int seen_held = 0;
    for (int i = 0; i < 10 && !seen_held; i++)
        seen_held = posstat_json(js, sizeof js) == 0 && strstr(js, "\"app\":\"batch1\"") &&
                    strstr(strstr(js, "\"app\":\"batch1\""), "\"held\":true");
    CU_ASSERT(seen_held);
    /* stopped with work in flight: it no longer holds anyone after stall_ms (50) */
    stop_outside_sim_lock(l.pid);
    sleep_scaled(0.2);
    double stalled = client_rate("batch1", 0.5 * scale);
    kill(l.pid, SIGCONT);
    sleep_scaled(0.2);
    double again = client_rate("batch1", 0.5 * scale);
    /* the latency client dies: its share is free at once */
    kill(l.pid, SIGKILL);
    char out[OUT_MAX];
    posapp_wait(&l, out, sizeof out);
    wait_clients(1);
    double alone = client_rate("batch1", 0.5 * scale);
    CU_ASSERT(held >= 0 && stalled > 0 && alone > 0);
    CU_ASSERT(held < 0.3 * alone);
    /* released, it runs its launches through posd's grants: what this checks is that it is
     * released at all, not how fast the grants go (bench/posd.sh measures that). Held, it
     * keeps 1-2% of its free rate; with no stall rule 8 launches/s of 3888 (0.2%). Through
     * grants it reached 0.80-0.92 of its free rate on the simulated driver with one device
     * lock and 0.64-0.89 on the device-process driver (each completion one more wake-up
     * away), 10 runs each side by side on a loaded 2-core machine, and 0.37 once in the
     * project's CI (held 64, stopped 1165, alone 3168); a sanitized build makes grants about
     * six times dearer (test_hostile's baseline grant median: 41 us plain, 254 us under
     * ThreadSanitizer). So: at least a fifth of its free rate, and five times its held rate. */
    double released = 0.2;
    CU_ASSERT(stalled > released * alone);
    CU_ASSERT(stalled > 5 * held);
    CU_ASSERT(again < 0.3 * alone); /* it came back: held again */
    CU_ASSERT(posstat_json(js, sizeof js) == 0 && strstr(js, "\"held\":false"));
    if (!(held < 0.3 * alone) || !(stalled > released * alone) || !(stalled > 5 * held) ||
        !(again < 0.3 * alone))
        fprintf(stderr,
                "batch launches/s: held %.0f, latency stopped %.0f, resumed %.0f, "
                "alone %.0f\n",
                held, stalled, again, alone);
    kill(b.pid, SIGKILL);
    posapp_wait(&b, out, sizeof out);
    posd_stop(SIGTERM);
    char log[OUT_MAX * 4];
    util_read_file(suite.log, log, sizeof log);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "app 'batch1' class batch priority 20 rule batch-jobs"));
}

/* A client alone runs freely whatever its class (no launch waits): as fast as without posd. */
static void test_lone_batch_client_is_not_slowed(void)
{
    const char *const args[] = {"--model", "resnet50", "--requests", "60", NULL};
    struct proc p;
    char out[OUT_MAX];
    posd_stop(SIGTERM);
    /* without posd (the shim fails open to passthrough) */
    posapp_start(&p, "batch1", args);
    CU_ASSERT_EQUAL(posapp_wait(&p, out, sizeof out), 0);
    const char *t = strstr(out, "\"throughput_rps\":");
    double solo = t ? strtod(t + 17, NULL) : -1;
    posd_start("priority");
    posapp_start(&p, "batch1", args);
    /* it launches freely: not one launch waits for a grant */
    char js[OUT_MAX] = "";
    wait_clients(1);
    usleep(200000);
    CU_ASSERT(posstat_json(js, sizeof js) == 0 && strstr(js, "\"app\":\"batch1\"") &&
              strstr(strstr(js, "\"app\":\"batch1\""), "\"wait_p50_us\":null"));
    CU_ASSERT_EQUAL(posapp_wait(&p, out, sizeof out), 0);
    t = strstr(out, "\"throughput_rps\":");
    double under = t ? strtod(t + 17, NULL) : -1;
    CU_ASSERT(solo > 0 && under > 0.85 * solo);
    if (!(under > 0.85 * solo))
        fprintf(stderr, "batch alone: %.1f req/s without posd, %.1f under posd\n", solo, under);
    posd_stop(SIGTERM);
}

/* Three windowed clients one after another on one posd, with idle gaps between their
 * requests: each reuses the table slot of the one before and none stalls (a slot that kept
 * an earlier client's I/O state stopped posd from hearing its kicks: ~1 s per idle gap). */
static void test_reused_slots_do_not_stall_windowed_clients(void)
{
    char log[OUT_MAX * 4];
    util_read_file(suite.log, log, sizeof log);
    size_t before = strlen(log); /* the log is shared by the suite's posd runs */
    posd_start("priority");
    const char *const idle[] = {"--model",    "resnet18", "--arrival", "poisson:0.2",
                                "--requests", "3",        NULL};
    const char *const bat[] = {"--model",    "resnet18", "--arrival", "poisson:40",
                               "--requests", "12",       NULL};
    struct proc l;
    posapp_start(&l, "latency1", idle); /* present, nearly idle: batch runs in a window */
    usleep(300000);
    for (int i = 0; i < 3; i++) {
        struct proc b;
        char out[OUT_MAX];
        posapp_start(&b, "batch1", bat);
        CU_ASSERT_EQUAL(posapp_wait(&b, out, sizeof out), 0);
        const char *p99 = strstr(out, "\"p99_ms\":");
        double v = p99 ? strtod(p99 + 9, NULL) : 1e9;
        /* the stall this guards against cost about 1 s per idle gap; a loaded 2-core machine
         * gave one of 12 requests 128-182 ms once in a clean-clone CI run (2026-12-02) */
        CU_ASSERT(v < 400.0 * scale);
        if (v >= 400.0 * scale)
            fprintf(stderr, "windowed client %d: p99 %.1f ms\n", i, v);
    }
    kill(l.pid, SIGKILL);
    char out[OUT_MAX];
    posapp_wait(&l, out, sizeof out);
    posd_stop(SIGTERM);
    util_read_file(suite.log, log, sizeof log);
    /* three registrations: no fail-open and re-attach */
    CU_ASSERT_EQUAL(util_count(log + before, "app 'batch1'"), 3);
}

/* A thread that waits for a window step does the collector's pass itself: with the collector
 * polling only every 100 ms, 100 launches of a client capped at one in flight (each waits for
 * the one before to complete) still take milliseconds, not 100 x 100 ms. */
static void test_waiting_thread_steps_its_own_window(void)
{
    posd_start("priority");
    const char *const idle[] = {"--model",    "resnet18", "--arrival", "poisson:0.2",
                                "--requests", "3",        NULL};
    const char *const bench[] = {"--microbench", "100", NULL};
    struct proc l, c;
    char out[OUT_MAX];
    posapp_start(&l, "latency1", idle); /* present, nearly idle: the capped one is windowed */
    usleep(300000);
    /* 100 ms (times the build's time scale, as the bound below) */
    char poll[16];
    snprintf(poll, sizeof poll, "%d", (int)(100000 * scale));
    setenv("POS_POLL_US", poll, 1);
    setenv("POS_PROMPT_POLL_US", poll, 1);
    /* always help: how short the waits have been is the heuristic's business, not this test's
     * (on a loaded machine a few slow waits turn it off) */
    setenv("POS_HELP_WHEN_US", "1000000", 1);
    posapp_start(&c, "capped1", bench);
    unsetenv("POS_POLL_US");
    unsetenv("POS_PROMPT_POLL_US");
    unsetenv("POS_HELP_WHEN_US");
    CU_ASSERT_EQUAL(posapp_wait(&c, out, sizeof out), 0);
    const char *m = strstr(out, "\"makespan_s\":"), *w = strstr(out, "\"launch_ns_p50\":");
    double ms = m ? strtod(m + 13, NULL) : 1e9, launch = w ? strtod(w + 16, NULL) : 0;
    /* it was capped (a launch waits for the simulated kernel before it, 6 us at least) ... */
    CU_ASSERT(launch > 5000.0);
    /* ... and each wait ended with the completion, not with the collector's next poll (100
     * polls take 10 s). With the help off (mutation) they took 4.8 s in 3 runs of 3. With it,
     * 0.01-0.16 s in 8 runs, since a wait that outlasts the help's spin goes on looking every
     * millisecond; before that, a completion landing after the 200 us spin waited for the
     * next poll, and 3 or 4 runs of 10 took over 2 s on this 2-core VM */
    CU_ASSERT(ms < 1.0 * scale);
    if (ms >= 1.0 * scale || launch <= 5000.0)
        fprintf(stderr, "capped client: 100 launches in %.3f s, launch p50 %.0f ns\n", ms,
                launch);
    kill(l.pid, SIGKILL);
    posapp_wait(&l, out, sizeof out);
    posd_stop(SIGTERM);
}

/* Running and not a zombie (a finished posapp not yet reaped is not attached anywhere). */
static int alive(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (util_read_file(path, buf, sizeof buf) < 0)
        return 0;
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

static void test_fail_open_and_reattach(void)
{
    posd_start("priority");
    /* long enough (about 5 s for the four) to be running when posd is back */
    const char *const v[] = {"--model", "resnet18", "--requests", "250", "--verify", NULL};
    struct proc p[4];
    for (int i = 0; i < 4; i++)
        posapp_start(&p[i], i < 2 ? "app" : "batch", v);
    usleep(500000);
    posd_stop(SIGKILL);
    usleep(200000);
    posd_start("priority");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int attached = 0;
    char js[OUT_MAX];
    int running = 4;
    for (int k = 0; k < 200 * scale && attached < running; k++) {
        usleep(50000);
        if (posstat_json(js, sizeof js) == 0)
            attached = (int)util_number(js, "clients");
        running = 0;
        for (int i = 0; i < 4; i++)
            running += alive(p[i].pid);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    /* all four came back while they were still running (the time is the benchmark's to
     * measure, docs/results/posd.md; here, generously) */
    CU_ASSERT_EQUAL(attached, 4);
    CU_ASSERT(secs < 4.0 * scale);
    if (attached < 4 || secs >= 4.0 * scale) {
        char log[OUT_MAX * 4];
        util_read_file(suite.log, log, sizeof log);
        fprintf(stderr, "attached %d of %d running after %.1f s\n%s\nposd log:\n%s\n", attached,
                running, secs, js, log);
    }
    for (int i = 0; i < 4; i++) {
        char out[OUT_MAX];
        CU_ASSERT_EQUAL(posapp_wait(&p[i], out, sizeof out), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"verified\":true"));
        CU_ASSERT_EQUAL(util_number(out, "launches"), 250 * 31);
    }
    posd_stop(SIGTERM);
}

/* ---- bad peers ------------------------------------------------------------------------- */

static int peer_connect(void)
{
    return client_connect(suite.sock, 0, 10); /* generous: CI machines can be loaded */
}

/* True when posd closed S (a recv returns 0, after an optional REJECT message). */
static int closed_by_posd(int s, char *reason, size_t cap)
{
    char buf[4096];
    ssize_t n = recv(s, buf, sizeof buf, 0);
    if (n >= (ssize_t)sizeof(struct pos_msg_hdr)) {
        struct pos_msg_hdr h;
        memcpy(&h, buf, sizeof h);
        if (h.type == POS_MSG_REJECT && reason)
            snprintf(reason, cap, "%.*s", (int)(n - (ssize_t)sizeof h), buf + sizeof h);
        n = recv(s, buf, sizeof buf, 0);
    }
    return n == 0;
}

/* Whether posd hangs up on S within MS milliseconds. */
static int closed_by_posd_within(int s, int ms)
{
    struct pollfd p = {.fd = s, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
        return 0;
    char c;
    return recv(s, &c, 1, MSG_DONTWAIT) == 0;
}

static void hello(int s, uint32_t shm_version)
{
    CU_ASSERT_EQUAL(client_hello(s, shm_version),
                    (ssize_t)(sizeof(struct pos_msg_hdr) + sizeof(struct pos_hello)));
}

/* A client registered by hand, with its shared memory and kick eventfd (client.h). */
#define fake client

static int fake_register(struct fake *f)
{
    return client_register(suite.sock, f);
}

static void fake_close(struct fake *f)
{
    client_close(f);
}

/* Kicks posd and checks that it hangs up on F (WHAT names the case in a failure). */
static void fake_expect_closed(struct fake *f, const char *what)
{
    uint64_t one = 1;
    CU_ASSERT_EQUAL(write(f->fds[1], &one, sizeof one), 8);
    int closed = closed_by_posd(f->sock, NULL, 0);
    CU_ASSERT(closed);
    if (!closed)
        fprintf(stderr, "posd kept a client that sent: %s\n", what);
    fake_close(f);
}

/* A NAMES message: ids FIRST and FIRST + 1 named A and B. */
static void send_names(int s, uint32_t first, const char *a, const char *b)
{
    uint8_t buf[256];
    struct pos_names n = {.first = first, .count = 2};
    size_t off = sizeof(struct pos_msg_hdr);
    memcpy(buf + off, &n, sizeof n);
    off += sizeof n;
    const char *names[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        uint16_t len = (uint16_t)strlen(names[i]);
        memcpy(buf + off, &len, sizeof len);
        memcpy(buf + off + sizeof len, names[i], len);
        off += sizeof len + len;
    }
    struct pos_msg_hdr h = {POS_PROTO_MAGIC, POS_PROTO_VERSION, POS_MSG_NAMES,
                            (uint32_t)(off - sizeof h), 0};
    memcpy(buf, &h, sizeof h);
    CU_ASSERT_EQUAL(send(s, buf, off, 0), (ssize_t)off);
}

static void test_bad_peers_are_disconnected(void)
{
    posd_start("priority");
    const char *const v[] = {"--model", "resnet18", "--requests", "60", "--verify", NULL};
    struct proc good;
    posapp_start(&good, "app", v);
    char reason[256] = "";
    /* garbage */
    int s = peer_connect();
    CU_ASSERT_EQUAL(send(s, "hello posd, let me in", 21, 0), 21);
    CU_ASSERT(closed_by_posd(s, NULL, 0));
    close(s);
    /* wrong protocol version */
    s = peer_connect();
    struct pos_msg_hdr h = {POS_PROTO_MAGIC, 99, POS_MSG_HELLO, 0, 0};
    send(s, &h, sizeof h, 0);
    CU_ASSERT(closed_by_posd(s, reason, sizeof reason));
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "protocol"));
    close(s);
    /* wrong shared-memory version */
    s = peer_connect();
    hello(s, 99);
    CU_ASSERT(closed_by_posd(s, reason, sizeof reason));
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "version mismatch"));
    close(s);
    /* oversized */
    s = peer_connect();
    static char big[POS_REQ_MAX * 4];
    memset(big, 0x41, sizeof big);
    send(s, big, sizeof big, 0);
    CU_ASSERT(closed_by_posd(s, NULL, 0));
    close(s);
    /* registered clients that break the protocol: posd disconnects each one */
    /* an out-of-range sequence number in the submission ring */
    struct fake f;
    CU_ASSERT_EQUAL_FATAL(fake_register(&f), 0);
    atomic_store(&f.shm->next_seq, UINT64_C(1) << 60);
    fake_expect_closed(&f, "out-of-range next_seq");
    /* a completion of an operator it never submitted */
    CU_ASSERT_EQUAL_FATAL(fake_register(&f), 0);
    f.shm->done[0].seq = 50;
    atomic_store(&f.shm->done[0].stamp, 1);
    atomic_store(&f.shm->done_tail, 1);
    fake_expect_closed(&f, "completion never submitted");
    /* a synchronisation that covers launches it never made */
    CU_ASSERT_EQUAL_FATAL(fake_register(&f), 0);
    f.shm->sync_ring[0].scope = POS_SYNC_STREAM;
    f.shm->sync_ring[0].covers = 100;
    atomic_store(&f.shm->sync_ring[0].stamp, 1);
    atomic_store(&f.shm->sync_next, 1);
    fake_expect_closed(&f, "sync beyond submitted");
    /* kernel names out of order, and the same name under two ids */
    CU_ASSERT_EQUAL_FATAL(fake_register(&f), 0);
    send_names(f.sock, 5, "conv1", "conv2");
    fake_expect_closed(&f, "names out of order");
    CU_ASSERT_EQUAL_FATAL(fake_register(&f), 0);
    send_names(f.sock, 1, "conv1", "conv1");
    fake_expect_closed(&f, "names colliding");
    /* a completion that reaches posd before the submission it completes (a windowed client
     * launches and completes without waiting for posd): not a lie, counted once it is there */
    CU_ASSERT_EQUAL_FATAL(fake_register(&f), 0);
    atomic_store(&f.shm->next_seq, 1); /* reserved, not yet published */
    f.shm->done[0].seq = 1;
    f.shm->done[0].how = POS_DONE_MARKER;
    atomic_store(&f.shm->done[0].stamp, 1);
    atomic_store(&f.shm->done_tail, 1);
    uint64_t kick = 1;
    CU_ASSERT_EQUAL(write(f.fds[1], &kick, sizeof kick), 8);
    usleep(200000);
    struct pos_submission *sub = &f.shm->sub[1 % POS_SUB_RING];
    sub->seq = 1;
    sub->kind = POS_OP_KERNEL;
    sub->flags = POS_SUBF_FREE;
    atomic_store(&sub->stamp, 1);
    usleep(100000); /* no kick: posd looks again by itself */
    CU_ASSERT_EQUAL(atomic_load(&f.shm->done_head), 1);
    char me[64], row[OUT_MAX];
    snprintf(me, sizeof me, "\"pid\":%d,", (int)getpid());
    CU_ASSERT(posstat_json(row, sizeof row) == 0 && strstr(row, me)); /* still registered */
    fake_close(&f);
    /* an app name with a newline cannot forge a line of posd's log */
    struct proc forger;
    static char forged_out[OUT_MAX], forged_log[OUT_MAX * 8];
    const char *const tiny[] = {"--microbench", "10", NULL};
    posapp_start(&forger, "evil\nposd[0.000] error: forged", tiny);
    CU_ASSERT_EQUAL(posapp_wait(&forger, forged_out, sizeof forged_out), 0);
    util_read_file(suite.log, forged_log, sizeof forged_log);
    CU_ASSERT_PTR_NOT_NULL(strstr(forged_log, "app 'evil\\x0aposd[0.000] error: forged'"));
    CU_ASSERT_PTR_NULL(strstr(forged_log, "\nposd[0.000] error: forged"));
    /* well-formed names are accepted */
    CU_ASSERT_EQUAL_FATAL(fake_register(&f), 0);
    send_names(f.sock, 1, "conv1", "conv2");
    char one_more[OUT_MAX];
    CU_ASSERT_EQUAL(posstat_json(one_more, sizeof one_more), 0);
    CU_ASSERT(!closed_by_posd_within(f.sock, 200));
    fake_close(&f);
    /* the good client carried on */
    char out[OUT_MAX];
    CU_ASSERT_EQUAL(posapp_wait(&good, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"verified\":true"));
    char js[OUT_MAX];
    CU_ASSERT_EQUAL(posstat_json(js, sizeof js), 0); /* posd still answers */
    posd_stop(SIGTERM);
    char log[OUT_MAX * 4];
    util_read_file(suite.log, log, sizeof log);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "not pos protocol"));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "oversized message"));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "wrote out-of-range values"));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "malformed kernel names"));
}

/* Whether posd (started by posd_start) is still running. */
static int posd_alive(void)
{
    int st;
    return suite.posd > 0 && waitpid(suite.posd, &st, WNOHANG) == 0;
}

/* A client cannot resize the shared memory posd gave it (posd read past the end of a shrunk
 * memfd and died of SIGBUS); a hole punched into it only zeroes the client's own pages. */
static void test_shared_memory_cannot_be_resized(void)
{
    posd_start("priority");
    struct fake f;
    CU_ASSERT_EQUAL_FATAL(fake_register(&f), 0);
    errno = 0;
    CU_ASSERT_EQUAL(ftruncate(f.fds[0], (off_t)f.size * 2), -1);
    CU_ASSERT_EQUAL(errno, EPERM);
    errno = 0;
    CU_ASSERT_EQUAL(ftruncate(f.fds[0], 0), -1);
    CU_ASSERT_EQUAL(errno, EPERM);
    CU_ASSERT_EQUAL(fcntl(f.fds[0], F_ADD_SEALS, F_SEAL_WRITE), -1); /* sealed for good */
    fallocate(f.fds[0], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)f.size);
    uint64_t one = 1;
    CU_ASSERT_EQUAL(write(f.fds[1], &one, sizeof one), 8);
    usleep(200000);
    CU_ASSERT_FATAL(posd_alive());
    /* posd serves another client */
    struct fake g;
    CU_ASSERT_EQUAL(fake_register(&g), 0);
    char js[OUT_MAX];
    CU_ASSERT_EQUAL(posstat_json(js, sizeof js), 0);
    CU_ASSERT(posd_alive());
    fake_close(&g);
    fake_close(&f);
    posd_stop(SIGTERM);
}

#define PEERS_PER_UID 64 /* POSD_PEERS_PER_UID, docs/posd.md */
#define NOBODY        65534

/* Whether S is still open: posd neither refused (REJECT) nor closed it. */
static int still_open(int s)
{
    char buf[512];
    ssize_t n = recv(s, buf, sizeof buf, MSG_DONTWAIT | MSG_PEEK);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* Forks a child that drops to uid NOBODY, runs FN(ARG) and exits; returns its pid. The
 * socket's directory is opened to it; the child closes OTHER (the parent's end of ARG). */
static pid_t as_nobody(void (*fn)(int), int arg, int other)
{
    chmod(suite.dir, 0711);
    pid_t pid = fork();
    if (pid == 0) {
        close(other);
        if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
            _exit(3);
        fn(arg);
        _exit(0);
    }
    return pid;
}

/* The unprivileged holder of idle connections: opens as many as posd lets it (up to the
 * table's size and more), reports on FD how many posd kept, and 3 s later how many it still
 * keeps; then lets them go. */
static void hold_idle_connections(int fd)
{
    static int socks[POSD_TABLE + 16];
    int n = 0;
    while (n < POSD_TABLE + 16 && (socks[n] = peer_connect()) >= 0)
        n++;
    usleep(300000);
    int kept[2] = {0, 0};
    for (int i = 0; i < n; i++)
        kept[0] += still_open(socks[i]);
    if (write(fd, &kept[0], sizeof kept[0]) != sizeof kept[0])
        _exit(4);
    usleep(2700000);
    for (int i = 0; i < n; i++)
        kept[1] += still_open(socks[i]);
    if (write(fd, &kept[1], sizeof kept[1]) != sizeof kept[1])
        _exit(4);
}

/* Idle connections cannot lock anyone out: one that never registers is closed after 2 s, and
 * one uid holds at most PEERS_PER_UID of them (256 idle connections of one user filled posd's
 * table: new clients ran unscheduled and posstat was refused). */
static void test_idle_connections_lock_nobody_out(void)
{
    long log_at = suite_log_size(&suite);
    posd_start("priority");
    /* registration deadline, for anyone: an idle connection and a tool's that idles */
    int idle = peer_connect();
    int tool = peer_connect();
    struct pos_msg_hdr h = {POS_PROTO_MAGIC, POS_PROTO_VERSION, POS_MSG_STATS_REQ, 0, 0};
    char buf[POS_MSG_MAX];
    CU_ASSERT_EQUAL(send(tool, &h, sizeof h, 0), (ssize_t)sizeof h);
    CU_ASSERT(recv(tool, buf, sizeof buf, 0) > 0);
    CU_ASSERT(!closed_by_posd_within(idle, 1000));
    CU_ASSERT(closed_by_posd_within(idle, 3000));
    CU_ASSERT(closed_by_posd_within(tool, 3000));
    close(idle);
    close(tool);
    if (geteuid() != 0) {
        fprintf(stderr,
                "test_idle_connections_lock_nobody_out: the per-uid cap needs another "
                "uid (fork + setuid(%d) as root): that part skipped\n",
                NOBODY);
        posd_stop(SIGTERM);
        return;
    }
    int p[2];
    CU_ASSERT_FATAL(pipe(p) == 0);
    pid_t kid = as_nobody(hold_idle_connections, p[1], p[0]);
    close(p[1]);
    int kept = -1, later = -1;
    CU_ASSERT_EQUAL(read(p[0], &kept, sizeof kept), (ssize_t)sizeof kept);
    CU_ASSERT_EQUAL(kept, PEERS_PER_UID);
    /* while it holds its cap, a client registers and posstat answers */
    struct fake f;
    CU_ASSERT_EQUAL(fake_register(&f), 0);
    char js[OUT_MAX];
    CU_ASSERT_EQUAL(posstat_json(js, sizeof js), 0);
    CU_ASSERT_EQUAL(util_number(js, "clients"), 1);
    CU_ASSERT_EQUAL(read(p[0], &later, sizeof later), (ssize_t)sizeof later);
    CU_ASSERT_EQUAL(later, 0); /* none of them registered: all closed */
    close(p[0]);
    int st;
    waitpid(kid, &st, 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT(!closed_by_posd_within(f.sock, 100)); /* a registered client stays */
    fake_close(&f);
    posd_stop(SIGTERM);
    static char log[OUT_MAX * 16];
    suite_log_from(&suite, log_at, log, sizeof log);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "uid 65534 already holds 64 connections"));
}

/* The unprivileged STATS reader: registers a client of its own, asks, and reports on FD how
 * many clients it saw and how many of them were not its own; holds its client until FD's
 * reader has looked too (it closes the pipe). */
static void read_stats_as_nobody(int fd)
{
    struct fake f;
    int seen[2] = {-1, -1};
    if (fake_register(&f) == 0) {
        struct pos_device_stats dev = {0};
        struct pos_client_stats cs[8];
        seen[0] = posd_stats(&dev, cs, 8);
        seen[1] = 0;
        for (int i = 0; i < seen[0] && i < 8; i++)
            seen[1] += cs[i].uid != NOBODY;
        if (dev.clients != (uint32_t)seen[0] || (dev.flags & POS_DEV_EVERYONE))
            seen[1] = -1; /* its reply must not claim to list everyone */
    }
    if (write(fd, seen, sizeof seen) != sizeof seen)
        _exit(4);
    char c;
    if (read(fd, &c, 1) < 0) /* until the parent closes its end */
        _exit(4);
}

/* STATS shows other users' clients (their pids, and app names posd read from environments
 * only root may read) to root and the posd group alone; a user sees their own clients. */
static void test_stats_show_a_user_only_their_own_clients(void)
{
    if (geteuid() != 0) {
        fprintf(stderr,
                "test_stats_show_a_user_only_their_own_clients: needs root (a client "
                "of root's and a reader of uid %d): skipped\n",
                NOBODY);
        return;
    }
    posd_start("priority");
    struct fake mine;
    CU_ASSERT_EQUAL_FATAL(fake_register(&mine), 0);
    int p[2];
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, p) == 0);
    pid_t kid = as_nobody(read_stats_as_nobody, p[1], p[0]);
    close(p[1]);
    int seen[2] = {-1, -1};
    CU_ASSERT_EQUAL(read(p[0], seen, sizeof seen), (ssize_t)sizeof seen);
    CU_ASSERT_EQUAL(seen[0], 1); /* its own */
    CU_ASSERT_EQUAL(seen[1], 0); /* nobody else's, and the device line counts the same */
    struct pos_device_stats dev = {0};
    struct pos_client_stats cs[8];
    CU_ASSERT_EQUAL(posd_stats(&dev, cs, 8), 2); /* root sees both, and is told so */
    CU_ASSERT(dev.flags & POS_DEV_EVERYONE);
    close(p[0]);
    int st;
    waitpid(kid, &st, 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    fake_close(&mine);
    posd_stop(SIGTERM);
}

/* ---- configuration, signals, idle -------------------------------------------------------- */

static void test_bad_config_at_start_and_at_reload(void)
{
    char bad[192];
    snprintf(bad, sizeof bad, "%s/bad.conf", suite.dir);
    write_file(bad, "[daemon]\npolicy = priority\n[rule x]\nmatch_app = y\nclass = nosuch\n");
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "build/posd -f -c %s -s %s/other.sock 2>&1", bad, suite.dir);
    FILE *f = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    char want[256];
    snprintf(want, sizeof want, "%s:5:", bad);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    /* at SIGHUP, a bad file is logged and the running configuration stays */
    posd_start("priority");
    char saved[4096];
    util_read_file(suite.conf, saved, sizeof saved);
    write_file(suite.conf, "[daemon]\nbogus_key = 1\n");
    kill(suite.posd, SIGHUP);
    usleep(200000);
    char js[OUT_MAX];
    CU_ASSERT_EQUAL(posstat_json(js, sizeof js), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(js, "\"policy\":\"priority\""));
    write_file(suite.conf, saved);
    kill(suite.posd, SIGHUP);
    usleep(200000);
    posd_stop(SIGTERM);
    char log[OUT_MAX * 4];
    util_read_file(suite.log, log, sizeof log);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "reload refused"));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "configuration reloaded"));
    /* SIGTERM removed the socket */
    CU_ASSERT_NOT_EQUAL(access(suite.sock, F_OK), 0);
}

/* A SIGHUP (a reload) or SIGTERM sent the moment posd's socket appears is handled, not fatal:
 * posd created its socket before it blocked the signals its loop reads, so a reload right
 * after a start killed it by the signal's default action, its socket left behind. */
static void test_signal_right_after_start_is_handled(void)
{
    posd_stop(SIGTERM);
    int survived = 0, stopped = 0;
    for (int i = 0; i < 10; i++) {
        pid_t pid = fork();
        CU_ASSERT_FATAL(pid >= 0);
        if (pid == 0) {
            int fd = open(suite.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
            dup2(fd, 2);
            execl("build/posd", "posd", "-f", "-c", suite.conf, "-s", suite.sock, "-p",
                  "priority", (char *)NULL);
            _exit(127);
        }
        /* no sleep between looks: the signal goes as soon as the socket is there */
        double end = util_now() + 20.0 * scale;
        while (access(suite.sock, F_OK) != 0 && util_now() < end)
            ;
        kill(pid, i % 2 ? SIGTERM : SIGHUP);
        int st;
        if (i % 2) { /* stopped cleanly: status 0, its socket removed */
            waitpid(pid, &st, 0);
            stopped += WIFEXITED(st) && WEXITSTATUS(st) == 0 && access(suite.sock, F_OK) != 0;
        } else { /* reloaded: still serving */
            /* its socket may exist a moment before it listens: asked until it answers */
            struct pos_device_stats dev;
            int answered = 0;
            pid_t gone = 0;
            for (int k = 0; k < 200 * scale && !answered && gone == 0; k++) {
                answered = posd_device_stats(&dev) == 0;
                gone = waitpid(pid, &st, WNOHANG);
                if (!answered)
                    usleep(10000);
            }
            survived += answered && gone == 0;
            if (gone == pid)
                fprintf(stderr, "posd after SIGHUP at start: %s %d\n",
                        WIFSIGNALED(st) ? "killed by signal" : "exited with",
                        WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            else if (!answered)
                fprintf(stderr, "posd after SIGHUP at start: alive, no answer\n");
            suite.posd = gone == 0 ? pid : -1;
            posd_stop(SIGTERM);
        }
        unlink(suite.sock); /* what a killed one left, for the next start */
    }
    CU_ASSERT_EQUAL(survived, 5);
    CU_ASSERT_EQUAL(stopped, 5);
    if (survived != 5 || stopped != 5)
        fprintf(stderr, "signal at start: %d of 5 reloads survived, %d of 5 stops clean\n",
                survived, stopped);
}

/* Runs posd on the test socket in the foreground (for at most LIMIT_S seconds); returns its
 * exit status and its output in OUT. */
static int posd_run(int limit_s, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "timeout %d build/posd -f -c %s -s %s 2>&1", limit_s, suite.conf,
             suite.sock);
    return util_run_stdout(cmd, out, cap);
}

/* posd removes only a socket at its path: a file there (posd deleted it and put its socket
 * in its place) or a directory (reported as "Address already in use") is named, and posd
 * refuses to start. */
static void test_socket_path_must_be_a_socket(void)
{
    posd_stop(SIGTERM);
    char out[4096], data[64] = "";
    write_file(suite.sock, "precious data\n");
    int rc = posd_run((int)(3 * scale), out, sizeof out);
    CU_ASSERT(rc != 0 && rc != 124);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "is a regular file, not a socket"));
    CU_ASSERT_EQUAL(util_read_file(suite.sock, data, sizeof data), 0);
    CU_ASSERT_STRING_EQUAL(data, "precious data\n");
    unlink(suite.sock);
    CU_ASSERT_EQUAL_FATAL(mkdir(suite.sock, 0755), 0);
    rc = posd_run((int)(3 * scale), out, sizeof out);
    CU_ASSERT(rc != 0 && rc != 124);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "is a directory, not a socket"));
    struct stat st;
    CU_ASSERT(stat(suite.sock, &st) == 0 && S_ISDIR(st.st_mode));
    rmdir(suite.sock);
}

/* A posd started right after the one before was killed takes over its socket every time (the
 * killed one's socket outlives it briefly: 7 starts in 8 were refused as "another posd is
 * listening"); one started against a live posd whose backlog is full exits at once with a
 * reason (its liveness probe blocked in connect for ever). */
static void test_takeover_of_a_dead_posd_and_not_of_a_live_one(void)
{
    for (int i = 0; i < 5; i++) {
        posd_start("priority");
        struct pos_device_stats dev;
        CU_ASSERT_EQUAL_FATAL(posd_device_stats(&dev), 0);
        /* peers connected: the kernel takes a while to tear down what posd had */
        struct fake f;
        CU_ASSERT_EQUAL_FATAL(fake_register(&f), 0);
        int peers[32];
        for (int k = 0; k < 32; k++)
            peers[k] = peer_connect();
        pid_t old = suite.posd;
        kill(old, SIGKILL);
        posd_start("priority"); /* the socket file is there: it returns at once */
        fake_close(&f);
        for (int k = 0; k < 32; k++)
            close(peers[k]);
        int up = 0;
        for (int k = 0; k < 400 * scale && !up && posd_alive(); k++) {
            up = posd_device_stats(&dev) == 0;
            if (!up)
                usleep(10000);
        }
        int st;
        waitpid(old, &st, 0);
        CU_ASSERT(up);
        if (!up) {
            fprintf(stderr, "restart %d after kill -9 failed\n", i);
            posd_stop(SIGKILL); /* or it serves the socket of the tests after this one */
            break;
        }
        posd_stop(SIGTERM);
    }
    /* the same, made certain: a socket that accepts nothing and then goes away (as a killed
     * posd's does until the kernel has torn down its io_uring) is taken over once it does */
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%.*s", (int)sizeof a.sun_path - 1, suite.sock);
    int dying = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CU_ASSERT_FATAL(bind(dying, (struct sockaddr *)&a, sizeof a) == 0 && listen(dying, 8) == 0);
    posd_start("priority");
    usleep(300000);
    close(dying);
    int up = 0;
    struct pos_device_stats dev;
    for (int k = 0; k < 400 * scale && !up && posd_alive(); k++) {
        up = posd_device_stats(&dev) == 0;
        if (!up)
            usleep(10000);
    }
    CU_ASSERT(up);
    posd_stop(SIGTERM);
    /* a live posd with a full backlog: stopped, so it accepts nothing */
    posd_start("priority");
    kill(suite.posd, SIGSTOP);
    int socks[256], n = 0, more = 1;
    /* until a round adds none (the kernel may still take one off the backlog for an accept
     * posd had in flight) */
    while (more && n < 256) {
        more = 0;
        while (n < 256) {
            socks[n] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (connect(socks[n], (struct sockaddr *)&a, sizeof a) < 0) {
                close(socks[n]);
                break;
            }
            n++;
            more = 1;
        }
        usleep(100000);
    }
    CU_ASSERT(n < 256); /* the backlog is full */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char out[4096];
    int rc = posd_run((int)(10 * scale), out, sizeof out);
    double secs = seconds_since(&t0);
    CU_ASSERT(rc != 0 && rc != 124);
    CU_ASSERT(secs < 4.0 * scale);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "another posd is listening"));
    if (rc == 0 || rc == 124 || secs >= 4.0 * scale || !strstr(out, "another posd is listening"))
        fprintf(stderr, "posd against a full backlog: status %d after %.1f s: %s\n", rc, secs, out);
    kill(suite.posd, SIGCONT);
    for (int i = 0; i < n; i++)
        close(socks[i]);
    CU_ASSERT_EQUAL(posd_device_stats(&dev), 0); /* the live one kept its socket */
    posd_stop(SIGTERM);
}

static void test_idle_posd_sleeps(void)
{
    posd_start("priority");
    usleep(300000);
    long before = util_cpu_ticks(suite.posd);
    sleep(1);
    long after = util_cpu_ticks(suite.posd);
    CU_ASSERT(before >= 0);
    CU_ASSERT_EQUAL(after, before); /* not one clock tick of CPU in a second */
    posd_stop(SIGTERM);
}

static int count_lines(const char *text)
{
    return util_count(text, "\n");
}

/* A peer that floods posd with events it logs cannot flood the log: a connect/close loop of
 * garbage and of clients that register and leave (294 000 lines in 3 s), and a connection
 * posd cannot accept for want of descriptors (1.8 M "accept: Too many open files" lines in
 * 3 s, a core spinning). */
static void test_floods_do_not_fill_the_log(void)
{
    long log_at = suite_log_size(&suite);
    posd_start("priority");
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rounds = 0;
    while (seconds_since(&t0) < 2.0) {
        int s = peer_connect();
        CU_ASSERT_FATAL(s >= 0);
        CU_ASSERT_EQUAL(send(s, "hello posd, let me in", 21, 0), 21);
        close(s);
        s = peer_connect();
        CU_ASSERT_FATAL(s >= 0);
        hello(s, POS_SHM_VERSION);
        close(s);
        rounds++;
    }
    usleep(1200000); /* the summaries of what was suppressed are due */
    static char log[OUT_MAX * 64];
    suite_log_from(&suite, log_at, log, sizeof log);
    int lines = count_lines(log);
    CU_ASSERT(rounds > 100);
    CU_ASSERT(lines < 100);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "similar lines suppressed"));
    if (lines >= 100 || rounds <= 100)
        fprintf(stderr, "connect/close loop: %d rounds, %d log lines\n", rounds, lines);
    /* at the descriptor limit, with a connection waiting */
    struct rlimit old;
    CU_ASSERT_FATAL(util_lower_fd_limit(suite.posd, 2, &old) == 0);
    int socks[6];
    for (int i = 0; i < 6; i++)
        socks[i] = peer_connect(); /* two accepted, the rest wait in the backlog */
    usleep(200000);
    log_at = suite_log_size(&suite);
    long cpu0 = util_cpu_ticks(suite.posd);
    usleep(1500000);
    long cpu1 = util_cpu_ticks(suite.posd);
    suite_log_from(&suite, log_at, log, sizeof log);
    lines = count_lines(log);
    CU_ASSERT(cpu1 - cpu0 < 20); /* of 150 in 1.5 s: spinning took them all */
    CU_ASSERT(lines < 100);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "Too many open files"));
    if (cpu1 - cpu0 >= 20 || lines >= 100)
        fprintf(stderr, "at the fd limit: %ld CPU ticks in 1.5 s, %d log lines\n", cpu1 - cpu0,
                lines);
    CU_ASSERT_EQUAL(prlimit(suite.posd, RLIMIT_NOFILE, &old, NULL), 0);
    for (int i = 0; i < 6; i++)
        close(socks[i]);
    char js[OUT_MAX];
    CU_ASSERT_EQUAL(posstat_json(js, sizeof js), 0);
    posd_stop(SIGTERM);
}

/* A client that kicks posd as fast as it can with nothing to report (3 M eventfd writes in 3 s
 * cost posd 70% of a core) costs posd a small share of a core: its kicks wait, longer while it
 * keeps on. A client whose kicks bring news is not slowed (the capped client of
 * test_waiting_thread_steps_its_own_window kicks at every wait). */
static void test_kick_flood_is_bounded(void)
{
    posd_start("priority");
    struct fake f;
    CU_ASSERT_EQUAL_FATAL(fake_register(&f), 0);
    pid_t kid = fork();
    CU_ASSERT_FATAL(kid >= 0);
    if (kid == 0) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        uint64_t one = 1;
        while (seconds_since(&t0) < 2.5)
            for (int i = 0; i < 1000; i++)
                if (write(f.fds[1], &one, sizeof one) != sizeof one)
                    _exit(1);
        _exit(0);
    }
    usleep(300000);
    long cpu0 = util_cpu_ticks(suite.posd);
    usleep(2000000);
    long cpu1 = util_cpu_ticks(suite.posd);
    char js[OUT_MAX];
    CU_ASSERT_EQUAL(posstat_json(js, sizeof js), 0);
    int st;
    waitpid(kid, &st, 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT(cpu1 - cpu0 < 30); /* of 200 in 2 s; about 5 measured, 160 unbounded */
    if (cpu1 - cpu0 >= 30)
        fprintf(stderr, "kick flood: posd used %ld CPU ticks in 2 s\n", cpu1 - cpu0);
    CU_ASSERT(!closed_by_posd_within(f.sock, 100)); /* kicking is no offence */
    fake_close(&f);
    posd_stop(SIGTERM);
}

/* posd out of file descriptors says so, in its log and in the refusal the shim prints (both
 * said "posd could not allocate shared memory"). */
static void test_out_of_descriptors_is_said(void)
{
    long log_at = suite_log_size(&suite);
    posd_start("priority");
    /* room for the connection, none for the shared memory */
    struct rlimit old;
    CU_ASSERT_FATAL(util_lower_fd_limit(suite.posd, 1, &old) == 0);
    int s = peer_connect();
    CU_ASSERT_FATAL(s >= 0);
    hello(s, POS_SHM_VERSION);
    char reason[256] = "";
    CU_ASSERT(closed_by_posd(s, reason, sizeof reason));
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "posd is out of file descriptors"));
    close(s);
    char out[OUT_MAX];
    char cmd[1536];
    /* the shim's preload as every test gives it (a sanitized build's runtime first) */
    snprintf(cmd, sizeof cmd, "%s build/posapp --model resnet18 --requests 2 --verify 2>&1",
             util_shim_preload_env());
    FILE *f = popen(cmd, "r");
    size_t len = fread(out, 1, sizeof out - 1, f);
    out[len] = '\0';
    CU_ASSERT_EQUAL(pclose(f), 0);
    int said = strstr(out, "posd refused this process: posd is out of file descriptors") != NULL;
    if (!said)
        fprintf(stderr, "test_out_of_descriptors_is_said: the client said:\n%s\n", out);
    CU_ASSERT(said);
    CU_ASSERT_EQUAL(prlimit(suite.posd, RLIMIT_NOFILE, &old, NULL), 0);
    posd_stop(SIGTERM);
    static char log[OUT_MAX * 4];
    suite_log_from(&suite, log_at, log, sizeof log);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "out of file descriptors: raise its LimitNOFILE"));
}

static void test_scheduled_without_posd_is_passthrough(void)
{
    posd_stop(SIGTERM);
    /* no posd of an earlier test left serving the socket (one that outlived a failed test
     * answered this one's client: no "no posd at" line) */
    CU_ASSERT_NOT_EQUAL(access(suite.sock, F_OK), 0);
    char cmd[1536], out[OUT_MAX];
    snprintf(cmd, sizeof cmd,
             "POS_MODE=scheduled LD_PRELOAD=%s build/posapp --model resnet18 "
             "--requests 2 --verify 2>&1",
             util_shim_preload());
    FILE *f = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    CU_ASSERT_EQUAL(pclose(f), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "no posd at"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"verified\":true"));
    CU_ASSERT_EQUAL(util_count(out, "posshim"), 1);
}

/* The unprivileged register/leave loop: registers and leaves for 1 s as fast as it can and
 * reports on FD how many registrations posd accepted and how many it refused. */
static void register_leave_loop(int fd)
{
    int counts[2] = {0, 0};
    double end = util_now() + 1.0;
    while (util_now() < end) {
        struct client c;
        if (client_register(suite.sock, &c) == 0) {
            counts[0]++;
            client_close(&c);
        } else {
            counts[1]++;
        }
    }
    if (write(fd, counts, sizeof counts) != (ssize_t)sizeof counts)
        _exit(4);
}

/* A uid that registers and leaves in a loop gets its burst, then about 100 registrations a
 * second (each costs posd a memfd, a mapping, /proc reads and a clean slot), the rest refused
 * with a reason the shim prints; a client of another uid registers meanwhile. */
static void test_registration_rate_is_bounded_per_uid(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_registration_rate_is_bounded_per_uid: needs another uid (fork + "
                        "setuid(%d) as root): skipped\n",
                NOBODY);
        return;
    }
    long log_at = suite_log_size(&suite);
    posd_start("priority");
    int p[2];
    CU_ASSERT_FATAL(pipe(p) == 0);
    pid_t kid = as_nobody(register_leave_loop, p[1], p[0]);
    close(p[1]);
    usleep(500000);
    struct fake f;
    CU_ASSERT_EQUAL(fake_register(&f), 0); /* root, in the middle of the flood */
    int counts[2] = {-1, -1};
    CU_ASSERT_EQUAL(read(p[0], counts, sizeof counts), (ssize_t)sizeof counts);
    close(p[0]);
    int st;
    waitpid(kid, &st, 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* the burst and a second's refill, with room for a slow start */
    CU_ASSERT(counts[0] >= 64 && counts[0] <= 128 + 110); /* posd.h: POSD_REG_BURST, 100/s */
    CU_ASSERT(counts[1] > 0);
    fake_close(&f);
    posd_stop(SIGTERM);
    static char log[OUT_MAX * 16];
    suite_log_from(&suite, log_at, log, sizeof log);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "uid 65534 registers too often"));
}

/* A detached posd started with relative -c and -s (it chdirs to /) still rereads its
 * configuration on SIGHUP and removes its own socket at exit: it made both paths absolute. */
static void test_detached_posd_keeps_relative_paths(void)
{
    char sub[160], cwd[400], cmd[1024], log[200], sock[200];
    snprintf(sub, sizeof sub, "%s/relative", suite.dir);
    mkdir(sub, 0700);
    snprintf(log, sizeof log, "%s/log", sub);
    snprintf(sock, sizeof sock, "%s/s.sock", sub);
    CU_ASSERT_PTR_NOT_NULL_FATAL(getcwd(cwd, sizeof cwd));
    snprintf(cmd, sizeof cmd,
             "cd %s && printf '[daemon]\\nlog_level = info\\n' > p.conf && %s/build/posd -c p.conf "
             "-s s.sock 2>log",
             sub, cwd);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0); /* the parent returns once it detached */
    /* the detached posd: the process whose stderr is LOG (SO_PEERCRED would name the parent
     * that listened and exited) */
    pid_t pid = -1;
    for (int k = 0; k < 100 && pid < 0; k++) {
        DIR *proc = opendir("/proc");
        struct dirent *e;
        while (proc && (e = readdir(proc)) && pid < 0) {
            char fd2[300], target[300];
            snprintf(fd2, sizeof fd2, "/proc/%s/fd/2", e->d_name);
            ssize_t n = readlink(fd2, target, sizeof target - 1);
            if (n > 0 && (target[n] = '\0', strcmp(target, log) == 0) && access(sock, F_OK) == 0)
                pid = atoi(e->d_name);
        }
        if (proc)
            closedir(proc);
        if (pid < 0)
            usleep(20000);
    }
    CU_ASSERT_FATAL(pid > 0);
    kill(pid, SIGHUP);
    int reloaded = 0;
    for (int k = 0; k < 100 && !reloaded; k++) {
        usleep(20000);
        static char text[8192];
        reloaded = util_read_file(log, text, sizeof text) >= 0 &&
                   strstr(text, "configuration reloaded") != NULL;
    }
    CU_ASSERT(reloaded);
    kill(pid, SIGTERM);
    for (int k = 0; k < 100 && kill(pid, 0) == 0; k++)
        usleep(20000);
    CU_ASSERT_NOT_EQUAL(kill(pid, 0), 0);
    CU_ASSERT_NOT_EQUAL(access(sock, F_OK), 0); /* its socket, removed by its absolute path */
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("posd", suite_init, suite_clean);
    POS_ADD_TEST(s, test_fifo_counts_add_up);
    POS_ADD_TEST(s, test_priority_holds_and_stall_and_death_release);
    POS_ADD_TEST(s, test_lone_batch_client_is_not_slowed);
    POS_ADD_TEST(s, test_reused_slots_do_not_stall_windowed_clients);
    POS_ADD_TEST(s, test_waiting_thread_steps_its_own_window);
    POS_ADD_TEST(s, test_fail_open_and_reattach);
    POS_ADD_TEST(s, test_bad_peers_are_disconnected);
    POS_ADD_TEST(s, test_shared_memory_cannot_be_resized);
    POS_ADD_TEST(s, test_idle_connections_lock_nobody_out);
    POS_ADD_TEST(s, test_stats_show_a_user_only_their_own_clients);
    POS_ADD_TEST(s, test_bad_config_at_start_and_at_reload);
    POS_ADD_TEST(s, test_socket_path_must_be_a_socket);
    POS_ADD_TEST(s, test_takeover_of_a_dead_posd_and_not_of_a_live_one);
    POS_ADD_TEST(s, test_idle_posd_sleeps);
    POS_ADD_TEST(s, test_floods_do_not_fill_the_log);
    POS_ADD_TEST(s, test_kick_flood_is_bounded);
    POS_ADD_TEST(s, test_out_of_descriptors_is_said);
    POS_ADD_TEST(s, test_signal_right_after_start_is_handled);
    POS_ADD_TEST(s, test_scheduled_without_posd_is_passthrough);
    POS_ADD_TEST(s, test_detached_posd_keeps_relative_paths);
    POS_ADD_TEST(s, test_registration_rate_is_bounded_per_uid);
}
