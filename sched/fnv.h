/* FNV-1a, 64 bits: the kernel-name keys of the names table (sched/names.c) and the weights
 * file's checksum (sched/weights.c). Pure. */
#ifndef POS_SCHED_FNV_H
#define POS_SCHED_FNV_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t pos_fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#endif
