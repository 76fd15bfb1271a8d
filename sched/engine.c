/* The scheduling engine: reads every client's submission ring and completion channel (each
 * value read once into a local copy, every index derived and bounded here), keeps posd's own
 * account of what is submitted, launched, complete and busy, runs the policy over that view,
 * and publishes the grants (futex wake for waiting threads). Also the statistics reply. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sched/posd.h"

int64_t posd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static uint64_t umin(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* Accumulates busy time (operators in flight) since the last update. */
static void account_busy(struct posd_client *c, int64_t now)
{
    if (c->launched > c->completed && now > c->last_update) {
        c->busy_ns += (uint64_t)(now - c->last_update);
        c->served_ns += now - c->last_update;
    }
    c->last_update = now;
}

/* Reads new submissions. Returns 0, or -1 when the client broke the protocol. */
static int drain_submissions(struct posd_client *c, int64_t now)
{
    struct pos_client_shm *shm = c->shm;
    uint64_t next = atomic_load_explicit(&shm->next_seq, memory_order_acquire);
    if (next < c->sub_head || next - c->sub_head > (uint64_t)POS_SUB_RING * 2)
        return -1;
    while (c->sub_head < next) {
        uint64_t seq = c->sub_head + 1;
        struct pos_submission *slot = &shm->sub[seq % POS_SUB_RING];
        uint64_t stamp = atomic_load_explicit(&slot->stamp, memory_order_acquire);
        if (stamp > seq && stamp - seq < (uint64_t)POS_SUB_RING)
            return -1; /* a stamp from the future: the ring was written out of turn */
        if (stamp != seq) {
            /* reserved but not yet published; a launching thread that died leaves a hole */
            if (c->stall_seq != seq) {
                c->stall_seq = seq;
                c->stall_since = now;
                break;
            }
            if (now - c->stall_since < POSD_STALL_NS)
                break;
            c->skipped++;
            c->launched = c->launched < seq ? seq : c->launched;
            c->completed++;
        } else {
            uint16_t flags = slot->flags; /* read once */
            if (flags & POS_SUBF_FREE)
                c->launched = c->launched < seq ? seq : c->launched;
        }
        c->sub_head = seq;
        c->submitted = seq;
    }
    /* what was granted has been (or is being) launched */
    uint64_t by_grant = umin(c->submitted, c->granted);
    if (by_grant > c->launched)
        c->launched = by_grant;
    atomic_store_explicit(&shm->sub_head, c->sub_head, memory_order_release);
    return 0;
}

static int drain_completions(struct posd_client *c)
{
    struct pos_client_shm *shm = c->shm;
    uint64_t tail = atomic_load_explicit(&shm->done_tail, memory_order_acquire);
    if (tail < c->done_head || tail - c->done_head > POS_DONE_RING)
        return -1;
    while (c->done_head < tail) {
        struct pos_completion_rec *r = &shm->done[c->done_head % POS_DONE_RING];
        if (atomic_load_explicit(&r->stamp, memory_order_acquire) != c->done_head + 1)
            break;
        uint64_t seq = r->seq; /* read once; used only to bound the count */
        if (seq == 0 || seq > c->submitted)
            return -1;
        if (seq > c->launched)
            c->launched = seq; /* it ran, so it was launched */
        c->completed++;
        c->done_head++;
    }
    if (c->completed > c->launched)
        c->completed = c->launched;
    atomic_store_explicit(&shm->done_head, c->done_head, memory_order_release);
    return 0;
}

static void publish(struct posd_client *c, const struct pos_sched_client *v)
{
    struct pos_client_shm *shm = c->shm;
    int changed = v->new_granted != c->granted || v->mode != c->mode;
    c->granted = v->new_granted;
    c->mode = v->mode;
    c->held = v->held;
    atomic_store_explicit(&shm->heartbeat, atomic_load(&shm->heartbeat) + 1, memory_order_relaxed);
    if (!changed)
        return;
    /* the grant before the mode: a thread that sees WINDOW must see its grant */
    atomic_store_explicit(&shm->granted, c->granted, memory_order_release);
    atomic_store_explicit(&shm->grant_mode, c->mode, memory_order_release);
    atomic_fetch_add_explicit(&shm->grant_word, 1, memory_order_release);
    if (atomic_load_explicit(&shm->waiters, memory_order_acquire) > 0)
        futex_wake_all(&shm->grant_word);
}

static void fill_view(const struct posd_client *c, struct pos_sched_client *v)
{
    memset(v, 0, sizeof *v);
    v->id = c->id;
    v->priority = c->pol.priority;
    v->max_inflight = c->pol.max_inflight;
    v->min_share = c->pol.min_share;
    v->weight = c->pol.weight;
    v->slo_ms = c->pol.slo_ms;
    v->device = c->pol.device;
    v->submitted = c->submitted;
    v->launched = c->launched;
    v->completed = c->completed;
    v->granted = c->granted;
    v->waiting = (int)atomic_load_explicit(&c->shm->waiters, memory_order_relaxed);
    v->served_ns = c->served_ns;
}

int64_t posd_engine_tick(struct posd *d)
{
    int64_t now = posd_now();
    if (now - d->period_start >= (int64_t)(d->cfg.guard_period_ms * 1e6)) {
        d->period_start = now;
        for (int i = 0; i < POSD_MAX_CLIENTS; i++)
            d->clients[i].served_ns = 0;
    }
    size_t n = 0;
    int any_inflight = 0;
    struct posd_client *order[POSD_MAX_CLIENTS];
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (!c->used || !c->registered)
            continue;
        account_busy(c, now);
        if (drain_submissions(c, now) < 0 || drain_completions(c) < 0) {
            posd_client_close(d, c, "wrote out-of-range values into its shared memory");
            continue;
        }
        any_inflight |= c->launched > c->completed;
        fill_view(c, &d->view[n]);
        order[n++] = c;
    }
    if (any_inflight && now > d->last_update)
        d->dev_busy_ns += (uint64_t)(now - d->last_update);
    d->last_update = now;
    struct pos_sched_view view = {
        .now = now,
        .period_start = d->period_start,
        .guard_period_ns = (int64_t)(d->cfg.guard_period_ms * 1e6),
        .credits = d->cfg.credits,
        .clients = d->view,
        .nclients = n,
    };
    d->policy->decide(&view);
    int64_t next = -1;
    for (size_t k = 0; k < n; k++) {
        struct posd_client *c = order[k];
        struct pos_sched_client *v = &d->view[k];
        if (v->new_granted < c->granted)
            v->new_granted = c->granted; /* a grant is never taken back */
        publish(c, v);
        int waits = v->waiting > 0 || (v->held && pos_sched_queued(v) > 0);
        int windowed = v->mode == POS_GRANT_WINDOW && pos_sched_inflight(v) > 0;
        if (waits || windowed)
            next = (int64_t)d->cfg.tick_us * 1000;
        else if (next < 0 && (pos_sched_inflight(v) > 0 || v->submitted != c->sub_head))
            next = POSD_SLOW_TICK_NS;
        else if (next < 0 && now - c->connected_at < POSD_SLOW_TICK_NS)
            next = POSD_SLOW_TICK_NS;
    }
    return next;
}

void posd_engine_drain(struct posd_client *c)
{
    if (!c->shm)
        return;
    int64_t now = posd_now();
    account_busy(c, now);
    if (drain_submissions(c, now) == 0)
        drain_completions(c);
}

void posd_engine_release(struct posd_client *c)
{
    if (!c->shm)
        return;
    atomic_store(&c->shm->posd_state, POS_POSD_GONE);
    atomic_fetch_add(&c->shm->grant_word, 1);
    futex_wake_all(&c->shm->grant_word);
}

static void fill_client_stats(const struct posd_client *c, struct pos_client_stats *s, int64_t now)
{
    memset(s, 0, sizeof *s);
    s->client_id = c->id;
    s->pid = c->ident.pid;
    s->uid = c->ident.uid;
    s->gid = c->ident.gid;
    snprintf(s->app, sizeof s->app, "%s", c->ident.app);
    snprintf(s->class_name, sizeof s->class_name, "%s", c->pol.class_name);
    s->priority = c->pol.priority;
    s->flags = c->held ? POS_CLIENT_HELD : 0;
    s->submitted = c->submitted;
    s->granted = c->mode == POS_GRANT_FREE ? c->launched : umin(c->granted, c->submitted);
    s->completed = c->completed;
    s->in_flight = c->launched - c->completed;
    s->queued = c->submitted - c->launched;
    s->busy_ns = c->busy_ns;
    s->sync_ns = atomic_load_explicit(&c->shm->sync_ns, memory_order_relaxed);
    s->syncs = atomic_load_explicit(&c->shm->syncs, memory_order_relaxed);
    s->waits = atomic_load_explicit(&c->shm->waits, memory_order_relaxed);
    for (int b = 0; b < POS_WAIT_BUCKETS; b++)
        s->wait_hist[b] = atomic_load_explicit(&c->shm->wait_hist[b], memory_order_relaxed);
    s->connected_ns = (uint64_t)(now - c->connected_at);
}

size_t posd_engine_stats(struct posd *d, void *buf, size_t cap)
{
    struct pos_stats_reply *r = buf;
    int64_t now = posd_now();
    memset(r, 0, sizeof *r);
    r->dev.uptime_ns = (uint64_t)(now - d->started_at);
    snprintf(r->dev.policy, sizeof r->dev.policy, "%s", d->policy->name);
    r->dev.policy_len = (uint32_t)strlen(r->dev.policy);
    /* device totals cover the clients that have left too */
    r->dev.submitted = d->retired_submitted;
    r->dev.granted = d->retired_granted;
    r->dev.completed = d->retired_completed;
    size_t len = sizeof *r;
    struct pos_client_stats *cs = (struct pos_client_stats *)(r + 1);
    int any_inflight = 0;
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (!c->used || !c->registered)
            continue;
        account_busy(c, now); /* busy time up to this very moment */
        any_inflight |= c->launched > c->completed;
        r->dev.clients++;
        r->dev.submitted += c->submitted;
        r->dev.granted += c->mode == POS_GRANT_FREE ? c->launched : umin(c->granted, c->submitted);
        r->dev.completed += c->completed;
        if (len + sizeof *cs > cap)
            continue;
        fill_client_stats(c, &cs[r->nclients], now);
        r->nclients++;
        len += sizeof *cs;
    }
    if (any_inflight && now > d->last_update)
        d->dev_busy_ns += (uint64_t)(now - d->last_update);
    d->last_update = now;
    r->dev.busy_ns = d->dev_busy_ns;
    return len;
}
