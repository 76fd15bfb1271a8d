/* Kernel profiles: an open-addressing table of running estimates. Pure code (the core and
 * the policies read and feed it); its file is sched/profile_file.c. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "sched/profile.h"

#define OUTLIER_AFTER   16
#define OUTLIER_FACTOR  4.0

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

static uint64_t hash_of(uint32_t uid, uint64_t key, const uint32_t g[3], const uint32_t b[3])
{
    uint64_t h = key * 0xff51afd7ed558ccdull;
    h = mix(h, uid);
    for (int i = 0; i < 3; i++)
        h = mix(mix(h, g[i]), (uint64_t)b[i] << 32);
    return h ^ (h >> 29);
}

static int same(const struct pos_kprof *k, uint32_t uid, uint64_t key, const uint32_t g[3],
                const uint32_t b[3])
{
    return k->used && k->key == key && k->uid == uid && memcmp(k->grid, g, sizeof k->grid) == 0 &&
           memcmp(k->block, b, sizeof k->block) == 0;
}

/* A zeroed table of CAP entries. A large one asks for transparent huge pages: posd forks a
 * child to save the table (sched/saver.c), and a fork copies one page-table entry per 4 KiB
 * page (a table of 200,000 profiles took 1.1-3.0 ms
 * of posd's thread, 5 forks; with huge pages 0.5-0.6 ms, docs/results/saves.md). */
#define TABLE_HUGE ((size_t)2 << 20)
static struct pos_kprof *table_new(size_t cap)
{
    size_t bytes = cap * sizeof(struct pos_kprof);
    if (bytes < 2 * TABLE_HUGE)
        return calloc(cap, sizeof(struct pos_kprof));
    void *t = NULL;
    if (posix_memalign(&t, TABLE_HUGE, bytes) != 0)
        return NULL;
    (void)madvise(t, bytes, MADV_HUGEPAGE); /* a hint: without THP it is an ordinary table */
    memset(t, 0, bytes);
    return t;
}

int pos_prof_init(struct pos_profiles *p, size_t max)
{
    memset(p, 0, sizeof *p);
    p->max = max ? max : (size_t)1 << 20;
    p->cap = 1024;
    p->t = calloc(p->cap, sizeof *p->t);
    return p->t ? 0 : -ENOMEM;
}

void pos_prof_free(struct pos_profiles *p)
{
    free(p->t);
    free(p->users);
    memset(p, 0, sizeof *p);
}

void pos_prof_reset(struct pos_profiles *p)
{
    memset(p->t, 0, p->cap * sizeof *p->t);
    if (p->users)
        memset(p->users, 0, p->users_cap * sizeof *p->users);
    p->nusers = 0;
    p->count = 0;
    p->dropped = p->rejected = p->user_refused = 0;
}

/* ---- per-user counts ---------------------------------------------------------------------- */

static struct pos_prof_user *user_slot(struct pos_prof_user *u, size_t cap, uint32_t uid)
{
    size_t i = (size_t)(((uint64_t)uid * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
    while (u[i].used && u[i].uid != uid)
        i = (i + 1) & (cap - 1);
    return &u[i];
}

size_t pos_prof_user_count(const struct pos_profiles *p, uint32_t uid)
{
    if (!p->users_cap)
        return 0;
    const struct pos_prof_user *u = user_slot(p->users, p->users_cap, uid);
    return u->used ? u->n : 0;
}

/* UID's count, made when missing (NULL when memory runs out). */
static struct pos_prof_user *user_get(struct pos_profiles *p, uint32_t uid)
{
    if (!p->users_cap || (p->nusers + 1) * 2 > p->users_cap) {
        size_t cap = p->users_cap ? p->users_cap * 2 : 64;
        struct pos_prof_user *u = calloc(cap, sizeof *u);
        if (!u)
            return NULL;
        for (size_t i = 0; i < p->users_cap; i++)
            if (p->users[i].used)
                *user_slot(u, cap, p->users[i].uid) = p->users[i];
        free(p->users);
        p->users = u;
        p->users_cap = cap;
    }
    struct pos_prof_user *u = user_slot(p->users, p->users_cap, uid);
    if (!u->used) {
        u->used = 1;
        u->uid = uid;
        u->n = 0;
        p->nusers++;
    }
    return u;
}

static struct pos_kprof *slot_for(struct pos_kprof *t, size_t cap, uint32_t uid, uint64_t key,
                                  const uint32_t g[3], const uint32_t b[3])
{
    size_t i = (size_t)hash_of(uid, key, g, b) & (cap - 1);
    while (t[i].used && !same(&t[i], uid, key, g, b))
        i = (i + 1) & (cap - 1);
    return &t[i];
}

static int grow(struct pos_profiles *p)
{
    size_t cap = p->cap * 2;
    struct pos_kprof *t = table_new(cap);
    if (!t)
        return -ENOMEM;
    for (size_t i = 0; i < p->cap; i++)
        if (p->t[i].used)
            *slot_for(t, cap, p->t[i].uid, p->t[i].key, p->t[i].grid, p->t[i].block) = p->t[i];
    free(p->t);
    p->t = t;
    p->cap = cap;
    return 0;
}

struct pos_kprof *pos_prof_get(struct pos_profiles *p, uint32_t uid, uint64_t key,
                               const uint32_t grid[3], const uint32_t block[3], int create)
{
    if (!p->t)
        return NULL;
    struct pos_kprof *k = slot_for(p->t, p->cap, uid, key, grid, block);
    if (k->used)
        return k;
    if (!create)
        return NULL;
    if (p->count >= p->max) {
        p->dropped++;
        return NULL;
    }
    struct pos_prof_user *u = NULL;
    if (p->user_max && uid != POS_PROF_ANY_UID) {
        u = user_get(p, uid);
        if (!u)
            return NULL;
        if (u->n >= p->user_max) {
            p->user_refused++;
            return NULL;
        }
    }
    if ((p->count + 1) * 10 > p->cap * 7) { /* keep the load under 0.7 */
        if (grow(p) < 0)
            return NULL;
        k = slot_for(p->t, p->cap, uid, key, grid, block);
    }
    if (u)
        u->n++;
    memset(k, 0, sizeof *k);
    k->used = 1;
    k->uid = uid;
    k->key = key;
    memcpy(k->grid, grid, sizeof k->grid);
    memcpy(k->block, block, sizeof k->block);
    p->count++;
    return k;
}

const struct pos_kprof *pos_prof_find(const struct pos_profiles *p, uint32_t uid, uint64_t key,
                                      const uint32_t grid[3], const uint32_t block[3])
{
    struct pos_profiles *q = (struct pos_profiles *)p; /* lookup without create writes nothing */
    const struct pos_kprof *k = pos_prof_get(q, uid, key, grid, block, 0);
    if (!k && uid != POS_PROF_ANY_UID)
        k = pos_prof_get(q, POS_PROF_ANY_UID, key, grid, block, 0);
    return k;
}

int pos_prof_add_solo(struct pos_profiles *p, struct pos_kprof *k, double ns)
{
    if (!(ns >= 0) || !isfinite(ns))
        return 0;
    if (k->n >= OUTLIER_AFTER && ns > OUTLIER_FACTOR * k->mean_ns) {
        p->rejected++;
        return 0;
    }
    uint64_t n = k->n < POS_PROF_MEAN_EXACT ? k->n + 1 : POS_PROF_MEAN_EXACT;
    double d = ns - k->mean_ns;
    k->mean_ns += d / (double)n;
    k->m2 += d * (ns - k->mean_ns);
    if (k->n >= POS_PROF_MEAN_EXACT) /* keep the spread's weight as the mean's */
        k->m2 *= (double)(POS_PROF_MEAN_EXACT - 1) / POS_PROF_MEAN_EXACT;
    k->n++;
    return 1;
}

void pos_prof_add_corun(struct pos_kprof *k, double ns)
{
    if (k->n == 0 || !(k->mean_ns > 0) || !(ns >= 0) || !isfinite(ns))
        return;
    double r = ns / k->mean_ns;
    if (r > 100)
        r = 100;
    uint64_t n = k->co_n < POS_PROF_MEAN_EXACT ? k->co_n + 1 : POS_PROF_MEAN_EXACT;
    k->co_ratio = k->co_n ? k->co_ratio + (r - k->co_ratio) / (double)n : r;
    k->co_n++;
}

double pos_kprof_sd(const struct pos_kprof *k)
{
    uint64_t n = k->n < POS_PROF_MEAN_EXACT ? k->n : POS_PROF_MEAN_EXACT;
    return n > 1 && k->m2 > 0 ? sqrt(k->m2 / (double)(n - 1)) : 0;
}

double pos_kprof_sm_demand(const struct pos_sched_device *dev, const uint32_t grid[3],
                           const uint32_t block[3], uint32_t smem)
{
    if (!dev || !dev->sm_count || !dev->max_threads_per_sm)
        return 0;
    double blocks = (double)grid[0] * grid[1] * grid[2];
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (threads == 0 || blocks == 0)
        return 0;
    uint64_t per_sm = dev->max_threads_per_sm / threads;
    if (dev->max_blocks_per_sm && per_sm > dev->max_blocks_per_sm)
        per_sm = dev->max_blocks_per_sm;
    if (smem && dev->smem_per_sm && per_sm > dev->smem_per_sm / smem)
        per_sm = dev->smem_per_sm / smem;
    if (per_sm == 0)
        per_sm = 1;
    double d = blocks / ((double)per_sm * dev->sm_count);
    return d > 1 ? 1 : d;
}

