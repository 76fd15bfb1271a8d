/* Tests of posd's engine (sched/engine.c) over one client's shared memory, written as the shim
 * writes it (the ring accessors of include/pos/client_shm.h), with the scheduling core behind
 * it: a posd that looks late still tells every request apart (the reports are read in
 * pos_drain's order), the collector's completions reach the core, and each decision is
 * published as pos_publish says. posd's clock is this file's: every run is the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/engine.h"
#include "tests/cunit_main.h"
#include "tests/engine_outside.h"

static struct posd D;
static int64_t now_ns = 1000000000LL;
static struct pos_client_shm *shm;

int64_t posd_now(void)
{
    return now_ns;
}

/* posd's decision as posd_clients_tick takes it, at this file's clock: a client that keeps
 * to the protocol is never among those the engine gives back to be closed */
static void engine_tick(void)
{
    struct posd_client *bad[POSD_MAX_CLIENTS];
    CU_ASSERT_EQUAL(posd_engine_read(&D, now_ns, bad), 0);
    posd_engine_decide(&D, now_ns);
}

static int suite_init(void)
{
    posd_set_log_level(POSD_LOG_ERROR);
    posd_config_defaults(&D.cfg);
    D.policy = pos_policy_find("priority");
    D.state_fd = -1; /* no state directory: nothing loaded or saved */
    shm = calloc(1, sizeof *shm);
    return D.policy && shm && posd_engine_init(&D) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    free(shm);
    return 0;
}

/* A fresh client in slot 0, its shared memory as posd's registration leaves it. */
static struct posd_client *attach(void)
{
    struct posd_client *c = &D.clients[0];
    if (c->used)
        posd_engine_remove(&D, c);
    memset(c, 0, sizeof *c);
    memset(shm, 0, sizeof *shm);
    c->used = c->registered = 1;
    c->id = (uint32_t)++D.next_client_id;
    c->sock = c->kick_fd = -1;
    c->shm = shm;
    c->shm_size = sizeof *shm;
    shm->magic = POS_SHM_MAGIC;
    shm->version = POS_SHM_VERSION;
    c->rings.pub = pos_published_init();
    pos_shm_publish(shm, &c->rings.pub, POS_PUB_ALL);
    CU_ASSERT_FATAL(posd_engine_add(&D, c) == 0);
    return c;
}

/* One launch on stream 0x10, submitted as shim_session_submit does (free: it goes at once). */
static uint64_t launch(void)
{
    uint64_t seq = pos_sub_ring_reserve(shm);
    CU_ASSERT_FATAL(pos_sub_ring_room(shm, seq));
    struct pos_submission *s = pos_sub_ring_slot(shm, seq);
    s->seq = seq;
    s->kind = POS_OP_KERNEL;
    s->flags = POS_SUBF_FREE;
    s->grid[0] = s->grid[1] = s->grid[2] = 1;
    s->block[0] = 32, s->block[1] = s->block[2] = 1;
    s->tid = 1;
    s->stream = 0x10;
    s->ctx = 0x20;
    s->submit_ns = (uint64_t)now_ns;
    pos_sub_ring_publish(s, seq);
    now_ns += 1000;
    return seq;
}

/* A synchronisation of stream 0x10 that returned now, covering every launch so far. */
static void synchronise(void)
{
    struct pos_sync_rec r = {.scope = POS_SYNC_STREAM,
                             .tid = 1,
                             .stream = 0x10,
                             .ctx = 0x20,
                             .covers = pos_sub_ring_tail(shm),
                             .end_ns = (uint64_t)now_ns};
    CU_ASSERT_EQUAL(pos_sync_ring_push(shm, &r), 0);
    now_ns += 1000;
}

static struct sched_client_stats stats(void)
{
    struct sched_client_stats k;
    sched_core_client_stats(D.core, 0, now_ns, &k);
    return k;
}

/* Three requests written before posd looks once: each synchronisation is read after the
 * submissions it covers and before the later ones, so the core ends three requests, not one
 * that swallowed them all. */
static void test_a_late_posd_tells_every_request_apart(void)
{
    attach();
    engine_tick();
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 4; i++)
            launch();
        synchronise();
    }
    engine_tick();
    struct sched_client_stats k = stats();
    CU_ASSERT_EQUAL(k.submitted, 12);
    CU_ASSERT_EQUAL(k.completed, 12);
    CU_ASSERT_EQUAL(k.requests, 3);
    CU_ASSERT_EQUAL(k.sync_lag_n, 3); /* the core counts each report's lag */
    CU_ASSERT_EQUAL(atomic_load(&shm->sub_head), 12);
    CU_ASSERT_EQUAL(atomic_load(&shm->sync_head), 3);
}

/* Completions the collector pushes reach the core, each at the time it gives, and free their
 * slots. */
static void test_the_collectors_completions_reach_the_core(void)
{
    attach();
    engine_tick();
    for (int i = 0; i < 5; i++)
        launch();
    for (uint64_t seq = 1; seq <= 5; seq++)
        CU_ASSERT_EQUAL(pos_done_ring_push(shm, seq, (uint64_t)now_ns, 0, POS_DONE_MARKER, 0), 0);
    engine_tick();
    CU_ASSERT_EQUAL(stats().completed, 5);
    CU_ASSERT_EQUAL(stats().in_flight, 0);
    CU_ASSERT_EQUAL(atomic_load(&shm->done_head), 5);
}

/* Every decision reaches the shared memory as pos_publish says: the core's sample and kick
 * request at once, the grant with a new futex word when it changed, nothing else. */
static void test_each_decision_is_published(void)
{
    attach();
    uint32_t word = atomic_load(&shm->grant_word);
    engine_tick();
    const struct sched_grant *g = &D.grants[0];
    CU_ASSERT(g->changed);
    CU_ASSERT_EQUAL(g->sample, 1); /* a new client's first launches: a marker behind each */
    CU_ASSERT_EQUAL(atomic_load(&shm->sample), g->sample);
    CU_ASSERT_EQUAL(atomic_load(&shm->kick_on_done), (uint32_t)g->kick_on_done);
    CU_ASSERT_EQUAL(atomic_load(&shm->grant_mode), g->mode);
    CU_ASSERT_EQUAL(atomic_load(&shm->granted), g->granted);
    CU_ASSERT_EQUAL(atomic_load(&shm->grant_word), word + 1);
    engine_tick();
    CU_ASSERT(!D.grants[0].changed);
    CU_ASSERT_EQUAL(atomic_load(&shm->grant_word), word + 1);
    /* past them, the free rate: not what registration left, so it must be written */
    for (int i = 0; i < 256; i++)
        launch();
    engine_tick();
    CU_ASSERT_NOT_EQUAL(g->sample, 1);
    CU_ASSERT_EQUAL(atomic_load(&shm->sample), g->sample);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("engine", suite_init, suite_clean);
    POS_ADD_TEST(s, test_a_late_posd_tells_every_request_apart);
    POS_ADD_TEST(s, test_the_collectors_completions_reach_the_core);
    POS_ADD_TEST(s, test_each_decision_is_published);
}
