/* The per-thread record rings: the address space for all of them (reserved at load, backed
 * as threads launch), a ring claimed at a thread's first launch or sync, handed back when the
 * thread exits and freed by the collector once drained; and the pointer to the current posd
 * session that each ring's hazard slot (using) announces (shim_session_enter). */
#include "shim/shim.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct shim_thread *shim_threads;
__thread struct shim_thread *shim_self_tls __attribute__((tls_model("initial-exec")));
_Atomic(struct shim_session *) shim_session;
_Atomic uint64_t shim_unrecorded;

static pthread_key_t thread_key;
static void (*attached)(void); /* shim_threads_start's ATTACHED */


/* The key's destructor, at thread exit: hands the ring to the collector, which drains what is
 * left and frees it (shim_thread_reclaim). Every record and counter the thread wrote was
 * published before this release store. Another library's thread-exit destructor may still
 * launch after this one ran: with the TLS pointer cleared, that launch attaches afresh (and
 * setting the key again brings this destructor back for the new ring). */
static void thread_exit(void *arg)
{
    struct shim_thread *t = arg;
    shim_self_tls = NULL;
    atomic_store_explicit(&t->state, SHIM_RING_EXITED, memory_order_release);
}

struct shim_thread *shim_thread_attach(void)
{
    if (!shim_threads)
        return NULL;
    for (int i = 0; i < SHIM_MAX_THREADS; i++) {
        struct shim_thread *t = &shim_threads[i];
        int expected = SHIM_RING_FREE;
        if (atomic_load_explicit(&t->state, memory_order_relaxed) != SHIM_RING_FREE ||
            !atomic_compare_exchange_strong(&t->state, &expected, SHIM_RING_OWNED))
            continue;
        t->tid = (uint32_t)gettid();
        t->until_marker = shim_cfg.sample;
        shim_self_tls = t;
        /* without the key the ring is never handed back: it stays this thread's, still drained */
        if (pthread_setspecific(thread_key, t) != 0 && shim_cfg.debug)
            shim_log("thread %u: its ring will not be reused after it exits", t->tid);
        attached(); /* the collector's: a new ring to drain */
        return t;
    }
    return NULL;
}

/* Gives the pages of T's record and sync slots back to the kernel; they read as zeros when
 * next touched. Only pages wholly inside them: a page shared with a neighbouring slot may be
 * being written by its thread, and the header (state above all) must never change under an
 * attaching thread's compare-exchange: it is reset by hand. Cheap: one call per exited
 * thread, off the launch path, like the C library's release of a dead thread's stack. */
static void release_pages(struct shim_thread *t)
{
    long psz = sysconf(_SC_PAGESIZE);
    if (psz <= 0)
        return;
    uintptr_t page = (uintptr_t)psz;
    uintptr_t lo = ((uintptr_t)t->ring + page - 1) & ~(page - 1);
    uintptr_t hi = (uintptr_t)(t + 1) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED); /* failing only keeps the memory */
}

void shim_thread_reclaim(struct shim_thread *t)
{
    release_pages(t);
    /* field by field, not memset: attaching threads read state concurrently. The record and
     * sync slots need no clearing: each is written whole before it is published. */
    t->tid = 0;
    t->until_marker = 0;
    atomic_store_explicit(&t->using, NULL, memory_order_relaxed);
    atomic_store_explicit(&t->head, 0, memory_order_relaxed);
    atomic_store_explicit(&t->tail, 0, memory_order_relaxed);
    atomic_store_explicit(&t->sync_head, 0, memory_order_relaxed);
    atomic_store_explicit(&t->sync_tail, 0, memory_order_relaxed);
    _Atomic uint64_t *counters[] = {&t->launches, &t->captured,        &t->failed, &t->dropped,
                                    &t->markers,  &t->marker_failures, &t->syncs,  &t->sync_ns};
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        atomic_store_explicit(counters[i], 0, memory_order_relaxed);
    /* the reset is visible to whoever claims the slot next (its compare-exchange acquires) */
    atomic_store_explicit(&t->state, SHIM_RING_FREE, memory_order_release);
}

int shim_threads_start(void (*on_attach)(void))
{
    attached = on_attach;
    /* rings are address space only until a thread launches */
    void *p = mmap(NULL, SHIM_MAX_THREADS * sizeof(struct shim_thread), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        shim_log("cannot map record rings: %s; observing nothing", strerror(errno));
        return -1;
    }
    shim_threads = p;
    pthread_key_create(&thread_key, thread_exit);
    return 0;
}

void shim_threads_forked(void)
{
    pthread_setspecific(thread_key, NULL);
    for (int i = 0; i < SHIM_MAX_THREADS; i++)
        if (atomic_load_explicit(&shim_threads[i].state, memory_order_relaxed) != 0)
            shim_thread_reclaim(&shim_threads[i]);
    atomic_store(&shim_unrecorded, 0);
}
