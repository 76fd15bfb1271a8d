/* Integration tests of posd's side of the memory ledger (sched/mem_ledger.c): a real posd and
 * fake clients (tests/integration/client.h) that map their shared memory and write their own
 * accounts into it, as the shim does. The limit of the policy files reaches the shared memory
 * and the WELCOME; posctl set --mem-limit changes it live and says when use is above it; a
 * reload changes it and a bad one keeps it; STATS, posctl show and posstat -o prom show the
 * account; a false account changes its own row alone; a client that leaves leaves nothing. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pos/client_shm.h"
#include "pos/proto.h"
#include "tests/cunit_main.h"
#include "tests/integration/client.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX 65536
#define GIB     (UINT64_C(1) << 30)
#define MIB     (UINT64_C(1) << 20)

/* The fake clients are this process: posd names them by its executable, test_posd_mem. */
static const char conf_512m[] = "[rule fake]\nmatch_app = test_posd_mem*\nmem_limit = 512M\n";

static struct suite suite;

static int suite_init(void)
{
    return suite_open(&suite, "posd-mem", conf_512m) == 0 && access("build/posd", X_OK) == 0 &&
                   access("build/posctl", X_OK) == 0 && access("build/posstat", X_OK) == 0
               ? 0
               : -1;
}

static int suite_clean(void)
{
    return suite_close(&suite);
}

static void write_conf(const char *text)
{
    FILE *f = fopen(suite.conf, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(text, f);
    CU_ASSERT_FATAL(fclose(f) == 0);
}

static void posd_start(void)
{
    write_conf(conf_512m);
    CU_ASSERT_FATAL(suite_posd_start(&suite, "fifo") > 0);
    CU_ASSERT_FATAL(access(suite.sock, F_OK) == 0);
}

static void posd_stop(void)
{
    util_posd_stop(&suite.posd, SIGTERM);
}

static int tool(const char *name, const char *args, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "build/%s -s %s %s", name, suite.sock, args);
    return util_run(cmd, out, cap);
}

/* The STATS row of the Nth client registered by this process (posd's ids rise), within 2 s;
 * 0 when it is there. */
static int row_of(const struct client *c, struct pos_client_stats *out)
{
    for (int k = 0; k < 40; k++) {
        struct pos_device_stats dev;
        struct pos_client_stats cs[16];
        int n = util_stats(suite.sock, &dev, cs, 16);
        for (int i = 0; i < n && i < 16; i++)
            if (cs[i].client_id == c->shm->client_id) {
                *out = cs[i];
                return 0;
            }
        usleep(50000);
    }
    return -1;
}

/* Writes an account on device DEV into C's shared memory, as its shim would. */
static void account(struct client *c, int dev, uint64_t total, uint64_t used, uint64_t peak,
                    uint64_t refused)
{
    struct pos_mem_account *a = &c->shm->mem[dev];
    atomic_store(&a->total, total);
    atomic_store(&a->used, used);
    atomic_store(&a->peak, peak);
    atomic_store(&a->refused, refused);
}

/* The posstat -o prom line that starts with PREFIX and is labelled with PID, or NULL. */
static const char *prom_line(const char *text, const char *prefix, int pid, char *line, size_t cap)
{
    char pid_label[32];
    snprintf(pid_label, sizeof pid_label, "pid=\"%d\"", pid);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        size_t len = strcspn(p, "\n");
        if (strncmp(p, prefix, strlen(prefix)) != 0 || len >= cap)
            continue;
        memcpy(line, p, len);
        line[len] = '\0';
        if (pid < 0 || strstr(line, pid_label))
            return line;
    }
    return NULL;
}

/* The value of the posstat -o prom sample that starts with PREFIX for PID (any when < 0). */
static double prom_value(const char *text, const char *prefix, int pid)
{
    char line[512];
    const char *l = prom_line(text, prefix, pid, line, sizeof line);
    return l ? strtod(strrchr(l, ' ') + 1, NULL) : -1;
}

/* posd started, and two fake clients A and B registered with it. */
static void posd_start_with_two(struct client *a, struct client *b)
{
    posd_start();
    CU_ASSERT_FATAL(client_register(suite.sock, a) == 0);
    CU_ASSERT_FATAL(client_register(suite.sock, b) == 0);
}

/* ---- the limit --------------------------------------------------------------------------- */

/* The rule's limit is in the shared memory before the client holds it, and in its WELCOME. */
static void test_the_rules_limit_reaches_the_shared_memory_and_the_welcome(void)
{
    posd_start();
    struct client c;
    CU_ASSERT_FATAL(client_register(suite.sock, &c) == 0);
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit), 512 * MIB);
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit_ppm), 0);
    CU_ASSERT(atomic_load(&c.shm->mem_word) >= 1);
    CU_ASSERT_EQUAL(c.welcome.mem_limit, 512 * MIB);
    CU_ASSERT_EQUAL(c.welcome.mem_limit_ppm, 0);
    struct pos_client_stats s;
    CU_ASSERT_FATAL(row_of(&c, &s) == 0);
    CU_ASSERT_EQUAL(s.mem_limit, 512 * MIB);
    client_close(&c);
    posd_stop();
}

/* posctl set --mem-limit: raised, a share, lowered below use (said), none; each at once in the
 * shared memory, the word bumped, STATS agreeing. */
static void test_posctl_sets_the_limit_live_and_says_when_use_is_above(void)
{
    posd_start();
    struct client c;
    CU_ASSERT_FATAL(client_register(suite.sock, &c) == 0);
    account(&c, 0, 16 * GIB, 1 * GIB, 1 * GIB, 0);
    uint32_t word = atomic_load(&c.shm->mem_word);
    char out[OUT_MAX], args[128];
    uint32_t id = c.shm->client_id;

    snprintf(args, sizeof args, "set %u --mem-limit 4GiB", id);
    CU_ASSERT_EQUAL(tool("posctl", args, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "mem_limit 4GiB"));
    CU_ASSERT_PTR_NULL(strstr(out, "above"));
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit), 4 * GIB);
    CU_ASSERT(atomic_load(&c.shm->mem_word) != word);
    word = atomic_load(&c.shm->mem_word);

    snprintf(args, sizeof args, "set %u --mem-limit 50%%", id);
    CU_ASSERT_EQUAL(tool("posctl", args, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "mem_limit 50%"));
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit_ppm), 500000);
    CU_ASSERT(atomic_load(&c.shm->mem_word) != word);
    struct pos_client_stats s;
    CU_ASSERT_FATAL(row_of(&c, &s) == 0);
    CU_ASSERT_EQUAL(s.mem_limit, 8 * GIB); /* half of the 16 GiB its shim saw */
    CU_ASSERT_EQUAL(s.mem_limit_ppm, 500000);
    CU_ASSERT(s.flags & POS_CLIENT_OVERRIDE);

    snprintf(args, sizeof args, "set %u --mem-limit 256M", id);
    CU_ASSERT_EQUAL(tool("posctl", args, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "it uses 1GiB on device 0, above 256MiB"));
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit), 256 * MIB);
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit_ppm), 0);
    CU_ASSERT_FATAL(row_of(&c, &s) == 0);
    CU_ASSERT_EQUAL(s.mem_limit, 256 * MIB);
    CU_ASSERT_EQUAL(s.mem_limit_ppm, 0);

    snprintf(args, sizeof args, "set %u --mem-limit none", id);
    CU_ASSERT_EQUAL(tool("posctl", args, out, sizeof out), 0);
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit), POS_MEM_UNLIMITED);
    CU_ASSERT_FATAL(row_of(&c, &s) == 0);
    CU_ASSERT_EQUAL(s.mem_limit, POS_MEM_UNLIMITED);

    /* a value posctl cannot read goes nowhere */
    word = atomic_load(&c.shm->mem_word);
    snprintf(args, sizeof args, "set %u --mem-limit 2gigs", id);
    CU_ASSERT_EQUAL(tool("posctl", args, out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "posctl: bad memory limit '2gigs': expected none"));
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_word), word);
    client_close(&c);
    posd_stop();
}

/* A reload writes the new limit at once; a reload with a bad mem_limit is refused with its
 * FILE:LINE and the running limit stays; a reload also ends posctl's override. */
static void test_a_reload_changes_the_limit_and_a_bad_one_keeps_it(void)
{
    posd_start();
    struct client c;
    CU_ASSERT_FATAL(client_register(suite.sock, &c) == 0);
    char out[OUT_MAX];
    write_conf("[class latency]\nmem_limit = 25%\n[rule fake]\nmatch_app = test_posd_mem*\n"
               "mem_limit = 1.5G\n");
    CU_ASSERT_EQUAL(tool("posctl", "reload", out, sizeof out), 0);
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit), 3 * GIB / 2);
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit_ppm), 0);

    write_conf("[rule fake]\nmatch_app = test_posd_mem*\n\nmem_limit = 1.5 gigs\n");
    CU_ASSERT_NOT_EQUAL(tool("posctl", "reload", out, sizeof out), 0);
    char want[512];
    snprintf(want, sizeof want, "%s:4: bad value '1.5 gigs' for 'mem_limit' in [rule fake]",
             suite.conf);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit), 3 * GIB / 2);

    /* the class's share, once the rule sets none of its own */
    write_conf("[class latency]\nmem_limit = 25%\n");
    CU_ASSERT_EQUAL(tool("posctl", "reload", out, sizeof out), 0);
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit_ppm), 250000);
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit), POS_MEM_UNLIMITED);

    /* posctl's limit lasts until the next reload */
    char args[128];
    snprintf(args, sizeof args, "set %u --mem-limit 1G", c.shm->client_id);
    CU_ASSERT_EQUAL(tool("posctl", args, out, sizeof out), 0);
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit), GIB);
    CU_ASSERT_EQUAL(tool("posctl", "reload", out, sizeof out), 0);
    CU_ASSERT_EQUAL(atomic_load(&c.shm->mem_limit_ppm), 250000);
    client_close(&c);
    posd_stop();
}

/* ---- what is reported -------------------------------------------------------------------- */

/* The account a client writes, summed over its devices, in STATS, posctl show and the
 * Prometheus text; the limit on its rules' device. */
static void test_stats_and_metrics_show_the_clients_account(void)
{
    posd_start();
    struct client c;
    CU_ASSERT_FATAL(client_register(suite.sock, &c) == 0);
    account(&c, 0, 16 * GIB, 300 * MIB, 400 * MIB, 3);
    account(&c, 1, 8 * GIB, 100 * MIB, 100 * MIB, 1);
    atomic_store(&c.shm->mem[0].bytes[POS_MEM_LINEAR], 200 * MIB);
    atomic_store(&c.shm->mem[0].bytes[POS_MEM_POOL], 100 * MIB);
    atomic_store(&c.shm->mem[1].bytes[POS_MEM_LINEAR], 100 * MIB);
    struct pos_client_stats s;
    CU_ASSERT_FATAL(row_of(&c, &s) == 0);
    CU_ASSERT_EQUAL(s.mem_used, 400 * MIB);
    CU_ASSERT_EQUAL(s.mem_peak, 500 * MIB);
    CU_ASSERT_EQUAL(s.mem_refused, 4);
    CU_ASSERT_EQUAL(s.mem_total, 16 * GIB);
    CU_ASSERT_EQUAL(s.mem_limit, 512 * MIB);
    CU_ASSERT_EQUAL(s.mem_bytes[POS_MEM_LINEAR], 300 * MIB);
    CU_ASSERT_EQUAL(s.mem_bytes[POS_MEM_POOL], 100 * MIB);

    char out[OUT_MAX], args[64];
    snprintf(args, sizeof args, "show %u", c.shm->client_id);
    CU_ASSERT_EQUAL(tool("posctl", args, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\nmem_used 419430400\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\nmem_limit 536870912 (512MiB)\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\nmem_pool 104857600\n"));

    CU_ASSERT_EQUAL(tool("posstat", "-o prom", out, sizeof out), 0);
    int pid = getpid();
    CU_ASSERT_EQUAL(prom_value(out, "posd_client_mem_used_bytes{", pid), 400.0 * MIB);
    CU_ASSERT_EQUAL(prom_value(out, "posd_client_mem_limit_bytes{", pid), 512.0 * MIB);
    CU_ASSERT_EQUAL(prom_value(out, "posd_client_mem_peak_bytes{", pid), 500.0 * MIB);
    CU_ASSERT_EQUAL(prom_value(out, "posd_client_mem_refused_total{", pid), 4);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, ",kind=\"pool\"} 104857600\n"));
    CU_ASSERT_EQUAL(prom_value(out, "posd_device_mem_used_bytes{", -1), 400.0 * MIB);

    /* no limit is +Inf, as the format spells it */
    snprintf(args, sizeof args, "set %u --mem-limit none", c.shm->client_id);
    CU_ASSERT_EQUAL(tool("posctl", args, out, sizeof out), 0);
    CU_ASSERT_EQUAL(tool("posstat", "-o prom", out, sizeof out), 0);
    char line[512];
    const char *l = prom_line(out, "posd_client_mem_limit_bytes{", pid, line, sizeof line);
    CU_ASSERT(l && strcmp(strrchr(l, ' '), " +Inf") == 0);
    client_close(&c);
    posd_stop();
}

/* A client that writes a huge, false account (and its own limit away) misreports itself alone:
 * the other client's row is exact, the device total moves by the liar's clamped row, and the
 * liar's limit is posd's, not what it wrote. */
static void test_a_false_account_changes_only_its_own_row(void)
{
    struct client liar, honest;
    posd_start_with_two(&liar, &honest);
    account(&honest, 0, 16 * GIB, GIB, GIB, 1);
    atomic_store(&honest.shm->mem[0].bytes[POS_MEM_LINEAR], GIB);
    for (int dev = 0; dev < POS_MEM_MAX_DEVICES; dev++) {
        account(&liar, dev, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX);
        for (int k = 0; k < POS_MEM_KINDS; k++)
            atomic_store(&liar.shm->mem[dev].bytes[k], UINT64_MAX - (uint64_t)k);
    }
    atomic_store(&liar.shm->mem_limit, 0);
    atomic_store(&liar.shm->mem_limit_ppm, 7);

    struct pos_client_stats h, l;
    CU_ASSERT_FATAL(row_of(&honest, &h) == 0 && row_of(&liar, &l) == 0);
    CU_ASSERT_EQUAL(h.mem_used, GIB);
    CU_ASSERT_EQUAL(h.mem_peak, GIB);
    CU_ASSERT_EQUAL(h.mem_refused, 1);
    CU_ASSERT_EQUAL(h.mem_bytes[POS_MEM_LINEAR], GIB);
    CU_ASSERT_EQUAL(h.mem_limit, 512 * MIB);
    /* each device's figures clamped to 256 TiB: the sums cannot wrap */
    uint64_t most = (UINT64_C(1) << 48) * POS_MEM_MAX_DEVICES;
    CU_ASSERT(l.mem_used <= most && l.mem_peak <= most && l.mem_refused <= most);
    for (int k = 0; k < POS_MEM_KINDS; k++)
        CU_ASSERT(l.mem_bytes[k] <= most);
    CU_ASSERT_EQUAL(l.mem_total, UINT64_C(1) << 48);
    CU_ASSERT_EQUAL(l.mem_limit, 512 * MIB); /* posd's own copy, not what the client wrote */
    CU_ASSERT_EQUAL(l.mem_limit_ppm, 0);

    char out[OUT_MAX];
    CU_ASSERT_EQUAL(tool("posstat", "-o prom", out, sizeof out), 0);
    CU_ASSERT_EQUAL(prom_value(out, "posd_device_mem_used_bytes{", -1),
                    (double)l.mem_used + (double)h.mem_used);
    client_close(&liar);
    client_close(&honest);
    posd_stop();
}

/* A client that leaves is gone from STATS and the metrics at once, and the device's total drops
 * by what it held. */
static void test_a_client_that_leaves_leaves_nothing_in_the_ledger(void)
{
    struct client stays, leaves;
    posd_start_with_two(&stays, &leaves);
    account(&stays, 0, 16 * GIB, GIB, GIB, 0);
    account(&leaves, 0, 16 * GIB, 2 * GIB, 2 * GIB, 0);
    uint32_t gone_id = leaves.shm->client_id;
    char out[OUT_MAX];
    CU_ASSERT_EQUAL(tool("posstat", "-o prom", out, sizeof out), 0);
    CU_ASSERT_EQUAL(prom_value(out, "posd_device_mem_used_bytes{", -1), 3.0 * GIB);
    client_close(&leaves);
    int gone = 0;
    for (int k = 0; k < 40 && !gone; k++) {
        struct pos_device_stats dev;
        struct pos_client_stats cs[16];
        int n = util_stats(suite.sock, &dev, cs, 16);
        gone = n == 1 && cs[0].client_id == stays.shm->client_id;
        for (int i = 0; i < n && i < 16; i++)
            CU_ASSERT(cs[i].client_id != gone_id || !gone);
        if (!gone)
            usleep(50000);
    }
    CU_ASSERT(gone);
    CU_ASSERT_EQUAL(tool("posstat", "-o prom", out, sizeof out), 0);
    CU_ASSERT_EQUAL(prom_value(out, "posd_device_mem_used_bytes{", -1), 1.0 * GIB);
    CU_ASSERT_EQUAL(util_count(out, "posd_client_mem_used_bytes{"), 1);
    client_close(&stays);
    posd_stop();
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("posd_mem", suite_init, suite_clean);
    POS_ADD_TEST(s, test_the_rules_limit_reaches_the_shared_memory_and_the_welcome);
    POS_ADD_TEST(s, test_posctl_sets_the_limit_live_and_says_when_use_is_above);
    POS_ADD_TEST(s, test_a_reload_changes_the_limit_and_a_bad_one_keeps_it);
    POS_ADD_TEST(s, test_stats_and_metrics_show_the_clients_account);
    POS_ADD_TEST(s, test_a_false_account_changes_only_its_own_row);
    POS_ADD_TEST(s, test_a_client_that_leaves_leaves_nothing_in_the_ledger);
}
