/* Tests sim/gpu_model.c against analytic cases: solo rooflines, MPS sharing (two full-device
 * kernels ~2x, four quarter-device kernels ~1x, compute beside memory-bound overlaps),
 * time slicing (two contexts ~half rate each), stream order, dependencies, host ops, copy
 * engines, priorities, owner removal, rebuild after a crash, the runs of alike SMs the
 * model keeps, and SM shares (a context limited to N SMs, MPS's active thread percentage).
 * All in virtual time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/gpu_model.h"
#include "tests/cunit_main.h"

static struct sim_gpu *g;

static void setup(const char *preset, int mode)
{
    struct sim_dev_params p;
    CU_ASSERT_FATAL(sim_preset_get(preset, &p) == 0);
    p.mode = mode;
    if (!g)
        g = malloc(sizeof *g);
    CU_ASSERT_FATAL(g != NULL);
    sim_gpu_init(g, &p, 0);
}

static int kernel(int owner, int ctx, int stream, double flops, double bytes, uint32_t blocks,
                  uint32_t threads, int64_t now)
{
    int op = sim_gpu_op_alloc(g, owner);
    CU_ASSERT_FATAL(op >= 0);
    struct sim_op *o = &g->ops[op];
    o->kind = SIM_OP_KERNEL;
    o->ctx = (int16_t)ctx;
    o->stream = stream;
    o->flops = flops;
    o->bytes = bytes;
    o->blocks = blocks;
    o->threads = threads;
    sim_gpu_submit(g, op, now);
    return op;
}

static int marker(int owner, int ctx, int stream, int dep, int64_t now)
{
    int op = sim_gpu_op_alloc(g, owner);
    CU_ASSERT_FATAL(op >= 0);
    g->ops[op].kind = SIM_OP_MARKER;
    g->ops[op].ctx = (int16_t)ctx;
    g->ops[op].stream = stream;
    if (dep >= 0)
        CU_ASSERT(sim_gpu_op_add_dep(g, op, dep, g->ops[dep].gen) == 0);
    sim_gpu_submit(g, op, now);
    return op;
}

/* Runs the model until nothing more happens; returns the final device time. */
static int64_t run_to_idle(void)
{
    for (int i = 0; i < 1000000; i++) {
        int64_t t = sim_gpu_next_event(g);
        if (t == INT64_MAX)
            break;
        sim_gpu_advance(g, t);
    }
    return g->now;
}

static double lat_ns(void)
{
    return g->p.launch_latency_us * 1e3;
}

static void test_solo_compute_bound(void)
{
    setup("h200", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o), s = sim_gpu_stream_add(g, o, c, 0);
    double flops = 67e12 * 1e-3; /* 1 ms at full peak */
    int k = kernel(o, c, s, flops, 0, 264, 256, 0);
    run_to_idle();
    CU_ASSERT_EQUAL(g->ops[k].state, SIM_OP_DONE);
    CU_ASSERT_DOUBLE_EQUAL((double)g->ops[k].end_ns, 1e6 + lat_ns(), 2.0);
    CU_ASSERT_DOUBLE_EQUAL(sim_gpu_kernel_solo_ns(&g->p, flops, 0, 264, 0), 1e6 + lat_ns(), 1.0);
}

static void test_solo_partial_grid(void)
{
    setup("h200", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o), s = sim_gpu_stream_add(g, o, c, 0);
    /* 20 blocks on 132 SMs: compute runs on 20/132 of the device. */
    double flops = 67e12 * 1e-4;
    int k = kernel(o, c, s, flops, 0, 20, 128, 0);
    run_to_idle();
    double expect = 1e5 * 132.0 / 20.0 + lat_ns();
    CU_ASSERT_DOUBLE_EQUAL((double)g->ops[k].end_ns, expect, expect * 1e-6);
}

static void test_solo_memory_bound_and_fp16(void)
{
    setup("rtx3080", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o), s = sim_gpu_stream_add(g, o, c, 0);
    double bytes = 760e9 * 2e-4; /* 200 us of DRAM time, little compute */
    int k = kernel(o, c, s, 1e6, bytes, 1000, 256, 0);
    int op = sim_gpu_op_alloc(g, o);
    g->ops[op] = g->ops[op]; /* fp16 kernel: 1 ms at the tensor peak */
    g->ops[op].kind = SIM_OP_KERNEL;
    g->ops[op].ctx = (int16_t)c;
    g->ops[op].stream = s;
    g->ops[op].flops = 59.5e12 * 1e-3;
    g->ops[op].blocks = 680;
    g->ops[op].threads = 256;
    g->ops[op].flags = SIM_OPF_FP16;
    sim_gpu_submit(g, op, 0);
    run_to_idle();
    CU_ASSERT_DOUBLE_EQUAL((double)g->ops[k].end_ns, 2e5 + lat_ns(), 2.0);
    CU_ASSERT_DOUBLE_EQUAL((double)(g->ops[op].end_ns - g->ops[k].end_ns), 1e6 + lat_ns(), 2.0);
}

static void test_mps_two_full_device_kernels_take_twice(void)
{
    setup("h200", SIM_MODE_MPS);
    int o1 = sim_gpu_owner_add(g), o2 = sim_gpu_owner_add(g);
    int c1 = sim_gpu_ctx_add(g, o1), c2 = sim_gpu_ctx_add(g, o2);
    int s1 = sim_gpu_stream_add(g, o1, c1, 0), s2 = sim_gpu_stream_add(g, o2, c2, 0);
    double flops = 67e12 * 1e-3;
    /* 132 blocks of 512 threads: both fit on every SM and share its issue. */
    int a = kernel(o1, c1, s1, flops, 0, 132, 512, 0);
    int b = kernel(o2, c2, s2, flops, 0, 132, 512, 0);
    run_to_idle();
    double solo = 1e6;
    CU_ASSERT_DOUBLE_EQUAL((g->ops[a].end_ns - lat_ns()) / solo, 2.0, 0.05);
    CU_ASSERT_DOUBLE_EQUAL((g->ops[b].end_ns - lat_ns()) / solo, 2.0, 0.05);
}

static void test_mps_full_occupancy_kernels_serialise(void)
{
    setup("h200", SIM_MODE_MPS);
    int o1 = sim_gpu_owner_add(g), o2 = sim_gpu_owner_add(g);
    int c1 = sim_gpu_ctx_add(g, o1), c2 = sim_gpu_ctx_add(g, o2);
    int s1 = sim_gpu_stream_add(g, o1, c1, 0), s2 = sim_gpu_stream_add(g, o2, c2, 0);
    double flops = 67e12 * 1e-3;
    /* 8 blocks of 256 threads per SM fill every SM: the second kernel waits for room. */
    int a = kernel(o1, c1, s1, flops, 0, 132 * 8, 256, 0);
    int b = kernel(o2, c2, s2, flops, 0, 132 * 8, 256, 0);
    run_to_idle();
    int64_t last = g->ops[a].end_ns > g->ops[b].end_ns ? g->ops[a].end_ns : g->ops[b].end_ns;
    CU_ASSERT_DOUBLE_EQUAL((last - lat_ns()) / 1e6, 2.0, 0.05);
    int64_t first = g->ops[a].end_ns < g->ops[b].end_ns ? g->ops[a].end_ns : g->ops[b].end_ns;
    CU_ASSERT_DOUBLE_EQUAL((first - lat_ns()) / 1e6, 1.0, 0.05);
}

static void test_mps_four_quarter_kernels_overlap(void)
{
    setup("h200", SIM_MODE_MPS);
    int64_t ends[4];
    int ops[4];
    double flops = 67e12 * 1e-3 / 4; /* 1 ms on a quarter of the device */
    for (int i = 0; i < 4; i++) {
        int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o);
        int s = sim_gpu_stream_add(g, o, c, 0);
        ops[i] = kernel(o, c, s, flops, 0, 33, 256, 0);
    }
    run_to_idle();
    for (int i = 0; i < 4; i++) {
        ends[i] = g->ops[ops[i]].end_ns;
        CU_ASSERT_DOUBLE_EQUAL((ends[i] - lat_ns()) / 1e6, 1.0, 0.03);
    }
}

static void test_mps_compute_beside_memory_bound(void)
{
    setup("h200", SIM_MODE_MPS);
    int o1 = sim_gpu_owner_add(g), o2 = sim_gpu_owner_add(g);
    int c1 = sim_gpu_ctx_add(g, o1), c2 = sim_gpu_ctx_add(g, o2);
    int s1 = sim_gpu_stream_add(g, o1, c1, 0), s2 = sim_gpu_stream_add(g, o2, c2, 0);
    int a = kernel(o1, c1, s1, 67e12 * 1e-3, 1e6, 132, 512, 0);           /* compute-bound, 1 ms */
    int b = kernel(o2, c2, s2, 67e12 * 1e-5, 4.8e12 * 1e-3, 132, 512, 0); /* memory, 1 ms */
    run_to_idle();
    CU_ASSERT((g->ops[a].end_ns - lat_ns()) / 1e6 < 1.1);
    CU_ASSERT((g->ops[b].end_ns - lat_ns()) / 1e6 < 1.1);
}

static void test_mps_two_memory_bound_share_dram(void)
{
    setup("h200", SIM_MODE_MPS);
    int o1 = sim_gpu_owner_add(g), o2 = sim_gpu_owner_add(g);
    int c1 = sim_gpu_ctx_add(g, o1), c2 = sim_gpu_ctx_add(g, o2);
    int s1 = sim_gpu_stream_add(g, o1, c1, 0), s2 = sim_gpu_stream_add(g, o2, c2, 0);
    int a = kernel(o1, c1, s1, 0, 4.8e12 * 1e-3, 132, 256, 0);
    int b = kernel(o2, c2, s2, 0, 4.8e12 * 1e-3, 132, 256, 0);
    run_to_idle();
    CU_ASSERT_DOUBLE_EQUAL((g->ops[a].end_ns - lat_ns()) / 1e6, 2.0, 0.02);
    CU_ASSERT_DOUBLE_EQUAL((g->ops[b].end_ns - lat_ns()) / 1e6, 2.0, 0.02);
}

static void test_mps_small_kernel_beside_big_one(void)
{
    setup("h200", SIM_MODE_MPS);
    int o1 = sim_gpu_owner_add(g), o2 = sim_gpu_owner_add(g);
    int c1 = sim_gpu_ctx_add(g, o1), c2 = sim_gpu_ctx_add(g, o2);
    int s1 = sim_gpu_stream_add(g, o1, c1, 0), s2 = sim_gpu_stream_add(g, o2, c2, 0);
    /* big: 2 blocks of 256 per SM on all SMs; small: 20 blocks. Both compute-bound. The
     * small one shares 20 SMs, so it runs at about half speed, while the big one loses
     * only what it gives up on those 20 SMs. */
    int big = kernel(o1, c1, s1, 67e12 * 1e-3, 0, 264, 256, 0);
    int small = kernel(o2, c2, s2, 67e12 * 1e-4, 0, 20, 256, 0);
    run_to_idle();
    double small_solo = 1e5 * 132 / 20.0;
    double small_t = g->ops[small].end_ns - lat_ns();
    CU_ASSERT(small_t > 1.6 * small_solo && small_t < 2.2 * small_solo);
    double big_t = (g->ops[big].end_ns - lat_ns()) / 1e6;
    CU_ASSERT(big_t > 1.0 && big_t < 1.15);
}

static void test_stream_order_and_streams_overlap(void)
{
    setup("h200", SIM_MODE_TIMESLICE);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o);
    int s1 = sim_gpu_stream_add(g, o, c, 0), s2 = sim_gpu_stream_add(g, o, c, 0);
    double flops = 67e12 * 1e-4 / 4; /* 100 us on a quarter of the device */
    int a1 = kernel(o, c, s1, flops, 0, 33, 256, 0);
    int a2 = kernel(o, c, s1, flops, 0, 33, 256, 0);
    int b1 = kernel(o, c, s2, flops, 0, 33, 256, 0);
    run_to_idle();
    CU_ASSERT(g->ops[a2].start_ns >= g->ops[a1].end_ns);
    /* a different stream of the same context runs beside a1 */
    CU_ASSERT(g->ops[b1].start_ns < g->ops[a1].end_ns);
    CU_ASSERT_DOUBLE_EQUAL((double)g->ops[b1].end_ns, (double)g->ops[a1].end_ns, 2.0);
}

static void test_timeslice_two_contexts_half_rate(void)
{
    setup("h200", SIM_MODE_TIMESLICE);
    int o1 = sim_gpu_owner_add(g), o2 = sim_gpu_owner_add(g);
    int c1 = sim_gpu_ctx_add(g, o1), c2 = sim_gpu_ctx_add(g, o2);
    int s1 = sim_gpu_stream_add(g, o1, c1, 0), s2 = sim_gpu_stream_add(g, o2, c2, 0);
    double flops = 67e12 * 1e-4; /* 100 us each, full device */
    int last1 = -1, last2 = -1;
    for (int i = 0; i < 200; i++) {
        last1 = kernel(o1, c1, s1, flops, 0, 264, 256, 0);
        last2 = kernel(o2, c2, s2, flops, 0, 264, 256, 0);
    }
    run_to_idle();
    double solo = 200 * (1e5 + lat_ns());
    /* Both share the device: each finishes in about twice its solo time. */
    CU_ASSERT_DOUBLE_EQUAL(g->ops[last1].end_ns / solo, 2.0, 0.1);
    CU_ASSERT_DOUBLE_EQUAL(g->ops[last2].end_ns / solo, 2.0, 0.1);
    CU_ASSERT(g->stats.ctx_switches >= 10);
    /* kernels of the two contexts never overlapped: total busy time = sum of work */
    CU_ASSERT(g->stats.busy_ns >= 400 * 1e5 * 0.999);
}

static void test_timeslice_contexts_never_overlap(void)
{
    setup("h200", SIM_MODE_TIMESLICE);
    int o1 = sim_gpu_owner_add(g), o2 = sim_gpu_owner_add(g);
    int c1 = sim_gpu_ctx_add(g, o1), c2 = sim_gpu_ctx_add(g, o2);
    int s1 = sim_gpu_stream_add(g, o1, c1, 0), s2 = sim_gpu_stream_add(g, o2, c2, 0);
    double flops = 67e12 * 1e-4 / 4;
    int a = kernel(o1, c1, s1, flops, 0, 33, 256, 0);
    int b = kernel(o2, c2, s2, flops, 0, 33, 256, 0);
    run_to_idle();
    /* small kernels that would fit side by side still run one after the other */
    CU_ASSERT(g->ops[b].start_ns >= g->ops[a].end_ns || g->ops[a].start_ns >= g->ops[b].end_ns);
}

static void test_dependency_across_streams(void)
{
    setup("h200", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o);
    int s1 = sim_gpu_stream_add(g, o, c, 0), s2 = sim_gpu_stream_add(g, o, c, 0);
    int a = kernel(o, c, s1, 67e12 * 1e-4, 0, 264, 256, 0);
    int ev = marker(o, c, s1, -1, 0);
    int w = marker(o, c, s2, ev, 0);
    int b = kernel(o, c, s2, 67e12 * 1e-4, 0, 264, 256, 0);
    run_to_idle();
    CU_ASSERT(g->ops[w].end_ns >= g->ops[a].end_ns);
    CU_ASSERT(g->ops[b].start_ns >= g->ops[a].end_ns);
}

static void test_host_op_blocks_stream(void)
{
    setup("h200", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o), s = sim_gpu_stream_add(g, o, c, 0);
    int h = sim_gpu_op_alloc(g, o);
    g->ops[h].kind = SIM_OP_HOST;
    g->ops[h].ctx = (int16_t)c;
    g->ops[h].stream = s;
    sim_gpu_submit(g, h, 0);
    int k = kernel(o, c, s, 67e12 * 1e-5, 0, 264, 256, 0);
    run_to_idle();
    CU_ASSERT_EQUAL(g->ops[h].state, SIM_OP_HOSTWAIT);
    CU_ASSERT_EQUAL(g->ops[k].state, SIM_OP_QUEUED);
    CU_ASSERT_EQUAL(sim_gpu_owner_next_event(g, o), INT64_MAX);
    sim_gpu_advance(g, 50000);
    sim_gpu_host_done(g, h, 50000);
    run_to_idle();
    CU_ASSERT_EQUAL(g->ops[h].end_ns, 50000);
    CU_ASSERT(g->ops[k].start_ns >= 50000);
    CU_ASSERT_EQUAL(g->ops[k].state, SIM_OP_DONE);
    CU_ASSERT_EQUAL(sim_gpu_reap(g, o), h);
    CU_ASSERT_EQUAL(sim_gpu_reap(g, o), k);
    CU_ASSERT_EQUAL(sim_gpu_reap(g, o), SIM_NONE);
}

static void test_copy_engines(void)
{
    setup("rtx3080", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o);
    int s1 = sim_gpu_stream_add(g, o, c, 0), s2 = sim_gpu_stream_add(g, o, c, 0);
    int s3 = sim_gpu_stream_add(g, o, c, 0);
    int kinds[3] = {SIM_OP_COPY_H2D, SIM_OP_COPY_H2D, SIM_OP_COPY_D2H};
    int streams[3] = {s1, s2, s3}, ops[3];
    for (int i = 0; i < 3; i++) {
        ops[i] = sim_gpu_op_alloc(g, o);
        g->ops[ops[i]].kind = (uint8_t)kinds[i];
        g->ops[ops[i]].ctx = (int16_t)c;
        g->ops[ops[i]].stream = streams[i];
        g->ops[ops[i]].bytes = 25e9 * 1e-3; /* 1 ms at 25 GB/s */
        sim_gpu_submit(g, ops[i], 0);
    }
    run_to_idle();
    double one = 1e6 + g->p.copy_latency_us * 1e3;
    int64_t e0 = g->ops[ops[0]].end_ns, e1 = g->ops[ops[1]].end_ns;
    CU_ASSERT_DOUBLE_EQUAL((double)(e0 < e1 ? e0 : e1), one, 2.0);
    CU_ASSERT_DOUBLE_EQUAL((double)(e0 > e1 ? e0 : e1), 2 * one, 4.0); /* one H2D engine */
    CU_ASSERT_DOUBLE_EQUAL((double)g->ops[ops[2]].end_ns, one, 2.0);   /* D2H beside it */
}

static void test_priority_admitted_first(void)
{
    setup("xavier-nx", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o);
    int busy = sim_gpu_stream_add(g, o, c, 0);
    int lo = sim_gpu_stream_add(g, o, c, 0), hi = sim_gpu_stream_add(g, o, c, -1);
    /* fill the device, then queue a low- and (later) a high-priority full kernel */
    int k0 = kernel(o, c, busy, 0.845e12 * 1e-3, 0, 6 * 8, 256, 0);
    int kl = kernel(o, c, lo, 0.845e12 * 1e-3, 0, 6 * 8, 256, 0);
    int kh = kernel(o, c, hi, 0.845e12 * 1e-3, 0, 6 * 8, 256, 1000);
    run_to_idle();
    CU_ASSERT(g->ops[kh].start_ns >= g->ops[k0].end_ns);
    CU_ASSERT(g->ops[kh].end_ns < g->ops[kl].end_ns);
}

static void test_owner_remove_frees_device(void)
{
    setup("h200", SIM_MODE_TIMESLICE);
    int o1 = sim_gpu_owner_add(g), o2 = sim_gpu_owner_add(g);
    int c1 = sim_gpu_ctx_add(g, o1), c2 = sim_gpu_ctx_add(g, o2);
    int s1 = sim_gpu_stream_add(g, o1, c1, 0), s2 = sim_gpu_stream_add(g, o2, c2, 0);
    for (int i = 0; i < 50; i++)
        kernel(o1, c1, s1, 67e12 * 1e-3, 0, 264, 256, 0);
    int b = kernel(o2, c2, s2, 67e12 * 1e-3, 0, 264, 256, 0);
    sim_gpu_advance(g, 500000); /* o1 is mid-kernel */
    uint32_t nfree_before = g->nfree;
    sim_gpu_owner_remove(g, o1, 500000);
    CU_ASSERT_EQUAL(g->nfree, nfree_before + 50);
    run_to_idle();
    CU_ASSERT_EQUAL(g->ops[b].state, SIM_OP_DONE);
    CU_ASSERT(g->ops[b].end_ns < 3000000);
    CU_ASSERT_EQUAL(g->nruns, 1); /* all SMs alike again: one run */
    CU_ASSERT_EQUAL(g->runs[0].count, g->p.num_sms);
    CU_ASSERT_EQUAL(g->runs[0].sm.threads_used, 0);
}

static void test_rebuild_after_torn_update(void)
{
    setup("h200", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o);
    int s1 = sim_gpu_stream_add(g, o, c, 0), s2 = sim_gpu_stream_add(g, o, c, 0);
    int ops[20];
    for (int i = 0; i < 10; i++) {
        ops[i] = kernel(o, c, s1, 67e12 * 1e-5, 0, 66, 256, 0);
        ops[10 + i] = kernel(o, c, s2, 67e12 * 1e-5, 0, 66, 256, 0);
    }
    sim_gpu_advance(g, 30000);
    /* a process died mid-update: derived state is garbage */
    g->free_head = 7;
    g->nlive = 0;
    g->nactive_streams = 0;
    g->streams[s1].head = g->streams[s2].tail = SIM_NONE;
    memset(g->runs, 0xff, sizeof g->runs);
    g->nruns = UINT32_MAX;
    sim_gpu_rebuild(g);
    run_to_idle();
    for (int i = 0; i < 20; i++)
        CU_ASSERT_EQUAL(g->ops[ops[i]].state, SIM_OP_DONE);
    for (int i = 1; i < 10; i++)
        CU_ASSERT(g->ops[ops[i]].start_ns >= g->ops[ops[i - 1]].end_ns);
    int reaped = 0;
    int64_t last = -1;
    for (int i; (i = sim_gpu_reap(g, o)) != SIM_NONE; reaped++) {
        CU_ASSERT(g->ops[i].end_ns >= last);
        last = g->ops[i].end_ns;
        sim_gpu_op_free(g, i);
    }
    CU_ASSERT_EQUAL(reaped, 20);
    CU_ASSERT_EQUAL(g->nfree, SIM_MAX_OPS);
}

/* The runs cover the SMs in order, neighbours hold different things, and every running
 * kernel's SMs and blocks add up over the runs that hold it. */
static void check_runs(void)
{
    uint32_t next = 0;
    for (uint32_t r = 0; r < g->nruns; r++) {
        const struct sim_sm *sm = &g->runs[r].sm;
        CU_ASSERT_EQUAL(g->runs[r].first, next);
        CU_ASSERT(g->runs[r].count > 0);
        next += g->runs[r].count;
        if (r > 0) {
            const struct sim_sm *pr = &g->runs[r - 1].sm;
            int same = pr->nres == sm->nres;
            for (uint32_t k = 0; same && k < sm->nres; k++)
                same = pr->res[k].op == sm->res[k].op && pr->res[k].blocks == sm->res[k].blocks;
            CU_ASSERT(!same);
        }
    }
    CU_ASSERT_EQUAL(next, g->p.num_sms);
    for (uint32_t k = 0; k < g->nlive; k++) {
        const struct sim_op *op = &g->ops[g->live[k]];
        uint32_t sms = 0, blocks = 0;
        for (uint32_t r = 0; r < g->nruns; r++)
            for (uint32_t s = 0; s < g->runs[r].sm.nres; s++)
                if (g->runs[r].sm.res[s].op == g->live[k]) {
                    sms += g->runs[r].count;
                    blocks += g->runs[r].count * g->runs[r].sm.res[s].blocks;
                }
        CU_ASSERT_EQUAL(sms, op->res_sms);
        CU_ASSERT_EQUAL(blocks, op->res_blocks);
    }
}

static void test_sm_runs_bookkeeping(void)
{
    setup("h200", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o);
    int st[3];
    for (int i = 0; i < 3; i++)
        st[i] = sim_gpu_stream_add(g, o, c, 0);
    /* odd grids and shapes, so that kernels take part of the device, part of an SM's room,
     * and grow onto SMs as others leave */
    static const uint32_t blocks[] = {25, 98, 392, 7, 1568, 133, 50};
    static const uint32_t threads[] = {64, 256, 128, 256, 256, 96, 1024};
    static const uint32_t smem[] = {16384, 32768, 0, 32768, 0, 100000, 0};
    for (int i = 0; i < 42; i++) {
        int op = sim_gpu_op_alloc(g, o);
        CU_ASSERT_FATAL(op >= 0);
        struct sim_op *x = &g->ops[op];
        x->kind = SIM_OP_KERNEL;
        x->ctx = (int16_t)c;
        x->stream = st[i % 3];
        x->flops = 67e12 * 1e-5 * (1 + i % 5);
        x->blocks = blocks[i % 7];
        x->threads = threads[i % 7];
        x->smem = smem[i % 7];
        sim_gpu_submit(g, op, 0);
    }
    uint32_t most = 0;
    for (int i = 0; i < 100000; i++) {
        int64_t t = sim_gpu_next_event(g);
        if (t == INT64_MAX)
            break;
        sim_gpu_advance(g, t);
        check_runs();
        most = g->nruns > most ? g->nruns : most;
    }
    CU_ASSERT_EQUAL(g->stats.kernels_done, 42);
    CU_ASSERT(most > 2);
    CU_ASSERT_EQUAL(g->nruns, 1);
}

static void test_owner_quota(void)
{
    setup("h200", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g);
    int n = 0;
    while (sim_gpu_op_alloc(g, o) >= 0)
        n++;
    CU_ASSERT_EQUAL(n, SIM_OWNER_MAX_OPS);
    CU_ASSERT_EQUAL(sim_gpu_op_alloc(g, o), -EAGAIN);
}

/* ---- SM shares (MPS's active thread percentage) ---------------------------------------- */

/* SMs that hold a block of a kernel of context CTX now. */
static uint32_t sms_of_ctx(int ctx)
{
    uint32_t n = 0;
    for (uint32_t r = 0; r < g->nruns; r++) {
        const struct sim_sm *sm = &g->runs[r].sm;
        int holds = 0;
        for (uint32_t k = 0; k < sm->nres; k++)
            holds |= g->ops[sm->res[k].op].ctx == ctx;
        n += holds ? g->runs[r].count : 0;
    }
    return n;
}

/* Advances event by event until op K runs (or nothing is left to do). */
static void run_until_running(int k)
{
    for (int i = 0; i < 1000 && g->ops[k].state != SIM_OP_RUNNING; i++) {
        int64_t t = sim_gpu_next_event(g);
        if (t == INT64_MAX)
            break;
        sim_gpu_advance(g, t);
    }
}

static void test_share_percent_to_sms(void)
{
    CU_ASSERT_EQUAL(sim_gpu_sms_of_share(68, 25), 17);  /* exact */
    CU_ASSERT_EQUAL(sim_gpu_sms_of_share(132, 50), 66); /* exact */
    CU_ASSERT_EQUAL(sim_gpu_sms_of_share(6, 33), 2);    /* 1.98 up */
    CU_ASSERT_EQUAL(sim_gpu_sms_of_share(6, 1), 1);     /* never none */
    CU_ASSERT_EQUAL(sim_gpu_sms_of_share(68, 100), 68);
    CU_ASSERT_EQUAL(sim_gpu_sms_of_share(68, 10.5), 8); /* 7.14 up */
}

/* A context limited to 25% of an rtx3080's 68 SMs runs its big compute-bound kernel on 17 SMs
 * and takes 68/17 = 4x its unlimited time, though 51 SMs stay idle. */
static void test_mps_share_limits_a_contexts_kernel_to_its_sms(void)
{
    setup("rtx3080", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o), s = sim_gpu_stream_add(g, o, c, 0);
    uint32_t cap = sim_gpu_sms_of_share(g->p.num_sms, 25);
    sim_gpu_ctx_limit_sms(g, c, cap);
    double flops = g->p.fp32_flops * 1e-3; /* 1 ms on the whole device */
    int k = kernel(o, c, s, flops, 0, 680, 256, 0);
    run_until_running(k);
    CU_ASSERT_EQUAL(g->ops[k].res_sms, cap);
    CU_ASSERT_EQUAL(sms_of_ctx(c), cap);
    run_to_idle();
    double took = (double)g->ops[k].end_ns - lat_ns();
    CU_ASSERT_DOUBLE_EQUAL(took / 1e6, (double)g->p.num_sms / cap, 0.01);
}

/* Beside that limited context, another context's big kernel gets the other SMs at once (it
 * starts when the first does, on the 51 SMs left), and each runs at its share of the device. */
static void test_mps_share_leaves_the_other_sms_to_other_contexts(void)
{
    setup("rtx3080", SIM_MODE_MPS);
    int o1 = sim_gpu_owner_add(g), o2 = sim_gpu_owner_add(g);
    int c1 = sim_gpu_ctx_add(g, o1), c2 = sim_gpu_ctx_add(g, o2);
    int s1 = sim_gpu_stream_add(g, o1, c1, 0), s2 = sim_gpu_stream_add(g, o2, c2, 0);
    uint32_t cap = sim_gpu_sms_of_share(g->p.num_sms, 25);
    sim_gpu_ctx_limit_sms(g, c1, cap);
    double flops = g->p.fp32_flops * 1e-3;
    /* 6 blocks of 256 threads fill an SM (1536 threads): the limited kernel fills its 17 */
    int a = kernel(o1, c1, s1, flops, 0, 680, 256, 0);
    int b = kernel(o2, c2, s2, flops, 0, 680, 256, 0);
    run_until_running(a);
    CU_ASSERT_EQUAL(g->ops[a].state, SIM_OP_RUNNING);
    CU_ASSERT_EQUAL(g->ops[b].state, SIM_OP_RUNNING);
    CU_ASSERT_EQUAL(g->ops[a].start_ns, g->ops[b].start_ns);
    CU_ASSERT_EQUAL(g->ops[a].res_sms, cap);
    CU_ASSERT_EQUAL(g->ops[b].res_sms, g->p.num_sms - cap);
    run_to_idle();
    double ta = (double)g->ops[a].end_ns - lat_ns(), tb = (double)g->ops[b].end_ns - lat_ns();
    CU_ASSERT_DOUBLE_EQUAL(ta / 1e6, (double)g->p.num_sms / cap, 0.02);
    /* b runs on 51 SMs while a runs, then grows onto a's SMs: under 68/51 of its solo time */
    CU_ASSERT(tb / 1e6 < (double)g->p.num_sms / (g->p.num_sms - cap) + 0.01);
    CU_ASSERT(tb / 1e6 > 1.0);
}

/* The limit is the context's, not each kernel's: two small kernels of a limited context on
 * two streams share its 17 SMs rather than spread onto 34 idle ones. */
static void test_mps_share_counts_every_kernel_of_the_context(void)
{
    setup("rtx3080", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o);
    int s1 = sim_gpu_stream_add(g, o, c, 0), s2 = sim_gpu_stream_add(g, o, c, 0);
    uint32_t cap = sim_gpu_sms_of_share(g->p.num_sms, 25);
    sim_gpu_ctx_limit_sms(g, c, cap);
    double flops = g->p.fp32_flops * 1e-4;
    int a = kernel(o, c, s1, flops, 0, cap, 256, 0);
    int b = kernel(o, c, s2, flops, 0, cap, 256, 0);
    run_until_running(b);
    CU_ASSERT_EQUAL(g->ops[a].state, SIM_OP_RUNNING);
    CU_ASSERT_EQUAL(g->ops[b].state, SIM_OP_RUNNING);
    CU_ASSERT_EQUAL(sms_of_ctx(c), cap);
    uint32_t most = 0;
    for (int i = 0; i < 100000; i++) {
        int64_t t = sim_gpu_next_event(g);
        if (t == INT64_MAX)
            break;
        sim_gpu_advance(g, t);
        uint32_t n = sms_of_ctx(c);
        most = n > most ? n : most;
    }
    CU_ASSERT(most <= cap);
    CU_ASSERT_EQUAL(g->stats.kernels_done, 2);
}

/* A limited context's grid crowds onto its SMs as far as they hold it (the block scheduler
 * dispatches what fits), rather than one block per SM with the rest waiting: 68 blocks of 256
 * threads sit 4 to an SM on its 17. */
static void test_mps_share_crowds_blocks_onto_its_sms(void)
{
    setup("rtx3080", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o), s = sim_gpu_stream_add(g, o, c, 0);
    uint32_t cap = sim_gpu_sms_of_share(g->p.num_sms, 25);
    sim_gpu_ctx_limit_sms(g, c, cap);
    int k = kernel(o, c, s, g->p.fp32_flops * 1e-4, 0, g->p.num_sms, 256, 0);
    run_until_running(k);
    CU_ASSERT_EQUAL(g->ops[k].res_sms, cap);
    CU_ASSERT_EQUAL(g->ops[k].res_blocks, g->p.num_sms);
}

/* An unlimited context (0, or 100%) uses the whole device as before. */
static void test_mps_full_share_is_no_limit(void)
{
    setup("rtx3080", SIM_MODE_MPS);
    int o = sim_gpu_owner_add(g), c = sim_gpu_ctx_add(g, o), s = sim_gpu_stream_add(g, o, c, 0);
    sim_gpu_ctx_limit_sms(g, c, sim_gpu_sms_of_share(g->p.num_sms, 100));
    int k = kernel(o, c, s, g->p.fp32_flops * 1e-3, 0, 680, 256, 0);
    run_until_running(k);
    CU_ASSERT_EQUAL(g->ops[k].res_sms, g->p.num_sms);
    run_to_idle();
    CU_ASSERT_DOUBLE_EQUAL(((double)g->ops[k].end_ns - lat_ns()) / 1e6, 1.0, 0.001);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("gpu_model", NULL, NULL);
    POS_ADD_TEST(s, test_solo_compute_bound);
    POS_ADD_TEST(s, test_solo_partial_grid);
    POS_ADD_TEST(s, test_solo_memory_bound_and_fp16);
    POS_ADD_TEST(s, test_mps_two_full_device_kernels_take_twice);
    POS_ADD_TEST(s, test_mps_full_occupancy_kernels_serialise);
    POS_ADD_TEST(s, test_mps_four_quarter_kernels_overlap);
    POS_ADD_TEST(s, test_mps_compute_beside_memory_bound);
    POS_ADD_TEST(s, test_mps_two_memory_bound_share_dram);
    POS_ADD_TEST(s, test_mps_small_kernel_beside_big_one);
    POS_ADD_TEST(s, test_stream_order_and_streams_overlap);
    POS_ADD_TEST(s, test_timeslice_two_contexts_half_rate);
    POS_ADD_TEST(s, test_timeslice_contexts_never_overlap);
    POS_ADD_TEST(s, test_dependency_across_streams);
    POS_ADD_TEST(s, test_host_op_blocks_stream);
    POS_ADD_TEST(s, test_copy_engines);
    POS_ADD_TEST(s, test_priority_admitted_first);
    POS_ADD_TEST(s, test_owner_remove_frees_device);
    POS_ADD_TEST(s, test_rebuild_after_torn_update);
    POS_ADD_TEST(s, test_sm_runs_bookkeeping);
    POS_ADD_TEST(s, test_owner_quota);
    POS_ADD_TEST(s, test_share_percent_to_sms);
    POS_ADD_TEST(s, test_mps_share_limits_a_contexts_kernel_to_its_sms);
    POS_ADD_TEST(s, test_mps_share_leaves_the_other_sms_to_other_contexts);
    POS_ADD_TEST(s, test_mps_share_counts_every_kernel_of_the_context);
    POS_ADD_TEST(s, test_mps_share_crowds_blocks_onto_its_sms);
    POS_ADD_TEST(s, test_mps_full_share_is_no_limit);
}
