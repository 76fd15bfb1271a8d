/* Kernel identity: kernel names interned as small ids, and a lock-free map from function
 * handles (CUfunction, CUkernel) to ids for the launch path. Inserts happen where names are
 * learnt (cuModuleGetFunction, cuLibraryGetKernel, cuKernelGetFunction, the collector asking
 * cuFuncGetName) under a mutex; lookups take no lock. */
#include "shim/shim.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAP_SIZE  (1u << 16) /* handles; open addressing */
#define MAX_NAMES (1u << 15)

struct map_slot {
    _Atomic uint64_t key; /* handle value, 0 = empty */
    _Atomic uint32_t id;
};

static struct map_slot map[MAP_SIZE];
static char *names[MAX_NAMES]; /* names[id], id >= 1 */
static _Atomic uint32_t nnames;
static pthread_mutex_t ident_lock = PTHREAD_MUTEX_INITIALIZER;

static inline uint32_t hash_handle(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (uint32_t)h & (MAP_SIZE - 1);
}

uint32_t shim_ident_lookup(uint64_t handle)
{
    if (!handle)
        return 0;
    for (uint32_t i = hash_handle(handle), n = 0; n < MAP_SIZE; i = (i + 1) & (MAP_SIZE - 1), n++) {
        uint64_t k = atomic_load_explicit(&map[i].key, memory_order_acquire);
        if (k == handle)
            return atomic_load_explicit(&map[i].id, memory_order_relaxed);
        if (k == 0)
            return 0;
    }
    return 0;
}

/* Id of NAME, interning it (caller holds ident_lock). 0 when the table is full. */
static uint32_t intern(const char *name)
{
    uint32_t n = atomic_load(&nnames);
    for (uint32_t id = 1; id <= n; id++)
        if (strcmp(names[id], name) == 0)
            return id;
    if (n + 1 >= MAX_NAMES)
        return 0;
    char *copy = strdup(name);
    if (!copy)
        return 0;
    names[n + 1] = copy;
    atomic_store_explicit(&nnames, n + 1, memory_order_release);
    return n + 1;
}

uint32_t shim_ident_register(uint64_t handle, const char *name)
{
    if (!handle || !name)
        return 0;
    pthread_mutex_lock(&ident_lock);
    uint32_t id = intern(name);
    for (uint32_t i = hash_handle(handle), n = 0; id && n < MAP_SIZE;
         i = (i + 1) & (MAP_SIZE - 1), n++) {
        uint64_t k = atomic_load_explicit(&map[i].key, memory_order_relaxed);
        if (k == handle || k == 0) {
            /* the id is in place before the key makes the slot visible */
            atomic_store_explicit(&map[i].id, id, memory_order_relaxed);
            atomic_store_explicit(&map[i].key, handle, memory_order_release);
            break;
        }
    }
    pthread_mutex_unlock(&ident_lock);
    return id;
}

const char *shim_ident_name(uint32_t id)
{
    if (id == 0 || id > atomic_load_explicit(&nnames, memory_order_acquire))
        return "?";
    return names[id];
}

uint32_t shim_ident_count(void)
{
    return atomic_load_explicit(&nnames, memory_order_acquire);
}
