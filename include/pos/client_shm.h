/* The shared memory between posd and one client (created by posd, a memfd passed at
 * registration): the client's submission ring of operators, its completion channel, its grant
 * state and its counters. The client writes the rings' tails and its counters; posd writes the
 * heads and the grant state. posd reads every client-written value once into a local copy and
 * bounds every index it derives: a client can hurt only itself. */
#ifndef POS_CLIENT_SHM_H
#define POS_CLIENT_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "pos/proto.h"
#include "pos/rules.h"

#define POS_SHM_MAGIC   UINT64_C(0x31304d4853534f50) /* "POSSHM01" */
#define POS_SHM_VERSION 4
#define POS_SUB_RING    8192 /* submissions in flight between a client and posd */
#define POS_DONE_RING   8192 /* completions likewise */
#define POS_SYNC_RING   1024 /* synchronisations reported by launching threads */

/* posd's view of itself, as the client sees it. */
enum pos_posd_state {
    POS_POSD_ALIVE = 0,
    POS_POSD_GONE, /* posd left (or the client saw it go): launch freely, re-attach later */
};

/* submission flags */
#define POS_SUBF_FREE 0x1 /* launched without waiting (FREE mode): count it as granted */
#define POS_SUBF_PTSZ 0x2

struct pos_submission {
    _Atomic uint64_t stamp; /* = seq once the slot is written: publishes it */
    uint64_t seq;
    uint32_t kernel_id; /* 0 if the shim does not know it yet */
    uint16_t kind;      /* enum pos_op_kind */
    uint16_t flags;     /* POS_SUBF_* */
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t smem;
    uint32_t tid; /* launching thread (kernel thread id) */
    uint64_t stream;
    uint64_t ctx; /* current context at launch */
    uint64_t submit_ns;
};

struct pos_completion_rec {
    _Atomic uint64_t stamp; /* = index + 1 once written */
    uint64_t seq;
    uint64_t complete_ns; /* CLOCK_MONOTONIC (the device's end, for POS_DONE_DEVICE); 0 when
                           * the launch failed (never ran) */
    uint64_t call_ns;     /* POS_DONE_DEVICE: when the launch called the driver (after any wait
                           * for its grant), 0 if not known */
    uint32_t how;         /* enum pos_completion */
    int32_t result;       /* CUresult of the launch */
};

/* A synchronisation that returned successfully: every operator with seq <= covers on its
 * scope was complete at end_ns. Written by the thread that synchronised, at once, so posd
 * learns of a request's end without waiting for the collector. */
enum pos_sync_scope {
    POS_SYNC_STREAM = 1, /* cuStreamSynchronize, cuStreamQuery, cuEventSynchronize/Query */
    POS_SYNC_CTX,        /* cuCtxSynchronize */
};

struct pos_sync_rec {
    _Atomic uint64_t stamp; /* = index + 1 once written */
    uint32_t scope;         /* enum pos_sync_scope */
    uint32_t tid;
    uint32_t ptsz;
    uint32_t reserved;
    uint64_t stream, ctx;
    uint64_t covers;
    uint64_t end_ns; /* CLOCK_MONOTONIC when the call returned */
};

#define POS_CACHELINE 64

/* ---- the memory ledger (docs/memory.md) ---------------------------------------------------
 * posd owns each client's limit and writes it here; the shim reserves against it before every
 * device allocation, commits or rolls back after the driver's answer, and releases at the
 * free. A client's account can lower only its own allowance: posd never sums one client's
 * account into another's limit. */
#define POS_MEM_MAX_DEVICES 16
#define POS_MEM_UNLIMITED   UINT64_MAX
#define POS_MEM_PPM_WHOLE   1000000u /* mem_limit_ppm of the whole device */


/* One client's account on one device (the client writes, posd only reads). */
struct pos_mem_account {
    _Alignas(POS_CACHELINE) _Atomic uint64_t used; /* reserved + committed, all kinds but IPC:
                                                    * what the limit is checked against */
    _Atomic uint64_t peak;                         /* the most `used` has been */
    _Atomic uint64_t refused;                      /* allocations refused for the limit */
    _Atomic uint64_t total;                        /* the device's memory (0: device not used) */
    _Atomic uint64_t bytes[POS_MEM_KINDS];         /* committed, by kind */
};

/* The limit on one device of TOTAL bytes: min(the posd-written limit, TOTAL). */
static inline uint64_t pos_mem_limit_of(uint64_t limit, uint32_t ppm, uint64_t total)
{
    uint64_t l = limit;
    if (ppm)
        l = ppm >= POS_MEM_PPM_WHOLE ? total
                                     : (uint64_t)((unsigned __int128)total * ppm / POS_MEM_PPM_WHOLE);
    return total && l > total ? total : l;
}

/* Reserves N bytes of A under LIMIT: 0, or -1 when used + N would pass it (nothing changed,
 * `refused` counted). Sizes near 2^64 never wrap. */
static inline int pos_mem_reserve(struct pos_mem_account *a, uint64_t n, uint64_t limit)
{
    uint64_t u = atomic_load_explicit(&a->used, memory_order_relaxed);
    do {
        if (n > limit || u > limit - n) {
            atomic_fetch_add_explicit(&a->refused, 1, memory_order_relaxed);
            return -1;
        }
    } while (!atomic_compare_exchange_weak_explicit(&a->used, &u, u + n, memory_order_acq_rel,
                                                    memory_order_relaxed));
    uint64_t p = atomic_load_explicit(&a->peak, memory_order_relaxed);
    while (p < u + n && !atomic_compare_exchange_weak_explicit(&a->peak, &p, u + n,
                                                              memory_order_relaxed,
                                                              memory_order_relaxed))
        ;
    return 0;
}

/* The driver refused a reserved allocation: gives the N bytes back. */
static inline void pos_mem_rollback(struct pos_mem_account *a, uint64_t n)
{
    atomic_fetch_sub_explicit(&a->used, n, memory_order_acq_rel);
}

/* The driver made a reserved allocation of N bytes of KIND. */
static inline void pos_mem_commit(struct pos_mem_account *a, enum pos_mem_kind kind, uint64_t n)
{
    atomic_fetch_add_explicit(&a->bytes[kind], n, memory_order_relaxed);
}

/* N committed bytes of KIND were freed. */
static inline void pos_mem_release(struct pos_mem_account *a, enum pos_mem_kind kind, uint64_t n)
{
    atomic_fetch_sub_explicit(&a->bytes[kind], n, memory_order_relaxed);
    if (kind != POS_MEM_IPC)
        atomic_fetch_sub_explicit(&a->used, n, memory_order_acq_rel);
}

struct pos_client_shm {
    /* header, written by posd before the client maps it */
    uint64_t magic;
    uint32_t version;
    uint32_t size;
    uint32_t client_id;
    uint32_t reserved0;

    /* grant state: posd writes, the client reads (grant_mode: enum pos_grant_mode, pos/rules.h) */
    _Alignas(POS_CACHELINE) _Atomic uint32_t grant_mode;
    _Atomic uint32_t grant_word;   /* futex: bumped at every grant update */
    _Atomic uint64_t granted;      /* highest seq the client may launch in WINDOW mode */
    _Atomic uint32_t window_cap;   /* WINDOW mode: the client may also keep this many operators
                                    * beyond local_done (its own completion prefix) in flight,
                                    * without asking posd; 0 = none */
    _Atomic uint32_t posd_state;   /* enum pos_posd_state; either side may set GONE */
    _Atomic uint64_t heartbeat;    /* bumped by posd at every decision it makes */
    _Atomic uint32_t sample;       /* completion marker every SAMPLE launches, as posd wants it */
    _Atomic uint32_t kick_on_done; /* posd wants a kick when the collector reports completions
                                    * and at the first launch of a request (sync reports
                                    * always kick) */

    /* memory limit: posd writes, the shim reads at every allocation. The limit on a device is
     * pos_mem_limit_of(mem_limit, mem_limit_ppm, its memory); mem_word is bumped after each
     * change (posctl set --mem-limit, a reload) */
    _Alignas(POS_CACHELINE) _Atomic uint64_t mem_limit; /* bytes; POS_MEM_UNLIMITED: none */
    _Atomic uint32_t mem_limit_ppm; /* non-zero: the limit is this share of each device's memory,
                                     * in millionths, and mem_limit is ignored */
    _Atomic uint32_t mem_word;

    /* memory accounts: the client writes, by device ordinal (devices beyond the last are not
     * accounted) */
    struct pos_mem_account mem[POS_MEM_MAX_DEVICES];

    /* client writes */
    _Alignas(POS_CACHELINE) _Atomic uint64_t next_seq; /* last seq handed out */
    _Atomic uint64_t local_done; /* every seq <= this completed, as the shim's collector knows */
    _Atomic uint32_t waiters;    /* threads waiting for a grant */
    _Atomic uint64_t launches, waits, sync_ns, syncs;
    _Atomic uint64_t wait_hist[POS_WAIT_BUCKETS];

    /* submission ring: the client reserves by next_seq and publishes by stamp; posd consumes */
    /* posd: the last seq it has read (pos_sub_ring_consume); it reads sub_head + 1 next, and
     * the slots of every seq up to sub_head + POS_SUB_RING are free (pos_sub_ring_room) */
    _Alignas(POS_CACHELINE) _Atomic uint64_t sub_head;
    struct pos_submission sub[POS_SUB_RING];

    /* synchronisation reports: any launching thread reserves by sync_next, publishes by
     * stamp; posd consumes (a full ring drops the report: it is only news) */
    _Alignas(POS_CACHELINE) _Atomic uint64_t sync_next;
    _Alignas(POS_CACHELINE) _Atomic uint64_t sync_head;
    _Atomic uint64_t sync_dropped;
    struct pos_sync_rec sync_ring[POS_SYNC_RING];

    /* completion channel: one producer (the shim's collector), posd consumes */
    _Alignas(POS_CACHELINE) _Atomic uint64_t done_tail;
    _Alignas(POS_CACHELINE) _Atomic uint64_t done_head;
    struct pos_completion_rec done[POS_DONE_RING];
};

/* Each ring below is a producer/consumer pair of accessors: the client produces, posd consumes.
 * posd's side reads each record once into a local copy and bounds every index it derives. */

/* ---- the submission ring: the client's launching threads produce, posd consumes ---------- */

/* Reserves the next seq for one launch (any thread of the client). */
static inline uint64_t pos_sub_ring_reserve(struct pos_client_shm *shm)
{
    return atomic_fetch_add_explicit(&shm->next_seq, 1, memory_order_acq_rel) + 1;
}

/* Whether SEQ's slot is free: posd has read the seq a ring before it. The acquire orders posd's
 * read of that slot before the writes this thread makes to it. */
static inline int pos_sub_ring_room(const struct pos_client_shm *shm, uint64_t seq)
{
    return seq - atomic_load_explicit(&shm->sub_head, memory_order_acquire) <= POS_SUB_RING;
}

/* Whether posd is half a ring behind SEQ: a kick now saves the launching threads a wait for
 * room. Only a hint, so relaxed. */
static inline int pos_sub_ring_half_behind(const struct pos_client_shm *shm, uint64_t seq)
{
    return seq - atomic_load_explicit(&shm->sub_head, memory_order_relaxed) == POS_SUB_RING / 2;
}

static inline struct pos_submission *pos_sub_ring_slot(struct pos_client_shm *shm, uint64_t seq)
{
    return &shm->sub[seq % POS_SUB_RING];
}

/* Publishes SLOT, written, as SEQ's: the release makes every field visible before the stamp
 * posd reads with acquire (pos_sub_ring_stamp). */
static inline void pos_sub_ring_publish(struct pos_submission *slot, uint64_t seq)
{
    atomic_store_explicit(&slot->stamp, seq, memory_order_release);
}

/* posd: the last seq the client handed out (its threads may still be writing the slots). */
static inline uint64_t pos_sub_ring_tail(const struct pos_client_shm *shm)
{
    return atomic_load_explicit(&shm->next_seq, memory_order_acquire);
}

/* posd: the stamp of SEQ's slot, SEQ once it is published (pairs with pos_sub_ring_publish). */
static inline uint64_t pos_sub_ring_stamp(const struct pos_client_shm *shm, uint64_t seq)
{
    return atomic_load_explicit(&shm->sub[seq % POS_SUB_RING].stamp, memory_order_acquire);
}

/* posd has read every seq up to HEAD: their slots are free (pairs with pos_sub_ring_room). */
static inline void pos_sub_ring_consume(struct pos_client_shm *shm, uint64_t head)
{
    atomic_store_explicit(&shm->sub_head, head, memory_order_release);
}

/* ---- the synchronisation ring: any launching thread produces, posd consumes -------------- */

/* Reports R (all but its stamp). Returns 0, or -1 when the ring is full: the report is lost (it
 * is only news) and counted; its slot is never written, and posd skips it after a while. */
static inline int pos_sync_ring_push(struct pos_client_shm *shm, const struct pos_sync_rec *r)
{
    uint64_t idx = atomic_fetch_add_explicit(&shm->sync_next, 1, memory_order_acq_rel);
    if (idx - atomic_load_explicit(&shm->sync_head, memory_order_acquire) >= POS_SYNC_RING) {
        atomic_fetch_add_explicit(&shm->sync_dropped, 1, memory_order_relaxed);
        return -1;
    }
    struct pos_sync_rec *w = &shm->sync_ring[idx % POS_SYNC_RING];
    w->scope = r->scope;
    w->tid = r->tid;
    w->ptsz = r->ptsz;
    w->stream = r->stream;
    w->ctx = r->ctx;
    w->covers = r->covers;
    w->end_ns = r->end_ns;
    /* the record is complete before posd may read it */
    atomic_store_explicit(&w->stamp, idx + 1, memory_order_release);
    return 0;
}

/* posd: how many reports were reserved (some may still be being written). */
static inline uint64_t pos_sync_ring_tail(const struct pos_client_shm *shm)
{
    return atomic_load_explicit(&shm->sync_next, memory_order_acquire);
}

/* posd: report IDX once it is written; NULL while it is being written, or was dropped. */
static inline const struct pos_sync_rec *pos_sync_ring_peek(const struct pos_client_shm *shm,
                                                            uint64_t idx)
{
    const struct pos_sync_rec *r = &shm->sync_ring[idx % POS_SYNC_RING];
    return atomic_load_explicit(&r->stamp, memory_order_acquire) == idx + 1 ? r : NULL;
}

/* posd has read the reports before HEAD: their slots are free. */
static inline void pos_sync_ring_consume(struct pos_client_shm *shm, uint64_t head)
{
    atomic_store_explicit(&shm->sync_head, head, memory_order_release);
}

/* ---- the completion ring: the client's collector produces, posd consumes ----------------- */

/* Reports SEQ complete at COMPLETE_NS, learnt as HOW (enum pos_completion), with the launch's
 * call to the driver at CALL_NS (0: not known) and its RESULT. One producer. Returns 0, or -1
 * when the ring is full: posd is behind, try again. */
static inline int pos_done_ring_push(struct pos_client_shm *shm, uint64_t seq, uint64_t complete_ns,
                                     uint64_t call_ns, uint32_t how, int32_t result)
{
    uint64_t tail = atomic_load_explicit(&shm->done_tail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&shm->done_head, memory_order_acquire) >= POS_DONE_RING)
        return -1;
    struct pos_completion_rec *r = &shm->done[tail % POS_DONE_RING];
    r->seq = seq;
    r->complete_ns = complete_ns;
    r->call_ns = call_ns;
    r->how = how;
    r->result = result;
    /* the record is complete before posd may read it, and counted after */
    atomic_store_explicit(&r->stamp, tail + 1, memory_order_release);
    atomic_store_explicit(&shm->done_tail, tail + 1, memory_order_release);
    return 0;
}

/* posd: how many completions were pushed. */
static inline uint64_t pos_done_ring_tail(const struct pos_client_shm *shm)
{
    return atomic_load_explicit(&shm->done_tail, memory_order_acquire);
}

/* posd: completion IDX once it is written, else NULL. */
static inline const struct pos_completion_rec *pos_done_ring_peek(const struct pos_client_shm *shm,
                                                                  uint64_t idx)
{
    const struct pos_completion_rec *r = &shm->done[idx % POS_DONE_RING];
    return atomic_load_explicit(&r->stamp, memory_order_acquire) == idx + 1 ? r : NULL;
}

/* posd has read the completions before HEAD: their slots are free. */
static inline void pos_done_ring_consume(struct pos_client_shm *shm, uint64_t head)
{
    atomic_store_explicit(&shm->done_head, head, memory_order_release);
}

/* ---- the grant state: posd writes, the client reads ----------------------------------------- */

/* posd writes what pos_publish says changed (WHAT) of PUB. The grant and the window cap go
 * before the mode, so that a thread that sees WINDOW sees them; then the futex word, which
 * waiting threads sleep on, changes (waking them is posd's: a syscall). */
static inline void pos_shm_publish(struct pos_client_shm *shm, const struct pos_published *pub,
                                   unsigned what)
{
    if (what & POS_PUB_SAMPLE)
        atomic_store_explicit(&shm->sample, pub->sample, memory_order_relaxed);
    if (what & POS_PUB_KICK)
        atomic_store_explicit(&shm->kick_on_done, pub->kick_on_done, memory_order_release);
    if (!(what & POS_PUB_GRANT))
        return;
    atomic_store_explicit(&shm->granted, pub->granted, memory_order_release);
    atomic_store_explicit(&shm->window_cap, pub->window, memory_order_release);
    atomic_store_explicit(&shm->grant_mode, pub->mode, memory_order_release);
    atomic_fetch_add_explicit(&shm->grant_word, 1, memory_order_release);
}

/* The grant as a launching thread reads it, with its collector's completion prefix: the mode
 * first (acquire: posd stored the grant and the window cap before it), the prefix only under a
 * window cap, the only case a rule reads it in. */
static inline struct pos_grant_view pos_shm_grant(const struct pos_client_shm *shm)
{
    struct pos_grant_view g;
    g.mode = atomic_load_explicit(&shm->grant_mode, memory_order_acquire);
    g.granted = atomic_load_explicit(&shm->granted, memory_order_acquire);
    g.window = atomic_load_explicit(&shm->window_cap, memory_order_acquire);
    g.done = g.window ? atomic_load_explicit(&shm->local_done, memory_order_acquire) : 0;
    return g;
}

#endif
