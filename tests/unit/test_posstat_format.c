/* Unit tests of posstat's pure half (tools/posstat_format.c): rates between two snapshots,
 * histogram percentiles, clients that come and go, posd restarts, the Average: block, exact
 * text and JSON renderings (nulls, escaping) and the validation of STATS replies. */
#include "pos/client_shm.h"
#include "tests/cunit_main.h"
#include "tools/posstat_format.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_NS  UINT64_C(1000000000)
#define MS_NS UINT64_C(1000000)

/* --- fixtures ---------------------------------------------------------------------------- */

static struct pos_device_stats device(uint64_t uptime_ns, uint32_t clients)
{
    struct pos_device_stats d = {.uptime_ns = uptime_ns, .clients = clients};
    strcpy(d.policy, "fifo");
    d.policy_len = (uint32_t)strlen(d.policy);
    return d;
}

static struct pos_client_stats client(uint32_t id, int32_t pid, const char *app,
                                      uint64_t connected_ns)
{
    struct pos_client_stats c = {
        .client_id = id, .pid = pid, .connected_ns = connected_ns, .mem_limit = POS_MEM_UNLIMITED};
    snprintf(c.app, sizeof c.app, "%s", app);
    strcpy(c.class_name, "default");
    return c;
}

/* A snapshot over caller-owned clients: never passed to posstat_snapshot_free. */
static struct posstat_snapshot snapshot(struct pos_device_stats dev, struct pos_client_stats *c,
                                        uint32_t n, double time)
{
    return (struct posstat_snapshot){.dev = dev, .nclients = n, .clients = c, .time = time};
}

static const struct posstat_client_row *row_of(const struct posstat_report *r, uint32_t id)
{
    for (uint32_t i = 0; i < r->nclients; i++)
        if (r->clients[i].client_id == id)
            return &r->clients[i];
    return NULL;
}

/* Renders R with FN into a string the caller frees. */
static char *render(int (*fn)(FILE *, const struct posstat_report *),
                    const struct posstat_report *r)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fn(f, r), 0);
    fclose(f);
    return buf;
}

#define ASSERT_NEAR(a, b) CU_ASSERT_DOUBLE_EQUAL((a), (b), 1e-9 * (fabs(b) + 1.0))

/* --- rates ------------------------------------------------------------------------------- */

static void test_rates_between_snapshots(void)
{
    struct pos_device_stats d0 = device(10 * S_NS, 1), d1 = device(12 * S_NS, 1);
    d0.submitted = 1000, d0.released = 900, d0.completed = 800, d0.busy_ns = 4 * S_NS;
    d1.submitted = 3000, d1.released = 2900, d1.completed = 2700, d1.busy_ns = 5500 * MS_NS;

    struct pos_client_stats a0 = client(7, 4242, "resnet18", 5 * S_NS), a1 = a0;
    a0.submitted = 500, a0.busy_ns = 1 * S_NS, a0.wait_hist[3] = 10, a0.waits = 10;
    a1.connected_ns = 7 * S_NS;
    a1.submitted = 1500, a1.busy_ns = 2500 * MS_NS, a1.wait_hist[3] = 10, a1.waits = 110;
    a1.wait_hist[4] = 100; /* only the interval's waits count: all in [16, 32) us */
    a1.queued = 3, a1.in_flight = 2, a1.flags = POS_CLIENT_HELD;

    struct posstat_snapshot s0 = snapshot(d0, &a0, 1, 100.0), s1 = snapshot(d1, &a1, 1, 102.0);
    struct posstat_report r;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, &s0, &s1, POSSTAT_INTERVAL), 0);
    CU_ASSERT_EQUAL(r.kind, POSSTAT_INTERVAL);
    ASSERT_NEAR(r.time, 102.0);
    CU_ASSERT_STRING_EQUAL(r.dev.policy, "fifo");
    ASSERT_NEAR(r.dev.span_s, 2.0);
    ASSERT_NEAR(r.dev.uptime_s, 12.0);
    ASSERT_NEAR(r.dev.submitted_per_s, 1000.0);
    ASSERT_NEAR(r.dev.released_per_s, 1000.0);
    ASSERT_NEAR(r.dev.completed_per_s, 950.0);
    ASSERT_NEAR(r.dev.busy_pct, 75.0);
    CU_ASSERT_EQUAL_FATAL(r.nclients, 1);
    const struct posstat_client_row *a = &r.clients[0];
    CU_ASSERT_EQUAL(a->client_id, 7);
    CU_ASSERT_EQUAL(a->pid, 4242);
    CU_ASSERT_STRING_EQUAL(a->app, "resnet18");
    ASSERT_NEAR(a->span_s, 2.0);
    ASSERT_NEAR(a->launches_per_s, 500.0);
    ASSERT_NEAR(a->gpu_ms_per_s, 750.0);
    ASSERT_NEAR(a->queued, 3.0);
    ASSERT_NEAR(a->in_flight, 2.0);
    ASSERT_NEAR(a->wait_p50_us, 32.0);
    ASSERT_NEAR(a->wait_p99_us, 32.0);
    CU_ASSERT_EQUAL(a->held, 1);
    posstat_report_free(&r);

    /* Totals: the device over its uptime, the client over its connected time. */
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, NULL, &s1, POSSTAT_TOTAL), 0);
    ASSERT_NEAR(r.dev.span_s, 12.0);
    ASSERT_NEAR(r.dev.submitted_per_s, 250.0);
    ASSERT_NEAR(r.dev.busy_pct, 5.5 / 12.0 * 100.0);
    ASSERT_NEAR(r.clients[0].span_s, 7.0);
    ASSERT_NEAR(r.clients[0].launches_per_s, 1500.0 / 7.0);
    ASSERT_NEAR(r.clients[0].gpu_ms_per_s, 2500.0 / 7.0);
    ASSERT_NEAR(r.clients[0].wait_p50_us, 32.0); /* 10 in bucket 3, 100 in bucket 4 */
    ASSERT_NEAR(r.clients[0].wait_p99_us, 32.0);
    posstat_report_free(&r);
}

static void test_no_time_no_rates(void)
{
    /* posd answered twice from the same instant; a client registered this very moment. */
    struct pos_device_stats d = device(5 * S_NS, 1);
    d.submitted = 10;
    struct pos_client_stats c = client(1, 10, "x", 0);
    c.submitted = 3;
    struct posstat_snapshot s = snapshot(d, &c, 1, 1.0);
    struct posstat_report r;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, &s, &s, POSSTAT_INTERVAL), 0);
    CU_ASSERT(isnan(r.dev.submitted_per_s));
    CU_ASSERT(isnan(r.dev.busy_pct));
    CU_ASSERT(isnan(r.clients[0].launches_per_s));
    CU_ASSERT(isnan(r.clients[0].gpu_ms_per_s));
    CU_ASSERT(isnan(r.clients[0].wait_p50_us));
    CU_ASSERT(isnan(r.clients[0].wait_p99_us));
    CU_ASSERT_EQUAL(r.clients[0].held, 0);
    posstat_report_free(&r);
}

/* --- percentiles ------------------------------------------------------------------------- */

static void test_percentile_empty(void)
{
    uint64_t h[POS_WAIT_BUCKETS] = {0};
    CU_ASSERT(isnan(posstat_wait_percentile(h, 50)));
    CU_ASSERT(isnan(posstat_wait_percentile(h, 99)));
}

static void test_percentile_single_bucket(void)
{
    uint64_t h[POS_WAIT_BUCKETS] = {0};
    h[0] = 1; /* < 2 us */
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 50), 2.0);
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 99), 2.0);
    h[0] = 0;
    h[5] = 7; /* [32, 64) us */
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 50), 64.0);
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 99), 64.0);
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 1), 64.0);
}

static void test_percentile_spread(void)
{
    uint64_t h[POS_WAIT_BUCKETS] = {0};
    /* 100 waits */
    h[1] = 50, h[3] = 49, h[10] = 1;
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 50), 4.0);  /* rank 50: bucket 1 */
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 51), 16.0); /* rank 51: bucket 3 */
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 99), 16.0); /* rank 99: bucket 3 */
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 100), 2048.0);

    uint64_t three[POS_WAIT_BUCKETS] = {1, 1, 1};
    CU_ASSERT_EQUAL(posstat_wait_percentile(three, 50), 4.0); /* rank ceil(1.5) = 2 */
    CU_ASSERT_EQUAL(posstat_wait_percentile(three, 99), 8.0); /* rank ceil(2.97) = 3 */
}

static void test_percentile_last_bucket(void)
{
    uint64_t h[POS_WAIT_BUCKETS] = {0};
    h[0] = 98, h[POS_WAIT_BUCKETS - 1] = 2;
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 50), 2.0);
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 99), 16777216.0); /* 2^24 */
    h[0] = 99, h[POS_WAIT_BUCKETS - 1] = 1;
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 99), 2.0);
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 100), 16777216.0);
}

static void test_percentile_huge_counts(void)
{
    uint64_t h[POS_WAIT_BUCKETS] = {0};
    h[0] = UINT64_MAX / 2, h[1] = UINT64_MAX / 2; /* the rank must not overflow */
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 50), 2.0);
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 51), 4.0);
    CU_ASSERT_EQUAL(posstat_wait_percentile(h, 99), 4.0);
}

/* --- clients that come and go, restarts -------------------------------------------------- */

static void test_client_appears_and_disappears(void)
{
    struct pos_device_stats d0 = device(100 * S_NS, 2), d1 = device(101 * S_NS, 2);
    struct pos_client_stats before[2] = {client(1, 100, "gone", 50 * S_NS),
                                         client(2, 200, "stays", 60 * S_NS)};
    before[1].submitted = 1000;
    struct pos_client_stats after[2] = {client(2, 200, "stays", 61 * S_NS),
                                        client(3, 300, "new", 500 * MS_NS)};
    after[0].submitted = 1400;
    after[1].submitted = 100;
    after[1].wait_hist[2] = 4;
    struct posstat_snapshot s0 = snapshot(d0, before, 2, 0), s1 = snapshot(d1, after, 2, 1);
    struct posstat_report r;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, &s0, &s1, POSSTAT_INTERVAL), 0);
    CU_ASSERT_EQUAL_FATAL(r.nclients, 2);
    CU_ASSERT_PTR_NULL(row_of(&r, 1));
    const struct posstat_client_row *stays = row_of(&r, 2), *fresh = row_of(&r, 3);
    if (!stays || !fresh) {
        CU_FAIL("a client present in both snapshots or a new one is missing");
        posstat_report_free(&r);
        return;
    }
    ASSERT_NEAR(stays->span_s, 1.0);
    ASSERT_NEAR(stays->launches_per_s, 400.0);
    /* New in this interval: its totals since it registered half a second ago. */
    ASSERT_NEAR(fresh->span_s, 0.5);
    ASSERT_NEAR(fresh->launches_per_s, 200.0);
    ASSERT_NEAR(fresh->wait_p99_us, 8.0);
    posstat_report_free(&r);
}

static void test_reused_id_is_a_new_client(void)
{
    struct pos_device_stats d0 = device(100 * S_NS, 1), d1 = device(102 * S_NS, 1);
    struct pos_client_stats old = client(5, 500, "a", 90 * S_NS);
    old.submitted = 9000;
    /* Same id, same pid, but registered again one second ago. */
    struct pos_client_stats again = client(5, 500, "a", 1 * S_NS);
    again.submitted = 300;
    /* Same id under another pid. */
    struct pos_client_stats other = client(5, 501, "b", 95 * S_NS);
    other.submitted = 9500;
    struct posstat_snapshot s0 = snapshot(d0, &old, 1, 0), s1 = snapshot(d1, &again, 1, 2),
                            s2 = snapshot(d1, &other, 1, 2);
    struct posstat_report r;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, &s0, &s1, POSSTAT_INTERVAL), 0);
    ASSERT_NEAR(r.clients[0].span_s, 1.0);
    ASSERT_NEAR(r.clients[0].launches_per_s, 300.0);
    posstat_report_free(&r);
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, &s0, &s2, POSSTAT_INTERVAL), 0);
    ASSERT_NEAR(r.clients[0].span_s, 95.0);
    ASSERT_NEAR(r.clients[0].launches_per_s, 100.0);
    posstat_report_free(&r);
}

static void test_counter_going_back(void)
{
    /* The same client, but counters it writes itself went back: those values are unknown,
     * the others are still rates over the interval. */
    struct pos_device_stats d0 = device(100 * S_NS, 1), d1 = device(102 * S_NS, 1);
    struct pos_client_stats c0 = client(5, 500, "a", 90 * S_NS), c1 = c0;
    c0.submitted = 1000, c0.busy_ns = 1 * S_NS, c0.wait_hist[2] = 10;
    c1.connected_ns = 92 * S_NS;
    c1.submitted = 1600, c1.busy_ns = 500 * MS_NS, c1.wait_hist[2] = 9, c1.wait_hist[3] = 50;
    struct posstat_snapshot s0 = snapshot(d0, &c0, 1, 0), s1 = snapshot(d1, &c1, 1, 2);
    struct posstat_report r;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, &s0, &s1, POSSTAT_INTERVAL), 0);
    ASSERT_NEAR(r.clients[0].span_s, 2.0);
    ASSERT_NEAR(r.clients[0].launches_per_s, 300.0);
    CU_ASSERT(isnan(r.clients[0].gpu_ms_per_s));
    CU_ASSERT(isnan(r.clients[0].wait_p50_us));
    CU_ASSERT(isnan(r.clients[0].wait_p99_us));
    posstat_report_free(&r);
}

static void test_posd_restart(void)
{
    struct pos_device_stats d0 = device(100 * S_NS, 1), d1 = device(4 * S_NS, 1);
    d0.submitted = 100000;
    d1.submitted = 400, d1.busy_ns = 1 * S_NS;
    struct pos_client_stats c0 = client(1, 10, "a", 99 * S_NS), c1 = client(1, 10, "a", 2 * S_NS);
    c0.submitted = 100000;
    c1.submitted = 400;
    struct posstat_snapshot s0 = snapshot(d0, &c0, 1, 0), s1 = snapshot(d1, &c1, 1, 5);
    struct posstat_report r;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, &s0, &s1, POSSTAT_INTERVAL), 0);
    ASSERT_NEAR(r.dev.span_s, 4.0); /* since the new posd started */
    ASSERT_NEAR(r.dev.submitted_per_s, 100.0);
    ASSERT_NEAR(r.dev.busy_pct, 25.0);
    ASSERT_NEAR(r.clients[0].launches_per_s, 200.0);
    posstat_report_free(&r);

    /* Same posd (its uptime grew) but a device counter went back: that rate is unknown. */
    d1 = device(101 * S_NS, 1);
    d1.submitted = 400, d1.released = 10, d1.busy_ns = 1 * S_NS;
    s1 = snapshot(d1, &c0, 1, 5);
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, &s0, &s1, POSSTAT_INTERVAL), 0);
    ASSERT_NEAR(r.dev.span_s, 1.0);
    CU_ASSERT(isnan(r.dev.submitted_per_s));
    ASSERT_NEAR(r.dev.released_per_s, 10.0);
    ASSERT_NEAR(r.dev.busy_pct, 100.0);
    ASSERT_NEAR(r.clients[0].span_s, 0.0); /* c0 against itself */
    posstat_report_free(&r);
}

/* --- Average: ---------------------------------------------------------------------------- */

static void test_average(void)
{
    struct pos_device_stats d[3] = {device(10 * S_NS, 1), device(11 * S_NS, 2),
                                    device(12 * S_NS, 1)};
    d[2].submitted = 600, d[2].busy_ns = 1 * S_NS;
    struct pos_client_stats c[3] = {client(1, 10, "a", 1 * S_NS), client(1, 10, "a", 2 * S_NS),
                                    client(1, 10, "a", 3 * S_NS)};
    c[1].queued = 2, c[2].queued = 4, c[1].in_flight = 1, c[2].in_flight = 2;
    c[1].submitted = 100, c[2].submitted = 500, c[2].flags = POS_CLIENT_HELD;
    c[1].wait_hist[0] = 10, c[2].wait_hist[0] = 10, c[2].wait_hist[6] = 10;
    struct posstat_snapshot s[3];
    for (int i = 0; i < 3; i++)
        s[i] = snapshot(d[i], &c[i], 1, 1700000000.0 + i);

    struct posstat_average avg = {0};
    struct posstat_report r;
    for (int i = 1; i < 3; i++) {
        CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, &s[i - 1], &s[i], POSSTAT_INTERVAL), 0);
        CU_ASSERT_EQUAL(posstat_average_add(&avg, &r), 0);
        posstat_report_free(&r);
    }
    CU_ASSERT_EQUAL_FATAL(posstat_average_report(&r, &avg, &s[0], &s[2]), 0);
    CU_ASSERT_EQUAL(r.kind, POSSTAT_AVERAGE);
    ASSERT_NEAR(r.dev.span_s, 2.0);
    ASSERT_NEAR(r.dev.clients, 1.5);
    ASSERT_NEAR(r.dev.submitted_per_s, 300.0);
    ASSERT_NEAR(r.dev.busy_pct, 50.0);
    ASSERT_NEAR(r.clients[0].launches_per_s, 250.0);
    ASSERT_NEAR(r.clients[0].queued, 3.0);
    ASSERT_NEAR(r.clients[0].in_flight, 1.5);
    ASSERT_NEAR(r.clients[0].wait_p50_us, 2.0); /* 10 at < 2 us, 10 at [64, 128) us */
    ASSERT_NEAR(r.clients[0].wait_p99_us, 128.0);
    CU_ASSERT_EQUAL(r.clients[0].held, -1);

    char *text = render(posstat_render_text, &r);
    CU_ASSERT_STRING_EQUAL(
        text,
        "# time    policy      clients   submitted    released   completed    busy\n"
        "#                                    op/s        op/s        op/s       %\n"
        "Average:  fifo            1.5       300.0         0.0         0.0    50.0\n"
        "# time        pid  app               class        launches   queued  inflight   wait_p50"
        "   wait_p99      gpu      req   req_p50   req_p99  held  cpu       used     limit      "
        "peak  refused\n"
        "#                                                     op/s      ops       ops         us"
        "         us     ms/s       /s        ms        ms                   mem       mem       "
        "mem   allocs\n"
        "Average:       10  a                 default         250.0      3.0       1.5          2"
        "        128      0.0      0.0         -         -  -     -           0B      none        "
        "0B        0\n");
    free(text);
    char *json = render(posstat_render_json, &r);
    CU_ASSERT_STRING_EQUAL(
        json,
        "{\"time\":1700000002.000,\"report\":\"average\",\"interval_s\":2.000,\"device\":{\"polic"
        "y\":\"fifo\",\"clients\":1.500,\"uptime_s\":12.000,\"submitted_per_s\":300.000,\"released"
        "_per_s\":0.000,\"completed_per_s\":0.000,\"busy_pct\":50.000,\"submitted\":600,\"released"
        "\":0,\"completed\":0,\"unmanaged\":null,\"unmanaged_untracked\":null},\"clients\":[{\"id\":1,\"pid\":10,\"app\":\"a\",\"class\":\"defaul"
        "t\",\"launches_per_s\":250.000,\"queued\":3.000,\"in_flight\":1.500,\"wait_p50_us\":2,\""
        "wait_p99_us\":128,\"gpu_ms_per_s\":0.000,\"requests_per_s\":0.000,\"req_p50_ms\":null,\""
        "req_p99_ms\":null,\"held\":null,\"cpu\":\"\",\"runq_us\":null,\"runq_ms_per_s\":null,"
        "\"offcpu_ms_per_s\":null,\"ioctls_per_s\":null,\"ioctl_us\":null,"
        "\"mem_used_bytes\":0,\"mem_limit\":\"none\",\"mem_peak_bytes\":0,\"mem_refused\":0,"
        "\"mem_limit_bytes\":null,"
        "\"sync_lag_p50_us\":null,\"sync_lag_p99_us\":null,\"op_u"
        "s\":null,\"stalls\":0,\"span_s\":2.000,\"namespace\":\"\",\"pod\":\"\",\"container\":\"\",\"pod_devices\":\"\"}],\"unmanaged\":[]}\n");
    free(json);
    posstat_report_free(&r);
    posstat_average_free(&avg);
}

static void test_average_forgets_clients_gone(void)
{
    /* Client 1 in the first report only, client 2 in the second only. */
    struct pos_device_stats d[3] = {device(10 * S_NS, 1), device(11 * S_NS, 1),
                                    device(12 * S_NS, 1)};
    struct pos_client_stats c[3] = {client(1, 10, "a", 1 * S_NS), client(1, 10, "a", 2 * S_NS),
                                    client(2, 20, "b", 1 * S_NS)};
    c[1].queued = 8, c[2].queued = 6;
    struct posstat_snapshot s[3];
    for (int i = 0; i < 3; i++)
        s[i] = snapshot(d[i], &c[i], 1, i);
    struct posstat_average avg = {0};
    struct posstat_report r;
    for (int i = 1; i < 3; i++) {
        CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, &s[i - 1], &s[i], POSSTAT_INTERVAL), 0);
        CU_ASSERT_EQUAL(posstat_average_add(&avg, &r), 0);
        posstat_report_free(&r);
    }
    CU_ASSERT_EQUAL_FATAL(avg.n, 1);
    CU_ASSERT_EQUAL(avg.levels[0].client_id, 2);
    CU_ASSERT_EQUAL(avg.levels[0].samples, 1);
    CU_ASSERT_EQUAL_FATAL(posstat_average_report(&r, &avg, &s[0], &s[2]), 0);
    CU_ASSERT_EQUAL_FATAL(r.nclients, 1);
    ASSERT_NEAR(r.clients[0].queued, 6.0); /* its one report, not client 1's 8 */
    ASSERT_NEAR(r.clients[0].span_s, 1.0); /* new since the first snapshot: since it registered */
    posstat_report_free(&r);
    posstat_average_free(&avg);
}

/* --- rendering --------------------------------------------------------------------------- */

/* Two clients of a posd up for 100 s: one busy with waits, one that has just registered. */
static struct posstat_report known_report(struct pos_client_stats c[2])
{
    struct pos_device_stats d = device(100 * S_NS, 2);
    d.submitted = 123450, d.released = 123400, d.completed = 123000, d.busy_ns = 87500 * MS_NS;
    c[0] = client(3, 4242, "resnet18", 50 * S_NS);
    strcpy(c[0].class_name, "realtime");
    c[0].submitted = 30860, c[0].queued = 5, c[0].in_flight = 2, c[0].busy_ns = 21875 * MS_NS;
    c[0].wait_hist[1] = 50, c[0].wait_hist[9] = 49, c[0].wait_hist[12] = 1;
    c[0].flags = POS_CLIENT_HELD | POS_CLIENT_CPU_IDLE;
    c[0].cpu_threads = 3;
    c[0].requests = 250, c[0].req_p50_ns = 5812000, c[0].req_p99_ns = 6400000;
    c[0].sync_lag_n = 250, c[0].sync_lag_p50_ns = 12500, c[0].sync_lag_p99_ns = 57000;
    c[0].op_ns = 221000, c[0].stalls = 1;
    c[0].mem_used = 3ull << 29, c[0].mem_peak = 7ull << 28, c[0].mem_refused = 2;
    c[0].mem_limit = 2ull << 30, c[0].mem_total = 16ull << 30;
    c[1] = client(4, 77, "a very long application name", 0);
    c[1].class_name[0] = '\0';
    c[1].mem_limit = POS_MEM_UNLIMITED, c[1].mem_limit_ppm = 500000; /* its device not seen yet */
    struct posstat_snapshot s = snapshot(d, c, 2, 1700000000.25);
    struct posstat_report r;
    CU_ASSERT_EQUAL(posstat_report_build(&r, NULL, &s, POSSTAT_TOTAL), 0);
    return r;
}

static void test_text_rendering(void)
{
    setenv("TZ", "UTC0", 1);
    tzset();
    struct pos_client_stats c[2];
    struct posstat_report r = known_report(c);
    char *text = render(posstat_render_text, &r);
    CU_ASSERT_STRING_EQUAL(
        text,
        "# time    policy      clients   submitted    released   completed    busy\n"
        "#                                    op/s        op/s        op/s       %\n"
        "22:13:20  fifo              2      1234.5      1234.0      1230.0    87.5\n"
        "# time        pid  app               class        launches   queued  inflight   wait_p50"
        "   wait_p99      gpu      req   req_p50   req_p99  held  cpu       used     limit      "
        "peak  refused\n"
        "#                                                     op/s      ops       ops         us"
        "         us     ms/s       /s        ms        ms                   mem       mem       "
        "mem   allocs\n"
        "22:13:20     4242  resnet18          realtime        617.2        5         2          4"
        "       1024    437.5      5.0       5.8       6.4  yes   idle    1.5GiB      2GiB   "
        "1.75GiB        2\n"
        "22:13:20       77  a?very?long?appl  -                   -        0         0          -"
        "          -        -        -         -         -  no    no          0B       50%        "
        "0B        0\n");
    free(text);

    /* posd counts more clients than its reply carries: say so. */
    r.nclients = 1;
    r.clients_not_shown = 1;
    text = render(posstat_render_text, &r);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n# 1 more clients in posd than its reply carries\n"));
    free(text);
    r.nclients = 2;
    posstat_report_free(&r);
}

static void test_json_rendering(void)
{
    struct pos_client_stats c[2];
    struct posstat_report r = known_report(c);
    char *json = render(posstat_render_json, &r);
    CU_ASSERT_STRING_EQUAL(
        json,
        "{\"time\":1700000000.250,\"report\":\"total\",\"interval_s\":100.000,\"device\":{\"polic"
        "y\":\"fifo\",\"clients\":2,\"uptime_s\":100.000,\"submitted_per_s\":1234.500,\"released_p"
        "er_s\":1234.000,\"completed_per_s\":1230.000,\"busy_pct\":87.500,\"submitted\":123450,\""
        "released\":123400,\"completed\":123000,\"unmanaged\":null,\"unmanaged_untracked\":null},\"clients\":[{\"id\":3,\"pid\":4242,\"app\":\"res"
        "net18\",\"class\":\"realtime\",\"launches_per_s\":617.200,\"queued\":5,\"in_flight\":2,"
        "\"wait_p50_us\":4,\"wait_p99_us\":1024,\"gpu_ms_per_s\":437.500,\"requests_per_s\":5.000"
        ",\"req_p50_ms\":5.812,\"req_p99_ms\":6.400,\"held\":true,\"cpu\":\"idle\",\"runq_us\":null,"
        "\"runq_ms_per_s\":null,\"offcpu_ms_per_s\":null,\"ioctls_per_s\":null,\"ioctl_us\":null,"
        "\"mem_used_bytes\":1610612736,\"mem_limit\":\"2GiB\",\"mem_peak_bytes\":1879048192,"
        "\"mem_refused\":2,\"mem_limit_bytes\":2147483648,"
        "\"sync_lag_p50_us\":12.500,\"sy"
        "nc_lag_p99_us\":57.000,\"op_us\":221.000,\"stalls\":1,\"span_s\":50.000,\"namespace\":\"\",\"pod\":\"\",\"container\":\"\",\"pod_devices\":\"\"},{\"id\":4,\"pid"
        "\":77,\"app\":\"a very long application name\",\"class\":\"\",\"launches_per_s\":null,\""
        "queued\":0,\"in_flight\":0,\"wait_p50_us\":null,\"wait_p99_us\":null,\"gpu_ms_per_s\":nu"
        "ll,\"requests_per_s\":null,\"req_p50_ms\":null,\"req_p99_ms\":null,\"held\":false,\"cpu\":\"no\","
        "\"runq_us\":null,\"runq_ms_per_s\":null,\"offcpu_ms_per_s\":null,\"ioctls_per_s\":null,"
        "\"ioctl_us\":null,\"mem_used_bytes\":0,\"mem_limit\":\"50%\",\"mem_peak_bytes\":0,"
        "\"mem_refused\":0,\"mem_limit_bytes\":null,\"sync"
        "_lag_p50_us\":null,\"sync_lag_p99_us\":null,\"op_us\":null,\"stalls\":0,\"span_s\":0.000,\"namespace\":\"\",\"pod\":\"\",\"container\":\"\",\"pod_devices\":\"\""
        "}],\"unmanaged\":[]}\n");
    free(json);
    posstat_report_free(&r);
}

static void test_json_escaping(void)
{
    struct pos_device_stats d = device(1 * S_NS, 1);
    strcpy(d.policy, "p\"q");
    struct pos_client_stats c = client(1, 1, "", 1 * S_NS);
    /* quote, backslash, short escapes, other controls, DEL, valid UTF-8 (e acute, euro),
     * a lone continuation byte, a truncated sequence, an overlong '/' and a surrogate */
    strcpy(c.app,
           "q\"b\\n\n\t\x01\x1f\x7f \xc3\xa9\xe2\x82\xac \x80 \xe2\x82 \xc0\xaf \xed\xa0\x80");
    struct posstat_snapshot s = snapshot(d, &c, 1, 0);
    struct posstat_report r;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, NULL, &s, POSSTAT_TOTAL), 0);
    char *json = render(posstat_render_json, &r);
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"policy\":\"p\\\"q\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"app\":\"q\\\"b\\\\n\\n\\t\\u0001\\u001f\\u007f "
                                        "\xc3\xa9\xe2\x82\xac \\ufffd \\ufffd\\ufffd "
                                        "\\ufffd\\ufffd \\ufffd\\ufffd\\ufffd\""));
    free(json);

    /* Text keeps each field one word: blanks, controls and non-ASCII become '?'. */
    setenv("TZ", "UTC0", 1);
    tzset();
    char *text = render(posstat_render_text, &r);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "  q\"b\\n???????????  default"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "  p\"q  "));
    free(text);
    posstat_report_free(&r);
}

/* A client in a pod: text gets a pod column NAMESPACE/POD/CONTAINER (only when some client has
 * a pod), JSON its names apart, escaped like every string. */
static void test_pod_fields(void)
{
    struct pos_device_stats d = device(1 * S_NS, 2);
    struct pos_client_stats cs[2] = {client(1, 1, "infer", 1 * S_NS),
                                      client(2, 2, "host", 1 * S_NS)};
    strcpy(cs[0].k8s_namespace, "ml");
    strcpy(cs[0].pod, "detector-7d9f");
    strcpy(cs[0].container, "in\"fer");
    strcpy(cs[0].pod_devices, "gpu0-1,gpu0-2");
    struct posstat_snapshot s = snapshot(d, cs, 2, 0);
    struct posstat_report r;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, NULL, &s, POSSTAT_TOTAL), 0);
    char *json = render(posstat_render_json, &r);
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"namespace\":\"ml\",\"pod\":\"detector-7d9f\","
                                        "\"container\":\"in\\\"fer\",\"pod_devices\":\"gpu0-1,gpu0-2\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"namespace\":\"\",\"pod\":\"\",\"container\":\"\""));
    free(json);
    setenv("TZ", "UTC0", 1);
    tzset();
    char *text = render(posstat_render_text, &r);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "  pod  "));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "  ml/detector-7d9f/in\"fer  "));
    free(text);
    posstat_report_free(&r);
    /* no client in a pod: no pod column */
    strcpy(cs[0].pod, "");
    s = snapshot(d, cs, 2, 0);
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, NULL, &s, POSSTAT_TOTAL), 0);
    text = render(posstat_render_text, &r);
    CU_ASSERT_PTR_NULL(strstr(text, "  pod  "));
    free(text);
    posstat_report_free(&r);
}

/* Renders R with FN and checks that each of WANT (NULL-terminated) is in it. */
static void expect_rendered(int (*fn)(FILE *, const struct posstat_report *),
                            const struct posstat_report *r, const char *const *want)
{
    char *out = render(fn, r);
    for (; *want; want++) {
        CU_ASSERT_PTR_NOT_NULL(strstr(out, *want));
        if (!strstr(out, *want))
            fprintf(stderr, "\n  not in:\n%s\n  want: %s\n", out, *want);
    }
    free(out);
}

/* The memory columns: sizes in binary units, the limit as bytes once its device's size is
 * known, as the share while it is not, "none" without one; exact bytes in JSON. */
static void test_memory_columns_in_binary_units(void)
{
    struct pos_client_stats c[3] = {client(1, 10, "a", S_NS), client(2, 20, "b", S_NS),
                                    client(3, 30, "c", S_NS)};
    c[0].mem_used = 1023, c[0].mem_peak = 1024, c[0].mem_limit = 8ull << 30;
    c[0].mem_limit_ppm = 500000, c[0].mem_total = 16ull << 30; /* 50% of a known device */
    c[1].mem_used = (5ull << 30) + (1ull << 29), c[1].mem_peak = 1ull << 48;
    c[1].mem_refused = 12345, c[1].mem_limit = 0; /* a limit of no memory at all */
    struct posstat_snapshot snap = snapshot(device(100 * S_NS, 3), c, 3, 1700000000.0);
    struct posstat_report r;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, NULL, &snap, POSSTAT_TOTAL), 0);
    expect_rendered(posstat_render_text, &r,
                    (const char *const[]){"     1023B      8GiB      1KiB        0\n",
                                          "    5.5GiB        0B    256TiB    12345\n",
                                          "        0B      none        0B        0\n", NULL});
    expect_rendered(posstat_render_json, &r,
                    (const char *const[]){
                        "\"mem_used_bytes\":1023,\"mem_limit\":\"8GiB\",\"mem_peak_bytes\":1024,"
                        "\"mem_refused\":0,\"mem_limit_bytes\":8589934592,",
                        "\"mem_used_bytes\":5905580032,\"mem_limit\":\"0B\",\"mem_peak_bytes\":"
                        "281474976710656,\"mem_refused\":12345,\"mem_limit_bytes\":0,",
                        "\"mem_limit\":\"none\",\"mem_peak_bytes\":0,\"mem_refused\":0,"
                        "\"mem_limit_bytes\":null,",
                        NULL});
    posstat_report_free(&r);
}

/* posd with every telemetry part: a client's run-queue and off-CPU figures, and an unmanaged
 * process, in text (their columns appear), the -u view and JSON. */
static void test_telemetry_rendering(void)
{
    setenv("TZ", "UTC0", 1);
    tzset();
    struct pos_device_stats d = device(100 * S_NS, 1);
    d.telemetry = POS_TELE_EXITS | POS_TELE_CPU | POS_TELE_DISCOVERY;
    d.unmanaged = 1;
    struct pos_client_stats c = client(3, 4242, "resnet18", 50 * S_NS);
    c.runq_delay_ns = 2500000, c.runq_ns_per_s = 750000000, c.offcpu_ns_per_s = 120000000;
    struct pos_unmanaged_stats u = {
        .pid = 99, .contexts = 2, .devices = 0x5, .seen_ns = 1500 * MS_NS};
    strcpy(u.comm, "python3");
    struct posstat_snapshot s = snapshot(d, &c, 1, 1700000000.25);
    s.nunmanaged = 1;
    s.unmanaged = &u;
    struct posstat_report r;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, NULL, &s, POSSTAT_TOTAL), 0);

    char *text = render(posstat_render_text, &r);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "  held  cpu      runq     runq   offcpu      used"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "           us     ms/s     ms/s       mem"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "   2500.0    750.0    120.0        0B      none"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "   unmgd\n"));
    free(text);
    text = render(posstat_render_unmanaged_text, &r);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(text, "       99  python3                  2  0,2               -       1.5\n"));
    free(text);
    char *json = render(posstat_render_json, &r);
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"unmanaged\":1,\"unmanaged_untracked\":0}"));
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"runq_us\":2500.000,\"runq_ms_per_s\":750.000,"
                                        "\"offcpu_ms_per_s\":120.000"));
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"unmanaged\":[{\"pid\":99,\"command\":\"python3\","
                                        "\"contexts\":2,\"devices\":\"0,2\",\"launches_per_s\""
                                        ":null,\"seen_s\":1.500}]}"));
    free(json);
    posstat_report_free(&r);

    /* without the telemetry parts: no such columns in text, nulls in JSON */
    s.dev.telemetry = 0;
    s.nunmanaged = 0;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, NULL, &s, POSSTAT_TOTAL), 0);
    text = render(posstat_render_text, &r);
    CU_ASSERT_PTR_NULL(strstr(text, "runq"));
    CU_ASSERT_PTR_NULL(strstr(text, "unmgd"));
    free(text);
    text = render(posstat_render_unmanaged_text, &r);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "# posd does not run GPU process discovery"));
    free(text);
    json = render(posstat_render_json, &r);
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"runq_us\":null"));
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"unmanaged\":null,\"unmanaged_untracked\":null}"));
    free(json);
    posstat_report_free(&r);
}

/* posstat -u says what it does not show: a list cut by the size of posd's reply (to root), a
 * list only root and the group posd see (to anyone else), and the processes the kernel side
 * had no room for; JSON carries that count. */
static void test_unmanaged_left_out_is_said(void)
{
    struct pos_device_stats d = device(100 * S_NS, 0);
    d.telemetry = POS_TELE_DISCOVERY;
    d.unmanaged = 4300;
    d.flags = POS_DEV_EVERYONE;
    struct pos_unmanaged_stats u = {.pid = 99, .contexts = 1, .devices = 0x1};
    strcpy(u.comm, "python3");
    struct posstat_snapshot s = snapshot(d, NULL, 0, 1700000000.25);
    s.nunmanaged = 1;
    s.unmanaged = &u;
    struct posstat_report r;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, NULL, &s, POSSTAT_TOTAL), 0);
    char *text = render(posstat_render_unmanaged_text, &r);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "# 4300 unmanaged processes, 1 shown: posd's reply holds no more\n"));
    CU_ASSERT_PTR_NULL(strstr(text, "only root"));
    CU_ASSERT_PTR_NULL(strstr(text, "not tracked"));
    free(text);
    posstat_report_free(&r);

    s.dev.flags = 0; /* an ordinary user: the count, no list */
    s.nunmanaged = 0;
    s.dev.unmanaged_untracked = 17;
    CU_ASSERT_EQUAL_FATAL(posstat_report_build(&r, NULL, &s, POSSTAT_TOTAL), 0);
    text = render(posstat_render_unmanaged_text, &r);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(text, "# 4300 unmanaged processes: only root and the group posd see which\n"));
    CU_ASSERT_PTR_NULL(strstr(text, "reply holds no more"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "# 17 more processes initialised the driver while "
                                        "posd's kernel-side table of GPU processes was full"));
    free(text);
    char *json = render(posstat_render_json, &r);
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"unmanaged\":4300,\"unmanaged_untracked\":17}"));
    free(json);
    posstat_report_free(&r);
}

/* --- reply validation -------------------------------------------------------------------- */

struct stats_msg {
    struct pos_msg_hdr hdr;
    struct pos_stats_reply rep;
    struct pos_client_stats clients[2];
};

static struct stats_msg good_msg(void)
{
    struct stats_msg m;
    memset(&m, 0, sizeof m);
    m.hdr = (struct pos_msg_hdr){.magic = POS_PROTO_MAGIC,
                                 .version = POS_PROTO_VERSION,
                                 .type = POS_MSG_STATS,
                                 .len = sizeof m - sizeof m.hdr};
    m.rep.dev = device(3 * S_NS, 2);
    m.rep.nclients = 2;
    m.clients[0] = client(1, 11, "one", S_NS);
    m.clients[1] = client(2, 22, "two", S_NS);
    m.clients[1].submitted = 99;
    return m;
}

static int parse(const void *msg, size_t len, struct posstat_snapshot *s, char *err)
{
    memset(err, 0, 256);
    return posstat_parse_reply(msg, len, s, err, 256);
}

static void test_parse_good(void)
{
    struct stats_msg m = good_msg();
    struct posstat_snapshot s;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(parse(&m, sizeof m, &s, err), 0);
    CU_ASSERT_EQUAL(s.dev.uptime_ns, 3 * S_NS);
    CU_ASSERT_STRING_EQUAL(s.dev.policy, "fifo");
    CU_ASSERT_EQUAL_FATAL(s.nclients, 2);
    CU_ASSERT_STRING_EQUAL(s.clients[1].app, "two");
    CU_ASSERT_EQUAL(s.clients[1].submitted, 99);
    posstat_snapshot_free(&s);

    /* No clients at all. */
    m.rep.nclients = 0;
    m.hdr.len = sizeof m.rep;
    CU_ASSERT_EQUAL_FATAL(parse(&m, sizeof m.hdr + sizeof m.rep, &s, err), 0);
    CU_ASSERT_EQUAL(s.nclients, 0);
    CU_ASSERT_PTR_NULL(s.clients);
    posstat_snapshot_free(&s);
}

/* Expects the parse of M (LEN bytes) to fail with RC and an error mentioning WHAT. */
static void expect_bad(const void *m, size_t len, int rc, const char *what)
{
    struct posstat_snapshot s = {.nclients = 12345};
    char err[256];
    CU_ASSERT_EQUAL(parse(m, len, &s, err), rc);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, what));
    CU_ASSERT_EQUAL(s.nclients, 12345); /* untouched */
    if (!strstr(err, what))
        fprintf(stderr, "\n  error was: %s (wanted '%s')\n", err, what);
}

static void test_parse_bad_header(void)
{
    struct stats_msg m = good_msg();
    expect_bad(&m, 0, -EPROTO, "short reply");
    expect_bad(&m, sizeof m.hdr - 1, -EPROTO, "short reply");
    m.hdr.magic = 0x12345678;
    expect_bad(&m, sizeof m, -EPROTO, "magic 0x12345678");
    m = good_msg();
    m.hdr.version = POS_PROTO_VERSION + 1;
    expect_bad(&m, sizeof m, -EPROTO, "protocol version");
    m = good_msg();
    m.hdr.type = POS_MSG_WELCOME;
    expect_bad(&m, sizeof m, -EPROTO, "message type");
    m = good_msg();
    expect_bad(&m, sizeof m - 1, -EPROTO, "header says"); /* len promises more than came */
    m.hdr.len += 8;
    expect_bad(&m, sizeof m, -EPROTO, "header says");
}

static void test_parse_bad_body(void)
{
    struct stats_msg m = good_msg();
    m.hdr.len = sizeof m.rep - 1;
    expect_bad(&m, sizeof m.hdr + m.hdr.len, -EPROTO, "short STATS reply");

    m = good_msg();
    m.rep.nclients = 3; /* more than the bytes carry */
    expect_bad(&m, sizeof m, -EPROTO, "3 clients");
    m.rep.nclients = UINT32_MAX;
    expect_bad(&m, sizeof m, -EPROTO, "4294967295 clients");
    m.rep.nclients = 1; /* fewer: a client's worth of bytes left over */
    expect_bad(&m, sizeof m, -EPROTO, "1 clients");
    m = good_msg();
    m.hdr.len -= 8; /* a client cut short */
    expect_bad(&m, sizeof m - 8, -EPROTO, "2 clients");

    m = good_msg();
    memset(m.rep.dev.policy, 'x', sizeof m.rep.dev.policy);
    expect_bad(&m, sizeof m, -EPROTO, "policy name is not NUL-terminated");
    m = good_msg();
    m.rep.dev.policy_len = 3;
    expect_bad(&m, sizeof m, -EPROTO, "policy_len 3, but the policy name 'fifo' has 4 bytes");
    m = good_msg();
    memset(m.clients[1].app, 'a', sizeof m.clients[1].app);
    expect_bad(&m, sizeof m, -EPROTO, "client 2 (pid 22) has an app name");
    m = good_msg();
    memset(m.clients[0].class_name, 'c', sizeof m.clients[0].class_name);
    expect_bad(&m, sizeof m, -EPROTO, "client 1 (pid 11) has a class name");
}

static void test_parse_unmanaged(void)
{
    struct {
        struct pos_msg_hdr hdr;
        struct pos_stats_reply rep;
        struct pos_client_stats client;
        struct pos_unmanaged_stats u[2];
    } m;
    memset(&m, 0, sizeof m);
    m.hdr = (struct pos_msg_hdr){.magic = POS_PROTO_MAGIC,
                                 .version = POS_PROTO_VERSION,
                                 .type = POS_MSG_STATS,
                                 .len = sizeof m - sizeof m.hdr};
    m.rep.dev = device(3 * S_NS, 1);
    m.rep.nclients = 1;
    m.rep.nunmanaged = 2;
    m.client = client(1, 11, "one", S_NS);
    m.u[0] = (struct pos_unmanaged_stats){.pid = 5, .contexts = 1};
    strcpy(m.u[0].comm, "a");
    m.u[1] = (struct pos_unmanaged_stats){.pid = 6, .contexts = 3};
    strcpy(m.u[1].comm, "b");
    struct posstat_snapshot s;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(parse(&m, sizeof m, &s, err), 0);
    CU_ASSERT_EQUAL(s.nclients, 1);
    CU_ASSERT_EQUAL_FATAL(s.nunmanaged, 2);
    CU_ASSERT_EQUAL(s.unmanaged[1].pid, 6);
    CU_ASSERT_STRING_EQUAL(s.unmanaged[1].comm, "b");
    CU_ASSERT_STRING_EQUAL(s.clients[0].app, "one");
    posstat_snapshot_free(&s);

    m.rep.nunmanaged = 1; /* a process's worth of bytes left over */
    expect_bad(&m, sizeof m, -EPROTO, "1 clients and 1 unmanaged processes");
    m.rep.nunmanaged = 2;
    memset(m.u[0].comm, 'x', sizeof m.u[0].comm);
    expect_bad(&m, sizeof m, -EPROTO, "unmanaged process 5 has a command that is not");
}

static void test_parse_reject(void)
{
    struct {
        struct pos_msg_hdr hdr;
        char reason[32];
    } m = {.hdr = {.magic = POS_PROTO_MAGIC, .version = POS_PROTO_VERSION, .type = POS_MSG_REJECT}};
    strcpy(m.reason, "too many tools\n\x1b[31m");
    m.hdr.len = (uint32_t)strlen(m.reason) + 1;
    expect_bad(&m, sizeof m.hdr + m.hdr.len, -ECONNREFUSED,
               "posd refused the request: too many tools??[31m");
    m.hdr.len = 5; /* "too m" without its NUL */
    expect_bad(&m, sizeof m.hdr + m.hdr.len, -ECONNREFUSED, "not NUL-terminated");
    m.hdr.len = 0;
    expect_bad(&m, sizeof m.hdr, -ECONNREFUSED, "no reason given");
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("posstat_format", NULL, NULL);
    POS_ADD_TEST(s, test_rates_between_snapshots);
    POS_ADD_TEST(s, test_no_time_no_rates);
    POS_ADD_TEST(s, test_percentile_empty);
    POS_ADD_TEST(s, test_percentile_single_bucket);
    POS_ADD_TEST(s, test_percentile_spread);
    POS_ADD_TEST(s, test_percentile_last_bucket);
    POS_ADD_TEST(s, test_percentile_huge_counts);
    POS_ADD_TEST(s, test_client_appears_and_disappears);
    POS_ADD_TEST(s, test_reused_id_is_a_new_client);
    POS_ADD_TEST(s, test_counter_going_back);
    POS_ADD_TEST(s, test_posd_restart);
    POS_ADD_TEST(s, test_average);
    POS_ADD_TEST(s, test_average_forgets_clients_gone);
    POS_ADD_TEST(s, test_text_rendering);
    POS_ADD_TEST(s, test_json_rendering);
    POS_ADD_TEST(s, test_json_escaping);
    POS_ADD_TEST(s, test_pod_fields);
    POS_ADD_TEST(s, test_memory_columns_in_binary_units);
    POS_ADD_TEST(s, test_telemetry_rendering);
    POS_ADD_TEST(s, test_unmanaged_left_out_is_said);
    POS_ADD_TEST(s, test_parse_good);
    POS_ADD_TEST(s, test_parse_bad_header);
    POS_ADD_TEST(s, test_parse_bad_body);
    POS_ADD_TEST(s, test_parse_unmanaged);
    POS_ADD_TEST(s, test_parse_reject);
}
