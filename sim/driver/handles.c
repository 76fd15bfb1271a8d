/* Handle tables: CUDA handles are encoded (type, generation, index) values, not pointers, so
 * an unknown, stale or garbage handle is recognised and answered with an error instead of
 * being dereferenced. Lookups take no lock; chunks are never freed. */
#include "sim/driver/drv.h"

#include <stdlib.h>

#define CHUNK_BITS 10
#define CHUNK      (1u << CHUNK_BITS)
#define MAX_CHUNKS 1024 /* 1M handles of each type */
#define INDEX_BITS 24
#define GEN_BITS   20
#define TAG        0x5u /* top bits: tells our handles from small integers and pointers */

struct entry {
    _Atomic(void *) obj;
    _Atomic uint32_t gen;
    uint32_t next_free;
};

struct table {
    pthread_mutex_t lock;
    _Atomic(struct entry *) chunks[MAX_CHUNKS];
    uint32_t used;      /* entries ever handed out */
    uint32_t free_head; /* 1-based; 0 = none */
};

static struct table tables[H_NTYPES];

static void __attribute__((constructor)) tables_init(void)
{
    for (int t = 0; t < H_NTYPES; t++)
        pthread_mutex_init(&tables[t].lock, NULL);
}

static uintptr_t encode(int type, uint32_t gen, uint32_t index)
{
    return ((uintptr_t)TAG << 60) | ((uintptr_t)type << 52) |
           ((uintptr_t)(gen & ((1u << GEN_BITS) - 1)) << 32) | ((uintptr_t)index << 4) | 0x8;
}

static struct entry *entry_at(struct table *t, uint32_t index)
{
    struct entry *c = atomic_load_explicit(&t->chunks[index >> CHUNK_BITS], memory_order_acquire);
    return c ? &c[index & (CHUNK - 1)] : NULL;
}

void *drv_handle_new(int type, void *obj)
{
    struct table *t = &tables[type];
    pthread_mutex_lock(&t->lock);
    uint32_t index;
    if (t->free_head) {
        index = t->free_head - 1;
        t->free_head = entry_at(t, index)->next_free;
    } else {
        index = t->used;
        if ((index >> CHUNK_BITS) >= MAX_CHUNKS || index >= (1u << INDEX_BITS)) {
            pthread_mutex_unlock(&t->lock);
            return NULL;
        }
        if (!atomic_load(&t->chunks[index >> CHUNK_BITS])) {
            struct entry *c = calloc(CHUNK, sizeof *c);
            if (!c) {
                pthread_mutex_unlock(&t->lock);
                return NULL;
            }
            atomic_store_explicit(&t->chunks[index >> CHUNK_BITS], c, memory_order_release);
        }
        t->used++;
    }
    struct entry *e = entry_at(t, index);
    uint32_t gen = atomic_load(&e->gen);
    atomic_store_explicit(&e->obj, obj, memory_order_release);
    pthread_mutex_unlock(&t->lock);
    return (void *)encode(type, gen, index);
}

void *drv_handle_get(int type, const void *handle)
{
    uintptr_t h = (uintptr_t)handle;
    if ((h >> 60) != TAG || ((h >> 52) & 0xff) != (uintptr_t)type || (h & 0xf) != 0x8)
        return NULL;
    uint32_t index = (uint32_t)((h >> 4) & ((1u << 28) - 1));
    uint32_t gen = (uint32_t)((h >> 32) & ((1u << GEN_BITS) - 1));
    struct table *t = &tables[type];
    if ((index >> CHUNK_BITS) >= MAX_CHUNKS)
        return NULL;
    struct entry *e = entry_at(t, index);
    if (!e)
        return NULL;
    void *obj = atomic_load_explicit(&e->obj, memory_order_acquire);
    if (!obj || (atomic_load(&e->gen) & ((1u << GEN_BITS) - 1)) != gen)
        return NULL;
    return obj;
}

void drv_handle_free(int type, const void *handle)
{
    if (!drv_handle_get(type, handle))
        return;
    uintptr_t h = (uintptr_t)handle;
    uint32_t index = (uint32_t)((h >> 4) & ((1u << 28) - 1));
    struct table *t = &tables[type];
    pthread_mutex_lock(&t->lock);
    struct entry *e = entry_at(t, index);
    atomic_store(&e->obj, NULL);
    atomic_fetch_add(&e->gen, 1);
    e->next_free = t->free_head;
    t->free_head = index + 1;
    pthread_mutex_unlock(&t->lock);
}
