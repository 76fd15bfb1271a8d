/* The engine: posd's adapter between its clients' shared memory and the scheduling core
 * (sched/core.h). It reads each client's submission ring, synchronisation reports and
 * completion channel (every value read once into a local copy, every index bounded here),
 * hands them to the core, runs the core's decision, and publishes the grants, report rates
 * and kick requests (futex wake for waiting threads). Kernel names are names.c's, the STATS
 * and KERNELS replies stats.c's, the profiles' file profile_store.c's. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>

#include "pos/op_record.h"
#include "sched/cpu.h"
#include "sched/engine.h"
#include "sched/mem_ledger.h"
#include "sched/names.h"
#include "sched/profile_store.h"
#include "sched/telemetry.h"

static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int slot_of(const struct posd *d, const struct posd_client *c)
{
    return (int)(c - d->clients);
}

void posd_engine_params(const struct posd_config *cfg, struct sched_params *p)
{
    sched_params_defaults(p);
    p->tick_ns = (int64_t)cfg->tick_us * 1000;
    p->guard_period_ns = (int64_t)(cfg->guard_period_ms * 1e6);
    p->stall_ns = (int64_t)(cfg->stall_ms * 1e6);
    p->credits = cfg->credits;
    p->window_ns = (int64_t)(cfg->window_us * 1e3);
    p->idle_grace_ns = (int64_t)(cfg->idle_grace_us * 1e3);
    p->profile_min = cfg->profile_min;
    p->cpu_hold_ns = (int64_t)(cfg->cpu_hold_ms * 1e6);
}

int posd_engine_init(struct posd *d)
{
    struct sched_params p;
    posd_engine_params(&d->cfg, &p);
    d->device.index = 0;
    struct pos_policy_args args;
    d->policy_files = posd_policy_args(&d->cfg, &d->device, d->policy, &args);
    d->core = sched_core_new(&p, &d->device, d->policy, &args, posd_now());
    if (!d->core || pos_prof_init(&d->prof, 0) < 0)
        return -ENOMEM;
    d->prof.user_max = d->cfg.profile_user_max; /* one user's kernels cannot take the table */
    posd_profiles_load(d);
    sched_core_set_profiles(d->core, &d->prof);
    d->prof_save_at = posd_now() + POSD_PROFILE_SAVE_NS;
    return 0;
}

static void client_conf(const struct posd_client *c, struct sched_client_conf *k)
{
    memset(k, 0, sizeof *k);
    k->id = c->id;
    k->uid = (uint32_t)c->ident.uid;
    k->priority = c->pol.priority;
    k->max_inflight = c->pol.max_inflight;
    k->min_share = c->pol.min_share;
    k->weight = c->pol.weight;
    k->slo_ms = c->pol.slo_ms;
    k->device = c->pol.device;
    k->cpu = c->pol.cpu;
}

int posd_engine_add(struct posd *d, struct posd_client *c)
{
    struct sched_client_conf k;
    client_conf(c, &k);
    return sched_core_client_add(d->core, slot_of(d, c), &k, posd_now());
}

void posd_engine_reconf(struct posd *d, struct posd_client *c)
{
    struct sched_client_conf k;
    client_conf(c, &k);
    sched_core_client_conf(d->core, slot_of(d, c), &k);
}

/* ---- reading the rings ------------------------------------------------------------------ */

static uint64_t kernel_key(const struct posd_client *c, uint32_t id)
{
    return id && id <= c->names.nkeys ? c->names.keys[id] : 0;
}

/* Reads new submissions into the core, up to seq UPTO at most. Returns 0, or -1 when the
 * client broke the protocol. */
static int drain_submissions(struct posd *d, struct posd_client *c, uint64_t upto, int64_t now)
{
    struct pos_client_shm *shm = c->shm;
    int slot = slot_of(d, c);
    uint64_t next = pos_sub_ring_tail(shm);
    if (next < c->rings.sub_head || next - c->rings.sub_head > (uint64_t)POS_SUB_RING * 2)
        return -1;
    if (next > upto)
        next = upto > c->rings.sub_head ? upto : c->rings.sub_head;
    while (c->rings.sub_head < next) {
        uint64_t seq = c->rings.sub_head + 1;
        uint64_t stamp = pos_sub_ring_stamp(shm, seq);
        if (stamp > seq && stamp - seq < (uint64_t)POS_SUB_RING)
            return -1; /* a stamp from the future: the ring was written out of turn */
        if (stamp != seq) {
            /* reserved but not yet published; a launching thread that died leaves a hole */
            if (c->rings.hole_seq != seq) {
                c->rings.hole_seq = seq;
                c->rings.hole_since = now;
                break;
            }
            if (now - c->rings.hole_since < POSD_HOLE_SKIP_NS)
                break;
            c->rings.skipped++;
            if (sched_core_skip(d->core, slot, seq, now) < 0)
                return -1;
        } else {
            struct pos_submission s = *pos_sub_ring_slot(shm, seq); /* every field read once */
            if (s.tid != c->tele.launch_tid) /* telemetry follows its launching threads */
                posd_telemetry_follow(c, s.tid);
            struct pos_sched_op op = {
                .seq = seq,
                .kernel_id = s.kernel_id,
                .key = kernel_key(c, s.kernel_id),
                .kind = s.kind,
                .grid = {s.grid[0], s.grid[1], s.grid[2]},
                .block = {s.block[0], s.block[1], s.block[2]},
                .smem = s.smem,
                .tid = s.tid,
                .stream = s.stream,
                .ctx = s.ctx,
                .ptsz = (s.flags & POS_SUBF_PTSZ) != 0,
                .submit_ns = (int64_t)s.submit_ns,
            };
            if (sched_core_submit(d->core, slot, &op, (s.flags & POS_SUBF_FREE) != 0, now) < 0)
                return -1;
        }
        c->rings.sub_head = seq;
    }
    pos_sub_ring_consume(shm, c->rings.sub_head);
    return 0;
}

/* Where posd's reading of client C at NOW is (the source of pos_drain_ops). */
struct drain {
    struct posd *d;
    struct posd_client *c;
    int64_t now;
    struct pos_sync_rec sync; /* the report drain_sync_next found, read once */
};

static int drain_sync_next(void *arg, uint64_t *covers)
{
    struct drain *w = arg;
    struct posd_client *c = w->c;
    struct pos_client_shm *shm = c->shm;
    uint64_t next = pos_sync_ring_tail(shm);
    if (next < c->rings.sync_head || next - c->rings.sync_head > POS_SYNC_RING * 2)
        return -1;
    for (; c->rings.sync_head < next; c->rings.sync_head++) {
        const struct pos_sync_rec *r = pos_sync_ring_peek(shm, c->rings.sync_head);
        if (r) {
            w->sync = *r;
            *covers = w->sync.covers;
            return 1;
        }
        /* being written, or dropped by a writer that found the ring full: skipped after
         * POSD_HOLE_SKIP_NS */
        if (c->rings.sync_hole_idx != c->rings.sync_head + 1) {
            c->rings.sync_hole_idx = c->rings.sync_head + 1;
            c->rings.sync_hole_since = w->now;
            break;
        }
        if (w->now - c->rings.sync_hole_since < POSD_HOLE_SKIP_NS)
            break;
    }
    pos_sync_ring_consume(shm, c->rings.sync_head);
    return 0;
}

static int drain_subs(void *arg, uint64_t upto)
{
    struct drain *w = arg;
    return drain_submissions(w->d, w->c, upto, w->now);
}

static int drain_sync(void *arg)
{
    struct drain *w = arg;
    struct posd_client *c = w->c;
    if (c->rings.sub_head < w->sync.covers && w->sync.covers <= pos_sub_ring_tail(c->shm))
        return 0; /* a submission it covers is still being written: next time */
    struct sched_sync s = {
        .scope = w->sync.scope,
        .tid = w->sync.tid,
        .ptsz = w->sync.ptsz != 0,
        .stream = w->sync.stream,
        .ctx = w->sync.ctx,
        .covers = w->sync.covers,
        .end_ns = (int64_t)w->sync.end_ns,
    };
    if (sched_core_sync(w->d->core, slot_of(w->d, c), &s, w->now) < 0)
        return -1;
    pos_sync_ring_consume(c->shm, ++c->rings.sync_head);
    return 1;
}

static int drain_completions(void *arg);

static const struct pos_drain_ops drain_ops = {
    .sync_next = drain_sync_next,
    .submissions = drain_subs,
    .sync = drain_sync,
    .completions = drain_completions,
};

static int drain_completions(void *arg)
{
    struct drain *w = arg;
    struct posd_client *c = w->c;
    struct pos_client_shm *shm = c->shm;
    uint64_t tail = pos_done_ring_tail(shm);
    if (tail < c->rings.done_head || tail - c->rings.done_head > POS_DONE_RING)
        return -1;
    while (c->rings.done_head < tail) {
        const struct pos_completion_rec *r = pos_done_ring_peek(shm, c->rings.done_head);
        if (!r)
            break;
        uint64_t seq = r->seq; /* read once */
        uint64_t when = r->complete_ns;
        uint64_t call = r->call_ns;
        uint32_t how = r->how;
        if (seq > c->rings.sub_head) {
            /* A windowed client launches and completes without waiting for posd: its
             * submission may have been published after posd read the ring. Read it again;
             * one still being written is looked at again soon; one never reserved is a lie. */
            if (pos_drain_syncs(&drain_ops, w) < 0)
                return -1;
            if (seq > c->rings.sub_head) {
                if (seq > pos_sub_ring_tail(shm))
                    return -1;
                w->d->recheck = 1;
                break;
            }
        }
        if (sched_core_complete(w->d->core, slot_of(w->d, c), seq, (int64_t)when,
                                sched_done_of(how), (int64_t)call, w->now) < 0)
            return -1;
        c->rings.done_head++;
    }
    pos_done_ring_consume(shm, c->rings.done_head);
    return 0;
}

/* Reads everything C wrote since the last look (pos_drain). Returns 0 or -1 (protocol
 * broken). */
static int drain_client(struct posd *d, struct posd_client *c, int64_t now)
{
    struct drain w = {.d = d, .c = c, .now = now};
    if (pos_drain(&drain_ops, &w) < 0)
        return -1;
    sched_core_waiters(d->core, slot_of(d, c),
                       atomic_load_explicit(&c->shm->waiters, memory_order_relaxed));
    return 0;
}

/* ---- publishing ------------------------------------------------------------------------- */

/* Publishes decision G to C (pos_publish): a heartbeat at every decision, and what changed. */
static void publish(struct posd_client *c, const struct sched_grant *g)
{
    struct pos_client_shm *shm = c->shm;
    atomic_store_explicit(&shm->heartbeat, atomic_load(&shm->heartbeat) + 1, memory_order_relaxed);
    struct pos_published next = {.mode = g->mode,
                                 .window = g->window,
                                 .granted = g->granted,
                                 .sample = g->sample,
                                 .kick_on_done = (uint32_t)g->kick_on_done};
    unsigned what = pos_publish(&c->rings.pub, next, g->changed);
    pos_shm_publish(shm, &c->rings.pub, what);
    if ((what & POS_PUB_GRANT) && atomic_load_explicit(&shm->waiters, memory_order_acquire) > 0)
        futex_wake_all(&shm->grant_word);
}

int posd_engine_read(struct posd *d, int64_t now, struct posd_client **bad)
{
    int nbad = 0;
    d->recheck = 0;
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (!c->used || !c->registered)
            continue;
        if (drain_client(d, c, now) < 0) {
            bad[nbad++] = c;
            continue;
        }
        uint64_t mem_used, mem_limit;
        posd_mem_read_device(c, &mem_used, &mem_limit);
        sched_core_client_mem(d->core, i, mem_used, mem_limit);
    }
    return nbad;
}

int64_t posd_engine_decide(struct posd *d, int64_t now)
{
    int64_t next = sched_core_decide(d->core, now, d->grants);
    posd_log_policy_note(d);
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (c->used && c->registered) {
            publish(c, &d->grants[i]);
            posd_cpu_apply(d, c, d->grants[i].cpu_low, now);
        }
    }
    if (d->recheck && next - now > POSD_RECHECK_NS)
        next = now + POSD_RECHECK_NS;
    if (next == INT64_MAX)
        return -1;
    return next > now ? next - now : 0;
}

void posd_engine_remove(struct posd *d, struct posd_client *c)
{
    if (!c->shm)
        return;
    int64_t now = posd_now();
    drain_client(d, c, now); /* its last completions count */
    sched_core_client_remove(d->core, slot_of(d, c), now);
    posd_names_forget(c);
}

void posd_engine_release(struct posd_client *c)
{
    if (!c->shm)
        return;
    atomic_store(&c->shm->posd_state, POS_POSD_GONE);
    atomic_fetch_add(&c->shm->grant_word, 1);
    futex_wake_all(&c->shm->grant_word);
}

