/* Tests the scheduling core (sched/core.c) through its events, with the real policies: counts
 * of submitted / released / complete operators, a grant is never taken back, synchronisations
 * complete exactly what they cover (stream, per-thread stream, context), requests are
 * inferred from synchronisations, a client in flight with no completion stops outranking
 * others after the stall time, waiter counts with nothing queued hold nobody, a reused slot
 * keeps nothing, the window presumes its oldest operators complete, bad input is refused,
 * the report rate and kick requests follow the grant mode, telemetry reaches the policy's
 * view, the CPU lever's rule (who is lowered, when it is lifted, and that the policy's view
 * carries it), kernel profiles learn device times (end minus the predecessor's end on the
 * stream), and the core and policies import no I/O or clock symbols. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pos/client_shm.h"
#include "sched/core.h"
#include "sched/profile.h"
#include "tests/cunit_main.h"

#define MS 1000000LL

static struct pos_sched_device dev = {.sm_count = 8};
static struct sched_grant g[SCHED_MAX_CLIENTS];

static struct sched_core *core(const char *policy)
{
    struct sched_params p;
    sched_params_defaults(&p);
    struct sched_core *k = sched_core_new(&p, &dev, pos_policy_find(policy), NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    return k;
}

static void add(struct sched_core *k, int slot, int prio, uint32_t cap, int64_t now)
{
    struct sched_client_conf c = {.id = (uint32_t)slot + 1, .priority = prio, .max_inflight = cap};
    CU_ASSERT_EQUAL(sched_core_client_add(k, slot, &c, now), 0);
}

static uint64_t next_seq[SCHED_MAX_CLIENTS];

/* Submits N kernels on STREAM of thread TID; FREE says the client launched them freely. */
static void submit(struct sched_core *k, int slot, int n, uint64_t stream, uint32_t tid, int free,
                   int64_t now)
{
    for (int i = 0; i < n; i++) {
        struct pos_sched_op op = {.seq = ++next_seq[slot],
                                  .kind = 1,
                                  .stream = stream,
                                  .tid = tid,
                                  .ctx = 0x10,
                                  .submit_ns = now};
        CU_ASSERT_EQUAL(sched_core_submit(k, slot, &op, free, now), 0);
    }
}

static struct sched_client_stats stats(struct sched_core *k, int slot, int64_t now)
{
    struct sched_client_stats s;
    sched_core_client_stats(k, slot, now, &s);
    return s;
}

static struct sched_sync stream_sync(uint64_t stream, uint64_t covers, int64_t end)
{
    struct sched_sync s = {
        .scope = SCHED_SYNC_STREAM, .stream = stream, .ctx = 0x10, .covers = covers, .end_ns = end};
    return s;
}

/* Submits one kernel of KEY on STREAM at NOW, launched freely (at its call). */
static void submit_kernel(struct sched_core *k, int slot, uint64_t key, uint64_t stream,
                          int64_t now)
{
    struct pos_sched_op op = {.seq = ++next_seq[slot],
                              .key = key,
                              .kind = POS_OP_KERNEL,
                              .grid = {1, 1, 1},
                              .block = {32, 1, 1},
                              .stream = stream,
                              .tid = 7,
                              .ctx = 0x10,
                              .submit_ns = now};
    CU_ASSERT_EQUAL(sched_core_submit(k, slot, &op, 1, now), 0);
}

/* A fresh fifo core keeping profiles in PROF (NULL: none), with one client in slot 0. */
static struct sched_core *profiled_core(struct pos_profiles *prof)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("fifo");
    if (prof)
        sched_core_set_profiles(k, prof);
    add(k, 0, 10, 0, 0);
    return k;
}

/* With the device's end times, a kernel's sample is its end minus its predecessor's end on its
 * stream when it was queued behind it (launched before that end); one that found its stream
 * idle gives none (its end minus its launch would carry the launch's latency); and a
 * predecessor on another stream is not its predecessor. */
static void test_device_times_learn_end_minus_predecessor_end(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct pos_profiles prof;
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&prof, 64), 0);
    struct sched_core *k = core("fifo");
    sched_core_set_profiles(k, &prof);
    add(k, 0, 10, 0, 0);
    const uint64_t A = 0xa, B = 0xb, C = 0xc;
    /* A then B queued on stream 1 at 1 ms; C on stream 2 at 1 ms */
    submit_kernel(k, 0, A, 0x100, 1 * MS);
    submit_kernel(k, 0, B, 0x100, 1 * MS);
    submit_kernel(k, 0, C, 0x200, 1 * MS);
    /* A ends at 2 ms, B at 2.3 ms (its device time: 0.3 ms), C at 2.5 ms (stream 2: C's
     * predecessor is none, so no sample, though A and B ended before it) */
    CU_ASSERT_EQUAL(sched_core_complete(k, 0, 1, 2 * MS, SCHED_DONE_DEVICE, 1 * MS, 3 * MS), 0);
    CU_ASSERT_EQUAL(sched_core_complete(k, 0, 2, 2300000, SCHED_DONE_DEVICE, 1 * MS, 3 * MS), 0);
    CU_ASSERT_EQUAL(sched_core_complete(k, 0, 3, 2500000, SCHED_DONE_DEVICE, 1 * MS, 3 * MS), 0);
    /* B again at 4 ms: its stream idle since 2.3 ms, ends at 4.4 ms: no sample */
    submit_kernel(k, 0, B, 0x100, 4 * MS);
    CU_ASSERT_EQUAL(sched_core_complete(k, 0, 4, 4400000, SCHED_DONE_DEVICE, 4 * MS, 5 * MS), 0);
    /* B once more, queued behind the last (launched at 4.1 ms), ends at 4.7 ms: 0.3 ms */
    submit_kernel(k, 0, B, 0x100, 4100000);
    CU_ASSERT_EQUAL(sched_core_complete(k, 0, 5, 4700000, SCHED_DONE_DEVICE, 4100000, 5 * MS), 0);
    const uint32_t grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    const struct pos_kprof *pb = pos_prof_find(&prof, 0, B, grid, block);
    const struct pos_kprof *pc = pos_prof_find(&prof, 0, C, grid, block);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pc);
    CU_ASSERT_EQUAL(pb->n, 2);
    CU_ASSERT_DOUBLE_EQUAL(pb->mean_ns, 300000.0, 1.0);
    CU_ASSERT_EQUAL(pc->n, 0);
    /* a launch submitted before its predecessor ended (4.6 ms) that reached the driver after
     * (CALL_NS 4.9 ms) found its stream idle too: no sample */
    submit_kernel(k, 0, B, 0x100, 4600000);
    CU_ASSERT_EQUAL(sched_core_complete(k, 0, 6, 5400000, SCHED_DONE_DEVICE, 4900000, 6 * MS), 0);
    CU_ASSERT_EQUAL(pb->n, 2);
    sched_core_free(k);
    pos_prof_free(&prof);
}

/* Device ends read after the synchronisation that covered them (posd read a client that never
 * woke it all at once, the synchronisation's report first) still teach the profile: four
 * kernels queued at 1 ms, a sync covering them at 5 ms read first, then their ends 2, 2.3,
 * 2.6, 2.9 ms: three samples of 0.3 ms, as when the ends come first. */
static void test_device_ends_read_after_their_sync_still_teach_the_profile(void)
{
    struct pos_profiles prof;
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&prof, 64), 0);
    struct sched_core *k = profiled_core(&prof);
    for (int i = 0; i < 4; i++)
        submit_kernel(k, 0, 0xd, 0x100, 1 * MS);
    struct sched_sync sy = stream_sync(0x100, 4, 5 * MS);
    CU_ASSERT_EQUAL(sched_core_sync(k, 0, &sy, 5 * MS), 0);
    CU_ASSERT_EQUAL(stats(k, 0, 5 * MS).completed, 4);
    static const int64_t ends[] = {2000000, 2300000, 2600000, 2900000};
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(
            sched_core_complete(k, 0, (uint64_t)i + 1, ends[i], SCHED_DONE_DEVICE, 1 * MS, 6 * MS),
            0);
    const uint32_t grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    const struct pos_kprof *pd = pos_prof_find(&prof, 0, 0xd, grid, block);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pd);
    CU_ASSERT_EQUAL(pd->n, 3);
    CU_ASSERT_DOUBLE_EQUAL(pd->mean_ns, 300000.0, 1.0);
    /* read twice, an end teaches once */
    CU_ASSERT_EQUAL(sched_core_complete(k, 0, 4, 2900000, SCHED_DONE_DEVICE, 1 * MS, 6 * MS), 0);
    CU_ASSERT_EQUAL(pd->n, 3);
    CU_ASSERT_EQUAL(stats(k, 0, 6 * MS).completed, 4);
    sched_core_free(k);
    pos_prof_free(&prof);
}

/* A device sample four times a kernel's mean, or a quarter of it, comes from the host (an event
 * the device took late), not the kernel: a first outlier gives way to the samples after it,
 * and one after three samples is rejected. */
static void test_device_outliers_are_not_the_kernels(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct pos_profiles prof;
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&prof, 64), 0);
    struct sched_core *k = core("fifo");
    sched_core_set_profiles(k, &prof);
    add(k, 0, 10, 0, 0);
    /* seven kernels queued at 1 ms; ends: the first (no sample), then 3 ms late, then 0.3 ms
     * apart three times, then 3 ms again, then 0.3 ms */
    static const int64_t ends[] = {2000000, 5000000, 5300000, 5600000, 5900000, 8900000, 9200000};
    for (int i = 0; i < 7; i++)
        submit_kernel(k, 0, 0xb, 0x100, 1 * MS);
    for (int i = 0; i < 7; i++)
        CU_ASSERT_EQUAL(
            sched_core_complete(k, 0, (uint64_t)i + 1, ends[i], SCHED_DONE_DEVICE, 1 * MS, 10 * MS),
            0);
    const uint32_t grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    const struct pos_kprof *pb = pos_prof_find(&prof, 0, 0xb, grid, block);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pb);
    CU_ASSERT_EQUAL(pb->n, 4);
    CU_ASSERT_DOUBLE_EQUAL(pb->mean_ns, 300000.0, 1.0);
    sched_core_free(k);
    pos_prof_free(&prof);
}

/* A new client gets a marker behind every launch for its first 256 launches while posd keeps
 * profiles, without kicks: its kernels are learnt from its first completions whenever posd
 * reads them (a client launching freely alone may never wake posd; a 40 ms one left no
 * profile in 1 run of 3). Without profiles it gets the free rate from the start. */
static void test_a_new_client_is_profiled_from_its_first_launch(void)
{
    struct pos_profiles prof;
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&prof, 64), 0);
    for (int with = 0; with < 2; with++) {
        struct sched_core *k = profiled_core(with ? &prof : NULL);
        sched_core_decide(k, 1, g); /* at registration */
        CU_ASSERT_EQUAL(g[0].mode, POS_GRANT_FREE);
        CU_ASSERT_EQUAL(g[0].sample, with ? 1u : SCHED_DEFAULT_SAMPLE_FREE);
        CU_ASSERT_EQUAL(g[0].kick_on_done, 0);
        for (int i = 0; i < 255; i++)
            submit_kernel(k, 0, 0xc, 0x100, 2);
        sched_core_decide(k, 3, g);
        CU_ASSERT_EQUAL(g[0].sample, with ? 1u : SCHED_DEFAULT_SAMPLE_FREE);
        submit_kernel(k, 0, 0xc, 0x100, 4); /* the 256th: done, with nothing learnt to extend it */
        sched_core_decide(k, 5, g);
        CU_ASSERT_EQUAL(g[0].sample, SCHED_DEFAULT_SAMPLE_FREE);
        CU_ASSERT_EQUAL(g[0].kick_on_done, 0);
        sched_core_free(k);
    }
    pos_prof_free(&prof);
}

/* A kernel short of samples gets a marker behind every launch; prompt looks (kicks on its
 * completions) only where its samples are poll times, which a prompt look makes exact: a device
 * end needs none, and a prompt collector polls every poll_us even while idle. */
static void test_profiling_asks_for_prompt_looks_only_for_poll_times(void)
{
    struct pos_profiles prof;
    CU_ASSERT_EQUAL_FATAL(pos_prof_init(&prof, 64), 0);
    for (int device = 0; device < 2; device++) {
        struct sched_core *k = profiled_core(&prof);
        for (int i = 0; i < 300; i++) /* past a new client's first 256 */
            submit_kernel(k, 0, 0xe + (uint64_t)device, 0x100, 1 * MS);
        sched_core_decide(k, 2 * MS, g);
        CU_ASSERT_EQUAL(g[0].sample, SCHED_DEFAULT_SAMPLE_FREE);
        /* the 100th ends: its kernel short of samples, the next 256 launches profiled */
        CU_ASSERT_EQUAL(sched_core_complete(k, 0, 100, 2 * MS,
                                            device ? SCHED_DONE_DEVICE : SCHED_DONE_EXACT, 1 * MS,
                                            3 * MS),
                        0);
        sched_core_decide(k, 3 * MS, g);
        CU_ASSERT_EQUAL(g[0].sample, 1);
        CU_ASSERT_EQUAL(g[0].kick_on_done, !device);
        sched_core_free(k);
    }
    pos_prof_free(&prof);
}

static void test_counts_and_grants_never_go_back(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("priority");
    add(k, 0, 10, 0, 0); /* latency */
    add(k, 1, 20, 2, 0); /* batch, cap 2 */
    sched_core_decide(k, 1, g);
    submit(k, 1, 5, 0x100, 7, 0, 2); /* batch: windowed, latency idle: 2 released */
    sched_core_decide(k, 3, g);
    struct sched_client_stats s = stats(k, 1, 3);
    CU_ASSERT_EQUAL(s.submitted, 5);
    CU_ASSERT_EQUAL(s.released, 2);
    CU_ASSERT_EQUAL(s.in_flight, 2);
    CU_ASSERT_EQUAL(g[1].mode, POS_GRANT_WINDOW);
    CU_ASSERT_EQUAL(g[1].granted, 2);
    CU_ASSERT_EQUAL(g[1].sample, 1);
    /* the shim steps the window itself, over its own completions: no kicks needed */
    CU_ASSERT_EQUAL(g[1].window, 2);
    CU_ASSERT_EQUAL(g[1].kick_on_done, 0);
    /* the latency client launches: batch held, its grant of 2 stays */
    submit(k, 0, 3, 0x200, 8, 1, 4);
    CU_ASSERT_EQUAL(sched_core_complete(k, 1, 1, 5, SCHED_DONE_EXACT, 0, 5), 0);
    sched_core_decide(k, 6, g);
    CU_ASSERT_EQUAL(sched_core_client_held(k, 1), 1);
    CU_ASSERT_EQUAL(g[1].granted, 2);
    CU_ASSERT_EQUAL(g[0].mode, POS_GRANT_FREE);
    CU_ASSERT_EQUAL(g[0].kick_on_done, 1); /* it holds someone back: it must say when done */
    CU_ASSERT_EQUAL(stats(k, 0, 6).in_flight, 3);
    /* latency done (its sync covers all three): with an idle grace of 200 us it still holds
     * the batch client (a closed loop launches again at once), and the core wants to look
     * again when the grace ends; then batch gets its window again */
    struct sched_sync sy = stream_sync(0x200, 3, 7);
    CU_ASSERT_EQUAL(sched_core_sync(k, 0, &sy, 7), 0);
    struct sched_params p;
    sched_params_defaults(&p);
    p.idle_grace_ns = 200000;
    sched_core_set_policy(k, pos_policy_find("priority"), NULL, &p);
    int64_t next = sched_core_decide(k, 8, g);
    CU_ASSERT_EQUAL(sched_core_client_held(k, 1), 1);
    CU_ASSERT(next <= 7 + 200000);
    sched_core_decide(k, 7 + 200000, g);
    CU_ASSERT_EQUAL(sched_core_client_held(k, 1), 0);
    CU_ASSERT_EQUAL(g[1].granted, 3); /* one of two in flight complete: one more */
    sched_core_free(k);
}

/* A window cap moves with the completions, between decisions, as the shim moves it. */
static void test_window_cap_moves_with_completions(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("priority");
    add(k, 0, 10, 0, 0);
    add(k, 1, 20, 2, 0);
    sched_core_decide(k, 1, g);
    submit(k, 1, 6, 0x100, 2, 0, 2);
    sched_core_decide(k, 3, g);
    CU_ASSERT_EQUAL(g[1].window, 2);
    CU_ASSERT_EQUAL(stats(k, 1, 3).released, 2);
    sched_core_complete(k, 1, 1, 4, SCHED_DONE_EXACT, 0, 4);
    sched_core_complete(k, 1, 2, 5, SCHED_DONE_EXACT, 0, 5);
    struct sched_client_stats s = stats(k, 1, 5);
    CU_ASSERT_EQUAL(s.released, 4); /* 3 and 4 went without a decision */
    CU_ASSERT_EQUAL(s.in_flight, 2);
    sched_core_free(k);
}

static void test_sync_completes_only_its_scope(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("fifo");
    add(k, 0, 10, 0, 0);
    sched_core_decide(k, 0, g);
    submit(k, 0, 2, 0x100, 1, 1, 1); /* seq 1-2: stream A */
    submit(k, 0, 2, 0x200, 1, 1, 1); /* seq 3-4: stream B */
    submit(k, 0, 2, 0, 1, 1, 1);     /* seq 5-6: legacy default stream, thread 1 */
    struct sched_sync sa = stream_sync(0x100, 6, 2);
    sched_core_sync(k, 0, &sa, 2);
    CU_ASSERT_EQUAL(stats(k, 0, 2).completed, 2);
    /* the per-thread default stream of thread 2 is not the legacy one */
    struct sched_sync sp = stream_sync(0, 6, 3);
    sp.ptsz = 1;
    sp.tid = 2;
    sched_core_sync(k, 0, &sp, 3);
    CU_ASSERT_EQUAL(stats(k, 0, 3).completed, 2);
    struct sched_sync sl = stream_sync(0, 6, 3);
    sched_core_sync(k, 0, &sl, 3);
    CU_ASSERT_EQUAL(stats(k, 0, 3).completed, 4);
    /* a stream sync covering only up to seq 3 completes B's first operator only */
    struct sched_sync sb = stream_sync(0x200, 3, 4);
    sched_core_sync(k, 0, &sb, 4);
    CU_ASSERT_EQUAL(stats(k, 0, 4).completed, 5);
    struct sched_sync sc = {.scope = SCHED_SYNC_CTX, .ctx = 0x10, .covers = 6, .end_ns = 5};
    sched_core_sync(k, 0, &sc, 5);
    CU_ASSERT_EQUAL(stats(k, 0, 5).completed, 6);
    CU_ASSERT_EQUAL(stats(k, 0, 5).in_flight, 0);
    sched_core_free(k);
}

static void test_requests_inferred_from_syncs(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("fifo");
    add(k, 0, 10, 0, 0);
    sched_core_decide(k, 0, g);
    for (int r = 0; r < 10; r++) {
        int64_t t0 = (r + 1) * 100 * MS;
        submit(k, 0, 20, 0x100, 1, 1, t0);
        /* a marker mid-request does not end it */
        sched_core_complete(k, 0, next_seq[0] - 10, t0 + 1 * MS, SCHED_DONE_EXACT, 0, t0 + 1 * MS);
        struct sched_sync s = stream_sync(0x100, next_seq[0], t0 + (r < 9 ? 4 : 8) * MS);
        sched_core_sync(k, 0, &s, t0 + 9 * MS);
    }
    struct sched_client_stats s = stats(k, 0, 2000 * MS);
    CU_ASSERT_EQUAL(s.requests, 10);
    CU_ASSERT_EQUAL(s.request_ops, 200);
    /* p50 4 ms, p99 (the slowest of 10) 8 ms, within the histogram's resolution */
    CU_ASSERT(s.req_p50_ns > 3.8 * MS && s.req_p50_ns < 4.2 * MS);
    CU_ASSERT(s.req_p99_ns > 7.6 * MS && s.req_p99_ns < 8.4 * MS);
    /* the same in powers of two of us (Prometheus buckets): 4000 us in [2^11, 2^12), 8000 us
     * in [2^12, 2^13); and their exact sum */
    uint64_t in_buckets = 0;
    for (int b = 0; b < SCHED_REQ_POW_BUCKETS; b++)
        in_buckets += s.req_pow[b];
    CU_ASSERT_EQUAL(in_buckets, 10);
    CU_ASSERT_EQUAL(s.req_pow[11], 9);
    CU_ASSERT_EQUAL(s.req_pow[12], 1);
    CU_ASSERT_EQUAL(s.req_sum_ns, (uint64_t)(9 * 4 + 8) * MS);
    sched_core_free(k);
}

static void test_stalled_client_stops_holding_others(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("priority");
    add(k, 0, 10, 0, 0);
    add(k, 1, 20, 2, 0);
    sched_core_decide(k, 0, g);
    submit(k, 0, 4, 0x100, 1, 1, 1 * MS); /* latency: in flight, then never heard of again */
    submit(k, 1, 4, 0x200, 2, 0, 1 * MS);
    int64_t next = sched_core_decide(k, 2 * MS, g);
    CU_ASSERT_EQUAL(sched_core_client_held(k, 1), 1);
    /* the core wants to look again by the time the stall would be declared */
    CU_ASSERT(next <= 1 * MS + 50 * MS);
    sched_core_decide(k, 40 * MS, g);
    CU_ASSERT_EQUAL(sched_core_client_held(k, 1), 1);
    sched_core_decide(k, 52 * MS, g);
    CU_ASSERT_EQUAL(sched_core_client_held(k, 1), 0);
    CU_ASSERT_EQUAL(g[1].granted, 2);
    CU_ASSERT_EQUAL(stats(k, 0, 52 * MS).stalls, 1);
    /* it completes something again: it outranks again */
    sched_core_complete(k, 0, 1, 53 * MS, SCHED_DONE_EXACT, 0, 53 * MS);
    sched_core_decide(k, 53 * MS, g);
    CU_ASSERT_EQUAL(sched_core_client_held(k, 1), 1);
    sched_core_free(k);
}

static void test_waiters_without_queued_work_are_ignored(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("priority");
    add(k, 0, 10, 2, 0);
    add(k, 1, 20, 2, 0);
    add(k, 2, 0, 0, 0); /* realtime, idle: the latency client runs in a window */
    sched_core_decide(k, 0, g);
    sched_core_waiters(k, 0, 1000); /* a lie: it has nothing queued */
    submit(k, 1, 4, 0x200, 2, 0, 1);
    sched_core_decide(k, 2, g);
    CU_ASSERT_EQUAL(sched_core_client_held(k, 1), 0);
    CU_ASSERT_EQUAL(g[1].granted, 2);
    sched_core_free(k);
}

static void test_reused_slot_keeps_nothing(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("priority");
    add(k, 3, 20, 2, 0);
    sched_core_decide(k, 0, g);
    submit(k, 3, 10, 0x200, 2, 0, 1);
    sched_core_decide(k, 2, g);
    sched_core_client_remove(k, 3, 3);
    struct sched_device_stats d;
    sched_core_device_stats(k, 3, &d);
    CU_ASSERT_EQUAL(d.submitted, 10);
    add(k, 3, 20, 2, 4);
    next_seq[3] = 0;
    struct sched_client_stats s = stats(k, 3, 4);
    CU_ASSERT_EQUAL(s.submitted, 0);
    CU_ASSERT_EQUAL(s.in_flight, 0);
    submit(k, 3, 1, 0x200, 2, 0, 5);
    sched_core_decide(k, 5, g);
    CU_ASSERT_EQUAL(g[3].mode, POS_GRANT_FREE); /* alone: free */
    CU_ASSERT_EQUAL(g[3].changed, 1);
    sched_core_free(k);
}

static void test_window_presumes_oldest_complete(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("fifo");
    add(k, 0, 10, 0, 0);
    sched_core_decide(k, 0, g);
    submit(k, 0, SCHED_WINDOW + 5, 0x100, 1, 1, 1);
    struct sched_client_stats s = stats(k, 0, 2);
    CU_ASSERT_EQUAL(s.presumed, 5);
    CU_ASSERT_EQUAL(s.in_flight, SCHED_WINDOW);
    sched_core_free(k);
}

static void test_bad_input_refused(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("fifo");
    add(k, 0, 10, 0, 0);
    submit(k, 0, 3, 0x100, 1, 1, 1);
    struct pos_sched_op op = {.seq = 7};
    CU_ASSERT_EQUAL(sched_core_submit(k, 0, &op, 1, 2), -EPROTO); /* out of order */
    CU_ASSERT_EQUAL(sched_core_complete(k, 0, 4, 2, SCHED_DONE_EXACT, 0, 2), -EPROTO);
    CU_ASSERT_EQUAL(sched_core_complete(k, 0, 0, 2, SCHED_DONE_EXACT, 0, 2), -EPROTO);
    struct sched_sync s = stream_sync(0x100, 9, 2);
    CU_ASSERT_EQUAL(sched_core_sync(k, 0, &s, 2), -EPROTO);
    s.covers = 3;
    s.scope = 77;
    CU_ASSERT_EQUAL(sched_core_sync(k, 0, &s, 2), -EPROTO);
    CU_ASSERT_EQUAL(sched_core_submit(k, 5, &op, 1, 2), -EPROTO); /* no such client */
    CU_ASSERT_EQUAL(stats(k, 0, 3).submitted, 3);
    sched_core_free(k);
}

static void test_idle_core_wants_no_tick(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("priority");
    add(k, 0, 10, 0, 0);
    CU_ASSERT(sched_core_decide(k, 20 * MS, g) == INT64_MAX);
    submit(k, 0, 2, 0x100, 1, 1, 21 * MS);
    int64_t next = sched_core_decide(k, 21 * MS, g);
    CU_ASSERT(next > 21 * MS && next <= 31 * MS); /* accounting while in flight */
    struct sched_sync s = stream_sync(0x100, 2, 22 * MS);
    sched_core_sync(k, 0, &s, 22 * MS);
    CU_ASSERT(sched_core_decide(k, 22 * MS, g) == INT64_MAX);
    sched_core_free(k);
}

/* The core and the policies import no I/O and no clock: possim runs them in virtual time. */
static void test_core_and_policies_are_pure(void)
{
    static const char *const objs =
        "build/obj/sched/core.o build/obj/sched/profile.o build/obj/sched/policy/fifo.o "
        "build/obj/sched/policy/priority.o build/obj/sched/policy/pos.o "
        "build/obj/sched/policy/view.o build/obj/sched/policy/registry.o "
        "build/obj/sched/policy/staged.o build/obj/sched/policy/params.o "
        "build/obj/sched/schedule.o build/obj/sched/policy/learned.o build/obj/sched/nn.o "
        "build/obj/sched/weights.o";
    /* memory (the operator tables are mapped, their pages returned), string functions that
     * format or parse in memory (a schedule's text), and maths (learned's network) */
    static const char *const allowed[] = {
        "calloc", "malloc",   "free",     "realloc",   "memset",           "memcpy",
        "memcmp", "memchr",   "strcmp",   "strlen",    "strspn",           "strtok",
        "strtod", "strtoull", "snprintf", "vsnprintf", "__errno_location", "sqrt",
        "mmap",   "munmap",   "madvise",  "posix_memalign", "_GLOBAL_OFFSET_TABLE_", "expf",
        "logf",   "sqrtf",    "exp",      "log",       "log2",             "log10",  NULL};
    /* what the objects define among themselves is theirs */
    char cmd[1024], defined[16384] = " ";
    snprintf(cmd, sizeof cmd, "nm --defined-only %s 2>/dev/null", objs);
    FILE *p = popen(cmd, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    char line[256];
    while (fgets(line, sizeof line, p)) {
        char addr[40], type[4], sym[200];
        if (sscanf(line, "%39s %3s %199s", addr, type, sym) == 3 &&
            strlen(defined) + strlen(sym) + 2 < sizeof defined) {
            strcat(defined, sym);
            strcat(defined, " ");
        }
    }
    pclose(p);
    snprintf(cmd, sizeof cmd, "nm -u %s 2>&1", objs);
    p = popen(cmd, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    int symbols = 0, foreign = 0;
    while (fgets(line, sizeof line, p)) {
        char sym[200];
        if (sscanf(line, " U %199s", sym) != 1)
            continue;
        symbols++;
        char word[208];
        snprintf(word, sizeof word, " %s ", sym);
        /* what a sanitizer's instrumentation calls (make SANITIZE=...) is not the code's */
        int ok = strstr(defined, word) != NULL || strncmp(sym, "__asan_", 7) == 0 ||
                 strncmp(sym, "__ubsan_", 8) == 0 || strncmp(sym, "__tsan_", 7) == 0;
        for (int i = 0; allowed[i]; i++)
            ok |= strcmp(sym, allowed[i]) == 0;
        if (!ok) {
            fprintf(stderr, "core/policy imports %s\n", sym);
            foreign++;
        }
    }
    CU_ASSERT_EQUAL(pclose(p), 0);
    CU_ASSERT(symbols > 0); /* nm ran and read the objects */
    CU_ASSERT_EQUAL(foreign, 0);
}

/* A policy that only records what its view said of slot 0 and of the device. */
static struct pos_sched_client seen_client;
static uint32_t seen_unmanaged;

static int64_t record_view(void *state, struct pos_sched_view *v)
{
    seen_unmanaged = v->unmanaged;
    for (size_t i = 0; i < v->nclients; i++)
        if (v->clients[i].slot == 0)
            seen_client = v->clients[i];
    return INT64_MAX;
}

static const struct pos_policy_ops recorder = {.name = "recorder", .decide = record_view};

/* A core whose policy records what it is shown, with one client in slot 0 */
static struct sched_core *recorder_core(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_params p;
    sched_params_defaults(&p);
    struct sched_core *k = sched_core_new(&p, &dev, &recorder, NULL, 0);
    if (k)
        add(k, 0, 10, 0, 0);
    return k;
}

static void test_telemetry_reaches_the_policy_view(void)
{
    struct sched_core *k = recorder_core();
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    sched_core_decide(k, 1, g);
    CU_ASSERT_EQUAL(seen_client.runq_delay_ns, 0); /* none given: zero, as in possim */
    CU_ASSERT_EQUAL(seen_unmanaged, 0);
    sched_core_client_telemetry(k, 0, 3000000, 700000000, 120000000);
    sched_core_set_unmanaged(k, 2);
    sched_core_decide(k, 2, g);
    CU_ASSERT_EQUAL(seen_client.runq_delay_ns, 3000000);
    CU_ASSERT_EQUAL(seen_client.runq_ns_per_s, 700000000);
    CU_ASSERT_EQUAL(seen_client.offcpu_ns_per_s, 120000000);
    CU_ASSERT_EQUAL(seen_unmanaged, 2);
    /* a client in a reused slot starts with none of its predecessor's */
    sched_core_client_remove(k, 0, 3);
    add(k, 0, 10, 0, 4);
    sched_core_decide(k, 5, g);
    CU_ASSERT_EQUAL(seen_client.runq_delay_ns, 0);
    CU_ASSERT_EQUAL(seen_client.offcpu_ns_per_s, 0);
    sched_core_free(k);
}

/* The client's device memory reaches the policy's view as the adapter gave it; none given is
 * no use and no limit (possim), and a reused slot starts again from there. */
static void test_memory_reaches_the_policy_view(void)
{
    struct sched_core *k = recorder_core();
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    sched_core_decide(k, 1, g);
    CU_ASSERT_EQUAL(seen_client.mem_used, 0);
    CU_ASSERT_EQUAL(seen_client.mem_limit, UINT64_MAX);
    sched_core_client_mem(k, 0, 3ull << 30, 2ull << 30);
    sched_core_decide(k, 2, g);
    CU_ASSERT_EQUAL(seen_client.mem_used, 3ull << 30);
    CU_ASSERT_EQUAL(seen_client.mem_limit, 2ull << 30);
    sched_core_client_remove(k, 0, 3);
    add(k, 0, 10, 0, 4);
    sched_core_decide(k, 5, g);
    CU_ASSERT_EQUAL(seen_client.mem_used, 0);
    CU_ASSERT_EQUAL(seen_client.mem_limit, UINT64_MAX);
    sched_core_free(k);
}

/* The policy sees each ended request's latency as posd saw it (first launch to the
 * completion that ended it) and how many have ended: what pos's SLO guard reads. */
static void test_request_latency_reaches_the_policy_view(void)
{
    struct sched_core *k = recorder_core();
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    sched_core_decide(k, 0, g);
    for (int r = 0; r < 3; r++) {
        int64_t t0 = (r + 1) * 100 * MS;
        submit(k, 0, 5, 0x100, 1, 1, t0);
        sched_core_decide(k, t0 + 1, g);
        CU_ASSERT_EQUAL(seen_client.request.ended, (uint64_t)r); /* under way: not yet */
        struct sched_sync s = stream_sync(0x100, next_seq[0], t0 + (r + 2) * MS);
        sched_core_sync(k, 0, &s, t0 + 9 * MS);
        sched_core_decide(k, t0 + 9 * MS, g);
        CU_ASSERT_EQUAL(seen_client.request.ended, (uint64_t)r + 1);
        CU_ASSERT_EQUAL(seen_client.request.last_ns, (r + 2) * MS);
    }
    sched_core_free(k);
}

/* The CPU lever's rule: a client whose lever is on is lowered while a client of a more
 * important class has a request under way, and cpu_hold after it ended; one of the same or a
 * more important class, or with its lever off, never is; the decision wanted next is when the
 * hold ends, and the client's leave lifts it at once. The policy's view carries the lever and
 * the core's verdict. */
static void test_cpu_lever_lowers_outranked_while_a_request_is_under_way(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_params p;
    sched_params_defaults(&p);
    p.cpu_hold_ns = 50 * MS;
    struct sched_core *k = sched_core_new(&p, &dev, pos_policy_find("priority"), NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    struct sched_client_conf lat = {.id = 1, .priority = 10, .cpu = POS_CPU_IDLE};
    struct sched_client_conf batch = {.id = 2, .priority = 20, .cpu = POS_CPU_IDLE};
    struct sched_client_conf peer = {.id = 3, .priority = 10, .cpu = POS_CPU_NICE};
    struct sched_client_conf exempt = {.id = 4, .priority = 20, .cpu = POS_CPU_OFF};
    struct sched_client_conf nice = {.id = 5, .priority = 30, .cpu = POS_CPU_NICE};
    sched_core_client_add(k, 0, &lat, 0);
    sched_core_client_add(k, 1, &batch, 0);
    sched_core_client_add(k, 2, &peer, 0);
    sched_core_client_add(k, 3, &exempt, 0);
    sched_core_client_add(k, 4, &nice, 0);
    sched_core_decide(k, 1 * MS, g);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(g[i].cpu_low, POS_CPU_OFF); /* no request anywhere yet */
    /* the latency client's request starts: the batch client and the nice one are lowered */
    submit(k, 0, 3, 0x100, 1, 1, 2 * MS);
    sched_core_decide(k, 2 * MS, g);
    CU_ASSERT_EQUAL(g[0].cpu_low, POS_CPU_OFF);
    CU_ASSERT_EQUAL(g[1].cpu_low, POS_CPU_IDLE);
    CU_ASSERT_EQUAL(g[2].cpu_low, POS_CPU_OFF); /* the same class */
    CU_ASSERT_EQUAL(g[3].cpu_low, POS_CPU_OFF); /* its lever is off */
    CU_ASSERT_EQUAL(g[4].cpu_low, POS_CPU_NICE);
    /* the batch client's work does not lower the nice one below it: only a request does */
    submit(k, 1, 3, 0x200, 2, 1, 3 * MS);
    /* the request ends at 4 ms: still lowered during the hold, lifted at 54 ms */
    struct sched_sync s = stream_sync(0x100, next_seq[0], 4 * MS);
    sched_core_sync(k, 0, &s, 4 * MS);
    int64_t next = sched_core_decide(k, 10 * MS, g);
    CU_ASSERT_EQUAL(g[1].cpu_low, POS_CPU_IDLE);
    CU_ASSERT_EQUAL(g[4].cpu_low, POS_CPU_NICE);
    CU_ASSERT(next <= 54 * MS);
    sched_core_decide(k, 54 * MS, g);
    CU_ASSERT_EQUAL(g[1].cpu_low, POS_CPU_OFF);
    CU_ASSERT_EQUAL(g[4].cpu_low, POS_CPU_NICE); /* the batch client's request outranks it */
    /* the batch client leaves: nobody outranks the nice one now */
    sched_core_client_remove(k, 1, 55 * MS);
    sched_core_decide(k, 55 * MS, g);
    CU_ASSERT_EQUAL(g[4].cpu_low, POS_CPU_OFF);
    /* a new request of the latency client; then it leaves: lifted at once, hold or not */
    submit(k, 0, 1, 0x100, 1, 1, 60 * MS);
    sched_core_decide(k, 60 * MS, g);
    CU_ASSERT_EQUAL(g[4].cpu_low, POS_CPU_NICE);
    sched_core_client_remove(k, 0, 61 * MS);
    sched_core_decide(k, 61 * MS, g);
    CU_ASSERT_EQUAL(g[4].cpu_low, POS_CPU_OFF);
    sched_core_free(k);
    /* with nothing else to wait for, the next decision wanted is the hold's end, no later */
    k = sched_core_new(&p, &dev, pos_policy_find("priority"), NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    memset(next_seq, 0, sizeof next_seq);
    sched_core_client_add(k, 0, &lat, 0);
    sched_core_client_add(k, 1, &batch, 0);
    submit(k, 0, 2, 0x100, 1, 1, 20 * MS);
    sched_core_decide(k, 20 * MS, g);
    s = stream_sync(0x100, next_seq[0], 21 * MS);
    sched_core_sync(k, 0, &s, 21 * MS);
    CU_ASSERT_EQUAL(sched_core_decide(k, 22 * MS, g), 71 * MS);
    CU_ASSERT_EQUAL(g[1].cpu_low, POS_CPU_IDLE);
    sched_core_decide(k, 71 * MS, g);
    CU_ASSERT_EQUAL(g[1].cpu_low, POS_CPU_OFF);
    sched_core_free(k);
    /* the view: the lever and the core's verdict reach the policy */
    struct sched_core *r = sched_core_new(&p, &dev, &recorder, NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    memset(next_seq, 0, sizeof next_seq);
    struct sched_client_conf low = {.id = 1, .priority = 20, .cpu = POS_CPU_NICE};
    sched_core_client_add(r, 0, &low, 0);
    sched_core_client_add(r, 1, &lat, 0);
    submit(r, 1, 1, 0x100, 1, 1, 1 * MS);
    sched_core_decide(r, 1 * MS, g);
    CU_ASSERT_EQUAL(seen_client.cpu, POS_CPU_NICE);
    CU_ASSERT_EQUAL(seen_client.cpu_low, POS_CPU_NICE);
    sched_core_free(r);
}

/* The resident size of this process, in KiB (/proc/self/statm). */
static long rss_kib(void)
{
    long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* A client that leaves gives its operator table's memory back: after a full window of
 * operators (1.8 MB of table) the core's resident size drops by most of it when the client is
 * removed, and a client in the reused slot works from a clean table. */
static void test_leaving_client_returns_its_table_memory(void)
{
    memset(next_seq, 0, sizeof next_seq);
    struct sched_core *k = core("fifo");
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    long before = rss_kib();
    add(k, 0, 10, 0, 0);
    sched_core_decide(k, 0, g);
    submit(k, 0, SCHED_WINDOW, 0x100, 1, 1, 1); /* every entry of the table written */
    long full = rss_kib();
    sched_core_client_remove(k, 0, 2);
    long after = rss_kib();
    CU_ASSERT(full - before > 1024);
    CU_ASSERT(full - after > 1024);
    if (full - after <= 1024)
        fprintf(stderr, "rss %ld KiB before, %ld with the table full, %ld after removal\n", before,
                full, after);
    memset(next_seq, 0, sizeof next_seq);
    add(k, 0, 10, 0, 3);
    submit(k, 0, 4, 0x100, 1, 1, 4);
    struct sched_sync s = stream_sync(0x100, 4, 5);
    CU_ASSERT_EQUAL(sched_core_sync(k, 0, &s, 5), 0);
    CU_ASSERT_EQUAL(stats(k, 0, 5).completed, 4);
    sched_core_free(k);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("core", NULL, NULL);
    POS_ADD_TEST(s, test_telemetry_reaches_the_policy_view);
    POS_ADD_TEST(s, test_memory_reaches_the_policy_view);
    POS_ADD_TEST(s, test_request_latency_reaches_the_policy_view);
    POS_ADD_TEST(s, test_cpu_lever_lowers_outranked_while_a_request_is_under_way);
    POS_ADD_TEST(s, test_leaving_client_returns_its_table_memory);
    POS_ADD_TEST(s, test_counts_and_grants_never_go_back);
    POS_ADD_TEST(s, test_a_new_client_is_profiled_from_its_first_launch);
    POS_ADD_TEST(s, test_profiling_asks_for_prompt_looks_only_for_poll_times);
    POS_ADD_TEST(s, test_window_cap_moves_with_completions);
    POS_ADD_TEST(s, test_sync_completes_only_its_scope);
    POS_ADD_TEST(s, test_requests_inferred_from_syncs);
    POS_ADD_TEST(s, test_stalled_client_stops_holding_others);
    POS_ADD_TEST(s, test_waiters_without_queued_work_are_ignored);
    POS_ADD_TEST(s, test_reused_slot_keeps_nothing);
    POS_ADD_TEST(s, test_window_presumes_oldest_complete);
    POS_ADD_TEST(s, test_bad_input_refused);
    POS_ADD_TEST(s, test_idle_core_wants_no_tick);
    POS_ADD_TEST(s, test_device_times_learn_end_minus_predecessor_end);
    POS_ADD_TEST(s, test_device_ends_read_after_their_sync_still_teach_the_profile);
    POS_ADD_TEST(s, test_device_outliers_are_not_the_kernels);
    POS_ADD_TEST(s, test_core_and_policies_are_pure);
}
