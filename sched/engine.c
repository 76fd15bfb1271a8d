/* The engine: posd's adapter between its clients' shared memory and the scheduling core
 * (sched/core.h). It reads each client's submission ring, synchronisation reports and
 * completion channel (every value read once into a local copy, every index bounded here),
 * hands them to the core, runs the core's decision, and publishes the grants, report rates
 * and kick requests (futex wake for waiting threads). Also the statistics reply. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pos/op_record.h"
#include "sched/files.h"
#include "sched/posd.h"

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
    p->corun_budget = cfg->corun_budget;
    p->cpu_hold_ns = (int64_t)(cfg->cpu_hold_ms * 1e6);
}



/* Loads what posd learnt before (STATE_DIR/profiles) and imports the admin's offline file
 * ([policy] profiles) over it. A file that is refused is logged and left out: posd starts with
 * what it has. */
static void load_profiles(struct posd *d)
{
    char err[768];
    int e = -ENOENT;
    FILE *f = d->state_fd < 0 ? NULL
                              : posd_state_read(d->state_fd, POSD_PROFILES_NAME, &e, err, sizeof err);
    if (f) {
        char name[POSD_PATH_MAX + 16];
        snprintf(name, sizeof name, "%s/" POSD_PROFILES_NAME, d->state_dir);
        int rc = pos_prof_load_file(&d->prof, &d->device, f, name, err, sizeof err);
        fclose(f);
        if (rc == 0)
            posd_log(POSD_LOG_INFO, "kernel profiles: %zu from %s", d->prof.count, name);
        else
            posd_log(POSD_LOG_WARN, "kernel profiles refused, starting without them: %s", err);
    } else if (e != -ENOENT) {
        posd_log(POSD_LOG_WARN, "kernel profiles refused, starting without them: %s", err);
    }
    if (d->cfg.profiles[0]) {
        size_t before = d->prof.count;
        int rc = 0; /* not a regular file, or not there: refused without waiting */
        f = posd_open_regular(d->cfg.profiles, &rc, err, sizeof err);
        if (f) {
            rc = pos_prof_load_file(&d->prof, &d->device, f, d->cfg.profiles, err, sizeof err);
            fclose(f);
        } else if (rc == -ENOENT) {
            snprintf(err, sizeof err, "%s: %s", d->cfg.profiles, strerror(ENOENT));
        }
        if (rc == 0)
            posd_log(POSD_LOG_INFO, "kernel profiles: imported %s (%zu new)", d->cfg.profiles,
                     d->prof.count - before);
        else
            posd_log(POSD_LOG_WARN, "kernel profile import refused: %s", err);
    }
}

static int write_profiles(FILE *f, void *arg)
{
    struct posd *d = arg;
    return pos_prof_write(&d->prof, &d->device, f);
}

int posd_engine_profiles_write(struct posd *d, char *msg, size_t cap)
{
    if (d->state_fd < 0) {
        snprintf(msg, cap, "posd has no state directory");
        return -EBADF;
    }
    int n = posd_state_replace(d->state_fd, POSD_PROFILES_NAME, write_profiles, d, msg, cap);
    if (n >= 0)
        snprintf(msg, cap, "%d kernel profiles saved to %s/" POSD_PROFILES_NAME, n, d->state_dir);
    return n < 0 ? n : 0;
}

int posd_engine_profiles_reset(struct posd *d, char *msg, size_t cap)
{
    size_t n = d->prof.count;
    pos_prof_reset(&d->prof);
    int rc = d->state_fd < 0 ? 0 : posd_state_remove(d->state_fd, POSD_PROFILES_NAME);
    if (rc < 0) {
        snprintf(msg, cap, "%zu kernel profiles forgotten, but %s/" POSD_PROFILES_NAME " stays: %s",
                 n, d->state_dir, strerror(-rc));
        return rc;
    }
    snprintf(msg, cap, "%zu kernel profiles forgotten (%s/" POSD_PROFILES_NAME " removed)", n,
             d->state_dir);
    return 0;
}

int posd_engine_init(struct posd *d)
{
    struct sched_params p;
    posd_engine_params(&d->cfg, &p);
    d->device.index = 0;
    d->schedule = posd_schedule_open(&d->cfg, &d->device);
    p.schedule = d->schedule;
    d->core = sched_core_new(&p, &d->device, d->policy, posd_now());
    if (!d->core || pos_prof_init(&d->prof, 0) < 0)
        return -ENOMEM;
    d->prof.user_max = d->cfg.profile_user_max; /* one user's kernels cannot take the table */
    load_profiles(d);
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
    return id && id <= c->nkeys ? c->keys[id] : 0;
}

/* Reads new submissions into the core, up to seq UPTO at most. Returns 0, or -1 when the
 * client broke the protocol. */
static int drain_submissions(struct posd *d, struct posd_client *c, uint64_t upto, int64_t now)
{
    struct pos_client_shm *shm = c->shm;
    int slot = slot_of(d, c);
    uint64_t next = pos_sub_ring_tail(shm);
    if (next < c->sub_head || next - c->sub_head > (uint64_t)POS_SUB_RING * 2)
        return -1;
    if (next > upto)
        next = upto > c->sub_head ? upto : c->sub_head;
    while (c->sub_head < next) {
        uint64_t seq = c->sub_head + 1;
        uint64_t stamp = pos_sub_ring_stamp(shm, seq);
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
        c->sub_head = seq;
    }
    pos_sub_ring_consume(shm, c->sub_head);
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
    if (next < c->sync_head || next - c->sync_head > POS_SYNC_RING * 2)
        return -1;
    for (; c->sync_head < next; c->sync_head++) {
        const struct pos_sync_rec *r = pos_sync_ring_peek(shm, c->sync_head);
        if (r) {
            w->sync = *r;
            *covers = w->sync.covers;
            return 1;
        }
        /* being written, or dropped by a writer that found the ring full: skipped after
         * POSD_STALL_NS */
        if (c->sync_stall_idx != c->sync_head + 1) {
            c->sync_stall_idx = c->sync_head + 1;
            c->sync_stall_since = w->now;
            break;
        }
        if (w->now - c->sync_stall_since < POSD_STALL_NS)
            break;
    }
    pos_sync_ring_consume(shm, c->sync_head);
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
    if (c->sub_head < w->sync.covers && w->sync.covers <= pos_sub_ring_tail(c->shm))
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
    pos_sync_ring_consume(c->shm, ++c->sync_head);
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
    if (tail < c->done_head || tail - c->done_head > POS_DONE_RING)
        return -1;
    while (c->done_head < tail) {
        const struct pos_completion_rec *r = pos_done_ring_peek(shm, c->done_head);
        if (!r)
            break;
        uint64_t seq = r->seq; /* read once */
        uint64_t when = r->complete_ns;
        uint64_t call = r->call_ns;
        uint32_t how = r->how;
        if (seq > c->sub_head) {
            /* A windowed client launches and completes without waiting for posd: its
             * submission may have been published after posd read the ring. Read it again;
             * one still being written is looked at again soon; one never reserved is a lie. */
            if (pos_drain_syncs(&drain_ops, w) < 0)
                return -1;
            if (seq > c->sub_head) {
                if (seq > pos_sub_ring_tail(shm))
                    return -1;
                w->d->recheck = 1;
                break;
            }
        }
        if (sched_core_complete(w->d->core, slot_of(w->d, c), seq, (int64_t)when,
                                sched_done_of(how), (int64_t)call, w->now) < 0)
            return -1;
        c->done_head++;
    }
    pos_done_ring_consume(shm, c->done_head);
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
    unsigned what = pos_publish(&c->pub, next, g->changed);
    pos_shm_publish(shm, &c->pub, what);
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
    free(c->keys);
    c->keys = NULL;
    c->nkeys = 0;
    free(c->key_set);
    c->key_set = NULL;
    c->key_set_cap = 0;
}

void posd_engine_release(struct posd_client *c)
{
    if (!c->shm)
        return;
    atomic_store(&c->shm->posd_state, POS_POSD_GONE);
    atomic_fetch_add(&c->shm->grant_word, 1);
    futex_wake_all(&c->shm->grant_word);
}

/* ---- kernel names ----------------------------------------------------------------------- */

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Kernel names by key, for posstat -k: the first 63 bytes of the first name a client sent
 * for a key (a key is the hash of the name's bytes). Bounded; posd is single-threaded. */
#define KNAMES_CAP 65536
static struct kname {
    uint64_t key;
    char name[64];
} knames[KNAMES_CAP];
static size_t knames_n;

static void kname_put(uint64_t key, const uint8_t *name, size_t n)
{
    if (!key || knames_n * 10 >= KNAMES_CAP * 7)
        return;
    size_t i = (size_t)(key ^ (key >> 29)) & (KNAMES_CAP - 1);
    while (knames[i].key && knames[i].key != key)
        i = (i + 1) & (KNAMES_CAP - 1);
    if (knames[i].key)
        return;
    knames[i].key = key;
    memcpy(knames[i].name, name, n < 63 ? n : 63);
    knames[i].name[n < 63 ? n : 63] = '\0';
    knames_n++;
}

static const char *kname_get(uint64_t key)
{
    size_t i = (size_t)(key ^ (key >> 29)) & (KNAMES_CAP - 1);
    while (knames[i].key && knames[i].key != key)
        i = (i + 1) & (KNAMES_CAP - 1);
    return knames[i].key ? knames[i].name : "";
}

/* The set of C's kernel keys (open addressing, capacity a power of two at least twice the
 * ids): a duplicate name is found at once. A scan of every earlier id cost a message of 1 300
 * names at 30 000 known ids 4.7 ms of posd's one thread, everyone's scheduling stalled. */
static int key_set_add(struct posd_client *c, uint64_t key);

static int key_set_grow(struct posd_client *c, uint32_t ids)
{
    uint32_t cap = 64;
    while (cap < 2 * ids)
        cap *= 2;
    if (cap <= c->key_set_cap)
        return 0;
    uint64_t *set = calloc(cap, sizeof *set);
    if (!set)
        return -ENOMEM;
    free(c->key_set);
    c->key_set = set;
    c->key_set_cap = cap;
    c->key_set_zero = 0;
    for (uint32_t id = 1; id <= c->nkeys; id++)
        key_set_add(c, c->keys[id]);
    return 0;
}

/* Adds KEY. Returns 0, or -EEXIST when it is there already. */
static int key_set_add(struct posd_client *c, uint64_t key)
{
    if (!key) { /* the empty slot's mark: kept aside */
        if (c->key_set_zero)
            return -EEXIST;
        c->key_set_zero = 1;
        return 0;
    }
    uint32_t mask = c->key_set_cap - 1;
    for (uint32_t i = (uint32_t)(key ^ key >> 32) & mask;; i = (i + 1) & mask) {
        if (c->key_set[i] == key)
            return -EEXIST;
        if (!c->key_set[i]) {
            c->key_set[i] = key;
            return 0;
        }
    }
}

int posd_engine_names(struct posd_client *c, const uint8_t *body, size_t len)
{
    struct pos_names h;
    if (len < sizeof h)
        return -EPROTO;
    memcpy(&h, body, sizeof h);
    if (h.first != c->nkeys + 1 || h.count == 0 || h.count > POS_MAX_KERNEL_IDS ||
        h.first + h.count - 1 > POS_MAX_KERNEL_IDS)
        return -EPROTO;                /* ids come once each, in order */
    uint32_t want = h.first + h.count; /* keys[0] unused */
    uint64_t *keys = realloc(c->keys, want * sizeof *keys);
    if (!keys)
        return -ENOMEM;
    c->keys = keys;
    if (key_set_grow(c, want) < 0)
        return -ENOMEM;
    size_t off = sizeof h;
    int rc = 0;
    for (uint32_t i = 0; i < h.count && rc == 0; i++) {
        uint16_t n;
        if (off + sizeof n > len) {
            rc = -EPROTO;
            break;
        }
        memcpy(&n, body + off, sizeof n);
        off += sizeof n;
        if (n == 0 || n > POS_KERNEL_NAME_MAX || off + n > len) {
            rc = -EPROTO;
            break;
        }
        uint64_t key = fnv1a(body + off, n);
        /* one process interns a name once: the same key under two ids is a broken client */
        rc = key_set_add(c, key) < 0 ? -EPROTO : 0;
        c->keys[h.first + i] = key;
        kname_put(key, body + off, n);
        off += n;
    }
    if (rc == 0 && off != len)
        rc = -EPROTO;
    if (rc < 0) {
        /* the set holds this message's keys too: back to the ids known */
        memset(c->key_set, 0, c->key_set_cap * sizeof *c->key_set);
        c->key_set_zero = 0;
        for (uint32_t id = 1; id <= c->nkeys; id++)
            key_set_add(c, c->keys[id]);
        return rc;
    }
    c->nkeys = h.first + h.count - 1;
    return 0;
}

/* ---- statistics ------------------------------------------------------------------------- */

static double device_time(const struct pos_kprof *k)
{
    return (double)k->launches * (k->n ? k->mean_ns : 0);
}

static int by_device_time(const void *a, const void *b)
{
    const struct pos_kprof *x = *(const struct pos_kprof *const *)a,
                           *y = *(const struct pos_kprof *const *)b;
    double dx = device_time(x), dy = device_time(y);
    if (dx != dy)
        return dx < dy ? 1 : -1;
    return x->launches < y->launches ? 1 : x->launches > y->launches ? -1 : 0;
}

size_t posd_engine_kernels(struct posd *d, void *buf, size_t cap, int all, uid_t uid)
{
    struct pos_kernels_reply r = {.uptime_ns = (uint64_t)(posd_now() - d->started_at)};
    size_t room = cap > sizeof r ? (cap - sizeof r) / sizeof(struct pos_kernel_stats) : 0;
    /* an array of pointers to the profiles: sizeof *list is a pointer's, as meant */
    const struct pos_kprof **list = malloc((d->prof.count ? d->prof.count : 1) *
                                           sizeof *list); /* NOLINT(bugprone-sizeof-expression) */
    if (!list) { /* an empty reply rather than none */
        memcpy(buf, &r, sizeof r);
        return sizeof r;
    }
    size_t n = 0;
    for (size_t i = 0; i < d->prof.cap && n < d->prof.count; i++) {
        const struct pos_kprof *k = &d->prof.t[i];
        if (k->used && (all || k->uid == (uint32_t)uid))
            list[n++] = k;
    }
    qsort(list, n, sizeof list[0], by_device_time); /* NOLINT(bugprone-sizeof-expression) */
    r.total = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    r.nkernels = (uint32_t)(n < room ? n : room);
    uint8_t *out = (uint8_t *)buf + sizeof r;
    for (uint32_t i = 0; i < r.nkernels; i++) {
        const struct pos_kprof *k = list[i];
        struct pos_kernel_stats s = {
            .key = k->key,
            .uid = k->uid,
            .co_ratio_milli = k->co_n ? (uint32_t)(k->co_ratio * 1000 + 0.5) : 0,
            .launches = k->launches,
            .samples = k->n,
            .mean_ns = (uint64_t)k->mean_ns,
            .sd_ns = (uint64_t)pos_kprof_sd(k),
            .co_samples = k->co_n,
        };
        memcpy(s.grid, k->grid, sizeof s.grid);
        memcpy(s.block, k->block, sizeof s.block);
        snprintf(s.name, sizeof s.name, "%s", kname_get(k->key));
        memcpy(out + i * sizeof s, &s, sizeof s);
    }
    free(list);
    memcpy(buf, &r, sizeof r);
    return sizeof r + r.nkernels * sizeof(struct pos_kernel_stats);
}

static void fill_client_stats(struct posd *d, struct posd_client *c, struct pos_client_stats *s,
                              int64_t now)
{
    struct sched_client_stats k;
    sched_core_client_stats(d->core, slot_of(d, c), now, &k);
    memset(s, 0, sizeof *s);
    s->client_id = c->id;
    s->pid = c->ident.pid;
    s->uid = c->ident.uid;
    s->gid = c->ident.gid;
    snprintf(s->app, sizeof s->app, "%s", c->ident.app);
    snprintf(s->class_name, sizeof s->class_name, "%s", c->pol.class_name);
    snprintf(s->k8s_namespace, sizeof s->k8s_namespace, "%s", c->ident.k8s_namespace);
    snprintf(s->pod, sizeof s->pod, "%s", c->ident.pod);
    snprintf(s->container, sizeof s->container, "%s", c->ident.container);
    snprintf(s->pod_devices, sizeof s->pod_devices, "%s", c->ident.devices);
    s->priority = c->pol.priority;
    s->flags = (sched_core_client_held(d->core, slot_of(d, c)) ? POS_CLIENT_HELD : 0) |
               (c->overridden ? POS_CLIENT_OVERRIDE : 0) |
               (c->cpu.low == POS_CPU_IDLE ? POS_CLIENT_CPU_IDLE : 0) |
               (c->cpu.low == POS_CPU_NICE ? POS_CLIENT_CPU_NICE : 0);
    s->cpu_threads = (uint32_t)c->cpu.nthreads;
    s->submitted = k.submitted;
    s->granted = k.released;
    s->completed = k.completed;
    s->in_flight = k.in_flight;
    s->queued = k.queued;
    s->busy_ns = k.busy_ns;
    s->requests = k.requests;
    s->req_p50_ns = k.req_p50_ns;
    s->req_p99_ns = k.req_p99_ns;
    s->stalls = k.stalls;
    s->sync_lag_n = k.sync_lag_n;
    s->sync_lag_p50_ns = k.sync_lag_p50_ns;
    s->sync_lag_p99_ns = k.sync_lag_p99_ns;
    s->op_ns = k.op_ns;
    s->sync_ns = atomic_load_explicit(&c->shm->sync_ns, memory_order_relaxed);
    s->syncs = atomic_load_explicit(&c->shm->syncs, memory_order_relaxed);
    s->waits = atomic_load_explicit(&c->shm->waits, memory_order_relaxed);
    for (int b = 0; b < POS_WAIT_BUCKETS; b++)
        s->wait_hist[b] = atomic_load_explicit(&c->shm->wait_hist[b], memory_order_relaxed);
    s->connected_ns = (uint64_t)(now - c->connected_at);
    _Static_assert(SCHED_REQ_POW_BUCKETS == POS_WAIT_BUCKETS, "one bucket layout on the wire");
    memcpy(s->req_hist, k.req_pow, sizeof s->req_hist);
    s->req_sum_ns = k.req_sum_ns;
    s->device = c->pol.device;
    posd_telemetry_client_current(d, c, now);
    s->runq_delay_ns = c->tele.runq_delay_ns;
    s->runq_ns_per_s = c->tele.runq_ns_per_s;
    s->offcpu_ns_per_s = c->tele.offcpu_ns_per_s;
    s->ioctls_per_s = c->tele.ioctls_per_s;
    s->ioctl_ns = c->tele.ioctl_mean_ns;
    struct posd_mem_figures m;
    posd_mem_read(c, &m);
    s->mem_used = m.used;
    s->mem_peak = m.peak;
    s->mem_refused = m.refused;
    s->mem_limit = m.limit;
    s->mem_limit_ppm = c->mem_limit.ppm;
    s->mem_total = m.total;
    memcpy(s->mem_bytes, m.bytes, sizeof s->mem_bytes);
}

size_t posd_engine_stats(struct posd *d, void *buf, size_t cap, int all, uid_t uid)
{
    struct pos_stats_reply *r = buf;
    int64_t now = posd_now();
    memset(r, 0, sizeof *r);
    r->dev.uptime_ns = (uint64_t)(now - d->started_at);
    snprintf(r->dev.policy, sizeof r->dev.policy, "%s", sched_core_policy(d->core)->name);
    r->dev.policy_len = (uint32_t)strlen(r->dev.policy);
    struct sched_device_stats ds;
    sched_core_device_stats(d->core, now, &ds);
    r->dev.submitted = ds.submitted;
    r->dev.granted = ds.released;
    r->dev.completed = ds.completed;
    r->dev.busy_ns = ds.busy_ns;
    size_t len = sizeof *r;
    struct pos_client_stats *cs = (struct pos_client_stats *)(r + 1);
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (!c->used || !c->registered || (!all && c->ident.uid != uid))
            continue;
        r->dev.clients++;
        if (len + sizeof *cs > cap)
            continue;
        fill_client_stats(d, c, &cs[r->nclients], now);
        r->nclients++;
        len += sizeof *cs;
    }
    /* unmanaged processes: pids and commands of any user, so only to those who see all */
    struct pos_unmanaged_stats *us = (struct pos_unmanaged_stats *)((uint8_t *)buf + len);
    size_t room = (cap - len) / sizeof *us;
    size_t n = posd_telemetry_unmanaged(d, us, all ? room : 0);
    r->dev.telemetry = posd_telemetry_parts();
    r->dev.unmanaged = (uint32_t)n;
    r->dev.unmanaged_untracked = posd_telemetry_untracked();
    r->dev.flags = all ? POS_DEV_EVERYONE : 0;
    r->dev.profiles = d->prof.count;
    r->dev.profiles_refused = d->prof.user_refused;
    r->nunmanaged = all ? (uint32_t)(n < room ? n : room) : 0;
    return len + r->nunmanaged * sizeof *us;
}
