/* The shim's memory ledger (docs/memory.md): the process's own exact account of its device
 * memory by device and kind, a map of every allocation it charged (pointer or handle -> size,
 * kind, device, context), the reservation against posd's limit before each allocation, and the
 * copy of the account into the session's shared memory, which posd reads (and rebuilds its
 * ledger from when it restarts). The map's lock is never held across a driver call: NCCL's
 * host-memory cuMemCreate deadlocked an interposer that did. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pos/client_shm.h"
#include "shim/shim.h"

#define MAP_BUCKETS  4096
#define REFUSAL_GAP  1000000000ull /* at most one refusal line a second */

/* The account, whether or not posd is there: the shared memory gets copies of it. */
static struct pos_mem_account account[POS_MEM_MAX_DEVICES]; /* total 0: device not asked yet */

static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shim_mem_entry *map[MAP_BUCKETS];
static _Atomic uint64_t refusal_said_ns;

static int accounted(int dev)
{
    return dev >= 0 && dev < POS_MEM_MAX_DEVICES;
}

int shim_mem_current_device(void)
{
    CUdevice d;
    if (!shim_real_cuCtxGetDevice || shim_real_cuCtxGetDevice(&d) != CUDA_SUCCESS)
        return -1;
    return (int)d;
}

static uint64_t total_of(int dev)
{
    uint64_t t = atomic_load_explicit(&account[dev].total, memory_order_relaxed);
    if (t)
        return t;
    size_t bytes = 0;
    if (shim_real_cuDeviceTotalMem_v2 &&
        shim_real_cuDeviceTotalMem_v2(&bytes, (CUdevice)dev) == CUDA_SUCCESS && bytes)
        atomic_store_explicit(&account[dev].total, bytes, memory_order_relaxed);
    return bytes;
}

/* ---- the shared memory's copy ------------------------------------------------------------ */

static void copy_account(struct pos_mem_account *to, const struct pos_mem_account *from)
{
    atomic_store_explicit(&to->total, atomic_load(&from->total), memory_order_relaxed);
    for (int k = 0; k < POS_MEM_KINDS; k++)
        atomic_store_explicit(&to->bytes[k], atomic_load(&from->bytes[k]), memory_order_relaxed);
    atomic_store_explicit(&to->refused, atomic_load(&from->refused), memory_order_relaxed);
    atomic_store_explicit(&to->peak, atomic_load(&from->peak), memory_order_relaxed);
    atomic_store_explicit(&to->used, atomic_load(&from->used), memory_order_release);
}

void shim_mem_attached(struct shim_session *s)
{
    for (int d = 0; d < POS_MEM_MAX_DEVICES; d++)
        copy_account(&s->shm->mem[d], &account[d]);
}

/* The current session's copy of DEV's account, brought up to date. Each field is some value
 * the account had (never a sum in flight), so posd never reads an underflow; the collector's
 * next pass mends a copy that two threads wrote out of order. */
static void publish_device(int dev)
{
    struct shim_thread *t = shim_self();
    struct shim_session *s = t ? shim_session_enter(t) : NULL;
    if (!s)
        return;
    copy_account(&s->shm->mem[dev], &account[dev]);
    shim_session_leave(t);
}

void shim_mem_publish(void)
{
    /* the collector's own work lock keeps the session mapped (shim_session_reclaim) */
    struct shim_session *s = atomic_load_explicit(&shim_session, memory_order_acquire);
    if (s)
        shim_mem_attached(s);
}

/* ---- the limit ------------------------------------------------------------------------- */

uint64_t shim_mem_limit(int dev)
{
    uint64_t limit = POS_MEM_UNLIMITED;
    uint32_t ppm = 0;
    struct shim_thread *t = shim_self();
    struct shim_session *s = t ? shim_session_enter(t) : NULL;
    if (s) {
        limit = atomic_load_explicit(&s->shm->mem_limit, memory_order_acquire);
        ppm = atomic_load_explicit(&s->shm->mem_limit_ppm, memory_order_acquire);
        shim_session_leave(t);
    }
    return limit == POS_MEM_UNLIMITED && !ppm ? limit : pos_mem_limit_of(limit, ppm, total_of(dev));
}

static void say_refusal(int dev, uint64_t n, uint64_t limit, const char *what)
{
    uint64_t now = shim_now_ns(), last = atomic_load(&refusal_said_ns);
    if (last && now - last < REFUSAL_GAP)
        return;
    if (!atomic_compare_exchange_strong(&refusal_said_ns, &last, now))
        return;
    shim_log("%s of %llu bytes on device %d refused (CUDA_ERROR_OUT_OF_MEMORY): %llu of this "
             "process's limit of %llu bytes in use; free memory or ask for a higher mem_limit",
             what, (unsigned long long)n, dev,
             (unsigned long long)atomic_load(&account[dev].used), (unsigned long long)limit);
}

/* ---- reserve, commit, release ------------------------------------------------------------ */

CUresult shim_mem_reserve(struct shim_mem_hold *h, int dev, uint64_t n, const char *what)
{
    h->dev = accounted(dev) && n ? dev : -1;
    h->n = n;
    h->reserved = 0;
    if (h->dev < 0)
        return CUDA_SUCCESS;
    total_of(dev); /* the account says which devices the process uses */
    uint64_t limit = shim_mem_limit(dev);
    if (limit == POS_MEM_UNLIMITED)
        return CUDA_SUCCESS;
    if (pos_mem_reserve(&account[dev], n, limit) == 0) {
        h->reserved = 1;
        return CUDA_SUCCESS;
    }
    say_refusal(dev, n, limit, what);
    publish_device(dev);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Adds N to DEV's use past any limit (the reservation nothing held: no limit, a measure). */
static void force_use(int dev, uint64_t n)
{
    uint64_t u = atomic_fetch_add_explicit(&account[dev].used, n, memory_order_acq_rel) + n;
    uint64_t p = atomic_load_explicit(&account[dev].peak, memory_order_relaxed);
    while (p < u && !atomic_compare_exchange_weak_explicit(&account[dev].peak, &p, u,
                                                          memory_order_relaxed,
                                                          memory_order_relaxed))
        ;
}

static size_t bucket_of(int space, uint64_t key)
{
    uint64_t h = (key ^ ((uint64_t)space << 56)) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 52) % MAP_BUCKETS;
}

/* Under map_lock. */
static struct shim_mem_entry **find(int space, uint64_t key)
{
    struct shim_mem_entry **pp = &map[bucket_of(space, key)];
    while (*pp && !((*pp)->space == space && (*pp)->key == key))
        pp = &(*pp)->next;
    return pp;
}

static void insert(struct shim_mem_entry *e)
{
    pthread_mutex_lock(&map_lock);
    struct shim_mem_entry **pp = find(e->space, e->key);
    if (*pp) {
        /* a key the driver gave again, whose free did not pass here: the old entry is stale */
        struct shim_mem_entry *old = *pp;
        *pp = old->next;
        pthread_mutex_unlock(&map_lock);
        if (shim_cfg.debug)
            shim_log("memory key %#llx given again without a free the shim saw",
                     (unsigned long long)e->key);
        if (old->kind < POS_MEM_KINDS && accounted(old->dev))
            pos_mem_release(&account[old->dev], old->kind, old->bytes);
        free(old);
        pthread_mutex_lock(&map_lock);
        pp = find(e->space, e->key);
    }
    e->next = *pp;
    *pp = e;
    pthread_mutex_unlock(&map_lock);
}

static int record(int dev, uint64_t n, int kind, int space, uint64_t key, uint64_t ctx)
{
    struct shim_mem_entry *e = calloc(1, sizeof *e);
    if (!e)
        return -1;
    e->key = key;
    e->bytes = n;
    e->ctx = ctx;
    e->dev = (int16_t)dev;
    e->space = (uint8_t)space;
    e->kind = (uint8_t)kind;
    e->refs = 1;
    insert(e);
    return 0;
}

CUresult shim_mem_settle(CUresult rc, const struct shim_mem_hold *h, int kind, int space,
                         uint64_t key, uint64_t ctx)
{
    int dev = h->dev;
    if (dev < 0)
        return rc;
    if (rc != CUDA_SUCCESS) {
        if (h->reserved)
            pos_mem_rollback(&account[dev], h->n);
        return rc;
    }
    if (!h->reserved)
        force_use(dev, h->n);
    pos_mem_commit(&account[dev], (enum pos_mem_kind)kind, h->n);
    if (record(dev, h->n, kind, space, key, ctx) < 0) {
        /* no memory for the map: the allocation stands, uncharged (its free is unknown) */
        pos_mem_release(&account[dev], (enum pos_mem_kind)kind, h->n);
    }
    publish_device(dev);
    return rc;
}

void shim_mem_grow(struct shim_mem_hold *h, uint64_t extra)
{
    if (h->dev < 0 || !extra)
        return;
    /* after the driver's success only: a reserved hold is in use already, and settle commits
     * the whole; an unreserved one is added to use whole by settle */
    if (h->reserved)
        force_use(h->dev, extra);
    h->n += extra;
}

void shim_mem_charge(int dev, uint64_t n, int kind, int space, uint64_t key, uint64_t ctx)
{
    if (!accounted(dev))
        return;
    total_of(dev);
    if (kind != POS_MEM_IPC)
        force_use(dev, n);
    pos_mem_commit(&account[dev], (enum pos_mem_kind)kind, n);
    if (record(dev, n, kind, space, key, ctx) < 0)
        pos_mem_release(&account[dev], (enum pos_mem_kind)kind, n);
    publish_device(dev);
}

static void release_entry(const struct shim_mem_entry *e)
{
    if (e->kind >= POS_MEM_KINDS || !accounted(e->dev) || e->bytes == 0)
        return;
    pos_mem_release(&account[e->dev], (enum pos_mem_kind)e->kind, e->bytes);
    publish_device(e->dev);
}

int shim_mem_take(int space, uint64_t key, struct shim_mem_entry *out)
{
    pthread_mutex_lock(&map_lock);
    struct shim_mem_entry **pp = find(space, key), *e = *pp;
    if (e)
        *pp = e->next;
    pthread_mutex_unlock(&map_lock);
    if (!e)
        return 0;
    *out = *e;
    free(e);
    return 1;
}

void shim_mem_restore(const struct shim_mem_entry *e)
{
    struct shim_mem_entry *back = malloc(sizeof *back);
    if (back) {
        *back = *e;
        insert(back);
    } else {
        release_entry(e); /* forgotten: its free will not be known */
    }
}

CUresult shim_mem_untake(CUresult rc, const struct shim_mem_entry *e)
{
    if (rc == CUDA_SUCCESS)
        release_entry(e);
    else
        shim_mem_restore(e);
    return rc;
}

void shim_mem_note(int space, uint64_t key, uint64_t ref)
{
    struct shim_mem_entry *e = calloc(1, sizeof *e);
    if (!e)
        return;
    e->key = key;
    e->ref = ref;
    e->dev = -1;
    e->space = (uint8_t)space;
    e->kind = POS_MEM_KINDS; /* no charge */
    insert(e);
}

int shim_mem_lookup(int space, uint64_t key, struct shim_mem_entry *out)
{
    pthread_mutex_lock(&map_lock);
    struct shim_mem_entry *e = *find(space, key);
    if (e)
        *out = *e;
    pthread_mutex_unlock(&map_lock);
    return e != NULL;
}

int shim_mem_adjust(int space, uint64_t key, int drefs, int dmaps)
{
    pthread_mutex_lock(&map_lock);
    struct shim_mem_entry **pp = find(space, key), *e = *pp;
    if (!e) {
        pthread_mutex_unlock(&map_lock);
        return 0;
    }
    e->refs = (uint32_t)((int64_t)e->refs + drefs > 0 ? (int64_t)e->refs + drefs : 0);
    e->maps = (uint32_t)((int64_t)e->maps + dmaps > 0 ? (int64_t)e->maps + dmaps : 0);
    int gone = e->refs == 0 && e->maps == 0;
    if (gone)
        *pp = e->next;
    pthread_mutex_unlock(&map_lock);
    if (gone) {
        release_entry(e);
        free(e);
    }
    return 1;
}

void shim_mem_ctx_gone(uint64_t ctx)
{
    if (!ctx)
        return;
    struct shim_mem_entry *gone = NULL;
    pthread_mutex_lock(&map_lock);
    for (size_t b = 0; b < MAP_BUCKETS; b++)
        for (struct shim_mem_entry **pp = &map[b]; *pp;) {
            struct shim_mem_entry *e = *pp;
            if (e->ctx == ctx) {
                *pp = e->next;
                e->next = gone;
                gone = e;
            } else {
                pp = &e->next;
            }
        }
    pthread_mutex_unlock(&map_lock);
    while (gone) {
        struct shim_mem_entry *e = gone;
        gone = e->next;
        release_entry(e);
        free(e);
    }
}

/* ---- what the driver says ------------------------------------------------------------------ */

int shim_mem_driver_free(int dev, uint64_t *free_bytes)
{
    size_t f = 0, t = 0;
    if (dev < 0 || shim_mem_current_device() != dev || !shim_real_cuMemGetInfo_v2 ||
        shim_real_cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS)
        return -1;
    *free_bytes = f;
    return 0;
}

void shim_mem_info(int dev, uint64_t *free_bytes, uint64_t *total)
{
    if (!accounted(dev))
        return;
    uint64_t limit = shim_mem_limit(dev);
    if (limit == POS_MEM_UNLIMITED)
        return; /* the driver's figures, untouched */
    uint64_t t = limit < *total ? limit : *total;
    uint64_t used = atomic_load_explicit(&account[dev].used, memory_order_acquire);
    uint64_t f = used < t ? t - used : 0;
    *free_bytes = f < *free_bytes ? f : *free_bytes;
    *total = t;
}

/* For the tests: the process's own account of DEV (NULL beyond the last device). */
SHIM_API const struct pos_mem_account *pos_shim_mem_account(int dev)
{
    return accounted(dev) ? &account[dev] : NULL;
}
