/* libFuzzer target: posd's reading of client-written shared memory (sched/engine.c) with the
 * scheduling core behind it. Two clients share a core; the input is a program of steps, each
 * an opcode byte (its high bit picks the client) and its operands:
 *   0 write up to 16 raw bytes anywhere in the region (a client can write all of it)
 *   1 posd ticks (reads every ring, decides, publishes)
 *   2 publish 1..8 well-formed submissions, fields from the input
 *   3 reserve a submission seq without publishing it (a thread that died mid-launch)
 *   4 write a completion record (seq relative to the client's next_seq)
 *   5 write a synchronisation report (covers relative to next_seq)
 *   6 set waiters; 7 a STATS reply; 8 the clock moves (up to ~0.26 s: the stall paths)
 *   9 a reload (policy settings re-applied); at most 1024 steps an input
 * posd's clock is this file's (posd_now), so a run is reproducible. Checks that a grant never
 * goes back while a client stays, and that a client posd disconnects is one that broke the
 * protocol (the engine says so: nothing else closes it here). */
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sched/engine.h"
#include "sched/stats.h"
#include "tests/engine_outside.h"

static struct posd D;
static int64_t now_ns = 1000000000LL;
static struct pos_client_shm *shm_of[2];
static uint64_t granted_seen[2];
/* what an input wrote beyond the counters, zeroed after it (a full memset of two 1 MiB
 * regions would cost more than the rest of a run) */
#define MAX_DIRTY 8192
static struct {
    size_t off, len;
} dirty_at[2][MAX_DIRTY];
static int ndirty[2], all_dirty[2] = {1, 1};

static void dirty(int i, const void *p, size_t len)
{
    if (ndirty[i] == MAX_DIRTY) {
        all_dirty[i] = 1;
        return;
    }
    dirty_at[i][ndirty[i]].off = (size_t)((const uint8_t *)p - (const uint8_t *)shm_of[i]);
    dirty_at[i][ndirty[i]++].len = len;
}

/* Zeroes what the last input wrote: the rings' records it touched, and the fields outside
 * the rings, which both sides write. */
static void clean(int i)
{
    struct pos_client_shm *s = shm_of[i];
    uint8_t *b = (uint8_t *)s;
    if (all_dirty[i]) {
        memset(s, 0, sizeof *s);
    } else {
        for (int k = 0; k < ndirty[i]; k++)
            memset(b + dirty_at[i][k].off, 0, dirty_at[i][k].len);
        memset(b, 0, offsetof(struct pos_client_shm, sub));
        memset(b + offsetof(struct pos_client_shm, sync_next), 0,
               offsetof(struct pos_client_shm, sync_ring) -
                   offsetof(struct pos_client_shm, sync_next));
        memset(b + offsetof(struct pos_client_shm, done_tail), 0,
               offsetof(struct pos_client_shm, done) - offsetof(struct pos_client_shm, done_tail));
    }
    ndirty[i] = all_dirty[i] = 0;
}

int64_t posd_now(void)
{
    return now_ns;
}

/* What posd_client_close does of the engine's: a client the engine gave back, or one left at
 * the end of a run. */
static void drop(struct posd_client *c)
{
    posd_engine_remove(&D, c);
    c->registered = 0;
    c->used = 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    posd_set_log_level(POSD_LOG_ERROR);
    posd_config_defaults(&D.cfg);
    D.policy = pos_policy_find(D.cfg.policy);
    D.state_fd = -1; /* no state directory: nothing loaded or saved */
    assert(D.policy && posd_engine_init(&D) == 0);
    for (int i = 0; i < 2; i++)
        shm_of[i] = aligned_alloc(4096, (sizeof(struct pos_client_shm) + 4095) & ~(size_t)4095);
    return 0;
}

static void attach(int i)
{
    struct posd_client *c = &D.clients[i];
    /* a fresh region: zero what a previous input can have touched */
    struct pos_client_shm *s = shm_of[i];
    clean(i);
    memset(c, 0, sizeof *c);
    c->used = c->registered = 1;
    c->id = (uint32_t)++D.next_client_id;
    c->sock = c->kick_fd = -1;
    c->shm = s;
    c->shm_size = sizeof *s;
    c->pol.priority = i * 10;
    s->magic = POS_SHM_MAGIC;
    s->version = POS_SHM_VERSION;
    atomic_store(&s->grant_mode, POS_GRANT_WINDOW);
    granted_seen[i] = 0;
    assert(posd_engine_add(&D, c) == 0);
}

struct input {
    const uint8_t *p;
    size_t n;
};

static uint64_t take(struct input *in, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes && in->n; i++, in->p++, in->n--)
        v |= (uint64_t)*in->p << (8 * i);
    return v;
}

static void tick(void)
{
    struct posd_client *bad[POSD_MAX_CLIENTS];
    int nbad = posd_engine_read(&D, now_ns, bad);
    for (int i = 0; i < nbad; i++)
        drop(bad[i]);
    posd_engine_decide(&D, now_ns);
    for (int i = 0; i < 2; i++) {
        if (!D.clients[i].registered)
            continue;
        assert(D.grants[i].granted >= granted_seen[i]); /* a grant never goes back */
        granted_seen[i] = D.grants[i].granted;
    }
}

static void step(struct input *in)
{
    uint8_t op = (uint8_t)take(in, 1);
    int i = op >> 7;
    struct posd_client *c = &D.clients[i];
    struct pos_client_shm *s = shm_of[i];
    switch ((op & 0x7f) % 10) {
    case 0: {
        size_t off = take(in, 3) % sizeof *s, n = take(in, 1) % 17;
        dirty(i, (uint8_t *)s + off, off + n <= sizeof *s ? n : sizeof *s - off);
        for (size_t k = 0; k < n && off + k < sizeof *s; k++)
            ((uint8_t *)s)[off + k] = (uint8_t)take(in, 1);
        break;
    }
    case 1:
        tick();
        break;
    case 2: {
        int n = 1 + (int)(take(in, 1) % 8);
        for (int k = 0; k < n; k++) {
            uint64_t seq = atomic_load(&s->next_seq) + 1;
            struct pos_submission *sub = &s->sub[seq % POS_SUB_RING];
            dirty(i, sub, sizeof *sub);
            sub->seq = seq;
            sub->kernel_id = (uint32_t)take(in, 1);
            sub->kind = (uint16_t)take(in, 1);
            sub->flags = (uint16_t)take(in, 1);
            sub->grid[0] = (uint32_t)take(in, 2);
            sub->block[0] = (uint32_t)take(in, 2);
            sub->tid = (uint32_t)take(in, 1);
            sub->stream = take(in, 1);
            sub->ctx = take(in, 1);
            sub->submit_ns = (uint64_t)now_ns - take(in, 2);
            atomic_store(&s->next_seq, seq);
            atomic_store(&sub->stamp, seq);
        }
        break;
    }
    case 3:
        atomic_fetch_add(&s->next_seq, 1);
        break;
    case 4: {
        uint64_t t = atomic_load(&s->done_tail);
        struct pos_completion_rec *r = &s->done[t % POS_DONE_RING];
        dirty(i, r, sizeof *r);
        r->seq = atomic_load(&s->next_seq) - take(in, 1) + 2;
        r->complete_ns = (uint64_t)now_ns - take(in, 2);
        r->how = (uint32_t)take(in, 1) % 4;
        atomic_store(&r->stamp, t + 1);
        atomic_store(&s->done_tail, t + 1);
        break;
    }
    case 5: {
        uint64_t t = atomic_load(&s->sync_next);
        struct pos_sync_rec *r = &s->sync_ring[t % POS_SYNC_RING];
        dirty(i, r, sizeof *r);
        r->scope = (uint32_t)take(in, 1) % 4;
        r->tid = (uint32_t)take(in, 1);
        r->ptsz = (uint32_t)take(in, 1) & 1;
        r->stream = take(in, 1);
        r->ctx = take(in, 1);
        r->covers = atomic_load(&s->next_seq) - take(in, 1) + 2;
        r->end_ns = (uint64_t)now_ns - take(in, 2);
        atomic_store(&r->stamp, t + 1);
        atomic_store(&s->sync_next, t + 1);
        break;
    }
    case 6:
        atomic_store(&s->waiters, (uint32_t)take(in, 1));
        break;
    case 7: {
        static uint8_t buf[POS_MSG_MAX];
        posd_stats_clients(&D, buf, sizeof buf, (int)take(in, 1) & 1, 0);
        break;
    }
    case 8:
        now_ns += (int64_t)take(in, 1) << 20;
        break;
    case 9:
        if (c->registered) {
            c->pol.max_inflight = (uint32_t)take(in, 1);
            c->pol.priority = (int)take(in, 1) % 40;
            posd_engine_reconf(&D, c);
        }
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int i = 0; i < 2; i++)
        attach(i);
    struct input in = {data, size};
    for (int steps = 0; in.n && steps < 1024; steps++)
        step(&in);
    tick();
    for (int i = 0; i < 2; i++)
        if (D.clients[i].registered)
            drop(&D.clients[i]);
    now_ns += 1000000000LL;
    return 0;
}
